//===- CudaBackend.cpp - the CUDA backend of the executor -----------------===//
//
// Device memory of one GPU (cudaMalloc'd tensors and arena), one compute
// stream on which every kernel is queued in program order, and the binding
// of each tsrt kernel to a CUDA kernel (runtime/backends/cuda). Kernels
// that find data-dependent errors (ids, labels out of range) record them in
// a per-instruction DeviceStatus slot, read once per step by finishStep.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Backend.h"

#include "runtime/backends/cuda/CudaRuntime.h"
#include "runtime/executor/Program.h"

#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime.h>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
using llvm::ArrayRef;
using llvm::StringRef;

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

class CudaBackend final : public Backend {
public:
  static llvm::Expected<std::unique_ptr<Backend>> create();
  ~CudaBackend() override {
    if (stream)
      cudaStreamDestroy(stream);
  }

  StringRef name() const override { return "cuda"; }
  bool hostMemory() const override { return false; }

  llvm::Expected<Tensor> allocate(DType dtype,
                                  std::vector<int64_t> shape) override {
    return cuda::emptyDevice(dtype, std::move(shape));
  }
  llvm::Expected<Arena> allocateArena(int64_t bytes) override {
    llvm::Expected<Tensor> t =
        cuda::emptyDevice(DType::I1, {std::max<int64_t>(bytes, 64)});
    if (!t)
      return t.takeError();
    Arena a;
    a.bytes = bytes;
    // cudaMalloc returns 256-byte aligned memory; the Tensor keeps it alive.
    Tensor owner = *t;
    a.memory = std::shared_ptr<void>(owner.raw(), [owner](void *) {});
    return a;
  }
  llvm::Expected<Tensor> upload(const Tensor &host) override {
    return cuda::toDevice(host);
  }
  llvm::Expected<Tensor> download(const Tensor &t) override {
    if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream),
                                    "waiting for the step's kernels"))
      return std::move(e);
    return cuda::toHost(t);
  }
  llvm::Error copy(const Tensor &src, Tensor &dst) override {
    return cuda::copyAsync(dst.raw(), src.raw(), src.bytes(), stream,
                           "copying an updated state tensor");
  }
  llvm::Error bindKernel(StringRef name, mlir::DictionaryAttr attrs,
                         ArrayRef<TensorType> operands,
                         ArrayRef<TensorType> results,
                         Instruction &inst) override;
  llvm::Error supportsCommunication(StringRef what) const override {
    return fail(what + " needs a collective, which the cuda backend does not "
                       "have yet (NCCL); run multi-rank plans with "
                       "--backend cpu");
  }
  llvm::Error finishStep() override;

private:
  cudaStream_t stream = nullptr;
};

} // namespace

namespace tessera::runtime::exec {
llvm::Expected<std::unique_ptr<Backend>> createCudaBackend() {
  return CudaBackend::create();
}
} // namespace tessera::runtime::exec

llvm::Expected<std::unique_ptr<Backend>> CudaBackend::create() {
  if (llvm::Error e = cuda::deviceAvailable())
    return fail("--backend cuda: " + llvm::toString(std::move(e)));
  auto backend = std::make_unique<CudaBackend>();
  if (llvm::Error e = cuda::check(
          cudaStreamCreateWithFlags(&backend->stream, cudaStreamNonBlocking),
          "--backend cuda: creating the compute stream"))
    return std::move(e);
  return backend;
}

llvm::Error CudaBackend::bindKernel(StringRef name, mlir::DictionaryAttr,
                                    ArrayRef<TensorType>, ArrayRef<TensorType>,
                                    Instruction &) {
  return fail("the cuda backend has no kernel \"" + name + "\" yet");
}

llvm::Error CudaBackend::finishStep() {
  return cuda::check(cudaStreamSynchronize(stream),
                     "waiting for the step's kernels");
}

//===- Backend.cpp - the CPU backend and backend selection ----------------===//

#include "runtime/executor/Backend.h"

#include "runtime/executor/Program.h"

#include <cstring>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

Backend::~Backend() = default;
Communication::~Communication() = default;

llvm::Error Backend::bindCollective(const CollectiveSpec &, const TensorType &,
                                    const TensorType &, Instruction &) {
  return llvm::Error::success();
}

llvm::Error Backend::accumulate(Tensor &acc, const Tensor &value) {
  if (acc.isNull()) {
    acc = value.clone();
    return llvm::Error::success();
  }
  float *a = acc.data<float>();
  const float *v = value.data<float>();
  for (int64_t i = 0, n = acc.numel(); i < n; ++i)
    a[i] += v[i];
  return llvm::Error::success();
}

static llvm::Error noCapture(llvm::StringRef backend) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "the " + backend +
          " backend cannot capture steps (--cuda-graph needs "
          "--backend cuda)");
}
llvm::Error Backend::beginCapture() { return noCapture(name()); }
llvm::Error Backend::endCapture() { return noCapture(name()); }
llvm::Error Backend::replayCaptured() { return noCapture(name()); }

namespace {

/// Host memory, the CPU kernels resolveKernel binds, MPI collectives.
class CpuBackend final : public Backend {
public:
  llvm::StringRef name() const override { return "cpu"; }
  bool hostMemory() const override { return true; }
  llvm::Expected<Tensor> allocate(DType dtype,
                                  std::vector<int64_t> shape) override {
    return Tensor::empty(dtype, std::move(shape));
  }
  llvm::Expected<Arena> allocateArena(int64_t bytes) override {
    return Arena::allocate(bytes);
  }
  llvm::Expected<Tensor> upload(const Tensor &host) override { return host; }
  llvm::Expected<Tensor> download(const Tensor &t) override { return t; }
  llvm::Error copy(const Tensor &src, Tensor &dst) override {
    std::memcpy(dst.raw(), src.raw(), src.bytes());
    return llvm::Error::success();
  }
  llvm::Error bindKernel(llvm::StringRef, mlir::DictionaryAttr,
                         llvm::ArrayRef<TensorType>, llvm::ArrayRef<TensorType>,
                         const CompileOptions &, Instruction &) override {
    return llvm::Error::success();
  }
  llvm::Error supportsCommunication(llvm::StringRef) const override {
    return llvm::Error::success();
  }
  llvm::Error finishStep() override { return llvm::Error::success(); }
};

} // namespace

Backend &exec::cpuBackend() {
  static CpuBackend backend;
  return backend;
}

#ifdef TESSERA_HAVE_CUDA
namespace tessera::runtime::exec {
// CudaBackend.cpp.
llvm::Expected<std::unique_ptr<Backend>>
createCudaBackend(const BackendOptions &options);
} // namespace tessera::runtime::exec
bool exec::cudaBackendBuilt() { return true; }
#else
bool exec::cudaBackendBuilt() { return false; }
#endif

llvm::Expected<std::unique_ptr<Backend>>
exec::createBackend(llvm::StringRef name, const BackendOptions &options) {
  if (name == "cpu") {
    if (options.collectives != Transport::Mpi)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--collectives nccl needs --backend cuda (the cpu backend's "
          "collectives are MPI on host memory: only --collectives mpi is "
          "valid with it)");
    return std::make_unique<CpuBackend>();
  }
  if (name == "cuda") {
#ifdef TESSERA_HAVE_CUDA
    return createCudaBackend(options);
#else
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--backend cuda: this tessera-run was built without the CUDA backend "
        "(no nvcc was found when it was configured; see README, "
        "TESSERA_ENABLE_CUDA)");
#endif
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "unknown backend '" + name +
                                     "' (expected cpu or cuda)");
}

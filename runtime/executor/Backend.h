//===- Backend.h - where a program's tensors live and kernels run -*- C++ -*-//
//
// A Backend is the device side of the executor: it allocates the tensors a
// program produces (and its arena), moves tensors between the host and its
// memory, and binds each `tsrt.kernel` to its own kernel. Two exist:
//   - "cpu": host memory; the kernels of runtime/backends/cpu (OpenBLAS);
//     collectives over MPI. Every plan runs on it.
//   - "cuda": device memory of one GPU per rank; cuBLASLt GEMMs and the
//     kernels of runtime/backends/cuda, queued on one compute stream; built
//     when nvcc is found at configure time (TESSERA_HAVE_CUDA). It runs
//     single-rank, non-pipeline plans (multi-rank GPU runs need NCCL
//     collectives, which are not built yet).
//
// Program::compile validates every kernel the same way for all backends
// (shapes, dtypes, attributes: Kernels.cpp) and then asks the backend to
// bind it, so a program a backend cannot run is a load error naming the op,
// never a failure mid-step.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_BACKEND_H
#define TESSERA_RUNTIME_EXECUTOR_BACKEND_H

#include "runtime/Tensor.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

struct Arena;
struct CompileOptions;
struct Instruction;
struct TensorType;

class Backend {
public:
  virtual ~Backend();

  /// "cpu" or "cuda".
  virtual llvm::StringRef name() const = 0;
  /// True when tensors live in host memory (the CPU backend): uploads and
  /// downloads are then the identity.
  virtual bool hostMemory() const = 0;

  /// An uninitialised tensor in this backend's memory. Error: out of memory
  /// (names the bytes).
  virtual llvm::Expected<Tensor> allocate(DType dtype,
                                          std::vector<int64_t> shape) = 0;
  /// The arena of a static memory plan: `bytes` bytes, 64-byte aligned.
  virtual llvm::Expected<Arena> allocateArena(int64_t bytes) = 0;
  /// A copy of host tensor `host` in this backend's memory (the CPU backend
  /// returns `host` itself, sharing its storage).
  virtual llvm::Expected<Tensor> upload(const Tensor &host) = 0;
  /// A host tensor with the values of `t` (the CPU backend returns `t`),
  /// after all work queued before it.
  virtual llvm::Expected<Tensor> download(const Tensor &t) = 0;
  /// Copies `src` into `dst` (same dtype and shape, both in this backend's
  /// memory).
  virtual llvm::Error copy(const Tensor &src, Tensor &dst) = 0;

  /// Binds kernel `name` of instruction `inst`, which Kernels.cpp's
  /// resolveKernel has already validated (and bound to the CPU kernel):
  /// the CPU backend keeps that binding; others replace `inst.fn`. Error:
  /// the backend has no kernel for this name, dtype or attribute (the
  /// caller prefixes the op's location).
  virtual llvm::Error bindKernel(llvm::StringRef name,
                                 mlir::DictionaryAttr attrs,
                                 llvm::ArrayRef<TensorType> operands,
                                 llvm::ArrayRef<TensorType> results,
                                 const CompileOptions &options,
                                 Instruction &inst) = 0;
  /// Error when this backend cannot run a collective, send or receive
  /// (`what` names it); success when it can.
  virtual llvm::Error supportsCommunication(llvm::StringRef what) const = 0;

  /// Copies host tensor `host` into `dst`, a tensor of this backend with
  /// the same dtype and shape (the host buffer may be reused on return).
  virtual llvm::Error copyFromHost(const Tensor &host, Tensor &dst) {
    llvm::Expected<Tensor> t = upload(host);
    if (!t)
      return t.takeError();
    return copy(*t, dst);
  }

  /// Step capture (tessera-run --cuda-graph): whether this backend can
  /// record the work of a step once and replay it (CUDA graphs).
  virtual bool canCaptureSteps() const { return false; }
  /// Starts recording: the work queued until endCapture is recorded, not
  /// run. Errors: capture unsupported, or the device refuses it.
  virtual llvm::Error beginCapture();
  /// Stops recording and keeps what was recorded as the step to replay.
  virtual llvm::Error endCapture();
  /// Queues one replay of the recorded step.
  virtual llvm::Error replayCaptured();

  /// Waits for the work queued so far and reports any data-dependent error
  /// a kernel recorded (an embedding id or a label out of range), naming
  /// the op. The CPU backend's kernels report those as they run: success.
  virtual llvm::Error finishStep() = 0;
};

/// The backend called `name` ("cpu" or "cuda"). Errors: an unknown name;
/// "cuda" in a build without the CUDA backend; "cuda" on a machine without
/// a usable GPU (with the driver's reason).
llvm::Expected<std::unique_ptr<Backend>> createBackend(llvm::StringRef name);

/// The process-wide CPU backend (what a null backend means).
Backend &cpuBackend();

/// True when this build includes the CUDA backend.
bool cudaBackendBuilt();

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_BACKEND_H

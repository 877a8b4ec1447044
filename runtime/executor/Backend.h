//===- Backend.h - where a program's tensors live and kernels run -*- C++ -*-//
//
// A Backend is the device side of the executor: it allocates the tensors a
// program produces (and its arena), moves tensors between the host and its
// memory, and binds each `tsrt.kernel` and each collective to its own
// implementation. Each backend is a library of its own under
// runtime/backends, registered with the executor by name (BackendRegistry.h,
// as IREE's HAL drivers are); the executor includes none of them. Two
// exist:
//   - "cpu" (runtime/backends/cpu, TesseraCpuBackend): host memory; the
//     kernels of runtime/backends/cpu (OpenBLAS); collectives as MPI
//     closures over host tensors (runtime/collectives/mpi). Every plan runs
//     on it.
//   - "cuda" (runtime/backends/cuda, TesseraCudaBackend): device memory of
//     one GPU per rank; cuBLASLt GEMMs and the kernels of
//     runtime/backends/cuda, queued on one compute stream; built when nvcc
//     is found at configure time (TESSERA_HAVE_CUDA). Multi-rank plans
//     communicate through a Communication object (below) with one of two
//     transports (tessera-run --collectives, see Communication.h): NCCL on
//     a separate communication stream, or host staging over MPI.
//
// Program::compile decodes and validates every kernel and collective the
// same way for all backends (shapes, dtypes, attributes: KernelDesc.h) and
// then asks the backend to bind the typed descriptor, through the
// backend's dispatch table indexed by KernelKind, so a program a backend
// cannot run is a load error naming the op, never a failure mid-step.
//
// Communication of a device backend: the Executor `connect`s every MPI
// communicator it makes (the program's grid-axes sub-communicators, in
// program order on every rank; a pipeline's pp communicator goes to
// Communication::connectPointToPoint when the transport has its own
// point-to-point), then sets ExecContext::communication to
// `communication()`. Instructions bound by
// the backend call it; Program::run calls it for tsrt.all_reduce_start /
// tsrt.wait. The CPU backend has none (null): its instructions call MPI
// themselves, with no extra indirection on the CPU path.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_BACKEND_H
#define TESSERA_RUNTIME_EXECUTOR_BACKEND_H

#include "runtime/Tensor.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/executor/Communication.h"
#include "runtime/executor/KernelDesc.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

struct Arena;
struct ExecContext;
struct Instruction;
struct TensorType;

/// What createBackend needs besides the name.
struct BackendOptions {
  /// How collectives move data (tessera-run --collectives). The cpu backend
  /// takes Mpi only.
  Transport collectives = Transport::Mpi;
  /// The job's world communicator: the cuda backend picks this rank's
  /// device from its node-local rank (collective over it) and, under Nccl,
  /// refuses two ranks of one node on one device. Null: device 0, one rank.
  const mpi::Communicator *world = nullptr;
  /// Seconds one NCCL collective may stay unfinished before the NCCL
  /// watchdog aborts the communicators and exits (<= 0: no watchdog); the
  /// MPI watchdog covers MPI calls (tessera-run --collective-timeout-s).
  double collectiveTimeoutS = 300;
};

/// One rank's communication on a device backend (see the file comment).
/// Tensors are the backend's (device) tensors; every call is collective
/// over its communicator, which must have been connected; errors name
/// `where` (the op) and the collective.
class Communication {
public:
  virtual ~Communication();
  virtual Transport transport() const = 0;
  /// Makes `comm` usable (collective over it; Backend::connect).
  virtual llvm::Error connect(const mpi::Communicator &comm) = 0;
  /// End of a step (Backend::finishStep): waits for the communication
  /// queued so far and reports a failed collective (naming this rank and
  /// the collective's sequence number and name).
  virtual llvm::Error finishStep() = 0;
  /// A synchronous collective (tsrt.all_reduce, all_gather,
  /// reduce_scatter, all_to_all; all_slice needs no communication and is
  /// bound by the backend): `out` (preallocated, the result type) receives
  /// the result of `in`, ordered before every kernel queued after the call.
  virtual llvm::Error collective(const CollectiveSpec &spec, const Tensor &in,
                                 Tensor &out, const ExecContext &ctx,
                                 llvm::StringRef where) = 0;
  /// In-place all-reduce of `count` doubles at device pointer `data` (the
  /// vocab-parallel cross-entropy's statistics), ordered like `collective`.
  virtual llvm::Error allReduceF64(double *data, int64_t count,
                                   mpi::ReduceOp op,
                                   const mpi::Communicator &comm,
                                   const ExecContext &ctx,
                                   llvm::StringRef where) = 0;
  /// tsrt.all_reduce_start: starts all-reducing `in` into `out` (same
  /// type) as request `asyncIndex`; returns without waiting. `in` and `out`
  /// are kept alive until waitAllReduce(asyncIndex).
  virtual llvm::Error startAllReduce(const Tensor &in, Tensor &out,
                                     mpi::ReduceOp op,
                                     const mpi::Communicator &comm,
                                     int asyncIndex, const ExecContext &ctx,
                                     llvm::StringRef where) = 0;
  /// tsrt.wait: kernels queued after this call see request `asyncIndex`'s
  /// result.
  virtual llvm::Error waitAllReduce(int asyncIndex, llvm::StringRef where) = 0;

  /// Whether tsrt.send / tsrt.recv go through send/recv below (NCCL);
  /// otherwise Program::run stages them through MPI on host copies.
  virtual bool pointToPoint() const { return false; }
  /// Pipeline plans: prepares point-to-point transfers between neighbouring
  /// stages of the pp communicator `pp` (collective over it).
  virtual llvm::Error connectPointToPoint(const mpi::Communicator &pp) {
    (void)pp;
    return llvm::Error::success();
  }
  /// Sends all of `t` to pp rank `peer` (in the order the peer receives:
  /// NCCL has no tags; the Executor checks the schedule guarantees it).
  /// `t` is kept alive until the transfer completes.
  virtual llvm::Error send(const Tensor &t, int peer, llvm::StringRef where) {
    (void)t, (void)peer;
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   where + ": no device point-to-point");
  }
  /// Receives into the preallocated `t` from pp rank `peer`; kernels
  /// queued after the call see the data.
  virtual llvm::Error recv(Tensor &t, int peer, llvm::StringRef where) {
    (void)t, (void)peer;
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   where + ": no device point-to-point");
  }
};

/// One device-side trace interval of the last traced step (see
/// Backend::traceDevice): the index of its name in the rank's
/// Backend::deviceTraceNames(), the stream (0 compute, 1 communication)
/// and MPI_Wtime-based seconds.
struct DeviceTraceEvent {
  int name = -1;
  int stream = 0;
  double start = 0, end = 0;
};

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

  /// Binds `kernel` (decoded and validated by decodeKernel; dispatch on
  /// kernel.kind) for instruction `inst`: fills `inst.fn` and
  /// `inst.allocateResults`. Error: the backend has no kernel for this
  /// kind, dtype or attribute (the caller prefixes the op's location).
  virtual llvm::Error bindKernel(const KernelDesc &kernel,
                                 Instruction &inst) = 0;
  /// Binds the collective `spec` (checked by checkCollective, dims
  /// normalised) for instruction `inst`, whose operand and result types are
  /// given: fills `inst.fn`. Error: the backend cannot run it (the caller
  /// prefixes the op's location); the default, for a backend without
  /// collectives (whose supportsCommunication refuses them first).
  virtual llvm::Error bindCollective(const CollectiveSpec &spec,
                                     const TensorType &operand,
                                     const TensorType &result,
                                     Instruction &inst);
  /// Error when this backend cannot run a collective, send or receive
  /// (`what` names it) with its transport; success when it can.
  virtual llvm::Error supportsCommunication(llvm::StringRef what) const = 0;
  /// Makes `comm` usable by communication() (collective over `comm`; call
  /// in the same order on every rank). The CPU backend: nothing.
  virtual llvm::Error connect(const mpi::Communicator &comm) {
    (void)comm;
    return llvm::Error::success();
  }
  /// The device communication, or null (the CPU backend).
  virtual Communication *communication() { return nullptr; }
  /// Adds `value` into the pipeline accumulator `acc` (f32, same shape):
  /// the first contribution (null `acc`) is copied (results may share
  /// storage with other values), later ones are added elementwise in f32.
  /// The default works on host memory.
  virtual llvm::Error accumulate(Tensor &acc, const Tensor &value);

  /// --trace: records device timestamps (CUDA events) around every kernel
  /// and collective while `on`, keeping those of the last step only. The
  /// CPU backend records nothing.
  virtual void traceDevice(bool on) { (void)on; }
  /// The last traced step's intervals (after finishStep), and this rank's
  /// names of them, indexed by DeviceTraceEvent::name ("<kernel> op #N
  /// (...) at <location>", "all_reduce_start op #N ...").
  virtual std::vector<DeviceTraceEvent> deviceTrace() const { return {}; }
  virtual std::vector<std::string> deviceTraceNames() const { return {}; }

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

/// The backend called `name` ("cpu" or "cuda"), made by its registered
/// factory (BackendRegistry.h). Errors: an unknown name ("unknown backend
/// 'tpu' (expected cpu or cuda)"); "cuda" in a build without the CUDA
/// backend ("--backend cuda: this tessera-run was built without the CUDA
/// backend ..."); "cuda" on a machine without a usable GPU (with the
/// driver's reason); the cpu backend with the Nccl transport; "cuda" with
/// Nccl in a build without NCCL, or with two ranks of one node on one
/// device (naming both ranks and the device). With `options.world` set and
/// "cuda", collective over it (every rank must call it).
llvm::Expected<std::unique_ptr<Backend>>
createBackend(llvm::StringRef name, const BackendOptions &options = {});

/// The process-wide CPU backend (what a null backend means).
Backend &cpuBackend();

/// Decodes kernel `name` with `attrs` for the given operand and result
/// types (decodeKernel; `inst.commIndex` / `inst.commSize` are its
/// grid_axes) and binds it on `options.backend` (the CPU backend when
/// null): what Program::compile does for one `tsrt.kernel`, for tests and
/// tools that run single kernels. Errors: decodeKernel's, then the
/// backend's.
llvm::Error resolveKernel(llvm::StringRef name, mlir::DictionaryAttr attrs,
                          llvm::ArrayRef<TensorType> operands,
                          llvm::ArrayRef<TensorType> results,
                          const CompileOptions &options, Instruction &inst);

/// True when this build includes the CUDA backend (it is registered).
bool cudaBackendBuilt();

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_BACKEND_H

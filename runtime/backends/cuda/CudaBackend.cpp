//===- CudaBackend.cpp - the "cuda" backend of the executor ---------------===//
//
// Device memory of one GPU, one compute stream on which every kernel is
// queued in program order, and the binding of each tsrt kernel to a CUDA
// kernel of runtime/backends/cuda:
//  - tensors come from the stream-ordered pool (cudaMallocAsync /
//    cudaFreeAsync on the compute stream, the pool keeping what it frees),
//    so a step allocates without synchronising and can be captured;
//  - kernels that need scratch share one device buffer, sized at bind time
//    to the largest need and allocated on first use (kernels run in order
//    on one stream, so one buffer serves them all);
//  - kernels that find data-dependent errors (ids, labels out of range)
//    record them in their own DeviceStatus slot; finishStep reads the slots
//    once per step and names the op of the first one set;
//  - a kernel whose CUDA form does not take a 16-bit operand is run in f32
//    between device conversions (the CPU backend's widening adapter).
//
// Distributed (tessera-run --collectives, docs/CudaBackend.md
// "Distributed"): `create` picks this rank's device (node-local rank mod
// device count) and makes the Communication:
//  - StagedCommunication (mpi): device -> host copy, the mpi:: collective,
//    host -> device copy; pipeline send/recv are staged by Program::run;
//  - NcclCommunication (nccl): NCCL on a communication stream ordered with
//    the compute stream by events (compute -> comm before each collective;
//    comm -> compute at once for synchronous ones, at tsrt.wait for
//    all_reduce_start, whose buffers are held until then), its own
//    scratch, one stream per directed stage pair for pipeline transfers,
//    an NcclWatchdog told of every call and an async-error check of every
//    communicator in finishStep.
// Kernels are bound from their KernelDesc (decoded and validated once by
// exec::decodeKernel: the binders only read typed attributes) through a
// dispatch table indexed by KernelKind, one binder per family; the table's
// kinds are what the registry lists for "cuda". Collectives are bound by
// bindCollective; kernels with grid_axes by the gather and cross-entropy
// binders (vocab-parallel) and bindHostFallback (ring attention: the CPU
// backend's ring kernel on host copies).
// --trace: CUDA event pairs around every kernel (compute stream) and every
// collective (comm streams) of the last step (deviceTrace).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cuda/CudaBackend.h"

#include "runtime/backends/cpu/CpuBackend.h"
#include "runtime/backends/cuda/CudaBlas.h"
#include "runtime/backends/cuda/CudaRuntime.h"
#include "runtime/backends/cuda/ElementwiseKernels.h"
#include "runtime/backends/cuda/FlashAttention.h"
#include "runtime/backends/cuda/NNKernels.h"
#include "runtime/collectives/mpi/NodeLocal.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/Communication.h"
#include "runtime/executor/KernelDesc.h"
#include "runtime/executor/Program.h"
#ifdef TESSERA_HAVE_NCCL
#include "runtime/collectives/nccl/NcclCollectives.h"
#endif

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
using llvm::ArrayRef;
using llvm::StringRef;

namespace {

using In = ArrayRef<const Tensor *>;
using Out = llvm::MutableArrayRef<Tensor>;

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// A launch's cudaError_t as an error naming the kernel.
llvm::Error launched(cudaError_t err, StringRef kernel) {
  return cuda::check(err, "CUDA kernel \"" + kernel + "\"");
}

/// Device scratch bytes of gather_grad (plain or vocab-parallel) for
/// operands `ins` (ids first) and result `outs[0]` (the table's rows).
llvm::Expected<size_t> gatherGradScratch(ArrayRef<TensorType> ins,
                                         ArrayRef<TensorType> outs) {
  size_t bytes = 0;
  if (llvm::Error e =
          launched(cuda::gatherGradScratchBytes(shapeNumel(ins[0].shape),
                                                outs[0].shape[0], &bytes),
                   "gather_grad scratch size"))
    return std::move(e);
  return bytes;
}

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

class CudaBackend final : public Backend {
public:
  static llvm::Expected<std::unique_ptr<Backend>>
  create(const BackendOptions &options);
  ~CudaBackend() override;

  StringRef name() const override { return "cuda"; }
  bool hostMemory() const override { return false; }

  llvm::Expected<Tensor> allocate(DType dtype,
                                  std::vector<int64_t> shape) override;
  llvm::Expected<Arena> allocateArena(int64_t bytes) override;
  llvm::Expected<Tensor> upload(const Tensor &host) override;
  llvm::Expected<Tensor> download(const Tensor &t) override;
  llvm::Error copy(const Tensor &src, Tensor &dst) override {
    return cuda::copyAsync(dst.raw(), src.raw(), src.bytes(), stream(),
                           "copying an updated state tensor");
  }
  llvm::Error bindKernel(const KernelDesc &kernel, Instruction &inst) override;
  llvm::Error bindCollective(const CollectiveSpec &spec,
                             const TensorType &operand,
                             const TensorType &result,
                             Instruction &inst) override;
  llvm::Error supportsCommunication(StringRef what) const override;
  llvm::Error connect(const mpi::Communicator &comm) override;
  Communication *communication() override { return comm.get(); }
  llvm::Error accumulate(Tensor &acc, const Tensor &value) override;
  llvm::Error finishStep() override;

  void traceDevice(bool on) override { tracing = on; }
  std::vector<DeviceTraceEvent> deviceTrace() const override {
    return lastTrace;
  }
  std::vector<std::string> deviceTraceNames() const override {
    return traceNames;
  }
  /// The trace name id of `name` (registered on first use).
  int traceId(const std::string &name);
  /// --trace: records a CUDA event on stream `on` and returns it, or null
  /// when not tracing (or capturing).
  cudaEvent_t traceMark(cudaStream_t on);
  /// --trace: keeps the interval [begin, end] (events of traceMark) of
  /// trace name `id` on stream `which`.
  void traceInterval(int id, int which, cudaEvent_t begin, cudaEvent_t end);

  llvm::Error copyFromHost(const Tensor &host, Tensor &dst) override {
    if (llvm::Error e = cuda::check(
            cudaMemcpyAsync(dst.raw(), host.raw(), host.bytes(),
                            cudaMemcpyHostToDevice, stream()),
            llvm::formatv("copying {0} bytes to the device", host.bytes())))
      return e;
    return cuda::check(cudaStreamSynchronize(stream()),
                       "waiting for an upload");
  }
  bool canCaptureSteps() const override { return true; }
  llvm::Error beginCapture() override {
    if (connected > 0 && comm->transport() == Transport::Mpi)
      return fail("--cuda-graph cannot record host-staged collectives "
                  "(--collectives mpi synchronises the stream); use "
                  "--collectives nccl");
    capturing = true; // no trace events inside a capture
    return cuda::check(
        cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal),
        "--cuda-graph: cudaStreamBeginCapture");
  }
  llvm::Error endCapture() override;
  llvm::Error replayCaptured() override {
    if (!graphExec)
      return fail("--cuda-graph: no step was captured");
    return cuda::check(cudaGraphLaunch(graphExec.get(), stream()),
                       "--cuda-graph: cudaGraphLaunch");
  }

  cudaStream_t stream() const { return streamOwner.get(); }
  /// The CUDA device of this rank.
  int device() const { return deviceIndex; }
  const BackendOptions &options() const { return opts; }

  /// The shared scratch buffer, at least `bytes` bytes (grown on first use;
  /// growing synchronises, which happens only in the first step).
  llvm::Expected<void *> scratch(size_t bytes);
  /// A new DeviceStatus slot for the instruction at `where`; its device
  /// address is statusAt(slot) once the slots are allocated.
  int newStatusSlot(const std::string &where, StringRef kernel) {
    statusWhere.push_back(where + ": kernel \"" + kernel.str() + "\"");
    return static_cast<int>(statusWhere.size()) - 1;
  }
  llvm::Expected<cuda::DeviceStatus *> statusAt(int slot);

  cuda::BlasHandle &blas() { return *blasHandle; }

  /// The closure of an instruction whose kernel is `launch(in, out, status,
  /// scratch)`: `status` is a DeviceStatus slot of its own when
  /// `needsStatus` (else null), `scratch` at least `scratchBytes` of the
  /// shared scratch (null when 0); both are registered now and looked up
  /// when it runs (they are allocated in the first step). A failed launch
  /// becomes an error naming the kernel.
  template <typename Launch>
  KernelFn launchWith(const Instruction &inst, StringRef kernel,
                      bool needsStatus, size_t scratchBytes, Launch launch) {
    int slot = needsStatus ? newStatusSlot(inst.where, kernel) : -1;
    scratchNeed = std::max(scratchNeed, scratchBytes);
    return [this, slot, scratchBytes, name = kernel.str(),
            launch](const ExecContext &ctx, In in, Out out) -> llvm::Error {
      cuda::DeviceStatus *status = nullptr;
      if (slot >= 0) {
        llvm::Expected<cuda::DeviceStatus *> s = statusAt(slot);
        if (!s)
          return s.takeError();
        status = *s;
      }
      void *ws = nullptr;
      if (scratchBytes > 0) {
        llvm::Expected<void *> w = scratch(scratchBytes);
        if (!w)
          return w.takeError();
        ws = *w;
      }
      // Kernels with grid_axes also take the context (communicators).
      if constexpr (std::is_invocable_v<Launch, const ExecContext &, In, Out,
                                        cuda::DeviceStatus *, void *>)
        return launch(ctx, in, out, status, ws);
      else
        return launched(launch(in, out, status, ws), name);
    };
  }

  /// Binds `inst` to a kernel that is `launch(in, out, stream())`, needing
  /// no status or scratch; a failed launch becomes an error naming the
  /// kernel.
  template <typename Launch>
  llvm::Error bindLaunch(const KernelDesc &k, Instruction &inst,
                         Launch launch) {
    inst.fn = [this, launch, kernel = k.name().str()](const ExecContext &,
                                                      In in, Out out) {
      return launched(launch(in, out, stream()), kernel);
    };
    return llvm::Error::success();
  }

  /// A binder: fills `inst.fn` (and `inst.allocateResults`) for one kernel
  /// family from the validated descriptor.
  using BindFn = llvm::Error (CudaBackend::*)(const KernelDesc &,
                                              Instruction &);
  using BindTable = std::array<BindFn, kNumKernelKinds>;
  /// The binder of every kind the cuda backend has, built once; what the
  /// registry lists for "cuda".
  static const BindTable &binders();

private:
  /// The kernel through the dispatch table, on the descriptor's types.
  llvm::Error bindNative(const KernelDesc &k, Instruction &inst);
  /// The f32 kernel between device conversions of the 16-bit operands and
  /// results.
  llvm::Error bindWidened(const KernelDesc &k, Instruction &inst);
  /// Whether the CUDA kernel of `k` takes its (16-bit) dtypes as they are;
  /// otherwise bindKernel widens them to f32 around it.
  static bool takesNative16Bit(const KernelDesc &k);
  /// Ring attention: the CPU kernel (ring over MPI) on host copies.
  llvm::Error bindHostFallback(const KernelDesc &k, Instruction &inst);

  // The binders of the dispatch table. Kernels with grid_axes: vocab-parallel
  // gather, gather_grad, cross_entropy and cross_entropy_grad.
  llvm::Error bindBinary(const KernelDesc &k, Instruction &inst);
  llvm::Error bindUnary(const KernelDesc &k, Instruction &inst);
  llvm::Error bindActivationGrad(const KernelDesc &k, Instruction &inst);
  llvm::Error bindDropout(const KernelDesc &k, Instruction &inst);
  llvm::Error bindFusedElementwise(const KernelDesc &k, Instruction &inst);
  llvm::Error bindEqual(const KernelDesc &k, Instruction &inst);
  llvm::Error bindSelect(const KernelDesc &k, Instruction &inst);
  llvm::Error bindConvert(const KernelDesc &k, Instruction &inst);
  llvm::Error bindReduce(const KernelDesc &k, Instruction &inst);
  llvm::Error bindSumSquares(const KernelDesc &k, Instruction &inst);
  llvm::Error bindMatmul(const KernelDesc &k, Instruction &inst);
  llvm::Error bindReshape(const KernelDesc &k, Instruction &inst);
  llvm::Error bindTranspose(const KernelDesc &k, Instruction &inst);
  llvm::Error bindSlice(const KernelDesc &k, Instruction &inst);
  llvm::Error bindConcat(const KernelDesc &k, Instruction &inst);
  llvm::Error bindBroadcast(const KernelDesc &k, Instruction &inst);
  llvm::Error bindAttention(const KernelDesc &k, Instruction &inst);
  llvm::Error bindGather(const KernelDesc &k, Instruction &inst);
  llvm::Error bindNorm(const KernelDesc &k, Instruction &inst);
  llvm::Error bindFusedNorm(const KernelDesc &k, Instruction &inst);
  llvm::Error bindSoftmax(const KernelDesc &k, Instruction &inst);
  llvm::Error bindCrossEntropy(const KernelDesc &k, Instruction &inst);
  llvm::Error bindSgdUpdate(const KernelDesc &k, Instruction &inst);
  llvm::Error bindAdamwUpdate(const KernelDesc &k, Instruction &inst);
  llvm::Error bindLinear(const KernelDesc &k, Instruction &inst);
  llvm::Error bindBiasActivationGrad(const KernelDesc &k, Instruction &inst);

  llvm::Error bindMultiSgdUpdate(const KernelDesc &k, Instruction &inst);
  llvm::Error bindMultiAdamwUpdate(const KernelDesc &k, Instruction &inst);

  /// Wraps `inst.fn` so that, while tracing, CUDA events bracket it on the
  /// compute stream.
  void traceCompute(StringRef name, Instruction &inst);
  /// Converts the recorded events of the finished step into lastTrace.
  llvm::Error collectTrace();

  BackendOptions opts;
  int deviceIndex = 0;
  std::shared_ptr<CUstream_st> streamOwner;
  /// The communication (nccl or host-staged mpi), made by `create`; null
  /// only for nccl in a build without NCCL (connect then says so).
  std::unique_ptr<Communication> comm;
  int connected = 0; ///< communicators connected
  // --trace.
  bool tracing = false, capturing = false;
  std::vector<std::string> traceNames;
  llvm::StringMap<int> traceIds;
  struct RawInterval {
    int id, which;
    cudaEvent_t begin, end;
  };
  std::vector<RawInterval> rawTrace;
  std::vector<cudaEvent_t> eventPool, eventsUsed;
  cudaEvent_t traceRef = nullptr;
  double traceRefSeconds = 0;
  std::vector<DeviceTraceEvent> lastTrace;
  /// The captured step (--cuda-graph), instantiated.
  std::shared_ptr<CUgraphExec_st> graphExec;
  std::unique_ptr<cuda::BlasHandle> blasHandle;
  Tensor scratchBuffer;
  size_t scratchNeed = 0;
  std::vector<std::string> statusWhere;
  Tensor statusBuffer; ///< statusWhere.size() DeviceStatus records
};

//===----------------------------------------------------------------------===//
// Communication: host staging over MPI (--collectives mpi)
//===----------------------------------------------------------------------===//

/// Every collective as: device -> host copy (which waits for the compute
/// stream), the MPI collective of runtime/collectives/mpi on the host copy,
/// host -> device copy (synchronous). Several ranks may share one GPU. The
/// MPI watchdog covers the MPI calls. Non-blocking all-reduces complete at
/// their start.
class StagedCommunication final : public Communication {
public:
  explicit StagedCommunication(CudaBackend &backend) : backend(backend) {}
  Transport transport() const override { return Transport::Mpi; }
  llvm::Error connect(const mpi::Communicator &) override {
    return llvm::Error::success();
  }
  llvm::Error finishStep() override { return llvm::Error::success(); }

  llvm::Error collective(const CollectiveSpec &spec, const Tensor &in,
                         Tensor &out, const ExecContext &ctx,
                         StringRef) override {
    return staged(spec, in, out, ctx.comms[spec.commIndex], ctx.traffic);
  }
  llvm::Error allReduceF64(double *data, int64_t count, mpi::ReduceOp op,
                           const mpi::Communicator &c, const ExecContext &ctx,
                           StringRef) override {
    std::vector<double> host(static_cast<size_t>(count));
    size_t bytes = host.size() * sizeof(double);
    if (llvm::Error e = cuda::check(cudaMemcpyAsync(host.data(), data, bytes,
                                                    cudaMemcpyDeviceToHost,
                                                    backend.stream()),
                                    "copying statistics to the host"))
      return e;
    if (llvm::Error e = cuda::check(cudaStreamSynchronize(backend.stream()),
                                    "waiting for the statistics"))
      return e;
    if (llvm::Error e =
            mpi::allReduceF64(host.data(), count, op, c, ctx.traffic))
      return e;
    if (llvm::Error e = cuda::check(cudaMemcpyAsync(data, host.data(), bytes,
                                                    cudaMemcpyHostToDevice,
                                                    backend.stream()),
                                    "copying statistics to the device"))
      return e;
    return cuda::check(cudaStreamSynchronize(backend.stream()),
                       "waiting for the statistics' upload");
  }
  llvm::Error startAllReduce(const Tensor &in, Tensor &out, mpi::ReduceOp op,
                             const mpi::Communicator &c, int,
                             const ExecContext &ctx, StringRef) override {
    CollectiveSpec spec{CollectiveOp::AllReduce, -1, c.size(), 0, 0,
                        op == mpi::ReduceOp::Max};
    return staged(spec, in, out, c, ctx.traffic);
  }
  llvm::Error waitAllReduce(int, StringRef) override {
    return llvm::Error::success();
  }

private:
  /// Device -> host, the MPI collective, host -> device (synchronous).
  llvm::Error staged(const CollectiveSpec &spec, const Tensor &in, Tensor &out,
                     const mpi::Communicator &c, mpi::TrafficCounter *traffic) {
    llvm::Expected<Tensor> host = backend.download(in);
    if (!host)
      return host.takeError();
    Tensor hostOut = Tensor::empty(out.dtype(), out.shape());
    if (llvm::Error e = runHostCollective(spec, *host, hostOut, c, traffic))
      return e;
    return backend.copyFromHost(hostOut, out);
  }

  CudaBackend &backend;
};

#ifdef TESSERA_HAVE_NCCL
//===----------------------------------------------------------------------===//
// Communication: NCCL on a communication stream (--collectives nccl)
//===----------------------------------------------------------------------===//

/// NCCL collectives on the backend's communication stream, one
/// NcclCommunicator per connected MPI communicator (a congruent one is
/// shared). Ordering, per collective:
///   compute stream --event--> comm stream: [copy] NCCL call --event-->
///   compute stream (synchronous collectives wait at once; an
///   all_reduce_start's event is waited for at its tsrt.wait).
/// Tensors an all_reduce_start reads or writes are held (InFlightBuffers)
/// until its wait, so the stream-ordered pool cannot reuse their memory
/// for a compute kernel while NCCL uses it. The comm stream has its own
/// scratch (layout transposes of all_gather / reduce_scatter / all_to_all).
/// Every NCCL call is announced to the NcclWatchdog (sequence number and
/// name), which aborts every communicator and exits when one runs past
/// --collective-timeout-s or reports an asynchronous error.
class NcclCommunication final : public Communication {
public:
  static llvm::Expected<std::unique_ptr<NcclCommunication>>
  create(CudaBackend &backend) {
    std::unique_ptr<NcclCommunication> c(new NcclCommunication(backend));
    cudaStream_t s = nullptr;
    if (llvm::Error e = cuda::check(
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
            "--collectives nccl: creating the communication stream"))
      return std::move(e);
    c->commStream = s;
    for (cudaEvent_t *ev : {&c->computeReady, &c->commReady})
      if (llvm::Error e =
              cuda::check(cudaEventCreateWithFlags(ev, cudaEventDisableTiming),
                          "--collectives nccl: creating an event"))
        return std::move(e);
    double timeout = backend.options().collectiveTimeoutS;
    if (timeout > 0)
      c->watchdog = std::make_unique<nccl::NcclWatchdog>(timeout);
    return c;
  }
  ~NcclCommunication() override {
    // Finalize the communicators before the stream goes.
    if (commStream)
      cudaStreamSynchronize(commStream);
    for (Pair &p : pairStreams) {
      if (p.stream) {
        cudaStreamSynchronize(p.stream);
        cudaStreamDestroy(p.stream);
      }
      if (p.ready)
        cudaEventDestroy(p.ready);
    }
    for (PendingSend &p : pendingSends)
      cudaEventDestroy(p.done);
    pendingSends.clear();
    byHandle.clear();
    watchdog.reset();
    owned.clear();
    for (cudaEvent_t ev : asyncDone)
      if (ev)
        cudaEventDestroy(ev);
    for (cudaEvent_t ev : {computeReady, commReady})
      if (ev)
        cudaEventDestroy(ev);
    if (commStream)
      cudaStreamDestroy(commStream);
  }
  Transport transport() const override { return Transport::Nccl; }

  /// One NcclCommunicator for `comm` (collective), or the one of a
  /// congruent communicator connected before (same group, same order: the
  /// decision is the same on every rank of the group).
  llvm::Error connect(const mpi::Communicator &comm) override {
    for (auto &[handle, nc] : byHandle) {
      int result = MPI_UNEQUAL;
      MPI_Comm_compare(handle, comm.handle(), &result);
      if (result == MPI_IDENT || result == MPI_CONGRUENT) {
        byHandle.emplace_back(comm.handle(), nc);
        return llvm::Error::success();
      }
    }
    nccl::NcclCommunicator::Options o;
    o.device = backend.device();
    double timeout = backend.options().collectiveTimeoutS;
    o.pollTimeoutSeconds = timeout > 0 ? timeout : 0;
    o.name = "tessera#" + std::to_string(owned.size());
    llvm::Expected<std::unique_ptr<nccl::NcclCommunicator>> nc =
        nccl::NcclCommunicator::create(comm, o);
    if (!nc)
      return nc.takeError();
    if (watchdog)
      watchdog->watch(**nc);
    byHandle.emplace_back(comm.handle(), nc->get());
    owned.push_back(std::move(*nc));
    return llvm::Error::success();
  }

  llvm::Error collective(const CollectiveSpec &spec, const Tensor &in,
                         Tensor &out, const ExecContext &ctx,
                         StringRef where) override {
    llvm::Expected<nccl::NcclCommunicator *> nc =
        lookup(ctx.comms[spec.commIndex], where);
    if (!nc)
      return nc.takeError();
    int n = (*nc)->size();
    int64_t need = 0;
    switch (spec.op) {
    case CollectiveOp::AllGather:
      need = nccl::allGatherScratchBytes(in.dtype(), in.shape(), spec.dim, n);
      break;
    case CollectiveOp::ReduceScatter:
      need =
          nccl::reduceScatterScratchBytes(in.dtype(), in.shape(), spec.dim, n);
      break;
    case CollectiveOp::AllToAll:
      need = nccl::allToAllScratchBytes(in.dtype(), in.shape(), spec.dim,
                                        spec.dim2, n);
      break;
    default:
      break;
    }
    if (need < 0)
      return fail(where + ": invalid collective arguments");
    llvm::Expected<void *> ws = scratch(need);
    if (!ws)
      return ws.takeError();
    const char *name = spec.op == CollectiveOp::AllReduce   ? "all_reduce"
                       : spec.op == CollectiveOp::AllGather ? "all_gather"
                       : spec.op == CollectiveOp::ReduceScatter
                           ? "reduce_scatter"
                           : "all_to_all";
    Step step = begin(name, where);
    llvm::Error err = llvm::Error::success();
    switch (spec.op) {
    case CollectiveOp::AllReduce:
      err = cuda::copyAsync(out.raw(), in.raw(), in.bytes(), commStream,
                            "all_reduce: copying the operand");
      if (!err)
        err = nccl::allReduce(
            out, spec.max ? mpi::ReduceOp::Max : mpi::ReduceOp::Sum, **nc,
            commStream, ctx.traffic);
      break;
    case CollectiveOp::AllGather:
      err = nccl::allGather(in, spec.dim, **nc, out, *ws, need, commStream,
                            ctx.traffic);
      break;
    case CollectiveOp::ReduceScatter:
      err = nccl::reduceScatter(in, spec.dim, **nc, out, *ws, need, commStream,
                                ctx.traffic);
      break;
    case CollectiveOp::AllToAll:
      err = nccl::allToAll(in, spec.dim, spec.dim2, **nc, out, *ws, need,
                           commStream, ctx.traffic);
      break;
    case CollectiveOp::AllSlice:
      break;
    }
    if (err)
      return fail(describe(step) + ": " + llvm::toString(std::move(err)));
    return endSync(step);
  }

  llvm::Error allReduceF64(double *data, int64_t count, mpi::ReduceOp op,
                           const mpi::Communicator &c, const ExecContext &ctx,
                           StringRef where) override {
    llvm::Expected<nccl::NcclCommunicator *> nc = lookup(c, where);
    if (!nc)
      return nc.takeError();
    Step step = begin("all_reduce_f64", where);
    if (llvm::Error err =
            nccl::allReduceF64(data, count, op, **nc, commStream, ctx.traffic))
      return fail(describe(step) + ": " + llvm::toString(std::move(err)));
    return endSync(step);
  }

  llvm::Error startAllReduce(const Tensor &in, Tensor &out, mpi::ReduceOp op,
                             const mpi::Communicator &c, int asyncIndex,
                             const ExecContext &ctx, StringRef where) override {
    llvm::Expected<nccl::NcclCommunicator *> nc = lookup(c, where);
    if (!nc)
      return nc.takeError();
    if (asyncIndex >= static_cast<int>(asyncDone.size()))
      asyncDone.resize(asyncIndex + 1, nullptr);
    cudaEvent_t &done = asyncDone[asyncIndex];
    if (!done)
      if (llvm::Error e = cuda::check(
              cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
              "all_reduce_start: creating an event"))
        return e;
    Step step = begin("all_reduce_start", where);
    llvm::Error err =
        cuda::copyAsync(out.raw(), in.raw(), in.bytes(), commStream,
                        "all_reduce_start: copying the operand");
    if (!err)
      err = nccl::allReduce(out, op, **nc, commStream, ctx.traffic);
    if (err)
      return fail(describe(step) + ": " + llvm::toString(std::move(err)));
    endTrace(step);
    // Both buffers stay alive until the wait (see the class comment).
    inFlight.hold(asyncIndex, in);
    inFlight.hold(asyncIndex, out);
    return cuda::check(cudaEventRecord(done, commStream),
                       describe(step) + ": recording its completion");
  }

  llvm::Error waitAllReduce(int asyncIndex, StringRef where) override {
    if (asyncIndex < 0 || asyncIndex >= static_cast<int>(asyncDone.size()) ||
        !asyncDone[asyncIndex])
      return fail(where + ": wait for an all_reduce_start that never started");
    if (llvm::Error e = cuda::check(
            cudaStreamWaitEvent(backend.stream(), asyncDone[asyncIndex], 0),
            where + ": waiting for the all-reduce"))
      return e;
    // Freed now, on the compute stream, after the wait just queued.
    inFlight.release(asyncIndex);
    return llvm::Error::success();
  }

  bool pointToPoint() const override { return true; }

  /// One NCCL communicator (over all of `pp`, created in the same order on
  /// every rank) and one stream per directed pair of neighbouring stages
  /// (a -> a ± 1 mod P): each stream then carries the transfers of one
  /// sender to one receiver only, in the order both issue them (checked by
  /// the Executor), so a send waits for nothing but its matching receive,
  /// as an MPI send to a posted receive would.
  llvm::Error connectPointToPoint(const mpi::Communicator &pp) override {
    int stages = pp.size();
    myStage = pp.rank();
    std::set<std::pair<int, int>> pairs;
    for (int a = 0; a < stages; ++a)
      for (int d : {1, -1}) {
        int b = (a + d + stages) % stages;
        if (a != b)
          pairs.insert({a, b});
      }
    for (auto [a, b] : pairs) {
      nccl::NcclCommunicator::Options o;
      o.device = backend.device();
      double timeout = backend.options().collectiveTimeoutS;
      o.pollTimeoutSeconds = timeout > 0 ? timeout : 0;
      o.name = llvm::formatv("tessera-pp{0}->{1}", a, b).str();
      llvm::Expected<std::unique_ptr<nccl::NcclCommunicator>> nc =
          nccl::NcclCommunicator::create(pp, o);
      if (!nc)
        return nc.takeError();
      if (watchdog)
        watchdog->watch(**nc);
      Pair pair{a, b, nc->get(), nullptr, nullptr};
      owned.push_back(std::move(*nc));
      if (a == myStage || b == myStage) {
        if (llvm::Error e = cuda::check(
                cudaStreamCreateWithFlags(&pair.stream, cudaStreamNonBlocking),
                "creating a point-to-point stream"))
          return e;
        if (llvm::Error e = cuda::check(
                cudaEventCreateWithFlags(&pair.ready, cudaEventDisableTiming),
                "creating an event"))
          return e;
      }
      pairStreams.push_back(pair);
    }
    return llvm::Error::success();
  }

  llvm::Error send(const Tensor &t, int peer, StringRef where) override {
    if (peer == myStage) {
      // A chunk sending to a chunk of its own stage (interleaved schedules
      // on one stage): no NCCL (a lone send to self never completes); the
      // receive copies it, in order.
      toSelf.push_back(t);
      return llvm::Error::success();
    }
    Pair *pair = findPair(myStage, peer);
    if (!pair || !pair->stream)
      return fail(where + ": no NCCL channel to pp rank " + llvm::Twine(peer));
    Step step = beginOn(pair->stream, pair->ready, "send", where);
    if (llvm::Error err = nccl::send(t, peer, *pair->comm, pair->stream))
      return fail(describe(step) + ": " + llvm::toString(std::move(err)));
    if (step.traceBegin)
      backend.traceInterval(step.traceId, 1, step.traceBegin,
                            backend.traceMark(pair->stream));
    // Keep `t` until the send completes; free the buffers of finished ones.
    cudaEvent_t done = nullptr;
    if (llvm::Error e =
            cuda::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                        "creating an event"))
      return e;
    cudaEventRecord(done, pair->stream);
    pendingSends.push_back({done, t});
    releaseFinishedSends();
    return llvm::Error::success();
  }

  llvm::Error recv(Tensor &t, int peer, StringRef where) override {
    if (peer == myStage) {
      if (toSelf.empty() || toSelf.front().bytes() != t.bytes())
        return fail(where + ": no matching send to this stage before it");
      Tensor from = std::move(toSelf.front());
      toSelf.pop_front();
      return backend.copy(from, t);
    }
    Pair *pair = findPair(peer, myStage);
    if (!pair || !pair->stream)
      return fail(where + ": no NCCL channel from pp rank " +
                  llvm::Twine(peer));
    // The stream waits for the compute stream (where `t` was allocated).
    Step step = beginOn(pair->stream, pair->ready, "recv", where);
    if (llvm::Error err = nccl::recv(t, peer, *pair->comm, pair->stream))
      return fail(describe(step) + ": " + llvm::toString(std::move(err)));
    if (step.traceBegin)
      backend.traceInterval(step.traceId, 1, step.traceBegin,
                            backend.traceMark(pair->stream));
    if (llvm::Error e = cuda::check(cudaEventRecord(commReady, pair->stream),
                                    describe(step) + ": recording completion"))
      return e;
    return cuda::check(cudaStreamWaitEvent(backend.stream(), commReady, 0),
                       describe(step) + ": ordering the compute stream");
  }

  /// End of a step: both streams drained, every communicator's
  /// asynchronous state checked; on failure every communicator is aborted
  /// and the error names this rank and the last collective.
  llvm::Error finishStep() override {
    llvm::Error err = cuda::check(cudaStreamSynchronize(commStream),
                                  "waiting for the communication stream");
    for (const Pair &pair : pairStreams)
      if (!err && pair.stream)
        err = cuda::check(cudaStreamSynchronize(pair.stream),
                          "waiting for a point-to-point stream");
    if (!err)
      releaseFinishedSends();
    for (const auto &nc : owned)
      if (!err)
        err = nc->checkAsync();
    if (err) {
      for (const auto &nc : owned)
        nc->abort();
      return fail(llvm::formatv("rank {0}: NCCL collective #{1} ({2}) or one "
                                "before it failed; communicators aborted: {3}",
                                mpi::worldRank(), seq, lastName,
                                llvm::toString(std::move(err))));
    }
    if (watchdog)
      watchdog->end();
    inFlight.releaseAll();
    return llvm::Error::success();
  }

  /// Stops the communicators after a failed step (ncclCommAbort).
  void abortAll() {
    for (const auto &nc : owned)
      nc->abort();
  }

private:
  explicit NcclCommunication(CudaBackend &backend) : backend(backend) {}

  struct Step {
    uint64_t seq;
    std::string name;
    int traceId;
    cudaEvent_t traceBegin;
  };
  std::string describe(const Step &s) const {
    return llvm::formatv("NCCL collective #{0} ({1})", s.seq, s.name).str();
  }

  llvm::Expected<nccl::NcclCommunicator *> lookup(const mpi::Communicator &c,
                                                  StringRef where) {
    for (auto &[handle, nc] : byHandle)
      if (handle == c.handle())
        return nc;
    return fail(where + ": its communicator was not connected to NCCL");
  }

  /// Announces the call to the watchdog and orders the comm stream after
  /// the work queued on the compute stream so far.
  Step begin(StringRef op, StringRef where) {
    return beginOn(commStream, computeReady, op, where);
  }
  Step beginOn(cudaStream_t on, cudaEvent_t ready, StringRef op,
               StringRef where) {
    Step s{++seq, (op + " " + where).str(), -1, nullptr};
    lastName = s.name;
    if (watchdog)
      watchdog->begin(s.seq, s.name);
    cudaEventRecord(ready, backend.stream());
    cudaStreamWaitEvent(on, ready, 0);
    s.traceBegin = backend.traceMark(on);
    if (s.traceBegin)
      s.traceId = backend.traceId(op.str() + " " + where.str());
    return s;
  }

  struct Pair {
    int from, to;
    nccl::NcclCommunicator *comm;
    cudaStream_t stream; ///< null unless this rank is `from` or `to`
    cudaEvent_t ready;
  };
  Pair *findPair(int from, int to) {
    for (Pair &p : pairStreams)
      if (p.from == from && p.to == to)
        return &p;
    return nullptr;
  }
  /// Drops the buffers of sends whose completion event has fired.
  void releaseFinishedSends() {
    std::vector<PendingSend> still;
    for (PendingSend &p : pendingSends) {
      if (cudaEventQuery(p.done) == cudaSuccess) {
        cudaEventDestroy(p.done);
        continue;
      }
      cudaGetLastError(); // cudaErrorNotReady is not an error
      still.push_back(std::move(p));
    }
    pendingSends = std::move(still);
  }
  void endTrace(const Step &s) {
    if (s.traceBegin)
      backend.traceInterval(s.traceId, 1, s.traceBegin,
                            backend.traceMark(commStream));
  }
  /// Orders the compute stream after the collective (synchronous form).
  llvm::Error endSync(const Step &s) {
    endTrace(s);
    if (llvm::Error e = cuda::check(cudaEventRecord(commReady, commStream),
                                    describe(s) + ": recording completion"))
      return e;
    return cuda::check(cudaStreamWaitEvent(backend.stream(), commReady, 0),
                       describe(s) + ": ordering the compute stream");
  }

  /// The comm stream's own scratch (never the compute kernels').
  llvm::Expected<void *> scratch(int64_t bytes) {
    if (bytes <= 0)
      return nullptr;
    if (!scratchBuffer.isNull() &&
        static_cast<int64_t>(scratchBuffer.bytes()) >= bytes)
      return scratchBuffer.raw();
    if (llvm::Error e = cuda::check(cudaStreamSynchronize(commStream),
                                    "growing the collectives' scratch"))
      return std::move(e);
    scratchBuffer = Tensor();
    llvm::Expected<Tensor> t = cuda::emptyDevice(DType::I1, {bytes});
    if (!t)
      return t.takeError();
    scratchBuffer = *t;
    return scratchBuffer.raw();
  }

  CudaBackend &backend;
  cudaStream_t commStream = nullptr;
  cudaEvent_t computeReady = nullptr, commReady = nullptr;
  std::vector<cudaEvent_t> asyncDone;
  std::vector<std::pair<MPI_Comm, nccl::NcclCommunicator *>> byHandle;
  std::vector<std::unique_ptr<nccl::NcclCommunicator>> owned;
  std::unique_ptr<nccl::NcclWatchdog> watchdog;
  InFlightBuffers inFlight;
  Tensor scratchBuffer;
  uint64_t seq = 0;
  std::string lastName;
  // Pipeline point-to-point.
  int myStage = 0;
  std::vector<Pair> pairStreams;
  struct PendingSend {
    cudaEvent_t done;
    Tensor data;
  };
  std::vector<PendingSend> pendingSends;
  std::deque<Tensor> toSelf; ///< sends to this stage, not yet received
};
#endif // TESSERA_HAVE_NCCL

} // namespace

llvm::Expected<std::unique_ptr<Backend>>
CudaBackend::create(const BackendOptions &options) {
  // The device: node-local rank modulo the device count. Collective over
  // the world (every rank takes part even without a device, so that all
  // reach the same checks).
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess)
    count = 0;
  cudaGetLastError();
  int device = count > 0 ? 0 : -1;
  std::optional<SharedDevice> shared;
  if (options.world) {
    llvm::Expected<mpi::NodeLocalRank> local =
        mpi::nodeLocalRank(*options.world);
    if (!local)
      return fail("--backend cuda: " + llvm::toString(local.takeError()));
    device = chooseDevice(local->rank, count);
    int localRank = 0;
    std::vector<int> ranks, devices;
    if (llvm::Error e =
            nodeDeviceTable(*options.world, device, localRank, ranks, devices))
      return fail("--backend cuda: " + llvm::toString(std::move(e)));
    shared = findSharedDevice(ranks, devices);
  }
  if (llvm::Error e = cuda::deviceAvailable())
    return fail("--backend cuda: " + llvm::toString(std::move(e)));
  if (options.collectives == Transport::Nccl && shared)
    return fail(sharedDeviceMessage(*shared));
  if (llvm::Error e =
          cuda::check(cudaSetDevice(device), "--backend cuda: cudaSetDevice(" +
                                                 llvm::Twine(device) + ")"))
    return std::move(e);
  auto backend = std::make_unique<CudaBackend>();
  backend->opts = options;
  backend->deviceIndex = device;
  cudaStream_t s = nullptr;
  if (llvm::Error e =
          cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                      "--backend cuda: creating the compute stream"))
    return std::move(e);
  // Tensors keep the stream alive: their deleters free on it.
  backend->streamOwner = std::shared_ptr<CUstream_st>(
      s, [](cudaStream_t st) { cudaStreamDestroy(st); });
  // Keep freed blocks in the stream-ordered pool instead of returning them
  // to the driver at every synchronisation.
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  llvm::Expected<std::unique_ptr<cuda::BlasHandle>> blas =
      cuda::BlasHandle::create();
  if (!blas)
    return fail("--backend cuda: " + llvm::toString(blas.takeError()));
  backend->blasHandle = std::move(*blas);
  if (options.collectives == Transport::Mpi) {
    backend->comm = std::make_unique<StagedCommunication>(*backend);
  } else {
#ifdef TESSERA_HAVE_NCCL
    llvm::Expected<std::unique_ptr<NcclCommunication>> nc =
        NcclCommunication::create(*backend);
    if (!nc)
      return nc.takeError();
    backend->comm = std::move(*nc);
#endif
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  // The communicators first (their finalize needs the device), then the
  // trace events.
  comm.reset();
  if (traceRef)
    cudaEventDestroy(traceRef);
  for (cudaEvent_t ev : eventPool)
    cudaEventDestroy(ev);
  for (cudaEvent_t ev : eventsUsed)
    cudaEventDestroy(ev);
}

llvm::Error CudaBackend::supportsCommunication(StringRef what) const {
  (void)what;
  return llvm::Error::success();
}

llvm::Error CudaBackend::connect(const mpi::Communicator &c) {
  if (!comm)
    // Only a plan that communicates needs NCCL.
    return fail("--backend cuda --collectives nccl: this tessera-run was "
                "built without NCCL (nccl.h or libnccl not found at "
                "configure time), and the plan communicates; use "
                "--collectives mpi");
  if (llvm::Error e = comm->connect(c))
    return fail("--backend cuda --collectives " +
                StringRef(transportName(comm->transport())) + ": " +
                llvm::toString(std::move(e)));
  ++connected;
  return llvm::Error::success();
}

llvm::Error CudaBackend::accumulate(Tensor &acc, const Tensor &value) {
  if (acc.isNull()) {
    llvm::Expected<Tensor> t = allocate(value.dtype(), value.shape());
    if (!t)
      return t.takeError();
    acc = std::move(*t);
    return copy(value, acc);
  }
  return launched(cuda::binary(cuda::BinaryOp::Add, acc, value, acc, stream()),
                  "add (pipeline accumulator)");
}

int CudaBackend::traceId(const std::string &name) {
  auto [it, inserted] =
      traceIds.try_emplace(name, static_cast<int>(traceNames.size()));
  if (inserted)
    traceNames.push_back(name);
  return it->second;
}

cudaEvent_t CudaBackend::traceMark(cudaStream_t on) {
  if (!tracing || capturing)
    return nullptr;
  if (!traceRef) {
    // The step's reference point: host time of an event on the compute
    // stream (synchronises once per traced step).
    if (cudaEventCreate(&traceRef) != cudaSuccess)
      return nullptr;
    cudaEventRecord(traceRef, stream());
    cudaEventSynchronize(traceRef);
    traceRefSeconds = MPI_Wtime();
  }
  cudaEvent_t ev = nullptr;
  if (!eventPool.empty()) {
    ev = eventPool.back();
    eventPool.pop_back();
  } else if (cudaEventCreate(&ev) != cudaSuccess) {
    return nullptr;
  }
  eventsUsed.push_back(ev);
  cudaEventRecord(ev, on);
  return ev;
}

void CudaBackend::traceInterval(int id, int which, cudaEvent_t begin,
                                cudaEvent_t end) {
  if (begin && end)
    rawTrace.push_back({id, which, begin, end});
}

void CudaBackend::traceCompute(StringRef name, Instruction &inst) {
  int id = traceId((name + " " + inst.where).str());
  KernelFn fn = std::move(inst.fn);
  inst.fn = [this, fn, id](const ExecContext &ctx, In in,
                           Out out) -> llvm::Error {
    if (!tracing || capturing)
      return fn(ctx, in, out);
    cudaEvent_t begin = traceMark(stream());
    llvm::Error err = fn(ctx, in, out);
    traceInterval(id, 0, begin, traceMark(stream()));
    return err;
  };
}

llvm::Error CudaBackend::collectTrace() {
  if (!traceRef)
    return llvm::Error::success();
  std::vector<DeviceTraceEvent> events;
  for (const RawInterval &r : rawTrace) {
    float a = 0, b = 0;
    if (cudaEventElapsedTime(&a, traceRef, r.begin) != cudaSuccess ||
        cudaEventElapsedTime(&b, traceRef, r.end) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    events.push_back({r.id, r.which, traceRefSeconds + a * 1e-3,
                      traceRefSeconds + b * 1e-3});
  }
  lastTrace = std::move(events);
  rawTrace.clear();
  eventPool.insert(eventPool.end(), eventsUsed.begin(), eventsUsed.end());
  eventsUsed.clear();
  cudaEventDestroy(traceRef);
  traceRef = nullptr;
  return llvm::Error::success();
}

llvm::Expected<Tensor> CudaBackend::allocate(DType dtype,
                                             std::vector<int64_t> shape) {
  size_t bytes = static_cast<size_t>(shapeNumel(shape)) * dtypeSize(dtype);
  void *ptr = nullptr;
  if (llvm::Error e = cuda::check(
          cudaMallocAsync(&ptr, std::max<size_t>(bytes, 1), stream()),
          llvm::formatv("cudaMallocAsync of {0} bytes", bytes)))
    return std::move(e);
  std::shared_ptr<CUstream_st> keep = streamOwner;
  std::shared_ptr<void> owner(
      ptr, [keep](void *p) { cudaFreeAsync(p, keep.get()); });
  return Tensor::view(ptr, dtype, std::move(shape), std::move(owner));
}

llvm::Expected<Arena> CudaBackend::allocateArena(int64_t bytes) {
  // cudaMalloc: 256-byte aligned, held for the executor's lifetime.
  llvm::Expected<Tensor> t =
      cuda::emptyDevice(DType::I1, {std::max<int64_t>(bytes, 64)});
  if (!t)
    return t.takeError();
  Arena a;
  a.bytes = bytes;
  Tensor owner = *t;
  a.memory = std::shared_ptr<void>(owner.raw(), [owner](void *) {});
  return a;
}

llvm::Expected<Tensor> CudaBackend::upload(const Tensor &host) {
  llvm::Expected<Tensor> dev = allocate(host.dtype(), host.shape());
  if (!dev)
    return dev.takeError();
  // Synchronous with respect to the host buffer: it may be freed right
  // after (pageable memory is staged by the driver before returning).
  if (llvm::Error e = cuda::check(
          cudaMemcpyAsync(dev->raw(), host.raw(), host.bytes(),
                          cudaMemcpyHostToDevice, stream()),
          llvm::formatv("copying {0} bytes to the device", host.bytes())))
    return std::move(e);
  if (llvm::Error e =
          cuda::check(cudaStreamSynchronize(stream()), "waiting for an upload"))
    return std::move(e);
  return dev;
}

llvm::Expected<Tensor> CudaBackend::download(const Tensor &t) {
  Tensor host = Tensor::empty(t.dtype(), t.shape());
  if (llvm::Error e = cuda::check(
          cudaMemcpyAsync(host.raw(), t.raw(), t.bytes(),
                          cudaMemcpyDeviceToHost, stream()),
          llvm::formatv("copying {0} bytes from the device", t.bytes())))
    return std::move(e);
  if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream()),
                                  "waiting for the step's kernels"))
    return std::move(e);
  return host;
}

llvm::Error CudaBackend::endCapture() {
  capturing = false;
  cudaGraph_t graph = nullptr;
  if (llvm::Error e = cuda::check(cudaStreamEndCapture(stream(), &graph),
                                  "--cuda-graph: cudaStreamEndCapture"))
    return e;
  std::unique_ptr<CUgraph_st, cudaError_t (*)(cudaGraph_t)> owned(
      graph, &cudaGraphDestroy);
  cudaGraphExec_t exec = nullptr;
  if (llvm::Error e = cuda::check(
          cudaGraphInstantiate(&exec, graph,
                               cudaGraphInstantiateFlagAutoFreeOnLaunch),
          "--cuda-graph: cudaGraphInstantiate"))
    return e;
  graphExec = std::shared_ptr<CUgraphExec_st>(
      exec, [](cudaGraphExec_t x) { cudaGraphExecDestroy(x); });
  return llvm::Error::success();
}

llvm::Expected<void *> CudaBackend::scratch(size_t bytes) {
  bytes = std::max(bytes, scratchNeed);
  if (!scratchBuffer.isNull() && scratchBuffer.bytes() >= bytes)
    return scratchBuffer.raw();
  if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream()),
                                  "growing the kernels' scratch"))
    return std::move(e);
  scratchBuffer = Tensor();
  llvm::Expected<Tensor> t =
      cuda::emptyDevice(DType::I1, {static_cast<int64_t>(bytes)});
  if (!t)
    return t.takeError();
  scratchBuffer = *t;
  return scratchBuffer.raw();
}

llvm::Expected<cuda::DeviceStatus *> CudaBackend::statusAt(int slot) {
  size_t need = statusWhere.size() * sizeof(cuda::DeviceStatus);
  if (statusBuffer.isNull() || statusBuffer.bytes() < need) {
    llvm::Expected<Tensor> t =
        cuda::emptyDevice(DType::I1, {static_cast<int64_t>(need)});
    if (!t)
      return t.takeError();
    // On the compute stream: the non-blocking stream is not ordered after
    // the legacy default stream that cudaMemset would use.
    if (llvm::Error e =
            cuda::check(cudaMemsetAsync(t->raw(), 0, need, stream()),
                        "zeroing the kernels' status"))
      return std::move(e);
    statusBuffer = *t;
  }
  return static_cast<cuda::DeviceStatus *>(statusBuffer.raw()) + slot;
}

llvm::Error CudaBackend::finishStep() {
  if (comm)
    if (llvm::Error e = comm->finishStep())
      return e;
  if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream()),
                                  "waiting for the step's kernels"))
    return e;
  if (llvm::Error e = collectTrace())
    return e;
  if (statusBuffer.isNull())
    return llvm::Error::success();
  std::vector<cuda::DeviceStatus> status(statusWhere.size());
  size_t bytes = status.size() * sizeof(cuda::DeviceStatus);
  if (llvm::Error e =
          cuda::check(cudaMemcpyAsync(status.data(), statusBuffer.raw(), bytes,
                                      cudaMemcpyDeviceToHost, stream()),
                      "reading the kernels' status"))
    return e;
  if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream()),
                                  "waiting for the step's kernels"))
    return e;
  for (size_t i = 0; i < status.size(); ++i) {
    const cuda::DeviceStatus &s = status[i];
    if (s.code == cuda::DeviceStatus::Ok)
      continue;
    cudaMemsetAsync(statusBuffer.raw(), 0, bytes, stream());
    if (s.code == cuda::DeviceStatus::IdOutOfRange)
      return fail(llvm::formatv("{0}: index {1} at flat position {2} is "
                                "outside [0, {3})",
                                statusWhere[i], s.value, s.index, s.limit));
    return fail(llvm::formatv("{0}: label {1} of row {2} is outside [0, {3})",
                              statusWhere[i], s.value, s.index, s.limit));
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

bool CudaBackend::takesNative16Bit(const KernelDesc &k) {
  ArrayRef<TensorType> ins = k.operands, outs = k.results;
  auto allSame = [&](ArrayRef<TensorType> ts) {
    return llvm::all_of(
        ts, [&](const TensorType &t) { return t.dtype == ts[0].dtype; });
  };
  // Data movement and elementwise kernels take every dtype they are given.
  if (isDataMovement(k.kind))
    return true;
  using K = KernelKind;
  switch (k.kind) {
  case K::Add:
  case K::Sub:
  case K::Mul:
  case K::Div:
  case K::Pow:
  case K::Max:
  case K::Neg:
  case K::Exp:
  case K::Log:
  case K::Sqrt:
  case K::Rsqrt:
  case K::Tanh:
  case K::Erf:
  case K::Relu:
  case K::Gelu:
  case K::Sigmoid:
  case K::Silu:
  case K::GeluGrad:
  case K::ReluGrad:
  case K::SiluGrad:
  case K::Equal:
  case K::ReduceSum:
  case K::ReduceMean:
  case K::ReduceMax:
    return true;
  case K::Matmul:
  case K::LayerNorm:
  case K::LayerNormGrad:
  case K::RmsNorm:
  case K::RmsNormGrad:
  case K::AddLayerNorm:
  case K::AddRmsNorm:
  case K::LayerNormGradAdd:
  case K::RmsNormGradAdd:
  case K::Softmax:
  case K::SoftmaxGrad:
    return allSame(ins) && allSame(outs) && ins[0].dtype == outs[0].dtype;
  case K::Attention:
    return allSame(ins) && outs[0].dtype == ins[0].dtype &&
           outs[1].dtype == DType::F32;
  case K::AttentionGrad:
    // q, k, v, o, do and the gradients in one dtype; lse f32.
    return ins[4].dtype == DType::F32 && ins[0].dtype == ins[1].dtype &&
           ins[0].dtype == ins[2].dtype && ins[0].dtype == ins[3].dtype &&
           ins[0].dtype == ins[5].dtype && allSame(outs) &&
           outs[0].dtype == ins[0].dtype;
  case K::CrossEntropy:
    return true; // logits f32/bf16/f16, loss f32
  case K::CrossEntropyGrad:
    return outs[0].dtype == ins[0].dtype && ins[2].dtype == DType::F32;
  case K::GatherGrad:
    return true; // dy f32/bf16/f16, out f32/bf16/f16
  default:
    return false; // optimizers: f32 only
  }
}

const CudaBackend::BindTable &CudaBackend::binders() {
  static const BindTable table = makeKindTable<BindFn>([](auto set) {
    using K = KernelKind;
    set({K::Add, K::Sub, K::Mul, K::Div, K::Pow, K::Max},
        &CudaBackend::bindBinary);
    set({K::Neg, K::Exp, K::Log, K::Sqrt, K::Rsqrt, K::Tanh, K::Erf, K::Relu,
         K::Gelu, K::Sigmoid, K::Silu},
        &CudaBackend::bindUnary);
    set({K::ReluGrad, K::GeluGrad, K::SiluGrad},
        &CudaBackend::bindActivationGrad);
    set({K::Dropout}, &CudaBackend::bindDropout);
    set({K::FusedElementwise}, &CudaBackend::bindFusedElementwise);
    set({K::Equal}, &CudaBackend::bindEqual);
    set({K::Select}, &CudaBackend::bindSelect);
    set({K::Convert}, &CudaBackend::bindConvert);
    set({K::ReduceSum, K::ReduceMean, K::ReduceMax}, &CudaBackend::bindReduce);
    set({K::SumSquares}, &CudaBackend::bindSumSquares);
    set({K::Matmul}, &CudaBackend::bindMatmul);
    set({K::Reshape}, &CudaBackend::bindReshape);
    set({K::Transpose}, &CudaBackend::bindTranspose);
    set({K::Slice}, &CudaBackend::bindSlice);
    set({K::Concat}, &CudaBackend::bindConcat);
    set({K::Broadcast}, &CudaBackend::bindBroadcast);
    set({K::Attention, K::AttentionGrad}, &CudaBackend::bindAttention);
    set({K::Gather, K::GatherGrad}, &CudaBackend::bindGather);
    set({K::LayerNorm, K::LayerNormGrad, K::RmsNorm, K::RmsNormGrad},
        &CudaBackend::bindNorm);
    set({K::Softmax, K::SoftmaxGrad}, &CudaBackend::bindSoftmax);
    set({K::CrossEntropy, K::CrossEntropyGrad}, &CudaBackend::bindCrossEntropy);
    set({K::SgdUpdate}, &CudaBackend::bindSgdUpdate);
    set({K::AdamwUpdate}, &CudaBackend::bindAdamwUpdate);
    set({K::AddLayerNorm, K::AddRmsNorm, K::LayerNormGradAdd,
         K::RmsNormGradAdd},
        &CudaBackend::bindFusedNorm);
    set({K::Linear}, &CudaBackend::bindLinear);
    set({K::BiasActivationGrad}, &CudaBackend::bindBiasActivationGrad);

    set({K::MultiSgdUpdate}, &CudaBackend::bindMultiSgdUpdate);
    set({K::MultiAdamwUpdate}, &CudaBackend::bindMultiAdamwUpdate);
  });
  return table;
}

llvm::Error CudaBackend::bindKernel(const KernelDesc &k, Instruction &inst) {
  inst.allocateResults = true;
  bool ringAttention = k.hasGridAxes() && (k.kind == KernelKind::Attention ||
                                           k.kind == KernelKind::AttentionGrad);
  llvm::Error err = llvm::Error::success();
  if (ringAttention)
    err = bindHostFallback(k, inst);
  else if (k.hasFloat16() && !takesNative16Bit(k))
    err = bindWidened(k, inst);
  else
    err = bindNative(k, inst);
  if (err)
    return err;
  traceCompute(k.name(), inst);
  return llvm::Error::success();
}

/// Ring attention runs the CPU kernel (the CPU backend's binding, rotating
/// K/V blocks with MPI_Sendrecv_replace over the ring's communicator) on
/// host copies of the operands; the results are copied back. Correct under
/// both transports; slow (no CUDA ring kernel yet).
llvm::Error CudaBackend::bindHostFallback(const KernelDesc &k,
                                          Instruction &inst) {
  if (llvm::Error e = cpu::bindKernel(k, inst))
    return e;
  if (!inst.allocateResults)
    return fail("kernel \"" + k.name() + "\" has no host fallback");
  KernelFn cpuFn = inst.fn;
  inst.fn = [this, cpuFn](const ExecContext &ctx, In in,
                          Out out) -> llvm::Error {
    std::vector<Tensor> hostIn;
    hostIn.reserve(in.size());
    for (const Tensor *t : in) {
      llvm::Expected<Tensor> h = download(*t);
      if (!h)
        return h.takeError();
      hostIn.push_back(std::move(*h));
    }
    std::vector<const Tensor *> inPtrs;
    for (const Tensor &t : hostIn)
      inPtrs.push_back(&t);
    std::vector<Tensor> hostOut;
    for (const Tensor &t : out)
      hostOut.push_back(Tensor::empty(t.dtype(), t.shape()));
    if (llvm::Error e = cpuFn(ctx, inPtrs, hostOut))
      return e;
    for (size_t i = 0; i < out.size(); ++i)
      if (llvm::Error e = copyFromHost(hostOut[i], out[i]))
        return e;
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindCollective(const CollectiveSpec &spec,
                                        const TensorType &operand,
                                        const TensorType &, Instruction &inst) {
  int commIndex = spec.commIndex;
  inst.allocateResults = true;
  const char *name = "all_slice";
  if (spec.op == CollectiveOp::AllSlice) {
    // This rank's block along `dim`: a slice kernel, no communication.
    int64_t dim = spec.dim < 0
                      ? spec.dim + static_cast<int64_t>(operand.shape.size())
                      : spec.dim;
    std::vector<int64_t> shape = operand.shape;
    inst.fn = [this, commIndex, dim, shape](const ExecContext &ctx, In in,
                                            Out out) -> llvm::Error {
      int64_t block = out[0].shape()[dim];
      std::vector<int64_t> starts(shape.size(), 0), limits = shape,
                                                    strides(shape.size(), 1);
      starts[dim] = ctx.comms[commIndex].rank() * block;
      limits[dim] = starts[dim] + block;
      return launched(
          cuda::slice(*in[0], starts, limits, strides, out[0], stream()),
          "all_slice");
    };
    traceCompute(name, inst);
  } else {
    std::string where = inst.where;
    inst.fn = [spec, where](const ExecContext &ctx, In in,
                            Out out) -> llvm::Error {
      if (!ctx.communication)
        return fail("the cuda backend's collectives need its communication "
                    "(none in this context)");
      return ctx.communication->collective(spec, *in[0], out[0], ctx, where);
    };
  }
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindNative(const KernelDesc &k, Instruction &inst) {
  BindFn bind = binders()[kernelIndex(k.kind)];
  if (!bind)
    return fail("the cuda backend has no kernel \"" + k.name() + "\"");
  return (this->*bind)(k, inst);
}

/// The CPU backend's widening adapter, on the device: 16-bit operands are
/// converted to f32 temporaries, the f32 kernel runs, 16-bit results are
/// rounded back (to nearest even).
llvm::Error CudaBackend::bindWidened(const KernelDesc &k, Instruction &inst) {
  WidenedTypes w = widenFloat16(k.operands, k.results);
  std::vector<bool> narrowIn = w.narrowIn, narrowOut = w.narrowOut;
  Instruction inner;
  inner.where = inst.where;
  inner.commIndex = inst.commIndex;
  inner.commSize = inst.commSize;
  if (llvm::Error e = bindNative(withWidenedTypes(k, w), inner))
    return e;
  if (!inner.allocateResults)
    return fail("kernel \"" + k.name() + "\" has no bf16/f16 form");
  KernelFn fn = std::move(inner.fn);
  inst.allocateResults = true;
  std::string kernel = k.name().str();
  inst.fn = [this, fn, narrowIn, narrowOut,
             kernel](const ExecContext &ctx, In in, Out out) -> llvm::Error {
    std::vector<Tensor> wideIn(in.size());
    std::vector<const Tensor *> inPtrs(in.begin(), in.end());
    for (size_t i = 0; i < in.size(); ++i) {
      if (!narrowIn[i])
        continue;
      llvm::Expected<Tensor> t = allocate(DType::F32, in[i]->shape());
      if (!t)
        return t.takeError();
      wideIn[i] = std::move(*t);
      if (llvm::Error e =
              launched(cuda::convert(*in[i], wideIn[i], stream()), kernel))
        return e;
      inPtrs[i] = &wideIn[i];
    }
    std::vector<Tensor> wideOut(out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      if (!narrowOut[i]) {
        wideOut[i] = out[i];
        continue;
      }
      llvm::Expected<Tensor> t = allocate(DType::F32, out[i].shape());
      if (!t)
        return t.takeError();
      wideOut[i] = std::move(*t);
    }
    if (llvm::Error e = fn(ctx, inPtrs, wideOut))
      return e;
    for (size_t i = 0; i < out.size(); ++i)
      if (narrowOut[i])
        if (llvm::Error e =
                launched(cuda::convert(wideOut[i], out[i], stream()), kernel))
          return e;
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

/// The communicator `comm` of `ctx`, or an error.
static llvm::Expected<const mpi::Communicator *> commAt(const ExecContext &ctx,
                                                        int comm) {
  if (comm < 0 || comm >= static_cast<int>(ctx.comms.size()))
    return fail(llvm::formatv("needs communicator #{0} for its grid_axes but "
                              "the executor provides {1}",
                              comm, ctx.comms.size()));
  return &ctx.comms[comm];
}

/// The error of an NN kernel that has no vocab-parallel (grid_axes) form.
static llvm::Error noGridAxesForm(const KernelDesc &k) {
  return fail("the cuda backend has no kernel \"" + k.name() +
              "\" with grid_axes");
}

//===----------------------------------------------------------------------===//
// Binders: elementwise, reductions, matmul, layout
//===----------------------------------------------------------------------===//

llvm::Error CudaBackend::bindBinary(const KernelDesc &k, Instruction &inst) {
  static const std::pair<KernelKind, cuda::BinaryOp> ops[] = {
      {KernelKind::Add, cuda::BinaryOp::Add},
      {KernelKind::Sub, cuda::BinaryOp::Sub},
      {KernelKind::Mul, cuda::BinaryOp::Mul},
      {KernelKind::Div, cuda::BinaryOp::Div},
      {KernelKind::Pow, cuda::BinaryOp::Pow},
      {KernelKind::Max, cuda::BinaryOp::Max}};
  std::optional<cuda::BinaryOp> op = lookupKind(ops, k.kind);
  if (!op)
    return fail("the cuda backend has no kernel \"" + k.name() + "\"");
  return bindLaunch(k, inst, [op = *op](In in, Out out, cudaStream_t s) {
    return cuda::binary(op, *in[0], *in[1], out[0], s);
  });
}

llvm::Error CudaBackend::bindUnary(const KernelDesc &k, Instruction &inst) {
  static const std::pair<KernelKind, cuda::UnaryOp> ops[] = {
      {KernelKind::Neg, cuda::UnaryOp::Neg},
      {KernelKind::Exp, cuda::UnaryOp::Exp},
      {KernelKind::Log, cuda::UnaryOp::Log},
      {KernelKind::Sqrt, cuda::UnaryOp::Sqrt},
      {KernelKind::Rsqrt, cuda::UnaryOp::Rsqrt},
      {KernelKind::Tanh, cuda::UnaryOp::Tanh},
      {KernelKind::Erf, cuda::UnaryOp::Erf},
      {KernelKind::Relu, cuda::UnaryOp::Relu},
      {KernelKind::Sigmoid, cuda::UnaryOp::Sigmoid},
      {KernelKind::Silu, cuda::UnaryOp::Silu}};
  std::optional<cuda::UnaryOp> op = lookupKind(ops, k.kind);
  if (k.kind == KernelKind::Gelu)
    op = k.get<GeluAttrs>().approximate == GeluApproximate::Tanh
             ? cuda::UnaryOp::GeluTanh
             : cuda::UnaryOp::Gelu;
  if (!op)
    return fail("the cuda backend has no kernel \"" + k.name() + "\"");
  return bindLaunch(k, inst, [op = *op](In in, Out out, cudaStream_t s) {
    return cuda::unary(op, *in[0], out[0], s);
  });
}

/// dropout: the layout walk of this rank and the running micro-batch is
/// made on the host per call (a few sub-factors); the step is read on the
/// device.
llvm::Error CudaBackend::bindDropout(const KernelDesc &k, Instruction &inst) {
  const DropoutAttrs &a = k.get<DropoutAttrs>();
  if (a.factors.size() > size_t(cuda::DropoutLaunch::kMaxFactors))
    return fail(llvm::formatv("the cuda dropout kernel takes at most {0} "
                              "layout sub-factors, got {1}",
                              cuda::DropoutLaunch::kMaxFactors,
                              a.factors.size()));
  inst.fn = [this, a, kernel = k.name().str()](const ExecContext &ctx, In in,
                                               Out out) {
    cuda::DropoutLaunch l;
    std::vector<tessera::random::DropoutFactor> f =
        dropoutFactors(a, ctx.coords, ctx.microBatch);
    std::copy(f.begin(), f.end(), l.factors);
    l.numFactors = static_cast<int>(f.size());
    l.seed = a.seed;
    l.opId = a.opId;
    l.threshold = a.threshold;
    l.scale = a.scale;
    return launched(cuda::dropout(*in[0], *in[1], l, out[0], stream()), kernel);
  };
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindActivationGrad(const KernelDesc &k,
                                            Instruction &inst) {
  if (k.kind == KernelKind::SiluGrad)
    return bindLaunch(k, inst, [](In in, Out out, cudaStream_t s) {
      return cuda::siluGrad(*in[0], *in[1], out[0], s);
    });
  bool relu = k.kind == KernelKind::ReluGrad;
  cuda::GeluApproximate approx =
      !relu && k.get<GeluAttrs>().approximate == GeluApproximate::Tanh
          ? cuda::GeluApproximate::Tanh
          : cuda::GeluApproximate::None;
  return bindLaunch(k, inst, [relu, approx](In in, Out out, cudaStream_t s) {
    return relu ? cuda::reluGrad(*in[0], *in[1], out[0], s)
                : cuda::geluGrad(*in[0], *in[1], approx, out[0], s);
  });
}

llvm::Error CudaBackend::bindEqual(const KernelDesc &k, Instruction &inst) {
  return bindLaunch(k, inst, [](In in, Out out, cudaStream_t s) {
    return cuda::equal(*in[0], *in[1], out[0], s);
  });
}

llvm::Error CudaBackend::bindSelect(const KernelDesc &k, Instruction &inst) {
  return bindLaunch(k, inst, [](In in, Out out, cudaStream_t s) {
    return cuda::select(*in[0], *in[1], *in[2], out[0], s);
  });
}

llvm::Error CudaBackend::bindConvert(const KernelDesc &k, Instruction &inst) {
  return bindLaunch(k, inst, [](In in, Out out, cudaStream_t s) {
    return cuda::convert(*in[0], out[0], s);
  });
}

llvm::Error CudaBackend::bindSumSquares(const KernelDesc &k,
                                        Instruction &inst) {
  return bindLaunch(k, inst, [](In in, Out out, cudaStream_t s) {
    return cuda::sumSquares(*in[0], out[0], s);
  });
}

llvm::Error CudaBackend::bindFusedElementwise(const KernelDesc &k,
                                              Instruction &inst) {
  return bindLaunch(
      k, inst,
      [p = k.get<FusedElementwiseAttrs>()](In in, Out out, cudaStream_t s) {
        return cuda::fusedElementwise(p, in.data(), out.data(), s);
      });
}

llvm::Error CudaBackend::bindReduce(const KernelDesc &k, Instruction &inst) {
  const ReduceAttrs &a = k.get<ReduceAttrs>();
  std::vector<int64_t> axes = a.axes;
  bool keep = a.keepDim;
  const TensorType &in0 = k.operands[0];
  int64_t bytes = cuda::reduceScratchBytes(in0.dtype, in0.shape, axes);
  if (bytes < 0)
    return fail("reduction axes not sorted, unique and in range");
  using ReduceFn =
      cudaError_t (*)(const Tensor &, const std::vector<int64_t> &, bool,
                      Tensor &, void *, int64_t, cudaStream_t);
  ReduceFn fn = k.kind == KernelKind::ReduceSum    ? &cuda::reduceSum
                : k.kind == KernelKind::ReduceMean ? &cuda::reduceMean
                                                   : &cuda::reduceMax;
  cudaStream_t s = stream();
  inst.fn = launchWith(inst, k.name(), false, static_cast<size_t>(bytes),
                       [fn, axes, keep, bytes,
                        s](In in, Out out, cuda::DeviceStatus *, void *ws) {
                         return fn(*in[0], axes, keep, out[0], ws, bytes, s);
                       });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindMatmul(const KernelDesc &k, Instruction &inst) {
  const MatmulAttrs &a = k.get<MatmulAttrs>();
  bool ta = a.transposeLhs, tb = a.transposeRhs;
  inst.fn = [this, ta, tb](const ExecContext &, In in, Out out) {
    return cuda::matmul(blas(), *in[0], *in[1], ta, tb, out[0],
                        cuda::MatmulEpilogue::none(), stream());
  };
  return llvm::Error::success();
}

/// The elementwise kernel of a fused linear layer's activation.
static std::optional<cuda::UnaryOp> unaryOfActivation(Activation act) {
  switch (act) {
  case Activation::None:
    return std::nullopt;
  case Activation::Gelu:
    return cuda::UnaryOp::Gelu;
  case Activation::GeluTanh:
    return cuda::UnaryOp::GeluTanh;
  case Activation::Relu:
    return cuda::UnaryOp::Relu;
  case Activation::Silu:
    return cuda::UnaryOp::Silu;
  }
  return std::nullopt;
}

/// linear (lhs, rhs, bias) -> result [, preactivation] through cuBLASLt's
/// epilogues where they apply: one GEMM (out batch 1, or a shared rank-2
/// rhs folded into rows) with K > 0 gets BIAS, or for the tanh GELU
/// GELU_BIAS (no preactivation) or GELU_AUX_BIAS (preactivation as aux;
/// needs N % 8 == 0). cuBLASLt has no erf-GELU or SiLU epilogue: those
/// (and the other cases) take the BIAS epilogue (or a bias kernel after a
/// batched GEMM) followed by the activation kernel.
llvm::Error CudaBackend::bindLinear(const KernelDesc &k, Instruction &inst) {
  const LinearAttrs a = k.get<LinearAttrs>();
  cuda::MatmulGeometry g =
      cuda::planMatmul(k.operands[0].shape, k.operands[1].shape,
                       k.results[0].shape, a.transposeLhs, a.transposeRhs);
  if (!g.error.empty())
    return fail(g.error);
  using E = cuda::MatmulEpilogue::Kind;
  bool single = (g.folded || g.outBatch == 1) && g.k > 0;
  bool tanh = a.activation == Activation::GeluTanh;
  E kind = !single                                   ? E::None
           : tanh && a.preactivation && g.n % 8 == 0 ? E::BiasGeluAux
           : tanh && !a.preactivation                ? E::BiasGelu
                                                     : E::Bias;
  // The activation kernel run after the GEMM when its epilogue did not.
  std::optional<cuda::UnaryOp> after;
  if (kind != E::BiasGeluAux && kind != E::BiasGelu)
    after = unaryOfActivation(a.activation);
  inst.fn = [this, a, kind, after, kernel = k.name().str()](
                const ExecContext &, In in, Out out) -> llvm::Error {
    // The product (+ bias) goes to the preactivation when it is a result.
    Tensor &pre = a.preactivation ? out[1] : out[0];
    cuda::MatmulEpilogue e;
    Tensor *target = &pre;
    switch (kind) {
    case E::BiasGeluAux:
      e = cuda::MatmulEpilogue::biasGeluAux(*in[2], out[1]);
      target = &out[0];
      break;
    case E::BiasGelu:
      e = cuda::MatmulEpilogue::biasGelu(*in[2]);
      target = &out[0];
      break;
    case E::Bias:
      e = cuda::MatmulEpilogue::withBias(*in[2]);
      break;
    default:
      e = cuda::MatmulEpilogue::none();
      break;
    }
    if (llvm::Error err = cuda::matmul(blas(), *in[0], *in[1], a.transposeLhs,
                                       a.transposeRhs, *target, e, stream()))
      return err;
    if (kind == E::None)
      if (llvm::Error err = launched(
              cuda::biasActivation(pre, *in[2], cuda::BiasActivation::None, pre,
                                   stream()),
              kernel))
        return err;
    if (after)
      return launched(cuda::unary(*after, pre, out[0], stream()), kernel);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

/// bias_activation_grad (x, dy) -> (dx, dbias): the activation gradient
/// kernel, then dbias as the deterministic column reduction of dx (f64
/// partials through the shared scratch), as reduce_sum.
llvm::Error CudaBackend::bindBiasActivationGrad(const KernelDesc &k,
                                                Instruction &inst) {
  Activation act = k.get<LinearAttrs>().activation;
  const TensorType &x = k.operands[0];
  int64_t cols = x.shape.back();
  int64_t rows = cols ? shapeNumel(x.shape) / cols : 0;
  int64_t bytes = cuda::reduceScratchBytes(x.dtype, {rows, cols}, {0});
  if (bytes < 0)
    return fail("bias_activation_grad: no column reduction for " + x.str());
  cudaStream_t s = stream();
  inst.fn = launchWith(
      inst, k.name(), false, static_cast<size_t>(bytes),
      [act, rows, cols, bytes, s](In in, Out out, cuda::DeviceStatus *,
                                  void *ws) -> cudaError_t {
        cudaError_t err =
            act == Activation::Relu ? cuda::reluGrad(*in[0], *in[1], out[0], s)
            : act == Activation::Silu
                ? cuda::siluGrad(*in[0], *in[1], out[0], s)
                : cuda::geluGrad(*in[0], *in[1],
                                 act == Activation::GeluTanh
                                     ? cuda::GeluApproximate::Tanh
                                     : cuda::GeluApproximate::None,
                                 out[0], s);
        if (err != cudaSuccess)
          return err;
        Tensor dx = Tensor::view(out[0].raw(), out[0].dtype(), {rows, cols});
        return cuda::reduceSum(dx, {0}, /*keepDim=*/false, out[1], ws, bytes,
                               s);
      });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindReshape(const KernelDesc &k, Instruction &inst) {
  // A view, exactly as on the CPU (no kernel).
  std::vector<int64_t> shape = k.results[0].shape;
  inst.allocateResults = false;
  inst.fn = [shape](const ExecContext &, In in, Out out) {
    out[0] = in[0]->reshape(shape);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindTranspose(const KernelDesc &k, Instruction &inst) {
  std::vector<int64_t> perm = k.get<TransposeAttrs>().permutation;
  return bindLaunch(k, inst, [perm](In in, Out out, cudaStream_t s) {
    return cuda::transpose(*in[0], perm, out[0], s);
  });
}

llvm::Error CudaBackend::bindSlice(const KernelDesc &k, Instruction &inst) {
  const SliceAttrs &a = k.get<SliceAttrs>();
  return bindLaunch(k, inst, [a](In in, Out out, cudaStream_t s) {
    return cuda::slice(*in[0], a.starts, a.limits, a.strides, out[0], s);
  });
}

llvm::Error CudaBackend::bindConcat(const KernelDesc &k, Instruction &inst) {
  int64_t axis = k.get<AxisAttrs>().axis;
  return bindLaunch(k, inst, [axis](In in, Out out, cudaStream_t s) {
    std::vector<const Tensor *> inputs(in.begin(), in.end());
    return cuda::concat(inputs, axis, out[0], s);
  });
}

llvm::Error CudaBackend::bindBroadcast(const KernelDesc &k, Instruction &inst) {
  return bindLaunch(k, inst, [](In in, Out out, cudaStream_t s) {
    return cuda::broadcast(*in[0], out[0], s);
  });
}

//===----------------------------------------------------------------------===//
// Binders: NN ops
//===----------------------------------------------------------------------===//

/// attention (q, k, v [, mask]) -> (o, lse) and attention_grad (q, k, v, o,
/// lse, do [, mask]) -> (dq, dk, dv) through the fused flash attention
/// kernels; the leading dims of q are the batch (B·H), K/V may have fewer
/// heads (grouped-query attention, FlashDims::group). Ring attention
/// (grid_axes) never reaches here: bindKernel runs the CPU ring kernel on
/// host copies (bindHostFallback).
llvm::Error CudaBackend::bindAttention(const KernelDesc &k, Instruction &inst) {
  bool grad = k.kind == KernelKind::AttentionGrad;
  const AttentionAttrs &a = k.get<AttentionAttrs>();
  bool hasMask = a.hasMask;
  cuda::FlashDims d;
  d.batch = a.batch;
  d.sq = a.sq;
  d.dh = a.dh;
  d.sk = a.sk;
  d.dv = a.dv;
  d.group = a.group;
  if (d.dh > 128 || d.dv > 128)
    return fail(llvm::formatv("the cuda attention kernel takes head dims up "
                              "to 128, got Dh = {0}, Dv = {1}",
                              d.dh, d.dv));
  float scale = a.scale;
  bool causal = a.causal;
  DType dtype = k.operands[0].dtype;
  std::string kernel = k.name().str();
  if (!grad) {
    inst.fn = [=](const ExecContext &, In in, Out out) {
      return launched(
          cuda::flashAttentionForward(
              d, dtype, in[0]->raw(), in[1]->raw(), in[2]->raw(),
              hasMask ? static_cast<const float *>(in[3]->raw()) : nullptr,
              scale, causal, out[0].raw(), static_cast<float *>(out[1].raw()),
              stream()),
          kernel);
    };
    return llvm::Error::success();
  }
  cudaStream_t s = stream();
  inst.fn = launchWith(
      inst, k.name(), false,
      static_cast<size_t>(cuda::flashAttentionScratchBytes(d, dtype, true)),
      [=](In in, Out out, cuda::DeviceStatus *, void *ws) {
        return cuda::flashAttentionBackward(
            d, dtype, in[0]->raw(), in[1]->raw(), in[2]->raw(), in[3]->raw(),
            static_cast<const float *>(in[4]->raw()), in[5]->raw(),
            hasMask ? static_cast<const float *>(in[6]->raw()) : nullptr, scale,
            causal, out[0].raw(), out[1].raw(), out[2].raw(), ws, s);
      });
  return llvm::Error::success();
}

/// Megatron-LM's vocab parallelism (Shoeybi et al. 2019) on the device: the
/// lookup and its gradient mask the ids outside this rank's rows (no
/// communication).
llvm::Error CudaBackend::bindGather(const KernelDesc &k, Instruction &inst) {
  using Status = cuda::DeviceStatus *;
  cudaStream_t s = stream();
  bool grad = k.kind == KernelKind::GatherGrad;
  size_t scratchBytes = 0;
  if (grad) {
    llvm::Expected<size_t> bytes = gatherGradScratch(k.operands, k.results);
    if (!bytes)
      return bytes.takeError();
    scratchBytes = *bytes;
  }
  if (int comm = k.commIndex; comm >= 0) {
    inst.fn = launchWith(
        inst, k.name(), true, scratchBytes,
        [s, comm, grad, kernel = k.name().str()](const ExecContext &ctx, In in,
                                                 Out out, Status status,
                                                 void *ws) -> llvm::Error {
          llvm::Expected<const mpi::Communicator *> c = commAt(ctx, comm);
          if (!c)
            return c.takeError();
          // V_local: the rows of the table (gather) or of the gradient.
          int64_t local = grad ? out[0].dim(0) : in[0]->dim(0);
          int64_t offset = (*c)->rank() * local, vocab = (*c)->size() * local;
          return launched(grad ? cuda::gatherGradMasked(*in[0], *in[1], offset,
                                                        vocab, out[0], ws,
                                                        status, s)
                               : cuda::gatherMasked(*in[0], *in[1], offset,
                                                    vocab, out[0], status, s),
                          kernel);
        });
    return llvm::Error::success();
  }
  inst.fn = launchWith(
      inst, k.name(), /*needsStatus=*/true, scratchBytes,
      [s, grad](In in, Out out, Status status, void *ws) {
        return grad ? cuda::gatherGrad(*in[0], *in[1], out[0], ws, status, s)
                    : cuda::gather(*in[0], *in[1], out[0], status, s);
      });
  return llvm::Error::success();
}

/// layer_norm (x, scale, bias) and rms_norm (x, scale), and their grads
/// (x, scale, dy), which reduce over the rows in scratch.
llvm::Error CudaBackend::bindNorm(const KernelDesc &k, Instruction &inst) {
  if (k.hasGridAxes())
    return noGridAxesForm(k);
  cudaStream_t s = stream();
  const NormAttrs &a = k.get<NormAttrs>();
  const std::vector<int64_t> &shape = k.operands[0].shape;
  size_t scratchBytes = !a.grad ? 0
                        : a.rms
                            ? cuda::rmsNormGradScratchBytes(shape, a.axis)
                            : cuda::layerNormGradScratchBytes(shape, a.axis);
  inst.fn = launchWith(
      inst, k.name(), false, scratchBytes,
      [s, a](In in, Out out, cuda::DeviceStatus *, void *ws) {
        if (a.rms)
          return a.grad ? cuda::rmsNormGrad(*in[0], *in[1], *in[2], a.axis,
                                            a.epsilon, out[0], out[1], ws, s)
                        : cuda::rmsNorm(*in[0], *in[1], a.axis, a.epsilon,
                                        out[0], s);
        return a.grad ? cuda::layerNormGrad(*in[0], *in[1], *in[2], a.axis,
                                            a.epsilon, out[0], out[1], out[2],
                                            ws, s)
                      : cuda::layerNorm(*in[0], *in[1], *in[2], a.axis,
                                        a.epsilon, out[0], s);
      });
  return llvm::Error::success();
}

/// add_layer_norm / add_rms_norm (x, r, scale[, bias]) -> (x + r, y) and
/// layer_norm_grad_add / rms_norm_grad_add (x, scale, dy, addend) ->
/// (dx + addend, dscale[, dbias]), the gradients with the norm gradients'
/// scratch.
llvm::Error CudaBackend::bindFusedNorm(const KernelDesc &k, Instruction &inst) {
  if (k.hasGridAxes())
    return noGridAxesForm(k);
  cudaStream_t s = stream();
  const NormAttrs &a = k.get<NormAttrs>();
  const std::vector<int64_t> &shape = k.operands[0].shape;
  size_t scratchBytes = !a.grad ? 0
                        : a.rms
                            ? cuda::rmsNormGradScratchBytes(shape, a.axis)
                            : cuda::layerNormGradScratchBytes(shape, a.axis);
  inst.fn = launchWith(
      inst, k.name(), false, scratchBytes,
      [s, a](In in, Out out, cuda::DeviceStatus *, void *ws) {
        if (a.rms)
          return a.grad ? cuda::rmsNormGradAdd(*in[0], *in[1], *in[2], *in[3],
                                               a.axis, a.epsilon, out[0],
                                               out[1], ws, s)
                        : cuda::addRmsNorm(*in[0], *in[1], *in[2], a.axis,
                                           a.epsilon, out[0], out[1], s);
        return a.grad
                   ? cuda::layerNormGradAdd(*in[0], *in[1], *in[2], *in[3],
                                            a.axis, a.epsilon, out[0], out[1],
                                            out[2], ws, s)
                   : cuda::addLayerNorm(*in[0], *in[1], *in[2], *in[3], a.axis,
                                        a.epsilon, out[0], out[1], s);
      });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindSoftmax(const KernelDesc &k, Instruction &inst) {
  if (k.hasGridAxes())
    return noGridAxesForm(k);
  cudaStream_t s = stream();
  int64_t axis = k.get<AxisAttrs>().axis;
  bool grad = k.kind == KernelKind::SoftmaxGrad;
  inst.fn = launchWith(
      inst, k.name(), false, 0,
      [s, axis, grad](In in, Out out, cuda::DeviceStatus *, void *) {
        return grad ? cuda::softmaxGrad(*in[0], *in[1], axis, out[0], s)
                    : cuda::softmax(*in[0], axis, out[0], s);
      });
  return llvm::Error::success();
}

/// cross_entropy(_grad). With grid_axes, Megatron-LM's vocab-parallel form:
/// the CUDA phases of NNKernels.h (row max, sums, loss or gradient from the
/// statistics), all-reducing the f64 statistics between them through the
/// communication (MAX for the row max, SUM for the sums of exponentials and
/// target logits), exactly as the CPU backend's closure does with MPI.
llvm::Error CudaBackend::bindCrossEntropy(const KernelDesc &k,
                                          Instruction &inst) {
  using Status = cuda::DeviceStatus *;
  cudaStream_t s = stream();
  bool grad = k.kind == KernelKind::CrossEntropyGrad;
  if (int comm = k.commIndex; comm >= 0) {
    int64_t rows = k.get<CrossEntropyAttrs>().scratchPerRow;
    std::string where = inst.where;
    inst.fn = launchWith(
        inst, k.name(), true, 0,
        [this, s, comm, grad, rows, kernel = k.name().str(),
         where](const ExecContext &ctx, In in, Out out, Status status,
                void *) -> llvm::Error {
          llvm::Expected<const mpi::Communicator *> cm = commAt(ctx, comm);
          if (!cm)
            return cm.takeError();
          const mpi::Communicator &c = **cm;
          if (!ctx.communication)
            return fail("vocab-parallel cross-entropy needs the backend's "
                        "communication");
          const Tensor &logits = *in[0];
          int64_t n = logits.dim(0), local = logits.dim(1);
          // The statistics, f64 (I64 storage), from the stream-ordered pool:
          // freed on the compute stream after it has waited for the
          // all-reduces.
          llvm::Expected<Tensor> stats = allocate(DType::I64, {rows * n});
          if (!stats)
            return stats.takeError();
          double *rowMax = static_cast<double *>(stats->raw());
          double *sumExp = rowMax + n,
                 *target = grad ? nullptr : rowMax + 2 * n;
          if (llvm::Error e =
                  launched(cuda::crossEntropyRowMax(logits, rowMax, s), kernel))
            return e;
          if (llvm::Error e = ctx.communication->allReduceF64(
                  rowMax, n, mpi::ReduceOp::Max, c, ctx, where))
            return e;
          if (llvm::Error e = launched(
                  cuda::crossEntropyRowSums(logits, *in[1], c.rank() * local,
                                            c.size() * local, rowMax, sumExp,
                                            target, status, s),
                  kernel))
            return e;
          if (llvm::Error e = ctx.communication->allReduceF64(
                  sumExp, grad ? n : 2 * n, mpi::ReduceOp::Sum, c, ctx, where))
            return e;
          if (grad)
            return launched(cuda::crossEntropyGradFromStats(
                                logits, *in[1], c.rank() * local, rowMax,
                                sumExp, *in[2], out[0], s),
                            kernel);
          return launched(
              cuda::crossEntropyFromStats(n, rowMax, sumExp, target, out[0], s),
              kernel);
        });
    return llvm::Error::success();
  }
  if (!grad) {
    inst.fn = launchWith(inst, k.name(), true,
                         cuda::crossEntropyScratchBytes(k.operands[0].shape[0]),
                         [s](In in, Out out, Status status, void *ws) {
                           return cuda::crossEntropy(*in[0], *in[1], out[0], ws,
                                                     status, s);
                         });
    return llvm::Error::success();
  }
  inst.fn = launchWith(inst, k.name(), true, 0,
                       [s](In in, Out out, Status status, void *) {
                         return cuda::crossEntropyGrad(*in[0], *in[1], *in[2],
                                                       out[0], status, s);
                       });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindSgdUpdate(const KernelDesc &k, Instruction &inst) {
  if (k.hasGridAxes())
    return noGridAxesForm(k);
  cudaStream_t s = stream();
  double wd = k.get<SgdAttrs>().weightDecay;
  // The learning rate (operand 2) is read on the device (see
  // cuda::sgdUpdateMulti), so CUDA graph replays see Executor::setHyper.
  inst.fn = launchWith(inst, k.name(), false, 0,
                       [s, wd](In in, Out out, cuda::DeviceStatus *, void *) {
                         return cuda::sgdUpdate(*in[0], *in[1], *in[2], wd,
                                                out[0], s);
                       });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindAdamwUpdate(const KernelDesc &k,
                                         Instruction &inst) {
  if (k.hasGridAxes())
    return noGridAxesForm(k);
  cudaStream_t s = stream();
  AdamwAttrs a = k.get<AdamwAttrs>();
  inst.fn = launchWith(inst, k.name(), false, 0,
                       [s, a](In in, Out out, cuda::DeviceStatus *, void *) {
                         return cuda::adamwUpdate(
                             *in[0], *in[1], *in[2], *in[3], *in[4], *in[5],
                             a.beta1, a.beta2, a.eps, a.weightDecay, out[0],
                             out[1], out[2], s);
                       });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindMultiSgdUpdate(const KernelDesc &k,
                                            Instruction &inst) {
  if (k.hasGridAxes())
    return noGridAxesForm(k);
  cudaStream_t s = stream();
  double wd = k.get<SgdAttrs>().weightDecay;
  // One multi-tensor launch sequence (planMultiTensor) for all N tensors.
  inst.fn =
      launchWith(inst, k.name(), false, 0,
                 [s, wd](In in, Out out, cuda::DeviceStatus *, void *) {
                   return cuda::sgdUpdateTensors(in.data(), out.data(),
                                                 out.size(), *in.back(), wd, s);
                 });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindMultiAdamwUpdate(const KernelDesc &k,
                                              Instruction &inst) {
  if (k.hasGridAxes())
    return noGridAxesForm(k);
  cudaStream_t s = stream();
  AdamwAttrs a = k.get<AdamwAttrs>();
  inst.fn = launchWith(inst, k.name(), false, 0,
                       [s, a](In in, Out out, cuda::DeviceStatus *, void *) {
                         return cuda::adamwUpdateTensors(
                             in.data(), out.data(), out.size() / 3,
                             *in[in.size() - 2], *in.back(), a.beta1, a.beta2,
                             a.eps, a.weightDecay, s);
                       });
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

void cuda::registerCudaBackend(BackendRegistry &registry) {
  BackendInfo info;
  info.name = "cuda";
  info.create = [](const BackendOptions &options) {
    return CudaBackend::create(options);
  };
  const CudaBackend::BindTable &table = CudaBackend::binders();
  for (size_t i = 0; i < kNumKernelKinds; ++i)
    if (table[i])
      info.kernels.push_back(static_cast<KernelKind>(i));
  registry.add(std::move(info));
}

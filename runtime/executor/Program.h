//===- Program.h - a tsrt runtime program resolved to instructions -*- C++ -*-//
//
// `Program::compile` turns the straight-line body of a `tsrt` function into a
// flat instruction list, once, at load time:
//   - every SSA value gets a slot; function arguments are slots 0..N-1;
//   - every `tsrt.kernel` is decoded once into a typed KernelDesc (its
//     operand/result shapes and dtypes checked, its attributes decoded;
//     KernelDesc.h) and bound by the backend to a closure over its kernel;
//   - `tsrt.constant` values are materialised once;
//   - collectives, and kernels with a `grid_axes` attribute (vocab-parallel
//     gather and cross-entropy, which call MPI themselves), refer to an
//     index into the program's list of distinct grid-axes sets
//     (`commAxes`), bound to communicators by the executor;
//   - `tsrt.send` / `tsrt.recv` (pipeline plans only) become point-to-point
//     instructions over the executor's pp communicator (see PointToPoint):
//     every recv of the program is posted (MPI_Irecv) when `run` starts and
//     waited for at its instruction; sends are MPI_Isend, completed by the
//     executor at the end of the step;
//   - each slot is released right after its last use;
//   - with a static memory plan (the function's `tsrt.arena_bytes` and each
//     op's `tsrt.offsets`, from the compiler's tsr-plan-memory pass), every
//     result with an offset >= 0 is a view into the executor's arena (see
//     Arena) at that offset instead of a heap allocation; results with -1
//     (views, and returned values other than updated params/optimizer
//     state) and programs without a plan use the heap. A returned value in
//     the arena is valid only until the next run with the same arena (the
//     Executor copies it into the argument it replaces).
// Anything wrong with the program (unknown kernel, bad attribute, unsupported
// dtype, inconsistent shapes) is an llvm::Error naming the op's location and
// kernel. `run` then executes the list without string lookups.
//
// The program itself knows nothing of ranks: the same Program runs on every
// rank, with an ExecContext holding that rank's communicators.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_PROGRAM_H
#define TESSERA_RUNTIME_EXECUTOR_PROGRAM_H

#include "runtime/Tensor.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mlir {
class ModuleOp;
}

namespace tessera {
namespace runtime {
namespace exec {

class Backend;
class Communication;

/// Static type of a program value.
struct TensorType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  bool operator==(const TensorType &o) const {
    return dtype == o.dtype && shape == o.shape;
  }
  bool operator!=(const TensorType &o) const { return !(*this == o); }
  /// "tensor<4x64xf32>".
  std::string str() const;
};

/// One rank's point-to-point transport for pipeline plans (`tsrt.send` /
/// `tsrt.recv`). Chunk c runs on stage c mod `stages`, which is its rank in
/// `comm`. The MPI tag of a transfer is channel · microBatches + micro-batch.
struct PointToPoint {
  /// The pp sub-communicator (rank = stage), MPI_ERRORS_RETURN.
  mpi::Communicator comm;
  int64_t stages = 1;       ///< P
  int64_t microBatches = 1; ///< M
  /// A posted MPI_Isend: `data` keeps the buffer alive until it is waited
  /// for at the end of the sender's action `releaseAfter` (the executor sets
  /// it after the run that posted it; schedule::sendReleases); `what` names
  /// the op and peer for errors.
  struct PendingSend {
    MPI_Request request = MPI_REQUEST_NULL;
    Tensor data;
    std::string what;
    int64_t releaseAfter = -1;
  };
  std::vector<PendingSend> pending;
  /// Seconds spent blocked in MPI_Wait for receives so far (MPI_Wtime); the
  /// executor subtracts it from an action's time to separate the pipeline
  /// bubble from compute.
  double recvWaitSeconds = 0;

  PointToPoint() = default;
  PointToPoint(const PointToPoint &) = delete;
  PointToPoint &operator=(const PointToPoint &) = delete;
  /// Frees (without waiting) any send still pending; its buffer is then
  /// deliberately leaked, since MPI may still read it. Only happens after a
  /// failed step, when the job is expected to abort.
  ~PointToPoint();

  /// Completes every pending send (MPI_Waitall) and releases the buffers.
  /// Errors name the op and peer of the first failed send.
  llvm::Error waitAll();
  /// Completes (MPI_Waitall) the pending sends whose `releaseAfter` is
  /// `action` and releases their buffers; the others stay pending even if
  /// they have completed, so that a buffer's lifetime does not depend on
  /// the receiver's timing. Errors as waitAll.
  llvm::Error waitReleasedAfter(int64_t action);
};

/// One program's arena: `bytes` bytes, 64-byte aligned, allocated once and
/// reused by every run. `highWater` is the largest end offset (offset + the
/// placed tensor's bytes rounded up to 64) handed out so far: the arena
/// bytes actually used, measured independently of the plan.
struct Arena {
  std::shared_ptr<void> memory;
  int64_t bytes = 0;
  mutable int64_t highWater = 0;

  /// An arena of `bytes` (>= 0) bytes (not counted by heapBytesLive()).
  /// Error: the allocation failed.
  static llvm::Expected<Arena> allocate(int64_t bytes);
};

/// A small integer for the profile kind `kind` ("matmul", "all_reduce",
/// "pipeline.accumulate", ...), the same for the same name in this process
/// (KernelStats::opTimes is indexed by it). Interning takes a lock and may
/// allocate: call it when a program is compiled, not per instruction.
int profileKindId(llvm::StringRef kind);
/// The name profileKindId(name) interned.
llvm::StringRef profileKindName(int id);

/// What the instructions of one rank run with.
struct ExecContext {
  /// Communicator for each entry of Program::commAxes (same order).
  std::vector<mpi::Communicator> comms;
  /// The result index of the loss while a (non-pipeline) training step runs,
  /// else -1: the instruction that computes it ends the forward, where the
  /// fault-injection test hook's `backward` moment fires
  /// (runtime/FaultInject.h).
  int lossResult = -1;
  /// Collective and send volumes are recorded here when set.
  mpi::TrafficCounter *traffic = nullptr;
  /// What kernels measure about themselves while they run, when set.
  struct KernelStats {
    /// Largest attention score block allocated by an attention kernel
    /// (bytes): a row block of scale·QKᵀ (and of dP in the backward),
    /// never the full S x S (ring attention: of the local K/V block).
    int64_t attentionScoresBytes = 0;
    /// Host wall time of one instruction kind, summed, and its calls.
    struct OpTime {
      double seconds = 0;
      /// The rank's own processor time in the op (its thread's CPU
      /// clock): on cores shared by several ranks, `seconds` also counts
      /// the time the rank was descheduled.
      double cpuSeconds = 0;
      int64_t calls = 0;
      /// Bytes its calls read and wrote: each call's operands and results
      /// once (Instruction::bytes).
      int64_t bytes = 0;
    };
    /// When set (tessera-run --profile), Program::run adds every
    /// instruction's host wall time to its kind's entry of `opTimes`
    /// (indexed by profileKindId of the tsrt kernel or op name: "matmul",
    /// "all_reduce", "recv", "send", "wait", ...; resolved when the
    /// program is compiled, so timing an instruction costs no lookup); the
    /// pipeline executor adds its own work between programs
    /// ("pipeline.accumulate", "pipeline.complete_sends",
    /// "pipeline.loss_broadcast"). A collective's time includes its wait
    /// for the other ranks. On the cuda backend a kernel's time is its
    /// launch, not its device time.
    bool profile = false;
    std::vector<OpTime> opTimes;
    /// While profiling, Executor::step adds its own wall and processor
    /// time, entry to exit, here (`calls`: the steps): what the timed ops
    /// leave of it is the executor's own work (dispatch, operand binding,
    /// batch slicing, state swap) plus the profiler's clock reads.
    OpTime steps;
    /// Timed scopes so far (every OpTimer, each reading the wall and the
    /// thread's processor clock twice), for the profiler's own cost.
    int64_t timedScopes = 0;

    /// Calls `f(kind, time)` for every kind timed at least once.
    template <typename F> void forEachOp(F f) const {
      for (size_t id = 0; id < opTimes.size(); ++id)
        if (opTimes[id].calls > 0)
          f(profileKindName(static_cast<int>(id)), opTimes[id]);
    }
  };
  KernelStats *stats = nullptr;
  /// Pipeline plans: the transport of tsrt.send / tsrt.recv (null otherwise;
  /// a program with send/recv then fails to run).
  PointToPoint *p2p = nullptr;
  /// Pipeline plans: the micro-batch of the running action (0 <= m < M);
  /// part of every send/recv tag, and the coordinate on the virtual
  /// micro-batch axis (the last grid axis) of the kernels that need their
  /// block's place in the global tensor (dropout).
  int64_t microBatch = 0;
  /// This rank's coordinates on the grid's rank axes (CompileOptions::
  /// gridShape order); empty: the origin. Kernels that need their block's
  /// place in the global tensor (dropout's layout) read them.
  std::vector<int64_t> coords;
  /// The arena of a program with a static memory plan (at least
  /// Program::arenaBytes() bytes); null otherwise.
  const Arena *arena = nullptr;
  /// tessera-run --dump-tensors (tessera-check): called after every kernel
  /// whose tsrt.kernel carries a `tsrt.trace` id, once per result, with the
  /// id, the result index and the result (in the backend's memory; views
  /// valid only during the call). Empty: nothing is dumped, at the cost of
  /// one branch per instruction. An error fails the step.
  std::function<llvm::Error(int64_t trace, unsigned result, const Tensor &)>
      traced;
  /// A device backend's communication (Backend::communication(); every
  /// entry of `comms` and the pp communicator connected to it); null for
  /// the CPU backend, whose instructions call MPI themselves.
  Communication *communication = nullptr;
};

/// Adds the host wall time of its scope to `stats->opTimes[kind]` (`kind`
/// a profileKindId) when `stats` is non-null and profiling
/// (KernelStats::profile); otherwise costs one branch. No lookup, string
/// or allocation once the kind's entry exists.
class OpTimer {
public:
  OpTimer(ExecContext::KernelStats *stats, int kind, int64_t bytes = 0)
      : stats(stats && stats->profile ? stats : nullptr), kind(kind),
        bytes(bytes), start(this->stats ? now() : 0),
        cpuStart(this->stats ? cpuNow() : 0) {}
  ~OpTimer() {
    if (!stats)
      return;
    if (static_cast<size_t>(kind) >= stats->opTimes.size())
      stats->opTimes.resize(kind + 1);
    ExecContext::KernelStats::OpTime &t = stats->opTimes[kind];
    t.seconds += now() - start;
    t.cpuSeconds += cpuNow() - cpuStart;
    ++t.calls;
    ++stats->timedScopes;
    t.bytes += bytes;
  }
  OpTimer(const OpTimer &) = delete;
  OpTimer &operator=(const OpTimer &) = delete;

  /// The wall clock (steady, seconds) and this thread's processor clock.
  static double now();
  static double cpuNow();
  /// The mean cost of one timed scope (its clock reads and bookkeeping),
  /// measured once per process over an empty scope: the profiler's own
  /// time per timed op, excluded from the executor's.
  static double scopeOverhead();

private:
  ExecContext::KernelStats *stats;
  int kind;
  int64_t bytes;
  double start, cpuStart;
};

/// A resolved kernel: reads `in` (the operands) and writes `out` (the
/// results). When the instruction's `allocateResults` is set, `out` holds
/// freshly allocated tensors of the result types; otherwise the function
/// sets them itself.
using KernelFn = std::function<llvm::Error(const ExecContext &,
                                           llvm::ArrayRef<const Tensor *> in,
                                           llvm::MutableArrayRef<Tensor> out)>;

/// One step of the program.
struct Instruction {
  /// Call: runs `fn`. Send: MPI_Isend of operand 0 to the stage of
  /// `peerChunk`. Recv: waits for the receive posted at the start of `run`
  /// and yields it as result 0.
  /// AllReduceStart: posts MPI_Iallreduce of operand 0 into result 0
  /// (allocated as a Call's) over comm `commIndex`, as request
  /// `asyncIndex` (with ExecContext::communication: its startAllReduce).
  /// Wait: completes request `asyncIndex`; result 0 is a view of operand 0.
  /// Send/Recv of a device backend without host memory go through host
  /// copies (download before MPI_Isend, upload after the receive).
  enum class Kind { Call, Send, Recv, AllReduceStart, Wait };
  Kind kind = Kind::Call;
  /// AllReduceStart, and a Call whose `tsrt.kernel` has `grid_axes` (it
  /// communicates over ctx.comms[commIndex] itself); -1 otherwise.
  int commIndex = -1;
  /// Ranks of communicator `commIndex` (known at load from the grid shape);
  /// 0 when there is none.
  int64_t commSize = 0;
  int asyncIndex = -1;    ///< AllReduceStart, Wait
  bool reduceMax = false; ///< AllReduceStart: max instead of sum
  int64_t peerChunk = -1; ///< Send/Recv: the other chunk
  int64_t channel = -1;   ///< Send/Recv: the tsrt channel
  int recvIndex = -1;     ///< Recv: index into the program's posted receives
  /// Call of a tsrt.kernel with a `tsrt.trace` id (tessera-check's
  /// programs): the id, whose results ExecContext::traced receives; -1
  /// otherwise.
  int64_t trace = -1;
  std::string kernel;   ///< "matmul", "all_reduce", ... (diagnostics)
  int profileKind = -1; ///< profileKindId(kernel), set when compiled
  std::string where;    ///< the op's location (diagnostics)
  KernelFn fn;
  std::vector<int> operands; ///< slots read
  std::vector<int> results;  ///< slots written
  std::vector<TensorType> resultTypes;
  /// Bytes one execution reads and writes, for --profile: the operands and
  /// results once each; 0 for views and waits (ProgramCompiler sets it).
  int64_t bytes = 0;
  bool allocateResults = true;
  /// Static memory plan: per result, its arena offset in bytes, or -1 for a
  /// heap allocation. Empty: every result on the heap.
  std::vector<int64_t> resultOffsets;
  /// Static memory plan (`tsrt.in_place`): per result, the argument whose
  /// buffer it is written into (the argument's old value is dead, or is
  /// read element by element by the optimizer update that overwrites it),
  /// or -1. Empty: none.
  std::vector<int> resultInPlace;
  std::vector<int> release; ///< slots whose last use this is
};

/// Options for Program::compile.
struct CompileOptions {
  /// Sizes of the device grid's axes (collective axes are checked against
  /// it and collective result shapes derived from it). For pipeline plans,
  /// the rank axes only (without the virtual micro-batch axis).
  std::vector<int64_t> gridShape = {1};
  /// Pipeline plans: P (the number of stages); 0 for other plans, where
  /// tsrt.send / tsrt.recv are load errors.
  int64_t pipelineStages = 0;
  /// Pipeline plans: M (micro-batches per step), for the MPI tags.
  int64_t microBatches = 1;
  /// The manifest's "optimizer" object, or null. Optimizer attributes are
  /// f32 in the IR; where the manifest holds a double that rounds to the same
  /// f32 (e.g. lr 0.1), the kernel gets the double, as torch.optim does with
  /// Python floats.
  const llvm::json::Object *optimizer = nullptr;
  /// Where the program's tensors live and its kernels run (see Backend.h);
  /// null: the CPU backend. Must outlive the Program.
  Backend *backend = nullptr;
};

/// A straight-line program resolved to instructions.
class Program {
public:
  /// Compiles function `function` of `module` (func.func whose body holds only
  /// tsrt ops and func.return). `source` prefixes error messages (e.g. the
  /// artifact path).
  static llvm::Expected<Program> compile(mlir::ModuleOp module,
                                         llvm::StringRef function,
                                         const CompileOptions &options,
                                         llvm::StringRef source);

  /// Runs the program once on `args` (one per argument, types as
  /// argTypes()); returns the results. Errors (data-dependent kernel
  /// failures, MPI failures) name the op's location and kernel (and, for
  /// send/recv, the peer chunk, its pp rank, the channel and micro-batch).
  /// Receives are posted before the first instruction; on error any not yet
  /// completed is cancelled.
  llvm::Expected<std::vector<Tensor>> run(const ExecContext &ctx,
                                          std::vector<Tensor> args) const;

  const std::vector<TensorType> &argTypes() const { return argTys; }
  const std::vector<TensorType> &resultTypes() const { return resultTys; }
  /// Distinct grid-axes sets used by collectives, in order of first use.
  /// Communicators must be created for them in this order on every rank.
  const std::vector<std::vector<int64_t>> &commAxes() const { return axesSets; }
  const std::vector<Instruction> &instructions() const { return insts; }
  int numSlots() const { return slots; }
  /// Largest tsrt channel used by a send or recv, or -1 if none.
  int64_t maxChannel() const { return maxChan; }
  /// Bytes of the arena the static memory plan needs (`tsrt.arena_bytes`),
  /// or 0 when the program has no plan (every result on the heap).
  int64_t arenaBytes() const { return arena; }
  /// Bytes held by the materialised constants (allocation sizes).
  int64_t constantBytes() const;
  /// The backend the program was compiled for.
  Backend &backend() const { return *device; }

private:
  friend class ProgramCompiler; // Program.cpp: compile's steps
  friend class ProgramRun;      // Program.cpp: run's steps
  int slots = 0;
  std::vector<TensorType> argTys, resultTys;
  std::vector<int> resultSlots;
  std::vector<std::pair<int, Tensor>> constants; ///< slot, value
  std::vector<std::vector<int64_t>> axesSets;
  std::vector<Instruction> insts;
  std::vector<int> releaseArgsEarly; ///< arg slots never read
  std::vector<int> inPlaceArgs;      ///< arguments some result overwrites
  std::vector<int> recvInsts;        ///< instruction index of each recv
  int numAsync = 0;                  ///< tsrt.all_reduce_start count
  int64_t maxChan = -1;
  int64_t arena = 0;
  Backend *device = nullptr; ///< never null after compile
  size_t maxResults = 0, maxOperands = 0;
};

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_PROGRAM_H

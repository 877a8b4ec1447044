//===- Executor.h - runs a plan's training step on one rank -----*- C++ -*-===//
//
// An Executor is one rank's instance of a Plan: its grid coordinates and
// communicators, and its local shard of every argument (parameters and
// frozen tensors sliced from the artifact's global values, optimizer state
// starting at zeros). `step` binds the batch, runs the program and swaps the
// updated parameters and optimizer state in for the next step (those the
// static memory plan placed in the arena are copied into the buffers of the
// arguments they replace, so the arena is free for the next step).
//
// The grid must lay ranks out in the manifest's rank order (create checks
// it); gathers place each rank's shards by the coordinates that order gives
// it, not by its world rank.
//
// Usage (every rank):
//   auto plan = Plan::load("plan.tsr");                 // no MPI involved
//   auto grid = mpi::Grid::create(world, m.rankAxes(), m.rankShape(),
//                                 m.rankOrderIndices()); // collective
//   auto ex = Executor::create(*plan, *grid);           // collective
//   for (s = 0; s < K; ++s) {
//     auto batch = dataset.batch(s, B, S, 0, 1);         // global batch
//     auto loss = (*ex)->step(batch->inputs, batch->labels);  // collective
//   }
//   auto weights = (*ex)->gatherWeights(0);              // collective
//
// Pipeline plans (Plan::pipeline() non-null): the grid is the plan's rank
// grid (Manifest::rankAxes/rankShape, without the virtual micro-batch axis)
// and this rank's stage is its pp coordinate. The rank holds state only for
// the arguments read by the functions of its stage's chunks (others are
// null: no memory for other stages' parameters). `step` runs the stage's
// actions in schedule order:
//   F(c, m): forward[c] on micro-batch m (tokens/labels sliced with grid
//            coordinates + [m]); its tsrt.saved results are kept as the
//            activation set (c, m), its tsrt.acc results added into the
//            accumulators;
//   B(c, m): backward[c] with the activation set (c, m), which is then
//            freed; its tsrt.acc results are added into the accumulators;
// then completes every pending send, runs apply[c] for the stage's chunks in
// ascending order (tsrt.acc arguments = the sums over micro-batches) and
// swaps the tsrt.result values in. Accumulators start empty every step (the
// first contribution is copied, later ones added elementwise in f32). The
// loss, produced on the last stage, is broadcast over the pp communicator.
// tsrt.send / tsrt.recv use that communicator (see Program.h).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_EXECUTOR_H
#define TESSERA_RUNTIME_EXECUTOR_EXECUTOR_H

#include "runtime/Tensor.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/Plan.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

class Backend;

/// One timed region of a step, for traces (see Executor::enableTrace).
struct TraceEvent {
  enum class Kind { Forward, Backward, Apply, Step };
  Kind kind = Kind::Step;
  int64_t chunk = -1;        ///< -1 for Step
  int64_t microBatch = -1;   ///< -1 for Apply and Step
  int64_t stage = 0;         ///< this rank's stage (0 for non-pipeline plans)
  int64_t step = 0;          ///< the step index (Executor::stepsRun() then)
  double start = 0, end = 0; ///< seconds since the trace origin (MPI_Wtime)
  /// Seconds of [start, end] spent blocked waiting for receives (pipeline
  /// forward/backward only): end − start − recvWait is compute.
  double recvWait = 0;

  /// "F1.3", "B1.3", "apply" or "step".
  std::string name() const;
  /// "forward", "backward", "apply" or "step".
  static const char *kindName(Kind kind);
};

/// Bytes one rank held during a step, measured by the runtime (independently
/// of the compiler's prediction): the persistent state (params, frozen,
/// optimizer state, as allocated), the programs' constants, the arena's
/// high-water mark (the largest end offset handed out during the step), and
/// the peak of the heap bytes allocated during the step above what was held
/// when it started (Tensor heap accounting: batch slices, results returned
/// by the step, and every value of programs without a memory plan).
struct MemoryUse {
  int64_t persistent = 0, constants = 0, arena = 0, stepHeap = 0;
  int64_t total() const { return persistent + constants + arena + stepHeap; }
};

class Executor {
public:
  /// Binds `plan` to this rank of `grid`. Collective over grid.parent(): the
  /// program's sub-communicators are created here, in the same order on every
  /// rank (pipeline plans: the pp communicator first, then those of every
  /// chunk's forward, backward and apply, in chunk order). Errors: the grid's
  /// shape differs from the plan's rank grid, the pipeline's largest MPI tag
  /// exceeds MPI_TAG_UB, MPI failures. `plan` and `grid` must outlive the
  /// Executor.
  static llvm::Expected<std::unique_ptr<Executor>> create(const Plan &plan,
                                                          mpi::Grid &grid);

  /// Runs one training step on the GLOBAL batch (`tokens` and `labels` i64
  /// [global_batch, seq_len]); each is sliced to this rank by its layout.
  /// Returns the loss (the global mean, the same on every rank). Collective.
  /// On error the state is unchanged, but other ranks may be stuck in a
  /// collective: the caller should abort. (Pipeline plans: messages of the
  /// failed step may still be queued and would be taken for the next step's,
  /// so the executor must not be used again.) Errors name the source, step,
  /// and for pipeline plans the stage and action (e.g. "stage 1, B1.3
  /// (@backward_1)"), then the op.
  llvm::Expected<double> step(const Tensor &tokens, const Tensor &labels);

  /// Sets the "hyper" argument `name` (e.g. "lr", this step's learning
  /// rate) to `value` (rounded to f32) for the steps that follow; until
  /// then it is the manifest's "optimizer" value of that name. Not
  /// collective: every rank must set the same value. Errors: the plan has
  /// no such argument, the value is not finite, backend copy failures.
  llvm::Error setHyper(llvm::StringRef name, double value);
  /// The argument slot of "hyper" argument `name`, resolved once (e.g. at
  /// load) for setHyper(slot, value), which sets it per step without a
  /// name lookup or an allocation. Error: the plan has no such argument.
  llvm::Expected<int64_t> hyperSlot(llvm::StringRef name) const;
  /// setHyper(name, value) by the slot hyperSlot(name) gave. Errors: not a
  /// "hyper" argument's slot, the value is not finite, backend copy
  /// failures.
  llvm::Error setHyper(int64_t slot, double value);

  /// Evaluates the loss of the current state on the GLOBAL batch (`tokens`
  /// and `labels` i64 [global_batch, seq_len], sliced to this rank as
  /// `step` slices them) with the plan's forward-only evaluation function
  /// (Plan::evalProgram: no dropout, no backward, no update). Returns the
  /// loss (the global mean, the same on every rank) and changes no state;
  /// the step count, traffic counters, profile and memory measurements are
  /// untouched. Collective. Errors: the plan has no evaluation function
  /// (pipeline plans), wrong batch shapes, the program's errors.
  llvm::Expected<double> evaluate(const Tensor &tokens, const Tensor &labels);

  /// This rank's current value of argument `name` with `role`, or null
  /// (also for arguments of other pipeline stages).
  const Tensor *localValue(llvm::StringRef name, Role role = Role::Param) const;
  /// Replaces this rank's value of argument `name` with `role` by `value`, a
  /// HOST tensor of the argument's dtype and local shape (uploaded to the
  /// plan's backend), e.g. a checkpoint's piece. Call between steps, before
  /// --cuda-graph captures one. Errors name the argument: no such argument,
  /// one this rank does not hold (another pipeline stage's), a dtype or
  /// shape other than the manifest's local one, the upload.
  llvm::Error setLocalValue(llvm::StringRef name, Role role,
                            const Tensor &value);
  /// This rank's coordinates on the manifest's full grid (Manifest::
  /// gridAxes: the rank axes, then 0 for a pipeline plan's virtual mb
  /// axis), the coordinates the arguments' layouts refer to.
  std::vector<int64_t> layoutCoords() const;

  /// Assembles the global value of every param and frozen argument (manifest
  /// order, ONNX names, global shapes) on world rank `root` of the grid's
  /// parent communicator; other ranks get an empty list. Collective.
  /// Pipeline plans: each value comes from the ranks of the (lowest) stage
  /// that holds it (MPI_Gatherv, f32 element counts); a value no stage uses
  /// is the initial one. Errors: a shard over INT_MAX elements, MPI failures.
  llvm::Expected<std::vector<std::pair<std::string, Tensor>>>
  gatherWeights(int root = 0) const;

  /// Collective and send volumes of this rank (ring model), per step and
  /// total.
  mpi::TrafficCounter &traffic() { return counter; }
  /// Kernels' own measurements since the executor was created.
  const ExecContext::KernelStats &kernelStats() const { return stats; }
  /// tessera-run --dump-tensors: `sink` receives every traced kernel result
  /// of the steps that follow (ExecContext::traced; empty turns it off).
  void setTracedSink(
      std::function<llvm::Error(int64_t, unsigned, const Tensor &)> sink);
  /// Starts (or stops) the per-instruction-kind profile of the steps that
  /// follow (KernelStats::opTimes, and each step's own time in
  /// KernelStats::steps; tessera-run --profile).
  void setProfiling(bool on) { stats.profile = on; }
  const Plan &plan() const { return planRef; }
  /// This rank's grid coordinates (rank axes only).
  const std::vector<int64_t> &coords() const { return gridRef.coords(); }
  /// Number of steps run so far (a resumed run's: counting the
  /// checkpoint's steps, see setStepsRun): the global index of the next step.
  int64_t stepsRun() const { return steps; }
  /// Sets the step counter, e.g. to a loaded checkpoint's step, so that
  /// trace events and traced tensors carry global step numbers.
  void setStepsRun(int64_t n) { steps = n; }
  /// The last completed step's "grad_norm" result (tsr-clip-grad: the
  /// global L2 norm of the gradients before clipping, the same on every
  /// rank), or std::nullopt when the plan has none or no step ran.
  std::optional<double> lastGradNorm() const { return gradNorm; }
  /// This rank's pipeline stage (its pp coordinate); 0 for other plans.
  int64_t stage() const { return myStage; }

  /// Pipeline plans: the largest number of activation sets alive at once on
  /// this rank during the last completed step (1F1B: min(P − stage, M)), and
  /// the largest total bytes of the saved tensors alive at once (each saved
  /// tensor counted in full, even when it shares storage). 0 before the first
  /// step and for non-pipeline plans.
  int64_t peakActivationSets() const { return lastPeakSets; }
  int64_t peakActivationBytes() const { return lastPeakBytes; }

  /// Bytes held during the last completed step (see MemoryUse); zeros before
  /// the first step.
  const MemoryUse &lastStepMemory() const { return lastMemory; }

  /// --cuda-graph: from the second step on, the step's work is recorded
  /// once as a CUDA graph and replayed (Executor::step then only copies the
  /// batch in, launches the graph and reads the loss). Every argument keeps
  /// one device buffer (results are copied into it), so the graph's
  /// addresses stay valid; the first step runs eagerly to warm up (cuBLASLt
  /// plans, scratch, status slots). Errors: the plan's backend cannot
  /// capture (the CPU backend), or the plan is a pipeline plan.
  llvm::Error enableStepCapture();

  /// Starts recording TraceEvents: one Step event per step and, for pipeline
  /// plans, one per action and per apply. Collective over grid.parent(): an
  /// MPI_Barrier, right after which each rank takes its time origin (so all
  /// ranks' times are comparable to the barrier's skew). Error: MPI failure.
  llvm::Error enableTrace();
  /// Events recorded so far, in the order they ended.
  const std::vector<TraceEvent> &traceEvents() const { return trace; }
  /// With tracing on a device backend (--backend cuda): the device
  /// intervals of the last step (every kernel on the compute stream, every
  /// collective on the communication stream; Backend::deviceTrace), in
  /// seconds since the trace origin. Empty for the CPU backend.
  std::vector<DeviceTraceEvent> deviceTrace() const;

private:
  Executor(const Plan &plan, mpi::Grid &grid) : planRef(plan), gridRef(grid) {}
  llvm::Error initPipeline();
  llvm::Expected<double> runStep(const Tensor &tokens, const Tensor &labels);
  llvm::Expected<double> stepPipeline(const Tensor &tokens,
                                      const Tensor &labels);
  llvm::Expected<double> stepCaptured(const Tensor &tokens,
                                      const Tensor &labels);
  llvm::Expected<std::vector<std::pair<std::string, Tensor>>>
  gatherWeightsPipeline(int root) const;
  void record(TraceEvent::Kind kind, int64_t chunk, int64_t microBatch,
              double start, double recvWait = 0);
  double now() const;

  const Plan &planRef;
  mpi::Grid &gridRef;
  /// Where the state lives and the program runs (the plan's backend).
  Backend *backend = nullptr;
  /// --cuda-graph: capture requested / done; the batch and loss buffers.
  bool captureSteps = false, captured = false, warmedUp = false;
  Tensor tokensBuffer, labelsBuffer, lossBuffer, gradNormBuffer;
  ExecContext ctx;
  /// The evaluation function's context: its own communicators, the same
  /// arena, no traffic counter or stats.
  ExecContext evalCtx;
  mpi::TrafficCounter counter;
  ExecContext::KernelStats stats;
  std::vector<Tensor> state; ///< one per argument (tokens/labels: null)
  int64_t tokensArg = -1, labelsArg = -1, lossResult = -1, gradNormResult = -1;
  std::optional<double> gradNorm;
  int64_t steps = 0;
  /// The arena of a program with a static memory plan (allocated once).
  Arena arena;
  MemoryUse lastMemory;
  /// step's scratch list of the state's distinct buffers (kept: no
  /// allocation per step).
  std::vector<const void *> seenBuffers;
  /// setHyper's host staging scalar for a device backend.
  Tensor hyperStaging;

  // Pipeline plans.
  int64_t myStage = 0;
  std::unique_ptr<PointToPoint> p2p;
  /// fnCtx[3·c + phase] (phase 0 forward, 1 backward, 2 apply) for the
  /// chunks of this stage; empty contexts elsewhere.
  std::vector<ExecContext> fnCtx;
  std::vector<int64_t> myChunks; ///< this stage's chunks, ascending
  /// sendRelease[k][i]: the action of this stage after which the i-th send
  /// of its action k is waited for and freed (schedule::sendReleases; the
  /// number of actions: before the applies).
  std::vector<std::vector<int64_t>> sendRelease;
  int64_t lastPeakSets = 0, lastPeakBytes = 0;

  // Tracing.
  bool tracing = false;
  double traceOrigin = 0;
  std::vector<TraceEvent> trace;
};

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_EXECUTOR_H

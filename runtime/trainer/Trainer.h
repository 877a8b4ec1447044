//===- Trainer.h - the training loop of tessera-run -------------*- C++ -*-===//
//
// A Trainer runs one training job on every MPI rank: it opens the backend,
// the plan and the data, builds the rank grid and the executor, runs the
// steps, writes the per-step metrics and, after the last step, the
// requested reports (trace, profile, memory report, tensor dump) and the
// final weights / state. tessera-run's `main` only parses flags into a
// TrainerOptions and calls Trainer::run (tools/tessera-run/tessera-run.cpp
// documents every output format).
//
//   TrainerOptions options;            // filled from the command line
//   options.planPath = "plan.tsr";
//   options.dataPath = "tokens.u16";
//   options.steps = 8;
//   Trainer trainer(std::move(options));
//   int status = trainer.run(world);   // collective; finalizes MPI
//
// The step loop (Trainer::train) calls, for step s (0-based, the number of
// steps completed before it):
//   setStepHypers(s)          before the step: per-step runtime inputs
//                             (the "hyper" arguments, e.g. the learning
//                             rate of an LR schedule: Executor::setHyper);
//   executor.step(batch s)    the training step on global batch s;
//   maybeEvaluate(s + 1)      after the step, every rank: evaluation every
//                             N steps; may add values to the step's
//                             metrics record (stepExtras, e.g. "eval_loss");
//   the step's metrics record (rank 0), then
//   maybeCheckpoint(s + 1)    every rank: a checkpoint every N steps.
// Each hook is its own member function so that each feature stays in one
// place. Steps are numbered globally: with --load the loop runs from the
// checkpoint's step (startStep) up to --steps (the total), batch s being
// the global samples s*B .. s*B+B-1, so hooks keyed on s (an LR schedule,
// evaluation every N steps) continue where the saved run stopped.
// Checkpoints (--save, --load, --no-load-optim) are TrainerCheckpoint.cpp:
// the state is loaded after the executor is created, before any step.
//
// Errors: every error found before the first step (options, plan, data,
// world size, ...) is agreed on by all ranks (allRanksOk): the lowest
// failing rank prints one line "tessera-run: error: ..." and run() returns
// 1 on every rank. A failure inside a step aborts the job (abortAll:
// MPI_Abort), so no rank waits forever in a collective.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_TRAINER_TRAINER_H
#define TESSERA_RUNTIME_TRAINER_TRAINER_H

#include "runtime/checkpoint/DistCheckpoint.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/data/TokenDataset.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/Executor.h"
#include "runtime/executor/Plan.h"
#include "runtime/metrics/Metrics.h"
#include "runtime/trainer/LrSchedule.h"
#include "runtime/trainer/TensorDump.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::runtime {

/// What a training run does; tessera-run fills it from its flags (see
/// tessera-run --help for each one's meaning). Empty paths mean "off".
struct TrainerOptions {
  // --- The job -----------------------------------------------------------
  std::string planPath;            ///< PLAN.tsr (tessera-partition's artifact)
  std::string dataPath;            ///< token file (DESIGN.md's sampling order)
  std::string dataDType;           ///< --data-dtype uint16|uint32 ("": uint16)
  int64_t steps = 1;               ///< --steps: training steps to run (>= 0)
  std::string backendName = "cpu"; ///< --backend cpu|cuda
  std::optional<std::string> collectives; ///< --collectives (unset: default)
  bool cudaGraph = false;                 ///< --cuda-graph
  double collectiveTimeoutS = 300;        ///< --collective-timeout-s (0 off)
  std::optional<std::string> memoryPerDevice; ///< --memory-per-device SIZE
  /// --log-placement: rank 0 prints every rank's host, node, node-local
  /// rank (and its source), pid, grid coordinates and stage, and which axes'
  /// groups stay inside a host (Trainer::checkPlacement). The check of the
  /// plan's node mapping runs without it too.
  bool logPlacement = false;

  // --- Per-step output -----------------------------------------------------
  std::string metricsPath; ///< --metrics FILE.jsonl (rank 0)
  int64_t logEvery = 1;    ///< --log-every N (0: no progress lines)

  // --- Evaluation (Megatron-LM's flags; Trainer::maybeEvaluate) ----------
  /// --eval-data FILE: validation tokens (the --data format); batch k of
  /// every evaluation is the sampling formula's batch of step k on it.
  std::string evalDataPath;
  /// --eval-interval N (>= 1; unset: 1000): evaluate after every N-th step
  /// and after the last. --eval-iters K (>= 1; unset: 100): batches per
  /// evaluation. Set without evalDataPath: an option error.
  std::optional<int64_t> evalInterval, evalIters;

  // --- Reports after the last step -----------------------------------------
  std::string tracePath;     ///< --trace FILE.json
  std::string profilePath;   ///< --profile FILE.json
  bool memoryReport = false; ///< --memory-report
  std::string dumpTensors;   ///< --dump-tensors DIR

  // --- Final weights and state ---------------------------------------------
  std::string saveWeights; ///< --save-weights FILE.safetensors (rank 0)
  std::string saveState;   ///< --save-state FILE (FILE.rank<R>.safetensors)

  // --- Checkpoints (Megatron-LM's flags; TrainerCheckpoint.cpp) ----------
  /// --save DIR: distributed checkpoints (DistCheckpoint.h) under DIR,
  /// every saveInterval steps and after the last step.
  std::string saveDir;
  int64_t saveInterval = 0; ///< --save-interval N (0: only after the last)
  int64_t keepLast = 0;     ///< --keep-last K (0: keep every checkpoint)
  /// --load DIR: resume from DIR's `latest` or an iter_* folder.
  std::string loadDir;
  /// --no-load-optim: load params and frozen tensors only.
  bool noLoadOptim = false;

  // --- Learning-rate schedule (Megatron-LM's flags; LrSchedule.h) ---------
  /// --lr: the peak; unset: the plan's compiled "optimizer" "lr".
  std::optional<double> lr;
  double minLr = 0;                      ///< --min-lr
  double lrWarmupInit = 0;               ///< --lr-warmup-init
  int64_t lrWarmupIters = 0;             ///< --lr-warmup-iters
  std::string lrDecayStyle = "constant"; ///< --lr-decay-style
  /// --lr-decay-iters; unset: --steps (Megatron: --train-iters).
  std::optional<int64_t> lrDecayIters;
  int64_t lrWsdDecayIters = 0;                 ///< --lr-wsd-decay-iters
  std::string lrWsdDecayStyle = "exponential"; ///< --lr-wsd-decay-style
  /// Whether any schedule flag was given (a plan without the "hyper"
  /// argument "lr" then is an error).
  bool lrScheduleRequested = false;
};

/// One training job on every rank of the world communicator (see the file
/// comment). Not copyable.
class Trainer {
public:
  explicit Trainer(TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer &) = delete;
  Trainer &operator=(const Trainer &) = delete;

  /// Runs the whole job: watchdog, plan, data, executor, the steps, the
  /// reports. Collective over `world`. Calls mpi::finalize before it
  /// returns; returns the process exit status (0, or 1 after an error that
  /// every rank agreed on and the lowest failing rank printed).
  int run(const mpi::Communicator &world);

private:
  // Opening the job (no collective): "" or this rank's first error.
  std::string checkOptions(bool timeoutOk) const;
  std::string checkFiles() const;
  std::string checkMemoryPerDevice(const exec::Manifest &m) const;
  std::string makeLrSchedule(const exec::Manifest &m);
  std::string openJob(bool timeoutOk);
  /// Collective, after openJob: every rank's host (gethostname), MPI node
  /// (MPI_COMM_TYPE_SHARED group), node-local rank and its source
  /// (mpi::nodeLocalRank) and pid are gathered to rank 0 (one MPI_Gather
  /// under the watchdog), which prints the warnings of
  /// planner::placementWarnings (the plan's node mapping against the
  /// hosts, common/cluster/Placement.h) and of a launcher that contradicts
  /// the shared-memory split (mpi::localRankMismatchWarning), and, with
  /// --log-placement, one line per rank in rank order
  ///   "placement: rank R on host H (node N), local rank L (SOURCE), pid P,
  ///   dp=.. tp=.., stage S"
  /// (N: the MPI node, numbered by lowest world rank; SOURCE: the launcher
  /// variable or MPI_COMM_TYPE_SHARED, "SOURCE; split: K" where they
  /// differ; S: the pp coordinate, 0 without pipeline) and the summary
  /// "placement: tp groups inside a host; dp groups across hosts". Hosts
  /// whose name appears on several MPI nodes are told apart as "H[node N]"
  /// (planner::hostLabels).
  /// Errors (a malformed launcher variable, an MPI failure) are agreed by
  /// all ranks (allRanksOk: the lowest failing rank prints
  /// "tessera-run: error: node-local rank: ...") before anything is
  /// gathered; returns false after one.
  bool checkPlacement();

  // The step loop and its hooks (see the file comment).
  void train();
  void setStepHypers(int64_t step);
  void maybeEvaluate(int64_t stepsDone);
  void printEvaluation(int64_t stepsDone) const;
  void maybeCheckpoint(int64_t stepsDone);

  // Checkpoints (TrainerCheckpoint.cpp). Collective; "" or this rank's
  // error, agreed by the caller.
  std::string checkCheckpointOptions() const;
  std::string prepareCheckpoints();
  std::string loadCheckpoint();
  /// Saves the state after `stepsDone` steps; on an agreed error sets
  /// `failed` (the error is printed).
  void saveCheckpoint(int64_t stepsDone);

  /// fp16 dynamic loss scaling: the state carried between steps.
  struct LossScaleState {
    std::optional<double> scale, skippedSteps;
  };
  LossScaleState readLossScale() const;
  void writeStepMetrics(int64_t s, double loss, double seconds,
                        double tokensPerS, bool gatherPeaks,
                        const std::vector<int64_t> &peaks,
                        const std::vector<double> &rankBytes,
                        const LossScaleState &before,
                        const LossScaleState &after);

  TrainerOptions opts;
  const mpi::Communicator *world = nullptr;

  // Opened before the first collective (destroyed after mpi::finalize).
  exec::BackendOptions backendOptions;
  std::unique_ptr<exec::Backend> backend;
  std::unique_ptr<exec::Plan> plan;
  std::optional<TokenDataset> dataset;
  std::optional<TokenDataset> evalDataset; ///< --eval-data
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<TensorDump> dump;

  // Collective objects (released before mpi::finalize).
  std::unique_ptr<mpi::Grid> grid;
  std::unique_ptr<exec::Executor> executor;

  // What the loop leaves for the reports after it.
  /// Rank 0: kMemFields fields of exec::MemoryUse per rank, last step.
  std::vector<int64_t> lastMemory;
  /// --profile: every step but the first (warm-up), unless only one runs.
  int64_t firstProfiled = 0;
  double profiledSeconds = 0;
  /// Extra values for the current step's metrics record, filled by the
  /// hooks (e.g. "eval_loss"); cleared before each step.
  std::vector<std::pair<std::string, double>> stepExtras;
  /// The validation loss maybeEvaluate computed after the current step.
  std::optional<double> lastEvalLoss;

  /// The learning rate of every step, set before it (plans with the
  /// "hyper" argument "lr"; unset for older artifacts).
  std::optional<LrSchedule> lrSchedule;
  /// The executor's slot of the "hyper" argument "lr" (Executor::hyperSlot,
  /// resolved once after the executor is made), or -1.
  int64_t lrSlot = -1;

  /// The first step to run: 0, or the step a --load checkpoint recorded.
  int64_t startStep = 0;
  /// Set when a collective phase (a checkpoint save) failed on some rank
  /// and every rank agreed (the error is printed): the loop stops and run()
  /// returns 1.
  bool failed = false;
  /// --save: who writes which shard (the same on every rank), and the step
  /// of the last checkpoint this run saved (-1: none).
  std::optional<ckpt::ShardPlan> shardPlan;
  int64_t lastSaved = -1;
};

/// Every rank passes its own error (empty if none). Returns true when no
/// rank failed; otherwise the lowest failing rank prints
/// "tessera-run: error: <error>" and all return false. Collective over
/// `world`.
bool allRanksOk(const mpi::Communicator &world, const std::string &error);

/// Prints `error` ("tessera-run: error: [rank R] ...") and aborts every rank
/// (for failures once ranks may be inside collectives).
[[noreturn]] void abortAll(const mpi::Communicator &world,
                           const std::string &error);

/// mpi::finalize, then 1 (the exit status after an agreed error).
int exitAfterFailure();

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_TRAINER_TRAINER_H

//===- tessera-run.cpp - run a compiled training plan on MPI ranks --------===//
//
// mpirun -np N tessera-run PLAN.tsr --data TOKENS.u16 --steps K
//     [--metrics FILE.jsonl] [--save-weights FILE.safetensors] [--log-every 1]
//     [--trace FILE.json] [--profile FILE.json] [--memory-per-device SIZE]
//     [--memory-report] [--backend cpu|cuda] [--collectives nccl|mpi]
//     [--cuda-graph] [--dump-tensors DIR] [--save-state FILE]
//     [--save DIR [--save-interval N] [--keep-last K]]
//     [--load DIR [--no-load-optim]]
//     [--lr X] [--min-lr X] [--lr-warmup-init X] [--lr-warmup-iters N]
//     [--lr-decay-style constant|linear|cosine|WSD] [--lr-decay-iters N]
//     [--lr-wsd-decay-iters N] [--lr-wsd-decay-style STYLE]

//     [--eval-data FILE [--eval-interval N] [--eval-iters K]]
//     [--log-placement]
// mpirun -np N tessera-run --calibrate [OUT.json] [--calibrate-quick] [--force]
//
// --calibrate measures this machine for the planner (see Calibrate.h) and
// writes the cluster JSON, by default where `--cluster cpu:N` reads it.
//
// Every rank loads the plan (see runtime/executor/Plan.h), takes its grid
// coordinates from its world rank (row-major over the manifest's rank order,
// its last axis fastest), slices its shards and runs K training steps on the
// global batches of the data file (DESIGN.md "Training-run conventions").
// Rank 0 prints progress and writes the metrics; --save-weights assembles the
// global parameters on rank 0.
//
// Pipeline plans (manifest "pipeline"): the grid's last axis `mb` counts
// micro-batches and is not a rank axis, so N is the product of the other
// axes (e.g. dp=1 x tp=2 x pp=2 with mb=4 needs 4 ranks); each rank runs its
// stage's share of the schedule (see runtime/executor/Executor.h). Metrics
// records then also hold "peak_activation_sets": one integer per rank, in
// world-rank order, and "bytes_<kind>_per_rank" for each collective kind
// (all_reduce, all_gather, reduce_scatter, all_to_all, send): every rank's
// bytes of that kind in the step, ring model, world-rank order (the stages
// of a pipeline differ, so rank 0's "bytes_<kind>" is not every rank's).
//
// --trace FILE writes, on rank 0 after the last step, every rank's timeline
// as Chrome trace JSON (viewable in Perfetto or chrome://tracing):
//   {"traceEvents": [{"name": "F1.3", "cat": "forward", "ph": "X",
//                     "pid": <world rank>, "tid": <stage>, "ts": <µs>,
//                     "dur": <µs>, "args": {"chunk", "micro_batch",
//                     "recv_wait_us", "stage", "step"}}, ...],
//  "displayTimeUnit": "ms"}
// with one event per forward ("F<chunk>.<micro-batch>", cat "forward"),
// backward ("B...", "backward") and apply ("apply", "apply"; micro_batch
// -1) of pipeline plans and one "step" event (cat "step"; chunk and
// micro_batch -1) per step for all plans, plus process/thread name metadata
// events ("ph": "M"). Times are microseconds since a barrier taken when the
// executor was created. recv_wait_us is the part of a forward or backward
// spent blocked on tsrt.recv (0 for other events): dur − recv_wait_us is the
// action's compute, and what is left of the step is the pipeline bubble
// (bench/pipeline_bubble.sh).
//
// --profile FILE writes, on rank 0 after the last step, where every rank's
// step time went, per instruction kind (torch.profiler's key_averages, per
// rank):
//   {"steps": S, "ranks": [{"rank": 0, "coords": "dp=0 tp=0", "step_s": s,
//    "executor_step_s": e,
//    "ops": [{"kind": "matmul", "calls_per_step": c,
//             "seconds_per_step": t, "cpu_seconds_per_step": u,
//             "bytes_per_step": b}, ...]},
//    ...]}
// (host wall seconds t and the rank's processor seconds u, its thread's
// CPU clock, per step over the S profiled steps, step 0 left out as
// warm-up; ops sorted by wall time; b the bytes the kind's calls read and
// wrote, each call's operands and results once, views and waits none). With
// ranks sharing cores, t − u is time the rank was descheduled inside the op
// (a collective's wait, spent partly spinning: u, partly yielding the core:
// t − u). e is the wall time of Executor::step itself (s also holds the
// trainer's data loading); two rows are not instructions: "executor", what
// the timed ops leave of e (the executor's own work: instruction dispatch,
// operand binding, result buffers, slicing the batch, swapping in the new
// state), and "profiler", the profiler's own clock reads (every timed op
// reads the wall and thread clocks twice: timed ops × their cost measured
// once at start), which is excluded from "executor".
//
// With --backend cuda the trace also holds, for the last step, one "X"
// event per kernel (tid 1000, thread "compute") and per collective (tid
// 1001, thread "comm") timed with CUDA events, named "<kernel> <op>"; args
// {"stream": "compute"|"comm", "step", "stage"}. They show a bucketed
// gradient all-reduce on the comm stream overlapping backward kernels.
//
// --backend cuda --collectives nccl|mpi: see --help and docs/CudaBackend.md
// ("Distributed").
//
// Memory: metrics records hold "peak_bytes", every rank's measured peak
// bytes of the step (exec::MemoryUse: persistent state + constants + arena
// high-water mark + peak heap bytes allocated in the step), to compare with
// the compiler's prediction in the manifest ("memory", see
// compiler/artifact/Memory.h); --memory-report prints both after the last
// step. --memory-per-device SIZE refuses, before the first step, a plan whose
// predicted peak exceeds SIZE.
//
// Errors found before the first step (options, plan, data, world size) are
// agreed on by all ranks: the lowest failing rank prints one line and every
// rank exits with status 1. A failure inside a step aborts the job
// (MPI_Abort) so no rank waits forever in a collective.
//
// A rank that dies or hangs is caught by a watchdog thread
// (runtime/collectives/mpi/Watchdog.h, --collective-timeout-s S, default
// 300, 0 = off): when a rank on this host dies while an MPI operation is in
// flight, or the operation runs longer than S seconds, every other rank
// prints one line naming the lost rank (or the timeout, and the ranks on
// this host that are stopped) and the operation's sequence number, and exits
// with status 1, even under a launcher that does not end the job itself.
// Start-up is covered too: a timer armed before MPI_Init ends the rank when
// MPI initialisation or the watchdog's first all_gather blocks S seconds
// ("rank R: start-up did not finish within S s ...: MPI initialisation
// (MPI_Init) blocked for S s; rank L (pid P) is stopped; aborting").
//
// Placement (issue 28): at start-up every rank's host, MPI node, node-local
// rank (from the launcher's OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID /
// MPI_LOCALRANKID, else the MPI shared-memory split:
// runtime/collectives/mpi/NodeLocal.h) and pid are gathered to rank 0,
// which checks them against the node mapping a --cluster plan promises and
// prints warnings (common/cluster/Placement.h gives their exact text);
// --log-placement also prints every rank's line.
//
// Test hook: TESSERA_FAULT_INJECT=RANK:MOMENT:SIGNAL[:COUNT] makes one rank
// SIGKILL or SIGSTOP itself at a moment of the run (runtime/FaultInject.h;
// test/e2e/fault_matrix.py, docs/FaultMatrix.md). A malformed value is an
// error.
//
// Learning rate: the plan's "hyper" argument "lr" is set before every step
// from the schedule (runtime/trainer/LrSchedule.h: Megatron-LM's
// OptimizerParamScheduler), and each metrics record holds "lr", the rate
// that step used. Without schedule flags it is the compiled lr throughout.
//
// --save / --load: distributed checkpoints, resume and resharding (see
// runtime/trainer/TrainerCheckpoint.cpp and docs/Checkpoint.md).
//
// The training job itself (the step loop, metrics, reports, checkpoints)
// is runtime/trainer/Trainer.h: main fills a TrainerOptions from the flags
// below and calls Trainer::run.
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"
#ifdef TESSERA_HAVE_NCCL
#include "NcclBench.h"
#endif

#include "common/cluster/Cluster.h"
#include "common/io/CommandLine.h"
#include "common/io/FileSafety.h"
#include "runtime/FaultInject.h"
#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/collectives/mpi/Watchdog.h"
#include "runtime/trainer/Trainer.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <optional>

using namespace tessera::runtime;
namespace cl = llvm::cl;

static cl::OptionCategory category("tessera-run options");

static cl::opt<std::string> planPath(
    cl::Positional,
    cl::desc("<plan.tsr>  the artifact written by tessera-partition: initial "
             "weights (global shapes), the runtime program and the manifest "
             "(grid, batch, shardings). With --calibrate: the JSON file to "
             "write (default: the cpu:N calibration file)"),
    cl::cat(category));

static cl::opt<bool> calibrateFlag(
    "calibrate",
    cl::desc("Measure this machine with all N ranks at once (GEMM FLOP/s over "
             "a table of shapes, elementwise bandwidth and per-kernel cost, "
             "exp/erf rate, alpha-beta of every collective; see "
             "tools/tessera-run/Calibrate.h) and write the cluster JSON "
             "(common/cluster/Cluster.h) to the positional path, or, "
             "without one, to $TESSERA_CALIBRATION_DIR/cpu-N.json (default "
             "directory $HOME/.cache/tessera), which tessera-partition "
             "--cluster cpu:N reads. Takes under a minute; needs no plan"),
    cl::init(false), cl::cat(category));
static cl::opt<bool> calibrateQuick(
    "calibrate-quick",
    cl::desc("--calibrate with a small GEMM table, few sizes and short "
             "trials (seconds; rough figures, for tests)"),
    cl::init(false), cl::cat(category));
static cl::opt<bool> benchCollectivesFlag(
    "bench-collectives",
    cl::desc("Time every collective of the CPU backend over all N ranks "
             "(all_reduce, all_gather, reduce_scatter, all_to_all, and a "
             "send/recv ring exchange) at message sizes from 1 KiB to 16 MiB "
             "and print, per size, the median time (us), algbw = S / time "
             "and busbw = algbw x the nccl-tests factor (GB/s), as "
             "nccl-tests does; needs no plan. --bench-max-bytes sets the "
             "largest size. With --backend cuda: the NCCL collectives on "
             "each rank's GPU instead (one GPU per rank; no send/recv row; "
             "each timed call waits for its stream). Errors: no CUDA device, "
             "NCCL initialisation, a build without NCCL"),
    cl::init(false), cl::cat(category));
static cl::opt<int64_t> benchMaxBytes(
    "bench-max-bytes",
    cl::desc("--bench-collectives: largest message size, bytes (>= 1024)"),
    cl::init(int64_t(1) << 24), cl::cat(category));

static cl::opt<bool>
    force("force",
          cl::desc("--calibrate: overwrite an existing calibration file"),
          cl::init(false), cl::cat(category));

static cl::opt<std::string> backendName(
    "backend",
    cl::desc(
        "Where the step runs: cpu (OpenBLAS kernels, MPI collectives; "
        "the default) or cuda (one GPU per rank: cuBLASLt GEMMs and "
        "Tessera's CUDA kernels on a compute stream; collectives as "
        "--collectives says). Error, before any step, when cuda is asked for "
        "and this build has no CUDA backend or no usable GPU exists (the "
        "driver's reason is printed)"),
    cl::value_desc("cpu|cuda"), cl::init("cpu"), cl::cat(category));

static cl::opt<std::string> collectivesName(
    "collectives",
    cl::desc("How collectives, sends and receives move data between ranks. "
             "--backend cuda: 'nccl' (the default; NCCL collectives on each "
             "GPU, on a communication stream that overlaps the compute "
             "stream; needs one GPU per rank: each rank takes device "
             "(node-local rank mod number of devices), and two ranks on one "
             "device are an error naming both ranks and the device, since "
             "NCCL refuses them: NCCL User Guide, usage/communicators.html) "
             "or 'mpi' (host staging: every collective copies its device "
             "tensors to the host, runs the MPI collective and copies the "
             "result back; several ranks may share a GPU; slow). --backend "
             "cpu: only 'mpi' (its tensors are in host memory); 'nccl' is an "
             "error. Tensors keep the plan's shapes and dtypes under both; "
             "NCCL sums bf16/f16 in its own order, so results agree with "
             "mpi to rounding. Errors, before any step: an unknown name, "
             "nccl with --backend cpu, or in a build without NCCL for a "
             "plan that communicates"),
    cl::value_desc("nccl|mpi"), cl::init(""), cl::cat(category));

static cl::opt<bool> cudaGraph(
    "cuda-graph",
    cl::desc("--backend cuda: record the training step once as a CUDA graph "
             "(after one eager warm-up step) and replay it every step, so "
             "the host launches one graph instead of every kernel. Error "
             "with another backend or a pipeline plan"),
    cl::init(false), cl::cat(category));

static cl::opt<std::string> dataPath(
    "data",
    cl::desc("Token data: a plain file of little-endian token ids (uint16, "
             "or --data-dtype uint32), or a Megatron-LM indexed dataset "
             "PREFIX (PREFIX.bin + PREFIX.idx; PREFIX.bin also names it). "
             "T tokens with T > seq_len + 1, all in [0, the model's "
             "vocabulary) (checked before the first step). Step s uses "
             "global samples n = s*B + j (0 <= j < B) starting at token "
             "(n*S) mod (T - S - 1); labels are the inputs shifted by one. "
             "An indexed dataset's token stream is its sequences "
             "concatenated in order (docs/DataFormats.md)"),
    cl::value_desc("tokens.u16"), cl::cat(category));

static cl::opt<std::string> dataDType(
    "data-dtype",
    cl::desc("Element type of a plain --data (and --eval-data) file: "
             "uint16 (default) or uint32 (vocabularies over 65,536 ids). An "
             "indexed dataset records its own; giving a different one is an "
             "error. Every id of both files is checked against the plan's "
             "vocabulary before the first step"),
    cl::value_desc("uint16|uint32"), cl::cat(category));

static cl::opt<int64_t>
    numSteps("steps",
             cl::desc("Number of training steps (>= 0); with --load the "
                      "total, counting the checkpoint's steps (Megatron-LM's "
                      "--train-iters)"),
             cl::value_desc("K"), cl::init(1), cl::cat(category));

static cl::opt<std::string> metricsPath(
    "metrics",
    cl::desc("Write one JSON object per step (rank 0): {\"step\" (0-based), "
             "\"loss\" (global mean cross-entropy, nats), \"step_time_s\" "
             "(wall-clock seconds), \"tokens_per_s\" (global B*S / "
             "step_time_s), \"bytes_sent\" and per kind \"bytes_all_reduce\", "
             "\"bytes_all_gather\", \"bytes_reduce_scatter\", "
             "\"bytes_all_to_all\", \"bytes_send\" (rank 0's collective and "
             "pipeline-send bytes, ring model), \"attention_scores_bytes\" "
             "(the largest score block an attention kernel allocated, "
             "rank 0; plans with attention), and for pipeline plans "
             "\"peak_activation_sets\" (per rank, world-rank order: the most "
             "micro-batch activation sets held at once) and "
             "\"bytes_<kind>_per_rank\" (per rank, world-rank order: that "
             "rank's bytes of each kind above), and \"peak_bytes\" "
             "(per rank, world-rank order: the bytes the rank held at its "
             "peak during the step, measured: persistent state + constants "
             "+ arena high-water mark + peak heap bytes allocated in the "
             "step), and for fp16 plans with dynamic loss scaling "
             "\"loss_scale\" (after the step: the scale the next step uses) "
             "and \"skipped\" (1 when a non-finite gradient skipped the "
             "step's update, else 0), \"lr\" (the learning rate the "
             "step used, from the LR schedule; plans with the \"hyper\" "
             "argument lr) and, for plans compiled with --clip-grad, "
             "\"grad_norm\" (the global L2 norm of the gradients before "
             "clipping)}"),
    cl::value_desc("metrics.jsonl"), cl::cat(category));

static cl::opt<std::string> memoryPerDevice(
    "memory-per-device",
    cl::desc("Refuse to start (exit 1 on every rank, before the first step) "
             "when the plan's predicted peak bytes per rank (the manifest's "
             "\"memory\", from tessera-partition) exceed SIZE, e.g. 80GB, "
             "512MiB, 1.5GB (kB/MB/GB/TB = powers of 1000, KiB/MiB/GiB/TiB = "
             "powers of 1024). Plans without a prediction (pipeline plans) "
             "are not checked"),
    cl::value_desc("SIZE"), cl::init(""), cl::cat(category));

static cl::opt<bool> memoryReport(
    "memory-report",
    cl::desc("After the last step, print (rank 0) every rank's measured peak "
             "bytes of the last step with its breakdown, and the plan's "
             "prediction"),
    cl::init(false), cl::cat(category));

static cl::opt<std::string> saveState(
    "save-state",
    cl::desc("After the last step, every rank writes its own shards of every "
             "parameter and optimizer-state tensor (local shapes, manifest "
             "names, f32) to FILE.rank<R>.safetensors (R its world rank): "
             "to compare training state bit for bit, e.g. that a step "
             "skipped by dynamic loss scaling changed nothing"),
    cl::value_desc("FILE"), cl::cat(category));
static cl::opt<std::string> saveWeights(
    "save-weights",
    cl::desc("After the last step, write every parameter and frozen tensor, "
             "global shape, ONNX names, f32, to this safetensors file "
             "(rank 0; written to FILE.tmp then renamed)"),
    cl::value_desc("weights.safetensors"), cl::cat(category));

static cl::opt<std::string> saveDir(
    "save",
    cl::desc("Write distributed checkpoints under DIR (Megatron-LM's "
             "--save): every --save-interval steps and after the last step, "
             "each rank's shards of the params, frozen tensors and optimizer "
             "state (fp32 masters; AdamW's exp_avg, exp_avg_sq, step; fp16 "
             "loss scaling's state) go to DIR/iter_NNNNNNN/"
             "rank_RRRRR.safetensors with one index.json (global shapes, "
             "dtypes, each shard's slices and file, the step, consumed "
             "samples, the plan; docs/Checkpoint.md), written to a .tmp "
             "folder that is renamed when complete, after which DIR/latest "
             "names it. A rank killed during a save leaves the previous "
             "checkpoint and latest intact. Errors: DIR cannot be created "
             "or written"),
    cl::value_desc("DIR"), cl::init(""), cl::cat(category));
static cl::opt<int64_t> saveInterval(
    "save-interval",
    cl::desc("With --save: a checkpoint after every N-th step (global step "
             "numbers); 0 (the default): only after the last step"),
    cl::value_desc("N"), cl::init(0), cl::cat(category));
static cl::opt<int64_t> keepLast(
    "keep-last",
    cl::desc("With --save: keep only the K newest checkpoints (never the "
             "one latest names); 0 (the default) keeps all"),
    cl::value_desc("K"), cl::init(0), cl::cat(category));
static cl::opt<std::string> loadDir(
    "load",
    cl::desc("Resume from a checkpoint (Megatron-LM's --load): DIR's "
             "`latest`, or DIR itself when it is an iter_NNNNNNN folder. "
             "The run continues at the checkpoint's step (the step counter "
             "and data position; --steps is the total), with its params, "
             "frozen tensors and optimizer state; each rank reads only the "
             "slices it needs, so a checkpoint saved under any plan (dp, tp, "
             "pp, sp, ZeRO, precision) loads under any other. Errors, before "
             "any step, naming the tensor: a tensor the model needs missing "
             "from the checkpoint, a param the model lacks, a shape or dtype "
             "mismatch; a missing or corrupt checkpoint names the file"),
    cl::value_desc("DIR"), cl::init(""), cl::cat(category));
static cl::opt<bool> noLoadOptim(
    "no-load-optim",
    cl::desc("With --load: load the params and frozen tensors only; the "
             "optimizer state starts at zeros (AdamW's step count too) "
             "while the step counter and data position continue from the "
             "checkpoint, as Megatron-LM's --no-load-optim"),
    cl::init(false), cl::cat(category));

// Learning-rate schedule: Megatron-LM's flags and OptimizerParamScheduler
// semantics (runtime/trainer/LrSchedule.h gives the exact formulas).
static cl::opt<double> lrFlag(
    "lr",
    cl::desc("Peak learning rate of the schedule (default: the plan's "
             "compiled optimizer lr, the manifest's \"optimizer\" \"lr\")"),
    cl::value_desc("X"), cl::cat(category));
static cl::opt<double> minLr(
    "min-lr",
    cl::desc("Learning rate after --lr-decay-iters (decay styles decay to "
             "it); default 0"),
    cl::value_desc("X"), cl::init(0), cl::cat(category));
static cl::opt<double> lrWarmupInit(
    "lr-warmup-init",
    cl::desc("Learning rate of step 0 of the warmup (default 0, Megatron's; "
             "torch LinearLR(start_factor=f) is f·lr)"),
    cl::value_desc("X"), cl::init(0), cl::cat(category));
static cl::opt<int64_t> lrWarmupIters(
    "lr-warmup-iters",
    cl::desc("Linear warmup over the first N steps: step k <= N uses "
             "init + (lr − init)·k/N (default 0: none)"),
    cl::value_desc("N"), cl::init(0), cl::cat(category));
static cl::opt<std::string> lrDecayStyle(
    "lr-decay-style",
    cl::desc("After the warmup: constant (the default), linear, cosine "
             "(Loshchilov & Hutter 2017, no restarts) or WSD "
             "(warmup-stable-decay, Hu et al. 2024, MiniCPM) down to "
             "--min-lr at --lr-decay-iters"),
    cl::value_desc("constant|linear|cosine|WSD"), cl::init("constant"),
    cl::cat(category));
static cl::opt<int64_t> lrDecayIters(
    "lr-decay-iters",
    cl::desc("Step at which the decay reaches --min-lr (default: --steps); "
             "later steps use --min-lr"),
    cl::value_desc("N"), cl::cat(category));
static cl::opt<int64_t>
    lrWsdDecayIters("lr-wsd-decay-iters",
                    cl::desc("WSD: the decay takes the last N steps before "
                             "--lr-decay-iters (required with WSD)"),
                    cl::value_desc("N"), cl::init(0), cl::cat(category));
static cl::opt<std::string> lrWsdDecayStyle(
    "lr-wsd-decay-style",
    cl::desc("WSD's decay: linear, cosine, exponential (the default, "
             "Megatron's) or minus_sqrt"),
    cl::value_desc("STYLE"), cl::init("exponential"), cl::cat(category));

static cl::opt<std::string> evalDataPath(
    "eval-data",
    cl::desc("Validation token file (the --data format). Every "
             "--eval-interval steps and after the last step, the plan's "
             "forward-only evaluation function (no dropout, no update) "
             "computes the loss of --eval-iters batches: batch k is the "
             "training sampling formula's batch of step k on this file, so "
             "every evaluation sees the same batches; their mean is printed "
             "('validation loss at iteration N | lm loss value: X | lm loss "
             "PPL: Y |', Megatron-LM's line) and recorded as \"eval_loss\" in "
             "step N-1's --metrics record. Not supported for pipeline plans "
             "(error)"),
    cl::value_desc("valid.u16"), cl::cat(category));

static cl::opt<int64_t>
    evalInterval("eval-interval",
                 cl::desc("With --eval-data: evaluate after every N-th "
                          "training step (>= 1; Megatron-LM's default 1000) "
                          "and after the last"),
                 cl::value_desc("N"), cl::init(1000), cl::cat(category));

static cl::opt<int64_t>
    evalIters("eval-iters",
              cl::desc("With --eval-data: batches per evaluation (>= 1; "
                       "Megatron-LM's default 100)"),
              cl::value_desc("K"), cl::init(100), cl::cat(category));

static cl::opt<int64_t> logEvery(
    "log-every",
    cl::desc("Print 'step N | loss X | T tok/s' on rank 0 every N steps "
             "(and after the last step); 0 prints nothing"),
    cl::value_desc("N"), cl::init(1), cl::cat(category));

static cl::opt<std::string> tracePath(
    "trace",
    cl::desc("After the last step, write every rank's timeline to this file "
             "(rank 0) as Chrome trace JSON for Perfetto: one \"X\" event "
             "per step (cat \"step\") and, for pipeline plans, per "
             "forward/backward action (\"F<chunk>.<micro-batch>\") and apply; "
             "pid = world rank, tid = pipeline stage, ts/dur in microseconds "
             "since a barrier before the first step. --backend cuda adds, "
             "for the last step, one event per kernel (thread \"compute\", "
             "tid 1000) and per collective (thread \"comm\", tid 1001) "
             "timed with CUDA events"),
    cl::value_desc("trace.json"), cl::cat(category));

static cl::opt<std::string> profilePath(
    "profile",
    cl::desc("After the last step, write every rank's per-instruction "
             "profile to this file (rank 0) as JSON: for each instruction "
             "kind (tsrt kernel or op: \"matmul\", \"all_reduce\", "
             "\"recv\", ...; pipeline plans add \"pipeline.accumulate\", "
             "\"pipeline.complete_sends\" and \"pipeline.loss_broadcast\"), "
             "its calls, host wall seconds, the rank's processor seconds "
             "(its thread's CPU clock) and the bytes its calls read and "
             "wrote (operands and results once each; views none) per step, "
             "sorted by wall time, next "
             "to the rank's mean step seconds; with ranks sharing cores, wall "
             "minus processor seconds is time the rank was descheduled. The "
             "row \"executor\" is the executor's own time (the step's wall "
             "time inside the executor less its instructions' and the "
             "profiler's), \"profiler\" the profiler's own clock reads "
             "(excluded from the others' rows as far as measured). Step "
             "0 is left out as warm-up "
             "when more than one step runs. A collective's time includes its "
             "wait for the other ranks; on --backend cuda a kernel's time is "
             "its launch, not its device time. Errors: the file cannot be "
             "written"),
    cl::value_desc("profile.json"), cl::cat(category));

static cl::opt<double> collectiveTimeout(
    "collective-timeout-s",
    cl::desc("Seconds any one collective or point-to-point MPI operation may "
             "block before the rank gives up (0 turns the watchdog off). A "
             "watchdog thread checks every 100 ms that the operation in "
             "flight has not run longer than this and that no rank on this "
             "host has died; otherwise it prints 'tessera-run: error: rank "
             "R: lost rank L ... during collective #N (...)' or '... "
             "collective #N (...) timed out after S s' and exits with status "
             "1, so the job ends on every rank instead of hanging (ranks on "
             "other hosts are caught by the timeout). #N counts the blocking "
             "MPI operations of the process from 1. Start-up is covered too: "
             "MPI initialisation or the watchdog's first all_gather blocking "
             "this long ends the rank with 'rank R: start-up did not finish "
             "within S s ...', naming the ranks of the job on this host that "
             "are stopped, exited or missing"),
    cl::value_desc("S"), cl::init(300), cl::cat(category));

static cl::opt<bool> logPlacement(
    "log-placement",
    cl::desc("At start-up, print on rank 0 one line per rank, in rank order: "
             "'placement: rank R on host H (node N), local rank L (SOURCE), "
             "pid P, dp=.. tp=.., stage S' (H: gethostname; N: the MPI node, "
             "the rank's MPI_COMM_TYPE_SHARED group numbered by its lowest "
             "rank; L: the node-local rank that picks the GPU, SOURCE the "
             "launcher variable it came from, OMPI_COMM_WORLD_LOCAL_RANK, "
             "SLURM_LOCALID or MPI_LOCALRANKID, else MPI_COMM_TYPE_SHARED; "
             "S: the pipeline stage), then 'placement: tp groups inside a "
             "host; dp groups across hosts'. Without it the check still "
             "runs: a plan compiled with --cluster promises ranks per node, "
             "and a node-local axis whose group spans hosts, or a host that "
             "does not hold exactly one node's ranks, is a warning on rank 0 "
             "(common/cluster/Placement.h). A malformed launcher variable is "
             "an error"),
    cl::init(false), cl::cat(category));

static cl::opt<std::string> dumpTensors(
    "dump-tensors",
    cl::desc("For tessera-check: write every result of every kernel that "
             "carries a tsrt.trace id (only programs tessera-check compiles "
             "have them) of every step to DIR/rank<R>.bin, raw bytes, with "
             "the index DIR/rank<R>.json: the rank's grid axes, coordinates "
             "and grid shape, and per tensor its step, trace id, result "
             "index, dtype, local shape and byte offset (docs/Check.md). Off "
             "by default (one branch per instruction)"),
    cl::value_desc("DIR"), cl::init(""), cl::cat(category));

static const char *kOverview =
    "Tessera training runtime: runs a compiled plan on MPI ranks.\n"
    "\n"
    "  mpirun -np N tessera-run PLAN.tsr --data TOKENS.u16 --steps K\n"
    "  mpirun -np N tessera-run --calibrate [OUT.json] [--force]\n"
    "\n"
    "N must equal the product of the plan's grid (e.g. dp=2 x tp=2 needs 4).\n"
    "For pipeline plans the micro-batch axis is not counted (dp=1 x tp=2 x\n"
    "pp=2 with 4 micro-batches needs 4 ranks).\n"
    "Steps are numbered from 0. Exit status: 0 on success, 1 on any error\n"
    "(bad option, missing or corrupt plan or data file, wrong number of\n"
    "ranks, failure inside a step, unwritable output); the error is printed\n"
    "once, as 'tessera-run: error: ...', naming the file at fault.\n"
    "Files: before anything runs, every output (--metrics, --trace,\n"
    "--profile, --save-weights, --save-state, --save, --dump-tensors) is\n"
    "checked against the plan, the data and every other output by device\n"
    "and inode (a symlink or hard link to the plan is refused too); only\n"
    "regular files (or /dev/null) are written, whole files atomically (a\n"
    "temporary file renamed over the old one), --metrics one whole line per\n"
    "write; the plan and data must be regular files (a FIFO or /dev/zero is\n"
    "an error). See common/io/FileSafety.h.\n"
    "If a rank dies or a collective blocks longer than --collective-timeout-s\n"
    "(default 300 s), every other rank exits with status 1 naming the lost\n"
    "rank or the collective's sequence number; MPI start-up is under the same\n"
    "timeout.\n"
    "Placement: a plan compiled with --cluster promises ranks per node; at\n"
    "start-up rank 0 warns (one line each, naming the axis, group and hosts)\n"
    "when a node-local axis's group spans hosts or a host does not hold one\n"
    "node's ranks. --log-placement prints every rank's host and local rank.\n";

namespace {

/// --calibrate: measures (collective over `world`) and writes the cluster
/// JSON on rank 0. Refuses, before measuring, to overwrite an existing file
/// without --force.
int runCalibration(const mpi::Communicator &world) {
  bool isRoot = world.rank() == 0;
  std::string out = planPath.empty()
                        ? tessera::planner::calibrationPath(world.size())
                        : planPath.getValue();
  std::string error;
  if (isRoot) {
    llvm::StringRef dir = llvm::sys::path::parent_path(out);
    std::string kind = llvm::sys::fs::exists(out)
                           ? tessera::io::describeNonRegular(out)
                           : std::string();
    if (llvm::sys::fs::is_directory(out))
      error = "--calibrate: '" + out + "' is a directory";
    else if (!kind.empty())
      error = "--calibrate: '" + out + "' is " + kind + ", not a regular file";
    else if (llvm::sys::fs::exists(out) && !force)
      error = "--calibrate: '" + out + "' exists; pass --force to overwrite it";
    else if (planPath.empty() && !dir.empty()) {
      if (std::error_code ec = llvm::sys::fs::create_directories(dir))
        error =
            "--calibrate: cannot create '" + dir.str() + "': " + ec.message();
    } else if (!dir.empty() && !llvm::sys::fs::is_directory(dir))
      error = "--calibrate: cannot write '" + out + "': directory '" +
              dir.str() + "' does not exist";
  }
  if (!allRanksOk(world, error))
    return exitAfterFailure();

  calibrate::Options options;
  options.quick = calibrateQuick;
  options.log = &llvm::outs();
  llvm::Expected<tessera::planner::Cluster> cluster =
      calibrate::measure(world, options);
  error = cluster ? "" : llvm::toString(cluster.takeError());
  if (error.empty() && isRoot) {
    // Atomically; never over a device node or other non-regular file
    // (common/io/FileSafety.h).
    llvm::Error err = tessera::io::writeFileAtomically(
        "--calibrate", out, [&](llvm::raw_ostream &os) {
          os << llvm::formatv("{0:2}", tessera::planner::toJSON(*cluster))
             << "\n";
          return llvm::Error::success();
        });
    std::string ec = err ? llvm::toString(std::move(err)) : "";
    if (!ec.empty())
      error = ec;
    else
      llvm::outs() << "wrote " << out << " (" << cluster->name
                   << "; use it with tessera-partition --cluster "
                   << (planPath.empty() ? cluster->name : out) << ")\n";
  }
  if (!allRanksOk(world, error))
    return exitAfterFailure();
  mpi::finalize();
  return 0;
}

/// --bench-collectives: the collective bandwidth table (collective over
/// `world`), on MPI or, with --backend cuda, on NCCL.
int runBenchCollectives(const mpi::Communicator &world) {
  std::string error;
  calibrate::BenchOptions options;
  options.maxBytes = benchMaxBytes;
  options.out = &llvm::outs();
  // --backend cuda: the same table on NCCL (NcclBench.h).
  std::optional<calibrate::BenchOps> ops;
  if (benchMaxBytes < options.minBytes) {
    error = "--bench-max-bytes must be >= 1024";
  } else if (backendName == "cuda") {
#ifdef TESSERA_HAVE_NCCL
    llvm::Expected<calibrate::BenchOps> nccl = calibrate::ncclBenchOps(world);
    if (nccl)
      ops = std::move(*nccl);
    else
      error = "--bench-collectives --backend cuda: " +
              llvm::toString(nccl.takeError());
#else
    error = "--bench-collectives --backend cuda: this tessera-run was "
            "built without NCCL";
#endif
  } else if (backendName != "cpu") {
    error = "--bench-collectives: unknown backend '" + backendName +
            "' (expected cpu or cuda)";
  }
  if (!allRanksOk(world, error))
    return exitAfterFailure();
  if (llvm::Error err =
          calibrate::benchCollectives(world, options, ops ? &*ops : nullptr))
    error = "--bench-collectives: " + llvm::toString(std::move(err));
  if (!allRanksOk(world, error))
    return exitAfterFailure();
  mpi::finalize();
  return 0;
}

/// The TrainerOptions the flags give (each group of flags fills its part).
TrainerOptions optionsFromFlags() {
  TrainerOptions o;
  // The job.
  o.planPath = planPath;
  o.dataPath = dataPath;
  o.dataDType = dataDType;
  o.steps = numSteps;
  o.backendName = backendName;
  if (collectivesName.getNumOccurrences())
    o.collectives = collectivesName.getValue();
  o.cudaGraph = cudaGraph;
  o.collectiveTimeoutS = collectiveTimeout;
  o.logPlacement = logPlacement;
  if (memoryPerDevice.getNumOccurrences())
    o.memoryPerDevice = memoryPerDevice.getValue();
  // Per-step output.
  o.metricsPath = metricsPath;
  o.logEvery = logEvery;
  // Evaluation.
  o.evalDataPath = evalDataPath;
  if (evalInterval.getNumOccurrences())
    o.evalInterval = evalInterval.getValue();
  if (evalIters.getNumOccurrences())
    o.evalIters = evalIters.getValue();
  // Reports after the last step.
  o.tracePath = tracePath;
  o.profilePath = profilePath;
  o.memoryReport = memoryReport;
  o.dumpTensors = dumpTensors;
  // Final weights and state.
  o.saveWeights = saveWeights;
  o.saveState = saveState;
  // Checkpoints.
  o.saveDir = saveDir;
  o.saveInterval = saveInterval;
  o.keepLast = keepLast;
  o.loadDir = loadDir;
  o.noLoadOptim = noLoadOptim;
  // Learning-rate schedule.
  if (lrFlag.getNumOccurrences())
    o.lr = lrFlag.getValue();
  o.minLr = minLr;
  o.lrWarmupInit = lrWarmupInit;
  o.lrWarmupIters = lrWarmupIters;
  o.lrDecayStyle = lrDecayStyle;
  if (lrDecayIters.getNumOccurrences())
    o.lrDecayIters = lrDecayIters.getValue();
  o.lrWsdDecayIters = lrWsdDecayIters;
  o.lrWsdDecayStyle = lrWsdDecayStyle;
  for (const cl::Option *flag : std::initializer_list<const cl::Option *>{
           &lrFlag, &minLr, &lrWarmupInit, &lrWarmupIters, &lrDecayStyle,
           &lrDecayIters, &lrWsdDecayIters, &lrWsdDecayStyle})
    o.lrScheduleRequested |= flag->getNumOccurrences() > 0;
  return o;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  tessera::io::parseCommandLine(argc, argv, kOverview);

  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    cpu::setBlasThreads(1);

  // The fault-injection test hook (runtime/FaultInject.h), read once.
  if (llvm::Error err = fault::initFromEnvironment(
          std::max(mpi::watchdog::launcherRank(), 0))) {
    llvm::errs() << "tessera-run: error: " << llvm::toString(std::move(err))
                 << "\n";
    return 1;
  }
  // Start-up under the timeout: MPI_Init and the watchdog's own all_gather
  // (Watchdog.h, "Start-up"); the watchdog thread takes over once it runs.
  bool training = !(calibrateFlag || calibrateQuick || benchCollectivesFlag);
  if (training)
    mpi::watchdog::armStartup(collectiveTimeout, "tessera-run");
  if (llvm::Error err = mpi::initialize(&argc, &argv)) {
    llvm::errs() << "tessera-run: error: " << llvm::toString(std::move(err))
                 << "\n";
    return 1;
  }
  mpi::Communicator world = mpi::Communicator::world();
  if (calibrateFlag || calibrateQuick)
    return runCalibration(world);
  if (benchCollectivesFlag)
    return runBenchCollectives(world);

  // The training job (collective; finalizes MPI).
  Trainer trainer(optionsFromFlags());
  return trainer.run(world);
}

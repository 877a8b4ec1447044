//===- tessera-run.cpp - run a compiled training plan on MPI ranks --------===//
//
// mpirun -np N tessera-run PLAN.tsr --data TOKENS.u16 --steps K
//     [--metrics FILE.jsonl] [--save-weights FILE.safetensors] [--log-every 1]
//     [--trace FILE.json] [--profile FILE.json] [--memory-per-device SIZE]
//     [--memory-report] [--backend cpu|cuda] [--collectives nccl|mpi]
//     [--cuda-graph] [--dump-tensors DIR] [--save-state FILE]
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
//    "ops": [{"kind": "matmul", "calls_per_step": c,
//             "seconds_per_step": t, "cpu_seconds_per_step": u}, ...]},
//    ...]}
// (host wall seconds t and the rank's processor seconds u, its thread's
// CPU clock, per step over the S profiled steps, step 0 left out as
// warm-up; ops sorted by wall time). With ranks sharing cores, t − u is
// time the rank was descheduled inside the op (a collective's wait, spent
// partly spinning: u, partly yielding the core: t − u). What the ops leave of
// step_s is the executor's own work (slicing the batch, copying the new state).
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
// prints one line naming the lost rank (or the timeout) and the operation's
// sequence number, and exits with status 1, even under a launcher that does
// not end the job itself.
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"
#include "TensorDump.h"
#ifdef TESSERA_HAVE_NCCL
#include "NcclBench.h"
#endif

#include "common/cluster/Cluster.h"
#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/collectives/mpi/Watchdog.h"
#include "runtime/data/TokenDataset.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/Executor.h"
#include "runtime/executor/Layout.h"
#include "runtime/executor/Plan.h"
#include "runtime/metrics/ByteSize.h"
#include "runtime/metrics/Metrics.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
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
    cl::desc("Token file: little-endian uint16 token ids, T tokens with "
             "T > seq_len + 1. Step s uses global samples n = s*B + j "
             "(0 <= j < B) starting at token (n*S) mod (T - S - 1); labels "
             "are the inputs shifted by one"),
    cl::value_desc("tokens.u16"), cl::cat(category));

static cl::opt<int64_t>
    numSteps("steps", cl::desc("Number of training steps to run (>= 0)"),
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
             "step's update, else 0), and for plans compiled with "
             "--clip-grad \"grad_norm\" (the global L2 norm of the "
             "gradients before clipping)}"),
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
             "its calls, host wall seconds and the rank's processor seconds "
             "(its thread's CPU clock) per step, sorted by wall time, next "
             "to the rank's mean step seconds; with ranks sharing cores, wall "
             "minus processor seconds is time the rank was descheduled. Step "
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
             "MPI operations of the process from 1"),
    cl::value_desc("S"), cl::init(300), cl::cat(category));

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
    "If a rank dies or a collective blocks longer than --collective-timeout-s\n"
    "(default 300 s), every other rank exits with status 1 naming the lost\n"
    "rank or the collective's sequence number.\n";

namespace {

/// Every rank passes its own error (empty if none). Returns true when no rank
/// failed; otherwise the lowest failing rank prints its error and all return
/// false. Collective over `world`.
bool allRanksOk(const mpi::Communicator &world, const std::string &error) {
  int mine = error.empty() ? INT_MAX : world.rank();
  int first = INT_MAX;
  int rc;
  {
    mpi::watchdog::Guard guard("all_reduce of the error check", world.size());
    rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world.handle());
  }
  if (rc != MPI_SUCCESS) {
    llvm::errs() << "tessera-run: error: MPI_Allreduce failed\n";
    MPI_Abort(world.handle(), 1);
  }
  if (first == INT_MAX)
    return true;
  if (first == world.rank()) {
    llvm::errs() << "tessera-run: error: " << error << "\n";
    llvm::errs().flush();
  }
  return false;
}

/// Prints `err` and aborts every rank (for failures once ranks may be inside
/// collectives).
[[noreturn]] void abortAll(const mpi::Communicator &world,
                           const std::string &error) {
  llvm::errs() << "tessera-run: error: ";
  if (world.size() > 1)
    llvm::errs() << "[rank " << world.rank() << "] ";
  llvm::errs() << error << "\n";
  llvm::errs().flush();
  MPI_Abort(world.handle(), 1);
  std::exit(1);
}

/// Returns the first error message and consumes `err` (empty if success).
std::string take(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

int exitAfterFailure() {
  mpi::finalize();
  return 1;
}

/// Writes `value` and a newline to `path`; returns "" or the error,
/// "cannot write the <what> '<path>': <reason>".
std::string writeJson(const std::string &path, llvm::json::Value value,
                      llvm::StringRef what) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return ("cannot write the " + what + " '" + path + "': " + ec.message())
        .str();
  os << value << "\n";
  os.close();
  if (os.has_error()) {
    std::string msg = ("cannot write the " + what + " '" + path +
                       "': " + os.error().message())
                          .str();
    os.clear_error();
    return msg;
  }
  return "";
}

/// Every rank's `mine` gathered on rank 0 (MPI_Gather of the counts, then
/// MPI_Gatherv): `all` concatenates them in rank order, rank r's at
/// displs[r], counts[r] elements (all empty on other ranks). Collective over
/// `world`; `what` ("--trace", "--profile") names the option in the errors,
/// which abort the job: more than INT_MAX elements, an MPI failure.
template <typename T> struct Gathered {
  std::vector<T> all;
  std::vector<int> counts, displs;
};
template <typename T>
Gathered<T> gatherOnRoot(const mpi::Communicator &world,
                         const std::vector<T> &mine, MPI_Datatype type,
                         const std::string &what) {
  if (mine.size() > static_cast<size_t>(INT_MAX))
    abortAll(world, what + ": too much to gather");
  int count = static_cast<int>(mine.size());
  bool isRoot = world.rank() == 0;
  Gathered<T> g;
  g.counts.assign(isRoot ? world.size() : 0, 0);
  g.displs.assign(isRoot ? world.size() : 0, 0);
  {
    mpi::watchdog::Guard guard("gather", world.size());
    if (MPI_Gather(&count, 1, MPI_INT, g.counts.data(), 1, MPI_INT, 0,
                   world.handle()) != MPI_SUCCESS)
      abortAll(world, what + ": MPI_Gather of the sizes failed");
  }
  int64_t total = 0;
  for (int r = 0; r < static_cast<int>(g.counts.size()); ++r) {
    g.displs[r] = static_cast<int>(total);
    total += g.counts[r];
    if (total > INT_MAX)
      abortAll(world, what + ": too much to gather");
  }
  g.all.resize(isRoot ? total : 0);
  {
    mpi::watchdog::Guard guard("gather", world.size());
    if (MPI_Gatherv(mine.data(), count, type, g.all.data(), g.counts.data(),
                    g.displs.data(), type, 0, world.handle()) != MPI_SUCCESS)
      abortAll(world, what + ": MPI_Gatherv failed");
  }
  return g;
}

/// Gathers every rank's --profile (KernelStats::opTimes over `steps`
/// profiled steps of `stepSeconds` in all) on rank 0 and writes it there as
/// JSON: {"steps": S, "ranks": [{"rank", "coords", "step_s", "ops":
/// [{"kind", "calls_per_step", "seconds_per_step", "cpu_seconds_per_step"},
/// ...]}]}, each rank's ops
/// sorted by time, most first. Collective over `world`. Returns an error
/// message (on rank 0 only) or "".
std::string writeProfile(const mpi::Communicator &world,
                         const exec::Executor &executor,
                         const exec::Manifest &m, int64_t steps,
                         double stepSeconds, const std::string &path) {
  namespace json = llvm::json;
  const double perStep = steps > 0 ? 1.0 / static_cast<double>(steps) : 0;
  std::vector<std::pair<std::string, exec::ExecContext::KernelStats::OpTime>>
      ops;
  for (const auto &e : executor.kernelStats().opTimes)
    ops.emplace_back(e.getKey().str(), e.getValue());
  llvm::sort(ops, [](const auto &a, const auto &b) {
    return a.second.seconds != b.second.seconds
               ? a.second.seconds > b.second.seconds
               : a.first < b.first;
  });
  json::Array opList;
  for (const auto &[kind, t] : ops)
    opList.push_back(
        json::Object{{"kind", kind},
                     {"calls_per_step", static_cast<double>(t.calls) * perStep},
                     {"seconds_per_step", t.seconds * perStep},
                     {"cpu_seconds_per_step", t.cpuSeconds * perStep}});
  std::string coords;
  std::vector<std::string> axes = m.rankAxes();
  for (size_t a = 0; a < axes.size(); ++a)
    coords +=
        (a ? " " : "") + axes[a] + "=" + std::to_string(executor.coords()[a]);
  std::string mine;
  llvm::raw_string_ostream(mine)
      << json::Value(json::Object{{"rank", world.rank()},
                                  {"coords", coords},
                                  {"step_s", stepSeconds * perStep},
                                  {"ops", std::move(opList)}});

  Gathered<char> g =
      gatherOnRoot(world, std::vector<char>(mine.begin(), mine.end()), MPI_CHAR,
                   "--profile");
  if (world.rank() != 0)
    return "";
  json::Array ranks;
  for (int r = 0; r < world.size(); ++r) {
    llvm::Expected<json::Value> v =
        json::parse(llvm::StringRef(g.all.data() + g.displs[r], g.counts[r]));
    if (!v)
      return "--profile: rank " + std::to_string(r) +
             " sent a malformed profile: " + llvm::toString(v.takeError());
    ranks.push_back(std::move(*v));
  }
  return writeJson(path,
                   json::Object{{"steps", steps}, {"ranks", std::move(ranks)}},
                   "profile");
}

/// Gathers every rank's trace events on rank 0 and writes them there as
/// Chrome trace JSON (see the file comment). Collective over `world`. Returns
/// an error message (on rank 0 only) or "".
std::string writeTrace(const mpi::Communicator &world,
                       const exec::Executor &executor, const exec::Manifest &m,
                       const exec::Backend &backend, const std::string &path) {
  // Eight doubles per event: kind, chunk, micro-batch, stage, step, start,
  // end, receive wait. Device intervals (--backend cuda, last step) use
  // kind kDeviceKind + stream and carry the backend's name id as chunk.
  constexpr int kFields = 8;
  constexpr double kDeviceKind = 100;
  std::vector<double> mine;
  for (const exec::TraceEvent &e : executor.traceEvents())
    mine.insert(mine.end(),
                {static_cast<double>(e.kind), static_cast<double>(e.chunk),
                 static_cast<double>(e.microBatch),
                 static_cast<double>(e.stage), static_cast<double>(e.step),
                 e.start, e.end, e.recvWait});
  for (const exec::DeviceTraceEvent &e : executor.deviceTrace())
    mine.insert(mine.end(),
                {kDeviceKind + e.stream, static_cast<double>(e.name), -1,
                 static_cast<double>(executor.stage()),
                 static_cast<double>(executor.stepsRun() - 1), e.start, e.end,
                 0});
  Gathered<double> g = gatherOnRoot(world, mine, MPI_DOUBLE, "--trace");
  const std::vector<double> &all = g.all;
  const std::vector<int> &counts = g.counts, &displs = g.displs;
  // Every rank's device interval names ('\n'-separated; the ranks of a
  // pipeline run different programs, so each names its own).
  std::string myNames;
  for (const std::string &n : backend.deviceTraceNames())
    myNames += n + "\n";
  Gathered<char> names =
      gatherOnRoot(world, std::vector<char>(myNames.begin(), myNames.end()),
                   MPI_CHAR, "--trace");
  std::vector<std::vector<std::string>> namesOf(names.counts.size());
  for (int r = 0; r < static_cast<int>(namesOf.size()); ++r) {
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(names.all.data() + names.displs[r], names.counts[r])
        .split(parts, '\n', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef part : parts)
      namesOf[r].push_back(part.str());
  }
  if (world.rank() != 0)
    return "";

  namespace json = llvm::json;
  json::Array events;
  std::vector<std::string> axes = m.rankAxes();
  std::vector<int64_t> shape = m.rankShape();
  for (int r = 0; r < world.size(); ++r) {
    std::vector<int64_t> coords =
        exec::gridCoords(r, shape, m.rankOrderIndices());
    std::string name = "rank " + std::to_string(r) + " (";
    for (size_t a = 0; a < axes.size(); ++a)
      name += (a ? " " : "") + axes[a] + "=" + std::to_string(coords[a]);
    name += ")";
    int64_t stage = m.isPipeline() ? coords[m.ppAxis] : 0;
    events.push_back(json::Object{{"name", "process_name"},
                                  {"ph", "M"},
                                  {"pid", r},
                                  {"args", json::Object{{"name", name}}}});
    events.push_back(json::Object{
        {"name", "thread_name"},
        {"ph", "M"},
        {"pid", r},
        {"tid", stage},
        {"args", json::Object{{"name", "stage " + std::to_string(stage)}}}});
    bool deviceThreads = false;
    for (int i = displs[r]; i < displs[r] + counts[r]; i += kFields) {
      if (all[i] >= kDeviceKind) {
        // A device interval: tid 1000 + stream, named "compute" / "comm".
        int stream = static_cast<int>(all[i] - kDeviceKind);
        const char *streamName = stream == 0 ? "compute" : "comm";
        if (!deviceThreads) {
          for (int t = 0; t < 2; ++t)
            events.push_back(json::Object{
                {"name", "thread_name"},
                {"ph", "M"},
                {"pid", r},
                {"tid", 1000 + t},
                {"args", json::Object{{"name", t == 0 ? "compute" : "comm"}}}});
          deviceThreads = true;
        }
        size_t id = static_cast<size_t>(all[i + 1]);
        events.push_back(json::Object{
            {"name", id < namesOf[r].size() ? namesOf[r][id] : "?"},
            {"cat", streamName},
            {"ph", "X"},
            {"pid", r},
            {"tid", 1000 + stream},
            {"ts", all[i + 5] * 1e6},
            {"dur", (all[i + 6] - all[i + 5]) * 1e6},
            {"args",
             json::Object{{"stream", streamName},
                          {"step", static_cast<int64_t>(all[i + 4])},
                          {"stage", static_cast<int64_t>(all[i + 3])}}}});
        continue;
      }
      exec::TraceEvent e;
      e.kind = static_cast<exec::TraceEvent::Kind>(all[i]);
      e.chunk = static_cast<int64_t>(all[i + 1]);
      e.microBatch = static_cast<int64_t>(all[i + 2]);
      e.stage = static_cast<int64_t>(all[i + 3]);
      e.step = static_cast<int64_t>(all[i + 4]);
      e.start = all[i + 5];
      e.end = all[i + 6];
      e.recvWait = all[i + 7];
      events.push_back(
          json::Object{{"name", e.name()},
                       {"cat", exec::TraceEvent::kindName(e.kind)},
                       {"ph", "X"},
                       {"pid", r},
                       {"tid", e.stage},
                       {"ts", e.start * 1e6},
                       {"dur", (e.end - e.start) * 1e6},
                       {"args", json::Object{{"chunk", e.chunk},
                                             {"micro_batch", e.microBatch},
                                             {"recv_wait_us", e.recvWait * 1e6},
                                             {"stage", e.stage},
                                             {"step", e.step}}}});
    }
  }
  return writeJson(path,
                   json::Object{{"traceEvents", std::move(events)},
                                {"displayTimeUnit", "ms"}},
                   "trace");
}

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
    if (llvm::sys::fs::exists(out) && !force)
      error = "--calibrate: '" + out + "' exists; pass --force to overwrite it";
    else if (llvm::sys::fs::is_directory(out))
      error = "--calibrate: '" + out + "' is a directory";
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
    std::string tmp = out + ".tmp";
    std::error_code ec;
    {
      llvm::raw_fd_ostream os(tmp, ec);
      if (!ec) {
        os << llvm::formatv("{0:2}", tessera::planner::toJSON(*cluster))
           << "\n";
        os.close();
        if (os.has_error()) {
          ec = os.error();
          os.clear_error();
        }
      }
    }
    if (!ec)
      ec = llvm::sys::fs::rename(tmp, out);
    if (ec)
      error = "--calibrate: cannot write '" + out + "': " + ec.message();
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

/// What a training run opens before its first collective. Destroyed in
/// reverse order, after mpi::finalize.
struct Job {
  exec::BackendOptions backendOptions;
  std::unique_ptr<exec::Backend> backend;
  std::unique_ptr<exec::Plan> plan;
  std::optional<TokenDataset> dataset;
  std::unique_ptr<MetricsWriter> metrics;
};

/// The option errors a rank can see alone; "" if none.
std::string checkOptions(bool timeoutOk) {
  if (planPath.empty())
    return "no plan given (tessera-run PLAN.tsr --data TOKENS.u16, or "
           "--calibrate)";
  if (dataPath.empty())
    return "--data TOKENS.u16 is required";
  if (numSteps < 0)
    return "--steps must be >= 0";
  if (logEvery < 0)
    return "--log-every must be >= 0";
  if (!timeoutOk)
    return "--collective-timeout-s must be a number of seconds >= 0 (0: no "
           "watchdog)";
  return "";
}

/// The static memory plan's prediction against --memory-per-device; ""
/// or the error.
std::string checkMemoryPerDevice(const exec::Manifest &m, bool isRoot) {
  llvm::Expected<int64_t> limit = parseByteSize(memoryPerDevice);
  int64_t predicted = m.predictedPeakBytes;
  if (!limit)
    return "--memory-per-device: " + llvm::toString(limit.takeError());
  if (predicted > *limit)
    return planPath + " needs " + formatByteSize(predicted) +
           " per rank (predicted peak) but --memory-per-device is " +
           formatByteSize(*limit) + ": " + formatByteSize(predicted - *limit) +
           " over; compile a plan that fits with tessera-partition "
           "--memory-per-device " +
           memoryPerDevice.getValue();
  if (predicted < 0 && isRoot)
    llvm::errs() << "tessera-run: warning: " << planPath
                 << " has no memory prediction (an older artifact); "
                    "--memory-per-device is not checked\n";
  return "";
}

/// Opens the backend, plan, data and metrics of `job` (no collective);
/// returns "" or this rank's first error.
std::string openJob(const mpi::Communicator &world, bool timeoutOk, Job &job) {
  bool isRoot = world.rank() == 0;
  std::string error = checkOptions(timeoutOk);

  // The transport of collectives: nccl by default on cuda, mpi on cpu.
  if (error.empty()) {
    std::string name = collectivesName.getNumOccurrences()
                           ? collectivesName.getValue()
                           : (backendName == "cuda" ? "nccl" : "mpi");
    llvm::Expected<exec::Transport> t = exec::parseTransport(name, backendName);
    if (t)
      job.backendOptions.collectives = *t;
    else
      error = llvm::toString(t.takeError());
  }
  job.backendOptions.world = &world;
  job.backendOptions.collectiveTimeoutS = collectiveTimeout;

  if (error.empty()) {
    auto made = exec::createBackend(backendName, job.backendOptions);
    if (made)
      job.backend = std::move(*made);
    else
      error = llvm::toString(made.takeError());
  }
  if (error.empty()) {
    auto loaded = exec::Plan::load(planPath, job.backend.get());
    if (loaded)
      job.plan = std::move(*loaded);
    else
      error = llvm::toString(loaded.takeError());
  }
  if (error.empty() && job.plan->manifest().numRanks() != world.size())
    error =
        (planPath + " needs " + llvm::Twine(job.plan->manifest().numRanks()) +
         " ranks (" + job.plan->manifest().gridDescription() +
         ") but was started with " + llvm::Twine(world.size()))
            .str();

  if (error.empty() && memoryPerDevice.getNumOccurrences())
    error = checkMemoryPerDevice(job.plan->manifest(), isRoot);

  if (error.empty()) {
    auto opened = TokenDataset::open(dataPath, job.plan->manifest().seqLen);
    if (opened)
      job.dataset = std::move(*opened);
    else
      error = llvm::toString(opened.takeError());
  }

  if (error.empty() && isRoot && !metricsPath.empty()) {
    auto opened = MetricsWriter::open(metricsPath);
    if (opened)
      job.metrics = std::move(*opened);
    else
      error = llvm::toString(opened.takeError());
  }
  for (const std::string *out : {&saveWeights.getValue(), &tracePath.getValue(),
                                 &profilePath.getValue()}) {
    if (!error.empty() || !isRoot || out->empty())
      continue;
    llvm::StringRef dir = llvm::sys::path::parent_path(*out);
    if (!dir.empty() && !llvm::sys::fs::is_directory(dir))
      error = "cannot write '" + *out + "': directory '" + dir.str() +
              "' does not exist";
  }
  return error;
}

/// The fields of exec::MemoryUse gathered per rank: persistent, constants,
/// arena, step heap, total.
constexpr int kMemFields = 5;

/// What the training loop leaves for the reports after it.
struct TrainingResult {
  std::vector<int64_t> lastMemory; // rank 0: 5 fields per rank, last step
  /// --profile: every step but the first (warm-up), unless only one runs.
  int64_t firstProfiled = 0;
  double profiledSeconds = 0;
};

/// This rank's value of the f32 scalar opt_state argument `name`, or
/// nullopt when the plan (or this rank's pipeline stage) has none.
llvm::Expected<std::optional<double>>
scalarState(const exec::Executor &executor, exec::Backend &backend,
            llvm::StringRef name) {
  const Tensor *t = executor.localValue(name, exec::Role::OptState);
  if (!t)
    return std::nullopt;
  llvm::Expected<Tensor> host = backend.download(*t);
  if (!host)
    return host.takeError();
  if (host->dtype() != DType::F32 || host->numel() != 1)
    return llvm::createStringError("optimizer state '" + name.str() +
                                   "' is not an f32 scalar");
  return static_cast<double>(host->data<float>()[0]);
}

/// fp16 dynamic loss scaling (tsr-mixed-precision): the state it carries
/// between steps, read on rank 0 around each step for the metrics.
struct LossScaleState {
  std::optional<double> scale, skippedSteps;
};
LossScaleState readLossScale(const mpi::Communicator &world,
                             const exec::Executor &executor,
                             exec::Backend &backend) {
  LossScaleState st;
  for (auto [name, field] : {std::pair<const char *, std::optional<double> *>{
                                 "loss_scale", &st.scale},
                             {"loss_scale.skipped_steps", &st.skippedSteps}}) {
    auto v = scalarState(executor, backend, name);
    if (!v)
      abortAll(world, llvm::toString(v.takeError()));
    *field = *v;
  }
  return st;
}

/// Step `s`'s metrics record (rank 0): loss, time, traffic, memory, and
/// with dynamic loss scaling "loss_scale" (after the step: the scale the
/// next step uses, as Megatron-LM logs it) and "skipped" (1 when the step's
/// update was skipped for a non-finite gradient, else 0).
void writeStepMetrics(const mpi::Communicator &world, MetricsWriter &metrics,
                      exec::Executor &executor, int64_t s, double loss,
                      double seconds, double tokensPerS, bool gatherPeaks,
                      const std::vector<int64_t> &peaks,
                      const std::vector<double> &rankBytes,
                      const std::vector<int64_t> &lastMemory,
                      const LossScaleState &before,
                      const LossScaleState &after) {
  StepMetrics rec;
  rec.step = s;
  rec.loss = loss;
  rec.stepTimeS = seconds;
  rec.tokensPerS = tokensPerS;
  rec.extra.emplace_back("bytes_sent", executor.traffic().stepBytes());
  // Per kind, e.g. "bytes_reduce_scatter" (ring volumes, rank 0).
  for (int k = 0; k < mpi::kNumCollectiveKinds; ++k) {
    auto kind = static_cast<mpi::CollectiveKind>(k);
    rec.extra.emplace_back(std::string("bytes_") +
                               mpi::collectiveKindName(kind),
                           executor.traffic().stepBytes(kind));
  }
  // The largest attention score block a kernel allocated (rank 0).
  if (int64_t scores = executor.kernelStats().attentionScoresBytes)
    rec.extra.emplace_back("attention_scores_bytes",
                           static_cast<double>(scores));
  if (gatherPeaks)
    rec.intLists.emplace_back("peak_activation_sets", peaks);
  std::vector<int64_t> peakBytes;
  for (int r = 0; r < world.size(); ++r)
    peakBytes.push_back(lastMemory[kMemFields * r + kMemFields - 1]);
  rec.intLists.emplace_back("peak_bytes", peakBytes);
  // Pipeline plans: every rank's bytes per collective kind.
  if (!rankBytes.empty())
    for (int k = 0; k < mpi::kNumCollectiveKinds; ++k) {
      std::vector<double> perRank;
      for (int r = 0; r < world.size(); ++r)
        perRank.push_back(rankBytes[mpi::kNumCollectiveKinds * r + k]);
      rec.numLists.emplace_back(
          std::string("bytes_") +
              mpi::collectiveKindName(static_cast<mpi::CollectiveKind>(k)) +
              "_per_rank",
          std::move(perRank));
    }
  // --clip-grad plans: the global gradient norm before clipping.
  if (std::optional<double> norm = executor.lastGradNorm())
    rec.extra.emplace_back("grad_norm", *norm);
  if (after.scale && before.skippedSteps && after.skippedSteps) {
    rec.extra.emplace_back("loss_scale", *after.scale);
    rec.extra.emplace_back("skipped",
                           *after.skippedSteps > *before.skippedSteps ? 1 : 0);
  }
  if (llvm::Error err = metrics.write(rec))
    abortAll(world, llvm::toString(std::move(err)));
}

/// Runs --steps training steps: logs progress and writes --metrics on rank
/// 0. A failing step aborts every rank.
TrainingResult train(const mpi::Communicator &world, exec::Executor &executor,
                     exec::Backend &backend, const exec::Plan &plan,
                     const TokenDataset &dataset, MetricsWriter *metrics) {
  const exec::Manifest &m = plan.manifest();
  bool isRoot = world.rank() == 0;
  TrainingResult result;
  std::vector<int64_t> &lastMemory = result.lastMemory;
  const double tokensPerStep =
      static_cast<double>(m.globalBatch) * static_cast<double>(m.seqLen);
  result.firstProfiled = numSteps > 1 ? 1 : 0;
  const int64_t firstProfiled = result.firstProfiled;
  for (int64_t s = 0; s < numSteps; ++s) {
    if (!profilePath.empty() && s == firstProfiled)
      executor.setProfiling(true);
    LossScaleState scaleBefore;
    if (metrics)
      scaleBefore = readLossScale(world, executor, backend);
    auto start = std::chrono::steady_clock::now();
    auto batch = dataset.batch(s, m.globalBatch, m.seqLen, /*dpRank=*/0,
                               /*dpSize=*/1);
    if (!batch)
      abortAll(world, llvm::toString(batch.takeError()));
    llvm::Expected<double> loss = executor.step(batch->inputs, batch->labels);
    if (!loss)
      abortAll(world, llvm::toString(loss.takeError()));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (s >= firstProfiled)
      result.profiledSeconds += seconds;
#ifndef NDEBUG
    // The loss is the global mean: every rank must hold the same value.
    double range[2] = {*loss, -*loss}, extreme[2];
    {
      mpi::watchdog::Guard guard("all_reduce of the loss check", world.size());
      MPI_Allreduce(range, extreme, 2, MPI_DOUBLE, MPI_MAX, world.handle());
    }
    if (extreme[0] != -extreme[1] && !(std::isnan(*loss)))
      abortAll(world,
               "step " + std::to_string(s) + ": ranks disagree on the loss");
#endif
    // Pipeline plans: every rank's peak number of activation sets.
    std::vector<int64_t> peaks(isRoot ? world.size() : 0);
    bool gatherPeaks = plan.pipeline() && !metricsPath.empty();
    if (gatherPeaks) {
      int64_t mine = executor.peakActivationSets();
      mpi::watchdog::Guard guard("gather of peak_activation_sets",
                                 world.size());
      if (MPI_Gather(&mine, 1, MPI_INT64_T, peaks.data(), 1, MPI_INT64_T, 0,
                     world.handle()) != MPI_SUCCESS)
        abortAll(world, "step " + std::to_string(s) +
                            ": MPI_Gather of peak_activation_sets failed");
    }
    // Pipeline plans: every rank's bytes per collective kind (the stages
    // run different programs, so they send different amounts).
    std::vector<double> rankBytes;
    if (gatherPeaks) {
      double mine[mpi::kNumCollectiveKinds];
      for (int k = 0; k < mpi::kNumCollectiveKinds; ++k)
        mine[k] =
            executor.traffic().stepBytes(static_cast<mpi::CollectiveKind>(k));
      rankBytes.assign(isRoot ? mpi::kNumCollectiveKinds * world.size() : 0,
                       0.0);
      mpi::watchdog::Guard guard("gather of bytes per rank", world.size());
      if (MPI_Gather(mine, mpi::kNumCollectiveKinds, MPI_DOUBLE,
                     rankBytes.data(), mpi::kNumCollectiveKinds, MPI_DOUBLE, 0,
                     world.handle()) != MPI_SUCCESS)
        abortAll(world, "step " + std::to_string(s) +
                            ": MPI_Gather of bytes per rank failed");
    }
    // Every rank's measured memory (see exec::MemoryUse).
    const exec::MemoryUse &use = executor.lastStepMemory();
    int64_t mineMem[kMemFields] = {use.persistent, use.constants, use.arena,
                                   use.stepHeap, use.total()};
    lastMemory.assign(isRoot ? kMemFields * world.size() : 0, 0);
    if (!metricsPath.empty() || memoryReport) {
      mpi::watchdog::Guard guard("gather of peak_bytes", world.size());
      if (MPI_Gather(mineMem, kMemFields, MPI_INT64_T, lastMemory.data(),
                     kMemFields, MPI_INT64_T, 0, world.handle()) != MPI_SUCCESS)
        abortAll(world, "step " + std::to_string(s) +
                            ": MPI_Gather of peak_bytes failed");
    }
    if (!isRoot)
      continue;
    double tokensPerS = seconds > 0 ? tokensPerStep / seconds : 0;
    if (logEvery > 0 && (s % logEvery == 0 || s + 1 == numSteps)) {
      llvm::outs() << formatProgressLine(s, *loss, tokensPerS) << "\n";
      llvm::outs().flush();
    }
    if (metrics)
      writeStepMetrics(world, *metrics, executor, s, *loss, seconds, tokensPerS,
                       gatherPeaks, peaks, rankBytes, lastMemory, scaleBefore,
                       readLossScale(world, executor, backend));
  }
  return result;
}

/// --memory-report (rank 0): every rank's measured memory in the last step
/// against the plan's prediction.
void printMemoryReport(const mpi::Communicator &world, const exec::Manifest &m,
                       const std::vector<int64_t> &lastMemory) {
  llvm::outs() << "memory per rank, last step (bytes; measured = persistent "
                  "+ constants + arena high-water + step heap peak):\n";
  for (int r = 0; r < world.size(); ++r) {
    const int64_t *f = &lastMemory[5 * r];
    int64_t predicted = m.predictedPeakBytesOfRank(r);
    llvm::outs() << llvm::formatv(
        "  rank {0}: measured {1} = {2} + {3} + {4} + {5}", r, f[4], f[0], f[1],
        f[2], f[3]);
    if (predicted >= 0)
      llvm::outs() << llvm::formatv("; predicted {0} ({1:F3}% off)", predicted,
                                    100.0 *
                                        static_cast<double>(f[4] - predicted) /
                                        static_cast<double>(predicted));
    llvm::outs() << "\n";
  }
  if (m.predictedPeakBytes < 0)
    llvm::outs() << "  (no prediction: the artifact has no memory plan)\n";
  llvm::outs().flush();
}

/// --save-weights: the final weights, global, written on rank 0 (collective
/// over the executor's grid). Returns "" or this rank's error.
std::string saveFinalWeights(const mpi::Communicator &world,
                             exec::Executor &executor) {
  auto weights = executor.gatherWeights(/*root=*/0);
  if (!weights)
    return llvm::toString(weights.takeError());
  if (world.rank() != 0)
    return "";
  std::vector<NamedTensor> named;
  for (auto &[name, tensor] : *weights)
    named.emplace_back(name, &tensor);
  std::map<std::string, std::string> meta{
      {"format", "pt"},
      {"tessera.steps", std::to_string(static_cast<int64_t>(numSteps))}};
  return take(writeSafeTensors(llvm::StringRef(saveWeights), named, meta));
}

/// --save-state: this rank's shards of every param and opt_state argument,
/// written to FILE.rank<R>.safetensors. Returns "" or this rank's error.
std::string saveLocalState(const mpi::Communicator &world,
                           const exec::Executor &executor,
                           const exec::Manifest &m, exec::Backend &backend) {
  std::vector<Tensor> host;
  std::vector<std::string> names;
  host.reserve(m.arguments.size());
  for (const exec::ArgumentSpec &a : m.arguments) {
    if (a.role != exec::Role::Param && a.role != exec::Role::OptState)
      continue;
    const Tensor *t = executor.localValue(a.name, a.role);
    if (!t)
      continue; // another pipeline stage's
    llvm::Expected<Tensor> downloaded = backend.download(*t);
    if (!downloaded)
      return "--save-state: '" + a.name +
             "': " + llvm::toString(downloaded.takeError());
    host.push_back(std::move(*downloaded));
    names.push_back(a.name);
  }
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < host.size(); ++i)
    named.emplace_back(names[i], &host[i]);
  std::map<std::string, std::string> meta{
      {"format", "pt"},
      {"tessera.steps", std::to_string(static_cast<int64_t>(numSteps))},
      {"tessera.rank", std::to_string(world.rank())}};
  std::string path =
      saveState + ".rank" + std::to_string(world.rank()) + ".safetensors";
  return take(writeSafeTensors(llvm::StringRef(path), named, meta));
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv, kOverview);

  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    cpu::setBlasThreads(1);

  if (llvm::Error err = mpi::initialize(&argc, &argv)) {
    llvm::errs() << "tessera-run: error: " << llvm::toString(std::move(err))
                 << "\n";
    return 1;
  }
  mpi::Communicator world = mpi::Communicator::world();
  bool isRoot = world.rank() == 0;
  if (calibrateFlag || calibrateQuick)
    return runCalibration(world);
  if (benchCollectivesFlag)
    return runBenchCollectives(world);

  // The watchdog (collective: gathers every rank's host and pid). Every rank
  // has the same options, so all start it or none do.
  bool timeoutOk = collectiveTimeout >= 0 && std::isfinite(collectiveTimeout);
  if (timeoutOk && collectiveTimeout > 0)
    if (llvm::Error err =
            mpi::watchdog::start(collectiveTimeout, "tessera-run")) {
      llvm::errs() << "tessera-run: error: " << llvm::toString(std::move(err))
                   << "\n";
      MPI_Abort(world.handle(), 1);
    }

  // Everything that can fail before the first collective: every rank checks,
  // then all agree.
  Job job;
  std::string error = openJob(world, timeoutOk, job);
  if (!allRanksOk(world, error))
    return exitAfterFailure();

  // Grid and executor (collective: sub-communicators).
  const exec::Manifest &m = job.plan->manifest();
  std::unique_ptr<mpi::Grid> grid;
  std::unique_ptr<exec::Executor> executor;
  {
    // The rank axes only: a pipeline plan's micro-batch axis is virtual.
    auto g = mpi::Grid::create(world, m.rankAxes(), m.rankShape(),
                               m.rankOrderIndices());
    if (g)
      grid = std::move(*g);
    else
      error = llvm::toString(g.takeError());
  }
  if (!allRanksOk(world, error))
    return exitAfterFailure();
  {
    auto ex = exec::Executor::create(*job.plan, *grid);
    if (ex)
      executor = std::move(*ex);
    else
      error = llvm::toString(ex.takeError());
  }
  if (error.empty() && cudaGraph)
    error = take(executor->enableStepCapture());
  if (error.empty() && !tracePath.empty())
    error = take(executor->enableTrace());
  std::unique_ptr<TensorDump> dump;
  if (error.empty() && !dumpTensors.empty()) {
    auto opened = TensorDump::open(dumpTensors, world.rank(), *job.backend);
    if (opened) {
      dump = std::move(*opened);
      exec::Executor *ex = executor.get();
      TensorDump *d = dump.get();
      executor->setTracedSink(
          [ex, d](int64_t trace, unsigned result, const Tensor &value) {
            return d->add(ex->stepsRun(), trace, result, value);
          });
    } else {
      error = take(opened.takeError());
    }
  }
  // After the executor exists: agree on `error`, and on a failure release
  // the executor and grid before MPI is finalized.
  auto allOk = [&] {
    if (allRanksOk(world, error))
      return true;
    executor.reset();
    grid.reset();
    return false;
  };
  if (!allOk())
    return exitAfterFailure();

  TrainingResult trained = train(world, *executor, *job.backend, *job.plan,
                                 *job.dataset, job.metrics.get());
  if (memoryReport && isRoot && numSteps > 0)
    printMemoryReport(world, m, trained.lastMemory);

  // Every rank's traced tensors (tessera-check).
  if (dump) {
    error = take(dump->finish(m.rankAxes(), executor->coords(), m.rankShape()));
    if (!allOk())
      return exitAfterFailure();
  }

  // Every rank's per-instruction profile, on rank 0.
  if (!profilePath.empty()) {
    executor->setProfiling(false);
    error = writeProfile(world, *executor, m,
                         std::max<int64_t>(numSteps - trained.firstProfiled, 0),
                         trained.profiledSeconds, profilePath);
    if (!allOk())
      return exitAfterFailure();
  }

  // Every rank's timeline, on rank 0.
  if (!tracePath.empty()) {
    error = writeTrace(world, *executor, m, *job.backend, tracePath);
    if (!allOk())
      return exitAfterFailure();
  }

  // Every rank's own training state.
  if (!saveState.empty()) {
    error = saveLocalState(world, *executor, m, *job.backend);
    if (!allOk())
      return exitAfterFailure();
  }

  // Final weights, global, on rank 0.
  if (!saveWeights.empty()) {
    error = saveFinalWeights(world, *executor);
    if (!allOk())
      return exitAfterFailure();
  }

  executor.reset();
  grid.reset();
  mpi::finalize();
  return 0;
}

//===- Trainer.cpp - the training loop of tessera-run ---------------------===//
//
// See Trainer.h. Output formats (metrics, trace, profile, memory report)
// are documented in tools/tessera-run/tessera-run.cpp and its --help.
//
//===----------------------------------------------------------------------===//

#include "runtime/trainer/Trainer.h"

#include "common/cluster/Placement.h"
#include "common/io/FileSafety.h"
#include "runtime/FaultInject.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/collectives/mpi/NodeLocal.h"
#include "runtime/collectives/mpi/Watchdog.h"
#include "runtime/executor/Layout.h"
#include "runtime/metrics/ByteSize.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <unistd.h>

namespace tessera::runtime {

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

int exitAfterFailure() {
  mpi::finalize();
  return 1;
}

namespace {

/// Returns the first error message and consumes `err` (empty if success).
std::string take(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

/// Writes `value` and a newline to `path` atomically (io::FileSafety.h);
/// returns "" or the error, "cannot write <what> '<path>': <reason>"
/// (`what` is the option, "--trace").
std::string writeJson(const std::string &path, llvm::json::Value value,
                      llvm::StringRef what) {
  llvm::Error err =
      io::writeFileAtomically(what, path, [&](llvm::raw_ostream &os) {
        os << value << "\n";
        return llvm::Error::success();
      });
  return take(std::move(err));
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
/// JSON: {"steps": S, "ranks": [{"rank", "coords", "step_s",
/// "executor_step_s", "ops": [{"kind", "calls_per_step", "seconds_per_step",
/// "cpu_seconds_per_step", "bytes_per_step"}, ...]}]}, each rank's ops sorted
/// by time, most first, with the rows "executor" (Executor::step's time less
/// its ops' and the profiler's) and "profiler" (the timed scopes' own clock
/// reads). Collective over `world`. Returns an error message (on rank 0 only)
/// or "".
std::string writeProfile(const mpi::Communicator &world,
                         const exec::Executor &executor,
                         const exec::Manifest &m, int64_t steps,
                         double stepSeconds, const std::string &path) {
  namespace json = llvm::json;
  const double perStep = steps > 0 ? 1.0 / static_cast<double>(steps) : 0;
  std::vector<std::pair<std::string, exec::ExecContext::KernelStats::OpTime>>
      ops;
  executor.kernelStats().forEachOp(
      [&](llvm::StringRef kind,
          const exec::ExecContext::KernelStats::OpTime &t) {
        ops.emplace_back(kind.str(), t);
      });
  // The executor's own time: what the timed ops leave of Executor::step
  // (entry to exit), less the profiler's own clock reads (timed scopes ×
  // OpTimer::scopeOverhead, reported as "profiler"). The trainer's work
  // around the step (the data loader's batch, metrics) is not in it.
  const exec::ExecContext::KernelStats &stats = executor.kernelStats();
  double opSeconds = 0, opCpuSeconds = 0;
  for (const auto &[kind, t] : ops) {
    opSeconds += t.seconds;
    opCpuSeconds += t.cpuSeconds;
  }
  if (stats.steps.calls > 0) {
    exec::ExecContext::KernelStats::OpTime profiler;
    profiler.calls = stats.timedScopes;
    profiler.seconds =
        static_cast<double>(stats.timedScopes) * exec::OpTimer::scopeOverhead();
    profiler.cpuSeconds = profiler.seconds;
    exec::ExecContext::KernelStats::OpTime own;
    own.calls = stats.steps.calls;
    own.seconds =
        std::max(0.0, stats.steps.seconds - opSeconds - profiler.seconds);
    own.cpuSeconds = std::max(0.0, stats.steps.cpuSeconds - opCpuSeconds -
                                       profiler.cpuSeconds);
    ops.emplace_back("executor", own);
    ops.emplace_back("profiler", profiler);
  }
  llvm::sort(ops, [](const auto &a, const auto &b) {
    return a.second.seconds != b.second.seconds
               ? a.second.seconds > b.second.seconds
               : a.first < b.first;
  });
  json::Array opList;
  for (const auto &[kind, t] : ops)
    opList.push_back(json::Object{
        {"kind", kind},
        {"calls_per_step", static_cast<double>(t.calls) * perStep},
        {"seconds_per_step", t.seconds * perStep},
        {"cpu_seconds_per_step", t.cpuSeconds * perStep},
        {"bytes_per_step", static_cast<double>(t.bytes) * perStep}});
  std::string coords;
  std::vector<std::string> axes = m.rankAxes();
  for (size_t a = 0; a < axes.size(); ++a)
    coords +=
        (a ? " " : "") + axes[a] + "=" + std::to_string(executor.coords()[a]);
  json::Object rank{{"rank", world.rank()},
                    {"coords", coords},
                    {"step_s", stepSeconds * perStep},
                    {"ops", std::move(opList)}};
  if (stats.steps.calls > 0) {
    // Executor::step's own wall time per step (the "executor" row is what
    // its ops leave of it).
    double perExecStep = 1.0 / static_cast<double>(stats.steps.calls);
    rank["executor_step_s"] = stats.steps.seconds * perExecStep;
  }
  std::string mine;
  llvm::raw_string_ostream(mine) << json::Value(std::move(rank));

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
                   "--profile");
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
                   "--trace");
}

/// The fields of exec::MemoryUse gathered per rank: persistent, constants,
/// arena, step heap, total.
constexpr int kMemFields = 5;

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
                             exec::Executor &executor, const std::string &path,
                             int64_t steps) {
  auto weights = executor.gatherWeights(/*root=*/0);
  if (!weights)
    return llvm::toString(weights.takeError());
  if (world.rank() != 0)
    return "";
  std::vector<NamedTensor> named;
  for (auto &[name, tensor] : *weights)
    named.emplace_back(name, &tensor);
  std::map<std::string, std::string> meta{
      {"format", "pt"}, {"tessera.steps", std::to_string(steps)}};
  return take(writeSafeTensors(llvm::StringRef(path), named, meta));
}

/// --save-state: this rank's shards of every param and opt_state argument,
/// written to FILE.rank<R>.safetensors. Returns "" or this rank's error.
std::string saveLocalState(const mpi::Communicator &world,
                           const exec::Executor &executor,
                           const exec::Manifest &m, exec::Backend &backend,
                           const std::string &file, int64_t steps) {
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
      {"tessera.steps", std::to_string(steps)},
      {"tessera.rank", std::to_string(world.rank())}};
  std::string path =
      file + ".rank" + std::to_string(world.rank()) + ".safetensors";
  return take(writeSafeTensors(llvm::StringRef(path), named, meta));
}

} // namespace

Trainer::Trainer(TrainerOptions options) : opts(std::move(options)) {}

Trainer::~Trainer() = default;

//===----------------------------------------------------------------------===//
// Opening the job
//===----------------------------------------------------------------------===//

/// The option errors a rank can see alone; "" if none.
std::string Trainer::checkOptions(bool timeoutOk) const {
  if (opts.planPath.empty())
    return "no plan given (tessera-run PLAN.tsr --data TOKENS.u16, or "
           "--calibrate)";
  if (opts.dataPath.empty())
    return "--data TOKENS.u16 is required";
  if (opts.steps < 0)
    return "--steps must be >= 0";
  if (opts.logEvery < 0)
    return "--log-every must be >= 0";
  if (opts.evalInterval && *opts.evalInterval < 1)
    return "--eval-interval must be >= 1";
  if (opts.evalIters && *opts.evalIters < 1)
    return "--eval-iters must be >= 1";
  if (opts.evalDataPath.empty() && (opts.evalInterval || opts.evalIters))
    return "--eval-interval and --eval-iters need --eval-data FILE";
  if (!timeoutOk)
    return "--collective-timeout-s must be a number of seconds >= 0 (0: no "
           "watchdog)";
  return checkCheckpointOptions();
}

/// The files of the job, before any is opened (common/io/FileSafety.h):
/// the plan and the token files must be regular files (a FIFO would block,
/// /dev/zero never ends), and no output may be an input or another output,
/// or a non-regular file. "" or the first problem.
std::string Trainer::checkFiles() const {
  std::vector<io::NamedPath> inputs{{"the plan", opts.planPath}};
  if (llvm::Error err = io::checkInputFile("the plan", opts.planPath))
    return take(std::move(err));
  // A token file is a plain file or a Megatron-LM PREFIX (PREFIX.bin and
  // PREFIX.idx; PREFIX.bin also names it): each that exists is an input.
  for (auto [option, path] :
       {std::pair<const char *, const std::string *>{"--data", &opts.dataPath},
        {"--eval-data", &opts.evalDataPath}}) {
    if (path->empty())
      continue;
    llvm::StringRef p(*path);
    llvm::SmallVector<std::string, 4> files{*path, *path + ".bin",
                                            *path + ".idx"};
    if (p.ends_with(".bin"))
      files.push_back((p.drop_back(4) + ".idx").str());
    for (const std::string &f : files) {
      if (!llvm::sys::fs::exists(f))
        continue; // the dataset reader names what is missing
      if (llvm::Error err = io::checkInputFile(option, f))
        return take(std::move(err));
      inputs.push_back({option, f});
    }
  }
  if (!opts.loadDir.empty())
    inputs.push_back({"--load", opts.loadDir, /*directory=*/true});

  std::vector<io::NamedPath> outputs{{"--metrics", opts.metricsPath},
                                     {"--trace", opts.tracePath},
                                     {"--profile", opts.profilePath},
                                     {"--save-weights", opts.saveWeights}};
  if (!opts.saveState.empty())
    for (int r = 0; r < world->size(); ++r)
      outputs.push_back(
          {"--save-state",
           opts.saveState + ".rank" + std::to_string(r) + ".safetensors"});
  outputs.push_back({"--save", opts.saveDir, /*directory=*/true});
  outputs.push_back({"--dump-tensors", opts.dumpTensors, /*directory=*/true});
  return take(io::checkOutputs(inputs, outputs));
}

/// The static memory plan's prediction against --memory-per-device; ""
/// or the error.
std::string Trainer::checkMemoryPerDevice(const exec::Manifest &m) const {
  const std::string &size = *opts.memoryPerDevice;
  llvm::Expected<int64_t> limit = parseByteSize(size);
  int64_t predicted = m.predictedPeakBytes;
  if (!limit)
    return "--memory-per-device: " + llvm::toString(limit.takeError());
  if (predicted > *limit)
    return opts.planPath + " needs " + formatByteSize(predicted) +
           " per rank (predicted peak) but --memory-per-device is " +
           formatByteSize(*limit) + ": " + formatByteSize(predicted - *limit) +
           " over; compile a plan that fits with tessera-partition "
           "--memory-per-device " +
           size;
  if (predicted < 0 && world->rank() == 0)
    llvm::errs() << "tessera-run: warning: " << opts.planPath
                 << " has no memory prediction (an older artifact); "
                    "--memory-per-device is not checked\n";
  return "";
}

/// The LR schedule of the flags, its peak defaulting to the plan's compiled
/// "optimizer" "lr" and --lr-decay-iters to --steps; "" or the error. Plans
/// without the "hyper" argument "lr" (older artifacts) run at their
/// compiled rate and refuse schedule flags.
std::string Trainer::makeLrSchedule(const exec::Manifest &m) {
  if (m.findArgument("lr", exec::Role::Hyper) < 0) {
    if (opts.lrScheduleRequested)
      return opts.planPath +
             " has no \"hyper\" argument 'lr' (compiled before learning "
             "rates became runtime inputs): recompile it with "
             "tessera-partition to use --lr or an LR schedule";
    return "";
  }
  LrScheduleOptions o;
  std::optional<double> compiled = m.optimizer.getNumber("lr");
  o.lr = opts.lr ? *opts.lr : compiled.value_or(0);
  o.minLr = opts.minLr;
  o.warmupInit = opts.lrWarmupInit;
  o.warmupIters = opts.lrWarmupIters;
  o.decayIters = opts.lrDecayIters ? *opts.lrDecayIters : opts.steps;
  o.wsdDecayIters = opts.lrWsdDecayIters;
  llvm::Expected<LrDecayStyle> style = parseLrDecayStyle(opts.lrDecayStyle);
  if (!style)
    return llvm::toString(style.takeError());
  o.decayStyle = *style;
  llvm::Expected<WsdDecayStyle> wsd = parseWsdDecayStyle(opts.lrWsdDecayStyle);
  if (!wsd)
    return llvm::toString(wsd.takeError());
  o.wsdDecayStyle = *wsd;
  llvm::Expected<LrSchedule> made = LrSchedule::create(o);
  if (!made)
    return llvm::toString(made.takeError());
  lrSchedule = std::move(*made);
  return "";
}

/// Opens the backend, plan, data and metrics (no collective); returns "" or
/// this rank's first error.
std::string Trainer::openJob(bool timeoutOk) {
  bool isRoot = world->rank() == 0;
  std::string error = checkOptions(timeoutOk);

  // The transport of collectives: nccl by default on cuda, mpi on cpu.
  if (error.empty()) {
    std::string name = opts.collectives
                           ? *opts.collectives
                           : (opts.backendName == "cuda" ? "nccl" : "mpi");
    llvm::Expected<exec::Transport> t =
        exec::parseTransport(name, opts.backendName);
    if (t)
      backendOptions.collectives = *t;
    else
      error = llvm::toString(t.takeError());
  }
  backendOptions.world = world;
  backendOptions.collectiveTimeoutS = opts.collectiveTimeoutS;

  if (error.empty()) {
    auto made = exec::createBackend(opts.backendName, backendOptions);
    if (made)
      backend = std::move(*made);
    else
      error = llvm::toString(made.takeError());
  }
  // The files, before any is read or written.
  if (error.empty())
    error = checkFiles();
  if (error.empty()) {
    auto loaded = exec::Plan::load(opts.planPath, backend.get());
    if (loaded)
      plan = std::move(*loaded);
    else
      error = llvm::toString(loaded.takeError());
  }
  if (error.empty() && plan->manifest().numRanks() != world->size())
    error =
        (opts.planPath + " needs " + llvm::Twine(plan->manifest().numRanks()) +
         " ranks (" + plan->manifest().gridDescription() +
         ") but was started with " + llvm::Twine(world->size()))
            .str();

  if (error.empty() && opts.memoryPerDevice)
    error = checkMemoryPerDevice(plan->manifest());

  if (error.empty())
    error = makeLrSchedule(plan->manifest());

  // The training data, then (below) the validation data: the same format
  // (--data-dtype) and the same vocabulary check.
  std::optional<TokenDType> dtype;
  if (error.empty() && !opts.dataDType.empty()) {
    llvm::Expected<TokenDType> parsed = parsePlainTokenDType(opts.dataDType);
    if (parsed)
      dtype = *parsed;
    else
      error = llvm::toString(parsed.takeError());
  }
  // Every id must index the model's vocabulary (older artifacts do not
  // record it). Each rank scans 1/world of the file; the lowest failing
  // rank, which allRanksOk prints, holds the first bad id.
  auto openTokens = [&](const std::string &path,
                        std::optional<TokenDataset> &into) -> std::string {
    auto opened = TokenDataset::open(path, plan->manifest().seqLen, dtype);
    if (!opened)
      return llvm::toString(opened.takeError());
    into = std::move(*opened);
    if (plan->manifest().vocabSize > 0)
      if (llvm::Error err = into->checkVocabulary(plan->manifest().vocabSize,
                                                  world->rank(), world->size()))
        return llvm::toString(std::move(err));
    return "";
  };
  if (error.empty())
    error = openTokens(opts.dataPath, dataset);

  // --eval-data: the plan's evaluation function and the validation file.
  if (error.empty() && !opts.evalDataPath.empty() && !plan->evalProgram())
    error = opts.planPath + ": --eval-data: " +
            (plan->pipeline()
                 ? "pipeline plans have no evaluation function yet"
                 : "the plan has no evaluation function (recompile it with "
                   "this tessera-partition)");
  if (error.empty() && !opts.evalDataPath.empty()) {
    error = openTokens(opts.evalDataPath, evalDataset);
    if (!error.empty())
      error = "--eval-data: " + error;
  }

  if (error.empty() && isRoot && !opts.metricsPath.empty()) {
    auto opened = MetricsWriter::open(opts.metricsPath);
    if (opened)
      metrics = std::move(*opened);
    else
      error = llvm::toString(opened.takeError());
  }
  if (error.empty())
    error = prepareCheckpoints();
  return error;
}

//===----------------------------------------------------------------------===//
// Placement
//===----------------------------------------------------------------------===//

namespace {
/// One rank's placement as gathered (fixed size: one MPI_Gather of bytes).
struct PlacementRecord {
  int32_t localRank = 0, sharedRank = 0, sharedLeader = 0, pid = 0;
  char source[32] = {};
  char host[256] = {};
};
} // namespace

bool Trainer::checkPlacement() {
  std::string error;
  PlacementRecord mine;
  mine.pid = static_cast<int32_t>(::getpid());
  if (::gethostname(mine.host, sizeof(mine.host) - 1) != 0)
    std::snprintf(mine.host, sizeof(mine.host), "unknown");
  llvm::Expected<mpi::NodeLocalRank> local = mpi::nodeLocalRank(*world);
  if (local) {
    mine.localRank = local->rank;
    mine.sharedRank = local->sharedRank;
    mine.sharedLeader = local->sharedLeader;
    std::snprintf(mine.source, sizeof(mine.source), "%s",
                  local->source.c_str());
  } else {
    error = "node-local rank: " + llvm::toString(local.takeError());
  }
  if (!allRanksOk(*world, error))
    return false;
  int n = world->size();
  bool isRoot = world->rank() == 0;
  std::vector<PlacementRecord> all(isRoot ? n : 0);
  int rc;
  {
    mpi::watchdog::Guard guard("gather of the placement", n);
    rc = MPI_Gather(&mine, sizeof(PlacementRecord), MPI_BYTE, all.data(),
                    sizeof(PlacementRecord), MPI_BYTE, 0, world->handle());
  }
  if (!allRanksOk(*world,
                  rc == MPI_SUCCESS
                      ? ""
                      : take(mpi::failure(rc, "MPI_Gather of the placement"))))
    return false;
  if (!isRoot)
    return true;

  // MPI nodes, numbered by their lowest world rank; host names, told apart
  // where one name spans several MPI nodes.
  std::set<int> leaders;
  for (const PlacementRecord &r : all)
    leaders.insert(r.sharedLeader);
  auto nodeOf = [&](const PlacementRecord &r) -> int64_t {
    return std::distance(leaders.begin(), leaders.find(r.sharedLeader));
  };
  std::vector<std::string> names;
  std::vector<int64_t> nodes;
  for (const PlacementRecord &r : all) {
    names.push_back(r.host);
    nodes.push_back(nodeOf(r));
  }
  std::vector<std::string> hosts = planner::hostLabels(names, nodes);

  const exec::Manifest &m = plan->manifest();
  planner::RankOrderAxes layout;
  std::vector<int64_t> shape = m.rankShape();
  for (int64_t i : m.rankOrderIndices()) {
    layout.names.push_back(m.rankAxes()[i]);
    layout.sizes.push_back(shape[i]);
  }
  if (opts.logPlacement) {
    std::vector<std::string> axes = m.rankAxes();
    for (int r = 0; r < n; ++r) {
      const PlacementRecord &rec = all[r];
      std::vector<int64_t> coords =
          exec::gridCoords(r, shape, m.rankOrderIndices());
      std::string text;
      for (size_t a = 0; a < axes.size(); ++a)
        text += (a ? " " : "") + axes[a] + "=" + std::to_string(coords[a]);
      std::string source = rec.source;
      if (source != "MPI_COMM_TYPE_SHARED" && rec.localRank != rec.sharedRank)
        source += "; split: " + std::to_string(rec.sharedRank);
      llvm::outs() << llvm::formatv(
          "placement: rank {0} on host {1} (node {2}), local rank {3} ({4}), "
          "pid {5}, {6}, stage {7}\n",
          r, hosts[r], nodeOf(rec), rec.localRank, source, rec.pid, text,
          m.isPipeline() ? coords[m.ppAxis] : 0);
    }
    std::string summary = planner::hostSummary(layout, hosts);
    if (!summary.empty())
      llvm::outs() << "placement: " << summary << "\n";
    llvm::outs().flush();
  }
  // A launcher that contradicts the shared-memory split: the first rank.
  auto localOf = [&](int r) {
    mpi::NodeLocalRank l;
    l.rank = all[r].localRank;
    l.source = all[r].source;
    l.sharedRank = all[r].sharedRank;
    return l;
  };
  int contradicting = -1, others = 0;
  for (int r = 0; r < n; ++r) {
    if (!localOf(r).contradicts())
      continue;
    if (contradicting < 0)
      contradicting = r;
    else
      ++others;
  }
  if (contradicting >= 0)
    llvm::errs() << mpi::localRankMismatchWarning("tessera-run", contradicting,
                                                  localOf(contradicting),
                                                  others)
                 << "\n";
  for (const std::string &w :
       planner::placementWarnings(layout, m.ranksPerNode, hosts, "tessera-run"))
    llvm::errs() << w << "\n";
  return true;
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

int Trainer::run(const mpi::Communicator &comm) {
  world = &comm;
  bool isRoot = world->rank() == 0;

  // The watchdog (collective: gathers every rank's host and pid). Every rank
  // has the same options, so all start it or none do.
  bool timeoutOk =
      opts.collectiveTimeoutS >= 0 && std::isfinite(opts.collectiveTimeoutS);
  if (timeoutOk && opts.collectiveTimeoutS > 0)
    if (llvm::Error err =
            mpi::watchdog::start(opts.collectiveTimeoutS, "tessera-run")) {
      llvm::errs() << "tessera-run: error: " << llvm::toString(std::move(err))
                   << "\n";
      MPI_Abort(world->handle(), 1);
    }

  // Everything that can fail before the first collective: every rank checks,
  // then all agree.
  std::string error = openJob(timeoutOk);
  if (!allRanksOk(*world, error))
    return exitAfterFailure();

  // Where the ranks run, against the plan's node mapping (collective).
  if (!checkPlacement())
    return exitAfterFailure();

  // Grid and executor (collective: sub-communicators).
  const exec::Manifest &m = plan->manifest();
  {
    // The rank axes only: a pipeline plan's micro-batch axis is virtual.
    auto g = mpi::Grid::create(*world, m.rankAxes(), m.rankShape(),
                               m.rankOrderIndices());
    if (g)
      grid = std::move(*g);
    else
      error = llvm::toString(g.takeError());
  }
  if (!allRanksOk(*world, error))
    return exitAfterFailure();
  {
    auto ex = exec::Executor::create(*plan, *grid);
    if (ex)
      executor = std::move(*ex);
    else
      error = llvm::toString(ex.takeError());
  }
  if (error.empty() && lrSchedule) {
    // Resolved once: every step sets it by slot (no name lookup).
    llvm::Expected<int64_t> slot = executor->hyperSlot("lr");
    if (slot)
      lrSlot = *slot;
    else
      error = llvm::toString(slot.takeError());
  }
  if (error.empty() && opts.cudaGraph)
    error = take(executor->enableStepCapture());
  if (error.empty() && !opts.tracePath.empty())
    error = take(executor->enableTrace());
  if (error.empty() && !opts.dumpTensors.empty()) {
    auto opened = TensorDump::open(opts.dumpTensors, world->rank(), *backend);
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
  // --load: the checkpoint's state replaces the initial one.
  if (error.empty() && !opts.loadDir.empty())
    error = loadCheckpoint();
  // After the executor exists: agree on `error`, and on a failure release
  // the executor and grid before MPI is finalized.
  auto allOk = [&] {
    if (allRanksOk(*world, error))
      return true;
    executor.reset();
    grid.reset();
    return false;
  };
  if (!allOk())
    return exitAfterFailure();

  train();
  // --save: the state after the last step (unless just saved).
  if (!failed && !opts.saveDir.empty() && opts.steps > startStep &&
      lastSaved != opts.steps)
    saveCheckpoint(opts.steps);
  if (failed) {
    executor.reset();
    grid.reset();
    return exitAfterFailure();
  }
  if (opts.memoryReport && isRoot && opts.steps > startStep)
    printMemoryReport(*world, m, lastMemory);

  // Every rank's traced tensors (tessera-check).
  if (dump) {
    error = take(dump->finish(m.rankAxes(), executor->coords(), m.rankShape()));
    if (!allOk())
      return exitAfterFailure();
  }

  // Every rank's per-instruction profile, on rank 0.
  if (!opts.profilePath.empty()) {
    executor->setProfiling(false);
    error = writeProfile(*world, *executor, m,
                         std::max<int64_t>(opts.steps - firstProfiled, 0),
                         profiledSeconds, opts.profilePath);
    if (!allOk())
      return exitAfterFailure();
  }

  // Every rank's timeline, on rank 0.
  if (!opts.tracePath.empty()) {
    error = writeTrace(*world, *executor, m, *backend, opts.tracePath);
    if (!allOk())
      return exitAfterFailure();
  }

  // Every rank's own training state.
  if (!opts.saveState.empty()) {
    error = saveLocalState(*world, *executor, m, *backend, opts.saveState,
                           opts.steps);
    if (!allOk())
      return exitAfterFailure();
  }

  // Final weights, global, on rank 0.
  if (!opts.saveWeights.empty()) {
    error = saveFinalWeights(*world, *executor, opts.saveWeights, opts.steps);
    if (!allOk())
      return exitAfterFailure();
  }

  executor.reset();
  grid.reset();
  mpi::finalize();
  return 0;
}

//===----------------------------------------------------------------------===//
// The step loop
//===----------------------------------------------------------------------===//

/// Runs steps startStep .. --steps - 1 (global step numbers: --steps is the
/// total, as Megatron-LM's --train-iters): logs progress and writes
/// --metrics on rank 0. A failing step aborts every rank; an agreed
/// checkpoint failure sets `failed` and returns.
void Trainer::train() {
  const exec::Manifest &m = plan->manifest();
  bool isRoot = world->rank() == 0;
  const double tokensPerStep =
      static_cast<double>(m.globalBatch) * static_cast<double>(m.seqLen);
  // Steps are numbered globally: a resumed run continues at startStep.
  firstProfiled = opts.steps - startStep > 1 ? startStep + 1 : startStep;
  fault::trainingStarted(); // the test hook's collective and send moments
  for (int64_t s = startStep; s < opts.steps; ++s) {
    stepExtras.clear();
    if (!opts.profilePath.empty() && s == firstProfiled)
      executor->setProfiling(true);
    LossScaleState scaleBefore;
    if (metrics)
      scaleBefore = readLossScale();
    // Hook: this step's runtime hyper-parameters.
    setStepHypers(s);
    auto start = std::chrono::steady_clock::now();
    auto batch = dataset->batch(s, m.globalBatch, m.seqLen, /*dpRank=*/0,
                                /*dpSize=*/1);
    if (!batch)
      abortAll(*world, llvm::toString(batch.takeError()));
    llvm::Expected<double> loss = executor->step(batch->inputs, batch->labels);
    if (!loss)
      abortAll(*world, llvm::toString(loss.takeError()));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (s >= firstProfiled)
      profiledSeconds += seconds;
#ifndef NDEBUG
    // The loss is the global mean: every rank must hold the same value.
    double range[2] = {*loss, -*loss}, extreme[2];
    {
      mpi::watchdog::Guard guard("all_reduce of the loss check", world->size());
      MPI_Allreduce(range, extreme, 2, MPI_DOUBLE, MPI_MAX, world->handle());
    }
    if (extreme[0] != -extreme[1] && !(std::isnan(*loss)))
      abortAll(*world,
               "step " + std::to_string(s) + ": ranks disagree on the loss");
#endif
    // Pipeline plans: every rank's peak number of activation sets.
    std::vector<int64_t> peaks(isRoot ? world->size() : 0);
    bool gatherPeaks = plan->pipeline() && !opts.metricsPath.empty();
    if (gatherPeaks) {
      int64_t mine = executor->peakActivationSets();
      mpi::watchdog::Guard guard("gather of peak_activation_sets",
                                 world->size());
      if (MPI_Gather(&mine, 1, MPI_INT64_T, peaks.data(), 1, MPI_INT64_T, 0,
                     world->handle()) != MPI_SUCCESS)
        abortAll(*world, "step " + std::to_string(s) +
                             ": MPI_Gather of peak_activation_sets failed");
    }
    // Pipeline plans: every rank's bytes per collective kind (the stages
    // run different programs, so they send different amounts).
    std::vector<double> rankBytes;
    if (gatherPeaks) {
      double mine[mpi::kNumCollectiveKinds];
      for (int k = 0; k < mpi::kNumCollectiveKinds; ++k)
        mine[k] =
            executor->traffic().stepBytes(static_cast<mpi::CollectiveKind>(k));
      rankBytes.assign(isRoot ? mpi::kNumCollectiveKinds * world->size() : 0,
                       0.0);
      mpi::watchdog::Guard guard("gather of bytes per rank", world->size());
      if (MPI_Gather(mine, mpi::kNumCollectiveKinds, MPI_DOUBLE,
                     rankBytes.data(), mpi::kNumCollectiveKinds, MPI_DOUBLE, 0,
                     world->handle()) != MPI_SUCCESS)
        abortAll(*world, "step " + std::to_string(s) +
                             ": MPI_Gather of bytes per rank failed");
    }
    // Every rank's measured memory (see exec::MemoryUse).
    const exec::MemoryUse &use = executor->lastStepMemory();
    int64_t mineMem[kMemFields] = {use.persistent, use.constants, use.arena,
                                   use.stepHeap, use.total()};
    lastMemory.assign(isRoot ? kMemFields * world->size() : 0, 0);
    if (!opts.metricsPath.empty() || opts.memoryReport) {
      mpi::watchdog::Guard guard("gather of peak_bytes", world->size());
      if (MPI_Gather(mineMem, kMemFields, MPI_INT64_T, lastMemory.data(),
                     kMemFields, MPI_INT64_T, 0,
                     world->handle()) != MPI_SUCCESS)
        abortAll(*world, "step " + std::to_string(s) +
                             ": MPI_Gather of peak_bytes failed");
    }
    // Hook: evaluation after the step (every rank).
    maybeEvaluate(s + 1);
    if (isRoot) {
      double tokensPerS = seconds > 0 ? tokensPerStep / seconds : 0;
      if (opts.logEvery > 0 &&
          (s % opts.logEvery == 0 || s + 1 == opts.steps)) {
        llvm::outs() << formatProgressLine(s, *loss, tokensPerS) << "\n";
        llvm::outs().flush();
      }
      printEvaluation(s + 1);
      if (metrics)
        writeStepMetrics(s, *loss, seconds, tokensPerS, gatherPeaks, peaks,
                         rankBytes, scaleBefore, readLossScale());
    }
    // Hook: a checkpoint after the step (every rank).
    maybeCheckpoint(s + 1);
    if (failed)
      return;
  }
}

/// Before step `step` (0-based): sets this step's runtime hyper-parameters
/// (manifest role "hyper", Executor::setHyper): the learning rate of the LR
/// schedule, which depends on the global step only (so a resumed run gets
/// the unbroken run's rates). The step's metrics record gets "lr": the
/// value this step used (before its f32 rounding), as torch's get_last_lr()
/// before the step; Megatron-LM's log reads the param group after its
/// scheduler has stepped, i.e. the next iteration's rate.
void Trainer::setStepHypers(int64_t step) {
  if (!lrSchedule)
    return;
  double lr = lrSchedule->lr(step);
  if (llvm::Error err = executor->setHyper(lrSlot, lr))
    abortAll(*world, "step " + std::to_string(step) + ": " +
                         llvm::toString(std::move(err)));
  stepExtras.emplace_back("lr", lr);
}

/// After `stepsDone` steps, on every rank: with --eval-data, after every
/// --eval-interval-th step and after the last, the validation loss of the
/// current state (collective): the mean over k < --eval-iters of the loss
/// of step k's global batch of the validation file (DESIGN.md's sampling
/// formula; the same batches at every evaluation), computed by the plan's
/// forward-only evaluation function (Executor::evaluate: no dropout, no
/// state change). Adds "eval_loss" to stepExtras and keeps it for
/// printEvaluation. A failure aborts every rank.
void Trainer::maybeEvaluate(int64_t stepsDone) {
  lastEvalLoss.reset();
  if (!evalDataset)
    return;
  int64_t interval = opts.evalInterval.value_or(1000);
  if (stepsDone % interval != 0 && stepsDone != opts.steps)
    return;
  const exec::Manifest &m = plan->manifest();
  int64_t iters = opts.evalIters.value_or(100);
  double sum = 0;
  for (int64_t k = 0; k < iters; ++k) {
    auto batch = evalDataset->batch(k, m.globalBatch, m.seqLen, /*dpRank=*/0,
                                    /*dpSize=*/1);
    if (!batch)
      abortAll(*world, "--eval-data: " + llvm::toString(batch.takeError()));
    llvm::Expected<double> loss =
        executor->evaluate(batch->inputs, batch->labels);
    if (!loss)
      abortAll(*world, llvm::toString(loss.takeError()));
    sum += *loss;
  }
  lastEvalLoss = sum / static_cast<double>(iters);
  stepExtras.emplace_back("eval_loss", *lastEvalLoss);
}

/// Rank 0, after the step's progress line: Megatron-LM's line for the
/// evaluation maybeEvaluate just ran, if any ("validation loss at iteration
/// N | lm loss value: X | lm loss PPL: exp(min(20, X)) |").
void Trainer::printEvaluation(int64_t stepsDone) const {
  if (!lastEvalLoss)
    return;
  llvm::outs() << llvm::formatv(
      "validation loss at iteration {0} | lm loss value: {1:E6} | lm loss "
      "PPL: {2:E6} |\n",
      stepsDone, *lastEvalLoss, std::exp(std::min(20.0, *lastEvalLoss)));
  llvm::outs().flush();
}

//===----------------------------------------------------------------------===//
// Metrics
//===----------------------------------------------------------------------===//

/// fp16 dynamic loss scaling (tsr-mixed-precision): the state it carries
/// between steps, read on rank 0 around each step for the metrics.
Trainer::LossScaleState Trainer::readLossScale() const {
  LossScaleState st;
  for (auto [name, field] : {std::pair<const char *, std::optional<double> *>{
                                 "loss_scale", &st.scale},
                             {"loss_scale.skipped_steps", &st.skippedSteps}}) {
    auto v = scalarState(*executor, *backend, name);
    if (!v)
      abortAll(*world, llvm::toString(v.takeError()));
    *field = *v;
  }
  return st;
}

/// Step `s`'s metrics record (rank 0): loss, time, traffic, memory, the
/// hooks' stepExtras, and with dynamic loss scaling "loss_scale" (after the
/// step: the scale the next step uses, as Megatron-LM logs it) and
/// "skipped" (1 when the step's update was skipped for a non-finite
/// gradient, else 0).
void Trainer::writeStepMetrics(int64_t s, double loss, double seconds,
                               double tokensPerS, bool gatherPeaks,
                               const std::vector<int64_t> &peaks,
                               const std::vector<double> &rankBytes,
                               const LossScaleState &before,
                               const LossScaleState &after) {
  StepMetrics rec;
  rec.step = s;
  rec.loss = loss;
  rec.stepTimeS = seconds;
  rec.tokensPerS = tokensPerS;
  rec.extra.emplace_back("bytes_sent", executor->traffic().stepBytes());
  // Per kind, e.g. "bytes_reduce_scatter" (ring volumes, rank 0).
  for (int k = 0; k < mpi::kNumCollectiveKinds; ++k) {
    auto kind = static_cast<mpi::CollectiveKind>(k);
    rec.extra.emplace_back(std::string("bytes_") +
                               mpi::collectiveKindName(kind),
                           executor->traffic().stepBytes(kind));
  }
  // The largest attention score block a kernel allocated (rank 0).
  if (int64_t scores = executor->kernelStats().attentionScoresBytes)
    rec.extra.emplace_back("attention_scores_bytes",
                           static_cast<double>(scores));
  if (gatherPeaks)
    rec.intLists.emplace_back("peak_activation_sets", peaks);
  std::vector<int64_t> peakBytes;
  for (int r = 0; r < world->size(); ++r)
    peakBytes.push_back(lastMemory[kMemFields * r + kMemFields - 1]);
  rec.intLists.emplace_back("peak_bytes", peakBytes);
  // Pipeline plans: every rank's bytes per collective kind.
  if (!rankBytes.empty())
    for (int k = 0; k < mpi::kNumCollectiveKinds; ++k) {
      std::vector<double> perRank;
      for (int r = 0; r < world->size(); ++r)
        perRank.push_back(rankBytes[mpi::kNumCollectiveKinds * r + k]);
      rec.numLists.emplace_back(
          std::string("bytes_") +
              mpi::collectiveKindName(static_cast<mpi::CollectiveKind>(k)) +
              "_per_rank",
          std::move(perRank));
    }
  // --clip-grad plans: the global gradient norm before clipping (the same
  // on every rank).
  if (std::optional<double> norm = executor->lastGradNorm())
    rec.extra.emplace_back("grad_norm", *norm);
  if (after.scale && before.skippedSteps && after.skippedSteps) {
    rec.extra.emplace_back("loss_scale", *after.scale);
    rec.extra.emplace_back("skipped",
                           *after.skippedSteps > *before.skippedSteps ? 1 : 0);
  }
  for (const auto &extra : stepExtras)
    rec.extra.push_back(extra);
  if (llvm::Error err = metrics->write(rec))
    abortAll(*world, llvm::toString(std::move(err)));
}

} // namespace tessera::runtime

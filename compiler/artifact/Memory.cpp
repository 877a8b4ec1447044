//===- Memory.cpp - predicted peak memory per rank ------------------------===//

#include "compiler/artifact/Memory.h"

#include "common/schedule/PipelineSchedule.h"
#include "compiler/pipeline/Pipeline.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/lowering/Passes.h"
#include "runtime/metrics/ByteSize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <set>

using namespace mlir;
using namespace tessera;
namespace json = llvm::json;

/// Breakdown keys, in the order they are printed.
static constexpr const char *kParts[] = {
    "parameters", "optimizer_state", "other_arguments", "constants",
    "arena",      "batch",           "updated_state",   "workspace"};

/// Pipeline breakdown keys, in the order they are printed.
static constexpr const char *kPipelineParts[] = {
    "parameters",   "optimizer_state", "other_arguments",
    "constants",    "batch",           "activation_stash",
    "accumulators", "updated_state",   "function",
    "sends"};

namespace {

/// Bytes the runtime allocates for a tensor of `type` (Tensor::empty:
/// element bytes rounded up to 64, at least 64); 0 for other types.
int64_t allocBytes(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape())
    return 0;
  Type e = ranked.getElementType();
  int64_t bits = e.isInteger(1) ? 8 : e.getIntOrFloatBitWidth();
  int64_t bytes = ranked.getNumElements() * bits / 8;
  return std::max<int64_t>((bytes + 63) / 64 * 64, 64);
}

/// One chunk function's bindings and heap profile (tsr-plan-memory on a
/// pipeline plan, passes/lowering/Passes.td).
struct FunctionProfile {
  int64_t peak = 0, sent = 0, constants = 0;
  /// Per argument: step argument index (tsrt.arg) or -1, and its type.
  SmallVector<int64_t> argIndex;
  SmallVector<Type> argTypes;
  SmallVector<StringRef> argRoles;
  /// Per result: kind ('s' saved, 'a' acc, 'r' step result), index,
  /// the bytes the run allocated for it, its type's allocation size, and
  /// whether it is the loss.
  struct Result {
    char kind = 'r';
    int64_t index = 0, bytes = 0, typeBytes = 0;
    bool loss = false;
  };
  SmallVector<Result> results;
  /// Point-to-point transfers: (channel, bytes only the pending send holds
  /// after the run) per send, the channel per receive.
  SmallVector<std::pair<int64_t, int64_t>> sends;
  /// Its sends and receives in program order (schedule::sendReleases).
  std::vector<tsrt::schedule::CommEvent> comms;
};

/// The step's argument and result roles (`tsrt.role` of @train_step, which
/// a pipeline plan keeps as a declaration).
struct StepRoles {
  SmallVector<StringRef> args, results;
};

StepRoles stepRoles(ModuleOp program) {
  StepRoles roles;
  auto step = program.lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return roles;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto role = step.getArgAttrOfType<StringAttr>(i, "tsrt.role");
    roles.args.push_back(role ? role.getValue() : StringRef());
  }
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    auto role = step.getResultAttrOfType<StringAttr>(i, "tsrt.role");
    roles.results.push_back(role ? role.getValue() : StringRef());
  }
  return roles;
}

FailureOr<FunctionProfile> profileOf(ModuleOp program, const StepRoles &roles,
                                     Attribute symbol) {
  auto ref = dyn_cast<FlatSymbolRefAttr>(symbol);
  auto func = ref ? program.lookupSymbol<func::FuncOp>(ref) : func::FuncOp();
  if (!func)
    return failure();
  auto heap = func->getAttrOfType<DictionaryAttr>("tsrt.heap_profile");
  auto bytes = func->getAttrOfType<DenseI64ArrayAttr>("tsrt.result_bytes");
  if (!heap || !bytes ||
      bytes.size() != static_cast<int64_t>(func.getNumResults()))
    return failure();
  FunctionProfile f;
  auto get = [&](StringRef key) -> int64_t {
    auto a = heap.getAs<IntegerAttr>(key);
    return a ? a.getInt() : 0;
  };
  f.peak = get("peak");
  f.sent = get("sent");
  f.constants = get("constants");
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto arg = func.getArgAttrOfType<IntegerAttr>(i, "tsrt.arg");
    int64_t index = arg ? arg.getInt() : -1;
    f.argIndex.push_back(index);
    f.argTypes.push_back(func.getArgument(i).getType());
    f.argRoles.push_back(index >= 0 && index < int64_t(roles.args.size())
                             ? roles.args[index]
                             : StringRef());
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    FunctionProfile::Result r;
    if (auto a = func.getResultAttrOfType<IntegerAttr>(i, "tsrt.saved")) {
      r.kind = 's';
      r.index = a.getInt();
    } else if (auto a = func.getResultAttrOfType<IntegerAttr>(i, "tsrt.acc")) {
      r.kind = 'a';
      r.index = a.getInt();
    } else if (auto a =
                   func.getResultAttrOfType<IntegerAttr>(i, "tsrt.result")) {
      r.index = a.getInt();
      r.loss = r.index >= 0 && r.index < int64_t(roles.results.size()) &&
               roles.results[r.index] == "loss";
    }
    r.bytes = bytes[i];
    r.typeBytes = allocBytes(func.getResultTypes()[i]);
    f.results.push_back(r);
  }
  llvm::DenseSet<Value> returned, counted;
  func.walk([&](func::ReturnOp ret) {
    for (Value v : ret.getOperands())
      returned.insert(v);
  });
  func.walk([&](Operation *op) {
    if (auto send = dyn_cast<tsrt::SendOp>(op)) {
      Value v = send.getInput();
      bool extra = !returned.contains(v) && counted.insert(v).second;
      f.sends.push_back({static_cast<int64_t>(send.getChannel()),
                         extra ? allocBytes(v.getType()) : 0});
      f.comms.push_back({true, static_cast<int64_t>(send.getChunk()),
                         static_cast<int64_t>(send.getChannel())});
    } else if (auto recv = dyn_cast<tsrt::RecvOp>(op)) {
      f.comms.push_back({false, static_cast<int64_t>(recv.getChunk()),
                         static_cast<int64_t>(recv.getChannel())});
    }
  });
  return f;
}

/// The heap of one stage over one step, in the order
/// runtime/executor/PipelineExecutor.cpp (Executor::stepPipeline) allocates
/// and frees. See docs/PipelineMemory.md.
struct StagePrediction {
  int64_t parameters = 0, optimizerState = 0, otherArguments = 0;
  int64_t constants = 0;
  /// Heap parts at the step's heap peak.
  int64_t batch = 0, stash = 0, accumulators = 0, updatedState = 0,
          function = 0, sends = 0;
  int64_t setsAtPeak = 0, maxSets = 0;
  int64_t heapPeak() const {
    return batch + stash + accumulators + updatedState + function + sends;
  }
  int64_t peak() const {
    return parameters + optimizerState + otherArguments + constants +
           heapPeak();
  }
};

} // namespace

/// Predicts every stage of the pipeline plan `program`; failure when the
/// functions carry no heap profile.
static FailureOr<std::vector<StagePrediction>>
predictPipeline(ModuleOp program, tsrt::PipelineScheduleOp op) {
  namespace schedule = tessera::tsrt::schedule;
  int64_t stages = static_cast<int64_t>(op.getStages());
  int64_t chunks = static_cast<int64_t>(op.getForward().size());
  int64_t microBatches = static_cast<int64_t>(op.getMicroBatches());
  if (stages < 1 || static_cast<int64_t>(op.getActions().size()) != stages ||
      static_cast<int64_t>(op.getBackward().size()) != chunks ||
      static_cast<int64_t>(op.getApply().size()) != chunks)
    return failure();
  std::vector<FunctionProfile> fwd, bwd, apply;
  StepRoles roles = stepRoles(program);
  for (int64_t c = 0; c < chunks; ++c) {
    FailureOr<FunctionProfile> f =
        profileOf(program, roles, op.getForward()[c]);
    FailureOr<FunctionProfile> b =
        profileOf(program, roles, op.getBackward()[c]);
    FailureOr<FunctionProfile> a = profileOf(program, roles, op.getApply()[c]);
    if (failed(f) || failed(b) || failed(a))
      return failure();
    fwd.push_back(std::move(*f));
    bwd.push_back(std::move(*b));
    apply.push_back(std::move(*a));
  }
  std::vector<schedule::StageActions> actions;
  for (Attribute text : op.getActions()) {
    llvm::Expected<schedule::StageActions> parsed =
        schedule::parse(cast<StringAttr>(text).getValue());
    if (!parsed) {
      llvm::consumeError(parsed.takeError());
      return failure();
    }
    actions.push_back(std::move(*parsed));
  }
  std::vector<int64_t> maxSets = schedule::peakInFlight(actions);
  for (const schedule::StageActions &stage : actions)
    for (const schedule::Action &a : stage)
      if (a.chunk < 0 || a.chunk >= chunks)
        return failure();
  // The executor waits for each send at a fixed action of its stage and
  // frees its buffer there (schedule::sendReleases).
  std::vector<schedule::ChunkComms> comms(chunks);
  for (int64_t c = 0; c < chunks; ++c)
    comms[c] = {fwd[c].comms, bwd[c].comms};
  std::vector<std::vector<std::vector<int64_t>>> releases =
      schedule::sendReleases(actions, comms);

  std::vector<StagePrediction> out(stages);
  for (int64_t s = 0; s < stages; ++s) {
    StagePrediction &pred = out[s];
    pred.maxSets = maxSets[s];
    // Persistent state (the executor's `state`: the stage's params,
    // frozen weights and optimizer state) and constants of its chunks.
    // Tokens and labels are sliced per micro-batch at the step's start and
    // held to its end.
    std::map<int64_t, std::pair<StringRef, int64_t>> held;
    int64_t batch = 0;
    std::set<int64_t> batchArgs;
    for (int64_t c = s; c < chunks; c += stages)
      for (const FunctionProfile *f : {&fwd[c], &bwd[c], &apply[c]}) {
        pred.constants += f->constants;
        for (auto [i, index] : llvm::enumerate(f->argIndex)) {
          if (index < 0)
            continue;
          StringRef role = f->argRoles[i];
          if (role == "tokens" || role == "labels") {
            if (batchArgs.insert(index).second)
              batch += microBatches * allocBytes(f->argTypes[i]);
            continue;
          }
          held[index] = {role, allocBytes(f->argTypes[i])};
        }
      }
    for (auto &[index, roleBytes] : held) {
      auto [role, bytes] = roleBytes;
      if (role == "param" || role == "frozen")
        pred.parameters += bytes;
      else if (role == "opt_state")
        pred.optimizerState += bytes;
      else
        pred.otherArguments += bytes;
    }

    // The step's heap above its start, part by part (the persistent parts
    // above stay as they are); `pred` becomes `now` at the heap's peak.
    StagePrediction now = pred;
    now.batch = batch;
    int64_t peak = -1;
    std::map<std::pair<int64_t, int64_t>, int64_t> stash;
    std::set<int64_t> accAllocated;
    auto mark = [&](int64_t function) {
      now.function = function;
      now.setsAtPeak = static_cast<int64_t>(stash.size());
      if (now.heapPeak() > peak) {
        peak = now.heapPeak();
        pred = now;
      }
      now.function = 0;
    };
    mark(0);
    std::vector<std::pair<int64_t, int64_t>> pending; // (release after, bytes)
    for (auto [k, a] : llvm::enumerate(actions[s])) {
      bool forward = a.phase == schedule::Phase::Forward;
      const FunctionProfile &f = forward ? fwd[a.chunk] : bwd[a.chunk];
      // The run: its own peak (sends it issues included) over what is held.
      mark(f.peak);
      // Its results are held (the saved ones move to the stash); its sends
      // are pending.
      int64_t results = 0, saved = 0;
      for (const FunctionProfile::Result &r : f.results)
        (r.kind == 's' ? saved : results) += r.bytes;
      now.function = 0;
      for (auto [i, send] : llvm::enumerate(f.sends)) {
        pending.push_back({releases[s][k][i], send.second});
        now.sends += send.second;
      }
      auto key = std::make_pair(a.chunk, a.microBatch);
      if (forward) {
        stash[key] = saved;
        now.stash += saved;
      } else {
        now.stash -= stash[key];
        stash.erase(key);
      }
      // Accumulation: the first contribution is cloned, the others added in
      // place.
      for (const FunctionProfile::Result &r : f.results)
        if (r.kind == 'a' && accAllocated.insert(r.index).second) {
          now.accumulators += r.typeBytes;
          mark(results);
        }
      mark(results);
      // The results are dropped; the sends due here are waited for and
      // released.
      for (auto &[after, bytes] : pending)
        if (after == static_cast<int64_t>(k)) {
          now.sends -= bytes;
          bytes = 0;
        }
    }
    now.sends = 0; // every send completes before the apply
    // Apply, in ascending chunk order; the new state is held until all
    // have run.
    for (int64_t c = s; c < chunks; c += stages) {
      const FunctionProfile &f = apply[c];
      mark(f.peak);
      for (const FunctionProfile::Result &r : f.results)
        if (!r.loss)
          now.updatedState += r.bytes;
    }
  }
  return out;
}

static json::Object stageBreakdown(const StagePrediction &p) {
  int64_t values[] = {
      p.parameters, p.optimizerState, p.otherArguments, p.constants, p.batch,
      p.stash,      p.accumulators,   p.updatedState,   p.function,  p.sends};
  json::Object breakdown;
  for (auto [key, value] : llvm::zip(kPipelineParts, values))
    breakdown[key] = value;
  return breakdown;
}

static json::Object pipelineReport(ModuleOp program,
                                   tsrt::PipelineScheduleOp op) {
  FailureOr<std::vector<StagePrediction>> stages = predictPipeline(program, op);
  if (failed(stages))
    return json::Object{{"planned", false},
                        {"reason", "the pipeline's functions have no heap "
                                   "profile (tsr-plan-memory did not run)"}};
  json::Array perStage;
  size_t worst = 0;
  for (auto [s, p] : llvm::enumerate(*stages)) {
    if (p.peak() > (*stages)[worst].peak())
      worst = s;
    perStage.push_back(json::Object{{"stage", static_cast<int64_t>(s)},
                                    {"peak_bytes", p.peak()},
                                    {"activation_sets_at_peak", p.setsAtPeak},
                                    {"max_activation_sets", p.maxSets},
                                    {"breakdown", stageBreakdown(p)}});
  }
  const StagePrediction &w = (*stages)[worst];
  return json::Object{{"planned", true},
                      {"pipeline", true},
                      {"alignment", 64},
                      {"peak_bytes_per_rank", w.peak()},
                      {"peak_stage", static_cast<int64_t>(worst)},
                      {"arena_bytes", 0},
                      {"arena_live_bytes", 0},
                      {"breakdown", stageBreakdown(w)},
                      {"stages", std::move(perStage)}};
}

json::Object artifact::memoryReport(ModuleOp program) {
  if (auto ops = program.getOps<tsrt::PipelineScheduleOp>(); !ops.empty())
    return pipelineReport(program, *ops.begin());
  auto func = program.lookupSymbol<func::FuncOp>("train_step");
  auto peak = func ? func->getAttrOfType<DictionaryAttr>("tsrt.peak_bytes")
                   : DictionaryAttr();
  if (!peak)
    return json::Object{
        {"planned", false},
        {"reason", "pipeline plans are not memory-planned: their values are "
                   "allocated on the heap"}};
  json::Object breakdown;
  auto get = [&](StringRef key) -> int64_t {
    auto a = peak.getAs<IntegerAttr>(key);
    return a ? a.getInt() : 0;
  };
  for (const char *key : kParts)
    breakdown[key] = get(key);
  auto live = func->getAttrOfType<IntegerAttr>("tsrt.arena_live_bytes");
  return json::Object{{"planned", true},
                      {"alignment", 64},
                      {"peak_bytes_per_rank", get("peak")},
                      {"arena_bytes", get("arena")},
                      {"arena_live_bytes", live ? live.getInt() : 0},
                      {"breakdown", std::move(breakdown)}};
}

FailureOr<OwningOpRef<ModuleOp>>
artifact::lowerToRuntimeProgram(ModuleOp partitioned, const planner::Plan &plan,
                                bool withEval) {
  OwningOpRef<ModuleOp> program(cast<ModuleOp>(partitioned->clone()));
  PassManager pm(partitioned.getContext());
  pipeline::lowerToRuntimeStage(plan, withEval).build(pm);
  if (failed(pm.run(*program)))
    return failure();
  return program;
}

FailureOr<json::Object> artifact::predictMemory(ModuleOp partitioned,
                                                const planner::Plan &plan) {
  FailureOr<OwningOpRef<ModuleOp>> program =
      lowerToRuntimeProgram(partitioned, plan);
  if (failed(program))
    return failure();
  return memoryReport(**program);
}

std::optional<int64_t> artifact::predictedPeak(const json::Object &report) {
  if (report.getBoolean("planned").value_or(false))
    if (std::optional<int64_t> peak = report.getInteger("peak_bytes_per_rank"))
      return *peak;
  return std::nullopt;
}

FailureOr<int64_t> artifact::predictPeakBytes(ModuleOp imported,
                                              const planner::Plan &plan) {
  if (llvm::Error err = plan.validate()) {
    llvm::consumeError(std::move(err));
    return failure();
  }
  // Diagnostics of a variation that does not compile are not the user's.
  ScopedDiagnosticHandler quiet(imported.getContext(),
                                [](Diagnostic &) { return success(); });
  OwningOpRef<ModuleOp> module(cast<ModuleOp>(imported->clone()));
  if (failed(pipeline::runStages(*module, pipeline::partitionStages(plan),
                                 /*dumpDir=*/"")))
    return failure();
  FailureOr<json::Object> report = predictMemory(*module, plan);
  if (failed(report))
    return failure();
  std::optional<int64_t> peak = predictedPeak(*report);
  if (!peak)
    return failure();
  return *peak;
}

void artifact::explainMemory(const json::Object &report,
                             llvm::raw_ostream &os) {
  std::optional<int64_t> peak = predictedPeak(report);
  if (!peak) {
    os << "predicted peak memory per rank: not predicted ("
       << report.getString("reason").value_or("no memory plan") << ")\n";
    return;
  }
  os << "predicted peak memory per rank: " << runtime::formatByteSize(*peak);
  if (const json::Array *stages = report.getArray("stages")) {
    os << " (pipeline stage " << report.getInteger("peak_stage").value_or(0)
       << ")\n";
    static constexpr const char *kStageText[] = {
        "parameters (param + frozen)",
        "optimizer state",
        "other arguments",
        "constants",
        "batch (tokens + labels, M slices)",
        "activation stash",
        "gradient accumulators",
        "updated state (apply)",
        "running function",
        "pending sends"};
    for (const json::Value &v : *stages) {
      const json::Object *stage = v.getAsObject();
      if (!stage)
        continue;
      os << llvm::formatv(
          "  stage {0}: {1} ({2} activation sets held at the peak; at most "
          "{3} by the schedule)\n",
          stage->getInteger("stage").value_or(0),
          runtime::formatByteSize(stage->getInteger("peak_bytes").value_or(0)),
          stage->getInteger("activation_sets_at_peak").value_or(0),
          stage->getInteger("max_activation_sets").value_or(0));
      const json::Object *breakdown = stage->getObject("breakdown");
      for (auto [key, text] : llvm::zip(kPipelineParts, kStageText)) {
        int64_t bytes = breakdown ? breakdown->getInteger(key).value_or(0) : 0;
        os << llvm::formatv("    {0,-34} {1,14}\n", text, bytes);
      }
    }
    return;
  }
  os << "\n";
  const json::Object *breakdown = report.getObject("breakdown");
  static constexpr const char *kText[] = {
      "parameters (param + frozen)",
      "optimizer state",
      "other arguments",
      "constants",
      "arena (activations, grads, new state)",
      "batch (tokens + labels)",
      "returned on the heap (loss)",
      "kernel workspace (attention, bf16/f16, vocab-parallel CE)"};
  for (auto [key, text] : llvm::zip(kParts, kText)) {
    int64_t bytes = breakdown ? breakdown->getInteger(key).value_or(0) : 0;
    if (bytes == 0 && StringRef(key) == "workspace")
      continue; // only plans with attention, bf16/f16 or vocab-parallel
                // kernels have one
    os << llvm::formatv("  {0,-34} {1,14}\n", text, bytes);
  }
}

std::vector<artifact::MemoryAlternative>
artifact::memoryAlternatives(ModuleOp imported, const planner::Plan &plan) {
  std::vector<MemoryAlternative> out;
  auto add = [&](std::string flags, planner::Plan changed) {
    // A pinned rank order names the original plan's axes; a variation with
    // other axes (e.g. + pp) takes the default (the order changes no memory).
    if (changed.rankAxisNames() != plan.rankAxisNames())
      changed.rankOrder.clear();
    MemoryAlternative alt{std::move(flags), std::move(changed), std::nullopt,
                          ""};
    if (llvm::Error err = alt.plan.validate()) {
      alt.note = llvm::toString(std::move(err));
    } else {
      FailureOr<int64_t> peak = predictPeakBytes(imported, alt.plan);
      if (succeeded(peak))
        alt.peak = *peak;
      else
        alt.note = "does not compile for this model";
    }
    out.push_back(std::move(alt));
  };
  // More ZeRO (only meaningful over a data-parallel axis).
  if (plan.dp > 1 && !plan.pipelined())
    for (int64_t stage = plan.zero + 1; stage <= 3; ++stage) {
      planner::Plan p = plan;
      p.zero = stage;
      add("--zero " + std::to_string(stage), p);
    }
  // More tensor parallelism.
  for (int64_t factor : {2, 4}) {
    planner::Plan p = plan;
    p.tp = plan.tp * factor;
    add("--tp " + std::to_string(p.tp), p);
  }
  // More recomputation.
  static const char *kRecompute[] = {"none", "selective", "full"};
  int current = 0;
  for (int i = 0; i < 3; ++i)
    if (plan.recompute == kRecompute[i])
      current = i;
  for (int i = current + 1; i < 3; ++i) {
    planner::Plan p = plan;
    p.recompute = kRecompute[i];
    add(std::string("--recompute ") + kRecompute[i], p);
  }
  // More pipeline stages.
  {
    planner::Plan p = plan;
    p.pp = plan.pp * 2;
    add("--pp " + std::to_string(p.pp), p);
  }
  return out;
}

//===- Memory.cpp - predicted peak memory per rank ------------------------===//

#include "compiler/artifact/Memory.h"

#include "compiler/pipeline/Pipeline.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/lowering/Passes.h"
#include "runtime/metrics/ByteSize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace tessera;
namespace json = llvm::json;

/// Breakdown keys, in the order they are printed.
static constexpr const char *kParts[] = {
    "parameters", "optimizer_state", "other_arguments", "constants",
    "arena",      "batch",           "updated_state",   "workspace"};

json::Object artifact::memoryReport(ModuleOp program) {
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
artifact::lowerToRuntimeProgram(ModuleOp partitioned,
                                const planner::Plan &plan) {
  OwningOpRef<ModuleOp> program(cast<ModuleOp>(partitioned->clone()));
  PassManager pm(partitioned.getContext());
  pipeline::lowerToRuntimeStage(plan).build(pm);
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
  os << "predicted peak memory per rank: " << runtime::formatByteSize(*peak)
     << "\n";
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
    } else if (alt.plan.pipelined()) {
      alt.note = "not predicted: pipeline plans are not memory-planned yet";
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

//===- Memory.h - predicted peak memory per rank ----------------*- C++ -*-===//
//
// The compiler's prediction of the bytes one rank holds during a training
// step, from the static memory plan (`tsr-plan-memory`, see
// passes/lowering/Passes.td), as the manifest's "memory" object:
//   {"planned": true, "alignment": 64, "peak_bytes_per_rank": N,
//    "arena_bytes": A, "arena_live_bytes": L (the most bytes of arena
//    buffers live at once: a lower bound on A),
//    "breakdown": {"parameters", "optimizer_state", "other_arguments",
//                  "constants", "arena", "batch", "updated_state",
//                  "workspace"}}
// (all bytes; the breakdown sums to the peak). Pipeline plans (whose
// runtime keeps values on the heap) are predicted per stage by composing
// each chunk function's heap profile (tsr-plan-memory) along the stage's
// schedule, as runtime/executor/PipelineExecutor.cpp runs it
// (docs/PipelineMemory.md):
//   {"planned": true, "pipeline": true, "peak_bytes_per_rank": N (the
//    largest stage's), "peak_stage": s, "breakdown": {...of stage s},
//    "stages": [{"stage", "peak_bytes", "activation_sets_at_peak",
//                "max_activation_sets", "breakdown": {"parameters",
//                "optimizer_state", "other_arguments", "constants", "batch",
//                "activation_stash", "accumulators", "updated_state",
//                "function", "sends"}}, ...]}.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_ARTIFACT_MEMORY_H
#define TESSERA_COMPILER_ARTIFACT_MEMORY_H

#include "compiler/planner/Plan.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace tessera::artifact {

/// The "memory" object of a runtime program on which `tsr-plan-memory` has
/// run (reads @train_step's `tsrt.peak_bytes`).
llvm::json::Object memoryReport(mlir::ModuleOp program);

/// The runtime program of `partitioned`: a clone lowered by
/// tsr-lower-to-runtime, with gradient collectives bucketed and overlapped
/// when `plan.bucketMb` >= 0 (tsr-overlap-gradient-collectives), and
/// planned by tsr-plan-memory; with `withEval` (plans without pipeline
/// parallelism), it also holds @eval_step (tsr-build-eval-step). Failure:
/// the lowering failed (diagnostics emitted).
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
lowerToRuntimeProgram(mlir::ModuleOp partitioned, const planner::Plan &plan,
                      bool withEval = false);

/// Lowers a clone of `partitioned` (lowerToRuntimeProgram) and returns its
/// memory report. Failure: the lowering failed (diagnostics
/// emitted).
mlir::FailureOr<llvm::json::Object> predictMemory(mlir::ModuleOp partitioned,
                                                  const planner::Plan &plan);

/// The predicted peak bytes per rank of `report` (pipeline plans: of the
/// stage that needs most), or nullopt when the plan was not memory-planned.
std::optional<int64_t> predictedPeak(const llvm::json::Object &report);

/// Compiles a clone of `imported` (the module after ONNX import) for `plan`
/// and predicts its peak bytes per rank. Failure: the plan does not compile
/// (its diagnostics are dropped).
mlir::FailureOr<int64_t> predictPeakBytes(mlir::ModuleOp imported,
                                          const planner::Plan &plan);

/// One way to change a plan, and its predicted peak bytes per rank.
struct MemoryAlternative {
  std::string flags;           ///< e.g. "--tp 4", "--zero 2"
  planner::Plan plan;          ///< the changed plan
  std::optional<int64_t> peak; ///< predicted peak bytes per rank, if any
  std::string note;            ///< why there is no prediction, when none
};

/// Generic variations of `plan` that lower memory per rank: higher ZeRO
/// stages (when dp > 1), 2x and 4x tensor parallelism, more
/// recomputation, 2x pipeline stages. Each is recompiled from `imported`
/// and re-predicted (predictPeakBytes; pipeline variations too); variations
/// that do not compile carry a note instead of a peak.
std::vector<MemoryAlternative> memoryAlternatives(mlir::ModuleOp imported,
                                                  const planner::Plan &plan);

/// Prints the prediction for people (`--explain`): the peak per rank and its
/// breakdown.
void explainMemory(const llvm::json::Object &report, llvm::raw_ostream &os);

} // namespace tessera::artifact

#endif // TESSERA_COMPILER_ARTIFACT_MEMORY_H

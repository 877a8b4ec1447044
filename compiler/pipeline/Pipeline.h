//===- Pipeline.h - tessera-partition's pass pipeline -----------*- C++ -*-===//
//
// The compiler as a list of small passes (DESIGN.md, "Pipelines"):
//   tsr-build-train-step [-> tsr-mixed-precision] [-> tsr-recompute]
//   -> tsr-sharding-annotate -> tsr-sharding-propagate
//   -> tsr-sharding-partition [-> tsr-zero-sharding] [-> tsr-pipeline-split]
// (lowering to `tsrt` happens when the artifact is written). Each stage
// adds its passes created from their typed options (the tablegen-generated
// `*Options` structs), filled from the Plan. Each pass runs with
// verification; with a dump directory, the IR after each pass is written
// to DIR/NN-<pass>.mlir and each stage's pipeline, printed by the pass
// manager, to DIR/pipeline.txt, so any stage can be replayed with
// `tessera-opt --pass-pipeline='...'`.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PIPELINE_PIPELINE_H
#define TESSERA_COMPILER_PIPELINE_PIPELINE_H

#include "compiler/planner/Plan.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include <functional>
#include <string>
#include <vector>

namespace tessera::pipeline {

/// One step of the pipeline: passes on the module.
struct Stage {
  std::string name; ///< used in dump file names
  /// Adds the stage's passes, created from their typed options, to a pass
  /// manager on builtin.module; function passes are nested
  /// (`pm.addNestedPass<func::FuncOp>`).
  std::function<void(mlir::OpPassManager &)> build;

  /// The stage as a textual pipeline, printed by the pass manager
  /// (printAsTextualPipeline), e.g. "builtin.module(tsr-sharding-annotate{dp=2
  /// ... tp=2})": what `tessera-opt --pass-pipeline=` replays. Floating-point
  /// options print with 7 significant digits (MLIR's option printer).
  std::string pipelineText() const;
};

/// The stages that turn @forward into the partitioned @train_step for `plan`.
std::vector<Stage> partitionStages(const planner::Plan &plan);

/// The lowering to the runtime program (written with the artifact):
/// with `withEval` and a plan without pipeline parallelism,
/// tsr-build-eval-step first (the forward-only @eval_step beside
/// @train_step); then tsr-lower-to-runtime, then per function
/// tsr-overlap-gradient-collectives (when plan.bucketMb >= 0) and
/// tsr-plan-memory.
Stage lowerToRuntimeStage(const planner::Plan &plan, bool withEval = false);

/// Appends "NN-name: <stage.pipelineText()>" to `dir/pipeline.txt`, the
/// replay line of dump NN; index <= 1 starts the file afresh.
void recordStage(llvm::StringRef dir, unsigned index, const Stage &stage);

/// Writes `module` to `dir/NN-name.mlir` (creating `dir`). `generic` prints
/// the generic op form without verifying, for IR that a pass left invalid.
mlir::LogicalResult dumpModule(mlir::ModuleOp module, llvm::StringRef dir,
                               unsigned index, llvm::StringRef name,
                               bool generic = false);

/// Runs `stages` in order on `module`. Stops at the first failing pass (its
/// diagnostics have been emitted) and returns failure. When `dumpDir` is not
/// empty, writes the IR after each stage, numbered from `firstIndex`, the
/// IR a failing stage left as `NN-name.failed.mlir` (generic form, with a
/// note on stderr naming the pipeline that replays the failure), and appends
/// "NN-name: <pipelineText()>" for each stage run to `dumpDir/pipeline.txt`.
mlir::LogicalResult runStages(mlir::ModuleOp module,
                              llvm::ArrayRef<Stage> stages,
                              llvm::StringRef dumpDir, unsigned firstIndex = 1);

/// Registers every Tessera pass (so textual pipelines can name them).
void registerAllTesseraPasses();

} // namespace tessera::pipeline

#endif // TESSERA_COMPILER_PIPELINE_PIPELINE_H

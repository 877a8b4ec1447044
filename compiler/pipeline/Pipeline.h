//===- Pipeline.h - tessera-partition's pass pipeline -----------*- C++ -*-===//
//
// The compiler as a list of small passes (DESIGN.md, "Pipelines"):
//   tsr-build-train-step [-> tsr-mixed-precision] [-> tsr-recompute]
//   -> tsr-sharding-annotate -> tsr-sharding-propagate
//   -> tsr-sharding-partition [-> tsr-zero-sharding] [-> tsr-pipeline-split]
// (lowering to `tsrt` happens when the artifact is written). Each pass runs
// with verification; with a dump directory, the IR after each pass is written
// to DIR/NN-<pass>.mlir so any stage can be replayed with tessera-opt.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PIPELINE_PIPELINE_H
#define TESSERA_COMPILER_PIPELINE_PIPELINE_H

#include "compiler/planner/Plan.h"
#include "mlir/IR/BuiltinOps.h"
#include <string>
#include <vector>

namespace tessera::pipeline {

/// One step of the pipeline: a textual pass pipeline on the module.
struct Stage {
  std::string name;     ///< used in dump file names
  /// A textual pipeline on the module, e.g. "tsr-sharding-annotate{dp=2
  /// tp=2}"; function passes are nested: "func.func(tsr-sharding-propagate)".
  std::string pipeline;
};

/// The stages that turn @forward into the partitioned @train_step for `plan`.
std::vector<Stage> partitionStages(const planner::Plan &plan);

/// Writes `module` to `dir/NN-name.mlir` (creating `dir`). `generic` prints
/// the generic op form without verifying, for IR that a pass left invalid.
mlir::LogicalResult dumpModule(mlir::ModuleOp module, llvm::StringRef dir,
                               unsigned index, llvm::StringRef name,
                               bool generic = false);

/// Runs `stages` in order on `module`. Stops at the first failing pass (its
/// diagnostics have been emitted) and returns failure. When `dumpDir` is not
/// empty, writes the IR after each stage, numbered from `firstIndex`, and
/// the IR a failing stage left as `NN-name.failed.mlir` (generic form).
mlir::LogicalResult runStages(mlir::ModuleOp module,
                              llvm::ArrayRef<Stage> stages,
                              llvm::StringRef dumpDir, unsigned firstIndex = 1);

/// Registers every Tessera pass (so textual pipelines can name them).
void registerAllTesseraPasses();

} // namespace tessera::pipeline

#endif // TESSERA_COMPILER_PIPELINE_PIPELINE_H

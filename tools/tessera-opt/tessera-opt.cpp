//===- tessera-opt.cpp - run Tessera passes on .mlir files ----------------===//
//
// mlir-opt for Tessera: parses a .mlir file with the tsr, tsrt, shard and func
// dialects, runs the passes named on the command line (`--tsr-...`), and
// prints the result. `--help` lists every pass. Supports mlir-opt's
// `-split-input-file` and `-verify-diagnostics`.
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/fusion/Passes.h"
#include "passes/lowering/Passes.h"
#include "passes/pipeline/Passes.h"
#include "passes/sharding/Passes.h"
#include "passes/trace/Passes.h"
#include "passes/training/Passes.h"
#include "passes/zero/Passes.h"
#include "test/lib/TestPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  tessera::training::registerTrainingPasses();
  tessera::sharding::registerShardingPasses();
  tessera::zero::registerZeroPasses();
  tessera::fusion::registerFusionPasses();
  tessera::pipeline::registerPipelinePasses();
  tessera::lowering::registerLoweringPasses();
  tessera::trace::registerTracePasses();
  // Testing only (test/lib): fault-planting passes for the tests.
  tessera::test::registerTestPasses();
  mlir::DialectRegistry registry;
  registry.insert<tessera::tsr::TsrDialect, tessera::tsrt::TsrtDialect,
                  mlir::func::FuncDialect, mlir::shard::ShardDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Tessera optimizer driver\n", registry));
}

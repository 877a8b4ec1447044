//===- FuseOptimizer.cpp - tsr-fuse-optimizer ----------------------------------===//
//
// See Passes.td (FuseOptimizer).
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSEOPTIMIZER
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

struct FuseOptimizerPass : fusion::impl::FuseOptimizerBase<FuseOptimizerPass> {
  void runOnOperation() override {}
};

} // namespace

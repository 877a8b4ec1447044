//===- FuseNorm.cpp - tsr-fuse-norm ----------------------------------===//
//
// See Passes.td (FuseNorm).
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSENORM
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

struct FuseNormPass : fusion::impl::FuseNormBase<FuseNormPass> {
  void runOnOperation() override {}
};

} // namespace

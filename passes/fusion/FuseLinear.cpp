//===- FuseLinear.cpp - tsr-fuse-linear ----------------------------------===//
//
// See Passes.td (FuseLinear).
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSELINEAR
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

struct FuseLinearPass : fusion::impl::FuseLinearBase<FuseLinearPass> {
  void runOnOperation() override {}
};

} // namespace

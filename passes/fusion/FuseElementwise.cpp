//===- FuseElementwise.cpp - tsr-fuse-elementwise ----------------------------------===//
//
// See Passes.td (FuseElementwise).
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

struct FuseElementwisePass : fusion::impl::FuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {}
};

} // namespace

//===- TraceValues.cpp - stable trace ids on @train_step's ops ------------===//
//
// See Passes.td (TraceValues).
//
//===----------------------------------------------------------------------===//

#include "passes/trace/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace tessera::trace {
#define GEN_PASS_DEF_TRACEVALUES
#include "passes/trace/Passes.h.inc"
} // namespace tessera::trace

using namespace mlir;
using namespace tessera;

namespace {

struct TraceValuesPass : public trace::impl::TraceValuesBase<TraceValuesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || step.isExternal()) {
      module.emitError("tsr-trace-values: no func.func @train_step with a "
                       "body (run it after tsr-build-train-step)");
      return signalPassFailure();
    }
    Builder b(module.getContext());
    int64_t next = 0;
    step.walk([&](Operation *op) {
      if (op == step.getOperation() || op->getNumResults() == 0 ||
          op->hasTrait<OpTrait::IsTerminator>() ||
          op->hasTrait<OpTrait::ConstantLike>())
        return;
      op->setAttr(tsr::kTraceAttrName, b.getI64IntegerAttr(next++));
    });
  }
};

} // namespace

//===- LowerToRuntime.cpp - tsr + shard -> tsrt runtime program -----------===//

#include "passes/lowering/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"
#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace tessera::lowering {
#define GEN_PASS_DEF_LOWERTORUNTIME
#include "passes/lowering/Passes.h.inc"
} // namespace tessera::lowering

using namespace mlir;
using namespace tessera;

namespace {

/// Keeps only the op's inherent attributes (drops `tsr.*` annotations).
DictionaryAttr kernelAttrs(Operation *op) {
  SmallVector<NamedAttribute> kept;
  for (NamedAttribute attr : op->getAttrDictionary())
    if (!tsr::isTsrAttrName(attr.getName().getValue()))
      kept.push_back(attr);
  return DictionaryAttr::get(op->getContext(), kept);
}

/// Rewrites `tsr.role`/`tsr.name` to `tsrt.role`/`tsrt.name` and drops the
/// other `tsr.*` entries.
DictionaryAttr lowerArgAttrs(DictionaryAttr attrs) {
  if (!attrs)
    return attrs;
  SmallVector<NamedAttribute> kept;
  MLIRContext *ctx = attrs.getContext();
  for (NamedAttribute attr : attrs) {
    StringRef name = attr.getName().getValue();
    if (name == tsr::kRoleAttrName || name == tsr::kNameAttrName)
      kept.emplace_back(StringAttr::get(ctx, name == tsr::kRoleAttrName
                                                 ? "tsrt.role"
                                                 : "tsrt.name"),
                        attr.getValue());
    else if (!tsr::isTsrAttrName(name))
      kept.push_back(attr);
  }
  return DictionaryAttr::get(ctx, kept);
}

DenseI16ArrayAttr axesAttr(Builder &b, ArrayRef<int16_t> axes) {
  return b.getDenseI16ArrayAttr(axes);
}

struct LowerToRuntimePass
    : public lowering::impl::LowerToRuntimeBase<LowerToRuntimePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpBuilder b(module.getContext());

    // Grid: names from tsr.grid_axes, sizes from the shard.grid.
    SmallVector<shard::GridOp> grids(module.getOps<shard::GridOp>());
    if (grids.size() > 1) {
      grids[1].emitOpError("the runtime supports one grid per program");
      return signalPassFailure();
    }
    SmallVector<int64_t> shape = {1};
    if (!grids.empty())
      shape.assign(grids[0].getShape().begin(), grids[0].getShape().end());
    SmallVector<Attribute> names;
    if (auto axes = tsr::getGridAxes(module))
      names.assign(axes.begin(), axes.end());
    while (names.size() < shape.size())
      names.push_back(b.getStringAttr("axis" + Twine(names.size())));
    module->setAttr("tsrt.grid_axes", b.getArrayAttr(names));
    module->setAttr("tsrt.grid_shape", b.getDenseI64ArrayAttr(shape));
    module->removeAttr(tsr::kGridAxesAttrName);
    // The sharding search's prediction is for --explain, not the runtime.
    module->removeAttr(tsr::kShardingSearchAttrName);

    WalkResult result = module.walk([&](Operation *op) -> WalkResult {
      if (isa<ModuleOp, func::FuncOp, func::ReturnOp, shard::GridOp>(op) ||
          isa<tsrt::TsrtDialect>(op->getDialect()))
        return WalkResult::advance();
      b.setInsertionPoint(op);
      Operation *lowered = nullptr;
      Location loc = op->getLoc();
      if (auto cst = dyn_cast<tsr::ConstantOp>(op)) {
        lowered =
            tsrt::ConstantOp::create(b, loc, cst.getType(), cst.getValue());
      } else if (isa_and_nonnull<tsr::TsrDialect>(op->getDialect())) {
        lowered = tsrt::KernelOp::create(
            b, loc, op->getResultTypes(),
            b.getStringAttr(op->getName().stripDialect()), op->getOperands(),
            kernelAttrs(op));
        // tessera-check's trace id: the runtime dumps the kernel's results.
        if (IntegerAttr trace = tsr::getTraceId(op))
          lowered->setAttr("tsrt.trace", trace);
      } else if (auto ar = dyn_cast<shard::AllReduceOp>(op)) {
        StringRef kind =
            ar.getReduction() == shard::ReductionKind::Max ? "max" : "sum";
        if (ar.getReduction() != shard::ReductionKind::Sum &&
            ar.getReduction() != shard::ReductionKind::Max) {
          op->emitOpError("reduction kind not supported by the runtime");
          return WalkResult::interrupt();
        }
        lowered = tsrt::AllReduceOp::create(
            b, loc, ar.getResult().getType(), ar.getInput(),
            axesAttr(b, ar.getGridAxes()), b.getStringAttr(kind));
      } else if (auto ag = dyn_cast<shard::AllGatherOp>(op)) {
        lowered = tsrt::AllGatherOp::create(
            b, loc, ag.getResult().getType(), ag.getInput(),
            axesAttr(b, ag.getGridAxes()),
            b.getI64IntegerAttr(ag.getGatherAxis().getSExtValue()));
      } else if (auto rs = dyn_cast<shard::ReduceScatterOp>(op)) {
        lowered = tsrt::ReduceScatterOp::create(
            b, loc, rs.getResult().getType(), rs.getInput(),
            axesAttr(b, rs.getGridAxes()),
            b.getI64IntegerAttr(rs.getScatterAxis().getSExtValue()));
      } else if (auto as = dyn_cast<shard::AllSliceOp>(op)) {
        lowered = tsrt::AllSliceOp::create(
            b, loc, as.getResult().getType(), as.getInput(),
            axesAttr(b, as.getGridAxes()),
            b.getI64IntegerAttr(as.getSliceAxis().getSExtValue()));
      } else if (auto a2a = dyn_cast<shard::AllToAllOp>(op)) {
        lowered = tsrt::AllToAllOp::create(
            b, loc, a2a.getResult().getType(), a2a.getInput(),
            axesAttr(b, a2a.getGridAxes()),
            b.getI64IntegerAttr(a2a.getSplitAxis().getSExtValue()),
            b.getI64IntegerAttr(a2a.getConcatAxis().getSExtValue()));
      } else {
        op->emitOpError("has no runtime lowering");
        return WalkResult::interrupt();
      }
      op->replaceAllUsesWith(lowered->getResults());
      op->erase();
      return WalkResult::skip();
    });
    if (result.wasInterrupted())
      return signalPassFailure();

    for (shard::GridOp grid : grids)
      grid.erase();
    for (auto func : module.getOps<func::FuncOp>()) {
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        func.setArgAttrs(i, lowerArgAttrs(func.getArgAttrDict(i)));
      for (unsigned i = 0; i < func.getNumResults(); ++i)
        func.setResultAttrs(i, lowerArgAttrs(func.getResultAttrDict(i)));
      for (NamedAttribute attr : func->getDiscardableAttrs())
        if (tsr::isTsrAttrName(attr.getName().getValue()))
          func->removeAttr(attr.getName());
    }
  }
};

} // namespace

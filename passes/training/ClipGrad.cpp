//===- ClipGrad.cpp - gradient clipping by the global L2 norm -------------===//
//
// See Passes.td (tsr-clip-grad). On the global (not yet partitioned)
// @train_step, in front of the optimizer updates:
//
//   norm  = sqrt(Σ_k sum_squares(g_k))          one term per update
//   coef  = C / max(norm + 1e-6, C)             = min(1, C / (norm + 1e-6))
//   g_k' = g_k · coef                            each update's gradient
//
// exactly torch.nn.utils.clip_grad_norm_ (max_norm = C, norm_type = 2). The
// norm is a new result (tsr.role = "grad_norm"). Because the terms are
// written once per parameter on global values, the partitioner's sharding
// rules decide where each term is reduced: a gradient split over some grid
// axes gives a term partial over exactly those axes (all-reduced as a
// scalar), and a gradient replicated over an axis gives a replicated term,
// counted once (the bug class of pytorch#170862 and torchtitan#596, where
// replicated parameters' terms were summed once per rank).
//
//===----------------------------------------------------------------------===//

#include "passes/training/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>

namespace tessera::training {
#define GEN_PASS_DEF_CLIPGRAD
#include "passes/training/Passes.h.inc"
} // namespace tessera::training

using namespace mlir;
using namespace tessera;

namespace {

/// torch.nn.utils.clip_grad_norm_'s epsilon in max_norm / (norm + eps).
constexpr double kClipEps = 1e-6;

Value scalarF32(OpBuilder &b, Location loc, double v) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  auto attr = DenseElementsAttr::get(type, b.getF32FloatAttr(v));
  return tsr::ConstantOp::create(b, loc, type, cast<ElementsAttr>(attr));
}

struct ClipGradPass : training::impl::ClipGradBase<ClipGradPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!(maxNorm >= 0) || !std::isfinite(maxNorm)) {
      module.emitError("tsr-clip-grad: max-norm must be a finite number >= 0 "
                       "(0: no clipping), got ")
          << maxNorm;
      return signalPassFailure();
    }
    if (maxNorm == 0)
      return;
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal()) {
      module.emitError("tsr-clip-grad needs a @train_step with a body (run "
                       "tsr-build-train-step first)");
      return signalPassFailure();
    }
    if (failed(clip(func)))
      return signalPassFailure();
  }

  LogicalResult clip(func::FuncOp func) {
    for (unsigned r = 0; r < func.getNumResults(); ++r)
      if (auto role = tsr::getResultRole(func, r);
          role && role.getValue() == kRole)
        return func.emitError("tsr-clip-grad: @train_step already has a "
                              "\"grad_norm\" result (the pass runs once)");
    Block &body = func.front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<tsr::OptimizerUpdateOpInterface> updates;
    for (Operation &op : body)
      if (auto update = dyn_cast<tsr::OptimizerUpdateOpInterface>(op))
        updates.push_back(update);
    if (updates.empty())
      return func.emitError("tsr-clip-grad: @train_step has no optimizer "
                            "update whose gradient could be clipped");
    for (auto update : updates) {
      auto type =
          dyn_cast<RankedTensorType>(update.getGradOperand().get().getType());
      if (!type || !type.getElementType().isF32())
        return update->emitOpError("tsr-clip-grad: the gradient must be an "
                                   "f32 tensor, got ")
               << update.getGradOperand().get().getType();
    }

    // 1. One term per update, right after its gradient is made (a gradient
    // read by several updates is counted once per update, as torch counts
    // p.grad once per parameter).
    OpBuilder b(func.getContext());
    Location loc = ret.getLoc();
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    SmallVector<Value> terms;
    Operation *lastTerm = nullptr;
    for (auto update : updates) {
      Value g = update.getGradOperand().get();
      if (Operation *def = g.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(&body);
      auto term = tsr::SumSquaresOp::create(b, update->getLoc(), scalar, g);
      terms.push_back(term);
      if (!lastTerm || lastTerm->isBeforeInBlock(term))
        lastTerm = term;
    }

    // 2. The norm and the coefficient after the last term: a chain of
    // scalar adds in update order (each a linear sum the partitioner and
    // the pipeline split pass partial values through).
    b.setInsertionPointAfter(lastTerm);
    Value total = terms.front();
    for (Value t : ArrayRef(terms).drop_front())
      total = tsr::AddOp::create(b, loc, total, t);
    Value norm = tsr::SqrtOp::create(b, loc, total);
    Value c = scalarF32(b, loc, maxNorm);
    Value denom = tsr::MaxOp::create(
        b, loc, tsr::AddOp::create(b, loc, norm, scalarF32(b, loc, kClipEps)),
        c);
    Value coef = tsr::DivOp::create(b, loc, c, denom);
    Operation *anchor = coef.getDefiningOp()->getNextNode();

    // 3. Every update, and whatever reads its results, moves after the
    // coefficient (in order; nothing before the norm needs them, as no
    // gradient depends on an updated value).
    DenseSet<Operation *> moved;
    SmallVector<Operation *> toMove;
    for (Operation &op : body) {
      if (&op == coef.getDefiningOp())
        break;
      bool dependent = isa<tsr::OptimizerUpdateOpInterface>(op) ||
                       llvm::any_of(op.getOperands(), [&](Value v) {
                         Operation *d = v.getDefiningOp();
                         return d && moved.contains(d);
                       });
      if (dependent) {
        moved.insert(&op);
        toMove.push_back(&op);
      }
    }
    for (Operation *op : toMove)
      op->moveBefore(anchor);

    // 4. g' = g · coef in front of each update (coef broadcast to the
    // gradient's shape: a transient, no gradient-sized constant).
    for (auto update : updates) {
      OpOperand &grad = update.getGradOperand();
      auto type = cast<RankedTensorType>(grad.get().getType());
      b.setInsertionPoint(update);
      Value s = coef;
      if (type.getRank() != 0)
        s = tsr::BroadcastOp::create(b, update->getLoc(), type, coef);
      grad.set(tsr::MulOp::create(b, update->getLoc(), grad.get(), s));
    }

    // 5. The pre-clip norm is a result.
    MLIRContext *ctx = func.getContext();
    NamedAttrList attrs;
    attrs.set(tsr::kRoleAttrName, b.getStringAttr(kRole));
    attrs.set(tsr::kNameAttrName, b.getStringAttr(kRole));
    if (failed(func.insertResult(func.getNumResults(), scalar,
                                 attrs.getDictionary(ctx))))
      return failure();
    ret->insertOperands(ret.getNumOperands(), norm);
    return success();
  }

  static constexpr StringLiteral kRole = "grad_norm";
};

} // namespace

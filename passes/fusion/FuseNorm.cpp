//===- FuseNorm.cpp - tsr-fuse-norm ----------------------------------===//
//
// See Passes.td (FuseNorm). Two rewrites, each of a pair of ops adjacent in
// dataflow and in one block:
//   forward   %h = tsr.add %x, %r ; %y = tsr.layer_norm %h, ...
//             -> %h, %y = tsr.add_layer_norm %x, %r, ...   (rms_norm alike)
//   backward  %dx, ... = tsr.layer_norm_grad %h, %g, %dy  (dx read only by)
//             %s = tsr.add %a, %dx                 (either operand order)
//             -> %s, ... = tsr.layer_norm_grad_add %h, %g, %dy, %a
// The fused op is placed where all its operands are defined and before
// every reader of its results: at the first op of the pair when the second
// op's other operands are already defined there, else at the second when
// no reader of the first op's results lies between the two; otherwise the
// pair is left alone.
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Dominance.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSENORM
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

/// The discardable `tsr.*` attributes of `op` (tsr.fwd, tsr.bwd, ...), to
/// carry over to the fused op.
SmallVector<NamedAttribute> discardableAttrs(Operation *op) {
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute a : op->getDiscardableAttrs())
    attrs.push_back(a);
  return attrs;
}

/// True when every value of `values` is defined before `at`.
bool allDefinedBefore(DominanceInfo &dom, ValueRange values, Operation *at) {
  return llvm::all_of(values,
                      [&](Value v) { return dom.properlyDominates(v, at); });
}

/// True when no result of `first` other than through `second` is read
/// before `second`: every other reader comes after it.
bool noReaderBetween(DominanceInfo &dom, Operation *first, Operation *second) {
  for (Value v : first->getResults())
    for (Operation *user : v.getUsers())
      if (user != second && !dom.properlyDominates(second, user))
        return false;
  return true;
}

/// Where the fusion of `first` (defined earlier) and `second` goes: before
/// `first` when `lateOperands` (the operands of `second` that do not come
/// from `first`) are all defined there, else before `second` when nothing
/// reads `first`'s results in between; null when neither holds.
Operation *fusedPosition(DominanceInfo &dom, Operation *first,
                         Operation *second, ValueRange lateOperands) {
  if (first->getBlock() != second->getBlock())
    return nullptr;
  if (allDefinedBefore(dom, lateOperands, first))
    return first;
  if (noReaderBetween(dom, first, second))
    return second;
  return nullptr;
}

/// tsr-trace-values wants every op's value: traced ops stay unfused.
bool traced(Operation *op) { return bool(tsr::getTraceId(op)); }

/// Forward: `norm` (layer_norm or rms_norm) whose input is a tsr.add.
/// Returns the add it erased, or null.
Operation *fuseForward(DominanceInfo &dom, Operation *norm) {
  auto add = norm->getOperand(0).getDefiningOp<tsr::AddOp>();
  if (!add || traced(add) || traced(norm))
    return nullptr;
  SmallVector<Value> late(norm->getOperands().drop_front());
  Operation *at = fusedPosition(dom, add, norm, late);
  if (!at)
    return nullptr;
  OpBuilder b(at);
  Location loc = b.getFusedLoc({add.getLoc(), norm->getLoc()});
  Type type = add.getType();
  Operation *fused;
  if (auto ln = dyn_cast<tsr::LayerNormOp>(norm))
    fused = tsr::AddLayerNormOp::create(
        b, loc, type, type, add.getLhs(), add.getRhs(), ln.getScale(),
        ln.getBias(), ln.getAxisAttr(), ln.getEpsilonAttr());
  else {
    auto rms = cast<tsr::RmsNormOp>(norm);
    fused = tsr::AddRmsNormOp::create(b, loc, type, type, add.getLhs(),
                                      add.getRhs(), rms.getScale(),
                                      rms.getAxisAttr(), rms.getEpsilonAttr());
  }
  for (NamedAttribute a : discardableAttrs(norm))
    fused->setAttr(a.getName(), a.getValue());
  add.getResult().replaceAllUsesWith(fused->getResult(0));
  norm->getResult(0).replaceAllUsesWith(fused->getResult(1));
  norm->erase();
  add.erase();
  return add;
}

/// The layer_norm_grad / rms_norm_grad whose input gradient is `v`, read
/// by nothing else (the add that reads it), or null.
Operation *normGradOf(Value v) {
  Operation *def = v.getDefiningOp();
  if (!isa_and_nonnull<tsr::LayerNormGradOp, tsr::RmsNormGradOp>(def) ||
      cast<OpResult>(v).getResultNumber() != 0 || !v.hasOneUse() || traced(def))
    return nullptr;
  return def;
}

/// Backward: `add` of a norm gradient's input gradient and another
/// cotangent.
void fuseBackward(DominanceInfo &dom, tsr::AddOp add) {
  if (traced(add))
    return;
  // Prefer the later-defined gradient: the other operand is then already
  // defined where the gradient is (the residual cotangent chain).
  for (unsigned i : {1u, 0u}) {
    Operation *grad = normGradOf(add->getOperand(i));
    if (!grad || grad == add->getOperand(1 - i).getDefiningOp())
      continue;
    Value addend = add->getOperand(1 - i);
    Operation *at = fusedPosition(dom, grad, add, addend);
    if (!at)
      continue;
    OpBuilder b(at);
    Location loc = b.getFusedLoc({grad->getLoc(), add.getLoc()});
    Operation *fused;
    if (auto ln = dyn_cast<tsr::LayerNormGradOp>(grad))
      fused = tsr::LayerNormGradAddOp::create(
          b, loc, ln->getResultTypes(), ln.getInput(), ln.getScale(),
          ln.getGrad(), addend, ln.getAxisAttr(), ln.getEpsilonAttr());
    else {
      auto rms = cast<tsr::RmsNormGradOp>(grad);
      fused = tsr::RmsNormGradAddOp::create(
          b, loc, rms->getResultTypes(), rms.getInput(), rms.getScale(),
          rms.getGrad(), addend, rms.getAxisAttr(), rms.getEpsilonAttr());
    }
    for (NamedAttribute a : discardableAttrs(grad))
      fused->setAttr(a.getName(), a.getValue());
    add.getResult().replaceAllUsesWith(fused->getResult(0));
    for (unsigned r = 1; r < grad->getNumResults(); ++r)
      grad->getResult(r).replaceAllUsesWith(fused->getResult(r));
    add.erase();
    grad->erase();
    return;
  }
}

struct FuseNormPass : fusion::impl::FuseNormBase<FuseNormPass> {
  void runOnOperation() override {
    Operation *fn = getOperation();
    SmallVector<Operation *> norms;
    SmallVector<tsr::AddOp> adds;
    fn->walk([&](Operation *op) {
      if (isa<tsr::LayerNormOp, tsr::RmsNormOp>(op))
        norms.push_back(op);
      else if (auto add = dyn_cast<tsr::AddOp>(op))
        adds.push_back(add);
    });
    DominanceInfo dom(fn);
    // Forward first: it erases adds, so the backward candidates are taken
    // from the adds it leaves.
    llvm::DenseSet<Operation *> erased;
    for (Operation *norm : norms)
      if (Operation *add = fuseForward(dom, norm))
        erased.insert(add);
    for (tsr::AddOp add : adds)
      if (!erased.contains(add))
        fuseBackward(dom, add);
  }
};

} // namespace

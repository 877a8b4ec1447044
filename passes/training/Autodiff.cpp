//===- Autodiff.cpp - reverse-mode differentiation of tsr ops -------------===//

#include "passes/training/Autodiff.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/ScopeExit.h"

using namespace mlir;
using namespace tessera;

FailureOr<SmallVector<Value>>
training::buildBackward(OpBuilder &builder, ArrayRef<Operation *> ops,
                        ArrayRef<std::pair<Value, Value>> seeds,
                        ArrayRef<Value> wrt) {
  // Activity: the values that depend on a `wrt` value.
  DenseSet<Value> varied(wrt.begin(), wrt.end());
  for (Operation *op : ops)
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return varied.contains(v); }))
      varied.insert(op->result_begin(), op->result_end());

  // Pipeline parallelism needs to know which forward op each backward op
  // belongs to: differentiated forward ops get `tsr.fwd = i` (their index in
  // `ops`), and
  // every op created while differentiating op i (its gradient rule and the
  // sums of its operands' cotangents) gets `tsr.bwd = i`.
  // Only ops that get a gradient are tagged.
  MLIRContext *ctx = builder.getContext();
  DenseMap<Operation *, int64_t> index;
  for (auto [i, op] : llvm::enumerate(ops))
    index[op] = i;
  struct Tagger : public OpBuilder::Listener {
    Attribute tag;
    void notifyOperationInserted(Operation *op,
                                 OpBuilder::InsertPoint) override {
      if (tag)
        op->setAttr(tsr::kBackwardAttrName, tag);
    }
  } tagger;
  OpBuilder::Listener *previousListener = builder.getListener();
  builder.setListener(&tagger);
  llvm::scope_exit restore([&] { builder.setListener(previousListener); });

  DenseMap<Value, Value> cotangents;
  auto accumulate = [&](Value v, Value dv) {
    Value &slot = cotangents[v];
    slot = slot ? tsr::AddOp::create(builder, dv.getLoc(), slot, dv).getResult()
                : dv;
  };
  for (auto [v, dv] : seeds)
    if (v && dv)
      accumulate(v, dv);

  for (Operation *op : llvm::reverse(ops)) {
    if (llvm::none_of(op->getResults(),
                      [&](Value r) { return varied.contains(r); }))
      continue;
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      Value g = cotangents.lookup(r);
      resultGrads.push_back(g);
      any |= static_cast<bool>(g);
    }
    if (!any)
      continue;
    auto rule = dyn_cast<tsr::GradientOpInterface>(op);
    if (!rule)
      return op->emitOpError(
          "has no gradient rule (it does not implement the tsr "
          "GradientOpInterface), so the loss cannot be differentiated "
          "through it");
    if (!op->hasAttr(tsr::kForwardAttrName))
      op->setAttr(tsr::kForwardAttrName,
                  IntegerAttr::get(IntegerType::get(ctx, 64), index[op]));
    tagger.tag = op->getAttr(tsr::kForwardAttrName);
    SmallVector<Value> operandGrads;
    if (failed(rule.buildGradient(builder, resultGrads, operandGrads)))
      return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError("gradient rule returned ")
             << operandGrads.size() << " cotangents for "
             << op->getNumOperands() << " operands";
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      Value g = operandGrads[i];
      if (!g || !varied.contains(operand))
        continue;
      if (g.getType() != operand.getType())
        return op->emitOpError("gradient rule returned a cotangent of type ")
               << g.getType() << " for operand " << i << " of type "
               << operand.getType();
      accumulate(operand, g);
    }
  }

  SmallVector<Value> result;
  for (Value v : wrt)
    result.push_back(cotangents.lookup(v));
  return result;
}

//===- FuseOptimizer.cpp - tsr-fuse-optimizer
//----------------------------------===//
//
// See Passes.td (FuseOptimizer). Per block: the optimizer updates are
// grouped by (op, hyper-parameter attributes, step and learning-rate
// operands); every group of two or more becomes one tsr.multi_sgd_update /
// tsr.multi_adamw_update at the place of the group's last update. Ops
// between the group's first and last update that (transitively) read an
// earlier update's results (ZeRO's all-gather of the new parameter shard)
// move, in order, right after the fused op. An update whose old parameter
// or state is read after it (fp16 dynamic loss scaling's select) is not
// fused.
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSEOPTIMIZER
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

/// What must be equal for two updates to share one multi-tensor kernel.
struct GroupKey {
  OperationName name;
  DictionaryAttr hypers; ///< the inherent attributes (betas, eps, decay)
  Value step;            ///< AdamW's step count, or null
  Value lr;

  bool operator==(const GroupKey &o) const {
    return name == o.name && hypers == o.hypers && step == o.step && lr == o.lr;
  }
};

/// True when no op after `op` reads the values its results replace (the
/// parameter and the optimizer state), so the memory plan can write each
/// result in place of its operand and fusing keeps no new value alive any
/// longer. Not so under fp16 dynamic loss scaling, whose `select(ok, new,
/// old)` reads the old value after the update: fused, every parameter's
/// new value and state would be alive at once (the updates stay as they
/// are there).
bool writesInPlace(Operation *op) {
  auto update = cast<tsr::OptimizerUpdateOpInterface>(op);
  SmallVector<Value> replaced = update.getOptimizerState();
  replaced.push_back(update.getParamOperand().get());
  for (Value v : replaced)
    for (Operation *user : v.getUsers())
      if (user != op &&
          (user->getBlock() != op->getBlock() || !user->isBeforeInBlock(op)))
        return false;
  return true;
}

/// The update's group, or std::nullopt when it stays as it is: only f32
/// updates (the kernels' type), and not one that tsr-trace-values marked
/// (tessera-check attributes each traced kernel's outputs to it).
std::optional<GroupKey> keyOf(Operation *op) {
  Value param, step, lr;
  if (auto sgd = dyn_cast<tsr::SgdUpdateOp>(op)) {
    param = sgd.getParam();
    lr = sgd.getLr();
  } else if (auto adamw = dyn_cast<tsr::AdamwUpdateOp>(op)) {
    param = adamw.getParam();
    step = adamw.getStep();
    lr = adamw.getLr();
  } else {
    return std::nullopt;
  }
  if (!cast<RankedTensorType>(param.getType()).getElementType().isF32() ||
      tsr::getTraceId(op) || !writesInPlace(op))
    return std::nullopt;
  SmallVector<NamedAttribute> hypers;
  for (NamedAttribute attr : op->getAttrDictionary())
    if (!tsr::isTsrAttrName(attr.getName().getValue()))
      hypers.push_back(attr);
  return GroupKey{op->getName(), DictionaryAttr::get(op->getContext(), hypers),
                  step, lr};
}

/// Builds the multi-tensor op replacing `updates` (one group, in block
/// order) right after the last one, and returns it.
Operation *buildFused(OpBuilder &b, ArrayRef<Operation *> updates,
                      const GroupKey &key) {
  Operation *last = updates.back();
  b.setInsertionPointAfter(last);
  Location loc = b.getFusedLoc(llvm::to_vector(
      llvm::map_range(updates, [](Operation *op) { return op->getLoc(); })));
  SmallVector<Type> paramTypes;
  for (Operation *op : updates)
    paramTypes.push_back(op->getOperand(0).getType());
  SmallVector<Value> tensors;
  SmallVector<Type> resultTypes;
  auto collect = [&](unsigned operand) {
    for (Operation *op : updates)
      tensors.push_back(op->getOperand(operand));
  };
  if (key.step) {
    for (unsigned operand : {0, 1, 2, 3}) // param, grad, exp_avg, exp_avg_sq
      collect(operand);
    for (int k = 0; k < 3; ++k)
      resultTypes.append(paramTypes);
    auto first = cast<tsr::AdamwUpdateOp>(updates.front());
    return tsr::MultiAdamwUpdateOp::create(
        b, loc, resultTypes, tensors, key.step, key.lr, first.getBeta1Attr(),
        first.getBeta2Attr(), first.getEpsAttr(), first.getWeightDecayAttr());
  }
  for (unsigned operand : {0, 1}) // param, grad
    collect(operand);
  auto first = cast<tsr::SgdUpdateOp>(updates.front());
  return tsr::MultiSgdUpdateOp::create(b, loc, paramTypes, tensors, key.lr,
                                       first.getWeightDecayAttr());
}

/// Fuses one group. Fails (leaving the IR unchanged) when an update of the
/// group reads, directly or not, an earlier update's result: no single
/// kernel can then run them.
LogicalResult fuseGroup(OpBuilder &b, ArrayRef<Operation *> updates,
                        const GroupKey &key) {
  llvm::DenseSet<Operation *> members(updates.begin(), updates.end());
  // Ops between the first and the last update that depend on an earlier
  // update's result: they move after the fused op.
  llvm::DenseSet<Value> tainted;
  SmallVector<Operation *> sink;
  for (Operation *op = updates.front(); op != updates.back();
       op = op->getNextNode()) {
    bool reads = llvm::any_of(op->getOperands(),
                              [&](Value v) { return tainted.contains(v); });
    if (members.contains(op)) {
      if (reads)
        return failure();
      tainted.insert(op->getResults().begin(), op->getResults().end());
      continue;
    }
    if (!reads)
      continue;
    sink.push_back(op);
    tainted.insert(op->getResults().begin(), op->getResults().end());
  }
  if (llvm::any_of(updates.back()->getOperands(),
                   [&](Value v) { return tainted.contains(v); }))
    return failure();

  Operation *fused = buildFused(b, updates, key);
  Operation *after = fused;
  for (Operation *op : sink) {
    op->moveAfter(after);
    after = op;
  }
  // Results: the N new parameters, then (AdamW) the N new exp_avg and the
  // N new exp_avg_sq.
  unsigned n = updates.size();
  for (auto [i, op] : llvm::enumerate(updates)) {
    for (unsigned r = 0; r < op->getNumResults(); ++r)
      op->getResult(r).replaceAllUsesWith(fused->getResult(r * n + i));
    op->erase();
  }
  return success();
}

struct FuseOptimizerPass : fusion::impl::FuseOptimizerBase<FuseOptimizerPass> {
  void runOnOperation() override {
    OpBuilder b(&getContext());
    SmallVector<Block *> blocks;
    getOperation()->walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks) {
      // Groups in order of their first update; each group's updates in
      // block order.
      SmallVector<std::pair<GroupKey, SmallVector<Operation *>>> groups;
      for (Operation &op : *block) {
        std::optional<GroupKey> key = keyOf(&op);
        if (!key)
          continue;
        auto it = llvm::find_if(groups,
                                [&](const auto &g) { return g.first == *key; });
        if (it == groups.end())
          groups.push_back({*key, {&op}});
        else
          it->second.push_back(&op);
      }
      for (auto &[key, updates] : groups)
        if (updates.size() >= 2)
          (void)fuseGroup(b, updates, key);
    }
  }
};

} // namespace

//===- LayerCuts.cpp - layers of a forward pass ---------------------------===//

#include "common/layers/LayerCuts.h"
#include "dialects/tsr/DiscardableAttrs.h"

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

int64_t tessera::training::assignLayers(ArrayRef<Operation *> forwardOps,
                                        SmallVectorImpl<int64_t> &layerOf) {
  llvm::DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(forwardOps))
    position[op] = i;
  int64_t n = forwardOps.size();
  // lastUse[i]: the last forward op reading a result of op i.
  SmallVector<int64_t> lastUse(n, -1);
  for (auto [i, op] : llvm::enumerate(forwardOps))
    for (Value v : op->getOperands())
      if (Operation *d = v.getDefiningOp(); d && position.count(d))
        lastUse[position[d]] = std::max<int64_t>(lastUse[position[d]], i);
  // Sweep: `live` counts the ops whose results cross the point after op i.
  SmallVector<int64_t> endingAt(n + 1, 0);
  int64_t live = 0, layer = 0;
  layerOf.assign(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    layerOf[i] = layer;
    if (lastUse[i] > i) {
      ++live;
      ++endingAt[lastUse[i]];
    }
    live -= endingAt[i];
    if (live == 1 && i + 1 < n)
      ++layer;
  }
  return n ? layer + 1 : 0;
}

SmallVector<Value>
tessera::training::layerBoundaryValues(ArrayRef<Operation *> forwardOps,
                                       ArrayRef<int64_t> layerOf) {
  llvm::DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(forwardOps))
    position[op] = i;
  SmallVector<Value> values;
  for (int64_t end = 0; end + 1 < static_cast<int64_t>(forwardOps.size());
       ++end) {
    if (layerOf[end] == layerOf[end + 1])
      continue;
    Value crossing;
    for (int64_t i = 0; i <= end && !crossing; ++i)
      for (Value r : forwardOps[i]->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *user) {
              auto it = position.find(user);
              return it != position.end() && it->second > end;
            })) {
          crossing = r;
          break;
        }
    values.push_back(crossing);
  }
  return values;
}

tessera::training::StepOps tessera::training::classifyStepOps(Block &body) {
  StepOps ops;
  auto definedBy = [](Value v, const llvm::DenseSet<Operation *> &set) {
    Operation *d = v.getDefiningOp();
    return d && set.contains(d);
  };
  for (Operation &op : body.without_terminator()) {
    if (llvm::all_of(op.getOperands(),
                     [&](Value v) { return definedBy(v, ops.constant); })) {
      ops.constant.insert(&op);
      continue;
    }
    if (op.hasAttr(tessera::tsr::kBackwardAttrName) ||
        llvm::any_of(op.getOperands(),
                     [&](Value v) { return definedBy(v, ops.backward); }))
      ops.backward.insert(&op);
    else
      ops.forward.push_back(&op);
  }
  return ops;
}

SmallVector<Operation *> tessera::training::forwardOpsOf(Block &body) {
  return classifyStepOps(body).forward;
}

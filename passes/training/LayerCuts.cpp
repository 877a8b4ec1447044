//===- LayerCuts.cpp - layers of a forward pass ---------------------------===//

#include "passes/training/LayerCuts.h"

#include "llvm/ADT/DenseMap.h"

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

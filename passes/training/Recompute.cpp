//===- Recompute.cpp - activation recomputation, per layer ----------------===//
//
// See Passes.td (tsr-recompute). The pass finds @train_step's forward ops
// (not tagged `tsr.bwd`, not reading a backward value, not constant), cuts
// them into layers (LayerCuts.h), chooses per layer the ops to recompute
// (every op for `full`, each fused tsr.attention and the relayout of its
// output for `selective`) and
// clones the ones the backward reads in front of their first backward
// reader.
//
//===----------------------------------------------------------------------===//

#include "passes/training/Passes.h"

#include "common/layers/LayerCuts.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace tessera::training {
#define GEN_PASS_DEF_RECOMPUTE
#include "passes/training/Passes.h.inc"
} // namespace tessera::training

using namespace mlir;
using namespace tessera;

namespace {

int64_t numElements(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() ? t.getNumElements() : 0;
}

struct RecomputePass : training::impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (mode != "none" && mode != "selective" && mode != "full") {
      module.emitError("tsr-recompute: mode must be none, selective or "
                       "full, got '")
          << mode << "'";
      return signalPassFailure();
    }
    if (mode == "none")
      return;
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal()) {
      module.emitError("tsr-recompute needs a @train_step with a body (run "
                       "tsr-build-train-step first)");
      return signalPassFailure();
    }
    Block &body = func.front();

    // Constants, forward and backward ops.
    training::StepOps step = training::classifyStepOps(body);
    const DenseSet<Operation *> &constant = step.constant;
    DenseSet<Operation *> &backward = step.backward; // grows with the clones
    SmallVector<Operation *> &forwardOps = step.forward;
    auto definedBy = [](Value v, const DenseSet<Operation *> &set) {
      Operation *d = v.getDefiningOp();
      return d && set.contains(d);
    };
    if (backward.empty()) {
      func.emitError("tsr-recompute: @train_step has no backward ops tagged "
                     "tsr.bwd (run tsr-build-train-step first)");
      return signalPassFailure();
    }
    SmallVector<int64_t> layerOf;
    int64_t numLayers = training::assignLayers(forwardOps, layerOf);
    // The layer of a backward op: that of the forward op it differentiates
    // (tsr.bwd = tsr.fwd id); -1 for untagged ops (e.g. the optimizer).
    DenseMap<int64_t, int64_t> layerOfId;
    for (auto [i, op] : llvm::enumerate(forwardOps))
      if (auto id = tsr::getForwardId(op))
        layerOfId[id.getInt()] = layerOf[i];
    auto backwardLayer = [&](Operation *op) -> int64_t {
      auto id = tsr::getBackwardId(op);
      if (!id || !backward.contains(op))
        return -1;
      auto it = layerOfId.find(id.getInt());
      return it == layerOfId.end() ? -1 : it->second;
    };

    // The ops each layer may recompute.
    SmallVector<SetVector<Operation *>> candidates(numLayers);
    // selective: each op with the SelectiveRecompute trait (tsr.attention)
    // and the ops that only reshuffle its output (transpose/reshape back to
    // [B, S, D]), so neither O, its relayout nor the log-sum-exp is kept
    // from forward to backward.
    DenseSet<Operation *> core;
    for (auto [i, op] : llvm::enumerate(forwardOps)) {
      if (layerOf[i] + 1 >= numLayers || op->getNumResults() == 0 ||
          !isMemoryEffectFree(op))
        continue;
      if (mode == "selective") {
        bool seed = op->hasTrait<tsr::SelectiveRecompute>();
        bool carries = false;
        if (!seed && op->getNumResults() == 1) {
          int64_t out = numElements(op->getResult(0)), largest = 0;
          bool allCore = true;
          for (Value v : op->getOperands()) {
            if (definedBy(v, constant))
              continue;
            largest = std::max(largest, numElements(v));
            allCore &= definedBy(v, core);
          }
          carries = allCore && largest > 0 && out == largest;
        }
        if (!seed && !carries)
          continue;
        core.insert(op);
      }
      candidates[layerOf[i]].insert(op);
    }

    OpBuilder builder(&getContext());
    for (auto [layer, ops] : llvm::enumerate(candidates)) {
      // Values the layer's own backward reads, and the candidates needed to
      // remake them. Reads by other layers' backward (e.g. of the layer's
      // output, the next layer's checkpoint) keep the saved value, so that
      // a layer's recomputation stays with its backward (and its pipeline
      // stage).
      int64_t self = static_cast<int64_t>(layer);
      auto readsHere = [&](Operation *user) {
        return backwardLayer(user) == self;
      };
      SetVector<Value> remade;
      for (Operation *op : ops)
        for (Value r : op->getResults())
          if (llvm::any_of(r.getUsers(), readsHere))
            remade.insert(r);
      if (remade.empty())
        continue;
      DenseSet<Operation *> needed;
      SmallVector<Operation *> work;
      for (Value v : remade)
        work.push_back(v.getDefiningOp());
      while (!work.empty()) {
        Operation *op = work.pop_back_val();
        if (!ops.contains(op) || !needed.insert(op).second)
          continue;
        for (Value v : op->getOperands())
          if (Operation *d = v.getDefiningOp())
            work.push_back(d);
      }
      // In front of the first backward op of the layer that reads a remade
      // value.
      Operation *first = nullptr;
      for (Value v : remade)
        for (Operation *user : v.getUsers())
          if (readsHere(user) && (!first || user->isBeforeInBlock(first)))
            first = user;
      builder.setInsertionPoint(first);
      IRMapping map;
      for (Operation *op : ops) {
        if (!needed.contains(op))
          continue;
        Operation *clone = builder.clone(*op, map);
        Attribute id = op->getAttr(tsr::kForwardAttrName);
        clone->removeAttr(tsr::kForwardAttrName);
        clone->setAttr(tsr::kBackwardAttrName,
                       id ? id : first->getAttr(tsr::kBackwardAttrName));
        if (!clone->getAttr(tsr::kBackwardAttrName))
          clone->removeAttr(tsr::kBackwardAttrName);
        backward.insert(clone);
      }
      for (Value v : remade) {
        Value copy = map.lookup(v);
        // Clones never read an original remade value (its maker is
        // cloned too), so this only redirects the layer's backward reads.
        v.replaceUsesWithIf(
            copy, [&](OpOperand &use) { return readsHere(use.getOwner()); });
      }
    }
    // Forward ops that only the backward read are dead now.
    for (Operation *op : llvm::reverse(forwardOps))
      if (op->use_empty() && isMemoryEffectFree(op))
        op->erase();
  }
};

} // namespace

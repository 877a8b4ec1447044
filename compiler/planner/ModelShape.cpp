//===- ModelShape.cpp - the transformer shape of an imported model --------===//

#include "compiler/planner/ModelShape.h"

#include "common/layers/LayerCuts.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace tessera;
using namespace tessera::planner;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "model shape: " + msg);
}

static double elements(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return 0;
  return double(t.getNumElements());
}

llvm::Expected<TransformerShape>
tessera::planner::transformerShapeOf(ModuleOp module) {
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.isExternal())
    return fail("no func @forward (run on the imported model)");
  TransformerShape shape;
  shape.name = "imported";

  // Tokens and parameters from the argument roles.
  llvm::DenseSet<Value> params;
  double totalParams = 0;
  for (BlockArgument arg : forward.getArguments()) {
    auto role = tsr::getArgRole(forward, arg.getArgNumber());
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!role || !type)
      continue;
    if (role.getValue() == "input" && type.getRank() == 2 &&
        isa<IntegerType>(type.getElementType()) && shape.seq == 0) {
      shape.globalBatch = type.getDimSize(0);
      shape.seq = type.getDimSize(1);
    } else if (role.getValue() == "param" || role.getValue() == "frozen") {
      params.insert(arg);
      totalParams += elements(type);
    }
  }
  if (shape.seq <= 0)
    return fail("@forward has no integer [batch, sequence] token input");

  SmallVector<Operation *> ops =
      training::forwardOpsOf(forward.getBody().front());
  SmallVector<int64_t> layerOf;
  training::assignLayers(ops, layerOf);

  // The layers that hold an attention, and the heads of the first one.
  llvm::SetVector<int64_t> attentionLayers;
  for (auto [i, op] : llvm::enumerate(ops)) {
    auto attn = dyn_cast<tsr::AttentionOp>(op);
    if (!attn)
      continue;
    attentionLayers.insert(layerOf[i]);
    if (shape.heads)
      continue;
    auto q = cast<RankedTensorType>(attn.getQuery().getType());
    int64_t rank = q.getRank();
    if (rank == 3 && q.getDimSize(0) % shape.globalBatch == 0)
      shape.heads = q.getDimSize(0) / shape.globalBatch;
    else if (rank == 4 && q.getDimSize(0) == shape.globalBatch)
      shape.heads = q.getDimSize(1);
    else
      return fail("cannot read the heads of attention query " +
                  llvm::Twine(std::to_string(q.getNumElements())) +
                  "-element tensor (expected [B*H, S, d] or [B, H, S, d] "
                  "with B = " +
                  llvm::Twine(shape.globalBatch) + ")");
    shape.hidden = shape.heads * q.getDimSize(rank - 1);
    // Grouped-query attention: K with fewer heads (dim rank-3) than Q.
    auto k = cast<RankedTensorType>(attn.getKey().getType());
    if (rank == 4 && k.getDimSize(1) != q.getDimSize(1))
      shape.kvHeads = k.getDimSize(1);
  }
  if (attentionLayers.empty())
    return fail("no tsr.attention: the analytic planner models transformer "
                "layers (is the attention pattern raised?)");
  shape.layers = int64_t(attentionLayers.size());

  // A transformer block runs from one attention's layer to the next (the
  // cuts also separate the attention half from the MLP half); the last
  // block spans as many cut layers as the first.
  int64_t span =
      attentionLayers.size() > 1 ? attentionLayers[1] - attentionLayers[0] : 2;
  auto blockOf = [&](int64_t layer) -> int64_t {
    for (int64_t k = int64_t(attentionLayers.size()) - 1; k >= 0; --k)
      if (layer >= attentionLayers[k])
        return layer < attentionLayers[k] + span ? k : -1;
    return -1;
  };

  // Parameters read by each block's ops.
  double layerParams = 0;
  int64_t ffn = 0, h = shape.hidden;
  llvm::DenseSet<Value> counted;
  for (auto [i, op] : llvm::enumerate(ops)) {
    int64_t block = blockOf(layerOf[i]);
    if (block < 0)
      continue;
    for (Value v : op->getOperands()) {
      if (!params.contains(v) || !counted.insert(v).second)
        continue;
      layerParams += elements(v.getType());
      auto t = cast<RankedTensorType>(v.getType());
      if (block == 0 && t.getRank() == 2)
        for (int64_t d : t.getShape())
          if (d != h && d != 3 * h)
            ffn = std::max(ffn, d);
    }
  }
  shape.paramsPerLayer = layerParams / double(shape.layers);
  shape.paramsOther = std::max(0.0, totalParams - layerParams);
  shape.ffn = ffn > 0 ? ffn : 4 * h;

  // The vocabulary: the logits' last dimension, else the embedding rows.
  for (Type t : forward.getResultTypes())
    if (auto r = dyn_cast<RankedTensorType>(t);
        r && r.getRank() == 3 && r.getDimSize(0) == shape.globalBatch)
      shape.vocab = r.getDimSize(2);
  if (!shape.vocab)
    for (Operation *op : ops)
      if (auto g = dyn_cast<tsr::GatherOp>(op))
        shape.vocab =
            cast<RankedTensorType>(g->getOperand(0).getType()).getDimSize(0);
  if (!shape.vocab)
    return fail("cannot find the vocabulary (no [B, S, V] result and no "
                "embedding gather)");
  if (llvm::Error err = shape.validate())
    return std::move(err);
  return shape;
}

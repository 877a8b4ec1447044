//===- NNOps.cpp - gather, layer_norm, softmax, losses and their grads ----===//

#include "dialects/tsr/TsrOps.h"

using namespace mlir;
using namespace tessera::tsr;

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

static FailureOr<RankedTensorType>
inferGatherType(std::optional<Location> loc, Type tableType, Type indicesType) {
  auto table = dyn_cast<RankedTensorType>(tableType);
  auto indices = dyn_cast<RankedTensorType>(indicesType);
  if (!table || !indices)
    return failure();
  if (table.getRank() < 1) {
    if (loc)
      emitError(*loc, "gather table must have rank >= 1");
    return failure();
  }
  SmallVector<int64_t> shape(indices.getShape());
  llvm::append_range(shape, table.getShape().drop_front());
  return RankedTensorType::get(shape, table.getElementType());
}

LogicalResult
GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                           ValueRange operands, DictionaryAttr attributes,
                           OpaqueProperties properties, RegionRange regions,
                           SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto type = inferGatherType(loc, adaptor.getTable().getType(),
                              adaptor.getIndices().getType());
  if (failed(type))
    return failure();
  inferred.push_back(*type);
  return success();
}

LogicalResult GatherOp::verify() {
  auto type =
      inferGatherType(getLoc(), getTable().getType(), getIndices().getType());
  if (failed(type))
    return failure();
  if (*type != getResult().getType())
    return emitOpError("result type ")
           << getResult().getType() << " should be " << *type;
  return success();
}

LogicalResult GatherGradOp::verify() {
  auto type = inferGatherType(std::nullopt, getResult().getType(),
                              getIndices().getType());
  if (failed(type) || *type != getGrad().getType())
    return emitOpError("grad type ")
           << getGrad().getType() << " does not match a gather of "
           << getIndices().getType() << " from " << getResult().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// LayerNorm
//===----------------------------------------------------------------------===//

/// `scale` must have the shape of input.shape[axis:].
static LogicalResult verifyNormalizedShape(Operation *op, Type inputType,
                                           Type scaleType, int64_t axis) {
  auto in = cast<RankedTensorType>(inputType);
  auto scale = cast<RankedTensorType>(scaleType);
  if (axis < 0 || axis >= in.getRank())
    return op->emitOpError("axis ")
           << axis << " out of range for rank " << in.getRank();
  if (scale.getShape() != in.getShape().drop_front(axis))
    return op->emitOpError("scale shape must be input.shape[")
           << axis << ":], got " << scale;
  return success();
}

LogicalResult LayerNormOp::verify() {
  return verifyNormalizedShape(*this, getInput().getType(),
                               getScale().getType(), getAxis());
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNormalizedShape(*this, getInput().getType(),
                               getScale().getType(), getAxis());
}

//===----------------------------------------------------------------------===//
// Softmax and activation gradients
//===----------------------------------------------------------------------===//

static LogicalResult verifyAxis(Operation *op, Type type, int64_t axis) {
  auto rank = cast<RankedTensorType>(type).getRank();
  if (axis < 0 || axis >= rank)
    return op->emitOpError("axis ")
           << axis << " out of range for rank " << rank;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getInput().getType(), getAxis());
}

LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, getOutput().getType(), getAxis());
}

LogicalResult ReluGradOp::verify() { return success(); }

LogicalResult GeluGradOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\"");
  return success();
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

static LogicalResult verifyLogitsLabels(Operation *op, Type logitsType,
                                        Type labelsType) {
  auto logits = cast<RankedTensorType>(logitsType);
  auto labels = cast<RankedTensorType>(labelsType);
  if (logits.getRank() != 2 || labels.getRank() != 1 ||
      logits.getDimSize(0) != labels.getDimSize(0))
    return op->emitOpError("expects logits [N, V] and labels [N], got ")
           << logits << " and " << labels;
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  return verifyLogitsLabels(*this, getLogits().getType(),
                            getLabels().getType());
}

LogicalResult CrossEntropyGradOp::verify() {
  return verifyLogitsLabels(*this, getLogits().getType(),
                            getLabels().getType());
}

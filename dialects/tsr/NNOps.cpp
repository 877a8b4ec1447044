//===- NNOps.cpp - gather, norms, softmax, attention, losses, grads ------===//

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
// RMSNorm
//===----------------------------------------------------------------------===//

/// As layer_norm's, and `scale` has the input's float element type.
static LogicalResult verifyRmsNorm(Operation *op, Type inputType,
                                   Type scaleType, int64_t axis) {
  auto in = cast<RankedTensorType>(inputType);
  if (!isa<FloatType>(in.getElementType()))
    return op->emitOpError("expects a float element type, got ") << in;
  if (failed(verifyNormalizedShape(op, inputType, scaleType, axis)))
    return failure();
  if (cast<RankedTensorType>(scaleType).getElementType() != in.getElementType())
    return op->emitOpError("scale element type must be the input's (")
           << in.getElementType() << "), got " << scaleType;
  return success();
}

LogicalResult RmsNormOp::verify() {
  return verifyRmsNorm(*this, getInput().getType(), getScale().getType(),
                       getAxis());
}

LogicalResult RmsNormGradOp::verify() {
  return verifyRmsNorm(*this, getInput().getType(), getScale().getType(),
                       getAxis());
}

//===----------------------------------------------------------------------===//
// Residual add fused with a normalization (tsr-fuse-norm)
//===----------------------------------------------------------------------===//

LogicalResult AddLayerNormOp::verify() {
  return verifyNormalizedShape(*this, getInput().getType(),
                               getScale().getType(), getAxis());
}

LogicalResult AddRmsNormOp::verify() {
  return verifyRmsNorm(*this, getInput().getType(), getScale().getType(),
                       getAxis());
}

LogicalResult LayerNormGradAddOp::verify() {
  return verifyNormalizedShape(*this, getInput().getType(),
                               getScale().getType(), getAxis());
}

LogicalResult RmsNormGradAddOp::verify() {
  return verifyRmsNorm(*this, getInput().getType(), getScale().getType(),
                       getAxis());
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

LogicalResult SiluGradOp::verify() {
  if (!isa<FloatType>(getInput().getType().getElementType()))
    return emitOpError("expects a float element type, got ")
           << getInput().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Checks the shapes and element types shared by tsr.attention and
/// tsr.attention_grad: Q [b..., Sq, Dh], K [b..., Sk, Dh], V [b..., Sk, Dv],
/// O [b..., Sq, Dv] (Q's element type), LSE [b..., Sq] f32, mask [Sq, Sk]
/// (Q's element type); causal needs Sq == Sk. GQA: with rank >= 4, K and V
/// may have Hkv heads (dim rank-3) where Q has H, Hkv dividing H.
static LogicalResult verifyAttention(Operation *op, Value query, Value key,
                                     Value value, Value mask, Type outputType,
                                     Type lseType, bool causal) {
  auto q = cast<RankedTensorType>(query.getType());
  auto k = cast<RankedTensorType>(key.getType());
  auto v = cast<RankedTensorType>(value.getType());
  int64_t rank = q.getRank();
  if (rank < 3)
    return op->emitOpError("query must have rank >= 3 ([b..., Sq, Dh]), got ")
           << q;
  if (!isa<FloatType>(q.getElementType()))
    return op->emitOpError("query must have a float element type, got ") << q;
  if (k.getRank() != rank || v.getRank() != rank)
    return op->emitOpError("query, key and value must have one rank, got ")
           << q << ", " << k << " and " << v;
  if (k.getElementType() != q.getElementType() ||
      v.getElementType() != q.getElementType())
    return op->emitOpError(
               "query, key and value must have one element type, got ")
           << q << ", " << k << " and " << v;
  ArrayRef<int64_t> lead = q.getShape().drop_back(2);
  ArrayRef<int64_t> kvLead = k.getShape().drop_back(2);
  if (v.getShape().drop_back(2) != kvLead)
    return op->emitOpError("key and value must have the same leading dims, "
                           "got ")
           << k << " and " << v;
  if (kvLead != lead) {
    // Grouped-query attention: only the head dim (rank - 3) may differ.
    bool gqa = rank >= 4 && kvLead.drop_back() == lead.drop_back();
    if (!gqa)
      return op->emitOpError("query, key and value must have the same leading "
                             "(batch) dims, except the head dim (rank - 3) "
                             "with rank >= 4 (grouped-query attention), got ")
             << q << ", " << k << " and " << v;
    int64_t heads = lead.back(), kvHeads = kvLead.back();
    if (kvHeads <= 0 || heads % kvHeads != 0)
      return op->emitOpError("grouped-query attention needs the key/value "
                             "head count ")
             << kvHeads << " to divide the query head count " << heads;
  }
  int64_t sq = q.getDimSize(rank - 2), dh = q.getDimSize(rank - 1);
  int64_t sk = k.getDimSize(rank - 2);
  if (k.getDimSize(rank - 1) != dh)
    return op->emitOpError("key head dim ")
           << k.getDimSize(rank - 1) << " does not match query head dim " << dh;
  if (v.getDimSize(rank - 2) != sk)
    return op->emitOpError("value sequence length ")
           << v.getDimSize(rank - 2) << " does not match key sequence length "
           << sk;
  if (causal && sq != sk)
    return op->emitOpError("causal attention needs Sq == Sk, got ")
           << sq << " and " << sk;
  if (mask) {
    auto m = cast<RankedTensorType>(mask.getType());
    if (m.getRank() != 2 || m.getDimSize(0) != sq || m.getDimSize(1) != sk ||
        m.getElementType() != q.getElementType())
      return op->emitOpError("mask must be [Sq, Sk] = [")
             << sq << ", " << sk << "] of the query's element type, got " << m;
  }
  SmallVector<int64_t> oShape(lead);
  oShape.append({sq, v.getDimSize(rank - 1)});
  auto expectedO = RankedTensorType::get(oShape, q.getElementType());
  if (outputType != expectedO)
    return op->emitOpError("output type ")
           << outputType << " should be " << expectedO;
  SmallVector<int64_t> lseShape(lead);
  lseShape.push_back(sq);
  auto expectedLse =
      RankedTensorType::get(lseShape, Float32Type::get(op->getContext()));
  if (lseType != expectedLse)
    return op->emitOpError("lse type ")
           << lseType << " should be " << expectedLse;
  return success();
}

/// Ring attention (`ring_size` = K > 1): no mask and Sq == Sk. Before
/// partitioning (no `grid_axes`) the sequence is global and must split into
/// K stripes; the partitioned op (with `grid_axes`) holds one stripe, whose
/// length need not be a multiple of K.
static LogicalResult verifyRing(Operation *op, Value query, Value key,
                                Value mask, std::optional<int64_t> ringSize) {
  if (!ringSize)
    return success();
  if (*ringSize < 1)
    return op->emitOpError("ring_size must be >= 1, got ") << *ringSize;
  if (*ringSize == 1)
    return success();
  if (mask)
    return op->emitOpError("ring attention (ring_size ")
           << *ringSize << ") takes no mask operand";
  auto q = cast<RankedTensorType>(query.getType());
  auto k = cast<RankedTensorType>(key.getType());
  int64_t sq = q.getDimSize(q.getRank() - 2);
  int64_t sk = k.getDimSize(k.getRank() - 2);
  if (sq != sk)
    return op->emitOpError("ring attention needs Sq == Sk, got ")
           << sq << " and " << sk;
  if (!op->hasAttr("grid_axes") && sq % *ringSize != 0)
    return op->emitOpError("ring attention needs the sequence length ")
           << sq << " to be divisible by ring_size " << *ringSize;
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttention(*this, getQuery(), getKey(), getValue(), getMask(),
                             getOutput().getType(), getLse().getType(),
                             getCausal())))
    return failure();
  return verifyRing(*this, getQuery(), getKey(), getMask(), getRingSize());
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttention(*this, getQuery(), getKey(), getValue(), getMask(),
                             getOutput().getType(), getLse().getType(),
                             getCausal())))
    return failure();
  return verifyRing(*this, getQuery(), getKey(), getMask(), getRingSize());
}

/// Precision policy (MixedPrecisionOpInterface): the log-sum-exp is f32 by
/// the op's contract (rounding it would perturb every recomputed
/// probability in the backward): attention's result 1 and attention_grad's
/// operand 4.
bool AttentionOp::keepsF32Result(unsigned index) {
  return index == cast<OpResult>(getLse()).getResultNumber();
}

bool AttentionGradOp::keepsF32Operand(unsigned index) {
  return index == getLseMutable().getOperandNumber();
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

/// Precision policy (MixedPrecisionOpInterface): the summed loss is an f32
/// scalar (the kernel accumulates in f32), and so is the cotangent seed the
/// gradient reads, which fp16 loss scaling multiplies by S.
bool CrossEntropyOp::keepsF32Result(unsigned index) {
  return index == cast<OpResult>(getResult()).getResultNumber();
}

bool CrossEntropyGradOp::keepsF32Operand(unsigned index) {
  return index == getGradMutable().getOperandNumber();
}

std::optional<unsigned> CrossEntropyGradOp::getLossSeedOperand() {
  return getGradMutable().getOperandNumber();
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

LogicalResult DropoutOp::verify() {
  auto type = getInput().getType();
  if (!isa<FloatType>(type.getElementType()))
    return emitOpError("input must be a float tensor, got ") << type;
  auto step = cast<RankedTensorType>(getStep().getType());
  if (step.getRank() != 0 || !step.getElementType().isF32())
    return emitOpError("step must be a 0-D f32 tensor, got ") << step;
  double ratio = getRatio().convertToDouble();
  if (!(ratio >= 0.0 && ratio < 1.0))
    return emitOpError("ratio must be in [0, 1), got ") << ratio;
  int64_t opId = getOpIdAttr().getInt();
  if (opId < 0 || opId > int64_t(UINT32_MAX))
    return emitOpError("op_id must be in [0, 2^32), got ") << opId;
  if (std::optional<ArrayRef<int64_t>> layout = getLayout()) {
    ArrayRef<int64_t> l = *layout;
    size_t at = 0;
    auto take = [&](int64_t &out) {
      if (at >= l.size())
        return false;
      out = l[at++];
      return true;
    };
    for (int64_t d = 0; d < type.getRank(); ++d) {
      int64_t n;
      if (!take(n) || n < 1)
        return emitOpError("layout: dimension ")
               << d << " needs a sub-factor count >= 1";
      for (int64_t f = 0; f < n; ++f) {
        int64_t size, axes;
        if (!take(size) || !take(axes))
          return emitOpError("layout ends early at dimension ") << d;
        if (size < 1 || axes < 0)
          return emitOpError("layout: dimension ")
                 << d << " has a sub-factor of size " << size << " split over "
                 << axes << " axes";
        for (int64_t a = 0; a < axes; ++a) {
          int64_t axis;
          if (!take(axis))
            return emitOpError("layout ends early at dimension ") << d;
          if (axis < 0)
            return emitOpError("layout: negative grid axis ") << axis;
        }
      }
    }
    if (at != l.size())
      return emitOpError("layout has ")
             << (l.size() - at) << " entries past the last dimension";
  }
  return success();
}

/// The step counter stays f32 in a bf16/f16 program.
bool DropoutOp::keepsF32Operand(unsigned index) { return index == 1; }

//===- ElementwiseOps.cpp - constants, elementwise ops, reductions --------===//

#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace tessera::tsr;

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

/// The float activations (sigmoid, silu) compute in floating point only.
static LogicalResult verifyFloatElement(Operation *op, Type type) {
  if (!isa<FloatType>(cast<RankedTensorType>(type).getElementType()))
    return op->emitOpError("expects a float element type, got ") << type;
  return success();
}

LogicalResult SigmoidOp::verify() {
  return verifyFloatElement(*this, getInput().getType());
}

LogicalResult SiluOp::verify() {
  return verifyFloatElement(*this, getInput().getType());
}

LogicalResult BroadcastOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (in.getRank() > out.getRank())
    return emitOpError("input rank ")
           << in.getRank() << " exceeds result rank " << out.getRank();
  int64_t offset = out.getRank() - in.getRank();
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t a = in.getDimSize(d), b = out.getDimSize(d + offset);
    if (a != 1 && a != b)
      return emitOpError("input dimension ")
             << d << " of size " << a << " cannot broadcast to " << b;
  }
  return success();
}

/// Shared by the reductions: validates `axes` and computes the result shape.
static FailureOr<RankedTensorType> inferReducedType(std::optional<Location> loc,
                                                    Type inputType,
                                                    ArrayRef<int64_t> axes,
                                                    bool keepdim) {
  auto in = dyn_cast<RankedTensorType>(inputType);
  if (!in)
    return failure();
  SmallVector<int64_t> shape;
  int64_t prev = -1;
  for (int64_t a : axes) {
    if (a <= prev || a >= in.getRank()) {
      if (loc)
        emitError(*loc, "axes must be sorted, distinct and in [0, ")
            << in.getRank() << ")";
      return failure();
    }
    prev = a;
  }
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (llvm::is_contained(axes, d)) {
      if (keepdim)
        shape.push_back(1);
    } else {
      shape.push_back(in.getDimSize(d));
    }
  }
  return RankedTensorType::get(shape, in.getElementType());
}

#define TSR_DEFINE_REDUCE(OP)                                                  \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, ValueRange operands,         \
      DictionaryAttr attributes, OpaqueProperties properties,                  \
      RegionRange regions, SmallVectorImpl<Type> &inferred) {                  \
    OP::Adaptor adaptor(operands, attributes, properties, regions);            \
    auto type = inferReducedType(loc, adaptor.getInput().getType(),            \
                                 adaptor.getAxes(), adaptor.getKeepdim());     \
    if (failed(type))                                                          \
      return failure();                                                        \
    inferred.push_back(*type);                                                 \
    return success();                                                          \
  }                                                                            \
  LogicalResult OP::verify() {                                                 \
    auto type = inferReducedType(getLoc(), getInput().getType(), getAxes(),    \
                                 getKeepdim());                                \
    if (failed(type))                                                          \
      return failure();                                                        \
    if (*type != getResult().getType())                                        \
      return emitOpError("result type ")                                       \
             << getResult().getType() << " should be " << *type;               \
    return success();                                                          \
  }

TSR_DEFINE_REDUCE(ReduceSumOp)
TSR_DEFINE_REDUCE(ReduceMeanOp)
TSR_DEFINE_REDUCE(ReduceMaxOp)
#undef TSR_DEFINE_REDUCE

LogicalResult SumSquaresOp::verify() {
  if (!getInput().getType().getElementType().isF32())
    return emitOpError("input must be an f32 tensor, got ")
           << getInput().getType();
  return success();
}

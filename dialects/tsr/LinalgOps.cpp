//===- LinalgOps.cpp - matmul and the fused linear layer ------------------===//

#include "dialects/tsr/TsrOps.h"

using namespace mlir;
using namespace tessera::tsr;

/// Result type of `lhs x rhs` with optional transposes, or failure with a
/// diagnostic at `loc` when present.
static FailureOr<RankedTensorType> inferMatmulType(std::optional<Location> loc,
                                                   Type lhsType, Type rhsType,
                                                   bool transposeLhs,
                                                   bool transposeRhs) {
  auto lhs = dyn_cast<RankedTensorType>(lhsType);
  auto rhs = dyn_cast<RankedTensorType>(rhsType);
  auto fail = [&](const Twine &msg) -> FailureOr<RankedTensorType> {
    if (loc)
      emitError(*loc, msg);
    return failure();
  };
  if (!lhs || !rhs || lhs.getRank() < 2 || rhs.getRank() < 2)
    return fail("matmul operands must have rank >= 2");
  if (lhs.getElementType() != rhs.getElementType())
    return fail("matmul operand element types differ");
  int64_t lr = lhs.getRank(), rr = rhs.getRank();
  int64_t m = lhs.getDimSize(transposeLhs ? lr - 1 : lr - 2);
  int64_t k = lhs.getDimSize(transposeLhs ? lr - 2 : lr - 1);
  int64_t k2 = rhs.getDimSize(transposeRhs ? rr - 1 : rr - 2);
  int64_t n = rhs.getDimSize(transposeRhs ? rr - 2 : rr - 1);
  if (k != k2)
    return fail("matmul contracting dimensions differ: " + Twine(k) + " vs " +
                Twine(k2));
  if (rr != 2 && rr != lr)
    return fail("matmul rhs must be rank 2 or have lhs's rank");
  if (rr == lr)
    for (int64_t d = 0; d < lr - 2; ++d)
      if (lhs.getDimSize(d) != rhs.getDimSize(d))
        return fail("matmul batch dimension " + Twine(d) + " differs");
  SmallVector<int64_t> shape(lhs.getShape().drop_back(2));
  shape.push_back(m);
  shape.push_back(n);
  return RankedTensorType::get(shape, lhs.getElementType());
}

LogicalResult
MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                           ValueRange operands, DictionaryAttr attributes,
                           OpaqueProperties properties, RegionRange regions,
                           SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto type = inferMatmulType(
      loc, adaptor.getLhs().getType(), adaptor.getRhs().getType(),
      adaptor.getTransposeLhs(), adaptor.getTransposeRhs());
  if (failed(type))
    return failure();
  inferred.push_back(*type);
  return success();
}

LogicalResult MatmulOp::verify() {
  auto type = inferMatmulType(getLoc(), getLhs().getType(), getRhs().getType(),
                              getTransposeLhs(), getTransposeRhs());
  if (failed(type))
    return failure();
  if (*type != getResult().getType())
    return emitOpError("result type ")
           << getResult().getType() << " should be " << *type;
  return success();
}

//===----------------------------------------------------------------------===//
// Fused linear layer (tsr-fuse-linear)
//===----------------------------------------------------------------------===//

FailureOr<RankedTensorType>
LinearOp::inferResultType(std::optional<Location> loc, Type lhs, Type rhs,
                          bool transposeLhs, bool transposeRhs) {
  return inferMatmulType(loc, lhs, rhs, transposeLhs, transposeRhs);
}

bool LinearOp::isKnownActivation(StringRef activation) {
  return activation == "none" || activation == "gelu" ||
         activation == "gelu_tanh" || activation == "relu" ||
         activation == "silu";
}

LogicalResult LinearOp::verify() {
  auto type = inferResultType(getLoc(), getLhs().getType(), getRhs().getType(),
                              getTransposeLhs(), getTransposeRhs());
  if (failed(type))
    return failure();
  if (*type != getResult().getType())
    return emitOpError("result type ")
           << getResult().getType() << " should be " << *type;
  if (!isa<FloatType>(type->getElementType()))
    return emitOpError("expects a float element type, got ") << *type;
  int64_t n = type->getDimSize(type->getRank() - 1);
  auto bias = getBias().getType();
  if (bias.getRank() != 1 || bias.getDimSize(0) != n ||
      bias.getElementType() != type->getElementType())
    return emitOpError("bias must be of type ")
           << RankedTensorType::get({n}, type->getElementType()) << ", got "
           << bias;
  if (!isKnownActivation(getActivation()))
    return emitOpError("activation must be \"none\", \"gelu\", "
                       "\"gelu_tanh\", \"relu\" or \"silu\", got \"")
           << getActivation() << "\"";
  if (Value pre = getPreactivation()) {
    if (getActivation() == "none")
      return emitOpError("has a preactivation result but no activation");
    if (pre.getType() != *type)
      return emitOpError("preactivation type ")
             << pre.getType() << " should be " << *type;
  }
  return success();
}

LogicalResult BiasActivationGradOp::verify() {
  auto input = getInput().getType();
  if (getActivation() == "none" ||
      !LinearOp::isKnownActivation(getActivation()))
    return emitOpError("activation must be \"gelu\", \"gelu_tanh\", \"relu\" "
                       "or \"silu\", got \"")
           << getActivation() << "\"";
  if (input.getRank() < 1)
    return emitOpError("expects an input of rank >= 1, got ") << input;
  if (!isa<FloatType>(input.getElementType()))
    return emitOpError("expects a float element type, got ") << input;
  auto expected = RankedTensorType::get({input.getDimSize(input.getRank() - 1)},
                                        input.getElementType());
  if (getBiasGrad().getType() != expected)
    return emitOpError("bias_grad type ")
           << getBiasGrad().getType() << " should be " << expected;
  return success();
}

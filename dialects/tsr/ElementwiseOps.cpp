//===- ElementwiseOps.cpp - constants, elementwise ops, reductions --------===//

#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"

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

std::string
FusedElementwiseOp::buildProgram(::tessera::fusion::ElementwiseProgram &p) {
  std::vector<std::string_view> ops;
  for (StringRef name : getOps().getAsValueRange<StringAttr>())
    ops.emplace_back(name.data(), name.size());
  std::vector<std::vector<int64_t>> inputShapes;
  std::vector<bool> isMask;
  for (Value in : getInputs()) {
    auto t = cast<RankedTensorType>(in.getType());
    inputShapes.emplace_back(t.getShape().begin(), t.getShape().end());
    isMask.push_back(t.getElementType().isInteger(1));
  }
  std::vector<int64_t> shape;
  if (getNumResults() > 0) {
    auto t = cast<RankedTensorType>(getResult(0).getType());
    shape.assign(t.getShape().begin(), t.getShape().end());
  }
  return ::tessera::fusion::buildElementwiseProgram(
      ops, std::vector<int64_t>(getArgs().begin(), getArgs().end()),
      std::vector<int64_t>(getOutputs().begin(), getOutputs().end()),
      inputShapes, isMask, shape, p);
}

LogicalResult FusedElementwiseOp::verify() {
  if (getOutputs().size() != getNumResults())
    return emitOpError("has ") << getNumResults() << " results but "
                               << getOutputs().size() << " outputs";
  for (Value r : getResults()) {
    auto t = cast<RankedTensorType>(r.getType());
    auto first = cast<RankedTensorType>(getResult(0).getType());
    if (!t.getElementType().isF32())
      return emitOpError("results must be f32, got ") << t;
    if (t.getShape() != first.getShape())
      return emitOpError("results must have one shape, got ")
             << first << " and " << t;
  }
  for (Value in : getInputs()) {
    Type e = cast<RankedTensorType>(in.getType()).getElementType();
    if (!e.isF32() && !e.isInteger(1))
      return emitOpError("inputs must be f32 or i1, got ") << in.getType();
  }
  ::tessera::fusion::ElementwiseProgram program;
  std::string problem = buildProgram(program);
  if (!problem.empty())
    return emitOpError(problem);
  return success();
}

std::optional<::tessera::fusion::ElemOp>
FusedElementwiseOp::opcodeOf(Operation *op) {
  using ::tessera::fusion::ElemOp;
  if (op->getNumResults() != 1)
    return std::nullopt;
  auto t = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!t || !t.hasStaticShape() || !t.getElementType().isF32())
    return std::nullopt;
  auto tanh = [](StringRef approximate) { return approximate == "tanh"; };
  return llvm::TypeSwitch<Operation *, std::optional<ElemOp>>(op)
      .Case([](AddOp) { return ElemOp::Add; })
      .Case([](SubOp) { return ElemOp::Sub; })
      .Case([](MulOp) { return ElemOp::Mul; })
      .Case([](DivOp) { return ElemOp::Div; })
      .Case([](PowOp) { return ElemOp::Pow; })
      .Case([](MaxOp) { return ElemOp::Max; })
      .Case([](NegOp) { return ElemOp::Neg; })
      .Case([](ExpOp) { return ElemOp::Exp; })
      .Case([](LogOp) { return ElemOp::Log; })
      .Case([](SqrtOp) { return ElemOp::Sqrt; })
      .Case([](RsqrtOp) { return ElemOp::Rsqrt; })
      .Case([](TanhOp) { return ElemOp::Tanh; })
      .Case([](ErfOp) { return ElemOp::Erf; })
      .Case([](ReluOp) { return ElemOp::Relu; })
      .Case([](SigmoidOp) { return ElemOp::Sigmoid; })
      .Case([](SiluOp) { return ElemOp::Silu; })
      .Case([&](GeluOp g) {
        return tanh(g.getApproximate()) ? ElemOp::GeluTanh : ElemOp::Gelu;
      })
      .Case([](SelectOp) { return ElemOp::Select; })
      .Case([](ReluGradOp) { return ElemOp::ReluGrad; })
      .Case([&](GeluGradOp g) {
        return tanh(g.getApproximate()) ? ElemOp::GeluTanhGrad
                                        : ElemOp::GeluGrad;
      })
      .Case([](SiluGradOp) { return ElemOp::SiluGrad; })
      .Default([](Operation *) { return std::nullopt; });
}

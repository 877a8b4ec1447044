//===- GradientRules.cpp - reverse-mode rules of the tsr ops --------------===//
//
// `GradientOpInterface::buildGradient` for every tsr op, grouped by family as
// in TsrOps.td. A rule receives one cotangent per result (null: no gradient
// flows into that result) and appends one cotangent per operand (null for an
// integer/i1 operand, or when no gradient flows). Rules emit only tsr ops, at
// the op's location, and never switch on anything but their own attributes.
//
// Gradient ops (`*_grad`) and optimizer updates have no rule: Tessera does not
// differentiate twice, and they report an error naming themselves.
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/Sequence.h"

#include <cmath>

using namespace mlir;
using namespace tessera::tsr;

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Small builder of tsr ops at one location, used by every rule.
struct GradBuilder {
  OpBuilder &b;
  Location loc;

  Value splat(RankedTensorType type, double value) {
    auto elem = cast<FloatType>(type.getElementType());
    auto attr = DenseElementsAttr::get(type, FloatAttr::get(elem, value));
    return ConstantOp::create(b, loc, type, cast<ElementsAttr>(attr));
  }
  Value splatLike(Value like, double value) {
    return splat(tensorType(like), value);
  }
  Value zerosLike(Value like) { return splatLike(like, 0.0); }

  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value neg(Value x) { return NegOp::create(b, loc, x); }
  Value scale(Value x, double c) { return mul(x, splatLike(x, c)); }

  /// Reshape to `shape` (same element type); no op when already that shape.
  /// Looks through a reshape (reshape ∘ reshape = reshape), so chains of
  /// shape-only rules do not pile up.
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (auto inner = v.getDefiningOp<ReshapeOp>())
      v = inner.getInput();
    auto t = tensorType(v);
    if (t.getShape() == shape)
      return v;
    return ReshapeOp::create(
        b, loc, RankedTensorType::get(shape, t.getElementType()), v);
  }

  /// Sums `g` (shape of `to` broadcast to g's shape by tsr.broadcast's rules)
  /// back to `to`'s shape: the adjoint of tsr.broadcast.
  Value sumToShape(Value g, RankedTensorType to) {
    auto from = tensorType(g);
    int64_t offset = from.getRank() - to.getRank();
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < from.getRank(); ++d)
      if (d < offset ||
          (to.getDimSize(d - offset) == 1 && from.getDimSize(d) != 1))
        axes.push_back(d);
    Value summed = g;
    if (!axes.empty())
      summed = ReduceSumOp::create(b, loc, g, axes, /*keepdim=*/false);
    return reshape(summed, to.getShape());
  }

  /// Adjoint of a reduction: reshapes `g` to the keepdim shape of reducing
  /// `in` over `axes`, then broadcasts it to `in`'s shape.
  Value broadcastBack(Value g, RankedTensorType in, ArrayRef<int64_t> axes) {
    if (tensorType(g).getShape() == in.getShape())
      return g;
    Value kept = reshape(g, keepdimShape(in, axes));
    return BroadcastOp::create(
        b, loc, RankedTensorType::get(in.getShape(), in.getElementType()),
        kept);
  }

  static SmallVector<int64_t> keepdimShape(RankedTensorType in,
                                           ArrayRef<int64_t> axes) {
    SmallVector<int64_t> shape(in.getShape());
    for (int64_t a : axes)
      shape[a] = 1;
    return shape;
  }

  /// Pads `g` with zeros along `axis` to `before + size(g) + after`.
  Value padWithZeros(Value g, int64_t axis, int64_t before, int64_t after) {
    if (before == 0 && after == 0)
      return g;
    auto t = tensorType(g);
    SmallVector<Value> pieces;
    auto zeros = [&](int64_t n) {
      SmallVector<int64_t> shape(t.getShape());
      shape[axis] = n;
      return splat(RankedTensorType::get(shape, t.getElementType()), 0.0);
    };
    if (before > 0)
      pieces.push_back(zeros(before));
    pieces.push_back(g);
    if (after > 0)
      pieces.push_back(zeros(after));
    return ConcatOp::create(b, loc, pieces, axis);
  }
};

/// Pushes a null cotangent for each of the op's operands.
LogicalResult noGradient(Operation *op, SmallVectorImpl<Value> &operandGrads) {
  operandGrads.append(op->getNumOperands(), Value());
  return success();
}

/// Every rule starts here: checks the number of result cotangents and
/// returns the first (null when none flows into it).
FailureOr<Value> singleResultGrad(Operation *op, ArrayRef<Value> resultGrads) {
  if (resultGrads.size() != op->getNumResults())
    return op->emitOpError("gradient rule got ")
           << resultGrads.size() << " result cotangents for "
           << op->getNumResults() << " results";
  return resultGrads.empty() ? Value() : resultGrads.front();
}

/// Fails with a clear message: the op has no (second-order) gradient rule.
LogicalResult notDifferentiable(Operation *op, StringRef why) {
  return op->emitOpError("has no gradient rule: ") << why;
}

/// `v` is a compile-time constant (possibly broadcast or reshaped): it never
/// needs a cotangent.
bool isConstantValue(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (def->hasTrait<OpTrait::ConstantLike>())
      return true;
    if (!isa<BroadcastOp, ReshapeOp, ConvertOp>(def))
      return false;
    v = def->getOperand(0);
  }
  return false;
}

/// The value of `v` when it is a splat floating-point constant.
std::optional<double> splatValue(Value v) {
  Attribute attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  auto dense = dyn_cast<DenseFPElementsAttr>(attr);
  if (!dense || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

/// Shared body of the unary elementwise rules: `dx = f(g)` when the input is
/// floating point and a cotangent flows; null otherwise.
template <typename Fn>
LogicalResult unaryRule(Operation *op, ArrayRef<Value> resultGrads,
                        SmallVectorImpl<Value> &operandGrads, Fn &&fn) {
  auto g = singleResultGrad(op, resultGrads);
  if (failed(g))
    return failure();
  if (!*g || !isFloatTensor(op->getOperand(0)))
    return noGradient(op, operandGrads);
  operandGrads.push_back(fn(*g));
  return success();
}

/// Shared body of the binary elementwise rules.
template <typename Fn>
LogicalResult binaryRule(Operation *op, ArrayRef<Value> resultGrads,
                         SmallVectorImpl<Value> &operandGrads, Fn &&fn) {
  auto g = singleResultGrad(op, resultGrads);
  if (failed(g))
    return failure();
  if (!*g || !isFloatTensor(op->getResult(0)))
    return noGradient(op, operandGrads);
  auto [da, db] = fn(*g);
  operandGrads.push_back(da);
  operandGrads.push_back(db);
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::buildGradient(OpBuilder &, ArrayRef<Value>,
                                        SmallVectorImpl<Value> &) {
  return success(); // no operands
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binaryRule(*this, resultGrads, operandGrads,
                    [&](Value g) { return std::pair<Value, Value>(g, g); });
}

LogicalResult SubOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return binaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    return std::pair<Value, Value>(g, gb.neg(g));
  });
}

LogicalResult MulOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return binaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    // Two statements: the order of a call's arguments is unspecified (GCC
    // built db first, clang da), and the IR must not depend on the compiler.
    Value db = gb.mul(g, getLhs());
    Value da = gb.mul(g, getRhs());
    return std::pair<Value, Value>(da, db);
  });
}

LogicalResult DivOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // y = a / b: da = g / b; db = -g·a / b² = -da · y.
  return binaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    Value da = gb.div(g, getRhs());
    Value db =
        isConstantValue(getRhs()) ? Value() : gb.neg(gb.mul(da, getResult()));
    return std::pair<Value, Value>(da, db);
  });
}

LogicalResult PowOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // y = x^p: dx = g·p·x^(p−1); dp = g·y·log x (only when p is not constant:
  // log x is NaN for x < 0, which is fine for x^integer exponents).
  return binaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    Value x = getLhs(), p = getRhs();
    Value dx;
    std::optional<double> c = splatValue(p);
    if (c && *c == 2.0) {
      dx = gb.mul(g, gb.scale(x, 2.0));
    } else if (c) {
      Value xpm1 = PowOp::create(builder, getLoc(), x, gb.splatLike(p, *c - 1));
      dx = gb.mul(g, gb.scale(xpm1, *c));
    } else {
      Value pm1 = gb.sub(p, gb.splatLike(p, 1.0));
      Value xpm1 = PowOp::create(builder, getLoc(), x, pm1);
      dx = gb.mul(g, gb.mul(p, xpm1));
    }
    Value dp;
    if (!isConstantValue(p))
      dp = gb.mul(g, gb.mul(getResult(), LogOp::create(builder, getLoc(), x)));
    return std::pair<Value, Value>(dx, dp);
  });
}

LogicalResult MaxOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // torch.maximum's rule: the gradient goes to the larger operand; on a tie
  // each operand gets half.
  return binaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    auto maskType =
        RankedTensorType::get(tensorType(g).getShape(), builder.getI1Type());
    Value y = getResult();
    Value isA = EqualOp::create(builder, getLoc(), maskType, getLhs(), y);
    Value isB = EqualOp::create(builder, getLoc(), maskType, getRhs(), y);
    Value half = gb.scale(g, 0.5);
    Value zero = gb.zerosLike(g);
    Value da = SelectOp::create(
        builder, getLoc(), isA,
        SelectOp::create(builder, getLoc(), isB, half, g), zero);
    Value db = SelectOp::create(
        builder, getLoc(), isB,
        SelectOp::create(builder, getLoc(), isA, half, g), zero);
    return std::pair<Value, Value>(da, db);
  });
}

LogicalResult EqualOp::buildGradient(OpBuilder &, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  if (failed(singleResultGrad(*this, resultGrads)))
    return failure();
  return noGradient(*this, operandGrads); // piecewise constant
}

LogicalResult SelectOp::buildGradient(OpBuilder &builder,
                                      ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g || !isFloatTensor(getResult()))
    return noGradient(*this, operandGrads);
  GradBuilder gb{builder, getLoc()};
  Value zero = gb.zerosLike(*g);
  operandGrads.push_back(Value()); // condition
  operandGrads.push_back(
      SelectOp::create(builder, getLoc(), getCondition(), *g, zero));
  operandGrads.push_back(
      SelectOp::create(builder, getLoc(), getCondition(), zero, *g));
  return success();
}

LogicalResult NegOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads,
                   [&](Value g) { return gb.neg(g); });
}

LogicalResult ExpOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads,
                   [&](Value g) { return gb.mul(g, getResult()); });
}

LogicalResult LogOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads,
                   [&](Value g) { return gb.div(g, getInput()); });
}

LogicalResult SqrtOp::buildGradient(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // d sqrt(x) = 1 / (2 sqrt(x)).
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    return gb.scale(gb.div(g, getResult()), 0.5);
  });
}

LogicalResult RsqrtOp::buildGradient(OpBuilder &builder,
                                     ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // y = x^(−1/2): dy/dx = −y³ / 2.
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    Value y = getResult();
    return gb.mul(g, gb.scale(gb.mul(gb.mul(y, y), y), -0.5));
  });
}

LogicalResult TanhOp::buildGradient(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // d tanh(x) = 1 − y².
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    Value y = getResult();
    return gb.mul(g, gb.sub(gb.splatLike(y, 1.0), gb.mul(y, y)));
  });
}

LogicalResult ErfOp::buildGradient(OpBuilder &builder,
                                   ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // d erf(x) = 2/√π · exp(−x²).
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    Value x = getInput();
    Value e = ExpOp::create(builder, getLoc(), gb.neg(gb.mul(x, x)));
    return gb.mul(g, gb.scale(e, 2.0 / std::sqrt(M_PI)));
  });
}

LogicalResult ReluOp::buildGradient(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    return ReluGradOp::create(builder, getLoc(), getInput(), g);
  });
}

LogicalResult GeluOp::buildGradient(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    return GeluGradOp::create(builder, getLoc(), getInput(), g,
                              getApproximateAttr());
  });
}

LogicalResult SigmoidOp::buildGradient(OpBuilder &builder,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // d sigmoid(x) = y · (1 − y): y ∈ [0, 1], finite for every x.
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    Value y = getResult();
    return gb.mul(g, gb.mul(y, gb.sub(gb.splatLike(y, 1.0), y)));
  });
}

LogicalResult SiluOp::buildGradient(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    return SiluGradOp::create(builder, getLoc(), getInput(), g);
  });
}

/// d dropout(x) = the same mask times 1/(1 − ratio): tsr.dropout of the
/// cotangent with the same step, seed and op_id, recomputed from the key
/// (no mask is saved). The step counter gets no gradient.
LogicalResult DropoutOp::buildGradient(OpBuilder &builder,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g) {
    operandGrads.append({Value(), Value()});
    return success();
  }
  operandGrads.push_back(DropoutOp::create(
      builder, getLoc(), g->getType(), *g, getStep(), getRatioAttr(),
      getSeedAttr(), getOpIdAttr(), DenseI64ArrayAttr()));
  operandGrads.push_back(Value());
  return success();
}

LogicalResult ConvertOp::buildGradient(OpBuilder &builder,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  // Only float -> float conversions carry a gradient (ids, masks do not).
  if (!*g || !isFloatTensor(getInput()) || !isFloatTensor(getResult()))
    return noGradient(*this, operandGrads);
  Value dx = *g;
  if (getInput().getType() != dx.getType())
    dx = ConvertOp::create(builder, getLoc(), getInput().getType(), dx);
  operandGrads.push_back(dx);
  return success();
}

LogicalResult
ShardingConstraintOp::buildGradient(OpBuilder &builder,
                                    ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // The cotangent takes the same layout as the value.
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    return ShardingConstraintOp::create(builder, getLoc(), g, getSharding());
  });
}

LogicalResult BroadcastOp::buildGradient(OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    return gb.sumToShape(g, getInput().getType());
  });
}

LogicalResult ReduceSumOp::buildGradient(OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    return gb.broadcastBack(g, getInput().getType(), getAxes());
  });
}

LogicalResult
SumSquaresOp::buildGradient(OpBuilder &builder, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // d Σx² = 2·x·g.
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    RankedTensorType in = getInput().getType();
    auto axes = llvm::to_vector(llvm::seq<int64_t>(0, in.getRank()));
    return gb.mul(gb.scale(getInput(), 2.0), gb.broadcastBack(g, in, axes));
  });
}

LogicalResult
ReduceMeanOp::buildGradient(OpBuilder &builder, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    int64_t count = 1;
    for (int64_t a : getAxes())
      count *= getInput().getType().getDimSize(a);
    Value scaled = count == 1 ? g : gb.scale(g, 1.0 / double(count));
    return gb.broadcastBack(scaled, getInput().getType(), getAxes());
  });
}

LogicalResult ReduceMaxOp::buildGradient(OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  // Like torch.amax: the gradient is shared evenly by the elements equal to
  // the maximum.
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    RankedTensorType in = getInput().getType();
    if (getAxes().empty())
      return g;
    Value y = gb.broadcastBack(getResult(), in, getAxes());
    auto maskType = RankedTensorType::get(in.getShape(), builder.getI1Type());
    Value mask = EqualOp::create(builder, getLoc(), maskType, getInput(), y);
    Value maskF = ConvertOp::create(builder, getLoc(), in, mask);
    Value count =
        ReduceSumOp::create(builder, getLoc(), maskF, getAxes(), true);
    Value share =
        gb.div(gb.reshape(g, GradBuilder::keepdimShape(in, getAxes())), count);
    return gb.mul(maskF, gb.broadcastBack(share, in, getAxes()));
  });
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::buildGradient(OpBuilder &builder,
                                      ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto gOr = singleResultGrad(*this, resultGrads);
  if (failed(gOr))
    return failure();
  Value g = *gOr;
  if (!g || !isFloatTensor(getResult()))
    return noGradient(*this, operandGrads);
  GradBuilder gb{builder, getLoc()};
  Location loc = getLoc();
  Value a = getLhs(), bm = getRhs();
  bool ta = getTransposeLhs(), tb = getTransposeRhs();
  int64_t lr = getLhs().getType().getRank(), rr = getRhs().getType().getRank();
  bool shared = rr == 2 && lr > 2; // rhs shared by every batch of lhs
  auto mm = [&](Value x, Value y, bool tx, bool ty) -> Value {
    return MatmulOp::create(builder, loc, x, y, tx, ty);
  };

  // C = op(A)·op(B), G = dC.
  // d op(A) = G·op(B)ᵀ; d op(B) = op(A)ᵀ·G.
  Value da;
  if (!ta) {
    // dA = G·op(B)ᵀ.
    da = mm(g, bm, false, !tb);
  } else if (!shared) {
    // dA = (G·op(B)ᵀ)ᵀ = op(B)·Gᵀ.
    da = tb ? mm(bm, g, true, true) : mm(bm, g, false, true);
  } else {
    // Batched lhs against a shared rank-2 rhs: a matmul cannot put the
    // rank-2 operand first, so transpose the last two dimensions explicitly.
    Value t = mm(g, bm, false, !tb); // [..., M, K]
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, lr));
    std::swap(perm[lr - 1], perm[lr - 2]);
    da = TransposeOp::create(builder, loc, t, perm);
  }

  Value db;
  if (!shared) {
    // dB = op(A)ᵀ·G (tb = false) or Gᵀ·op(A) (tb = true).
    if (!tb)
      db = ta ? mm(a, g, false, false) : mm(a, g, true, false);
    else
      db = ta ? mm(g, a, true, true) : mm(g, a, true, false);
  } else if (!ta) {
    // Shared weight: sum over the batch as one 2-D matmul over the flattened
    // rows: A2 [R, K], G2 [R, N].
    auto aT = getLhs().getType();
    auto gT = tensorType(g);
    int64_t rows = aT.getNumElements() / aT.getDimSize(lr - 1);
    Value a2 = gb.reshape(a, {rows, aT.getDimSize(lr - 1)});
    Value g2 = gb.reshape(g, {rows, gT.getDimSize(lr - 1)});
    db = tb ? mm(g2, a2, true, false) : mm(a2, g2, true, false);
  } else {
    // Shared weight with a transposed lhs: per-batch products, then summed
    // over the batch dimensions.
    Value perBatch = tb ? mm(g, a, true, true) : mm(a, g, false, false);
    db = ReduceSumOp::create(builder, loc, perBatch,
                             llvm::to_vector(llvm::seq<int64_t>(0, lr - 2)),
                             false);
  }
  operandGrads.push_back(da);
  operandGrads.push_back(db);
  return success();
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradient(OpBuilder &builder,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) {
    return gb.reshape(g, getInput().getType().getShape());
  });
}

LogicalResult TransposeOp::buildGradient(OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    ArrayRef<int64_t> perm = getPermutation();
    SmallVector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inverse[perm[i]] = i;
    return TransposeOp::create(builder, getLoc(), g, inverse);
  });
}

LogicalResult SliceOp::buildGradient(OpBuilder &builder,
                                     ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  GradBuilder gb{builder, getLoc()};
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    RankedTensorType in = getInput().getType();
    if (tensorType(g).getNumElements() == 0)
      return gb.zerosLike(getInput());
    Value cur = g;
    for (int64_t d = 0; d < in.getRank(); ++d) {
      int64_t size = in.getDimSize(d), start = getStartIndices()[d];
      int64_t stride = getStrides()[d];
      auto curT = tensorType(cur);
      int64_t n = curT.getDimSize(d);
      int64_t covered = n;
      if (stride > 1) {
        // Interleave stride−1 zeros after every element:
        // [.., n, ..] -> [.., n, 1, ..] ++ zeros [.., n, s−1, ..]
        //            -> [.., n·s, ..], cut to what fits in the input.
        SmallVector<int64_t> split(curT.getShape());
        split.insert(split.begin() + d + 1, 1);
        Value col = gb.reshape(cur, split);
        Value spread = gb.padWithZeros(col, d + 1, 0, stride - 1);
        SmallVector<int64_t> merged(curT.getShape());
        merged[d] = n * stride;
        cur = gb.reshape(spread, merged);
        covered = std::min(n * stride, size - start);
        if (covered < n * stride) {
          SmallVector<int64_t> lo(merged.size(), 0), hi(merged),
              one(merged.size(), 1);
          hi[d] = covered;
          cur = SliceOp::create(builder, getLoc(), cur, lo, hi, one);
        }
      }
      cur = gb.padWithZeros(cur, d, start, size - start - covered);
    }
    return cur;
  });
}

LogicalResult ConcatOp::buildGradient(OpBuilder &builder,
                                      ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g || !isFloatTensor(getResult()))
    return noGradient(*this, operandGrads);
  auto gT = tensorType(*g);
  int64_t axis = getAxis(), offset = 0;
  for (Value in : getInputs()) {
    auto inT = tensorType(in);
    SmallVector<int64_t> lo(gT.getRank(), 0), hi(gT.getShape()),
        one(gT.getRank(), 1);
    lo[axis] = offset;
    hi[axis] = offset + inT.getDimSize(axis);
    offset = hi[axis];
    if (inT == gT)
      operandGrads.push_back(*g);
    else
      operandGrads.push_back(
          SliceOp::create(builder, getLoc(), *g, lo, hi, one));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Neural-network ops
//===----------------------------------------------------------------------===//

LogicalResult GatherOp::buildGradient(OpBuilder &builder,
                                      ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g || !isFloatTensor(getTable()))
    return noGradient(*this, operandGrads);
  operandGrads.push_back(GatherGradOp::create(
      builder, getLoc(), getTable().getType(), getIndices(), *g));
  operandGrads.push_back(Value()); // indices
  return success();
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g)
    return noGradient(*this, operandGrads);
  auto grads = LayerNormGradOp::create(
      builder, getLoc(), getInput().getType(), getScale().getType(),
      getBias().getType(), getInput(), getScale(), *g, getAxisAttr(),
      getEpsilonAttr());
  operandGrads.push_back(grads.getInputGrad());
  operandGrads.push_back(grads.getScaleGrad());
  operandGrads.push_back(grads.getBiasGrad());
  return success();
}

LogicalResult RmsNormOp::buildGradient(OpBuilder &builder,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g)
    return noGradient(*this, operandGrads);
  auto grads = RmsNormGradOp::create(
      builder, getLoc(), getInput().getType(), getScale().getType(), getInput(),
      getScale(), *g, getAxisAttr(), getEpsilonAttr());
  operandGrads.push_back(grads.getInputGrad());
  operandGrads.push_back(grads.getScaleGrad());
  return success();
}

LogicalResult SoftmaxOp::buildGradient(OpBuilder &builder,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  return unaryRule(*this, resultGrads, operandGrads, [&](Value g) -> Value {
    return SoftmaxGradOp::create(builder, getLoc(), getResult().getType(),
                                 getResult(), g, getAxisAttr());
  });
}

/// One tsr.attention_grad from the output's cotangent. The lse result is an
/// internal by-product (it feeds attention_grad, not the loss), so a
/// cotangent flowing into it is an error rather than silently dropped. The
/// mask is not differentiated.
LogicalResult AttentionOp::buildGradient(OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (resultGrads.size() > 1 && resultGrads[1])
    return emitOpError("has no gradient rule for its lse result");
  if (!*g)
    return noGradient(*this, operandGrads);
  auto grads = AttentionGradOp::create(
      builder, getLoc(), getQuery().getType(), getKey().getType(),
      getValue().getType(), getQuery(), getKey(), getValue(), getOutput(),
      getLse(), *g, getMask(), getScaleAttr(), getCausalAttr(),
      getRingSizeAttr());
  // A partitioned ring op's communicator axes go to its gradient as well.
  if (Attribute axes = (*this)->getAttr("grid_axes"))
    grads->setAttr("grid_axes", axes);
  operandGrads.push_back(grads.getQueryGrad());
  operandGrads.push_back(grads.getKeyGrad());
  operandGrads.push_back(grads.getValueGrad());
  if (getMask())
    operandGrads.push_back(Value());
  return success();
}

LogicalResult
CrossEntropyOp::buildGradient(OpBuilder &builder, ArrayRef<Value> resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  auto g = singleResultGrad(*this, resultGrads);
  if (failed(g))
    return failure();
  if (!*g)
    return noGradient(*this, operandGrads);
  operandGrads.push_back(CrossEntropyGradOp::create(
      builder, getLoc(), getLogits().getType(), getLogits(), getLabels(), *g));
  operandGrads.push_back(Value()); // labels
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops and optimizer updates: no second-order differentiation
//===----------------------------------------------------------------------===//

#define TSR_NO_GRADIENT(OP, WHY)                                               \
  LogicalResult OP::buildGradient(OpBuilder &, ArrayRef<Value>,                \
                                  SmallVectorImpl<Value> &) {                  \
    return notDifferentiable(*this, WHY);                                      \
  }

TSR_NO_GRADIENT(GatherGradOp, "second-order differentiation is not supported")
TSR_NO_GRADIENT(LayerNormGradOp,
                "second-order differentiation is not supported")
TSR_NO_GRADIENT(RmsNormGradOp, "second-order differentiation is not supported")
TSR_NO_GRADIENT(SoftmaxGradOp, "second-order differentiation is not supported")
TSR_NO_GRADIENT(AttentionGradOp,
                "second-order differentiation is not supported")
TSR_NO_GRADIENT(ReluGradOp, "second-order differentiation is not supported")
TSR_NO_GRADIENT(GeluGradOp, "second-order differentiation is not supported")
TSR_NO_GRADIENT(SiluGradOp, "second-order differentiation is not supported")
TSR_NO_GRADIENT(CrossEntropyGradOp,
                "second-order differentiation is not supported")
TSR_NO_GRADIENT(SgdUpdateOp, "optimizer updates are not differentiable")
TSR_NO_GRADIENT(AdamwUpdateOp, "optimizer updates are not differentiable")
// The fused ops of passes/fusion exist only after autodiff.
TSR_NO_GRADIENT(AddLayerNormOp, "fused ops are created after autodiff")
TSR_NO_GRADIENT(AddRmsNormOp, "fused ops are created after autodiff")
TSR_NO_GRADIENT(LayerNormGradAddOp, "fused ops are created after autodiff")
TSR_NO_GRADIENT(RmsNormGradAddOp, "fused ops are created after autodiff")
TSR_NO_GRADIENT(LinearOp, "fused by tsr-fuse-linear after autodiff")
TSR_NO_GRADIENT(BiasActivationGradOp,
                "second-order differentiation is not supported")

TSR_NO_GRADIENT(FusedElementwiseOp,
                "fused ops are made after autodiff (tsr-fuse-elementwise)")

TSR_NO_GRADIENT(MultiSgdUpdateOp, "fused after autodiff: never differentiated")
TSR_NO_GRADIENT(MultiAdamwUpdateOp,
                "fused after autodiff: never differentiated")
#undef TSR_NO_GRADIENT

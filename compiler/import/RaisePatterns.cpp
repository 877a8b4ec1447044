//===- RaisePatterns.cpp - raise decomposed ONNX patterns in tsr ----------===//
//
// See RaisePatterns.h. Every pattern only matches on the exact values it
// replaces and leaves intermediate ops with other users in place (the greedy
// driver removes the dead ones), so a partial match never changes semantics.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/RaisePatterns.h"

#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/Sequence.h"

#include <cmath>
#include <map>
#include <optional>

using namespace mlir;
namespace tsr = tessera::tsr;

namespace tessera::import {
namespace {

/// Looks through tsr.broadcast and tsr.reshape.
Value stripBroadcast(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto bc = dyn_cast<tsr::BroadcastOp>(def))
      v = bc.getInput();
    else if (auto rs = dyn_cast<tsr::ReshapeOp>(def))
      v = rs.getInput();
    else
      break;
  }
  return v;
}

/// The value of a floating-point splat constant, possibly broadcast or
/// reshaped.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(stripBroadcast(v), m_Constant(&attr)) || !attr.isSplat())
    return std::nullopt;
  if (auto f = dyn_cast<FloatAttr>(attr.getSplatValue<Attribute>()))
    return f.getValueAsDouble();
  return std::nullopt;
}

bool isSplatOf(Value v, double expected, double relTol = 1e-6) {
  auto s = splatValue(v);
  if (!s)
    return false;
  if (relTol == 0)
    return *s == expected;
  return std::fabs(*s - expected) <= relTol * std::fabs(expected);
}

template <typename OpTy> OpTy defOp(Value v) {
  return v ? v.getDefiningOp<OpTy>() : OpTy();
}

//===----------------------------------------------------------------------===//
// x * 1.0 → x
//===----------------------------------------------------------------------===//

struct FoldMulByOne : OpRewritePattern<tsr::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tsr::MulOp op,
                                PatternRewriter &rewriter) const override {
    for (int k = 0; k < 2; ++k) {
      Value keep = op->getOperand(k), one = op->getOperand(1 - k);
      if (keep.getType() == op.getType() && isSplatOf(one, 1.0, 0)) {
        rewriter.replaceOp(op, keep);
        return success();
      }
    }
    return failure();
  }
};

//===----------------------------------------------------------------------===//
// GELU (erf and tanh forms)
//===----------------------------------------------------------------------===//

/// `v` is `k * x` (either order) with k a splat ≈ `c`.
bool isScaled(Value v, Value x, double c) {
  if (auto mul = defOp<tsr::MulOp>(v))
    for (int j = 0; j < 2; ++j)
      if (mul->getOperand(j) == x && isSplatOf(mul->getOperand(1 - j), c))
        return true;
  return false;
}

/// `v` is x³: x·(x·x), (x·x)·x or pow(x, 3).
bool isCube(Value v, Value x) {
  if (auto pow = defOp<tsr::PowOp>(v))
    return pow.getLhs() == x && isSplatOf(pow.getRhs(), 3.0);
  auto mul = defOp<tsr::MulOp>(v);
  if (!mul)
    return false;
  for (int j = 0; j < 2; ++j) {
    auto sq = defOp<tsr::MulOp>(mul->getOperand(1 - j));
    if (mul->getOperand(j) == x && sq && sq.getLhs() == x && sq.getRhs() == x)
      return true;
  }
  return false;
}

/// `v` is √(2/π)·(x + 0.044715·x³), in any operand order.
bool isTanhGeluInner(Value v, Value x) {
  auto mul = defOp<tsr::MulOp>(v);
  if (!mul)
    return false;
  for (int j = 0; j < 2; ++j) {
    if (!isSplatOf(mul->getOperand(1 - j), std::sqrt(2.0 / M_PI)))
      continue;
    auto add = defOp<tsr::AddOp>(mul->getOperand(j));
    if (!add)
      continue;
    for (int i = 0; i < 2; ++i) {
      if (add->getOperand(i) != x)
        continue;
      auto kappa = defOp<tsr::MulOp>(add->getOperand(1 - i));
      if (!kappa)
        continue;
      for (int m = 0; m < 2; ++m)
        if (isSplatOf(kappa->getOperand(1 - m), 0.044715) &&
            isCube(kappa->getOperand(m), x))
          return true;
    }
  }
  return false;
}

/// If `b` is `1 + erf(x / √2)` (or `x · (1/√2)`) returns "none"; if it is
/// `1 + tanh(√(2/π)·(x + 0.044715·x³))` returns "tanh"; any operand order.
std::optional<StringRef> onePlusGeluCdf(Value bv, Value x) {
  auto add = defOp<tsr::AddOp>(bv);
  if (!add)
    return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    if (!isSplatOf(add->getOperand(1 - k), 1.0))
      continue;
    Value f = add->getOperand(k);
    if (auto erf = defOp<tsr::ErfOp>(f)) {
      Value d = erf.getInput();
      if (auto div = defOp<tsr::DivOp>(d))
        if (div.getLhs() == x && isSplatOf(div.getRhs(), std::sqrt(2.0)))
          return StringRef("none");
      if (isScaled(d, x, std::sqrt(0.5)))
        return StringRef("none");
    }
    if (auto tanh = defOp<tsr::TanhOp>(f))
      if (isTanhGeluInner(tanh.getInput(), x))
        return StringRef("tanh");
  }
  return std::nullopt;
}

struct RaiseGelu : OpRewritePattern<tsr::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tsr::MulOp root,
                                PatternRewriter &rewriter) const override {
    if (!isa<FloatType>(root.getType().getElementType()))
      return failure();
    // root = p * (u * v); {p, u, v} = {x, 0.5, 1 + erf(x/√2)} (or the
    // tanh form) in any order.
    for (int k = 0; k < 2; ++k) {
      Value p = root->getOperand(k);
      auto inner = defOp<tsr::MulOp>(root->getOperand(1 - k));
      if (!inner)
        continue;
      Value f[3] = {p, inner.getLhs(), inner.getRhs()};
      static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                      {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
      for (const auto &perm : perms) {
        Value x = f[perm[0]], half = f[perm[1]], bv = f[perm[2]];
        if (x.getType() != root.getType() || !isSplatOf(half, 0.5))
          continue;
        std::optional<StringRef> approximate = onePlusGeluCdf(bv, x);
        if (!approximate)
          continue;
        rewriter.replaceOpWithNewOp<tsr::GeluOp>(
            root, root.getType(), x, rewriter.getStringAttr(*approximate));
        return success();
      }
    }
    return failure();
  }
};

//===----------------------------------------------------------------------===//
// Decomposed LayerNorm
//===----------------------------------------------------------------------===//

/// `v` is a reduce_mean(x) with keepdim over the trailing axes [axis, rank);
/// returns axis.
std::optional<int64_t> trailingMeanAxis(tsr::ReduceMeanOp mean) {
  if (!mean || !mean.getKeepdim())
    return std::nullopt;
  ArrayRef<int64_t> axes = mean.getAxes();
  int64_t rank = mean.getInput().getType().getRank();
  if (axes.empty() || axes.back() != rank - 1)
    return std::nullopt;
  for (size_t k = 1; k < axes.size(); ++k)
    if (axes[k] != axes[k - 1] + 1)
      return std::nullopt;
  return axes.front();
}

/// If `v` is (a broadcast of) a tensor whose shape, less leading unit dims,
/// is `norm`, returns that tensor.
Value normalizedOperand(Value v, ArrayRef<int64_t> norm, Type elem) {
  if (splatValue(v))
    return v; // rebuilt as a constant of shape `norm` by the caller
  Value src = stripBroadcast(v);
  auto type = cast<RankedTensorType>(src.getType());
  if (type.getElementType() != elem)
    return {};
  ArrayRef<int64_t> shape = type.getShape();
  while (shape.size() > norm.size() && shape.front() == 1)
    shape = shape.drop_front();
  return shape == norm ? src : Value();
}

struct RaiseLayerNorm : OpRewritePattern<tsr::DivOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tsr::DivOp div,
                                PatternRewriter &rewriter) const override {
    auto type = div.getType();
    auto elem = dyn_cast<FloatType>(type.getElementType());
    if (!elem)
      return failure();
    // S = x - mean(x)
    auto sub = defOp<tsr::SubOp>(div.getLhs());
    if (!sub)
      return failure();
    Value x = sub.getLhs();
    auto mean = defOp<tsr::ReduceMeanOp>(stripBroadcast(sub.getRhs()));
    auto axis = trailingMeanAxis(mean);
    if (!axis || mean.getInput() != x || x.getType() != type)
      return failure();
    // denominator = sqrt(mean(S^2) + eps)
    auto sqrt = defOp<tsr::SqrtOp>(stripBroadcast(div.getRhs()));
    if (!sqrt)
      return failure();
    auto add = defOp<tsr::AddOp>(sqrt.getInput());
    if (!add)
      return failure();
    std::optional<double> eps;
    tsr::ReduceMeanOp var;
    for (int k = 0; k < 2 && !var; ++k) {
      eps = splatValue(add->getOperand(1 - k));
      var = defOp<tsr::ReduceMeanOp>(add->getOperand(k));
      if (!eps)
        var = {};
    }
    if (!var || trailingMeanAxis(var) != axis ||
        var.getAxes() != mean.getAxes())
      return failure();
    Value sq = var.getInput();
    bool isSquare = false;
    if (auto pow = defOp<tsr::PowOp>(sq))
      isSquare =
          pow.getLhs() == sub.getResult() && isSplatOf(pow.getRhs(), 2.0);
    else if (auto mul = defOp<tsr::MulOp>(sq))
      isSquare =
          mul.getLhs() == sub.getResult() && mul.getRhs() == sub.getResult();
    if (!isSquare)
      return failure();

    // Absorb `* gamma` and `+ beta` when they follow.
    ArrayRef<int64_t> norm = type.getShape().drop_front(*axis);
    Operation *last = div;
    Value gamma, beta;
    if (last->hasOneUse())
      if (auto mul = dyn_cast<tsr::MulOp>(*last->user_begin()))
        for (int k = 0; k < 2 && !gamma; ++k)
          if (mul->getOperand(k) == last->getResult(0))
            if ((gamma = normalizedOperand(mul->getOperand(1 - k), norm, elem)))
              last = mul;
    if (last->hasOneUse())
      if (auto addB = dyn_cast<tsr::AddOp>(*last->user_begin()))
        for (int k = 0; k < 2 && !beta; ++k)
          if (addB->getOperand(k) == last->getResult(0))
            if ((beta = normalizedOperand(addB->getOperand(1 - k), norm, elem)))
              last = addB;

    rewriter.setInsertionPoint(last);
    Location loc = last->getLoc();
    auto normType = RankedTensorType::get(norm, elem);
    auto adapt = [&](Value v, double dflt) -> Value {
      std::optional<double> splat = v ? splatValue(v) : dflt;
      if (splat)
        return tsr::ConstantOp::create(
            rewriter, loc, normType,
            DenseElementsAttr::get(normType,
                                   rewriter.getFloatAttr(elem, *splat)));
      if (v.getType() == normType)
        return v;
      return tsr::ReshapeOp::create(rewriter, loc, normType, v);
    };
    Value scale = adapt(gamma, 1.0), bias = adapt(beta, 0.0);
    auto ln = tsr::LayerNormOp::create(
        rewriter, loc, type, x, scale, bias, rewriter.getI64IntegerAttr(*axis),
        rewriter.getF32FloatAttr(static_cast<float>(*eps)));
    rewriter.replaceOp(last, ln.getResult());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Decomposed RMSNorm
//===----------------------------------------------------------------------===//

/// Looks through tsr.broadcast only: a per-row statistic broadcast back over
/// the normalized dims keeps its rank.
Value stripPureBroadcast(Value v) {
  while (auto bc = defOp<tsr::BroadcastOp>(v))
    v = bc.getInput();
  return v;
}

/// `v` is x² (pow(x, 2) or x · x); returns x.
Value squaredValue(Value v) {
  if (auto pow = defOp<tsr::PowOp>(v))
    return isSplatOf(pow.getRhs(), 2.0) ? pow.getLhs() : Value();
  if (auto mul = defOp<tsr::MulOp>(v))
    return mul.getLhs() == mul.getRhs() ? mul.getLhs() : Value();
  return {};
}

/// `v` is mean(x², trailing axes, keepdim) + ε with ε a splat (either
/// order). Returns the mean op and sets `eps`.
tsr::ReduceMeanOp meanSquarePlusEps(Value v, double &eps) {
  auto add = defOp<tsr::AddOp>(v);
  if (!add)
    return {};
  for (int k = 0; k < 2; ++k) {
    std::optional<double> e = splatValue(add->getOperand(1 - k));
    auto mean = defOp<tsr::ReduceMeanOp>(add->getOperand(k));
    if (e && mean && trailingMeanAxis(mean) && squaredValue(mean.getInput())) {
      eps = *e;
      return mean;
    }
  }
  return {};
}

/// The mean(x²) + ε under a reciprocal root: `v` is 1 / sqrt(s) (ONNX
/// Div(1, ·) or Reciprocal, both imported as tsr.div by a splat 1) or
/// rsqrt(s).
tsr::ReduceMeanOp reciprocalRms(Value v, double &eps) {
  if (auto rsqrt = defOp<tsr::RsqrtOp>(v))
    return meanSquarePlusEps(rsqrt.getInput(), eps);
  auto div = defOp<tsr::DivOp>(v);
  if (!div || !isSplatOf(div.getLhs(), 1.0, 0))
    return {};
  auto sqrt = defOp<tsr::SqrtOp>(stripPureBroadcast(div.getRhs()));
  return sqrt ? meanSquarePlusEps(sqrt.getInput(), eps) : tsr::ReduceMeanOp();
}

/// x · (1 / sqrt(mean(x²) + ε)) (either operand order; the reciprocal may be
/// x · rsqrt(·)) or x / sqrt(mean(x²) + ε), the mean over trailing axes with
/// keepdim and the root broadcast back to x's shape, [· scale] (either
/// order) → tsr.rms_norm. The exporters' forms: TorchScript HF LLaMA
/// (Div(1, Sqrt)), dynamo (Reciprocal(Sqrt)); Gemma's scale is `1 + w`.
struct RaiseRmsNorm : RewritePattern {
  RaiseRmsNorm(MLIRContext *ctx)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, ctx) {}

  LogicalResult matchAndRewrite(Operation *root,
                                PatternRewriter &rewriter) const override {
    if (!isa<tsr::MulOp, tsr::DivOp>(root))
      return failure();
    auto type = cast<RankedTensorType>(root->getResult(0).getType());
    auto elem = dyn_cast<FloatType>(type.getElementType());
    if (!elem)
      return failure();
    // The mean must be of the square of this very x.
    Value x;
    double eps = 0;
    tsr::ReduceMeanOp mean;
    auto accept = [&](Value candidate, tsr::ReduceMeanOp m, Value stat) {
      if (!m || candidate.getType() != type ||
          squaredValue(m.getInput()) != candidate ||
          stat.getType() != m.getType())
        return false;
      x = candidate;
      mean = m;
      return true;
    };
    // `stat`, the per-row value broadcast onto x, has the mean's shape.
    if (isa<tsr::MulOp>(root)) {
      for (int k = 0; k < 2 && !mean; ++k) {
        Value stat = stripPureBroadcast(root->getOperand(1 - k));
        accept(root->getOperand(k), reciprocalRms(stat, eps), stat);
      }
    } else {
      Value stat = stripPureBroadcast(root->getOperand(1));
      if (auto sqrt = defOp<tsr::SqrtOp>(stat))
        accept(root->getOperand(0), meanSquarePlusEps(sqrt.getInput(), eps),
               stat);
    }
    if (!mean)
      return failure();
    int64_t axis = *trailingMeanAxis(mean);

    // Absorb `* scale` when it follows.
    ArrayRef<int64_t> norm = type.getShape().drop_front(axis);
    Operation *last = root;
    Value scale;
    if (root->hasOneUse())
      if (auto mul = dyn_cast<tsr::MulOp>(*root->user_begin()))
        for (int k = 0; k < 2 && !scale; ++k)
          if (mul->getOperand(k) == root->getResult(0))
            if ((scale = normalizedOperand(mul->getOperand(1 - k), norm, elem)))
              last = mul;

    rewriter.setInsertionPoint(last);
    Location loc = last->getLoc();
    auto normType = RankedTensorType::get(norm, elem);
    std::optional<double> splat = scale ? splatValue(scale) : 1.0;
    if (splat)
      scale = tsr::ConstantOp::create(
          rewriter, loc, normType,
          DenseElementsAttr::get(normType,
                                 rewriter.getFloatAttr(elem, *splat)));
    else if (scale.getType() != normType)
      scale = tsr::ReshapeOp::create(rewriter, loc, normType, scale);
    auto rms = tsr::RmsNormOp::create(
        rewriter, loc, type, x, scale, rewriter.getI64IntegerAttr(axis),
        rewriter.getF32FloatAttr(static_cast<float>(eps)));
    rewriter.replaceOp(last, rms.getResult());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Sigmoid and SiLU
//===----------------------------------------------------------------------===//

/// 1 / (1 + exp(−x)) (the add in either order) → tsr.sigmoid, the form a
/// hand-written model (or an importer before tsr.sigmoid) produces.
struct RaiseSigmoid : OpRewritePattern<tsr::DivOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tsr::DivOp div,
                                PatternRewriter &rewriter) const override {
    if (!isa<FloatType>(div.getType().getElementType()) ||
        !isSplatOf(div.getLhs(), 1.0, 0))
      return failure();
    auto add = defOp<tsr::AddOp>(div.getRhs());
    if (!add)
      return failure();
    for (int k = 0; k < 2; ++k) {
      auto exp = defOp<tsr::ExpOp>(add->getOperand(k));
      auto neg = exp ? defOp<tsr::NegOp>(exp.getInput()) : tsr::NegOp();
      if (!neg || !isSplatOf(add->getOperand(1 - k), 1.0, 0) ||
          neg.getInput().getType() != div.getType())
        continue;
      rewriter.replaceOpWithNewOp<tsr::SigmoidOp>(div, div.getType(),
                                                  neg.getInput());
      return success();
    }
    return failure();
  }
};

/// x · sigmoid(x) (either order) → tsr.silu.
struct RaiseSilu : OpRewritePattern<tsr::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tsr::MulOp mul,
                                PatternRewriter &rewriter) const override {
    for (int k = 0; k < 2; ++k) {
      auto sig = defOp<tsr::SigmoidOp>(mul->getOperand(1 - k));
      if (sig && sig.getInput() == mul->getOperand(k)) {
        rewriter.replaceOpWithNewOp<tsr::SiluOp>(mul, mul.getType(),
                                                 sig.getInput());
        return success();
      }
    }
    return failure();
  }
};

//===----------------------------------------------------------------------===//
// matmul(a, transpose(b)) → matmul(a, b) {transpose_rhs}
//===----------------------------------------------------------------------===//

/// `t` swaps only the last two dimensions.
bool swapsLastTwo(tsr::TransposeOp t) {
  ArrayRef<int64_t> perm = t.getPermutation();
  int64_t n = perm.size();
  if (n < 2 || perm[n - 1] != n - 2 || perm[n - 2] != n - 1)
    return false;
  for (int64_t d = 0; d < n - 2; ++d)
    if (perm[d] != d)
      return false;
  return true;
}

struct FoldTransposeIntoMatmul : OpRewritePattern<tsr::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tsr::MatmulOp op,
                                PatternRewriter &rewriter) const override {
    auto tl = defOp<tsr::TransposeOp>(op.getLhs());
    auto tr = defOp<tsr::TransposeOp>(op.getRhs());
    bool foldL = tl && swapsLastTwo(tl), foldR = tr && swapsLastTwo(tr);
    if (!foldL && !foldR)
      return failure();
    Value lhs = foldL ? tl.getInput() : op.getLhs();
    Value rhs = foldR ? tr.getInput() : op.getRhs();
    rewriter.replaceOpWithNewOp<tsr::MatmulOp>(
        op, op.getType(), lhs, rhs,
        rewriter.getBoolAttr(op.getTransposeLhs() != foldL),
        rewriter.getBoolAttr(op.getTransposeRhs() != foldR));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// reshape(reshape(x)) → reshape(x)
//===----------------------------------------------------------------------===//

struct FoldReshapeChain : OpRewritePattern<tsr::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tsr::ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = defOp<tsr::ReshapeOp>(op.getInput());
    if (!inner)
      return failure();
    if (inner.getInput().getType() == op.getType())
      rewriter.replaceOp(op, inner.getInput());
    else
      rewriter.replaceOpWithNewOp<tsr::ReshapeOp>(op, op.getType(),
                                                  inner.getInput());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Attention: matmul(softmax(mask(scale · Q·Kᵀ)), V) → tsr.attention
//===----------------------------------------------------------------------===//

/// What a mask tensor amounts to.
enum class MaskKind { None, Causal, Other };

/// Whether a mask value drops its key: -inf, or a finite value so negative
/// that exp(s + v − rowmax) underflows to exactly 0 in f32 for any score s
/// of a sane magnitude (|s| < 1e29): v ≤ -1e30, or the lowest finite value
/// of its type. Hugging Face fills masks with torch.finfo(dtype).min
/// (-3.4028235e38 for f32 and bf16, -65504 for f16) instead of -inf.
///
/// The rule: such a value counts as -inf only where every query row keeps
/// at least one key, which a causal mask does (the diagonal). The kept
/// scores then set the row max and the dropped ones contribute exactly 0,
/// as with -inf, so `causal = true` is exact. (A row whose keys are all
/// dropped by a finite value attends uniformly, where -inf gives 0; so any
/// mask other than causal keeps its exact values as the mask operand.)
bool dropsKey(const APFloat &v) {
  if (v.isInfinity())
    return v.isNegative();
  if (v.isNaN() || !v.isNegative())
    return false;
  if (v.bitwiseIsEqual(APFloat::getLargest(v.getSemantics(), true)))
    return true;
  APFloat d = v;
  bool losesInfo = false;
  (void)d.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven,
                  &losesInfo);
  return d.convertToDouble() <= -1e30;
}

/// Classifies an additive mask [Sq, Sk]: all zeros, 0 on/below the diagonal
/// and a dropping value (dropsKey) above it (causal), or anything else.
MaskKind classifyAdditive(DenseElementsAttr attr, int64_t sq, int64_t sk) {
  if (!isa<FloatType>(attr.getElementType()))
    return MaskKind::Other;
  bool zeros = true, causal = sq == sk;
  int64_t idx = 0;
  for (APFloat f : attr.getValues<APFloat>()) {
    int64_t i = idx / sk, j = idx % sk;
    ++idx;
    bool isZero = f.isZero();
    zeros &= isZero;
    causal &= j <= i ? isZero : dropsKey(f);
    if (!zeros && !causal)
      return MaskKind::Other;
  }
  return zeros ? MaskKind::None : causal ? MaskKind::Causal : MaskKind::Other;
}

/// Classifies a keep-mask [Sq, Sk] (true where a key is kept).
MaskKind classifyKeep(DenseElementsAttr keep, int64_t sq, int64_t sk) {
  bool causal = sq == sk, all = true;
  int64_t idx = 0;
  for (bool b : keep.getValues<bool>()) {
    int64_t i = idx / sk, j = idx % sk;
    ++idx;
    causal &= b == (j <= i);
    all &= b;
  }
  return all ? MaskKind::None : causal ? MaskKind::Causal : MaskKind::Other;
}

/// How a value's dims read a source tensor through tsr.broadcast (numpy,
/// right-aligned) and reshapes that only add or remove unit dims: srcDim[d]
/// is the dim of `src` that dim d of the value reads, or -1 where dim d is
/// broadcast (or of size 1).
struct DimView {
  Value src;
  SmallVector<int64_t, 4> srcDim;
};

SmallVector<int64_t, 4> nonUnitDims(ArrayRef<int64_t> shape) {
  SmallVector<int64_t, 4> dims;
  for (auto [d, n] : llvm::enumerate(shape))
    if (n != 1)
      dims.push_back(d);
  return dims;
}

DimView viewThroughBroadcasts(Value v) {
  ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
  DimView view{v, {}};
  for (auto [d, n] : llvm::enumerate(shape))
    view.srcDim.push_back(n == 1 ? -1 : int64_t(d));
  while (Operation *def = view.src.getDefiningOp()) {
    ArrayRef<int64_t> out =
        cast<RankedTensorType>(view.src.getType()).getShape();
    SmallVector<int64_t, 4> inDimOf(out.size(), -1); // out dim -> input dim
    Value in;
    if (auto bc = dyn_cast<tsr::BroadcastOp>(def)) {
      in = bc.getInput();
      ArrayRef<int64_t> inShape = bc.getInput().getType().getShape();
      int64_t off = int64_t(out.size()) - int64_t(inShape.size());
      if (off < 0)
        break;
      bool ok = true;
      for (auto [e, n] : llvm::enumerate(inShape)) {
        if (n == 1)
          continue;
        ok &= n == out[e + off];
        inDimOf[e + off] = e;
      }
      if (!ok)
        break;
    } else if (auto rs = dyn_cast<tsr::ReshapeOp>(def)) {
      in = rs.getInput();
      ArrayRef<int64_t> inShape = rs.getInput().getType().getShape();
      SmallVector<int64_t, 4> a = nonUnitDims(inShape), b = nonUnitDims(out);
      if (a.size() != b.size() ||
          llvm::any_of(llvm::seq<size_t>(0, a.size()),
                       [&](size_t k) { return inShape[a[k]] != out[b[k]]; }))
        break;
      for (size_t k = 0; k < a.size(); ++k)
        inDimOf[b[k]] = a[k];
    } else {
      break;
    }
    for (int64_t &s : view.srcDim)
      if (s >= 0)
        s = inDimOf[s];
    view.src = in;
  }
  return view;
}

/// The [Sq, Sk] tensor that `attr` (the constant source of `view`, a value
/// of the scores' shape [b..., Sq, Sk]) amounts to when it is the same for
/// every leading index b...: a mask with leading dims [B, 1, Sq, Sk] (the
/// dynamo exporter folds the causal mask with the batch), [B, 1, 1, Sk]
/// (BERT's extended attention mask) or a full [B, H, Sq, Sk] constant
/// reduces when all its slices agree. Null when they differ (a per-sample
/// padding mask: not raised).
DenseElementsAttr reduceMaskSlices(DenseElementsAttr attr,
                                   ArrayRef<int64_t> srcDim, int64_t sq,
                                   int64_t sk) {
  auto type = RankedTensorType::get({sq, sk}, attr.getElementType());
  if (attr.isSplat())
    return DenseElementsAttr::get(type, attr.getSplatValue<Attribute>());
  int64_t r = srcDim.size();
  int64_t rowDim = srcDim[r - 2], colDim = srcDim[r - 1];
  int64_t rows = rowDim >= 0 ? sq : 1, cols = colDim >= 0 ? sk : 1;
  ArrayRef<int64_t> shape = attr.getType().getShape();
  // Strides of the source's row and column dims (0 when broadcast).
  SmallVector<int64_t, 6> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  auto slotOf = [&](int64_t flat) {
    int64_t i = rowDim >= 0 ? flat / strides[rowDim] % shape[rowDim] : 0;
    int64_t j = colDim >= 0 ? flat / strides[colDim] % shape[colDim] : 0;
    return i * cols + j;
  };
  auto expand = [&](auto &slots, auto &out) {
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j)
        out.push_back(
            slots[(rowDim >= 0 ? i : 0) * cols + (colDim >= 0 ? j : 0)]);
  };
  SmallVector<bool> set(rows * cols, false);
  if (attr.getElementType().isInteger(1)) {
    SmallVector<bool> slots(rows * cols, false), out;
    int64_t flat = 0;
    for (bool b : attr.getValues<bool>()) {
      int64_t s = slotOf(flat++);
      if (!set[s]) {
        set[s] = true;
        slots[s] = b;
      } else if (slots[s] != b) {
        return {};
      }
    }
    expand(slots, out);
    return DenseElementsAttr::get(type, out);
  }
  if (!isa<FloatType>(attr.getElementType()))
    return {};
  SmallVector<APFloat> slots, out;
  slots.reserve(rows * cols);
  for (int64_t s = 0; s < rows * cols; ++s)
    slots.push_back(APFloat::getZero(
        cast<FloatType>(attr.getElementType()).getFloatSemantics()));
  int64_t flat = 0;
  for (APFloat f : attr.getValues<APFloat>()) {
    int64_t s = slotOf(flat++);
    if (!set[s]) {
      set[s] = true;
      slots[s] = f;
    } else if (!slots[s].bitwiseIsEqual(f)) {
      return {};
    }
  }
  expand(slots, out);
  return DenseElementsAttr::get(type, out);
}

/// The floating-point splat a value reads (through broadcasts/reshapes).
std::optional<APFloat> splatFloat(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(stripBroadcast(v), m_Constant(&attr)) || !attr.isSplat() ||
      !isa<FloatType>(attr.getElementType()))
    return std::nullopt;
  return attr.getSplatValue<APFloat>();
}

/// A mask candidate of the scores' shape [b..., Sq, Sk]: a constant seen
/// through broadcasts and unit reshapes, or a non-constant that such ops
/// broadcast over every leading dim from [1..., Sq, Sk].
std::optional<DimView> maskView(Value v) {
  DimView view = viewThroughBroadcasts(v);
  if (matchPattern(view.src, m_Constant()))
    return view;
  ArrayRef<int64_t> dims = view.srcDim;
  int64_t r = dims.size();
  if (view.src == v || r < 2 || dims[r - 2] < 0 || dims[r - 1] < 0 ||
      llvm::any_of(dims.drop_back(2), [](int64_t d) { return d >= 0; }))
    return std::nullopt;
  return view;
}

/// The additive mask and scale collected between the scores matmul and the
/// softmax.
struct AttentionMatch {
  tsr::MatmulOp scores;
  /// The scores matmul's result type: the softmax's input type, or
  /// [b'..., Sq, Sk] with other leading dims of the same count when a
  /// reshape views them so (GPT-2's reorder_and_upcast_attn: a
  /// [B·H, Sq, Sk] baddbmm masked and softmaxed as [B, H, Sq, Sk]).
  RankedTensorType scoresType;
  double scale = 1.0;
  double scaleAfterMask = 1.0;    // the part of `scale` applied after the mask
  std::optional<DimView> mask;    // additive, [b..., Sq, Sk] view
  DenseElementsAttr boolMaskKeep; // select form: true where a key is kept
  MaskKind boolMaskKind = MaskKind::Other; // what boolMaskKeep amounts to
  std::optional<APFloat> fill;             // select form: the dropped value
  /// Both a select and an additive mask (GPT-2 given an attention mask:
  /// where(causal, s, finfo.min) + extended mask); `addOuter` when the add
  /// reads the select's result (the program order), not the other way round.
  bool addOuter = false;
};

/// If `x` [a..., H, S, D] is Hugging Face's repeat_kv of a K/V tensor
/// [a..., Hkv, S, D] (unsqueezed to [a..., Hkv, 1, S, D], broadcast by
/// Expand to [a..., Hkv, n, S, D] and reshaped to [a..., Hkv·n, S, D], so
/// query head h reads K/V head h / n), returns the unsqueezed
/// [a..., Hkv, 1, S, D] value and sets `nRep` = n. A repeat with the copies
/// major ([a..., n, Hkv, S, D]: head h reads h mod Hkv) is another layout
/// and is not matched.
Value unsqueezedBeforeRepeat(Value x, int64_t &nRep) {
  auto r2 = defOp<tsr::ReshapeOp>(x);
  if (!r2 || !r2->hasOneUse())
    return {};
  auto bc = defOp<tsr::BroadcastOp>(r2.getInput());
  if (!bc || !bc->hasOneUse())
    return {};
  ArrayRef<int64_t> out = r2.getType().getShape();
  ArrayRef<int64_t> rep = bc.getType().getShape();
  ArrayRef<int64_t> in = bc.getInput().getType().getShape();
  int64_t r = out.size();
  if (r < 4 || int64_t(rep.size()) != r + 1 || in.size() != rep.size() ||
      rep.take_front(r - 3) != out.take_front(r - 3) ||
      rep.take_back(2) != out.take_back(2) ||
      rep[r - 3] * rep[r - 2] != out[r - 3] || in[r - 2] != 1)
    return {};
  for (int64_t d = 0; d <= r; ++d)
    if (d != r - 2 && in[d] != rep[d])
      return {};
  nRep = rep[r - 2];
  return bc.getInput();
}

struct RaiseAttention : OpRewritePattern<tsr::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  /// Reduced [Sq, Sk] masks per (constant, view, Sq, Sk, select side) and
  /// their kind. Every layer of a model usually masks with the same
  /// (uniqued) constant; reducing and classifying it once instead of per
  /// layer keeps import time flat in S * S * layers (a 96-layer, S = 2048
  /// model: 4 s -> well under 1 s). Attributes are uniqued and immortal in
  /// the context, so they are safe keys for the pattern's life.
  mutable std::map<std::pair<const void *, SmallVector<int64_t, 8>>,
                   std::pair<DenseElementsAttr, MaskKind>>
      masks;

  /// The reduced [Sq, Sk] mask of a constant view and its kind (a null
  /// attribute when its leading slices differ). `keepSide` >= 0 marks a
  /// select condition: the keep-mask is the condition (1) or its negation
  /// (0); otherwise the mask is additive.
  std::pair<DenseElementsAttr, MaskKind> reducedMask(const DimView &view,
                                                     int64_t sq, int64_t sk,
                                                     int keepSide = -1) const {
    DenseElementsAttr attr;
    if (!matchPattern(view.src, m_Constant(&attr)))
      return {};
    SmallVector<int64_t, 8> key(view.srcDim.begin(), view.srcDim.end());
    key.append({sq, sk, keepSide});
    auto [it, inserted] = masks.try_emplace({attr.getAsOpaquePointer(), key});
    if (!inserted)
      return it->second;
    DenseElementsAttr reduced = reduceMaskSlices(attr, view.srcDim, sq, sk);
    if (reduced && keepSide == 0) {
      SmallVector<bool> keep;
      for (bool b : reduced.getValues<bool>())
        keep.push_back(!b);
      reduced = DenseElementsAttr::get(reduced.getType(), keep);
    }
    MaskKind kind = MaskKind::Other;
    if (reduced)
      kind = keepSide >= 0 ? classifyKeep(reduced, sq, sk)
                           : classifyAdditive(reduced, sq, sk);
    it->second = {reduced, kind};
    return it->second;
  }

  /// The scores the softmax of `root`'s lhs reads: P = softmax(x) over the
  /// last axis, possibly computed in f32 between two casts (Hugging Face's
  /// eager attention upcasts the scores and casts the probabilities back):
  /// the fused op's softmax is f32 internally. Null when `root` is not
  /// P @ V.
  static Value softmaxInput(tsr::MatmulOp root) {
    if (root.getTransposeLhs() || root.getTransposeRhs())
      return {};
    Value probs = root.getLhs();
    auto castBack = defOp<tsr::ConvertOp>(probs);
    if (castBack) {
      if (!castBack->hasOneUse())
        return {};
      probs = castBack.getInput();
    }
    auto softmax = defOp<tsr::SoftmaxOp>(probs);
    if (!softmax || !softmax->hasOneUse())
      return {};
    Value x = softmax.getInput();
    auto castIn = defOp<tsr::ConvertOp>(x);
    if (castIn) {
      if (!castIn->hasOneUse() || !castBack)
        return {};
      x = castIn.getInput();
    }
    auto pType = cast<RankedTensorType>(x.getType()); // the scores' type
    int64_t rank = pType.getRank();
    if (rank < 3 || softmax.getAxis() != rank - 1 ||
        !isa<FloatType>(pType.getElementType()) ||
        root.getLhs().getType() != pType)
      return {};
    if ((castIn || castBack) && !softmax.getType().getElementType().isF32())
      return {};
    return x;
  }

  /// Walks from the softmax input `x` back to the scores matmul, collecting
  /// the scale and the mask into `m`: a scaling met before the mask in this
  /// walk is applied after it in the program (`scaledAfterMask`).
  LogicalResult walkToScores(Value x, int64_t sq, int64_t sk, AttentionMatch &m,
                             bool &scaledAfterMask) const {
    Type pType = x.getType();
    bool added = false, selected = false, scaledLater = false, viewed = false;
    // A scale between two masks would scale the inner one: not matched.
    auto masked = [&] { return added || selected; };
    bool scaledBetween = false;
    while (!m.scores) {
      Operation *def = x.getDefiningOp();
      if (!def || !def->hasOneUse() || x.getType() != pType)
        return failure();
      if (auto mm = dyn_cast<tsr::MatmulOp>(def)) {
        if (mm.getTransposeLhs())
          return failure();
        m.scores = mm;
        m.scoresType = cast<RankedTensorType>(pType);
        break;
      }
      if (auto rs = dyn_cast<tsr::ReshapeOp>(def)) {
        // Once: a reshape of the leading dims only ([B·H, Sq, Sk] viewed as
        // [B, H, Sq, Sk]); Q and K are viewed the same way when raised.
        auto in = cast<RankedTensorType>(rs.getInput().getType());
        auto out = cast<RankedTensorType>(pType);
        if (viewed || in.getRank() < 3 ||
            in.getShape().take_back(2) != out.getShape().take_back(2) ||
            in.getElementType() != out.getElementType())
          return failure();
        viewed = true;
        pType = in;
        x = rs.getInput();
        continue;
      }
      if (isa<tsr::MulOp, tsr::DivOp>(def)) {
        std::optional<double> c = splatValue(def->getOperand(1));
        Value next = def->getOperand(0);
        if (!c && isa<tsr::MulOp>(def)) {
          c = splatValue(def->getOperand(0));
          next = def->getOperand(1);
        }
        if (!c || *c == 0.0 || !std::isfinite(*c))
          return failure();
        m.scale *= isa<tsr::DivOp>(def) ? 1.0 / *c : *c;
        if (!masked())
          m.scaleAfterMask *= isa<tsr::DivOp>(def) ? 1.0 / *c : *c;
        scaledLater |= !masked();
        scaledBetween |= masked();
        x = next;
        continue;
      }
      if (auto add = dyn_cast<tsr::AddOp>(def)) {
        if (added || (selected && scaledBetween))
          return failure();
        // The mask is the operand that reads a constant, or a [1..., Sq, Sk]
        // value, through broadcasts; the scores are the other one.
        std::optional<DimView> views[2] = {maskView(add.getLhs()),
                                           maskView(add.getRhs())};
        if (bool(views[0]) == bool(views[1]))
          return failure();
        int k = views[0] ? 0 : 1;
        m.addOuter = !selected;
        added = true;
        scaledAfterMask = scaledLater;
        m.mask = views[k];
        x = add->getOperand(1 - k);
        continue;
      }
      if (auto sel = dyn_cast<tsr::SelectOp>(def)) {
        if (selected || (added && scaledBetween))
          return failure();
        // select(cond, fill, s) or select(cond, s, fill), cond a constant,
        // fill a dropping splat (-inf, or finfo.min: see dropsKey).
        std::optional<APFloat> tv = splatFloat(sel.getTrueValue());
        std::optional<APFloat> fv = splatFloat(sel.getFalseValue());
        bool dropTrue = tv && dropsKey(*tv);
        bool dropFalse = fv && dropsKey(*fv);
        if (dropTrue == dropFalse)
          return failure();
        DimView cond = viewThroughBroadcasts(sel.getCondition());
        auto [keep, kind] = reducedMask(cond, sq, sk, dropTrue ? 0 : 1);
        if (!keep)
          return failure();
        m.boolMaskKeep = keep;
        m.boolMaskKind = kind;
        m.fill = dropTrue ? *tv : *fv;
        selected = true;
        scaledAfterMask = scaledLater;
        x = dropTrue ? sel.getFalseValue() : sel.getTrueValue();
        continue;
      }
      return failure();
    }
    return success();
  }

  /// `x` without an optional constant scale (a single-use mul/div by a
  /// finite nonzero splat, of x's type), the scale folded into `m.scale`.
  static Value unscaled(Value x, AttentionMatch &m) {
    if (!isa_and_nonnull<tsr::MulOp, tsr::DivOp>(x.getDefiningOp()) ||
        !x.getDefiningOp()->hasOneUse())
      return x;
    Operation *def = x.getDefiningOp();
    std::optional<double> c = splatValue(def->getOperand(1));
    Value next = def->getOperand(0);
    if (!c && isa<tsr::MulOp>(def)) {
      c = splatValue(def->getOperand(0));
      next = def->getOperand(1);
    }
    if (c && *c != 0.0 && std::isfinite(*c) && next.getType() == x.getType()) {
      m.scale *= isa<tsr::DivOp>(def) ? 1.0 / *c : *c;
      return next;
    }
    return x;
  }

  /// The mask's kind, and its reduced [Sq, Sk] constant (`maskAttr`) or
  /// non-constant [1..., Sq, Sk] value (`maskValue`) when it is Other.
  LogicalResult decideMask(const AttentionMatch &m, RankedTensorType pType,
                           int64_t sq, int64_t sk, MaskKind &kind,
                           DenseElementsAttr &maskAttr,
                           Value &maskValue) const {
    kind = MaskKind::None;
    if (m.boolMaskKeep && m.mask) {
      // Select and add: fold both into one additive constant, kept where
      // the select keeps a key, the fill (plus the add when the add is
      // outer, rounded as the program rounds it) where it drops one.
      auto elem = dyn_cast<FloatType>(pType.getElementType());
      if (!elem ||
          cast<RankedTensorType>(m.mask->src.getType()).getElementType() !=
              elem)
        return failure();
      auto [add, addKind] = reducedMask(*m.mask, sq, sk);
      if (!add)
        return failure(); // not a constant, or differs across the batch
      APFloat fill = *m.fill;
      bool losesInfo = false;
      (void)fill.convert(elem.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                         &losesInfo);
      SmallVector<APFloat> vals;
      auto keep = m.boolMaskKeep.getValues<bool>();
      auto addVals = add.getValues<APFloat>();
      for (int64_t i = 0, e = sq * sk; i < e; ++i) {
        APFloat a = addVals[i];
        if (keep[i]) {
          vals.push_back(a);
          continue;
        }
        APFloat dropped = fill;
        if (m.addOuter)
          (void)dropped.add(a, APFloat::rmNearestTiesToEven);
        // A dropped key must stay dropped (see dropsKey): the fused op adds
        // the scores to it, which a select would have discarded.
        if (!dropsKey(dropped))
          return failure();
        vals.push_back(dropped);
      }
      maskAttr =
          DenseElementsAttr::get(RankedTensorType::get({sq, sk}, elem), vals);
      kind = classifyAdditive(maskAttr, sq, sk);
    } else if (m.boolMaskKeep) {
      kind = m.boolMaskKind;
    } else if (m.mask) {
      if (cast<RankedTensorType>(m.mask->src.getType()).getElementType() !=
          pType.getElementType())
        return failure();
      std::tie(maskAttr, kind) = reducedMask(*m.mask, sq, sk);
      if (!maskAttr) {
        if (matchPattern(m.mask->src, m_Constant()))
          return failure(); // differs across the batch or heads
        kind = MaskKind::Other;
        maskValue = m.mask->src;
      }
    }
    return success();
  }

  /// K: the scores' rhs is Kᵀ [b..., Dh, Sk] unless transpose_rhs; undo
  /// (or compose with) its transpose. Sets `k` to the value to read and
  /// returns the permutation that takes it to [b..., Sk, Dh].
  /// A constant scale on K (Kᵀ scaled, or K scaled before its transpose:
  /// Q·d^-¼ and K·d^-¼, as Whisper and the original GPT-2 code scale both)
  /// is folded into `m.scale`.
  static SmallVector<int64_t> keyPermutation(tsr::MatmulOp scores, int64_t rank,
                                             Value &k, AttentionMatch &m) {
    k = unscaled(scores.getRhs(), m);
    SmallVector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d)
      perm.push_back(d);
    if (!scores.getTransposeRhs()) {
      std::swap(perm[rank - 1], perm[rank - 2]);
      if (auto t = defOp<tsr::TransposeOp>(k)) {
        ArrayRef<int64_t> inner = t.getPermutation();
        SmallVector<int64_t> composed;
        for (int64_t d = 0; d < rank; ++d)
          composed.push_back(inner[perm[d]]);
        perm = composed;
        k = t->hasOneUse() ? unscaled(t.getInput(), m) : t.getInput();
      }
    }
    return perm;
  }

  /// The fused op's [Sq, Sk] additive mask operand for a mask of kind
  /// Other (null otherwise).
  static Value buildMaskOperand(PatternRewriter &rewriter, Location loc,
                                const AttentionMatch &m, MaskKind kind,
                                DenseElementsAttr maskAttr, Value maskValue,
                                RankedTensorType pType, int64_t sq,
                                int64_t sk) {
    if (kind != MaskKind::Other)
      return {};
    auto maskType = RankedTensorType::get({sq, sk}, pType.getElementType());
    if (m.boolMaskKeep && !maskAttr) {
      // 0 where kept, the select's fill value where dropped.
      auto elem = cast<FloatType>(pType.getElementType());
      APFloat fill = *m.fill;
      bool losesInfo = false;
      (void)fill.convert(elem.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                         &losesInfo);
      APFloat zero = APFloat::getZero(elem.getFloatSemantics());
      SmallVector<APFloat> vals;
      for (bool b : m.boolMaskKeep.getValues<bool>())
        vals.push_back(b ? zero : fill);
      return tsr::ConstantOp::create(
          rewriter, loc, maskType,
          cast<ElementsAttr>(DenseElementsAttr::get(maskType, vals)));
    }
    if (maskAttr)
      return tsr::ConstantOp::create(rewriter, loc, maskType,
                                     cast<ElementsAttr>(maskAttr));
    return maskValue.getType() == maskType
               ? maskValue
               : tsr::ReshapeOp::create(rewriter, loc, maskType, maskValue)
                     .getResult();
  }

  LogicalResult matchAndRewrite(tsr::MatmulOp root,
                                PatternRewriter &rewriter) const override {
    Value x = softmaxInput(root);
    if (!x)
      return failure();
    auto pType = cast<RankedTensorType>(x.getType()); // the scores' type
    int64_t rank = pType.getRank();
    int64_t sq = pType.getDimSize(rank - 2), sk = pType.getDimSize(rank - 1);

    AttentionMatch m;
    bool scaledAfterMask = false;
    if (failed(walkToScores(x, sq, sk, m, scaledAfterMask)))
      return failure();

    // Q (with an optional constant scale folded in) and K in [b..., S, D].
    Location loc = root.getLoc();
    // Q and K have the scores' leading dims, which a reshape may view as
    // the softmax's (`viewed`): Q and K are then reshaped likewise.
    int64_t srank = m.scoresType.getRank();
    ArrayRef<int64_t> sLead = m.scoresType.getShape().drop_back(2);
    bool viewed = m.scoresType != pType;
    Value q = unscaled(m.scores.getLhs(), m);
    auto qType = cast<RankedTensorType>(q.getType());
    Value v = root.getRhs();
    auto vType = cast<RankedTensorType>(v.getType());
    if (qType.getRank() != srank || vType.getRank() != rank ||
        qType.getShape().drop_back(2) != sLead ||
        vType.getShape().drop_back(2) != pType.getShape().drop_back(2) ||
        qType.getElementType() != pType.getElementType())
      return failure();

    // Decide the mask before building anything.
    MaskKind kind;
    DenseElementsAttr maskAttr;
    Value maskValue; // a non-constant [1..., Sq, Sk] mask
    if (failed(decideMask(m, pType, sq, sk, kind, maskAttr, maskValue)))
      return failure();
    // A scale applied after the mask would scale the mask too: only a
    // causal mask (or none) is unchanged by a positive factor, and a select
    // with -inf.
    if (scaledAfterMask &&
        ((kind == MaskKind::Other &&
          (!m.boolMaskKeep || m.mask || !m.fill->isInfinity())) ||
         m.scaleAfterMask <= 0))
      return failure();

    Value k;
    SmallVector<int64_t> perm = keyPermutation(m.scores, srank, k, m);
    bool identity = llvm::all_of(llvm::seq<int64_t>(0, srank),
                                 [&](int64_t d) { return perm[d] == d; });
    auto kIn = cast<RankedTensorType>(k.getType());
    SmallVector<int64_t> kShape;
    for (int64_t d : perm)
      kShape.push_back(kIn.getDimSize(d));
    if (ArrayRef<int64_t>(kShape).drop_back(2) != sLead ||
        kShape[srank - 2] != sk ||
        kShape[srank - 1] != qType.getDimSize(srank - 1) ||
        vType.getDimSize(rank - 2) != sk ||
        kIn.getElementType() != qType.getElementType() ||
        vType.getElementType() != qType.getElementType())
      return failure();

    // Grouped-query attention: K and V both repeat_kv'd by the same n_rep
    // from [a..., Hkv, S, D]; the op reads the K/V heads themselves.
    int64_t nRepK = 0, nRepV = 0;
    Value kUnsq =
        identity && !viewed ? unsqueezedBeforeRepeat(k, nRepK) : Value();
    Value vUnsq = unsqueezedBeforeRepeat(v, nRepV);
    bool gqa = kUnsq && vUnsq && nRepK == nRepV && nRepK > 1;

    // Viewed scores whose K was itself viewed from [lead..., ·, ·] (GPT-2's
    // reorder_and_upcast_attn reshapes a [B, H, Dh, S] Kᵀ to [B·H, Dh, S]):
    // K is read before that reshape, with one transpose in the softmax's
    // rank composed with the one before it, instead of a transpose back.
    Value k4;
    SmallVector<int64_t> perm4;
    if (viewed && llvm::all_of(llvm::seq<int64_t>(0, srank - 2),
                               [&](int64_t d) { return perm[d] == d; }))
      if (auto rs = defOp<tsr::ReshapeOp>(k)) {
        auto in = cast<RankedTensorType>(rs.getInput().getType());
        if (in.getRank() == rank &&
            in.getShape().drop_back(2) == pType.getShape().drop_back(2) &&
            in.getShape().take_back(2) == kIn.getShape().take_back(2)) {
          k4 = rs.getInput();
          for (int64_t d = 0; d < rank - 2; ++d)
            perm4.push_back(d);
          for (int64_t d = srank - 2; d < srank; ++d)
            perm4.push_back(perm[d] - srank + rank);
          if (auto t = defOp<tsr::TransposeOp>(k4)) {
            ArrayRef<int64_t> inner = t.getPermutation();
            for (int64_t &d : perm4)
              d = inner[d];
            k4 = t.getInput();
          }
        }
      }

    rewriter.setInsertionPoint(root);
    auto dropUnitDim = [&](Value unsq) -> Value {
      auto t = cast<RankedTensorType>(unsq.getType());
      SmallVector<int64_t> shape(t.getShape());
      shape.erase(shape.begin() + rank - 2);
      auto type = RankedTensorType::get(shape, t.getElementType());
      if (auto rs = defOp<tsr::ReshapeOp>(unsq))
        if (rs.getInput().getType() == type)
          return rs.getInput();
      return tsr::ReshapeOp::create(rewriter, loc, type, unsq);
    };
    if (gqa) {
      k = dropUnitDim(kUnsq);
      v = dropUnitDim(vUnsq);
    } else if (!identity && !k4) {
      k = tsr::TransposeOp::create(
          rewriter, loc, RankedTensorType::get(kShape, kIn.getElementType()), k,
          rewriter.getDenseI64ArrayAttr(perm));
    }
    if (viewed) {
      auto view = [&](Value x) -> Value {
        auto t = cast<RankedTensorType>(x.getType());
        SmallVector<int64_t> shape(pType.getShape().drop_back(2));
        shape.append({t.getDimSize(srank - 2), t.getDimSize(srank - 1)});
        return tsr::ReshapeOp::create(
            rewriter, loc, RankedTensorType::get(shape, t.getElementType()), x);
      };
      q = view(q);
      if (k4) {
        auto t = cast<RankedTensorType>(k4.getType());
        SmallVector<int64_t> shape;
        for (int64_t d : perm4)
          shape.push_back(t.getDimSize(d));
        k = llvm::all_of(llvm::seq<int64_t>(0, rank),
                         [&](int64_t d) { return perm4[d] == d; })
                ? k4
                : tsr::TransposeOp::create(
                      rewriter, loc,
                      RankedTensorType::get(shape, t.getElementType()), k4,
                      rewriter.getDenseI64ArrayAttr(perm4))
                      .getResult();
      } else {
        k = view(k);
      }
    }

    Value maskOperand = buildMaskOperand(rewriter, loc, m, kind, maskAttr,
                                         maskValue, pType, sq, sk);
    SmallVector<int64_t> lseShape(pType.getShape().drop_back());
    auto lseType = RankedTensorType::get(lseShape, rewriter.getF32Type());
    auto attn = tsr::AttentionOp::create(
        rewriter, loc, root.getType(), lseType, q, k, v, maskOperand,
        rewriter.getF32FloatAttr(static_cast<float>(m.scale)),
        rewriter.getBoolAttr(kind == MaskKind::Causal),
        /*ring_size=*/IntegerAttr());
    rewriter.replaceOp(root, attn.getOutput());
    return success();
  }
};

} // namespace

void populateRaisePatterns(RewritePatternSet &patterns) {
  patterns.add<FoldMulByOne, RaiseGelu, RaiseRmsNorm, RaiseSigmoid, RaiseSilu,
               FoldTransposeIntoMatmul, FoldReshapeChain, RaiseAttention>(
      patterns.getContext());
  // A layer norm's (x − mean) / sqrt(mean((x − mean)²) + ε) is also an RMS
  // norm of x − mean: the layer norm is tried first.
  patterns.add<RaiseLayerNorm>(patterns.getContext(), /*benefit=*/2);
}

LogicalResult raiseTsrPatterns(Operation *op) {
  RewritePatternSet patterns(op->getContext());
  populateRaisePatterns(patterns);
  GreedyRewriteConfig config;
  (void)applyPatternsGreedily(op, std::move(patterns), config);
  return success();
}

} // namespace tessera::import

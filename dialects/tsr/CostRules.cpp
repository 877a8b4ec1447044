//===- CostRules.cpp - CostOpInterface overrides --------------------------===//
//
// Ops not listed here use the interface default: one FLOP per result element
// and every operand and result read or written once.
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/TsrOps.h"

using namespace mlir;
using namespace tessera::tsr;

/// 2·batch·M·N·K: one multiply and one add per term.
int64_t MatmulOp::getFlops() {
  auto lhs = getLhs().getType();
  int64_t k =
      lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  return 2 * getResult().getType().getNumElements() * k;
}

/// b·Sq·Sk, the number of attention scores (b = product of leading dims).
/// A partitioned ring attention (`grid_axes` with `ring_size` K) scores its
/// local queries against all K key blocks that pass through it: K times its
/// local Sk.
static int64_t attentionScores(Operation *op, Value query, Value key) {
  auto q = cast<RankedTensorType>(query.getType());
  auto k = cast<RankedTensorType>(key.getType());
  int64_t ring = 1;
  if (op->hasAttr("grid_axes"))
    if (auto r = op->getAttrOfType<IntegerAttr>("ring_size"))
      ring = std::max<int64_t>(1, r.getInt());
  return q.getNumElements() / q.getDimSize(q.getRank() - 1) *
         k.getDimSize(k.getRank() - 2) * ring;
}

static int64_t lastDim(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getDimSize(t.getRank() - 1);
}

/// Forward: S = Q·Kᵀ (2·Dh per score) and O = P·V (2·Dv per score), plus
/// about 5 FLOPs per score for scale, mask, running max, exp and sum:
/// b·Sq·Sk·(2·Dh + 2·Dv + 5), i.e. ≈ 4·b·Sq·Sk·Dh when Dv = Dh. The causal
/// variant is counted in full (the CPU kernel skips masked blocks only
/// partly). Bytes are the operands and results (the default): no S × S
/// tensor is read or written.
int64_t AttentionOp::getFlops() {
  return attentionScores(*this, getQuery(), getKey()) *
         (2 * lastDim(getQuery()) + 2 * lastDim(getValue()) + 5);
}

/// Backward: recompute S = Q·Kᵀ (2·Dh), dV = Pᵀ·dO and dP = dO·Vᵀ (2·Dv
/// each), dQ = dS·K and dK = dSᵀ·Q (2·Dh each), plus about 8 FLOPs per score
/// for exp(S − lse) and dS = P ∘ (dP − rowsum(dO ∘ O)):
/// b·Sq·Sk·(6·Dh + 4·Dv + 8) ≈ 2.5 × the forward when Dv = Dh.
int64_t AttentionGradOp::getFlops() {
  return attentionScores(*this, getQuery(), getKey()) *
         (6 * lastDim(getQuery()) + 4 * lastDim(getValue()) + 8);
}

//===- RaisePatterns.h - raise decomposed ONNX patterns in tsr --*- C++ -*-===//
//
// Rewrite patterns on `tsr` ops that recognise what the PyTorch exporter
// decomposes and raise it back to composite ops:
//
//   * LayerNorm   ReduceMean → Sub → Pow 2 → ReduceMean → Add ε → Sqrt → Div
//                 [→ Mul γ] [→ Add β]                      → tsr.layer_norm
//   * RMSNorm     Pow x 2 (or x·x) → ReduceMean (trailing axes, keepdim)
//                 → Add ε (splat) → Sqrt → Div(1, ·) | Reciprocal → Mul x,
//                 or x · rsqrt(·), or x / Sqrt(·); [→ Mul scale] in either
//                 operand order (Gemma's scale is the Add(1, w) itself)
//                                                          → tsr.rms_norm
//                 (tried after LayerNorm, whose (x − mean) / sqrt(...) is
//                 also an RMS norm of x − mean)
//   * sigmoid     1 / (1 + exp(−x))                         → tsr.sigmoid
//   * SiLU        x · sigmoid(x) (either order)             → tsr.silu
//   * erf-GELU    x · 0.5 · (1 + erf(x / √2)) (any operand order, either
//                 association of the products)              → tsr.gelu
//   * tanh-GELU   x · 0.5 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))
//                                        → tsr.gelu {approximate = "tanh"}
//   * x · 1.0     (the exporter's baddbmm scale)            → x
//   * matmul(a, transpose(b)) where the transpose swaps the last two dims
//                 → matmul with transpose_lhs/rhs flipped (Linear weights
//                   are used directly, in PyTorch layout).
//   * reshape(reshape(x)) → reshape(x) (Squeeze/Unsqueeze/Flatten chains).
//   * Attention   matmul(softmax(M(c · matmul(Q', K'ᵀ))), V) over the last
//                 axis, where Q' is Q or Q·c / Q÷c, K' likewise (K or Kᵀ
//                 scaled: Q·d^-¼ and K·d^-¼), and M is + mask,
//                 select(bool mask, fill, ·) (masked_fill), or both in
//                 either order (GPT-2 given an attention mask:
//                 where(causal, s, finfo.min) + extended mask; the two
//                 constants fold into one mask as the program rounds it),
//                 with any constant scalings c (Mul or Div) before or (for
//                 causal masks, positive c) after it, and at most one
//                 reshape of the scores' leading dims (GPT-2's
//                 reorder_and_upcast_attn: [B·H, S, S] scores masked as
//                 [B, H, S, S]; Q and K are viewed alike) → tsr.attention
//                 {scale = Πc, causal} [mask]. The mask is a constant seen
//                 through broadcasts and unit reshapes whose [Sq, Sk] slices
//                 are the same for every leading index ([B, 1, Sq, Sk] as
//                 the dynamo exporter folds it, BERT's [B, 1, 1, Sk], a full
//                 [B, H, Sq, Sk] constant), or a non-constant broadcast from
//                 [1..., Sq, Sk]. 0 on/below the diagonal and -inf,
//                 ≤ -1e30 or the type's lowest finite value (Hugging Face's
//                 finfo.min) above it, or a lower-triangular keep-mask with
//                 such a fill, becomes causal = true with no mask operand
//                 (exact: see dropsKey); an all-zero mask is no mask; any
//                 other mask becomes the [Sq, Sk] operand with its exact
//                 values. A softmax computed in f32 between two casts
//                 (Hugging Face's eager upcast) is matched as well.
//                 Grouped-query attention: when K and V are both Hugging
//                 Face's repeat_kv of [a..., Hkv, S, D] (reshape to
//                 [a..., Hkv, 1, S, D], broadcast to [a..., Hkv, n, S, D],
//                 reshape to [a..., Hkv·n, S, D]), the op takes the
//                 un-repeated K/V. Only when every intermediate value has a
//                 single user.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_RAISEPATTERNS_H
#define TESSERA_COMPILER_IMPORT_RAISEPATTERNS_H

#include "mlir/IR/PatternMatch.h"
#include "mlir/Support/LogicalResult.h"

namespace tessera::import {

void populateRaisePatterns(mlir::RewritePatternSet &patterns);

/// Applies the raising patterns (and tsr folders, dead-code removal) to `op`
/// with the greedy driver.
mlir::LogicalResult raiseTsrPatterns(mlir::Operation *op);

} // namespace tessera::import

#endif // TESSERA_COMPILER_IMPORT_RAISEPATTERNS_H

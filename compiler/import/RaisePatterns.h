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
//   * Attention   matmul(softmax(M(c · matmul(Q', Kᵀ))), V) over the last
//                 axis, where Q' is Q or Q·c / Q÷c and M is + mask
//                 (broadcast [1..., Sq, Sk]) or select(bool mask, -inf, ·)
//                 (masked_fill), with any constant scalings c before or
//                 (for 0/-inf masks) after it               → tsr.attention
//                 {scale = Πc, causal} [mask]: a 0-below/-inf-above mask or
//                 a lower-triangular keep-mask becomes causal = true with no
//                 mask operand; other masks become the [Sq, Sk] operand.
//                 Only when every intermediate value has a single user.
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

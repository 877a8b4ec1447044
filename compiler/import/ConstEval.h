//===- ConstEval.h - the importer's compile-time evaluator ------*- C++ -*-===//
//
// The one place where the importer computes ONNX ops on compile-time
// constants (ConstTensor). Everything in a model that does not depend on the
// model's inputs — shape subgraphs (Shape → Gather → Concat → Reshape),
// causal masks (Trilu, Where, Expand), rotary position tables (Range, MatMul
// with inv_freq, Sin, Cos), scalars — is folded through these functions at
// import, so none of it is computed in the training step or trained.
//
// Each function takes its operands already validated and normalised by the
// importer's op conversion (axes in range, shapes that broadcast, index
// tensors in bounds: the conversion shares its shape rules between the
// constant and the tensor path), computes in double (floats) or int64
// (integers and bool), and rounds every result element to its ONNX data
// type (ConstTensor::push). Errors that depend on values (integer division
// by zero, a result too large to hold) come back as llvm::Error with a
// message that the importer prefixes with the node's name.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_CONSTEVAL_H
#define TESSERA_COMPILER_IMPORT_CONSTEVAL_H

#include "compiler/import/ConstTensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace tessera::import::eval {

/// Elementwise binary ops (ONNX names in comments).
enum class Bin {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  Mod,  ///< Mod with fmod = 0 (sign of the divisor; integers only)
  FMod, ///< Mod with fmod = 1 (C fmod)
  Equal,
  Less,
  Greater,
  LessEq,
  GreaterEq,
  And,
  Or,
  Xor
};
/// Elementwise unary ops.
enum class Un {
  Neg,
  Abs,
  Sqrt,
  Exp,
  Log,
  Floor,
  Ceil,
  Round, ///< round half to even (ONNX Round)
  Relu,
  Tanh,
  Erf,
  Reciprocal,
  Sign,
  Not,
  Sigmoid,
  Sin,
  Cos,
  IsNaN
};

bool isCompare(Bin k);
bool isLogical(Bin k);

/// Largest folded result, in elements (kMaxFoldElements).
llvm::Error checkFoldSize(llvm::ArrayRef<int64_t> shape);

/// A op B with numpy broadcasting to `out`; compare/logical ops give bool.
llvm::Expected<ConstTensor> binary(Bin k, const ConstTensor &a,
                                   const ConstTensor &b,
                                   llvm::ArrayRef<int64_t> out);
ConstTensor unary(Un k, const ConstTensor &x);
/// ONNX IsInf: true where x is +inf (detectPositive) or -inf (detectNegative).
ConstTensor isInf(const ConstTensor &x, bool detectPositive,
                  bool detectNegative);
/// cond ? x : y, broadcast to `out` (cond bool; x and y one dtype).
ConstTensor where(const ConstTensor &cond, const ConstTensor &x,
                  const ConstTensor &y, llvm::ArrayRef<int64_t> out);
/// Element-by-element conversion to `dtype` (ONNX Cast: float → int
/// truncates toward zero, saturating; → bool is x != 0).
ConstTensor cast(const ConstTensor &x, int32_t dtype);
/// The same elements with another shape (Reshape, Squeeze, ...).
ConstTensor reshape(const ConstTensor &x, llvm::ArrayRef<int64_t> shape);
ConstTensor transpose(const ConstTensor &x, llvm::ArrayRef<int64_t> perm);
/// out[idx] = x[start + idx * step] per dimension (steps may be negative).
ConstTensor slice(const ConstTensor &x, llvm::ArrayRef<int64_t> start,
                  llvm::ArrayRef<int64_t> step, llvm::ArrayRef<int64_t> out);
ConstTensor concat(llvm::ArrayRef<const ConstTensor *> xs, int64_t axis,
                   llvm::ArrayRef<int64_t> out);
/// ONNX Gather along `axis` with indices already in [0, dim).
ConstTensor gather(const ConstTensor &x, int64_t axis,
                   const ConstTensor &indices, llvm::ArrayRef<int64_t> out);
/// Broadcast of x to `out` (ONNX Expand).
ConstTensor expand(const ConstTensor &x, llvm::ArrayRef<int64_t> out);
/// ONNX Range(start, limit, delta) of start's dtype.
llvm::Expected<ConstTensor> range(const ConstTensor &start,
                                  const ConstTensor &limit,
                                  const ConstTensor &delta);
/// numpy.matmul: rank ≥ 1 operands, 1-D operands promoted and squeezed,
/// batch dims broadcast.
llvm::Expected<ConstTensor> matmul(const ConstTensor &a, const ConstTensor &b);
enum class Reduce { Sum, Mean, Max, Min, Prod };
/// Reduction over `axes` (sorted, unique, in range; empty = all).
ConstTensor reduce(Reduce k, const ConstTensor &x, llvm::ArrayRef<int64_t> axes,
                   bool keepDims);
/// Softmax along `axis` (normalised).
ConstTensor softmax(const ConstTensor &x, int64_t axis);
/// ONNX Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle
/// of every trailing [rows, cols] matrix; the rest becomes 0.
ConstTensor trilu(const ConstTensor &x, int64_t k, bool upper);
/// ONNX CumSum along `axis`.
ConstTensor cumsum(const ConstTensor &x, int64_t axis, bool exclusive,
                   bool reverse);
enum class PadMode { Constant, Edge, Reflect };
/// ONNX Pad: `pads` is [begin_0..begin_{r-1}, end_0..end_{r-1}] (negative
/// crops); `value` fills in constant mode.
llvm::Expected<ConstTensor> pad(const ConstTensor &x,
                                llvm::ArrayRef<int64_t> pads, PadMode mode,
                                double value);
/// LayerNormalization over [axis, rank): (x - mean) / sqrt(var + eps) * scale
/// + bias, scale and bias broadcast to x.shape[axis:].
ConstTensor layerNorm(const ConstTensor &x, const ConstTensor &scale,
                      const ConstTensor *bias, int64_t axis, double epsilon);
/// GELU, exact (erf) or approximate = "tanh".
ConstTensor gelu(const ConstTensor &x, bool tanhApprox);

} // namespace tessera::import::eval

#endif // TESSERA_COMPILER_IMPORT_CONSTEVAL_H

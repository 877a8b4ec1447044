//===- CpuKernels.h - CPU kernels for the tsr ops ---------------*- C++ -*-===//
//
// One plain function per `tsr` op (the function name is the op name in
// camelCase). Conventions shared by every kernel:
//  - Tensors are fp32 unless stated; outputs are preallocated by the caller
//    with the right dtype and shape. Shapes are assumed to be verified by the
//    compiler (checked only with assertions), except data-dependent facts
//    (gather ids, cross-entropy labels), which are reported as llvm::Error.
//  - "In place OK" means the output may be the same tensor (same storage) as
//    the named input; otherwise outputs must not alias inputs.
//  - Reductions and normalisation statistics accumulate in double.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CPU_CPUKERNELS_H
#define TESSERA_RUNTIME_BACKENDS_CPU_CPUKERNELS_H

#include "runtime/Tensor.h"

#include "common/fusion/ElementwiseProgram.h"
#include "common/random/Philox.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace tessera {
namespace runtime {
namespace cpu {

//===----------------------------------------------------------------------===//
// Elementwise binary: a, b, out all have the SAME shape (broadcasts are
// explicit). f32 or i64 (pow: f32 only); out has the inputs' dtype.
// In place OK (out may be a or b).
//===----------------------------------------------------------------------===//

void add(const Tensor &a, const Tensor &b, Tensor &out);
void sub(const Tensor &a, const Tensor &b, Tensor &out);
void mul(const Tensor &a, const Tensor &b, Tensor &out);
/// i64 division truncates toward zero; division by zero is undefined for i64.
void div(const Tensor &a, const Tensor &b, Tensor &out);
void pow(const Tensor &a, const Tensor &b, Tensor &out);
/// Elementwise maximum (NaN propagates for f32, like torch.maximum).
void max(const Tensor &a, const Tensor &b, Tensor &out);
/// a == b elementwise; a, b f32, i64 or i1; out i1 of the same shape.
void equal(const Tensor &a, const Tensor &b, Tensor &out);
/// out = cond ? a : b; cond i1, a/b/out of any one dtype, all the same shape.
/// In place OK (out may be a or b).
void select(const Tensor &cond, const Tensor &a, const Tensor &b, Tensor &out);

//===----------------------------------------------------------------------===//
// Elementwise unary, f32 (neg also i64). In place OK.
//===----------------------------------------------------------------------===//

void neg(const Tensor &in, Tensor &out);
void exp(const Tensor &in, Tensor &out);
void log(const Tensor &in, Tensor &out);
void sqrt(const Tensor &in, Tensor &out);
/// 1 / sqrt(x).
void rsqrt(const Tensor &in, Tensor &out);
void tanh(const Tensor &in, Tensor &out);
void erf(const Tensor &in, Tensor &out);
void relu(const Tensor &in, Tensor &out);
/// Logistic sigmoid 1 / (1 + exp(-x)): saturates without NaN (0 where
/// exp(-x) overflows and at -inf, 1 at +inf), like torch.sigmoid.
void sigmoid(const Tensor &in, Tensor &out);
/// SiLU (swish, Elfwing et al. 2018) x / (1 + exp(-x)), as
/// torch.nn.functional.silu: -0 where exp(-x) overflows (x < -88), +inf at
/// +inf; silu(-inf) = -0, the limit (torch returns NaN).
void silu(const Tensor &in, Tensor &out);

/// GELU variants, matching torch.nn.functional.gelu(approximate=...).
enum class GeluApproximate {
  None, ///< x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
  Tanh  ///< 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
};
void gelu(const Tensor &in, GeluApproximate approximate, Tensor &out);

/// Training-mode dropout (tsr.dropout, common/random/Philox.h): out[i] =
/// in[i] · scale where the Philox-4x32-10 draw of global element
/// g(i) = dropoutGlobalIndex(factors, i) under `key` passes `threshold`,
/// else 0. `factors` walk the local block (row-major over their local
/// sizes, whose product is in's element count). f32; in place OK.
void dropout(const Tensor &in, const tessera::random::DropoutKey &key,
             uint32_t threshold, float scale,
             llvm::ArrayRef<tessera::random::DropoutFactor> factors,
             Tensor &out);

/// Converts between f32, i64 and i1 (same shape). f32 -> i64 truncates
/// toward zero and saturates (NaN -> 0, out of range -> INT64_MIN/MAX);
/// anything -> i1 is (x != 0); i1 -> number is 0 or 1. Same
/// dtype is a copy. In place OK when the dtypes are equal.
void convert(const Tensor &in, Tensor &out);

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

/// numpy / ONNX Expand: in's dims align to the right of out's; each in dim is
/// 1 or equal to the out dim. Any dtype. in.rank() <= out.rank().
void broadcast(const Tensor &in, Tensor &out);

/// out[i...] = in[perm-permuted i...]: out.shape[k] = in.shape[perm[k]].
/// Any dtype, any rank.
void transpose(const Tensor &in, llvm::ArrayRef<int64_t> perm, Tensor &out);

/// Static strided slice: out.shape[d] = ceil((limits[d] - starts[d]) /
/// strides[d]); 0 <= starts[d] <= limits[d] <= in.shape[d], strides[d] >= 1.
/// Any dtype.
void slice(const Tensor &in, llvm::ArrayRef<int64_t> starts,
           llvm::ArrayRef<int64_t> limits, llvm::ArrayRef<int64_t> strides,
           Tensor &out);

/// Concatenates `inputs` (same dtype and rank, equal dims except `axis`)
/// along `axis` into out. Any dtype.
void concat(llvm::ArrayRef<const Tensor *> inputs, int64_t axis, Tensor &out);

//===----------------------------------------------------------------------===//
// Reductions: `axes` sorted, unique, non-negative. out's shape is in's with
// the reduced dims removed (keepDim = false) or set to 1 (keepDim = true).
// An empty `axes` is a copy. f32.
//===----------------------------------------------------------------------===//

void reduceSum(const Tensor &in, llvm::ArrayRef<int64_t> axes, bool keepDim,
               Tensor &out);
void reduceMean(const Tensor &in, llvm::ArrayRef<int64_t> axes, bool keepDim,
                Tensor &out);
/// Max over an empty set is -inf.
void reduceMax(const Tensor &in, llvm::ArrayRef<int64_t> axes, bool keepDim,
               Tensor &out);
/// out (f32 scalar) = Σ in_i² over every element of `in` (f32), accumulated
/// in f64 in element order and rounded once.
void sumSquares(const Tensor &in, Tensor &out);

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

/// Batched matrix product with cblas_sgemm.
///   a: [..., M, K]   ([..., K, M] if transposeA)
///   b: [..., K, N]   ([..., N, K] if transposeB) with the same leading batch
///      dims as a, or rank 2 and shared by every batch of a; a may also be
///      rank 2 and shared by every batch of b.
///   out: [..., M, N]
void matmul(const Tensor &a, const Tensor &b, bool transposeA, bool transposeB,
            Tensor &out);

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// Embedding lookup: table [V, ...] (any dtype), ids i64 of any shape,
/// out = ids.shape ++ table.shape[1:]. Error naming the id and its flat index
/// if an id is outside [0, V).
llvm::Error gather(const Tensor &table, const Tensor &ids, Tensor &out);

/// Gradient of gather: out [V, ...] f32 is zeroed, then
/// out[ids[i]] += dy[i] for every index i. dy = ids.shape ++ out.shape[1:].
/// Error as for gather.
llvm::Error gatherGrad(const Tensor &ids, const Tensor &dy, Tensor &out);

/// Vocab-parallel lookup (Megatron-LM, Shoeybi et al. 2019): `table` holds
/// rows [offset, offset + V_local) of a `vocab`-row table. Row i of out is
/// table[ids[i] - offset] for ids in that range and zero otherwise, so the
/// sum over the ranks holding the other rows is the full lookup. Error if
/// an id is outside [0, vocab).
llvm::Error gatherMasked(const Tensor &table, const Tensor &ids, int64_t offset,
                         int64_t vocab, Tensor &out);

/// Gradient of gatherMasked: out [V_local, ...] f32 is zeroed, then
/// out[ids[i] - offset] += dy[i] for the ids in [offset, offset + V_local).
/// Error if an id is outside [0, vocab).
llvm::Error gatherGradMasked(const Tensor &ids, const Tensor &dy,
                             int64_t offset, int64_t vocab, Tensor &out);

//===----------------------------------------------------------------------===//
// Normalisation and activations with their gradients
//===----------------------------------------------------------------------===//

/// Layer norm over dims [axis, rank): y = (x - mean) / sqrt(var + eps) *
/// gamma + beta, biased variance (like torch). gamma, beta have shape
/// x.shape[axis:]. In place OK (out may be x).
void layerNorm(const Tensor &x, const Tensor &gamma, const Tensor &beta,
               int64_t axis, float epsilon, Tensor &out);

/// Gradients of layerNorm (mean and rstd are recomputed from x). dx has x's
/// shape, dgamma/dbeta gamma's shape (summed over the leading dims). In place
/// OK for dx == dy.
void layerNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                   int64_t axis, float epsilon, Tensor &dx, Tensor &dgamma,
                   Tensor &dbeta);

/// RMS norm (Zhang & Sennrich 2019) over dims [axis, rank): y = x * rstd *
/// gamma, rstd = 1 / sqrt(mean(x^2) + eps) (accumulated in double). gamma
/// has shape x.shape[axis:]. In place OK (out may be x).
void rmsNorm(const Tensor &x, const Tensor &gamma, int64_t axis, float epsilon,
             Tensor &out);

/// Gradients of rmsNorm (rstd recomputed from x): with xhat = x * rstd and
/// g = dy * gamma, dx = rstd * (g - xhat * mean(g * xhat)) (x's shape) and
/// dgamma = sum over the leading dims of dy * xhat (gamma's shape). In
/// place OK for dx == dy.
void rmsNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                 int64_t axis, float epsilon, Tensor &dx, Tensor &dgamma);

/// Numerically stable softmax along `axis`. In place OK.
void softmax(const Tensor &x, int64_t axis, Tensor &out);

/// dx = y * (dy - sum_axis(dy * y)), y = softmax output. In place OK (dx may
/// be y or dy).
void softmaxGrad(const Tensor &y, const Tensor &dy, int64_t axis, Tensor &dx);

/// dx = dy where x > 0, else 0. In place OK (dx may be x or dy).
void reluGrad(const Tensor &x, const Tensor &dy, Tensor &dx);

/// dx = dy * gelu'(x) for the chosen form (exact derivative of each).
/// In place OK (dx may be x or dy).
void geluGrad(const Tensor &x, const Tensor &dy, GeluApproximate approximate,
              Tensor &dx);

/// dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x) (torch's silu
/// backward); at x = +inf / -inf the limits dy * 1 / dy * 0 (torch: NaN).
/// In place OK (dx may be x or dy).
void siluGrad(const Tensor &x, const Tensor &dy, Tensor &dx);

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

/// out (f32 scalar, rank 0) = sum_n -log_softmax(logits[n])[labels[n]]
/// (natural log, a SUM over rows; the compiler scales it). logits [N, V] f32,
/// labels [N] i64. Error naming the label and row if a label is outside
/// [0, V).
llvm::Error crossEntropy(const Tensor &logits, const Tensor &labels,
                         Tensor &out);

/// dlogits [N, V] = (softmax(logits) - onehot(labels)) * dloss, dloss an f32
/// scalar (any shape with one element). Error as for crossEntropy.
llvm::Error crossEntropyGrad(const Tensor &logits, const Tensor &labels,
                             const Tensor &dloss, Tensor &dlogits);

/// Vocab-parallel cross-entropy (Megatron-LM, Shoeybi et al. 2019) in
/// phases around the caller's all-reduces. `logits` [N, V_local] f32 holds
/// columns [offset, offset + V_local) of the [N, vocab] logits; labels [N]
/// i64 index the full vocabulary.
///   1. crossEntropyRowMax: rowMax[n] = max over the local columns (to be
///      all-reduced with MAX);
///   2. crossEntropyRowSums: with the global rowMax, sumExp[n] = Σ_local
///      exp(x - rowMax[n]) and target[n] = x[labels[n] - offset] if the
///      label is local, else 0 (both to be all-reduced with SUM; `target`
///      may be null when only the gradient is wanted); error
///      naming the label and row if a label is outside [0, vocab);
///   3. crossEntropyFromStats: out (f32 scalar) = Σ_n log(sumExp[n]) +
///      rowMax[n] - target[n];
///      crossEntropyGradFromStats: dlogits [N, V_local] = (exp(x - lse) -
///      onehot) · dloss with lse = log(sumExp) + rowMax.
/// With the statistics reduced over the vocabulary these equal
/// crossEntropy / crossEntropyGrad on the full logits up to the order of
/// the f64 sums.
void crossEntropyRowMax(const Tensor &logits, double *rowMax);
llvm::Error crossEntropyRowSums(const Tensor &logits, const Tensor &labels,
                                int64_t offset, int64_t vocab,
                                const double *rowMax, double *sumExp,
                                double *target);
void crossEntropyFromStats(int64_t rows, const double *rowMax,
                           const double *sumExp, const double *target,
                           Tensor &out);
void crossEntropyGradFromStats(const Tensor &logits, const Tensor &labels,
                               int64_t offset, const double *rowMax,
                               const double *sumExp, const Tensor &dloss,
                               Tensor &dlogits);

//===----------------------------------------------------------------------===//
// Optimizers (exact torch.optim arithmetic, fp32 tensors, scalars given as
// double like Python floats and rounded to float where torch does)
//===----------------------------------------------------------------------===//

/// torch.optim.SGD with momentum 0: g' = g + wd * p; p' = p - lr * g'.
/// In place OK (pOut may be p).
void sgdUpdate(const Tensor &p, const Tensor &g, double lr, double weightDecay,
               Tensor &pOut);

/// torch.optim.AdamW (torch 1.13 `_single_tensor_adamw`, amsgrad=False):
///   p = p * (1 - lr * wd)
///   m = m * b1 + (1 - b1) * g
///   v = v * b2 + (1 - b2) * g * g
///   bc1 = 1 - b1^t; bc2 = 1 - b2^t; stepSize = lr / bc1
///   denom = sqrt(v) / sqrt(bc2) + eps
///   p = p - stepSize * m / denom
/// `step` is an f32 scalar holding the already-incremented t (>= 1). In place
/// OK (pOut may be p, mOut m, vOut v).
void adamwUpdate(const Tensor &p, const Tensor &g, const Tensor &m,
                 const Tensor &v, const Tensor &step, double lr, double beta1,
                 double beta2, double eps, double weightDecay, Tensor &pOut,
                 Tensor &mOut, Tensor &vOut);

/// sgdUpdate on N tensors in one call (tsr.multi_sgd_update):
/// `in` = (p_0..p_{N-1}, g_0..g_{N-1}), out[i] = p_i' (N = out.size()).
/// Bit for bit sgdUpdate(p_i, g_i, ...) for each i, in place OK.
void sgdUpdateMulti(llvm::ArrayRef<const Tensor *> in, double lr,
                    double weightDecay, llvm::MutableArrayRef<Tensor> out);

/// adamwUpdate on N tensors in one call (tsr.multi_adamw_update):
/// `in` = (p_0.., g_0.., m_0.., v_0..; 4N tensors), `out` = (p'_0..,
/// m'_0.., v'_0..; 3N tensors). The step's bias corrections are computed
/// once; bit for bit adamwUpdate(p_i, g_i, m_i, v_i, ...) for each i, in
/// place OK.
void adamwUpdateMulti(llvm::ArrayRef<const Tensor *> in, const Tensor &step,
                      double lr, double beta1, double beta2, double eps,
                      double weightDecay, llvm::MutableArrayRef<Tensor> out);

//===----------------------------------------------------------------------===//
// Residual add fused with a norm (tsr-fuse-norm)
//===----------------------------------------------------------------------===//

/// sum = x + r (f32, as the add kernel) and out = layerNorm(sum, gamma,
/// beta, axis, epsilon), one row at a time: x and r are read once, sum and
/// out written once, the row's statistics (f64) taken from the sum while it
/// is in cache. sum may be x or r; out must not alias the operands.
void addLayerNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                  const Tensor &beta, int64_t axis, float epsilon, Tensor &sum,
                  Tensor &out);

/// sum = x + r and out = rmsNorm(sum, gamma, axis, epsilon), as
/// addLayerNorm.
void addRmsNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                int64_t axis, float epsilon, Tensor &sum, Tensor &out);

/// layerNormGrad with dx = (the norm's input gradient) + addend, rounded to
/// f32 before the add (as layerNormGrad followed by the add kernel). dx may
/// be addend.
void layerNormGradAdd(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                      const Tensor &addend, int64_t axis, float epsilon,
                      Tensor &dx, Tensor &dgamma, Tensor &dbeta);

/// rmsNormGrad with dx = (the norm's input gradient) + addend, as
/// layerNormGradAdd.
void rmsNormGradAdd(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                    const Tensor &addend, int64_t axis, float epsilon,
                    Tensor &dx, Tensor &dgamma);

//===----------------------------------------------------------------------===//
// Fused linear layer (tsr.linear, tsr.bias_activation_grad)
//===----------------------------------------------------------------------===//

/// The activation of a fused linear layer, with exactly the numerics of
/// gelu (None / Tanh), relu and silu above.
enum class Activation { None, Gelu, GeluTanh, Relu, Silu };

/// Output bytes of one row block of `linear` (1 MiB, half of a 2 MiB L2):
/// the GEMM writes a block of rows this large and the epilogue reads it
/// back from cache.
constexpr int64_t kLinearBlockBytes = int64_t(1) << 20;

/// preactivation = matmul(a, b) + bias (bias [N] added to every row) and
/// out = act(preactivation), with matmul's shapes and flags. The GEMM runs
/// on blocks of rows (about kLinearBlockBytes of output each) and the
/// bias and activation are applied to each block right after its GEMM,
/// while it is in cache. `preactivation` may be null (not wanted); when
/// given it has out's shape. No aliasing.
void linear(const Tensor &a, const Tensor &b, const Tensor &bias,
            bool transposeA, bool transposeB, Activation act, Tensor &out,
            Tensor *preactivation);

/// dx = dy * act'(x) (exactly reluGrad / geluGrad / siluGrad) and
/// dbias[n] = sum over every leading index of dx[..., n] (accumulated in
/// double, as reduceSum), in one pass over x and dy. x, dy, dx of one
/// shape of rank >= 1; dbias [N] with N = x.dim(-1). act is not None. In
/// place OK (dx may be x or dy).
void biasActivationGrad(const Tensor &x, const Tensor &dy, Activation act,
                        Tensor &dx, Tensor &dbias);

//===----------------------------------------------------------------------===//
// Configuration
//===----------------------------------------------------------------------===//

/// Sets the number of OpenBLAS threads (1 per rank under MPI).
void setBlasThreads(int numThreads);

//===----------------------------------------------------------------------===//
// Fused elementwise (FusedElementwise.cpp)
//===----------------------------------------------------------------------===//

/// tsr.fused_elementwise: runs program `p` (validated by
/// fusion::buildElementwiseProgram) over `in` (f32, or i1 select
/// conditions, each broadcast to the iteration shape by p's index maps)
/// into `out` (f32, the iteration shape, one per p.outputs). Tiles of 512
/// elements, one loop per instruction, intermediates in a per-thread
/// scratch; bitwise equal to the unfused kernels. In place OK (an output
/// may share storage with a full-shape input).
void fusedElementwise(const tessera::fusion::ElementwiseProgram &p,
                      llvm::ArrayRef<const Tensor *> in,
                      llvm::MutableArrayRef<Tensor> out);

} // namespace cpu
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CPU_CPUKERNELS_H

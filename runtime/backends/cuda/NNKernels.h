//===- NNKernels.h - Fused CUDA kernels of the NN ops -----------*- C++ -*-===//
//
// Tessera's own CUDA kernels for layer norm, softmax, embedding lookups,
// cross-entropy and the optimizers, with exactly the semantics of the CPU
// kernels of the same name in runtime/backends/cpu/CpuKernels.h (see there
// for the maths). Conventions of runtime/backends/cuda/CudaCommon.h apply:
//  - every Tensor argument is a DEVICE tensor (raw() is device memory),
//    contiguous and row-major; shapes are assumed verified by the compiler
//    (not checked here beyond what is needed to launch);
//  - launches are asynchronous on `stream`; each function returns the
//    cudaError_t of its launches (cudaErrorInvalidValue for an unsupported
//    dtype), never synchronises and never allocates: scratch comes from the
//    caller, sized by the matching `...ScratchBytes` function, 256-byte
//    aligned (cudaMalloc pointers are);
//  - floating-point activations may be f32, bf16 or f16 (one dtype T for
//    all of an op's activations); values are computed in f32 (statistics
//    and sums in f64, as the CPU kernels) and rounded to T on the store,
//    which is what the executor's widening adapter does on the CPU;
//  - data-dependent errors (ids, labels out of range) are recorded in a
//    DeviceStatus (may be null: then they are only skipped) and the
//    offending element is skipped: no out-of-bounds read or write ever.
//
// The pure index / launch / scalar logic is in __host__ __device__ inline
// functions below so that host unit tests can check it without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_NNKERNELS_H
#define TESSERA_RUNTIME_BACKENDS_CUDA_NNKERNELS_H

#include "runtime/backends/cuda/CudaCommon.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define TESSERA_NN_HD __host__ __device__
#else
#define TESSERA_NN_HD
#endif

namespace tessera {
namespace runtime {
namespace cuda {

//===----------------------------------------------------------------------===//
// Host-testable pieces
//===----------------------------------------------------------------------===//

/// A tensor seen as [outer, n, inner] around `axis`: element k of line l
/// (l in [0, outer * inner)) is at lineBase(l) + k * inner.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;

  /// Number of lines (independent softmax rows).
  TESSERA_NN_HD int64_t lines() const { return outer * inner; }
  /// Flat offset of element 0 of line `l`.
  TESSERA_NN_HD int64_t lineBase(int64_t l) const {
    return (l / inner) * n * inner + l % inner;
  }
};

/// Splits `shape` around `axis` (0 <= axis < shape.size()).
inline AxisSplit splitAxis(const std::vector<int64_t> &shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      s.outer *= shape[d];
    else if (d == axis)
      s.n = shape[d];
    else
      s.inner *= shape[d];
  }
  return s;
}

/// Rows and columns of a layer norm over dims [axis, rank).
struct RowsCols {
  int64_t rows = 1, cols = 1;
};
inline RowsCols splitRows(const std::vector<int64_t> &shape, int64_t axis) {
  RowsCols rc;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    (d < axis ? rc.rows : rc.cols) *= shape[d];
  return rc;
}

/// Threads of the one-block-per-row kernels for rows of `cols` elements:
/// about 4 elements per thread, a multiple of 32 in [32, 512].
inline int rowBlockThreads(int64_t cols) {
  int64_t t = (cols + 3) / 4;
  t = (t + 31) / 32 * 32;
  if (t < 32)
    t = 32;
  if (t > 512)
    t = 512;
  return static_cast<int>(t);
}

/// State of an online softmax (Milakov & Gimelshein 2018, "Online
/// normalizer calculation for softmax"): running max `m` (f32, exact) and
/// s = sum exp(x - m) (f64). The empty state is {-inf, 0}.
struct MaxSum {
  float m;
  double s;
};

TESSERA_NN_HD inline MaxSum maxSumEmpty() { return {-INFINITY, 0.0}; }

/// `a.s` rescaled from max `a.m` to max `m` (>= a.m); no NaN from
/// -inf - -inf when both are -inf.
TESSERA_NN_HD inline double maxSumRescale(const MaxSum &a, float m) {
  return a.m == m ? a.s : a.s * ::exp(static_cast<double>(a.m) - m);
}

/// Adds element x: the term is exp(x - max) in f32 as cpu::softmax computes
/// it (an all -inf row or a +inf element gives NaN as on the CPU; NaN
/// elements are ignored by the max and poison the sum, as on the CPU).
TESSERA_NN_HD inline MaxSum maxSumAdd(MaxSum a, float x) {
  float m = ::fmaxf(a.m, x);
  return {m, maxSumRescale(a, m) + static_cast<double>(::expf(x - m))};
}

/// Merges two partial states (commutative up to f64 rounding).
TESSERA_NN_HD inline MaxSum maxSumMerge(const MaxSum &a, const MaxSum &b) {
  float m = ::fmaxf(a.m, b.m);
  return {m, maxSumRescale(a, m) + maxSumRescale(b, m)};
}

/// End bit of gather_grad's radix sort of keys in [0, local] (local is
/// the "not this rank's / bad id" key): the smallest b in [1, 32] with
/// 2^b > local.
inline int sortEndBit(int64_t local) {
  int b = 1;
  while (b < 32 && (int64_t(1) << b) <= local)
    ++b;
  return b;
}

//--- Multi-tensor launch planning (NVIDIA apex's multi_tensor_apply) ---//

/// Elements handled by one block of a multi-tensor launch.
constexpr int64_t kMultiTensorChunk = 65536;
/// Tensors and blocks per launch (bounded so that the kernel argument
/// struct stays under the 4 KiB parameter limit).
constexpr int kMultiTensorMaxTensors = 24;
constexpr int kMultiTensorMaxBlocks = 320;

/// One launch: `tensors` are indices into the caller's list; block b
/// handles chunk `blockChunk[b]` of tensor `tensors[blockSlot[b]]`.
struct MultiTensorLaunch {
  std::vector<int> tensors;
  std::vector<int> blockSlot;
  std::vector<int64_t> blockChunk;
};

/// Splits tensors of `numel[i]` elements into chunks of `chunk` elements and
/// packs them into launches of at most `maxTensors` tensors and `maxBlocks`
/// blocks, in list order; a tensor may continue in the next launch. Empty
/// tensors are skipped. Every (tensor, chunk) pair appears exactly once.
inline std::vector<MultiTensorLaunch>
planMultiTensor(const std::vector<int64_t> &numel,
                int64_t chunk = kMultiTensorChunk,
                int maxTensors = kMultiTensorMaxTensors,
                int maxBlocks = kMultiTensorMaxBlocks) {
  std::vector<MultiTensorLaunch> plan;
  MultiTensorLaunch cur;
  for (int i = 0; i < static_cast<int>(numel.size()); ++i) {
    int64_t chunks = (numel[i] + chunk - 1) / chunk;
    for (int64_t c = 0; c < chunks; ++c) {
      bool newTensor = cur.tensors.empty() || cur.tensors.back() != i;
      if ((newTensor && static_cast<int>(cur.tensors.size()) == maxTensors) ||
          static_cast<int>(cur.blockSlot.size()) == maxBlocks) {
        plan.push_back(std::move(cur));
        cur = MultiTensorLaunch();
        newTensor = true;
      }
      if (newTensor)
        cur.tensors.push_back(i);
      cur.blockSlot.push_back(static_cast<int>(cur.tensors.size()) - 1);
      cur.blockChunk.push_back(c);
    }
  }
  if (!cur.blockSlot.empty())
    plan.push_back(std::move(cur));
  return plan;
}

//--- Optimizer scalar arithmetic (bit-exact with cpu::sgdUpdate / ---//
//--- cpu::adamwUpdate; no FMA contraction on the device)          ---//

TESSERA_NN_HD inline float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TESSERA_NN_HD inline float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TESSERA_NN_HD inline float divRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
TESSERA_NN_HD inline float sqrtRn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// torch.optim.SGD (momentum 0): g' = g + wd * p (only if wd != 0);
/// p' = p + (-lr) * g', with wd and -lr rounded to f32 as torch does.
struct SgdCoeffs {
  float wd, negLr;
  bool decay;
};
TESSERA_NN_HD inline SgdCoeffs sgdCoeffs(double lr, double weightDecay) {
  return {static_cast<float>(weightDecay), static_cast<float>(-lr),
          weightDecay != 0.0};
}
TESSERA_NN_HD inline float sgdElement(const SgdCoeffs &c, float p, float g) {
  float gi = c.decay ? addRn(g, mulRn(c.wd, p)) : g;
  return addRn(p, mulRn(c.negLr, gi));
}

/// The per-step scalars of torch 1.13 `_single_tensor_adamw` for step t
/// (computed in f64 like Python floats, rounded to f32 where torch does).
/// The device's f64 pow may differ from glibc's by an ulp, which changes
/// the f32 step size only in (astronomically) rare ties.
struct AdamWCoeffs {
  float decay, b1, oneMinusB1, b2, oneMinusB2, eps, negStep, bc2Sqrt;
};
TESSERA_NN_HD inline AdamWCoeffs adamwCoeffs(double t, double lr, double beta1,
                                             double beta2, double eps,
                                             double weightDecay) {
  double bc1 = 1.0 - ::pow(beta1, t);
  double bc2 = 1.0 - ::pow(beta2, t);
  double stepSize = lr / bc1;
  AdamWCoeffs c;
  c.bc2Sqrt = static_cast<float>(::sqrt(bc2));
  c.decay = static_cast<float>(1.0 - lr * weightDecay);
  c.b1 = static_cast<float>(beta1);
  c.oneMinusB1 = static_cast<float>(1.0 - beta1);
  c.b2 = static_cast<float>(beta2);
  c.oneMinusB2 = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.negStep = static_cast<float>(-stepSize);
  return c;
}

/// One AdamW element update in place on (p, m, v), in cpu::adamwUpdate's
/// order of f32 operations.
TESSERA_NN_HD inline void adamwElement(const AdamWCoeffs &c, float g, float &p,
                                       float &m, float &v) {
  float pi = mulRn(p, c.decay);
  float mi = addRn(mulRn(m, c.b1), mulRn(c.oneMinusB1, g));
  float vi = addRn(mulRn(v, c.b2), mulRn(mulRn(c.oneMinusB2, g), g));
  float denom = addRn(divRn(sqrtRn(vi), c.bc2Sqrt), c.eps);
  p = addRn(pi, divRn(mulRn(c.negStep, mi), denom));
  m = mi;
  v = vi;
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

/// Layer norm (Ba, Kiros & Hinton 2016) over dims [axis, rank) of x
/// (cpu::layerNorm): y = (x - mean) *
/// rstd * gamma + beta, biased variance, mean and variance in f64 (two
/// passes), rstd = 1 / sqrt(var + eps). x, gamma, beta, out all of one
/// dtype T (f32, bf16, f16); gamma, beta have x.shape[axis:]. One block per
/// row. In place OK (out may be x).
cudaError_t layerNorm(const Tensor &x, const Tensor &gamma, const Tensor &beta,
                      int64_t axis, float epsilon, Tensor &out,
                      cudaStream_t stream);

/// Scratch of layerNormGrad for x of `shape` normalised over [axis, rank):
/// 2 * rows doubles (mean, rstd) + 2 * P * cols doubles (dgamma / dbeta
/// partial sums of P = min(rows, 64) row groups).
size_t layerNormGradScratchBytes(const std::vector<int64_t> &shape,
                                 int64_t axis);

/// Gradients of layerNorm (cpu::layerNormGrad): dx (x's shape), dgamma and
/// dbeta (gamma's shape, summed over the rows). All of one dtype T. The
/// row statistics are recomputed; dgamma / dbeta are reduced
/// deterministically in f64 (per row-group partial sums in `scratch`, then
/// summed in group order; no atomics). In place OK for dx == dy.
cudaError_t layerNormGrad(const Tensor &x, const Tensor &gamma,
                          const Tensor &dy, int64_t axis, float epsilon,
                          Tensor &dx, Tensor &dgamma, Tensor &dbeta,
                          void *scratch, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// RMS norm
//===----------------------------------------------------------------------===//

/// RMS norm (Zhang & Sennrich 2019) over dims [axis, rank) of x
/// (cpu::rmsNorm): y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps)
/// with the sum of squares in f64. x, gamma, out of one dtype T (f32, bf16,
/// f16); gamma has x.shape[axis:]. One block per row. In place OK (out may
/// be x).
cudaError_t rmsNorm(const Tensor &x, const Tensor &gamma, int64_t axis,
                    float epsilon, Tensor &out, cudaStream_t stream);

/// Scratch of rmsNormGrad for x of `shape` normalised over [axis, rank):
/// rows doubles (rstd) + P * cols doubles (dgamma partial sums of P =
/// min(rows, 64) row groups).
size_t rmsNormGradScratchBytes(const std::vector<int64_t> &shape, int64_t axis);

/// Gradients of rmsNorm (cpu::rmsNormGrad): dx (x's shape) and dgamma
/// (gamma's shape, summed over the rows). All of one dtype T. rstd is
/// recomputed; dgamma is reduced deterministically in f64 (row-group partial
/// sums in `scratch`, then summed in group order; no atomics). In place OK
/// for dx == dy.
cudaError_t rmsNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                        int64_t axis, float epsilon, Tensor &dx, Tensor &dgamma,
                        void *scratch, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

/// Softmax along `axis` (cpu::softmax): online max / f64 sum, then
/// y = exp(x - max) * (float)(1 / sum). x, out of one dtype T. Last axis:
/// one block per row; other axes: one thread per [outer, inner] line
/// (coalesced across the inner dim; slow when outer * inner is small and
/// n large, which the transformer graphs never produce). In place OK.
cudaError_t softmax(const Tensor &x, int64_t axis, Tensor &out,
                    cudaStream_t stream);

/// dx = y * (dy - sum_axis(dy * y)) (cpu::softmaxGrad; sum and product in
/// f64). y, dy, dx of one dtype T. In place OK (dx may be y or dy).
cudaError_t softmaxGrad(const Tensor &y, const Tensor &dy, int64_t axis,
                        Tensor &dx, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// Embedding lookup (cpu::gather): table [V, ...] of any dtype, ids i64,
/// out = ids.shape ++ table.shape[1:] of table's dtype. An id outside
/// [0, V) is recorded in `status` (IdOutOfRange, index = flat index into
/// ids, value = id, limit = V) and its out row is zero-filled.
cudaError_t gather(const Tensor &table, const Tensor &ids, Tensor &out,
                   DeviceStatus *status, cudaStream_t stream);

/// Vocab-parallel lookup (cpu::gatherMasked; Megatron-LM, Shoeybi et al.
/// 2019): table holds rows [offset, offset + V_local) of a `vocab`-row
/// table; out rows of ids outside that range are zero. Ids outside
/// [0, vocab) are recorded (limit = vocab) and zero-filled.
cudaError_t gatherMasked(const Tensor &table, const Tensor &ids, int64_t offset,
                         int64_t vocab, Tensor &out, DeviceStatus *status,
                         cudaStream_t stream);

/// Scratch of gatherGrad / gatherGradMasked for `numIds` ids into an out of
/// `localRows` rows: keys and indices (double-buffered) for a stable CUB
/// radix sort plus CUB's temporary storage. Queries CUB, so it needs a CUDA
/// device (returns its error otherwise). Requires localRows < 2^32 - 1.
cudaError_t gatherGradScratchBytes(int64_t numIds, int64_t localRows,
                                   size_t *bytes);

/// Gradient of gather (cpu::gatherGrad): out [V, ...] is zeroed, then
/// out[ids[i]] += dy[i]. dy = ids.shape ++ out.shape[1:], f32/bf16/f16; out
/// f32 (or bf16/f16: the f32 sums are rounded on the store). Deterministic:
/// the flat indices are stably sorted by id (CUB radix sort, in `scratch`),
/// then each distinct id's rows are summed in increasing index order in
/// f32, which is exactly the CPU's order of additions (f32 results are
/// bit-identical to cpu::gatherGrad). Ids outside [0, V) are recorded in
/// `status` and skipped. The rows of one id are summed serially by one
/// block, so an id repeated very often (a padding token) costs time linear
/// in its count. Launches: a memset of out, a key kernel, the CUB sort and
/// a sum kernel (all capturable in a CUDA graph).
cudaError_t gatherGrad(const Tensor &ids, const Tensor &dy, Tensor &out,
                       void *scratch, DeviceStatus *status,
                       cudaStream_t stream);

/// Gradient of gatherMasked (cpu::gatherGradMasked): only ids in
/// [offset, offset + V_local) contribute; ids outside [0, vocab) are
/// recorded (limit = vocab) and skipped.
cudaError_t gatherGradMasked(const Tensor &ids, const Tensor &dy,
                             int64_t offset, int64_t vocab, Tensor &out,
                             void *scratch, DeviceStatus *status,
                             cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Cross-entropy (fused with log-softmax)
//===----------------------------------------------------------------------===//

/// Scratch of crossEntropy for N rows: N doubles (per-row losses).
size_t crossEntropyScratchBytes(int64_t rows);

/// out (f32 scalar) = sum_n -log_softmax(logits[n])[labels[n]]
/// (cpu::crossEntropy). logits [N, V] f32/bf16/f16, labels [N] i64. Each
/// row's loss is computed in f64 (one block per row) into `scratch`, then
/// one block sums them in a fixed order (deterministic). A label outside
/// [0, V) is recorded (LabelOutOfRange, index = row, limit = V) and that
/// row contributes 0.
cudaError_t crossEntropy(const Tensor &logits, const Tensor &labels,
                         Tensor &out, void *scratch, DeviceStatus *status,
                         cudaStream_t stream);

/// dlogits [N, V] (logits' dtype) = (softmax(logits) - onehot(labels)) *
/// dloss, dloss a device f32 scalar (one element). A bad label is recorded
/// and its row of dlogits is zero-filled. In place OK (dlogits may be
/// logits).
cudaError_t crossEntropyGrad(const Tensor &logits, const Tensor &labels,
                             const Tensor &dloss, Tensor &dlogits,
                             DeviceStatus *status, cudaStream_t stream);

/// Vocab-parallel phases (cpu::crossEntropyRowMax ... GradFromStats; see
/// CpuKernels.h). The statistics rowMax, sumExp, target are DEVICE arrays
/// of N doubles (f64, like the CPU), so the executor can all-reduce them
/// between phases (MAX for rowMax, SUM for sumExp and target). logits
/// [N, V_local] f32/bf16/f16 holds columns [offset, offset + V_local).
cudaError_t crossEntropyRowMax(const Tensor &logits, double *rowMax,
                               cudaStream_t stream);
/// sumExp[n] = sum_local exp(x - (float)rowMax[n]); target[n] = the label's
/// logit if local, else 0 (`target` may be null). Labels outside
/// [0, vocab) are recorded (limit = vocab); their target is 0.
cudaError_t crossEntropyRowSums(const Tensor &logits, const Tensor &labels,
                                int64_t offset, int64_t vocab,
                                const double *rowMax, double *sumExp,
                                double *target, DeviceStatus *status,
                                cudaStream_t stream);
/// out (f32 scalar) = sum_n log(sumExp[n]) + (float)rowMax[n] - target[n],
/// summed in f64 by one block in a fixed order.
cudaError_t crossEntropyFromStats(int64_t rows, const double *rowMax,
                                  const double *sumExp, const double *target,
                                  Tensor &out, cudaStream_t stream);
/// dlogits [N, V_local] = (exp(x - lse) - onehot) * dloss, lse =
/// log(sumExp) + (float)rowMax. In place OK (dlogits may be logits).
cudaError_t crossEntropyGradFromStats(const Tensor &logits,
                                      const Tensor &labels, int64_t offset,
                                      const double *rowMax,
                                      const double *sumExp, const Tensor &dloss,
                                      Tensor &dlogits, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Optimizers (multi-tensor; f32 parameters, gradients and state)
//===----------------------------------------------------------------------===//

/// One tensor of a multi-tensor SGD update: pOut = update(p, grad); pOut may
/// equal p. All device pointers to `numel` f32s.
struct SgdTensor {
  const float *p;
  const float *grad;
  float *pOut;
  int64_t numel;
};

/// One tensor of a multi-tensor AdamW update (pOut/mOut/vOut may equal
/// p/m/v).
struct AdamWTensor {
  const float *p;
  const float *grad;
  const float *m;
  const float *v;
  float *pOut;
  float *mOut;
  float *vOut;
  int64_t numel;
};

/// torch.optim.SGD (momentum 0, weight decay) on `count` tensors with as
/// few launches as planMultiTensor gives (NVIDIA apex's multi_tensor_apply:
/// the host list is copied into the kernel's argument struct, each block
/// updates one chunk of one tensor). Bit-identical to cpu::sgdUpdate with
/// the learning rate double(*lr). `lr` is a device f32 scalar (the "hyper"
/// argument "lr"), read on the device so that captured CUDA graphs see the
/// value the runtime sets before each step.
cudaError_t sgdUpdateMulti(const SgdTensor *tensors, size_t count,
                           const float *lr, double weightDecay,
                           cudaStream_t stream);

/// torch 1.13 AdamW (cpu::adamwUpdate arithmetic, f32 state) on `count`
/// tensors; `step` is a device f32 scalar holding the already-incremented
/// t >= 1, `lr` the device f32 learning rate (as for sgdUpdateMulti).
cudaError_t adamwUpdateMulti(const AdamWTensor *tensors, size_t count,
                             const float *step, const float *lr, double beta1,
                             double beta2, double eps, double weightDecay,
                             cudaStream_t stream);

/// Single-tensor forms mirroring cpu::sgdUpdate / cpu::adamwUpdate (f32;
/// step and lr f32 device scalars). In place OK.
cudaError_t sgdUpdate(const Tensor &p, const Tensor &g, const Tensor &lr,
                      double weightDecay, Tensor &pOut, cudaStream_t stream);
cudaError_t adamwUpdate(const Tensor &p, const Tensor &g, const Tensor &m,
                        const Tensor &v, const Tensor &step, const Tensor &lr,
                        double beta1, double beta2, double eps,
                        double weightDecay, Tensor &pOut, Tensor &mOut,
                        Tensor &vOut, cudaStream_t stream);

/// tsr.multi_sgd_update's kernel: `in` holds 2n tensors (p_0.., g_0..),
/// `out` n (p'_0..); the learning rate a device f32 scalar. One
/// sgdUpdateMulti over the n tensors (f32; in place OK).
cudaError_t sgdUpdateTensors(const Tensor *const *in, Tensor *out, size_t n,
                             const Tensor &lr, double weightDecay,
                             cudaStream_t stream);
/// tsr.multi_adamw_update's kernel: `in` holds 4n tensors (p_0.., g_0..,
/// m_0.., v_0..), `out` 3n (p'_0.., m'_0.., v'_0..). One adamwUpdateMulti
/// over the n tensors (f32; in place OK).
cudaError_t adamwUpdateTensors(const Tensor *const *in, Tensor *out, size_t n,
                               const Tensor &step, const Tensor &lr,
                               double beta1, double beta2, double eps,
                               double weightDecay, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Residual add fused with a norm (tsr-fuse-norm)
//===----------------------------------------------------------------------===//

/// sum = x + r (rounded to T, as the add kernel) and out = layerNorm(sum,
/// gamma, beta) (cpu::addLayerNorm): one block per row reads x and r once
/// and writes sum and out; the statistics are layerNorm's, of the rounded
/// sum. All of one dtype T. sum may be x or r.
cudaError_t addLayerNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                         const Tensor &beta, int64_t axis, float epsilon,
                         Tensor &sum, Tensor &out, cudaStream_t stream);

/// sum = x + r and out = rmsNorm(sum, gamma) (cpu::addRmsNorm), as
/// addLayerNorm.
cudaError_t addRmsNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                       int64_t axis, float epsilon, Tensor &sum, Tensor &out,
                       cudaStream_t stream);

/// layerNormGrad with dx = (the input gradient, rounded to T) + addend
/// (cpu::layerNormGradAdd); scratch of layerNormGradScratchBytes. dx may be
/// addend or dy.
cudaError_t layerNormGradAdd(const Tensor &x, const Tensor &gamma,
                             const Tensor &dy, const Tensor &addend,
                             int64_t axis, float epsilon, Tensor &dx,
                             Tensor &dgamma, Tensor &dbeta, void *scratch,
                             cudaStream_t stream);

/// rmsNormGrad with dx = (the input gradient, rounded to T) + addend
/// (cpu::rmsNormGradAdd); scratch of rmsNormGradScratchBytes.
cudaError_t rmsNormGradAdd(const Tensor &x, const Tensor &gamma,
                           const Tensor &dy, const Tensor &addend, int64_t axis,
                           float epsilon, Tensor &dx, Tensor &dgamma,
                           void *scratch, cudaStream_t stream);

} // namespace cuda
} // namespace runtime
} // namespace tessera

#undef TESSERA_NN_HD

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_NNKERNELS_H

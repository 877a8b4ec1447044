//===- ElementwiseKernels.h - CUDA elementwise, layout, reductions -*- C++ -*-//
//
// CUDA kernels for the elementwise, layout and reduction `tsr` ops, with
// exactly the semantics of the CPU kernels of the same name in
// runtime/backends/cpu/CpuKernels.h, plus the fused bias + activation of the
// MLP and its gradient. Conventions (runtime/backends/cuda/CudaCommon.h):
//  - every Tensor's raw() is DEVICE memory; outputs are preallocated by the
//    caller with the right dtype and shape;
//  - every launch is asynchronous on `stream`; the functions return the
//    launch's cudaError_t (cudaGetLastError) and never synchronise nor
//    allocate (reductions take caller scratch);
//  - shape / dtype / rank problems are checked on the host before any
//    launch and returned as cudaErrorInvalidValue (nothing is launched);
//  - floating-point tensors may be f32, bf16 or f16 where stated: elements
//    are loaded as f32, computed in f32 and rounded to nearest even on the
//    store (as Tensor.h's toBFloat16 / toFloat16; a NaN result may have
//    another NaN bit pattern than the host conversion gives);
//  - "in place OK" means the output may be the same tensor (same storage)
//    as the named input; otherwise outputs must not overlap inputs.
//  - device buffers must be aligned to their element size (cudaMalloc and
//    the executor's arena give 256 bytes); nothing needs more.
//
// Index math (strided index maps for broadcast / transpose / slice, the
// [outer, reduced, inner] view of a reduction, launch shapes) is in
// `__host__ __device__` inline functions below so that host unit tests can
// check it without a GPU. This header is valid C++ (g++) and CUDA (nvcc).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_ELEMENTWISEKERNELS_H
#define TESSERA_RUNTIME_BACKENDS_CUDA_ELEMENTWISEKERNELS_H

#include "runtime/backends/cuda/CudaCommon.h"

#include "common/fusion/ElementwiseProgram.h"
#include "common/random/Philox.h"

#include <cstdint>
#include <vector>

#ifndef TESSERA_HD
#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif
#endif

namespace tessera {
namespace runtime {
namespace cuda {

//===----------------------------------------------------------------------===//
// Elementwise binary: a, b, out all have the SAME shape (broadcasts are
// explicit) and one dtype. add, sub, mul, div, max: f32, bf16, f16 or i64
// (i64 with i64 semantics: wrap-around, div truncates toward zero, division
// by zero gives 0 where the CPU is undefined); pow: f32, bf16, f16. max
// propagates NaN (torch.maximum), returning the canonical quiet NaN. In place
// OK (out may be a or b).
//===----------------------------------------------------------------------===//

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max };

cudaError_t binary(BinaryOp op, const Tensor &a, const Tensor &b, Tensor &out,
                   cudaStream_t stream);

inline cudaError_t add(const Tensor &a, const Tensor &b, Tensor &out,
                       cudaStream_t stream) {
  return binary(BinaryOp::Add, a, b, out, stream);
}
inline cudaError_t sub(const Tensor &a, const Tensor &b, Tensor &out,
                       cudaStream_t stream) {
  return binary(BinaryOp::Sub, a, b, out, stream);
}
inline cudaError_t mul(const Tensor &a, const Tensor &b, Tensor &out,
                       cudaStream_t stream) {
  return binary(BinaryOp::Mul, a, b, out, stream);
}
inline cudaError_t div(const Tensor &a, const Tensor &b, Tensor &out,
                       cudaStream_t stream) {
  return binary(BinaryOp::Div, a, b, out, stream);
}
inline cudaError_t pow(const Tensor &a, const Tensor &b, Tensor &out,
                       cudaStream_t stream) {
  return binary(BinaryOp::Pow, a, b, out, stream);
}
inline cudaError_t max(const Tensor &a, const Tensor &b, Tensor &out,
                       cudaStream_t stream) {
  return binary(BinaryOp::Max, a, b, out, stream);
}

/// a == b elementwise; a, b f32, i64, i1 (compared as x != 0), bf16 or f16
/// (compared as f32: -0 == +0, NaN != NaN); out i1 (uint8 0/1) of the same
/// shape. out must not alias a or b.
cudaError_t equal(const Tensor &a, const Tensor &b, Tensor &out,
                  cudaStream_t stream);

/// out = cond != 0 ? a : b; cond i1, a / b / out of any one dtype (copied as
/// bytes), all the same shape. In place OK (out may be a or b).
cudaError_t select(const Tensor &cond, const Tensor &a, const Tensor &b,
                   Tensor &out, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Elementwise unary: in and out have the same shape and dtype, f32, bf16 or
// f16 (neg also i64). In place OK.
//===----------------------------------------------------------------------===//

/// GELU variants (torch.nn.functional.gelu(approximate=...)), as
/// cpu::GeluApproximate (Hendrycks & Gimpel, 2016).
enum class GeluApproximate {
  None, ///< x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
  Tanh  ///< 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
};

enum class UnaryOp {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt, ///< 1 / sqrt(x) (two roundings, like the CPU kernel)
  Tanh,
  Erf,
  Relu, ///< x < 0 ? 0 : x (NaN propagates)
  Gelu, ///< GeluApproximate::None
  GeluTanh,
  Sigmoid, ///< 1 / (1 + exp(-x)), as cpu::sigmoid
  Silu     ///< x / (1 + exp(-x)), silu(-inf) = -0, as cpu::silu
};

cudaError_t unary(UnaryOp op, const Tensor &in, Tensor &out,
                  cudaStream_t stream);

inline cudaError_t neg(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Neg, in, out, stream);
}
inline cudaError_t exp(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Exp, in, out, stream);
}
inline cudaError_t log(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Log, in, out, stream);
}
inline cudaError_t sqrt(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Sqrt, in, out, stream);
}
inline cudaError_t rsqrt(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Rsqrt, in, out, stream);
}
inline cudaError_t tanh(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Tanh, in, out, stream);
}
inline cudaError_t erf(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Erf, in, out, stream);
}
inline cudaError_t relu(const Tensor &in, Tensor &out, cudaStream_t stream) {
  return unary(UnaryOp::Relu, in, out, stream);
}
inline cudaError_t gelu(const Tensor &in, GeluApproximate approximate,
                        Tensor &out, cudaStream_t stream) {
  return unary(approximate == GeluApproximate::None ? UnaryOp::Gelu
                                                    : UnaryOp::GeluTanh,
               in, out, stream);
}

/// dx = dy where x > 0, else 0. x, dy, dx one shape and float dtype
/// (f32 / bf16 / f16). In place OK (dx may be x or dy).
cudaError_t reluGrad(const Tensor &x, const Tensor &dy, Tensor &dx,
                     cudaStream_t stream);

/// dx = dy * gelu'(x), the exact derivative of the chosen form, computed
/// with the CPU kernel's formulas. In place OK (dx may be x or dy).
cudaError_t geluGrad(const Tensor &x, const Tensor &dy,
                     GeluApproximate approximate, Tensor &dx,
                     cudaStream_t stream);

/// dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x), with the limits at
/// +/-inf (cpu::siluGrad's formula and rounding order). x, dy, dx one shape
/// and float dtype. In place OK (dx may be x or dy).
cudaError_t siluGrad(const Tensor &x, const Tensor &dy, Tensor &dx,
                     cudaStream_t stream);

/// Training-mode dropout (tsr.dropout), cpu::dropout's mask and arithmetic
/// (common/random/Philox.h): y[i] = x[i] · scale where the Philox-4x32-10
/// draw of global element dropoutGlobalIndex(factors, i) passes
/// `threshold`, else 0. `step` is the DEVICE f32 scalar of the step count
/// (read by the kernel, truncated to uint32). At most kMaxFactors
/// sub-factors. f32; in place OK (y may be x).
struct DropoutLaunch {
  static constexpr int kMaxFactors = 16;
  tessera::random::DropoutFactor factors[kMaxFactors];
  int numFactors = 0;
  uint64_t seed = 0;
  uint32_t opId = 0;
  uint32_t threshold = 0;
  float scale = 1;
};
cudaError_t dropout(const Tensor &x, const Tensor &step,
                    const DropoutLaunch &launch, Tensor &y,
                    cudaStream_t stream);

/// Converts between any pair of f32, i64, i1, bf16, f16 (same element
/// count). f32 / bf16 / f16 -> i64 truncates toward zero (out-of-range
/// values saturate and NaN gives 0, where the CPU is undefined); anything
/// -> i1 is (x != 0) (NaN -> 1); i1 -> number is the stored byte's value (0
/// or 1), as on the CPU; i64 -> bf16 / f16 rounds to f32 first (nearest
/// even) and then to the 16-bit type, like the CPU. Same dtype is a copy.
/// In place OK only when the dtypes are equal.
cudaError_t convert(const Tensor &in, Tensor &out, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Fused bias + activation (the MLP's first GEMM epilogue)
//===----------------------------------------------------------------------===//

enum class BiasActivation { None, Relu, Gelu, GeluTanh };

/// out = act(x + bias) with x [..., N] (viewed as [R, N]), bias [N], out
/// like x; all f32, bf16 or f16 (one dtype). x + bias stays in f32 (it is
/// not rounded to the storage type before the activation). In place OK (out
/// may be x).
cudaError_t biasActivation(const Tensor &x, const Tensor &bias,
                           BiasActivation act, Tensor &out,
                           cudaStream_t stream);

/// Scratch bytes biasActivationGrad needs for x [..., N] of `dtype`.
int64_t biasActivationGradScratchBytes(DType dtype,
                                       const std::vector<int64_t> &xShape);

/// Backward of biasActivation: dx = dy * act'(x + bias) (x, dy, dx like x)
/// and dbias [N] (x's dtype) = the column sums of dx as stored (exactly
/// reduceSum(dx, leading axes)), reduced deterministically in f64, in two
/// stages through `scratch` when R is long (at least
/// biasActivationGradScratchBytes bytes, 256-byte aligned; may be null when
/// that is 0). In place OK for dx == x or dx == dy; dbias must not overlap
/// the others. Error (nothing launched) when the scratch is too small.
cudaError_t biasActivationGrad(const Tensor &x, const Tensor &bias,
                               const Tensor &dy, BiasActivation act, Tensor &dx,
                               Tensor &dbias, void *scratch,
                               int64_t scratchBytes, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Layout: every dtype (moved as raw elements of 1, 2, 4 or 8 bytes). Outputs
// must not overlap inputs. Ranks up to elem::kMaxRank (8) after merging
// dims that stay contiguous (size-1 dims dropped); larger ones are
// cudaErrorInvalidValue.
//===----------------------------------------------------------------------===//

/// numpy / ONNX Expand: in's dims align to the right of out's; each in dim
/// is 1 or equal to the out dim. in.rank() <= out.rank().
cudaError_t broadcast(const Tensor &in, Tensor &out, cudaStream_t stream);

/// out.shape[k] = in.shape[perm[k]]. Permutations that move the (merged)
/// last dim use a 32x32 shared-memory tiled kernel with coalesced reads and
/// writes (M. Harris, "An Efficient Matrix Transpose in CUDA C/C++", NVIDIA
/// 2013); the others a plain index-mapping kernel.
cudaError_t transpose(const Tensor &in, const std::vector<int64_t> &perm,
                      Tensor &out, cudaStream_t stream);

/// Static strided slice: out.shape[d] = ceil((limits[d] - starts[d]) /
/// strides[d]); 0 <= starts[d] <= limits[d] <= in.shape[d], strides[d] >=
/// 1.
cudaError_t slice(const Tensor &in, const std::vector<int64_t> &starts,
                  const std::vector<int64_t> &limits,
                  const std::vector<int64_t> &strides, Tensor &out,
                  cudaStream_t stream);

/// Concatenates `inputs` (same dtype and rank, equal dims except `axis`)
/// along `axis` (0 <= axis < rank) into out; one launch per non-empty
/// input, rows moved as the widest words (up to 16 bytes) their alignment
/// allows.
cudaError_t concat(const std::vector<const Tensor *> &inputs, int64_t axis,
                   Tensor &out, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Reductions: `axes` sorted, unique, in [0, rank). out has in's dtype (f32,
// bf16 or f16) and shape with the reduced dims removed (keepDim = false) or
// set to 1 (keepDim = true); the layout is the same either way. The
// kernels are shared-memory tree reductions (M. Harris, "Optimizing
// Parallel Reduction in CUDA", NVIDIA 2007) with a fixed shape. Sums and
// means accumulate in f64 (like the CPU's double accumulators; the order
// differs, a fixed tree), max compares in f64 too (exact); all
// deterministic (no
// atomics; the reduction tree depends only on the shape). An empty `axes`
// is a copy; mean over zero elements is NaN, max over zero elements -inf,
// sum 0 (as on the CPU). max propagates NaN. Known difference: when a
// maximum is a zero present as both -0 and +0, the sign returned may differ
// from the CPU's (which keeps the first in index order).
//
// Axes that do not form one contiguous block (after dropping size-1 dims
// and merging neighbours) are first transposed into `scratch`; large
// reductions with few outputs split the reduced extent in two stages
// through `scratch`. `scratch` must hold reduceScratchBytes(...) bytes
// (256-byte aligned; may be null when that is 0); too small is
// cudaErrorInvalidValue. out must not overlap in or scratch.
//===----------------------------------------------------------------------===//

/// Scratch bytes for reducing `inShape` of `dtype` over `axes`; -1 when the
/// axes are not sorted, unique and in range.
int64_t reduceScratchBytes(DType dtype, const std::vector<int64_t> &inShape,
                           const std::vector<int64_t> &axes);

cudaError_t reduceSum(const Tensor &in, const std::vector<int64_t> &axes,
                      bool keepDim, Tensor &out, void *scratch,
                      int64_t scratchBytes, cudaStream_t stream);
cudaError_t reduceMean(const Tensor &in, const std::vector<int64_t> &axes,
                       bool keepDim, Tensor &out, void *scratch,
                       int64_t scratchBytes, cudaStream_t stream);
cudaError_t reduceMax(const Tensor &in, const std::vector<int64_t> &axes,
                      bool keepDim, Tensor &out, void *scratch,
                      int64_t scratchBytes, cudaStream_t stream);

/// out (f32 scalar) = Σ in_i² over every element of `in` (f32): one block
/// accumulates in f64 with a fixed thread order (deterministic), rounding
/// once. cudaErrorInvalidValue for other dtypes or shapes.
cudaError_t sumSquares(const Tensor &in, Tensor &out, cudaStream_t stream);

/// tsr.fused_elementwise (cpu::fusedElementwise's semantics): program `p`
/// over `in[0 .. p.numInputs)` (f32, or i1 select conditions, broadcast by
/// p's index maps) into `out[0 .. p.outputs.size())` (f32, the iteration
/// shape). One thread per element (grid-stride loop) interprets the program
/// with the slots in registers; each opcode is the unfused kernel's device
/// arithmetic, so the results equal the unfused CUDA kernels'. In place OK
/// (same index only). cudaErrorInvalidValue for other dtypes or shapes.
cudaError_t fusedElementwise(const tessera::fusion::ElementwiseProgram &p,
                             const Tensor *const *in, Tensor *out,
                             cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Index math shared by the host and the kernels (tested on the host), in
// namespace `elem` to keep short names away from the other kernel files.
//===----------------------------------------------------------------------===//

namespace elem {

/// Largest rank an index map holds (after merging contiguous dims).
constexpr int kMaxRank = 8;

/// Maps the flat row-major index of an output of dims `dims[0..rank)` to an
/// element offset in a source: base + sum_d idx[d] * strides[d]. Broadcast
/// dims have stride 0, transposed ones the source stride of the dim they
/// come from, sliced ones start / step folded into base and strides.
struct IndexMap {
  int32_t rank = 0;
  int64_t base = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

/// Source offset of output flat index `i` (0 <= i < prod(dims)), unravelled
/// with index type Idx: int64_t always works; uint32_t (much cheaper
/// division on the GPU) when prod(dims) <= UINT32_MAX.
template <typename Idx>
TESSERA_HD inline int64_t mapIndexAs(const IndexMap &m, Idx i) {
  int64_t off = m.base;
  for (int d = m.rank - 1; d >= 0; --d) {
    Idx dim = static_cast<Idx>(m.dims[d]);
    Idx q = i / dim;
    off += static_cast<int64_t>(i - q * dim) * m.strides[d];
    i = q;
  }
  return off;
}
TESSERA_HD inline int64_t mapIndex(const IndexMap &m, int64_t i) {
  return mapIndexAs<int64_t>(m, i);
}

/// Row-major strides (in elements) of `shape`.
inline std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

/// Builds an IndexMap from output dims and source strides, dropping size-1
/// dims and merging neighbours d, d+1 with strides[d] == strides[d+1] *
/// dims[d+1] (which describes the same offsets). False when more than
/// kMaxRank dims remain.
inline bool makeIndexMap(const std::vector<int64_t> &dims,
                         const std::vector<int64_t> &strides, int64_t base,
                         IndexMap &m) {
  m = IndexMap();
  m.base = base;
  std::vector<int64_t> d, s;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 1)
      continue;
    if (!d.empty() && s.back() == strides[k] * dims[k]) {
      d.back() *= dims[k];
      s.back() = strides[k];
      continue;
    }
    d.push_back(dims[k]);
    s.push_back(strides[k]);
  }
  if (d.size() > static_cast<size_t>(kMaxRank))
    return false;
  m.rank = static_cast<int32_t>(d.size());
  for (size_t k = 0; k < d.size(); ++k) {
    m.dims[k] = d[k];
    m.strides[k] = s[k];
  }
  return true;
}

/// Map of broadcast(in -> out): false when in's dims do not align to the
/// right of out's with each 1 or equal, or the merged rank is too large.
inline bool broadcastMap(const std::vector<int64_t> &inShape,
                         const std::vector<int64_t> &outShape, IndexMap &m) {
  if (inShape.size() > outShape.size())
    return false;
  size_t lead = outShape.size() - inShape.size();
  std::vector<int64_t> inStr = rowMajorStrides(inShape);
  std::vector<int64_t> strides(outShape.size(), 0);
  for (size_t i = 0; i < inShape.size(); ++i) {
    int64_t o = outShape[lead + i];
    if (inShape[i] != 1 && inShape[i] != o)
      return false;
    strides[lead + i] = inShape[i] == 1 ? 0 : inStr[i];
  }
  return makeIndexMap(outShape, strides, 0, m);
}

/// Map of transpose(in, perm): out dims in.shape[perm[k]], strides the
/// input's. False for a perm that is not a permutation of [0, rank) or a
/// merged rank that is too large.
inline bool transposeMap(const std::vector<int64_t> &inShape,
                         const std::vector<int64_t> &perm, IndexMap &m) {
  size_t r = inShape.size();
  if (perm.size() != r)
    return false;
  std::vector<bool> seen(r, false);
  std::vector<int64_t> inStr = rowMajorStrides(inShape);
  std::vector<int64_t> dims(r), strides(r);
  for (size_t k = 0; k < r; ++k) {
    if (perm[k] < 0 || perm[k] >= static_cast<int64_t>(r) || seen[perm[k]])
      return false;
    seen[perm[k]] = true;
    dims[k] = inShape[perm[k]];
    strides[k] = inStr[perm[k]];
  }
  return makeIndexMap(dims, strides, 0, m);
}

/// Map of slice(in, starts, limits, steps): false on bad bounds, an output
/// shape other than ceil((limit - start) / step), or a too large rank.
inline bool sliceMap(const std::vector<int64_t> &inShape,
                     const std::vector<int64_t> &starts,
                     const std::vector<int64_t> &limits,
                     const std::vector<int64_t> &steps,
                     const std::vector<int64_t> &outShape, IndexMap &m) {
  size_t r = inShape.size();
  if (starts.size() != r || limits.size() != r || steps.size() != r ||
      outShape.size() != r)
    return false;
  std::vector<int64_t> inStr = rowMajorStrides(inShape);
  std::vector<int64_t> strides(r);
  int64_t base = 0;
  for (size_t d = 0; d < r; ++d) {
    if (steps[d] < 1 || starts[d] < 0 || starts[d] > limits[d] ||
        limits[d] > inShape[d] ||
        outShape[d] != (limits[d] - starts[d] + steps[d] - 1) / steps[d])
      return false;
    base += starts[d] * inStr[d];
    strides[d] = steps[d] * inStr[d];
  }
  return makeIndexMap(outShape, strides, base, m);
}

/// The tiled transpose view of a transpose IndexMap whose last dim is not
/// contiguous in the source: out dim `a` (the one with source stride 1) and
/// the last out dim `b` form 32x32 tiles; the other dims are a batch with
/// a source map and a destination map (same dims, other strides).
struct TiledTranspose {
  int64_t sizeA = 0, sizeB = 0; ///< extents of dims a and b
  int64_t srcStrideB = 0;       ///< source stride of b (a's is 1)
  int64_t dstStrideA = 0;       ///< destination stride of a (b's is 1)
  int64_t batch = 1;            ///< product of the other dims
  IndexMap batchSrc, batchDst;  ///< batch flat index -> offsets
};

/// True (filling `t`) when `m` (a transpose map of a contiguous source)
/// moves the source's contiguous dim away from the last output position,
/// the case for the tiled kernel.
inline bool tiledTransposeOf(const IndexMap &m, TiledTranspose &t) {
  int r = m.rank;
  if (r < 2 || m.strides[r - 1] == 1)
    return false;
  int a = -1;
  for (int k = 0; k < r - 1; ++k)
    if (m.strides[k] == 1)
      a = k;
  if (a < 0)
    return false;
  t = TiledTranspose();
  t.sizeA = m.dims[a];
  t.sizeB = m.dims[r - 1];
  t.srcStrideB = m.strides[r - 1];
  // Destination (row-major over m.dims) strides.
  int64_t dstStr[kMaxRank];
  int64_t acc = 1;
  for (int k = r - 1; k >= 0; --k) {
    dstStr[k] = acc;
    acc *= m.dims[k];
  }
  t.dstStrideA = dstStr[a];
  int n = 0;
  for (int k = 0; k < r - 1; ++k) {
    if (k == a)
      continue;
    t.batchSrc.dims[n] = t.batchDst.dims[n] = m.dims[k];
    t.batchSrc.strides[n] = m.strides[k];
    t.batchDst.strides[n] = dstStr[k];
    t.batch *= m.dims[k];
    ++n;
  }
  t.batchSrc.rank = t.batchDst.rank = n;
  return true;
}

/// Tile edge of the tiled transpose (threads: kTile x kTileRows).
constexpr int kTile = 32;
constexpr int kTileRows = 8;

/// Grid of the tiled transpose: x over tiles of b, y over tiles of a, z
/// over the batch, each capped at the hardware limit (the kernel loops).
struct Grid3 {
  unsigned x = 1, y = 1, z = 1;
};
inline Grid3 tiledTransposeGrid(const TiledTranspose &t) {
  auto cap = [](int64_t n, int64_t limit) {
    return static_cast<unsigned>(n < 1 ? 1 : (n > limit ? limit : n));
  };
  Grid3 g;
  g.x = cap((t.sizeB + kTile - 1) / kTile, 65535LL * 8);
  g.y = cap((t.sizeA + kTile - 1) / kTile, 65535);
  g.z = cap(t.batch, 65535);
  return g;
}

/// A reduction seen as in[outer][red][inner] -> out[outer][inner], after
/// size-1 dims are dropped and neighbouring dims with the same role merged.
/// When the reduced dims are not one block (`needsTranspose`), the input is
/// first permuted (`perm` over the merged dims `dims`) so that the kept
/// dims come first in order and then the reduced ones: outer = kept
/// product, red = reduced product, inner = 1.
struct ReducePlan {
  int64_t outer = 1, red = 1, inner = 1;
  bool needsTranspose = false;
  std::vector<int64_t> dims; ///< merged input dims (for the transpose)
  std::vector<int64_t> perm; ///< kept merged dims, then reduced ones
};

/// False when `axes` is not sorted, unique and in [0, rank).
inline bool planReduce(const std::vector<int64_t> &shape,
                       const std::vector<int64_t> &axes, ReducePlan &p) {
  p = ReducePlan();
  size_t r = shape.size();
  std::vector<bool> reduced(r, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(r) ||
        (i > 0 && axes[i] <= axes[i - 1]))
      return false;
    reduced[axes[i]] = true;
  }
  std::vector<bool> red;
  for (size_t d = 0; d < r; ++d) {
    if (shape[d] == 1)
      continue;
    if (!p.dims.empty() && red.back() == reduced[d]) {
      p.dims.back() *= shape[d];
    } else {
      p.dims.push_back(shape[d]);
      red.push_back(reduced[d]);
    }
  }
  int reducedGroups = 0;
  for (bool b : red)
    reducedGroups += b;
  size_t m = p.dims.size();
  if (reducedGroups <= 1) {
    // [kept?] [reduced?] [kept?]
    size_t i = 0;
    for (; i < m && !red[i]; ++i)
      p.outer *= p.dims[i];
    for (; i < m && red[i]; ++i)
      p.red *= p.dims[i];
    for (; i < m; ++i)
      p.inner *= p.dims[i];
    return true;
  }
  p.needsTranspose = true;
  for (size_t i = 0; i < m; ++i)
    if (!red[i]) {
      p.perm.push_back(static_cast<int64_t>(i));
      p.outer *= p.dims[i];
    }
  for (size_t i = 0; i < m; ++i)
    if (red[i]) {
      p.perm.push_back(static_cast<int64_t>(i));
      p.red *= p.dims[i];
    }
  return true;
}

/// Threads of a row-reduction block (inner == 1) and the shape of a
/// column-reduction block (inner > 1: kTile columns x kTileRows rows).
constexpr int kReduceThreads = 256;
/// Elements one split of the reduced extent covers at least, blocks aimed
/// at, and the most splits (partials in scratch: outer * inner * splits).
constexpr int64_t kReduceMinChunk = 2048;
constexpr int64_t kReduceTargetBlocks = 1024;
constexpr int64_t kReduceMaxSplits = 1024;

/// Number of pieces the reduced extent is split into (1: single pass). Only
/// the shape decides, so results are reproducible across devices.
inline int64_t reduceSplits(int64_t outer, int64_t red, int64_t inner) {
  if (red <= kReduceMinChunk || outer * inner == 0)
    return 1;
  int64_t blocks = inner == 1 ? outer : outer * ((inner + kTile - 1) / kTile);
  if (blocks >= kReduceTargetBlocks)
    return 1;
  int64_t byChunk = (red + kReduceMinChunk - 1) / kReduceMinChunk;
  int64_t byBlocks = (kReduceTargetBlocks + blocks - 1) / blocks;
  int64_t s = byChunk < byBlocks ? byChunk : byBlocks;
  if (s > kReduceMaxSplits)
    s = kReduceMaxSplits;
  if (s < 1)
    s = 1;
  // No empty piece: recompute from the chunk length.
  int64_t chunk = (red + s - 1) / s;
  return (red + chunk - 1) / chunk;
}

/// Length of each split piece (the last may be shorter).
TESSERA_HD inline int64_t reduceChunk(int64_t red, int64_t splits) {
  return splits <= 1 ? red : (red + splits - 1) / splits;
}

/// Widest unit (16, 8, 4, 2 or 1 bytes) that divides the source and
/// destination addresses, the row length and the destination pitch of a
/// row copy (concat), so rows can be moved as uint4 / uint64 / ... words.
inline int copyUnitBytes(uintptr_t src, uintptr_t dst, int64_t rowBytes,
                         int64_t dstPitchBytes) {
  for (int w = 16; w > 1; w /= 2)
    if (src % w == 0 && dst % w == 0 && rowBytes % w == 0 &&
        dstPitchBytes % w == 0)
      return w;
  return 1;
}

/// What block `blk` of a reduction kernel works on: blocks enumerate
/// (outer, split, column tile) with the column tile fastest (row
/// reductions: colTiles = 1). Block blk covers reduced indices [split *
/// chunk, min(red, (split + 1) * chunk)) of columns [colTile * kTile, +
/// kTile) of outer slice `outer`.
struct ReduceBlock {
  int64_t outer, split, colTile;
};
TESSERA_HD inline ReduceBlock reduceBlockOf(int64_t blk, int64_t splits,
                                            int64_t colTiles) {
  int64_t rest = blk / colTiles;
  ReduceBlock b;
  b.colTile = blk - rest * colTiles;
  b.outer = rest / splits;
  b.split = rest - b.outer * splits;
  return b;
}

/// Index of the partial of (outer o, split s, column c) in the scratch
/// written by the first stage and read by the second.
TESSERA_HD inline int64_t partialIndex(int64_t o, int64_t s, int64_t c,
                                       int64_t splits, int64_t inner) {
  return (o * splits + s) * inner + c;
}

/// Rounds `bytes` up to a multiple of 256 (scratch sub-buffer alignment).
TESSERA_HD inline int64_t alignScratch(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

} // namespace elem
} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_ELEMENTWISEKERNELS_H

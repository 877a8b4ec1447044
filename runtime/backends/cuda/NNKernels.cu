//===- NNKernels.cu - Fused CUDA kernels of the NN ops --------------------===//
//
// See NNKernels.h. Block reductions combine each warp with xor shuffles and
// the warps' results in warp order, so for a given launch configuration
// (which depends only on the shapes) every result is reproducible bit for
// bit from run to run. No float atomics anywhere.
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cuda/NNKernels.h"

#include "runtime/backends/cuda/CudaDType.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

namespace tessera {
namespace runtime {
namespace cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float shfl(float v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ double shfl(double v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ MaxSum shfl(MaxSum v, int o) {
  return {shfl(v.m, o), shfl(v.s, o)};
}

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MergeOp {
  __device__ MaxSum operator()(const MaxSum &a, const MaxSum &b) const {
    return maxSumMerge(a, b);
  }
};

/// Reduces `v` over the block (blockDim.x a multiple of 32, at most 1024);
/// every thread gets the same result (lane 0 of warp 0's). Must be called
/// by all threads of the block.
template <typename T, typename Op>
__device__ T blockReduce(T v, Op op, T identity) {
  __shared__ T partial[33];
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, shfl(v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int warps = blockDim.x >> 5;
  __syncthreads(); // the previous call's readers are done with `partial`
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? partial[lane] : identity;
    for (int o = 16; o > 0; o >>= 1)
      w = op(w, shfl(w, o));
    if (lane == 0)
      partial[32] = w;
  }
  __syncthreads();
  return partial[32];
}

__device__ void recordStatus(DeviceStatus *status, int32_t code, int64_t index,
                             int64_t value, int64_t limit) {
  if (!status)
    return;
  if (atomicCAS(&status->code, 0, code) == 0) {
    status->index = index;
    status->value = value;
    status->limit = limit;
  }
}

/// Blocks of a one-block-per-row kernel (rows loop when more).
unsigned rowGrid(int64_t rows) {
  int64_t g = std::max<int64_t>(1, std::min<int64_t>(rows, 65535 * 8));
  return static_cast<unsigned>(g);
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

/// Mean and rstd of one row (f64, two passes), as cpu rowStats.
template <typename T>
__device__ void rowStats(const T *xr, int64_t cols, float epsilon, double &mean,
                         double &rstd) {
  double s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    s += toF32(xr[j]);
  s = blockReduce(s, SumOp(), 0.0);
  mean = cols ? s / cols : 0.0;
  double q = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    double d = toF32(xr[j]) - mean;
    q += d * d;
  }
  q = blockReduce(q, SumOp(), 0.0);
  double var = cols ? q / cols : 0.0;
  rstd = 1.0 / ::sqrt(var + static_cast<double>(epsilon));
}

template <typename T>
__global__ void layerNormKernel(const T *x, const T *gamma, const T *beta,
                                T *out, int64_t rows, int64_t cols,
                                float epsilon) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    T *yr = out + r * cols;
    double mean, rstd;
    rowStats(xr, cols, epsilon, mean, rstd);
    float fm = static_cast<float>(mean), fr = static_cast<float>(rstd);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float v = mulRn(mulRn(toF32(xr[j]) - fm, fr), toF32(gamma[j]));
      yr[j] = fromF32<T>(addRn(v, toF32(beta[j])));
    }
  }
}

template <typename T>
__global__ void rowStatsKernel(const T *x, int64_t rows, int64_t cols,
                               float epsilon, double *mean, double *rstd) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double m, s;
    rowStats(x + r * cols, cols, epsilon, m, s);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

constexpr int kLnTileCols = 32; // blockDim.x of the partial-sum kernel
constexpr int kLnTileRows = 8;  // blockDim.y
constexpr int64_t kLnMaxGroups = 64;

int64_t lnGroups(int64_t rows) { return std::min(rows, kLnMaxGroups); }

/// Partial dgamma / dbeta of row group blockIdx.y (rows [g * per, (g + 1) *
/// per)) for 32 columns: each thread sums rows ty, ty + 8, ... of the group
/// in f64, then thread row 0 adds the 8 in order.
template <typename T>
__global__ void lnPartialKernel(const T *x, const T *dy, const double *mean,
                                const double *rstd, int64_t rows, int64_t cols,
                                int64_t per, double *dgPart, double *dbPart) {
  __shared__ double sg[kLnTileRows][kLnTileCols];
  __shared__ double sb[kLnTileRows][kLnTileCols];
  int64_t c = static_cast<int64_t>(blockIdx.x) * kLnTileCols + threadIdx.x;
  int64_t g = blockIdx.y;
  int64_t begin = g * per, end = std::min(rows, begin + per);
  double dg = 0, db = 0;
  if (c < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kLnTileRows) {
      double xhat = (toF32(x[r * cols + c]) - mean[r]) * rstd[r];
      double d = toF32(dy[r * cols + c]);
      dg += d * xhat;
      db += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = dg;
  sb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < kLnTileRows; ++k) {
      dg += sg[k][threadIdx.x];
      db += sb[k][threadIdx.x];
    }
    dgPart[g * cols + c] = dg;
    dbPart[g * cols + c] = db;
  }
}

template <typename T>
__global__ void lnFinalKernel(const double *dgPart, const double *dbPart,
                              int64_t groups, int64_t cols, T *dgamma,
                              T *dbeta) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       c < cols; c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double dg = 0, db = 0;
    for (int64_t g = 0; g < groups; ++g) {
      dg += dgPart[g * cols + c];
      db += dbPart[g * cols + c];
    }
    dgamma[c] = fromF32<T>(static_cast<float>(dg));
    dbeta[c] = fromF32<T>(static_cast<float>(db));
  }
}

template <typename T>
__global__ void lnDxKernel(const T *x, const T *gamma, const T *dy,
                           const double *mean, const double *rstd, int64_t rows,
                           int64_t cols, T *dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    double m = mean[r], s = rstd[r];
    double a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = (toF32(xr[j]) - m) * s;
      double d = static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]);
      a += d;
      b += d * xhat;
    }
    a = blockReduce(a, SumOp(), 0.0);
    b = blockReduce(b, SumOp(), 0.0);
    double mA = a / cols, mB = b / cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = (toF32(xr[j]) - m) * s;
      double d = static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]);
      dxr[j] = fromF32<T>(static_cast<float>(s * (d - mA - xhat * mB)));
    }
  }
}

size_t alignUp(size_t n) { return (n + 255) / 256 * 256; }

//===----------------------------------------------------------------------===//
// RMS norm
//===----------------------------------------------------------------------===//

/// 1 / sqrt(mean(x^2) + eps) of one row (f64), as cpu rmsRstd.
template <typename T>
__device__ double rmsRstd(const T *xr, int64_t cols, float epsilon) {
  double s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    double v = toF32(xr[j]);
    s += v * v;
  }
  s = blockReduce(s, SumOp(), 0.0);
  double ms = cols ? s / cols : 0.0;
  return 1.0 / ::sqrt(ms + static_cast<double>(epsilon));
}

template <typename T>
__global__ void rmsNormKernel(const T *x, const T *gamma, T *out, int64_t rows,
                              int64_t cols, float epsilon) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    T *yr = out + r * cols;
    float fr = static_cast<float>(rmsRstd(xr, cols, epsilon));
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      yr[j] = fromF32<T>(mulRn(mulRn(toF32(xr[j]), fr), toF32(gamma[j])));
  }
}

template <typename T>
__global__ void rmsRstdKernel(const T *x, int64_t rows, int64_t cols,
                              float epsilon, double *rstd) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double s = rmsRstd(x + r * cols, cols, epsilon);
    if (threadIdx.x == 0)
      rstd[r] = s;
  }
}

/// Partial dgamma of row group blockIdx.y for 32 columns (as
/// lnPartialKernel).
template <typename T>
__global__ void rmsPartialKernel(const T *x, const T *dy, const double *rstd,
                                 int64_t rows, int64_t cols, int64_t per,
                                 double *dgPart) {
  __shared__ double sg[kLnTileRows][kLnTileCols];
  int64_t c = static_cast<int64_t>(blockIdx.x) * kLnTileCols + threadIdx.x;
  int64_t g = blockIdx.y;
  int64_t begin = g * per, end = std::min(rows, begin + per);
  double dg = 0;
  if (c < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += kLnTileRows)
      dg += static_cast<double>(toF32(dy[r * cols + c])) *
            (toF32(x[r * cols + c]) * rstd[r]);
  sg[threadIdx.y][threadIdx.x] = dg;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < kLnTileRows; ++k)
      dg += sg[k][threadIdx.x];
    dgPart[g * cols + c] = dg;
  }
}

template <typename T>
__global__ void rmsFinalKernel(const double *dgPart, int64_t groups,
                               int64_t cols, T *dgamma) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       c < cols; c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double dg = 0;
    for (int64_t g = 0; g < groups; ++g)
      dg += dgPart[g * cols + c];
    dgamma[c] = fromF32<T>(static_cast<float>(dg));
  }
}

template <typename T>
__global__ void rmsDxKernel(const T *x, const T *gamma, const T *dy,
                            const double *rstd, int64_t rows, int64_t cols,
                            T *dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    double s = rstd[r];
    double dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = toF32(xr[j]) * s;
      dot += static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]) * xhat;
    }
    dot = blockReduce(dot, SumOp(), 0.0);
    double c = dot / cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = toF32(xr[j]) * s;
      double g = static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]);
      dxr[j] = fromF32<T>(static_cast<float>(s * (g - xhat * c)));
    }
  }
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void softmaxRowKernel(const T *x, T *out, int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n;
    T *yr = out + r * n;
    MaxSum st = maxSumEmpty();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      st = maxSumAdd(st, toF32(xr[j]));
    st = blockReduce(st, MergeOp(), maxSumEmpty());
    float inv = static_cast<float>(1.0 / st.s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      yr[j] = fromF32<T>(mulRn(::expf(toF32(xr[j]) - st.m), inv));
  }
}

template <typename T>
__global__ void softmaxLineKernel(const T *x, T *out, AxisSplit s) {
  int64_t lines = s.lines();
  for (int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       l < lines; l += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t base = s.lineBase(l);
    MaxSum st = maxSumEmpty();
    for (int64_t k = 0; k < s.n; ++k)
      st = maxSumAdd(st, toF32(x[base + k * s.inner]));
    float inv = static_cast<float>(1.0 / st.s);
    for (int64_t k = 0; k < s.n; ++k) {
      int64_t i = base + k * s.inner;
      out[i] = fromF32<T>(mulRn(::expf(toF32(x[i]) - st.m), inv));
    }
  }
}

template <typename T>
__global__ void softmaxGradRowKernel(const T *y, const T *dy, T *dx,
                                     int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *yr = y + r * n;
    const T *dyr = dy + r * n;
    T *dxr = dx + r * n;
    double dot = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dot += static_cast<double>(toF32(yr[j])) * toF32(dyr[j]);
    dot = blockReduce(dot, SumOp(), 0.0);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double yv = toF32(yr[j]), dv = toF32(dyr[j]);
      dxr[j] = fromF32<T>(static_cast<float>(yv * (dv - dot)));
    }
  }
}

template <typename T>
__global__ void softmaxGradLineKernel(const T *y, const T *dy, T *dx,
                                      AxisSplit s) {
  int64_t lines = s.lines();
  for (int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       l < lines; l += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t base = s.lineBase(l);
    double dot = 0;
    for (int64_t k = 0; k < s.n; ++k) {
      int64_t i = base + k * s.inner;
      dot += static_cast<double>(toF32(y[i])) * toF32(dy[i]);
    }
    for (int64_t k = 0; k < s.n; ++k) {
      int64_t i = base + k * s.inner;
      double yv = toF32(y[i]), dv = toF32(dy[i]);
      dx[i] = fromF32<T>(static_cast<float>(yv * (dv - dot)));
    }
  }
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// E: an unsigned integer type of the element's size (the lookup only
/// moves bits, so any dtype works).
template <typename E>
__global__ void gatherKernel(const E *table, const int64_t *ids, E *out,
                             int64_t n, int64_t row, int64_t offset,
                             int64_t local, int64_t vocab,
                             DeviceStatus *status) {
  int64_t total = n * row;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < total; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t i = e / row, j = e - i * row;
    int64_t k = ids[i];
    if (k < 0 || k >= vocab) {
      if (j == 0)
        recordStatus(status, DeviceStatus::IdOutOfRange, i, k, vocab);
      out[e] = E(0);
      continue;
    }
    out[e] = k >= offset && k < offset + local ? table[(k - offset) * row + j]
                                               : E(0);
  }
}

__global__ void checkIdsKernel(const int64_t *ids, int64_t n, int64_t vocab,
                               DeviceStatus *status) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t k = ids[i];
    if (k < 0 || k >= vocab)
      recordStatus(status, DeviceStatus::IdOutOfRange, i, k, vocab);
  }
}

/// Sort keys: the local row of each id, or `local` (sorted last, skipped)
/// for ids of other ranks and bad ids.
__global__ void gatherGradKeysKernel(const int64_t *ids, int64_t n,
                                     int64_t offset, int64_t local,
                                     int64_t vocab, uint32_t *keys,
                                     int64_t *index, DeviceStatus *status) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t k = ids[i];
    uint32_t key = static_cast<uint32_t>(local);
    if (k < 0 || k >= vocab)
      recordStatus(status, DeviceStatus::IdOutOfRange, i, k, vocab);
    else if (k >= offset && k < offset + local)
      key = static_cast<uint32_t>(k - offset);
    keys[i] = key;
    index[i] = i;
  }
}

/// Block per sorted position p; the block at the first position of each
/// run of equal keys sums that id's dy rows in increasing index order.
template <typename TD, typename TO>
__global__ void gatherGradSumKernel(const uint32_t *keys, const int64_t *index,
                                    const TD *dy, int64_t n, int64_t row,
                                    uint32_t sentinel, TO *out) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    uint32_t key = keys[p];
    if (key == sentinel || (p > 0 && keys[p - 1] == key))
      continue;
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) {
      float acc = 0.0f;
      for (int64_t q = p; q < n && keys[q] == key; ++q)
        acc = addRn(acc, toF32(dy[index[q] * row + j]));
      out[static_cast<int64_t>(key) * row + j] = fromF32<TO>(acc);
    }
  }
}

struct GatherGradScratch {
  uint32_t *keysIn, *keysOut;
  int64_t *indexIn, *indexOut;
  void *cubTemp;
  size_t cubBytes;
};

size_t gatherGradFixedBytes(int64_t n) {
  return 2 * alignUp(n * sizeof(uint32_t)) + 2 * alignUp(n * sizeof(int64_t));
}

cudaError_t cubSortBytes(int64_t n, int64_t local, size_t *bytes) {
  *bytes = 0;
  return cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const uint32_t *>(nullptr),
      static_cast<uint32_t *>(nullptr), static_cast<const int64_t *>(nullptr),
      static_cast<int64_t *>(nullptr), n, 0, sortEndBit(local));
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void ceRowLossKernel(const T *x, const int64_t *labels, int64_t rows,
                                int64_t v, double *rowLoss,
                                DeviceStatus *status) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t l = labels[r];
    if (l < 0 || l >= v) { // block-uniform
      if (threadIdx.x == 0) {
        recordStatus(status, DeviceStatus::LabelOutOfRange, r, l, v);
        rowLoss[r] = 0.0;
      }
      continue;
    }
    const T *xr = x + r * v;
    MaxSum st = maxSumEmpty();
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
      st = maxSumAdd(st, toF32(xr[j]));
    st = blockReduce(st, MergeOp(), maxSumEmpty());
    if (threadIdx.x == 0)
      rowLoss[r] = ::log(st.s) + static_cast<double>(st.m) - toF32(xr[l]);
  }
}

/// One block: out = sum_r term(r) in f64, a fixed order. term is rowLoss[r]
/// when rowMax is null, else log(sumExp) + (float)rowMax - target.
__global__ void ceTotalKernel(const double *rowLoss, const double *rowMax,
                              const double *sumExp, const double *target,
                              int64_t rows, float *out) {
  double s = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    if (rowMax)
      s += ::log(sumExp[r]) +
           static_cast<double>(static_cast<float>(rowMax[r])) - target[r];
    else
      s += rowLoss[r];
  }
  s = blockReduce(s, SumOp(), 0.0);
  if (threadIdx.x == 0)
    *out = static_cast<float>(s);
}

template <typename T>
__global__ void ceGradKernel(const T *x, const int64_t *labels, int64_t rows,
                             int64_t v, const float *dloss, T *g,
                             DeviceStatus *status) {
  double scale = *dloss;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t l = labels[r];
    const T *xr = x + r * v;
    T *gr = g + r * v;
    if (l < 0 || l >= v) { // block-uniform
      if (threadIdx.x == 0)
        recordStatus(status, DeviceStatus::LabelOutOfRange, r, l, v);
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
        gr[j] = fromF32<T>(0.0f);
      continue;
    }
    MaxSum st = maxSumEmpty();
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
      st = maxSumAdd(st, toF32(xr[j]));
    st = blockReduce(st, MergeOp(), maxSumEmpty());
    double lse = ::log(st.s) + static_cast<double>(st.m);
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      double p = ::exp(static_cast<double>(toF32(xr[j])) - lse);
      gr[j] =
          fromF32<T>(static_cast<float>((p - (j == l ? 1.0 : 0.0)) * scale));
    }
  }
}

template <typename T>
__global__ void ceRowMaxKernel(const T *x, int64_t rows, int64_t v,
                               double *rowMax) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
      m = fmaxf(m, toF32(x[r * v + j]));
    m = blockReduce(m, MaxOp(), -INFINITY);
    if (threadIdx.x == 0)
      rowMax[r] = m;
  }
}

template <typename T>
__global__ void ceRowSumsKernel(const T *x, const int64_t *labels, int64_t rows,
                                int64_t v, int64_t offset, int64_t vocab,
                                const double *rowMax, double *sumExp,
                                double *target, DeviceStatus *status) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * v;
    float mx = static_cast<float>(rowMax[r]);
    double s = 0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
      s += ::exp(static_cast<double>(toF32(xr[j])) - mx);
    s = blockReduce(s, SumOp(), 0.0);
    if (threadIdx.x == 0) {
      sumExp[r] = s;
      int64_t l = labels[r];
      bool bad = l < 0 || l >= vocab;
      if (bad)
        recordStatus(status, DeviceStatus::LabelOutOfRange, r, l, vocab);
      if (target)
        target[r] = !bad && l >= offset && l < offset + v
                        ? static_cast<double>(toF32(xr[l - offset]))
                        : 0.0;
    }
  }
}

template <typename T>
__global__ void
ceGradFromStatsKernel(const T *x, const int64_t *labels, int64_t rows,
                      int64_t v, int64_t offset, const double *rowMax,
                      const double *sumExp, const float *dloss, T *g) {
  double scale = *dloss;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t l = labels[r] - offset; // local column of the label, maybe outside
    double lse =
        ::log(sumExp[r]) + static_cast<double>(static_cast<float>(rowMax[r]));
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      double p = ::exp(static_cast<double>(toF32(x[r * v + j])) - lse);
      g[r * v + j] =
          fromF32<T>(static_cast<float>((p - (j == l ? 1.0 : 0.0)) * scale));
    }
  }
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

constexpr int kOptThreads = 256;
/// Blocks per multi-tensor chunk in the optimizer kernels: each block of
/// kOptThreads threads takes 1/kOptBlocksPerChunk of a chunk (32 elements a
/// thread), so that a launch for one large tensor fills the GPU. With one
/// block per 65536-element chunk, a 768 x 3072 weight got 36 blocks on an
/// H100's 132 SMs, and the AdamW updates of a GPT-2-small step ran at about
/// 480 GB/s (9.5 ms of a 71 ms step).
constexpr int kOptBlocksPerChunk = 8;
static_assert(kMultiTensorChunk % kOptBlocksPerChunk == 0,
              "a chunk splits evenly over its blocks");

/// The element range [begin, end) of this block of a multi-tensor launch
/// whose chunk list (slot, chunk) has kOptBlocksPerChunk blocks per entry;
/// sets `slot` to the entry's tensor slot. Empty past the tensor's end.
__device__ inline void optimizerRange(const uint8_t *slots,
                                      const int32_t *chunks,
                                      const int64_t *numel, int &slot,
                                      int64_t &begin, int64_t &end) {
  constexpr int64_t kPart = kMultiTensorChunk / kOptBlocksPerChunk;
  unsigned entry = blockIdx.x / kOptBlocksPerChunk;
  unsigned part = blockIdx.x % kOptBlocksPerChunk;
  slot = slots[entry];
  begin = static_cast<int64_t>(chunks[entry]) * kMultiTensorChunk +
          static_cast<int64_t>(part) * kPart;
  end = std::min(numel[slot], begin + kPart);
}

struct SgdArgs {
  const float *p[kMultiTensorMaxTensors];
  const float *g[kMultiTensorMaxTensors];
  float *pOut[kMultiTensorMaxTensors];
  int64_t numel[kMultiTensorMaxTensors];
  uint8_t slot[kMultiTensorMaxBlocks];
  int32_t chunk[kMultiTensorMaxBlocks];
};

struct AdamWArgs {
  const float *p[kMultiTensorMaxTensors];
  const float *g[kMultiTensorMaxTensors];
  const float *m[kMultiTensorMaxTensors];
  const float *v[kMultiTensorMaxTensors];
  float *pOut[kMultiTensorMaxTensors];
  float *mOut[kMultiTensorMaxTensors];
  float *vOut[kMultiTensorMaxTensors];
  int64_t numel[kMultiTensorMaxTensors];
  uint8_t slot[kMultiTensorMaxBlocks];
  int32_t chunk[kMultiTensorMaxBlocks];
};

static_assert(sizeof(AdamWArgs) <= 4000, "kernel parameters over 4 KiB");
static_assert(kMultiTensorMaxTensors <= 256, "slot is a uint8_t");

__global__ void sgdKernel(SgdArgs a, const float *lr, double weightDecay) {
  SgdCoeffs c = sgdCoeffs(static_cast<double>(*lr), weightDecay);
  int s;
  int64_t begin, end;
  optimizerRange(a.slot, a.chunk, a.numel, s, begin, end);
  const float *p = a.p[s], *g = a.g[s];
  float *po = a.pOut[s];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    po[i] = sgdElement(c, p[i], g[i]);
}

__global__ void adamwKernel(AdamWArgs a, const float *step, const float *lr,
                            double beta1, double beta2, double eps,
                            double weightDecay) {
  AdamWCoeffs c =
      adamwCoeffs(static_cast<double>(*step), static_cast<double>(*lr), beta1,
                  beta2, eps, weightDecay);
  int s;
  int64_t begin, end;
  optimizerRange(a.slot, a.chunk, a.numel, s, begin, end);
  const float *p = a.p[s], *g = a.g[s], *m = a.m[s], *v = a.v[s];
  float *po = a.pOut[s], *mo = a.mOut[s], *vo = a.vOut[s];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adamwElement(c, g[i], pi, mi, vi);
    po[i] = pi;
    mo[i] = mi;
    vo[i] = vi;
  }
}

std::vector<int64_t> numels(const int64_t *first, size_t count, size_t stride) {
  std::vector<int64_t> n(count);
  const char *p = reinterpret_cast<const char *>(first);
  for (size_t i = 0; i < count; ++i)
    n[i] = *reinterpret_cast<const int64_t *>(p + i * stride);
  return n;
}

template <typename T> const T *in(const Tensor &t) {
  return static_cast<const T *>(t.raw());
}
template <typename T> T *outPtr(Tensor &t) { return static_cast<T *>(t.raw()); }

} // namespace

//===----------------------------------------------------------------------===//
// Public entry points
//===----------------------------------------------------------------------===//

cudaError_t layerNorm(const Tensor &x, const Tensor &gamma, const Tensor &beta,
                      int64_t axis, float epsilon, Tensor &out,
                      cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.rows == 0 || rc.cols == 0)
    return cudaSuccess;
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    layerNormKernel<T>
        <<<rowGrid(rc.rows), rowBlockThreads(rc.cols), 0, stream>>>(
            in<T>(x), in<T>(gamma), in<T>(beta), outPtr<T>(out), rc.rows,
            rc.cols, epsilon);
    return cudaGetLastError();
  });
}

size_t layerNormGradScratchBytes(const std::vector<int64_t> &shape,
                                 int64_t axis) {
  RowsCols rc = splitRows(shape, axis);
  return 2 * alignUp(rc.rows * sizeof(double)) +
         2 * alignUp(lnGroups(rc.rows) * rc.cols * sizeof(double));
}

cudaError_t layerNormGrad(const Tensor &x, const Tensor &gamma,
                          const Tensor &dy, int64_t axis, float epsilon,
                          Tensor &dx, Tensor &dgamma, Tensor &dbeta,
                          void *scratch, cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.cols == 0)
    return cudaSuccess;
  int64_t groups = lnGroups(rc.rows);
  int64_t per = groups ? (rc.rows + groups - 1) / groups : 0;
  char *base = static_cast<char *>(scratch);
  double *mean = reinterpret_cast<double *>(base);
  base += alignUp(rc.rows * sizeof(double));
  double *rstd = reinterpret_cast<double *>(base);
  base += alignUp(rc.rows * sizeof(double));
  double *dgPart = reinterpret_cast<double *>(base);
  base += alignUp(groups * rc.cols * sizeof(double));
  double *dbPart = reinterpret_cast<double *>(base);
  return dispatchFloat(x.dtype(), [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    int threads = rowBlockThreads(rc.cols);
    if (rc.rows > 0) {
      rowStatsKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), rc.rows, rc.cols, epsilon, mean, rstd);
      dim3 grid(
          static_cast<unsigned>((rc.cols + kLnTileCols - 1) / kLnTileCols),
          static_cast<unsigned>(groups));
      lnPartialKernel<T><<<grid, dim3(kLnTileCols, kLnTileRows), 0, stream>>>(
          in<T>(x), in<T>(dy), mean, rstd, rc.rows, rc.cols, per, dgPart,
          dbPart);
    }
    lnFinalKernel<T><<<gridFor(rc.cols), kThreadsPerBlock, 0, stream>>>(
        dgPart, dbPart, groups, rc.cols, outPtr<T>(dgamma), outPtr<T>(dbeta));
    if (rc.rows > 0) // after the partial sums: dx may be dy
      lnDxKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), in<T>(gamma), in<T>(dy), mean, rstd, rc.rows, rc.cols,
          outPtr<T>(dx));
    return cudaGetLastError();
  });
}

cudaError_t rmsNorm(const Tensor &x, const Tensor &gamma, int64_t axis,
                    float epsilon, Tensor &out, cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.rows == 0 || rc.cols == 0)
    return cudaSuccess;
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    rmsNormKernel<T><<<rowGrid(rc.rows), rowBlockThreads(rc.cols), 0, stream>>>(
        in<T>(x), in<T>(gamma), outPtr<T>(out), rc.rows, rc.cols, epsilon);
    return cudaGetLastError();
  });
}

size_t rmsNormGradScratchBytes(const std::vector<int64_t> &shape,
                               int64_t axis) {
  RowsCols rc = splitRows(shape, axis);
  return alignUp(rc.rows * sizeof(double)) +
         alignUp(lnGroups(rc.rows) * rc.cols * sizeof(double));
}

cudaError_t rmsNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                        int64_t axis, float epsilon, Tensor &dx, Tensor &dgamma,
                        void *scratch, cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.cols == 0)
    return cudaSuccess;
  int64_t groups = lnGroups(rc.rows);
  int64_t per = groups ? (rc.rows + groups - 1) / groups : 0;
  char *base = static_cast<char *>(scratch);
  double *rstd = reinterpret_cast<double *>(base);
  base += alignUp(rc.rows * sizeof(double));
  double *dgPart = reinterpret_cast<double *>(base);
  return dispatchFloat(x.dtype(), [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    int threads = rowBlockThreads(rc.cols);
    if (rc.rows > 0) {
      rmsRstdKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), rc.rows, rc.cols, epsilon, rstd);
      dim3 grid(
          static_cast<unsigned>((rc.cols + kLnTileCols - 1) / kLnTileCols),
          static_cast<unsigned>(groups));
      rmsPartialKernel<T><<<grid, dim3(kLnTileCols, kLnTileRows), 0, stream>>>(
          in<T>(x), in<T>(dy), rstd, rc.rows, rc.cols, per, dgPart);
    }
    rmsFinalKernel<T><<<gridFor(rc.cols), kThreadsPerBlock, 0, stream>>>(
        dgPart, groups, rc.cols, outPtr<T>(dgamma));
    if (rc.rows > 0) // after the partial sums: dx may be dy
      rmsDxKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), in<T>(gamma), in<T>(dy), rstd, rc.rows, rc.cols,
          outPtr<T>(dx));
    return cudaGetLastError();
  });
}

cudaError_t softmax(const Tensor &x, int64_t axis, Tensor &out,
                    cudaStream_t stream) {
  AxisSplit s = splitAxis(x.shape(), axis);
  if (x.numel() == 0)
    return cudaSuccess;
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (s.inner == 1)
      softmaxRowKernel<T>
          <<<rowGrid(s.outer), rowBlockThreads(s.n), 0, stream>>>(
              in<T>(x), outPtr<T>(out), s.outer, s.n);
    else
      softmaxLineKernel<T><<<gridFor(s.lines()), kThreadsPerBlock, 0, stream>>>(
          in<T>(x), outPtr<T>(out), s);
    return cudaGetLastError();
  });
}

cudaError_t softmaxGrad(const Tensor &y, const Tensor &dy, int64_t axis,
                        Tensor &dx, cudaStream_t stream) {
  AxisSplit s = splitAxis(y.shape(), axis);
  if (y.numel() == 0)
    return cudaSuccess;
  return dispatchFloat(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (s.inner == 1)
      softmaxGradRowKernel<T>
          <<<rowGrid(s.outer), rowBlockThreads(s.n), 0, stream>>>(
              in<T>(y), in<T>(dy), outPtr<T>(dx), s.outer, s.n);
    else
      softmaxGradLineKernel<T>
          <<<gridFor(s.lines()), kThreadsPerBlock, 0, stream>>>(
              in<T>(y), in<T>(dy), outPtr<T>(dx), s);
    return cudaGetLastError();
  });
}

cudaError_t gatherMasked(const Tensor &table, const Tensor &ids, int64_t offset,
                         int64_t vocab, Tensor &out, DeviceStatus *status,
                         cudaStream_t stream) {
  if (table.rank() < 1 || ids.dtype() != DType::I64 ||
      out.dtype() != table.dtype())
    return cudaErrorInvalidValue;
  int64_t n = ids.numel(), local = table.dim(0);
  int64_t row = 1;
  for (int64_t d = 1; d < table.rank(); ++d)
    row *= table.dim(d);
  if (n == 0)
    return cudaSuccess;
  const int64_t *pid = in<int64_t>(ids);
  if (row == 0) {
    checkIdsKernel<<<gridFor(n), kThreadsPerBlock, 0, stream>>>(pid, n, vocab,
                                                                status);
    return cudaGetLastError();
  }
  auto launch = [&](auto zero) {
    using E = decltype(zero);
    gatherKernel<E><<<gridFor(n * row), kThreadsPerBlock, 0, stream>>>(
        in<E>(table), pid, outPtr<E>(out), n, row, offset, local, vocab,
        status);
    return cudaGetLastError();
  };
  switch (dtypeSize(table.dtype())) {
  case 1:
    return launch(uint8_t(0));
  case 2:
    return launch(uint16_t(0));
  case 4:
    return launch(uint32_t(0));
  case 8:
    return launch(uint64_t(0));
  default:
    return cudaErrorInvalidValue;
  }
}

cudaError_t gather(const Tensor &table, const Tensor &ids, Tensor &out,
                   DeviceStatus *status, cudaStream_t stream) {
  if (table.rank() < 1)
    return cudaErrorInvalidValue;
  return gatherMasked(table, ids, 0, table.dim(0), out, status, stream);
}

cudaError_t gatherGradScratchBytes(int64_t numIds, int64_t localRows,
                                   size_t *bytes) {
  *bytes = 0;
  if (localRows >= (int64_t(1) << 32) - 1)
    return cudaErrorInvalidValue;
  size_t cubBytes = 0;
  if (numIds > 0)
    if (cudaError_t err = cubSortBytes(numIds, localRows, &cubBytes))
      return err;
  *bytes = gatherGradFixedBytes(numIds) + alignUp(cubBytes);
  return cudaSuccess;
}

cudaError_t gatherGradMasked(const Tensor &ids, const Tensor &dy,
                             int64_t offset, int64_t vocab, Tensor &out,
                             void *scratch, DeviceStatus *status,
                             cudaStream_t stream) {
  if (out.rank() < 1 || ids.dtype() != DType::I64)
    return cudaErrorInvalidValue;
  int64_t n = ids.numel(), local = out.dim(0);
  if (local >= (int64_t(1) << 32) - 1)
    return cudaErrorInvalidValue;
  int64_t row = 1;
  for (int64_t d = 1; d < out.rank(); ++d)
    row *= out.dim(d);
  if (out.bytes())
    if (cudaError_t err = cudaMemsetAsync(out.raw(), 0, out.bytes(), stream))
      return err;
  if (n == 0)
    return cudaGetLastError();
  char *base = static_cast<char *>(scratch);
  GatherGradScratch s;
  s.keysIn = reinterpret_cast<uint32_t *>(base);
  base += alignUp(n * sizeof(uint32_t));
  s.keysOut = reinterpret_cast<uint32_t *>(base);
  base += alignUp(n * sizeof(uint32_t));
  s.indexIn = reinterpret_cast<int64_t *>(base);
  base += alignUp(n * sizeof(int64_t));
  s.indexOut = reinterpret_cast<int64_t *>(base);
  base += alignUp(n * sizeof(int64_t));
  s.cubTemp = base;
  if (cudaError_t err = cubSortBytes(n, local, &s.cubBytes))
    return err;
  gatherGradKeysKernel<<<gridFor(n), kThreadsPerBlock, 0, stream>>>(
      in<int64_t>(ids), n, offset, local, vocab, s.keysIn, s.indexIn, status);
  if (cudaError_t err = cudaGetLastError())
    return err;
  if (row == 0)
    return cudaSuccess;
  if (cudaError_t err = cub::DeviceRadixSort::SortPairs(
          s.cubTemp, s.cubBytes, s.keysIn, s.keysOut, s.indexIn, s.indexOut, n,
          0, sortEndBit(local), stream))
    return err;
  int threads = static_cast<int>(
      std::min<int64_t>(256, std::max<int64_t>(32, (row + 31) / 32 * 32)));
  return dispatchFloat(dy.dtype(), [&](auto dyTag) {
    using TD = typename decltype(dyTag)::type;
    return dispatchFloat(out.dtype(), [&](auto outTag) {
      using TO = typename decltype(outTag)::type;
      gatherGradSumKernel<TD, TO><<<rowGrid(n), threads, 0, stream>>>(
          s.keysOut, s.indexOut, in<TD>(dy), n, row,
          static_cast<uint32_t>(local), outPtr<TO>(out));
      return cudaGetLastError();
    });
  });
}

cudaError_t gatherGrad(const Tensor &ids, const Tensor &dy, Tensor &out,
                       void *scratch, DeviceStatus *status,
                       cudaStream_t stream) {
  if (out.rank() < 1)
    return cudaErrorInvalidValue;
  return gatherGradMasked(ids, dy, 0, out.dim(0), out, scratch, status, stream);
}

size_t crossEntropyScratchBytes(int64_t rows) {
  return alignUp(std::max<int64_t>(rows, 1) * sizeof(double));
}

cudaError_t crossEntropy(const Tensor &logits, const Tensor &labels,
                         Tensor &out, void *scratch, DeviceStatus *status,
                         cudaStream_t stream) {
  if (logits.rank() != 2 || labels.dtype() != DType::I64 ||
      out.dtype() != DType::F32)
    return cudaErrorInvalidValue;
  int64_t n = logits.dim(0), v = logits.dim(1);
  double *rowLoss = static_cast<double *>(scratch);
  return dispatchFloat(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n > 0)
      ceRowLossKernel<T><<<rowGrid(n), rowBlockThreads(v), 0, stream>>>(
          in<T>(logits), in<int64_t>(labels), n, v, rowLoss, status);
    ceTotalKernel<<<1, 512, 0, stream>>>(rowLoss, nullptr, nullptr, nullptr, n,
                                         outPtr<float>(out));
    return cudaGetLastError();
  });
}

cudaError_t crossEntropyGrad(const Tensor &logits, const Tensor &labels,
                             const Tensor &dloss, Tensor &dlogits,
                             DeviceStatus *status, cudaStream_t stream) {
  if (logits.rank() != 2 || labels.dtype() != DType::I64 ||
      dloss.dtype() != DType::F32 || dlogits.dtype() != logits.dtype())
    return cudaErrorInvalidValue;
  int64_t n = logits.dim(0), v = logits.dim(1);
  if (n == 0)
    return cudaSuccess;
  return dispatchFloat(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ceGradKernel<T><<<rowGrid(n), rowBlockThreads(v), 0, stream>>>(
        in<T>(logits), in<int64_t>(labels), n, v, in<float>(dloss),
        outPtr<T>(dlogits), status);
    return cudaGetLastError();
  });
}

cudaError_t crossEntropyRowMax(const Tensor &logits, double *rowMax,
                               cudaStream_t stream) {
  if (logits.rank() != 2)
    return cudaErrorInvalidValue;
  int64_t n = logits.dim(0), v = logits.dim(1);
  if (n == 0)
    return cudaSuccess;
  return dispatchFloat(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ceRowMaxKernel<T><<<rowGrid(n), rowBlockThreads(v), 0, stream>>>(
        in<T>(logits), n, v, rowMax);
    return cudaGetLastError();
  });
}

cudaError_t crossEntropyRowSums(const Tensor &logits, const Tensor &labels,
                                int64_t offset, int64_t vocab,
                                const double *rowMax, double *sumExp,
                                double *target, DeviceStatus *status,
                                cudaStream_t stream) {
  if (logits.rank() != 2 || labels.dtype() != DType::I64)
    return cudaErrorInvalidValue;
  int64_t n = logits.dim(0), v = logits.dim(1);
  if (n == 0)
    return cudaSuccess;
  return dispatchFloat(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ceRowSumsKernel<T><<<rowGrid(n), rowBlockThreads(v), 0, stream>>>(
        in<T>(logits), in<int64_t>(labels), n, v, offset, vocab, rowMax, sumExp,
        target, status);
    return cudaGetLastError();
  });
}

cudaError_t crossEntropyFromStats(int64_t rows, const double *rowMax,
                                  const double *sumExp, const double *target,
                                  Tensor &out, cudaStream_t stream) {
  if (out.dtype() != DType::F32 || !rowMax)
    return cudaErrorInvalidValue;
  ceTotalKernel<<<1, 512, 0, stream>>>(nullptr, rowMax, sumExp, target, rows,
                                       outPtr<float>(out));
  return cudaGetLastError();
}

cudaError_t crossEntropyGradFromStats(const Tensor &logits,
                                      const Tensor &labels, int64_t offset,
                                      const double *rowMax,
                                      const double *sumExp, const Tensor &dloss,
                                      Tensor &dlogits, cudaStream_t stream) {
  if (logits.rank() != 2 || labels.dtype() != DType::I64 ||
      dloss.dtype() != DType::F32 || dlogits.dtype() != logits.dtype())
    return cudaErrorInvalidValue;
  int64_t n = logits.dim(0), v = logits.dim(1);
  if (n == 0)
    return cudaSuccess;
  return dispatchFloat(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ceGradFromStatsKernel<T><<<rowGrid(n), rowBlockThreads(v), 0, stream>>>(
        in<T>(logits), in<int64_t>(labels), n, v, offset, rowMax, sumExp,
        in<float>(dloss), outPtr<T>(dlogits));
    return cudaGetLastError();
  });
}

cudaError_t sgdUpdateMulti(const SgdTensor *tensors, size_t count,
                           const float *lr, double weightDecay,
                           cudaStream_t stream) {
  if (!count)
    return cudaSuccess;
  for (const MultiTensorLaunch &l :
       planMultiTensor(numels(&tensors[0].numel, count, sizeof(SgdTensor)))) {
    SgdArgs a = {};
    for (size_t k = 0; k < l.tensors.size(); ++k) {
      const SgdTensor &t = tensors[l.tensors[k]];
      a.p[k] = t.p;
      a.g[k] = t.grad;
      a.pOut[k] = t.pOut;
      a.numel[k] = t.numel;
    }
    for (size_t b = 0; b < l.blockSlot.size(); ++b) {
      a.slot[b] = static_cast<uint8_t>(l.blockSlot[b]);
      a.chunk[b] = static_cast<int32_t>(l.blockChunk[b]);
    }
    sgdKernel<<<static_cast<unsigned>(l.blockSlot.size() * kOptBlocksPerChunk),
                kOptThreads, 0, stream>>>(a, lr, weightDecay);
    if (cudaError_t err = cudaGetLastError())
      return err;
  }
  return cudaSuccess;
}

cudaError_t adamwUpdateMulti(const AdamWTensor *tensors, size_t count,
                             const float *step, const float *lr, double beta1,
                             double beta2, double eps, double weightDecay,
                             cudaStream_t stream) {
  if (!count)
    return cudaSuccess;
  for (const MultiTensorLaunch &l :
       planMultiTensor(numels(&tensors[0].numel, count, sizeof(AdamWTensor)))) {
    AdamWArgs a = {};
    for (size_t k = 0; k < l.tensors.size(); ++k) {
      const AdamWTensor &t = tensors[l.tensors[k]];
      a.p[k] = t.p;
      a.g[k] = t.grad;
      a.m[k] = t.m;
      a.v[k] = t.v;
      a.pOut[k] = t.pOut;
      a.mOut[k] = t.mOut;
      a.vOut[k] = t.vOut;
      a.numel[k] = t.numel;
    }
    for (size_t b = 0; b < l.blockSlot.size(); ++b) {
      a.slot[b] = static_cast<uint8_t>(l.blockSlot[b]);
      a.chunk[b] = static_cast<int32_t>(l.blockChunk[b]);
    }
    adamwKernel<<<static_cast<unsigned>(l.blockSlot.size() *
                                        kOptBlocksPerChunk),
                  kOptThreads, 0, stream>>>(a, step, lr, beta1, beta2, eps,
                                            weightDecay);
    if (cudaError_t err = cudaGetLastError())
      return err;
  }
  return cudaSuccess;
}

cudaError_t sgdUpdate(const Tensor &p, const Tensor &g, const Tensor &lr,
                      double weightDecay, Tensor &pOut, cudaStream_t stream) {
  if (p.dtype() != DType::F32 || g.dtype() != DType::F32 ||
      lr.dtype() != DType::F32 || pOut.dtype() != DType::F32)
    return cudaErrorInvalidValue;
  SgdTensor t{in<float>(p), in<float>(g), outPtr<float>(pOut), p.numel()};
  return sgdUpdateMulti(&t, 1, in<float>(lr), weightDecay, stream);
}

cudaError_t adamwUpdate(const Tensor &p, const Tensor &g, const Tensor &m,
                        const Tensor &v, const Tensor &step, const Tensor &lr,
                        double beta1, double beta2, double eps,
                        double weightDecay, Tensor &pOut, Tensor &mOut,
                        Tensor &vOut, cudaStream_t stream) {
  for (const Tensor *t : {&p, &g, &m, &v, &step, &lr})
    if (t->dtype() != DType::F32)
      return cudaErrorInvalidValue;
  AdamWTensor t{in<float>(p),        in<float>(g),
                in<float>(m),        in<float>(v),
                outPtr<float>(pOut), outPtr<float>(mOut),
                outPtr<float>(vOut), p.numel()};
  return adamwUpdateMulti(&t, 1, in<float>(step), in<float>(lr), beta1, beta2,
                          eps, weightDecay, stream);
}

cudaError_t sgdUpdateTensors(const Tensor *const *ins, Tensor *out, size_t n,
                             const Tensor &lr, double weightDecay,
                             cudaStream_t stream) {
  if (lr.dtype() != DType::F32)
    return cudaErrorInvalidValue;
  std::vector<SgdTensor> tensors(n);
  for (size_t i = 0; i < n; ++i) {
    if (ins[i]->dtype() != DType::F32 || ins[n + i]->dtype() != DType::F32 ||
        out[i].dtype() != DType::F32)
      return cudaErrorInvalidValue;
    tensors[i] = {in<float>(*ins[i]), in<float>(*ins[n + i]),
                  outPtr<float>(out[i]), ins[i]->numel()};
  }
  return sgdUpdateMulti(tensors.data(), n, in<float>(lr), weightDecay, stream);
}

cudaError_t adamwUpdateTensors(const Tensor *const *ins, Tensor *out, size_t n,
                               const Tensor &step, const Tensor &lr,
                               double beta1, double beta2, double eps,
                               double weightDecay, cudaStream_t stream) {
  if (step.dtype() != DType::F32 || lr.dtype() != DType::F32)
    return cudaErrorInvalidValue;
  std::vector<AdamWTensor> tensors(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < 4; ++k)
      if (ins[k * n + i]->dtype() != DType::F32)
        return cudaErrorInvalidValue;
    for (size_t k = 0; k < 3; ++k)
      if (out[k * n + i].dtype() != DType::F32)
        return cudaErrorInvalidValue;
    tensors[i] = {in<float>(*ins[i]),
                  in<float>(*ins[n + i]),
                  in<float>(*ins[2 * n + i]),
                  in<float>(*ins[3 * n + i]),
                  outPtr<float>(out[i]),
                  outPtr<float>(out[n + i]),
                  outPtr<float>(out[2 * n + i]),
                  ins[i]->numel()};
  }
  return adamwUpdateMulti(tensors.data(), n, in<float>(step), in<float>(lr),
                          beta1, beta2, eps, weightDecay, stream);
}

//===----------------------------------------------------------------------===//
// Residual add fused with a norm (tsr-fuse-norm)
//===----------------------------------------------------------------------===//

namespace {

/// hr = xr + rr (rounded to T) over the block's columns. Each thread later
/// reads back only the columns it wrote (the same j stride), so no barrier
/// is needed before the row statistics.
template <typename T>
__device__ void addRow(const T *xr, const T *rr, T *hr, int64_t cols) {
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    hr[j] = fromF32<T>(addRn(toF32(xr[j]), toF32(rr[j])));
}

template <typename T>
__global__ void addLayerNormKernel(const T *x, const T *res, const T *gamma,
                                   const T *beta, T *sum, T *out, int64_t rows,
                                   int64_t cols, float epsilon) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T *hr = sum + r * cols;
    T *yr = out + r * cols;
    addRow(x + r * cols, res + r * cols, hr, cols);
    double mean, rstd;
    rowStats(hr, cols, epsilon, mean, rstd);
    float fm = static_cast<float>(mean), fr = static_cast<float>(rstd);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float v = mulRn(mulRn(toF32(hr[j]) - fm, fr), toF32(gamma[j]));
      yr[j] = fromF32<T>(addRn(v, toF32(beta[j])));
    }
  }
}

template <typename T>
__global__ void addRmsNormKernel(const T *x, const T *res, const T *gamma,
                                 T *sum, T *out, int64_t rows, int64_t cols,
                                 float epsilon) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T *hr = sum + r * cols;
    T *yr = out + r * cols;
    addRow(x + r * cols, res + r * cols, hr, cols);
    float fr = static_cast<float>(rmsRstd(hr, cols, epsilon));
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      yr[j] = fromF32<T>(mulRn(mulRn(toF32(hr[j]), fr), toF32(gamma[j])));
  }
}

/// lnDxKernel with dx = round(dx) + addend.
template <typename T>
__global__ void lnDxAddKernel(const T *x, const T *gamma, const T *dy,
                              const T *addend, const double *mean,
                              const double *rstd, int64_t rows, int64_t cols,
                              T *dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    const T *ar = addend + r * cols;
    T *dxr = dx + r * cols;
    double m = mean[r], s = rstd[r];
    double a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = (toF32(xr[j]) - m) * s;
      double d = static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]);
      a += d;
      b += d * xhat;
    }
    a = blockReduce(a, SumOp(), 0.0);
    b = blockReduce(b, SumOp(), 0.0);
    double mA = a / cols, mB = b / cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = (toF32(xr[j]) - m) * s;
      double d = static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]);
      float g = toF32(fromF32<T>(static_cast<float>(s * (d - mA - xhat * mB))));
      dxr[j] = fromF32<T>(addRn(g, toF32(ar[j])));
    }
  }
}

/// rmsDxKernel with dx = round(dx) + addend.
template <typename T>
__global__ void rmsDxAddKernel(const T *x, const T *gamma, const T *dy,
                               const T *addend, const double *rstd,
                               int64_t rows, int64_t cols, T *dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    const T *dyr = dy + r * cols;
    const T *ar = addend + r * cols;
    T *dxr = dx + r * cols;
    double s = rstd[r];
    double dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = toF32(xr[j]) * s;
      dot += static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]) * xhat;
    }
    dot = blockReduce(dot, SumOp(), 0.0);
    double c = dot / cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double xhat = toF32(xr[j]) * s;
      double g = static_cast<double>(toF32(dyr[j])) * toF32(gamma[j]);
      float v = toF32(fromF32<T>(static_cast<float>(s * (g - xhat * c))));
      dxr[j] = fromF32<T>(addRn(v, toF32(ar[j])));
    }
  }
}

} // namespace

cudaError_t addLayerNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                         const Tensor &beta, int64_t axis, float epsilon,
                         Tensor &sum, Tensor &out, cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.rows == 0 || rc.cols == 0)
    return cudaSuccess;
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    addLayerNormKernel<T>
        <<<rowGrid(rc.rows), rowBlockThreads(rc.cols), 0, stream>>>(
            in<T>(x), in<T>(r), in<T>(gamma), in<T>(beta), outPtr<T>(sum),
            outPtr<T>(out), rc.rows, rc.cols, epsilon);
    return cudaGetLastError();
  });
}

cudaError_t addRmsNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                       int64_t axis, float epsilon, Tensor &sum, Tensor &out,
                       cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.rows == 0 || rc.cols == 0)
    return cudaSuccess;
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    addRmsNormKernel<T>
        <<<rowGrid(rc.rows), rowBlockThreads(rc.cols), 0, stream>>>(
            in<T>(x), in<T>(r), in<T>(gamma), outPtr<T>(sum), outPtr<T>(out),
            rc.rows, rc.cols, epsilon);
    return cudaGetLastError();
  });
}

cudaError_t layerNormGradAdd(const Tensor &x, const Tensor &gamma,
                             const Tensor &dy, const Tensor &addend,
                             int64_t axis, float epsilon, Tensor &dx,
                             Tensor &dgamma, Tensor &dbeta, void *scratch,
                             cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.cols == 0)
    return cudaSuccess;
  int64_t groups = lnGroups(rc.rows);
  int64_t per = groups ? (rc.rows + groups - 1) / groups : 0;
  char *base = static_cast<char *>(scratch);
  double *mean = reinterpret_cast<double *>(base);
  base += alignUp(rc.rows * sizeof(double));
  double *rstd = reinterpret_cast<double *>(base);
  base += alignUp(rc.rows * sizeof(double));
  double *dgPart = reinterpret_cast<double *>(base);
  base += alignUp(groups * rc.cols * sizeof(double));
  double *dbPart = reinterpret_cast<double *>(base);
  return dispatchFloat(x.dtype(), [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    int threads = rowBlockThreads(rc.cols);
    if (rc.rows > 0) {
      rowStatsKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), rc.rows, rc.cols, epsilon, mean, rstd);
      dim3 grid(
          static_cast<unsigned>((rc.cols + kLnTileCols - 1) / kLnTileCols),
          static_cast<unsigned>(groups));
      lnPartialKernel<T><<<grid, dim3(kLnTileCols, kLnTileRows), 0, stream>>>(
          in<T>(x), in<T>(dy), mean, rstd, rc.rows, rc.cols, per, dgPart,
          dbPart);
    }
    lnFinalKernel<T><<<gridFor(rc.cols), kThreadsPerBlock, 0, stream>>>(
        dgPart, dbPart, groups, rc.cols, outPtr<T>(dgamma), outPtr<T>(dbeta));
    if (rc.rows > 0) // after the partial sums: dx may be dy
      lnDxAddKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), in<T>(gamma), in<T>(dy), in<T>(addend), mean, rstd, rc.rows,
          rc.cols, outPtr<T>(dx));
    return cudaGetLastError();
  });
}

cudaError_t rmsNormGradAdd(const Tensor &x, const Tensor &gamma,
                           const Tensor &dy, const Tensor &addend, int64_t axis,
                           float epsilon, Tensor &dx, Tensor &dgamma,
                           void *scratch, cudaStream_t stream) {
  RowsCols rc = splitRows(x.shape(), axis);
  if (rc.cols == 0)
    return cudaSuccess;
  int64_t groups = lnGroups(rc.rows);
  int64_t per = groups ? (rc.rows + groups - 1) / groups : 0;
  char *base = static_cast<char *>(scratch);
  double *rstd = reinterpret_cast<double *>(base);
  base += alignUp(rc.rows * sizeof(double));
  double *dgPart = reinterpret_cast<double *>(base);
  return dispatchFloat(x.dtype(), [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    int threads = rowBlockThreads(rc.cols);
    if (rc.rows > 0) {
      rmsRstdKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), rc.rows, rc.cols, epsilon, rstd);
      dim3 grid(
          static_cast<unsigned>((rc.cols + kLnTileCols - 1) / kLnTileCols),
          static_cast<unsigned>(groups));
      rmsPartialKernel<T><<<grid, dim3(kLnTileCols, kLnTileRows), 0, stream>>>(
          in<T>(x), in<T>(dy), rstd, rc.rows, rc.cols, per, dgPart);
    }
    rmsFinalKernel<T><<<gridFor(rc.cols), kThreadsPerBlock, 0, stream>>>(
        dgPart, groups, rc.cols, outPtr<T>(dgamma));
    if (rc.rows > 0) // after the partial sums: dx may be dy
      rmsDxAddKernel<T><<<rowGrid(rc.rows), threads, 0, stream>>>(
          in<T>(x), in<T>(gamma), in<T>(dy), in<T>(addend), rstd, rc.rows,
          rc.cols, outPtr<T>(dx));
    return cudaGetLastError();
  });
}

} // namespace cuda
} // namespace runtime
} // namespace tessera

//===- FlashAttentionKernels.cuh - FlashAttention device code ---*- CUDA
//-*-===//
//
// The kernels of FlashAttention.cu (see FlashAttention.h for shapes,
// semantics and sources), in a header so that the very same code can be
// compiled by nvcc (FlashAttention.cu) and by a host C++ compiler for the
// host simulation in test/unittests/cuda/FlashAttentionTest.cpp.
//
// Thread layout (all tile kernels, 256 threads): thread t is row group
// ty = t / 16 (rows 4*ty .. 4*ty+3 of a 64-row tile) and column lane
// tx = t % 16 (columns tx + 16*i of a 64-column tile or of the padded head
// dim). A row's 16 lanes are 16 consecutive lanes of one warp, so row
// reductions are __shfl_xor_sync over offsets 8, 4, 2, 1. Every thread of a
// block reaches every __syncthreads and every shuffle (no divergent
// control flow around them).
//
// Shared-memory tiles of the f32 (CUDA-core) kernels are f32 with row
// stride D+1 (or 65) so that the 16 lanes reading column d of 16 different
// rows hit 16 different banks. The tensor-core (WMMA) kernels keep operand
// tiles in the storage type with row stride D+8 (or 72) and f32 tiles with
// row stride D+4 (or 68): WMMA needs ldm % 8 == 0 (16-bit) / % 4 == 0 (f32)
// and 32-byte aligned tile pointers, which these strides and the 128-byte
// aligned dynamic shared memory give for every 16 x 16 tile.
//
// Host compilation (tests only): without __CUDACC__ the includer must
// declare, before including this header, `threadIdx`, `blockIdx`,
// `blockDim`, `gridDim` (objects with an `x` member), `__syncthreads()`,
// `__shfl_xor_sync(unsigned, float, int)`, `float *flashSharedMemory()` and
// the parts of `nvcuda::wmma` used here (fragment, fill_fragment,
// load_matrix_sync, mma_sync, store_matrix_sync), and run each block's 256
// threads concurrently.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_FLASHATTENTIONKERNELS_CUH
#define TESSERA_RUNTIME_BACKENDS_CUDA_FLASHATTENTIONKERNELS_CUH

#include "runtime/backends/cuda/CudaDType.cuh"
#include "runtime/backends/cuda/FlashAttention.h"

#ifdef __CUDACC__
#include <mma.h>
#define TESSERA_FLASH_KERNEL __global__ void __launch_bounds__(kFlashThreads)
#else
#define TESSERA_FLASH_KERNEL void
#endif

namespace tessera {
namespace runtime {
namespace cuda {
namespace flash_detail {
// Internal linkage on purpose: the nvcc build (with its host-side kernel
// stubs) and a host-compiled simulation in a test must never be merged by
// the linker.
namespace {

#ifdef __CUDACC__
/// The block's dynamic shared memory.
__device__ __forceinline__ float *flashSharedMemory() {
  extern __shared__ __align__(128) float flashSmem[];
  return flashSmem;
}
#endif

constexpr int kRows = kFlashRowsPerThread;       // rows per thread
constexpr int kLanes = kFlashColLanes;           // lanes per row
constexpr int kTileCols = kFlashBlockK / kLanes; // tile columns per lane
constexpr int kPStride = kFlashBlockK + 1;       // row stride of P/dS tiles
static_assert(kFlashBlockQ == kRows * (kFlashThreads / kLanes),
              "row groups must cover a query tile");
static_assert(kFlashBlockK == kFlashBlockQ,
              "the backward kernels use one layout for both tile kinds");

/// Arguments shared by the kernels (element counts, not bytes).
template <typename T> struct FlashArgs {
  /// batch: query rows (B·H); group: query heads per K/V head (GQA's n_rep,
  /// 1 for multi-head attention): query row b reads K/V row b / group.
  int64_t batch, group, sq, sk;
  int dh, dv;
  float scale;
  bool causal;
  int64_t qTiles, kTiles; // ceil(sq / 64), ceil(sk / 64)
  const T *q, *k, *v, *o, *dout;
  const float *mask, *lse, *delta;
  T *out, *dq, *dk, *dv_;
  float *lseOut;
};

/// Max and sum over the 16 lanes of a row (lanes of one half warp).
__device__ __forceinline__ float rowMax16(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float rowSum16(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/// Stages rows [0, 64) x cols [0, D) of a row-major tile (row stride `ld`
/// elements, `rows` valid rows, `cols` valid columns) into shared memory as
/// f32 with row stride D+1; everything outside the valid range is 0.
template <int D, typename T>
__device__ __forceinline__ void loadTile(float *dst, const T *src, int64_t rows,
                                         int cols, int64_t ld) {
  for (int e = threadIdx.x; e < kFlashBlockQ * D; e += kFlashThreads) {
    const int r = e / D;
    const int c = e % D;
    float x = 0.0f;
    if (r < rows && c < cols)
      x = toF32(src[r * ld + c]);
    dst[r * (D + 1) + c] = x;
  }
}

/// Turns this thread's 4 x 4 dot products (rows rowBase + 4 ty + a, columns
/// colBase + tx + 16 i) into scores: scale * dot + mask, or -inf for a
/// disallowed or out-of-range pair. `transposed`: rows are keys and columns
/// queries (the mask is read at [query][key]).
__device__ __forceinline__ void
finishScores(const float (&dot)[kRows][kTileCols], int ty, int tx,
             int64_t rowBase, int64_t colBase, int64_t sq, int64_t sk,
             bool causal, bool transposed, const float *mask, float scale,
             float (&s)[kRows][kTileCols]) {
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
#pragma unroll
    for (int i = 0; i < kTileCols; ++i) {
      const int64_t r = rowBase + ty * kRows + a;
      const int64_t c = colBase + tx + kLanes * i;
      const int64_t qi = transposed ? c : r;
      const int64_t kj = transposed ? r : c;
      float x = -INFINITY;
      if (flashKeyAllowed(qi, kj, sq, sk, causal))
        x = flashScore(dot[a][i], scale, mask ? mask[qi * sk + kj] : 0.0f);
      s[a][i] = x;
    }
  }
}

/// Scores of this thread's 4 x 4 (row, column) pairs of a tile: rows
/// aRows[a] (tile rows of A, global rows rowBase + a-th row), columns
/// tx + 16 i of B; s = scale * A[r] . B[c] (+ mask), -inf when disallowed.
/// `transposed` means the tile rows are keys and the columns queries (the
/// dK/dV kernel): the mask is then read at [query][key].
template <int D>
__device__ __forceinline__ void
tileScores(const float *A, const float *B, int depth, int ty, int tx,
           int64_t rowBase, int64_t colBase, int64_t sq, int64_t sk,
           bool causal, bool transposed, const float *mask, float scale,
           float (&s)[kRows][kTileCols]) {
  float acc[kRows][kTileCols];
#pragma unroll
  for (int a = 0; a < kRows; ++a)
#pragma unroll
    for (int i = 0; i < kTileCols; ++i)
      acc[a][i] = 0.0f;
  for (int d = 0; d < depth; ++d) {
    float av[kRows], bv[kTileCols];
#pragma unroll
    for (int a = 0; a < kRows; ++a)
      av[a] = A[(ty * kRows + a) * (D + 1) + d];
#pragma unroll
    for (int i = 0; i < kTileCols; ++i)
      bv[i] = B[(tx + kLanes * i) * (D + 1) + d];
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < kTileCols; ++i)
        acc[a][i] = fmaf(av[a], bv[i], acc[a][i]);
  }
  finishScores(acc, ty, tx, rowBase, colBase, sq, sk, causal, transposed, mask,
               scale, s);
}

/// acc[a][i] += sum_j P[row a][j] * M[j][tx + 16 i] over the 64 rows j of
/// M (P: [64][65] in shared memory, M: [64][D+1]).
template <int D>
__device__ __forceinline__ void tileMatmulAcc(const float *P, const float *M,
                                              int ty, int tx,
                                              float (&acc)[kRows][D / kLanes]) {
  for (int j = 0; j < kFlashBlockK; ++j) {
    float pv[kRows], mv[D / kLanes];
#pragma unroll
    for (int a = 0; a < kRows; ++a)
      pv[a] = P[(ty * kRows + a) * kPStride + j];
#pragma unroll
    for (int i = 0; i < D / kLanes; ++i)
      mv[i] = M[j * (D + 1) + tx + kLanes * i];
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < D / kLanes; ++i)
        acc[a][i] = fmaf(pv[a], mv[i], acc[a][i]);
  }
}

/// Stores this thread's rows of a [64][D] accumulator (times `mul[a]`) to
/// global rows rowBase + 4 ty + a (< nRows), columns tx + 16 i (< cols).
template <int D, typename T>
__device__ __forceinline__ void
storeRows(T *dst, const float (&acc)[kRows][D / kLanes],
          const float (&mul)[kRows], int ty, int tx, int64_t rowBase,
          int64_t nRows, int cols) {
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    const int64_t r = rowBase + ty * kRows + a;
    if (r >= nRows)
      continue;
#pragma unroll
    for (int i = 0; i < D / kLanes; ++i) {
      const int c = tx + kLanes * i;
      if (c < cols)
        dst[r * cols + c] = fromF32<T>(acc[a][i] * mul[a]);
    }
  }
}

/// Linear block index -> (batch, tile). With `reverse` the tiles of a batch
/// are taken last to first: with causal masking the last query tiles and
/// the first key tiles have the most work, and starting them first shortens
/// the tail.
__device__ __forceinline__ void blockTile(int64_t tiles, bool reverse,
                                          int64_t &b, int64_t &tile) {
  const int64_t id = blockIdx.x;
  b = id / tiles;
  tile = reverse ? tiles - 1 - id % tiles : id % tiles;
}

//===----------------------------------------------------------------------===//
// Forward: one block per (batch, query tile), looping over key tiles.
//===----------------------------------------------------------------------===//

template <typename T, int D>
TESSERA_FLASH_KERNEL flashForwardKernel(FlashArgs<T> p) {
  float *smem = flashSharedMemory();
  float *Qs = smem;
  float *Ks = Qs + kFlashBlockQ * (D + 1);
  float *Vs = Ks + kFlashBlockK * (D + 1);
  float *Ps = Vs + kFlashBlockK * (D + 1);
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  int64_t b, qt;
  blockTile(p.qTiles, /*reverse=*/true, b, qt);
  const int64_t q0 = qt * kFlashBlockQ;
  const T *kb = p.k + (b / p.group) * p.sk * p.dh;
  const T *vb = p.v + (b / p.group) * p.sk * p.dv;

  loadTile<D>(Qs, p.q + (b * p.sq + q0) * p.dh, p.sq - q0, p.dh, p.dh);

  FlashRowState st[kRows];
  float acc[kRows][D / kLanes];
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    st[a] = flashRowInit();
#pragma unroll
    for (int i = 0; i < D / kLanes; ++i)
      acc[a][i] = 0.0f;
  }

  const int64_t nk = flashNumKvTiles(qt, p.sq, p.sk, p.causal);
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int64_t k0 = kt * kFlashBlockK;
    loadTile<D>(Ks, kb + k0 * p.dh, p.sk - k0, p.dh, p.dh);
    loadTile<D>(Vs, vb + k0 * p.dv, p.sk - k0, p.dv, p.dv);
    __syncthreads();
    float s[kRows][kTileCols];
    tileScores<D>(Qs, Ks, p.dh, ty, tx, q0, k0, p.sq, p.sk, p.causal,
                  /*transposed=*/false, p.mask, p.scale, s);
#pragma unroll
    for (int a = 0; a < kRows; ++a) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < kTileCols; ++i)
        mx = fmaxf(mx, s[a][i]);
      mx = rowMax16(mx);
      const float alpha = flashRowRescale(st[a], mx);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kTileCols; ++i) {
        const float pr = flashProb(s[a][i], st[a].m);
        sum += pr;
        Ps[(ty * kRows + a) * kPStride + tx + kLanes * i] = pr;
      }
      st[a].l += rowSum16(sum);
#pragma unroll
      for (int i = 0; i < D / kLanes; ++i)
        acc[a][i] *= alpha;
    }
    __syncthreads();
    tileMatmulAcc<D>(Ps, Vs, ty, tx, acc);
    __syncthreads(); // before the next tile overwrites Ks, Vs, Ps
  }

  float inv[kRows];
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    float l;
    flashFinalize(st[a], &inv[a], &l);
    const int64_t r = q0 + ty * kRows + a;
    if (tx == 0 && r < p.sq)
      p.lseOut[b * p.sq + r] = l;
  }
  storeRows<D>(p.out + b * p.sq * p.dv, acc, inv, ty, tx, q0, p.sq, p.dv);
}

//===----------------------------------------------------------------------===//
// Forward with tensor cores (bf16 / f16, sm_80+): S = Q K^T and P V as WMMA
// m16n16k16 products with f32 accumulators; the online softmax is the f32
// code of the FMA kernel. P is rounded to T before P V (as FlashAttention-2
// does), the rest is f32.
//===----------------------------------------------------------------------===//

constexpr int kWmmaTile = 16;
constexpr int kSStride = kFlashBlockK + 4;  // f32 score tile (ldm % 4 == 0)
constexpr int kPhStride = kFlashBlockK + 8; // T probability tile (ldm % 8)

/// Stages a [64][D] tile of T (row stride D+8 in shared memory, zero outside
/// the `rows` x `cols` valid part). The 8 padding columns are never read.
template <int D, typename T>
__device__ __forceinline__ void loadTileRaw(T *dst, const T *src, int64_t rows,
                                            int cols, int64_t ld) {
  const T zero = fromF32<T>(0.0f);
  for (int e = threadIdx.x; e < kFlashBlockQ * D; e += kFlashThreads) {
    const int r = e / D;
    const int c = e % D;
    dst[r * (D + 8) + c] = (r < rows && c < cols) ? src[r * ld + c] : zero;
  }
}

template <typename T, int D>
TESSERA_FLASH_KERNEL flashForwardWmmaKernel(FlashArgs<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // Never launched below sm_80 (bf16 WMMA needs it); see the launcher.
#else
  using namespace nvcuda;
  constexpr int ldT = D + 8, ldO = D + 4;
  constexpr int kWarps = kFlashThreads / 32;
  float *smem = flashSharedMemory();
  T *Qh = reinterpret_cast<T *>(smem);
  T *Kh = Qh + kFlashBlockQ * ldT;
  T *Vh = Kh + kFlashBlockK * ldT;
  float *Sf = reinterpret_cast<float *>(Vh + kFlashBlockK * ldT);
  T *Ph = reinterpret_cast<T *>(Sf + kFlashBlockQ * kSStride);
  float *Of = reinterpret_cast<float *>(Ph + kFlashBlockQ * kPhStride);
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int warp = threadIdx.x / 32;
  int64_t b, qt;
  blockTile(p.qTiles, /*reverse=*/true, b, qt);
  const int64_t q0 = qt * kFlashBlockQ;
  const T *kb = p.k + (b / p.group) * p.sk * p.dh;
  const T *vb = p.v + (b / p.group) * p.sk * p.dv;

  loadTileRaw<D>(Qh, p.q + (b * p.sq + q0) * p.dh, p.sq - q0, p.dh, p.dh);

  FlashRowState st[kRows];
  float acc[kRows][D / kLanes];
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    st[a] = flashRowInit();
#pragma unroll
    for (int i = 0; i < D / kLanes; ++i)
      acc[a][i] = 0.0f;
  }

  const int64_t nk = flashNumKvTiles(qt, p.sq, p.sk, p.causal);
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int64_t k0 = kt * kFlashBlockK;
    loadTileRaw<D>(Kh, kb + k0 * p.dh, p.sk - k0, p.dh, p.dh);
    loadTileRaw<D>(Vh, vb + k0 * p.dv, p.sk - k0, p.dv, p.dv);
    __syncthreads();
    // Dot products Q K^T: 4 x 4 tiles of 16 x 16, two per warp.
    constexpr int kTilesN = kFlashBlockK / kWmmaTile;
    for (int t = warp; t < (kFlashBlockQ / kWmmaTile) * kTilesN; t += kWarps) {
      const int tm = t / kTilesN, tn = t % kTilesN;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int kk = 0; kk < D; kk += kWmmaTile) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, Qh + tm * kWmmaTile * ldT + kk, ldT);
        wmma::load_matrix_sync(fb, Kh + tn * kWmmaTile * ldT + kk, ldT);
        wmma::mma_sync(c, fa, fb, c);
      }
      wmma::store_matrix_sync(Sf + tm * kWmmaTile * kSStride + tn * kWmmaTile,
                              c, kSStride, wmma::mem_row_major);
    }
    __syncthreads();
    float dot[kRows][kTileCols], s[kRows][kTileCols];
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < kTileCols; ++i)
        dot[a][i] = Sf[(ty * kRows + a) * kSStride + tx + kLanes * i];
    finishScores(dot, ty, tx, q0, k0, p.sq, p.sk, p.causal,
                 /*transposed=*/false, p.mask, p.scale, s);
#pragma unroll
    for (int a = 0; a < kRows; ++a) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < kTileCols; ++i)
        mx = fmaxf(mx, s[a][i]);
      mx = rowMax16(mx);
      const float alpha = flashRowRescale(st[a], mx);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kTileCols; ++i) {
        const float pr = flashProb(s[a][i], st[a].m);
        sum += pr;
        Ph[(ty * kRows + a) * kPhStride + tx + kLanes * i] = fromF32<T>(pr);
      }
      st[a].l += rowSum16(sum);
#pragma unroll
      for (int i = 0; i < D / kLanes; ++i)
        acc[a][i] *= alpha;
    }
    __syncthreads();
    // P V: 4 x D/16 output tiles, over the 64 keys.
    constexpr int kTilesD = D / kWmmaTile;
    for (int t = warp; t < (kFlashBlockQ / kWmmaTile) * kTilesD; t += kWarps) {
      const int tm = t / kTilesD, tn = t % kTilesD;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.0f);
      for (int kk = 0; kk < kFlashBlockK; kk += kWmmaTile) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, Ph + tm * kWmmaTile * kPhStride + kk,
                               kPhStride);
        wmma::load_matrix_sync(fb, Vh + kk * ldT + tn * kWmmaTile, ldT);
        wmma::mma_sync(c, fa, fb, c);
      }
      wmma::store_matrix_sync(Of + tm * kWmmaTile * ldO + tn * kWmmaTile, c,
                              ldO, wmma::mem_row_major);
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < D / kLanes; ++i)
        acc[a][i] += Of[(ty * kRows + a) * ldO + tx + kLanes * i];
    __syncthreads(); // before the next tile overwrites Kh, Vh, Sf, Of
  }

  float inv[kRows];
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    float l;
    flashFinalize(st[a], &inv[a], &l);
    const int64_t r = q0 + ty * kRows + a;
    if (tx == 0 && r < p.sq)
      p.lseOut[b * p.sq + r] = l;
  }
  storeRows<D>(p.out + b * p.sq * p.dv, acc, inv, ty, tx, q0, p.sq, p.dv);
#endif
}

//===----------------------------------------------------------------------===//
// Backward.
//===----------------------------------------------------------------------===//

/// delta[r] = sum_c dout[r, c] * o[r, c]: one warp per row, f32 partial sums
/// per lane combined with a fixed shuffle tree (deterministic).
template <typename T>
TESSERA_FLASH_KERNEL flashDeltaKernel(const T *dout, const T *o, int64_t rows,
                                      int dv, float *delta) {
  const int lane = threadIdx.x % 32;
  const int64_t warp =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t r = warp; r < rows; r += warps) {
    float acc = 0.0f;
    for (int c = lane; c < dv; c += 32)
      acc = fmaf(toF32(dout[r * dv + c]), toF32(o[r * dv + c]), acc);
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
      acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0)
      delta[r] = acc;
  }
}

/// Stages the lse and delta of query rows [q0, q0 + 64) (rows past sq get
/// lse = -inf, so P = 0, and delta = 0).
__device__ __forceinline__ void loadRowStats(float *lseS, float *deltaS,
                                             const float *lse,
                                             const float *delta, int64_t q0,
                                             int64_t sq) {
  for (int r = threadIdx.x; r < kFlashBlockQ; r += kFlashThreads) {
    const bool in = q0 + r < sq;
    lseS[r] = in ? lse[q0 + r] : -INFINITY;
    deltaS[r] = in ? delta[q0 + r] : 0.0f;
  }
}

/// dK and dV: one block per (batch, key tile), looping over query tiles.
/// Rows of the thread layout are keys, columns queries (S^T, P^T, dS^T).
template <typename T, int D>
TESSERA_FLASH_KERNEL flashBackwardKVKernel(FlashArgs<T> p) {
  float *smem = flashSharedMemory();
  float *Ks = smem;
  float *Vs = Ks + kFlashBlockK * (D + 1);
  float *Qs = Vs + kFlashBlockK * (D + 1);
  float *dOs = Qs + kFlashBlockQ * (D + 1);
  float *Ps = dOs + kFlashBlockQ * (D + 1); // P^T, then dS^T [key][query]
  float *lseS = Ps + kFlashBlockK * kPStride;
  float *deltaS = lseS + kFlashBlockQ;
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  int64_t b, kt; // b: the K/V row
  blockTile(p.kTiles, /*reverse=*/false, b, kt);
  const int64_t k0 = kt * kFlashBlockK;

  loadTile<D>(Ks, p.k + (b * p.sk + k0) * p.dh, p.sk - k0, p.dh, p.dh);
  loadTile<D>(Vs, p.v + (b * p.sk + k0) * p.dv, p.sk - k0, p.dv, p.dv);

  float dK[kRows][D / kLanes], dV[kRows][D / kLanes];
#pragma unroll
  for (int a = 0; a < kRows; ++a)
#pragma unroll
    for (int i = 0; i < D / kLanes; ++i) {
      dK[a][i] = 0.0f;
      dV[a][i] = 0.0f;
    }

  // GQA: the group's query heads all add into this K/V tile's dK and dV, in
  // a fixed order (deterministic, no atomics).
  const int64_t nq = p.qTiles;
  for (int64_t g = 0; g < p.group; ++g) {
    const int64_t bq = b * p.group + g;
    const T *qb = p.q + bq * p.sq * p.dh;
    const T *dob = p.dout + bq * p.sq * p.dv;
    const float *lseb = p.lse + bq * p.sq;
    const float *deltab = p.delta + bq * p.sq;
    for (int64_t qt = flashFirstQTile(kt, p.causal); qt < nq; ++qt) {
      const int64_t q0 = qt * kFlashBlockQ;
      loadTile<D>(Qs, qb + q0 * p.dh, p.sq - q0, p.dh, p.dh);
      loadTile<D>(dOs, dob + q0 * p.dv, p.sq - q0, p.dv, p.dv);
      loadRowStats(lseS, deltaS, lseb, deltab, q0, p.sq);
      __syncthreads();
      // S^T [key][query], then P^T.
      float pt[kRows][kTileCols];
      tileScores<D>(Ks, Qs, p.dh, ty, tx, k0, q0, p.sq, p.sk, p.causal,
                    /*transposed=*/true, p.mask, p.scale, pt);
      // dP^T [key][query] = V[key] . dO[query] (no scale, no mask).
      float dpt[kRows][kTileCols];
#pragma unroll
      for (int a = 0; a < kRows; ++a)
#pragma unroll
        for (int i = 0; i < kTileCols; ++i)
          dpt[a][i] = 0.0f;
      for (int c = 0; c < p.dv; ++c) {
        float vv[kRows], dov[kTileCols];
#pragma unroll
        for (int a = 0; a < kRows; ++a)
          vv[a] = Vs[(ty * kRows + a) * (D + 1) + c];
#pragma unroll
        for (int i = 0; i < kTileCols; ++i)
          dov[i] = dOs[(tx + kLanes * i) * (D + 1) + c];
#pragma unroll
        for (int a = 0; a < kRows; ++a)
#pragma unroll
          for (int i = 0; i < kTileCols; ++i)
            dpt[a][i] = fmaf(vv[a], dov[i], dpt[a][i]);
      }
#pragma unroll
      for (int a = 0; a < kRows; ++a)
#pragma unroll
        for (int i = 0; i < kTileCols; ++i) {
          const int qc = tx + kLanes * i;
          pt[a][i] = flashRecomputeP(pt[a][i], lseS[qc]);
          Ps[(ty * kRows + a) * kPStride + qc] = pt[a][i];
        }
      __syncthreads();
      tileMatmulAcc<D>(Ps, dOs, ty, tx, dV); // dV += P^T dO
      __syncthreads();
#pragma unroll
      for (int a = 0; a < kRows; ++a)
#pragma unroll
        for (int i = 0; i < kTileCols; ++i) {
          const int qc = tx + kLanes * i;
          Ps[(ty * kRows + a) * kPStride + qc] =
              pt[a][i] * (dpt[a][i] - deltaS[qc]);
        }
      __syncthreads();
      tileMatmulAcc<D>(Ps, Qs, ty, tx, dK); // dK += dS^T Q (scaled on store)
      __syncthreads(); // before the next tile overwrites Qs, dOs, Ps
    }
  } // query heads of the group

  const float one[kRows] = {1.0f, 1.0f, 1.0f, 1.0f};
  const float sc[kRows] = {p.scale, p.scale, p.scale, p.scale};
  storeRows<D>(p.dk + b * p.sk * p.dh, dK, sc, ty, tx, k0, p.sk, p.dh);
  storeRows<D>(p.dv_ + b * p.sk * p.dv, dV, one, ty, tx, k0, p.sk, p.dv);
}

/// dQ: one block per (batch, query tile), looping over key tiles.
template <typename T, int D>
TESSERA_FLASH_KERNEL flashBackwardQKernel(FlashArgs<T> p) {
  float *smem = flashSharedMemory();
  float *Qs = smem;
  float *dOs = Qs + kFlashBlockQ * (D + 1);
  float *Ks = dOs + kFlashBlockQ * (D + 1);
  float *Vs = Ks + kFlashBlockK * (D + 1);
  float *Ps = Vs + kFlashBlockK * (D + 1); // dS [query][key]
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  int64_t b, qt;
  blockTile(p.qTiles, /*reverse=*/true, b, qt);
  const int64_t q0 = qt * kFlashBlockQ;
  const T *kb = p.k + (b / p.group) * p.sk * p.dh;
  const T *vb = p.v + (b / p.group) * p.sk * p.dv;

  loadTile<D>(Qs, p.q + (b * p.sq + q0) * p.dh, p.sq - q0, p.dh, p.dh);
  loadTile<D>(dOs, p.dout + (b * p.sq + q0) * p.dv, p.sq - q0, p.dv, p.dv);
  float rowLse[kRows], rowDelta[kRows];
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    const int64_t r = q0 + ty * kRows + a;
    rowLse[a] = r < p.sq ? p.lse[b * p.sq + r] : -INFINITY;
    rowDelta[a] = r < p.sq ? p.delta[b * p.sq + r] : 0.0f;
  }

  float dQ[kRows][D / kLanes];
#pragma unroll
  for (int a = 0; a < kRows; ++a)
#pragma unroll
    for (int i = 0; i < D / kLanes; ++i)
      dQ[a][i] = 0.0f;

  const int64_t nk = flashNumKvTiles(qt, p.sq, p.sk, p.causal);
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int64_t k0 = kt * kFlashBlockK;
    loadTile<D>(Ks, kb + k0 * p.dh, p.sk - k0, p.dh, p.dh);
    loadTile<D>(Vs, vb + k0 * p.dv, p.sk - k0, p.dv, p.dv);
    __syncthreads();
    float s[kRows][kTileCols];
    tileScores<D>(Qs, Ks, p.dh, ty, tx, q0, k0, p.sq, p.sk, p.causal,
                  /*transposed=*/false, p.mask, p.scale, s);
    float dp[kRows][kTileCols];
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < kTileCols; ++i)
        dp[a][i] = 0.0f;
    for (int c = 0; c < p.dv; ++c) {
      float dov[kRows], vv[kTileCols];
#pragma unroll
      for (int a = 0; a < kRows; ++a)
        dov[a] = dOs[(ty * kRows + a) * (D + 1) + c];
#pragma unroll
      for (int i = 0; i < kTileCols; ++i)
        vv[i] = Vs[(tx + kLanes * i) * (D + 1) + c];
#pragma unroll
      for (int a = 0; a < kRows; ++a)
#pragma unroll
        for (int i = 0; i < kTileCols; ++i)
          dp[a][i] = fmaf(dov[a], vv[i], dp[a][i]);
    }
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < kTileCols; ++i) {
        const float pr = flashRecomputeP(s[a][i], rowLse[a]);
        Ps[(ty * kRows + a) * kPStride + tx + kLanes * i] =
            pr * (dp[a][i] - rowDelta[a]);
      }
    __syncthreads();
    tileMatmulAcc<D>(Ps, Ks, ty, tx, dQ); // dQ += dS K (scaled on store)
    __syncthreads(); // before the next tile overwrites Ks, Vs, Ps
  }

  const float sc[kRows] = {p.scale, p.scale, p.scale, p.scale};
  storeRows<D>(p.dq + b * p.sq * p.dh, dQ, sc, ty, tx, q0, p.sq, p.dh);
}

//===----------------------------------------------------------------------===//
// Backward with tensor cores (bf16 / f16, sm_80+). The same two kernels as
// the FMA backward (dK/dV over key tiles, dQ over query tiles); every
// product is a WMMA m16n16k16 with f32 accumulators. S and dP are formed in
// f32; P and dS are rounded to T for the products that use them (as
// FlashAttention-2 does). The dK, dV, dQ accumulators stay in WMMA
// fragments across the loop (no rescaling is needed in the backward); warp
// w owns the output tiles w, w + 8, ... of the [64][D] tile.
//===----------------------------------------------------------------------===//

/// Writes a [64][D] f32 tile (row stride ldO, in shared memory) times `mul`
/// to global rows rowBase .. (< nRows), columns < cols (row stride cols).
template <int D, typename T>
__device__ __forceinline__ void
storeTileFromShared(T *dst, const float *tile, int ldO, float mul,
                    int64_t rowBase, int64_t nRows, int cols) {
  for (int e = threadIdx.x; e < kFlashBlockQ * D; e += kFlashThreads) {
    const int r = e / D;
    const int c = e % D;
    if (rowBase + r < nRows && c < cols)
      dst[(rowBase + r) * cols + c] = fromF32<T>(tile[r * ldO + c] * mul);
  }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
/// C[16 x 16 tile (tm, tn)] = A B^T over depth `depth` (multiple of 16):
/// A rows tm*16.., B rows tn*16.. (both row-major T, row stride ld), stored
/// as f32 to out (row stride ldOut).
template <typename T>
__device__ __forceinline__ void wmmaABt(const T *A, const T *B, int ld,
                                        int depth, int tm, int tn, float *out,
                                        int ldOut) {
  using namespace nvcuda;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  for (int kk = 0; kk < depth; kk += kWmmaTile) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, A + tm * kWmmaTile * ld + kk, ld);
    wmma::load_matrix_sync(fb, B + tn * kWmmaTile * ld + kk, ld);
    wmma::mma_sync(c, fa, fb, c);
  }
  wmma::store_matrix_sync(out + tm * kWmmaTile * ldOut + tn * kWmmaTile, c,
                          ldOut, wmma::mem_row_major);
}

/// acc += A[tile row tm] M[:, tile col tn] over the 64 rows of M: A is
/// [64][64] T (row stride kPhStride), M is [64][D] T (row stride ld).
template <typename T, typename Frag>
__device__ __forceinline__ void wmmaAccPM(Frag &acc, const T *A, const T *M,
                                          int ld, int tm, int tn) {
  using namespace nvcuda;
  for (int kk = 0; kk < kFlashBlockK; kk += kWmmaTile) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, A + tm * kWmmaTile * kPhStride + kk, kPhStride);
    wmma::load_matrix_sync(fb, M + kk * ld + tn * kWmmaTile, ld);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}
#endif

template <typename T, int D>
TESSERA_FLASH_KERNEL flashBackwardKVWmmaKernel(FlashArgs<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // Never launched below sm_80; see the launcher.
#else
  using namespace nvcuda;
  constexpr int ldT = D + 8, ldO = D + 4;
  constexpr int kWarps = kFlashThreads / 32;
  constexpr int kTilesD = D / kWmmaTile;
  constexpr int kOwn = (kFlashBlockK / kWmmaTile) * kTilesD / kWarps;
  float *smem = flashSharedMemory();
  T *Kh = reinterpret_cast<T *>(smem);
  T *Vh = Kh + kFlashBlockK * ldT;
  T *Qh = Vh + kFlashBlockK * ldT;
  T *dOh = Qh + kFlashBlockQ * ldT;
  float *Sf = reinterpret_cast<float *>(dOh + kFlashBlockQ * ldT); // S^T
  float *DPf = Sf + kFlashBlockK * kSStride;                       // dP^T
  T *Ph = reinterpret_cast<T *>(DPf + kFlashBlockK * kSStride);    // P^T
  T *dSh = Ph + kFlashBlockK * kPhStride;                          // dS^T
  float *lseS = reinterpret_cast<float *>(dSh + kFlashBlockK * kPhStride);
  float *deltaS = lseS + kFlashBlockQ;
  float *Of = Sf; // [64][D+4] f32 output staging, over Sf and DPf at the end
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int warp = threadIdx.x / 32;
  int64_t b, kt; // b: the K/V row
  blockTile(p.kTiles, /*reverse=*/false, b, kt);
  const int64_t k0 = kt * kFlashBlockK;

  loadTileRaw<D>(Kh, p.k + (b * p.sk + k0) * p.dh, p.sk - k0, p.dh, p.dh);
  loadTileRaw<D>(Vh, p.v + (b * p.sk + k0) * p.dv, p.sk - k0, p.dv, p.dv);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dKf[kOwn], dVf[kOwn];
#pragma unroll
  for (int o = 0; o < kOwn; ++o) {
    wmma::fill_fragment(dKf[o], 0.0f);
    wmma::fill_fragment(dVf[o], 0.0f);
  }

  // GQA: the group's query heads all add into this K/V tile's dK and dV.
  for (int64_t g = 0; g < p.group; ++g) {
    const int64_t bq = b * p.group + g;
    const T *qb = p.q + bq * p.sq * p.dh;
    const T *dob = p.dout + bq * p.sq * p.dv;
    for (int64_t qt = flashFirstQTile(kt, p.causal); qt < p.qTiles; ++qt) {
      const int64_t q0 = qt * kFlashBlockQ;
      loadTileRaw<D>(Qh, qb + q0 * p.dh, p.sq - q0, p.dh, p.dh);
      loadTileRaw<D>(dOh, dob + q0 * p.dv, p.sq - q0, p.dv, p.dv);
      loadRowStats(lseS, deltaS, p.lse + bq * p.sq, p.delta + bq * p.sq, q0,
                   p.sq);
      __syncthreads();
      // S^T = K Q^T and dP^T = V dO^T: 2 x 16 tiles, four per warp.
      for (int t = warp; t < 32; t += kWarps) {
        const int u = t % 16, tm = u / 4, tn = u % 4;
        if (t < 16)
          wmmaABt(Kh, Qh, ldT, D, tm, tn, Sf, kSStride);
        else
          wmmaABt(Vh, dOh, ldT, D, tm, tn, DPf, kSStride);
      }
      __syncthreads();
      float dot[kRows][kTileCols], s[kRows][kTileCols];
#pragma unroll
      for (int a = 0; a < kRows; ++a)
#pragma unroll
        for (int i = 0; i < kTileCols; ++i)
          dot[a][i] = Sf[(ty * kRows + a) * kSStride + tx + kLanes * i];
      finishScores(dot, ty, tx, k0, q0, p.sq, p.sk, p.causal,
                   /*transposed=*/true, p.mask, p.scale, s);
#pragma unroll
      for (int a = 0; a < kRows; ++a)
#pragma unroll
        for (int i = 0; i < kTileCols; ++i) {
          const int kr = ty * kRows + a, qc = tx + kLanes * i;
          const float pr = flashRecomputeP(s[a][i], lseS[qc]);
          const float dp = DPf[kr * kSStride + qc];
          Ph[kr * kPhStride + qc] = fromF32<T>(pr);
          dSh[kr * kPhStride + qc] = fromF32<T>(pr * (dp - deltaS[qc]));
        }
      __syncthreads();
      // dV += P^T dO, dK += dS^T Q (dK scaled on store).
#pragma unroll
      for (int o = 0; o < kOwn; ++o) {
        const int t = warp + o * kWarps, tm = t / kTilesD, tn = t % kTilesD;
        wmmaAccPM(dVf[o], Ph, dOh, ldT, tm, tn);
        wmmaAccPM(dKf[o], dSh, Qh, ldT, tm, tn);
      }
      __syncthreads(); // before the next tile overwrites Qh, dOh, Sf, ...
    }
  } // query heads of the group

#pragma unroll
  for (int o = 0; o < kOwn; ++o) {
    const int t = warp + o * kWarps, tm = t / kTilesD, tn = t % kTilesD;
    wmma::store_matrix_sync(Of + tm * kWmmaTile * ldO + tn * kWmmaTile, dVf[o],
                            ldO, wmma::mem_row_major);
  }
  __syncthreads();
  storeTileFromShared<D>(p.dv_ + b * p.sk * p.dv, Of, ldO, 1.0f, k0, p.sk,
                         p.dv);
  __syncthreads();
#pragma unroll
  for (int o = 0; o < kOwn; ++o) {
    const int t = warp + o * kWarps, tm = t / kTilesD, tn = t % kTilesD;
    wmma::store_matrix_sync(Of + tm * kWmmaTile * ldO + tn * kWmmaTile, dKf[o],
                            ldO, wmma::mem_row_major);
  }
  __syncthreads();
  storeTileFromShared<D>(p.dk + b * p.sk * p.dh, Of, ldO, p.scale, k0, p.sk,
                         p.dh);
#endif
}

template <typename T, int D>
TESSERA_FLASH_KERNEL flashBackwardQWmmaKernel(FlashArgs<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // Never launched below sm_80; see the launcher.
#else
  using namespace nvcuda;
  constexpr int ldT = D + 8, ldO = D + 4;
  constexpr int kWarps = kFlashThreads / 32;
  constexpr int kTilesD = D / kWmmaTile;
  constexpr int kOwn = (kFlashBlockQ / kWmmaTile) * kTilesD / kWarps;
  float *smem = flashSharedMemory();
  T *Qh = reinterpret_cast<T *>(smem);
  T *dOh = Qh + kFlashBlockQ * ldT;
  T *Kh = dOh + kFlashBlockQ * ldT;
  T *Vh = Kh + kFlashBlockK * ldT;
  float *Sf = reinterpret_cast<float *>(Vh + kFlashBlockK * ldT); // S
  float *DPf = Sf + kFlashBlockQ * kSStride;                      // dP
  T *dSh = reinterpret_cast<T *>(DPf + kFlashBlockQ * kSStride);  // dS
  float *Of = Sf;
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int warp = threadIdx.x / 32;
  int64_t b, qt;
  blockTile(p.qTiles, /*reverse=*/true, b, qt);
  const int64_t q0 = qt * kFlashBlockQ;
  const T *kb = p.k + (b / p.group) * p.sk * p.dh;
  const T *vb = p.v + (b / p.group) * p.sk * p.dv;

  loadTileRaw<D>(Qh, p.q + (b * p.sq + q0) * p.dh, p.sq - q0, p.dh, p.dh);
  loadTileRaw<D>(dOh, p.dout + (b * p.sq + q0) * p.dv, p.sq - q0, p.dv, p.dv);
  float rowLse[kRows], rowDelta[kRows];
#pragma unroll
  for (int a = 0; a < kRows; ++a) {
    const int64_t r = q0 + ty * kRows + a;
    rowLse[a] = r < p.sq ? p.lse[b * p.sq + r] : -INFINITY;
    rowDelta[a] = r < p.sq ? p.delta[b * p.sq + r] : 0.0f;
  }

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dQf[kOwn];
#pragma unroll
  for (int o = 0; o < kOwn; ++o)
    wmma::fill_fragment(dQf[o], 0.0f);

  const int64_t nk = flashNumKvTiles(qt, p.sq, p.sk, p.causal);
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int64_t k0 = kt * kFlashBlockK;
    loadTileRaw<D>(Kh, kb + k0 * p.dh, p.sk - k0, p.dh, p.dh);
    loadTileRaw<D>(Vh, vb + k0 * p.dv, p.sk - k0, p.dv, p.dv);
    __syncthreads();
    // S = Q K^T and dP = dO V^T.
    for (int t = warp; t < 32; t += kWarps) {
      const int u = t % 16, tm = u / 4, tn = u % 4;
      if (t < 16)
        wmmaABt(Qh, Kh, ldT, D, tm, tn, Sf, kSStride);
      else
        wmmaABt(dOh, Vh, ldT, D, tm, tn, DPf, kSStride);
    }
    __syncthreads();
    float dot[kRows][kTileCols], s[kRows][kTileCols];
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < kTileCols; ++i)
        dot[a][i] = Sf[(ty * kRows + a) * kSStride + tx + kLanes * i];
    finishScores(dot, ty, tx, q0, k0, p.sq, p.sk, p.causal,
                 /*transposed=*/false, p.mask, p.scale, s);
#pragma unroll
    for (int a = 0; a < kRows; ++a)
#pragma unroll
      for (int i = 0; i < kTileCols; ++i) {
        const int r = ty * kRows + a, c = tx + kLanes * i;
        const float pr = flashRecomputeP(s[a][i], rowLse[a]);
        dSh[r * kPhStride + c] =
            fromF32<T>(pr * (DPf[r * kSStride + c] - rowDelta[a]));
      }
    __syncthreads();
    // dQ += dS K (scaled on store).
#pragma unroll
    for (int o = 0; o < kOwn; ++o) {
      const int t = warp + o * kWarps, tm = t / kTilesD, tn = t % kTilesD;
      wmmaAccPM(dQf[o], dSh, Kh, ldT, tm, tn);
    }
    __syncthreads(); // before the next tile overwrites Kh, Vh, Sf, ...
  }

#pragma unroll
  for (int o = 0; o < kOwn; ++o) {
    const int t = warp + o * kWarps, tm = t / kTilesD, tn = t % kTilesD;
    wmma::store_matrix_sync(Of + tm * kWmmaTile * ldO + tn * kWmmaTile, dQf[o],
                            ldO, wmma::mem_row_major);
  }
  __syncthreads();
  storeTileFromShared<D>(p.dq + b * p.sq * p.dh, Of, ldO, p.scale, q0, p.sq,
                         p.dh);
#endif
}

} // namespace
} // namespace flash_detail
} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_FLASHATTENTIONKERNELS_CUH

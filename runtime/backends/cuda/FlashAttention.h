//===- FlashAttention.h - Fused tiled attention on CUDA ---------*- C++ -*-===//
//
// Scaled dot-product attention, forward and backward, as fused CUDA kernels
// that never materialise the sq x sk score matrix (not even per row block):
//  - FlashAttention (Dao et al. 2022, "FlashAttention: Fast and
//    Memory-Efficient Exact Attention with IO-Awareness", arXiv:2205.14135):
//    Q, K, V are processed in tiles staged in shared memory, with an online
//    softmax (running row max m and row sum l, Alg. 1) and a backward that
//    recomputes P = exp(scale*s + mask - lse) tile by tile (Alg. 2).
//  - FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with
//    Better Parallelism and Work Partitioning", arXiv:2307.08691): the
//    forward is parallel over query tiles (one thread block per (batch,
//    query tile), looping over key tiles); the backward is split into a
//    kernel parallel over key tiles that computes dK and dV, and a kernel
//    parallel over query tiles that computes dQ, so that no atomics are
//    needed and the results are bitwise deterministic.
//
// Semantics are exactly those of cpu::attentionForward / attentionBackward
// (runtime/backends/cpu/Attention.h):
//   Q [batch, sq, dh], K [batch/group, sk, dh], V [batch/group, sk, dv],
//   O [batch, sq, dv], LSE [batch, sq] (always f32, natural log),
//   optional additive mask [sq, sk] (f32, broadcast over batch, entries
//   finite or -inf); O = softmax(scale * Q K^T + mask, causal) V.
//   Causal requires sq == sk and allows key j for query i iff j <= i.
//   A row with no allowed key gets O = 0, lse = -inf and zero gradients
//   (never NaN).
//   Backward: delta_i = sum_c dO_ic O_ic, dS = P * (dP - delta),
//   dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO (all overwritten).
//   Grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245): with
//   group = n_rep > 1 query row b uses K/V row b / group (no K/V copies);
//   the dK/dV kernel's block for one K/V row loops over the group's query
//   heads, so dK and dV are the group sums, still without atomics.
//
// Data types: Q, K, V, O, dO, dQ, dK, dV are all f32, all bf16 or all f16;
// LSE, mask and the backward's delta scratch are f32.
//  - f32: CUDA-core kernels; every product is an f32 FMA with f32
//    accumulation (elements staged as f32 in shared memory).
//  - bf16 / f16 on sm_80+ (flashUsesTensorCores): Q K^T, dO V^T, P V,
//    P^T dO, dS^T Q and dS K are tensor-core products (WMMA m16n16k16, f32
//    accumulators); P and dS are rounded to the storage type before the
//    products that use them (as FlashAttention-2 does); softmax state,
//    scores, dP, delta and all accumulators are f32. (Below sm_80 bf16/f16
//    use the f32 CUDA-core kernels.)
// Outputs are rounded to the storage type on the store.
//
// Limits: dh <= 128 and dv <= 128 (kernels are compiled for a padded head
// dimension of 64 or 128; inputs are zero-padded in shared memory). Larger
// head dims return cudaErrorInvalidValue. Any sq, sk >= 0 (partial tiles are
// masked). batch * ceil(max(sq, sk) / 64) must fit the grid (< 2^31).
//
// The pure index and softmax logic is in __host__ __device__ inline
// functions below, shared by the kernels (FlashAttentionKernels.cuh) and by
// a host emulation of the tiled algorithm in
// test/unittests/cuda/FlashAttentionTest.cpp, which also runs the kernels
// themselves in a host simulation. This header is valid C++ (g++) and CUDA
// (nvcc).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_FLASHATTENTION_H
#define TESSERA_RUNTIME_BACKENDS_CUDA_FLASHATTENTION_H

#include "runtime/backends/cuda/CudaCommon.h"

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define TESSERA_FLASH_HD __host__ __device__ __forceinline__
#else
#define TESSERA_FLASH_HD inline
#endif

namespace tessera {
namespace runtime {
namespace cuda {

/// Shapes of one attention call; `batch` is the product of the leading dims
/// (e.g. B*H). See the file comment for the tensor layouts. `group` (>= 1,
/// dividing batch) is the number of query heads per K/V head under
/// grouped-query attention (n_rep; 1 for multi-head attention): K and V
/// have batch / group rows and query row b reads K/V row b / group.
struct FlashDims {
  int64_t batch, sq, sk, dh, dv;
  int64_t group = 1;
};

//===----------------------------------------------------------------------===//
// Tiling constants and pure logic (host and device).
//===----------------------------------------------------------------------===//

/// Query rows per tile (a thread block's rows in the forward and dQ
/// kernels; the inner loop's step in the dK/dV kernel).
constexpr int kFlashBlockQ = 64;
/// Keys per tile.
constexpr int kFlashBlockK = 64;
/// Threads per block of every attention kernel: 16 row groups of 4 rows x
/// 16 column lanes (each lane owns columns lane + 16*i).
constexpr int kFlashThreads = 256;
constexpr int kFlashRowsPerThread = 4;
constexpr int kFlashColLanes = 16;
/// Largest supported dh and dv.
constexpr int kFlashMaxHeadDim = 128;

/// Number of tiles of `block` elements covering n elements.
TESSERA_FLASH_HD int64_t flashNumTiles(int64_t n, int64_t block) {
  return n <= 0 ? 0 : (n + block - 1) / block;
}

/// Whether key j may be attended by query i: inside the sequences and,
/// when causal, j <= i.
TESSERA_FLASH_HD bool flashKeyAllowed(int64_t i, int64_t j, int64_t sq,
                                      int64_t sk, bool causal) {
  return i >= 0 && i < sq && j >= 0 && j < sk && (!causal || j <= i);
}

/// Score of an allowed (query, key) pair: scale * dot + mask value (the mask
/// value is 0 without a mask). Disallowed pairs have score -inf.
TESSERA_FLASH_HD float flashScore(float dot, float scale, float maskValue) {
  return scale * dot + maskValue;
}

/// Number of key tiles (tiles 0 .. n-1) that query tile `qTile` must visit:
/// all of them, or with causal masking only those holding a key j <= the
/// tile's last row (tiles entirely above the diagonal are skipped).
TESSERA_FLASH_HD int64_t flashNumKvTiles(int64_t qTile, int64_t sq, int64_t sk,
                                         bool causal) {
  const int64_t nk = flashNumTiles(sk, kFlashBlockK);
  if (!causal)
    return nk;
  int64_t lastRow = (qTile + 1) * kFlashBlockQ - 1;
  if (lastRow > sq - 1)
    lastRow = sq - 1;
  if (lastRow < 0)
    return 0;
  const int64_t tiles = lastRow / kFlashBlockK + 1;
  return tiles < nk ? tiles : nk;
}

/// First query tile that key tile `kTile` must visit (query tiles from it to
/// the last one): 0, or with causal masking the tile holding query row
/// kTile * kFlashBlockK (earlier rows cannot attend any key of the tile).
TESSERA_FLASH_HD int64_t flashFirstQTile(int64_t kTile, bool causal) {
  return causal ? (kTile * kFlashBlockK) / kFlashBlockQ : 0;
}

/// Online-softmax state of one query row (FlashAttention Alg. 1): running
/// max m (-inf while no allowed key was seen) and running sum l of
/// exp(s - m).
struct FlashRowState {
  float m;
  float l;
};

TESSERA_FLASH_HD FlashRowState flashRowInit() {
  return FlashRowState{-INFINITY, 0.0f};
}

/// Folds the max of a new tile's scores into the row state: m becomes
/// max(m, tileMax) and l is rescaled to it. Returns the factor alpha by
/// which the caller must scale the row's unnormalised output accumulator
/// (0 when the state was empty, 1 when it stays empty). After this, the
/// tile's probabilities are flashProb(s, state.m) and their sum is added to
/// state.l.
TESSERA_FLASH_HD float flashRowRescale(FlashRowState &st, float tileMax) {
  const float mNew = fmaxf(st.m, tileMax);
  if (mNew == -INFINITY)
    return 1.0f; // still no allowed key: nothing to rescale
  const float alpha = st.m == -INFINITY ? 0.0f : expf(st.m - mNew);
  st.l *= alpha;
  st.m = mNew;
  return alpha;
}

/// exp(s - m) with the conventions of the CPU kernel: 0 when the row has no
/// allowed key yet (m == -inf) or the key is disallowed (s == -inf).
TESSERA_FLASH_HD float flashProb(float s, float m) {
  return m == -INFINITY ? 0.0f : expf(s - m);
}

/// Final normalisation of a row: returns true and sets *invL = 1 / l and
/// *lse = m + log(l) when the row had an allowed key; otherwise returns
/// false and sets *invL = 0 (O = 0) and *lse = -inf.
TESSERA_FLASH_HD bool flashFinalize(const FlashRowState &st, float *invL,
                                    float *lse) {
  if (!(st.l > 0.0f) || st.m == -INFINITY) {
    *invL = 0.0f;
    *lse = -INFINITY;
    return false;
  }
  *invL = 1.0f / st.l;
  *lse = st.m + logf(st.l);
  return true;
}

/// Backward recomputation P = exp(s - lse); 0 for a row with no allowed
/// key (lse == -inf) and for a disallowed key (s == -inf).
TESSERA_FLASH_HD float flashRecomputeP(float s, float lse) {
  return lse == -INFINITY ? 0.0f : expf(s - lse);
}

/// Padded head dimension the kernels are compiled for: 64 when dh and dv
/// are both <= 64, 128 when both are <= 128, 0 (unsupported) otherwise.
TESSERA_FLASH_HD int flashPaddedHeadDim(int64_t dh, int64_t dv) {
  const int64_t d = dh > dv ? dh : dv;
  if (d < 0 || d > kFlashMaxHeadDim)
    return 0;
  return d <= 64 ? 64 : 128;
}

/// Dynamic shared memory (bytes) of the forward kernel for padded head dim
/// D: Q, K, V tiles as f32 with row stride D+1 (no bank conflicts) and the
/// probability tile [kFlashBlockQ][kFlashBlockK+1]. 66,560 bytes for D = 64,
/// 115,712 for D = 128.
TESSERA_FLASH_HD int flashForwardSharedBytes(int D) {
  return 4 * ((kFlashBlockQ + 2 * kFlashBlockK) * (D + 1) +
              kFlashBlockQ * (kFlashBlockK + 1));
}

/// Dynamic shared memory (bytes) of the tensor-core forward kernel (bf16 /
/// f16): Q, K, V tiles in the storage type with row stride D+8, the f32
/// score tile [64][68], the probability tile [64][72] in the storage type
/// and the f32 P V tile [64][D+4]. 71,680 bytes for D = 64, 112,640 for
/// D = 128.
TESSERA_FLASH_HD int flashForwardWmmaSharedBytes(int D) {
  return 2 * (kFlashBlockQ + 2 * kFlashBlockK) * (D + 8) +
         4 * kFlashBlockQ * (kFlashBlockK + 4) +
         2 * kFlashBlockQ * (kFlashBlockK + 8) + 4 * kFlashBlockQ * (D + 4);
}

/// Whether the forward and backward use the tensor-core (WMMA) kernels:
/// bf16 and f16 on devices of compute capability >= 8.0. f32 always uses
/// the FMA kernels (exact f32 arithmetic).
TESSERA_FLASH_HD bool flashUsesTensorCores(DType dtype, int computeMajor) {
  return (dtype == DType::BF16 || dtype == DType::F16) && computeMajor >= 8;
}

/// Dynamic shared memory (bytes) of each tensor-core backward kernel (bf16 /
/// f16; the dK/dV kernel's need, the dQ kernel's is smaller): Q, dO, K, V
/// tiles in the storage type (row stride D+8), S and dP tiles f32 [64][68],
/// P and dS tiles in the storage type [64][72], the tile's lse and delta.
/// 90,624 bytes for D = 64, 123,392 for D = 128.
TESSERA_FLASH_HD int flashBackwardWmmaSharedBytes(int D) {
  return 2 * (2 * kFlashBlockQ + 2 * kFlashBlockK) * (D + 8) +
         2 * 4 * kFlashBlockK * (kFlashBlockQ + 4) +
         2 * 2 * kFlashBlockK * (kFlashBlockQ + 8) + 2 * 4 * kFlashBlockQ;
}

/// Dynamic shared memory (bytes) of each backward kernel (dK/dV and dQ):
/// Q, dO, K, V tiles, one P/dS tile and the tile's lse and delta. 83,712
/// bytes for D = 64, 149,248 for D = 128 (below the 163 KiB of sm_80).
TESSERA_FLASH_HD int flashBackwardSharedBytes(int D) {
  return 4 * ((2 * kFlashBlockQ + 2 * kFlashBlockK) * (D + 1) +
              kFlashBlockQ * (kFlashBlockK + 1) + 2 * kFlashBlockQ);
}

//===----------------------------------------------------------------------===//
// Launch functions.
//===----------------------------------------------------------------------===//

/// Bytes of device scratch flashAttentionBackward needs (the f32 delta
/// [batch, sq], rounded up to 256 bytes); 0 for the forward, which needs
/// none. The dtype does not change it (taken for future tensor-core paths).
int64_t flashAttentionScratchBytes(const FlashDims &d, DType dtype,
                                   bool backward);

/// Forward: o [batch, sq, dv] (dtype) and lse [batch, sq] (f32) are
/// OVERWRITTEN; q, k, v in `dtype` (F32, BF16 or F16) with the shapes of the
/// file comment; mask: nullable f32 [sq, sk]; all pointers are device
/// memory, contiguous row major, aligned to their element size; o and lse
/// must not alias the inputs. Asynchronous on `stream`.
/// Errors (nothing is launched): cudaErrorInvalidValue when dtype is not a
/// float type, a dim is negative, group < 1 or not dividing batch, dh or
/// dv > 128, causal with sq != sk, or the grid would be too large; otherwise
/// the launch's cudaGetLastError(). Uses 66,560 (dh, dv <= 64) or 115,712 bytes
/// of dynamic shared memory per block for f32, 71,680 or 112,640 for the
/// bf16/f16 tensor-core kernel (cudaFuncAttributeMaxDynamicSharedMemorySize is
/// set). Queries the current device's compute capability (cudaGetDevice) to
/// pick the kernel.
cudaError_t flashAttentionForward(const FlashDims &d, DType dtype,
                                  const void *q, const void *k, const void *v,
                                  const float *mask, float scale, bool causal,
                                  void *o, float *lse, cudaStream_t stream);

/// Backward: dq [batch, sq, dh], dk [batch/group, sk, dh], dv [batch/group,
/// sk, dv] (dtype) are OVERWRITTEN. o and lse must be flashAttentionForward's
/// (or cpu::attentionForward's) outputs for the same q, k, v, mask, scale,
/// causal; dout [batch, sq, dv] (dtype). `scratch`: device memory of at
/// least flashAttentionScratchBytes(d, dtype, true) bytes, 4-byte aligned
/// (holds delta; may be null when that is 0). Three kernels in stream order:
/// delta, dK/dV (parallel over key tiles), dQ (parallel over query tiles);
/// deterministic (no atomics, fixed summation order). Errors as
/// flashAttentionForward. Uses 83,712 (dh, dv <= 64) or 149,248 bytes of
/// dynamic shared memory per block for f32, 90,624 or 123,392 for the
/// bf16/f16 tensor-core kernels.
cudaError_t flashAttentionBackward(const FlashDims &d, DType dtype,
                                   const void *q, const void *k, const void *v,
                                   const void *o, const float *lse,
                                   const void *dout, const float *mask,
                                   float scale, bool causal, void *dq, void *dk,
                                   void *dv, void *scratch,
                                   cudaStream_t stream);

} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_FLASHATTENTION_H

//===- FlashAttention.cu - Fused tiled attention kernels ------------------===//
//
// Launch functions of the FlashAttention kernels (FlashAttentionKernels.cuh);
// see FlashAttention.h for shapes, semantics and sources.
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cuda/FlashAttention.h"

#include "runtime/backends/cuda/CudaDType.cuh"
#include "runtime/backends/cuda/FlashAttentionKernels.cuh"

#include <climits>
#include <type_traits>

using namespace tessera::runtime;
using namespace tessera::runtime::cuda;
using namespace tessera::runtime::cuda::flash_detail;

namespace {

//===----------------------------------------------------------------------===//
// Host side.
//===----------------------------------------------------------------------===//

/// Shared validation of both directions.
cudaError_t validate(const FlashDims &d, bool causal) {
  if (d.batch < 0 || d.sq < 0 || d.sk < 0 || d.dh < 0 || d.dv < 0)
    return cudaErrorInvalidValue;
  if (d.group < 1 || d.batch % d.group != 0)
    return cudaErrorInvalidValue; // GQA: n_rep must divide the query rows
  if (flashPaddedHeadDim(d.dh, d.dv) == 0)
    return cudaErrorInvalidValue; // dh or dv > kFlashMaxHeadDim
  if (causal && d.sq != d.sk)
    return cudaErrorInvalidValue;
  const int64_t tiles = flashNumTiles(d.sq > d.sk ? d.sq : d.sk, kFlashBlockQ);
  if (d.batch > 0 && tiles > INT_MAX / d.batch)
    return cudaErrorInvalidValue; // grid too large
  return cudaSuccess;
}

/// Launches `kernel` on batch * tiles blocks with `smemBytes` of dynamic
/// shared memory (raising the opt-in limit first).
template <typename Kernel, typename Args>
cudaError_t launch(Kernel kernel, int64_t blocks, int smemBytes,
                   cudaStream_t stream, const Args &args) {
  if (blocks <= 0)
    return cudaSuccess;
  cudaError_t err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes);
  if (err != cudaSuccess)
    return err;
  kernel<<<static_cast<unsigned>(blocks), kFlashThreads, smemBytes, stream>>>(
      args);
  return cudaGetLastError();
}

template <typename T>
FlashArgs<T> makeArgs(const FlashDims &d, float scale, bool causal) {
  FlashArgs<T> a{};
  a.batch = d.batch;
  a.group = d.group;
  a.sq = d.sq;
  a.sk = d.sk;
  a.dh = static_cast<int>(d.dh);
  a.dv = static_cast<int>(d.dv);
  a.scale = scale;
  a.causal = causal;
  a.qTiles = flashNumTiles(d.sq, kFlashBlockQ);
  a.kTiles = flashNumTiles(d.sk, kFlashBlockK);
  return a;
}

template <typename T, int D>
cudaError_t forwardFor(const FlashArgs<T> &a, bool tensorCores,
                       cudaStream_t stream) {
  if constexpr (!std::is_same<T, float>::value) // no f32 WMMA kernel
    if (tensorCores)
      return launch(flashForwardWmmaKernel<T, D>, a.batch * a.qTiles,
                    flashForwardWmmaSharedBytes(D), stream, a);
  return launch(flashForwardKernel<T, D>, a.batch * a.qTiles,
                flashForwardSharedBytes(D), stream, a);
}

/// Compute capability major of the current device.
cudaError_t computeMajor(int &major) {
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device))
    return err;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                device);
}

template <typename T, int D>
cudaError_t backwardFor(const FlashArgs<T> &a, bool tensorCores,
                        cudaStream_t stream) {
  if constexpr (!std::is_same<T, float>::value) { // no f32 WMMA kernels
    if (tensorCores) {
      const int smem = flashBackwardWmmaSharedBytes(D);
      cudaError_t err = launch(flashBackwardKVWmmaKernel<T, D>,
                               (a.batch / a.group) * a.kTiles, smem, stream, a);
      if (err != cudaSuccess)
        return err;
      return launch(flashBackwardQWmmaKernel<T, D>, a.batch * a.qTiles, smem,
                    stream, a);
    }
  }
  const int smem = flashBackwardSharedBytes(D);
  // dK/dV: one block per (K/V row, key tile); GQA's group loops inside.
  cudaError_t err = launch(flashBackwardKVKernel<T, D>,
                           (a.batch / a.group) * a.kTiles, smem, stream, a);
  if (err != cudaSuccess)
    return err;
  return launch(flashBackwardQKernel<T, D>, a.batch * a.qTiles, smem, stream,
                a);
}

} // namespace

int64_t tessera::runtime::cuda::flashAttentionScratchBytes(const FlashDims &d,
                                                           DType dtype,
                                                           bool backward) {
  (void)dtype;
  if (!backward || d.batch <= 0 || d.sq <= 0)
    return 0;
  const int64_t bytes = d.batch * d.sq * static_cast<int64_t>(sizeof(float));
  return (bytes + 255) / 256 * 256;
}

cudaError_t tessera::runtime::cuda::flashAttentionForward(
    const FlashDims &d, DType dtype, const void *q, const void *k,
    const void *v, const float *mask, float scale, bool causal, void *o,
    float *lse, cudaStream_t stream) {
  if (cudaError_t err = validate(d, causal))
    return err;
  return dispatchFloat(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    FlashArgs<T> a = makeArgs<T>(d, scale, causal);
    a.q = static_cast<const T *>(q);
    a.k = static_cast<const T *>(k);
    a.v = static_cast<const T *>(v);
    a.mask = mask;
    a.out = static_cast<T *>(o);
    a.lseOut = lse;
    int major = 0;
    if (dtype != DType::F32)
      if (cudaError_t err = computeMajor(major))
        return err;
    const bool tensorCores = flashUsesTensorCores(dtype, major);
    if (flashPaddedHeadDim(d.dh, d.dv) == 64)
      return forwardFor<T, 64>(a, tensorCores, stream);
    return forwardFor<T, 128>(a, tensorCores, stream);
  });
}

cudaError_t tessera::runtime::cuda::flashAttentionBackward(
    const FlashDims &d, DType dtype, const void *q, const void *k,
    const void *v, const void *o, const float *lse, const void *dout,
    const float *mask, float scale, bool causal, void *dq, void *dk, void *dv,
    void *scratch, cudaStream_t stream) {
  if (cudaError_t err = validate(d, causal))
    return err;
  return dispatchFloat(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    FlashArgs<T> a = makeArgs<T>(d, scale, causal);
    a.q = static_cast<const T *>(q);
    a.k = static_cast<const T *>(k);
    a.v = static_cast<const T *>(v);
    a.o = static_cast<const T *>(o);
    a.dout = static_cast<const T *>(dout);
    a.mask = mask;
    a.lse = lse;
    a.delta = static_cast<float *>(scratch);
    a.dq = static_cast<T *>(dq);
    a.dk = static_cast<T *>(dk);
    a.dv_ = static_cast<T *>(dv);
    int major = 0;
    if (dtype != DType::F32)
      if (cudaError_t err = computeMajor(major))
        return err;
    const bool tensorCores = flashUsesTensorCores(dtype, major);
    const int64_t rows = d.batch * d.sq;
    if (rows > 0) {
      const int threads = 256;
      const int64_t blocks = (rows + threads / 32 - 1) / (threads / 32);
      flashDeltaKernel<T>
          <<<static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8),
             threads, 0, stream>>>(a.dout, a.o, rows, a.dv,
                                   static_cast<float *>(scratch));
      if (cudaError_t err = cudaGetLastError())
        return err;
    }
    if (flashPaddedHeadDim(d.dh, d.dv) == 64)
      return backwardFor<T, 64>(a, tensorCores, stream);
    return backwardFor<T, 128>(a, tensorCores, stream);
  });
}

//===- CudaCommon.h - Shared definitions of the CUDA backend ----*- C++ -*-===//
//
// Conventions shared by every CUDA kernel of Tessera (runtime/backends/cuda):
//  - Kernels take `Tensor`s whose storage is DEVICE memory (made with
//    Tensor::view over a device pointer, or by the executor's device arena).
//    Host code never dereferences their data; only shape, dtype and raw()
//    are used on the host.
//  - Every launch is asynchronous on the given stream. Launch functions
//    return the cudaError_t of the launch (cudaGetLastError), never
//    synchronise, and never allocate device memory unless stated (scratch
//    comes from the caller so that a whole step can be captured as a CUDA
//    graph).
//  - Floating-point tensors may be f32, bf16 or f16 unless stated: values
//    are loaded as f32, computed in f32 (reductions in f32 with a
//    deterministic tree, or f64 where stated) and rounded to the storage
//    type on the store, as the CPU backend's widened kernels do.
//  - Data-dependent errors (an embedding id or a cross-entropy label out of
//    range) cannot be returned by an asynchronous kernel: the kernel records
//    the first offending element in a DeviceStatus (device memory, zeroed by
//    the caller), which the executor reads back once per step and turns into
//    an llvm::Error naming the kernel, the flat index and the value.
//
// This header is valid C++ (g++) and CUDA (nvcc).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_CUDACOMMON_H
#define TESSERA_RUNTIME_BACKENDS_CUDA_CUDACOMMON_H

#include "runtime/Tensor.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera {
namespace runtime {
namespace cuda {

/// Device-side record of the first data-dependent error of a kernel. Lives
/// in device memory; all fields 0 means "no error". A kernel that finds a
/// bad element sets `code` (one of the Code values) with atomicCAS from 0,
/// and only the thread that won the CAS writes `index` and `value`, so the
/// record is that of one offending element (not necessarily the first in
/// flat order).
struct DeviceStatus {
  enum Code : int32_t {
    Ok = 0,
    IdOutOfRange = 1,    ///< gather / gather_grad: ids[index] = value
    LabelOutOfRange = 2, ///< cross-entropy: labels[index] = value
  };
  int32_t code = Ok;
  int32_t pad = 0;
  int64_t index = 0; ///< flat index of the offending element
  int64_t value = 0; ///< its value
  int64_t limit = 0; ///< the exclusive upper bound it violated
};

/// Threads per block used by the simple grid-stride kernels.
constexpr int kThreadsPerBlock = 256;

/// Blocks for a grid-stride loop over `n` elements (at least 1, at most
/// 65535·8 so that very large tensors loop instead of overflowing the grid).
inline unsigned gridFor(int64_t n, int threads = kThreadsPerBlock) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1)
    blocks = 1;
  if (blocks > 65535 * 8)
    blocks = 65535 * 8;
  return static_cast<unsigned>(blocks);
}

} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_CUDACOMMON_H

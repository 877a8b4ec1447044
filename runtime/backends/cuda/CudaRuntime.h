//===- CudaRuntime.h - CUDA devices, memory and errors ----------*- C++ -*-===//
//
// The host side of the CUDA backend that is not a kernel:
//  - `deviceAvailable` says whether a usable GPU exists, with the reason
//    when it does not (no driver, driver too old for the runtime, no
//    device), so that `tessera-run --backend cuda` and the tests can report
//    it instead of failing later;
//  - device tensors: `Tensor`s whose storage is device memory (cudaMalloc),
//    freed when the last Tensor sharing it goes away;
//  - copies between host and device tensors (same dtype and shape);
//  - `check`: a cudaError_t as an llvm::Error naming what failed.
//
// Every function that can fail returns llvm::Error / llvm::Expected; none
// aborts.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_CUDARUNTIME_H
#define TESSERA_RUNTIME_BACKENDS_CUDA_CUDARUNTIME_H

#include "runtime/backends/cuda/CudaCommon.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <string>

namespace tessera {
namespace runtime {
namespace cuda {

/// `err` as an llvm::Error: success for cudaSuccess, otherwise
/// "<what>: <cudaGetErrorName>: <cudaGetErrorString>".
llvm::Error check(cudaError_t err, const llvm::Twine &what);

/// Success when at least one CUDA device can be used by this process;
/// otherwise an error saying why, e.g. "no CUDA device: cudaGetDeviceCount:
/// cudaErrorInsufficientDriver: CUDA driver version is insufficient for
/// CUDA runtime version" on a machine without an NVIDIA driver.
llvm::Error deviceAvailable();

/// "NVIDIA H100 80GB HBM3 (sm_90, 79.2 GiB)" for device `ordinal`.
llvm::Expected<std::string> deviceName(int ordinal);

/// Uninitialised device tensor (cudaMalloc; at least 1 byte is allocated so
/// that empty tensors have a valid pointer). Error: allocation failed
/// (names the bytes asked for).
llvm::Expected<Tensor> emptyDevice(DType dtype, std::vector<int64_t> shape);

/// Device copy of host tensor `host` (synchronous: cudaMemcpy, then
/// cudaDeviceSynchronize, so work on any stream may read it).
llvm::Expected<Tensor> toDevice(const Tensor &host);

/// Host copy of device tensor `device` (cudaDeviceSynchronize, then a
/// synchronous cudaMemcpy: after the work of every stream).
llvm::Expected<Tensor> toHost(const Tensor &device);

/// Copies `bytes` from device tensor `src` to `dst` (device or host
/// pointers alike; cudaMemcpyDefault) asynchronously on `stream`.
llvm::Error copyAsync(void *dst, const void *src, size_t bytes,
                      cudaStream_t stream, const llvm::Twine &what);

/// Reads a DeviceStatus from device memory (synchronises `stream` first)
/// and resets it to Ok. Returns the status read.
llvm::Expected<DeviceStatus> takeStatus(DeviceStatus *deviceStatus,
                                        cudaStream_t stream);

} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_CUDARUNTIME_H

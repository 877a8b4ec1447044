//===- CudaRuntime.cpp - CUDA devices, memory and errors ------------------===//

#include "runtime/backends/cuda/CudaRuntime.h"

#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime.h>

using namespace tessera::runtime;
using namespace tessera::runtime::cuda;

llvm::Error cuda::check(cudaError_t err, const llvm::Twine &what) {
  if (err == cudaSuccess)
    return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 what + ": " + cudaGetErrorName(err) + ": " +
                                     cudaGetErrorString(err));
}

llvm::Error cuda::deviceAvailable() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError(); // clear the sticky-free error state
    return check(err, "no CUDA device: cudaGetDeviceCount");
  }
  if (count == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no CUDA device: the driver reports 0 "
                                   "devices");
  return llvm::Error::success();
}

llvm::Expected<std::string> cuda::deviceName(int ordinal) {
  cudaDeviceProp prop;
  if (llvm::Error e = check(cudaGetDeviceProperties(&prop, ordinal),
                            "cudaGetDeviceProperties"))
    return std::move(e);
  return llvm::formatv("{0} (sm_{1}{2}, {3:F1} GiB)", prop.name, prop.major,
                       prop.minor,
                       static_cast<double>(prop.totalGlobalMem) /
                           (1024.0 * 1024.0 * 1024.0))
      .str();
}

llvm::Expected<Tensor> cuda::emptyDevice(DType dtype,
                                         std::vector<int64_t> shape) {
  size_t bytes = static_cast<size_t>(shapeNumel(shape)) * dtypeSize(dtype);
  void *ptr = nullptr;
  if (llvm::Error e = check(cudaMalloc(&ptr, bytes ? bytes : 1),
                            llvm::formatv("cudaMalloc of {0} bytes", bytes)))
    return std::move(e);
  std::shared_ptr<void> owner(ptr, [](void *p) { cudaFree(p); });
  return Tensor::view(ptr, dtype, std::move(shape), std::move(owner));
}

llvm::Expected<Tensor> cuda::toDevice(const Tensor &host) {
  llvm::Expected<Tensor> dev = emptyDevice(host.dtype(), host.shape());
  if (!dev)
    return dev.takeError();
  if (llvm::Error e =
          check(cudaMemcpy(dev->raw(), host.raw(), host.bytes(),
                           cudaMemcpyHostToDevice),
                llvm::formatv("copying {0} bytes to the device", host.bytes())))
    return std::move(e);
  // A pageable upload may still be in flight when cudaMemcpy returns; work
  // on non-blocking streams is not ordered after it.
  if (llvm::Error e = check(cudaDeviceSynchronize(), "finishing an upload"))
    return std::move(e);
  return dev;
}

llvm::Expected<Tensor> cuda::toHost(const Tensor &device) {
  // After the work of every stream, not only the legacy default one.
  if (llvm::Error e = check(cudaDeviceSynchronize(), "waiting for the device"))
    return std::move(e);
  Tensor host = Tensor::empty(device.dtype(), device.shape());
  if (llvm::Error e = check(
          cudaMemcpy(host.raw(), device.raw(), device.bytes(),
                     cudaMemcpyDeviceToHost),
          llvm::formatv("copying {0} bytes from the device", device.bytes())))
    return std::move(e);
  return host;
}

llvm::Error cuda::copyAsync(void *dst, const void *src, size_t bytes,
                            cudaStream_t stream, const llvm::Twine &what) {
  return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
               what);
}

llvm::Expected<DeviceStatus> cuda::takeStatus(DeviceStatus *deviceStatus,
                                              cudaStream_t stream) {
  DeviceStatus status;
  if (llvm::Error e =
          check(cudaMemcpyAsync(&status, deviceStatus, sizeof(status),
                                cudaMemcpyDeviceToHost, stream),
                "reading the kernels' status"))
    return std::move(e);
  if (llvm::Error e = check(cudaStreamSynchronize(stream),
                            "waiting for the step's kernels"))
    return std::move(e);
  if (status.code != DeviceStatus::Ok)
    if (llvm::Error e = check(
            cudaMemsetAsync(deviceStatus, 0, sizeof(DeviceStatus), stream),
            "resetting the kernels' status"))
      return std::move(e);
  return status;
}

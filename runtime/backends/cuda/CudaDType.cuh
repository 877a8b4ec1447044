//===- CudaDType.cuh - f32/bf16/f16 loads and stores in kernels -*- CUDA -*-===//
//
// Device helpers shared by the .cu files: every floating-point element is
// loaded as float and stored back rounded to nearest even (the hardware
// conversions __float2bfloat16_rn / __float2half_rn, which round exactly as
// runtime/Tensor.h's toBFloat16 / toFloat16 do on the host).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_CUDADTYPE_CUH
#define TESSERA_RUNTIME_BACKENDS_CUDA_CUDADTYPE_CUH

#include "runtime/backends/cuda/CudaCommon.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tessera {
namespace runtime {
namespace cuda {

/// Storage type of a floating-point dtype on the device.
template <DType D> struct DeviceFloat;
template <> struct DeviceFloat<DType::F32> { using type = float; };
template <> struct DeviceFloat<DType::BF16> { using type = __nv_bfloat16; };
template <> struct DeviceFloat<DType::F16> { using type = __half; };

__device__ __forceinline__ float toF32(float x) { return x; }
__device__ __forceinline__ float toF32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float toF32(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T fromF32(float x);
template <> __device__ __forceinline__ float fromF32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromF32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half fromF32<__half>(float x) {
  return __float2half_rn(x);
}

/// A type carried as a value, for generic lambdas (C++17 has no template
/// lambdas): `[&](auto tag) { using T = typename decltype(tag)::type; }`.
template <typename T> struct TypeTag {
  using type = T;
};

/// Calls `f(TypeTag<T>{})` with T the storage type of `dtype` (float,
/// __nv_bfloat16 or __half); returns cudaErrorInvalidValue for other
/// dtypes.
template <typename F> cudaError_t dispatchFloat(DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32:
    return f(TypeTag<float>{});
  case DType::BF16:
    return f(TypeTag<__nv_bfloat16>{});
  case DType::F16:
    return f(TypeTag<__half>{});
  default:
    return cudaErrorInvalidValue;
  }
}

} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_CUDADTYPE_CUH

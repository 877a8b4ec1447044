//===- CudaTestUtil.h - fixture and helpers for CUDA tests ------*- C++ -*-===//
//
// The CUDA conformance tests compare each CUDA kernel with the CPU kernel of
// the same op (itself tested against PyTorch in test/unittests/runtime) on
// the same random inputs. Without a usable GPU every test calls GTEST_SKIP
// with the reason, so ctest reports it as skipped, never as passed.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_UNITTESTS_CUDA_CUDATESTUTIL_H
#define TESSERA_TEST_UNITTESTS_CUDA_CUDATESTUTIL_H

#include "runtime/backends/cuda/CudaRuntime.h"

#include "../runtime/TestUtil.h"

#include "gtest/gtest.h"

#include <cmath>
#include <string>

namespace tessera {
namespace runtime {
namespace test {

/// Base fixture: skips the test when no CUDA device can be used.
class CudaTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (llvm::Error e = cuda::deviceAvailable())
      GTEST_SKIP() << llvm::toString(std::move(e));
  }

  /// Device copy of a host tensor (fails the test on error).
  Tensor dev(const Tensor &host) {
    llvm::Expected<Tensor> t = cuda::toDevice(host);
    if (!t) {
      ADD_FAILURE() << llvm::toString(t.takeError());
      return Tensor();
    }
    return *t;
  }
  /// Uninitialised device tensor.
  Tensor devEmpty(DType dtype, std::vector<int64_t> shape) {
    llvm::Expected<Tensor> t = cuda::emptyDevice(dtype, std::move(shape));
    if (!t) {
      ADD_FAILURE() << llvm::toString(t.takeError());
      return Tensor();
    }
    return *t;
  }
  /// Host copy of a device tensor, after synchronising the device.
  Tensor host(const Tensor &device) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    llvm::Expected<Tensor> t = cuda::toHost(device);
    if (!t) {
      ADD_FAILURE() << llvm::toString(t.takeError());
      return Tensor();
    }
    return *t;
  }
};

/// Largest |a - b| / max(|b|, floor) over the elements (f32, bf16 or f16
/// tensors of one shape, compared in f32).
inline double maxRelativeError(const Tensor &a, const Tensor &b,
                               double floor = 1e-3) {
  auto at = [](const Tensor &t, int64_t i) -> double {
    switch (t.dtype()) {
    case DType::F32:
      return t.data<float>()[i];
    case DType::BF16:
      return toFloat(t.data<BFloat16>()[i]);
    case DType::F16:
      return toFloat(t.data<Float16>()[i]);
    case DType::I64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DType::I1:
      return t.data<uint8_t>()[i];
    }
    return 0;
  };
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    double x = at(a, i), y = at(b, i);
    if (std::isnan(x) != std::isnan(y))
      return INFINITY;
    if (std::isnan(x))
      continue;
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y)
        return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(x - y) / std::max(std::fabs(y), floor));
  }
  return worst;
}

} // namespace test
} // namespace runtime
} // namespace tessera

#endif // TESSERA_TEST_UNITTESTS_CUDA_CUDATESTUTIL_H

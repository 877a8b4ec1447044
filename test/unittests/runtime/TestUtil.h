//===- TestUtil.h - helpers for the runtime unit tests ----------*- C++ -*-===//

#ifndef TESSERA_TEST_UNITTESTS_RUNTIME_TESTUTIL_H
#define TESSERA_TEST_UNITTESTS_RUNTIME_TESTUTIL_H

#include "runtime/Tensor.h"

#include "llvm/Support/Error.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace tessera {
namespace runtime {
namespace test {

/// Uniform random f32 tensor in [lo, hi), deterministic per seed.
inline Tensor randomF32(std::vector<int64_t> shape, unsigned seed,
                        float lo = -2.0f, float hi = 2.0f) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = dist(gen);
  return t;
}

inline Tensor randomI64(std::vector<int64_t> shape, unsigned seed, int64_t lo,
                        int64_t hi) {
  Tensor t = Tensor::empty(DType::I64, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = dist(gen);
  return t;
}

inline std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

/// Multi-index of flat index `i` in `shape`.
inline std::vector<int64_t> unravel(int64_t i,
                                    const std::vector<int64_t> &shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

inline int64_t ravel(const std::vector<int64_t> &idx,
                     const std::vector<int64_t> &shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    i = i * shape[d] + idx[d];
  return i;
}

/// Expects |a - b| <= atol + rtol * |b| elementwise (f32 tensors).
inline void expectClose(const Tensor &a, const Tensor &b, double rtol = 1e-5,
                        double atol = 1e-6) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), DType::F32);
  ASSERT_EQ(b.dtype(), DType::F32);
  int bad = 0;
  for (int64_t i = 0; i < a.numel() && bad < 5; ++i) {
    double x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x) && std::isnan(y))
      continue;
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) {
      ADD_FAILURE() << "index " << i << ": " << x << " vs " << y;
      ++bad;
    }
  }
}

inline void expectEqualBytes(const Tensor &a, const Tensor &b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.bytes()));
}

#define ASSERT_NO_ERR(E)                                                       \
  do {                                                                         \
    llvm::Error err_ = (E);                                                    \
    ASSERT_FALSE(bool(err_)) << llvm::toString(std::move(err_));               \
  } while (0)

/// Consumes `e` and returns its message ("" on success).
inline std::string errorMessage(llvm::Error e) {
  if (!e)
    return "";
  return llvm::toString(std::move(e));
}

} // namespace test
} // namespace runtime
} // namespace tessera

#endif

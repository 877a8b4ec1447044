//===- PhiloxTest.cpp - Philox-4x32-10 and the dropout mask ---------------===//
//
// Known answers: the three philox4x32 10 lines of Random123's
// tests/kat_vectors (Salmon et al., SC'11). Mask: kept fraction within 4
// standard deviations of 1 − ratio, kept values scaled by exactly
// 1/(1 − ratio), masks differing across steps, ops and seeds; and the
// layout walk (exec::dropoutFactors + cpu::dropout) on split tensors (a
// block split, a striped sequence, a fused factor, the micro-batch axis):
// the pieces of all ranks recompose the unsplit output bit for bit.
//
//===----------------------------------------------------------------------===//

#include "common/random/Philox.h"
#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/executor/KernelDesc.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <vector>

using namespace tessera;
using namespace tessera::random;
using tessera::runtime::DType;
using tessera::runtime::Tensor;
using tessera::runtime::exec::DropoutAttrs;

namespace {

TEST(Philox, RandomKnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat &k : kats) {
    Philox4x32 out = philox4x32({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}},
                                k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out.v[i], k.out[i])
          << "word " << i << " of counter " << std::hex << k.ctr[0];
  }
}

Tensor ones(int64_t n) {
  Tensor t = Tensor::zeros(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    t.data<float>()[i] = 1.0f + 0.001f * static_cast<float>(i % 97);
  return t;
}

/// The unsplit walk of a tensor of `n` elements.
std::vector<DropoutFactor> whole(int64_t n) { return {{n, 0, 1}}; }

TEST(DropoutMask, KeptFractionAndScale) {
  const int64_t n = 1 << 20;
  const double ratio = 0.1;
  Tensor x = ones(n);
  Tensor y = Tensor::zeros(DType::F32, {n});
  DropoutKey key{1234, 7, 3};
  float scale = static_cast<float>(1.0 / (1.0 - ratio));
  runtime::cpu::dropout(x, key, dropoutThreshold(ratio), scale, whole(n), y);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v = y.data<float>()[i];
    if (v != 0.0f) {
      ++kept;
      ASSERT_EQ(v, x.data<float>()[i] * scale) << "element " << i;
    }
  }
  double p = 1.0 - ratio, mean = n * p, sd = std::sqrt(n * p * (1 - p));
  EXPECT_LT(std::abs(kept - mean), 4 * sd)
      << "kept " << kept << " of " << n << ", expected " << mean << " ± "
      << 4 * sd;
  // Every 24-bit uniform at or above ceil(0.1 · 2^24) is kept.
  EXPECT_EQ(dropoutThreshold(ratio), 1677722u);
  EXPECT_EQ(dropoutThreshold(0.0), 0u);
}

TEST(DropoutMask, DependsOnStepOpAndSeedOnly) {
  const int64_t n = 4096;
  auto mask = [&](DropoutKey key) {
    std::vector<bool> m(n);
    for (int64_t i = 0; i < n; ++i)
      m[i] = dropoutKeep(key, i, dropoutThreshold(0.5));
    return m;
  };
  std::vector<bool> base = mask({1234, 0, 0});
  EXPECT_EQ(base, mask({1234, 0, 0}));
  EXPECT_NE(base, mask({1234, 1, 0}));
  EXPECT_NE(base, mask({1234, 0, 1}));
  EXPECT_NE(base, mask({1235, 0, 0}));
  EXPECT_NE(base, mask({1234ull | (1ull << 40), 0, 0}));
}

/// A factor of DropoutAttrs (global size, axes with their sizes).
DropoutAttrs::Factor factor(int64_t size, std::vector<int64_t> axes,
                            std::vector<int64_t> sizes) {
  DropoutAttrs::Factor f;
  f.globalSize = size;
  int64_t ways = 1;
  for (int64_t s : sizes)
    ways *= s;
  f.localSize = size / ways;
  f.axes = std::move(axes);
  f.axisSizes = std::move(sizes);
  return f;
}

void setStrides(DropoutAttrs &a) {
  int64_t stride = 1;
  for (auto it = a.factors.rbegin(); it != a.factors.rend(); ++it) {
    it->globalStride = stride;
    stride *= it->globalSize;
  }
}

/// Runs the kernel on every (coords, micro-batch) of `gridShape` (the last
/// axis is the micro-batch axis when `mbAxis`), places each piece by
/// Layout's rule and compares the recomposed tensor with the unsplit run.
void expectRecomposes(DropoutAttrs a, std::vector<int64_t> gridShape,
                      bool mbAxis) {
  setStrides(a);
  int64_t n = 1;
  for (const auto &f : a.factors)
    n *= f.globalSize;
  Tensor x = ones(n);
  Tensor want = Tensor::zeros(DType::F32, {n});
  DropoutKey key{99, 5, 2};
  uint32_t t = dropoutThreshold(0.3);
  float scale = static_cast<float>(1.0 / 0.7);
  runtime::cpu::dropout(x, key, t, scale, whole(n), want);

  int64_t ranks = 1;
  for (int64_t s : gridShape)
    ranks *= s;
  std::vector<float> got(n, -1.0f);
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<int64_t> coords(gridShape.size());
    for (int64_t i = gridShape.size() - 1, rest = r; i >= 0; --i) {
      coords[i] = rest % gridShape[i];
      rest /= gridShape[i];
    }
    int64_t mb = 0;
    if (mbAxis) {
      mb = coords.back();
      coords.pop_back();
    }
    std::vector<DropoutFactor> f = runtime::exec::dropoutFactors(a, coords, mb);
    int64_t local = 1;
    for (const DropoutFactor &e : f)
      local *= e.localSize;
    // The local input is the global input's piece (same walk).
    Tensor xl = Tensor::zeros(DType::F32, {local});
    Tensor yl = Tensor::zeros(DType::F32, {local});
    for (int64_t i = 0; i < local; ++i)
      xl.data<float>()[i] = x.data<float>()[dropoutGlobalIndex(
          f.data(), static_cast<int>(f.size()), i)];
    runtime::cpu::dropout(xl, key, t, scale, f, yl);
    for (int64_t i = 0; i < local; ++i)
      got[dropoutGlobalIndex(f.data(), static_cast<int>(f.size()), i)] =
          yl.data<float>()[i];
  }
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want.data<float>()[i], sizeof(float)), 0)
        << "global element " << i << ": " << got[i] << " vs "
        << want.data<float>()[i];
}

TEST(DropoutLayout, BatchOverDpSequenceOverTp) {
  // [B=4, S=6, D=5]: batch over axis 0 (2), sequence over axis 1 (3).
  DropoutAttrs a;
  a.factors = {factor(4, {0}, {2}), factor(6, {1}, {3}), factor(5, {}, {})};
  expectRecomposes(a, {2, 3}, false);
}

TEST(DropoutLayout, StripedSequenceAndMicroBatches) {
  // [B=4, S=8, D=3]: batch over dp (axis 0, 2) then the micro-batch axis
  // (axis 2, 2); the sequence striped {4, 2 : [1]} over sp (axis 1, 2).
  DropoutAttrs a;
  a.factors = {factor(4, {0, 2}, {2, 2}), factor(4, {}, {}),
               factor(2, {1}, {2}), factor(3, {}, {})};
  expectRecomposes(a, {2, 2, 2}, true);
}

TEST(DropoutLayout, FusedFactorAndTwoAxesOnOneDim) {
  // [3·8 columns] as {3, 8 : [0, 1]} (fused QKV, heads over two axes).
  DropoutAttrs a;
  a.factors = {factor(5, {}, {}), factor(3, {}, {}), factor(8, {0, 1}, {2, 2})};
  expectRecomposes(a, {2, 2}, false);
}

} // namespace

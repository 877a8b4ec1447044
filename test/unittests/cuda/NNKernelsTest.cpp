//===- NNKernelsTest.cpp - CUDA NN kernels against the CPU kernels --------===//
//
// Host tests (run everywhere): the index math, launch planning, online
// softmax merge and optimizer arithmetic of NNKernels.h. Device tests
// (skipped without a GPU): every kernel against the cpu:: kernel of the same
// name on random inputs, f32 within 1e-5 and bf16 within 2e-2 relative
// error, bit-exact where the order of operations is the CPU's (optimizers,
// gather_grad), and out-of-range ids / labels reported in a DeviceStatus.
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cuda/NNKernels.h"

#include "CudaTestUtil.h"

#include "runtime/backends/cpu/CpuKernels.h"

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <set>

using namespace tessera::runtime;
using namespace tessera::runtime::test;

namespace {

//===----------------------------------------------------------------------===//
// Host tests
//===----------------------------------------------------------------------===//

TEST(NNKernelsHost, AxisSplitMatchesUnravel) {
  std::vector<std::vector<int64_t>> shapes = {
      {5}, {3, 4}, {2, 3, 4}, {4, 1, 3, 2}, {1, 7, 1}};
  for (const std::vector<int64_t> &shape : shapes) {
    int64_t total = 1;
    for (int64_t d : shape)
      total *= d;
    for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis) {
      cuda::AxisSplit s = cuda::splitAxis(shape, axis);
      EXPECT_EQ(s.outer * s.n * s.inner, total);
      EXPECT_EQ(s.n, shape[axis]);
      // Every flat index is visited exactly once, and element k of a line
      // has multi-index k at `axis`.
      std::vector<int> seen(total, 0);
      for (int64_t l = 0; l < s.lines(); ++l) {
        std::vector<int64_t> first;
        for (int64_t k = 0; k < s.n; ++k) {
          int64_t i = s.lineBase(l) + k * s.inner;
          ASSERT_GE(i, 0);
          ASSERT_LT(i, total);
          ++seen[i];
          std::vector<int64_t> idx = unravel(i, shape);
          EXPECT_EQ(idx[axis], k);
          idx[axis] = 0;
          if (k == 0)
            first = idx;
          EXPECT_EQ(idx, first) << "line " << l << " leaves its fibre";
        }
      }
      for (int64_t i = 0; i < total; ++i)
        EXPECT_EQ(seen[i], 1) << "flat index " << i;
    }
  }
}

TEST(NNKernelsHost, RowsColsAndRowThreads) {
  cuda::RowsCols rc = cuda::splitRows({2, 3, 4, 5}, 2);
  EXPECT_EQ(rc.rows, 6);
  EXPECT_EQ(rc.cols, 20);
  rc = cuda::splitRows({2, 3}, 0);
  EXPECT_EQ(rc.rows, 1);
  EXPECT_EQ(rc.cols, 6);
  for (int64_t cols :
       std::vector<int64_t>{0, 1, 31, 32, 33, 127, 128, 129, 1000, 2048, 2049,
                            50257, int64_t(1) << 40}) {
    int t = cuda::rowBlockThreads(cols);
    EXPECT_EQ(t % 32, 0) << cols;
    EXPECT_GE(t, 32) << cols;
    EXPECT_LE(t, 512) << cols;
    if (cols <= 2048)
      EXPECT_GE(int64_t(t) * 4, cols) << cols;
  }
}

TEST(NNKernelsHost, SortEndBitCoversEveryKey) {
  EXPECT_EQ(cuda::sortEndBit(0), 1);
  EXPECT_EQ(cuda::sortEndBit(1), 1);
  EXPECT_EQ(cuda::sortEndBit(2), 2);
  EXPECT_EQ(cuda::sortEndBit(50257), 16);
  EXPECT_EQ(cuda::sortEndBit(65535), 16);
  EXPECT_EQ(cuda::sortEndBit(65536), 17);
  for (int64_t local :
       {int64_t(3), int64_t(1000), int64_t(1) << 31, (int64_t(1) << 32) - 2}) {
    int b = cuda::sortEndBit(local);
    EXPECT_GT(int64_t(1) << b, local) << local; // the sentinel key fits
    EXPECT_LE(int64_t(1) << (b - 1), local) << local;
  }
}

TEST(NNKernelsHost, OnlineSoftmaxMatchesTwoPass) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
  for (int trial = 0; trial < 50; ++trial) {
    int n = 1 + trial * 13;
    std::vector<float> x(n);
    for (float &v : x)
      v = dist(gen);
    float mx = -INFINITY;
    for (float v : x)
      mx = std::max(mx, v);
    double sum = 0;
    for (float v : x)
      sum += std::exp(v - mx);
    // Partial states over a random partition, merged in a random tree.
    std::vector<cuda::MaxSum> parts;
    int parts0 = 1 + trial % 9;
    for (int p = 0; p < parts0; ++p) {
      cuda::MaxSum st = cuda::maxSumEmpty();
      for (int i = p; i < n; i += parts0)
        st = cuda::maxSumAdd(st, x[i]);
      parts.push_back(st);
    }
    while (parts.size() > 1) {
      size_t i = gen() % (parts.size() - 1);
      parts[i] = cuda::maxSumMerge(parts[i], parts[i + 1]);
      parts.erase(parts.begin() + i + 1);
    }
    EXPECT_EQ(parts[0].m, mx);
    EXPECT_NEAR(parts[0].s, sum, 1e-6 * sum);
  }
  // Merging with the empty state is the identity; all -inf gives NaN as the
  // CPU kernel does.
  cuda::MaxSum a = cuda::maxSumAdd(cuda::maxSumEmpty(), 1.5f);
  cuda::MaxSum b = cuda::maxSumMerge(cuda::maxSumEmpty(), a);
  EXPECT_EQ(b.m, 1.5f);
  EXPECT_EQ(b.s, 1.0);
  cuda::MaxSum e = cuda::maxSumMerge(cuda::maxSumEmpty(), cuda::maxSumEmpty());
  EXPECT_EQ(e.s, 0.0);
  EXPECT_TRUE(std::isnan(cuda::maxSumAdd(cuda::maxSumEmpty(), -INFINITY).s));
  EXPECT_TRUE(std::isnan(cuda::maxSumAdd(a, INFINITY).s));
}

TEST(NNKernelsHost, MultiTensorPlanCoversEveryChunkOnce) {
  std::mt19937 gen(3);
  for (int trial = 0; trial < 40; ++trial) {
    int count = 1 + trial * 3;
    std::vector<int64_t> numel(count);
    for (int64_t &n : numel)
      n = gen() % 5 == 0 ? 0 : gen() % 1000;
    int64_t chunk = 1 + trial % 64;
    int maxTensors = 1 + trial % 5, maxBlocks = 1 + trial % 7;
    std::vector<cuda::MultiTensorLaunch> plan =
        cuda::planMultiTensor(numel, chunk, maxTensors, maxBlocks);
    std::set<std::pair<int, int64_t>> seen;
    for (const cuda::MultiTensorLaunch &l : plan) {
      ASSERT_FALSE(l.blockSlot.empty());
      ASSERT_LE(static_cast<int>(l.tensors.size()), maxTensors);
      ASSERT_LE(static_cast<int>(l.blockSlot.size()), maxBlocks);
      ASSERT_EQ(l.blockSlot.size(), l.blockChunk.size());
      for (size_t b = 0; b < l.blockSlot.size(); ++b) {
        ASSERT_GE(l.blockSlot[b], 0);
        ASSERT_LT(l.blockSlot[b], static_cast<int>(l.tensors.size()));
        int t = l.tensors[l.blockSlot[b]];
        int64_t c = l.blockChunk[b];
        ASSERT_LT(c * chunk, numel[t]);
        EXPECT_TRUE(seen.insert({t, c}).second)
            << "tensor " << t << " chunk " << c;
      }
    }
    size_t expected = 0;
    for (int64_t n : numel)
      expected += (n + chunk - 1) / chunk;
    EXPECT_EQ(seen.size(), expected);
  }
  // The defaults fit the kernel's argument struct (uint8 slots).
  std::vector<int64_t> many(100, 10);
  many.push_back(cuda::kMultiTensorChunk * 400 + 1);
  for (const cuda::MultiTensorLaunch &l : cuda::planMultiTensor(many)) {
    EXPECT_LE(static_cast<int>(l.tensors.size()), cuda::kMultiTensorMaxTensors);
    EXPECT_LE(static_cast<int>(l.blockSlot.size()),
              cuda::kMultiTensorMaxBlocks);
  }
}

TEST(NNKernelsHost, SgdScalarIsBitExact) {
  for (double wd : {0.0, 0.01, 0.1}) {
    Tensor p = randomF32({1000}, 11), g = randomF32({1000}, 12);
    Tensor ref = Tensor::empty(DType::F32, {1000});
    cpu::sgdUpdate(p, g, 0.0123, wd, ref);
    cuda::SgdCoeffs c = cuda::sgdCoeffs(0.0123, wd);
    for (int64_t i = 0; i < 1000; ++i) {
      float got = cuda::sgdElement(c, p.data<float>()[i], g.data<float>()[i]);
      ASSERT_EQ(std::memcmp(&got, ref.data<float>() + i, 4), 0)
          << "wd " << wd << " index " << i;
    }
  }
}

TEST(NNKernelsHost, AdamWScalarIsBitExact) {
  struct Hyper {
    double lr, b1, b2, eps, wd;
  };
  for (Hyper h :
       {Hyper{1e-3, 0.9, 0.999, 1e-8, 0.01}, Hyper{3e-4, 0.8, 0.95, 1e-6, 0.1},
        Hyper{0.1, 0.5, 0.9, 1e-3, 0.0}}) {
    for (float t : {1.0f, 2.0f, 10.0f, 1000.0f}) {
      const int64_t n = 2000;
      Tensor p = randomF32({n}, 21), g = randomF32({n}, 22, -1e-2f, 1e-2f);
      Tensor m = randomF32({n}, 23, -1e-2f, 1e-2f);
      Tensor v = randomF32({n}, 24, 0.0f, 1e-4f);
      Tensor step = Tensor::scalar(t);
      Tensor po = Tensor::empty(DType::F32, {n}), mo = po.clone(),
             vo = po.clone();
      cpu::adamwUpdate(p, g, m, v, step, h.lr, h.b1, h.b2, h.eps, h.wd, po, mo,
                       vo);
      cuda::AdamWCoeffs c = cuda::adamwCoeffs(t, h.lr, h.b1, h.b2, h.eps, h.wd);
      for (int64_t i = 0; i < n; ++i) {
        float pi = p.data<float>()[i], mi = m.data<float>()[i],
              vi = v.data<float>()[i];
        cuda::adamwElement(c, g.data<float>()[i], pi, mi, vi);
        ASSERT_EQ(std::memcmp(&pi, po.data<float>() + i, 4), 0) << i;
        ASSERT_EQ(std::memcmp(&mi, mo.data<float>() + i, 4), 0) << i;
        ASSERT_EQ(std::memcmp(&vi, vo.data<float>() + i, 4), 0) << i;
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Device tests
//===----------------------------------------------------------------------===//

Tensor convertTo(const Tensor &t, DType dtype) {
  Tensor out = Tensor::empty(dtype, t.shape());
  cpu::convert(t, out);
  return out;
}

/// Random tensor of `dtype` and the exact f32 widening of it.
std::pair<Tensor, Tensor> randomOf(DType dtype, std::vector<int64_t> shape,
                                   unsigned seed, float lo = -2.0f,
                                   float hi = 2.0f) {
  Tensor narrow = convertTo(randomF32(std::move(shape), seed, lo, hi), dtype);
  return {narrow, convertTo(narrow, DType::F32)};
}

double tolerance(DType dtype) { return dtype == DType::F32 ? 1e-5 : 2e-2; }

class NNKernelsTest : public CudaTest {
protected:
  Tensor scratch(size_t bytes) {
    return devEmpty(DType::I1,
                    {static_cast<int64_t>(std::max<size_t>(bytes, 1))});
  }
  Tensor newStatus() {
    Tensor s = devEmpty(DType::I64, {4});
    EXPECT_EQ(cudaMemset(s.raw(), 0, sizeof(cuda::DeviceStatus)), cudaSuccess);
    return s;
  }
  cuda::DeviceStatus *statusPtr(Tensor &s) {
    return static_cast<cuda::DeviceStatus *>(s.raw());
  }
  cuda::DeviceStatus takeStatus(Tensor &s) {
    llvm::Expected<cuda::DeviceStatus> got =
        cuda::takeStatus(statusPtr(s), nullptr);
    if (!got) {
      ADD_FAILURE() << llvm::toString(got.takeError());
      return {};
    }
    return *got;
  }
  /// Device f64 array from host values, and back.
  Tensor devDoubles(const std::vector<double> &v) {
    Tensor t = devEmpty(DType::I64, {static_cast<int64_t>(v.size())});
    EXPECT_EQ(
        cudaMemcpy(t.raw(), v.data(), v.size() * 8, cudaMemcpyHostToDevice),
        cudaSuccess);
    return t;
  }
  std::vector<double> hostDoubles(const Tensor &t) {
    std::vector<double> v(t.numel());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(
        cudaMemcpy(v.data(), t.raw(), v.size() * 8, cudaMemcpyDeviceToHost),
        cudaSuccess);
    return v;
  }
};

const DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};

TEST_F(NNKernelsTest, LayerNormMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dt : kFloatTypes)
    for (const Case &c :
         {Case{{4, 7}, 1}, Case{{3, 5, 64}, 2}, Case{{2, 3, 40}, 1},
          Case{{6, 3000}, 1}, Case{{17, 1}, 1}}) {
      std::vector<int64_t> normShape(c.shape.begin() + c.axis, c.shape.end());
      auto [x, xf] = randomOf(dt, c.shape, 1);
      auto [g, gf] = randomOf(dt, normShape, 2);
      auto [b, bf] = randomOf(dt, normShape, 3);
      Tensor ref = Tensor::empty(DType::F32, c.shape);
      cpu::layerNorm(xf, gf, bf, c.axis, 1e-5f, ref);
      Tensor dx = dev(x), out = devEmpty(dt, c.shape);
      ASSERT_EQ(
          cuda::layerNorm(dx, dev(g), dev(b), c.axis, 1e-5f, out, nullptr),
          cudaSuccess);
      // y = (x - mean) * rstd * gamma + beta is a sum of O(1) terms that
      // the CPU kernel (VecMath.h, FMA-contracted) and this one round
      // differently, so an output near 0 carries ulp(1) / |y| of relative
      // error (4e-5 at [6, 3000] on an H100): errors are relative to
      // max(|y|, 1).
      EXPECT_LE(maxRelativeError(host(out), convertTo(ref, dt), /*floor=*/1.0),
                tolerance(dt))
          << dtypeName(dt) << " " << shapeToString(c.shape);
      // In place.
      ASSERT_EQ(cuda::layerNorm(dx, dev(g), dev(b), c.axis, 1e-5f, dx, nullptr),
                cudaSuccess);
      EXPECT_LE(maxRelativeError(host(dx), convertTo(ref, dt), /*floor=*/1.0),
                tolerance(dt));
    }
}

TEST_F(NNKernelsTest, LayerNormGradMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dt : kFloatTypes)
    for (const Case &c :
         {Case{{4, 7}, 1}, Case{{3, 5, 64}, 2}, Case{{2, 3, 40}, 1},
          Case{{300, 96}, 1}, Case{{6, 3000}, 1}}) {
      std::vector<int64_t> normShape(c.shape.begin() + c.axis, c.shape.end());
      auto [x, xf] = randomOf(dt, c.shape, 4);
      auto [g, gf] = randomOf(dt, normShape, 5);
      auto [dy, dyf] = randomOf(dt, c.shape, 6);
      Tensor rdx = Tensor::empty(DType::F32, c.shape);
      Tensor rdg = Tensor::empty(DType::F32, normShape), rdb = rdg.clone();
      cpu::layerNormGrad(xf, gf, dyf, c.axis, 1e-5f, rdx, rdg, rdb);
      Tensor s = scratch(cuda::layerNormGradScratchBytes(c.shape, c.axis));
      Tensor ddy = dev(dy), ddx = devEmpty(dt, c.shape);
      Tensor ddg = devEmpty(dt, normShape), ddb = devEmpty(dt, normShape);
      ASSERT_EQ(cuda::layerNormGrad(dev(x), dev(g), ddy, c.axis, 1e-5f, ddx,
                                    ddg, ddb, s.raw(), nullptr),
                cudaSuccess);
      EXPECT_LE(maxRelativeError(host(ddx), convertTo(rdx, dt)), tolerance(dt))
          << dtypeName(dt) << " " << shapeToString(c.shape);
      EXPECT_LE(maxRelativeError(host(ddg), convertTo(rdg, dt)), tolerance(dt));
      EXPECT_LE(maxRelativeError(host(ddb), convertTo(rdb, dt)), tolerance(dt));
      // In place dx == dy, and deterministic reductions.
      Tensor dg2 = devEmpty(dt, normShape), db2 = devEmpty(dt, normShape);
      ASSERT_EQ(cuda::layerNormGrad(dev(x), dev(g), ddy, c.axis, 1e-5f, ddy,
                                    dg2, db2, s.raw(), nullptr),
                cudaSuccess);
      expectEqualBytes(host(ddy), host(ddx));
      expectEqualBytes(host(dg2), host(ddg));
      expectEqualBytes(host(db2), host(ddb));
    }
}

TEST_F(NNKernelsTest, RmsNormMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dt : kFloatTypes)
    for (const Case &c :
         {Case{{4, 7}, 1}, Case{{3, 5, 64}, 2}, Case{{2, 3, 40}, 1},
          Case{{6, 3000}, 1}, Case{{17, 1}, 1}}) {
      std::vector<int64_t> normShape(c.shape.begin() + c.axis, c.shape.end());
      auto [x, xf] = randomOf(dt, c.shape, 11);
      auto [g, gf] = randomOf(dt, normShape, 12);
      Tensor ref = Tensor::empty(DType::F32, c.shape);
      cpu::rmsNorm(xf, gf, c.axis, 1e-6f, ref);
      Tensor dx = dev(x), out = devEmpty(dt, c.shape);
      ASSERT_EQ(cuda::rmsNorm(dx, dev(g), c.axis, 1e-6f, out, nullptr),
                cudaSuccess);
      EXPECT_LE(maxRelativeError(host(out), convertTo(ref, dt)), tolerance(dt))
          << dtypeName(dt) << " " << shapeToString(c.shape);
      // In place.
      ASSERT_EQ(cuda::rmsNorm(dx, dev(g), c.axis, 1e-6f, dx, nullptr),
                cudaSuccess);
      EXPECT_LE(maxRelativeError(host(dx), convertTo(ref, dt)), tolerance(dt));
    }
}

TEST_F(NNKernelsTest, RmsNormGradMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dt : kFloatTypes)
    for (const Case &c :
         {Case{{4, 7}, 1}, Case{{3, 5, 64}, 2}, Case{{2, 3, 40}, 1},
          Case{{300, 96}, 1}, Case{{6, 3000}, 1}}) {
      std::vector<int64_t> normShape(c.shape.begin() + c.axis, c.shape.end());
      auto [x, xf] = randomOf(dt, c.shape, 14);
      auto [g, gf] = randomOf(dt, normShape, 15);
      auto [dy, dyf] = randomOf(dt, c.shape, 16);
      Tensor rdx = Tensor::empty(DType::F32, c.shape);
      Tensor rdg = Tensor::empty(DType::F32, normShape);
      cpu::rmsNormGrad(xf, gf, dyf, c.axis, 1e-6f, rdx, rdg);
      Tensor s = scratch(cuda::rmsNormGradScratchBytes(c.shape, c.axis));
      Tensor ddy = dev(dy), ddx = devEmpty(dt, c.shape);
      Tensor ddg = devEmpty(dt, normShape);
      ASSERT_EQ(cuda::rmsNormGrad(dev(x), dev(g), ddy, c.axis, 1e-6f, ddx, ddg,
                                  s.raw(), nullptr),
                cudaSuccess);
      EXPECT_LE(maxRelativeError(host(ddx), convertTo(rdx, dt)), tolerance(dt))
          << dtypeName(dt) << " " << shapeToString(c.shape);
      EXPECT_LE(maxRelativeError(host(ddg), convertTo(rdg, dt)), tolerance(dt));
      // In place dx == dy, and a deterministic dgamma.
      Tensor dg2 = devEmpty(dt, normShape);
      ASSERT_EQ(cuda::rmsNormGrad(dev(x), dev(g), ddy, c.axis, 1e-6f, ddy, dg2,
                                  s.raw(), nullptr),
                cudaSuccess);
      expectEqualBytes(host(ddy), host(ddx));
      expectEqualBytes(host(dg2), host(ddg));
    }
}

// The tsr-fuse-norm kernels: residual add + norm, and the norm gradient +
// residual cotangent, against the CPU's fused kernels on the exactly
// widened values (the CPU sum is f32; with 16-bit types the CUDA kernel
// normalizes the rounded sum, as the unfused add + norm would).
TEST_F(NNKernelsTest, AddNormMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dt : kFloatTypes)
    for (const Case &c : {Case{{4, 7}, 1}, Case{{3, 5, 64}, 2},
                          Case{{2, 3, 40}, 1}, Case{{6, 3000}, 1}})
      for (bool rms : {false, true}) {
        SCOPED_TRACE(std::string(dtypeName(dt)) + " " + shapeToString(c.shape) +
                     (rms ? " rms" : " ln"));
        std::vector<int64_t> normShape(c.shape.begin() + c.axis, c.shape.end());
        auto [x, xf] = randomOf(dt, c.shape, 21);
        auto [r, rf] = randomOf(dt, c.shape, 22);
        auto [g, gf] = randomOf(dt, normShape, 23);
        auto [b, bf] = randomOf(dt, normShape, 24);
        // The reference normalizes the sum rounded to dt.
        Tensor rh = Tensor::empty(DType::F32, c.shape), ry = rh.clone();
        if (rms)
          cpu::addRmsNorm(xf, rf, gf, c.axis, 1e-6f, rh, ry);
        else
          cpu::addLayerNorm(xf, rf, gf, bf, c.axis, 1e-5f, rh, ry);
        Tensor hr = convertTo(convertTo(rh, dt), DType::F32);
        if (rms)
          cpu::rmsNorm(hr, gf, c.axis, 1e-6f, ry);
        else
          cpu::layerNorm(hr, gf, bf, c.axis, 1e-5f, ry);
        Tensor h = devEmpty(dt, c.shape), y = devEmpty(dt, c.shape);
        ASSERT_EQ(rms ? cuda::addRmsNorm(dev(x), dev(r), dev(g), c.axis, 1e-6f,
                                         h, y, nullptr)
                      : cuda::addLayerNorm(dev(x), dev(r), dev(g), dev(b),
                                           c.axis, 1e-5f, h, y, nullptr),
                  cudaSuccess);
        if (dt == DType::F32)
          expectEqualBytes(host(h), rh);
        else
          EXPECT_LE(maxRelativeError(host(h), convertTo(rh, dt)),
                    tolerance(dt));
        // Relative to max(|y|, 1), as LayerNormMatchesCpu.
        EXPECT_LE(maxRelativeError(host(y), convertTo(ry, dt), /*floor=*/1.0),
                  2 * tolerance(dt));
      }
}

TEST_F(NNKernelsTest, NormGradAddMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dt : kFloatTypes)
    for (const Case &c : {Case{{4, 7}, 1}, Case{{3, 5, 64}, 2},
                          Case{{300, 96}, 1}, Case{{6, 3000}, 1}})
      for (bool rms : {false, true}) {
        SCOPED_TRACE(std::string(dtypeName(dt)) + " " + shapeToString(c.shape) +
                     (rms ? " rms" : " ln"));
        std::vector<int64_t> normShape(c.shape.begin() + c.axis, c.shape.end());
        auto [x, xf] = randomOf(dt, c.shape, 31);
        auto [g, gf] = randomOf(dt, normShape, 32);
        auto [dy, dyf] = randomOf(dt, c.shape, 33);
        auto [a, af] = randomOf(dt, c.shape, 34);
        // The reference: the CPU's fused kernel for f32; for 16-bit types
        // the norm gradient rounded to dt, then the f32 add (as the unfused
        // kernels would run).
        Tensor rdx = Tensor::empty(DType::F32, c.shape);
        Tensor rdg = Tensor::empty(DType::F32, normShape), rdb = rdg.clone();
        if (rms)
          cpu::rmsNormGradAdd(xf, gf, dyf, af, c.axis, 1e-6f, rdx, rdg);
        else
          cpu::layerNormGradAdd(xf, gf, dyf, af, c.axis, 1e-5f, rdx, rdg, rdb);
        if (dt != DType::F32) {
          if (rms)
            cpu::rmsNormGrad(xf, gf, dyf, c.axis, 1e-6f, rdx, rdg);
          else
            cpu::layerNormGrad(xf, gf, dyf, c.axis, 1e-5f, rdx, rdg, rdb);
          rdx = convertTo(convertTo(rdx, dt), DType::F32);
          for (int64_t i = 0; i < rdx.numel(); ++i)
            rdx.data<float>()[i] += af.data<float>()[i];
        }
        Tensor s =
            scratch(rms ? cuda::rmsNormGradScratchBytes(c.shape, c.axis)
                        : cuda::layerNormGradScratchBytes(c.shape, c.axis));
        Tensor ddx = devEmpty(dt, c.shape), ddg = devEmpty(dt, normShape),
               ddb = devEmpty(dt, normShape);
        ASSERT_EQ(rms ? cuda::rmsNormGradAdd(dev(x), dev(g), dev(dy), dev(a),
                                             c.axis, 1e-6f, ddx, ddg, s.raw(),
                                             nullptr)
                      : cuda::layerNormGradAdd(dev(x), dev(g), dev(dy), dev(a),
                                               c.axis, 1e-5f, ddx, ddg, ddb,
                                               s.raw(), nullptr),
                  cudaSuccess);
        EXPECT_LE(maxRelativeError(host(ddx), convertTo(rdx, dt)),
                  2 * tolerance(dt));
        EXPECT_LE(maxRelativeError(host(ddg), convertTo(rdg, dt)),
                  tolerance(dt));
        if (!rms)
          EXPECT_LE(maxRelativeError(host(ddb), convertTo(rdb, dt)),
                    tolerance(dt));
        // dx may take the addend's buffer.
        Tensor da = dev(a), dg2 = devEmpty(dt, normShape),
               db2 = devEmpty(dt, normShape);
        ASSERT_EQ(
            rms ? cuda::rmsNormGradAdd(dev(x), dev(g), dev(dy), da, c.axis,
                                       1e-6f, da, dg2, s.raw(), nullptr)
                : cuda::layerNormGradAdd(dev(x), dev(g), dev(dy), da, c.axis,
                                         1e-5f, da, dg2, db2, s.raw(), nullptr),
            cudaSuccess);
        expectEqualBytes(host(da), host(ddx));
      }
}

TEST_F(NNKernelsTest, SoftmaxAndGradMatchCpu) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t axis;
  };
  for (DType dt : kFloatTypes)
    for (const Case &c :
         {Case{{4, 7}, 1}, Case{{4, 7}, 0}, Case{{3, 5, 6}, 1},
          Case{{2, 3, 4, 5}, 2}, Case{{8, 5000}, 1}, Case{{3, 1}, 1}}) {
      auto [x, xf] = randomOf(dt, c.shape, 7, -8.0f, 8.0f);
      Tensor ref = Tensor::empty(DType::F32, c.shape);
      cpu::softmax(xf, c.axis, ref);
      Tensor dx = dev(x), out = devEmpty(dt, c.shape);
      ASSERT_EQ(cuda::softmax(dx, c.axis, out, nullptr), cudaSuccess);
      Tensor y = host(out);
      EXPECT_LE(maxRelativeError(y, convertTo(ref, dt)), tolerance(dt))
          << dtypeName(dt) << " " << shapeToString(c.shape) << " axis "
          << c.axis;
      ASSERT_EQ(cuda::softmax(dx, c.axis, dx, nullptr), cudaSuccess);
      expectEqualBytes(host(dx), y);

      // Gradient, from the device's y (so both sides see the same y).
      auto [dy, dyf] = randomOf(dt, c.shape, 8);
      Tensor rdx = Tensor::empty(DType::F32, c.shape);
      cpu::softmaxGrad(convertTo(y, DType::F32), dyf, c.axis, rdx);
      Tensor ddy = dev(dy), gout = devEmpty(dt, c.shape);
      ASSERT_EQ(cuda::softmaxGrad(out, ddy, c.axis, gout, nullptr),
                cudaSuccess);
      Tensor got = host(gout);
      EXPECT_LE(maxRelativeError(got, convertTo(rdx, dt)), tolerance(dt))
          << dtypeName(dt) << " " << shapeToString(c.shape);
      ASSERT_EQ(cuda::softmaxGrad(out, ddy, c.axis, ddy, nullptr), cudaSuccess);
      expectEqualBytes(host(ddy), got);
    }
}

TEST_F(NNKernelsTest, GatherMatchesCpuAndReportsBadIds) {
  for (DType dt : {DType::F32, DType::BF16, DType::I64}) {
    Tensor table = convertTo(randomF32({50, 3, 4}, 9, -100, 100), dt);
    Tensor ids = randomI64({6, 7}, 10, 0, 50);
    Tensor ref = Tensor::empty(dt, {6, 7, 3, 4});
    ASSERT_NO_ERR(cpu::gather(table, ids, ref));
    Tensor st = newStatus();
    Tensor out = devEmpty(dt, {6, 7, 3, 4});
    ASSERT_EQ(cuda::gather(dev(table), dev(ids), out, statusPtr(st), nullptr),
              cudaSuccess);
    expectEqualBytes(host(out), ref);
    EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::Ok);

    // Vocab-parallel: rows [20, 40) of a 50-row vocabulary.
    Tensor shard = Tensor::empty(dt, {20, 3, 4});
    std::memcpy(shard.raw(),
                static_cast<const char *>(table.raw()) +
                    20 * 12 * dtypeSize(dt),
                shard.bytes());
    ASSERT_NO_ERR(cpu::gatherMasked(shard, ids, 20, 50, ref));
    ASSERT_EQ(cuda::gatherMasked(dev(shard), dev(ids), 20, 50, out,
                                 statusPtr(st), nullptr),
              cudaSuccess);
    expectEqualBytes(host(out), ref);
    EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::Ok);
  }
  // Out of range: recorded, never read out of bounds.
  Tensor table = randomF32({10, 8}, 11);
  for (int64_t bad : {int64_t(-1), int64_t(10), int64_t(1) << 40}) {
    Tensor ids = Tensor::fromVector<int64_t>({4}, {1, 2, bad, 3});
    Tensor st = newStatus();
    Tensor out = devEmpty(DType::F32, {4, 8});
    ASSERT_EQ(cuda::gather(dev(table), dev(ids), out, statusPtr(st), nullptr),
              cudaSuccess);
    cuda::DeviceStatus s = takeStatus(st);
    EXPECT_EQ(s.code, cuda::DeviceStatus::IdOutOfRange);
    EXPECT_EQ(s.index, 2);
    EXPECT_EQ(s.value, bad);
    EXPECT_EQ(s.limit, 10);
    Tensor got = host(out);
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(got.data<float>()[8 + j], table.data<float>()[16 + j]);
      EXPECT_EQ(got.data<float>()[16 + j], 0.0f);
    }
  }
}

TEST_F(NNKernelsTest, GatherGradIsBitExactAndDeterministic) {
  for (DType dt : {DType::F32, DType::BF16}) {
    // Few distinct ids, so that every row sums many contributions.
    Tensor ids = randomI64({16, 33}, 12, 0, 37);
    auto [dy, dyf] = randomOf(dt, {16, 33, 24}, 13);
    Tensor ref = Tensor::empty(DType::F32, {37, 24});
    ASSERT_NO_ERR(cpu::gatherGrad(ids, dyf, ref));
    size_t bytes = 0;
    ASSERT_EQ(cuda::gatherGradScratchBytes(ids.numel(), 37, &bytes),
              cudaSuccess);
    Tensor s = scratch(bytes), st = newStatus();
    Tensor out = devEmpty(DType::F32, {37, 24});
    Tensor dids = dev(ids), ddy = dev(dy);
    ASSERT_EQ(cuda::gatherGrad(dids, ddy, out, s.raw(), statusPtr(st), nullptr),
              cudaSuccess);
    Tensor got = host(out);
    expectEqualBytes(got, ref); // same f32 additions in the same order
    EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::Ok);
    ASSERT_EQ(cuda::gatherGrad(dids, ddy, out, s.raw(), statusPtr(st), nullptr),
              cudaSuccess);
    expectEqualBytes(host(out), got);

    // Vocab-parallel shard [10, 25) of 37 rows.
    Tensor refShard = Tensor::empty(DType::F32, {15, 24});
    ASSERT_NO_ERR(cpu::gatherGradMasked(ids, dyf, 10, 37, refShard));
    ASSERT_EQ(cuda::gatherGradScratchBytes(ids.numel(), 15, &bytes),
              cudaSuccess);
    Tensor s2 = scratch(bytes);
    Tensor outShard = devEmpty(DType::F32, {15, 24});
    ASSERT_EQ(cuda::gatherGradMasked(dids, ddy, 10, 37, outShard, s2.raw(),
                                     statusPtr(st), nullptr),
              cudaSuccess);
    expectEqualBytes(host(outShard), refShard);
    EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::Ok);
  }
  // Bad id: recorded and skipped; the other rows are still right.
  Tensor ids = Tensor::fromVector<int64_t>({5}, {0, 3, 99, 3, 1});
  Tensor dy = randomF32({5, 4}, 14);
  Tensor st = newStatus();
  size_t bytes = 0;
  ASSERT_EQ(cuda::gatherGradScratchBytes(5, 6, &bytes), cudaSuccess);
  Tensor s = scratch(bytes);
  Tensor out = devEmpty(DType::F32, {6, 4});
  ASSERT_EQ(
      cuda::gatherGrad(dev(ids), dev(dy), out, s.raw(), statusPtr(st), nullptr),
      cudaSuccess);
  cuda::DeviceStatus status = takeStatus(st);
  EXPECT_EQ(status.code, cuda::DeviceStatus::IdOutOfRange);
  EXPECT_EQ(status.index, 2);
  EXPECT_EQ(status.value, 99);
  EXPECT_EQ(status.limit, 6);
  Tensor good = Tensor::fromVector<int64_t>({5}, {0, 3, 5, 3, 1});
  Tensor dyGood = dy.clone();
  for (int j = 0; j < 4; ++j)
    dyGood.data<float>()[8 + j] = 0.0f; // row 5 gets +0 only
  Tensor ref = Tensor::empty(DType::F32, {6, 4});
  ASSERT_NO_ERR(cpu::gatherGrad(good, dyGood, ref));
  expectEqualBytes(host(out), ref);
}

TEST_F(NNKernelsTest, CrossEntropyMatchesCpu) {
  for (DType dt : kFloatTypes)
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{5, 11}, {64, 1000}, {3, 50257}}) {
      int64_t n = shape[0], v = shape[1];
      auto [x, xf] = randomOf(dt, shape, 15, -10.0f, 10.0f);
      Tensor labels = randomI64({n}, 16, 0, v);
      Tensor ref = Tensor::empty(DType::F32, {});
      ASSERT_NO_ERR(cpu::crossEntropy(xf, labels, ref));
      Tensor s = scratch(cuda::crossEntropyScratchBytes(n)), st = newStatus();
      Tensor dx = dev(x), dl = dev(labels), out = devEmpty(DType::F32, {});
      ASSERT_EQ(
          cuda::crossEntropy(dx, dl, out, s.raw(), statusPtr(st), nullptr),
          cudaSuccess);
      EXPECT_LE(maxRelativeError(host(out), ref), 1e-5)
          << dtypeName(dt) << " " << shapeToString(shape);
      EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::Ok);

      Tensor dloss = Tensor::scalar(0.37f);
      Tensor rg = Tensor::empty(DType::F32, shape);
      ASSERT_NO_ERR(cpu::crossEntropyGrad(xf, labels, dloss, rg));
      Tensor g = devEmpty(dt, shape);
      ASSERT_EQ(
          cuda::crossEntropyGrad(dx, dl, dev(dloss), g, statusPtr(st), nullptr),
          cudaSuccess);
      Tensor got = host(g);
      EXPECT_LE(maxRelativeError(got, convertTo(rg, dt)), tolerance(dt));
      ASSERT_EQ(cuda::crossEntropyGrad(dx, dl, dev(dloss), dx, statusPtr(st),
                                       nullptr),
                cudaSuccess);
      expectEqualBytes(host(dx), got);
      EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::Ok);
    }
}

TEST_F(NNKernelsTest, CrossEntropyReportsBadLabels) {
  Tensor x = randomF32({4, 9}, 17);
  Tensor labels = Tensor::fromVector<int64_t>({4}, {0, 9, 2, 3});
  Tensor s = scratch(cuda::crossEntropyScratchBytes(4)), st = newStatus();
  Tensor out = devEmpty(DType::F32, {});
  Tensor dx = dev(x), dl = dev(labels);
  ASSERT_EQ(cuda::crossEntropy(dx, dl, out, s.raw(), statusPtr(st), nullptr),
            cudaSuccess);
  cuda::DeviceStatus status = takeStatus(st);
  EXPECT_EQ(status.code, cuda::DeviceStatus::LabelOutOfRange);
  EXPECT_EQ(status.index, 1);
  EXPECT_EQ(status.value, 9);
  EXPECT_EQ(status.limit, 9);
  Tensor g = devEmpty(DType::F32, {4, 9});
  ASSERT_EQ(cuda::crossEntropyGrad(dx, dl, dev(Tensor::scalar(1.0f)), g,
                                   statusPtr(st), nullptr),
            cudaSuccess);
  EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::LabelOutOfRange);
  Tensor got = host(g);
  for (int j = 0; j < 9; ++j)
    EXPECT_EQ(got.data<float>()[9 + j], 0.0f);
  // Vocab-parallel phases check against the full vocabulary.
  Tensor rowMax = devDoubles(std::vector<double>(4, 0.0));
  Tensor sums = devDoubles(std::vector<double>(4, 0.0));
  ASSERT_EQ(cuda::crossEntropyRowMax(dx, static_cast<double *>(rowMax.raw()),
                                     nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::crossEntropyRowSums(
                dx, dev(Tensor::fromVector<int64_t>({4}, {0, 1, -5, 3})), 0, 9,
                static_cast<const double *>(rowMax.raw()),
                static_cast<double *>(sums.raw()), nullptr, statusPtr(st),
                nullptr),
            cudaSuccess);
  status = takeStatus(st);
  EXPECT_EQ(status.code, cuda::DeviceStatus::LabelOutOfRange);
  EXPECT_EQ(status.index, 2);
  EXPECT_EQ(status.value, -5);
}

TEST_F(NNKernelsTest, VocabParallelPhasesMatchCpu) {
  const int64_t n = 12, vocab = 3000, shards = 3, local = vocab / shards;
  Tensor logits = randomF32({n, vocab}, 18, -10.0f, 10.0f);
  Tensor labels = randomI64({n}, 19, 0, vocab);
  Tensor refLoss = Tensor::empty(DType::F32, {});
  ASSERT_NO_ERR(cpu::crossEntropy(logits, labels, refLoss));
  Tensor dloss = Tensor::scalar(0.5f);
  Tensor refGrad = Tensor::empty(DType::F32, {n, vocab});
  ASSERT_NO_ERR(cpu::crossEntropyGrad(logits, labels, dloss, refGrad));

  std::vector<Tensor> shard(shards);
  for (int64_t k = 0; k < shards; ++k) {
    Tensor h = Tensor::empty(DType::F32, {n, local});
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < local; ++j)
        h.data<float>()[r * local + j] =
            logits.data<float>()[r * vocab + k * local + j];
    shard[k] = dev(h);
  }
  Tensor dl = dev(labels), st = newStatus();
  // Phase 1 and the host "all-reduce" (MAX).
  std::vector<double> rowMax(n, -INFINITY);
  for (int64_t k = 0; k < shards; ++k) {
    Tensor m = devDoubles(std::vector<double>(n, 0.0));
    ASSERT_EQ(cuda::crossEntropyRowMax(shard[k], static_cast<double *>(m.raw()),
                                       nullptr),
              cudaSuccess);
    std::vector<double> got = hostDoubles(m);
    for (int64_t r = 0; r < n; ++r)
      rowMax[r] = std::max(rowMax[r], got[r]);
  }
  Tensor dMax = devDoubles(rowMax);
  // Phase 2 and the SUM all-reduce.
  std::vector<double> sumExp(n, 0.0), target(n, 0.0);
  for (int64_t k = 0; k < shards; ++k) {
    Tensor s = devDoubles(std::vector<double>(n, 0.0));
    Tensor t = devDoubles(std::vector<double>(n, 0.0));
    ASSERT_EQ(cuda::crossEntropyRowSums(shard[k], dl, k * local, vocab,
                                        static_cast<const double *>(dMax.raw()),
                                        static_cast<double *>(s.raw()),
                                        static_cast<double *>(t.raw()),
                                        statusPtr(st), nullptr),
              cudaSuccess);
    std::vector<double> gs = hostDoubles(s), gt = hostDoubles(t);
    for (int64_t r = 0; r < n; ++r) {
      sumExp[r] += gs[r];
      target[r] += gt[r];
    }
  }
  EXPECT_EQ(takeStatus(st).code, cuda::DeviceStatus::Ok);
  Tensor dSum = devDoubles(sumExp), dTarget = devDoubles(target);
  Tensor out = devEmpty(DType::F32, {});
  ASSERT_EQ(cuda::crossEntropyFromStats(
                n, static_cast<const double *>(dMax.raw()),
                static_cast<const double *>(dSum.raw()),
                static_cast<const double *>(dTarget.raw()), out, nullptr),
            cudaSuccess);
  EXPECT_LE(maxRelativeError(host(out), refLoss), 1e-5);
  Tensor ddloss = dev(dloss);
  for (int64_t k = 0; k < shards; ++k) {
    Tensor g = devEmpty(DType::F32, {n, local});
    ASSERT_EQ(cuda::crossEntropyGradFromStats(
                  shard[k], dl, k * local,
                  static_cast<const double *>(dMax.raw()),
                  static_cast<const double *>(dSum.raw()), ddloss, g, nullptr),
              cudaSuccess);
    Tensor got = host(g);
    Tensor ref = Tensor::empty(DType::F32, {n, local});
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < local; ++j)
        ref.data<float>()[r * local + j] =
            refGrad.data<float>()[r * vocab + k * local + j];
    EXPECT_LE(maxRelativeError(got, ref), 1e-5) << "shard " << k;
  }
}

TEST_F(NNKernelsTest, MultiTensorOptimizersAreBitExact) {
  // Sizes that cross chunk and launch boundaries (> 24 tensors, > 320
  // blocks in all).
  std::vector<int64_t> sizes = {1, 0, 1000, cuda::kMultiTensorChunk,
                                cuda::kMultiTensorChunk * 3 + 17};
  for (int i = 0; i < 30; ++i)
    sizes.push_back(1 + i * 997);
  sizes.push_back(cuda::kMultiTensorChunk * 330 + 5);
  std::vector<Tensor> p, g, m, v, dp, dg, dm, dv;
  std::vector<cuda::AdamWTensor> adam;
  std::vector<cuda::SgdTensor> sgd;
  for (size_t i = 0; i < sizes.size(); ++i) {
    unsigned seed = 100 + 4 * static_cast<unsigned>(i);
    p.push_back(randomF32({sizes[i]}, seed));
    g.push_back(randomF32({sizes[i]}, seed + 1, -1e-2f, 1e-2f));
    m.push_back(randomF32({sizes[i]}, seed + 2, -1e-2f, 1e-2f));
    v.push_back(randomF32({sizes[i]}, seed + 3, 0.0f, 1e-4f));
    dp.push_back(dev(p[i]));
    dg.push_back(dev(g[i]));
    dm.push_back(dev(m[i]));
    dv.push_back(dev(v[i]));
    auto *pp = static_cast<float *>(dp[i].raw());
    auto *pm = static_cast<float *>(dm[i].raw());
    auto *pv = static_cast<float *>(dv[i].raw());
    adam.push_back({pp, static_cast<const float *>(dg[i].raw()), pm, pv, pp, pm,
                    pv, sizes[i]});
  }
  Tensor step = Tensor::scalar(7.0f), dstep = dev(step);
  // The learning rates as the device reads them: f32 scalars.
  Tensor lr1 = Tensor::scalar(1e-3f), dlr1 = dev(lr1);
  Tensor lr2 = Tensor::scalar(0.05f), dlr2 = dev(lr2);
  ASSERT_EQ(cuda::adamwUpdateMulti(adam.data(), adam.size(),
                                   static_cast<const float *>(dstep.raw()),
                                   static_cast<const float *>(dlr1.raw()), 0.9,
                                   0.999, 1e-8, 0.01, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor rp = p[i].clone(), rm = m[i].clone(), rv = v[i].clone();
    cpu::adamwUpdate(p[i], g[i], m[i], v[i], step, double(1e-3f), 0.9, 0.999,
                     1e-8, 0.01, rp, rm, rv);
    expectEqualBytes(host(dp[i]), rp);
    expectEqualBytes(host(dm[i]), rm);
    expectEqualBytes(host(dv[i]), rv);
    p[i] = rp; // the device now holds the updated parameters
    auto *pp = static_cast<float *>(dp[i].raw());
    sgd.push_back({pp, static_cast<const float *>(dg[i].raw()), pp, sizes[i]});
  }
  ASSERT_EQ(cuda::sgdUpdateMulti(sgd.data(), sgd.size(),
                                 static_cast<const float *>(dlr2.raw()), 0.01,
                                 nullptr),
            cudaSuccess);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor rp = p[i].clone();
    cpu::sgdUpdate(p[i], g[i], double(0.05f), 0.01, rp);
    expectEqualBytes(host(dp[i]), rp);
  }
}

TEST_F(NNKernelsTest, SingleTensorOptimizersOutOfPlace) {
  Tensor p = randomF32({3, 1000}, 30), g = randomF32({3, 1000}, 31);
  Tensor m = randomF32({3, 1000}, 32, -0.1f, 0.1f);
  Tensor v = randomF32({3, 1000}, 33, 0.0f, 0.01f);
  Tensor step = Tensor::scalar(3.0f);
  Tensor rp = p.clone(), rm = m.clone(), rv = v.clone();
  cpu::adamwUpdate(p, g, m, v, step, double(0.01f), 0.8, 0.95, 1e-6, 0.1, rp,
                   rm, rv);
  Tensor op = devEmpty(DType::F32, {3, 1000});
  Tensor om = devEmpty(DType::F32, {3, 1000});
  Tensor ov = devEmpty(DType::F32, {3, 1000});
  Tensor dp = dev(p), dm = dev(m), dv = dev(v);
  ASSERT_EQ(cuda::adamwUpdate(dp, dev(g), dm, dv, dev(step),
                              dev(Tensor::scalar(0.01f)), 0.8, 0.95, 1e-6, 0.1,
                              op, om, ov, nullptr),
            cudaSuccess);
  expectEqualBytes(host(op), rp);
  expectEqualBytes(host(om), rm);
  expectEqualBytes(host(ov), rv);
  expectEqualBytes(host(dp), p); // inputs untouched
  Tensor rs = p.clone();
  cpu::sgdUpdate(p, g, double(0.1f), 0.0, rs);
  Tensor os = devEmpty(DType::F32, {3, 1000});
  ASSERT_EQ(
      cuda::sgdUpdate(dp, dev(g), dev(Tensor::scalar(0.1f)), 0.0, os, nullptr),
      cudaSuccess);
  expectEqualBytes(host(os), rs);
}

} // namespace

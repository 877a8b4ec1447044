//===- CpuKernelsTest.cpp - CPU kernels vs naive references ---------------===//

#include "runtime/backends/cpu/CpuKernels.h"

#include "TestUtil.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

using namespace tessera::runtime;
using namespace tessera::runtime::test;
namespace cpu = tessera::runtime::cpu;

namespace {

Tensor like(const Tensor &t) { return Tensor::empty(t.dtype(), t.shape()); }

Tensor mapRef(const Tensor &x, const std::function<double(double)> &f) {
  Tensor y = like(x);
  for (int64_t i = 0; i < x.numel(); ++i)
    y.data<float>()[i] = (float)f(x.data<float>()[i]);
  return y;
}

Tensor zipRef(const Tensor &a, const Tensor &b,
              const std::function<double(double, double)> &f) {
  Tensor y = like(a);
  for (int64_t i = 0; i < a.numel(); ++i)
    y.data<float>()[i] = (float)f(a.data<float>()[i], b.data<float>()[i]);
  return y;
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST(CpuKernels, BinaryF32) {
  Tensor a = randomF32({3, 4, 5}, 1), b = randomF32({3, 4, 5}, 2);
  Tensor out = like(a);
  cpu::add(a, b, out);
  expectClose(out, zipRef(a, b, [](double x, double y) { return x + y; }));
  cpu::sub(a, b, out);
  expectClose(out, zipRef(a, b, [](double x, double y) { return x - y; }));
  cpu::mul(a, b, out);
  expectClose(out, zipRef(a, b, [](double x, double y) { return x * y; }));
  cpu::div(a, b, out);
  expectClose(out, zipRef(a, b, [](double x, double y) { return x / y; }));
  cpu::max(a, b, out);
  expectClose(out,
              zipRef(a, b, [](double x, double y) { return std::max(x, y); }));
  Tensor pa = randomF32({3, 4, 5}, 3, 0.1f, 3.0f);
  cpu::pow(pa, b, out);
  expectClose(out,
              zipRef(pa, b, [](double x, double y) { return std::pow(x, y); }));
}

TEST(CpuKernels, BinaryInPlaceAndNaN) {
  Tensor a = Tensor::fromVector<float>({3}, {1, 2, 3});
  Tensor b = Tensor::fromVector<float>({3}, {10, 20, 30});
  cpu::add(a, b, a);
  EXPECT_EQ(a.data<float>()[2], 33.0f);
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::fromVector<float>({3}, {nan, 1, 5});
  Tensor y = Tensor::fromVector<float>({3}, {0, nan, 2});
  Tensor m = like(x);
  cpu::max(x, y, m);
  EXPECT_TRUE(std::isnan(m.data<float>()[0]));
  EXPECT_TRUE(std::isnan(m.data<float>()[1]));
  EXPECT_EQ(m.data<float>()[2], 5.0f);
}

TEST(CpuKernels, BinaryI64) {
  Tensor a = Tensor::fromVector<int64_t>({4}, {1, -7, 3, 9});
  Tensor b = Tensor::fromVector<int64_t>({4}, {2, 2, -3, 9});
  Tensor o = like(a);
  cpu::add(a, b, o);
  EXPECT_EQ(o.data<int64_t>()[1], -5);
  cpu::mul(a, b, o);
  EXPECT_EQ(o.data<int64_t>()[2], -9);
  cpu::div(a, b, o);
  EXPECT_EQ(o.data<int64_t>()[1], -3);
  cpu::max(a, b, o);
  EXPECT_EQ(o.data<int64_t>()[2], 3);
  cpu::sub(a, b, o);
  EXPECT_EQ(o.data<int64_t>()[0], -1);
  cpu::neg(a, o);
  EXPECT_EQ(o.data<int64_t>()[1], 7);
}

TEST(CpuKernels, EqualAndSelect) {
  Tensor a = Tensor::fromVector<float>({4}, {1, 2, 3, 4});
  Tensor b = Tensor::fromVector<float>({4}, {1, 0, 3, 0});
  Tensor c = Tensor::empty(DType::I1, {4});
  cpu::equal(a, b, c);
  std::vector<uint8_t> expect = {1, 0, 1, 0};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(c.data<uint8_t>()[i], expect[i]);
  Tensor ia = Tensor::fromVector<int64_t>({4}, {5, 6, 7, 8});
  Tensor ib = Tensor::fromVector<int64_t>({4}, {0, 6, 0, 8});
  cpu::equal(ia, ib, c);
  expect = {0, 1, 0, 1};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(c.data<uint8_t>()[i], expect[i]);
  Tensor s = like(a);
  cpu::select(c, a, b, s);
  EXPECT_EQ(s.data<float>()[0], 1.0f);
  EXPECT_EQ(s.data<float>()[1], 2.0f);
  EXPECT_EQ(s.data<float>()[2], 3.0f);
  EXPECT_EQ(s.data<float>()[3], 4.0f);
  // cond = {0,1,0,1}: picks b, a, b, a.
  Tensor is = like(ia);
  cpu::select(c, ia, ib, is);
  std::vector<int64_t> ie = {0, 6, 0, 8};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(is.data<int64_t>()[i], ie[i]);
  Tensor fb = Tensor::fromVector<float>({4}, {-1, -2, -3, -4});
  cpu::select(c, a, fb, fb); // in place on b
  std::vector<float> fe = {-1, 2, -3, 4};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(fb.data<float>()[i], fe[i]);
}

TEST(CpuKernels, Unary) {
  Tensor x = randomF32({4, 33}, 7);
  Tensor pos = randomF32({4, 33}, 8, 0.05f, 4.0f);
  Tensor out = like(x);
  cpu::neg(x, out);
  expectClose(out, mapRef(x, [](double v) { return -v; }));
  cpu::exp(x, out);
  expectClose(out, mapRef(x, [](double v) { return std::exp(v); }));
  cpu::log(pos, out);
  expectClose(out, mapRef(pos, [](double v) { return std::log(v); }));
  cpu::sqrt(pos, out);
  expectClose(out, mapRef(pos, [](double v) { return std::sqrt(v); }));
  cpu::rsqrt(pos, out);
  expectClose(out, mapRef(pos, [](double v) { return 1 / std::sqrt(v); }));
  cpu::tanh(x, out);
  expectClose(out, mapRef(x, [](double v) { return std::tanh(v); }));
  cpu::erf(x, out);
  expectClose(out, mapRef(x, [](double v) { return std::erf(v); }));
  cpu::relu(x, out);
  expectClose(out, mapRef(x, [](double v) { return v > 0 ? v : 0.0; }));
  cpu::gelu(x, cpu::GeluApproximate::None, out);
  expectClose(out, mapRef(x, [](double v) {
                return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
              }));
  cpu::gelu(x, cpu::GeluApproximate::Tanh, out);
  expectClose(out, mapRef(x, [](double v) {
                return 0.5 * v *
                       (1 + std::tanh(std::sqrt(2 / M_PI) *
                                      (v + 0.044715 * v * v * v)));
              }));
  Tensor wide = randomF32({4, 33}, 9, -30.0f, 30.0f);
  cpu::sigmoid(wide, out);
  expectClose(out,
              mapRef(wide, [](double v) { return 1 / (1 + std::exp(-v)); }));
  cpu::silu(wide, out);
  expectClose(out,
              mapRef(wide, [](double v) { return v / (1 + std::exp(-v)); }));
  // In place.
  Tensor y = x.clone();
  cpu::exp(y, y);
  expectClose(y, mapRef(x, [](double v) { return std::exp(v); }));
  y = x.clone();
  cpu::silu(y, y);
  expectClose(y, mapRef(x, [](double v) { return v / (1 + std::exp(-v)); }));
}

TEST(CpuKernels, SigmoidSiluKnownValuesAndExtremes) {
  // Produced by (torch 1.13, /usr/bin/python3):
  //   x = torch.tensor([-inf, -1e4, -100., -20., -1., 0., 1., 20., 1e4, inf])
  //   torch.sigmoid(x), torch.nn.functional.silu(x)
  // except silu(-inf), where torch gives NaN and Tessera the limit -0.
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x =
      Tensor::fromVector<float>({10}, {-inf, -1e4f, -100.0f, -20.0f, -1.0f,
                                       0.0f, 1.0f, 20.0f, 1e4f, inf});
  Tensor y = like(x);
  cpu::sigmoid(x, y);
  expectClose(y, Tensor::fromVector<float>(
                     {10}, {0.0f, 0.0f, 0.0f, 2.06115369216775e-09f,
                            0.2689414322376251f, 0.5f, 0.7310585975646973f,
                            1.0f, 1.0f, 1.0f}));
  cpu::silu(x, y);
  EXPECT_EQ(y.data<float>()[9], inf);
  y.data<float>()[9] = 0; // expectClose cannot compare infinities
  expectClose(y, Tensor::fromVector<float>(
                     {10}, {-0.0f, -0.0f, -0.0f, -4.1223074731533416e-08f,
                            -0.2689414322376251f, 0.0f, 0.7310585975646973f,
                            20.0f, 1e4f, 0.0f}));
  for (int64_t i = 0; i < 3; ++i) // no NaN, and the sign of the limit
    EXPECT_TRUE(y.data<float>()[i] == 0.0f && std::signbit(y.data<float>()[i]))
        << i << ": " << y.data<float>()[i];
  // NaN propagates.
  Tensor nan =
      Tensor::fromVector<float>({1}, {std::numeric_limits<float>::quiet_NaN()});
  cpu::silu(nan, nan);
  EXPECT_TRUE(std::isnan(nan.data<float>()[0]));
}

TEST(CpuKernels, GeluKnownValues) {
  // Produced by (torch 1.13, /usr/bin/python3):
  //   torch.nn.functional.gelu(torch.tensor([-1., 0.5, 2.]), approximate=A)
  //   for A in ('none', 'tanh')
  Tensor x = Tensor::fromVector<float>({3}, {-1.0f, 0.5f, 2.0f});
  Tensor y = like(x);
  cpu::gelu(x, cpu::GeluApproximate::None, y);
  expectClose(y, Tensor::fromVector<float>({3}, {-0.1586552858352661f,
                                                 0.3457311987876892f,
                                                 1.9544999599456787f}));
  cpu::gelu(x, cpu::GeluApproximate::Tanh, y);
  expectClose(y, Tensor::fromVector<float>({3}, {-0.15880799293518066f,
                                                 0.3457140028476715f,
                                                 1.9545977115631104f}));
}

TEST(CpuKernels, ConvertBF16) {
  // f32 -> bf16 rounds to nearest even; bf16 -> f32/i64/i1 is exact.
  Tensor f = Tensor::fromVector<float>(
      {5}, {1.00390625f, 1.01171875f, -3.5f, 0.0f, -1e30f});
  Tensor h = Tensor::empty(DType::BF16, {5});
  cpu::convert(f, h);
  std::vector<float> he = {1.0f, 1.015625f, -3.5f, 0.0f,
                           toFloat(toBFloat16(-1e30f))};
  for (int k = 0; k < 5; ++k)
    EXPECT_EQ(toFloat(h.data<BFloat16>()[k]), he[k]) << k;
  Tensor g = Tensor::empty(DType::F32, {5});
  cpu::convert(h, g);
  for (int k = 0; k < 5; ++k)
    EXPECT_EQ(g.data<float>()[k], he[k]) << k;
  Tensor i = Tensor::empty(DType::I64, {5});
  cpu::convert(h, i);
  EXPECT_EQ(i.data<int64_t>()[2], -3);
  // -1e30 saturates (a plain cast is undefined behaviour).
  EXPECT_EQ(i.data<int64_t>()[4], std::numeric_limits<int64_t>::min());
  Tensor b = Tensor::empty(DType::I1, {5});
  cpu::convert(h, b);
  EXPECT_EQ(b.data<uint8_t>()[3], 0);
  EXPECT_EQ(b.data<uint8_t>()[0], 1);
  Tensor back = Tensor::empty(DType::BF16, {5});
  cpu::convert(i, back);
  EXPECT_EQ(toFloat(back.data<BFloat16>()[2]), -3.0f);
  // Byte-moving kernels take bf16 as is.
  Tensor t = Tensor::empty(DType::BF16, {5});
  cpu::transpose(h, {0}, t);
  for (int k = 0; k < 5; ++k)
    EXPECT_EQ(t.data<BFloat16>()[k].bits, h.data<BFloat16>()[k].bits);
}

TEST(CpuKernels, Convert) {
  Tensor f = Tensor::fromVector<float>({4}, {-2.7f, 0.0f, 0.5f, 3.9f});
  Tensor i = Tensor::empty(DType::I64, {4});
  cpu::convert(f, i);
  std::vector<int64_t> ie = {-2, 0, 0, 3};
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(i.data<int64_t>()[k], ie[k]);
  Tensor b = Tensor::empty(DType::I1, {4});
  cpu::convert(f, b);
  std::vector<uint8_t> be = {1, 0, 1, 1};
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(b.data<uint8_t>()[k], be[k]);
  cpu::convert(i, b);
  be = {1, 0, 0, 1};
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(b.data<uint8_t>()[k], be[k]);
  Tensor g = Tensor::empty(DType::F32, {4});
  cpu::convert(b, g);
  std::vector<float> ge = {1, 0, 0, 1};
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(g.data<float>()[k], ge[k]);
  cpu::convert(i, g);
  ge = {-2, 0, 0, 3};
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(g.data<float>()[k], ge[k]);
  Tensor i2 = Tensor::empty(DType::I64, {4});
  cpu::convert(b, i2);
  EXPECT_EQ(i2.data<int64_t>()[3], 1);
  Tensor f2 = like(f);
  cpu::convert(f, f2);
  expectEqualBytes(f, f2);
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

namespace {
void checkBroadcast(std::vector<int64_t> inShape, std::vector<int64_t> outShape,
                    DType dtype) {
  Tensor in = dtype == DType::F32 ? randomF32(inShape, 11)
                                  : randomI64(inShape, 11, -100, 100);
  Tensor out = Tensor::empty(dtype, outShape);
  cpu::broadcast(in, out);
  size_t lead = outShape.size() - inShape.size();
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, outShape);
    std::vector<int64_t> src(inShape.size());
    for (size_t d = 0; d < inShape.size(); ++d)
      src[d] = inShape[d] == 1 ? 0 : idx[lead + d];
    int64_t j = ravel(src, inShape);
    if (dtype == DType::F32)
      ASSERT_EQ(out.data<float>()[i], in.data<float>()[j]) << "at " << i;
    else
      ASSERT_EQ(out.data<int64_t>()[i], in.data<int64_t>()[j]) << "at " << i;
  }
}
} // namespace

TEST(CpuKernels, Broadcast) {
  checkBroadcast({3, 1}, {2, 3, 4}, DType::F32);
  checkBroadcast({}, {2, 2}, DType::F32);
  checkBroadcast({4}, {3, 4}, DType::F32);
  checkBroadcast({2, 1, 3}, {2, 4, 3}, DType::I64);
  checkBroadcast({1, 5, 1}, {3, 5, 2}, DType::F32);
  checkBroadcast({2, 3}, {2, 3}, DType::F32);
  checkBroadcast({1}, {1, 7}, DType::I64);
}

TEST(CpuKernels, Transpose) {
  auto check = [](std::vector<int64_t> shape, std::vector<int64_t> perm,
                  DType dtype) {
    Tensor in = dtype == DType::F32 ? randomF32(shape, 5)
                                    : randomI64(shape, 5, -1000, 1000);
    std::vector<int64_t> outShape(shape.size());
    for (size_t k = 0; k < perm.size(); ++k)
      outShape[k] = shape[perm[k]];
    Tensor out = Tensor::empty(dtype, outShape);
    cpu::transpose(in, perm, out);
    for (int64_t i = 0; i < out.numel(); ++i) {
      std::vector<int64_t> oi = unravel(i, outShape), ii(shape.size());
      for (size_t k = 0; k < perm.size(); ++k)
        ii[perm[k]] = oi[k];
      int64_t j = ravel(ii, shape);
      size_t es = dtypeSize(dtype);
      ASSERT_EQ(0, std::memcmp(static_cast<char *>(out.raw()) + i * es,
                               static_cast<char *>(in.raw()) + j * es, es))
          << "perm case at " << i;
    }
  };
  check({3, 4}, {1, 0}, DType::F32);
  check({37, 45}, {1, 0}, DType::F32);
  check({2, 3, 4}, {0, 2, 1}, DType::I64);
  check({2, 3, 4}, {2, 0, 1}, DType::F32);
  check({2, 3, 4, 5}, {0, 2, 1, 3}, DType::F32);
  check({2, 3, 4, 5}, {3, 1, 0, 2}, DType::I64);
  check({6}, {0}, DType::F32);
  check({}, {}, DType::F32);
}

TEST(CpuKernels, Slice) {
  Tensor in = randomF32({5, 6, 7}, 9);
  std::vector<int64_t> st = {1, 0, 2}, lim = {5, 6, 7}, str = {2, 3, 1};
  std::vector<int64_t> os = {2, 2, 5};
  Tensor out = Tensor::empty(DType::F32, os);
  cpu::slice(in, st, lim, str, out);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto oi = unravel(i, os);
    std::vector<int64_t> ii = {st[0] + oi[0] * str[0], st[1] + oi[1] * str[1],
                               st[2] + oi[2] * str[2]};
    ASSERT_EQ(out.data<float>()[i], in.data<float>()[ravel(ii, in.shape())]);
  }
  Tensor li = randomI64({4, 4}, 3, 0, 100);
  Tensor lo = Tensor::empty(DType::I64, {2, 1});
  cpu::slice(li, std::vector<int64_t>{1, 3}, std::vector<int64_t>{4, 4},
             std::vector<int64_t>{2, 1}, lo);
  EXPECT_EQ(lo.data<int64_t>()[0], li.data<int64_t>()[1 * 4 + 3]);
  EXPECT_EQ(lo.data<int64_t>()[1], li.data<int64_t>()[3 * 4 + 3]);
}

TEST(CpuKernels, Concat) {
  for (int64_t axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> s1 = {2, 3, 4}, s2 = s1, s3 = s1;
    s2[axis] = 1;
    s3[axis] = 5;
    Tensor a = randomF32(s1, 1), b = randomF32(s2, 2), c = randomF32(s3, 3);
    std::vector<int64_t> os = s1;
    os[axis] = s1[axis] + 1 + 5;
    Tensor out = Tensor::empty(DType::F32, os);
    const Tensor *ins[] = {&a, &b, &c};
    cpu::concat(ins, axis, out);
    for (int64_t i = 0; i < out.numel(); ++i) {
      auto idx = unravel(i, os);
      int64_t k = idx[axis];
      const Tensor *src = &a;
      if (k >= s1[axis] + 1) {
        src = &c;
        k -= s1[axis] + 1;
      } else if (k >= s1[axis]) {
        src = &b;
        k -= s1[axis];
      }
      idx[axis] = k;
      ASSERT_EQ(out.data<float>()[i],
                src->data<float>()[ravel(idx, src->shape())])
          << "axis " << axis << " index " << i;
    }
  }
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(CpuKernels, Reductions) {
  std::vector<int64_t> shape = {2, 3, 4, 5};
  Tensor in = randomF32(shape, 21);
  std::vector<std::vector<int64_t>> axesList = {
      {}, {0}, {1}, {3}, {0, 2}, {1, 2}, {1, 3}, {1, 2, 3}, {0, 1, 2, 3}};
  for (const auto &axes : axesList) {
    for (bool keep : {false, true}) {
      std::vector<int64_t> os;
      std::vector<bool> red(4, false);
      for (int64_t a : axes)
        red[a] = true;
      for (int d = 0; d < 4; ++d)
        if (!red[d])
          os.push_back(shape[d]);
        else if (keep)
          os.push_back(1);
      std::vector<int64_t> keptShape = shape;
      for (int64_t a : axes)
        keptShape[a] = 1;
      int64_t n = shapeNumel(keptShape);
      std::vector<double> sum(n, 0), mx(n, -INFINITY);
      int64_t cnt = in.numel() / n;
      for (int64_t i = 0; i < in.numel(); ++i) {
        auto idx = unravel(i, shape);
        for (int64_t a : axes)
          idx[a] = 0;
        int64_t o = ravel(idx, keptShape);
        double v = in.data<float>()[i];
        sum[o] += v;
        mx[o] = std::max(mx[o], v);
      }
      Tensor s = Tensor::empty(DType::F32, os), m = like(s), x = like(s);
      cpu::reduceSum(in, axes, keep, s);
      cpu::reduceMean(in, axes, keep, m);
      cpu::reduceMax(in, axes, keep, x);
      for (int64_t o = 0; o < n; ++o) {
        EXPECT_NEAR(s.data<float>()[o], sum[o], 1e-5) << o;
        EXPECT_NEAR(m.data<float>()[o], sum[o] / cnt, 1e-6) << o;
        EXPECT_EQ(x.data<float>()[o], (float)mx[o]) << o;
      }
    }
  }
}

TEST(CpuKernels, ReduceWithUnitDims) {
  Tensor in = randomF32({1, 4, 1, 3}, 4);
  Tensor out = Tensor::empty(DType::F32, {1, 1});
  cpu::reduceSum(in, std::vector<int64_t>{1, 3}, false, out);
  double s = 0;
  for (int i = 0; i < 12; ++i)
    s += in.data<float>()[i];
  EXPECT_NEAR(out.data<float>()[0], s, 1e-5);
  Tensor m = Tensor::empty(DType::F32, {});
  cpu::reduceMax(in, std::vector<int64_t>{0, 1, 2, 3}, false, m);
  EXPECT_EQ(m.data<float>()[0],
            *std::max_element(in.data<float>(), in.data<float>() + 12));
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

namespace {
void checkMatmul(std::vector<int64_t> batchA, std::vector<int64_t> batchB,
                 int64_t M, int64_t K, int64_t N, bool ta, bool tb) {
  std::vector<int64_t> as = batchA, bs = batchB;
  as.push_back(ta ? K : M);
  as.push_back(ta ? M : K);
  bs.push_back(tb ? N : K);
  bs.push_back(tb ? K : N);
  std::vector<int64_t> os = batchA.size() >= batchB.size() ? batchA : batchB;
  int64_t batch = shapeNumel(os);
  os.push_back(M);
  os.push_back(N);
  Tensor a = randomF32(as, 31), b = randomF32(bs, 32);
  Tensor out = Tensor::empty(DType::F32, os);
  cpu::matmul(a, b, ta, tb, out);
  Tensor ref = Tensor::empty(DType::F32, os);
  bool aShared = batchA.empty(), bShared = batchB.empty();
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float *pa = a.data<float>() + (aShared ? 0 : bi * M * K);
    const float *pb = b.data<float>() + (bShared ? 0 : bi * K * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          double x = ta ? pa[k * M + i] : pa[i * K + k];
          double y = tb ? pb[j * K + k] : pb[k * N + j];
          s += x * y;
        }
        ref.data<float>()[bi * M * N + i * N + j] = (float)s;
      }
  }
  expectClose(out, ref, 1e-4, 1e-4);
}
} // namespace

TEST(CpuKernels, Matmul) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb);
      checkMatmul({}, {}, 5, 7, 3, ta, tb);
      checkMatmul({2, 3}, {2, 3}, 4, 6, 5, ta, tb);
      checkMatmul({2, 3}, {}, 4, 6, 5, ta, tb); // shared rhs
      checkMatmul({}, {3}, 4, 6, 5, ta, tb);    // shared lhs
    }
}

TEST(CpuKernels, MatmulZeroK) {
  Tensor a = Tensor::empty(DType::F32, {2, 0}),
         b = Tensor::empty(DType::F32, {0, 3});
  Tensor out = Tensor::fromVector<float>({2, 3}, {1, 1, 1, 1, 1, 1});
  cpu::matmul(a, b, false, false, out);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(out.data<float>()[i], 0.0f);
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

TEST(CpuKernels, Gather) {
  Tensor table = randomF32({10, 2, 3}, 41);
  Tensor ids = Tensor::fromVector<int64_t>({2, 2}, {3, 0, 9, 3});
  Tensor out = Tensor::empty(DType::F32, {2, 2, 2, 3});
  ASSERT_NO_ERR(cpu::gather(table, ids, out));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j)
      EXPECT_EQ(out.data<float>()[i * 6 + j],
                table.data<float>()[ids.data<int64_t>()[i] * 6 + j]);
  ids.data<int64_t>()[2] = 10;
  std::string msg = errorMessage(cpu::gather(table, ids, out));
  EXPECT_NE(msg.find("id 10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 2"), std::string::npos) << msg;
  ids.data<int64_t>()[2] = -1;
  msg = errorMessage(cpu::gather(table, ids, out));
  EXPECT_NE(msg.find("id -1"), std::string::npos) << msg;
}

TEST(CpuKernels, GatherGradReference) {
  Tensor ids = Tensor::fromVector<int64_t>({5}, {1, 4, 1, 0, 1});
  Tensor dy = randomF32({5, 3}, 42);
  Tensor out = Tensor::fromVector<float>({6, 3}, std::vector<float>(18, 7.0f));
  ASSERT_NO_ERR(cpu::gatherGrad(ids, dy, out));
  std::vector<double> ref(18, 0.0);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      ref[ids.data<int64_t>()[i] * 3 + j] += dy.data<float>()[i * 3 + j];
  for (int k = 0; k < 18; ++k)
    EXPECT_NEAR(out.data<float>()[k], ref[k], 1e-6);
  ids.data<int64_t>()[4] = 6;
  std::string msg = errorMessage(cpu::gatherGrad(ids, dy, out));
  EXPECT_NE(msg.find("id 6 at index 4"), std::string::npos) << msg;
}

/// Rows [r·V/n, (r+1)·V/n) of a [V, C] table.
static Tensor rowBlock(const Tensor &t, int64_t r, int64_t n) {
  int64_t rows = t.dim(0) / n, cols = t.numel() / t.dim(0);
  Tensor out = Tensor::empty(t.dtype(), {rows, cols});
  std::memcpy(out.raw(), t.data<float>() + r * rows * cols,
              rows * cols * sizeof(float));
  return out;
}

TEST(CpuKernels, GatherMaskedSumsToGather) {
  // Megatron's vocab-parallel embedding: the per-rank masked lookups of a
  // table split into 4 row blocks sum to the full lookup; the masked
  // gradients are the row blocks of the full gradient.
  Tensor table = randomF32({8, 3}, 43);
  Tensor ids = Tensor::fromVector<int64_t>({2, 3}, {7, 0, 3, 3, 5, 2});
  Tensor full = Tensor::empty(DType::F32, {2, 3, 3});
  ASSERT_NO_ERR(cpu::gather(table, ids, full));
  Tensor dy = randomF32({2, 3, 3}, 44);
  Tensor fullGrad = Tensor::empty(DType::F32, {8, 3});
  ASSERT_NO_ERR(cpu::gatherGrad(ids, dy, fullGrad));
  std::vector<float> sum(18, 0.0f);
  for (int64_t r = 0; r < 4; ++r) {
    Tensor local = rowBlock(table, r, 4);
    Tensor out = Tensor::empty(DType::F32, {2, 3, 3});
    ASSERT_NO_ERR(cpu::gatherMasked(local, ids, 2 * r, 8, out));
    for (int k = 0; k < 18; ++k)
      sum[k] += out.data<float>()[k];
    Tensor grad = Tensor::empty(DType::F32, {2, 3});
    ASSERT_NO_ERR(cpu::gatherGradMasked(ids, dy, 2 * r, 8, grad));
    for (int k = 0; k < 6; ++k)
      EXPECT_EQ(grad.data<float>()[k], fullGrad.data<float>()[r * 6 + k]);
  }
  for (int k = 0; k < 18; ++k)
    EXPECT_EQ(sum[k], full.data<float>()[k]);
  // Ids are checked against the whole vocabulary.
  ids.data<int64_t>()[1] = 8;
  Tensor out = Tensor::empty(DType::F32, {2, 3, 3});
  std::string msg =
      errorMessage(cpu::gatherMasked(rowBlock(table, 0, 4), ids, 0, 8, out));
  EXPECT_NE(msg.find("id 8"), std::string::npos) << msg;
}

TEST(CpuKernels, VocabParallelCrossEntropyMatchesFull) {
  // Logits [N, V] split into 2 column blocks: the statistics reduced over
  // the blocks (max, then sums) give the full loss and each block's part of
  // the full gradient.
  const int64_t n = 5, v = 8, parts = 2, local = v / parts;
  Tensor logits = randomF32({n, v}, 61, -4, 4);
  Tensor labels = Tensor::fromVector<int64_t>({n}, {0, 7, 3, 4, 5});
  Tensor dloss = Tensor::fromVector<float>({}, {0.25f});
  Tensor loss = Tensor::empty(DType::F32, {});
  ASSERT_NO_ERR(cpu::crossEntropy(logits, labels, loss));
  Tensor grad = like(logits);
  ASSERT_NO_ERR(cpu::crossEntropyGrad(logits, labels, dloss, grad));
  std::vector<Tensor> blocks;
  for (int64_t p = 0; p < parts; ++p) {
    Tensor b = Tensor::empty(DType::F32, {n, local});
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < local; ++j)
        b.data<float>()[r * local + j] =
            logits.data<float>()[r * v + p * local + j];
    blocks.push_back(b);
  }
  std::vector<double> mx(n, -1e300), s(n, 0), t(n, 0);
  for (int64_t p = 0; p < parts; ++p) { // all-reduce MAX
    std::vector<double> m(n);
    cpu::crossEntropyRowMax(blocks[p], m.data());
    for (int64_t r = 0; r < n; ++r)
      mx[r] = std::max(mx[r], m[r]);
  }
  for (int64_t p = 0; p < parts; ++p) { // all-reduce SUM
    std::vector<double> sp(n), tp(n);
    ASSERT_NO_ERR(cpu::crossEntropyRowSums(blocks[p], labels, p * local, v,
                                           mx.data(), sp.data(), tp.data()));
    for (int64_t r = 0; r < n; ++r) {
      s[r] += sp[r];
      t[r] += tp[r];
    }
  }
  Tensor vpLoss = Tensor::empty(DType::F32, {});
  cpu::crossEntropyFromStats(n, mx.data(), s.data(), t.data(), vpLoss);
  EXPECT_NEAR(vpLoss.data<float>()[0], loss.data<float>()[0],
              1e-6 * std::abs(loss.data<float>()[0]));
  for (int64_t p = 0; p < parts; ++p) {
    Tensor g = like(blocks[p]);
    cpu::crossEntropyGradFromStats(blocks[p], labels, p * local, mx.data(),
                                   s.data(), dloss, g);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < local; ++j)
        EXPECT_NEAR(g.data<float>()[r * local + j],
                    grad.data<float>()[r * v + p * local + j], 1e-7);
  }
  // Labels are checked against the whole vocabulary.
  labels.data<int64_t>()[2] = 8;
  std::vector<double> sp(n), tp(n);
  std::string msg = errorMessage(cpu::crossEntropyRowSums(
      blocks[0], labels, 0, v, mx.data(), sp.data(), tp.data()));
  EXPECT_NE(msg.find("label 8 in row 2"), std::string::npos) << msg;
}

//===----------------------------------------------------------------------===//
// Normalisation, softmax, loss
//===----------------------------------------------------------------------===//

TEST(CpuKernels, LayerNorm) {
  for (int64_t axis : {1, 2}) {
    Tensor x = randomF32({2, 3, 8}, 51, -3, 5);
    std::vector<int64_t> ns(x.shape().begin() + axis, x.shape().end());
    Tensor g = randomF32(ns, 52), b = randomF32(ns, 53);
    Tensor out = like(x);
    float eps = 1e-5f;
    cpu::layerNorm(x, g, b, axis, eps, out);
    int64_t cols = shapeNumel(ns), rows = x.numel() / cols;
    Tensor ref = like(x);
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x.data<float>() + r * cols;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j)
        mean += xr[j];
      mean /= cols;
      for (int64_t j = 0; j < cols; ++j)
        var += (xr[j] - mean) * (xr[j] - mean);
      var /= cols;
      for (int64_t j = 0; j < cols; ++j)
        ref.data<float>()[r * cols + j] =
            (float)((xr[j] - mean) / std::sqrt(var + eps) * g.data<float>()[j] +
                    b.data<float>()[j]);
    }
    expectClose(out, ref, 1e-5, 1e-5);
    Tensor inPlace = x.clone();
    cpu::layerNorm(inPlace, g, b, axis, eps, inPlace);
    expectClose(inPlace, ref, 1e-5, 1e-5);
  }
}

TEST(CpuKernels, RmsNorm) {
  for (int64_t axis : {1, 2}) {
    Tensor x = randomF32({2, 3, 8}, 55, -3, 5);
    std::vector<int64_t> ns(x.shape().begin() + axis, x.shape().end());
    Tensor g = randomF32(ns, 56);
    Tensor out = like(x);
    float eps = 1e-6f;
    cpu::rmsNorm(x, g, axis, eps, out);
    int64_t cols = shapeNumel(ns), rows = x.numel() / cols;
    Tensor ref = like(x);
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x.data<float>() + r * cols;
      double ms = 0;
      for (int64_t j = 0; j < cols; ++j)
        ms += (double)xr[j] * xr[j];
      ms /= cols;
      for (int64_t j = 0; j < cols; ++j)
        ref.data<float>()[r * cols + j] =
            (float)(xr[j] / std::sqrt(ms + eps) * g.data<float>()[j]);
    }
    expectClose(out, ref, 1e-5, 1e-6);
    Tensor inPlace = x.clone();
    cpu::rmsNorm(inPlace, g, axis, eps, inPlace);
    expectClose(inPlace, ref, 1e-5, 1e-6);
  }
  // A zero row: rstd = 1 / sqrt(eps), the output is 0 (no NaN).
  Tensor z = Tensor::fromVector<float>({1, 4}, {0, 0, 0, 0});
  Tensor g = Tensor::fromVector<float>({4}, {1, 2, 3, 4}), out = like(z);
  cpu::rmsNorm(z, g, 1, 1e-6f, out);
  expectClose(out, z);
  // Known values (torch 1.13): x = [[1, 2, 3, 4]], w = [1, 2, 3, 4],
  //   w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
  Tensor x = Tensor::fromVector<float>({1, 4}, {1, 2, 3, 4});
  cpu::rmsNorm(x, g, 1, 1e-6f, out);
  expectClose(out, Tensor::fromVector<float>(
                       {1, 4}, {0.3651483654975891f, 1.4605934619903564f,
                                3.2863354682922363f, 5.842373847961426f}));
}

TEST(CpuKernels, Softmax) {
  Tensor x = randomF32({3, 5, 4}, 61, -5, 5);
  x.data<float>()[0] = 1000.0f; // stability
  for (int64_t axis : {0, 1, 2}) {
    Tensor out = like(x);
    cpu::softmax(x, axis, out);
    Tensor ref = like(x);
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unravel(i, x.shape());
      double mx = -INFINITY;
      for (int64_t k = 0; k < x.shape()[axis]; ++k) {
        auto j = idx;
        j[axis] = k;
        mx = std::max(mx, (double)x.data<float>()[ravel(j, x.shape())]);
      }
      double s = 0;
      for (int64_t k = 0; k < x.shape()[axis]; ++k) {
        auto j = idx;
        j[axis] = k;
        s += std::exp(x.data<float>()[ravel(j, x.shape())] - mx);
      }
      ref.data<float>()[i] = (float)(std::exp(x.data<float>()[i] - mx) / s);
    }
    expectClose(out, ref, 1e-5, 1e-7);
    Tensor y = x.clone();
    cpu::softmax(y, axis, y);
    expectClose(y, ref, 1e-5, 1e-7);
  }
}

TEST(CpuKernels, CrossEntropy) {
  Tensor logits = randomF32({6, 9}, 71, -4, 4);
  Tensor labels = Tensor::fromVector<int64_t>({6}, {0, 8, 3, 3, 5, 1});
  Tensor out = Tensor::empty(DType::F32, {});
  ASSERT_NO_ERR(cpu::crossEntropy(logits, labels, out));
  double ref = 0;
  for (int r = 0; r < 6; ++r) {
    double s = 0;
    for (int j = 0; j < 9; ++j)
      s += std::exp((double)logits.data<float>()[r * 9 + j]);
    ref +=
        std::log(s) - logits.data<float>()[r * 9 + labels.data<int64_t>()[r]];
  }
  EXPECT_NEAR(out.data<float>()[0], ref, 1e-5 * std::fabs(ref));
  labels.data<int64_t>()[3] = 9;
  std::string msg = errorMessage(cpu::crossEntropy(logits, labels, out));
  EXPECT_NE(msg.find("label 9 in row 3"), std::string::npos) << msg;
  Tensor d = like(logits);
  msg = errorMessage(
      cpu::crossEntropyGrad(logits, labels, Tensor::scalar(1.0f), d));
  EXPECT_NE(msg.find("label 9 in row 3"), std::string::npos) << msg;
}

TEST(CpuKernels, ReluGrad) {
  Tensor x = Tensor::fromVector<float>({4}, {-1, 0, 2, 3});
  Tensor dy = Tensor::fromVector<float>({4}, {5, 6, 7, 8});
  Tensor dx = like(x);
  cpu::reluGrad(x, dy, dx);
  std::vector<float> e = {0, 0, 7, 8};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(dx.data<float>()[i], e[i]);
  cpu::reluGrad(x, dy, dy); // in place
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(dy.data<float>()[i], e[i]);
}

//===----------------------------------------------------------------------===//
// Optimizers (constants from torch 1.13)
//===----------------------------------------------------------------------===//

// Produced by (torch 1.13, /usr/bin/python3):
//   p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
//   o = torch.optim.SGD([p], lr=0.1, momentum=0, weight_decay=0.01)
//   p.grad = torch.tensor([0.1, -0.2, 0.3]); o.step(); print(p)
TEST(CpuKernels, SgdMatchesTorch) {
  Tensor p = Tensor::fromVector<float>({3}, {0.5f, -1.0f, 2.0f});
  Tensor g = Tensor::fromVector<float>({3}, {0.1f, -0.2f, 0.3f});
  cpu::sgdUpdate(p, g, 0.1, 0.01, p);
  expectClose(
      p,
      Tensor::fromVector<float>(
          {3}, {0.4894999861717224f, -0.9789999723434448f, 1.968000054359436f}),
      2e-7, 0);
}

// Produced by (torch 1.13, /usr/bin/python3):
//   p = torch.nn.Parameter(torch.tensor([[0.5, -1.0, 2.0], [0.0, 3.0, -0.25]]))
//   opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
//                           weight_decay=0.1)
//   for g in [torch.tensor([[0.1, -0.2, 0.3], [0.0, 1.5, -0.05]]),
//             torch.tensor([[-0.3, 0.25, 0.0], [0.7, -1.0, 0.01]])]:
//       p.grad = g.clone(); opt.step()
//       print(p, opt.state[p]['exp_avg'], opt.state[p]['exp_avg_sq'])
TEST(CpuKernels, AdamWMatchesTorch) {
  Tensor p = Tensor::fromVector<float>({2, 3},
                                       {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -0.25f});
  Tensor m = Tensor::zeros(DType::F32, {2, 3});
  Tensor v = Tensor::zeros(DType::F32, {2, 3});
  Tensor g1 = Tensor::fromVector<float>(
      {2, 3}, {0.1f, -0.2f, 0.3f, 0.0f, 1.5f, -0.05f});
  Tensor g2 = Tensor::fromVector<float>(
      {2, 3}, {-0.3f, 0.25f, 0.0f, 0.7f, -1.0f, 0.01f});

  // Step 1 (out of place).
  Tensor p1 = like(p), m1 = like(m), v1 = like(v);
  cpu::adamwUpdate(p, g1, m, v, Tensor::scalar(1.0f), 1e-2, 0.9, 0.999, 1e-8,
                   0.1, p1, m1, v1);
  expectClose(p1,
              Tensor::fromVector<float>(
                  {2, 3}, {0.4895000159740448f, -0.9890000224113464f,
                           1.9880000352859497f, 0.0f, 2.986999988555908f,
                           -0.23975001275539398f}),
              3e-7, 1e-9);
  expectClose(m1,
              Tensor::fromVector<float>(
                  {2, 3}, {0.010000000707805157f, -0.020000001415610313f,
                           0.030000001192092896f, 0.0f, 0.15000000596046448f,
                           -0.005000000353902578f}),
              3e-7, 1e-12);
  expectClose(v1,
              Tensor::fromVector<float>(
                  {2, 3}, {1.0000000656873453e-05f, 4.0000002627493814e-05f,
                           9.000000864034519e-05f, 0.0f, 0.0022499999031424522f,
                           2.5000001642183634e-06f}),
              3e-7, 1e-14);

  // Step 2 (in place).
  cpu::adamwUpdate(p1, g2, m1, v1, Tensor::scalar(2.0f), 1e-2, 0.9, 0.999, 1e-8,
                   0.1, p1, m1, v1);
  expectClose(p1,
              Tensor::fromVector<float>(
                  {2, 3}, {0.4939524233341217f, -0.9896383881568909f,
                           1.979311466217041f, -0.007441368419677019f,
                           2.98256778717041f, -0.23440000414848328f}),
              3e-7, 1e-9);
  expectClose(m1,
              Tensor::fromVector<float>(
                  {2, 3}, {-0.021000001579523087f, 0.006999999284744263f,
                           0.027000000700354576f, 0.07000000029802322f,
                           0.03500000387430191f, -0.0035000003408640623f}),
              3e-7, 1e-12);
  expectClose(v1,
              Tensor::fromVector<float>(
                  {2, 3}, {9.999000758398324e-05f, 0.00010246000601910055f,
                           8.991001232061535e-05f, 0.0004900000058114529f,
                           0.0032477499917149544f, 2.5975002699851757e-06f}),
              3e-7, 1e-14);
}

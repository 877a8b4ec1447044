//===- CpuKernelsGradTest.cpp - gradient kernels vs finite differences ----===//
//
// Every gradient kernel is compared with central finite differences of the
// fp32 forward kernel: for a random cotangent dy, L(x) = sum(dy * f(x)) is
// accumulated in double and dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h.
// With h = 1e-2 the truncation error is O(h^2) and the fp32 rounding of f is
// amplified by 1/2h, so tolerances are fp32-sized (about 1e-3).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/CpuKernels.h"

#include "TestUtil.h"

#include <functional>
#include <limits>

using namespace tessera::runtime;
using namespace tessera::runtime::test;
namespace cpu = tessera::runtime::cpu;

namespace {

constexpr double kH = 1e-2;
constexpr double kRtol = 1e-2;
constexpr double kAtol = 2e-3;

double dot(const Tensor &a, const Tensor &b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    s += (double)a.data<float>()[i] * b.data<float>()[i];
  return s;
}

/// Numeric gradient of `loss` with respect to `x` (which `loss` reads).
Tensor numericGrad(Tensor &x, const std::function<double()> &loss) {
  Tensor g = Tensor::empty(DType::F32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    float orig = x.data<float>()[i];
    x.data<float>()[i] = (float)(orig + kH);
    double up = loss();
    x.data<float>()[i] = (float)(orig - kH);
    double down = loss();
    x.data<float>()[i] = orig;
    double hEff = ((double)(float)(orig + kH) - (double)(float)(orig - kH));
    g.data<float>()[i] = (float)((up - down) / hEff);
  }
  return g;
}

} // namespace

TEST(CpuKernelsGrad, LayerNorm) {
  for (int64_t axis : {1, 2}) {
    SCOPED_TRACE(axis);
    Tensor x = randomF32({2, 3, 4}, 101, -2, 2);
    std::vector<int64_t> ns(x.shape().begin() + axis, x.shape().end());
    Tensor gamma = randomF32(ns, 102, 0.5, 1.5), beta = randomF32(ns, 103);
    Tensor dy = randomF32(x.shape(), 104);
    float eps = 1e-5f;
    Tensor y = Tensor::empty(DType::F32, x.shape());
    auto loss = [&] {
      cpu::layerNorm(x, gamma, beta, axis, eps, y);
      return dot(dy, y);
    };
    Tensor dx = Tensor::empty(DType::F32, x.shape());
    Tensor dg = Tensor::empty(DType::F32, ns),
           db = Tensor::empty(DType::F32, ns);
    cpu::layerNormGrad(x, gamma, dy, axis, eps, dx, dg, db);
    expectClose(dx, numericGrad(x, loss), kRtol, kAtol);
    expectClose(dg, numericGrad(gamma, loss), kRtol, kAtol);
    expectClose(db, numericGrad(beta, loss), kRtol, kAtol);
    // dx in place over dy.
    Tensor dy2 = dy.clone();
    cpu::layerNormGrad(x, gamma, dy2, axis, eps, dy2, dg, db);
    expectClose(dy2, dx, 1e-6, 1e-7);
  }
}

TEST(CpuKernelsGrad, RmsNorm) {
  for (int64_t axis : {1, 2}) {
    SCOPED_TRACE(axis);
    Tensor x = randomF32({2, 3, 4}, 111, -2, 2);
    std::vector<int64_t> ns(x.shape().begin() + axis, x.shape().end());
    Tensor gamma = randomF32(ns, 112, 0.5, 1.5);
    Tensor dy = randomF32(x.shape(), 113);
    float eps = 1e-5f;
    Tensor y = Tensor::empty(DType::F32, x.shape());
    auto loss = [&] {
      cpu::rmsNorm(x, gamma, axis, eps, y);
      return dot(dy, y);
    };
    Tensor dx = Tensor::empty(DType::F32, x.shape());
    Tensor dg = Tensor::empty(DType::F32, ns);
    cpu::rmsNormGrad(x, gamma, dy, axis, eps, dx, dg);
    expectClose(dx, numericGrad(x, loss), kRtol, kAtol);
    expectClose(dg, numericGrad(gamma, loss), kRtol, kAtol);
    // dx in place over dy.
    Tensor dy2 = dy.clone();
    cpu::rmsNormGrad(x, gamma, dy2, axis, eps, dy2, dg);
    expectClose(dy2, dx, 1e-6, 1e-7);
  }
}

TEST(CpuKernelsGrad, Silu) {
  Tensor x = randomF32({4, 7}, 121, -6, 6);
  Tensor dy = randomF32(x.shape(), 122);
  Tensor y = Tensor::empty(DType::F32, x.shape());
  auto loss = [&] {
    cpu::silu(x, y);
    return dot(dy, y);
  };
  Tensor dx = Tensor::empty(DType::F32, x.shape());
  cpu::siluGrad(x, dy, dx);
  expectClose(dx, numericGrad(x, loss), kRtol, kAtol);
  Tensor dy2 = dy.clone();
  cpu::siluGrad(x, dy2, dy2); // in place over dy
  expectClose(dy2, dx, 0, 0);
}

TEST(CpuKernelsGrad, SiluDerivativeKnownValuesAndExtremes) {
  // torch 1.13: x.requires_grad_(); F.silu(x).backward(ones) for
  //   x = [-1e4, -100, -20, -1, 0, 1, 20, 1e4]; at -inf / +inf torch gives
  //   NaN and Tessera the limits 0 / 1.
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x =
      Tensor::fromVector<float>({10}, {-inf, -1e4f, -100.0f, -20.0f, -1.0f,
                                       0.0f, 1.0f, 20.0f, 1e4f, inf});
  Tensor dy = Tensor::fromVector<float>({10}, std::vector<float>(10, 1.0f));
  Tensor dx = Tensor::empty(DType::F32, {10});
  cpu::siluGrad(x, dy, dx);
  expectClose(dx, Tensor::fromVector<float>(
                      {10}, {0.0f, -0.0f, -0.0f, -3.916192170549948e-08f,
                             0.07232948392629623f, 0.5f, 0.9276705384254456f,
                             1.0f, 1.0f, 1.0f}));
}

TEST(CpuKernelsGrad, Softmax) {
  for (int64_t axis : {0, 1, 2}) {
    SCOPED_TRACE(axis);
    Tensor x = randomF32({2, 5, 3}, 111, -2, 2);
    Tensor dy = randomF32(x.shape(), 112);
    Tensor y = Tensor::empty(DType::F32, x.shape());
    auto loss = [&] {
      cpu::softmax(x, axis, y);
      return dot(dy, y);
    };
    cpu::softmax(x, axis, y);
    Tensor dx = Tensor::empty(DType::F32, x.shape());
    cpu::softmaxGrad(y, dy, axis, dx);
    Tensor num = numericGrad(x, loss);
    expectClose(dx, num, kRtol, kAtol);
    cpu::softmax(x, axis, y);
    cpu::softmaxGrad(y, dy, axis, y); // in place over y
    expectClose(y, dx, 1e-6, 1e-7);
  }
}

TEST(CpuKernelsGrad, Gelu) {
  for (auto approx : {cpu::GeluApproximate::None, cpu::GeluApproximate::Tanh}) {
    SCOPED_TRACE(approx == cpu::GeluApproximate::None ? "none" : "tanh");
    Tensor x = randomF32({40}, 121, -4, 4);
    Tensor dy = randomF32(x.shape(), 122);
    Tensor y = Tensor::empty(DType::F32, x.shape());
    auto loss = [&] {
      cpu::gelu(x, approx, y);
      return dot(dy, y);
    };
    Tensor dx = Tensor::empty(DType::F32, x.shape());
    cpu::geluGrad(x, dy, approx, dx);
    expectClose(dx, numericGrad(x, loss), kRtol, kAtol);
  }
}

TEST(CpuKernelsGrad, Relu) {
  // Keep away from the kink at 0.
  Tensor x =
      Tensor::fromVector<float>({6}, {-1.5f, -0.3f, 0.2f, 0.7f, 2.0f, -3.0f});
  Tensor dy = randomF32(x.shape(), 131);
  Tensor y = Tensor::empty(DType::F32, x.shape());
  auto loss = [&] {
    cpu::relu(x, y);
    return dot(dy, y);
  };
  Tensor dx = Tensor::empty(DType::F32, x.shape());
  cpu::reluGrad(x, dy, dx);
  expectClose(dx, numericGrad(x, loss), kRtol, kAtol);
}

TEST(CpuKernelsGrad, CrossEntropy) {
  Tensor logits = randomF32({4, 7}, 141, -2, 2);
  Tensor labels = Tensor::fromVector<int64_t>({4}, {6, 0, 3, 3});
  Tensor dloss = Tensor::scalar(0.25f);
  Tensor out = Tensor::empty(DType::F32, {});
  auto loss = [&] {
    llvm::cantFail(cpu::crossEntropy(logits, labels, out));
    return 0.25 * out.data<float>()[0];
  };
  Tensor d = Tensor::empty(DType::F32, logits.shape());
  ASSERT_NO_ERR(cpu::crossEntropyGrad(logits, labels, dloss, d));
  expectClose(d, numericGrad(logits, loss), kRtol, kAtol);
}

TEST(CpuKernelsGrad, Gather) {
  Tensor table = randomF32({5, 3}, 151);
  Tensor ids = Tensor::fromVector<int64_t>({2, 3}, {4, 0, 4, 2, 4, 1});
  Tensor dy = randomF32({2, 3, 3}, 152);
  Tensor y = Tensor::empty(DType::F32, {2, 3, 3});
  auto loss = [&] {
    llvm::cantFail(cpu::gather(table, ids, y));
    return dot(dy, y);
  };
  Tensor d = Tensor::empty(DType::F32, table.shape());
  ASSERT_NO_ERR(cpu::gatherGrad(ids, dy, d));
  expectClose(d, numericGrad(table, loss), kRtol, kAtol);
}

TEST(CpuKernelsGrad, GeluDerivativeKnownValues) {
  // d/dx gelu at x = 1: exact Phi(1) + phi(1) = 0.8413447 + 0.2419707.
  Tensor x = Tensor::fromVector<float>({1}, {1.0f});
  Tensor dy = Tensor::fromVector<float>({1}, {1.0f});
  Tensor dx = Tensor::empty(DType::F32, {1});
  cpu::geluGrad(x, dy, cpu::GeluApproximate::None, dx);
  EXPECT_NEAR(dx.data<float>()[0], 0.8413447460685429 + 0.24197072451914337,
              1e-6);
}

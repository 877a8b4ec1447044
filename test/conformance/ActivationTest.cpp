//===- ActivationTest.cpp - activations, softmax and their gradients ------===//
//
// relu, sigmoid, silu, gelu (exact and tanh forms), softmax along every
// axis, and relu_grad, gelu_grad, silu_grad, softmax_grad, against double
// references and PyTorch constants; saturation at extreme inputs (no NaN);
// masked (-inf) softmax entries; 16-bit operands; attribute errors with the
// text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <cmath>
#include <functional>
#include <limits>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(ActivationTest, "activations", "relu", "sigmoid",
                           "silu", "gelu", "softmax", "relu_grad", "gelu_grad",
                           "silu_grad", "softmax_grad");

constexpr double kSqrt2OverPi = 0.7978845608028654;

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double geluExact(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double geluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}
double geluExactGrad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
double geluTanhGrad(double x) {
  double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) +
         0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * x * x);
}

std::vector<double> map(const Tensor &x,
                        const std::function<double(double)> &f) {
  std::vector<double> v = values(x);
  for (double &e : v)
    e = f(e);
  return v;
}

std::vector<double> zip(const Tensor &x, const Tensor &dy,
                        const std::function<double(double, double)> &f) {
  std::vector<double> a = values(x), b = values(dy);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = f(a[i], b[i]);
  return a;
}

TEST_P(ActivationTest, ForwardMatchesReference) {
  Tensor x = randomF32({5, 41}, 1, -6.0f, 6.0f);
  struct Case {
    const char *name, *attrs;
    double (*f)(double);
  };
  for (const Case &c :
       {Case{"relu", "", [](double v) { return v > 0 ? v : 0; }},
        Case{"sigmoid", "", sigmoid},
        Case{"silu", "", [](double v) { return v * sigmoid(v); }},
        Case{"gelu", "", geluExact},
        Case{"gelu", "approximate = \"none\"", geluExact},
        Case{"gelu", "approximate = \"tanh\"", geluTanh}}) {
    SCOPED_TRACE(std::string(c.name) + " {" + c.attrs + "}");
    std::vector<Tensor> r = run(c.name, c.attrs, {x}, {typeOf(x)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], x.shape(), map(x, c.f), 2e-6, 1e-6);
  }
}

// Produced by (torch 1.13, /usr/bin/python3):
//   torch.nn.functional.gelu(torch.tensor([-1., 0.5, 2.]), approximate=A)
//   for A in ('none', 'tanh')
TEST_P(ActivationTest, GeluMatchesTorch) {
  Tensor x = f32({3}, {-1.0f, 0.5f, 2.0f});
  std::vector<Tensor> r =
      run("gelu", "approximate = \"none\"", {x}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {3},
             {-0.1586552858352661, 0.3457311987876892, 1.9544999599456787},
             1e-6, 0);
  r = run("gelu", "approximate = \"tanh\"", {x}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {3},
             {-0.15880799293518066, 0.3457140028476715, 1.9545977115631104},
             1e-6, 0);
}

// Produced by (torch 1.13, /usr/bin/python3):
//   x = torch.tensor([-inf, -1e4, -100., -20., -1., 0., 1., 20., 1e4, inf])
//   torch.sigmoid(x), torch.nn.functional.silu(x)
// except silu(-inf), where torch gives NaN and Tessera the limit -0; and
// silu's derivative (x.requires_grad_(); F.silu(x).backward(ones)) with the
// limits 0 / 1 at -inf / +inf where torch gives NaN.
TEST_P(ActivationTest, SigmoidSiluSaturateWithoutNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = f32({10}, {-inf, -1e4f, -100.0f, -20.0f, -1.0f, 0.0f, 1.0f, 20.0f,
                        1e4f, inf});
  std::vector<Tensor> r = run("sigmoid", "", {x}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {10},
             {0.0, 0.0, 0.0, 2.06115369216775e-09, 0.2689414322376251, 0.5,
              0.7310585975646973, 1.0, 1.0, 1.0},
             1e-6, 1e-30);
  r = run("silu", "", {x}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {10},
             {-0.0, -0.0, -0.0, -4.1223074731533416e-08, -0.2689414322376251,
              0.0, 0.7310585975646973, 20.0, 1e4, INFINITY},
             1e-6, 1e-30);
  for (int64_t i = 0; i < 3; ++i) // the sign of the limit
    EXPECT_TRUE(std::signbit(values(r[0])[i])) << i;
  Tensor ones = f32({10}, std::vector<float>(10, 1.0f));
  r = run("silu_grad", "", {x, ones}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {10},
             {0.0, -0.0, -0.0, -3.916192170549948e-08, 0.07232948392629623, 0.5,
              0.9276705384254456, 1.0, 1.0, 1.0},
             1e-6, 1e-30);
}

TEST_P(ActivationTest, GradsMatchReference) {
  // relu_grad: keep away from the kink, and check dx = 0 at x = 0.
  Tensor x = randomF32({3, 29}, 5, -4.0f, 4.0f);
  x.data<float>()[0] = 0.0f;
  Tensor dy = randomF32({3, 29}, 6);
  struct Case {
    const char *name, *attrs;
    std::function<double(double, double)> f;
  };
  for (const Case &c : {
           Case{"relu_grad", "",
                [](double v, double d) { return v > 0 ? d : 0; }},
           Case{"silu_grad", "",
                [](double v, double d) {
                  double s = sigmoid(v);
                  return d * s * (1 + v * (1 - s));
                }},
           Case{"gelu_grad", "",
                [](double v, double d) { return d * geluExactGrad(v); }},
           Case{"gelu_grad", "approximate = \"tanh\"",
                [](double v, double d) { return d * geluTanhGrad(v); }},
       }) {
    SCOPED_TRACE(std::string(c.name) + " {" + c.attrs + "}");
    std::vector<Tensor> r = run(c.name, c.attrs, {x, dy}, {typeOf(x)});
    ASSERT_EQ(r.size(), 1u);
    // Absolute slack for the derivatives' cancellation near their zeros.
    expectNear(r[0], x.shape(), zip(x, dy, c.f), 2e-6, 1e-6);
  }
  // d/dx gelu(1), exact form: Phi(1) + phi(1).
  Tensor one = f32({1}, {1.0f});
  std::vector<Tensor> r = run("gelu_grad", "", {one, one}, {typeOf(one)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {1}, {0.8413447460685429 + 0.24197072451914337}, 1e-6, 0);
}

/// Calls `line(at, n)` for every line of a `shape` tensor along `axis` (in
/// [0, rank)): n = shape[axis] elements, element k at flat index at(k).
template <typename Fn>
void forEachLine(const std::vector<int64_t> &shape, int64_t axis, Fn line) {
  int64_t outer = 1, inner = 1, n = shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    inner *= shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      line([&](int64_t k) { return (o * n + k) * inner + i; }, n);
}

/// Softmax of `x` (shape) along `axis` in double.
std::vector<double> softmaxRef(const std::vector<double> &x,
                               const std::vector<int64_t> &shape,
                               int64_t axis) {
  std::vector<double> y(x.size());
  forEachLine(shape, axis, [&](auto at, int64_t n) {
    double mx = -INFINITY, s = 0;
    for (int64_t k = 0; k < n; ++k)
      mx = std::max(mx, x[at(k)]);
    for (int64_t k = 0; k < n; ++k)
      s += std::exp(x[at(k)] - mx);
    for (int64_t k = 0; k < n; ++k)
      y[at(k)] = std::exp(x[at(k)] - mx) / s;
  });
  return y;
}

std::vector<double> softmaxGradRef(const std::vector<double> &y,
                                   const std::vector<double> &dy,
                                   const std::vector<int64_t> &shape,
                                   int64_t axis) {
  std::vector<double> dx(y.size());
  forEachLine(shape, axis, [&](auto at, int64_t n) {
    double dot = 0;
    for (int64_t k = 0; k < n; ++k)
      dot += dy[at(k)] * y[at(k)];
    for (int64_t k = 0; k < n; ++k)
      dx[at(k)] = y[at(k)] * (dy[at(k)] - dot);
  });
  return dx;
}

TEST_P(ActivationTest, SoftmaxAndGradAlongEveryAxis) {
  std::vector<int64_t> shape = {3, 5, 4};
  Tensor x = randomF32(shape, 61, -5.0f, 5.0f);
  x.data<float>()[0] = 1000.0f; // stability: no overflow to inf / NaN
  Tensor dy = randomF32(shape, 62);
  for (int64_t axis : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    int64_t a = axis < 0 ? axis + 3 : axis;
    std::string attrs = "axis = " + std::to_string(axis) + " : i64";
    std::vector<double> y = softmaxRef(values(x), shape, a);
    std::vector<Tensor> r = run("softmax", attrs, {x}, {typeOf(x)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], shape, y, 1e-5, 1e-7, "softmax");
    // softmax_grad takes the softmax output.
    Tensor yt = r[0];
    std::vector<double> dx = softmaxGradRef(values(yt), values(dy), shape, a);
    r = run("softmax_grad", attrs, {yt, dy}, {typeOf(x)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], shape, dx, 1e-5, 1e-7, "softmax_grad");
  }
}

// Masked entries (-inf, the additive causal mask) get probability 0 and
// the other entries of their row renormalise; a long row (more than one
// block of any reasonable kernel) too.
TEST_P(ActivationTest, SoftmaxWithMaskedEntriesAndLongRows) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = f32({2, 4}, {0.5f, -inf, 1.5f, -inf, -inf, -inf, -inf, 2.0f});
  std::vector<Tensor> r = run("softmax", "axis = 1 : i64", {x}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  double e = std::exp(-1.0);
  expectNear(r[0], {2, 4}, {e / (1 + e), 0, 1 / (1 + e), 0, 0, 0, 0, 1}, 1e-6,
             0);
  Tensor longRow = randomF32({2, 5000}, 63, -10.0f, 10.0f);
  r = run("softmax", "axis = -1 : i64", {longRow}, {typeOf(longRow)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {2, 5000}, softmaxRef(values(longRow), {2, 5000}, 1), 1e-5,
             1e-9);
}

TEST_P(ActivationTest, Float16BitOperands) {
  Tensor x = randomF32({2, 40}, 71, -4.0f, 4.0f);
  Tensor dy = randomF32({2, 40}, 72);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor hx = narrow(x, dt), hdy = narrow(dy, dt);
    TensorType t{dt, {2, 40}};
    double tol = rtolFor(dt);
    std::vector<Tensor> r = run("gelu", "approximate = \"tanh\"", {hx}, {t});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].dtype(), dt);
    expectNear(r[0], {2, 40}, map(hx, geluTanh), tol, 1e-3);
    r = run("silu", "", {hx}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], {2, 40}, map(hx, [](double v) { return v * sigmoid(v); }),
               tol, 1e-3);
    r = run("relu_grad", "", {hx, hdy}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], dt, {2, 40},
                zip(hx, hdy, [](double v, double d) { return v > 0 ? d : 0; }));
    r = run("gelu_grad", "", {hx, hdy}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectNear(
        r[0], {2, 40},
        zip(hx, hdy, [](double v, double d) { return d * geluExactGrad(v); }),
        tol, 1e-3);
    r = run("softmax", "axis = 1 : i64", {hx}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], {2, 40}, softmaxRef(values(hx), {2, 40}, 1), tol, 1e-4);
  }
}

TEST_P(ActivationTest, LoadErrors) {
  TensorType x{DType::F32, {2, 3}};
  EXPECT_EQ(loadError("gelu", "approximate = \"fast\"", {x}, {x}),
            "attribute 'approximate' must be \"none\" or \"tanh\", got "
            "\"fast\"");
  // A non-string value is rejected naming the attribute (today's text says
  // got "" rather than "must be a string").
  EXPECT_NE(loadError("gelu_grad", "approximate = 1 : i64", {x, x}, {x})
                .find("attribute 'approximate' must be"),
            std::string::npos);
  EXPECT_EQ(loadError("softmax", "", {x}, {x}), "missing attribute 'axis'");
  EXPECT_EQ(loadError("softmax_grad", "axis = -3 : i64", {x, x}, {x}),
            "attribute 'axis' = -3 is out of range for rank 2");
  EXPECT_EQ(
      loadError("relu_grad", "", {x, TensorType{DType::F32, {3, 2}}}, {x}),
      "operand #1 has type tensor<3x2xf32> but operand #0 has "
      "tensor<2x3xf32>; they must match");
  EXPECT_EQ(loadError("silu", "", {TensorType{DType::I64, {2}}},
                      {TensorType{DType::I64, {2}}}),
            "operand has unsupported type tensor<2xi64>");
}

} // namespace

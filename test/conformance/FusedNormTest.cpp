//===- FusedNormTest.cpp - residual add fused with a norm ----------------===//
//
// The kernels of tsr-fuse-norm: add_layer_norm and add_rms_norm (x, r,
// scale[, bias]) -> (x + r, norm(x + r)), layer_norm_grad_add and
// rms_norm_grad_add (x, scale, dy, addend) -> (dx + addend, dscale[,
// dbias]). Each is checked against the unfused composition it replaces,
// run on the same backend (add then layer_norm; layer_norm_grad then add):
// the sum bit for bit, the rest to the order of the f64 row sums; and
// against double references (shapes with a tail past the CPU kernels'
// 8-lane blocks, two normalised dims, a constant row); 16-bit operands;
// load errors.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"
#include "Reference.h"

#include <cmath>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(FusedNormTest, "fused normalisation",
                           "add_layer_norm", "add_rms_norm",
                           "layer_norm_grad_add", "rms_norm_grad_add");

std::string normAttrs(int64_t axis, double eps) {
  return "axis = " + std::to_string(axis) + " : i64, " +
         f32Attr("epsilon", eps);
}

struct Case {
  std::vector<int64_t> shape;
  int64_t axis;
  double eps;
};

const std::vector<Case> kCases = {
    {{4, 33}, 1, 1e-5},     {{3, 64}, -1, 1e-6}, {{2, 3, 8}, 1, 1e-5},
    {{1, 1, 300}, 2, 1e-5}, {{5, 7}, 1, 1e-5}, // cols < one lane block
};

/// The normalised dims of `c` and their element count.
std::vector<int64_t> normShape(const Case &c) {
  int64_t axis = c.axis < 0 ? c.axis + c.shape.size() : c.axis;
  return std::vector<int64_t>(c.shape.begin() + axis, c.shape.end());
}

/// x + r rounded to f32, as the add kernel.
std::vector<double> f32Sum(const Tensor &x, const Tensor &r) {
  std::vector<double> h(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i)
    h[i] = static_cast<float>(x.data<float>()[i] + r.data<float>()[i]);
  return h;
}

/// Double layer norm (rms when `rms`) of rows of `n`.
std::vector<double> normRef(const std::vector<double> &x,
                            const std::vector<double> &g,
                            const std::vector<double> &b, int64_t n, double eps,
                            bool rms) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size() / n; ++i) {
    const double *xr = &x[i * n];
    double mean = 0, rstd;
    if (rms) {
      double ms = 0;
      for (int64_t j = 0; j < n; ++j)
        ms += xr[j] * xr[j];
      rstd = 1 / std::sqrt(ms / n + eps);
    } else {
      auto m = tessera::test::rowMoments(xr, n);
      mean = m.mean;
      rstd = 1 / std::sqrt(m.var + eps);
    }
    for (int64_t j = 0; j < n; ++j)
      y[i * n + j] = (xr[j] - mean) * rstd * g[j] + (rms ? 0.0 : b[j]);
  }
  return y;
}

/// Operands of one case: x with a constant first row (zero variance) and r
/// zero on that row, gamma in [0.5, 1.5), beta, dy, addend.
struct Operands {
  std::vector<int64_t> ns;
  int64_t n;
  Tensor x, r, g, b, dy, a;
  std::string attrs;
};

Operands operands(const Case &c, uint32_t seed) {
  Operands o;
  o.ns = normShape(c);
  o.n = tessera::runtime::shapeNumel(o.ns);
  o.x = randomF32(c.shape, seed, -2.0f, 3.0f);
  o.r = randomF32(c.shape, seed + 1);
  for (int64_t j = 0; j < o.n; ++j) {
    o.x.data<float>()[j] = 0.75f;
    o.r.data<float>()[j] = 0.0f;
  }
  o.g = randomF32(o.ns, seed + 2, 0.5f, 1.5f);
  o.b = randomF32(o.ns, seed + 3);
  o.dy = randomF32(c.shape, seed + 4);
  o.a = randomF32(c.shape, seed + 5);
  o.attrs = normAttrs(c.axis, c.eps);
  return o;
}

TEST_P(FusedNormTest, AddLayerNormMatchesAddThenLayerNorm) {
  uint32_t seed = 1;
  for (const Case &c : kCases) {
    Operands o = operands(c, seed += 10);
    SCOPED_TRACE(typeOf(o.x).str() + " {" + o.attrs + "}");
    TensorType t = typeOf(o.x);
    std::vector<Tensor> fused =
        run("add_layer_norm", o.attrs, {o.x, o.r, o.g, o.b}, {t, t});
    ASSERT_EQ(fused.size(), 2u);
    std::vector<Tensor> h = run("add", "", {o.x, o.r}, {t});
    ASSERT_EQ(h.size(), 1u);
    std::vector<Tensor> y = run("layer_norm", o.attrs, {h[0], o.g, o.b}, {t});
    ASSERT_EQ(y.size(), 1u);
    expectBitEqual(fused[0], h[0], "sum");
    expectNear(fused[1], c.shape, values(y[0]), 1e-6, 1e-6, "y vs unfused");
    std::vector<double> sum = f32Sum(o.x, o.r);
    expectEqual(fused[0], DType::F32, c.shape, sum, "sum vs reference");
    expectNear(fused[1], c.shape,
               normRef(sum, values(o.g), values(o.b), o.n, c.eps, false), 1e-5,
               1e-5, "y vs reference");
  }
}

TEST_P(FusedNormTest, AddRmsNormMatchesAddThenRmsNorm) {
  uint32_t seed = 100;
  for (const Case &c : kCases) {
    Operands o = operands(c, seed += 10);
    SCOPED_TRACE(typeOf(o.x).str() + " {" + o.attrs + "}");
    TensorType t = typeOf(o.x);
    std::vector<Tensor> fused =
        run("add_rms_norm", o.attrs, {o.x, o.r, o.g}, {t, t});
    ASSERT_EQ(fused.size(), 2u);
    std::vector<Tensor> h = run("add", "", {o.x, o.r}, {t});
    ASSERT_EQ(h.size(), 1u);
    std::vector<Tensor> y = run("rms_norm", o.attrs, {h[0], o.g}, {t});
    ASSERT_EQ(y.size(), 1u);
    expectBitEqual(fused[0], h[0], "sum");
    expectNear(fused[1], c.shape, values(y[0]), 1e-6, 1e-6, "y vs unfused");
    std::vector<double> sum = f32Sum(o.x, o.r);
    expectNear(fused[1], c.shape,
               normRef(sum, values(o.g), {}, o.n, c.eps, true), 1e-5, 1e-5,
               "y vs reference");
  }
}

TEST_P(FusedNormTest, LayerNormGradAddMatchesGradThenAdd) {
  uint32_t seed = 200;
  for (const Case &c : kCases) {
    Operands o = operands(c, seed += 10);
    SCOPED_TRACE(typeOf(o.x).str() + " {" + o.attrs + "}");
    TensorType t = typeOf(o.x), gt = typeOf(o.g);
    std::vector<Tensor> fused =
        run("layer_norm_grad_add", o.attrs, {o.x, o.g, o.dy, o.a}, {t, gt, gt});
    ASSERT_EQ(fused.size(), 3u);
    std::vector<Tensor> grad =
        run("layer_norm_grad", o.attrs, {o.x, o.g, o.dy}, {t, gt, gt});
    ASSERT_EQ(grad.size(), 3u);
    std::vector<Tensor> sum = run("add", "", {o.a, grad[0]}, {t});
    ASSERT_EQ(sum.size(), 1u);
    expectNear(fused[0], c.shape, values(sum[0]), 1e-6, 1e-6, "dx + addend");
    expectNear(fused[1], o.ns, values(grad[1]), 1e-6, 1e-6, "dgamma");
    expectNear(fused[2], o.ns, values(grad[2]), 1e-6, 1e-6, "dbeta");
    // The addend really is added: a zero addend gives the gradient alone.
    Tensor zero = f32(c.shape, std::vector<float>(o.x.numel(), 0.0f));
    std::vector<Tensor> alone = run("layer_norm_grad_add", o.attrs,
                                    {o.x, o.g, o.dy, zero}, {t, gt, gt});
    ASSERT_EQ(alone.size(), 3u);
    expectNear(alone[0], c.shape, values(grad[0]), 1e-6, 1e-6, "dx alone");
  }
}

TEST_P(FusedNormTest, RmsNormGradAddMatchesGradThenAdd) {
  uint32_t seed = 300;
  for (const Case &c : kCases) {
    Operands o = operands(c, seed += 10);
    SCOPED_TRACE(typeOf(o.x).str() + " {" + o.attrs + "}");
    TensorType t = typeOf(o.x), gt = typeOf(o.g);
    std::vector<Tensor> fused =
        run("rms_norm_grad_add", o.attrs, {o.x, o.g, o.dy, o.a}, {t, gt});
    ASSERT_EQ(fused.size(), 2u);
    std::vector<Tensor> grad =
        run("rms_norm_grad", o.attrs, {o.x, o.g, o.dy}, {t, gt});
    ASSERT_EQ(grad.size(), 2u);
    std::vector<Tensor> sum = run("add", "", {grad[0], o.a}, {t});
    ASSERT_EQ(sum.size(), 1u);
    expectNear(fused[0], c.shape, values(sum[0]), 1e-6, 1e-6, "dx + addend");
    expectNear(fused[1], o.ns, values(grad[1]), 1e-6, 1e-6, "dgamma");
  }
}

// 16-bit operands: the fused kernels against the unfused ones on the same
// backend, to the 16-bit result's rounding (the CPU backend widens the
// whole fused kernel to f32, so its norm reads the unrounded sum).
TEST_P(FusedNormTest, Float16BitOperands) {
  Case c{{3, 64}, -1, 1e-5};
  Operands o = operands(c, 41);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor hx = narrow(o.x, dt), hr = narrow(o.r, dt), hg = narrow(o.g, dt),
           hb = narrow(o.b, dt), hdy = narrow(o.dy, dt), ha = narrow(o.a, dt);
    TensorType t{dt, c.shape}, gt{dt, {64}};
    double tol = rtolFor(dt);
    std::vector<Tensor> h = run("add", "", {hx, hr}, {t});
    ASSERT_EQ(h.size(), 1u);
    std::vector<Tensor> fused =
        run("add_layer_norm", o.attrs, {hx, hr, hg, hb}, {t, t});
    ASSERT_EQ(fused.size(), 2u);
    ASSERT_EQ(fused[1].dtype(), dt);
    expectBitEqual(fused[0], h[0], "sum");
    std::vector<Tensor> y = run("layer_norm", o.attrs, {h[0], hg, hb}, {t});
    ASSERT_EQ(y.size(), 1u);
    expectNear(fused[1], c.shape, values(y[0]), 4 * tol, 4 * tol, "ln y");
    fused = run("add_rms_norm", o.attrs, {hx, hr, hg}, {t, t});
    ASSERT_EQ(fused.size(), 2u);
    y = run("rms_norm", o.attrs, {h[0], hg}, {t});
    ASSERT_EQ(y.size(), 1u);
    expectNear(fused[1], c.shape, values(y[0]), 4 * tol, 4 * tol, "rms y");
    std::vector<Tensor> grad =
        run("layer_norm_grad", o.attrs, {hx, hg, hdy}, {t, gt, gt});
    ASSERT_EQ(grad.size(), 3u);
    std::vector<Tensor> sum = run("add", "", {grad[0], ha}, {t});
    ASSERT_EQ(sum.size(), 1u);
    fused = run("layer_norm_grad_add", o.attrs, {hx, hg, hdy, ha}, {t, gt, gt});
    ASSERT_EQ(fused.size(), 3u);
    expectNear(fused[0], c.shape, values(sum[0]), 4 * tol, 4 * tol, "ln dx");
    expectNear(fused[1], {64}, values(grad[1]), tol, tol, "ln dgamma");
    grad = run("rms_norm_grad", o.attrs, {hx, hg, hdy}, {t, gt});
    ASSERT_EQ(grad.size(), 2u);
    sum = run("add", "", {grad[0], ha}, {t});
    ASSERT_EQ(sum.size(), 1u);
    fused = run("rms_norm_grad_add", o.attrs, {hx, hg, hdy, ha}, {t, gt});
    ASSERT_EQ(fused.size(), 2u);
    expectNear(fused[0], c.shape, values(sum[0]), 4 * tol, 4 * tol, "rms dx");
    expectNear(fused[1], {64}, values(grad[1]), tol, tol, "rms dgamma");
  }
}

TEST_P(FusedNormTest, LoadErrors) {
  TensorType x{DType::F32, {2, 4}}, x3{DType::F32, {2, 3}}, g{DType::F32, {4}},
      g3{DType::F32, {3}};
  std::string attrs = normAttrs(1, 1e-5);
  EXPECT_EQ(loadError("add_layer_norm", attrs, {x, x3, g, g}, {x, x}),
            "residual tensor<2x3xf32> does not match input tensor<2x4xf32>");
  EXPECT_EQ(loadError("add_layer_norm", attrs, {x, x, g3, g3}, {x, x}),
            "operand types tensor<2x4xf32>, tensor<3xf32>, tensor<3xf32> do "
            "not match axis 1");
  EXPECT_EQ(loadError("add_layer_norm", attrs, {x, x, g, g}, {x, x3}),
            "result #1 has type tensor<2x3xf32>, expected tensor<2x4xf32>");
  EXPECT_EQ(loadError("add_rms_norm", attrs, {x, x, g, g}, {x, x}),
            "expects 3 operand(s) and 2 result(s), got 4 and 2");
  EXPECT_EQ(loadError("add_rms_norm", "axis = 1 : i64", {x, x, g}, {x, x}),
            "missing attribute 'epsilon'");
  EXPECT_EQ(loadError("layer_norm_grad_add", attrs, {x, g, x, x3}, {x, g, g}),
            "addend tensor<2x3xf32> does not match input tensor<2x4xf32>");
  EXPECT_EQ(loadError("rms_norm_grad_add", attrs, {x, g, x, x}, {x, g, g}),
            "expects 4 operand(s) and 2 result(s), got 4 and 3");
  EXPECT_EQ(
      loadError("rms_norm_grad_add", normAttrs(2, 1e-5), {x, g, x, x}, {x, g}),
      "attribute 'axis' = 2 is out of range for rank 2");
}

} // namespace

//===- NormalizationTest.cpp - layer_norm, rms_norm and their gradients ---===//
//
// Layer norm (biased variance, as torch) and RMS norm (Zhang & Sennrich
// 2019) over the trailing dims from `axis` (positive and negative, one and
// two normalised dims), forward and backward, against double references of
// the formulas in runtime/backends/cpu/CpuKernels.h; a constant row (zero
// variance: eps keeps it finite); 16-bit operands; attribute errors with the
// text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"
#include "Reference.h"

#include <cmath>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(NormalizationTest, "normalisation", "layer_norm",
                           "layer_norm_grad", "rms_norm", "rms_norm_grad");

struct Norm {
  std::vector<double> y, dx, dgamma, dbeta;
};

/// Rows of `n` elements: x [rows, n], gamma / beta [n], dy [rows, n].
Norm layerNormRef(const std::vector<double> &x, const std::vector<double> &g,
                  const std::vector<double> &b, const std::vector<double> &dy,
                  int64_t n, double eps) {
  int64_t rows = x.size() / n;
  Norm r{std::vector<double>(x.size()), std::vector<double>(x.size()),
         std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int64_t i = 0; i < rows; ++i) {
    const double *xr = &x[i * n];
    auto [mean, var] = tessera::test::rowMoments(xr, n);
    double rstd = 1 / std::sqrt(var + eps);
    double sumG = 0, sumGX = 0;
    for (int64_t j = 0; j < n; ++j) {
      double xhat = (xr[j] - mean) * rstd;
      r.y[i * n + j] = xhat * g[j] + b[j];
      double gj = dy.empty() ? 0 : dy[i * n + j] * g[j];
      sumG += gj;
      sumGX += gj * xhat;
      if (!dy.empty()) {
        r.dgamma[j] += dy[i * n + j] * xhat;
        r.dbeta[j] += dy[i * n + j];
      }
    }
    if (dy.empty())
      continue;
    for (int64_t j = 0; j < n; ++j) {
      double xhat = (xr[j] - mean) * rstd;
      double gj = dy[i * n + j] * g[j];
      r.dx[i * n + j] = rstd * (gj - sumG / n - xhat * sumGX / n);
    }
  }
  return r;
}

Norm rmsNormRef(const std::vector<double> &x, const std::vector<double> &g,
                const std::vector<double> &dy, int64_t n, double eps) {
  int64_t rows = x.size() / n;
  Norm r{std::vector<double>(x.size()),
         std::vector<double>(x.size()),
         std::vector<double>(n, 0.0),
         {}};
  for (int64_t i = 0; i < rows; ++i) {
    const double *xr = &x[i * n];
    double ms = 0;
    for (int64_t j = 0; j < n; ++j)
      ms += xr[j] * xr[j];
    double rstd = 1 / std::sqrt(ms / n + eps);
    double dot = 0;
    for (int64_t j = 0; j < n; ++j) {
      r.y[i * n + j] = xr[j] * rstd * g[j];
      if (!dy.empty()) {
        dot += dy[i * n + j] * g[j] * xr[j] * rstd;
        r.dgamma[j] += dy[i * n + j] * xr[j] * rstd;
      }
    }
    if (dy.empty())
      continue;
    for (int64_t j = 0; j < n; ++j)
      r.dx[i * n + j] = rstd * (dy[i * n + j] * g[j] - xr[j] * rstd * dot / n);
  }
  return r;
}

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
    {{4, 33}, 1, 1e-5},    {{4, 33}, -1, 1e-5},
    {{2, 3, 16}, 2, 1e-6}, {{2, 3, 8}, 1, 1e-5}, // two normalised dims
    {{2, 3, 8}, -2, 1e-5}, {{1, 1, 300}, -1, 1e-5},
};

std::vector<int64_t> normShape(const Case &c) {
  int64_t axis = c.axis < 0 ? c.axis + c.shape.size() : c.axis;
  return std::vector<int64_t>(c.shape.begin() + axis, c.shape.end());
}

/// One case's operands, drawn from `seed` in this order: x [shape] in
/// [-2, 3) with its first row set to `firstRow` throughout, gamma [ns] in
/// [0.5, 1.5), beta [ns] (`withBeta`), dy [shape].
struct Operands {
  std::vector<int64_t> ns; // the normalised dims
  int64_t n;               // their element count
  Tensor x, g, b, dy;
  std::string attrs;
};

Operands operands(const Case &c, uint32_t &seed, float firstRow,
                  bool withBeta) {
  Operands o;
  o.ns = normShape(c);
  o.n = tessera::runtime::shapeNumel(o.ns);
  o.x = randomF32(c.shape, seed++, -2.0f, 3.0f);
  for (int64_t j = 0; j < o.n; ++j)
    o.x.data<float>()[j] = firstRow;
  o.g = randomF32(o.ns, seed++, 0.5f, 1.5f);
  if (withBeta)
    o.b = randomF32(o.ns, seed++);
  o.dy = randomF32(c.shape, seed++);
  o.attrs = normAttrs(c.axis, c.eps);
  return o;
}

TEST_P(NormalizationTest, LayerNormAndGrad) {
  uint32_t seed = 1;
  for (const Case &c : kCases) {
    // A constant first row: variance 0, so rstd = 1/sqrt(eps).
    Operands o = operands(c, seed, 0.75f, /*withBeta=*/true);
    SCOPED_TRACE(typeOf(o.x).str() + " {" + o.attrs + "}");
    Norm want = layerNormRef(values(o.x), values(o.g), values(o.b),
                             values(o.dy), o.n, c.eps);
    std::vector<Tensor> r =
        run("layer_norm", o.attrs, {o.x, o.g, o.b}, {typeOf(o.x)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], c.shape, want.y, 1e-5, 1e-5, "y");
    r = run("layer_norm_grad", o.attrs, {o.x, o.g, o.dy},
            {typeOf(o.x), typeOf(o.g), typeOf(o.g)});
    ASSERT_EQ(r.size(), 3u);
    expectNear(r[0], c.shape, want.dx, 1e-4, 1e-5, "dx");
    expectNear(r[1], o.ns, want.dgamma, 1e-5, 1e-5, "dgamma");
    expectNear(r[2], o.ns, want.dbeta, 1e-5, 1e-5, "dbeta");
  }
}

TEST_P(NormalizationTest, RmsNormAndGrad) {
  uint32_t seed = 100;
  for (const Case &c : kCases) {
    // An all-zero first row: y = 0, finite grads.
    Operands o = operands(c, seed, 0.0f, /*withBeta=*/false);
    SCOPED_TRACE(typeOf(o.x).str() + " {" + o.attrs + "}");
    Norm want = rmsNormRef(values(o.x), values(o.g), values(o.dy), o.n, c.eps);
    std::vector<Tensor> r = run("rms_norm", o.attrs, {o.x, o.g}, {typeOf(o.x)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], c.shape, want.y, 1e-5, 1e-5, "y");
    r = run("rms_norm_grad", o.attrs, {o.x, o.g, o.dy},
            {typeOf(o.x), typeOf(o.g)});
    ASSERT_EQ(r.size(), 2u);
    expectNear(r[0], c.shape, want.dx, 1e-4, 1e-5, "dx");
    expectNear(r[1], o.ns, want.dgamma, 1e-5, 1e-5, "dgamma");
  }
}

// 16-bit operands: statistics in f32 or wider from the exactly widened
// values, results rounded once.
TEST_P(NormalizationTest, Float16BitOperands) {
  Tensor x = randomF32({3, 64}, 41, -2.0f, 2.0f);
  Tensor g = randomF32({64}, 42, 0.5f, 1.5f), b = randomF32({64}, 43);
  Tensor dy = randomF32({3, 64}, 44);
  std::string attrs = normAttrs(-1, 1e-5);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor hx = narrow(x, dt), hg = narrow(g, dt), hb = narrow(b, dt),
           hdy = narrow(dy, dt);
    TensorType xt{dt, {3, 64}}, gt{dt, {64}};
    double tol = rtolFor(dt);
    Norm ln =
        layerNormRef(values(hx), values(hg), values(hb), values(hdy), 64, 1e-5);
    std::vector<Tensor> r = run("layer_norm", attrs, {hx, hg, hb}, {xt});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].dtype(), dt);
    expectNear(r[0], {3, 64}, ln.y, tol, tol, "layer_norm y");
    r = run("layer_norm_grad", attrs, {hx, hg, hdy}, {xt, gt, gt});
    ASSERT_EQ(r.size(), 3u);
    expectNear(r[0], {3, 64}, ln.dx, tol, 4 * tol, "layer_norm dx");
    expectNear(r[1], {64}, ln.dgamma, tol, 4 * tol, "dgamma");
    expectNear(r[2], {64}, ln.dbeta, tol, 4 * tol, "dbeta");
    Norm rms = rmsNormRef(values(hx), values(hg), values(hdy), 64, 1e-5);
    r = run("rms_norm", attrs, {hx, hg}, {xt});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], {3, 64}, rms.y, tol, tol, "rms_norm y");
    r = run("rms_norm_grad", attrs, {hx, hg, hdy}, {xt, gt});
    ASSERT_EQ(r.size(), 2u);
    expectNear(r[0], {3, 64}, rms.dx, tol, 4 * tol, "rms_norm dx");
    expectNear(r[1], {64}, rms.dgamma, tol, 4 * tol, "rms dgamma");
  }
}

TEST_P(NormalizationTest, LoadErrors) {
  TensorType x{DType::F32, {2, 4}}, g{DType::F32, {4}}, g3{DType::F32, {3}};
  EXPECT_EQ(loadError("layer_norm", "axis = 1 : i64", {x, g, g}, {x}),
            "missing attribute 'epsilon'");
  EXPECT_EQ(loadError("rms_norm", f32Attr("epsilon", 1e-5), {x, g}, {x}),
            "missing attribute 'axis'");
  EXPECT_EQ(loadError("layer_norm", normAttrs(2, 1e-5), {x, g, g}, {x}),
            "attribute 'axis' = 2 is out of range for rank 2");
  EXPECT_EQ(loadError("layer_norm", normAttrs(-1, 1e-5), {x, g3, g3}, {x}),
            "operand types tensor<2x4xf32>, tensor<3xf32>, tensor<3xf32> do "
            "not match axis 1");
  EXPECT_EQ(loadError("rms_norm_grad", normAttrs(1, 1e-5),
                      {x, g, TensorType{DType::F32, {2, 3}}}, {x, g}),
            "operand types tensor<2x4xf32>, tensor<4xf32>, tensor<2x3xf32> do "
            "not match axis 1");
  EXPECT_EQ(
      loadError("layer_norm_grad", normAttrs(1, 1e-5), {x, g, x}, {x, g, g3}),
      "result #2 has type tensor<3xf32>, expected tensor<4xf32>");
  EXPECT_EQ(
      loadError("rms_norm", "axis = 1 : i64, epsilon = 1 : i64", {x, g}, {x}),
      "attribute 'epsilon' must be a float");
  EXPECT_EQ(loadError("rms_norm", normAttrs(1, 1e-5), {x, g, g}, {x}),
            "expects 2 operand(s) and 1 result(s), got 3 and 1");
}

} // namespace

//===- VecMathImpl.h - VecMath's loops, written once per ISA ----*- C++ -*-===//
//
// Internal to VecMath*.cpp. Each of VecMathAvx512.cpp, VecMathAvx2.cpp and
// VecMathScalar.cpp defines, in an anonymous namespace, a struct `Isa`:
//
//   F, W          the f32 vector type and its lanes (float and 1 for scalar)
//   D, kSplit     the f64 vector type holding half of F's lanes (kSplit true;
//                 lo / hi widen each half), or double (kSplit false)
//   load, store, set1, lane, max, hmax, dzero, hsum
//   exp, log, tanh, erf   SLEEF's u10 functions (the C library's for scalar)
//
// then includes this file, which defines `makeTable()` (VecMathTable.h) from
// generic loops over F. Everything here has internal linkage, so that the
// three ISA-specific copies of each loop never meet at link time (an AVX-512
// copy chosen by the linker for an AVX2 machine would fault). F supports
// GCC's vector extensions (arithmetic with vectors and scalars, comparisons,
// `mask ? a : b`).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/VecMathTable.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace {

using F = Isa::F;
using D = Isa::D;
constexpr int W = Isa::W;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kSqrt1_2 = 0.70710678118654752440f;
// sqrt(2/pi)
constexpr float kGeluTanhBeta = 0.7978845608028654f;
constexpr float kGeluTanhKappa = 0.044715f;
// 1/sqrt(2 pi)
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

/// x[0:r] padded with `pad` to a whole vector (r < W).
inline F loadPartial(const float *x, int64_t r, float pad) {
  float buf[W];
  for (int i = 0; i < W; ++i)
    buf[i] = pad;
  std::memcpy(buf, x, sizeof(float) * r);
  return Isa::load(buf);
}
inline void storePartial(float *y, F v, int64_t r) {
  float buf[W];
  Isa::store(buf, v);
  std::memcpy(y, buf, sizeof(float) * r);
}

/// y = f(x) over whole vectors, the tail through a padded vector (f(0) is
/// computed and dropped for the padding lanes).
template <typename Fn>
inline void map1(const float *x, float *y, int64_t n, Fn f) {
  int64_t i = 0;
  for (; i + W <= n; i += W)
    Isa::store(y + i, f(Isa::load(x + i)));
  if (i < n)
    storePartial(y + i, f(loadPartial(x + i, n - i, 0.0f)), n - i);
}
template <typename Fn>
inline void map2(const float *a, const float *b, float *y, int64_t n, Fn f) {
  int64_t i = 0;
  for (; i + W <= n; i += W)
    Isa::store(y + i, f(Isa::load(a + i), Isa::load(b + i)));
  if (i < n)
    storePartial(
        y + i,
        f(loadPartial(a + i, n - i, 0.0f), loadPartial(b + i, n - i, 0.0f)),
        n - i);
}

/// f64 accumulator over f32 vectors: two f64 vectors, one per half of F's
/// lanes (for scalar, hi() is 0 and s1 stays 0).
struct DSum {
  D s0 = Isa::dzero(), s1 = Isa::dzero();
  void add(F v) {
    s0 += Isa::lo(v);
    s1 += Isa::hi(v);
  }
  void addProd(F a, F b) {
    s0 += Isa::lo(a) * Isa::lo(b);
    s1 += Isa::hi(a) * Isa::hi(b);
  }
  void addSqDev(F v, double m) {
    D d0 = Isa::lo(v) - m;
    s0 += d0 * d0;
    if (Isa::kSplit) {
      D d1 = Isa::hi(v) - m;
      s1 += d1 * d1;
    }
  }
  double total() const { return Isa::hsum(s0 + s1); }
};

//===----------------------------------------------------------------------===//
// Elementwise.
//===----------------------------------------------------------------------===//

void vExp(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) { return Isa::exp(v); });
}
void vLog(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) { return Isa::log(v); });
}
void vTanh(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) { return Isa::tanh(v); });
}
void vErf(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) { return Isa::erf(v); });
}
void vSigmoid(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) { return 1.0f / (1.0f + Isa::exp(-v)); });
}
void vSilu(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) {
    F r = v / (1.0f + Isa::exp(-v));
    // -inf / (1 + inf) would be NaN; the limit is -0.
    return v == -kInf ? Isa::set1(-0.0f) : r;
  });
}
void vGeluErf(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) { return 0.5f * v * (1.0f + Isa::erf(v * kSqrt1_2)); });
}
// The tanh form through 0.5 (1 + tanh(u)) = sigmoid(2u) (so one exp, not a
// tanh, and no cancellation of 1 + tanh(u) for x << 0):
//   gelu(x) = x / (1 + exp(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
void vGeluTanh(const float *x, float *y, int64_t n) {
  map1(x, y, n, [](F v) {
    F twoU = (2.0f * kGeluTanhBeta) * (v + kGeluTanhKappa * v * v * v);
    return v / (1.0f + Isa::exp(-twoU));
  });
}

void vGeluErfGrad(const float *x, const float *dy, float *dx, int64_t n) {
  map2(x, dy, dx, n, [](F v, F g) {
    F cdf = 0.5f * (1.0f + Isa::erf(v * kSqrt1_2));
    F pdf = Isa::exp(-0.5f * v * v) * kInvSqrt2Pi;
    return g * (cdf + v * pdf);
  });
}
// d/dx of the above, with s = sigmoid(2u) = (1 + tanh u) / 2 and
// 1 - tanh^2 u = 4 s (1 - s):
//   gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
void vGeluTanhGrad(const float *x, const float *dy, float *dx, int64_t n) {
  map2(x, dy, dx, n, [](F v, F g) {
    F v2 = v * v;
    F twoU = (2.0f * kGeluTanhBeta) * (v + kGeluTanhKappa * v2 * v);
    F s = 1.0f / (1.0f + Isa::exp(-twoU));
    F innerDerivative = kGeluTanhBeta * (1.0f + 3.0f * kGeluTanhKappa * v2);
    return g * (s + 2.0f * v * s * (1.0f - s) * innerDerivative);
  });
}

void vSiluGrad(const float *x, const float *dy, float *dx, int64_t n) {
  map2(x, dy, dx, n, [](F v, F g) {
    F s = 1.0f / (1.0f + Isa::exp(-v));
    F d = s * (1.0f + v * (1.0f - s));
    // The limits at ±inf (the formula gives inf · 0).
    d = v == kInf ? Isa::set1(1.0f) : d;
    d = v == -kInf ? Isa::set1(0.0f) : d;
    return g * d;
  });
}
void vSigmoidGradFromOutput(const float *y, const float *dy, float *dx,
                            int64_t n) {
  map2(y, dy, dx, n, [](F s, F g) { return g * (s * (1.0f - s)); });
}
void vTanhGradFromOutput(const float *y, const float *dy, float *dx,
                         int64_t n) {
  map2(y, dy, dx, n, [](F t, F g) { return g * (1.0f - t * t); });
}

//===----------------------------------------------------------------------===//
// Rows.
//===----------------------------------------------------------------------===//

float vMax(const float *x, int64_t n) {
  F m = Isa::set1(-kInf);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    m = Isa::max(m, Isa::load(x + i));
  if (i < n)
    m = Isa::max(m, loadPartial(x + i, n - i, -kInf));
  return Isa::hmax(m);
}

double vExpSum(const float *x, float shift, float *y, int64_t n) {
  DSum acc;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    F e = Isa::exp(Isa::load(x + i) - shift);
    if (y)
      Isa::store(y + i, e);
    acc.add(e);
  }
  double tail = 0;
  if (i < n) {
    F e = Isa::exp(loadPartial(x + i, n - i, 0.0f) - shift);
    if (y)
      storePartial(y + i, e, n - i);
    for (int64_t j = 0; j < n - i; ++j)
      tail += Isa::lane(e, static_cast<int>(j));
  }
  return acc.total() + tail;
}

void vExpScale(const float *x, float shift, float scale, float *y, int64_t n) {
  map1(x, y, n, [=](F v) { return Isa::exp(v - shift) * scale; });
}

void vScale(const float *x, float scale, float *y, int64_t n) {
  map1(x, y, n, [=](F v) { return v * scale; });
}

double vDot(const float *a, const float *b, int64_t n) {
  DSum acc;
  int64_t i = 0;
  for (; i + W <= n; i += W)
    acc.addProd(Isa::load(a + i), Isa::load(b + i));
  if (i < n) // zero padding adds nothing
    acc.addProd(loadPartial(a + i, n - i, 0.0f),
                loadPartial(b + i, n - i, 0.0f));
  return acc.total();
}

double vSum(const float *x, int64_t n) {
  DSum acc;
  int64_t i = 0;
  for (; i + W <= n; i += W)
    acc.add(Isa::load(x + i));
  if (i < n)
    acc.add(loadPartial(x + i, n - i, 0.0f));
  return acc.total();
}

void vMulSub(const float *a, const float *b, float c, float *y, int64_t n) {
  map2(a, b, y, n, [=](F u, F v) { return u * (v - c); });
}

void vSoftmaxRow(const float *x, float *y, int64_t n) {
  if (n == 0)
    return;
  float m = vMax(x, n);
  double s = vExpSum(x, m, y, n);
  vScale(y, static_cast<float>(1.0 / s), y, n);
}

void vSoftmaxGradRow(const float *y, const float *dy, float *dx, int64_t n) {
  double c = vDot(y, dy, n);
  // y * (dy - c) with the difference in f64, as the reference kernel; the
  // compiler vectorises this loop for the TU's ISA.
  for (int64_t i = 0; i < n; ++i)
    dx[i] = static_cast<float>(y[i] * (static_cast<double>(dy[i]) - c));
}

double vLogSumExp(const float *x, int64_t n, float &rowMax) {
  rowMax = vMax(x, n);
  return std::log(vExpSum(x, rowMax, nullptr, n)) + rowMax;
}

void vRowMeanRstd(const float *x, int64_t n, float epsilon, double &mean,
                  double &rstd) {
  double s = vSum(x, n);
  mean = n ? s / n : 0.0;
  DSum acc;
  int64_t i = 0;
  for (; i + W <= n; i += W)
    acc.addSqDev(Isa::load(x + i), mean);
  double var = acc.total();
  for (; i < n; ++i) {
    double d = x[i] - mean;
    var += d * d;
  }
  var = n ? var / n : 0.0;
  rstd = 1.0 / std::sqrt(var + static_cast<double>(epsilon));
}

double vRowRmsRstd(const float *x, int64_t n, float epsilon) {
  double ms = n ? vDot(x, x, n) / n : 0.0;
  return 1.0 / std::sqrt(ms + static_cast<double>(epsilon));
}

void vNormalizeRow(const float *x, float mean, float rstd, const float *gamma,
                   const float *beta, float *y, int64_t n) {
  if (beta)
    for (int64_t j = 0; j < n; ++j)
      y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
  else
    for (int64_t j = 0; j < n; ++j)
      y[j] = (x[j] - mean) * rstd * gamma[j];
}

void vLayerNormGradRow(const float *x, const float *gamma, const float *dy,
                       double mean, double rstd, float *dx, double *dgamma,
                       double *dbeta, int64_t n) {
  // sum(dy * gamma) and sum(dy * gamma * xhat), in f64.
  DSum sumD, sumDXhat;
  int64_t i = 0;
  if (Isa::kSplit) {
    for (; i + W <= n; i += W) {
      F fx = Isa::load(x + i);
      F fdy = Isa::load(dy + i), fg = Isa::load(gamma + i);
      D d0 = Isa::lo(fdy) * Isa::lo(fg), d1 = Isa::hi(fdy) * Isa::hi(fg);
      D h0 = (Isa::lo(fx) - mean) * rstd, h1 = (Isa::hi(fx) - mean) * rstd;
      sumD.s0 += d0;
      sumD.s1 += d1;
      sumDXhat.s0 += d0 * h0;
      sumDXhat.s1 += d1 * h1;
    }
  }
  double a = sumD.total(), b = sumDXhat.total();
  for (; i < n; ++i) {
    double d = static_cast<double>(dy[i]) * gamma[i];
    a += d;
    b += d * ((x[i] - mean) * rstd);
  }
  double mA = n ? a / n : 0.0, mB = n ? b / n : 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double xhat = (x[j] - mean) * rstd;
    double d = static_cast<double>(dy[j]) * gamma[j];
    dx[j] = static_cast<float>(rstd * (d - mA - xhat * mB));
  }
  if (dgamma)
    for (int64_t j = 0; j < n; ++j)
      dgamma[j] += static_cast<double>(dy[j]) * ((x[j] - mean) * rstd);
  if (dbeta)
    for (int64_t j = 0; j < n; ++j)
      dbeta[j] += dy[j];
}

void vRmsNormGradRow(const float *x, const float *gamma, const float *dy,
                     double rstd, float *dx, double *dgamma, int64_t n) {
  // sum(dy * gamma * xhat) = rstd * sum(dy * gamma * x), in f64.
  DSum acc;
  int64_t i = 0;
  if (Isa::kSplit) {
    for (; i + W <= n; i += W) {
      F fdy = Isa::load(dy + i), fg = Isa::load(gamma + i),
        fx = Isa::load(x + i);
      acc.s0 += Isa::lo(fdy) * Isa::lo(fg) * (Isa::lo(fx) * rstd);
      acc.s1 += Isa::hi(fdy) * Isa::hi(fg) * (Isa::hi(fx) * rstd);
    }
  }
  double dot = acc.total();
  for (; i < n; ++i)
    dot += static_cast<double>(dy[i]) * gamma[i] * (x[i] * rstd);
  double c = n ? dot / n : 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double xhat = x[j] * rstd;
    dx[j] = static_cast<float>(
        rstd * (static_cast<double>(dy[j]) * gamma[j] - xhat * c));
  }
  if (dgamma)
    for (int64_t j = 0; j < n; ++j)
      dgamma[j] += static_cast<double>(dy[j]) * (x[j] * rstd);
}

} // namespace

tessera::runtime::vecmath::detail::Table VECMATH_TABLE_FN() {
  tessera::runtime::vecmath::detail::Table t;
  t.name = Isa::kName;
  t.exp = vExp;
  t.log = vLog;
  t.tanh = vTanh;
  t.erf = vErf;
  t.sigmoid = vSigmoid;
  t.silu = vSilu;
  t.geluErf = vGeluErf;
  t.geluTanh = vGeluTanh;
  t.geluErfGrad = vGeluErfGrad;
  t.geluTanhGrad = vGeluTanhGrad;
  t.siluGrad = vSiluGrad;
  t.sigmoidGradFromOutput = vSigmoidGradFromOutput;
  t.tanhGradFromOutput = vTanhGradFromOutput;
  t.max = vMax;
  t.expSum = vExpSum;
  t.expScale = vExpScale;
  t.scale = vScale;
  t.dot = vDot;
  t.sum = vSum;
  t.mulSub = vMulSub;
  t.softmaxRow = vSoftmaxRow;
  t.softmaxGradRow = vSoftmaxGradRow;
  t.logSumExp = vLogSumExp;
  t.rowMeanRstd = vRowMeanRstd;
  t.rowRmsRstd = vRowRmsRstd;
  t.normalizeRow = vNormalizeRow;
  t.layerNormGradRow = vLayerNormGradRow;
  t.rmsNormGradRow = vRmsNormGradRow;
  return t;
}

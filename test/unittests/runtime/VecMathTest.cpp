//===- VecMathTest.cpp - VecMath's ISA copies vs f64 references -----------===//
//
// Every instruction-set copy of runtime/backends/cpu/VecMath.h that this CPU
// can run (scalar always; AVX2 and AVX-512 when present) against f64
// references: random arguments over each function's working range, lengths
// 0..70 (whole vectors and every tail), in-place calls, and the IEEE special
// values the kernels promise (exp(-inf) = 0, tanh(±inf) = ±1, silu(-inf) =
// -0, NaN propagates).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/VecMath.h"
#include "runtime/backends/cpu/VecMathTable.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

using tessera::runtime::vecmath::detail::Table;
namespace vecmath = tessera::runtime::vecmath;
namespace detail = tessera::runtime::vecmath::detail;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<Table> runnableTables() {
  std::vector<Table> t{detail::scalarTable()};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    t.push_back(detail::avx2Table());
  if (__builtin_cpu_supports("avx512f"))
    t.push_back(detail::avx512Table());
#endif
  return t;
}

std::vector<float> uniform(int64_t n, unsigned seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// |got - want| <= rel |want| + abs, NaN only where want is NaN.
void expectNear(float got, double want, double rel, double abs,
                const std::string &what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got << " vs NaN";
    return;
  }
  if (std::isinf(want)) {
    EXPECT_EQ(got, static_cast<float>(want)) << what;
    return;
  }
  EXPECT_LE(std::fabs(got - want), rel * std::fabs(want) + abs)
      << what << ": got " << got << ", want " << want;
}

using Map = void (*)(const float *, float *, int64_t);
using Map2 = void (*)(const float *, const float *, float *, int64_t);

/// Checks a map over lengths 0..70 (every tail of every ISA) and in place.
void checkMap(const Table &t, Map f, const char *name,
              const std::function<double(double)> &ref, float lo, float hi,
              double rel, double abs) {
  std::vector<float> x = uniform(70, 7, lo, hi);
  for (int64_t n = 0; n <= 70; ++n) {
    std::vector<float> y(n + 1, 123.0f); // y[n]: must stay untouched
    f(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      expectNear(y[i], ref(x[i]), rel, abs,
                 std::string(t.name) + " " + name + " n=" + std::to_string(n));
    EXPECT_EQ(y[n], 123.0f) << t.name << " " << name << " wrote past n";
  }
  std::vector<float> inPlace = x;
  f(inPlace.data(), inPlace.data(), 70);
  for (int64_t i = 0; i < 70; ++i)
    expectNear(inPlace[i], ref(x[i]), rel, abs,
               std::string(t.name) + " " + name + " in place");
}

void checkMap2(const Table &t, Map2 f, const char *name,
               const std::function<double(double, double)> &ref, float lo,
               float hi, double rel, double abs) {
  std::vector<float> x = uniform(70, 11, lo, hi);
  std::vector<float> dy = uniform(70, 12, -1.0f, 1.0f);
  for (int64_t n = 0; n <= 70; ++n) {
    std::vector<float> dx(n + 1, 123.0f);
    f(x.data(), dy.data(), dx.data(), n);
    for (int64_t i = 0; i < n; ++i)
      expectNear(dx[i], ref(x[i], dy[i]), rel, abs,
                 std::string(t.name) + " " + name + " n=" + std::to_string(n));
    EXPECT_EQ(dx[n], 123.0f) << t.name << " " << name << " wrote past n";
  }
}

double geluErfRef(double x) {
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double geluTanhRef(double x) {
  double b = std::sqrt(2 / M_PI);
  return 0.5 * x * (1 + std::tanh(b * (x + 0.044715 * x * x * x)));
}
double sigmoidRef(double x) { return 1 / (1 + std::exp(-x)); }

} // namespace

// The transcendentals: SLEEF u10 (and glibc) are within 1 ULP; 2 ULP of
// slack covers the reference's own rounding to f32.
TEST(VecMath, TranscendentalsWithinTwoUlp) {
  const double ulp = std::ldexp(1.0, -23);
  for (const Table &t : runnableTables()) {
    checkMap(
        t, t.exp, "exp", [](double x) { return std::exp(x); }, -87, 88, 2 * ulp,
        0);
    checkMap(
        t, t.log, "log", [](double x) { return std::log(x); }, 1e-3f, 1e3f,
        2 * ulp, 1e-7);
    checkMap(
        t, t.tanh, "tanh", [](double x) { return std::tanh(x); }, -9, 9,
        2 * ulp, 1e-38);
    checkMap(
        t, t.erf, "erf", [](double x) { return std::erf(x); }, -4, 4, 2 * ulp,
        1e-38);
  }
}

// The composites round a few times in f32 and the GELU gradients cancel
// (terms of order 1 summing to ~1e-4); the bounds are what the scalar
// reference kernels (the C library's functions, same formulas) meet too.
TEST(VecMath, ActivationsAndGradients) {
  for (const Table &t : runnableTables()) {
    checkMap(t, t.sigmoid, "sigmoid", sigmoidRef, -20, 20, 1e-6, 1e-7);
    checkMap(
        t, t.silu, "silu", [](double x) { return x * sigmoidRef(x); }, -20, 20,
        1e-6, 1e-7);
    checkMap(t, t.geluErf, "gelu", geluErfRef, -6, 6, 1e-6, 1e-7);
    // x (1 + tanh(u)) cancels for x << 0: |x| ulp(1) absolute.
    checkMap(t, t.geluTanh, "gelu_tanh", geluTanhRef, -6, 6, 1e-6, 5e-7);
    checkMap2(
        t, t.geluErfGrad, "gelu_grad",
        [](double x, double g) {
          double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
          double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
          return g * (cdf + x * pdf);
        },
        -6, 6, 1e-6, 1e-7);
    checkMap2(
        t, t.geluTanhGrad, "gelu_tanh_grad",
        [](double x, double g) {
          double b = std::sqrt(2 / M_PI), k = 0.044715;
          double th = std::tanh(b * (x + k * x * x * x));
          return g * (0.5 * (1 + th) +
                      0.5 * x * (1 - th * th) * b * (1 + 3 * k * x * x));
        },
        -6, 6, 1e-6, 1e-6);
    checkMap2(
        t, t.siluGrad, "silu_grad",
        [](double x, double g) {
          double s = sigmoidRef(x);
          return g * s * (1 + x * (1 - s));
        },
        -20, 20, 1e-6, 1e-7);
    checkMap2(
        t, t.sigmoidGradFromOutput, "sigmoid_grad",
        [](double y, double g) { return g * y * (1 - y); }, 0, 1, 1e-6, 1e-7);
    checkMap2(
        t, t.tanhGradFromOutput, "tanh_grad",
        [](double y, double g) { return g * (1 - y * y); }, -1, 1, 1e-6, 1e-7);
  }
}

TEST(VecMath, SpecialValues) {
  // 17 elements: a whole vector of every ISA plus a tail.
  const std::vector<float> x{-kInf,   kInf,    kNaN,  0.0f, -0.0f, 100.0f,
                             -100.0f, -kInf,   kInf,  kNaN, 1.0f,  -1.0f,
                             88.8f,   -104.0f, -kInf, kInf, kNaN};
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(n), dy(n, 2.0f);
  for (const Table &t : runnableTables()) {
    SCOPED_TRACE(t.name);
    t.exp(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i]))
        EXPECT_TRUE(std::isnan(y[i]));
      else if (x[i] == -kInf || x[i] == -104.0f)
        EXPECT_EQ(y[i], 0.0f);
      else if (x[i] == kInf || x[i] == 88.8f || x[i] == 100.0f)
        EXPECT_EQ(y[i], kInf);
    }
    t.tanh(x.data(), y.data(), n);
    EXPECT_EQ(y[0], -1.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_TRUE(std::signbit(y[4]) && y[4] == 0.0f);
    t.sigmoid(x.data(), y.data(), n);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_TRUE(std::isnan(y[16]));
    t.silu(x.data(), y.data(), n);
    EXPECT_TRUE(y[0] == 0.0f && std::signbit(y[0])); // silu(-inf) = -0
    EXPECT_EQ(y[1], kInf);
    EXPECT_TRUE(y[14] == 0.0f && std::signbit(y[14]));
    EXPECT_TRUE(std::isnan(y[2]));
    t.siluGrad(x.data(), dy.data(), y.data(), n);
    EXPECT_EQ(y[0], 0.0f); // the limits, not inf * 0
    EXPECT_EQ(y[1], 2.0f);
    EXPECT_EQ(y[15], 2.0f);
    EXPECT_TRUE(std::isnan(y[2]));
    t.geluErf(x.data(), y.data(), n);
    EXPECT_EQ(y[1], kInf);
    EXPECT_EQ(y[6], -0.0f);
    EXPECT_TRUE(std::isnan(y[9]));
  }
}

TEST(VecMath, Rows) {
  for (const Table &t : runnableTables()) {
    SCOPED_TRACE(t.name);
    for (int64_t n : {0, 1, 7, 16, 31, 33, 257, 1000}) {
      std::vector<float> x = uniform(n, static_cast<unsigned>(n), -8, 8);
      std::vector<float> b = uniform(n, static_cast<unsigned>(n) + 1, -1, 1);
      double mx = -INFINITY, s = 0, dot = 0, sum = 0;
      for (int64_t i = 0; i < n; ++i)
        mx = std::max(mx, (double)x[i]);
      for (int64_t i = 0; i < n; ++i) {
        s += std::exp(x[i] - mx);
        dot += (double)x[i] * b[i];
        sum += x[i];
      }
      EXPECT_EQ(t.max(x.data(), n), (float)mx) << n;
      std::vector<float> e(n);
      double got = t.expSum(x.data(), (float)mx, e.data(), n);
      EXPECT_NEAR(got, s, 1e-6 * s) << n;
      EXPECT_NEAR(t.expSum(x.data(), (float)mx, nullptr, n), got, 1e-12 * s);
      // x - shift is rounded to f32 first: |x - shift| ulp(1)/2 more.
      for (int64_t i = 0; i < n; ++i)
        expectNear(e[i], std::exp(x[i] - mx), 3e-7 + 6e-8 * (mx - x[i]), 0,
                   "expSum's y");
      EXPECT_NEAR(t.dot(x.data(), b.data(), n), dot, 1e-9 * (1 + n));
      EXPECT_NEAR(t.sum(x.data(), n), sum, 1e-9 * (1 + n));
      if (n == 0)
        continue;
      float rm;
      EXPECT_NEAR(t.logSumExp(x.data(), n, rm), std::log(s) + mx, 1e-6);
      EXPECT_EQ(rm, (float)mx);
      // Softmax and its gradient.
      std::vector<float> p(n), dx(n);
      t.softmaxRow(x.data(), p.data(), n);
      double ptot = 0, pdy = 0;
      for (int64_t i = 0; i < n; ++i) {
        expectNear(p[i], std::exp(x[i] - mx) / s, 1e-6, 1e-12, "softmax");
        ptot += p[i];
        pdy += (double)p[i] * b[i];
      }
      EXPECT_NEAR(ptot, 1.0, 1e-5);
      t.softmaxGradRow(p.data(), b.data(), dx.data(), n);
      for (int64_t i = 0; i < n; ++i)
        expectNear(dx[i], p[i] * (b[i] - pdy), 1e-6, 1e-9, "softmax_grad");
    }
  }
}

TEST(VecMath, NormRows) {
  for (const Table &t : runnableTables()) {
    SCOPED_TRACE(t.name);
    for (int64_t n : {1, 5, 16, 40, 257}) {
      std::vector<float> x = uniform(n, 3, 1, 5), g = uniform(n, 4, 0.5, 1.5),
                         beta = uniform(n, 5, -1, 1), dy = uniform(n, 6, -1, 1);
      const float eps = 1e-5f;
      double mean = 0, var = 0, ms = 0;
      for (float v : x) {
        mean += v;
        ms += (double)v * v;
      }
      mean /= n;
      ms /= n;
      for (float v : x)
        var += (v - mean) * (v - mean);
      var /= n;
      double rstd = 1 / std::sqrt(var + eps), rrms = 1 / std::sqrt(ms + eps);
      double gm, gr;
      t.rowMeanRstd(x.data(), n, eps, gm, gr);
      EXPECT_NEAR(gm, mean, 1e-12 * (1 + std::fabs(mean)));
      EXPECT_NEAR(gr, rstd, 1e-9 * rstd);
      EXPECT_NEAR(t.rowRmsRstd(x.data(), n, eps), rrms, 1e-12 * rrms);
      std::vector<float> y(n);
      t.normalizeRow(x.data(), (float)mean, (float)rstd, g.data(), beta.data(),
                     y.data(), n);
      for (int64_t j = 0; j < n; ++j)
        expectNear(y[j], (x[j] - mean) * rstd * g[j] + beta[j], 1e-5, 1e-5,
                   "layer_norm");
      // LayerNorm backward (Ba et al. 2016), f64 reference.
      double a = 0, b = 0;
      for (int64_t j = 0; j < n; ++j) {
        double d = (double)dy[j] * g[j], xh = (x[j] - mean) * rstd;
        a += d;
        b += d * xh;
      }
      std::vector<float> dx(n);
      std::vector<double> dg(n, 1.0), db(n, 2.0);
      t.layerNormGradRow(x.data(), g.data(), dy.data(), mean, rstd, dx.data(),
                         dg.data(), db.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        double xh = (x[j] - mean) * rstd, d = (double)dy[j] * g[j];
        expectNear(dx[j], rstd * (d - a / n - xh * b / n), 1e-6, 1e-6,
                   "layer_norm_grad dx");
        EXPECT_NEAR(dg[j], 1.0 + dy[j] * xh, 1e-12);
        EXPECT_NEAR(db[j], 2.0 + dy[j], 1e-12);
      }
      // RMSNorm backward (Zhang and Sennrich 2019).
      double c = 0;
      for (int64_t j = 0; j < n; ++j)
        c += (double)dy[j] * g[j] * x[j] * rrms;
      c /= n;
      std::fill(dg.begin(), dg.end(), 0.0);
      t.rmsNormGradRow(x.data(), g.data(), dy.data(), rrms, dx.data(),
                       dg.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        expectNear(dx[j], rrms * ((double)dy[j] * g[j] - x[j] * rrms * c), 1e-6,
                   1e-6, "rms_norm_grad dx");
        EXPECT_NEAR(dg[j], (double)dy[j] * x[j] * rrms, 1e-12);
      }
    }
  }
}

// The ISAs agree with each other to the functions' error (a kernel's result
// may differ in the last bits between machines, never more).
TEST(VecMath, IsasAgree) {
  std::vector<Table> tables = runnableTables();
  std::vector<float> x = uniform(1003, 21, -10, 10);
  std::vector<float> ref(x.size()), got(x.size());
  tables[0].geluTanh(x.data(), ref.data(), (int64_t)x.size());
  for (const Table &t : tables) {
    t.geluTanh(x.data(), got.data(), (int64_t)x.size());
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-6 * std::fabs(ref[i]) + 5e-7) << t.name;
  }
  // The dispatched entry points use one of the tables.
  std::string isa = vecmath::isaName();
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512") << isa;
  vecmath::geluTanh(x.data(), got.data(), (int64_t)x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], 1e-6 * std::fabs(ref[i]) + 5e-7);
}

//===- VecMathAvx2.cpp - VecMath for AVX2 + FMA (8 lanes) -----------------===//
//
// Compiled with -mavx2 -mfma (runtime/CMakeLists.txt); VecMath.cpp calls it
// only when the CPU has both. SLEEF's *f8_u10avx2 functions.
//
//===----------------------------------------------------------------------===//

#include <immintrin.h>
#include <sleef.h>

namespace {
struct Isa {
  using F = __m256;
  using D = __m256d;
  static constexpr int W = 8;
  static constexpr bool kSplit = true;
  static constexpr const char *kName = "avx2";
  static F load(const float *p) { return _mm256_loadu_ps(p); }
  static void store(float *p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float s) { return _mm256_set1_ps(s); }
  static float lane(F v, int i) { return v[i]; }
  static F max(F a, F b) { return a < b ? b : a; }
  static float hmax(F v) {
    float m = v[0];
    for (int i = 1; i < W; ++i)
      m = m < v[i] ? v[i] : m;
    return m;
  }
  static D dzero() { return _mm256_setzero_pd(); }
  static double hsum(D v) {
    double s = 0;
    for (int i = 0; i < W / 2; ++i)
      s += v[i];
    return s;
  }
  static D lo(F v) {
    return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3),
                                   D);
  }
  static D hi(F v) {
    return __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7),
                                   D);
  }
  static F exp(F v) { return Sleef_expf8_u10avx2(v); }
  static F log(F v) { return Sleef_logf8_u10avx2(v); }
  static F tanh(F v) { return Sleef_tanhf8_u10avx2(v); }
  static F erf(F v) { return Sleef_erff8_u10avx2(v); }
};
} // namespace

#define VECMATH_TABLE_FN tessera::runtime::vecmath::detail::avx2Table
#include "runtime/backends/cpu/VecMathImpl.h"

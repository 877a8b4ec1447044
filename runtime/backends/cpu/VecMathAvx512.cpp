//===- VecMathAvx512.cpp - VecMath for AVX-512F (16 lanes) ----------------===//
//
// Compiled with -mavx512f (runtime/CMakeLists.txt); VecMath.cpp calls it only
// when the CPU has AVX-512F. SLEEF's *f16_u10avx512f functions.
//
//===----------------------------------------------------------------------===//

#include <immintrin.h>
#include <sleef.h>

namespace {
struct Isa {
  using F = __m512;
  using D = __m512d;
  static constexpr int W = 16;
  static constexpr bool kSplit = true;
  static constexpr const char *kName = "avx512";
  static F load(const float *p) { return _mm512_loadu_ps(p); }
  static void store(float *p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float s) { return _mm512_set1_ps(s); }
  static float lane(F v, int i) { return v[i]; }
  static F max(F a, F b) { return a < b ? b : a; }
  static float hmax(F v) {
    float m = v[0];
    for (int i = 1; i < W; ++i)
      m = m < v[i] ? v[i] : m;
    return m;
  }
  static D dzero() { return _mm512_setzero_pd(); }
  static double hsum(D v) {
    double s = 0;
    for (int i = 0; i < W / 2; ++i)
      s += v[i];
    return s;
  }
  static D lo(F v) {
    return __builtin_convertvector(
        __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), D);
  }
  static D hi(F v) {
    return __builtin_convertvector(
        __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), D);
  }
  static F exp(F v) { return Sleef_expf16_u10avx512f(v); }
  static F log(F v) { return Sleef_logf16_u10avx512f(v); }
  static F tanh(F v) { return Sleef_tanhf16_u10avx512f(v); }
  static F erf(F v) { return Sleef_erff16_u10avx512f(v); }
};
} // namespace

#define VECMATH_TABLE_FN tessera::runtime::vecmath::detail::avx512Table
#include "runtime/backends/cpu/VecMathImpl.h"

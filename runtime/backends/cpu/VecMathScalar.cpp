//===- VecMathScalar.cpp - VecMath with the C library (no SIMD ISA) -------===//
//
// The fallback for a CPU without AVX2 and FMA: VecMathImpl.h's loops one
// element at a time, with the C library's expf, tanhf, erff and logf.
//
//===----------------------------------------------------------------------===//

#include <cmath>

namespace {
struct Isa {
  using F = float;
  using D = double;
  static constexpr int W = 1;
  static constexpr bool kSplit = false;
  static constexpr const char *kName = "scalar";
  static F load(const float *p) { return *p; }
  static void store(float *p, F v) { *p = v; }
  static F set1(float s) { return s; }
  static float lane(F v, int) { return v; }
  static F max(F a, F b) { return a < b ? b : a; }
  static float hmax(F v) { return v; }
  static D dzero() { return 0.0; }
  static double hsum(D v) { return v; }
  static D lo(F v) { return v; }
  static D hi(F) { return 0.0; }
  static F exp(F v) { return std::exp(v); }
  static F log(F v) { return std::log(v); }
  static F tanh(F v) { return std::tanh(v); }
  static F erf(F v) { return std::erf(v); }
};
} // namespace

#define VECMATH_TABLE_FN tessera::runtime::vecmath::detail::scalarTable
#include "runtime/backends/cpu/VecMathImpl.h"

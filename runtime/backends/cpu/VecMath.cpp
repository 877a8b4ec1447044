//===- VecMath.cpp - Run-time choice of VecMath's instruction set ---------===//
//
// See VecMath.h. The table is chosen on first use (a function-local static:
// thread-safe, no static initialiser) from __builtin_cpu_supports and the
// TESSERA_VECMATH override.
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/VecMath.h"
#include "runtime/backends/cpu/VecMathTable.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace tessera::runtime;
using vecmath::detail::Table;

namespace {

Table chooseTable() {
#if TESSERA_VECMATH_X86
  bool avx512 = __builtin_cpu_supports("avx512f");
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  bool avx512 = false, avx2 = false;
#endif
  const char *want = std::getenv("TESSERA_VECMATH");
  if (want && *want) {
    if (!std::strcmp(want, "scalar"))
      avx512 = avx2 = false;
    else if (!std::strcmp(want, "avx2"))
      avx512 = false;
    else if (std::strcmp(want, "avx512"))
      std::fprintf(stderr,
                   "tessera: TESSERA_VECMATH=%s is not scalar, avx2 or avx512; "
                   "ignored\n",
                   want);
  }
#if TESSERA_VECMATH_X86
  if (avx512)
    return vecmath::detail::avx512Table();
  if (avx2)
    return vecmath::detail::avx2Table();
#endif
  return vecmath::detail::scalarTable();
}

const Table &table() {
  static const Table t = chooseTable();
  return t;
}

} // namespace

namespace tessera::runtime::vecmath {

void exp(const float *x, float *y, int64_t n) { table().exp(x, y, n); }
void log(const float *x, float *y, int64_t n) { table().log(x, y, n); }
void tanh(const float *x, float *y, int64_t n) { table().tanh(x, y, n); }
void erf(const float *x, float *y, int64_t n) { table().erf(x, y, n); }
void sigmoid(const float *x, float *y, int64_t n) { table().sigmoid(x, y, n); }
void silu(const float *x, float *y, int64_t n) { table().silu(x, y, n); }
void geluErf(const float *x, float *y, int64_t n) { table().geluErf(x, y, n); }
void geluTanh(const float *x, float *y, int64_t n) {
  table().geluTanh(x, y, n);
}

void geluErfGrad(const float *x, const float *dy, float *dx, int64_t n) {
  table().geluErfGrad(x, dy, dx, n);
}
void geluTanhGrad(const float *x, const float *dy, float *dx, int64_t n) {
  table().geluTanhGrad(x, dy, dx, n);
}
void siluGrad(const float *x, const float *dy, float *dx, int64_t n) {
  table().siluGrad(x, dy, dx, n);
}
void sigmoidGradFromOutput(const float *y, const float *dy, float *dx,
                           int64_t n) {
  table().sigmoidGradFromOutput(y, dy, dx, n);
}
void tanhGradFromOutput(const float *y, const float *dy, float *dx, int64_t n) {
  table().tanhGradFromOutput(y, dy, dx, n);
}

float max(const float *x, int64_t n) { return table().max(x, n); }
double expSum(const float *x, float shift, float *y, int64_t n) {
  return table().expSum(x, shift, y, n);
}
void expScale(const float *x, float shift, float scale, float *y, int64_t n) {
  table().expScale(x, shift, scale, y, n);
}
void scale(const float *x, float scale, float *y, int64_t n) {
  table().scale(x, scale, y, n);
}
double dot(const float *a, const float *b, int64_t n) {
  return table().dot(a, b, n);
}
double sum(const float *x, int64_t n) { return table().sum(x, n); }
void mulSub(const float *a, const float *b, float c, float *y, int64_t n) {
  table().mulSub(a, b, c, y, n);
}
void softmaxRow(const float *x, float *y, int64_t n) {
  table().softmaxRow(x, y, n);
}
void softmaxGradRow(const float *y, const float *dy, float *dx, int64_t n) {
  table().softmaxGradRow(y, dy, dx, n);
}
double logSumExp(const float *x, int64_t n, float &rowMax) {
  return table().logSumExp(x, n, rowMax);
}

void rowMeanRstd(const float *x, int64_t n, float epsilon, double &mean,
                 double &rstd) {
  table().rowMeanRstd(x, n, epsilon, mean, rstd);
}
double rowRmsRstd(const float *x, int64_t n, float epsilon) {
  return table().rowRmsRstd(x, n, epsilon);
}
void normalizeRow(const float *x, float mean, float rstd, const float *gamma,
                  const float *beta, float *y, int64_t n) {
  table().normalizeRow(x, mean, rstd, gamma, beta, y, n);
}
void layerNormGradRow(const float *x, const float *gamma, const float *dy,
                      double mean, double rstd, float *dx, double *dgamma,
                      double *dbeta, int64_t n) {
  table().layerNormGradRow(x, gamma, dy, mean, rstd, dx, dgamma, dbeta, n);
}
void rmsNormGradRow(const float *x, const float *gamma, const float *dy,
                    double rstd, float *dx, double *dgamma, int64_t n) {
  table().rmsNormGradRow(x, gamma, dy, rstd, dx, dgamma, n);
}

const char *isaName() { return table().name; }

} // namespace tessera::runtime::vecmath

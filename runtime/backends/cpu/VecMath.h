//===- VecMath.h - Vectorised f32 math for the CPU kernels ------*- C++ -*-===//
//
// Contiguous f32 loops of the CPU kernels that are memory-bound or
// transcendental (exp, tanh, erf and the activations and normalisations made
// of them), vectorised with SLEEF (Shibata and Petrogalli, "SLEEF: A Portable
// Vectorized Library of C Standard Mathematical Functions", IEEE TPDS 2020),
// the library PyTorch's CPU kernels use. Every transcendental is SLEEF's u10
// variant: at most 1.0 ULP from the correctly rounded result, with IEEE
// special values (exp(-inf) = 0, tanh(±inf) = ±1, NaN propagates).
//
// Each function is compiled three times (VecMathAvx512.cpp with -mavx512f,
// VecMathAvx2.cpp with -mavx2 -mfma, VecMathScalar.cpp with no ISA flags and
// the C library's functions) and the first call picks the widest one the CPU
// supports (__builtin_cpu_supports); TESSERA_VECMATH=scalar|avx2|avx512 in
// the environment forces a narrower one (for tests and benchmarks). Results
// may differ in the last bit between ISAs (SLEEF vs libm, FMA contraction),
// never by more than the functions' stated error.
//
// Arrays are contiguous, need no alignment, and `y` may alias `x` (or `dy`)
// exactly (in-place); n may be 0. Sums are accumulated in f64 lanes and
// returned as double. Nothing allocates; nothing throws.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CPU_VECMATH_H
#define TESSERA_RUNTIME_BACKENDS_CPU_VECMATH_H

#include <cstdint>

namespace tessera::runtime::vecmath {

//===----------------------------------------------------------------------===//
// Elementwise maps: y[i] = f(x[i]).
//===----------------------------------------------------------------------===//

void exp(const float *x, float *y, int64_t n);
void log(const float *x, float *y, int64_t n);
void tanh(const float *x, float *y, int64_t n);
void erf(const float *x, float *y, int64_t n);
/// 1 / (1 + exp(-x)).
void sigmoid(const float *x, float *y, int64_t n);
/// x * sigmoid(x); silu(-inf) = -0.
void silu(const float *x, float *y, int64_t n);
/// GELU (Hendrycks and Gimpel 2016): 0.5 x (1 + erf(x / sqrt 2)).
void geluErf(const float *x, float *y, int64_t n);
/// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x +
/// 0.044715 x^3), computed as x sigmoid(2u) (the same function; one exp).
void geluTanh(const float *x, float *y, int64_t n);
/// One of the two above (tanhForm: the approximation).
inline void gelu(const float *x, float *y, int64_t n, bool tanhForm) {
  tanhForm ? geluTanh(x, y, n) : geluErf(x, y, n);
}

//===----------------------------------------------------------------------===//
// Activation gradients: dx[i] = dy[i] * f'(x[i]).
//===----------------------------------------------------------------------===//

void geluErfGrad(const float *x, const float *dy, float *dx, int64_t n);
void geluTanhGrad(const float *x, const float *dy, float *dx, int64_t n);
inline void geluGrad(const float *x, const float *dy, float *dx, int64_t n,
                     bool tanhForm) {
  tanhForm ? geluTanhGrad(x, dy, dx, n) : geluErfGrad(x, dy, dx, n);
}
/// f' = s (1 + x (1 - s)), s = sigmoid(x); the limits 1 and 0 at ±inf.
void siluGrad(const float *x, const float *dy, float *dx, int64_t n);
/// f' = y (1 - y) from the forward's output y = sigmoid(x).
void sigmoidGradFromOutput(const float *y, const float *dy, float *dx,
                           int64_t n);
/// f' = 1 - y^2 from the forward's output y = tanh(x).
void tanhGradFromOutput(const float *y, const float *dy, float *dx, int64_t n);

//===----------------------------------------------------------------------===//
// Row primitives (softmax, log-sum-exp, cross-entropy, attention).
//===----------------------------------------------------------------------===//

/// max_i x[i]; -inf when n == 0. A NaN element may or may not win (the
/// callers' sums propagate it either way).
float max(const float *x, int64_t n);
/// y[i] = exp(x[i] - shift) (y may be null: not stored); returns the sum of
/// those exponentials, accumulated in f64. exp(-inf - shift) = 0.
double expSum(const float *x, float shift, float *y, int64_t n);
/// y[i] = exp(x[i] - shift) * scale.
void expScale(const float *x, float shift, float scale, float *y, int64_t n);
/// y[i] = x[i] * scale.
void scale(const float *x, float scale, float *y, int64_t n);
/// sum_i a[i] * b[i], products and sum in f64.
double dot(const float *a, const float *b, int64_t n);
/// sum_i x[i] in f64.
double sum(const float *x, int64_t n);
/// y[i] = a[i] * (b[i] - c)  (the softmax gradient y * (dy - <y, dy>)).
void mulSub(const float *a, const float *b, float c, float *y, int64_t n);

/// Softmax of one contiguous row: y = exp(x - max x) / sum exp(x - max x).
void softmaxRow(const float *x, float *y, int64_t n);
/// Its gradient from the forward's output: dx = y * (dy - <y, dy>).
void softmaxGradRow(const float *y, const float *dy, float *dx, int64_t n);
/// log sum_i exp(x[i]) of one row (max-shifted), the max in `rowMax`.
double logSumExp(const float *x, int64_t n, float &rowMax);

//===----------------------------------------------------------------------===//
// Normalisation rows (Ba et al. 2016 LayerNorm; Zhang and Sennrich 2019
// RMSNorm). Statistics in f64, as the reference kernels did.
//===----------------------------------------------------------------------===//

/// mean and 1/sqrt(var + eps) (biased variance, two passes) of one row.
void rowMeanRstd(const float *x, int64_t n, float epsilon, double &mean,
                 double &rstd);
/// 1/sqrt(mean(x^2) + eps) of one row.
double rowRmsRstd(const float *x, int64_t n, float epsilon);
/// y = (x - mean) * rstd * gamma + beta (beta may be null).
void normalizeRow(const float *x, float mean, float rstd, const float *gamma,
                  const float *beta, float *y, int64_t n);
/// LayerNorm backward of one row: dx; dgamma += dy * xhat, dbeta += dy (f64
/// accumulators, each may be null).
void layerNormGradRow(const float *x, const float *gamma, const float *dy,
                      double mean, double rstd, float *dx, double *dgamma,
                      double *dbeta, int64_t n);
/// RMSNorm backward of one row: dx; dgamma += dy * xhat (may be null).
void rmsNormGradRow(const float *x, const float *gamma, const float *dy,
                    double rstd, float *dx, double *dgamma, int64_t n);

/// The instruction set the functions above run with: "avx512", "avx2" or
/// "scalar".
const char *isaName();

} // namespace tessera::runtime::vecmath

#endif // TESSERA_RUNTIME_BACKENDS_CPU_VECMATH_H

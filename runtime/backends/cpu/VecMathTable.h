//===- VecMathTable.h - VecMath's per-ISA function table --------*- C++ -*-===//
//
// Internal to VecMath*.cpp: one table of VecMath.h's functions per
// instruction set, filled by VecMathImpl.h in that ISA's translation unit and
// chosen once by VecMath.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CPU_VECMATHTABLE_H
#define TESSERA_RUNTIME_BACKENDS_CPU_VECMATHTABLE_H

#include <cstdint>

namespace tessera::runtime::vecmath::detail {

using Map = void (*)(const float *, float *, int64_t);
using Map2 = void (*)(const float *, const float *, float *, int64_t);

struct Table {
  const char *name;
  Map exp, log, tanh, erf, sigmoid, silu, geluErf, geluTanh;
  Map2 geluErfGrad, geluTanhGrad, siluGrad, sigmoidGradFromOutput,
      tanhGradFromOutput;
  float (*max)(const float *, int64_t);
  double (*expSum)(const float *, float, float *, int64_t);
  void (*expScale)(const float *, float, float, float *, int64_t);
  void (*scale)(const float *, float, float *, int64_t);
  double (*dot)(const float *, const float *, int64_t);
  double (*sum)(const float *, int64_t);
  void (*mulSub)(const float *, const float *, float, float *, int64_t);
  void (*softmaxRow)(const float *, float *, int64_t);
  void (*softmaxGradRow)(const float *, const float *, float *, int64_t);
  double (*logSumExp)(const float *, int64_t, float &);
  void (*rowMeanRstd)(const float *, int64_t, float, double &, double &);
  double (*rowRmsRstd)(const float *, int64_t, float);
  void (*normalizeRow)(const float *, float, float, const float *,
                       const float *, float *, int64_t);
  void (*layerNormGradRow)(const float *, const float *, const float *, double,
                           double, float *, double *, double *, int64_t);
  void (*rmsNormGradRow)(const float *, const float *, const float *, double,
                         float *, double *, int64_t);
};

/// The tables of VecMathScalar.cpp, VecMathAvx2.cpp and VecMathAvx512.cpp;
/// call the last two only on a CPU with those instruction sets.
Table scalarTable();
Table avx2Table();
Table avx512Table();

} // namespace tessera::runtime::vecmath::detail

#endif // TESSERA_RUNTIME_BACKENDS_CPU_VECMATHTABLE_H

//===- Compare.h - compare a computed tensor with an expected one -*- C++
//-*-===//
//
// tessera-eval's comparison, in the sense of numpy.allclose: element k
// matches when
//
//   |got[k] - expected[k]| <= atol + rtol * |expected[k]|
//
// for floating-point outputs (NaN matches NaN only; an infinity matches the
// same infinity only); integers and booleans must be equal. The shapes must
// be equal (no broadcasting) and the element types must correspond (a
// FLOAT output is f32, FLOAT16 f16, BFLOAT16 bf16, INT64 i64, BOOL i1).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TOOLS_TESSERA_EVAL_COMPARE_H
#define TESSERA_TOOLS_TESSERA_EVAL_COMPARE_H

#include "tools/tessera-eval/TensorProtoIO.h"

#include <cstdint>
#include <string>

namespace tessera::eval {

struct Tolerance {
  double rtol = 1e-5;
  double atol = 1e-5;
};

/// The outcome of comparing one output.
struct Comparison {
  bool ok = true;
  /// Set when the shapes or element types differ (then nothing else is).
  std::string structural;
  int64_t mismatches = 0; ///< elements outside the tolerance
  int64_t elements = 0;
  double maxAbs = 0; ///< largest |got - expected| over finite pairs
  /// Largest |got - expected| / |expected| over finite pairs with
  /// expected != 0.
  double maxRel = 0;
  /// The element that exceeds its tolerance by the largest factor (the
  /// first mismatch by kind for NaN/inf/integers), when !ok.
  int64_t worst = -1;
  double worstGot = 0, worstExpected = 0;
};

/// Compares `got` (converted from the runtime's result, same conventions as
/// HostTensor) with `expected`. 16-bit float outputs use at least rtol =
/// atol = 2^-9 (FLOAT16) or 2^-6 (BFLOAT16): two units in the last place at
/// 1.0, one for the rounding of the result and one for the reference's.
Comparison compare(const HostTensor &got, const HostTensor &expected,
                   Tolerance tol);

/// The tolerance compare() uses for an output of ONNX dtype `dtype`.
Tolerance effectiveTolerance(int32_t dtype, Tolerance tol);

/// "[1, 2, 0]": the multi-index of flat element `k` in `dims`.
std::string indexString(const std::vector<int64_t> &dims, int64_t k);

} // namespace tessera::eval

#endif // TESSERA_TOOLS_TESSERA_EVAL_COMPARE_H

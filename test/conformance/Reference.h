//===- Reference.h - shared pieces of the double references -----*- C++ -*-===//
//
// Header-only pieces of the double-precision references that the kernel
// conformance suite (test/conformance) and the training tests' reference
// interpreter (test/unittests/training/RefEval.cpp) both compute, written
// once so both check against the same formula.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_CONFORMANCE_REFERENCE_H
#define TESSERA_TEST_CONFORMANCE_REFERENCE_H

#include <cstdint>

namespace tessera::test {

/// Mean and biased variance (divided by n, as torch's layer_norm) of a row.
struct RowMoments {
  double mean = 0, var = 0;
};

/// The moments of x[0, n) in double (summed in index order).
template <typename T> RowMoments rowMoments(const T *x, int64_t n) {
  RowMoments m;
  for (int64_t j = 0; j < n; ++j)
    m.mean += x[j];
  m.mean /= n;
  for (int64_t j = 0; j < n; ++j)
    m.var += (x[j] - m.mean) * (x[j] - m.mean);
  m.var /= n;
  return m;
}

} // namespace tessera::test

#endif // TESSERA_TEST_CONFORMANCE_REFERENCE_H

//===- Compare.cpp - compare a computed tensor with an expected one -------===//

#include "tools/tessera-eval/Compare.h"

#include <algorithm>
#include <cmath>

namespace tessera::eval {

Tolerance effectiveTolerance(int32_t dtype, Tolerance tol) {
  double floor = dtype == kFloat16    ? std::ldexp(1.0, -9)
                 : dtype == kBFloat16 ? std::ldexp(1.0, -6)
                                      : 0.0;
  return Tolerance{std::max(tol.rtol, floor), std::max(tol.atol, floor)};
}

std::string indexString(const std::vector<int64_t> &dims, int64_t k) {
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] > 0) {
      idx[d] = k % dims[d];
      k /= dims[d];
    }
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d)
    s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

static std::string dimsString(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d)
    s += (d ? ", " : "") + std::to_string(dims[d]);
  return s + "]";
}

Comparison compare(const HostTensor &got, const HostTensor &expected,
                   Tolerance tol) {
  Comparison c;
  if (got.dtype != expected.dtype) {
    c.ok = false;
    c.structural = "element type " + onnxDTypeName(got.dtype) +
                   " but expected " + onnxDTypeName(expected.dtype);
    return c;
  }
  if (got.dims != expected.dims) {
    c.ok = false;
    c.structural = "shape " + dimsString(got.dims) + " but expected " +
                   dimsString(expected.dims);
    return c;
  }
  c.elements = expected.numel();
  if (got.numel() != c.elements) {
    c.ok = false;
    c.structural = "internal error: element counts differ";
    return c;
  }
  if (!expected.isFloat()) {
    for (int64_t k = 0; k < c.elements; ++k) {
      double d = std::fabs(static_cast<double>(got.i[k]) -
                           static_cast<double>(expected.i[k]));
      c.maxAbs = std::max(c.maxAbs, d);
      if (expected.i[k] != 0)
        c.maxRel = std::max(c.maxRel,
                            d / std::fabs(static_cast<double>(expected.i[k])));
      if (got.i[k] != expected.i[k]) {
        if (c.ok) {
          c.worst = k;
          c.worstGot = static_cast<double>(got.i[k]);
          c.worstExpected = static_cast<double>(expected.i[k]);
        }
        c.ok = false;
        ++c.mismatches;
      }
    }
    return c;
  }
  Tolerance t = effectiveTolerance(expected.dtype, tol);
  double worstRatio = -1;
  for (int64_t k = 0; k < c.elements; ++k) {
    double g = got.f[k], e = expected.f[k];
    bool match;
    double ratio; // how far outside its tolerance (inf for NaN/inf misses)
    if (std::isnan(e) || std::isnan(g) || std::isinf(e) || std::isinf(g)) {
      match = (std::isnan(e) && std::isnan(g)) || g == e;
      ratio = match ? 0 : INFINITY;
    } else {
      double d = std::fabs(g - e);
      c.maxAbs = std::max(c.maxAbs, d);
      if (e != 0)
        c.maxRel = std::max(c.maxRel, d / std::fabs(e));
      double bound = t.atol + t.rtol * std::fabs(e);
      match = d <= bound;
      ratio = bound > 0 ? d / bound : (d > 0 ? INFINITY : 0);
    }
    if (match)
      continue;
    c.ok = false;
    ++c.mismatches;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      c.worst = k;
      c.worstGot = g;
      c.worstExpected = e;
    }
  }
  return c;
}

} // namespace tessera::eval

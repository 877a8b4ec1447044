//===- ConstEval.cpp - the importer's compile-time evaluator --------------===//

#include "compiler/import/ConstEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace tessera::import::eval {
namespace {

llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

/// A result tensor of `dtype` and `shape` with storage for every element.
ConstTensor make(int32_t dtype, llvm::ArrayRef<int64_t> shape) {
  ConstTensor r;
  r.dtype = dtype;
  r.shape = Shape(shape);
  r.resize(numElements(shape));
  return r;
}

/// Stores `v` (rounded to r's dtype) at element `e`.
void set(ConstTensor &r, int64_t e, double v) {
  if (r.isFloat())
    r.f[e] = roundToDType(v, r.dtype);
  else if (r.dtype == kBool)
    r.i[e] = v != 0.0;
  else
    r.i[e] = wrapToDType(saturatingToInt(v), r.dtype);
}

/// Advances a row-major multi-index; false after the last element.
bool next(Shape &idx, llvm::ArrayRef<int64_t> shape) {
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (++idx[d] < shape[d])
      return true;
    idx[d] = 0;
  }
  return false;
}

double applyBin(Bin k, double a, double x) {
  switch (k) {
  case Bin::Add:
    return a + x;
  case Bin::Sub:
    return a - x;
  case Bin::Mul:
    return a * x;
  case Bin::Div:
    return a / x;
  case Bin::Pow:
    return std::pow(a, x);
  case Bin::Max:
    return std::isnan(a) || std::isnan(x) ? NAN : std::max(a, x);
  case Bin::Min:
    return std::isnan(a) || std::isnan(x) ? NAN : std::min(a, x);
  case Bin::Mod: { // sign of the divisor (numpy.mod); exact via fmod
    if (std::isinf(x) && std::isfinite(a))
      return a == 0 || std::signbit(a) == std::signbit(x) ? a : x;
    double r = std::fmod(a, x);
    if (r != 0 && std::signbit(r) != std::signbit(x))
      r += x;
    return r;
  }
  case Bin::FMod:
    return std::fmod(a, x);
  case Bin::Equal:
    return a == x;
  case Bin::Less:
    return a < x;
  case Bin::Greater:
    return a > x;
  case Bin::LessEq:
    return a <= x;
  case Bin::GreaterEq:
    return a >= x;
  case Bin::And:
    return (a != 0) && (x != 0);
  case Bin::Or:
    return (a != 0) || (x != 0);
  case Bin::Xor:
    return (a != 0) != (x != 0);
  }
  return 0;
}

/// Integer arithmetic without undefined behaviour (wrapping like the
/// two's-complement result an int64 kernel gives); nullopt on division by
/// zero.
std::optional<int64_t> applyBinInt(Bin k, int64_t a, int64_t x) {
  auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };
  switch (k) {
  case Bin::Add:
    return wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(x));
  case Bin::Sub:
    return wrap(static_cast<uint64_t>(a) - static_cast<uint64_t>(x));
  case Bin::Mul:
    return wrap(static_cast<uint64_t>(a) * static_cast<uint64_t>(x));
  case Bin::Div:
    if (x == 0)
      return std::nullopt;
    if (a == INT64_MIN && x == -1)
      return INT64_MIN;
    return a / x;
  case Bin::Mod:
  case Bin::FMod: {
    if (x == 0)
      return std::nullopt;
    if (x == -1)
      return 0;
    int64_t r = a % x; // C remainder: sign of the dividend (fmod = 1)
    if (k == Bin::Mod && r != 0 && ((r < 0) != (x < 0)))
      r += x; // ONNX Mod (fmod = 0): sign of the divisor
    return r;
  }
  case Bin::Pow: {
    if (x < 0)
      return a == 1 ? 1 : a == -1 ? (x % 2 ? -1 : 1) : 0;
    uint64_t r = 1, base = static_cast<uint64_t>(a);
    for (int64_t e = x; e > 0; e >>= 1) {
      if (e & 1)
        r *= base;
      base *= base;
    }
    return wrap(r);
  }
  case Bin::Max:
    return std::max(a, x);
  case Bin::Min:
    return std::min(a, x);
  default:
    return static_cast<int64_t>(
        applyBin(k, static_cast<double>(a), static_cast<double>(x)));
  }
}

} // namespace

bool isCompare(Bin k) {
  return k == Bin::Equal || k == Bin::Less || k == Bin::Greater ||
         k == Bin::LessEq || k == Bin::GreaterEq;
}
bool isLogical(Bin k) { return k == Bin::And || k == Bin::Or || k == Bin::Xor; }

llvm::Error checkFoldSize(llvm::ArrayRef<int64_t> shape) {
  int64_t n = numElements(shape);
  if (n < 0 || n > kMaxFoldElements)
    return error("constant result " + shapeStr(shape) +
                 " is too large to fold (more than " +
                 llvm::Twine(kMaxFoldElements) + " elements)");
  return llvm::Error::success();
}

llvm::Expected<ConstTensor> binary(Bin k, const ConstTensor &a,
                                   const ConstTensor &b,
                                   llvm::ArrayRef<int64_t> out) {
  if (llvm::Error e = checkFoldSize(out))
    return std::move(e);
  bool boolResult = isCompare(k) || isLogical(k);
  ConstTensor r = make(boolResult ? kBool : a.dtype, out);
  auto ia = broadcastIndices(a.shape, out);
  auto ib = broadcastIndices(b.shape, out);
  bool intMath = !a.isFloat() && !b.isFloat() && !boolResult;
  for (int64_t e = 0; e < r.size(); ++e) {
    if (intMath) {
      auto v = applyBinInt(k, a.getI(ia[e]), b.getI(ib[e]));
      if (!v)
        return error("integer division by zero");
      r.i[e] = wrapToDType(*v, r.dtype);
    } else if (boolResult && !a.isFloat() && !b.isFloat()) {
      // Compare integers exactly (doubles lose precision above 2^53).
      int64_t x = a.getI(ia[e]), y = b.getI(ib[e]);
      bool v = false;
      switch (k) {
      case Bin::Equal:
        v = x == y;
        break;
      case Bin::Less:
        v = x < y;
        break;
      case Bin::Greater:
        v = x > y;
        break;
      case Bin::LessEq:
        v = x <= y;
        break;
      case Bin::GreaterEq:
        v = x >= y;
        break;
      default:
        v = applyBin(k, static_cast<double>(x), static_cast<double>(y)) != 0;
        break;
      }
      r.i[e] = v;
    } else {
      set(r, e, applyBin(k, a.getF(ia[e]), b.getF(ib[e])));
    }
  }
  return r;
}

ConstTensor unary(Un k, const ConstTensor &x) {
  int32_t dtype = k == Un::Not || k == Un::IsNaN ? kBool : x.dtype;
  ConstTensor r = make(dtype, x.shape);
  for (int64_t e = 0; e < x.size(); ++e) {
    if (!x.isFloat() && dtype != kBool) {
      // Integer inputs: exact integer results where the op has them.
      int64_t v = x.getI(e);
      switch (k) {
      case Un::Neg:
        r.i[e] = wrapToDType(static_cast<int64_t>(0 - static_cast<uint64_t>(v)),
                             dtype);
        continue;
      case Un::Abs:
        r.i[e] = wrapToDType(
            v < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(v)) : v,
            dtype);
        continue;
      case Un::Sign:
        r.i[e] = (v > 0) - (v < 0);
        continue;
      case Un::Relu:
        r.i[e] = v > 0 ? v : 0;
        continue;
      case Un::Floor:
      case Un::Ceil:
      case Un::Round:
        r.i[e] = v;
        continue;
      default:
        break;
      }
    }
    double v = x.getF(e), y = 0;
    switch (k) {
    case Un::Neg:
      y = -v;
      break;
    case Un::Abs:
      y = std::fabs(v);
      break;
    case Un::Sqrt:
      y = std::sqrt(v);
      break;
    case Un::Exp:
      y = std::exp(v);
      break;
    case Un::Log:
      y = std::log(v);
      break;
    case Un::Floor:
      y = std::floor(v);
      break;
    case Un::Ceil:
      y = std::ceil(v);
      break;
    case Un::Round:
      y = std::nearbyint(v); // default rounding mode: half to even
      break;
    case Un::Relu:
      y = v > 0 ? v : 0;
      break;
    case Un::Tanh:
      y = std::tanh(v);
      break;
    case Un::Erf:
      y = std::erf(v);
      break;
    case Un::Reciprocal:
      y = 1.0 / v;
      break;
    case Un::Sign:
      y = std::isnan(v) ? v : (v > 0) - (v < 0);
      break;
    case Un::Not:
      y = v == 0;
      break;
    case Un::Sigmoid:
      y = v >= 0 ? 1.0 / (1.0 + std::exp(-v)) : std::exp(v) / (1 + std::exp(v));
      break;
    case Un::Sin:
      y = std::sin(v);
      break;
    case Un::Cos:
      y = std::cos(v);
      break;
    case Un::IsNaN:
      y = std::isnan(v);
      break;
    }
    set(r, e, y);
  }
  return r;
}

ConstTensor isInf(const ConstTensor &x, bool detectPositive,
                  bool detectNegative) {
  ConstTensor r = make(kBool, x.shape);
  for (int64_t e = 0; e < x.size(); ++e) {
    double v = x.getF(e);
    r.i[e] = x.isFloat() && std::isinf(v) &&
             (v > 0 ? detectPositive : detectNegative);
  }
  return r;
}

ConstTensor where(const ConstTensor &cond, const ConstTensor &x,
                  const ConstTensor &y, llvm::ArrayRef<int64_t> out) {
  ConstTensor r = make(x.dtype, out);
  auto ic = broadcastIndices(cond.shape, out);
  auto ix = broadcastIndices(x.shape, out);
  auto iy = broadcastIndices(y.shape, out);
  for (int64_t e = 0; e < r.size(); ++e) {
    if (cond.getI(ic[e]))
      r.copyFrom(x, ix[e], e);
    else
      r.copyFrom(y, iy[e], e);
  }
  return r;
}

ConstTensor cast(const ConstTensor &x, int32_t dtype) {
  ConstTensor r;
  r.dtype = dtype;
  r.shape = x.shape;
  for (int64_t e = 0; e < x.size(); ++e) {
    if (x.isFloat())
      r.push(x.f[e]);
    else
      r.pushInt(x.i[e]);
  }
  return r;
}

ConstTensor reshape(const ConstTensor &x, llvm::ArrayRef<int64_t> shape) {
  ConstTensor r = x;
  r.shape = Shape(shape);
  return r;
}

ConstTensor transpose(const ConstTensor &x, llvm::ArrayRef<int64_t> perm) {
  int64_t rank = perm.size();
  Shape out;
  for (int64_t p : perm)
    out.push_back(x.shape[p]);
  ConstTensor r = make(x.dtype, out);
  Shape inStrides = stridesOf(x.shape);
  Shape idx(rank, 0);
  for (int64_t e = 0; e < r.size(); ++e) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d)
      src += idx[d] * inStrides[perm[d]];
    r.copyFrom(x, src, e);
    next(idx, out);
  }
  return r;
}

ConstTensor slice(const ConstTensor &x, llvm::ArrayRef<int64_t> start,
                  llvm::ArrayRef<int64_t> step, llvm::ArrayRef<int64_t> out) {
  ConstTensor r = make(x.dtype, out);
  Shape strides = stridesOf(x.shape);
  int64_t rank = out.size();
  Shape idx(rank, 0);
  for (int64_t e = 0; e < r.size(); ++e) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d)
      src += (start[d] + idx[d] * step[d]) * strides[d];
    r.copyFrom(x, src, e);
    next(idx, out);
  }
  return r;
}

ConstTensor concat(llvm::ArrayRef<const ConstTensor *> xs, int64_t axis,
                   llvm::ArrayRef<int64_t> out) {
  ConstTensor r = make(xs.front()->dtype, out);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= out[d];
  for (size_t d = axis + 1; d < out.size(); ++d)
    inner *= out[d];
  int64_t e = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *x : xs) {
      int64_t chunk = x->shape[axis] * inner;
      for (int64_t k = 0; k < chunk; ++k)
        r.copyFrom(*x, o * chunk + k, e++);
    }
  return r;
}

ConstTensor gather(const ConstTensor &x, int64_t axis,
                   const ConstTensor &indices, llvm::ArrayRef<int64_t> out) {
  ConstTensor r = make(x.dtype, out);
  int64_t outer = 1, inner = 1, dim = x.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (size_t d = axis + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  int64_t e = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < indices.size(); ++k)
      for (int64_t in = 0; in < inner; ++in)
        r.copyFrom(x, (o * dim + indices.getI(k)) * inner + in, e++);
  return r;
}

ConstTensor expand(const ConstTensor &x, llvm::ArrayRef<int64_t> out) {
  ConstTensor r = make(x.dtype, out);
  auto src = broadcastIndices(x.shape, out);
  for (int64_t e = 0; e < r.size(); ++e)
    r.copyFrom(x, src[e], e);
  return r;
}

llvm::Expected<ConstTensor> range(const ConstTensor &start,
                                  const ConstTensor &limit,
                                  const ConstTensor &delta) {
  ConstTensor r;
  r.dtype = start.dtype;
  double s0 = start.getF(0), l0 = limit.getF(0), d0 = delta.getF(0);
  if (d0 == 0 || std::isnan(s0) || std::isnan(l0) || std::isnan(d0))
    return error("invalid range (delta 0 or NaN bounds)");
  double count = std::max(0.0, std::ceil((l0 - s0) / d0));
  if (count > kMaxFoldElements)
    return error("range of " + llvm::Twine(static_cast<int64_t>(count)) +
                 " elements is too large to fold");
  for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
    if (r.isFloat())
      r.push(s0 + k * d0);
    else
      r.pushInt(*applyBinInt(Bin::Add, start.getI(0),
                             *applyBinInt(Bin::Mul, k, delta.getI(0))));
  }
  r.shape = {static_cast<int64_t>(count)};
  return r;
}

llvm::Expected<ConstTensor> matmul(const ConstTensor &a, const ConstTensor &b) {
  if (a.shape.empty() || b.shape.empty())
    return error("MatMul operands must not be scalars");
  Shape sa = a.shape, sb = b.shape;
  bool vecA = sa.size() == 1, vecB = sb.size() == 1;
  if (vecA)
    sa.insert(sa.begin(), 1);
  if (vecB)
    sb.push_back(1);
  int64_t m = sa[sa.size() - 2], k = sa.back(), k2 = sb[sb.size() - 2],
          n = sb.back();
  if (k != k2)
    return error("contracting dimensions differ: " + shapeStr(a.shape) + " x " +
                 shapeStr(b.shape));
  llvm::ArrayRef<int64_t> ba(sa), bb(sb);
  auto batch = broadcastShapes(ba.drop_back(2), bb.drop_back(2));
  if (!batch)
    return error("batch dimensions of " + shapeStr(a.shape) + " and " +
                 shapeStr(b.shape) + " do not broadcast");
  Shape full = *batch;
  full.append({m, n});
  if (llvm::Error e = checkFoldSize(full))
    return std::move(e);
  ConstTensor r = make(a.dtype, full);
  int64_t nb = numElements(*batch);
  // Index of each operand's [m, k] / [k, n] matrix for every batch element.
  Shape batchA(ba.drop_back(2)), batchB(bb.drop_back(2));
  auto ia = broadcastIndices(batchA, *batch);
  auto ib = broadcastIndices(batchB, *batch);
  bool intMath = !a.isFloat() && !b.isFloat();
  for (int64_t t = 0; t < nb; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        int64_t iacc = 0;
        for (int64_t p = 0; p < k; ++p) {
          int64_t ea = ia[t] * m * k + i * k + p;
          int64_t eb = ib[t] * k * n + p * n + j;
          if (intMath) // wrapping, as an int64 kernel does
            iacc = *applyBinInt(Bin::Add, iacc,
                                *applyBinInt(Bin::Mul, a.getI(ea), b.getI(eb)));
          else
            acc += a.getF(ea) * b.getF(eb);
        }
        int64_t e = (t * m + i) * n + j;
        if (intMath)
          r.i[e] = wrapToDType(iacc, r.dtype);
        else
          set(r, e, acc);
      }
  Shape squeezed = *batch;
  if (!vecA)
    squeezed.push_back(m);
  if (!vecB)
    squeezed.push_back(n);
  r.shape = squeezed;
  return r;
}

ConstTensor reduce(Reduce k, const ConstTensor &x, llvm::ArrayRef<int64_t> axes,
                   bool keepDims) {
  int64_t rank = x.shape.size();
  llvm::SmallVector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes)
    reduced[a] = true;
  Shape kept; // result shape with the reduced dims as 1
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    kept.push_back(reduced[d] ? 1 : x.shape[d]);
    if (reduced[d])
      count *= x.shape[d];
  }
  int32_t dtype = x.dtype;
  int64_t outN = numElements(kept);
  std::vector<double> acc(outN, 0.0);
  std::vector<bool> seen(outN, false);
  Shape keptStrides = stridesOf(kept);
  Shape idx(rank, 0);
  for (int64_t e = 0; e < x.size(); ++e) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d])
        o += idx[d] * keptStrides[d];
    double v = x.getF(e);
    switch (k) {
    case Reduce::Sum:
    case Reduce::Mean:
      acc[o] += v;
      break;
    case Reduce::Prod:
      acc[o] = seen[o] ? acc[o] * v : v;
      break;
    case Reduce::Max:
      acc[o] = !seen[o] || v > acc[o] || std::isnan(v) ? v : acc[o];
      break;
    case Reduce::Min:
      acc[o] = !seen[o] || v < acc[o] || std::isnan(v) ? v : acc[o];
      break;
    }
    seen[o] = true;
    next(idx, x.shape);
  }
  Shape out;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d] || keepDims)
      out.push_back(kept[d]);
  ConstTensor r = make(dtype, out);
  for (int64_t o = 0; o < outN; ++o) {
    double v = acc[o];
    if (!seen[o]) // empty reduction: the op's identity
      v = k == Reduce::Prod                 ? 1.0
          : k == Reduce::Max && x.isFloat() ? -INFINITY
          : k == Reduce::Min && x.isFloat() ? INFINITY
          : k == Reduce::Mean               ? NAN
                                            : 0.0;
    else if (k == Reduce::Mean)
      v /= count;
    set(r, o, v);
  }
  return r;
}

ConstTensor softmax(const ConstTensor &x, int64_t axis) {
  ConstTensor r = make(x.dtype, x.shape);
  int64_t dim = x.shape[axis], inner = 1, outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (size_t d = axis + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * dim + j) * inner + in; };
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < dim; ++j)
        mx = std::max(mx, x.getF(at(j)));
      for (int64_t j = 0; j < dim; ++j)
        sum += std::exp(x.getF(at(j)) - mx);
      for (int64_t j = 0; j < dim; ++j)
        set(r, at(j), std::exp(x.getF(at(j)) - mx) / sum);
    }
  return r;
}

ConstTensor trilu(const ConstTensor &x, int64_t k, bool upper) {
  ConstTensor r = make(x.dtype, x.shape);
  int64_t rank = x.shape.size();
  int64_t rows = x.shape[rank - 2], cols = x.shape[rank - 1];
  for (int64_t e = 0; e < x.size(); ++e) {
    int64_t j = e % cols, i = (e / cols) % rows;
    bool keep = upper ? j - i >= k : j - i <= k;
    if (keep)
      r.copyFrom(x, e, e);
  }
  return r;
}

ConstTensor cumsum(const ConstTensor &x, int64_t axis, bool exclusive,
                   bool reverse) {
  ConstTensor r = make(x.dtype, x.shape);
  int64_t dim = x.shape[axis], inner = 1, outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (size_t d = axis + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      double acc = 0;
      int64_t iacc = 0;
      for (int64_t step = 0; step < dim; ++step) {
        int64_t j = reverse ? dim - 1 - step : step;
        int64_t e = (o * dim + j) * inner + in;
        if (x.isFloat()) {
          if (!exclusive)
            acc += x.f[e];
          set(r, e, acc);
          if (exclusive)
            acc += x.f[e];
        } else {
          auto add = [](int64_t a, int64_t b) {
            return static_cast<int64_t>(static_cast<uint64_t>(a) +
                                        static_cast<uint64_t>(b));
          };
          if (!exclusive)
            iacc = add(iacc, x.i[e]);
          r.i[e] = wrapToDType(iacc, r.dtype);
          if (exclusive)
            iacc = add(iacc, x.i[e]);
        }
      }
    }
  return r;
}

llvm::Expected<ConstTensor> pad(const ConstTensor &x,
                                llvm::ArrayRef<int64_t> pads, PadMode mode,
                                double value) {
  int64_t rank = x.shape.size();
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t len = x.shape[d] + pads[d] + pads[d + rank];
    if (len < 0)
      return error("pads " + shapeStr(pads) + " crop dimension " +
                   llvm::Twine(d) + " of " + shapeStr(x.shape) + " below zero");
    if (mode != PadMode::Constant && x.shape[d] == 0 && len > 0)
      return error("edge/reflect padding of an empty dimension");
    if (mode == PadMode::Reflect &&
        (pads[d] >= x.shape[d] || pads[d + rank] >= x.shape[d]))
      return error("reflect pads must be smaller than the dimension");
    out.push_back(len);
  }
  if (llvm::Error e = checkFoldSize(out))
    return std::move(e);
  ConstTensor r = make(x.dtype, out);
  Shape strides = stridesOf(x.shape);
  Shape idx(rank, 0);
  for (int64_t e = 0; e < r.size(); ++e) {
    int64_t src = 0;
    bool inside = true;
    for (int64_t d = 0; d < rank && inside; ++d) {
      int64_t s = idx[d] - pads[d], n = x.shape[d];
      if (s < 0 || s >= n) {
        if (mode == PadMode::Constant)
          inside = false;
        else if (mode == PadMode::Edge)
          s = s < 0 ? 0 : n - 1;
        else
          s = s < 0 ? -s : 2 * (n - 1) - s;
      }
      src += s * strides[d];
    }
    if (inside)
      r.copyFrom(x, src, e);
    else
      set(r, e, value);
    next(idx, out);
  }
  return r;
}

ConstTensor layerNorm(const ConstTensor &x, const ConstTensor &scale,
                      const ConstTensor *bias, int64_t axis, double epsilon) {
  ConstTensor r = make(x.dtype, x.shape);
  llvm::ArrayRef<int64_t> norm =
      llvm::ArrayRef<int64_t>(x.shape).drop_front(axis);
  int64_t inner = numElements(norm),
          outer = x.size() / std::max<int64_t>(1, inner);
  auto is = broadcastIndices(scale.shape, norm);
  std::vector<int64_t> ib;
  if (bias)
    ib = broadcastIndices(bias->shape, norm);
  for (int64_t o = 0; o < outer; ++o) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < inner; ++j)
      mean += x.getF(o * inner + j);
    mean /= inner;
    for (int64_t j = 0; j < inner; ++j) {
      double d = x.getF(o * inner + j) - mean;
      var += d * d;
    }
    var /= inner;
    double rstd = 1.0 / std::sqrt(var + epsilon);
    for (int64_t j = 0; j < inner; ++j) {
      double y = (x.getF(o * inner + j) - mean) * rstd * scale.getF(is[j]);
      if (bias)
        y += bias->getF(ib[j]);
      set(r, o * inner + j, y);
    }
  }
  return r;
}

ConstTensor gelu(const ConstTensor &x, bool tanhApprox) {
  ConstTensor r = make(x.dtype, x.shape);
  for (int64_t e = 0; e < x.size(); ++e) {
    double v = x.getF(e);
    double y = tanhApprox ? 0.5 * v *
                                (1 + std::tanh(std::sqrt(2 / M_PI) *
                                               (v + 0.044715 * v * v * v)))
                          : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    set(r, e, y);
  }
  return r;
}

} // namespace tessera::import::eval

//===- CpuKernels.cpp - CPU kernels for the tsr ops -----------------------===//

#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/backends/cpu/VecMath.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

using namespace tessera::runtime;
using llvm::ArrayRef;
using llvm::MutableArrayRef;

namespace {

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= shape[i];
  return n;
}

template <typename T, typename F>
void binaryLoop(const Tensor &a, const Tensor &b, Tensor &out, F f) {
  const T *pa = a.data<T>();
  const T *pb = b.data<T>();
  T *po = out.data<T>();
  int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i)
    po[i] = f(pa[i], pb[i]);
}

template <typename T, typename F>
void unaryLoop(const Tensor &in, Tensor &out, F f) {
  const T *pi = in.data<T>();
  T *po = out.data<T>();
  int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i)
    po[i] = f(pi[i]);
}

void checkSame(const Tensor &a, const Tensor &b, const Tensor &out) {
  (void)a;
  (void)b;
  (void)out;
  assert(a.shape() == b.shape() && a.shape() == out.shape() &&
         "elementwise operands must have the same shape");
  assert(a.dtype() == b.dtype() && "elementwise operands must share a dtype");
}

// Unsigned integer type of the same width, for dtype-agnostic copies.
template <size_t N> struct UIntOfSize;
template <> struct UIntOfSize<1> { using type = uint8_t; };
template <> struct UIntOfSize<4> { using type = uint32_t; };
template <> struct UIntOfSize<8> { using type = uint64_t; };

/// Calls f.template operator()<U>() with U an unsigned type of the dtype's
/// width.
template <typename F> void dispatchBySize(DType dtype, F &&f) {
  switch (dtypeSize(dtype)) {
  case 1:
    f(uint8_t());
    break;
  case 2:
    f(uint16_t());
    break;
  case 4:
    f(uint32_t());
    break;
  default:
    f(uint64_t());
    break;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define TESSERA_BINARY(NAME, EXPR)                                             \
  void cpu::NAME(const Tensor &a, const Tensor &b, Tensor &out) {              \
    checkSame(a, b, out);                                                      \
    if (a.dtype() == DType::I64)                                               \
      binaryLoop<int64_t>(a, b, out,                                           \
                          [](int64_t x, int64_t y) { return EXPR; });          \
    else                                                                       \
      binaryLoop<float>(a, b, out, [](float x, float y) { return EXPR; });     \
  }

TESSERA_BINARY(add, x + y)
TESSERA_BINARY(sub, x - y)
TESSERA_BINARY(mul, x *y)
TESSERA_BINARY(div, x / y)
#undef TESSERA_BINARY

void cpu::pow(const Tensor &a, const Tensor &b, Tensor &out) {
  checkSame(a, b, out);
  binaryLoop<float>(a, b, out, [](float x, float y) { return std::pow(x, y); });
}

void cpu::max(const Tensor &a, const Tensor &b, Tensor &out) {
  checkSame(a, b, out);
  if (a.dtype() == DType::I64) {
    binaryLoop<int64_t>(a, b, out,
                        [](int64_t x, int64_t y) { return x > y ? x : y; });
    return;
  }
  binaryLoop<float>(a, b, out, [](float x, float y) {
    if (std::isnan(x) || std::isnan(y))
      return std::numeric_limits<float>::quiet_NaN();
    return x > y ? x : y;
  });
}

void cpu::equal(const Tensor &a, const Tensor &b, Tensor &out) {
  assert(a.shape() == b.shape() && a.shape() == out.shape());
  assert(out.dtype() == DType::I1);
  uint8_t *po = out.data<uint8_t>();
  int64_t n = out.numel();
  switch (a.dtype()) {
  case DType::F32: {
    const float *x = a.data<float>(), *y = b.data<float>();
    for (int64_t i = 0; i < n; ++i)
      po[i] = x[i] == y[i];
    break;
  }
  case DType::I64: {
    const int64_t *x = a.data<int64_t>(), *y = b.data<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      po[i] = x[i] == y[i];
    break;
  }
  case DType::I1: {
    const uint8_t *x = a.data<uint8_t>(), *y = b.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i)
      po[i] = (x[i] != 0) == (y[i] != 0);
    break;
  }
  case DType::BF16: {
    const BFloat16 *x = a.data<BFloat16>(), *y = b.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i)
      po[i] = toFloat(x[i]) == toFloat(y[i]);
    break;
  }
  case DType::F16: {
    const Float16 *x = a.data<Float16>(), *y = b.data<Float16>();
    for (int64_t i = 0; i < n; ++i)
      po[i] = toFloat(x[i]) == toFloat(y[i]);
    break;
  }
  }
}

void cpu::select(const Tensor &cond, const Tensor &a, const Tensor &b,
                 Tensor &out) {
  assert(cond.dtype() == DType::I1 && cond.shape() == out.shape());
  checkSame(a, b, out);
  const uint8_t *c = cond.data<uint8_t>();
  int64_t n = out.numel();
  dispatchBySize(out.dtype(), [&](auto tag) {
    using U = decltype(tag);
    const U *x = static_cast<const U *>(a.raw());
    const U *y = static_cast<const U *>(b.raw());
    U *o = static_cast<U *>(out.raw());
    for (int64_t i = 0; i < n; ++i)
      o[i] = c[i] ? x[i] : y[i];
  });
}

void cpu::neg(const Tensor &in, Tensor &out) {
  if (in.dtype() == DType::I64)
    unaryLoop<int64_t>(in, out, [](int64_t x) { return -x; });
  else
    unaryLoop<float>(in, out, [](float x) { return -x; });
}

void cpu::exp(const Tensor &in, Tensor &out) {
  vecmath::exp(in.data<float>(), out.data<float>(), out.numel());
}
void cpu::log(const Tensor &in, Tensor &out) {
  vecmath::log(in.data<float>(), out.data<float>(), out.numel());
}
void cpu::sqrt(const Tensor &in, Tensor &out) {
  unaryLoop<float>(in, out, [](float x) { return std::sqrt(x); });
}
void cpu::rsqrt(const Tensor &in, Tensor &out) {
  unaryLoop<float>(in, out, [](float x) { return 1.0f / std::sqrt(x); });
}
void cpu::tanh(const Tensor &in, Tensor &out) {
  vecmath::tanh(in.data<float>(), out.data<float>(), out.numel());
}
void cpu::erf(const Tensor &in, Tensor &out) {
  vecmath::erf(in.data<float>(), out.data<float>(), out.numel());
}
void cpu::relu(const Tensor &in, Tensor &out) {
  // NaN propagates, like torch.relu.
  unaryLoop<float>(in, out, [](float x) { return x < 0.0f ? 0.0f : x; });
}

void cpu::sigmoid(const Tensor &in, Tensor &out) {
  vecmath::sigmoid(in.data<float>(), out.data<float>(), out.numel());
}

void cpu::silu(const Tensor &in, Tensor &out) {
  vecmath::silu(in.data<float>(), out.data<float>(), out.numel());
}

void cpu::dropout(const Tensor &in, const tessera::random::DropoutKey &key,
                  uint32_t threshold, float scale,
                  llvm::ArrayRef<tessera::random::DropoutFactor> factors,
                  Tensor &out) {
  const float *x = in.data<float>();
  float *y = out.data<float>();
  int64_t n = in.numel();
  // Consecutive local elements are usually consecutive global ones: one
  // Philox call serves the 4 elements of a counter.
  uint64_t cachedQ = ~uint64_t(0);
  tessera::random::Philox4x32 words{};
  for (int64_t i = 0; i < n; ++i) {
    uint64_t g = tessera::random::dropoutGlobalIndex(
        factors.data(), static_cast<int>(factors.size()), i);
    if ((g >> 2) != cachedQ) {
      cachedQ = g >> 2;
      words = tessera::random::dropoutWords(key, cachedQ);
    }
    bool keep = (words.v[g & 3] >> 8) >= threshold;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

void cpu::gelu(const Tensor &in, GeluApproximate approximate, Tensor &out) {
  vecmath::gelu(in.data<float>(), out.data<float>(), out.numel(),
                approximate != GeluApproximate::None);
}

namespace {
/// Element conversions; bf16 and f16 go through f32 (exact from them;
/// rounded to nearest even into them, f16 overflowing to inf).
template <typename From> float widen(From v) { return static_cast<float>(v); }
template <> float widen<BFloat16>(BFloat16 v) { return toFloat(v); }
template <> float widen<Float16>(Float16 v) { return toFloat(v); }
template <typename T>
constexpr bool isHalf =
    std::is_same<T, BFloat16>::value || std::is_same<T, Float16>::value;

/// f32 -> i64 truncated toward zero, saturating: NaN is 0 and values outside
/// [-2^63, 2^63) clamp to the int64 range (a plain static_cast is undefined
/// behaviour there; UBSan finding on bf16 -1e30).
inline int64_t toInt64Saturating(float v) {
  constexpr float kTwo63 = 9223372036854775808.0f;
  if (std::isnan(v))
    return 0;
  if (v >= kTwo63)
    return std::numeric_limits<int64_t>::max();
  if (v < -kTwo63)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

template <typename From, typename To>
void convertLoop(const Tensor &in, Tensor &out) {
  const From *pi = static_cast<const From *>(in.raw());
  To *po = static_cast<To *>(out.raw());
  int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same<To, uint8_t>::value) {
      if constexpr (isHalf<From>)
        po[i] = toFloat(pi[i]) != 0.0f;
      else
        po[i] = pi[i] != From(0);
    } else if constexpr (std::is_same<To, BFloat16>::value) {
      po[i] = toBFloat16(widen(pi[i]));
    } else if constexpr (std::is_same<To, Float16>::value) {
      po[i] = toFloat16(widen(pi[i]));
    } else if constexpr (std::is_same<To, int64_t>::value &&
                         !std::is_same<From, int64_t>::value &&
                         !std::is_same<From, uint8_t>::value) {
      po[i] = toInt64Saturating(widen(pi[i]));
    } else if constexpr (isHalf<From>) {
      po[i] = static_cast<To>(toFloat(pi[i]));
    } else {
      po[i] = static_cast<To>(pi[i]);
    }
  }
}
template <typename From> void convertFrom(const Tensor &in, Tensor &out) {
  switch (out.dtype()) {
  case DType::F32:
    convertLoop<From, float>(in, out);
    break;
  case DType::I64:
    convertLoop<From, int64_t>(in, out);
    break;
  case DType::I1:
    convertLoop<From, uint8_t>(in, out);
    break;
  case DType::BF16:
    convertLoop<From, BFloat16>(in, out);
    break;
  case DType::F16:
    convertLoop<From, Float16>(in, out);
    break;
  }
}
} // namespace

void cpu::convert(const Tensor &in, Tensor &out) {
  assert(in.numel() == out.numel());
  if (in.dtype() == out.dtype()) {
    if (!in.sharesStorageWith(out) && in.bytes())
      std::memmove(out.raw(), in.raw(), in.bytes());
    return;
  }
  switch (in.dtype()) {
  case DType::F32:
    convertFrom<float>(in, out);
    break;
  case DType::I64:
    convertFrom<int64_t>(in, out);
    break;
  case DType::I1:
    convertFrom<uint8_t>(in, out);
    break;
  case DType::BF16:
    convertFrom<BFloat16>(in, out);
    break;
  case DType::F16:
    convertFrom<Float16>(in, out);
    break;
  }
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

namespace {
// Copies an in-block to an out-block for dims [d, rank) of the prefix; the
// innermost `chunk` bytes are contiguous in both.
void broadcastRec(const char *in, char *out, size_t d,
                  const std::vector<int64_t> &outDims,
                  const std::vector<int64_t> &inStrideBytes,
                  const std::vector<int64_t> &outStrideBytes, size_t chunk) {
  if (d == outDims.size()) {
    std::memcpy(out, in, chunk);
    return;
  }
  int64_t n = outDims[d];
  if (d + 1 == outDims.size() && inStrideBytes[d] == 0) {
    // Innermost broadcast dim: replicate one chunk.
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out + i * outStrideBytes[d], in, chunk);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    broadcastRec(in + i * inStrideBytes[d], out + i * outStrideBytes[d], d + 1,
                 outDims, inStrideBytes, outStrideBytes, chunk);
}
} // namespace

void cpu::broadcast(const Tensor &in, Tensor &out) {
  assert(in.dtype() == out.dtype() && in.rank() <= out.rank());
  if (out.numel() == 0)
    return;
  size_t esize = dtypeSize(in.dtype());
  size_t r = out.shape().size();
  size_t lead = r - in.shape().size();
  std::vector<int64_t> inDims(r, 1);
  for (size_t i = 0; i < in.shape().size(); ++i)
    inDims[lead + i] = in.shape()[i];
  // Longest suffix where in and out agree: copied as one contiguous chunk.
  size_t suffix = r;
  while (suffix > 0 && inDims[suffix - 1] == out.shape()[suffix - 1])
    --suffix;
  size_t chunk = product(out.shape(), suffix, r) * esize;
  std::vector<int64_t> outDims(out.shape().begin(),
                               out.shape().begin() + suffix);
  std::vector<int64_t> inStr = rowMajorStrides(inDims);
  std::vector<int64_t> outStr = rowMajorStrides(out.shape());
  std::vector<int64_t> inStrideBytes(suffix), outStrideBytes(suffix);
  for (size_t i = 0; i < suffix; ++i) {
    assert((inDims[i] == 1 || inDims[i] == out.shape()[i]) &&
           "broadcast: incompatible dims");
    inStrideBytes[i] = inDims[i] == 1 ? 0 : inStr[i] * esize;
    outStrideBytes[i] = outStr[i] * esize;
  }
  broadcastRec(static_cast<const char *>(in.raw()),
               static_cast<char *>(out.raw()), 0, outDims, inStrideBytes,
               outStrideBytes, chunk);
}

namespace {
template <typename U>
void transposeLastTwo(const U *in, U *out, int64_t batch, int64_t rows,
                      int64_t cols) {
  constexpr int64_t kBlock = 32;
  for (int64_t b = 0; b < batch; ++b) {
    const U *src = in + b * rows * cols;
    U *dst = out + b * rows * cols;
    for (int64_t i0 = 0; i0 < rows; i0 += kBlock)
      for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
        int64_t i1 = std::min(rows, i0 + kBlock),
                j1 = std::min(cols, j0 + kBlock);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j)
            dst[j * rows + i] = src[i * cols + j];
      }
  }
}

template <typename U>
void transposeGeneric(const U *in, U *out, const std::vector<int64_t> &outDims,
                      const std::vector<int64_t> &srcStride) {
  size_t r = outDims.size();
  int64_t total = shapeNumel(outDims);
  if (total == 0)
    return;
  if (r == 0) {
    out[0] = in[0];
    return;
  }
  int64_t inner = outDims[r - 1];
  int64_t innerStride = srcStride[r - 1];
  std::vector<int64_t> idx(r, 0);
  int64_t srcOff = 0;
  for (int64_t o = 0; o < total; o += inner) {
    if (innerStride == 1) {
      std::memcpy(out + o, in + srcOff, inner * sizeof(U));
    } else {
      const U *s = in + srcOff;
      for (int64_t j = 0; j < inner; ++j)
        out[o + j] = s[j * innerStride];
    }
    // Advance the odometer over dims [0, r-1).
    for (size_t d = r - 1; d-- > 0;) {
      srcOff += srcStride[d];
      if (++idx[d] < outDims[d])
        break;
      srcOff -= srcStride[d] * outDims[d];
      idx[d] = 0;
    }
  }
}
} // namespace

void cpu::transpose(const Tensor &in, ArrayRef<int64_t> perm, Tensor &out) {
  assert(in.dtype() == out.dtype() && perm.size() == (size_t)in.rank());
  size_t r = perm.size();
  std::vector<int64_t> inStr = rowMajorStrides(in.shape());
  std::vector<int64_t> outDims(r), srcStride(r);
  for (size_t k = 0; k < r; ++k) {
    outDims[k] = in.shape()[perm[k]];
    srcStride[k] = inStr[perm[k]];
  }
  assert(outDims == out.shape());
  bool lastTwoSwap =
      r >= 2 && perm[r - 1] == (int64_t)r - 2 && perm[r - 2] == (int64_t)r - 1;
  for (size_t k = 0; lastTwoSwap && k + 2 < r; ++k)
    lastTwoSwap = perm[k] == (int64_t)k;
  dispatchBySize(in.dtype(), [&](auto tag) {
    using U = decltype(tag);
    const U *src = static_cast<const U *>(in.raw());
    U *dst = static_cast<U *>(out.raw());
    if (lastTwoSwap) {
      int64_t rows = in.shape()[r - 2], cols = in.shape()[r - 1];
      transposeLastTwo(src, dst, product(in.shape(), 0, r - 2), rows, cols);
      return;
    }
    transposeGeneric(src, dst, outDims, srcStride);
  });
}

void cpu::slice(const Tensor &in, ArrayRef<int64_t> starts,
                ArrayRef<int64_t> limits, ArrayRef<int64_t> strides,
                Tensor &out) {
  (void)limits;
  assert(in.dtype() == out.dtype());
  size_t r = in.shape().size();
  std::vector<int64_t> inStr = rowMajorStrides(in.shape());
  std::vector<int64_t> srcStride(r);
  int64_t base = 0;
  for (size_t d = 0; d < r; ++d) {
    assert(strides[d] >= 1 && starts[d] <= limits[d]);
    assert(out.shape()[d] ==
           (limits[d] - starts[d] + strides[d] - 1) / strides[d]);
    base += starts[d] * inStr[d];
    srcStride[d] = strides[d] * inStr[d];
  }
  dispatchBySize(in.dtype(), [&](auto tag) {
    using U = decltype(tag);
    transposeGeneric(static_cast<const U *>(in.raw()) + base,
                     static_cast<U *>(out.raw()), out.shape(), srcStride);
  });
}

void cpu::concat(ArrayRef<const Tensor *> inputs, int64_t axis, Tensor &out) {
  size_t esize = dtypeSize(out.dtype());
  int64_t outer = product(out.shape(), 0, axis);
  int64_t inner = product(out.shape(), axis + 1, out.shape().size());
  size_t outRow = out.shape()[axis] * inner * esize;
  char *dst = static_cast<char *>(out.raw());
  size_t colOff = 0;
  for (const Tensor *t : inputs) {
    assert(t->dtype() == out.dtype() && t->rank() == out.rank());
    size_t row = t->shape()[axis] * inner * esize;
    const char *src = static_cast<const char *>(t->raw());
    if (row) {
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + o * outRow + colOff, src + o * row, row);
    }
    colOff += row;
  }
  assert(colOff == outRow);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
enum class RedKind { Sum, Mean, Max };

void reduceImpl(const Tensor &in, ArrayRef<int64_t> axes, Tensor &out,
                RedKind kind) {
  size_t r = in.shape().size();
  std::vector<bool> reduced(r, false);
  for (int64_t a : axes)
    reduced[a] = true;
  // Merge adjacent dims with the same reduced flag.
  std::vector<int64_t> dims;
  std::vector<bool> red;
  for (size_t d = 0; d < r; ++d) {
    if (in.shape()[d] == 1)
      continue; // size-1 dims never matter
    if (!dims.empty() && red.back() == reduced[d]) {
      dims.back() *= in.shape()[d];
    } else {
      dims.push_back(in.shape()[d]);
      red.push_back(reduced[d]);
    }
  }
  int64_t outN = out.numel();
  int64_t redCount = 1;
  for (int64_t a : axes)
    redCount *= in.shape()[a];
  double init =
      kind == RedKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> acc(outN, init);
  const float *x = in.data<float>();
  int64_t total = in.numel();
  if (total > 0) {
    if (dims.empty()) {
      dims.push_back(1);
      red.push_back(false);
    }
    size_t m = dims.size();
    // Out strides for kept merged dims (row-major over kept), 0 for reduced.
    std::vector<int64_t> outStride(m, 0);
    int64_t s = 1;
    for (size_t d = m; d-- > 0;)
      if (!red[d]) {
        outStride[d] = s;
        s *= dims[d];
      }
    int64_t inner = dims[m - 1];
    bool innerReduced = red[m - 1];
    std::vector<int64_t> idx(m, 0);
    int64_t o = 0;
    bool isMax = kind == RedKind::Max;
    for (int64_t i = 0; i < total; i += inner) {
      const float *row = x + i;
      if (innerReduced) {
        double v = acc[o];
        if (isMax) {
          for (int64_t j = 0; j < inner; ++j)
            v = std::isnan(v) || v >= row[j] ? v : (double)row[j];
        } else {
          for (int64_t j = 0; j < inner; ++j)
            v += row[j];
        }
        acc[o] = v;
      } else {
        double *a = acc.data() + o;
        if (isMax) {
          for (int64_t j = 0; j < inner; ++j)
            a[j] = std::isnan(a[j]) || a[j] >= row[j] ? a[j] : (double)row[j];
        } else {
          for (int64_t j = 0; j < inner; ++j)
            a[j] += row[j];
        }
      }
      for (size_t d = m - 1; d-- > 0;) {
        o += outStride[d];
        if (++idx[d] < dims[d])
          break;
        o -= outStride[d] * dims[d];
        idx[d] = 0;
      }
    }
  }
  float *y = out.data<float>();
  double scale = kind == RedKind::Mean ? 1.0 / (double)redCount : 1.0;
  for (int64_t i = 0; i < outN; ++i)
    y[i] = static_cast<float>(kind == RedKind::Mean ? acc[i] * scale : acc[i]);
}
} // namespace

void cpu::reduceSum(const Tensor &in, ArrayRef<int64_t> axes, bool keepDim,
                    Tensor &out) {
  (void)keepDim;
  reduceImpl(in, axes, out, RedKind::Sum);
}
void cpu::reduceMean(const Tensor &in, ArrayRef<int64_t> axes, bool keepDim,
                     Tensor &out) {
  (void)keepDim;
  reduceImpl(in, axes, out, RedKind::Mean);
}
void cpu::reduceMax(const Tensor &in, ArrayRef<int64_t> axes, bool keepDim,
                    Tensor &out) {
  (void)keepDim;
  reduceImpl(in, axes, out, RedKind::Max);
}

void cpu::sumSquares(const Tensor &in, Tensor &out) {
  const float *x = in.data<float>();
  double acc = 0;
  for (int64_t i = 0, n = in.numel(); i < n; ++i)
    acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  out.data<float>()[0] = static_cast<float>(acc);
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

void cpu::matmul(const Tensor &a, const Tensor &b, bool transposeA,
                 bool transposeB, Tensor &out) {
  assert(a.rank() >= 2 && b.rank() >= 2 && out.rank() >= 2);
  int64_t M = transposeA ? a.dim(-1) : a.dim(-2);
  int64_t K = transposeA ? a.dim(-2) : a.dim(-1);
  int64_t N = transposeB ? b.dim(-2) : b.dim(-1);
  assert((transposeB ? b.dim(-1) : b.dim(-2)) == K && "matmul: K mismatch");
  assert(out.dim(-2) == M && out.dim(-1) == N);
  int64_t batchA = product(a.shape(), 0, a.rank() - 2);
  int64_t batchB = product(b.shape(), 0, b.rank() - 2);
  int64_t batch = product(out.shape(), 0, out.rank() - 2);
  (void)batchB;
  assert((batchA == batch || a.rank() == 2) &&
         (batchB == batch || b.rank() == 2));
  if (out.numel() == 0)
    return;
  float *c = out.data<float>();
  if (K == 0) {
    std::memset(c, 0, out.bytes());
    return;
  }
  const float *pa = a.data<float>();
  const float *pb = b.data<float>();
  CBLAS_TRANSPOSE ta = transposeA ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = transposeB ? CblasTrans : CblasNoTrans;
  int lda = static_cast<int>(transposeA ? M : K);
  int ldb = static_cast<int>(transposeB ? K : N);
  int ldc = static_cast<int>(N);
  if (b.rank() == 2 && !transposeA && batchA == batch) {
    // One sgemm over the flattened batch: [batch*M, K] x [K, N].
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(batch * M),
                static_cast<int>(N), static_cast<int>(K), 1.0f, pa, lda, pb,
                ldb, 0.0f, c, ldc);
    return;
  }
  int64_t strideA = a.rank() == 2 ? 0 : M * K;
  int64_t strideB = b.rank() == 2 ? 0 : K * N;
  for (int64_t i = 0; i < batch; ++i)
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), 1.0f, pa + i * strideA, lda,
                pb + i * strideB, ldb, 0.0f, c + i * M * N, ldc);
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

namespace {
llvm::Error badId(const char *op, int64_t id, int64_t index, int64_t v) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "%s: id %lld at index %lld is out of range [0, %lld)", op, (long long)id,
      (long long)index, (long long)v);
}
} // namespace

llvm::Error cpu::gather(const Tensor &table, const Tensor &ids, Tensor &out) {
  // The whole vocabulary is local: offset 0, every valid id in range.
  return gatherMasked(table, ids, /*offset=*/0, table.dim(0), out);
}

llvm::Error cpu::gatherGrad(const Tensor &ids, const Tensor &dy, Tensor &out) {
  return gatherGradMasked(ids, dy, /*offset=*/0, out.dim(0), out);
}

llvm::Error cpu::gatherMasked(const Tensor &table, const Tensor &ids,
                              int64_t offset, int64_t vocab, Tensor &out) {
  assert(ids.dtype() == DType::I64 && table.rank() >= 1);
  assert(out.dtype() == table.dtype());
  int64_t local = table.dim(0);
  size_t rowBytes =
      product(table.shape(), 1, table.rank()) * dtypeSize(table.dtype());
  const int64_t *id = ids.data<int64_t>();
  const char *src = static_cast<const char *>(table.raw());
  char *dst = static_cast<char *>(out.raw());
  int64_t n = ids.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = id[i];
    if (k < 0 || k >= vocab)
      return badId("gather", k, i, vocab);
    if (!rowBytes)
      continue;
    if (k >= offset && k < offset + local)
      std::memcpy(dst + i * rowBytes, src + (k - offset) * rowBytes, rowBytes);
    else
      std::memset(dst + i * rowBytes, 0, rowBytes);
  }
  return llvm::Error::success();
}

llvm::Error cpu::gatherGradMasked(const Tensor &ids, const Tensor &dy,
                                  int64_t offset, int64_t vocab, Tensor &out) {
  assert(ids.dtype() == DType::I64 && out.rank() >= 1);
  int64_t local = out.dim(0);
  int64_t row = product(out.shape(), 1, out.rank());
  float *o = out.data<float>();
  std::memset(o, 0, out.bytes());
  const int64_t *id = ids.data<int64_t>();
  const float *g = dy.data<float>();
  int64_t n = ids.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = id[i];
    if (k < 0 || k >= vocab)
      return badId("gather_grad", k, i, vocab);
    if (k < offset || k >= offset + local)
      continue;
    float *dst = o + (k - offset) * row;
    const float *src = g + i * row;
    for (int64_t j = 0; j < row; ++j)
      dst[j] += src[j];
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Normalisation and activations
//===----------------------------------------------------------------------===//

void cpu::layerNorm(const Tensor &x, const Tensor &gamma, const Tensor &beta,
                    int64_t axis, float epsilon, Tensor &out) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  assert(gamma.numel() == cols && beta.numel() == cols);
  const float *px = x.data<float>();
  const float *g = gamma.data<float>();
  const float *b = beta.data<float>();
  float *po = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double mean, rstd;
    vecmath::rowMeanRstd(px + r * cols, cols, epsilon, mean, rstd);
    vecmath::normalizeRow(px + r * cols, static_cast<float>(mean),
                          static_cast<float>(rstd), g, b, po + r * cols, cols);
  }
}

void cpu::layerNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                        int64_t axis, float epsilon, Tensor &dx, Tensor &dgamma,
                        Tensor &dbeta) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  const float *px = x.data<float>();
  const float *g = gamma.data<float>();
  const float *pdy = dy.data<float>();
  float *pdx = dx.data<float>();
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = px + r * cols;
    double mean, rstd;
    vecmath::rowMeanRstd(xr, cols, epsilon, mean, rstd);
    vecmath::layerNormGradRow(xr, g, pdy + r * cols, mean, rstd, pdx + r * cols,
                              dg.data(), db.data(), cols);
  }
  float *pdg = dgamma.data<float>();
  float *pdb = dbeta.data<float>();
  for (int64_t j = 0; j < cols; ++j) {
    pdg[j] = static_cast<float>(dg[j]);
    pdb[j] = static_cast<float>(db[j]);
  }
}

void cpu::rmsNorm(const Tensor &x, const Tensor &gamma, int64_t axis,
                  float epsilon, Tensor &out) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  assert(gamma.numel() == cols);
  const float *px = x.data<float>();
  const float *g = gamma.data<float>();
  float *po = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = px + r * cols;
    float fr = static_cast<float>(vecmath::rowRmsRstd(xr, cols, epsilon));
    vecmath::normalizeRow(xr, 0.0f, fr, g, /*beta=*/nullptr, po + r * cols,
                          cols);
  }
}

void cpu::rmsNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                      int64_t axis, float epsilon, Tensor &dx, Tensor &dgamma) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  const float *px = x.data<float>();
  const float *g = gamma.data<float>();
  const float *pdy = dy.data<float>();
  float *pdx = dx.data<float>();
  std::vector<double> dg(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = px + r * cols;
    double rstd = vecmath::rowRmsRstd(xr, cols, epsilon);
    vecmath::rmsNormGradRow(xr, g, pdy + r * cols, rstd, pdx + r * cols,
                            dg.data(), cols);
  }
  float *pdg = dgamma.data<float>();
  for (int64_t j = 0; j < cols; ++j)
    pdg[j] = static_cast<float>(dg[j]);
}

void cpu::softmax(const Tensor &x, int64_t axis, Tensor &out) {
  int64_t outer = product(x.shape(), 0, axis);
  int64_t d = x.shape()[axis];
  int64_t inner = product(x.shape(), axis + 1, x.rank());
  const float *px = x.data<float>();
  float *po = out.data<float>();
  if (inner == 1) {
    // The axis is innermost: contiguous rows.
    for (int64_t o = 0; o < outer; ++o)
      vecmath::softmaxRow(px + o * d, po + o * d, d);
    return;
  }
  std::vector<float> mx(inner);
  std::vector<double> sum(inner);
  for (int64_t o = 0; o < outer; ++o) {
    const float *xb = px + o * d * inner;
    float *yb = po + o * d * inner;
    std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t k = 0; k < d; ++k)
      for (int64_t j = 0; j < inner; ++j)
        mx[j] = std::max(mx[j], xb[k * inner + j]);
    for (int64_t k = 0; k < d; ++k) {
      float *yk = yb + k * inner;
      for (int64_t j = 0; j < inner; ++j)
        yk[j] = xb[k * inner + j] - mx[j];
      vecmath::exp(yk, yk, inner);
      for (int64_t j = 0; j < inner; ++j)
        sum[j] += yk[j];
    }
    for (int64_t j = 0; j < inner; ++j)
      mx[j] = static_cast<float>(1.0 / sum[j]); // reuse as 1/sum
    for (int64_t k = 0; k < d; ++k)
      for (int64_t j = 0; j < inner; ++j)
        yb[k * inner + j] *= mx[j];
  }
}

void cpu::softmaxGrad(const Tensor &y, const Tensor &dy, int64_t axis,
                      Tensor &dx) {
  int64_t outer = product(y.shape(), 0, axis);
  int64_t d = y.shape()[axis];
  int64_t inner = product(y.shape(), axis + 1, y.rank());
  const float *py = y.data<float>();
  const float *pdy = dy.data<float>();
  float *pdx = dx.data<float>();
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o)
      vecmath::softmaxGradRow(py + o * d, pdy + o * d, pdx + o * d, d);
    return;
  }
  std::vector<double> dot(inner);
  for (int64_t o = 0; o < outer; ++o) {
    size_t base = o * d * inner;
    std::fill(dot.begin(), dot.end(), 0.0);
    for (int64_t k = 0; k < d; ++k)
      for (int64_t j = 0; j < inner; ++j)
        dot[j] += (double)py[base + k * inner + j] * pdy[base + k * inner + j];
    for (int64_t k = 0; k < d; ++k)
      for (int64_t j = 0; j < inner; ++j) {
        size_t i = base + k * inner + j;
        pdx[i] = static_cast<float>(py[i] * (pdy[i] - dot[j]));
      }
  }
}

void cpu::reluGrad(const Tensor &x, const Tensor &dy, Tensor &dx) {
  const float *px = x.data<float>();
  const float *pdy = dy.data<float>();
  float *pdx = dx.data<float>();
  int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i)
    pdx[i] = px[i] > 0.0f ? pdy[i] : 0.0f;
}

void cpu::geluGrad(const Tensor &x, const Tensor &dy,
                   GeluApproximate approximate, Tensor &dx) {
  vecmath::geluGrad(x.data<float>(), dy.data<float>(), dx.data<float>(),
                    x.numel(), approximate != GeluApproximate::None);
}

void cpu::siluGrad(const Tensor &x, const Tensor &dy, Tensor &dx) {
  vecmath::siluGrad(x.data<float>(), dy.data<float>(), dx.data<float>(),
                    x.numel());
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

namespace {
llvm::Error badLabel(const char *op, int64_t label, int64_t row, int64_t v) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "%s: label %lld in row %lld is out of range [0, %lld)", op,
      (long long)label, (long long)row, (long long)v);
}

/// g = (exp(x - mx) / sumExp - [j == label]) * scale over one row of v
/// logits (label outside [0, v): no column gets the -1).
void crossEntropyGradRow(const float *x, int64_t v, int64_t label, float mx,
                         double sumExp, double scale, float *g) {
  vecmath::expScale(x, mx, static_cast<float>(scale / sumExp), g, v);
  if (label >= 0 && label < v)
    g[label] -= static_cast<float>(scale);
}
} // namespace

llvm::Error cpu::crossEntropy(const Tensor &logits, const Tensor &labels,
                              Tensor &out) {
  assert(logits.rank() == 2 && labels.dtype() == DType::I64);
  int64_t n = logits.dim(0), v = logits.dim(1);
  const float *x = logits.data<float>();
  const int64_t *lab = labels.data<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    int64_t l = lab[r];
    if (l < 0 || l >= v)
      return badLabel("cross_entropy", l, r, v);
    float mx;
    double lse = vecmath::logSumExp(x + r * v, v, mx);
    total += lse - x[r * v + l];
  }
  out.data<float>()[0] = static_cast<float>(total);
  return llvm::Error::success();
}

llvm::Error cpu::crossEntropyGrad(const Tensor &logits, const Tensor &labels,
                                  const Tensor &dloss, Tensor &dlogits) {
  assert(logits.rank() == 2 && labels.dtype() == DType::I64);
  int64_t n = logits.dim(0), v = logits.dim(1);
  const float *x = logits.data<float>();
  const int64_t *lab = labels.data<int64_t>();
  double scale = dloss.data<float>()[0];
  float *g = dlogits.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    int64_t l = lab[r];
    if (l < 0 || l >= v)
      return badLabel("cross_entropy_grad", l, r, v);
    // exp(x - max) into g, their sum, then g scaled in place: one exp per
    // logit.
    const float *xr = x + r * v;
    float *gr = g + r * v;
    float mx = vecmath::max(xr, v);
    double sumExp = vecmath::expSum(xr, mx, gr, v);
    vecmath::scale(gr, static_cast<float>(scale / sumExp), gr, v);
    gr[l] -= static_cast<float>(scale);
  }
  return llvm::Error::success();
}

void cpu::crossEntropyRowMax(const Tensor &logits, double *rowMax) {
  assert(logits.rank() == 2);
  int64_t n = logits.dim(0), v = logits.dim(1);
  const float *x = logits.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    rowMax[r] = vecmath::max(x + r * v, v);
  }
}

llvm::Error cpu::crossEntropyRowSums(const Tensor &logits, const Tensor &labels,
                                     int64_t offset, int64_t vocab,
                                     const double *rowMax, double *sumExp,
                                     double *target) {
  assert(logits.rank() == 2 && labels.dtype() == DType::I64);
  int64_t n = logits.dim(0), v = logits.dim(1);
  const float *x = logits.data<float>();
  const int64_t *lab = labels.data<int64_t>();
  for (int64_t r = 0; r < n; ++r) {
    int64_t l = lab[r];
    if (l < 0 || l >= vocab)
      return badLabel("cross_entropy", l, r, vocab);
    // The serial kernel subtracts the f32 max; rowMax holds it exactly.
    float mx = static_cast<float>(rowMax[r]);
    sumExp[r] = vecmath::expSum(x + r * v, mx, nullptr, v);
    if (target)
      target[r] = l >= offset && l < offset + v ? x[r * v + (l - offset)] : 0.0;
  }
  return llvm::Error::success();
}

void cpu::crossEntropyFromStats(int64_t rows, const double *rowMax,
                                const double *sumExp, const double *target,
                                Tensor &out) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float mx = static_cast<float>(rowMax[r]);
    double lse = std::log(sumExp[r]) + mx;
    total += lse - target[r];
  }
  out.data<float>()[0] = static_cast<float>(total);
}

void cpu::crossEntropyGradFromStats(const Tensor &logits, const Tensor &labels,
                                    int64_t offset, const double *rowMax,
                                    const double *sumExp, const Tensor &dloss,
                                    Tensor &dlogits) {
  int64_t n = logits.dim(0), v = logits.dim(1);
  const float *x = logits.data<float>();
  const int64_t *lab = labels.data<int64_t>();
  double scale = dloss.data<float>()[0];
  float *g = dlogits.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    int64_t l = lab[r] - offset; // local column of the label, maybe outside
    crossEntropyGradRow(x + r * v, v, l, static_cast<float>(rowMax[r]),
                        sumExp[r], scale, g + r * v);
  }
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

void cpu::sgdUpdate(const Tensor &p, const Tensor &g, double lr,
                    double weightDecay, Tensor &pOut) {
  const float *pp = p.data<float>();
  const float *pg = g.data<float>();
  float *po = pOut.data<float>();
  int64_t n = p.numel();
  float wd = static_cast<float>(weightDecay);
  float negLr = static_cast<float>(-lr);
  bool decay = weightDecay != 0.0;
  for (int64_t i = 0; i < n; ++i) {
    float gi = decay ? pg[i] + wd * pp[i] : pg[i];
    po[i] = pp[i] + negLr * gi;
  }
}

namespace {

/// The f32 per-step scalars of cpu::adamwUpdate, computed once per step.
struct AdamwScalars {
  float bc2Sqrt, decay, b1, oneMinusB1, b2, oneMinusB2, epsF, negStep;

  AdamwScalars(const Tensor &step, double lr, double beta1, double beta2,
               double eps, double weightDecay) {
    double t = static_cast<double>(step.data<float>()[0]);
    double bc1 = 1.0 - std::pow(beta1, t);
    double bc2 = 1.0 - std::pow(beta2, t);
    double stepSize = lr / bc1;
    bc2Sqrt = static_cast<float>(std::sqrt(bc2));
    decay = static_cast<float>(1.0 - lr * weightDecay);
    b1 = static_cast<float>(beta1);
    oneMinusB1 = static_cast<float>(1.0 - beta1);
    b2 = static_cast<float>(beta2);
    oneMinusB2 = static_cast<float>(1.0 - beta2);
    epsF = static_cast<float>(eps);
    negStep = static_cast<float>(-stepSize);
  }
};

/// One tensor's AdamW elements (the per-tensor and multi-tensor kernels
/// share this loop, so they agree bit for bit).
void adamwTensor(const AdamwScalars &c, const Tensor &p, const Tensor &g,
                 const Tensor &m, const Tensor &v, Tensor &pOut, Tensor &mOut,
                 Tensor &vOut) {
  const float *pp = p.data<float>(), *pg = g.data<float>();
  const float *pm = m.data<float>(), *pv = v.data<float>();
  float *po = pOut.data<float>(), *mo = mOut.data<float>(),
        *vo = vOut.data<float>();
  int64_t n = p.numel();
  for (int64_t i = 0; i < n; ++i) {
    float gi = pg[i];
    float pi = pp[i] * c.decay;
    float mi = pm[i] * c.b1 + c.oneMinusB1 * gi;
    float vi = pv[i] * c.b2 + c.oneMinusB2 * gi * gi;
    float denom = std::sqrt(vi) / c.bc2Sqrt + c.epsF;
    po[i] = pi + c.negStep * mi / denom;
    mo[i] = mi;
    vo[i] = vi;
  }
}

} // namespace

void cpu::adamwUpdate(const Tensor &p, const Tensor &g, const Tensor &m,
                      const Tensor &v, const Tensor &step, double lr,
                      double beta1, double beta2, double eps,
                      double weightDecay, Tensor &pOut, Tensor &mOut,
                      Tensor &vOut) {
  adamwTensor(AdamwScalars(step, lr, beta1, beta2, eps, weightDecay), p, g, m,
              v, pOut, mOut, vOut);
}

void cpu::adamwUpdateMulti(ArrayRef<const Tensor *> in, const Tensor &step,
                           double lr, double beta1, double beta2, double eps,
                           double weightDecay, MutableArrayRef<Tensor> out) {
  AdamwScalars c(step, lr, beta1, beta2, eps, weightDecay);
  size_t n = out.size() / 3;
  for (size_t i = 0; i < n; ++i)
    adamwTensor(c, *in[i], *in[n + i], *in[2 * n + i], *in[3 * n + i], out[i],
                out[n + i], out[2 * n + i]);
}

void cpu::sgdUpdateMulti(ArrayRef<const Tensor *> in, double lr,
                         double weightDecay, MutableArrayRef<Tensor> out) {
  size_t n = out.size();
  for (size_t i = 0; i < n; ++i)
    sgdUpdate(*in[i], *in[n + i], lr, weightDecay, out[i]);
}

void cpu::setBlasThreads(int numThreads) {
  openblas_set_num_threads(numThreads);
}

//===----------------------------------------------------------------------===//
// Residual add fused with a norm (tsr-fuse-norm)
//===----------------------------------------------------------------------===//
//
// One row at a time with the unfused kernels' row functions (VecMath.h), so
// the results are bit-equal to the add kernel followed by the norm (and to
// the norm gradient followed by the add): the sum is formed and normalized
// while the row is in cache.

namespace {
/// h = x + r over one row (as the add kernel).
void addRow(const float *x, const float *r, float *h, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    h[j] = x[j] + r[j];
}

/// dx += addend over one row (the callers pass a saved copy of the
/// addend's row when dx is its buffer).
void addAddendRow(float *dx, const float *addend, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    dx[j] += addend[j];
}
} // namespace

void cpu::addLayerNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                       const Tensor &beta, int64_t axis, float epsilon,
                       Tensor &sum, Tensor &out) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  assert(gamma.numel() == cols && beta.numel() == cols);
  const float *px = x.data<float>(), *pr = r.data<float>();
  const float *g = gamma.data<float>(), *b = beta.data<float>();
  float *ph = sum.data<float>(), *po = out.data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    float *hr = ph + i * cols;
    addRow(px + i * cols, pr + i * cols, hr, cols);
    double mean, rstd;
    vecmath::rowMeanRstd(hr, cols, epsilon, mean, rstd);
    vecmath::normalizeRow(hr, static_cast<float>(mean),
                          static_cast<float>(rstd), g, b, po + i * cols, cols);
  }
}

void cpu::addRmsNorm(const Tensor &x, const Tensor &r, const Tensor &gamma,
                     int64_t axis, float epsilon, Tensor &sum, Tensor &out) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  assert(gamma.numel() == cols);
  const float *px = x.data<float>(), *pr = r.data<float>();
  const float *g = gamma.data<float>();
  float *ph = sum.data<float>(), *po = out.data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    float *hr = ph + i * cols;
    addRow(px + i * cols, pr + i * cols, hr, cols);
    float fr = static_cast<float>(vecmath::rowRmsRstd(hr, cols, epsilon));
    vecmath::normalizeRow(hr, 0.0f, fr, g, /*beta=*/nullptr, po + i * cols,
                          cols);
  }
}

void cpu::layerNormGradAdd(const Tensor &x, const Tensor &gamma,
                           const Tensor &dy, const Tensor &addend, int64_t axis,
                           float epsilon, Tensor &dx, Tensor &dgamma,
                           Tensor &dbeta) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  const float *px = x.data<float>(), *g = gamma.data<float>();
  const float *pdy = dy.data<float>(), *pa = addend.data<float>();
  float *pdx = dx.data<float>();
  bool aliased = pdx == pa;
  std::vector<float> saved(aliased ? cols : 0);
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const float *xr = px + i * cols;
    const float *ar = pa + i * cols;
    if (aliased) {
      std::copy(ar, ar + cols, saved.begin());
      ar = saved.data();
    }
    double mean, rstd;
    vecmath::rowMeanRstd(xr, cols, epsilon, mean, rstd);
    vecmath::layerNormGradRow(xr, g, pdy + i * cols, mean, rstd, pdx + i * cols,
                              dg.data(), db.data(), cols);
    addAddendRow(pdx + i * cols, ar, cols);
  }
  float *pdg = dgamma.data<float>(), *pdb = dbeta.data<float>();
  for (int64_t j = 0; j < cols; ++j) {
    pdg[j] = static_cast<float>(dg[j]);
    pdb[j] = static_cast<float>(db[j]);
  }
}

void cpu::rmsNormGradAdd(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                         const Tensor &addend, int64_t axis, float epsilon,
                         Tensor &dx, Tensor &dgamma) {
  int64_t rows = product(x.shape(), 0, axis);
  int64_t cols = product(x.shape(), axis, x.rank());
  const float *px = x.data<float>(), *g = gamma.data<float>();
  const float *pdy = dy.data<float>(), *pa = addend.data<float>();
  float *pdx = dx.data<float>();
  bool aliased = pdx == pa;
  std::vector<float> saved(aliased ? cols : 0);
  std::vector<double> dg(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const float *xr = px + i * cols;
    const float *ar = pa + i * cols;
    if (aliased) {
      std::copy(ar, ar + cols, saved.begin());
      ar = saved.data();
    }
    double rstd = vecmath::rowRmsRstd(xr, cols, epsilon);
    vecmath::rmsNormGradRow(xr, g, pdy + i * cols, rstd, pdx + i * cols,
                            dg.data(), cols);
    addAddendRow(pdx + i * cols, ar, cols);
  }
  float *pdg = dgamma.data<float>();
  for (int64_t j = 0; j < cols; ++j)
    pdg[j] = static_cast<float>(dg[j]);
}

//===----------------------------------------------------------------------===//
// Fused linear layer
//===----------------------------------------------------------------------===//

namespace {

/// y[j] = act(c[j] + bias[j]) for one output row, the preactivation kept in
/// pre[j] when pre is not null (it may be c; y may be c too). The
/// activation is exactly cpu::gelu's, relu's and silu's: the same VecMath.h
/// row functions (relu's comparison inline).
void biasActivationRow(const float *c, const float *bias, int64_t n,
                       cpu::Activation act, float *pre, float *y) {
  float *sum = pre ? pre : y;
  for (int64_t j = 0; j < n; ++j)
    sum[j] = c[j] + bias[j];
  switch (act) {
  case cpu::Activation::None:
    if (sum != y)
      std::memcpy(y, sum, static_cast<size_t>(n) * sizeof(float));
    break;
  case cpu::Activation::Gelu:
  case cpu::Activation::GeluTanh:
    vecmath::gelu(sum, y, n, act == cpu::Activation::GeluTanh);
    break;
  case cpu::Activation::Relu:
    for (int64_t j = 0; j < n; ++j)
      y[j] = sum[j] < 0.0f ? 0.0f : sum[j];
    break;
  case cpu::Activation::Silu:
    vecmath::silu(sum, y, n);
    break;
  }
}

/// dx = dy * act'(x) for n contiguous elements, exactly cpu::reluGrad's,
/// geluGrad's and siluGrad's (the same VecMath.h row functions).
void activationGradRow(const float *x, const float *dy, cpu::Activation act,
                       float *dx, int64_t n) {
  switch (act) {
  case cpu::Activation::None:
    if (dx != dy)
      std::memcpy(dx, dy, static_cast<size_t>(n) * sizeof(float));
    break;
  case cpu::Activation::Relu:
    for (int64_t j = 0; j < n; ++j)
      dx[j] = x[j] > 0.0f ? dy[j] : 0.0f;
    break;
  case cpu::Activation::Gelu:
  case cpu::Activation::GeluTanh:
    vecmath::geluGrad(x, dy, dx, n, act == cpu::Activation::GeluTanh);
    break;
  case cpu::Activation::Silu:
    vecmath::siluGrad(x, dy, dx, n);
    break;
  }
}

} // namespace

void cpu::linear(const Tensor &a, const Tensor &b, const Tensor &bias,
                 bool transposeA, bool transposeB, Activation act, Tensor &out,
                 Tensor *preactivation) {
  assert(a.rank() >= 2 && b.rank() >= 2 && out.rank() >= 2);
  int64_t M = transposeA ? a.dim(-1) : a.dim(-2);
  int64_t K = transposeA ? a.dim(-2) : a.dim(-1);
  int64_t N = transposeB ? b.dim(-2) : b.dim(-1);
  assert((transposeB ? b.dim(-1) : b.dim(-2)) == K && "linear: K mismatch");
  assert(out.dim(-2) == M && out.dim(-1) == N && bias.numel() == N);
  assert(!preactivation || preactivation->shape() == out.shape());
  int64_t batch = product(out.shape(), 0, out.rank() - 2);
  if (out.numel() == 0)
    return;
  float *c = out.data<float>();
  float *pre = preactivation ? preactivation->data<float>() : nullptr;
  const float *pa = a.data<float>();
  const float *pb = b.data<float>();
  const float *pbias = bias.data<float>();
  CBLAS_TRANSPOSE ta = transposeA ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = transposeB ? CblasTrans : CblasNoTrans;
  int lda = static_cast<int>(transposeA ? M : K);
  int ldb = static_cast<int>(transposeB ? K : N);
  int ldc = static_cast<int>(N);
  // The GEMM of `rows` rows starting at a / out row offsets, then its
  // epilogue while the block is in cache. The product goes to the
  // preactivation when it is wanted, else to out (then activated in place).
  auto block = [&](const float *ablock, const float *bmat, int64_t rows,
                   int64_t outRow) {
    float *dst = (pre ? pre : c) + outRow * N;
    if (K == 0)
      std::memset(dst, 0, static_cast<size_t>(rows * N) * sizeof(float));
    else
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(rows),
                  static_cast<int>(N), static_cast<int>(K), 1.0f, ablock, lda,
                  bmat, ldb, 0.0f, dst, ldc);
    for (int64_t r = 0; r < rows; ++r)
      biasActivationRow(dst + r * N, pbias, N, act, pre ? dst + r * N : nullptr,
                        c + (outRow + r) * N);
  };
  int64_t blockRows =
      std::max<int64_t>(8, kLinearBlockBytes / (N * int64_t(sizeof(float))));
  if (b.rank() == 2 && !transposeA) {
    // The batch folded into the rows ([batch*M, K] x [K, N]), in blocks.
    int64_t rows = batch * M;
    for (int64_t r0 = 0; r0 < rows; r0 += blockRows)
      block(pa + r0 * K, pb, std::min(blockRows, rows - r0), r0);
    return;
  }
  int64_t strideA = a.rank() == 2 ? 0 : M * K;
  int64_t strideB = b.rank() == 2 ? 0 : K * N;
  for (int64_t i = 0; i < batch; ++i) {
    if (!transposeA) {
      for (int64_t r0 = 0; r0 < M; r0 += blockRows)
        block(pa + i * strideA + r0 * K, pb + i * strideB,
              std::min(blockRows, M - r0), i * M + r0);
    } else {
      // A transposed lhs's rows are columns of a: one GEMM per batch.
      block(pa + i * strideA, pb + i * strideB, M, i * M);
    }
  }
}

void cpu::biasActivationGrad(const Tensor &x, const Tensor &dy, Activation act,
                             Tensor &dx, Tensor &dbias) {
  assert(x.rank() >= 1 && x.shape() == dy.shape() && x.shape() == dx.shape());
  int64_t n = x.dim(-1);
  assert(dbias.numel() == n);
  int64_t rows = n ? x.numel() / n : 0;
  const float *px = x.data<float>();
  const float *pdy = dy.data<float>();
  float *pdx = dx.data<float>();
  float *pdb = dbias.data<float>();
  // Columns in chunks whose f64 sums stay on the stack; each chunk walks
  // every row (contiguous pieces of kChunk floats).
  constexpr int64_t kChunk = 512;
  double acc[kChunk];
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    int64_t w = std::min(kChunk, n - j0);
    std::fill(acc, acc + w, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t o = r * n + j0;
      activationGradRow(px + o, pdy + o, act, pdx + o, w);
      for (int64_t j = 0; j < w; ++j)
        acc[j] += pdx[o + j];
    }
    for (int64_t j = 0; j < w; ++j)
      pdb[j0 + j] = static_cast<float>(acc[j]);
  }
}

//===- ConstTensor.cpp - compile-time tensors for import folding ----------===//

#include "compiler/import/ConstTensor.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/APInt.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace mlir;

namespace tessera::import {

bool isFloatDType(int32_t dt) {
  return dt == kFloat || dt == kDouble || dt == kFloat16 || dt == kBFloat16;
}

Type dtypeToType(int32_t dt, MLIRContext *ctx) {
  switch (dt) {
  case kFloat:
    return Float32Type::get(ctx);
  case kDouble:
    return Float64Type::get(ctx);
  case kFloat16:
    return Float16Type::get(ctx);
  case kBFloat16:
    return BFloat16Type::get(ctx);
  case kBool:
    return IntegerType::get(ctx, 1);
  case kInt8:
  case kUInt8:
    return IntegerType::get(ctx, 8);
  case kInt16:
  case kUInt16:
    return IntegerType::get(ctx, 16);
  case kInt32:
  case kUInt32:
    return IntegerType::get(ctx, 32);
  case kInt64:
  case kUInt64:
    return IntegerType::get(ctx, 64);
  default:
    return nullptr;
  }
}

int32_t typeToDType(Type t) {
  if (t.isF32())
    return kFloat;
  if (t.isF64())
    return kDouble;
  if (t.isF16())
    return kFloat16;
  if (t.isBF16())
    return kBFloat16;
  if (auto it = dyn_cast<IntegerType>(t)) {
    switch (it.getWidth()) {
    case 1:
      return kBool;
    case 8:
      return it.isUnsigned() ? kUInt8 : kInt8;
    case 16:
      return it.isUnsigned() ? kUInt16 : kInt16;
    case 32:
      return it.isUnsigned() ? kUInt32 : kInt32;
    case 64:
      return it.isUnsigned() ? kUInt64 : kInt64;
    default:
      break;
    }
  }
  return kUndefined;
}

std::string dtypeName(int32_t dt) {
  switch (dt) {
  case kFloat:
    return "float";
  case kUInt8:
    return "uint8";
  case kInt8:
    return "int8";
  case kUInt16:
    return "uint16";
  case kInt16:
    return "int16";
  case kInt32:
    return "int32";
  case kInt64:
    return "int64";
  case kString:
    return "string";
  case kBool:
    return "bool";
  case kFloat16:
    return "float16";
  case kDouble:
    return "double";
  case kUInt32:
    return "uint32";
  case kUInt64:
    return "uint64";
  case kBFloat16:
    return "bfloat16";
  default:
    return "data type " + std::to_string(dt);
  }
}

int64_t numElements(llvm::ArrayRef<int64_t> shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > limit / d)
      return -1;
    n *= d;
  }
  return n;
}

static double roundVia(double v, const llvm::fltSemantics &sem) {
  llvm::APFloat ap(v);
  bool lost = false;
  ap.convert(sem, llvm::APFloat::rmNearestTiesToEven, &lost);
  ap.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
             &lost);
  return ap.convertToDouble();
}

double roundToDType(double v, int32_t dt) {
  switch (dt) {
  case kFloat:
    return static_cast<double>(static_cast<float>(v));
  case kFloat16:
    return roundVia(v, llvm::APFloat::IEEEhalf());
  case kBFloat16:
    return roundVia(v, llvm::APFloat::BFloat());
  default:
    return v;
  }
}

int64_t wrapToDType(int64_t v, int32_t dt) {
  switch (dt) {
  case kBool:
    return v != 0;
  case kInt8:
    return static_cast<int8_t>(v);
  case kUInt8:
    return static_cast<uint8_t>(v);
  case kInt16:
    return static_cast<int16_t>(v);
  case kUInt16:
    return static_cast<uint16_t>(v);
  case kInt32:
    return static_cast<int32_t>(v);
  case kUInt32:
    return static_cast<uint32_t>(v);
  default:
    return v;
  }
}

int64_t saturatingToInt(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 9.2233720368547758e18)
    return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

int64_t ConstTensor::getI(int64_t k) const {
  return isFloat() ? saturatingToInt(f[k]) : i[k];
}

void ConstTensor::push(double v) {
  if (isFloat())
    f.push_back(roundToDType(v, dtype));
  else if (dtype == kBool)
    i.push_back(v != 0.0);
  else
    i.push_back(wrapToDType(saturatingToInt(v), dtype));
}

void ConstTensor::pushInt(int64_t v) {
  if (isFloat())
    f.push_back(roundToDType(static_cast<double>(v), dtype));
  else
    i.push_back(wrapToDType(v, dtype));
}

void ConstTensor::resize(int64_t n) {
  if (isFloat())
    f.assign(n, 0.0);
  else
    i.assign(n, 0);
}

void ConstTensor::copyFrom(const ConstTensor &from, int64_t src, int64_t dst) {
  if (isFloat())
    f[dst] = from.getF(src);
  else
    i[dst] = from.getI(src);
}

ConstTensor ConstTensor::ints(llvm::ArrayRef<int64_t> values, Shape shape,
                              int32_t dtype) {
  ConstTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  for (int64_t v : values)
    t.pushInt(v);
  return t;
}

ConstTensor ConstTensor::scalarF(double v, int32_t dtype) {
  ConstTensor t;
  t.dtype = dtype;
  t.push(v);
  return t;
}

bool ConstTensor::isSplat() const {
  if (isFloat()) {
    for (size_t k = 1; k < f.size(); ++k)
      if (!(f[k] == f[0] && std::signbit(f[k]) == std::signbit(f[0])) &&
          !(std::isnan(f[k]) && std::isnan(f[0])))
        return false;
    return true;
  }
  for (size_t k = 1; k < i.size(); ++k)
    if (i[k] != i[0])
      return false;
  return true;
}

DenseElementsAttr ConstTensor::toAttr(MLIRContext *ctx) const {
  Type elem = dtypeToType(dtype, ctx);
  if (!elem || numElements(shape) != size())
    return {};
  auto type = RankedTensorType::get(shape, elem);
  auto elementAttr = [&](int64_t k) -> Attribute {
    if (isFloat())
      return FloatAttr::get(elem, f[k]);
    return IntegerAttr::get(elem, llvm::APInt(elem.getIntOrFloatBitWidth(),
                                              static_cast<uint64_t>(i[k]),
                                              /*isSigned=*/true,
                                              /*implicitTrunc=*/true));
  };
  if (size() == 0)
    return DenseElementsAttr::get(type, llvm::ArrayRef<Attribute>{});
  if (isSplat())
    return DenseElementsAttr::get(type, elementAttr(0));
  switch (dtype) {
  case kFloat: {
    std::vector<float> data(f.begin(), f.end());
    return DenseElementsAttr::get(type, llvm::ArrayRef<float>(data));
  }
  case kDouble:
    return DenseElementsAttr::get(type, llvm::ArrayRef<double>(f));
  case kBool: {
    llvm::SmallVector<bool> data;
    for (int64_t v : i)
      data.push_back(v != 0);
    return DenseElementsAttr::get(type, llvm::ArrayRef<bool>(data));
  }
  case kInt64:
  case kUInt64:
    return DenseElementsAttr::get(type, llvm::ArrayRef<int64_t>(i));
  default: {
    llvm::SmallVector<Attribute> attrs;
    attrs.reserve(size());
    for (int64_t k = 0; k < size(); ++k)
      attrs.push_back(elementAttr(k));
    return DenseElementsAttr::get(type, attrs);
  }
  }
}

std::optional<Shape> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                     llvm::ArrayRef<int64_t> b) {
  for (int64_t d : a)
    if (d < 0)
      return std::nullopt;
  for (int64_t d : b)
    if (d < 0)
      return std::nullopt;
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (size_t k = 0; k < rank; ++k) {
    int64_t da = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    int64_t db = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    if (da == db || db == 1)
      out[k] = da;
    else if (da == 1)
      out[k] = db;
    else
      return std::nullopt;
  }
  return out;
}

Shape stridesOf(llvm::ArrayRef<int64_t> shape) {
  Shape strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

std::vector<int64_t> broadcastIndices(llvm::ArrayRef<int64_t> in,
                                      llvm::ArrayRef<int64_t> out) {
  int64_t n = numElements(out);
  std::vector<int64_t> result(n > 0 ? n : 0, 0);
  size_t offset = out.size() - in.size();
  Shape inStrides = stridesOf(in);
  Shape idx(out.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t src = 0;
    for (size_t d = 0; d < in.size(); ++d)
      if (in[d] != 1)
        src += idx[d + offset] * inStrides[d];
    result[e] = src;
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      if (++idx[d] < out[d])
        break;
      idx[d] = 0;
    }
  }
  return result;
}

namespace {
template <typename T> T readLE(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
} // namespace

int64_t dtypeBytes(int32_t dt) {
  switch (dt) {
  case kBool:
  case kInt8:
  case kUInt8:
    return 1;
  case kInt16:
  case kUInt16:
  case kFloat16:
  case kBFloat16:
    return 2;
  case kInt32:
  case kUInt32:
  case kFloat:
    return 4;
  case kInt64:
  case kUInt64:
  case kDouble:
    return 8;
  default:
    return 0;
  }
}

double halfBitsToDouble(uint16_t bits, int32_t dt) {
  llvm::APInt ap(16, bits);
  llvm::APFloat f(dt == kBFloat16 ? llvm::APFloat::BFloat()
                                  : llvm::APFloat::IEEEhalf(),
                  ap);
  bool lost = false;
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &lost);
  return f.convertToDouble();
}

ConstTensor decodeTensor(int32_t dtype, ArrayRef<int64_t> dims,
                         ArrayRef<char> raw) {
  ConstTensor c;
  c.dtype = dtype;
  c.shape = Shape(dims);
  int64_t bytes = dtypeBytes(dtype);
  int64_t n = bytes ? static_cast<int64_t>(raw.size()) / bytes : 0;
  const char *p = raw.data();
  for (int64_t k = 0; k < n; ++k, p += bytes) {
    switch (dtype) {
    case kFloat:
      c.push(readLE<float>(p));
      break;
    case kDouble:
      c.push(readLE<double>(p));
      break;
    case kFloat16:
    case kBFloat16:
      c.push(halfBitsToDouble(readLE<uint16_t>(p), dtype));
      break;
    case kBool:
    case kUInt8:
      c.pushInt(readLE<uint8_t>(p));
      break;
    case kInt8:
      c.pushInt(readLE<int8_t>(p));
      break;
    case kInt16:
      c.pushInt(readLE<int16_t>(p));
      break;
    case kUInt16:
      c.pushInt(readLE<uint16_t>(p));
      break;
    case kInt32:
      c.pushInt(readLE<int32_t>(p));
      break;
    case kUInt32:
      c.pushInt(readLE<uint32_t>(p));
      break;
    default:
      c.pushInt(readLE<int64_t>(p));
      break;
    }
  }
  return c;
}

} // namespace tessera::import

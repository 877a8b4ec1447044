//===- ConstTensor.h - compile-time tensors for import folding --*- C++ -*-===//
//
// A small host tensor the importer uses to evaluate shape subgraphs (Shape →
// Gather → Add → Div → Mul → Slice bounds, Range, ConstantOfShape, ...) at
// import time. Element types are ONNX TensorProto data types; floating-point
// values are held as doubles (rounded to the element type after every op),
// integer and bool values as int64.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_CONSTTENSOR_H
#define TESSERA_COMPILER_IMPORT_CONSTTENSOR_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::import {

using Shape = llvm::SmallVector<int64_t, 4>;

/// ONNX TensorProto::DataType values used here (kept numeric so this header
/// does not need the protobuf headers).
enum DType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

bool isFloatDType(int32_t dt);
/// The element type Tessera uses for an ONNX data type, or null.
mlir::Type dtypeToType(int32_t dt, mlir::MLIRContext *ctx);
/// Inverse of dtypeToType (kUndefined when unknown).
int32_t typeToDType(mlir::Type t);
std::string dtypeName(int32_t dt);

/// Number of elements, or -1 on a negative dim / overflow past `limit`.
int64_t numElements(llvm::ArrayRef<int64_t> shape, int64_t limit = int64_t(1)
                                                                   << 40);

/// Largest tensor the importer evaluates on the host.
constexpr int64_t kMaxFoldElements = int64_t(1) << 24;

struct ConstTensor {
  int32_t dtype = kFloat;
  Shape shape;
  std::vector<double> f;  ///< floating-point dtypes
  std::vector<int64_t> i; ///< integer and bool dtypes

  bool isFloat() const { return isFloatDType(dtype); }
  int64_t size() const {
    return isFloat() ? static_cast<int64_t>(f.size())
                     : static_cast<int64_t>(i.size());
  }
  double getF(int64_t k) const {
    return isFloat() ? f[k] : static_cast<double>(i[k]);
  }
  int64_t getI(int64_t k) const;
  /// Appends `v` converted to this tensor's dtype (rounding, wrapping).
  void push(double v);
  void pushInt(int64_t v);
  /// Allocates storage for `n` elements (zero) of this dtype.
  void resize(int64_t n);
  /// Copies element `src` of `from` (same dtype) to slot `dst`.
  void copyFrom(const ConstTensor &from, int64_t src, int64_t dst);

  static ConstTensor ints(llvm::ArrayRef<int64_t> values, Shape shape,
                          int32_t dtype = kInt64);
  static ConstTensor scalarF(double v, int32_t dtype = kFloat);

  /// True when every element is equal (or there are none).
  bool isSplat() const;
  /// The MLIR attribute for this tensor (a splat when possible), or null
  /// when the dtype has no Tessera element type.
  mlir::DenseElementsAttr toAttr(mlir::MLIRContext *ctx) const;
};

/// Bytes per element of `dt` as TensorProto stores it little-endian in
/// raw_data (0 for types Tessera has no element type for).
int64_t dtypeBytes(int32_t dt);

/// The value of a float16 (`dt` kFloat16) or bfloat16 (kBFloat16) bit
/// pattern.
double halfBitsToDouble(uint16_t bits, int32_t dt);

/// The tensor of `dtype` and `dims` whose elements are `raw`: TensorProto's
/// little-endian raw_data layout, dtypeBytes(dtype) bytes each (bool and
/// 8-bit types one byte, UINT64 kept as its int64 bit pattern). Reads
/// raw.size() / dtypeBytes(dtype) elements.
ConstTensor decodeTensor(int32_t dtype, llvm::ArrayRef<int64_t> dims,
                         llvm::ArrayRef<char> raw);

/// Rounds `v` to what an element of `dt` can hold.
double roundToDType(double v, int32_t dt);
int64_t wrapToDType(int64_t v, int32_t dt);
/// Float -> int64 without undefined behaviour: truncates toward zero, NaN is
/// 0, values outside the int64 range saturate.
int64_t saturatingToInt(double v);

/// Numpy multidirectional broadcast of two shapes.
std::optional<Shape> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                     llvm::ArrayRef<int64_t> b);
/// For each element of `out` (row-major), the index of the element of a
/// tensor of shape `in` that broadcasts to it. `in` must broadcast to `out`.
std::vector<int64_t> broadcastIndices(llvm::ArrayRef<int64_t> in,
                                      llvm::ArrayRef<int64_t> out);
/// Row-major strides.
Shape stridesOf(llvm::ArrayRef<int64_t> shape);

} // namespace tessera::import

#endif // TESSERA_COMPILER_IMPORT_CONSTTENSOR_H

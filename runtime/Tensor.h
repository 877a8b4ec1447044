//===- Tensor.h - Owning dense tensor for the Tessera runtime ---*- C++ -*-===//
//
// A `Tensor` is a dense, contiguous, row-major buffer with a dtype and a
// shape. Storage is reference counted: copies of a Tensor (and `reshape`)
// share the same bytes; `clone` makes a deep copy. Rank 0 is a scalar with
// one element. Buffers are 64-byte aligned.
//
// The runtime library is free of MLIR and LLVM dependencies at this level.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_TENSOR_H
#define TESSERA_RUNTIME_TENSOR_H

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tessera {
namespace runtime {

/// Element types. `I1` (booleans) is stored as one uint8_t per element holding
/// 0 or 1.
enum class DType { F32, I64, I1 };

/// Size in bytes of one element of `dtype` (4, 8, 1).
size_t dtypeSize(DType dtype);

/// Short name: "f32", "i64", "i1".
const char *dtypeName(DType dtype);

/// Maps a C++ element type to its DType (float, int64_t, uint8_t).
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <> struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64;
};
template <> struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::I1;
};

/// Number of elements of a shape (1 for rank 0). Dims must be >= 0.
int64_t shapeNumel(const std::vector<int64_t> &shape);

/// "[2, 3, 4]" for diagnostics.
std::string shapeToString(const std::vector<int64_t> &shape);

/// Owning, contiguous, row-major tensor. A default-constructed Tensor is
/// "null" (`isNull()`), with no storage.
class Tensor {
public:
  Tensor() = default;

  /// Uninitialised tensor of `shape` (all dims >= 0).
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  /// Zero-filled tensor of `shape`.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  /// Tensor of `shape` holding a copy of `values` (values.size() must equal
  /// the shape's element count). T is float, int64_t or uint8_t.
  template <typename T>
  static Tensor fromVector(std::vector<int64_t> shape,
                           const std::vector<T> &values) {
    Tensor t = empty(DTypeOf<T>::value, std::move(shape));
    assert(static_cast<int64_t>(values.size()) == t.numel());
    for (size_t i = 0; i < values.size(); ++i)
      t.data<T>()[i] = values[i];
    return t;
  }
  /// Rank-0 f32 tensor.
  static Tensor scalar(float value) { return fromVector<float>({}, {value}); }
  /// Non-owning view of external memory (`data` must stay alive, or be kept
  /// alive by `keepAlive`, as long as any Tensor sharing it). `data` must be
  /// suitably aligned for `dtype`.
  static Tensor view(void *data, DType dtype, std::vector<int64_t> shape,
                     std::shared_ptr<void> keepAlive = nullptr);

  bool isNull() const { return !storage; }
  DType dtype() const { return type; }
  const std::vector<int64_t> &shape() const { return dims; }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  /// Size of dimension `i`; negative `i` counts from the end.
  int64_t dim(int64_t i) const {
    return dims[static_cast<size_t>(i < 0 ? i + rank() : i)];
  }
  int64_t numel() const { return count; }
  size_t bytes() const { return static_cast<size_t>(count) * dtypeSize(type); }

  void *raw() { return ptr; }
  const void *raw() const { return ptr; }
  /// Typed element pointer; T must match dtype (float / int64_t / uint8_t).
  template <typename T> T *data() {
    assert(DTypeOf<T>::value == type && "Tensor::data<T>: dtype mismatch");
    return static_cast<T *>(ptr);
  }
  template <typename T> const T *data() const {
    assert(DTypeOf<T>::value == type && "Tensor::data<T>: dtype mismatch");
    return static_cast<const T *>(ptr);
  }

  /// Same storage, new shape (element counts must match). O(1).
  Tensor reshape(std::vector<int64_t> newShape) const;
  /// Deep copy into fresh storage.
  Tensor clone() const;
  /// True when both tensors use the same bytes.
  bool sharesStorageWith(const Tensor &other) const {
    return ptr && ptr == other.ptr;
  }

private:
  std::shared_ptr<void> storage;
  void *ptr = nullptr;
  DType type = DType::F32;
  std::vector<int64_t> dims;
  int64_t count = 0;
};

} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_TENSOR_H

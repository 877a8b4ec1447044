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
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tessera {
namespace runtime {

/// Element types. `I1` (booleans) is stored as one uint8_t per element holding
/// 0 or 1. `BF16` (bfloat16: the upper 16 bits of an IEEE f32) is stored as
/// one `BFloat16` (uint16_t bits) per element; `F16` (IEEE binary16 half:
/// 1 sign, 5 exponent, 10 mantissa bits) as one `Float16` (uint16_t bits).
enum class DType { F32, I64, I1, BF16, F16 };

/// Size in bytes of one element of `dtype` (4, 8, 1, 2, 2).
size_t dtypeSize(DType dtype);

/// True for the 16-bit float types (BF16, F16) that kernels compute on
/// through their f32 code (exact widening, results rounded back).
inline bool isFloat16Bit(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16;
}

/// Short name: "f32", "i64", "i1", "bf16", "f16".
const char *dtypeName(DType dtype);

/// One bfloat16 value (its bits). Convert with toBFloat16 / toFloat.
struct BFloat16 {
  uint16_t bits = 0;
};

/// f32 -> bf16, rounding to nearest, ties to even (as torch and the
/// hardware do); infinities stay infinite, NaN stays a (quiet) NaN, values
/// beyond the largest bf16 round to infinity.
inline BFloat16 toBFloat16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, make it quiet
    return BFloat16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

/// bf16 -> f32 (exact).
inline float toFloat(BFloat16 value) {
  uint32_t u = static_cast<uint32_t>(value.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

/// One IEEE binary16 (fp16) value (its bits). Convert with toFloat16 /
/// toFloat.
struct Float16 {
  uint16_t bits = 0;
};

/// f32 -> f16, rounding to nearest, ties to even (IEEE 754, as torch and
/// the hardware do). Magnitudes from 65520 (half-way past the largest
/// finite f16, 65504) round to infinity; magnitudes below 2^-14 become f16
/// subnormals (multiples of 2^-24), and those up to 2^-25 (a tie, to even)
/// round to a signed zero. Infinities stay infinite; NaN stays a quiet NaN
/// with its sign. Used by fp16 mixed precision (Micikevicius et al., 2018),
/// whose loss scaling exists because of this narrow range.
inline Float16 toFloat16(float value) {
  uint32_t u;
  std::memcpy(&u, &value, sizeof(u));
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN: keep the sign and top payload bits, quiet
    return Float16{
        static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
  if (a >= 0x477ff000u) // >= 65520 (or inf): infinity
    return Float16{static_cast<uint16_t>(sign | 0x7c00u)};
  if (a >= 0x38800000u) { // normal f16 (>= 2^-14): rebias 127 -> 15
    a -= 0x38000000u;
    a += 0xfffu + ((a >> 13) & 1u); // round to nearest even; may carry
    return Float16{static_cast<uint16_t>(sign | (a >> 13))};
  }
  if (a < 0x33000000u) // below 2^-25: rounds to zero
    return Float16{sign};
  // Subnormal: the result is m * 2^-24 with m = mantissa >> shift, rounded.
  uint32_t exp = a >> 23; // 102..112
  uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp; // 14..24
  uint32_t m = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (m & 1u)))
    ++m; // 0x400 is the smallest normal: still right
  return Float16{static_cast<uint16_t>(sign | m)};
}

/// f16 -> f32 (exact, subnormals, infinities and NaN included).
inline float toFloat(Float16 value) {
  uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  uint32_t exp = (value.bits >> 10) & 0x1fu, mant = value.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    float f = static_cast<float>(mant) * 0x1p-24f; // exact (subnormal or 0)
    std::memcpy(&u, &f, sizeof(u));
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

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
template <> struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::BF16;
};
template <> struct DTypeOf<Float16> {
  static constexpr DType value = DType::F16;
};

/// Number of elements of a shape (1 for rank 0). Dims must be >= 0.
int64_t shapeNumel(const std::vector<int64_t> &shape);

/// "[2, 3, 4]" for diagnostics.
std::string shapeToString(const std::vector<int64_t> &shape);

/// Heap accounting of Tensor::empty / zeros / clone / fromVector (the bytes
/// actually allocated: element bytes rounded up to 64, at least 64; views are
/// not counted). Process-wide, thread-safe.
/// Bytes currently allocated.
int64_t heapBytesLive();
/// Largest heapBytesLive() since the last resetHeapBytesPeak().
int64_t heapBytesPeak();
/// Sets the peak to the current live bytes.
void resetHeapBytesPeak();
/// Tensor storage allocations (Tensor::empty / zeros and what is built on
/// them, e.g. the CPU backend's allocate) since the process started.
int64_t heapAllocations();

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

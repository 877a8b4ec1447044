//===- TensorProtoBytes.h - the bytes of an inline TensorProto --*- C++ -*-===//
//
// ONNX stores a tensor's values either in `raw_data` (little-endian element
// bytes) or in a typed field chosen by its data type (float_data,
// double_data, int64_data, uint64_data, or int32_data for every type of 32
// bits or fewer, float16/bfloat16 as their bit patterns). The importer and
// tessera-eval read both through inlineTensorBytes, and decode the bytes
// with decodeTensor (ConstTensor.h). External data: ExternalData.h.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_TENSORPROTOBYTES_H
#define TESSERA_COMPILER_IMPORT_TENSORPROTOBYTES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstring>
#include <vector>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace tessera::import {

/// Appends `v`'s bytes (little-endian on the hosts Tessera runs on).
template <typename T> void appendLE(std::vector<char> &out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.insert(out.end(), buf, buf + sizeof(T));
}

/// The `elements` elements of `t`'s inline data as little-endian bytes, in
/// raw_data's layout (dtypeBytes(t.data_type()) bytes each): raw_data
/// itself, or the typed field re-encoded into `scratch`. Errors, each
/// starting "`what` 'name'": an unsupported data type, or a raw_data size
/// or typed-field count that differs from `elements`.
llvm::Expected<llvm::ArrayRef<char>>
inlineTensorBytes(const onnx::TensorProto &t, llvm::StringRef what,
                  int64_t elements, std::vector<char> &scratch);

} // namespace tessera::import

#endif // TESSERA_COMPILER_IMPORT_TENSORPROTOBYTES_H

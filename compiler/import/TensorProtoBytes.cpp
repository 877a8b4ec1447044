//===- TensorProtoBytes.cpp - the bytes of an inline TensorProto ----------===//

#include "compiler/import/TensorProtoBytes.h"
#include "compiler/import/ConstTensor.h"

#include "llvm/ADT/Twine.h"

#include <onnx/onnx_pb.h>

namespace tessera::import {

llvm::Expected<llvm::ArrayRef<char>>
inlineTensorBytes(const onnx::TensorProto &t, llvm::StringRef what,
                  int64_t elements, std::vector<char> &scratch) {
  auto error = [&](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + " '" + t.name() + "' " + msg);
  };
  int32_t dt = t.data_type();
  int64_t bytes = dtypeBytes(dt);
  if (!bytes)
    return error("has unsupported type " + dtypeName(dt));
  if (t.has_raw_data()) {
    const std::string &raw = t.raw_data();
    if (static_cast<int64_t>(raw.size()) != elements * bytes)
      return error("has " + llvm::Twine(raw.size()) +
                   " bytes of raw_data, expected " +
                   llvm::Twine(elements * bytes));
    return llvm::ArrayRef<char>(raw.data(), raw.size());
  }
  auto count = [&](int64_t have) -> llvm::Error {
    if (have != elements)
      return error("has " + llvm::Twine(have) + " data elements, expected " +
                   llvm::Twine(elements));
    return llvm::Error::success();
  };
  scratch.clear();
  scratch.reserve(elements * bytes);
  switch (dt) {
  case kFloat:
    if (llvm::Error e = count(t.float_data_size()))
      return std::move(e);
    for (float v : t.float_data())
      appendLE(scratch, v);
    break;
  case kDouble:
    if (llvm::Error e = count(t.double_data_size()))
      return std::move(e);
    for (double v : t.double_data())
      appendLE(scratch, v);
    break;
  case kInt64:
    if (llvm::Error e = count(t.int64_data_size()))
      return std::move(e);
    for (int64_t v : t.int64_data())
      appendLE(scratch, v);
    break;
  case kUInt32:
    if (llvm::Error e = count(t.uint64_data_size()))
      return std::move(e);
    for (uint64_t v : t.uint64_data())
      appendLE(scratch, static_cast<uint32_t>(v));
    break;
  case kUInt64:
    if (llvm::Error e = count(t.uint64_data_size()))
      return std::move(e);
    for (uint64_t v : t.uint64_data())
      appendLE(scratch, v);
    break;
  default: // int32_data holds every type of 32 bits or fewer
    if (llvm::Error e = count(t.int32_data_size()))
      return std::move(e);
    for (int32_t v : t.int32_data()) {
      if (bytes == 1)
        appendLE(scratch, static_cast<uint8_t>(v));
      else if (bytes == 2)
        appendLE(scratch, static_cast<uint16_t>(v));
      else
        appendLE(scratch, v);
    }
    break;
  }
  return llvm::ArrayRef<char>(scratch.data(), scratch.size());
}

} // namespace tessera::import

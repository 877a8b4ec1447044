//===- ExternalData.cpp - ONNX external tensor data -----------------------===//

#include "compiler/import/ExternalData.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

namespace tessera::import {

namespace {
llvm::Error error(const std::string &tensor, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "initializer '" + tensor + "': " + msg);
}

/// A non-negative decimal integer, or nullopt.
std::optional<uint64_t> parseCount(llvm::StringRef s) {
  uint64_t v = 0;
  if (s.empty() || s.getAsInteger(10, v))
    return std::nullopt;
  return v;
}
} // namespace

ExternalDataReader::ExternalDataReader(std::string modelDir)
    : modelDir(std::move(modelDir)) {}

bool ExternalDataReader::isExternal(const onnx::TensorProto &t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL ||
         t.external_data_size() > 0;
}

llvm::Expected<std::shared_ptr<const llvm::MemoryBuffer>>
ExternalDataReader::open(const std::string &tensor, llvm::StringRef location) {
  if (auto it = files.find(location); it != files.end())
    return it->second;
  if (modelDir.empty())
    return error(tensor, "uses external data ('" + location +
                             "') but the model was not read from a file, so "
                             "there is no folder to find it in");
  if (llvm::sys::path::is_absolute(location))
    return error(tensor, "external data location '" + location +
                             "' is an absolute path; ONNX locations are "
                             "relative to the model's folder");
  if (realModelDir.empty()) {
    llvm::SmallString<256> real;
    if (std::error_code ec = llvm::sys::fs::real_path(modelDir, real))
      return error(tensor, "cannot resolve the model's folder '" + modelDir +
                               "': " + ec.message());
    realModelDir = real.str().str();
  }
  llvm::SmallString<256> path(modelDir);
  llvm::sys::path::append(path, location);
  llvm::SmallString<256> real;
  if (std::error_code ec = llvm::sys::fs::real_path(path, real))
    return error(tensor, "cannot open external data file '" + path +
                             "': " + ec.message());
  llvm::StringRef sep = llvm::sys::path::get_separator();
  if (!llvm::StringRef(real).starts_with(realModelDir + sep.str()))
    return error(tensor, "external data location '" + location +
                             "' escapes the model's folder '" + modelDir + "'");
  llvm::sys::fs::file_status st;
  if (std::error_code ec = llvm::sys::fs::status(real, st))
    return error(tensor, "cannot open external data file '" + path +
                             "': " + ec.message());
  if (!llvm::sys::fs::is_regular_file(st))
    return error(tensor,
                 "external data file '" + path + "' is not a regular file");
  auto buffer = llvm::MemoryBuffer::getFile(real, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return error(tensor, "cannot read external data file '" + path +
                             "': " + buffer.getError().message());
  std::shared_ptr<const llvm::MemoryBuffer> shared(std::move(*buffer));
  files[location] = shared;
  return shared;
}

llvm::Expected<TensorBytes> ExternalDataReader::read(const onnx::TensorProto &t,
                                                     int64_t size) {
  std::string location;
  std::optional<uint64_t> offset = 0, length;
  bool haveLocation = false;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
      haveLocation = true;
    } else if (kv.key() == "offset") {
      offset = parseCount(kv.value());
      if (!offset)
        return error(t.name(), "external data offset '" + kv.value() +
                                   "' is not a non-negative integer");
    } else if (kv.key() == "length") {
      length = parseCount(kv.value());
      if (!length)
        return error(t.name(), "external data length '" + kv.value() +
                                   "' is not a non-negative integer");
    }
  }
  if (!haveLocation || location.empty())
    return error(t.name(), "external data has no 'location'");
  if (length && *length != static_cast<uint64_t>(size))
    return error(t.name(), "external data length " + llvm::Twine(*length) +
                               " differs from the tensor's " +
                               llvm::Twine(size) + " bytes");
  auto file = open(t.name(), location);
  if (!file)
    return file.takeError();
  uint64_t have = (*file)->getBufferSize();
  if (*offset > have || static_cast<uint64_t>(size) > have - *offset)
    return error(t.name(), "external data file '" + location + "' has " +
                               llvm::Twine(have) +
                               " bytes; the tensor needs "
                               "bytes [" +
                               llvm::Twine(*offset) + ", " +
                               llvm::Twine(*offset + size) + ")");
  TensorBytes out;
  out.bytes = llvm::ArrayRef<char>((*file)->getBufferStart() + *offset, size);
  out.owner = *file;
  return out;
}

} // namespace tessera::import

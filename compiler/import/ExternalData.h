//===- ExternalData.h - ONNX external tensor data ---------------*- C++ -*-===//
//
// ONNX lets a TensorProto keep its bytes in a separate file
// (data_location = EXTERNAL, with external_data entries `location`, `offset`,
// `length`; onnx/onnx docs/ExternalData.md). PyTorch's dynamo exporter writes
// every weight of a model to `MODEL.onnx.data` this way by default.
//
// ExternalDataReader resolves `location` against the model's folder, maps
// each file into memory once (llvm::MemoryBuffer; mmap for large files) and
// hands out views of the tensors' bytes that keep the mapping alive, so the
// importer can wrap them as MLIR resource blobs without copying.
//
// Errors (returned as llvm::Error, each naming the tensor):
//   - the model was not read from a file (no folder to resolve against);
//   - no `location` entry, or an absolute location;
//   - a location that escapes the model's folder (after `..` and symlinks
//     are resolved);
//   - a file that does not exist or is not a regular file (a FIFO or a
//     device could block or never end);
//   - an `offset` or `length` that is not a decimal number;
//   - a `length` other than the tensor's size in bytes, or a file too short
//     for [offset, offset + size).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_EXTERNALDATA_H
#define TESSERA_COMPILER_IMPORT_EXTERNALDATA_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <memory>
#include <string>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace tessera::import {

/// Bytes of one tensor and the owner that keeps them valid.
struct TensorBytes {
  llvm::ArrayRef<char> bytes;
  std::shared_ptr<const llvm::MemoryBuffer> owner; ///< null for inline data
};

class ExternalDataReader {
public:
  /// `modelDir`: the folder of the model file; empty when the model came
  /// from memory (then any external data is an error).
  explicit ExternalDataReader(std::string modelDir);

  /// Whether `t` keeps its data in an external file.
  static bool isExternal(const onnx::TensorProto &t);

  /// The `size` bytes of `t`'s external data (`size`: its element count
  /// times its element size).
  llvm::Expected<TensorBytes> read(const onnx::TensorProto &t, int64_t size);

private:
  llvm::Expected<std::shared_ptr<const llvm::MemoryBuffer>>
  open(const std::string &tensor, llvm::StringRef location);

  std::string modelDir;
  std::string realModelDir; ///< modelDir with symlinks resolved (lazily)
  llvm::StringMap<std::shared_ptr<const llvm::MemoryBuffer>> files;
};

} // namespace tessera::import

#endif // TESSERA_COMPILER_IMPORT_EXTERNALDATA_H

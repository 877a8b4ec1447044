//===- SafeTensors.h - safetensors reader and writer ------------*- C++ -*-===//
//
// The safetensors layout (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of JSON header | data
// header: {"__metadata__": {string: string},
//          NAME: {"dtype": "F32"|"I64"|"BOOL"|"U8", "shape": [...],
//                 "data_offsets": [begin, end]}, ...}
// Offsets are relative to the start of the data section. The writer pads the
// header with spaces so that data starts at a multiple of 8 bytes and stores
// tensors contiguously in the given order. Runtime dtypes map as F32 <-> F32,
// I64 <-> I64, I1 -> BOOL (and U8/BOOL are both read as I1 storage).
//
// Readers validate everything and never crash on corrupt input: errors name
// the file (or buffer name) and the tensor.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define TESSERA_RUNTIME_CHECKPOINT_SAFETENSORS_H

#include "runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace runtime {

/// A parsed safetensors file. Tensors are in data-offset order (which is the
/// order they were written by writeSafeTensors).
struct SafeTensorsFile {
  std::vector<std::string> names;
  std::vector<Tensor> tensors; ///< parallel to names; freshly allocated
  std::map<std::string, std::string> metadata;

  /// The tensor named `name`, or nullptr.
  const Tensor *find(llvm::StringRef name) const;
};

using NamedTensor = std::pair<std::string, const Tensor *>;

/// Names of I1 tensors to store as raw "U8" bytes (not normalised to 0/1
/// "BOOL"), e.g. an embedded MLIR bytecode blob.
using RawByteTensorNames = std::set<std::string>;

/// Serialises to `os` (header + data). Errors on duplicate or empty names,
/// the reserved name "__metadata__", or null tensors.
llvm::Error writeSafeTensors(llvm::raw_ostream &os,
                             llvm::ArrayRef<NamedTensor> tensors,
                             const std::map<std::string, std::string> &metadata,
                             const RawByteTensorNames &rawBytes = {});

/// Serialises into a byte string (e.g. to embed in another artifact).
llvm::Expected<std::string>
serializeSafeTensors(llvm::ArrayRef<NamedTensor> tensors,
                     const std::map<std::string, std::string> &metadata);

/// Writes `path` atomically: writes `path.tmp`, then renames it over `path`.
/// On any failure the tmp file is removed and `path` is left untouched.
/// Errors name the path.
llvm::Error writeSafeTensors(llvm::StringRef path,
                             llvm::ArrayRef<NamedTensor> tensors,
                             const std::map<std::string, std::string> &metadata,
                             const RawByteTensorNames &rawBytes = {});

/// Parses an in-memory safetensors blob; `name` is used in error messages.
llvm::Expected<SafeTensorsFile> parseSafeTensors(llvm::StringRef buffer,
                                                 llvm::StringRef name);

/// Reads and parses `path`. Errors name the path and the offending tensor.
llvm::Expected<SafeTensorsFile> readSafeTensors(llvm::StringRef path);

} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_CHECKPOINT_SAFETENSORS_H

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
// Section digests. writeSafeTensors adds the metadata key "tessera.digests",
// a JSON string
//   {"metadata": {KEY: "xxh3:<16 hex>", ...}, "tensors": {NAME: "xxh3:...",
//   ...}}
// with the XXH3-64 digest (llvm::xxh3_64bits) of every other metadata value
// and of every tensor's data region (the bytes as stored). The readers check
// a section's digest before handing it out, so nothing downstream (a JSON
// manifest parser, the MLIR bytecode reader) ever parses corrupt bytes: a
// mismatch is the one-line error
//   FILE: section "NAME" is corrupt (digest xxh3:..., expected xxh3:...)
// When "tessera.digests" is present, every metadata key and tensor must have
// a digest and every digest a section. Files without it (other writers, the
// safetensors package) still read, with `hasDigests` false; Tessera's own
// artifacts and checkpoints require it (Plan.h, DistCheckpoint.h).
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
  /// The metadata, without "tessera.digests".
  std::map<std::string, std::string> metadata;
  /// True when the file carried "tessera.digests" (every section was then
  /// checked against it).
  bool hasDigests = false;

  /// The tensor named `name`, or nullptr.
  const Tensor *find(llvm::StringRef name) const;
};

/// The header's "dtype" string of a runtime dtype: "F32", "I64", "BOOL"
/// (I1), "BF16", "F16".
const char *safetensorsDTypeName(DType d);

using NamedTensor = std::pair<std::string, const Tensor *>;

/// The metadata key of the section digests (see the file comment).
inline constexpr const char *kDigestsKey = "tessera.digests";

/// "xxh3:" and the 16 lower-case hex digits of llvm::xxh3_64bits(bytes).
std::string sectionDigest(llvm::StringRef bytes);

/// Names of I1 tensors to store as raw "U8" bytes (not normalised to 0/1
/// "BOOL"), e.g. an embedded MLIR bytecode blob.
using RawByteTensorNames = std::set<std::string>;

/// Serialises to `os` (header + data), adding "tessera.digests" (replacing
/// one in `metadata`). Errors on duplicate or empty names, the reserved name
/// "__metadata__", or null tensors.
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

/// One tensor entry of a safetensors header.
struct SafeTensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::string dtypeName; ///< as stored: "F32", "BF16", "U8", ...
  std::vector<int64_t> shape;
  /// Byte offsets [begin, end) relative to the start of the data section.
  uint64_t begin = 0, end = 0;
  /// The data region's digest from "tessera.digests" ("" without one).
  std::string digest;
};

/// A parsed, validated header (offsets inside the data section, sizes
/// matching dtype and shape, no overlaps), without the data.
struct SafeTensorsHeader {
  std::string source;                    ///< the path it was read from
  std::vector<SafeTensorsEntry> entries; ///< data-offset order
  /// The metadata (checked against its digests), without "tessera.digests".
  std::map<std::string, std::string> metadata;
  bool hasDigests = false; ///< the file carried "tessera.digests"

  uint64_t dataOffset = 0; ///< file offset of the data section (8 + N)
  uint64_t fileSize = 0;

  /// The entry named `name`, or nullptr.
  const SafeTensorsEntry *find(llvm::StringRef name) const;
};

/// Reads only the header of `path` (the first 8 + N bytes). Errors name the
/// path and the offending tensor, as readSafeTensors.
llvm::Expected<SafeTensorsHeader> readSafeTensorsHeader(llvm::StringRef path);

/// Reads one tensor's bytes from `header.source` (only that range of the
/// file) and checks them against the entry's digest, if it has one. Errors:
/// no such tensor, the file changed or cannot be read, the section is
/// corrupt.
llvm::Expected<Tensor> readSafeTensor(const SafeTensorsHeader &header,
                                      llvm::StringRef name);

} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_CHECKPOINT_SAFETENSORS_H

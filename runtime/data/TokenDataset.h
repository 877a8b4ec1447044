//===- TokenDataset.h - token files and the batch convention ----*- C++ -*-===//
//
// Implements the training-run data convention (docs: DESIGN.md, "Training-run
// conventions"; docs/DataFormats.md): a token stream of T ids. For step s,
// global batch B, sequence length S and global sample j (0 <= j < B):
//   n = s*B + j,  start = (n*S) mod (T - S - 1),
//   input  = tokens[start, start + S),
//   labels = tokens[start + 1, start + S + 1).
// DP rank r of D takes samples j in [r*B/D, (r+1)*B/D).
//
// Two kinds of files hold the stream:
//  - a plain token file: T ids back to back, no header, little-endian
//    uint16 (the default) or uint32 (`--data-dtype uint32`); the byte count
//    must be a multiple of the id's size;
//  - a Megatron-LM indexed dataset (megatron/core/datasets/
//    indexed_dataset.py, written by Megatron's tools/preprocess_data.py):
//    PREFIX.idx, little-endian,
//      bytes 0..8    magic "MMIDIDX\0\0"
//      u64           version, must be 1
//      u8            dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                    8 uint16 (6 float64 and 7 float32 are refused)
//      u64           N, the number of sequences
//      u64           M, the number of document indices
//      i32[N]        sequence lengths (tokens)
//      i64[N]        sequence pointers (byte offsets into PREFIX.bin)
//      i64[M]        document indices (non-decreasing sequence indices,
//                    0 .. N)
//      [i8[N]        sequence modes of multimodal datasets; ignored]
//    and PREFIX.bin, the sequences' ids back to back in that dtype. The
//    token stream is the concatenation of all sequences in order, i.e.
//    PREFIX.bin read as a plain file of that dtype: a .bin/.idx pair gives
//    exactly the batches of the plain file holding the same ids.
//    Documents do not change the sampling (samples cross document
//    boundaries, as in the plain file).
// Files are memory-mapped (llvm::MemoryBuffer) and read on demand.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_DATA_TOKENDATASET_H
#define TESSERA_RUNTIME_DATA_TOKENDATASET_H

#include "runtime/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace llvm {
class MemoryBuffer;
}

namespace tessera {
namespace runtime {

/// The element type of stored token ids (little-endian).
enum class TokenDType { U8, I8, I16, U16, I32, U32, I64 };

/// "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64".
const char *tokenDTypeName(TokenDType dtype);
/// Bytes per id.
int64_t tokenDTypeSize(TokenDType dtype);
/// Parses a `--data-dtype` value: "uint16" or "uint32" (the dtypes of plain
/// token files). Error: any other name.
llvm::Expected<TokenDType> parsePlainTokenDType(llvm::StringRef name);

/// One rank's share of a step's batch: both i64 of shape [B/D, S].
struct TokenBatch {
  Tensor inputs;
  Tensor labels;
};

/// A read-only token stream: a plain token file or a Megatron-LM indexed
/// dataset (see the file comment).
class TokenDataset {
public:
  /// Opens `path`: the Megatron-LM indexed dataset PREFIX.bin + PREFIX.idx
  /// when PREFIX.idx exists for `path` = PREFIX, or for `path` = PREFIX.bin
  /// (PREFIX.bin must then exist too); else the plain token file `path` of
  /// ids of `plainDType` (null: uint16).
  /// Errors (one line, naming the file): a missing or unreadable file; a
  /// plain file whose size is not a multiple of the id size; an index with a
  /// bad magic, version or dtype code (floats included), that is truncated
  /// or has trailing bytes, a negative sequence length, a sequence pointer
  /// that is not the previous sequence's end (sequences must be back to
  /// back from byte 0, as Megatron's IndexedDatasetBuilder writes them),
  /// document indices that decrease or exceed N; a .bin whose size is not
  /// the sum of the lengths times the id size; `plainDType` given (not
  /// null) for an indexed dataset whose dtype differs; and, when seqLen > 0,
  /// fewer than seqLen + 2 tokens (T > S + 1 is required).
  static llvm::Expected<TokenDataset>
  open(llvm::StringRef path, int64_t seqLen = 0,
       std::optional<TokenDType> plainDType = std::nullopt);

  /// Number of tokens T.
  int64_t numTokens() const { return count; }
  /// Token i (0 <= i < T), widened (negative ids of signed dtypes stay
  /// negative; checkVocabulary refuses them).
  int64_t token(int64_t i) const;
  /// The path given to open(); the data file is dataPath().
  const std::string &path() const { return filePath; }
  /// The file holding the ids: path() for a plain file, PREFIX.bin for an
  /// indexed dataset.
  const std::string &dataPath() const { return binPath; }
  TokenDType dtype() const { return type; }
  /// True for a Megatron-LM indexed dataset.
  bool isIndexed() const { return indexed; }
  /// Indexed datasets: the number of sequences and documents (M - 1); 0
  /// for plain files.
  int64_t numSequences() const { return sequences; }
  int64_t numDocuments() const { return documents; }

  /// Checks that every id lies in [0, vocabSize). Error (one line): the
  /// file, the position of the first id outside (token index, and the
  /// sequence for indexed datasets) and the id. Reads ids [part*T/parts,
  /// (part+1)*T/parts): ranks split the scan (the lowest failing part holds
  /// the first bad id); the default reads the whole file.
  llvm::Error checkVocabulary(int64_t vocabSize, int64_t part = 0,
                              int64_t parts = 1) const;

  /// The batch of DP rank `dpRank` of `dpSize` at `step` (see the file
  /// comment). Errors: T <= S + 1, B not divisible by D, rank out of range,
  /// non-positive B or S, negative step.
  llvm::Expected<TokenBatch> batch(int64_t step, int64_t globalBatch,
                                   int64_t seqLen, int64_t dpRank,
                                   int64_t dpSize) const;

  /// Start offset of global sample j at step s (no argument checks).
  int64_t sampleStart(int64_t step, int64_t globalBatch, int64_t seqLen,
                      int64_t j) const;

private:
  llvm::Error openIndexed(llvm::StringRef prefix, llvm::StringRef idxPath,
                          std::optional<TokenDType> plainDType);

  std::string filePath, binPath;
  std::shared_ptr<llvm::MemoryBuffer> buffer, index;
  const unsigned char *bytes = nullptr;
  TokenDType type = TokenDType::U16;
  int64_t count = 0;
  bool indexed = false;
  int64_t sequences = 0, documents = 0;
  /// Indexed datasets: the i32 sequence lengths inside `index`.
  const unsigned char *lengths = nullptr;
};

} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_DATA_TOKENDATASET_H

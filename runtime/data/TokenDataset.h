//===- TokenDataset.h - uint16 token file and the batch convention -*- C++ -*-//
//
// Implements the training-run data convention (docs: DESIGN.md, "Training-run
// conventions"): the file holds T token ids as little-endian uint16. For step
// s, global batch B, sequence length S and global sample j (0 <= j < B):
//   n = s*B + j,  start = (n*S) mod (T - S - 1),
//   input  = tokens[start, start + S),
//   labels = tokens[start + 1, start + S + 1).
// DP rank r of D takes samples j in [r*B/D, (r+1)*B/D).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_DATA_TOKENDATASET_H
#define TESSERA_RUNTIME_DATA_TOKENDATASET_H

#include "runtime/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

namespace llvm {
class MemoryBuffer;
}

namespace tessera {
namespace runtime {

/// One rank's share of a step's batch: both i64 of shape [B/D, S].
struct TokenBatch {
  Tensor inputs;
  Tensor labels;
};

/// A read-only token file (memory-mapped when large).
class TokenDataset {
public:
  /// Opens `path`. Errors (naming the path): missing or unreadable file, odd
  /// byte count, and, when seqLen > 0, fewer than seqLen + 2 tokens
  /// (T > S + 1 is required).
  static llvm::Expected<TokenDataset> open(llvm::StringRef path,
                                           int64_t seqLen = 0);

  /// Number of tokens T.
  int64_t numTokens() const { return count; }
  /// Token i (0 <= i < T).
  uint16_t token(int64_t i) const;
  const std::string &path() const { return filePath; }

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
  std::string filePath;
  std::shared_ptr<llvm::MemoryBuffer> buffer;
  const unsigned char *bytes = nullptr;
  int64_t count = 0;
};

} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_DATA_TOKENDATASET_H

//===- TokenDataset.cpp - uint16 token file and the batch convention ------===//

#include "runtime/data/TokenDataset.h"

#include "llvm/Support/MemoryBuffer.h"

using namespace tessera::runtime;

static llvm::Error dataError(const std::string &path, const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "token data '%s': %s", path.c_str(),
                                 msg.c_str());
}

llvm::Expected<TokenDataset> TokenDataset::open(llvm::StringRef path,
                                                int64_t seqLen) {
  std::string p = path.str();
  auto bufOr = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  if (!bufOr)
    return dataError(p, "cannot read: " + bufOr.getError().message());
  TokenDataset ds;
  ds.filePath = p;
  ds.buffer = std::move(*bufOr);
  size_t size = ds.buffer->getBufferSize();
  if (size % 2 != 0)
    return dataError(p, "size " + std::to_string(size) +
                            " bytes is not a whole number of uint16 tokens");
  ds.bytes =
      reinterpret_cast<const unsigned char *>(ds.buffer->getBufferStart());
  ds.count = static_cast<int64_t>(size / 2);
  if (seqLen > 0 && ds.count <= seqLen + 1)
    return dataError(p, "too short: " + std::to_string(ds.count) +
                            " tokens, needs more than seq_len + 1 = " +
                            std::to_string(seqLen + 1));
  return std::move(ds);
}

uint16_t TokenDataset::token(int64_t i) const {
  return static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
}

int64_t TokenDataset::sampleStart(int64_t step, int64_t globalBatch,
                                  int64_t seqLen, int64_t j) const {
  uint64_t n = static_cast<uint64_t>(step) * globalBatch + j;
  uint64_t mod = static_cast<uint64_t>(count - seqLen - 1);
  // (n*S) mod m without overflow: reduce n first.
  unsigned __int128 prod = static_cast<unsigned __int128>(n % mod) * seqLen;
  return static_cast<int64_t>(prod % mod);
}

llvm::Expected<TokenBatch> TokenDataset::batch(int64_t step,
                                               int64_t globalBatch,
                                               int64_t seqLen, int64_t dpRank,
                                               int64_t dpSize) const {
  if (globalBatch <= 0 || seqLen <= 0 || step < 0)
    return dataError(filePath, "invalid batch request (step " +
                                   std::to_string(step) + ", batch " +
                                   std::to_string(globalBatch) + ", seq_len " +
                                   std::to_string(seqLen) + ")");
  if (dpSize <= 0 || dpRank < 0 || dpRank >= dpSize ||
      globalBatch % dpSize != 0)
    return dataError(filePath, "global batch " + std::to_string(globalBatch) +
                                   " cannot be split over data-parallel rank " +
                                   std::to_string(dpRank) + " of " +
                                   std::to_string(dpSize));
  if (count <= seqLen + 1)
    return dataError(filePath, "too short: " + std::to_string(count) +
                                   " tokens, needs more than seq_len + 1 = " +
                                   std::to_string(seqLen + 1));
  int64_t local = globalBatch / dpSize;
  TokenBatch b;
  b.inputs = Tensor::empty(DType::I64, {local, seqLen});
  b.labels = Tensor::empty(DType::I64, {local, seqLen});
  int64_t *in = b.inputs.data<int64_t>();
  int64_t *lab = b.labels.data<int64_t>();
  for (int64_t i = 0; i < local; ++i) {
    int64_t j = dpRank * local + i;
    int64_t start = sampleStart(step, globalBatch, seqLen, j);
    for (int64_t k = 0; k < seqLen; ++k) {
      in[i * seqLen + k] = token(start + k);
      lab[i * seqLen + k] = token(start + k + 1);
    }
  }
  return std::move(b);
}

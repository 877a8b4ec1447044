//===- TokenDataset.cpp - token files and the batch convention ------------===//

#include "runtime/data/TokenDataset.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cstring>

using namespace tessera::runtime;
namespace endian = llvm::support::endian;

static llvm::Error dataError(const std::string &path, const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "token data '%s': %s", path.c_str(),
                                 msg.c_str());
}

const char *tessera::runtime::tokenDTypeName(TokenDType dtype) {
  switch (dtype) {
  case TokenDType::U8:
    return "uint8";
  case TokenDType::I8:
    return "int8";
  case TokenDType::I16:
    return "int16";
  case TokenDType::U16:
    return "uint16";
  case TokenDType::I32:
    return "int32";
  case TokenDType::U32:
    return "uint32";
  case TokenDType::I64:
    return "int64";
  }
  return "?";
}

int64_t tessera::runtime::tokenDTypeSize(TokenDType dtype) {
  switch (dtype) {
  case TokenDType::U8:
  case TokenDType::I8:
    return 1;
  case TokenDType::I16:
  case TokenDType::U16:
    return 2;
  case TokenDType::I32:
  case TokenDType::U32:
    return 4;
  case TokenDType::I64:
    return 8;
  }
  return 1;
}

llvm::Expected<TokenDType>
tessera::runtime::parsePlainTokenDType(llvm::StringRef name) {
  if (name == "uint16")
    return TokenDType::U16;
  if (name == "uint32")
    return TokenDType::U32;
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "--data-dtype must be uint16 or uint32, got '%s'", name.str().c_str());
}

/// The Megatron-LM dtype code (indexed_dataset.py, DType) of an id type, or
/// nullopt for float64 (6), float32 (7) and unknown codes.
static std::optional<TokenDType> megatronDType(uint8_t code) {
  switch (code) {
  case 1:
    return TokenDType::U8;
  case 2:
    return TokenDType::I8;
  case 3:
    return TokenDType::I16;
  case 4:
    return TokenDType::I32;
  case 5:
    return TokenDType::I64;
  case 8:
    return TokenDType::U16;
  default:
    return std::nullopt;
  }
}

static llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>>
mapFile(llvm::StringRef path) {
  return llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                     /*RequiresNullTerminator=*/false);
}

llvm::Expected<TokenDataset>
TokenDataset::open(llvm::StringRef path, int64_t seqLen,
                   std::optional<TokenDType> plainDType) {
  TokenDataset ds;
  ds.filePath = path.str();
  // A Megatron-LM indexed dataset: PREFIX (+ .idx/.bin) or PREFIX.bin.
  std::string prefix;
  if (llvm::sys::fs::exists(path + ".idx"))
    prefix = path.str();
  else if (path.ends_with(".bin") &&
           llvm::sys::fs::exists(path.drop_back(4) + ".idx"))
    prefix = path.drop_back(4).str();
  if (!prefix.empty()) {
    if (llvm::Error err = ds.openIndexed(prefix, prefix + ".idx", plainDType))
      return std::move(err);
  } else {
    std::string p = path.str();
    auto bufOr = mapFile(path);
    if (!bufOr)
      return dataError(p, "cannot read: " + bufOr.getError().message());
    ds.binPath = p;
    ds.type = plainDType.value_or(TokenDType::U16);
    ds.buffer = std::move(*bufOr);
    size_t size = ds.buffer->getBufferSize();
    size_t width = tokenDTypeSize(ds.type);
    if (size % width != 0)
      return dataError(p, "size " + std::to_string(size) +
                              " bytes is not a whole number of " +
                              tokenDTypeName(ds.type) + " tokens");
    ds.bytes =
        reinterpret_cast<const unsigned char *>(ds.buffer->getBufferStart());
    ds.count = static_cast<int64_t>(size / width);
  }
  if (seqLen > 0 && ds.count <= seqLen + 1)
    return dataError(ds.binPath, "too short: " + std::to_string(ds.count) +
                                     " tokens, needs more than seq_len + 1 = " +
                                     std::to_string(seqLen + 1));
  return std::move(ds);
}

llvm::Error TokenDataset::openIndexed(llvm::StringRef prefix,
                                      llvm::StringRef idxPathRef,
                                      std::optional<TokenDType> plainDType) {
  std::string idxPath = idxPathRef.str();
  binPath = (prefix + ".bin").str();
  indexed = true;
  auto idxOr = mapFile(idxPath);
  if (!idxOr)
    return dataError(idxPath, "cannot read: " + idxOr.getError().message());
  index = std::move(*idxOr);
  const unsigned char *idx =
      reinterpret_cast<const unsigned char *>(index->getBufferStart());
  uint64_t size = index->getBufferSize();

  // Header (34 bytes): magic, version, dtype code, N, M.
  static const char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  constexpr uint64_t kHeader = 9 + 8 + 1 + 8 + 8;
  if (size < 9 || std::memcmp(idx, kMagic, 9) != 0)
    return dataError(idxPath, "not a Megatron-LM index: the file does not "
                              "start with the magic \"MMIDIDX\\0\\0\"");
  if (size < kHeader)
    return dataError(idxPath, "truncated: " + std::to_string(size) +
                                  " bytes, the header alone needs " +
                                  std::to_string(kHeader));
  uint64_t version = endian::read64le(idx + 9);
  if (version != 1)
    return dataError(idxPath, "unsupported version " + std::to_string(version) +
                                  " (only version 1 exists)");
  uint8_t code = idx[17];
  std::optional<TokenDType> dtype = megatronDType(code);
  if (!dtype)
    return dataError(idxPath,
                     "dtype code " + std::to_string(code) +
                         (code == 6 || code == 7
                              ? std::string(" is a float type; token ids "
                                            "must be integers")
                              : std::string(" is unknown")) +
                         " (expected 1 uint8, 2 int8, 3 int16, 4 int32, 5 "
                         "int64 or 8 uint16)");
  type = *dtype;
  if (plainDType && *plainDType != type)
    return dataError(idxPath, std::string("--data-dtype ") +
                                  tokenDTypeName(*plainDType) +
                                  " disagrees with the index's dtype " +
                                  tokenDTypeName(type));
  uint64_t n = endian::read64le(idx + 18);
  uint64_t m = endian::read64le(idx + 26);
  // i32 lengths, i64 pointers, i64 document indices, [i8 modes].
  constexpr uint64_t kMaxEntries = (uint64_t(1) << 60) / 21;
  if (n > kMaxEntries || m > kMaxEntries)
    return dataError(idxPath, "sequence count " + std::to_string(n) +
                                  " or document count " + std::to_string(m) +
                                  " is impossibly large");
  uint64_t body = kHeader + 12 * n + 8 * m;
  if (size != body && size != body + n)
    return dataError(
        idxPath, (size < body ? "truncated: " : "trailing bytes: ") +
                     std::to_string(size) + " bytes, but " + std::to_string(n) +
                     " sequences and " + std::to_string(m) +
                     " document indices need " + std::to_string(body) +
                     (n ? " (or " + std::to_string(body + n) +
                              " with multimodal sequence modes)"
                        : std::string()));
  sequences = static_cast<int64_t>(n);
  documents = m > 0 ? static_cast<int64_t>(m) - 1 : 0;
  lengths = idx + kHeader;
  const unsigned char *pointers = lengths + 4 * n;
  const unsigned char *docs = pointers + 8 * n;
  int64_t width = tokenDTypeSize(type);
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) {
    int32_t len = static_cast<int32_t>(endian::read32le(lengths + 4 * i));
    int64_t ptr = static_cast<int64_t>(endian::read64le(pointers + 8 * i));
    if (len < 0)
      return dataError(idxPath, "sequence " + std::to_string(i) +
                                    " has negative length " +
                                    std::to_string(len));
    if (ptr < 0 || static_cast<uint64_t>(ptr) != total * width)
      return dataError(idxPath, "sequence " + std::to_string(i) +
                                    " starts at byte " + std::to_string(ptr) +
                                    " of the .bin, expected " +
                                    std::to_string(total * width) +
                                    " (sequences must be stored back to back)");
    total += static_cast<uint64_t>(len);
  }
  int64_t previous = 0;
  for (uint64_t k = 0; k < m; ++k) {
    int64_t d = static_cast<int64_t>(endian::read64le(docs + 8 * k));
    if (d < previous || static_cast<uint64_t>(d) > n)
      return dataError(idxPath, "document index " + std::to_string(k) + " is " +
                                    std::to_string(d) +
                                    ": document indices must be non-decreasing "
                                    "sequence numbers in [0, " +
                                    std::to_string(n) + "]");
    previous = d;
  }

  auto binOr = mapFile(binPath);
  if (!binOr)
    return dataError(binPath, "cannot read: " + binOr.getError().message() +
                                  " (the data of index '" + idxPath + "')");
  buffer = std::move(*binOr);
  uint64_t binSize = buffer->getBufferSize();
  if (binSize != total * width)
    return dataError(binPath, "size " + std::to_string(binSize) +
                                  " bytes, but its index '" + idxPath +
                                  "' lists " + std::to_string(total) + " " +
                                  tokenDTypeName(type) + " tokens (" +
                                  std::to_string(total * width) + " bytes)");
  bytes = reinterpret_cast<const unsigned char *>(buffer->getBufferStart());
  count = static_cast<int64_t>(total);
  return llvm::Error::success();
}

int64_t TokenDataset::token(int64_t i) const {
  switch (type) {
  case TokenDType::U8:
    return bytes[i];
  case TokenDType::I8:
    return static_cast<int8_t>(bytes[i]);
  case TokenDType::I16:
    return static_cast<int16_t>(endian::read16le(bytes + 2 * i));
  case TokenDType::U16:
    return endian::read16le(bytes + 2 * i);
  case TokenDType::I32:
    return static_cast<int32_t>(endian::read32le(bytes + 4 * i));
  case TokenDType::U32:
    return endian::read32le(bytes + 4 * i);
  case TokenDType::I64:
    return static_cast<int64_t>(endian::read64le(bytes + 8 * i));
  }
  return 0;
}

/// The first index in [begin, end) whose little-endian id of type T lies
/// outside [0, vocab), or end.
template <typename T>
static int64_t firstOutside(const unsigned char *bytes, int64_t begin,
                            int64_t end, int64_t vocab) {
  for (int64_t i = begin; i < end; ++i) {
    int64_t id = static_cast<int64_t>(
        endian::read<T, llvm::endianness::little>(bytes + sizeof(T) * i));
    if (id < 0 || id >= vocab)
      return i;
  }
  return end;
}

llvm::Error TokenDataset::checkVocabulary(int64_t vocabSize, int64_t part,
                                          int64_t parts) const {
  if (parts < 1 || part < 0 || part >= parts)
    parts = 1, part = 0;
  auto bound = [&](int64_t k) {
    return static_cast<int64_t>(static_cast<unsigned __int128>(count) * k /
                                parts);
  };
  int64_t begin = bound(part), end = bound(part + 1), i = end;
  switch (type) {
  case TokenDType::U8:
    i = firstOutside<uint8_t>(bytes, begin, end, vocabSize);
    break;
  case TokenDType::I8:
    i = firstOutside<int8_t>(bytes, begin, end, vocabSize);
    break;
  case TokenDType::I16:
    i = firstOutside<int16_t>(bytes, begin, end, vocabSize);
    break;
  case TokenDType::U16:
    i = firstOutside<uint16_t>(bytes, begin, end, vocabSize);
    break;
  case TokenDType::I32:
    i = firstOutside<int32_t>(bytes, begin, end, vocabSize);
    break;
  case TokenDType::U32:
    i = firstOutside<uint32_t>(bytes, begin, end, vocabSize);
    break;
  case TokenDType::I64:
    i = firstOutside<int64_t>(bytes, begin, end, vocabSize);
    break;
  }
  if (i == end)
    return llvm::Error::success();
  std::string where = "token " + std::to_string(i);
  if (indexed) {
    int64_t seq = 0, seqBegin = 0;
    for (; seq < sequences; ++seq) {
      int64_t len = static_cast<int32_t>(endian::read32le(lengths + 4 * seq));
      if (i < seqBegin + len)
        break;
      seqBegin += len;
    }
    where += " (sequence " + std::to_string(seq) + ", position " +
             std::to_string(i - seqBegin) + ")";
  }
  return dataError(binPath, where + " is " + std::to_string(token(i)) +
                                ", outside the model's vocabulary [0, " +
                                std::to_string(vocabSize) + ")");
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
    return dataError(binPath, "invalid batch request (step " +
                                  std::to_string(step) + ", batch " +
                                  std::to_string(globalBatch) + ", seq_len " +
                                  std::to_string(seqLen) + ")");
  if (dpSize <= 0 || dpRank < 0 || dpRank >= dpSize ||
      globalBatch % dpSize != 0)
    return dataError(binPath, "global batch " + std::to_string(globalBatch) +
                                  " cannot be split over data-parallel rank " +
                                  std::to_string(dpRank) + " of " +
                                  std::to_string(dpSize));
  if (count <= seqLen + 1)
    return dataError(binPath, "too short: " + std::to_string(count) +
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

//===- token-file-fuzzer.cpp - the token-file readers ---------------------===//
//
// libFuzzer target for runtime/data/TokenDataset.h. An input is
//   byte 0     mode: bit 0 set: a Megatron-LM indexed dataset, else a plain
//              token file; bit 1: plain ids are uint32 (else uint16)
//   byte 1     the sequence length S (0: not checked at open)
//   plain:     the rest is the token file
//   indexed:   a little-endian u16 L, then L bytes of PREFIX.idx, then the
//              rest as PREFIX.bin
// The files are written to a scratch folder and opened as tessera-run opens
// --data; a dataset it accepts is scanned (checkVocabulary, vocabulary
// 50257) and, for S > 0, batch 0 and batch 3 of a global batch of 2 are
// cut from it.
//
//===----------------------------------------------------------------------===//

#include "test/fuzz/FuzzUtil.h"

#include "runtime/data/TokenDataset.h"

#include "llvm/Support/Error.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 256 * 1024)
    return 0;
  uint8_t mode = data[0];
  int64_t seqLen = data[1];
  llvm::StringRef rest = fuzz::asStringRef(data + 2, size - 2);
  const std::string &dir = fuzz::scratchDir();
  std::string path;
  std::optional<runtime::TokenDType> dtype;
  if (mode & 1) {
    if (rest.size() < 2)
      return 0;
    size_t idxLen = static_cast<uint8_t>(rest[0]) |
                    (static_cast<size_t>(static_cast<uint8_t>(rest[1])) << 8);
    rest = rest.drop_front(2);
    idxLen = std::min(idxLen, rest.size());
    path = dir + "/ds";
    fuzz::writeFileOrDie(path + ".idx", rest.take_front(idxLen));
    fuzz::writeFileOrDie(path + ".bin", rest.drop_front(idxLen));
  } else {
    path = dir + "/tokens";
    fuzz::writeFileOrDie(path, rest);
    dtype = (mode & 2) ? runtime::TokenDType::U32 : runtime::TokenDType::U16;
  }
  auto ds = runtime::TokenDataset::open(path, seqLen, dtype);
  if (!ds) {
    llvm::consumeError(ds.takeError());
    return 0;
  }
  llvm::consumeError(ds->checkVocabulary(50257));
  if (seqLen > 0) {
    for (int64_t step : {0, 3}) {
      auto b = ds->batch(step, /*globalBatch=*/2, seqLen, /*dpRank=*/0,
                         /*dpSize=*/1);
      if (!b)
        llvm::consumeError(b.takeError());
    }
  }
  return 0;
}

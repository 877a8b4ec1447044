//===- checkpoint-index-fuzzer.cpp - the checkpoint index reader ----------===//
//
// libFuzzer target: every input is a checkpoint's index.json
// (runtime/checkpoint/DistCheckpoint.h). CheckpointReader::open reads it
// from a folder, so the target writes it to a scratch folder that also holds
// empty rank_00000..rank_00007.safetensors files (the index's file-presence
// check passes for them, and verifyFiles then reads their headers: a
// truncated file must be an error). An index it accepts is also listed in
// order, and every tensor's file header is checked (verifyFiles).
//
//===----------------------------------------------------------------------===//

#include "test/fuzz/FuzzUtil.h"

#include "runtime/checkpoint/DistCheckpoint.h"

#include "llvm/Support/Error.h"

using namespace tessera;

namespace {
const std::string &checkpointDir() {
  static std::string dir = [] {
    llvm::SmallString<128> d(fuzz::scratchDir());
    llvm::sys::path::append(d, "iter_0000001");
    llvm::sys::fs::create_directories(d);
    for (int64_t r = 0; r < 8; ++r) {
      llvm::SmallString<128> f(d);
      llvm::sys::path::append(f, runtime::ckpt::rankFileName(r));
      fuzz::writeFileOrDie(f, "");
    }
    return d.str().str();
  }();
  return dir;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64 * 1024)
    return 0;
  const std::string &dir = checkpointDir();
  fuzz::writeFileOrDie(dir + "/index.json", fuzz::asStringRef(data, size));
  auto reader = runtime::ckpt::CheckpointReader::open(dir);
  if (!reader) {
    llvm::consumeError(reader.takeError());
    return 0;
  }
  (void)(*reader)->tensorsInOrder();
  llvm::consumeError((*reader)->verifyFiles());
  return 0;
}

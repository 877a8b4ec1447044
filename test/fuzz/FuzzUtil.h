//===- FuzzUtil.h - helpers shared by the fuzz targets ----------*- C++ -*-===//
//
// A private scratch directory per process (targets whose entry point reads
// files: the checkpoint index, token files) and an MLIR context that drops
// diagnostics (bad input is expected; only crashes, sanitizer reports and
// hangs are findings).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_FUZZ_FUZZUTIL_H
#define TESSERA_TEST_FUZZ_FUZZUTIL_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace tessera::fuzz {

/// A directory made once per process under $TMPDIR (removed at exit).
inline const std::string &scratchDir() {
  static std::string dir = [] {
    llvm::SmallString<128> path;
    if (llvm::sys::fs::createUniqueDirectory("tessera-fuzz", path)) {
      llvm::errs() << "error: cannot create a scratch directory\n";
      std::abort();
    }
    std::string d = path.str().str();
    static std::string removeAtExit = d;
    std::atexit([] { llvm::sys::fs::remove_directories(removeAtExit); });
    return d;
  }();
  return dir;
}

/// Writes `bytes` to `path` (replacing it); aborts when it cannot (a broken
/// harness, not a finding about the input).
inline void writeFileOrDie(llvm::StringRef path, llvm::StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    llvm::errs() << "error: cannot write '" << path << "': " << ec.message()
                 << "\n";
    std::abort();
  }
  os << bytes;
}

inline llvm::StringRef asStringRef(const uint8_t *data, size_t size) {
  return llvm::StringRef(reinterpret_cast<const char *>(data), size);
}

} // namespace tessera::fuzz

#endif // TESSERA_TEST_FUZZ_FUZZUTIL_H

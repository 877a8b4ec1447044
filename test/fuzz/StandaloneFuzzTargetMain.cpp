//===- StandaloneFuzzTargetMain.cpp - run a fuzz target without libFuzzer -===//
//
// The driver of the fuzz targets in an ordinary build (TESSERA_FUZZ off, any
// compiler): runs LLVMFuzzerTestOneInput once on every file named on the
// command line and on every regular file of every directory named (not
// recursive), in sorted order. The fuzz.regress.* tests run it on a
// target's seed corpus and regression inputs, so every input that once
// crashed stays a test. Prints the number of inputs run; exits non-zero when
// a path cannot be read or no input was found. Like LLVM's
// llvm/utils/.../StandaloneFuzzTargetMain.c, but C++ and directory-aware.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *argc,
                                                          char ***argv);

static bool isDirectory(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-')
      continue; // libFuzzer flags (-runs=0, ...) are accepted and ignored
    if (!isDirectory(arg)) {
      files.push_back(arg);
      continue;
    }
    DIR *dir = opendir(arg.c_str());
    if (!dir) {
      std::fprintf(stderr, "error: cannot open directory '%s'\n", arg.c_str());
      return 1;
    }
    std::vector<std::string> entries;
    while (dirent *e = readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || name == "README.md")
        continue;
      std::string path = arg + "/" + name;
      if (!isDirectory(path))
        entries.push_back(path);
    }
    closedir(dir);
    std::sort(entries.begin(), entries.end());
    files.insert(files.end(), entries.begin(), entries.end());
  }
  if (files.empty()) {
    std::fprintf(stderr, "error: no inputs (give files or directories)\n");
    return 1;
  }
  for (const std::string &path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "error: cannot read '%s'\n", path.c_str());
      return 1;
    }
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(),
                 bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                           bytes.size());
  }
  std::printf("ran %zu inputs\n", files.size());
  return 0;
}

/// libFuzzer's byte mutator, which a custom mutator falls back to; never
/// called here (the driver only runs inputs), defined for the link.
extern "C" size_t LLVMFuzzerMutate(uint8_t *, size_t size, size_t) {
  return size;
}

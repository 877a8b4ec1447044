//===- CommandLine.cpp - option parsing with "error:" lines ---------------===//
//
// See CommandLine.h.
//
//===----------------------------------------------------------------------===//

#include "common/io/CommandLine.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace tessera::io {

std::string formatOptionErrors(llvm::StringRef text, llvm::StringRef tool) {
  std::string prefix = (tool + ": ").str();
  llvm::SmallVector<std::string> lines;
  llvm::SmallVector<llvm::StringRef> raw;
  text.split(raw, '\n', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : raw) {
    line = line.trim();
    if (line.empty())
      continue;
    line.consume_front(prefix);
    line.consume_front("error: ");
    if (lines.empty())
      lines.push_back(prefix + "error: " + line.str());
    else // A continuation or a suggestion ("Did you mean '--steps'?").
      lines.back() += " " + line.str();
  }
  std::string out;
  for (const std::string &l : lines)
    out += l + "\n";
  return out;
}

void parseCommandLine(int argc, const char *const *argv,
                      llvm::StringRef overview, int exitCode) {
  llvm::errs().flush();
  std::FILE *capture = std::tmpfile();
  int saved = capture ? ::dup(2) : -1;
  if (saved < 0 || ::dup2(::fileno(capture), 2) < 0) {
    // Cannot capture: parse as LLVM does (errors without "error:").
    if (saved >= 0)
      ::close(saved);
    if (capture)
      std::fclose(capture);
    llvm::cl::ParseCommandLineOptions(argc, argv, overview);
    return;
  }
  std::string direct;
  llvm::raw_string_ostream errs(direct);
  bool ok = llvm::cl::ParseCommandLineOptions(argc, argv, overview, &errs);
  llvm::errs().flush();
  ::dup2(saved, 2);
  ::close(saved);
  std::string text;
  std::rewind(capture);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), capture)) > 0)
    text.append(buf, n);
  std::fclose(capture);
  text += direct;
  if (text.empty() && ok)
    return;
  std::string tool = llvm::sys::path::filename(argv[0]).str();
  llvm::errs() << formatOptionErrors(text, tool);
  llvm::errs().flush();
  if (!ok)
    std::exit(exitCode);
}

} // namespace tessera::io

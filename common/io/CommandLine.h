//===- CommandLine.h - option parsing with "error:" lines -----*- C++ -*-===//
//
// llvm::cl::ParseCommandLineOptions prints its errors as
// "tessera-run: for the --steps option: 'x' value invalid ..." (no
// "error:"), some of them on two lines. parseCommandLine parses the same way
// and prints each error as one line in the form every other Tessera error
// has: "TOOL: error: for the --steps option: 'x' value invalid for long
// argument!", a following line or suggestion joined to it ("... Did you
// mean '--steps'?"), so each error is one line. It exits with status 1 on an
// error (as LLVM does; a tool may choose another).
//
// LLVM writes part of these messages to llvm::errs() whatever stream it is
// given (cl::Option::error), so while parsing, descriptor 2 points at an
// anonymous temporary file (std::tmpfile) whose text is then re-emitted;
// --help and --version print to standard output as before.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_IO_COMMANDLINE_H
#define TESSERA_COMMON_IO_COMMANDLINE_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace tessera::io {

/// llvm::cl::ParseCommandLineOptions(argc, argv, overview) with its errors
/// rewritten as above; exits with status `exitCode` on an error.
void parseCommandLine(int argc, const char *const *argv,
                      llvm::StringRef overview, int exitCode = 1);

/// The rewriting itself: `text` is what LLVM printed, `tool` the program
/// name it used. Returns the lines to print (each ending in '\n').
std::string formatOptionErrors(llvm::StringRef text, llvm::StringRef tool);

} // namespace tessera::io

#endif // TESSERA_COMMON_IO_COMMANDLINE_H

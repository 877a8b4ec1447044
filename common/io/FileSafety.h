//===- FileSafety.h - never touch what the user has -----------*- C++ -*-===//
//
// The rules every Tessera tool follows for the files named on its command
// line (issue 26, "Never touch what the user has"):
//
// Outputs (checkOutputs, before any work):
//  - An output is never the same file as an input or another output. "Same"
//    is by device and inode (llvm::sys::fs::UniqueID, symlinks followed), so
//    a symlink or a hard link to the plan is caught as well as its name; an
//    output that does not exist yet is identified by its directory's
//    UniqueID and its file name. Error: "<out-option> '<path>' is the same
//    file as <in-option> '<path>'".
//  - A file output's directory must exist ("directory 'D' does not exist").
//  - Only regular files are written: an existing output that is a FIFO, a
//    socket, a block or character device or a directory is refused
//    ("<option> '<path>' is a FIFO, not a regular file"); a device node is
//    never replaced by a regular file. Two exceptions, the ones LLVM's own
//    writeToOutput makes: "-" (standard output, only where a tool documents
//    it) and /dev/null (written to, to discard the output; never replaced).
//  - A directory output (--save DIR, --dump-tensors DIR) must be a directory
//    if it exists, and must not be or contain an input file (a plan inside
//    --dump-tensors DIR could be overwritten by rank<R>.bin).
//
// Whole-file outputs are written atomically (writeFileAtomically): into a
// temporary file "PATH.tmp-XXXXXX" in the same directory (LLVM's
// sys::fs::TempFile, removed on failure and on SIGINT/SIGTERM), fsync'ed, then
// renamed over PATH. A process killed at any moment leaves either the old
// PATH or the complete new one under the final name, never a half-written
// file (a SIGKILL may leave the temporary file beside it).
//
// Streaming logs (tessera-run --metrics, JSON lines) are not replaced but
// appended record by record: each record is one write(2) of one whole line
// (appendRecord), so a killed run leaves the whole records written so far.
//
// Inputs (checkInputFile, readInputFile): an input must be a regular file
// (symlinks followed). A FIFO would block the reader forever, a character
// device such as /dev/zero never ends and would be read until memory runs
// out, a directory has no bytes: each is refused with one line naming the
// option, the path and what it is ("--data '/dev/zero' is a character
// device, not a regular file"). readInputFile also bounds the size
// (maxBytes) and re-checks, on the opened descriptor, that the file is the
// one checked. Regular files may be memory-mapped.
//
// Everything here is llvm::sys::fs (status, UniqueID, TempFile, rename); no
// MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_IO_FILESAFETY_H
#define TESSERA_COMMON_IO_FILESAFETY_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tessera::io {

/// A path named on a command line, with the option that named it ("--data",
/// "-o", "the plan"), used in the error messages. Empty paths are skipped.
struct NamedPath {
  std::string option;
  std::string path;
  /// Outputs: a directory the tool writes files into (created if missing).
  /// Inputs: a directory read (e.g. --load DIR); only compared for equality
  /// with file outputs.
  bool directory = false;
};

/// The whole-output check above, before any work. Inputs that do not exist
/// are skipped (their readers report them). Returns the first problem.
llvm::Error checkOutputs(llvm::ArrayRef<NamedPath> inputs,
                         llvm::ArrayRef<NamedPath> outputs);

/// What `path` is when it is not a regular file ("a FIFO", "a character
/// device", "a directory", ...), "" for a regular file, or the reason it
/// cannot be examined ("No such file or directory").
std::string describeNonRegular(llvm::StringRef path);

/// Error unless `path` (symlinks followed) is an existing regular file:
/// "<option> '<path>' is a FIFO, not a regular file", "<option> '<path>':
/// No such file or directory".
llvm::Error checkInputFile(llvm::StringRef option, llvm::StringRef path);

/// Reads the regular file `path` (checkInputFile), at most `maxBytes` long
/// ("<option> '<path>' is N bytes, more than the limit of M"). Large files
/// are memory-mapped (llvm::MemoryBuffer).
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readInputFile(llvm::StringRef option, llvm::StringRef path, uint64_t maxBytes,
              bool isText = false);

/// Writes `path` atomically (see above) with what `write` produces; "-"
/// writes standard output, /dev/null discards. Refuses an existing
/// non-regular `path`. On any failure the temporary file is removed, `path`
/// is untouched and the error names `option` and `path`.
llvm::Error
writeFileAtomically(llvm::StringRef option, llvm::StringRef path,
                    llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write);

/// Writes `record` (one whole line, ending in '\n') to `os` as one write(2)
/// (`os` is made unbuffered; raw_fd_ostream retries only the rest of a short
/// write), so that a killed process leaves whole records. Returns the error
/// of the stream, if any (cleared).
std::error_code appendRecord(llvm::raw_fd_ostream &os, llvm::StringRef record);

} // namespace tessera::io

#endif // TESSERA_COMMON_IO_FILESAFETY_H

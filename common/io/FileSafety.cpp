//===- FileSafety.cpp - never touch what the user has ---------------------===//
//
// See FileSafety.h.
//
//===----------------------------------------------------------------------===//

#include "common/io/FileSafety.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Errno.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <optional>
#include <unistd.h>

namespace fs = llvm::sys::fs;

namespace tessera::io {

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string quoted(llvm::StringRef option, llvm::StringRef path) {
  return (option + " '" + path + "'").str();
}

const char *typeName(fs::file_type type) {
  switch (type) {
  case fs::file_type::directory_file:
    return "a directory";
  case fs::file_type::fifo_file:
    return "a FIFO (named pipe)";
  case fs::file_type::character_file:
    return "a character device";
  case fs::file_type::block_file:
    return "a block device";
  case fs::file_type::socket_file:
    return "a socket";
  case fs::file_type::regular_file:
    return "";
  default:
    return "not a file";
  }
}

/// True when `st` is /dev/null itself (the discard sink outputs may name).
bool isDevNull(const fs::file_status &st) {
  static std::optional<fs::UniqueID> devNull = [] {
    fs::file_status s;
    std::optional<fs::UniqueID> id;
    if (!fs::status("/dev/null", s) &&
        s.type() == fs::file_type::character_file)
      id = s.getUniqueID();
    return id;
  }();
  return devNull && st.type() == fs::file_type::character_file &&
         st.getUniqueID() == *devNull;
}

/// How a path is identified: its own UniqueID when it exists, else its
/// directory's UniqueID and its file name.
struct Identity {
  bool exists = false;
  fs::file_status status;
  fs::UniqueID id;  // exists: the file; else: its directory
  std::string name; // !exists: the file name
  bool parentMissing = false;
  bool operator==(const Identity &o) const {
    if (exists != o.exists || parentMissing || o.parentMissing)
      return false;
    return id == o.id && (exists || name == o.name);
  }
};

Identity identify(llvm::StringRef path) {
  Identity ident;
  if (!fs::status(path, ident.status)) { // follows symlinks
    ident.exists = true;
    ident.id = ident.status.getUniqueID();
    return ident;
  }
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  if (dir.empty())
    dir = ".";
  fs::file_status dirStatus;
  if (fs::status(dir, dirStatus) || !fs::is_directory(dirStatus)) {
    ident.parentMissing = true;
    return ident;
  }
  ident.id = dirStatus.getUniqueID();
  ident.name = llvm::sys::path::filename(path).str();
  return ident;
}

/// True when the directory `dir` (an existing directory's UniqueID) is
/// `file`'s directory or one of its ancestors.
bool contains(const fs::UniqueID &dir, llvm::StringRef file) {
  llvm::SmallString<256> real;
  if (fs::real_path(file, real))
    return false;
  llvm::StringRef p = llvm::sys::path::parent_path(real);
  while (!p.empty()) {
    fs::file_status st;
    if (!fs::status(p, st) && st.getUniqueID() == dir)
      return true;
    llvm::StringRef up = llvm::sys::path::parent_path(p);
    if (up == p)
      break;
    p = up;
  }
  return false;
}

} // namespace

std::string describeNonRegular(llvm::StringRef path) {
  fs::file_status st;
  if (std::error_code ec = fs::status(path, st))
    return ec.message();
  return typeName(st.type());
}

llvm::Error checkOutputs(llvm::ArrayRef<NamedPath> inputs,
                         llvm::ArrayRef<NamedPath> outputs) {
  std::vector<Identity> inIds;
  for (const NamedPath &in : inputs)
    inIds.push_back(in.path.empty() ? Identity() : identify(in.path));
  std::vector<Identity> outIds;
  for (const NamedPath &out : outputs) {
    Identity ident;
    if (!out.path.empty() && out.path != "-")
      ident = identify(out.path);
    outIds.push_back(ident);
    if (out.path.empty() || out.path == "-")
      continue;
    std::string what = quoted(out.option, out.path);
    if (out.directory) {
      if (ident.exists && !fs::is_directory(ident.status))
        return fail(what + " is " +
                    (ident.status.type() == fs::file_type::regular_file
                         ? std::string("a regular file")
                         : std::string(typeName(ident.status.type()))) +
                    ", not a directory");
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!inIds[i].exists || inputs[i].directory)
          continue;
        if (ident.exists && contains(ident.id, inputs[i].path))
          return fail(what + " contains " +
                      quoted(inputs[i].option, inputs[i].path) +
                      "; write the output elsewhere");
      }
      continue;
    }
    if (ident.parentMissing)
      return fail("cannot write " + what + ": directory '" +
                  llvm::sys::path::parent_path(out.path) + "' does not exist");
    if (ident.exists && !isDevNull(ident.status)) {
      if (ident.status.type() != fs::file_type::regular_file)
        return fail(what + " is " + typeName(ident.status.type()) +
                    ", not a regular file; outputs are only written to "
                    "regular files (or /dev/null)");
      for (size_t i = 0; i < inputs.size(); ++i)
        if (!inputs[i].path.empty() && inIds[i] == ident)
          return fail(what + " is the same file as " +
                      quoted(inputs[i].option, inputs[i].path) +
                      "; it would be overwritten");
    }
    if (!ident.exists || !isDevNull(ident.status))
      for (size_t j = 0; j + 1 < outIds.size(); ++j)
        if (!outputs[j].path.empty() && !outputs[j].directory &&
            outIds[j] == ident)
          return fail(what + " is the same file as " +
                      quoted(outputs[j].option, outputs[j].path));
  }
  return llvm::Error::success();
}

llvm::Error checkInputFile(llvm::StringRef option, llvm::StringRef path) {
  fs::file_status st;
  if (std::error_code ec = fs::status(path, st))
    return fail(quoted(option, path) + ": " + ec.message());
  if (st.type() != fs::file_type::regular_file)
    return fail(quoted(option, path) + " is " + typeName(st.type()) +
                ", not a regular file");
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readInputFile(llvm::StringRef option, llvm::StringRef path, uint64_t maxBytes,
              bool isText) {
  if (llvm::Error err = checkInputFile(option, path))
    return std::move(err);
  llvm::Expected<fs::file_t> fd =
      fs::openNativeFileForRead(path, isText ? fs::OF_Text : fs::OF_None);
  if (!fd)
    return fail(quoted(option, path) + ": " + toString(fd.takeError()));
  // The descriptor must be the regular file checked (not swapped meanwhile).
  fs::file_status st;
  std::error_code ec = fs::status(*fd, st);
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  std::string error;
  if (ec)
    error = quoted(option, path) + ": " + ec.message();
  else if (st.type() != fs::file_type::regular_file)
    error = quoted(option, path) + " is " + typeName(st.type()) +
            ", not a regular file";
  else if (st.getSize() > maxBytes)
    error = quoted(option, path) + " is " + std::to_string(st.getSize()) +
            " bytes, more than the limit of " + std::to_string(maxBytes);
  else {
    auto read = llvm::MemoryBuffer::getOpenFile(*fd, path, st.getSize(),
                                                /*RequiresNullTerminator=*/
                                                isText);
    if (read)
      buffer = std::move(*read);
    else
      error = quoted(option, path) + ": " + read.getError().message();
  }
  fs::closeFile(*fd);
  if (!error.empty())
    return fail(error);
  return std::move(buffer);
}

llvm::Error writeFileAtomically(
    llvm::StringRef option, llvm::StringRef path,
    llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write) {
  std::string what = quoted(option, path);
  if (path == "-")
    return write(llvm::outs());
  fs::file_status st;
  if (!fs::status(path, st)) {
    if (isDevNull(st)) {
      llvm::raw_null_ostream os;
      return write(os);
    }
    if (st.type() != fs::file_type::regular_file)
      return fail(what + " is " + typeName(st.type()) +
                  ", not a regular file; outputs are only written to "
                  "regular files (or /dev/null)");
  }
  // Same directory as `path`, so the rename stays on one file system.
  llvm::Expected<fs::TempFile> temp =
      fs::TempFile::create(path + ".tmp-%%%%%%");
  if (!temp)
    return fail("cannot write " + what + ": " + toString(temp.takeError()));
  std::string error;
  {
    llvm::raw_fd_ostream os(temp->FD, /*shouldClose=*/false);
    if (llvm::Error err = write(os))
      error = toString(std::move(err));
    os.flush();
    if (error.empty() && os.has_error())
      error = "cannot write " + what + ": " + os.error().message();
    os.clear_error();
  }
  if (error.empty() && ::fsync(temp->FD) != 0)
    error = "cannot write " + what + ": " + llvm::sys::StrError(errno);
  if (!error.empty()) {
    llvm::consumeError(temp->discard());
    return fail(error);
  }
  if (llvm::Error err = temp->keep(path)) {
    std::string msg = "cannot write " + what + ": " + toString(std::move(err));
    return fail(msg);
  }
  return llvm::Error::success();
}

std::error_code appendRecord(llvm::raw_fd_ostream &os, llvm::StringRef record) {
  os.flush();
  os.SetUnbuffered();
  os.write(record.data(), record.size());
  std::error_code ec = os.error();
  os.clear_error();
  return ec;
}

} // namespace tessera::io

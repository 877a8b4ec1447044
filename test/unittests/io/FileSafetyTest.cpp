//===- FileSafetyTest.cpp - common/io/FileSafety.h and CommandLine.h ------===//
//
// On real files in a fresh temporary directory: the same file by name,
// symlink and hard link; not-yet-existing outputs; FIFOs, /dev/zero and
// /dev/null; directory outputs holding an input; the atomic writer (the old
// file survives a failed write; no temporary file is left); the size bound
// of readInputFile; and the rewriting of LLVM's option errors.
//
//===----------------------------------------------------------------------===//

#include "common/io/FileSafety.h"
#include "common/io/CommandLine.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

using namespace tessera::io;
namespace fs = llvm::sys::fs;

namespace {

class FileSafetyTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(fs::createUniqueDirectory("filesafety", dir));
  }
  void TearDown() override { fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  void writeText(llvm::StringRef name, llvm::StringRef text) const {
    std::error_code ec;
    llvm::raw_fd_ostream os(path(name), ec);
    ASSERT_FALSE(ec);
    os << text;
  }
  std::string readText(llvm::StringRef name) const {
    auto buf = llvm::MemoryBuffer::getFile(path(name));
    return buf ? (*buf)->getBuffer().str() : "<unreadable>";
  }
  std::vector<std::string> listDir() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec))
      names.push_back(llvm::sys::path::filename(it->path()).str());
    std::sort(names.begin(), names.end());
    return names;
  }

  llvm::SmallString<256> dir;
};

std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

TEST_F(FileSafetyTest, SameFileByNameSymlinkAndHardLink) {
  writeText("plan.tsr", "plan");
  ASSERT_FALSE(fs::create_link(path("plan.tsr"), path("sym.json")));
  ASSERT_FALSE(fs::create_hard_link(path("plan.tsr"), path("hard.json")));
  std::vector<NamedPath> inputs{{"the plan", path("plan.tsr")}};
  for (const char *name : {"plan.tsr", "sym.json", "hard.json"}) {
    std::string msg =
        errorText(checkOutputs(inputs, {{"--trace", path(name)}}));
    EXPECT_EQ(msg, "--trace '" + path(name) +
                       "' is the same file as the plan '" + path("plan.tsr") +
                       "'; it would be overwritten")
        << name;
  }
  // Another file, or a new one, is fine.
  writeText("other.json", "x");
  EXPECT_EQ(errorText(checkOutputs(inputs, {{"--trace", path("other.json")},
                                            {"--profile", path("new.json")}})),
            "");
}

TEST_F(FileSafetyTest, TwoOutputsNamingOneNewFile) {
  std::string msg = errorText(checkOutputs(
      {}, {{"--trace", path("out.json")}, {"--profile", path("out.json")}}));
  EXPECT_EQ(msg, "--profile '" + path("out.json") + "' is the same file as " +
                     "--trace '" + path("out.json") + "'");
  // The same directory spelled two ways.
  std::string dotted = dir.str().str() + "/./out.json";
  EXPECT_NE(errorText(checkOutputs(
                {}, {{"--trace", path("out.json")}, {"--profile", dotted}})),
            "");
}

TEST_F(FileSafetyTest, MissingDirectory) {
  std::string out = path("no/such/dir/m.jsonl");
  EXPECT_EQ(errorText(checkOutputs({}, {{"--metrics", out}})),
            "cannot write --metrics '" + out + "': directory '" +
                path("no/such/dir") + "' does not exist");
}

TEST_F(FileSafetyTest, NonRegularOutputs) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(errorText(checkOutputs({}, {{"-o", path("fifo")}})),
            "-o '" + path("fifo") +
                "' is a FIFO (named pipe), not a regular file; outputs are "
                "only written to regular files (or /dev/null)");
  EXPECT_EQ(errorText(checkOutputs({}, {{"-o", std::string(dir)}})),
            "-o '" + std::string(dir) +
                "' is a directory, not a regular file; outputs are only "
                "written to regular files (or /dev/null)");
  EXPECT_NE(errorText(checkOutputs({}, {{"-o", "/dev/zero"}})), "");
  // /dev/null discards; "-" is standard output.
  EXPECT_EQ(errorText(checkOutputs({}, {{"-o", "/dev/null"},
                                        {"--trace", "/dev/null"},
                                        {"--profile", "-"}})),
            "");
  // The writer refuses them too (and leaves the FIFO a FIFO).
  EXPECT_NE(errorText(writeFileAtomically("-o", path("fifo"),
                                          [](llvm::raw_ostream &os) {
                                            os << "x";
                                            return llvm::Error::success();
                                          })),
            "");
  fs::file_status st;
  ASSERT_FALSE(fs::status(path("fifo"), st));
  EXPECT_EQ(st.type(), fs::file_type::fifo_file);
  EXPECT_EQ(errorText(writeFileAtomically("-o", "/dev/null",
                                          [](llvm::raw_ostream &os) {
                                            os << "x";
                                            return llvm::Error::success();
                                          })),
            "");
  ASSERT_FALSE(fs::status("/dev/null", st));
  EXPECT_EQ(st.type(), fs::file_type::character_file);
}

TEST_F(FileSafetyTest, DirectoryOutputs) {
  writeText("plan.tsr", "plan");
  std::vector<NamedPath> inputs{{"the plan", path("plan.tsr")},
                                {"--load", std::string(dir), true}};
  EXPECT_EQ(errorText(checkOutputs(
                inputs, {{"--dump-tensors", std::string(dir), true}})),
            "--dump-tensors '" + std::string(dir) + "' contains the plan '" +
                path("plan.tsr") + "'; write the output elsewhere");
  // --save DIR --load DIR (resume) is allowed when DIR holds no input file.
  EXPECT_EQ(errorText(checkOutputs({{"--load", path("ck"), true}},
                                   {{"--save", path("ck"), true}})),
            "");
  EXPECT_EQ(errorText(checkOutputs({}, {{"--save", path("plan.tsr"), true}})),
            "--save '" + path("plan.tsr") +
                "' is a regular file, not a directory");
}

TEST_F(FileSafetyTest, Inputs) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(errorText(checkInputFile("--data", path("fifo"))),
            "--data '" + path("fifo") +
                "' is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(errorText(checkInputFile("--data", "/dev/zero")),
            "--data '/dev/zero' is a character device, not a regular file");
  EXPECT_EQ(errorText(checkInputFile("--data", std::string(dir))),
            "--data '" + std::string(dir) +
                "' is a directory, not a regular file");
  EXPECT_EQ(errorText(checkInputFile("--data", path("missing"))),
            "--data '" + path("missing") + "': No such file or directory");
  auto zero = readInputFile("the model", "/dev/zero", 1 << 20);
  EXPECT_EQ(errorText(zero.takeError()),
            "the model '/dev/zero' is a character device, not a regular file");

  writeText("small.json", "{}");
  auto small = readInputFile("--cluster", path("small.json"), 2);
  ASSERT_TRUE(bool(small));
  EXPECT_EQ((*small)->getBuffer(), "{}");
  auto big = readInputFile("--cluster", path("small.json"), 1);
  EXPECT_EQ(errorText(big.takeError()),
            "--cluster '" + path("small.json") +
                "' is 2 bytes, more than the limit of 1");
}

TEST_F(FileSafetyTest, AtomicWrite) {
  writeText("out.json", "old");
  // A failing writer leaves the old file and no temporary file.
  llvm::Error err = writeFileAtomically(
      "--trace", path("out.json"), [](llvm::raw_ostream &os) {
        os << "half";
        return llvm::createStringError("the writer failed");
      });
  EXPECT_EQ(errorText(std::move(err)), "the writer failed");
  EXPECT_EQ(readText("out.json"), "old");
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.json"});
  // A successful one replaces it whole.
  ASSERT_FALSE(writeFileAtomically("--trace", path("out.json"),
                                   [](llvm::raw_ostream &os) {
                                     os << "new";
                                     return llvm::Error::success();
                                   }));
  EXPECT_EQ(readText("out.json"), "new");
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.json"});
  // A missing directory is one error naming the option.
  std::string msg = errorText(writeFileAtomically(
      "--trace", path("no/dir/x.json"),
      [](llvm::raw_ostream &os) { return llvm::Error::success(); }));
  EXPECT_EQ(
      msg.rfind("cannot write --trace '" + path("no/dir/x.json") + "': ", 0),
      0u)
      << msg;
}

TEST_F(FileSafetyTest, AppendRecordWritesWholeLines) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path("m.jsonl"), ec);
  ASSERT_FALSE(ec);
  EXPECT_FALSE(appendRecord(os, "{\"step\":0}\n"));
  EXPECT_FALSE(appendRecord(os, "{\"step\":1}\n"));
  os.close();
  EXPECT_EQ(readText("m.jsonl"), "{\"step\":0}\n{\"step\":1}\n");
}

TEST(CommandLineTest, OptionErrorsGetErrorPrefix) {
  EXPECT_EQ(formatOptionErrors("tessera-run: for the --steps option: 'x' "
                               "value invalid for long argument!\n",
                               "tessera-run"),
            "tessera-run: error: for the --steps option: 'x' value invalid "
            "for long argument!\n");
  EXPECT_EQ(formatOptionErrors(
                "tessera-run: Unknown command line argument '--stepz'.  Try: "
                "'tessera-run --help'\ntessera-run: Did you mean '--steps'?\n",
                "tessera-run"),
            "tessera-run: error: Unknown command line argument '--stepz'.  "
            "Try: 'tessera-run --help' Did you mean '--steps'?\n");
  EXPECT_EQ(formatOptionErrors("tessera-run: Too many positional arguments "
                               "specified!\nCan specify at most 1 positional "
                               "arguments: See: tessera-run --help\n",
                               "tessera-run"),
            "tessera-run: error: Too many positional arguments specified! Can "
            "specify at most 1 positional arguments: See: tessera-run "
            "--help\n");
}

} // namespace

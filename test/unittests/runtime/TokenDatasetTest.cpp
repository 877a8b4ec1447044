//===- TokenDatasetTest.cpp - token file and batch convention -------------===//

#include "runtime/data/TokenDataset.h"

#include "TestUtil.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

using namespace tessera::runtime;
using namespace tessera::runtime::test;

namespace {
/// Writes tokens as little-endian uint16 to a fresh temp file.
std::string writeTokens(const std::vector<uint16_t> &tokens,
                        bool extraByte = false) {
  llvm::SmallString<128> path;
  int fd;
  EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("tokens", "bin", fd, path));
  llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
  for (uint16_t t : tokens) {
    os << (char)(t & 0xff) << (char)(t >> 8);
  }
  if (extraByte)
    os << 'x';
  return path.str().str();
}
} // namespace

TEST(TokenDataset, ExactIndices) {
  // T = 20 tokens, token(i) = 100 + i.
  std::vector<uint16_t> toks;
  for (int i = 0; i < 20; ++i)
    toks.push_back(100 + i);
  std::string path = writeTokens(toks);
  auto ds = TokenDataset::open(path, 4);
  ASSERT_TRUE(bool(ds)) << llvm::toString(ds.takeError());
  EXPECT_EQ(ds->numTokens(), 20);
  // B = 4, S = 4, D = 2, step 3: n = 12 + j, start = (4 n) mod 15.
  //   j = 0..3 -> n = 12..15 -> start = 3, 7, 11, 0.
  const int64_t expectStarts[2][2] = {{3, 7}, {11, 0}};
  for (int64_t r = 0; r < 2; ++r) {
    auto b = ds->batch(3, 4, 4, r, 2);
    ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
    ASSERT_EQ(b->inputs.shape(), (std::vector<int64_t>{2, 4}));
    ASSERT_EQ(b->labels.shape(), (std::vector<int64_t>{2, 4}));
    ASSERT_EQ(b->inputs.dtype(), DType::I64);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 4; ++k) {
        EXPECT_EQ(b->inputs.data<int64_t>()[i * 4 + k],
                  100 + expectStarts[r][i] + k);
        EXPECT_EQ(b->labels.data<int64_t>()[i * 4 + k],
                  101 + expectStarts[r][i] + k);
      }
  }
  // The serial batch (D = 1) is the concatenation of the DP shards.
  auto full = ds->batch(3, 4, 4, 0, 1);
  ASSERT_TRUE(bool(full));
  EXPECT_EQ(full->inputs.data<int64_t>()[2 * 4], 100 + 11);
  // Step 0, sample 0 starts at 0.
  auto b0 = ds->batch(0, 4, 4, 0, 1);
  ASSERT_TRUE(bool(b0));
  EXPECT_EQ(b0->inputs.data<int64_t>()[0], 100);
  EXPECT_EQ(b0->labels.data<int64_t>()[3], 104);
  llvm::sys::fs::remove(path);
}

TEST(TokenDataset, LittleEndianAndMaxLabel) {
  std::string path = writeTokens({0x1234, 65535, 7, 8, 9});
  auto ds = TokenDataset::open(path);
  ASSERT_TRUE(bool(ds));
  EXPECT_EQ(ds->token(0), 0x1234);
  EXPECT_EQ(ds->token(1), 65535);
  auto b = ds->batch(0, 1, 2, 0, 1);
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_EQ(b->inputs.data<int64_t>()[1], 65535);
  llvm::sys::fs::remove(path);
}

TEST(TokenDataset, Errors) {
  auto missing = TokenDataset::open("/nonexistent/tokens.bin");
  ASSERT_FALSE(bool(missing));
  std::string msg = llvm::toString(missing.takeError());
  EXPECT_NE(msg.find("/nonexistent/tokens.bin"), std::string::npos) << msg;

  std::string shortPath = writeTokens({1, 2, 3, 4, 5});
  auto tooShort = TokenDataset::open(shortPath, 4); // needs T > 5
  ASSERT_FALSE(bool(tooShort));
  msg = llvm::toString(tooShort.takeError());
  EXPECT_NE(msg.find(shortPath), std::string::npos) << msg;
  EXPECT_NE(msg.find("too short"), std::string::npos) << msg;
  auto ok = TokenDataset::open(shortPath);
  ASSERT_TRUE(bool(ok));
  auto b = ok->batch(0, 2, 4, 0, 1);
  ASSERT_FALSE(bool(b));
  msg = llvm::toString(b.takeError());
  EXPECT_NE(msg.find("too short"), std::string::npos) << msg;
  auto split = ok->batch(0, 3, 2, 0, 2);
  ASSERT_FALSE(bool(split));
  llvm::consumeError(split.takeError());
  llvm::sys::fs::remove(shortPath);

  std::string odd = writeTokens({1, 2, 3}, /*extraByte=*/true);
  auto oddDs = TokenDataset::open(odd);
  ASSERT_FALSE(bool(oddDs));
  msg = llvm::toString(oddDs.takeError());
  EXPECT_NE(msg.find(odd), std::string::npos) << msg;
  llvm::sys::fs::remove(odd);
}

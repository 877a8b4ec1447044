//===- TokenDatasetTest.cpp - token file and batch convention -------------===//

#include "runtime/data/TokenDataset.h"

#include "TestUtil.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>

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

namespace {
/// Writes `bytes` to a fresh temp file named <stem>-XXXX.<ext>.
std::string writeBytes(const std::string &bytes, llvm::StringRef ext = "u32") {
  llvm::SmallString<128> path;
  int fd;
  EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("tokens", ext, fd, path));
  llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
  os << bytes;
  return path.str().str();
}

template <typename T> void putLE(std::string &out, T value) {
  for (size_t k = 0; k < sizeof(T); ++k)
    out.push_back(
        static_cast<char>((static_cast<uint64_t>(value) >> (8 * k)) & 0xff));
}

/// A Megatron-LM indexed dataset (indexed_dataset.py's _IndexWriter layout)
/// of `docs` (one sequence per document) with ids of `code` (8: uint16, 4:
/// int32), written at PREFIX.bin/.idx; returns PREFIX. `mutate` may edit the
/// index and .bin bytes before they are written.
struct Indexed {
  std::string idx, bin;
};
std::string
writeIndexed(const std::vector<std::vector<int64_t>> &docs, uint8_t code,
             const std::function<void(Indexed &)> &mutate = nullptr) {
  llvm::SmallString<128> dir;
  EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("megatron", dir));
  std::string prefix = (dir + "/data").str();
  size_t width = code == 8 ? 2 : 4;
  Indexed f;
  f.idx = std::string("MMIDIDX\0\0", 9);
  putLE<uint64_t>(f.idx, 1);
  f.idx.push_back(static_cast<char>(code));
  putLE<uint64_t>(f.idx, docs.size());
  putLE<uint64_t>(f.idx, docs.size() + 1);
  for (const auto &d : docs)
    putLE<int32_t>(f.idx, static_cast<int32_t>(d.size()));
  int64_t ptr = 0;
  for (const auto &d : docs) {
    putLE<int64_t>(f.idx, ptr);
    ptr += static_cast<int64_t>(d.size() * width);
  }
  for (size_t k = 0; k <= docs.size(); ++k)
    putLE<int64_t>(f.idx, static_cast<int64_t>(k));
  for (const auto &d : docs)
    for (int64_t t : d) {
      if (width == 2)
        putLE<uint16_t>(f.bin, static_cast<uint16_t>(t));
      else
        putLE<int32_t>(f.bin, static_cast<int32_t>(t));
    }
  if (mutate)
    mutate(f);
  for (auto [ext, bytes] : {std::pair{".idx", &f.idx}, {".bin", &f.bin}}) {
    std::error_code ec;
    llvm::raw_fd_ostream os(prefix + ext, ec);
    EXPECT_FALSE(ec);
    os << *bytes;
  }
  return prefix;
}

std::string openError(const std::string &path,
                      std::optional<TokenDType> dtype = std::nullopt) {
  auto ds = TokenDataset::open(path, 0, dtype);
  if (ds)
    return "";
  return llvm::toString(ds.takeError());
}
} // namespace

TEST(TokenDataset, Uint32) {
  std::string bytes;
  std::vector<uint32_t> ids = {1, 65536, 70000, 0xfffffffe, 5, 6};
  for (uint32_t t : ids)
    putLE<uint32_t>(bytes, t);
  std::string path = writeBytes(bytes);
  auto ds = TokenDataset::open(path, 2, TokenDType::U32);
  ASSERT_TRUE(bool(ds)) << llvm::toString(ds.takeError());
  ASSERT_EQ(ds->numTokens(), 6);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(ds->token(i), static_cast<int64_t>(ids[i]));
  auto b = ds->batch(0, 1, 2, 0, 1);
  ASSERT_TRUE(bool(b));
  EXPECT_EQ(b->inputs.data<int64_t>()[1], 65536);
  EXPECT_EQ(b->labels.data<int64_t>()[1], 70000);
  // The default (uint16) reads the same bytes as 12 ids.
  auto as16 = TokenDataset::open(path);
  ASSERT_TRUE(bool(as16));
  EXPECT_EQ(as16->numTokens(), 12);
  // The vocabulary check names the file, the position and the id.
  std::string msg = llvm::toString(ds->checkVocabulary(65536));
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 1 is 65536, outside the model's vocabulary "
                     "[0, 65536)"),
            std::string::npos)
      << msg;
  msg = llvm::toString(ds->checkVocabulary(70000));
  EXPECT_NE(msg.find("token 2 is 70000"), std::string::npos) << msg;
  msg = llvm::toString(ds->checkVocabulary(70001));
  EXPECT_NE(msg.find("token 3 is 4294967294"), std::string::npos) << msg;
  EXPECT_FALSE(bool(ds->checkVocabulary(0xffffffffLL)));
  // A size that is not a multiple of 4.
  std::string odd = writeBytes(bytes + "xy");
  msg = openError(odd, TokenDType::U32);
  EXPECT_NE(msg.find(odd), std::string::npos) << msg;
  EXPECT_NE(msg.find("whole number of uint32"), std::string::npos) << msg;
  llvm::sys::fs::remove(path);
  llvm::sys::fs::remove(odd);
  // --data-dtype names.
  EXPECT_EQ(*parsePlainTokenDType("uint32"), TokenDType::U32);
  EXPECT_EQ(*parsePlainTokenDType("uint16"), TokenDType::U16);
  auto bad = parsePlainTokenDType("int32");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("uint16 or uint32"),
            std::string::npos);
}

TEST(TokenDataset, MegatronIndexedSameBatchesAsPlain) {
  std::vector<std::vector<int64_t>> docs = {
      {5, 6, 7}, {}, {8, 9, 10, 11, 12}, {13}, {14, 15, 16, 17, 18, 19, 20}};
  for (uint8_t code : {uint8_t(8), uint8_t(4)}) {
    std::string prefix = writeIndexed(docs, code);
    std::string plainBytes;
    for (const auto &d : docs)
      for (int64_t t : d) {
        if (code == 8)
          putLE<uint16_t>(plainBytes, t);
        else
          putLE<uint32_t>(plainBytes, t);
      }
    std::string plain = writeBytes(plainBytes);
    auto ix = TokenDataset::open(prefix, 4);
    ASSERT_TRUE(bool(ix)) << llvm::toString(ix.takeError());
    EXPECT_TRUE(ix->isIndexed());
    EXPECT_EQ(ix->dtype(), code == 8 ? TokenDType::U16 : TokenDType::I32);
    EXPECT_EQ(ix->numSequences(), 5);
    EXPECT_EQ(ix->numDocuments(), 5);
    EXPECT_EQ(ix->dataPath(), prefix + ".bin");
    // PREFIX.bin names the same dataset.
    auto viaBin = TokenDataset::open(prefix + ".bin", 4);
    ASSERT_TRUE(bool(viaBin)) << llvm::toString(viaBin.takeError());
    EXPECT_TRUE(viaBin->isIndexed());
    auto pl = TokenDataset::open(plain, 4,
                                 code == 8 ? TokenDType::U16 : TokenDType::U32);
    ASSERT_TRUE(bool(pl));
    ASSERT_EQ(ix->numTokens(), 16);
    ASSERT_EQ(pl->numTokens(), 16);
    for (int64_t step = 0; step < 5; ++step) {
      auto a = ix->batch(step, 4, 4, 1, 2);
      auto b = pl->batch(step, 4, 4, 1, 2);
      ASSERT_TRUE(a && b);
      for (int64_t k = 0; k < 8; ++k) {
        EXPECT_EQ(a->inputs.data<int64_t>()[k], b->inputs.data<int64_t>()[k]);
        EXPECT_EQ(a->labels.data<int64_t>()[k], b->labels.data<int64_t>()[k]);
      }
    }
    // The vocabulary check names the sequence and the position in it.
    std::string msg = llvm::toString(ix->checkVocabulary(12));
    EXPECT_NE(msg.find(prefix + ".bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("token 7 (sequence 2, position 4) is 12"),
              std::string::npos)
        << msg;
    EXPECT_FALSE(bool(ix->checkVocabulary(21)));
    // Split over 3 parts ([0,5), [5,10), [10,16)): only the part holding
    // token 7 fails; over 4 ([0,4), [4,8), ...) the second.
    EXPECT_FALSE(bool(ix->checkVocabulary(12, 0, 3)));
    msg = llvm::toString(ix->checkVocabulary(12, 1, 3));
    EXPECT_NE(msg.find("token 7 "), std::string::npos) << msg;
    msg = llvm::toString(ix->checkVocabulary(12, 2, 3));
    EXPECT_NE(msg.find("token 10 "), std::string::npos) << msg;
    EXPECT_FALSE(bool(ix->checkVocabulary(12, 0, 4)));
    msg = llvm::toString(ix->checkVocabulary(12, 1, 4));
    EXPECT_NE(msg.find("token 7 (sequence 2, position 4) is 12"),
              std::string::npos)
        << msg;
    // --data-dtype must agree with the index.
    msg = openError(prefix, TokenDType::U32);
    EXPECT_NE(msg.find("disagrees"), std::string::npos) << msg;
    llvm::sys::fs::remove(plain);
  }
}

TEST(TokenDataset, MegatronIndexedErrors) {
  std::vector<std::vector<int64_t>> docs = {{1, 2, 3}, {4, 5}, {6, 7, 8, 9}};
  // Each malformed pair gives one line naming the file and the fault.
  struct Case {
    const char *what;
    std::function<void(Indexed &)> mutate;
    const char *file; // ".idx" or ".bin"
    const char *expect;
  };
  auto setByte = [](size_t at, char v) {
    return [=](Indexed &f) { f.idx[at] = v; };
  };
  const size_t lengthsAt = 34, pointersAt = 34 + 12, docsAt = 34 + 12 + 24;
  std::vector<Case> cases = {
      {"magic", setByte(0, 'X'), ".idx", "magic"},
      {"version", setByte(9, 2), ".idx", "unsupported version 2"},
      {"float dtype", setByte(17, 7), ".idx", "dtype code 7 is a float type"},
      {"unknown dtype", setByte(17, 9), ".idx", "dtype code 9 is unknown"},
      {"short header", [](Indexed &f) { f.idx.resize(20); }, ".idx",
       "truncated: 20 bytes"},
      {"truncated", [](Indexed &f) { f.idx.pop_back(); }, ".idx", "truncated"},
      {"trailing", [](Indexed &f) { f.idx += "zz"; }, ".idx", "trailing bytes"},
      {"huge count", setByte(25, 0x7f), ".idx", "impossibly large"},
      {"negative length", setByte(lengthsAt + 3, char(0x80)), ".idx",
       "sequence 0 has negative length"},
      {"pointer", setByte(pointersAt + 8, 2), ".idx",
       "sequence 1 starts at byte 2 of the .bin, expected 6"},
      {"documents", setByte(docsAt + 8, 9), ".idx", "document index 1 is 9"},
      {"bin short", [](Indexed &f) { f.bin.pop_back(); }, ".bin",
       "size 17 bytes, but its index"},
      {"bin long", [](Indexed &f) { f.bin += "ab"; }, ".bin", "size 20 bytes"},
  };
  for (const Case &c : cases) {
    std::string prefix = writeIndexed(docs, 8, c.mutate);
    std::string msg = openError(prefix);
    EXPECT_NE(msg.find("'" + prefix + c.file + "'"), std::string::npos)
        << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.what << ": " << msg;
  }
  // A missing .bin next to an index.
  std::string prefix = writeIndexed(docs, 8);
  llvm::sys::fs::remove(prefix + ".bin");
  std::string msg = openError(prefix);
  EXPECT_NE(msg.find("'" + prefix + ".bin': cannot read"), std::string::npos)
      << msg;
  // Negative ids of a signed dtype are outside every vocabulary.
  std::string negative = writeIndexed({{1, 2}, {3, -4, 5}}, 4);
  auto neg = TokenDataset::open(negative);
  ASSERT_TRUE(bool(neg)) << llvm::toString(neg.takeError());
  EXPECT_EQ(neg->token(3), -4);
  msg = llvm::toString(neg->checkVocabulary(100));
  EXPECT_NE(msg.find("token 3 (sequence 1, position 1) is -4"),
            std::string::npos)
      << msg;
  // The multimodal layout (a mode byte per sequence) is accepted.
  std::string modal = writeIndexed(docs, 8, [](Indexed &f) { f.idx += "abc"; });
  EXPECT_EQ(openError(modal), "");
}

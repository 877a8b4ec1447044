//===- SafeTensorsTest.cpp - safetensors round trip and corrupt files -----===//

#include "runtime/checkpoint/SafeTensors.h"

#include "TestUtil.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <unistd.h>

using namespace tessera::runtime;
using namespace tessera::runtime::test;

namespace {

std::string blob(const std::string &header, const std::string &data,
                 uint64_t sizeOverride = ~0ull) {
  char len[8];
  llvm::support::endian::write64le(len, sizeOverride == ~0ull ? header.size()
                                                              : sizeOverride);
  return std::string(len, 8) + header + data;
}

std::string tempPath(const char *stem) {
  llvm::SmallString<128> p;
  llvm::sys::fs::createUniquePath(std::string(stem) + "-%%%%%%.safetensors", p,
                                  /*MakeAbsolute=*/true);
  return p.str().str();
}

/// Expects parsing `buf` to fail with a message containing every needle.
void expectParseError(const std::string &buf,
                      std::initializer_list<const char *> needles) {
  auto f = parseSafeTensors(buf, "blob.safetensors");
  ASSERT_FALSE(bool(f));
  std::string msg = llvm::toString(f.takeError());
  EXPECT_NE(msg.find("blob.safetensors"), std::string::npos) << msg;
  for (const char *n : needles)
    EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' in " << msg;
}

} // namespace

TEST(SafeTensors, RoundTripFile) {
  Tensor w = randomF32({3, 4}, 1);
  Tensor ids = Tensor::fromVector<int64_t>({5}, {0, -1, 1ll << 40, 7, 9});
  Tensor mask = Tensor::fromVector<uint8_t>({2, 2}, {1, 0, 0, 1});
  Tensor s = Tensor::scalar(3.5f);
  Tensor e = Tensor::empty(DType::F32, {0, 3});
  std::map<std::string, std::string> md = {{"format", "pt"}, {"step", "12"}};
  std::string path = tempPath("rt");
  ASSERT_NO_ERR(writeSafeTensors(
      path, {{"w", &w}, {"ids", &ids}, {"mask", &mask}, {"s", &s}, {"e", &e}},
      md));
  EXPECT_FALSE(llvm::sys::fs::exists(path + ".tmp"));

  // Layout: 8-byte aligned data start.
  auto raw = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(raw));
  uint64_t n = llvm::support::endian::read64le((*raw)->getBufferStart());
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ((*raw)->getBufferSize(),
            8 + n + w.bytes() + ids.bytes() + mask.bytes() + s.bytes());

  auto f = readSafeTensors(path);
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  EXPECT_EQ(f->names, (std::vector<std::string>{"w", "ids", "mask", "s", "e"}));
  EXPECT_EQ(f->metadata, md);
  expectEqualBytes(*f->find("w"), w);
  expectEqualBytes(*f->find("ids"), ids);
  expectEqualBytes(*f->find("mask"), mask);
  expectEqualBytes(*f->find("s"), s);
  EXPECT_EQ(f->find("s")->rank(), 0);
  EXPECT_EQ(f->find("e")->shape(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(f->find("nope"), nullptr);

  // Overwrite in place.
  Tensor w2 = randomF32({2}, 2);
  ASSERT_NO_ERR(writeSafeTensors(path, {{"w2", &w2}}, {}));
  auto f2 = readSafeTensors(path);
  ASSERT_TRUE(bool(f2));
  EXPECT_EQ(f2->names, (std::vector<std::string>{"w2"}));
  EXPECT_TRUE(f2->metadata.empty());
  llvm::sys::fs::remove(path);
}

TEST(SafeTensors, InMemoryRoundTrip) {
  Tensor a = randomF32({7}, 3);
  auto buf = serializeSafeTensors({{"a", &a}}, {{"k", "v"}});
  ASSERT_TRUE(bool(buf));
  auto f = parseSafeTensors(*buf, "embedded");
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  expectEqualBytes(f->tensors[0], a);
  EXPECT_EQ(f->metadata.at("k"), "v");
}

TEST(SafeTensors, BF16RoundTrip) {
  Tensor h = Tensor::empty(DType::BF16, {3});
  for (int i = 0; i < 3; ++i)
    h.data<BFloat16>()[i] = toBFloat16(0.5f * i - 1.0f);
  auto buf = serializeSafeTensors({{"h", &h}}, {});
  ASSERT_TRUE(bool(buf));
  EXPECT_NE(buf->find("\"BF16\""), std::string::npos);
  auto f = parseSafeTensors(*buf, "embedded");
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  ASSERT_EQ(f->tensors[0].dtype(), DType::BF16);
  expectEqualBytes(f->tensors[0], h);
}

TEST(SafeTensors, F16RoundTrip) {
  Tensor h = Tensor::empty(DType::F16, {4});
  for (int i = 0; i < 3; ++i)
    h.data<Float16>()[i] = toFloat16(0.5f * i - 1.0f);
  h.data<Float16>()[3] = toFloat16(0x1p-24f); // a subnormal
  auto buf = serializeSafeTensors({{"h", &h}}, {});
  ASSERT_TRUE(bool(buf));
  EXPECT_NE(buf->find("\"F16\""), std::string::npos);
  auto f = parseSafeTensors(*buf, "embedded");
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  ASSERT_EQ(f->tensors[0].dtype(), DType::F16);
  expectEqualBytes(f->tensors[0], h);
}

TEST(SafeTensors, ForeignHeaderOrder) {
  // As written by the Python package: keys not in offset order, padding.
  std::string header =
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  while ((header.size() + 8) % 8)
    header += ' ';
  std::string data(12, '\0');
  int64_t seven = 7;
  float half = 0.5f;
  std::memcpy(&data[0], &seven, 8);
  std::memcpy(&data[8], &half, 4);
  auto f = parseSafeTensors(blob(header, data), "foreign");
  ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
  EXPECT_EQ(f->names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f->find("a")->data<int64_t>()[0], 7);
  EXPECT_EQ(f->find("b")->data<float>()[0], 0.5f);
}

TEST(SafeTensors, CorruptFiles) {
  std::string good =
      R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string data(8, '\0');
  ASSERT_TRUE(bool(parseSafeTensors(blob(good, data), "ok")));

  expectParseError("abc", {"too short"});
  expectParseError(blob(good, data, 1ull << 40), {"header size"});
  expectParseError(blob(good, data).substr(0, 20), {"header size"});
  expectParseError(blob(R"({"t": {"dtype": )", data), {"invalid JSON"});
  expectParseError(blob("[1, 2]", data), {"not a JSON object"});
  // Truncated data section: offsets point past the end.
  expectParseError(blob(good, data.substr(0, 5)), {"'t'", "data_offsets"});
  expectParseError(
      blob(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,2]}})", data),
      {"'t'", "data_offsets"});
  expectParseError(
      blob(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
      {"'t'", "need"});
  expectParseError(
      blob(R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data),
      {"'t'", "unsupported dtype"});
  expectParseError(
      blob(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
      {"'t'", "shape"});
  expectParseError(
      blob(
          R"({"t":{"dtype":"F32","shape":[1099511627776, 1099511627776],"data_offsets":[0,8]}})",
          data),
      {"'t'"});
  expectParseError(
      blob(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data),
      {"'t'", "data_offsets"});
  expectParseError(blob(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", data),
                   {"'t'", "dtype"});
  expectParseError(blob(R"({"t":5})", data), {"'t'"});
  expectParseError(
      blob(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           data),
      {"overlaps"});
  expectParseError(blob(R"({"__metadata__":{"k":1}})", ""), {"__metadata__"});
}

TEST(SafeTensors, ReadErrorsNamePath) {
  auto f = readSafeTensors("/nonexistent/ckpt.safetensors");
  ASSERT_FALSE(bool(f));
  std::string msg = llvm::toString(f.takeError());
  EXPECT_NE(msg.find("/nonexistent/ckpt.safetensors"), std::string::npos);

  // A truncated file on disk.
  std::string path = tempPath("trunc");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << blob(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
               "1234");
  }
  auto t = readSafeTensors(path);
  ASSERT_FALSE(bool(t));
  msg = llvm::toString(t.takeError());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'t'"), std::string::npos) << msg;
  llvm::sys::fs::remove(path);
}

TEST(SafeTensors, FailedWriteLeavesOldFile) {
  std::string path = tempPath("keep");
  Tensor a = randomF32({4}, 5);
  ASSERT_NO_ERR(writeSafeTensors(path, {{"a", &a}}, {}));
  // Duplicate names: the write fails, the old file stays, no tmp left.
  std::string msg =
      errorMessage(writeSafeTensors(path, {{"x", &a}, {"x", &a}}, {}));
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_FALSE(llvm::sys::fs::exists(path + ".tmp"));
  auto f = readSafeTensors(path);
  ASSERT_TRUE(bool(f));
  EXPECT_EQ(f->names, (std::vector<std::string>{"a"}));
  // Unwritable directory.
  msg = errorMessage(
      writeSafeTensors("/nonexistent/dir/x.safetensors", {{"a", &a}}, {}));
  EXPECT_NE(msg.find("/nonexistent/dir/x.safetensors"), std::string::npos);
  llvm::sys::fs::remove(path);
}

TEST(SafeTensors, HeaderOnlyAndSingleTensorReads) {
  std::string path = tempPath("hdr");
  Tensor a = randomF32({3, 5}, 6);
  Tensor b = Tensor::fromVector<int64_t>({2}, {7, -8});
  ASSERT_NO_ERR(writeSafeTensors(path, {{"a", &a}, {"b", &b}}, {{"k", "v"}}));
  auto h = readSafeTensorsHeader(path);
  ASSERT_NO_ERR(h.takeError());
  ASSERT_EQ(h->entries.size(), 2u);
  EXPECT_EQ(h->entries[0].name, "a");
  EXPECT_EQ(h->entries[0].dtypeName, "F32");
  EXPECT_EQ(h->entries[0].shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(h->entries[1].begin, 60u);
  EXPECT_EQ(h->dataOffset % 8, 0u);
  EXPECT_EQ(h->fileSize, h->dataOffset + 60 + 16);
  EXPECT_EQ(h->metadata.at("k"), "v");
  auto rb = readSafeTensor(*h, "b");
  ASSERT_NO_ERR(rb.takeError());
  expectEqualBytes(*rb, b);
  auto ra = readSafeTensor(*h, "a");
  ASSERT_NO_ERR(ra.takeError());
  expectEqualBytes(*ra, a);
  std::string msg = errorMessage(readSafeTensor(*h, "zz").takeError());
  EXPECT_NE(msg.find("no tensor 'zz'"), std::string::npos) << msg;
  // A file truncated after the header was read: the read names the tensor.
  ASSERT_EQ(::truncate(path.c_str(), h->dataOffset + 30), 0);
  msg = errorMessage(readSafeTensor(*h, "b").takeError());
  EXPECT_NE(msg.find("tensor 'b': cannot read"), std::string::npos) << msg;
  // The header check of a truncated file fails like readSafeTensors.
  msg = errorMessage(readSafeTensorsHeader(path).takeError());
  EXPECT_NE(msg.find("outside the data section"), std::string::npos) << msg;
  llvm::sys::fs::remove(path);
  msg = errorMessage(readSafeTensorsHeader(path).takeError());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

// Section digests (issue 26): every file written carries "tessera.digests";
// readers check each section before handing it out.
static std::string readBytes(const std::string &p) {
  auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  return buf ? (*buf)->getBuffer().str() : std::string();
}

static void writeBytes(const std::string &p, const std::string &bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(p, ec);
  os << bytes;
}

TEST(SafeTensors, DigestsWrittenAndChecked) {
  // llvm::xxh3_64bits is XXH3-64 (seed 0): the reference value of "".
  EXPECT_EQ(sectionDigest(""), "xxh3:2d06800538d394c2");
  Tensor w = randomF32({3, 4}, 1);
  Tensor b = randomF32({4}, 2);
  auto bytes = serializeSafeTensors({{"w", &w}, {"b", &b}},
                                    {{"tessera.manifest", "{\"a\": 1}"}});
  ASSERT_NO_ERR(bytes.takeError());
  auto f = parseSafeTensors(*bytes, "blob.safetensors");
  ASSERT_NO_ERR(f.takeError());
  EXPECT_TRUE(f->hasDigests);
  EXPECT_EQ(f->metadata.count(kDigestsKey), 0u); // consumed by the reader
  EXPECT_EQ(f->metadata.at("tessera.manifest"), "{\"a\": 1}");

  // A flipped byte in each data region: the error names the section.
  uint64_t n = llvm::support::endian::read64le(bytes->data());
  uint64_t data = 8 + n;
  for (auto [name, offset] :
       {std::pair<const char *, uint64_t>{"w", 5}, {"b", 48 + 3}}) {
    std::string bad = *bytes;
    bad[data + offset] ^= 0x40;
    expectParseError(bad, {"section \"", name,
                           "\" is corrupt (digest xxh3:", ", expected xxh3:"});
  }
  // A flipped character of the manifest value (valid JSON still).
  {
    std::string bad = *bytes;
    size_t at = bad.find("{\\\"a\\\": 1}");
    ASSERT_NE(at, std::string::npos);
    bad[at + 5] = 'b';
    expectParseError(bad, {"section \"tessera.manifest\" is corrupt"});
  }
  // A tensor without a digest, a digest without a tensor, a malformed one.
  auto header = [&](const std::string &digests) {
    std::string h = "{\"__metadata__\":{\"tessera.digests\":" + digests +
                    "},\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                    "\"data_offsets\":[0,4]}}";
    return blob(h, std::string(4, '\0'));
  };
  std::string zero4 = sectionDigest(std::string(4, '\0'));
  auto quoted = [](const std::string &json) {
    std::string out = "\"";
    for (char c : json)
      out += c == '"' ? std::string("\\\"") : std::string(1, c);
    return out + "\"";
  };
  ASSERT_NO_ERR(
      parseSafeTensors(header(quoted("{\"metadata\":{},\"tensors\":{\"t\":\"" +
                                     zero4 + "\"}}")),
                       "ok")
          .takeError());
  expectParseError(header(quoted("{\"metadata\":{},\"tensors\":{}}")),
                   {"no digest for the tensor \"t\""});
  expectParseError(header(quoted("{\"metadata\":{},\"tensors\":{\"t\":\"" +
                                 zero4 + "\",\"u\":\"" + zero4 + "\"}}")),
                   {"a digest for the tensor \"u\", which the file lacks"});
  expectParseError(
      header(quoted("{\"metadata\":{},\"tensors\":{\"t\":\"xxh3:12\"}}")),
      {"is not \"xxh3:\" and 16 hex digits"});
  // Files without digests (other writers) still read, flagged.
  auto plain = parseSafeTensors(
      blob("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           std::string(4, '\0')),
      "plain");
  ASSERT_NO_ERR(plain.takeError());
  EXPECT_FALSE(plain->hasDigests);
}

TEST(SafeTensors, DataSectionCoveredExactly) {
  std::string t = "\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[4,8]}";
  expectParseError(blob("{" + t + "}", std::string(8, '\0')),
                   {"starts at data offset 4, not at 0"});
  expectParseError(
      blob("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           std::string(12, '\0')),
      {"the tensors cover 4 of the data section's 12 bytes"});
}

TEST(SafeTensors, SingleTensorReadChecksDigest) {
  Tensor w = randomF32({8}, 3);
  std::string path = tempPath("digest");
  ASSERT_NO_ERR(writeSafeTensors(path, {{"w", &w}}, {}));
  auto h = readSafeTensorsHeader(path);
  ASSERT_NO_ERR(h.takeError());
  EXPECT_TRUE(h->hasDigests);
  ASSERT_NO_ERR(readSafeTensor(*h, "w").takeError());
  std::string bytes = readBytes(path);
  bytes[h->dataOffset + 9] ^= 0x01;
  writeBytes(path, bytes);
  std::string msg = llvm::toString(readSafeTensor(*h, "w").takeError());
  EXPECT_NE(msg.find(path + ": section \"w\" is corrupt"), std::string::npos)
      << msg;
  ::unlink(path.c_str());
}

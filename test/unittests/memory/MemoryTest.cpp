//===- MemoryTest.cpp - offset allocator and byte sizes -------------------===//

#include "passes/lowering/OffsetAllocator.h"
#include "runtime/metrics/ByteSize.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <random>

using namespace tessera;
using lowering::assignOffsets;
using lowering::BufferLifetime;
using lowering::isValidAssignment;

TEST(OffsetAllocator, Empty) {
  lowering::OffsetAssignment a = assignOffsets({});
  EXPECT_EQ(a.arenaBytes, 0);
  EXPECT_TRUE(a.offsets.empty());
}

TEST(OffsetAllocator, SizesAreAligned) {
  EXPECT_EQ(lowering::alignedBufferBytes(0), 64);
  EXPECT_EQ(lowering::alignedBufferBytes(1), 64);
  EXPECT_EQ(lowering::alignedBufferBytes(64), 64);
  EXPECT_EQ(lowering::alignedBufferBytes(65), 128);
  EXPECT_EQ(lowering::alignedBufferBytes(100, 32), 128);
}

TEST(OffsetAllocator, DisjointLifetimesShareSpace) {
  // A chain a -> b -> c: c starts after a's last use and reuses its space.
  std::vector<BufferLifetime> buffers = {
      {1024, 0, 1}, {1024, 1, 2}, {1024, 2, 3}};
  lowering::OffsetAssignment a = assignOffsets(buffers);
  EXPECT_EQ(a.offsets, (std::vector<int64_t>{0, 1024, 0}));
  EXPECT_EQ(a.arenaBytes, 2048);
  EXPECT_TRUE(isValidAssignment(buffers, a));
}

TEST(OffsetAllocator, LargestFirstAndBestFit) {
  // The 4096-byte buffer goes first at 0; the small ones fill around it.
  // The last one (live after the big one dies) fits into its freed space.
  std::vector<BufferLifetime> buffers = {
      {256, 0, 5}, {4096, 1, 2}, {512, 2, 5}, {1024, 4, 6}};
  lowering::OffsetAssignment a = assignOffsets(buffers);
  EXPECT_EQ(a.offsets[1], 0);
  EXPECT_EQ(a.offsets[3], 0);
  EXPECT_EQ(a.arenaBytes, 4096 + 512 + 256);
  EXPECT_TRUE(isValidAssignment(buffers, a));
}

TEST(OffsetAllocator, BestFitPicksTheSmallestGap) {
  // Gaps of 2048 (at 0) and 1024 (at 3072) open up at instruction 10; a
  // 1024-byte buffer then takes the smaller one.
  std::vector<BufferLifetime> buffers = {
      {2048, 0, 9}, {1024, 0, 20}, {1024, 0, 9}, {1024, 0, 20}, {1024, 10, 20}};
  lowering::OffsetAssignment a = assignOffsets(buffers);
  ASSERT_TRUE(isValidAssignment(buffers, a));
  EXPECT_EQ(a.offsets[0], 0);
  EXPECT_EQ(a.offsets[4], a.offsets[2]);
}

TEST(OffsetAllocator, RandomProgramsAreValidAndNoWorseThanNoReuse) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferLifetime> buffers;
    int n = 1 + static_cast<int>(rng() % 40);
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 50;
      int64_t last = first + rng() % 10;
      int64_t bytes = static_cast<int64_t>(rng() % 5000);
      buffers.push_back({bytes, first, last});
      sum += lowering::alignedBufferBytes(bytes);
    }
    lowering::OffsetAssignment a = assignOffsets(buffers);
    ASSERT_TRUE(isValidAssignment(buffers, a)) << "trial " << trial;
    // Never more than no reuse, never less than the live bytes at any
    // instruction.
    EXPECT_LE(a.arenaBytes, sum);
    int64_t peakLive = 0;
    for (int64_t t = 0; t < 60; ++t) {
      int64_t live = 0;
      for (const BufferLifetime &b : buffers)
        if (b.first <= t && t <= b.last)
          live += lowering::alignedBufferBytes(b.bytes);
      peakLive = std::max(peakLive, live);
    }
    EXPECT_EQ(lowering::peakLiveBytes(buffers), peakLive);
    EXPECT_GE(a.arenaBytes, peakLive);
  }
}

TEST(OffsetAllocator, CheckerRejectsOverlap) {
  std::vector<BufferLifetime> buffers = {{64, 0, 1}, {64, 1, 2}};
  lowering::OffsetAssignment bad{{0, 0}, 64};
  EXPECT_FALSE(isValidAssignment(buffers, bad));
  lowering::OffsetAssignment outside{{0, 64}, 64};
  EXPECT_FALSE(isValidAssignment(buffers, outside));
}

static int64_t parsed(llvm::StringRef text) {
  llvm::Expected<int64_t> v = runtime::parseByteSize(text);
  if (!v) {
    llvm::consumeError(v.takeError());
    return -1;
  }
  return *v;
}

static std::string parseError(llvm::StringRef text) {
  llvm::Expected<int64_t> v = runtime::parseByteSize(text);
  if (v)
    return "";
  return llvm::toString(v.takeError());
}

TEST(ByteSize, Units) {
  EXPECT_EQ(parsed("80GB"), 80'000'000'000);
  EXPECT_EQ(parsed("512MiB"), 512LL * 1024 * 1024);
  EXPECT_EQ(parsed("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parsed("1.5GiB"), 1610612736);
  EXPECT_EQ(parsed("64 kB"), 64'000);
  EXPECT_EQ(parsed("64KB"), 64'000);
  EXPECT_EQ(parsed("2KiB"), 2048);
  EXPECT_EQ(parsed("1TiB"), 1LL << 40);
  EXPECT_EQ(parsed("123"), 123);
  EXPECT_EQ(parsed("123B"), 123);
  EXPECT_EQ(parsed(" 7gb "), 7'000'000'000);
  EXPECT_EQ(parsed("9223372036854775807"), INT64_MAX);
}

TEST(ByteSize, Errors) {
  EXPECT_EQ(parseError(""), "invalid memory size '': expected a number with "
                            "an optional unit, e.g. 80GB, 512MiB");
  EXPECT_NE(parseError("GB").find("expected a number"), std::string::npos);
  EXPECT_NE(parseError("-1GB").find("expected a number"), std::string::npos);
  EXPECT_NE(parseError("12XB").find("unknown unit 'XB'"), std::string::npos);
  EXPECT_NE(parseError("1.2.3GB").find("unknown unit"), std::string::npos);
  EXPECT_NE(parseError("0").find("must be positive"), std::string::npos);
  EXPECT_NE(parseError("0.1B").find("at least one byte"), std::string::npos);
  EXPECT_NE(parseError("9223372036854775808").find("2^63 - 1"),
            std::string::npos);
  EXPECT_NE(parseError("100000000TB").find("2^63 - 1"), std::string::npos);
}

TEST(ByteSize, Format) {
  EXPECT_EQ(runtime::formatByteSize(100), "100 bytes");
  EXPECT_EQ(runtime::formatByteSize(8388608), "8388608 bytes (8.00 MiB)");
  EXPECT_EQ(runtime::formatByteSize(1536), "1536 bytes (1.50 KiB)");
}

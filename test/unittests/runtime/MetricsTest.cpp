//===- MetricsTest.cpp - metrics JSON lines and progress line -------------===//

#include "runtime/metrics/Metrics.h"

#include "TestUtil.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace tessera::runtime;
using namespace tessera::runtime::test;

TEST(Metrics, ProgressLine) {
  EXPECT_EQ(formatProgressLine(12, 3.12344, 1234.4),
            "step 12 | loss 3.1234 | 1234 tok/s");
}

TEST(Metrics, JsonLines) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("metrics", "jsonl", path));
  {
    auto w = MetricsWriter::open(path);
    ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
    StepMetrics m;
    m.step = 1;
    m.loss = 2.5;
    m.stepTimeS = 0.25;
    m.tokensPerS = 4096;
    m.extra = {{"bytes_sent", 1.5e6}};
    m.intLists = {{"peak_bytes", {7, 8}}};
    m.numLists = {{"bytes_send_per_rank", {512.5, 0, INFINITY}}};
    ASSERT_NO_ERR((*w)->write(m));
    m.intLists.clear();
    m.numLists.clear();
    m.step = 2;
    m.loss = NAN;
    m.extra.clear();
    ASSERT_NO_ERR((*w)->write(m));
  }
  auto buf = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(buf));
  llvm::SmallVector<llvm::StringRef> lines;
  (*buf)->getBuffer().trim().split(lines, '\n');
  ASSERT_EQ(lines.size(), 2u);
  auto v = llvm::json::parse(lines[0]);
  ASSERT_TRUE(bool(v)) << llvm::toString(v.takeError());
  const llvm::json::Object *o = v->getAsObject();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->getInteger("step"), 1);
  EXPECT_EQ(o->getNumber("loss"), 2.5);
  EXPECT_EQ(o->getNumber("step_time_s"), 0.25);
  EXPECT_EQ(o->getNumber("tokens_per_s"), 4096.0);
  EXPECT_EQ(o->getNumber("bytes_sent"), 1.5e6);
  const llvm::json::Array *peaks = o->getArray("peak_bytes");
  ASSERT_TRUE(peaks);
  ASSERT_EQ(peaks->size(), 2u);
  EXPECT_EQ((*peaks)[1].getAsInteger(), 8);
  // Number lists follow, in order; a non-finite entry is null.
  const llvm::json::Array *sends = o->getArray("bytes_send_per_rank");
  ASSERT_TRUE(sends);
  ASSERT_EQ(sends->size(), 3u);
  EXPECT_EQ((*sends)[0].getAsNumber(), 512.5);
  EXPECT_EQ((*sends)[1].getAsNumber(), 0.0);
  EXPECT_TRUE((*sends)[2].getAsNull().has_value());
  EXPECT_LT(lines[0].find("\"peak_bytes\""),
            lines[0].find("\"bytes_send_per_rank\""));
  auto v2 = llvm::json::parse(lines[1]);
  ASSERT_TRUE(bool(v2));
  EXPECT_TRUE(v2->getAsObject()->get("loss")->getAsNull().has_value());

  // Append mode keeps the old lines.
  {
    auto w = MetricsWriter::open(path, /*append=*/true);
    ASSERT_TRUE(bool(w));
    StepMetrics m;
    m.step = 3;
    ASSERT_NO_ERR((*w)->write(m));
  }
  buf = llvm::MemoryBuffer::getFile(path);
  lines.clear();
  (*buf)->getBuffer().trim().split(lines, '\n');
  EXPECT_EQ(lines.size(), 3u);
  llvm::sys::fs::remove(path);
}

TEST(Metrics, OpenErrorNamesPath) {
  auto w = MetricsWriter::open("/nonexistent-dir/x/metrics.jsonl");
  ASSERT_FALSE(bool(w));
  std::string msg = llvm::toString(w.takeError());
  EXPECT_NE(msg.find("/nonexistent-dir/x/metrics.jsonl"), std::string::npos);
}

//===- DistCheckpointTest.cpp - sharded checkpoints: reshard, dedup, errors
//===//
//
// Saves global tensors under one grid/layout (every rank's shard, as the
// trainer writes them) and loads every rank's piece under another, comparing
// with exec::sliceToLocal of the global tensor (the executor's own slicing).
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/DistCheckpoint.h"

#include "TestUtil.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>

using namespace tessera::runtime;
using namespace tessera::runtime::test;
using namespace tessera::runtime::ckpt;
using exec::Layout;
using exec::LayoutFactor;
namespace fs = llvm::sys::fs;

namespace {

/// A fresh empty folder, removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    llvm::SmallString<128> p;
    fs::createUniqueDirectory("tessera-ckpt-test", p);
    path = p.str().str();
  }
  ~TempDir() { fs::remove_directories(path); }
  std::string operator/(llvm::StringRef name) const {
    llvm::SmallString<256> p(path);
    llvm::sys::path::append(p, name);
    return p.str().str();
  }
};

std::string readText(const std::string &p) {
  auto b = llvm::MemoryBuffer::getFile(p);
  return b ? (*b)->getBuffer().str() : std::string("<missing>");
}

void writeText(const std::string &p, const std::string &text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(p, ec);
  os << text;
}

/// Layout of a 2-D tensor with each dim's factors.
Layout layout2(exec::DimLayout d0, exec::DimLayout d1) {
  Layout l;
  l.dims = {std::move(d0), std::move(d1)};
  return l;
}

/// The elements of `global` in the Cartesian product of `ranges` (reference
/// for localRanges, element by element).
Tensor restrict2(const Tensor &global, const ShardRanges &ranges) {
  std::vector<int64_t> rows, cols;
  for (auto [b, e] : ranges[0])
    for (int64_t i = b; i < e; ++i)
      rows.push_back(i);
  for (auto [b, e] : ranges[1])
    for (int64_t i = b; i < e; ++i)
      cols.push_back(i);
  Tensor out =
      Tensor::empty(DType::F32, {(int64_t)rows.size(), (int64_t)cols.size()});
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j)
      out.data<float>()[i * cols.size() + j] =
          global.data<float>()[rows[i] * global.dim(1) + cols[j]];
  return out;
}

/// Every coordinate of `grid`, row-major.
std::vector<std::vector<int64_t>> allCoords(std::vector<int64_t> grid) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < shapeNumel(grid); ++r)
    out.push_back(exec::gridCoords(r, grid));
  return out;
}

CheckpointInfo info(int64_t step) {
  CheckpointInfo i;
  i.step = step;
  i.consumedSamples = step * 8;
  i.plan = llvm::json::Object{{"grid", llvm::json::Object{{"shape", {2, 2}}}}};
  return i;
}

/// Saves `global` as tensor "w" under (saveLayout, saveGrid), then loads
/// every rank's piece under (loadLayout, loadGrid) and compares bit for bit.
void roundTrip(const Tensor &global, const Layout &saveLayout,
               std::vector<int64_t> saveGrid, const Layout &loadLayout,
               std::vector<int64_t> loadGrid) {
  TempDir dir;
  TensorSpec spec{"w", "param", global.dtype(), saveLayout};
  ASSERT_NO_ERR(
      saveGlobalCheckpoint(dir.path, {spec}, {global}, saveGrid, info(3)));
  auto reader = CheckpointReader::open(dir.path);
  ASSERT_NO_ERR(reader.takeError());
  ASSERT_NO_ERR((*reader)->verifyFiles());
  EXPECT_EQ((*reader)->step(), 3);
  EXPECT_EQ((*reader)->consumedSamples(), 24);
  for (const auto &coords : allCoords(loadGrid)) {
    auto local = (*reader)->loadLocal("w", loadLayout, loadGrid, coords);
    ASSERT_NO_ERR(local.takeError());
    Tensor want = exec::sliceToLocal(global, loadLayout, loadGrid, coords);
    expectEqualBytes(*local, want);
  }
  auto whole = (*reader)->loadGlobal("w");
  ASSERT_NO_ERR(whole.takeError());
  expectEqualBytes(*whole, global);
}

} // namespace

TEST(DistCheckpoint, Names) {
  EXPECT_EQ(iterationDirName(4), "iter_0000004");
  EXPECT_EQ(iterationDirName(12345678), "iter_12345678");
  EXPECT_EQ(rankFileName(1), "rank_00001.safetensors");
}

TEST(DistCheckpoint, LocalRangesFactoredQkv) {
  // [3·64] fused QKV columns split over tp=2: rank 1 holds the second half
  // of each of the 3 chunks.
  Layout l = layout2({LayoutFactor{4, {}}},
                     {LayoutFactor{3, {}}, LayoutFactor{64, {0}}});
  ShardRanges r = localRanges(l, {2}, {1});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], (IntervalSet{{0, 4}}));
  EXPECT_EQ(r[1], (IntervalSet{{32, 64}, {96, 128}, {160, 192}}));
  EXPECT_EQ(rangesShape(r), l.localShape({2}));
}

TEST(DistCheckpoint, LocalRangesMatchSliceToLocal) {
  // Every piece of several layouts, element by element.
  Tensor g = randomF32({12, 24}, 7);
  std::vector<int64_t> grid = {2, 3};
  std::vector<Layout> layouts = {
      Layout::replicated({12, 24}),
      layout2({LayoutFactor{12, {0}}}, {LayoutFactor{24, {1}}}),
      layout2({LayoutFactor{12, {0, 1}}}, {LayoutFactor{24, {}}}),
      layout2({LayoutFactor{12, {1, 0}}}, {LayoutFactor{24, {}}}),
      layout2({LayoutFactor{2, {}}, LayoutFactor{6, {1}}},
              {LayoutFactor{3, {}}, LayoutFactor{8, {0}}}),
      layout2(
          {LayoutFactor{12, {}}},
          {LayoutFactor{2, {0}}, LayoutFactor{4, {}}, LayoutFactor{3, {1}}}),
  };
  for (const Layout &l : layouts) {
    ASSERT_NO_ERR(exec::verifyLayout(l, grid, "w"));
    for (const auto &c : allCoords(grid)) {
      ShardRanges r = localRanges(l, grid, c);
      expectEqualBytes(restrict2(g, r), exec::sliceToLocal(g, l, grid, c));
    }
  }
}

TEST(DistCheckpoint, ReplicatedToSplit) {
  Tensor g = randomF32({8, 6}, 1);
  roundTrip(g, Layout::replicated({8, 6}), {1},
            layout2({LayoutFactor{8, {0}}}, {LayoutFactor{6, {}}}), {4});
}

TEST(DistCheckpoint, SplitToReplicated) {
  Tensor g = randomF32({8, 6}, 2);
  roundTrip(g, layout2({LayoutFactor{8, {}}}, {LayoutFactor{6, {1}}}), {2, 3},
            Layout::replicated({8, 6}), {1});
}

TEST(DistCheckpoint, RowSplitToColumnSplit) {
  // Saved split on dim 0 over tp (ZeRO / row-parallel), loaded split on dim
  // 1 over a different axis of a different grid.
  Tensor g = randomF32({8, 12}, 3);
  roundTrip(g, layout2({LayoutFactor{8, {1}}}, {LayoutFactor{12, {}}}), {2, 4},
            layout2({LayoutFactor{8, {}}}, {LayoutFactor{12, {0}}}), {3, 2});
}

TEST(DistCheckpoint, FactoredQkvTp2ToTp4AndDp) {
  Tensor g = randomF32({4, 3 * 8}, 4);
  Layout tp2 = layout2({LayoutFactor{4, {}}},
                       {LayoutFactor{3, {}}, LayoutFactor{8, {1}}});
  Layout tp4 = layout2({LayoutFactor{4, {}}},
                       {LayoutFactor{3, {}}, LayoutFactor{8, {0}}});
  roundTrip(g, tp2, {2, 2}, tp4, {4});
  // ... and to a plain (unfactored) column split, which cuts across chunks.
  roundTrip(g, tp2, {2, 2},
            layout2({LayoutFactor{4, {}}}, {LayoutFactor{24, {0}}}), {4});
  roundTrip(g, layout2({LayoutFactor{4, {0}}}, {LayoutFactor{24, {}}}), {2},
            tp2, {2, 2});
}

TEST(DistCheckpoint, TwoAxisSplits) {
  Tensor g = randomF32({12, 8}, 5);
  // Dim 0 over (dp, tp) saved; loaded over (tp, dp) order and a 2-D tiling.
  roundTrip(g, layout2({LayoutFactor{12, {0, 1}}}, {LayoutFactor{8, {}}}),
            {2, 3}, layout2({LayoutFactor{12, {1, 0}}}, {LayoutFactor{8, {}}}),
            {2, 3});
  roundTrip(g, layout2({LayoutFactor{12, {0, 1}}}, {LayoutFactor{8, {}}}),
            {2, 3}, layout2({LayoutFactor{12, {1}}}, {LayoutFactor{8, {0}}}),
            {2, 2});
}

TEST(DistCheckpoint, OtherDTypesAndScalars) {
  Tensor bf = Tensor::empty(DType::BF16, {4, 6});
  for (int64_t i = 0; i < bf.numel(); ++i)
    bf.data<BFloat16>()[i] = toBFloat16(0.25f * i - 3);
  roundTrip(bf, layout2({LayoutFactor{4, {0}}}, {LayoutFactor{6, {}}}), {2},
            layout2({LayoutFactor{4, {}}}, {LayoutFactor{6, {0}}}), {3});
  Tensor ids = randomI64({6, 4}, 3, -100, 100);
  roundTrip(ids, Layout::replicated({6, 4}), {2},
            layout2({LayoutFactor{6, {0}}}, {LayoutFactor{4, {}}}), {3});

  TempDir dir;
  Tensor s = Tensor::scalar(42.5f);
  ASSERT_NO_ERR(saveGlobalCheckpoint(
      dir.path, {{"step", "opt_state", DType::F32, Layout::replicated({})}},
      {s}, {2, 2}, info(1)));
  auto reader = CheckpointReader::open(dir.path);
  ASSERT_NO_ERR(reader.takeError());
  auto v = (*reader)->loadLocal("step", Layout::replicated({}), {4}, {3});
  ASSERT_NO_ERR(v.takeError());
  EXPECT_EQ(v->shape(), std::vector<int64_t>{});
  EXPECT_EQ(v->data<float>()[0], 42.5f);
}

TEST(DistCheckpoint, DedupReplicatedCopies) {
  // dp=2 x tp=2: w split over tp (replicated over dp), b replicated, m
  // (ZeRO-style) split over dp and tp. Ranks row-major: (d, t) -> 2d + t.
  std::vector<int64_t> grid = {2, 2};
  std::vector<TensorSpec> specs = {
      {"w", "param", DType::F32,
       layout2({LayoutFactor{4, {}}}, {LayoutFactor{6, {1}}})},
      {"b", "param", DType::F32, Layout::replicated({6})},
      {"w.exp_avg", "opt_state", DType::F32,
       layout2({LayoutFactor{4, {0}}}, {LayoutFactor{6, {1}}})}};
  std::vector<RankHoldings> ranks;
  for (int64_t r = 0; r < 4; ++r)
    ranks.push_back({r, exec::gridCoords(r, grid), {0, 1, 2}});
  auto plan = planShards(specs, grid, ranks);
  ASSERT_NO_ERR(plan.takeError());
  ASSERT_EQ(plan->shards[0].size(), 2u); // one per tp piece
  EXPECT_EQ(plan->shards[0][0].rank, 0);
  EXPECT_EQ(plan->shards[0][1].rank, 1);
  ASSERT_EQ(plan->shards[1].size(), 1u); // replicated: rank 0 only
  EXPECT_EQ(plan->shards[1][0].rank, 0);
  ASSERT_EQ(plan->shards[2].size(), 4u);
  EXPECT_EQ(plan->totalBytes(), (24 + 6 + 24) * 4);
  EXPECT_EQ(plan->writes.count(0), 1u);
  EXPECT_EQ(plan->writes.at(0).size(), 3u);
  EXPECT_EQ(plan->writes.at(1).size(), 2u);
  EXPECT_EQ(plan->writes.at(2).size(), 1u);
  EXPECT_EQ(plan->writes.at(3).size(), 1u);

  // A rank that holds only copies writes no file.
  std::vector<RankHoldings> noUnique = ranks;
  for (auto &r : noUnique)
    r.tensors = {0, 1};
  auto plan2 = planShards({specs[0], specs[1]}, grid, noUnique);
  ASSERT_NO_ERR(plan2.takeError());
  EXPECT_EQ(plan2->writes.count(2), 0u);
  EXPECT_EQ(plan2->writes.count(3), 0u);

  TempDir dir;
  std::vector<Tensor> globals = {randomF32({4, 6}, 1), randomF32({6}, 2),
                                 randomF32({4, 6}, 3)};
  ASSERT_NO_ERR(saveGlobalCheckpoint(dir.path, specs, globals, grid, info(2)));
  std::string it = dir / "iter_0000002";
  EXPECT_TRUE(fs::exists(it + "/rank_00000.safetensors"));
  EXPECT_TRUE(fs::exists(it + "/rank_00003.safetensors"));
  auto h = readSafeTensorsHeader(it + "/rank_00001.safetensors");
  ASSERT_NO_ERR(h.takeError());
  EXPECT_EQ(h->entries.size(), 2u); // w (tp piece 1), w.exp_avg; not b
  EXPECT_EQ(h->find("b"), nullptr);
  EXPECT_EQ(readText(dir / "latest"), "iter_0000002\n");
  // The index names the shards with their ranges.
  auto reader = CheckpointReader::open(dir.path);
  ASSERT_NO_ERR(reader.takeError());
  const TensorInfo *w = (*reader)->find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->role, "param");
  EXPECT_EQ(w->dtypeName, "F32");
  ASSERT_EQ(w->shards.size(), 2u);
  EXPECT_EQ(w->shards[1].file, "rank_00001.safetensors");
  EXPECT_EQ(w->shards[1].ranges[1], (IntervalSet{{3, 6}}));
  ASSERT_TRUE((*reader)->plan());
  EXPECT_TRUE((*reader)->plan()->getObject("grid"));
}

TEST(DistCheckpoint, PlanErrors) {
  std::vector<int64_t> grid = {2};
  Layout split = layout2({LayoutFactor{4, {0}}}, {LayoutFactor{2, {}}});
  // Rank 1 missing: half of w is held by nobody.
  auto p =
      planShards({{"w", "param", DType::F32, split}}, grid, {{0, {0}, {0}}});
  EXPECT_EQ(errorMessage(p.takeError()),
            "checkpoint: tensor 'w': the ranks holding it cover 4 of its 8 "
            "elements");
  auto dup = planShards({{"w", "param", DType::F32, split},
                         {"w", "opt_state", DType::F32, split}},
                        grid, {});
  EXPECT_NE(errorMessage(dup.takeError()).find("'w' appears twice"),
            std::string::npos);
  auto badCoords =
      planShards({{"w", "param", DType::F32, split}}, grid, {{0, {2}, {0}}});
  EXPECT_NE(errorMessage(badCoords.takeError()).find("outside [0, 2)"),
            std::string::npos);
  // A local value of the wrong shape is refused when writing.
  auto ok = planShards({{"w", "param", DType::F32, split}}, grid,
                       {{0, {0}, {0}}, {1, {1}, {0}}});
  ASSERT_NO_ERR(ok.takeError());
  TempDir dir;
  Tensor wrong = randomF32({4, 2}, 1);
  std::string msg = errorMessage(writeRankShards(
      dir / "t", *ok, 0, [&](const TensorSpec &) { return &wrong; }));
  EXPECT_NE(msg.find("tensor 'w': rank 0's value is f32 [4, 2], its shard is "
                     "f32 [2, 2]"),
            std::string::npos)
      << msg;
}

namespace {
/// A saved checkpoint of w [4, 6] split over 2 ranks on dim 0 and b [6].
struct Saved {
  TempDir dir;
  Tensor w = randomF32({4, 6}, 11), b = randomF32({6}, 12);
  Layout wl = layout2({LayoutFactor{4, {0}}}, {LayoutFactor{6, {}}});
  std::string it;
  Saved() {
    EXPECT_FALSE(bool(saveGlobalCheckpoint(
        dir.path,
        {{"w", "param", DType::F32, wl},
         {"b", "param", DType::F32, Layout::replicated({6})}},
        {w, b}, {2}, info(5))));
    it = dir / "iter_0000005";
  }
  std::string index() const { return readText(it + "/index.json"); }
  void setIndex(const std::string &text) {
    writeText(it + "/index.json", text);
  }
  /// Rewrites the index through `edit`.
  void editIndex(llvm::function_ref<void(llvm::json::Object &)> edit) {
    llvm::Expected<llvm::json::Value> v = llvm::json::parse(index());
    ASSERT_TRUE(bool(v));
    edit(*v->getAsObject());
    std::string text;
    llvm::raw_string_ostream os(text);
    os << *v;
    os.flush();
    setIndex(text);
  }
  /// w's shard `i` in the index.
  static llvm::json::Object &shard(llvm::json::Object &root, size_t i) {
    return *(*root.getObject("tensors")->getObject("w")->getArray("shards"))[i]
                .getAsObject();
  }
  /// Sets w's shard `i`'s dim-0 ranges.
  void setRows(size_t i, int64_t b, int64_t e) {
    editIndex([&](llvm::json::Object &root) {
      (*shard(root, i).getArray("ranges"))[0] =
          llvm::json::Array{llvm::json::Array{b, e}};
    });
  }
  std::string openError() {
    auto r = CheckpointReader::open(dir.path);
    return r ? std::string("<opened>") : errorMessage(r.takeError());
  }
};
} // namespace

TEST(DistCheckpoint, IndexErrors) {
  {
    Saved s;
    s.setIndex("{not json");
    EXPECT_NE(s.openError().find("index.json': invalid JSON"),
              std::string::npos)
        << s.openError();
  }
  {
    Saved s;
    s.editIndex([](llvm::json::Object &r) { r["format"] = "something-else"; });
    EXPECT_NE(s.openError().find("\"format\" is not"), std::string::npos);
  }
  {
    Saved s; // shard out of bounds
    s.setRows(1, 2, 5);
    EXPECT_NE(
        s.openError().find("tensor 'w': shard 1 (rank_00001.safetensors): "
                           "dim 0: range [2, 5) is out of bounds of "
                           "size 4"),
        std::string::npos)
        << s.openError();
  }
  {
    Saved s; // overlapping shards
    s.setRows(1, 1, 3);
    EXPECT_NE(
        s.openError().find("tensor 'w': shards 0 (rank_00000.safetensors) "
                           "and 1 (rank_00001.safetensors) overlap"),
        std::string::npos)
        << s.openError();
  }
  {
    Saved s; // the same piece twice (the per-dim class fast path)
    s.setRows(1, 0, 2);
    EXPECT_NE(
        s.openError().find("tensor 'w': shards 0 (rank_00000.safetensors) "
                           "and 1 (rank_00001.safetensors) overlap"),
        std::string::npos)
        << s.openError();
  }
  {
    Saved s; // a missing file
    fs::remove(s.it + "/rank_00001.safetensors");
    EXPECT_NE(s.openError().find("file 'rank_00001.safetensors' named by "
                                 "index.json is missing"),
              std::string::npos)
        << s.openError();
  }
  {
    Saved s; // path traversal in a file name
    s.editIndex([](llvm::json::Object &r) {
      Saved::shard(r, 1)["file"] = "../x.safetensors";
    });
    EXPECT_NE(s.openError().find("is not a file name in the checkpoint folder"),
              std::string::npos);
  }
}

TEST(DistCheckpoint, ModelMismatchErrors) {
  Saved s;
  auto r = CheckpointReader::open(s.dir.path);
  ASSERT_NO_ERR(r.takeError());
  EXPECT_EQ(errorMessage((*r)->checkTensor("nope", DType::F32, {2})),
            "checkpoint '" + s.it + "' has no tensor 'nope'");
  EXPECT_EQ(errorMessage((*r)->checkTensor("w", DType::F32, {6, 4})),
            "checkpoint '" + s.it +
                "': tensor 'w' has shape [4, 6], the model needs [6, 4]");
  EXPECT_EQ(errorMessage((*r)->checkTensor("w", DType::BF16, {4, 6})),
            "checkpoint '" + s.it +
                "': tensor 'w' has dtype F32, the model needs BF16");
  ASSERT_NO_ERR((*r)->checkTensor("w", DType::F32, {4, 6}));
  auto bad = (*r)->loadLocal("w", Layout::replicated({6, 4}), {1}, {0});
  EXPECT_NE(errorMessage(bad.takeError())
                .find("has shape [4, 6], the model "
                      "needs [6, 4]"),
            std::string::npos);
}

TEST(DistCheckpoint, CorruptFileReadsOnlyNeededShards) {
  Saved s;
  // Garbage in rank 1's file: rank 0's piece still loads (only its shard is
  // read), rank 1's piece is an error naming the file.
  writeText(s.it + "/rank_00001.safetensors", "garbage!garbage!");
  auto r = CheckpointReader::open(s.dir.path);
  ASSERT_NO_ERR(r.takeError());
  auto p0 = (*r)->loadLocal("w", s.wl, {2}, {0});
  ASSERT_NO_ERR(p0.takeError());
  expectEqualBytes(*p0, exec::sliceToLocal(s.w, s.wl, {2}, {0}));
  auto p1 = (*r)->loadLocal("w", s.wl, {2}, {1});
  std::string msg = errorMessage(p1.takeError());
  EXPECT_NE(msg.find("rank_00001.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("header size"), std::string::npos) << msg;
  EXPECT_NE(errorMessage((*r)->verifyFiles()).find("rank_00001.safetensors"),
            std::string::npos);
}

TEST(DistCheckpoint, TruncatedFileAndWrongKey) {
  {
    Saved s;
    std::string f = s.it + "/rank_00000.safetensors";
    std::string bytes = readText(f);
    writeText(f, bytes.substr(0, bytes.size() - 4));
    auto r = CheckpointReader::open(s.dir.path);
    ASSERT_NO_ERR(r.takeError());
    std::string msg = errorMessage((*r)->verifyFiles());
    EXPECT_NE(msg.find("rank_00000.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("outside the data section"), std::string::npos) << msg;
  }
  {
    Saved s;
    s.editIndex([](llvm::json::Object &r) { Saved::shard(r, 0)["key"] = "v"; });
    auto r = CheckpointReader::open(s.dir.path);
    ASSERT_NO_ERR(r.takeError());
    auto p = (*r)->loadGlobal("w");
    std::string msg = errorMessage(p.takeError());
    EXPECT_NE(msg.find("has no key 'v' (a shard of tensor 'w')"),
              std::string::npos)
        << msg;
  }
}

TEST(DistCheckpoint, LatestAndInterruptedSave) {
  TempDir dir;
  Tensor w = randomF32({4}, 1);
  std::vector<TensorSpec> specs = {
      {"w", "param", DType::F32, Layout::replicated({4})}};
  ASSERT_NO_ERR(saveGlobalCheckpoint(dir.path, specs, {w}, {1}, info(4)));
  // A save of step 8 that died before finalize: its tmp folder has a file
  // but no index, and `latest` still names step 4.
  auto plan = planShards(specs, {1}, {{0, {0}, {0}}});
  ASSERT_NO_ERR(plan.takeError());
  std::string tmp = tmpDirPath(dir.path, 8, 999);
  Tensor w8 = randomF32({4}, 2);
  ASSERT_NO_ERR(
      writeRankShards(tmp, *plan, 0, [&](const TensorSpec &) { return &w8; }));
  EXPECT_TRUE(fs::exists(tmp + "/rank_00000.safetensors"));
  auto r = CheckpointReader::open(dir.path);
  ASSERT_NO_ERR(r.takeError());
  EXPECT_EQ((*r)->step(), 4);
  expectEqualBytes(*(*r)->loadGlobal("w"), w);
  // The tmp folder itself is not a checkpoint.
  EXPECT_FALSE(bool(CheckpointReader::open(tmp)));
  // An iter folder opens directly.
  auto direct = CheckpointReader::open(dir / "iter_0000004");
  ASSERT_NO_ERR(direct.takeError());
  // A finalize that finds a rank's file missing refuses, leaving latest.
  auto plan2 = planShards(specs, {2}, {{0, {0}, {0}}, {1, {1}, {0}}});
  ASSERT_NO_ERR(plan2.takeError());
  std::string tmp2 = tmpDirPath(dir.path, 9, 1000);
  std::string msg =
      errorMessage(finalizeCheckpoint(dir.path, tmp2, *plan, info(9)));
  EXPECT_NE(msg.find("rank 0's file is not complete"), std::string::npos)
      << msg;
  EXPECT_EQ(readText(dir / "latest"), "iter_0000004\n");
  // Dangling latest.
  writeText(dir / "latest", "iter_0000077\n");
  msg = errorMessage(CheckpointReader::open(dir.path).takeError());
  EXPECT_NE(msg.find("names 'iter_0000077', which has no index.json"),
            std::string::npos)
      << msg;
  writeText(dir / "latest", "../etc\n");
  msg = errorMessage(CheckpointReader::open(dir.path).takeError());
  EXPECT_NE(msg.find("does not name a folder"), std::string::npos) << msg;
  // No checkpoint at all.
  TempDir empty;
  msg = errorMessage(CheckpointReader::open(empty.path).takeError());
  EXPECT_NE(msg.find("neither an index.json nor a 'latest' file"),
            std::string::npos)
      << msg;
}

TEST(DistCheckpoint, ResaveSameStepReplaces) {
  TempDir dir;
  std::vector<TensorSpec> specs = {
      {"w", "param", DType::F32, Layout::replicated({4})}};
  ASSERT_NO_ERR(
      saveGlobalCheckpoint(dir.path, specs, {randomF32({4}, 1)}, {1}, info(4)));
  Tensor w2 = randomF32({4}, 2);
  ASSERT_NO_ERR(saveGlobalCheckpoint(dir.path, specs, {w2}, {1}, info(4)));
  auto r = CheckpointReader::open(dir.path);
  ASSERT_NO_ERR(r.takeError());
  expectEqualBytes(*(*r)->loadGlobal("w"), w2);
}

TEST(DistCheckpoint, KeepLast) {
  TempDir dir;
  std::vector<TensorSpec> specs = {
      {"w", "param", DType::F32, Layout::replicated({2})}};
  Tensor w = randomF32({2}, 1);
  for (int64_t step = 1; step <= 5; ++step)
    ASSERT_NO_ERR(
        saveGlobalCheckpoint(dir.path, specs, {w}, {1}, info(step), 2));
  EXPECT_FALSE(fs::exists(dir / "iter_0000003"));
  EXPECT_TRUE(fs::exists(dir / "iter_0000004"));
  EXPECT_TRUE(fs::exists(dir / "iter_0000005"));
  EXPECT_EQ(readText(dir / "latest"), "iter_0000005\n");

  // Never deletes the one `latest` names, even when older; removes dead tmp
  // folders of older steps, keeps a newer one and unrelated files.
  TempDir d2;
  for (int64_t step = 1; step <= 3; ++step)
    ASSERT_NO_ERR(saveGlobalCheckpoint(d2.path, specs, {w}, {1}, info(step)));
  writeText(d2 / "latest", "iter_0000001\n");
  fs::create_directories(d2 / "iter_0000002.tmp.77");
  fs::create_directories(d2 / "iter_0000009.tmp.78");
  writeText(d2 / "notes.txt", "keep me");
  ASSERT_NO_ERR(pruneCheckpoints(d2.path, 1));
  EXPECT_TRUE(fs::exists(d2 / "iter_0000001"));
  EXPECT_FALSE(fs::exists(d2 / "iter_0000002"));
  EXPECT_TRUE(fs::exists(d2 / "iter_0000003"));
  EXPECT_FALSE(fs::exists(d2 / "iter_0000002.tmp.77"));
  EXPECT_TRUE(fs::exists(d2 / "iter_0000009.tmp.78"));
  EXPECT_TRUE(fs::exists(d2 / "notes.txt"));
}

TEST(DistCheckpoint, FilesReadableAsSafeTensors) {
  // Each rank file is a plain safetensors file (the Python package reads it).
  Saved s;
  auto f = readSafeTensors(s.it + "/rank_00001.safetensors");
  ASSERT_NO_ERR(f.takeError());
  ASSERT_EQ(f->names, std::vector<std::string>{"w"});
  expectEqualBytes(f->tensors[0], exec::sliceToLocal(s.w, s.wl, {2}, {1}));
  EXPECT_EQ(f->metadata.at("format"), "tessera-checkpoint-shard");
}

// Section digests (issue 26): the index records each shard's digest; the
// reader checks the file's digest against it and the bytes against both.
TEST(DistCheckpoint, ShardDigests) {
  {
    Saved s;
    llvm::Expected<llvm::json::Value> v = llvm::json::parse(s.index());
    ASSERT_TRUE(bool(v));
    std::optional<llvm::StringRef> d =
        Saved::shard(*v->getAsObject(), 0).getString("digest");
    ASSERT_TRUE(d.has_value());
    EXPECT_TRUE(d->starts_with("xxh3:") && d->size() == 21) << d->str();
    // A flipped byte of w's rows in rank 0's file.
    std::string f = s.it + "/rank_00000.safetensors";
    auto h = readSafeTensorsHeader(f);
    ASSERT_NO_ERR(h.takeError());
    std::string bytes = readText(f);
    bytes[h->dataOffset + h->find("w")->begin + 3] ^= 0x10;
    writeText(f, bytes);
    auto r = CheckpointReader::open(s.dir.path);
    ASSERT_NO_ERR(r.takeError());
    std::string msg = errorMessage((*r)->loadGlobal("w").takeError());
    EXPECT_NE(msg.find("rank_00000.safetensors: section \"w\" is corrupt "
                       "(digest xxh3:"),
              std::string::npos)
        << msg;
  }
  {
    // The index's digest differs from the file's.
    Saved s;
    s.editIndex([](llvm::json::Object &r) {
      Saved::shard(r, 1)["digest"] = "xxh3:0123456789abcdef";
    });
    auto r = CheckpointReader::open(s.dir.path);
    ASSERT_NO_ERR(r.takeError());
    std::string msg = errorMessage((*r)->verifyFiles());
    EXPECT_NE(msg.find("rank_00001.safetensors: section \"w\" does not match "
                       "index.json (digest xxh3:"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("index.json records xxh3:0123456789abcdef"),
              std::string::npos)
        << msg;
    s.editIndex(
        [](llvm::json::Object &r) { Saved::shard(r, 1)["digest"] = 7; });
    EXPECT_NE(s.openError().find("\"digest\" must be \"xxh3:\""),
              std::string::npos);
  }
  {
    // An index without digests (another writer) still loads.
    Saved s;
    s.editIndex([](llvm::json::Object &r) {
      Saved::shard(r, 0).erase("digest");
      Saved::shard(r, 1).erase("digest");
    });
    auto r = CheckpointReader::open(s.dir.path);
    ASSERT_NO_ERR(r.takeError());
    auto w = (*r)->loadGlobal("w");
    ASSERT_NO_ERR(w.takeError());
    expectEqualBytes(*w, s.w);
  }
}

//===- LayoutTest.cpp - sliceToLocal / placeLocal ------------------------===//

#include "runtime/executor/Layout.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/Support/JSON.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <numeric>
#include <set>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

namespace {

/// i64 tensor whose element i holds i (so every value names its position).
Tensor iota(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::I64, std::move(shape));
  std::iota(t.data<int64_t>(), t.data<int64_t>() + t.numel(), int64_t{0});
  return t;
}

Layout parse(llvm::StringRef json, std::vector<int64_t> grid) {
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(json);
  EXPECT_TRUE(static_cast<bool>(v));
  llvm::Expected<Layout> l = parseLayout(*v, grid, "t");
  if (!l) {
    ADD_FAILURE() << llvm::toString(l.takeError());
    return Layout();
  }
  return *l;
}

std::string parseError(llvm::StringRef json, std::vector<int64_t> grid) {
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(json);
  EXPECT_TRUE(static_cast<bool>(v));
  llvm::Expected<Layout> l = parseLayout(*v, grid, "t");
  if (l)
    return "";
  return llvm::toString(l.takeError());
}

/// Reference slicing, one element at a time: decompose each global index
/// into its factors, keep elements whose split factors fall in this rank's
/// piece, in row-major order of the local factor indices.
std::vector<int64_t> referenceSlice(const Tensor &global, const Layout &layout,
                                    const std::vector<int64_t> &grid,
                                    const std::vector<int64_t> &coords) {
  struct F {
    int64_t size, n, c;
  };
  std::vector<F> fs;
  for (const DimLayout &d : layout.dims)
    for (const LayoutFactor &f : d) {
      int64_t n = 1, c = 0;
      for (int64_t a : f.axes) {
        n *= grid[a];
        c = c * grid[a] + coords[a];
      }
      fs.push_back({f.size, n, c});
    }
  // Enumerate local factor indices row-major; map to a global flat index.
  std::vector<int64_t> out;
  std::vector<int64_t> idx(fs.size(), 0);
  int64_t localCount = 1;
  for (const F &f : fs)
    localCount *= f.size / f.n;
  for (int64_t k = 0; k < localCount; ++k) {
    int64_t rem = k;
    for (size_t i = fs.size(); i-- > 0;) {
      int64_t l = fs[i].size / fs[i].n;
      idx[i] = rem % l;
      rem /= l;
    }
    int64_t g = 0;
    for (size_t i = 0; i < fs.size(); ++i)
      g = g * fs[i].size + fs[i].c * (fs[i].size / fs[i].n) + idx[i];
    out.push_back(global.data<int64_t>()[g]);
  }
  return out;
}

void checkAllRanks(const Layout &layout, const std::vector<int64_t> &grid) {
  Tensor global = iota(layout.globalShape());
  Tensor rebuilt = Tensor::zeros(DType::I64, layout.globalShape());
  int64_t ranks = 1;
  for (int64_t g : grid)
    ranks *= g;
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<int64_t> coords = gridCoords(r, grid);
    Tensor local = sliceToLocal(global, layout, grid, coords);
    ASSERT_EQ(local.shape(), layout.localShape(grid));
    std::vector<int64_t> expect = referenceSlice(global, layout, grid, coords);
    ASSERT_EQ(std::vector<int64_t>(local.data<int64_t>(),
                                   local.data<int64_t>() + local.numel()),
              expect)
        << "rank " << r;
    placeLocal(local, layout, grid, coords, rebuilt);
  }
  for (int64_t i = 0; i < global.numel(); ++i)
    ASSERT_EQ(rebuilt.data<int64_t>()[i], i) << "element " << i;
}

TEST(Layout, GridCoordsAreRowMajor) {
  EXPECT_EQ(gridCoords(0, {2, 3}), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(gridCoords(1, {2, 3}), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(gridCoords(3, {2, 3}), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(gridCoords(5, {2, 3}), (std::vector<int64_t>{1, 2}));
}

// Rank orders: rank -> coordinates -> rank is the identity for every order
// of a few shapes; the last axis of the order varies fastest, with the
// strides of mpi::rankStrides.
TEST(Layout, GridCoordsFollowTheRankOrder) {
  // dp=2 x tp=2 x pp=2 in Megatron's order pp, dp, tp.
  std::vector<int64_t> shape = {2, 2, 2}, order = {2, 0, 1};
  EXPECT_EQ(gridCoords(1, shape, order), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(gridCoords(2, shape, order), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(gridCoords(4, shape, order), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(mpi::rankStrides(shape, order), (std::vector<int64_t>{2, 1, 4}));
  // The empty order is the axis order.
  EXPECT_EQ(gridCoords(4, shape, {}), gridCoords(4, shape, {0, 1, 2}));
  EXPECT_EQ(mpi::rankStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));

  for (std::vector<int64_t> sizes :
       {std::vector<int64_t>{2, 3}, std::vector<int64_t>{2, 3, 4},
        std::vector<int64_t>{1, 2, 3}, std::vector<int64_t>{3, 1, 2, 2}}) {
    std::vector<int64_t> perm(sizes.size());
    std::iota(perm.begin(), perm.end(), 0);
    int64_t ranks = 1;
    for (int64_t s : sizes)
      ranks *= s;
    do {
      std::vector<int64_t> strides = mpi::rankStrides(sizes, perm);
      std::set<std::vector<int64_t>> seen;
      for (int64_t r = 0; r < ranks; ++r) {
        std::vector<int64_t> c = gridCoords(r, sizes, perm);
        ASSERT_EQ(mpi::coordsToRank(c, sizes, perm), r);
        int64_t byStride = 0;
        for (size_t a = 0; a < sizes.size(); ++a) {
          ASSERT_GE(c[a], 0);
          ASSERT_LT(c[a], sizes[a]);
          byStride += c[a] * strides[a];
        }
        ASSERT_EQ(byStride, r);
        seen.insert(c);
      }
      ASSERT_EQ(static_cast<int64_t>(seen.size()), ranks);
      // The fastest axis of the order changes from rank 0 to rank 1.
      int64_t fastest = perm.back();
      if (sizes[fastest] > 1)
        EXPECT_EQ(gridCoords(1, sizes, perm)[fastest], 1);
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(Layout, ReplicatedIsACopy) {
  Layout l = Layout::replicated({3, 4});
  EXPECT_TRUE(l.isReplicated());
  Tensor g = iota({3, 4});
  Tensor local = sliceToLocal(g, l, {2, 2}, {1, 1});
  EXPECT_EQ(local.shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(local.sharesStorageWith(g));
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(local.data<int64_t>()[i], i);
  checkAllRanks(l, {2, 2});
}

TEST(Layout, ScalarRoundTrip) {
  Layout l; // rank 0
  Tensor g = Tensor::scalar(2.5f);
  Tensor local = sliceToLocal(g, l, {2}, {1});
  EXPECT_EQ(local.rank(), 0);
  EXPECT_EQ(local.data<float>()[0], 2.5f);
  Tensor back = Tensor::zeros(DType::F32, {});
  placeLocal(local, l, {2}, {1}, back);
  EXPECT_EQ(back.data<float>()[0], 2.5f);
}

TEST(Layout, BatchSplitOverDp) {
  // tokens [8, 64]: dim 0 over dp (axis 0) of a dp=2 x tp=2 grid.
  Layout l = parse(
      R"([[{"size": 8, "axes": [0]}], [{"size": 64, "axes": []}]])", {2, 2});
  EXPECT_EQ(l.localShape({2, 2}), (std::vector<int64_t>{4, 64}));
  Tensor g = iota({8, 64});
  Tensor local = sliceToLocal(g, l, {2, 2}, {1, 0});
  for (int64_t i = 0; i < 4 * 64; ++i)
    ASSERT_EQ(local.data<int64_t>()[i], 4 * 64 + i);
  // tp coordinate does not matter.
  Tensor same = sliceToLocal(g, l, {2, 2}, {1, 1});
  for (int64_t i = 0; i < 4 * 64; ++i)
    ASSERT_EQ(same.data<int64_t>()[i], local.data<int64_t>()[i]);
  checkAllRanks(l, {2, 2});
}

TEST(Layout, ColumnSplitOverTp) {
  // W [16, 12], columns over tp.
  Layout l = parse(
      R"([[{"size": 16, "axes": []}], [{"size": 12, "axes": [1]}]])", {1, 3});
  EXPECT_EQ(l.localShape({1, 3}), (std::vector<int64_t>{16, 4}));
  Tensor g = iota({16, 12});
  Tensor local = sliceToLocal(g, l, {1, 3}, {0, 2});
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 4; ++c)
      ASSERT_EQ(local.data<int64_t>()[r * 4 + c], r * 12 + 8 + c);
  checkAllRanks(l, {1, 3});
}

TEST(Layout, FusedQkvColumns) {
  // [64, 3*64]: the 192 columns are 3 chunks (q, k, v) each split over tp.
  Layout l = parse(R"([[{"size": 64, "axes": []}],
                       [{"size": 3, "axes": []}, {"size": 64, "axes": [1]}]])",
                   {1, 2});
  EXPECT_EQ(l.globalShape(), (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(l.localShape({1, 2}), (std::vector<int64_t>{64, 96}));
  Tensor g = iota({64, 192});
  for (int64_t t = 0; t < 2; ++t) {
    Tensor local = sliceToLocal(g, l, {1, 2}, {0, t});
    for (int64_t r = 0; r < 64; ++r)
      for (int64_t chunk = 0; chunk < 3; ++chunk)
        for (int64_t i = 0; i < 32; ++i)
          ASSERT_EQ(local.data<int64_t>()[r * 96 + chunk * 32 + i],
                    r * 192 + chunk * 64 + t * 32 + i);
  }
  checkAllRanks(l, {1, 2});
  // The bias [3*64] alone.
  checkAllRanks(
      parse(R"([[{"size": 3, "axes": []}, {"size": 64, "axes": [1]}]])",
            {1, 2}),
      {1, 2});
}

TEST(Layout, MergedBatchAndHeads) {
  // [B*H, S, D] with B over dp and H over tp (attention scores after a
  // merge of batch and heads): B=4, H=6, grid dp=2 x tp=3.
  Layout l = parse(R"([[{"size": 4, "axes": [0]}, {"size": 6, "axes": [1]}],
                       [{"size": 5, "axes": []}], [{"size": 2, "axes": []}]])",
                   {2, 3});
  EXPECT_EQ(l.globalShape(), (std::vector<int64_t>{24, 5, 2}));
  EXPECT_EQ(l.localShape({2, 3}), (std::vector<int64_t>{4, 5, 2}));
  Tensor g = iota({24, 5, 2});
  // Rank dp=1, tp=2 holds b in {2,3}, h in {4,5}: rows 2*6+4, 2*6+5, 3*6+4,
  // 3*6+5.
  Tensor local = sliceToLocal(g, l, {2, 3}, {1, 2});
  int64_t rows[] = {16, 17, 22, 23};
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 10; ++i)
      ASSERT_EQ(local.data<int64_t>()[k * 10 + i], rows[k] * 10 + i);
  checkAllRanks(l, {2, 3});
}

TEST(Layout, SeveralAxesOnOneFactor) {
  // One dim split 4 ways over [tp, dp] (tp major): piece = tp * 2 + dp.
  Layout l = parse(
      R"([[{"size": 8, "axes": [1, 0]}], [{"size": 3, "axes": []}]])", {2, 2});
  EXPECT_EQ(l.localShape({2, 2}), (std::vector<int64_t>{2, 3}));
  Tensor g = iota({8, 3});
  Tensor local = sliceToLocal(g, l, {2, 2}, {1, 0}); // dp=1, tp=0 -> piece 1
  for (int64_t i = 0; i < 6; ++i)
    ASSERT_EQ(local.data<int64_t>()[i], 6 + i);
  local = sliceToLocal(g, l, {2, 2}, {0, 1}); // dp=0, tp=1 -> piece 2
  for (int64_t i = 0; i < 6; ++i)
    ASSERT_EQ(local.data<int64_t>()[i], 12 + i);
  checkAllRanks(l, {2, 2});
}

TEST(Layout, InnerSplitsAndManyFactors) {
  checkAllRanks(parse(R"([[{"size": 2, "axes": []}, {"size": 6, "axes": [2]}],
                          [{"size": 4, "axes": [0]}],
                          [{"size": 3, "axes": []}, {"size": 2, "axes": [1]},
                           {"size": 5, "axes": []}]])",
                      {2, 2, 3}),
                {2, 2, 3});
  checkAllRanks(
      parse(R"([[{"size": 7, "axes": []}], [{"size": 6, "axes": [0, 1]}]])",
            {3, 2}),
      {3, 2});
}

TEST(Layout, OtherDtypes) {
  Layout l =
      parse(R"([[{"size": 4, "axes": [0]}], [{"size": 3, "axes": []}]])", {2});
  Tensor g =
      Tensor::fromVector<uint8_t>({4, 3}, {1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0});
  Tensor local = sliceToLocal(g, l, {2}, {1});
  EXPECT_EQ(local.dtype(), DType::I1);
  std::vector<uint8_t> expect = {0, 0, 1, 0, 1, 0};
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(local.data<uint8_t>()[i], expect[i]);
  Tensor f =
      Tensor::fromVector<float>({4, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor fl = sliceToLocal(f, l, {2}, {0});
  EXPECT_EQ(fl.data<float>()[5], 5.0f);
}

TEST(Layout, JsonRoundTrip) {
  const char *text =
      R"([[{"size": 3, "axes": []}, {"size": 64, "axes": [1]}]])";
  Layout l = parse(text, {2, 2});
  llvm::json::Value back = layoutToJson(l);
  EXPECT_EQ(back, *llvm::json::parse(text));
  EXPECT_EQ(l.usedAxes(), (std::vector<int64_t>{1}));
}

TEST(Layout, ParseErrors) {
  EXPECT_NE(
      parseError(R"([[{"size": 8, "axes": [2]}]])", {2, 2}).find("grid axis 2"),
      std::string::npos);
  EXPECT_NE(parseError(R"([[{"size": 5, "axes": [0]}]])", {2, 2})
                .find("cannot be split 2 ways"),
            std::string::npos);
  EXPECT_NE(
      parseError(R"([[{"size": 8, "axes": [0]}], [{"size": 4, "axes": [0]}]])",
                 {2, 2})
          .find("splits more than one factor"),
      std::string::npos);
  EXPECT_NE(parseError(R"([[{"size": 8}]])", {2}).find("\"axes\""),
            std::string::npos);
  EXPECT_NE(parseError(R"({"size": 8})", {2}).find("array of dimensions"),
            std::string::npos);
  EXPECT_NE(parseError(R"([[]])", {2}).find("no factors"), std::string::npos);
  EXPECT_NE(parseError(R"([[{"size": 0, "axes": []}]])", {2}).find("size 0"),
            std::string::npos);
  // Errors name the tensor.
  EXPECT_NE(parseError(R"([[{"size": 5, "axes": [0]}]])", {2}).find("'t'"),
            std::string::npos);
}

} // namespace

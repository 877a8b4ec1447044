//===- ElementwiseKernelsTest.cpp - CUDA elementwise, layout, reductions --===//
//
// Two kinds of tests:
//  - ElementwiseIndexMath.*: the host-side index math of
//    ElementwiseKernels.h (index maps, tiled transpose view, reduction plan
//    and splits, copy units, argument checks that return before any launch)
//    checked against naive loops. They need no GPU and always run.
//  - ElementwiseKernelsTest.*: every CUDA kernel against the cpu:: kernel
//    of the same op on the same random inputs (bf16 / f16 against the CPU
//    kernel on the widened inputs, rounded back). Skipped without a GPU.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/backends/cuda/ElementwiseKernels.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

using namespace tessera::runtime;
using namespace tessera::runtime::test;
namespace elem = tessera::runtime::cuda::elem;

namespace {

//===----------------------------------------------------------------------===//
// Host helpers
//===----------------------------------------------------------------------===//

int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Source flat index of output flat index `o` of transpose(inShape, perm).
int64_t naiveTransposeSrc(int64_t o, const std::vector<int64_t> &inShape,
                          const std::vector<int64_t> &perm) {
  std::vector<int64_t> outShape(perm.size());
  for (size_t k = 0; k < perm.size(); ++k)
    outShape[k] = inShape[perm[k]];
  std::vector<int64_t> idx = unravel(o, outShape), inIdx(perm.size());
  for (size_t k = 0; k < perm.size(); ++k)
    inIdx[perm[k]] = idx[k];
  return ravel(inIdx, inShape);
}

/// Source flat index of output flat index `o` of broadcast(in -> out).
int64_t naiveBroadcastSrc(int64_t o, const std::vector<int64_t> &inShape,
                          const std::vector<int64_t> &outShape) {
  std::vector<int64_t> idx = unravel(o, outShape);
  size_t lead = outShape.size() - inShape.size();
  std::vector<int64_t> inIdx(inShape.size());
  for (size_t i = 0; i < inShape.size(); ++i)
    inIdx[i] = inShape[i] == 1 ? 0 : idx[lead + i];
  return ravel(inIdx, inShape);
}

std::vector<int64_t> randomPerm(size_t r, std::mt19937 &gen) {
  std::vector<int64_t> p(r);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), gen);
  return p;
}

/// Runs the tiled transpose kernel's loops on the host (same index
/// arithmetic, one "thread" at a time) from source offsets to output flat
/// indices: out[o] = src offset. Every output must be written exactly once.
std::vector<int64_t> emulateTiledTranspose(const elem::TiledTranspose &t,
                                           int64_t n) {
  std::vector<int64_t> out(n, -1);
  elem::Grid3 g = elem::tiledTransposeGrid(t);
  int64_t tilesA = (t.sizeA + elem::kTile - 1) / elem::kTile;
  int64_t tilesB = (t.sizeB + elem::kTile - 1) / elem::kTile;
  for (unsigned bz = 0; bz < g.z; ++bz)
    for (int64_t z = bz; z < t.batch; z += g.z) {
      int64_t srcBase = elem::mapIndex(t.batchSrc, z);
      int64_t dstBase = elem::mapIndex(t.batchDst, z);
      for (unsigned by = 0; by < g.y; ++by)
        for (int64_t ta = by; ta < tilesA; ta += g.y)
          for (unsigned bx = 0; bx < g.x; ++bx)
            for (int64_t tb = bx; tb < tilesB; tb += g.x) {
              int64_t tile[elem::kTile][elem::kTile + 1];
              int64_t a0 = ta * elem::kTile, b0 = tb * elem::kTile;
              for (int ty = 0; ty < elem::kTileRows; ++ty)
                for (int tx = 0; tx < elem::kTile; ++tx)
                  for (int j = ty; j < elem::kTile; j += elem::kTileRows) {
                    int64_t a = a0 + tx, b = b0 + j;
                    if (a < t.sizeA && b < t.sizeB)
                      tile[j][tx] = srcBase + b * t.srcStrideB + a;
                  }
              for (int ty = 0; ty < elem::kTileRows; ++ty)
                for (int tx = 0; tx < elem::kTile; ++tx)
                  for (int j = ty; j < elem::kTile; j += elem::kTileRows) {
                    int64_t a = a0 + j, b = b0 + tx;
                    if (a < t.sizeA && b < t.sizeB) {
                      int64_t o = dstBase + a * t.dstStrideA + b;
                      EXPECT_GE(o, 0);
                      EXPECT_LT(o, n);
                      if (o < 0 || o >= n)
                        continue;
                      EXPECT_EQ(out[o], -1) << "output " << o << " twice";
                      out[o] = tile[tx][j];
                    }
                  }
            }
    }
  return out;
}

/// Checks the transpose IndexMap (and, when it applies, the tiled view)
/// against the naive index of every output.
void checkTranspose(const std::vector<int64_t> &shape,
                    const std::vector<int64_t> &perm, bool expectTiled) {
  SCOPED_TRACE("shape " + shapeToString(shape) + " perm " +
               shapeToString(perm));
  elem::IndexMap m;
  ASSERT_TRUE(elem::transposeMap(shape, perm, m));
  int64_t n = numelOf(shape);
  for (int64_t o = 0; o < n; ++o) {
    ASSERT_EQ(elem::mapIndex(m, o), naiveTransposeSrc(o, shape, perm))
        << "output " << o;
    ASSERT_EQ(elem::mapIndexAs<uint32_t>(m, static_cast<uint32_t>(o)),
              elem::mapIndex(m, o));
  }
  elem::TiledTranspose t;
  bool tiled = elem::tiledTransposeOf(m, t);
  EXPECT_EQ(tiled, expectTiled);
  if (!tiled)
    return;
  std::vector<int64_t> src = emulateTiledTranspose(t, n);
  for (int64_t o = 0; o < n; ++o)
    ASSERT_EQ(src[o], naiveTransposeSrc(o, shape, perm)) << "output " << o;
}

TEST(ElementwiseIndexMath, TransposeMapsMatchNaiveIndexing) {
  checkTranspose({}, {}, false);
  checkTranspose({5}, {0}, false);
  checkTranspose({2, 3, 4}, {0, 1, 2}, false);
  checkTranspose({3, 4}, {1, 0}, true);
  checkTranspose({67, 129}, {1, 0}, true);      // partial tiles both ways
  checkTranspose({2, 33, 65}, {0, 2, 1}, true); // batched last-two swap
  checkTranspose({2, 3, 4, 5}, {0, 3, 1, 2}, true);
  checkTranspose({2, 3, 4, 5}, {3, 2, 1, 0}, true);
  checkTranspose({2, 3, 4, 5}, {1, 0, 2, 3}, false); // last dim stays
  checkTranspose({2, 3, 4, 5}, {2, 0, 1, 3}, false);
  checkTranspose({1, 7, 1, 9}, {3, 1, 2, 0}, true); // size-1 dims dropped
  checkTranspose({0, 3, 4}, {2, 1, 0}, true);       // empty
  std::mt19937 gen(7);
  for (int it = 0; it < 40; ++it) {
    size_t r = 1 + it % 6;
    std::vector<int64_t> shape(r);
    for (int64_t &d : shape)
      d = 1 + gen() % 5;
    std::vector<int64_t> perm = randomPerm(r, gen);
    elem::IndexMap m;
    ASSERT_TRUE(elem::transposeMap(shape, perm, m));
    elem::TiledTranspose t;
    checkTranspose(shape, perm, elem::tiledTransposeOf(m, t));
  }
}

TEST(ElementwiseIndexMath, TransposeMapMergesContiguousDims) {
  elem::IndexMap m;
  ASSERT_TRUE(elem::transposeMap({2, 3, 4}, {0, 1, 2}, m));
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.dims[0], 24);
  ASSERT_TRUE(elem::transposeMap({2, 3, 4}, {2, 0, 1}, m));
  EXPECT_EQ(m.rank, 2); // [4][6] with source strides 1, 4
  EXPECT_EQ(m.dims[0], 4);
  EXPECT_EQ(m.strides[0], 1);
  EXPECT_EQ(m.dims[1], 6);
  EXPECT_EQ(m.strides[1], 4);
  // Invalid permutations.
  EXPECT_FALSE(elem::transposeMap({2, 3}, {0, 0}, m));
  EXPECT_FALSE(elem::transposeMap({2, 3}, {0, 2}, m));
  EXPECT_FALSE(elem::transposeMap({2, 3}, {0}, m));
  // Rank 9 reversed cannot merge: too large.
  std::vector<int64_t> shape(9, 2), perm(9);
  for (int k = 0; k < 9; ++k)
    perm[k] = 8 - k;
  EXPECT_FALSE(elem::transposeMap(shape, perm, m));
  // Rank 9 identity merges to rank 1.
  std::iota(perm.begin(), perm.end(), 0);
  EXPECT_TRUE(elem::transposeMap(shape, perm, m));
  EXPECT_EQ(m.rank, 1);
}

TEST(ElementwiseIndexMath, TiledTransposeGridIsCapped) {
  elem::TiledTranspose t;
  t.sizeA = 100;
  t.sizeB = 33;
  t.batch = 70000;
  elem::Grid3 g = elem::tiledTransposeGrid(t);
  EXPECT_EQ(g.x, 2u);
  EXPECT_EQ(g.y, 4u);
  EXPECT_EQ(g.z, 65535u);
  t.sizeA = int64_t(1) << 30;
  t.sizeB = 0;
  t.batch = 1;
  g = elem::tiledTransposeGrid(t);
  EXPECT_EQ(g.x, 1u);
  EXPECT_EQ(g.y, 65535u);
  EXPECT_EQ(g.z, 1u);
}

TEST(ElementwiseIndexMath, BroadcastMapsMatchNaiveIndexing) {
  struct Case {
    std::vector<int64_t> in, out;
  };
  std::vector<Case> cases = {{{}, {}},
                             {{}, {2, 3}},
                             {{1}, {4}},
                             {{3}, {2, 3}},
                             {{3, 1}, {2, 3, 4}},
                             {{1, 4}, {3, 4}},
                             {{2, 1, 3}, {2, 5, 3}},
                             {{1, 1, 1}, {2, 2, 2}},
                             {{2, 3}, {2, 3}},
                             {{5, 1}, {0, 5, 2}}};
  for (const Case &c : cases) {
    SCOPED_TRACE(shapeToString(c.in) + " -> " + shapeToString(c.out));
    elem::IndexMap m;
    ASSERT_TRUE(elem::broadcastMap(c.in, c.out, m));
    for (int64_t o = 0; o < numelOf(c.out); ++o) {
      ASSERT_EQ(elem::mapIndex(m, o), naiveBroadcastSrc(o, c.in, c.out));
      ASSERT_EQ(elem::mapIndexAs<uint32_t>(m, static_cast<uint32_t>(o)),
                elem::mapIndex(m, o));
    }
  }
  elem::IndexMap m;
  EXPECT_FALSE(elem::broadcastMap({2}, {3}, m));
  EXPECT_FALSE(elem::broadcastMap({2, 3}, {3}, m));
  EXPECT_FALSE(elem::broadcastMap({3, 2}, {2, 3, 3}, m));
  // Alternating broadcast dims cannot merge beyond kMaxRank.
  std::vector<int64_t> in, out;
  for (int k = 0; k < 10; ++k) {
    in.push_back(k % 2 ? 2 : 1);
    out.push_back(2);
  }
  EXPECT_FALSE(elem::broadcastMap(in, out, m));
}

TEST(ElementwiseIndexMath, SliceMapsMatchNaiveIndexing) {
  std::vector<int64_t> in = {5, 6, 7};
  std::vector<int64_t> starts = {1, 0, 2}, limits = {5, 6, 7},
                       steps = {2, 1, 3};
  std::vector<int64_t> out = {2, 6, 2};
  elem::IndexMap m;
  ASSERT_TRUE(elem::sliceMap(in, starts, limits, steps, out, m));
  for (int64_t o = 0; o < numelOf(out); ++o) {
    std::vector<int64_t> idx = unravel(o, out), inIdx(3);
    for (int d = 0; d < 3; ++d)
      inIdx[d] = starts[d] + idx[d] * steps[d];
    ASSERT_EQ(elem::mapIndex(m, o), ravel(inIdx, in)) << o;
  }
  // Full slice merges to one contiguous dim.
  ASSERT_TRUE(elem::sliceMap(in, {0, 0, 0}, in, {1, 1, 1}, in, m));
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.base, 0);
  // Rank 0 and empty results.
  ASSERT_TRUE(elem::sliceMap({}, {}, {}, {}, {}, m));
  EXPECT_EQ(elem::mapIndex(m, 0), 0);
  ASSERT_TRUE(elem::sliceMap({4}, {2}, {2}, {1}, {0}, m));
  // Bad bounds or output shape.
  EXPECT_FALSE(elem::sliceMap({4}, {0}, {5}, {1}, {5}, m));
  EXPECT_FALSE(elem::sliceMap({4}, {3}, {2}, {1}, {0}, m));
  EXPECT_FALSE(elem::sliceMap({4}, {0}, {4}, {0}, {4}, m));
  EXPECT_FALSE(elem::sliceMap({4}, {0}, {4}, {3}, {1}, m));
}

/// Reference reduction over `axes` of a double array.
std::vector<double> naiveReduceSum(const std::vector<double> &x,
                                   const std::vector<int64_t> &shape,
                                   const std::vector<int64_t> &axes) {
  std::vector<int64_t> outShape;
  for (int64_t d = 0; d < (int64_t)shape.size(); ++d)
    if (!std::binary_search(axes.begin(), axes.end(), d))
      outShape.push_back(shape[d]);
  std::vector<double> out(numelOf(outShape), 0.0);
  for (int64_t i = 0; i < numelOf(shape); ++i) {
    std::vector<int64_t> idx = unravel(i, shape), o;
    for (int64_t d = 0; d < (int64_t)shape.size(); ++d)
      if (!std::binary_search(axes.begin(), axes.end(), d))
        o.push_back(idx[d]);
    out[ravel(o, outShape)] += x[i];
  }
  return out;
}

/// The reduction the kernels do, on the host: the plan's optional permute
/// through an IndexMap, then [outer, red, inner] with the splits.
std::vector<double> planReduceSum(const std::vector<double> &x,
                                  const std::vector<int64_t> &shape,
                                  const std::vector<int64_t> &axes) {
  elem::ReducePlan p;
  EXPECT_TRUE(elem::planReduce(shape, axes, p));
  std::vector<double> src = x;
  if (p.needsTranspose) {
    elem::IndexMap m;
    EXPECT_TRUE(elem::transposeMap(p.dims, p.perm, m));
    for (size_t o = 0; o < x.size(); ++o)
      src[o] = x[elem::mapIndex(m, o)];
    EXPECT_EQ(p.inner, 1);
  }
  EXPECT_EQ(p.outer * p.red * p.inner, (int64_t)x.size());
  int64_t splits = elem::reduceSplits(p.outer, p.red, p.inner);
  int64_t chunk = elem::reduceChunk(p.red, splits);
  std::vector<double> out(p.outer * p.inner, 0.0);
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t c = 0; c < p.inner; ++c)
      for (int64_t s = 0; s < splits; ++s)
        for (int64_t j = s * chunk; j < std::min(p.red, (s + 1) * chunk); ++j)
          out[o * p.inner + c] += src[(o * p.red + j) * p.inner + c];
  return out;
}

TEST(ElementwiseIndexMath, ReducePlanMatchesNaiveReduction) {
  struct Case {
    std::vector<int64_t> shape, axes;
    bool transpose;
  };
  std::vector<Case> cases = {{{2, 3, 4}, {1}, false},
                             {{2, 3, 4}, {0}, false},
                             {{2, 3, 4}, {2}, false},
                             {{2, 3, 4}, {0, 1}, false},
                             {{2, 3, 4}, {1, 2}, false},
                             {{2, 3, 4}, {0, 1, 2}, false},
                             {{2, 3, 4}, {0, 2}, true},
                             {{2, 3, 4, 5}, {0, 2}, true},
                             {{2, 3, 4, 5}, {1, 3}, true},
                             {{2, 1, 4, 5}, {0, 1, 2}, false},
                             {{2, 3, 1, 5}, {0, 3}, true},
                             {{2, 3, 1, 5}, {1, 2}, false},
                             {{3, 1, 4}, {1}, false},
                             {{}, {}, false},
                             {{4}, {}, false},
                             {{2, 3, 4, 5}, {0, 1, 3}, true},
                             {{3, 0, 2}, {1}, false},
                             {{3, 2, 0}, {0}, false}};
  std::mt19937 gen(3);
  for (const Case &c : cases) {
    SCOPED_TRACE("shape " + shapeToString(c.shape) + " axes " +
                 shapeToString(c.axes));
    elem::ReducePlan p;
    ASSERT_TRUE(elem::planReduce(c.shape, c.axes, p));
    EXPECT_EQ(p.needsTranspose, c.transpose);
    std::vector<double> x(numelOf(c.shape));
    for (double &v : x)
      v = static_cast<double>(gen() % 1000);
    std::vector<double> want = naiveReduceSum(x, c.shape, c.axes);
    std::vector<double> got = planReduceSum(x, c.shape, c.axes);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << i;
  }
  elem::ReducePlan p;
  EXPECT_FALSE(elem::planReduce({2, 3}, {1, 0}, p)); // unsorted
  EXPECT_FALSE(elem::planReduce({2, 3}, {1, 1}, p)); // repeated
  EXPECT_FALSE(elem::planReduce({2, 3}, {2}, p));    // out of range
  EXPECT_FALSE(elem::planReduce({2, 3}, {-1}, p));
}

TEST(ElementwiseIndexMath, ReduceSplitsCoverTheExtentOnce) {
  // Small or well-parallel reductions: one pass.
  EXPECT_EQ(elem::reduceSplits(1, 100, 1), 1);
  EXPECT_EQ(elem::reduceSplits(4096, 100000, 1), 1);
  EXPECT_EQ(elem::reduceSplits(1, 100000, 64 * 1024), 1);
  EXPECT_EQ(elem::reduceSplits(0, 100000, 1), 1);
  // Few outputs, long reductions: split.
  EXPECT_GT(elem::reduceSplits(1, 1 << 24, 1), 1);
  EXPECT_GT(elem::reduceSplits(1, 100000, 3), 1);
  for (int64_t outer : {1, 3, 100, 2000})
    for (int64_t inner : {1, 7, 32, 100})
      for (int64_t red : {0, 1, 2047, 2048, 2049, 5000, 100003, 1 << 22}) {
        int64_t s = elem::reduceSplits(outer, red, inner);
        int64_t chunk = elem::reduceChunk(red, s);
        ASSERT_GE(s, 1);
        ASSERT_LE(s, elem::kReduceMaxSplits);
        ASSERT_GE(s * chunk, red);                             // covered
        ASSERT_LT((s - 1) * chunk, std::max<int64_t>(red, 1)); // none empty
        if (s > 1) {
          ASSERT_GE(chunk, elem::kReduceMinChunk / 2);
        }
      }
}

/// Runs the reduction kernels' block / thread loops on the host (row
/// kernel: kReduceThreads threads; column kernel: kTile x kTileRows) and
/// checks that every input element is read exactly once, by the block of
/// its output, and that the partials the second stage reads are exactly
/// the ones the first stage wrote.
void checkReduceCoverage(int64_t outer, int64_t red, int64_t inner) {
  SCOPED_TRACE("outer " + std::to_string(outer) + " red " +
               std::to_string(red) + " inner " + std::to_string(inner));
  int64_t splits = elem::reduceSplits(outer, red, inner);
  int64_t chunk = elem::reduceChunk(red, splits);
  int64_t colTiles = inner == 1 ? 1 : (inner + elem::kTile - 1) / elem::kTile;
  std::vector<int> reads(outer * red * inner, 0);
  std::vector<int> written(outer * inner * splits, 0);
  for (int64_t blk = 0; blk < outer * splits * colTiles; ++blk) {
    elem::ReduceBlock b = elem::reduceBlockOf(blk, splits, colTiles);
    ASSERT_LT(b.outer, outer);
    ASSERT_LT(b.split, splits);
    ASSERT_LT(b.colTile, colTiles);
    int64_t begin = b.split * chunk;
    int64_t end = std::min(red, begin + chunk);
    if (inner == 1) {
      for (int tid = 0; tid < elem::kReduceThreads; ++tid)
        for (int64_t j = begin + tid; j < end; j += elem::kReduceThreads)
          ++reads[b.outer * red + j];
      if (splits > 1)
        ++written[elem::partialIndex(b.outer, b.split, 0, splits, 1)];
      continue;
    }
    for (int tx = 0; tx < elem::kTile; ++tx) {
      int64_t col = b.colTile * elem::kTile + tx;
      if (col >= inner)
        continue;
      for (int ty = 0; ty < elem::kTileRows; ++ty)
        for (int64_t j = begin + ty; j < end; j += elem::kTileRows)
          ++reads[(b.outer * red + j) * inner + col];
      if (splits > 1)
        ++written[elem::partialIndex(b.outer, b.split, col, splits, inner)];
    }
  }
  for (size_t i = 0; i < reads.size(); ++i)
    ASSERT_EQ(reads[i], 1) << "element " << i;
  if (splits > 1)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < inner; ++c)
        for (int64_t s = 0; s < splits; ++s)
          ASSERT_EQ(written[elem::partialIndex(o, s, c, splits, inner)], 1);
}

TEST(ElementwiseIndexMath, ReduceKernelsReadEveryElementOnce) {
  checkReduceCoverage(3, 7, 1);
  checkReduceCoverage(3, 1000, 1);
  checkReduceCoverage(2, 100003, 1); // split rows
  checkReduceCoverage(1, 1 << 20, 1);
  checkReduceCoverage(3, 5, 7);
  checkReduceCoverage(1, 100000, 3); // split columns
  checkReduceCoverage(2, 5000, 70);
  checkReduceCoverage(4, 0, 3);
}

TEST(ElementwiseIndexMath, ScratchSizes) {
  // Contiguous, short: none.
  EXPECT_EQ(cuda::reduceScratchBytes(DType::F32, {8, 16}, {1}), 0);
  EXPECT_EQ(cuda::reduceScratchBytes(DType::F32, {8, 16}, {}), 0);
  // Non-contiguous axes: the permuted copy (256-aligned).
  EXPECT_EQ(cuda::reduceScratchBytes(DType::F32, {2, 3, 4}, {0, 2}), 256);
  EXPECT_EQ(cuda::reduceScratchBytes(DType::BF16, {20, 30, 40}, {0, 2}),
            elem::alignScratch(20 * 30 * 40 * 2));
  // Long single reduction: partials.
  int64_t s = elem::reduceSplits(1, 1 << 24, 1);
  EXPECT_EQ(cuda::reduceScratchBytes(DType::F32, {1 << 24}, {0}),
            elem::alignScratch(s * 8));
  EXPECT_EQ(cuda::reduceScratchBytes(DType::F32, {2, 3}, {3}), -1);
  EXPECT_EQ(cuda::biasActivationGradScratchBytes(DType::F32, {16, 8}), 0);
  EXPECT_EQ(cuda::biasActivationGradScratchBytes(DType::F32, {4, 50000, 8}),
            cuda::reduceScratchBytes(DType::F32, {200000, 8}, {0}));
  EXPECT_GT(cuda::biasActivationGradScratchBytes(DType::F32, {4, 50000, 8}), 0);
}

TEST(ElementwiseIndexMath, CopyUnitIsTheWidestCommonAlignment) {
  EXPECT_EQ(elem::copyUnitBytes(256, 512, 64, 128), 16);
  EXPECT_EQ(elem::copyUnitBytes(256, 512 + 8, 64, 128), 8);
  EXPECT_EQ(elem::copyUnitBytes(256, 512, 12, 128), 4);
  EXPECT_EQ(elem::copyUnitBytes(256, 512, 64, 6), 2);
  EXPECT_EQ(elem::copyUnitBytes(257, 512, 64, 128), 1);
}

TEST(ElementwiseIndexMath, BadArgumentsAreRejectedBeforeAnyLaunch) {
  // Host tensors are fine here: every call fails its checks first.
  Tensor a = Tensor::zeros(DType::F32, {2, 3});
  Tensor b = Tensor::zeros(DType::F32, {3, 2});
  Tensor i = Tensor::zeros(DType::I64, {2, 3});
  Tensor o = Tensor::zeros(DType::F32, {2, 3});
  Tensor o1 = Tensor::zeros(DType::I1, {2, 3});
  EXPECT_EQ(cuda::add(a, b, o, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::add(a, i, o, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::pow(i, i, i, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::exp(i, i, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::exp(a, o1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::equal(a, a, o, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::select(o, a, a, o, nullptr), cudaErrorInvalidValue);
  Tensor small = Tensor::zeros(DType::F32, {5});
  EXPECT_EQ(cuda::convert(a, small, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::transpose(a, {1, 0}, o, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::transpose(a, {0, 0}, o, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::broadcast(b, o, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::slice(a, {0, 0}, {2, 4}, {1, 1}, o, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::concat({&a, &a}, 0, o, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::concat({&a}, 2, o, nullptr), cudaErrorInvalidValue);
  Tensor r = Tensor::zeros(DType::F32, {2});
  EXPECT_EQ(cuda::reduceSum(a, {0}, false, r, nullptr, 0, nullptr),
            cudaErrorInvalidValue); // out should be [3]
  EXPECT_EQ(cuda::reduceSum(i, {1}, false, r, nullptr, 0, nullptr),
            cudaErrorInvalidValue); // i64 input
  Tensor big = Tensor::zeros(DType::F32, {2, 3, 4});
  Tensor r2 = Tensor::zeros(DType::F32, {3});
  EXPECT_EQ(cuda::reduceSum(big, {0, 2}, false, r2, nullptr, 0, nullptr),
            cudaErrorInvalidValue); // needs scratch
  Tensor bias = Tensor::zeros(DType::F32, {2});
  EXPECT_EQ(
      cuda::biasActivation(a, bias, cuda::BiasActivation::Relu, o, nullptr),
      cudaErrorInvalidValue);
}

//===----------------------------------------------------------------------===//
// GPU conformance against the CPU kernels
//===----------------------------------------------------------------------===//

Tensor convertTo(const Tensor &t, DType d) {
  Tensor o = Tensor::empty(d, t.shape());
  cpu::convert(t, o);
  return o;
}
Tensor widen(const Tensor &t) { return convertTo(t, DType::F32); }

bool isNaN16(uint16_t bits, DType d) {
  if (d == DType::BF16)
    return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu);
  return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu);
}

/// Distance in units in the last place between two bf16 / f16 values (0
/// for two NaNs; "infinitely" far for NaN against a number).
int64_t ulp16(uint16_t x, uint16_t y, DType d) {
  bool nx = isNaN16(x, d), ny = isNaN16(y, d);
  if (nx || ny)
    return nx == ny ? 0 : std::numeric_limits<int64_t>::max();
  auto ordered = [](uint16_t v) -> int64_t {
    return v & 0x8000u ? -static_cast<int64_t>(v & 0x7fffu) : v;
  };
  return std::abs(ordered(x) - ordered(y));
}

/// got (device result, on the host) against want: f32 within `tol` of
/// maxRelativeError(.., floor); bf16 / f16 elementwise within one ulp, or
/// within tol * max(|want|, floor) (for results of f32 cancellations such
/// as 1 + tanh(x) near -1, where the f32 difference allowed by `tol`
/// becomes many 16-bit ulps of a tiny value); other dtypes byte-exact.
void expectMatches(const Tensor &got, const Tensor &want, double tol,
                   double floor = 1e-3) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  switch (got.dtype()) {
  case DType::F32:
    EXPECT_LE(maxRelativeError(got, want, floor), tol);
    return;
  case DType::BF16:
  case DType::F16: {
    Tensor gw = widen(got), ww = widen(want);
    int bad = 0;
    for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
      if (ulp16(static_cast<const uint16_t *>(got.raw())[i],
                static_cast<const uint16_t *>(want.raw())[i], got.dtype()) <= 1)
        continue;
      double x = gw.data<float>()[i], y = ww.data<float>()[i];
      if (std::isfinite(x) && std::isfinite(y) &&
          std::fabs(x - y) <= tol * std::max(std::fabs(y), floor))
        continue;
      ADD_FAILURE() << dtypeName(got.dtype()) << " index " << i << ": got " << x
                    << ", want " << y;
      ++bad;
    }
    return;
  }
  default:
    expectEqualBytes(got, want);
  }
}

/// Random tensor of a float dtype (values in [lo, hi) rounded to it).
Tensor randomFloat(DType d, std::vector<int64_t> shape, unsigned seed,
                   float lo = -2.0f, float hi = 2.0f) {
  Tensor f = randomF32(std::move(shape), seed, lo, hi);
  return d == DType::F32 ? f : convertTo(f, d);
}

/// Random tensor of any dtype (i1 0/1, i64 in [-50, 50)).
Tensor randomAny(DType d, std::vector<int64_t> shape, unsigned seed) {
  if (d == DType::I64)
    return randomI64(std::move(shape), seed, -50, 50);
  if (d == DType::I1)
    return convertTo(randomI64(std::move(shape), seed, 0, 2), DType::I1);
  return randomFloat(d, std::move(shape), seed);
}

const std::vector<DType> kFloatTypes = {DType::F32, DType::BF16, DType::F16};
const std::vector<DType> kAllTypes = {DType::F32, DType::I64, DType::I1,
                                      DType::BF16, DType::F16};
const std::vector<std::vector<int64_t>> kShapes = {
    {}, {0}, {3, 0, 2}, {1}, {3, 5, 7}, {257, 33}, {1 << 20}};

class ElementwiseKernelsTest : public CudaTest {
protected:
  /// CPU reference of a float-dtype op: widen, run `f` on f32, round back.
  template <typename F>
  Tensor reference(const std::vector<const Tensor *> &ins, DType outType,
                   std::vector<int64_t> outShape, F f) {
    std::vector<Tensor> wide;
    for (const Tensor *t : ins)
      wide.push_back(isFloat16Bit(t->dtype()) ? widen(*t) : *t);
    Tensor o = Tensor::empty(isFloat16Bit(outType) ? DType::F32 : outType,
                             std::move(outShape));
    f(wide, o);
    return isFloat16Bit(outType) ? convertTo(o, outType) : o;
  }

  Tensor scratch(int64_t bytes) {
    return devEmpty(DType::I1, {std::max<int64_t>(bytes, 1)});
  }
};

using BinFn = void (*)(const Tensor &, const Tensor &, Tensor &);

TEST_F(ElementwiseKernelsTest, BinaryFloatMatchesCpu) {
  struct Op {
    cuda::BinaryOp op;
    BinFn cpu;
    double tol;
  };
  std::vector<Op> ops = {{cuda::BinaryOp::Add, &cpu::add, 1e-6},
                         {cuda::BinaryOp::Sub, &cpu::sub, 1e-6},
                         {cuda::BinaryOp::Mul, &cpu::mul, 1e-6},
                         {cuda::BinaryOp::Div, &cpu::div, 1e-6},
                         {cuda::BinaryOp::Pow, &cpu::pow, 1e-5},
                         {cuda::BinaryOp::Max, &cpu::max, 1e-6}};
  unsigned seed = 1;
  for (const Op &op : ops)
    for (DType d : kFloatTypes)
      for (const auto &shape : kShapes) {
        SCOPED_TRACE(std::string(dtypeName(d)) + " " + shapeToString(shape) +
                     " op " + std::to_string(static_cast<int>(op.op)));
        bool isPow = op.op == cuda::BinaryOp::Pow;
        Tensor a = randomFloat(d, shape, seed++, isPow ? 0.1f : -2.0f, 2.0f);
        Tensor b = randomFloat(d, shape, seed++, -2.0f, 2.0f);
        if (op.op == cuda::BinaryOp::Max && a.numel() > 2 && d == DType::F32) {
          a.data<float>()[0] = NAN;
          b.data<float>()[1] = NAN;
        }
        Tensor want = reference({&a, &b}, d, shape,
                                [&](std::vector<Tensor> &in, Tensor &o) {
                                  op.cpu(in[0], in[1], o);
                                });
        Tensor da = dev(a), db = dev(b), dout = devEmpty(d, shape);
        ASSERT_EQ(cuda::binary(op.op, da, db, dout, nullptr), cudaSuccess);
        expectMatches(host(dout), want, op.tol);
        // In place: out = a.
        ASSERT_EQ(cuda::binary(op.op, da, db, da, nullptr), cudaSuccess);
        expectMatches(host(da), want, op.tol);
      }
}

// Operands 16-byte aligned take the vectorised path (covered above);
// these, one element past an allocation, take the scalar one.
TEST_F(ElementwiseKernelsTest, UnalignedOperandsMatchCpu) {
  for (DType d : kFloatTypes) {
    SCOPED_TRACE(dtypeName(d));
    size_t es = dtypeSize(d);
    Tensor a = randomFloat(d, {1001}, 7), b = randomFloat(d, {1001}, 8);
    auto tail = [&](const Tensor &t) {
      Tensor o = Tensor::empty(d, {1000});
      std::memcpy(o.raw(), static_cast<const char *>(t.raw()) + es, o.bytes());
      return o;
    };
    Tensor a1 = tail(a), b1 = tail(b);
    Tensor da = dev(a), db = dev(b), dout = devEmpty(d, {1001});
    Tensor va = Tensor::view(static_cast<char *>(da.raw()) + es, d, {1000});
    Tensor vb = Tensor::view(static_cast<char *>(db.raw()) + es, d, {1000});
    Tensor vo = Tensor::view(static_cast<char *>(dout.raw()) + es, d, {1000});
    Tensor want = reference(
        {&a1, &b1}, d, {1000},
        [](std::vector<Tensor> &in, Tensor &o) { cpu::mul(in[0], in[1], o); });
    ASSERT_EQ(cuda::mul(va, vb, vo, nullptr), cudaSuccess);
    expectMatches(tail(host(dout)), want, 1e-6);
    Tensor want2 =
        reference({&a1}, d, {1000}, [](std::vector<Tensor> &in, Tensor &o) {
          cpu::tanh(in[0], o);
        });
    ASSERT_EQ(cuda::tanh(va, vo, nullptr), cudaSuccess);
    expectMatches(tail(host(dout)), want2, 1e-5);
  }
}

TEST_F(ElementwiseKernelsTest, BinaryI64MatchesCpu) {
  std::vector<std::pair<cuda::BinaryOp, BinFn>> ops = {
      {cuda::BinaryOp::Add, &cpu::add},
      {cuda::BinaryOp::Sub, &cpu::sub},
      {cuda::BinaryOp::Mul, &cpu::mul},
      {cuda::BinaryOp::Div, &cpu::div},
      {cuda::BinaryOp::Max, &cpu::max}};
  for (const auto &op : ops)
    for (const auto &shape : kShapes) {
      Tensor a = randomI64(shape, 11, -1000, 1000);
      Tensor b = randomI64(shape, 12, -30, 30);
      for (int64_t i = 0; i < b.numel(); ++i)
        if (b.data<int64_t>()[i] == 0)
          b.data<int64_t>()[i] = 7; // no division by zero
      Tensor want = Tensor::empty(DType::I64, shape);
      op.second(a, b, want);
      Tensor dout = devEmpty(DType::I64, shape);
      ASSERT_EQ(cuda::binary(op.first, dev(a), dev(b), dout, nullptr),
                cudaSuccess);
      expectEqualBytes(host(dout), want);
    }
  // Truncation toward zero.
  Tensor a = Tensor::fromVector<int64_t>({4}, {7, -7, 7, -7});
  Tensor b = Tensor::fromVector<int64_t>({4}, {2, 2, -2, -2});
  Tensor dout = devEmpty(DType::I64, {4});
  ASSERT_EQ(cuda::div(dev(a), dev(b), dout, nullptr), cudaSuccess);
  Tensor got = host(dout);
  EXPECT_EQ(got.data<int64_t>()[0], 3);
  EXPECT_EQ(got.data<int64_t>()[1], -3);
  EXPECT_EQ(got.data<int64_t>()[2], -3);
  EXPECT_EQ(got.data<int64_t>()[3], 3);
}

TEST_F(ElementwiseKernelsTest, EqualMatchesCpu) {
  for (DType d : kAllTypes)
    for (const auto &shape : kShapes) {
      Tensor a = randomAny(d, shape, 21);
      Tensor b = randomAny(d, shape, 22);
      // Make every third element equal.
      size_t es = dtypeSize(d);
      for (int64_t i = 0; i < a.numel(); i += 3)
        std::memcpy(static_cast<char *>(b.raw()) + i * es,
                    static_cast<char *>(a.raw()) + i * es, es);
      Tensor want = Tensor::empty(DType::I1, shape);
      cpu::equal(a, b, want);
      Tensor dout = devEmpty(DType::I1, shape);
      ASSERT_EQ(cuda::equal(dev(a), dev(b), dout, nullptr), cudaSuccess);
      expectEqualBytes(host(dout), want);
    }
}

TEST_F(ElementwiseKernelsTest, SelectMatchesCpu) {
  for (DType d : kAllTypes)
    for (const auto &shape : kShapes) {
      Tensor c = randomAny(DType::I1, shape, 31);
      Tensor a = randomAny(d, shape, 32), b = randomAny(d, shape, 33);
      Tensor want = Tensor::empty(d, shape);
      cpu::select(c, a, b, want);
      Tensor dc = dev(c), da = dev(a), db = dev(b), dout = devEmpty(d, shape);
      ASSERT_EQ(cuda::select(dc, da, db, dout, nullptr), cudaSuccess);
      expectEqualBytes(host(dout), want);
      ASSERT_EQ(cuda::select(dc, da, db, db, nullptr), cudaSuccess);
      expectEqualBytes(host(db), want);
    }
}

TEST_F(ElementwiseKernelsTest, UnaryMatchesCpu) {
  using UnFn = void (*)(const Tensor &, Tensor &);
  struct Op {
    cuda::UnaryOp op;
    UnFn cpu;
    double tol;
    float lo, hi;
    double floor = 1e-3; // 1: absolute error below 1 (gelu's 1 + erf/tanh)
  };
  auto geluNone = [](const Tensor &in, Tensor &out) {
    cpu::gelu(in, cpu::GeluApproximate::None, out);
  };
  auto geluTanh = [](const Tensor &in, Tensor &out) {
    cpu::gelu(in, cpu::GeluApproximate::Tanh, out);
  };
  std::vector<Op> ops = {{cuda::UnaryOp::Neg, &cpu::neg, 0, -3, 3},
                         {cuda::UnaryOp::Exp, &cpu::exp, 1e-5, -10, 10},
                         {cuda::UnaryOp::Log, &cpu::log, 1e-5, -0.5f, 100},
                         {cuda::UnaryOp::Sqrt, &cpu::sqrt, 0, -0.5f, 100},
                         {cuda::UnaryOp::Rsqrt, &cpu::rsqrt, 0, -0.5f, 100},
                         {cuda::UnaryOp::Tanh, &cpu::tanh, 1e-5, -5, 5},
                         {cuda::UnaryOp::Erf, &cpu::erf, 1e-5, -4, 4},
                         {cuda::UnaryOp::Relu, &cpu::relu, 0, -3, 3},
                         // 0.5 x (1 + erf / tanh(u)) cancels for x < 0: a
                         // 2-ulp difference between CUDA's and the host's
                         // erff / tanhf is an absolute error of about
                         // |x| ulp(1), 1e-4 relative to a small result
                         // (seen for tanh on an H100). Floor 1.
                         {cuda::UnaryOp::Gelu, geluNone, 1e-5, -6, 6, 1.0},
                         {cuda::UnaryOp::GeluTanh, geluTanh, 1e-5, -6, 6, 1.0},
                         {cuda::UnaryOp::Sigmoid, &cpu::sigmoid, 1e-5, -30, 30},
                         {cuda::UnaryOp::Silu, &cpu::silu, 1e-5, -30, 30}};
  unsigned seed = 40;
  for (const Op &op : ops)
    for (DType d : kFloatTypes)
      for (const auto &shape : kShapes) {
        SCOPED_TRACE(std::string(dtypeName(d)) + " " + shapeToString(shape) +
                     " op " + std::to_string(static_cast<int>(op.op)));
        Tensor a = randomFloat(d, shape, seed++, op.lo, op.hi);
        Tensor want =
            reference({&a}, d, shape, [&](std::vector<Tensor> &in, Tensor &o) {
              op.cpu(in[0], o);
            });
        Tensor da = dev(a), dout = devEmpty(d, shape);
        ASSERT_EQ(cuda::unary(op.op, da, dout, nullptr), cudaSuccess);
        expectMatches(host(dout), want, op.tol, op.floor);
        ASSERT_EQ(cuda::unary(op.op, da, da, nullptr), cudaSuccess);
        expectMatches(host(da), want, op.tol, op.floor);
      }
  // neg on i64.
  Tensor a = randomI64({1000}, 5, -100, 100);
  Tensor want = Tensor::empty(DType::I64, {1000});
  cpu::neg(a, want);
  Tensor dout = devEmpty(DType::I64, {1000});
  ASSERT_EQ(cuda::neg(dev(a), dout, nullptr), cudaSuccess);
  expectEqualBytes(host(dout), want);
}

TEST_F(ElementwiseKernelsTest, ActivationGradsMatchCpu) {
  unsigned seed = 60;
  for (DType d : kFloatTypes)
    for (const auto &shape : kShapes) {
      Tensor x = randomFloat(d, shape, seed++, -5, 5);
      Tensor dy = randomFloat(d, shape, seed++);
      if (d == DType::F32 && x.numel() > 1)
        x.data<float>()[0] = 0.0f; // relu_grad at 0 is 0
      Tensor dx0 = dev(x), ddy = dev(dy);
      Tensor want = reference({&x, &dy}, d, shape,
                              [](std::vector<Tensor> &in, Tensor &o) {
                                cpu::reluGrad(in[0], in[1], o);
                              });
      Tensor dout = devEmpty(d, shape);
      ASSERT_EQ(cuda::reluGrad(dx0, ddy, dout, nullptr), cudaSuccess);
      expectMatches(host(dout), want, 0);
      for (auto approx :
           {cuda::GeluApproximate::None, cuda::GeluApproximate::Tanh}) {
        auto cpuApprox = approx == cuda::GeluApproximate::None
                             ? cpu::GeluApproximate::None
                             : cpu::GeluApproximate::Tanh;
        Tensor want2 = reference({&x, &dy}, d, shape,
                                 [&](std::vector<Tensor> &in, Tensor &o) {
                                   cpu::geluGrad(in[0], in[1], cpuApprox, o);
                                 });
        ASSERT_EQ(cuda::geluGrad(dx0, ddy, approx, dout, nullptr), cudaSuccess);
        expectMatches(host(dout), want2, 1e-5, 1.0);
        // In place (dx = dy) on a fresh copy.
        Tensor ddy2 = dev(dy);
        ASSERT_EQ(cuda::geluGrad(dx0, ddy2, approx, ddy2, nullptr),
                  cudaSuccess);
        expectMatches(host(ddy2), want2, 1e-5, 1.0);
      }
      Tensor want3 = reference({&x, &dy}, d, shape,
                               [](std::vector<Tensor> &in, Tensor &o) {
                                 cpu::siluGrad(in[0], in[1], o);
                               });
      ASSERT_EQ(cuda::siluGrad(dx0, ddy, dout, nullptr), cudaSuccess);
      expectMatches(host(dout), want3, 1e-5, 1.0);
      Tensor ddy3 = dev(dy);
      ASSERT_EQ(cuda::siluGrad(dx0, ddy3, ddy3, nullptr), cudaSuccess);
      expectMatches(host(ddy3), want3, 1e-5, 1.0);
    }
}

// sigmoid, silu and silu_grad at the extremes, bit for bit with the CPU:
// no NaN from exp(-x) overflowing, the limits at +/-inf, NaN propagated.
TEST_F(ElementwiseKernelsTest, SigmoidSiluExtremesMatchCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::fromVector<float>(
      {11}, {-inf, -1e4f, -100.0f, -88.5f, -20.0f, 0.0f, 20.0f, 100.0f, 1e4f,
             inf, std::numeric_limits<float>::quiet_NaN()});
  Tensor dy = Tensor::fromVector<float>({11}, std::vector<float>(11, 0.5f));
  Tensor dout = devEmpty(DType::F32, {11});
  for (cuda::UnaryOp op : {cuda::UnaryOp::Sigmoid, cuda::UnaryOp::Silu}) {
    Tensor want = Tensor::empty(DType::F32, {11});
    if (op == cuda::UnaryOp::Sigmoid)
      cpu::sigmoid(x, want);
    else
      cpu::silu(x, want);
    ASSERT_EQ(cuda::unary(op, dev(x), dout, nullptr), cudaSuccess);
    Tensor got = host(dout);
    for (int i = 0; i < 11; ++i) {
      float g = got.data<float>()[i], w = want.data<float>()[i];
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << i;
        continue;
      }
      EXPECT_FALSE(std::isnan(g)) << i;
      // exp differs from libm by an ulp or two away from the extremes.
      EXPECT_TRUE(g == w || std::fabs(g - w) <= 1e-6f * std::fabs(w))
          << i << ": " << g << " vs " << w;
      EXPECT_EQ(std::signbit(g), std::signbit(w)) << i;
    }
  }
  Tensor want = Tensor::empty(DType::F32, {11});
  cpu::siluGrad(x, dy, want);
  ASSERT_EQ(cuda::siluGrad(dev(x), dev(dy), dout, nullptr), cudaSuccess);
  Tensor got = host(dout);
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(got.data<float>()[i] == want.data<float>()[i] ||
                std::fabs(got.data<float>()[i] - want.data<float>()[i]) <=
                    1e-6f * std::fabs(want.data<float>()[i]))
        << i << ": " << got.data<float>()[i] << " vs " << want.data<float>()[i];
  EXPECT_TRUE(std::isnan(got.data<float>()[10]));
}

TEST_F(ElementwiseKernelsTest, ConvertMatchesCpuForEveryPair) {
  // Values exercising truncation, rounding ties, zero and large magnitudes.
  // (Nothing beyond f16's range: f16 infinity -> i64 is undefined on the
  // CPU.)
  std::vector<float> values = {
      0.0f, -0.0f, 1.0f,     -1.0f,       2.5f,  -2.5f,    0.7f,   -0.7f,
      6e4f, -3e4f, 65519.0f, 1.00390625f, 3e-8f, 123.456f, -9.99f, 0.5f};
  Tensor base = randomF32({1000}, 70, -300, 300);
  for (size_t i = 0; i < values.size(); ++i)
    base.data<float>()[i] = values[i];
  for (DType from : kAllTypes)
    for (DType to : kAllTypes)
      for (const auto &shape :
           std::vector<std::vector<int64_t>>{{}, {0}, {1000}}) {
        SCOPED_TRACE(std::string(dtypeName(from)) + " -> " + dtypeName(to) +
                     " " + shapeToString(shape));
        Tensor f = Tensor::empty(DType::F32, shape);
        std::memcpy(f.raw(), base.raw(), f.bytes());
        Tensor in = convertTo(f, from);
        Tensor want = Tensor::empty(to, shape);
        cpu::convert(in, want);
        Tensor dout = devEmpty(to, shape);
        ASSERT_EQ(cuda::convert(dev(in), dout, nullptr), cudaSuccess);
        expectEqualBytes(host(dout), want);
      }
}

TEST_F(ElementwiseKernelsTest, BiasActivationMatchesCpu) {
  struct Act {
    cuda::BiasActivation act;
    int cpuKind; // 0 none, 1 relu, 2 gelu, 3 gelu tanh
  };
  std::vector<Act> acts = {{cuda::BiasActivation::None, 0},
                           {cuda::BiasActivation::Relu, 1},
                           {cuda::BiasActivation::Gelu, 2},
                           {cuda::BiasActivation::GeluTanh, 3}};
  std::vector<std::vector<int64_t>> shapes = {
      {5}, {0, 7}, {4, 0}, {3, 7}, {2, 5, 96}, {50000, 3}, {64, 1000}};
  unsigned seed = 80;
  for (const Act &act : acts)
    for (DType d : kFloatTypes)
      for (const auto &shape : shapes) {
        SCOPED_TRACE(std::string(dtypeName(d)) + " " + shapeToString(shape) +
                     " act " + std::to_string(act.cpuKind));
        int64_t n = shape.back();
        Tensor x = randomFloat(d, shape, seed++, -4, 4);
        Tensor bias = randomFloat(d, {n}, seed++);
        Tensor dy = randomFloat(d, shape, seed++);
        // Reference: pre = x + broadcast(bias) in f32, then the CPU ops.
        Tensor xw = widen(x), bw = widen(bias), dyw = widen(dy);
        Tensor pre = Tensor::empty(DType::F32, shape);
        Tensor bb = Tensor::empty(DType::F32, shape);
        cpu::broadcast(bw, bb);
        cpu::add(xw, bb, pre);
        Tensor y = Tensor::empty(DType::F32, shape);
        Tensor g = Tensor::empty(DType::F32, shape);
        switch (act.cpuKind) {
        case 0:
          y = pre.clone();
          g = dyw.clone();
          break;
        case 1:
          cpu::relu(pre, y);
          cpu::reluGrad(pre, dyw, g);
          break;
        default: {
          auto ap = act.cpuKind == 2 ? cpu::GeluApproximate::None
                                     : cpu::GeluApproximate::Tanh;
          cpu::gelu(pre, ap, y);
          cpu::geluGrad(pre, dyw, ap, g);
        }
        }
        Tensor wantY = convertTo(y, d), wantDx = convertTo(g, d);
        // dbias = column sums of dx as stored.
        std::vector<int64_t> lead(shape.size() - 1);
        std::iota(lead.begin(), lead.end(), 0);
        Tensor db = Tensor::empty(DType::F32, {n});
        cpu::reduceSum(widen(wantDx), lead, false, db);
        Tensor wantDb = convertTo(db, d);

        Tensor dx_ = dev(x), dbias = dev(bias), ddy = dev(dy);
        Tensor dout = devEmpty(d, shape);
        ASSERT_EQ(cuda::biasActivation(dx_, dbias, act.act, dout, nullptr),
                  cudaSuccess);
        expectMatches(host(dout), wantY, act.cpuKind >= 2 ? 1e-5 : 1e-6,
                      act.cpuKind >= 2 ? 1.0 : 1e-3);

        int64_t sb = cuda::biasActivationGradScratchBytes(d, shape);
        ASSERT_GE(sb, 0);
        Tensor s = scratch(sb);
        Tensor gdx = devEmpty(d, shape), gdb = devEmpty(d, {n});
        ASSERT_EQ(cuda::biasActivationGrad(dx_, dbias, ddy, act.act, gdx, gdb,
                                           s.raw(), sb, nullptr),
                  cudaSuccess);
        expectMatches(host(gdx), wantDx, act.cpuKind >= 2 ? 1e-5 : 1e-6,
                      act.cpuKind >= 2 ? 1.0 : 1e-3);
        // The column sums see the device's dx, within tolerance of the
        // CPU's; f32 sums of 1e-5-close terms stay close in relative terms
        // unless they cancel, so compare with an absolute floor.
        Tensor gotDb = host(gdb);
        EXPECT_LE(maxRelativeError(gotDb, wantDb, 1.0),
                  d == DType::F32 ? 1e-4 : 2e-2);
        // In place: out = x.
        ASSERT_EQ(cuda::biasActivation(dx_, dbias, act.act, dx_, nullptr),
                  cudaSuccess);
        expectMatches(host(dx_), wantY, act.cpuKind >= 2 ? 1e-5 : 1e-6,
                      act.cpuKind >= 2 ? 1.0 : 1e-3);
      }
}

TEST_F(ElementwiseKernelsTest, BroadcastMatchesCpu) {
  struct Case {
    std::vector<int64_t> in, out;
  };
  std::vector<Case> cases = {{{}, {}},
                             {{}, {2, 3}},
                             {{3}, {4, 3}},
                             {{3, 1}, {2, 3, 4}},
                             {{1, 4}, {3, 4}},
                             {{2, 1, 3}, {2, 5, 3}},
                             {{5, 1}, {0, 5, 2}},
                             {{1}, {1 << 20}},
                             {{1, 77}, {1000, 77}}};
  for (DType d : kAllTypes)
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(dtypeName(d)) + " " + shapeToString(c.in) +
                   " -> " + shapeToString(c.out));
      Tensor in = randomAny(d, c.in, 90);
      Tensor want = Tensor::empty(d, c.out);
      cpu::broadcast(in, want);
      Tensor dout = devEmpty(d, c.out);
      ASSERT_EQ(cuda::broadcast(dev(in), dout, nullptr), cudaSuccess);
      expectEqualBytes(host(dout), want);
    }
}

TEST_F(ElementwiseKernelsTest, TransposeMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  std::vector<Case> cases = {
      {{}, {}},
      {{7}, {0}},
      {{3, 4}, {1, 0}},
      {{67, 129}, {1, 0}},
      {{1000, 1000}, {1, 0}},
      {{2, 33, 65}, {0, 2, 1}},
      {{2, 3, 4, 5}, {0, 3, 1, 2}},
      {{2, 3, 4, 5}, {3, 2, 1, 0}},
      {{2, 3, 4, 5}, {1, 0, 2, 3}},
      {{2, 3, 4, 5}, {2, 0, 1, 3}},
      {{4, 1, 8, 40}, {3, 1, 0, 2}},
      {{0, 3, 4}, {2, 1, 0}},
      {{3, 2, 2, 3, 2, 2, 3}, {6, 5, 4, 3, 2, 1, 0}},
      {{8, 128, 12, 64}, {0, 2, 1, 3}}}; // attention heads split
  for (DType d : kAllTypes)
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(dtypeName(d)) + " " + shapeToString(c.shape) +
                   " perm " + shapeToString(c.perm));
      Tensor in = randomAny(d, c.shape, 100);
      std::vector<int64_t> outShape;
      for (int64_t p : c.perm)
        outShape.push_back(c.shape[p]);
      Tensor want = Tensor::empty(d, outShape);
      cpu::transpose(in, c.perm, want);
      Tensor dout = devEmpty(d, outShape);
      ASSERT_EQ(cuda::transpose(dev(in), c.perm, dout, nullptr), cudaSuccess);
      expectEqualBytes(host(dout), want);
    }
}

TEST_F(ElementwiseKernelsTest, SliceMatchesCpu) {
  struct Case {
    std::vector<int64_t> shape, starts, limits, strides;
  };
  std::vector<Case> cases = {
      {{}, {}, {}, {}},
      {{10}, {2}, {9}, {3}},
      {{5, 6, 7}, {1, 0, 2}, {5, 6, 7}, {2, 1, 3}},
      {{5, 6, 7}, {0, 0, 0}, {5, 6, 7}, {1, 1, 1}},
      {{5, 6, 7}, {2, 3, 3}, {2, 6, 7}, {1, 1, 1}}, // empty
      {{64, 3, 512}, {0, 1, 0}, {64, 2, 512}, {1, 1, 1}}};
  for (DType d : kAllTypes)
    for (const Case &c : cases) {
      Tensor in = randomAny(d, c.shape, 110);
      std::vector<int64_t> outShape;
      for (size_t k = 0; k < c.shape.size(); ++k)
        outShape.push_back((c.limits[k] - c.starts[k] + c.strides[k] - 1) /
                           c.strides[k]);
      Tensor want = Tensor::empty(d, outShape);
      cpu::slice(in, c.starts, c.limits, c.strides, want);
      Tensor dout = devEmpty(d, outShape);
      ASSERT_EQ(
          cuda::slice(dev(in), c.starts, c.limits, c.strides, dout, nullptr),
          cudaSuccess);
      expectEqualBytes(host(dout), want);
    }
}

TEST_F(ElementwiseKernelsTest, ConcatMatchesCpu) {
  struct Case {
    std::vector<std::vector<int64_t>> shapes;
    int64_t axis;
  };
  std::vector<Case> cases = {
      {{{2, 3}, {4, 3}}, 0},
      {{{2, 3}, {2, 5}, {2, 0}, {2, 1}}, 1},
      {{{3, 1, 5}, {3, 7, 5}, {3, 2, 5}}, 1},
      {{{2, 3, 4}, {2, 3, 4}}, 2},
      {{{0, 3}, {0, 3}}, 0},
      {{{128, 64}, {128, 64}, {128, 128}}, 1}, // 16-byte rows for f32
      {{{5}}, 0}};
  for (DType d : kAllTypes)
    for (const Case &c : cases) {
      std::vector<Tensor> ins, dins;
      std::vector<const Tensor *> pins, pdins;
      std::vector<int64_t> outShape = c.shapes[0];
      outShape[c.axis] = 0;
      unsigned seed = 120;
      for (const auto &s : c.shapes) {
        ins.push_back(randomAny(d, s, seed++));
        outShape[c.axis] += s[c.axis];
      }
      for (const Tensor &t : ins) {
        dins.push_back(dev(t));
        pins.push_back(&t);
      }
      for (const Tensor &t : dins)
        pdins.push_back(&t);
      Tensor want = Tensor::empty(d, outShape);
      cpu::concat(pins, c.axis, want);
      Tensor dout = devEmpty(d, outShape);
      ASSERT_EQ(cuda::concat(pdins, c.axis, dout, nullptr), cudaSuccess);
      expectEqualBytes(host(dout), want);
    }
}

TEST_F(ElementwiseKernelsTest, ReductionsMatchCpu) {
  struct Case {
    std::vector<int64_t> shape, axes;
  };
  std::vector<Case> cases = {{{}, {}},
                             {{7}, {}},
                             {{7}, {0}},
                             {{3, 5, 7}, {1}},
                             {{3, 5, 7}, {0}},
                             {{3, 5, 7}, {2}},
                             {{3, 5, 7}, {0, 2}},
                             {{3, 5, 7}, {0, 1, 2}},
                             {{2, 3, 4, 5}, {1, 3}},
                             {{2, 1, 4, 5}, {1}},
                             {{4, 0, 3}, {1}},         // empty reduction
                             {{0, 3}, {1}},            // empty output
                             {{3, 100000}, {1}},       // long rows: split
                             {{100000, 3}, {0}},       // long columns: split
                             {{1 << 20}, {0}},         // full reduction
                             {{64, 4096}, {0}},        // dbias-like
                             {{16, 300, 40}, {0, 2}}}; // transposed, then rows
  unsigned seed = 130;
  for (int kind = 0; kind < 3; ++kind)
    for (DType d : kFloatTypes)
      for (const Case &c : cases)
        for (bool keep : {false, true}) {
          SCOPED_TRACE(std::string(dtypeName(d)) + " " +
                       shapeToString(c.shape) + " axes " +
                       shapeToString(c.axes) + " kind " + std::to_string(kind) +
                       (keep ? " keep" : ""));
          Tensor in = randomFloat(d, c.shape, seed++);
          if (kind == 2 && in.numel() > 10 && d == DType::F32)
            in.data<float>()[5] = NAN;
          std::vector<int64_t> outShape;
          for (int64_t k = 0; k < (int64_t)c.shape.size(); ++k) {
            bool r = std::binary_search(c.axes.begin(), c.axes.end(), k);
            if (!r)
              outShape.push_back(c.shape[k]);
            else if (keep)
              outShape.push_back(1);
          }
          Tensor want = reference({&in}, d, outShape,
                                  [&](std::vector<Tensor> &ins, Tensor &o) {
                                    if (kind == 0)
                                      cpu::reduceSum(ins[0], c.axes, keep, o);
                                    else if (kind == 1)
                                      cpu::reduceMean(ins[0], c.axes, keep, o);
                                    else
                                      cpu::reduceMax(ins[0], c.axes, keep, o);
                                  });
          int64_t sb = cuda::reduceScratchBytes(d, c.shape, c.axes);
          ASSERT_GE(sb, 0);
          Tensor s = scratch(sb);
          Tensor din = dev(in), dout = devEmpty(d, outShape);
          cudaError_t err = kind == 0 ? cuda::reduceSum(din, c.axes, keep, dout,
                                                        s.raw(), sb, nullptr)
                            : kind == 1
                                ? cuda::reduceMean(din, c.axes, keep, dout,
                                                   s.raw(), sb, nullptr)
                                : cuda::reduceMax(din, c.axes, keep, dout,
                                                  s.raw(), sb, nullptr);
          ASSERT_EQ(err, cudaSuccess);
          Tensor got = host(dout);
          // f64 sums in another order than the CPU's still round to the
          // same f32 but for rare ties: 1e-6; max is exact.
          expectMatches(got, want, kind == 2 ? 0 : 1e-6);
          // Deterministic: a second run gives the same bytes.
          Tensor dout2 = devEmpty(d, outShape);
          err = kind == 0   ? cuda::reduceSum(din, c.axes, keep, dout2, s.raw(),
                                              sb, nullptr)
                : kind == 1 ? cuda::reduceMean(din, c.axes, keep, dout2,
                                               s.raw(), sb, nullptr)
                            : cuda::reduceMax(din, c.axes, keep, dout2, s.raw(),
                                              sb, nullptr);
          ASSERT_EQ(err, cudaSuccess);
          expectEqualBytes(host(dout2), got);
        }
}

} // namespace

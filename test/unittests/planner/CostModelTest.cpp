//===- CostModelTest.cpp - α-β collective costs, placement, bubble --------===//

#include "common/cluster/CostModel.h"

#include <gtest/gtest.h>

using namespace tessera::planner;

namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

TEST(CostModel, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::AllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::AllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::ReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::AllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::SendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::AllReduce, 1), 0.0);
  EXPECT_EQ(ringSteps(Collective::AllReduce, 8), 14);
  EXPECT_EQ(ringSteps(Collective::AllGather, 8), 7);
  EXPECT_EQ(ringSteps(Collective::ReduceScatter, 8), 7);
  EXPECT_EQ(ringSteps(Collective::AllToAll, 8), 7);
  EXPECT_EQ(ringSteps(Collective::SendRecv, 8), 1);
  EXPECT_EQ(collectiveName(Collective::ReduceScatter), "reduce_scatter");
}

TEST(CostModel, CollectiveSecondsHandComputed) {
  // 1 GiB all-reduce over 8 ranks at 150 GB/s, α = 5 µs:
  //   14 · 5e-6 + 1.75 · 1073741824 / 150e9
  //   = 7e-5 + 1879048192 / 150e9 = 7e-5 + 0.01252698795 s.
  Cluster::Link link{150e9, 5e-6};
  EXPECT_NEAR(collectiveSeconds(Collective::AllReduce, GiB, 8, link),
              0.01259698795, 1e-10);
  // Pure bandwidth (α = 0): all-gather of 1 GiB over 8 ranks is half the
  // all-reduce, 0.875 · 2^30 / 150e9 = 0.006263493973 s.
  Cluster::Link noLatency{150e9, 0};
  EXPECT_NEAR(collectiveSeconds(Collective::AllGather, GiB, 8, noLatency),
              0.006263493973, 1e-11);
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::ReduceScatter, GiB, 8, noLatency),
      collectiveSeconds(Collective::AllGather, GiB, 8, noLatency));
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::AllReduce, GiB, 8, noLatency),
      2 * collectiveSeconds(Collective::AllGather, GiB, 8, noLatency));
  // Send/recv of 1 MB at 25 GB/s, α = 8 µs: 8e-6 + 1e6 / 25e9 = 4.8e-5 s.
  EXPECT_NEAR(collectiveSeconds(Collective::SendRecv, 1e6, 2, {25e9, 8e-6}),
              4.8e-5, 1e-15);
  // All-to-all of 64 MiB over 4 ranks at 50 GB/s, α = 8 µs:
  //   3 · 8e-6 + 0.75 · 67108864 / 50e9 = 2.4e-5 + 1.00663296e-3 s.
  EXPECT_NEAR(collectiveSeconds(Collective::AllToAll, 64.0 * 1024 * 1024, 4,
                                {50e9, 8e-6}),
              1.03063296e-3, 1e-14);
  // One rank: nothing to communicate.
  EXPECT_EQ(collectiveSeconds(Collective::AllReduce, GiB, 1, link), 0.0);
  // Tiny messages are latency bound.
  EXPECT_NEAR(collectiveSeconds(Collective::AllReduce, 8, 8, link), 14 * 5e-6,
              1e-9);
}

TEST(CostModel, NonDecreasingTimesLowerADisturbedSmallSize) {
  // 256 B disturbed to 6.6 ms: it is lowered to the next size's time, and
  // the larger sizes keep theirs (a least-squares fit would have priced
  // the first seven at about 1 ms).
  std::vector<double> t = {6.6e-3, 30e-6,  40e-6,  60e-6,
                           90e-6,  150e-6, 400e-6, 4e-3};
  std::vector<double> out = nonDecreasingTimes(t);
  std::vector<double> expected = t;
  expected[0] = 30e-6;
  EXPECT_EQ(out, expected);
  // A dip in the middle lowers every smaller size above it.
  EXPECT_EQ(nonDecreasingTimes({10, 20, 50, 15, 30}),
            (std::vector<double>{10, 15, 15, 15, 30}));
  // Already non-decreasing, one value, none: unchanged.
  EXPECT_EQ(nonDecreasingTimes({1, 1, 2}), (std::vector<double>{1, 1, 2}));
  EXPECT_EQ(nonDecreasingTimes({5}), (std::vector<double>{5}));
  EXPECT_TRUE(nonDecreasingTimes({}).empty());
}

TEST(CostModel, CollectiveSecondsInterpolatesMeasuredTimes) {
  // Times measured on groups of 2 at 1, 4 and 16 KiB; the α-β line
  // (1 GB/s, 1 µs) would say 2 µs + S / 1e9.
  Cluster::Link link{
      1e9, 1e-6, {{1024, 30e-6}, {4096, 40e-6}, {16384, 100e-6}}, 2};
  auto t = [&](double bytes, int64_t n = 2) {
    return collectiveSeconds(Collective::AllReduce, bytes, n, link);
  };
  // At a measured size: the measurement.
  EXPECT_DOUBLE_EQ(t(4096), 40e-6);
  // Between two: linear in S (a third of the way from 4 to 16 KiB).
  EXPECT_DOUBLE_EQ(t(8192), 40e-6 + (8192.0 - 4096) / 12288 * 60e-6);
  // Below the first size: the first time (latency bound).
  EXPECT_DOUBLE_EQ(t(4), 30e-6);
  // Beyond the last: the last time plus the α-β bandwidth term of the
  // excess, busBandwidthFactor(all_reduce, 2) = 1.
  EXPECT_DOUBLE_EQ(t(16384 + 1e6), 100e-6 + 1e6 / 1e9);
  // Never decreasing over the table and past it.
  double previous = 0;
  for (double bytes = 1; bytes < 1e7; bytes *= 1.5) {
    EXPECT_GE(t(bytes), previous) << bytes;
    previous = t(bytes);
  }
  // Groups of another size: the α-β line, not the table.
  EXPECT_DOUBLE_EQ(t(4096, 4), 6 * 1e-6 + 1.5 * 4096 / 1e9);
  // One rank: still nothing to communicate.
  EXPECT_EQ(t(4096, 1), 0.0);
}

TEST(CostModel, AxisPlacementOnDgxH100) {
  Cluster c = *clusterPreset("dgx-h100:16"); // 16 nodes × 8 GPUs
  // dp = 16, tp = 8 (tp fastest): tp groups are the 8 GPUs of one node.
  std::vector<int64_t> dpTp = {16, 8};
  EXPECT_TRUE(axisWithinNode(c, dpTp, 1));
  EXPECT_FALSE(axisWithinNode(c, dpTp, 0));
  EXPECT_EQ(&linkFor(c, dpTp, 1), &c.intraNode);
  EXPECT_EQ(&linkFor(c, dpTp, 0), &c.interNode);
  // tp = 16 spans two nodes.
  std::vector<int64_t> wideTp = {8, 16};
  EXPECT_FALSE(axisWithinNode(c, wideTp, 1));
  EXPECT_FALSE(axisWithinNode(c, wideTp, 0));
  // dp = 4, pp = 4, tp = 8: only tp inside a node.
  std::vector<int64_t> dpPpTp = {4, 4, 8};
  EXPECT_FALSE(axisWithinNode(c, dpPpTp, 0));
  EXPECT_FALSE(axisWithinNode(c, dpPpTp, 1));
  EXPECT_TRUE(axisWithinNode(c, dpPpTp, 2));
  // dp = 32, pp = 2, tp = 2: tp (stride 1) and pp (stride 2, span 4) both
  // stay in a node.
  std::vector<int64_t> small = {32, 2, 2};
  EXPECT_TRUE(axisWithinNode(c, small, 2));
  EXPECT_TRUE(axisWithinNode(c, small, 1));
  EXPECT_FALSE(axisWithinNode(c, small, 0));
  // Size-1 axes never leave a node.
  std::vector<int64_t> withOne = {128, 1};
  EXPECT_TRUE(axisWithinNode(c, withOne, 1));
  EXPECT_FALSE(axisWithinNode(c, withOne, 0));

  // The cost on an axis uses the axis's link.
  double onTp = collectiveSecondsOnAxis(Collective::AllReduce, GiB, c, dpTp, 1);
  EXPECT_DOUBLE_EQ(
      onTp, collectiveSeconds(Collective::AllReduce, GiB, 8, c.intraNode));
  double onDp = collectiveSecondsOnAxis(Collective::AllReduce, GiB, c, dpTp, 0);
  EXPECT_DOUBLE_EQ(
      onDp, collectiveSeconds(Collective::AllReduce, GiB, 16, c.interNode));
  EXPECT_GT(onDp, onTp);
}

TEST(CostModel, AxisPlacementUnalignedNodes) {
  // 6 devices per node, grid (3, 4): tp group {4..7} straddles nodes 0 and 1.
  Cluster c;
  c.nodes = 2;
  c.devicesPerNode = 6;
  EXPECT_FALSE(axisWithinNode(c, {3, 4}, 1));
  // Grid (4, 3): tp groups {0,1,2}, {3,4,5}, {6,7,8}, {9,10,11} all fit.
  EXPECT_TRUE(axisWithinNode(c, {4, 3}, 1));
  // Grid (2, 2, 3): the middle axis spans 6 ranks from a multiple of 6.
  EXPECT_TRUE(axisWithinNode(c, {2, 2, 3}, 1));
  EXPECT_FALSE(axisWithinNode(c, {2, 2, 3}, 0));
}

/// Every group checked one by one: the definition axisWithinNode's closed
/// form must agree with.
static bool withinNodeByGroups(int64_t perNode,
                               const std::vector<int64_t> &shape, size_t axis) {
  int64_t stride = 1, total = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    total *= shape[i];
    if (i > axis)
      stride *= shape[i];
  }
  for (int64_t r = 0; r < total; ++r) {
    if ((r / stride) % shape[axis] != 0)
      continue;
    for (int64_t k = 1; k < shape[axis]; ++k)
      if ((r + k * stride) / perNode != r / perNode)
        return false;
  }
  return true;
}

TEST(CostModel, AxisPlacementClosedFormMatchesEveryGroup) {
  int64_t checked = 0;
  for (int64_t perNode : {1, 2, 3, 4, 6, 8})
    for (int64_t a : {1, 2, 3, 4, 8})
      for (int64_t b : {1, 2, 3, 4})
        for (int64_t c : {1, 2, 4, 6}) {
          std::vector<int64_t> shape = {a, b, c};
          Cluster cl;
          cl.devicesPerNode = perNode;
          cl.nodes = (a * b * c + perNode - 1) / perNode;
          for (size_t axis = 0; axis < 3; ++axis, ++checked)
            EXPECT_EQ(axisWithinNode(cl, shape, axis),
                      withinNodeByGroups(perNode, shape, axis))
                << "perNode " << perNode << " shape " << a << "x" << b << "x"
                << c << " axis " << axis;
        }
  EXPECT_EQ(checked, 6 * 5 * 4 * 4 * 3);
}

TEST(CostModel, AxisPlacementNames) {
  AxisPlacement grid{{"dp", "pp", "tp"}, {4, 2, 8}};
  EXPECT_EQ(grid.axisIndex("tp"), 2);
  EXPECT_EQ(grid.axisIndex("dp"), 0);
  EXPECT_EQ(grid.axisIndex("sp"), -1);
  EXPECT_EQ(grid.numRanks(), 64);
}

TEST(CostModel, PipelineBubble) {
  EXPECT_DOUBLE_EQ(pipelineBubbleFraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(pipelineBubbleFraction(4, 8, 2), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(pipelineBubbleFraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(pipelineBubbleFraction(8, 1), 7.0 / 8.0);
}

} // namespace

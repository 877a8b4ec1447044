//===- PlacementTest.cpp - node mapping and the start-up check ------------===//

#include "common/cluster/Placement.h"
#include "common/cluster/CostModel.h"

#include <gtest/gtest.h>

using namespace tessera::planner;

namespace {

TEST(Placement, RankGroupsFollowTheRankOrder) {
  // dp slowest (stride 2), tp fastest (stride 1).
  RankOrderAxes dpTp{{"dp", "tp"}, {2, 2}};
  EXPECT_EQ(dpTp.numRanks(), 4);
  EXPECT_EQ(dpTp.stride(0), 2);
  EXPECT_EQ(dpTp.stride(1), 1);
  EXPECT_EQ(dpTp.groups(1),
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(dpTp.groups(0),
            (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
  // pp, dp, tp = 2 x 3 x 2: dp groups stride 2 inside each pp half.
  RankOrderAxes three{{"pp", "dp", "tp"}, {2, 3, 2}};
  EXPECT_EQ(three.groups(1),
            (std::vector<std::vector<int64_t>>{
                {0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(three.groups(0).size(), 6u);
  EXPECT_EQ(three.groups(0)[5], (std::vector<int64_t>{5, 11}));
}

TEST(Placement, AxisWithinNodeIsTheClusterFormWithItsDevicesPerNode) {
  // The closed form is checked group by group in CostModelTest; the
  // ranks-per-node form is the same function.
  Cluster c;
  c.devicesPerNode = 6;
  c.nodes = 2;
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{3, 4}, {4, 3}, {2, 2, 3}, {12, 1}})
    for (size_t axis = 0; axis < shape.size(); ++axis)
      EXPECT_EQ(axisWithinNode(6, shape, axis), axisWithinNode(c, shape, axis));
  // Every group of the axis in one node, group by group.
  for (int64_t perNode : {1, 2, 3, 4, 8})
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{2, 2}, {4, 2}, {2, 4}, {2, 3, 2}}) {
      RankOrderAxes axes{{"a", "b", "c"}, shape};
      axes.names.resize(shape.size());
      for (size_t i = 0; i < shape.size(); ++i) {
        bool byGroups = true;
        for (const std::vector<int64_t> &g : axes.groups(i))
          for (int64_t r : g)
            byGroups &= r / perNode == g[0] / perNode;
        EXPECT_EQ(axisWithinNode(perNode, shape, i), byGroups)
            << perNode << " axis " << i;
      }
    }
}

TEST(Placement, FormatRankRanges) {
  EXPECT_EQ(formatRankRanges({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(formatRankRanges({0, 2}), "0,2");
  EXPECT_EQ(formatRankRanges({4, 0, 1}), "0-1,4");
  EXPECT_EQ(formatRankRanges({7}), "7");
  EXPECT_EQ(formatRankRanges({}), "");
}

TEST(Placement, DescribeNodeMapping) {
  RankOrderAxes dpTp{{"dp", "tp"}, {2, 2}};
  EXPECT_EQ(describeNodeMapping(dpTp, 2),
            "2 nodes x 2 ranks (--cluster): node 0 = ranks 0-1, node 1 = "
            "ranks 2-3; tp inside a node, dp across nodes");
  EXPECT_EQ(describeNodeMapping(dpTp, 1),
            "4 nodes x 1 rank (--cluster): node 0 = rank 0, node 1 = rank 1, "
            "node 2 = rank 2, node 3 = rank 3; dp, tp across nodes");
  EXPECT_EQ(describeNodeMapping(dpTp, 8),
            "1 node x 8 ranks (--cluster): node 0 = ranks 0-3; dp, tp inside "
            "a node");
  // tp slowest: its groups span nodes; only the first three and the last
  // of many nodes are listed.
  RankOrderAxes tpDp{{"tp", "dp"}, {2, 16}};
  EXPECT_EQ(describeNodeMapping(tpDp, 4),
            "8 nodes x 4 ranks (--cluster): node 0 = ranks 0-3, node 1 = "
            "ranks 4-7, node 2 = ranks 8-11, ..., node 7 = ranks 28-31; tp, "
            "dp across nodes");
  // Size-1 axes are left out.
  RankOrderAxes withOne{{"pp", "dp", "tp"}, {1, 2, 2}};
  EXPECT_EQ(describeNodeMapping(withOne, 2),
            "2 nodes x 2 ranks (--cluster): node 0 = ranks 0-1, node 1 = "
            "ranks 2-3; tp inside a node, dp across nodes");
  EXPECT_EQ(describeNodeMapping(dpTp, 0).rfind(
                "no node mapping promised (compiled without --cluster)", 0),
            0u);

  llvm::json::Value json = nodeMappingToJSON(dpTp, 2);
  std::string text;
  llvm::raw_string_ostream(text) << json;
  EXPECT_EQ(text,
            R"({"across_nodes":["dp"],"inside_node":["tp"],)"
            R"("node_ranks":[[0,1],[2,3]],"nodes":2,"ranks_per_node":2})");
  EXPECT_EQ(llvm::json::Value(nodeMappingToJSON(dpTp, 0)),
            llvm::json::Value(llvm::json::Object{{"ranks_per_node", 0}}));
}

TEST(Placement, WarningWhenANodeLocalAxisSpansHosts) {
  RankOrderAxes dpTp{{"dp", "tp"}, {2, 2}};
  // Ranks placed round-robin over two hosts (mpirun --map-by node): every
  // tp group spans both hosts; each host holds ranks of two nodes.
  std::vector<std::string> roundRobin = {"h1", "h2", "h1", "h2"};
  std::vector<std::string> w = placementWarnings(dpTp, 2, roundRobin, "tool");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "tool: warning: the plan keeps tp inside a node (--cluster: "
                  "2 ranks per node), but tp group of ranks 0,1 spans hosts h1 "
                  "(rank 0), h2 (rank 1); tp's collectives cross the network");
  EXPECT_EQ(w[1], "tool: warning: the plan puts ranks 0-1 on one node "
                  "(--cluster: 2 ranks per node), but host h1 holds 2 ranks "
                  "(0,2); the node mapping --explain printed does not hold");
  // Blocks of two per host: as promised, no warning.
  EXPECT_TRUE(
      placementWarnings(dpTp, 2, {"h1", "h1", "h2", "h2"}, "tool").empty());
  // A group with several ranks on one host lists them together.
  RankOrderAxes tp4{{"dp", "tp"}, {1, 4}};
  w = placementWarnings(tp4, 4, {"a", "a", "a", "b"}, "tool");
  ASSERT_GE(w.size(), 1u);
  EXPECT_EQ(w[0], "tool: warning: the plan keeps tp inside a node (--cluster: "
                  "4 ranks per node), but tp group of ranks 0,1,2,3 spans "
                  "hosts a (ranks 0,1,2), b (rank 3); tp's collectives cross "
                  "the network");
  // The first spanning group is named, one warning per axis.
  RankOrderAxes dpTp2{{"dp", "tp"}, {2, 2}};
  w = placementWarnings(dpTp2, 2, {"a", "a", "b", "c"}, "tool");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("tp group of ranks 2,3 spans hosts b (rank 2), c "
                      "(rank 3)"),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[1].find("the plan puts ranks 2-3 on one node (--cluster: 2 "
                      "ranks per node), but host b holds 1 rank (2)"),
            std::string::npos)
      << w[1];
}

TEST(Placement, WarningWhenAHostHoldsOtherRanksThanANode) {
  RankOrderAxes dpTp{{"dp", "tp"}, {2, 2}};
  std::vector<std::string> oneHost(4, "vm");
  // 2 x 2 promised, all four on one host: no axis crosses a host (nothing
  // about tp), but the host holds two nodes' ranks.
  std::vector<std::string> w =
      placementWarnings(dpTp, 2, oneHost, "tessera-run");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "tessera-run: warning: the plan puts ranks 0-1 on one node "
                  "(--cluster: 2 ranks per node), but host vm holds 4 ranks "
                  "(0-3); the node mapping --explain printed does not hold");
  // One rank per node promised.
  w = placementWarnings(dpTp, 1, oneHost, "tessera-run");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "tessera-run: warning: the plan puts rank 0 on one node "
                  "(--cluster: 1 rank per node), but host vm holds 4 ranks "
                  "(0-3); the node mapping --explain printed does not hold");
  // A node larger than the job: one host holding every rank is the promise.
  EXPECT_TRUE(placementWarnings(dpTp, 8, oneHost, "t").empty());
  // A last node that is not full (6 ranks, 4 per node).
  RankOrderAxes six{{"dp", "tp"}, {3, 2}};
  EXPECT_TRUE(
      placementWarnings(six, 4, {"a", "a", "a", "a", "b", "b"}, "t").empty());
  // No promise (compiled without --cluster), or hosts of another job size:
  // nothing to check.
  EXPECT_TRUE(placementWarnings(dpTp, 0, {"a", "b", "a", "b"}, "t").empty());
  EXPECT_TRUE(placementWarnings(dpTp, 2, {"a", "b"}, "t").empty());
}

TEST(Placement, HostLabelsTellApartOneNameOnSeveralNodes) {
  EXPECT_EQ(hostLabels({"h1", "h1", "h2", "h2"}, {0, 0, 1, 1}),
            (std::vector<std::string>{"h1", "h1", "h2", "h2"}));
  // Two MPI nodes that report one host name (network namespaces of one
  // machine): the check must still see two hosts.
  std::vector<std::string> labels =
      hostLabels({"vm", "vm", "vm", "vm", "other"}, {0, 0, 1, 1, 2});
  EXPECT_EQ(labels,
            (std::vector<std::string>{"vm[node 0]", "vm[node 0]", "vm[node 1]",
                                      "vm[node 1]", "other"}));
  EXPECT_EQ(hostSummary(RankOrderAxes{{"dp", "tp"}, {2, 2}},
                        hostLabels({"vm", "vm", "vm", "vm"}, {0, 1, 0, 1})),
            "tp groups across hosts; dp groups inside a host");
}

TEST(Placement, HostSummary) {
  RankOrderAxes dpTp{{"dp", "tp"}, {2, 2}};
  EXPECT_EQ(hostSummary(dpTp, {"h1", "h1", "h2", "h2"}),
            "tp groups inside a host; dp groups across hosts");
  EXPECT_EQ(hostSummary(dpTp, {"h", "h", "h", "h"}),
            "tp groups inside a host; dp groups inside a host");
  EXPECT_EQ(hostSummary(dpTp, {"h1", "h2", "h1", "h2"}),
            "tp groups across hosts; dp groups inside a host");
  // Size-1 axes are left out; one rank: nothing.
  EXPECT_EQ(hostSummary(RankOrderAxes{{"dp", "tp"}, {1, 2}}, {"a", "b"}),
            "tp groups across hosts");
  EXPECT_EQ(hostSummary(RankOrderAxes{{"dp"}, {1}}, {"a"}), "");
}

} // namespace

//===- Placement.h - ranks on nodes: promised and actual --------*- C++ -*-===//
//-*-===//
//
// Where a plan's ranks run (issue 28). A plan compiled with `--cluster`
// records the cluster's devices per node as the grid's "ranks_per_node"
// (compiler/planner/Plan.h, runtime/executor/Plan.h): world rank r runs on
// node r / ranks_per_node, as mpirun and srun place consecutive ranks on a
// node (by slot / block distribution). From that and the rank order
// follows which rank axes are node-local (every group of the axis inside
// one node) and which span nodes: `tessera-partition --explain` prints it
// (describeNodeMapping) and the cost model prices the axes' collectives on
// the intra- or inter-node link accordingly (CostModel.h, linkFor).
//
// tessera-run checks the promise at start-up (always; runtime/trainer):
// every rank's host is gathered to rank 0, which calls placementWarnings.
// The warnings, one line each, exactly (the multi-node tests grep them):
//
//   tessera-run: warning: the plan keeps AXIS inside a node (--cluster: K
//   ranks per node), but AXIS group of ranks R1,R2,... spans hosts H1 (rank
//   R1), H2 (rank R2)[, ...]; AXIS's collectives cross the network
//
//     for each rank axis (size > 1) that the plan made node-local and one of
//     whose groups holds ranks of more than one host: the first such group
//     (lowest ranks). A host holding several ranks of the group is listed
//     once, "H1 (ranks 0,1)".
//
//   tessera-run: warning: the plan puts ranks A-B on one node (--cluster: K
//   ranks per node), but host H holds N ranks (LIST); the node mapping
//   --explain printed does not hold
//
//     once, for the first host (by lowest rank) whose ranks are not exactly
//     one node of the plan's mapping (more ranks, fewer, or others). It is
//     printed for a --cluster plan run on fewer hosts, too (e.g. a plan for
//     2 nodes x 2 ranks started on one host): not noise, since the step
//     time --explain predicted assumed the plan's nodes, and collectives
//     priced as inter-node then run inside a host; a plan compiled without
//     --cluster promises no mapping and is never warned about.
//
// LIST and A-B are rank lists in formatRankRanges's notation ("0-3",
// "0,2"). Hosts are the names the runtime gathered (gethostname).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_CLUSTER_PLACEMENT_H
#define TESSERA_COMMON_CLUSTER_PLACEMENT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::planner {

/// True when every group of ranks along `axis` of `rankShape` (the rank
/// axes' sizes in rank order, slowest first, ranks row-major over them)
/// lies inside one node of `ranksPerNode` consecutive ranks (node k holds
/// ranks [k·ranksPerNode, (k+1)·ranksPerNode)). An axis of size 1 is always
/// inside a node, as is every axis when all ranks fit in one node.
/// Requires axis < rankShape.size() and ranksPerNode >= 1. The closed form
/// (a node boundary must not fall inside a block of stride·size
/// consecutive ranks) is checked against every group in CostModelTest.
bool axisWithinNode(int64_t ranksPerNode, llvm::ArrayRef<int64_t> rankShape,
                    size_t axis);

/// The rank axes of a grid in rank order: names[i] has sizes[i] ranks,
/// axis 0 slowest; world rank r has coordinate (r / stride(i)) % sizes[i]
/// along axis i (the runtime's exec::gridCoords, the manifest's
/// "rank_order").
struct RankOrderAxes {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;

  int64_t numRanks() const;
  /// Product of the sizes of the axes after i (the faster ones).
  int64_t stride(size_t i) const;
  /// The groups of axis i: for each combination of the other coordinates,
  /// the world ranks along axis i, ascending; groups ordered by their first
  /// rank.
  std::vector<std::vector<int64_t>> groups(size_t i) const;
};

/// A rank list, ascending, with runs of two or more consecutive ranks
/// written "a-b": {0, 1, 2, 3} -> "0-3", {0, 2} -> "0,2", {0, 1, 4} ->
/// "0-1,4". Input need not be sorted (it is sorted first).
std::string formatRankRanges(llvm::ArrayRef<int64_t> ranks);

/// The node mapping of `layout` on nodes of `ranksPerNode` (>= 1) ranks:
/// the number of nodes, which ranks each holds, and which axes (size > 1)
/// stay inside a node and which span nodes.
struct NodeMapping {
  int64_t ranksPerNode = 0;
  int64_t nodes = 0;
  /// nodeRanks[k]: {first, last} world rank of node k.
  std::vector<std::pair<int64_t, int64_t>> nodeRanks;
  std::vector<std::string> insideNode, acrossNodes; ///< in rank order
};
NodeMapping nodeMapping(const RankOrderAxes &layout, int64_t ranksPerNode);

/// --explain's text after "placement: ". With ranksPerNode >= 1:
///   "2 nodes x 2 ranks (--cluster): node 0 = ranks 0-1, node 1 = ranks
///   2-3; tp inside a node, dp across nodes"
/// (at most 4 nodes listed: the first three, "...", the last). With
/// ranksPerNode 0 (no --cluster): "no node mapping promised (compiled
/// without --cluster); mpirun and srun put consecutive ranks on one node,
/// so the fastest axes are the likeliest to stay inside one".
std::string describeNodeMapping(const RankOrderAxes &layout,
                                int64_t ranksPerNode);

/// The same as JSON (--explain-json's "placement"): {"ranks_per_node": K,
/// "nodes": N, "node_ranks": [[first, last], ...], "inside_node": [axes],
/// "across_nodes": [axes]}; {"ranks_per_node": 0} without a promise.
llvm::json::Object nodeMappingToJSON(const RankOrderAxes &layout,
                                     int64_t ranksPerNode);

/// The warnings of the start-up check (the file comment gives their exact
/// text), prefixed "TOOL: warning: ". `hosts[r]` is world rank r's host
/// (hosts.size() == layout.numRanks()). No warnings when ranksPerNode is 0
/// (no promise).
std::vector<std::string> placementWarnings(const RankOrderAxes &layout,
                                           int64_t ranksPerNode,
                                           llvm::ArrayRef<std::string> hosts,
                                           llvm::StringRef tool);

/// The host of each rank as the check names it: `hostnames[r]`, or
/// "NAME[node N]" (N = mpiNodes[r]) for every rank whose host name is
/// shared by ranks of another MPI node (hosts that report one name, e.g.
/// network namespaces or containers of one machine, are told apart by
/// MPI's shared-memory groups). Same length as its inputs.
std::vector<std::string> hostLabels(llvm::ArrayRef<std::string> hostnames,
                                    llvm::ArrayRef<int64_t> mpiNodes);

/// --log-placement's summary of the job as it runs, one text per rank axis
/// of size > 1, fastest first, joined by "; ": "tp groups inside a host; dp
/// groups across hosts" ("across hosts": some group of the axis spans
/// hosts). "" when every axis has size 1.
std::string hostSummary(const RankOrderAxes &layout,
                        llvm::ArrayRef<std::string> hosts);

} // namespace tessera::planner

#endif // TESSERA_COMMON_CLUSTER_PLACEMENT_H

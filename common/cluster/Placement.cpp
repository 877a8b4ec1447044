//===- Placement.cpp - ranks on nodes: promised and actual ----------------===//

#include "common/cluster/Placement.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>

using namespace tessera::planner;

bool tessera::planner::axisWithinNode(int64_t ranksPerNode,
                                      llvm::ArrayRef<int64_t> rankShape,
                                      size_t axis) {
  assert(axis < rankShape.size() && "axis out of range");
  assert(ranksPerNode >= 1 && "ranksPerNode must be positive");
  int64_t size = rankShape[axis];
  if (size <= 1)
    return true;
  // Stride of `axis` in the row-major rank order: product of the faster
  // (later) axes.
  int64_t stride = 1;
  for (size_t i = axis + 1; i < rankShape.size(); ++i)
    stride *= rankShape[i];
  int64_t total = stride;
  for (size_t i = 0; i <= axis; ++i)
    total *= rankShape[i];
  // A group is {base + k·stride : 0 <= k < size}; the `stride` groups with
  // the same slower coordinates tile a block of stride·size consecutive
  // ranks. If a node boundary falls strictly inside a block, the group
  // whose elements straddle it crosses nodes; otherwise every group lies
  // in one node. So: all groups stay inside a node iff the ranks fit in
  // one node or the block size divides the node size.
  if (total <= ranksPerNode)
    return true;
  return ranksPerNode % (stride * size) == 0;
}

int64_t RankOrderAxes::numRanks() const {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

int64_t RankOrderAxes::stride(size_t i) const {
  int64_t s = 1;
  for (size_t j = i + 1; j < sizes.size(); ++j)
    s *= sizes[j];
  return s;
}

std::vector<std::vector<int64_t>> RankOrderAxes::groups(size_t i) const {
  std::vector<std::vector<int64_t>> out;
  int64_t st = stride(i), n = numRanks();
  for (int64_t r = 0; r < n; ++r) {
    if ((r / st) % sizes[i] != 0)
      continue; // not the first rank of its group
    std::vector<int64_t> group;
    for (int64_t k = 0; k < sizes[i]; ++k)
      group.push_back(r + k * st);
    out.push_back(std::move(group));
  }
  return out;
}

std::string tessera::planner::formatRankRanges(llvm::ArrayRef<int64_t> ranks) {
  std::vector<int64_t> sorted(ranks.begin(), ranks.end());
  llvm::sort(sorted);
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1)
      ++j;
    out += (out.empty() ? "" : ",") + std::to_string(sorted[i]);
    if (j > i)
      out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

NodeMapping tessera::planner::nodeMapping(const RankOrderAxes &layout,
                                          int64_t ranksPerNode) {
  assert(ranksPerNode >= 1 && "ranksPerNode must be positive");
  NodeMapping m;
  m.ranksPerNode = ranksPerNode;
  int64_t n = layout.numRanks();
  m.nodes = (n + ranksPerNode - 1) / ranksPerNode;
  for (int64_t k = 0; k < m.nodes; ++k)
    m.nodeRanks.push_back(
        {k * ranksPerNode, std::min(n, (k + 1) * ranksPerNode) - 1});
  for (size_t i = 0; i < layout.sizes.size(); ++i) {
    if (layout.sizes[i] <= 1)
      continue;
    (axisWithinNode(ranksPerNode, layout.sizes, i) ? m.insideNode
                                                   : m.acrossNodes)
        .push_back(layout.names[i]);
  }
  return m;
}

static std::string rankSpan(std::pair<int64_t, int64_t> span) {
  return span.first == span.second ? "rank " + std::to_string(span.first)
                                   : "ranks " + std::to_string(span.first) +
                                         "-" + std::to_string(span.second);
}

std::string tessera::planner::describeNodeMapping(const RankOrderAxes &layout,
                                                  int64_t ranksPerNode) {
  if (ranksPerNode <= 0)
    return "no node mapping promised (compiled without --cluster); mpirun "
           "and srun put consecutive ranks on one node, so the fastest axes "
           "are the likeliest to stay inside one";
  NodeMapping m = nodeMapping(layout, ranksPerNode);
  std::string out = llvm::formatv(
      "{0} node{1} x {2} rank{3} (--cluster): ", m.nodes,
      m.nodes == 1 ? "" : "s", ranksPerNode, ranksPerNode == 1 ? "" : "s");
  for (int64_t k = 0; k < m.nodes; ++k) {
    // At most 4 nodes: the first three, "...", the last.
    if (m.nodes > 4 && k == 3) {
      out += ", ...";
      k = m.nodes - 1;
    }
    out += (k ? ", node " : "node ") + std::to_string(k) + " = " +
           rankSpan(m.nodeRanks[k]);
  }
  std::string axes;
  if (!m.insideNode.empty())
    axes += llvm::join(m.insideNode, ", ") + " inside a node";
  if (!m.acrossNodes.empty())
    axes += (axes.empty() ? "" : ", ") + llvm::join(m.acrossNodes, ", ") +
            " across nodes";
  if (!axes.empty())
    out += "; " + axes;
  return out;
}

llvm::json::Object
tessera::planner::nodeMappingToJSON(const RankOrderAxes &layout,
                                    int64_t ranksPerNode) {
  if (ranksPerNode <= 0)
    return llvm::json::Object{{"ranks_per_node", 0}};
  NodeMapping m = nodeMapping(layout, ranksPerNode);
  llvm::json::Array nodes;
  for (auto [first, last] : m.nodeRanks)
    nodes.push_back(llvm::json::Array{first, last});
  return llvm::json::Object{{"ranks_per_node", ranksPerNode},
                            {"nodes", m.nodes},
                            {"node_ranks", std::move(nodes)},
                            {"inside_node", llvm::json::Array(m.insideNode)},
                            {"across_nodes", llvm::json::Array(m.acrossNodes)}};
}

/// The hosts of `ranks` in order of their first rank: "h1 (rank 0), h2
/// (ranks 1,3)".
static std::string hostsOf(llvm::ArrayRef<int64_t> ranks,
                           llvm::ArrayRef<std::string> hosts) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int64_t>> byHost;
  for (int64_t r : ranks) {
    const std::string &h = hosts[r];
    if (!byHost.count(h))
      order.push_back(h);
    byHost[h].push_back(r);
  }
  std::string out;
  for (const std::string &h : order) {
    const std::vector<int64_t> &rs = byHost[h];
    std::string list;
    for (int64_t r : rs)
      list += (list.empty() ? "" : ",") + std::to_string(r);
    out += (out.empty() ? "" : ", ") + h +
           (rs.size() == 1 ? " (rank " : " (ranks ") + list + ")";
  }
  return out;
}

static bool oneHost(llvm::ArrayRef<int64_t> ranks,
                    llvm::ArrayRef<std::string> hosts) {
  return llvm::all_of(ranks,
                      [&](int64_t r) { return hosts[r] == hosts[ranks[0]]; });
}

std::vector<std::string> tessera::planner::placementWarnings(
    const RankOrderAxes &layout, int64_t ranksPerNode,
    llvm::ArrayRef<std::string> hosts, llvm::StringRef tool) {
  std::vector<std::string> out;
  int64_t n = layout.numRanks();
  if (ranksPerNode <= 0 || int64_t(hosts.size()) != n)
    return out;
  std::string promise =
      "(--cluster: " + std::to_string(ranksPerNode) +
      (ranksPerNode == 1 ? " rank per node)" : " ranks per node)");
  // Axes the plan made node-local whose groups span hosts.
  NodeMapping m = nodeMapping(layout, ranksPerNode);
  for (size_t i = 0; i < layout.sizes.size(); ++i) {
    const std::string &axis = layout.names[i];
    if (layout.sizes[i] <= 1 || !llvm::is_contained(m.insideNode, axis))
      continue;
    for (const std::vector<int64_t> &group : layout.groups(i)) {
      if (oneHost(group, hosts))
        continue;
      std::string list;
      for (int64_t r : group)
        list += (list.empty() ? "" : ",") + std::to_string(r);
      out.push_back(llvm::formatv("{0}: warning: the plan keeps {1} inside a "
                                  "node {2}, but {1} group of ranks {3} spans "
                                  "hosts {4}; {1}'s collectives cross the "
                                  "network",
                                  tool, axis, promise, list,
                                  hostsOf(group, hosts))
                        .str());
      break;
    }
  }
  // Hosts whose ranks are not one node of the mapping.
  std::vector<std::string> order;
  std::map<std::string, std::vector<int64_t>> byHost;
  for (int64_t r = 0; r < n; ++r) {
    if (!byHost.count(hosts[r]))
      order.push_back(hosts[r]);
    byHost[hosts[r]].push_back(r);
  }
  for (const std::string &h : order) {
    const std::vector<int64_t> &rs = byHost[h];
    auto [first, last] = m.nodeRanks[rs[0] / ranksPerNode];
    bool same = int64_t(rs.size()) == last - first + 1 && rs.front() == first &&
                rs.back() == last;
    if (same)
      continue;
    std::string planned = first == last ? "rank " + std::to_string(first)
                                        : "ranks " + std::to_string(first) +
                                              "-" + std::to_string(last);
    out.push_back(llvm::formatv("{0}: warning: the plan puts {1} on one node "
                                "{2}, but host {3} holds {4} rank{5} ({6}); "
                                "the node mapping --explain printed does not "
                                "hold",
                                tool, planned, promise, h, rs.size(),
                                rs.size() == 1 ? "" : "s", formatRankRanges(rs))
                      .str());
    break;
  }
  return out;
}

std::string tessera::planner::hostSummary(const RankOrderAxes &layout,
                                          llvm::ArrayRef<std::string> hosts) {
  std::string out;
  if (int64_t(hosts.size()) != layout.numRanks())
    return out;
  for (size_t i = layout.sizes.size(); i-- > 0;) {
    if (layout.sizes[i] <= 1)
      continue;
    bool inside = llvm::all_of(layout.groups(i), [&](const auto &group) {
      return oneHost(group, hosts);
    });
    out += (out.empty() ? "" : "; ") + layout.names[i] +
           (inside ? " groups inside a host" : " groups across hosts");
  }
  return out;
}

std::vector<std::string>
tessera::planner::hostLabels(llvm::ArrayRef<std::string> hostnames,
                             llvm::ArrayRef<int64_t> mpiNodes) {
  assert(hostnames.size() == mpiNodes.size() && "one MPI node per rank");
  std::map<std::string, std::set<int64_t>> nodesOf;
  for (size_t r = 0; r < hostnames.size(); ++r)
    nodesOf[hostnames[r]].insert(mpiNodes[r]);
  std::vector<std::string> out;
  for (size_t r = 0; r < hostnames.size(); ++r)
    out.push_back(nodesOf[hostnames[r]].size() > 1
                      ? hostnames[r] + "[node " + std::to_string(mpiNodes[r]) +
                            "]"
                      : hostnames[r]);
  return out;
}

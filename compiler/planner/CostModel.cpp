//===- CostModel.cpp - α-β collective costs on a cluster ------------------===//

#include "compiler/planner/CostModel.h"

#include "dialects/tsrt/PipelineSchedule.h"

#include <cassert>

using namespace tessera::planner;

llvm::StringRef tessera::planner::collectiveName(Collective kind) {
  switch (kind) {
  case Collective::AllReduce:
    return "all_reduce";
  case Collective::AllGather:
    return "all_gather";
  case Collective::ReduceScatter:
    return "reduce_scatter";
  case Collective::AllToAll:
    return "all_to_all";
  case Collective::SendRecv:
    return "send_recv";
  }
  return "unknown";
}

double tessera::planner::busBandwidthFactor(Collective kind, int64_t n) {
  if (kind == Collective::SendRecv)
    return 1.0;
  if (n < 2)
    return 0.0;
  double share = double(n - 1) / double(n);
  return kind == Collective::AllReduce ? 2.0 * share : share;
}

int64_t tessera::planner::ringSteps(Collective kind, int64_t n) {
  if (kind == Collective::SendRecv)
    return 1;
  if (n < 2)
    return 0;
  return kind == Collective::AllReduce ? 2 * (n - 1) : n - 1;
}

double tessera::planner::collectiveSeconds(Collective kind, double bytes,
                                           int64_t n,
                                           const Cluster::Link &link) {
  assert(link.bandwidth > 0 && "link bandwidth must be positive");
  return link.latency * double(ringSteps(kind, n)) +
         busBandwidthFactor(kind, n) * bytes / link.bandwidth;
}

int64_t AxisPlacement::axisIndex(llvm::StringRef name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return int64_t(i);
  return -1;
}

int64_t AxisPlacement::numRanks() const {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

bool tessera::planner::axisWithinNode(const Cluster &cluster,
                                      const std::vector<int64_t> &gridShape,
                                      size_t axis) {
  assert(axis < gridShape.size() && "axis out of range");
  int64_t size = gridShape[axis];
  if (size <= 1)
    return true;
  // Stride of `axis` in the row-major rank order: product of the faster
  // (later) axes.
  int64_t stride = 1;
  for (size_t i = axis + 1; i < gridShape.size(); ++i)
    stride *= gridShape[i];
  int64_t total = stride;
  for (size_t i = 0; i <= axis; ++i)
    total *= gridShape[i];
  int64_t perNode = cluster.devicesPerNode;
  // A group is {base + k·stride : 0 <= k < size}; the `stride` groups with
  // the same slower coordinates tile a block of stride·size consecutive
  // ranks. If a node boundary falls strictly inside a block, the group
  // whose elements straddle it crosses nodes; otherwise every group lies
  // in one node. So: all groups stay inside a node iff the ranks fit in
  // one node or the block size divides the node size.
  if (total <= perNode)
    return true;
  return perNode % (stride * size) == 0;
}

const Cluster::Link &
tessera::planner::linkFor(const Cluster &cluster,
                          const std::vector<int64_t> &gridShape, size_t axis) {
  return axisWithinNode(cluster, gridShape, axis) ? cluster.intraNode
                                                  : cluster.interNode;
}

double tessera::planner::collectiveSecondsOnAxis(
    Collective kind, double bytes, const Cluster &cluster,
    const std::vector<int64_t> &gridShape, size_t axis) {
  return collectiveSeconds(kind, bytes, gridShape[axis],
                           linkFor(cluster, gridShape, axis));
}

double tessera::planner::pipelineBubbleFraction(int64_t stages,
                                                int64_t microBatches,
                                                int64_t virtualStages) {
  tessera::tsrt::schedule::Shape shape;
  shape.stages = stages;
  shape.microBatches = microBatches;
  shape.virtualStages = virtualStages;
  return tessera::tsrt::schedule::bubbleFraction(shape);
}

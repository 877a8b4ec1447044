//===- CostModel.cpp - α-β collective costs on a cluster ------------------===//

#include "common/cluster/CostModel.h"

#include "common/schedule/PipelineSchedule.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <map>
#include <vector>

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
                                           int64_t n, const Cluster::Link &link,
                                           bool backToBack) {
  assert(link.bandwidth > 0 && "link bandwidth must be positive");
  const auto &m = backToBack && !link.measuredBackToBack.empty()
                      ? link.measuredBackToBack
                      : link.measured;
  if (m.empty() || link.measuredRanks != n || ringSteps(kind, n) == 0)
    return link.latency * double(ringSteps(kind, n)) +
           busBandwidthFactor(kind, n) * bytes / link.bandwidth;
  if (bytes <= m.front().first)
    return m.front().second;
  if (bytes >= m.back().first)
    return m.back().second + busBandwidthFactor(kind, n) *
                                 (bytes - m.back().first) / link.bandwidth;
  auto hi = std::upper_bound(
      m.begin(), m.end(), bytes,
      [](double b, const std::pair<double, double> &p) { return b < p.first; });
  auto lo = std::prev(hi);
  double f = (bytes - lo->first) / (hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

std::vector<double>
tessera::planner::nonDecreasingTimes(std::vector<double> times) {
  for (size_t i = times.size(); i-- > 1;)
    times[i - 1] = std::min(times[i - 1], times[i]);
  return times;
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
  return axisWithinNode(cluster.devicesPerNode, gridShape, axis);
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
  // The axis's groups are gridShape[axis] ranks, the product of the faster
  // axes apart; a calibrated cluster has measured such groups per kind.
  int64_t stride = 1;
  for (size_t i = axis + 1; i < gridShape.size(); ++i)
    stride *= gridShape[i];
  return collectiveSeconds(
      kind, bytes, gridShape[axis],
      cluster.link(collectiveName(kind),
                   axisWithinNode(cluster, gridShape, axis), gridShape[axis],
                   stride));
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

//===----------------------------------------------------------------------===//
// The measured GEMM table
//===----------------------------------------------------------------------===//

/// Achieved FLOP/s of one (m, n, k) GEMM from the measured points of one
/// dtype, in log space: trilinear over (log m, log n, log k) of log FLOP/s
/// when the points form a full grid, else the nearest point; coordinates
/// outside the table are clamped to its edges.
static double tableRate(const std::vector<const Cluster::GemmPoint *> &points,
                        int64_t m, int64_t n, int64_t k) {
  std::vector<int64_t> axes[3];
  for (const Cluster::GemmPoint *p : points) {
    axes[0].push_back(p->m);
    axes[1].push_back(p->n);
    axes[2].push_back(p->k);
  }
  for (std::vector<int64_t> &a : axes) {
    llvm::sort(a);
    a.erase(std::unique(a.begin(), a.end()), a.end());
  }
  std::map<std::array<int64_t, 3>, double> grid;
  for (const Cluster::GemmPoint *p : points)
    grid[{p->m, p->n, p->k}] = p->flops;
  double query[3] = {std::log(static_cast<double>(std::max<int64_t>(m, 1))),
                     std::log(static_cast<double>(std::max<int64_t>(n, 1))),
                     std::log(static_cast<double>(std::max<int64_t>(k, 1)))};
  if (grid.size() == axes[0].size() * axes[1].size() * axes[2].size()) {
    // Per axis: the bracketing indices and the weight of the upper one.
    int64_t lo[3], hi[3];
    double w[3];
    for (int d = 0; d < 3; ++d) {
      const std::vector<int64_t> &a = axes[d];
      double q = query[d];
      if (q <= std::log(static_cast<double>(a.front()))) {
        lo[d] = hi[d] = 0;
        w[d] = 0;
      } else if (q >= std::log(static_cast<double>(a.back()))) {
        lo[d] = hi[d] = static_cast<int64_t>(a.size()) - 1;
        w[d] = 0;
      } else {
        size_t i = 1;
        while (std::log(static_cast<double>(a[i])) < q)
          ++i;
        lo[d] = static_cast<int64_t>(i) - 1;
        hi[d] = static_cast<int64_t>(i);
        double l = std::log(static_cast<double>(a[i - 1]));
        double h = std::log(static_cast<double>(a[i]));
        w[d] = (q - l) / (h - l);
      }
    }
    double logRate = 0;
    for (int corner = 0; corner < 8; ++corner) {
      double weight = 1;
      std::array<int64_t, 3> at;
      for (int d = 0; d < 3; ++d) {
        bool up = corner >> d & 1;
        weight *= up ? w[d] : 1 - w[d];
        at[d] = axes[d][up ? hi[d] : lo[d]];
      }
      if (weight == 1)
        return grid[at]; // on the grid (or clamped to it): exact
      if (weight > 0)
        logRate += weight * std::log(grid[at]);
    }
    return std::exp(logRate);
  }
  const Cluster::GemmPoint *nearest = nullptr;
  double bestDistance = 0;
  for (const Cluster::GemmPoint *p : points) {
    double d = 0;
    for (auto [q, v] : {std::pair{query[0], p->m}, std::pair{query[1], p->n},
                        std::pair{query[2], p->k}})
      d += std::pow(q - std::log(static_cast<double>(v)), 2);
    if (!nearest || d < bestDistance) {
      nearest = p;
      bestDistance = d;
    }
  }
  return nearest->flops;
}

double tessera::planner::measuredGemmRate(const Cluster &cluster,
                                          llvm::StringRef dtype, int64_t m,
                                          int64_t n, int64_t k) {
  std::vector<const Cluster::GemmPoint *> points;
  for (const Cluster::GemmPoint &p : cluster.gemm)
    if (p.dtype == dtype && p.flops > 0)
      points.push_back(&p);
  return points.empty() ? 0 : tableRate(points, m, n, k);
}

double tessera::planner::gemmWorkSeconds(const Cluster &cluster,
                                         llvm::StringRef dtype, double peak,
                                         double m, double n, double k,
                                         double flops, double bytes) {
  if (double rate =
          measuredGemmRate(cluster, dtype, int64_t(m), int64_t(n), int64_t(k));
      rate > 0)
    return flops / rate;
  double seconds = peak > 0 ? flops / (peak * cluster.gemmPeakFraction) : 0;
  if (cluster.memoryBandwidth > 0)
    seconds = std::max(seconds, bytes / cluster.memoryBandwidth);
  return seconds;
}

int64_t tessera::planner::dtypeBytes(llvm::StringRef dtype) {
  if (dtype == "fp32")
    return 4;
  if (dtype == "bf16" || dtype == "fp16")
    return 2;
  return 0;
}

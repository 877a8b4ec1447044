//===- CostModel.h - α-β collective costs on a cluster ----------*- C++ -*-===//
//
// The communication half of the planner's cost model (issue 6): the time of
// one collective over a grid axis, with the α-β model and the ring
// algorithm's bus-bandwidth factors of nccl-tests (doc/PERFORMANCE.md),
// placed on the topology: an axis whose groups stay inside a node uses the
// intra-node link (NVLink), one that spans nodes uses the network. Also the
// pipeline bubble of a schedule.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_CLUSTER_COSTMODEL_H
#define TESSERA_COMMON_CLUSTER_COSTMODEL_H

#include "common/cluster/Cluster.h"
#include "common/cluster/Placement.h"

#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::planner {

enum class Collective {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  SendRecv
};

/// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv".
llvm::StringRef collectiveName(Collective kind);

/// nccl-tests' bus-bandwidth factor busbw / algbw for `n` ranks (ring):
///   all-reduce 2(n−1)/n; all-gather, reduce-scatter, all-to-all (n−1)/n;
///   send/recv 1. 0 for n < 2, except send/recv.
double busBandwidthFactor(Collective kind, int64_t n);

/// Latency-bound steps of the ring algorithm for `n` ranks:
///   all-reduce 2(n−1) (reduce-scatter then all-gather); all-gather,
///   reduce-scatter, all-to-all n−1; send/recv 1. 0 for n < 2, except
///   send/recv.
int64_t ringSteps(Collective kind, int64_t n);

/// Seconds for one collective over `n` ranks on `link`:
///
///   t = α · ringSteps(kind, n) + busBandwidthFactor(kind, n) · S / β
///
/// with α = link.latency (s), β = link.bandwidth (bytes/s per device, one
/// direction) and S = `bytes`, the size nccl-tests counts: the full
/// (unsharded) tensor for all-reduce; the gathered output for all-gather;
/// the input before scattering for reduce-scatter; one rank's send buffer
/// (all n chunks) for all-to-all; the message for send/recv. Since busbw ≈ β
/// at large sizes, S / algbw = factor · S / β is the bandwidth term.
/// A collective over one rank (n < 2) costs 0; send/recv ignores `n`.
/// When `link` carries times measured on groups of n ranks
/// (Cluster::Link::measured), they are interpolated instead; with
/// `backToBack` (the collective directly follows another one, no compute
/// between) and Cluster::Link::measuredBackToBack present, that table is.
double collectiveSeconds(Collective kind, double bytes, int64_t n,
                         const Cluster::Link &link, bool backToBack = false);

/// Measured times of one operation at growing sizes (calibration's
/// Cluster::Link::measured), made non-decreasing by lowering each to the
/// smallest at any larger size (a running minimum from the end). Timing
/// noise on a CPU only adds time (other work, a shared core's time slice),
/// so a smaller size measured slower than a larger one was disturbed. A
/// least-squares fit (pool adjacent violators) would instead spread one
/// disturbed small size over every larger one: it once priced a 4-rank
/// reduce-scatter at 1.05 ms for every size from 256 B to 1 MiB.
std::vector<double> nonDecreasingTimes(std::vector<double> times);

/// A device grid: axis names and sizes. Ranks are linearised row-major,
/// the LAST axis fastest (as the runtime grid), and rank r runs on node
/// r / devicesPerNode.
struct AxisPlacement {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;

  /// Index of the axis called `name`, or -1.
  int64_t axisIndex(llvm::StringRef name) const;
  int64_t numRanks() const;
};

/// True when every group of ranks along `axis` (the other coordinates
/// fixed) lies inside one node, so its collectives run over the intra-node
/// link. E.g. grid (dp=16, tp=8) on 8-GPU nodes: tp is inside a node, dp
/// spans nodes; grid (dp=8, tp=16): tp spans nodes. An axis of size 1 is
/// always inside a node. Requires axis < gridShape.size(). The
/// ranks-per-node form of Placement.h with cluster.devicesPerNode.
bool axisWithinNode(const Cluster &cluster,
                    const std::vector<int64_t> &gridShape, size_t axis);

/// The link that collectives along `axis` use: intraNode when
/// axisWithinNode, else interNode.
const Cluster::Link &linkFor(const Cluster &cluster,
                             const std::vector<int64_t> &gridShape,
                             size_t axis);

/// collectiveSeconds of `kind` over grid axis `axis`: n = its size, the
/// link Cluster::link(kind, axisWithinNode, n, stride) with stride the
/// product of the faster axes (the kind's measured link for groups of that
/// shape on a calibrated cluster, else linkFor's).
double collectiveSecondsOnAxis(Collective kind, double bytes,
                               const Cluster &cluster,
                               const std::vector<int64_t> &gridShape,
                               size_t axis);

/// Idle fraction of a pipelined step with `stages` P, `microBatches` M and
/// `virtualStages` V chunks per stage: (P − 1) / (V·M + P − 1) (Narayanan
/// et al. 2021; GPipe and 1F1B: V = 1). The same formula as
/// tsrt::schedule::bubbleFraction, which it calls.
double pipelineBubbleFraction(int64_t stages, int64_t microBatches,
                              int64_t virtualStages = 1);

/// Achieved FLOP/s of one (m, n, k) GEMM in `dtype` from the cluster's
/// measured table (Cluster::gemm): trilinear in (log m, log n, log k) of log
/// FLOP/s when the points form a full grid, else the nearest point in log
/// space; coordinates outside the table are clamped to its edges. 0 when the
/// table has no point for `dtype`. The one GEMM-table lookup of the
/// planner: StepCost and TransformerCost both time GEMMs by it.
double measuredGemmRate(const Cluster &cluster, llvm::StringRef dtype,
                        int64_t m, int64_t n, int64_t k);

/// Seconds of `flops` FLOP of GEMM-shaped work (m, n, k) that moves `bytes`
/// on one device of `cluster`: at the measured rate of the table
/// (measuredGemmRate) when it has points for `dtype`, else the roofline
/// max(flops / (peak · gemmPeakFraction), bytes / memoryBandwidth) (a term
/// whose figure is 0 is left out). The one GEMM time model of the planner:
/// StepCost's per-op GEMMs and TransformerCost's analytic ones (and its
/// fused attention, whose flops and bytes are not a plain GEMM's) use it.
double gemmWorkSeconds(const Cluster &cluster, llvm::StringRef dtype,
                       double peak, double m, double n, double k, double flops,
                       double bytes);

/// Bytes per element of "fp32" (4), "bf16"/"fp16" (2); 0 if unknown.
int64_t dtypeBytes(llvm::StringRef dtype);

} // namespace tessera::planner

#endif // TESSERA_COMMON_CLUSTER_COSTMODEL_H

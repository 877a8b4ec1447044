//===- StepCost.h - predicted step time of a partitioned plan ---*- C++ -*-===//
//
// The planner's step-time prediction (issue 6): walks the partitioned
// @train_step (after tsr-sharding-partition, so every tensor has its LOCAL,
// per-rank shape) and adds, per rank:
//
//   compute       = Σ_op  kernel(op) + op_overhead
//   communication = Σ_collective collectiveSeconds(kind, bytes, n,
//                                                  cluster.link(kind, node))
//   sync lag      = Σ_collective syncLagFraction · min(w, syncLagWindow)
//   step          = compute + communication + sync lag
//
// where, with the op's CostOpInterface answers (getFlops F, getBytesAccessed
// B, getGemmShapes G) and peak = peakFlops[dtype]:
//
//  - a GEMM-like op (G not empty: matmul, attention, attention_grad) takes
//      Σ_{g in G} g.batch · 2·g.m·g.n·g.k / rate(g)  +  (F − F_G) / peak
//        + T / transcendental_rate
//    with F_G the GEMMs' FLOPs (the rest is the attention's softmax work)
//    and T the op's getTranscendentals() (exp per score).
//    rate(g) is the cluster's measured `gemm` table for the dtype,
//    interpolated in log space (trilinear over log m, log n, log k when the
//    table is a full grid, else the nearest point; clamped at the table's
//    edges); without a table the roofline
//      max(2mnk / (peak · gemm_peak_fraction), bytes(g) / memory_bandwidth)
//    with bytes(g) = (mk + kn + mn) elements of the dtype. `gemmEfficiency`,
//    when given, replaces both: every GEMM at peak · gemmEfficiency.
//  - any other op takes the roofline
//      max(F / peak + T / transcendental_rate, B / memory_bandwidth)
//    (a term is left out when the cluster has no such figure): exp, erf in
//    GELU, softmax and cross-entropy are bound by their libm calls.
//  - every kernel time above is multiplied by cluster.computeScale (1 but
//    for a calibration fitted to real steps: bench/fit_waiting_share.py).
//  - every op but constants (materialised once, at load) is one kernel and
//    pays the cluster's op_overhead; a reshape is a view (B = 0) but still
//    one dispatched instruction.
//
// Units: seconds, bytes, FLOP, FLOP/s. The collectives are the `shard.
// all_reduce / all_gather / reduce_scatter / all_to_all` ops; their sizes are
// the ones nccl-tests counts (doc/PERFORMANCE.md): all-reduce the operand,
// all-gather the (gathered) result, reduce-scatter the operand (before
// scattering), all-to-all the operand (one rank's send buffer). An op's
// kernel may exchange messages itself (CostOpInterface::getKernelMessages),
// each costed as a collective: a ring
// attention (tsr.attention / attention_grad with `grid_axes`) adds its K/V
// rotations as send_recv messages over its ring: ring_size − 1 of the local
// K and V (forward), ring_size − 1 of K, V, dK and dV plus one of dK and dV
// (backward), as runtime/backends/cpu/Attention.cpp rotates them (fp32); a
// vocab-parallel cross_entropy / cross_entropy_grad (with `grid_axes`) adds
// the two f64 all-reduces of its row statistics (8·N bytes, then 16·N
// forward or 8·N backward for N rows). n is
// the product of the collective's grid axis sizes; the link is
// Cluster::link(kind, withinNode, n, stride) (a calibrated group of that
// size and rank stride when the cluster has one), intra-node when every
// axis of the group stays inside a node (axisWithinNode on the module's
// `shard.grid @grid`, its rank axes laid out in `rankOrder`, the last fastest),
// else the network. `shard.all_slice` is local (no communication) and costs
// nothing.
//
// Limits (stated, not hidden):
//  - No overlap: compute and communication are added, as if every collective
//    were blocking (an upper bound when --bucket-mb overlaps them), and every
//    rank is assumed to do the same work (no load imbalance or waiting).
//  - The GEMM table is measured for C = A·B; transposed operands (the
//    backward's GEMMs) are assumed to run at the same rate.
//  - Non-GEMM kernels the calibration measured (Cluster::
//    kernelSecondsPerElement: layer_norm, rms_norm and their gradients,
//    the optimizer updates, gelu, silu and their gradients, the
//    cross-entropy) take the op's CostOpInterface::getMeasuredUnits (elements
//    of their first operand; the fused attention kernels, scores formed)
//    x the measured seconds per unit. The others are
//    costed by bytes (memory_bandwidth is measured with a simple add), FLOPs
//    at the GEMM peak and transcendentals at one measured rate (the mean of
//    exp and erf). op_overhead is a kernel call's fixed cost, not the
//    executor's per-instruction bookkeeping.
//  - On an oversubscribed CPU (more ranks than cores) every collective inside
//    the step also waits for ranks descheduled from a shared core. The
//    calibration measures each collective's time per message size right
//    after a layer-like compute segment; the sync lag (next item) adds
//    what a step's longer segments cost on top of that. Pipelines hinge on
//    waiting_rank_share, which bench/fit_waiting_share.py fits to real pipeline
//    steps (bench/planner_calibration.py; docs/Planner.md, "The waiting share,
//    from real pipeline steps").
//  - The sync lag: with ranks sharing cores, each collective followed by
//    compute w (kernel time up to the function's next collective or its
//    end) costs cluster.syncLagFraction · min(w, cluster.syncLagWindow)
//    more. Ranks sharing a core leave a collective apart; the first one
//    computes on while its core-mate waits for a last message, and the
//    ranks on other cores that need the late one idle until the scheduler
//    gives it its turn. On this machine (2 cores, 4 ranks) it is why plans
//    with collectives between their kernels (tensor and sequence
//    parallelism, ZeRO-3's gathers) take longer than plans whose
//    collectives come in one block (ZeRO-1, gradient accumulation). The
//    fraction is fitted to real steps of a reference model (bench/
//    fit_waiting_share.py); presets have none. Pipelines have none: their
//    ranks that share a core are in different stages (pp is the slowest
//    rank axis), not in one collective, and the schedule simulation gives
//    them their turns; a pipeline's sends are not collectives here either.
//  - The step's fixed work outside the program (batch slicing, copying the
//    updated state back) is not counted.
//  - Pipeline plans (a tsrt.pipeline_schedule with per-chunk forward,
//    backward and apply functions) are costed chunk by chunk, each send as a
//    send_recv over the pp axis, and the schedule simulated with those
//    times (tsrt::schedule::simulate; with more ranks than the cluster's
//    cores_per_node, a stage waiting in its bubble frees its core and the
//    running stages on that core speed up: ranks are taken as bound
//    round-robin, world rank r on core r mod cores_per_node, as mpirun
//    --map-by core --bind-to core places them, and a stage's ranks are
//    those of its pp coordinate in the rank order); the step is the makespan
//    plus the slowest stage's apply, and the per-rank figures are the busiest
//    stage's. The grid's `mb` axis is not ranks.
//
// MFU follows the "model FLOPs utilisation" accounting of Narayanan et al.
// 2021 (Megatron-LM, SC'21) and Chowdhery et al. 2022 (PaLM): useful FLOPs per
// rank / (step seconds · peak FLOP/s). Here the FLOPs are the same summed
// per-rank op FLOPs used for compute (so recomputation, if present in the
// IR, is counted: strictly that is hardware FLOPs utilisation).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_STEPCOST_H
#define TESSERA_COMPILER_PLANNER_STEPCOST_H

#include "common/cluster/Cluster.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::planner {

/// One collective of the step.
struct CollectiveCost {
  /// "all_reduce", "all_gather", "reduce_scatter", "all_to_all" or
  /// "send_recv" (ring attention's K/V rotations).
  std::string kind;
  /// Grid axes the collective runs over (indices into the grid).
  std::vector<int16_t> axes;
  /// Size as nccl-tests counts it (see the file comment), bytes.
  double bytes = 0;
  /// Predicted time, seconds (collectiveSeconds).
  double seconds = 0;
  /// True when every group stays inside a node (intra-node link).
  bool withinNode = true;
  /// Ranks between consecutive members of a group when they are evenly
  /// spaced, else 0; with the group size it picks the cluster's measured
  /// group link (Cluster::link).
  int64_t groupStride = 0;
  /// True when it directly follows another collective of the same function
  /// (no kernel time between), timed from the link's back-to-back table.
  bool backToBack = false;
};

/// The predicted kernel time of one op kind on one rank.
struct OpKindCost {
  /// Kernels of this kind in the step (one per op).
  int64_t calls = 0;
  /// Their predicted time, op_overhead included, seconds.
  double seconds = 0;
};

/// Predicted time of one training step on one rank.
struct StepCost {
  /// gemmSeconds + otherSeconds + overheadSeconds, seconds.
  double computeSeconds = 0;
  /// The GEMMs of GEMM-like ops (and their non-GEMM FLOPs), seconds.
  double gemmSeconds = 0;
  /// The other ops' rooflines, seconds.
  double otherSeconds = 0;
  /// Pipeline plans: idle time of the busiest stage (step − its compute
  /// and communication), seconds; 0 otherwise.
  double bubbleSeconds = 0;
  /// kernels · op_overhead, seconds.
  double overheadSeconds = 0;
  /// Ops costed as one kernel each.
  int64_t kernels = 0;
  /// Σ collective seconds, seconds.
  double communicationSeconds = 0;
  /// The sync lag (see the file comment): syncLagFraction ·
  /// syncLagComputeSeconds, seconds.
  double syncLagSeconds = 0;
  /// Σ over collectives of min(compute after it up to the next collective,
  /// the cluster's syncLagWindow), seconds (what syncLagFraction scales;
  /// bench/fit_waiting_share.py fits the fraction from it).
  double syncLagComputeSeconds = 0;
  /// computeSeconds + communicationSeconds + syncLagSeconds (no overlap);
  /// pipelines: the simulated schedule's makespan + the slowest apply,
  /// seconds.
  double stepSeconds = 0;
  /// Σ getFlops() over the ops of @train_step (one rank), FLOP.
  double flopsPerRank = 0;
  /// flopsPerRank / (stepSeconds · peak FLOP/s), in [0, 1].
  double mfu = 0;
  /// The collectives in program order.
  std::vector<CollectiveCost> collectives;
  /// computeSeconds by op kind (the op name without its dialect, as
  /// `tessera-run --profile` names its instructions: "matmul",
  /// "layer_norm_grad", ...), for comparing a prediction with a profile.
  std::map<std::string, OpKindCost> opKinds;
  /// Grid shape of the plan (empty grid: one rank) and its rank count.
  std::vector<int64_t> gridShape;
  /// Axis names from the module attribute `tsr.grid_axes` (empty without).
  std::vector<std::string> axisNames;
  int64_t ranks = 1;
};

/// Seconds of `batch` GEMMs (m, n, k) of `dtype` on one device of
/// `cluster` (see the file comment): the measured table, else the
/// roofline; with `gemmEfficiency`, 2·batch·m·n·k / (peak · efficiency).
/// `peak` is cluster.peakFlops[dtype].
double gemmSeconds(const Cluster &cluster, llvm::StringRef dtype, double peak,
                   int64_t batch, int64_t m, int64_t n, int64_t k,
                   std::optional<double> gemmEfficiency = std::nullopt);

/// Predicts the step of the partitioned module `partitioned` (after
/// tsr-sharding-partition, optionally tsr-zero-sharding) on `cluster` for
/// compute dtype `dtype` ("fp32", "bf16", "fp16"; see the file comment).
/// `gemmEfficiency`, when given, times every GEMM at peak · gemmEfficiency
/// instead of the cluster's GEMM table or roofline.
/// `rankOrder` names the grid's rank axes slowest first, as the runtime
/// lays ranks out (planner::Plan::effectiveRankOrder); empty: the grid's
/// own axis order, last fastest. It decides which axes stay inside a node.
/// Errors: no @train_step and no tsrt.pipeline_schedule, other functions
/// without a schedule, an unknown dtype or one the cluster has no peak for,
/// an efficiency outside (0, 1], a plan needing more ranks than the cluster
/// has, a rank order naming an axis the grid lacks, a collective on an
/// axis outside the grid or on a tensor without a static shape.
llvm::Expected<StepCost>
predictStepCost(mlir::ModuleOp partitioned, const Cluster &cluster,
                llvm::StringRef dtype,
                std::optional<double> gemmEfficiency = std::nullopt,
                llvm::ArrayRef<std::string> rankOrder = {});

/// The prediction as JSON (seconds, FLOP, bytes): {"cluster", "ranks",
/// "step_s", "compute_s", "gemm_s", "other_s", "overhead_s", "kernels",
/// "communication_s", "sync_lag_s", "sync_lag_compute_s", "bubble_s",
/// "flops_per_rank", "mfu", "collectives": [{"kind",
/// "axes", "bytes", "seconds", "within_node", "back_to_back"}, ...],
/// "ops": [{"kind",
/// "calls", "seconds"}, ...] (opKinds, most seconds first)}.
llvm::json::Value toJSON(const StepCost &cost, const Cluster &cluster);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_STEPCOST_H

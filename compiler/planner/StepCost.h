//===- StepCost.h - predicted step time of a partitioned plan ---*- C++ -*-===//
//
// The planner's step-time prediction (issue 6): walks the partitioned
// @train_step (after tsr-sharding-partition, so every tensor has its LOCAL,
// per-rank shape) and adds
//
//   compute       = Σ_op getFlops() / (peakFlops[dtype] · gemmEfficiency)
//   communication = Σ_collective collectiveSeconds(kind, bytes, n, link)
//   step          = compute + communication
//
// Units: seconds, bytes, FLOP, FLOP/s. Every tsr op answers
// tsr::CostOpInterface (FLOPs of one execution on its local shapes). The
// collectives are the `shard.all_reduce / all_gather / reduce_scatter /
// all_to_all` ops; their sizes are the ones nccl-tests counts
// (doc/PERFORMANCE.md): all-reduce the operand, all-gather the (gathered)
// result, reduce-scatter the operand (before scattering), all-to-all the
// operand (one rank's send buffer). n is the product of the collective's grid
// axis sizes; the link is the intra-node one when every axis of the group
// stays inside a node (axisWithinNode on the module's `shard.grid @grid`,
// ranks row-major, last axis fastest), else the network. `shard.all_slice`
// is local (no communication) and costs nothing.
//
// Limits (stated, not hidden):
//  - No overlap: compute and communication are added, as if every collective
//    were blocking (an upper bound when --bucket-mb overlaps them).
//  - gemmEfficiency is ONE factor for every op; it is a placeholder for the
//    GEMM-shape efficiency table (and it also scales non-GEMM ops, which are
//    really memory-bound).
//  - Only the single-function plan (@train_step alone) is costed; pipeline
//    plans (stage functions, send/recv) are refused with an error.
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

#include "compiler/planner/Cluster.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::planner {

/// One collective of the step.
struct CollectiveCost {
  /// "all_reduce", "all_gather", "reduce_scatter" or "all_to_all".
  std::string kind;
  /// Grid axes the collective runs over (indices into the grid).
  std::vector<int16_t> axes;
  /// Size as nccl-tests counts it (see the file comment), bytes.
  double bytes = 0;
  /// Predicted time, seconds (collectiveSeconds).
  double seconds = 0;
  /// True when every group stays inside a node (intra-node link).
  bool withinNode = true;
};

/// Predicted time of one training step on one rank.
struct StepCost {
  /// Σ FLOPs / (peak · efficiency), seconds.
  double computeSeconds = 0;
  /// Σ collective seconds, seconds.
  double communicationSeconds = 0;
  /// computeSeconds + communicationSeconds (no overlap), seconds.
  double stepSeconds = 0;
  /// Σ getFlops() over the ops of @train_step (one rank), FLOP.
  double flopsPerRank = 0;
  /// flopsPerRank / (stepSeconds · peak FLOP/s), in [0, 1].
  double mfu = 0;
  /// The collectives in program order.
  std::vector<CollectiveCost> collectives;
  /// Grid shape of the plan (empty grid: one rank) and its rank count.
  std::vector<int64_t> gridShape;
  /// Axis names from the module attribute `tsr.grid_axes` (empty without).
  std::vector<std::string> axisNames;
  int64_t ranks = 1;
};

/// Default of `gemmEfficiency`: the fraction of peak a GEMM reaches. A
/// placeholder for the GEMM-shape efficiency table.
constexpr double kDefaultGemmEfficiency = 0.5;

/// Predicts the step of the partitioned module `partitioned` (after
/// tsr-sharding-partition, optionally tsr-zero-sharding) on `cluster`, with
/// compute at peakFlops[dtype] ("fp32", "bf16", "fp16") · gemmEfficiency.
/// Errors: no @train_step, other functions (pipeline plans), an unknown
/// dtype or one the cluster has no peak for, an efficiency outside (0, 1],
/// a plan needing more ranks than the cluster has, a collective on an axis
/// outside the grid or on a tensor without a static shape.
llvm::Expected<StepCost>
predictStepCost(mlir::ModuleOp partitioned, const Cluster &cluster,
                llvm::StringRef dtype,
                double gemmEfficiency = kDefaultGemmEfficiency);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_STEPCOST_H

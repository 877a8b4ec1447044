//===- Search.h - the parallel-plan search ----------------------*- C++ -*-===//
//
// Tessera's auto-partitioner (issue 6): enumerates every plan of `devices`
// ranks — data, tensor and pipeline degrees, sequence parallelism (none,
// Megatron-SP, Ulysses, ring) and its size, ZeRO stage, micro-batch size,
// interleaved chunks per stage and recomputation — prunes those that do not
// divide the model's shapes or do not fit in device memory, scores the rest
// with the analytic model (TransformerCost.h) and returns the fastest, the
// runners-up, and why each rejected region was rejected.
//
// Unlike Alpa's ILP over every operator (Zheng et al. 2022, minutes to
// hours), the space here is the handful of Megatron-LM/DeepSpeed knobs, so
// exhaustive enumeration with a closed-form score takes well under a second
// for GPT-3 175B on 1024 GPUs (bench/planner_search.py measures it).
//
// Pins: any knob given (a flag of tessera-partition) is fixed and the rest
// searched. Rank order puts tp, then sp, inside a node, so the search
// prefers tensor groups that fit a node: a larger tp spans nodes and is
// scored with the network's bandwidth.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_SEARCH_H
#define TESSERA_COMPILER_PLANNER_SEARCH_H

#include "compiler/planner/Plan.h"
#include "compiler/planner/TransformerCost.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <functional>
#include <optional>

namespace tessera::planner {

/// Knobs fixed by the user; unset ones are searched.
struct Pins {
  std::optional<int64_t> dp, tp, pp, spSize, zero, microBatchSize, microBatches,
      virtualStages;
  std::optional<std::string> sp, recompute, schedule;
};

/// The knobs of `plan` whose flag was given (`given(flag)`, flag one of
/// "dp", "tp", "pp", "micro-batches", "virtual-stages", "schedule", "sp",
/// "sp-size", "zero", "recompute"), as pins: the plan the flags made is the
/// one statement of what the user fixed. A given "interleaved" schedule is
/// not a pin (the search makes interleaving out of virtual stages).
Pins pinsOf(const Plan &plan,
            llvm::function_ref<bool(llvm::StringRef flag)> given);

struct SearchOptions {
  /// Ranks the plan must use (every one of them).
  int64_t devices = 1;
  CostOptions cost;
  Pins pins;
  /// Usable bytes per device; 0 means cluster.memoryBytes.
  double memoryBytes = 0;
  /// How many of the best plans to return (the chosen one first).
  size_t keep = 6;
  /// Whether the runtime buckets DP / ZeRO gradient collectives and
  /// overlaps them with backward (tessera-partition: --bucket-mb given).
  bool overlapGradients = true;
  /// Extra filter: a non-empty string rejects the candidate with that
  /// reason (e.g. a combination this build of Tessera cannot run).
  std::function<std::string(const Candidate &)> unsupported;
  /// Debugging (tessera-partition --plan-space all): score the candidates
  /// `unsupported` names too, marked with its reason
  /// (ScoredPlan::unsupported), instead of rejecting them.
  bool scoreUnsupported = false;
};

/// How many of the search's best plans tessera-partition re-ranks with the
/// IR-level step model (StepCost) on a calibrated machine.
constexpr size_t kRefinedPlans = 8;

struct ScoredPlan {
  Candidate candidate;
  Prediction prediction;
  /// Non-empty only with SearchOptions::scoreUnsupported: why this build
  /// cannot run the plan.
  std::string unsupported;
};

/// Candidates rejected for one reason, summarised. A memory region is the
/// plans sharing (tp, pp, sp, sp-size, zero) when NONE of them fits (any
/// micro-batch size, interleaving or recomputation); divisibility and
/// unsupported regions are the plans sharing one reason.
struct RejectedRegion {
  /// The reason's kind: "divisibility", "memory" or "unsupported".
  std::string kind;
  /// The shared part of the candidates, e.g. "tp=1 pp=1 zero=0" or "tp=3".
  std::string region;
  /// A representative reason: the first divisibility message, or for
  /// memory the closest miss ("out of memory by 12.3 GB: needs 92.3 GB of
  /// 80.0 GB").
  std::string reason;
  /// Candidates in the region.
  int64_t count = 0;
  /// For memory: the smallest excess in the region, bytes.
  double excessBytes = 0;
  /// For memory: tp·pp·sp-size·4 + ZeRO stage, to list simple plans first.
  int64_t modelParallel = 0;
};

struct SearchResult {
  /// The best `keep` plans, fastest first; empty when nothing fits.
  std::vector<ScoredPlan> best;
  std::vector<RejectedRegion> rejected;
  int64_t considered = 0, feasible = 0;
  /// Wall time of the search, seconds.
  double seconds = 0;
};

/// Searches the plans of options.devices ranks for `shape` on `cluster`.
/// Errors: an invalid shape, devices < 1 or more than the cluster has, a
/// pin that is not a positive degree or not a known mode, a cluster without
/// a peak for the precision. No plan fitting is NOT an error: `best` is
/// empty and `rejected` says why.
llvm::Expected<SearchResult> searchPlans(const TransformerShape &shape,
                                         const Cluster &cluster,
                                         const SearchOptions &options);

/// The Plan that runs `c` for `shape`: `base` (optimizer, precision,
/// vocab parallelism, ...) with the candidate's degrees, micro-batches,
/// schedule, sequence parallelism, ZeRO stage and recomputation.
Plan planOf(const Candidate &c, const TransformerShape &shape, Plan base);

/// Human-readable bytes in powers of 1000: "12.3 GB", "4.1 MB", "512 B".
std::string formatGB(double bytes);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_SEARCH_H

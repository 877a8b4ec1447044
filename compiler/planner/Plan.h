//===- Plan.h - the parallel plan -------------------------------*- C++ -*-===//
//
// The Plan (DESIGN.md, "The Plan") is plain data: the parallel degrees and
// the grid they make (grid(), common/plan/Grid.h), every parameter's
// sharding, ZeRO, the pipeline, precision and the optimizer. It is filled
// from flags and the searches (Search.h), printed by
// `tessera-partition --explain`, turned into the pass pipeline's typed
// options (compiler/pipeline), and written into and read back from the
// artifact's manifest (toJSON / fromJSON).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_PLAN_H
#define TESSERA_COMPILER_PLANNER_PLAN_H

#include "common/cluster/Placement.h"
#include "common/plan/Grid.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::planner {

struct OptimizerConfig {
  std::string name = "adamw"; ///< "sgd" or "adamw"
  double lr = 1e-3;
  /// Weight decay; negative means the optimizer's default (AdamW 0.01,
  /// SGD 0), as in torch.optim.
  double weightDecay = -1;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// --weight-decay-exclude: no weight decay for biases and 1-D params
  /// (Megatron-LM's default parameter groups); false decays every param, as
  /// torch.optim does. Manifest: "weight_decay_exclude": true (absent when
  /// false).
  bool weightDecayExclude = false;

  double effectiveWeightDecay() const {
    return weightDecay >= 0 ? weightDecay : (name == "adamw" ? 0.01 : 0.0);
  }
};

struct Plan {
  /// Data-parallel degree (grid axis 0, "dp") and tensor-parallel degree
  /// (grid axis 1, "tp", Megatron-LM column/row splits).
  int64_t dp = 1, tp = 1;
  /// Pipeline parallelism: `pp` stages (grid axis 2, "pp"), `microBatches`
  /// micro-batches per step (virtual grid axis 3, "mb", not ranks),
  /// `schedule` ("gpipe", "1f1b" or "interleaved") with `virtualStages`
  /// model chunks per stage, and optionally the first layer of every chunk
  /// (`--pp-stages`). The pp and mb axes exist only when pipelined().
  int64_t pp = 1, microBatches = 1, virtualStages = 1;
  std::string schedule = "1f1b";
  std::vector<int64_t> ppStages;
  /// Activation recomputation per layer (tsr-recompute): "none",
  /// "selective" (attention core, Korthikanti et al. 2022) or "full".
  std::string recompute = "none";
  /// Compiler fusions (passes/fusion, run on the partitioned step before
  /// lowering): "all" (the default), "none", or a comma-separated list of
  /// kinds from kFusionKinds: "linear" (bias + activation into the GEMM's
  /// epilogue, transposes into GEMM flags), "norm" (residual add +
  /// LayerNorm/RMSNorm), "elementwise" (chains of elementwise ops as one
  /// kernel), "optimizer" (every parameter's SGD/AdamW update as one
  /// multi-tensor kernel). Fusions never change results beyond fp32
  /// reassociation; `--fusion none` gives the unfused step to compare.
  std::string fusion = "all";
  static constexpr const char *kFusionKinds[] = {"linear", "norm",
                                                 "elementwise", "optimizer"};
  /// True if fusion kind `kind` (one of kFusionKinds) is on.
  bool fuses(llvm::StringRef kind) const;
  /// Gradient bucketing and overlap (tsr-overlap-gradient-collectives):
  /// data-parallel gradient all-reduces are fused into buckets of about
  /// this many MiB and started, non-blocking, as soon as their gradients
  /// are ready; 0 starts each alone; negative keeps them synchronous.
  double bucketMb = -1;
  /// Compute type of the forward and backward (tsr-mixed-precision):
  /// "fp32", "bf16" (bf16 activations and gradients, the DP gradient
  /// all-reduce in bf16, fp32 master weights and optimizer state) or
  /// "fp16" (the same in fp16, with static or dynamic loss scaling;
  /// Micikevicius et al. 2018). bf16/fp16 are rejected with pipelining (the
  /// micro-batch accumulators are f32), fp16 also with ZeRO (the unscale sits
  /// between the gradient's reduction and its update).
  std::string precision = "fp32";
  /// fp16's static loss scale S (--loss-scale): the backward seed is
  /// multiplied by S and each gradient by 1/S before its update. Must be a
  /// power of two > 0. Setting it with another precision is an error. A
  /// static S can overflow fp16 (65504): steps are not skipped. Unset, fp16
  /// uses dynamic loss scaling (below), as Megatron-LM does.
  std::optional<double> lossScale;
  /// fp16 without --loss-scale: dynamic loss scaling (Micikevicius et al.
  /// 2018; Megatron-LM's --initial-loss-scale, --loss-scale-window,
  /// --min-loss-scale). The scale starts at initialLossScale (a power of
  /// two > 0, default kDefaultInitialLossScale, the static default, so a
  /// run equals a static-1024 one until its first overflow or doubling;
  /// Megatron-LM's 2^32 or torch.cuda.amp's 2^16 skip a small model's first
  /// steps); a step
  /// whose gradients hold an inf or NaN on any rank is skipped (parameters
  /// and optimizer state unchanged) and halves the scale (not below
  /// minLossScale); lossScaleWindow clean steps in a row double it.
  std::optional<double> initialLossScale;
  int64_t lossScaleWindow = 1000;
  double minLossScale = 1;
  static constexpr double kDefaultInitialLossScale = 1024;
  /// True for fp16 plans without a static --loss-scale, except ZeRO and
  /// interleaved pipeline plans (dynamic scaling is not implemented there
  /// yet: they keep the static kDefaultLossScale). Under gpipe/1f1b each
  /// stage sums its gradients' found-inf terms and tsr-pipeline-split
  /// all-reduces that scalar over pp.
  bool dynamicLossScale() const {
    return precision == "fp16" && !lossScale && zero == 0 &&
           !(pipelined() && virtualStages > 1);
  }
  static constexpr double kDefaultLossScale = 1024;
  /// The static S of fp16 plans (--loss-scale, or kDefaultLossScale for
  /// ZeRO and interleaved pipeline plans), 1 otherwise (dynamic plans have no
  /// single scale: see initialLossScale).
  double effectiveLossScale() const {
    if (precision != "fp16" || dynamicLossScale())
      return 1.0;
    return lossScale.value_or(kDefaultLossScale);
  }
  /// The dynamic scale's initial value (initialLossScale or the default).
  double effectiveInitialLossScale() const {
    return initialLossScale.value_or(kDefaultInitialLossScale);
  }
  /// ZeRO stage over the dp axis (tsr-zero-sharding, Rajbhandari et al.
  /// 2020): 0 off, 1 optimizer state, 2 + gradients, 3 + parameters
  /// sharded. A no-op with dp = 1; not supported with pipelining yet.
  int64_t zero = 0;
  /// Vocab parallelism on the tp axis (Megatron-LM, Shoeybi et al. 2019):
  /// with tp > 1 the embedding table is split over its vocabulary rows
  /// (masked lookup, then an all-reduce) and the LM head with its bias over
  /// its vocabulary columns, and the cross-entropy all-reduces the row max
  /// and sums of exponentials instead of gathering the [N, V] logits.
  /// `--vocab-parallel on|off`; no effect with tp = 1.
  bool vocabParallel = true;
  /// True when the plan splits the vocabulary (vocabParallel and tp > 1).
  bool vocabSplit() const { return vocabParallel && tp > 1; }
  OptimizerConfig optimizer;
  /// Gradient clipping by the global L2 norm (tsr-clip-grad, Megatron-LM's
  /// --clip-grad, torch.nn.utils.clip_grad_norm_): gradients are scaled by
  /// min(1, clipGrad / (norm + 1e-6)) before the optimizer. 0: off. Not
  /// supported with the interleaved schedule yet.
  double clipGrad = 0;

  /// Sequence parallelism (tsr-sharding-annotate's `sp`): "none";
  /// "megatron" (Korthikanti et al. 2022: the residual stream, LayerNorm
  /// and dropout sequence-sharded over the tp axis; TP's all-reduces become
  /// reduce-scatter + all-gather); "ulysses" (DeepSpeed-Ulysses, Jacobs et
  /// al. 2023: the sequence over a new `sp` axis of `spSize` ranks,
  /// all-to-all to head shards around attention); "ring" (ring attention,
  /// Liu et al. 2023, over `sp`: K/V blocks rotate, the sequence striped
  /// for causal balance, Brandon et al. 2023).
  std::string sp = "none";
  int64_t spSize = 1;
  /// Whether the grid has the `sp` axis (ulysses, ring).
  bool hasSpAxis() const { return spHasOwnAxis(sp); }

  /// Every parameter's sharding, by parameter name (`tsr.name`), in
  /// `--explain`'s notation: "[tp, -]" (dim 0 split over tp), "[{3, 64 :
  /// tp}, -]" (dim 0 viewed as 3 chunks of 64, each chunk split over tp),
  /// "replicated". Filled by the sharding search (ShardingSearch.h) and
  /// pinned in part by `--sharding FILE.json`; tsr-sharding-annotate only
  /// applies it. Empty means "not searched yet" (tessera-opt's annotate
  /// then runs the search itself).
  std::map<std::string, std::string> shardings;

  bool pipelined() const { return pp > 1 || microBatches > 1; }
  /// The grid: axis names and sizes in the IR's axis order (dp, tp, [sp],
  /// [pp, mb]); gridOf (common/plan/Grid.h) is the one derivation, which
  /// tsr-sharding-annotate shares.
  GridSpec grid() const { return gridOf(dp, tp, pp, microBatches, sp, spSize); }
  /// grid().names and grid().shape.
  std::vector<std::string> gridAxisNames() const { return grid().names; }
  std::vector<int64_t> gridShape() const { return grid().shape; }
  /// The grid axes that are ranks (gridAxisNames() without the virtual
  /// "mb"), in the IR's axis order.
  std::vector<std::string> rankAxisNames() const {
    std::vector<std::string> names = gridAxisNames();
    llvm::erase(names, "mb");
    return names;
  }
  /// The rank order (`--rank-order`): the rank axes, slowest first. World
  /// ranks are laid out row-major over them in this order, the last
  /// fastest; mpirun/srun place consecutive ranks on one node, so the
  /// fastest axes' groups stay inside a node. Empty means
  /// defaultRankOrder(); axes of size 1 may be left out. Independent of the
  /// IR's axis order (dp, tp, [sp], [pp, mb]), which layouts and collectives
  /// refer to.
  std::vector<std::string> rankOrder;
  /// Megatron-LM's order restricted to the plan's rank axes: pp, dp, sp, tp
  /// (tp fastest, inside a node; pp slowest). {"dp", "tp"} for a 2-D plan,
  /// the IR's order there.
  std::vector<std::string> defaultRankOrder() const {
    std::vector<std::string> axes = rankAxisNames(), order;
    for (const char *name : {"pp", "dp", "sp", "tp"})
      if (llvm::is_contained(axes, name))
        order.push_back(name);
    return order;
  }
  /// rankOrder, or defaultRankOrder() when it is empty. Rank axes of size
  /// 1, which rankOrder may leave out, are put first (slowest; where they
  /// go changes no rank's coordinates).
  std::vector<std::string> effectiveRankOrder() const {
    if (rankOrder.empty())
      return defaultRankOrder();
    std::vector<std::string> order;
    for (const std::string &a : defaultRankOrder())
      if (!llvm::is_contained(rankOrder, a))
        order.push_back(a);
    order.insert(order.end(), rankOrder.begin(), rankOrder.end());
    return order;
  }
  /// The node mapping the plan promises (issue 28): ranks per node, the
  /// `--cluster`'s devices_per_node; world rank r runs on node r /
  /// ranksPerNode. 0 (no --cluster) promises none. Manifest: "grid":
  /// {"ranks_per_node"} when > 0; common/cluster/Placement.h derives which
  /// axes are node-local, and tessera-run checks the job against it.
  int64_t ranksPerNode = 0;
  /// The rank axes in effectiveRankOrder() with their sizes (Placement.h).
  RankOrderAxes rankOrderAxes() const {
    RankOrderAxes layout;
    for (const std::string &a : effectiveRankOrder()) {
      layout.names.push_back(a);
      layout.sizes.push_back(rankAxisSize(a));
    }
    return layout;
  }
  /// Size of the rank axis `name` (1 if the plan has no such axis).
  int64_t rankAxisSize(llvm::StringRef name) const {
    return grid().axisSize(name);
  }

  /// MPI ranks: dp · tp · pp · sp (micro-batches are not ranks).
  int64_t numRanks() const { return dp * tp * pp * (hasSpAxis() ? spSize : 1); }

  /// Checks the degrees, the schedule and the optimizer settings; the error
  /// names the flag.
  llvm::Error validate() const;
  /// The plan as the artifact's manifest holds it (Artifact.h; the manifest
  /// adds the program's arguments and what the passes found):
  ///   "grid": {"axes", "shape", "rank_order"[, "ranks_per_node" when
  ///   > 0]}, "optimizer": {"name", "lr",
  ///   "weight_decay"[, "beta1", "beta2", "eps"]}, "recompute",
  ///   "precision", ["bucket_mb" when >= 0], ["loss_scale" with a static fp16
  ///   scale], ["dynamic_loss_scale": {"initial", "window", "min"} with a
  ///   dynamic one],
  ///   ["vocab_parallel": {"enabled"} with tp > 1], ["sequence_parallel":
  ///   {"kind", "size"}], ["zero": {"stage"} when > 0], ["pipeline":
  ///   {"pp_axis", "mb_axis", "stages", "virtual_stages", "micro_batches",
  ///   "schedule"[, "pp_stages"]}], ["shardings": {name: layout text} when
  ///   any].
  llvm::json::Object toJSON() const;
  /// Reads a plan back from toJSON's keys (a manifest, whose other keys are
  /// ignored). The weight decay and loss scale read back are the effective
  /// ones. Errors name the key that is missing or has the wrong type; the
  /// plan read is not validate()d.
  static llvm::Expected<Plan> fromJSON(const llvm::json::Object &json);
};

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_PLAN_H

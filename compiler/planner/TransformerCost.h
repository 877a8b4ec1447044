//===- TransformerCost.h - analytic step model of a transformer -*- C++ -*-===//
//
// The analytic half of the planner's cost model (issue 6): the step time and
// per-rank memory of a stack of identical transformer layers under a
// parallel plan (dp, tp, pp, sequence parallelism, ZeRO, micro-batching,
// interleaving, recomputation) on a Cluster, from shapes alone. It needs no
// IR and no weights, so the plan search can score 10^5 candidates for a
// 175B-parameter model in a second. tsr-level facts enter through
// TransformerShape, which ModelShape.h reads from the imported IR.
//
// Per micro-batch and layer, on one rank (b micro-batch size, s sequence,
// h hidden, a heads, f FFN width, V vocabulary, t = tp, c = Ulysses / ring
// size, e bytes per activation element):
//
//  - GEMMs (forward QKV [bs, h]x[h, 3h/t], scores and P·V per head, output
//    [bs, h/t]x[h/t, h], MLP [bs, h]x[h, f/t] and [bs, f/t]x[f/t, h]; the
//    backward's two GEMMs per forward GEMM) each take gemmSeconds: a
//    measured rate from the cluster's GEMM table, or the roofline
//    max(2mnk / (peak · gemmPeakFraction), bytes / memoryBandwidth).
//    Forward FLOPs 24bsh^2 + 4bs^2h for f = 4h, as Narayanan et al. 2021
//    (Megatron-LM, SC'21, eq. 3).
//  - Memory-bound kernels (LayerNorm, GeLU, bias + dropout + residual, and,
//    unless attention is fused, Megatron's scale-mask-softmax and dropout
//    on the b·a/t·s^2 scores) take bytes / memoryBandwidth, plus
//    cluster.opOverhead per kernel.
//  - Tensor parallelism (Shoeybi et al. 2019): 2 all-reduces of b·s·h·e in
//    the forward, 2 in the backward, 2 more when the forward is recomputed;
//    Megatron-SP (Korthikanti et al. 2022) turns each into a reduce-scatter
//    plus an all-gather (same bus bytes). Ulysses (Jacobs et al. 2023): 4
//    all-to-alls of b·s/c·h/t·e per attention, forward and backward. Ring
//    attention (Liu et al. 2023): c-1 K/V block exchanges forward, K/V/dK/dV
//    backward, hidden behind the attention GEMMs when they are longer.
//  - Pipeline (GPipe / 1F1B / interleaved; Huang et al. 2019, Narayanan et
//    al. 2021): step = (M + (p-1)/v) · (t_f + t_b) on the slowest stage,
//    with t_f, t_b including one activation send/recv per chunk boundary
//    (scatter/gather over tp: b·s·h·e / t).
//  - Data parallelism: one all-reduce of the rank's gradients (ZeRO-1/2: a
//    reduce-scatter and an all-gather of the parameters; Rajbhandari et al.
//    2020). Bucketed (overlapped), only what exceeds the last
//    micro-batch's backward is exposed.
//  - ZeRO-3 (and PyTorch FSDP, Zhao et al. 2023) works layer by layer: per
//    layer and micro-batch an all-gather of its parameters forward, another
//    backward, and a reduce-scatter of its gradients, each a collective of
//    its own (its α·(n-1) latency paid per layer, as MiCS, Zhang et al.
//    2022, measures it dominating at hundreds of ranks). Prefetched, a
//    layer takes max(compute, gather) forward and max(compute, gather +
//    reduce-scatter) backward; the first gather of each pass, and the
//    embedding's and head's collectives, are exposed. The unsharded layer
//    and the prefetched next one are in memory.
//  - The optimizer update streams parameters, gradients and state once.
//  - Every kernel time is multiplied by cluster.computeScale (1 for the
//    presets), as in StepCost.
//
// Memory per rank (bytes) follows Korthikanti et al. 2022 (Table 2) for
// activations and the ZeRO paper for model state (2 + 2 + K bytes per
// parameter in mixed precision, K = 12 for Adam; fp32: 4 + 4 + 8).
//
// Units: seconds, bytes, FLOP, FLOP/s.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_TRANSFORMERCOST_H
#define TESSERA_COMPILER_PLANNER_TRANSFORMERCOST_H

#include "common/cluster/Cluster.h"
#include "common/cluster/CostModel.h"

#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::planner {

/// What the analytic model knows of a model: `layers` identical transformer
/// layers between an embedding and an LM head.
struct TransformerShape {
  std::string name;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, ffn = 0;
  /// Key/value heads under grouped-query attention (Ainslie et al. 2023):
  /// 0 means `heads` (multi-head attention). tp must divide them (whole K/V
  /// heads per rank, Megatron-LM's rule), and the K/V projections are
  /// kvHeads/heads as wide as the query's.
  int64_t kvHeads = 0;
  int64_t keyValueHeads() const { return kvHeads ? kvHeads : heads; }
  /// Sequences per optimizer step (over all data-parallel ranks).
  int64_t globalBatch = 0;
  /// Parameters of one layer, and of everything else (embeddings, final
  /// norm, an untied LM head).
  double paramsPerLayer = 0, paramsOther = 0;

  /// A GPT (Radford et al. 2019; Brown et al. 2020): ffn = 4h, per layer
  /// 12h^2 + 13h parameters, tied word embedding V·h plus positions s·h
  /// and the final LayerNorm 2h.
  static TransformerShape gpt(int64_t layers, int64_t hidden, int64_t heads,
                              int64_t seq, int64_t vocab, int64_t globalBatch);
  double params() const { return layers * paramsPerLayer + paramsOther; }
  /// Checks that every size is positive; the error names the field.
  llvm::Error validate() const;
};

/// One point of the plan space, the knobs the analytic model scores.
struct Candidate {
  int64_t dp = 1, tp = 1, pp = 1;
  /// "none", "megatron" (over tp), "ulysses" or "ring" (over spSize ranks).
  std::string sp = "none";
  int64_t spSize = 1;
  int64_t zero = 0;
  /// Sequences per micro-batch on one data-parallel rank (b).
  int64_t microBatchSize = 1;
  /// Model chunks per pipeline stage (interleaved 1F1B when > 1).
  int64_t virtualStages = 1;
  /// "gpipe" or "1f1b" (interleaved when virtualStages > 1).
  std::string schedule = "1f1b";
  /// "none", "selective" (attention core) or "full" (whole layer).
  std::string recompute = "none";
  /// DP / ZeRO gradient collectives bucketed and overlapped with backward.
  bool overlapGradients = true;

  int64_t seqRanks() const {
    return sp == "ulysses" || sp == "ring" ? spSize : 1;
  }
  int64_t ranks() const { return dp * tp * pp * seqRanks(); }
  /// Micro-batches per step on each pipeline: B / (dp · b).
  int64_t microBatches(const TransformerShape &shape) const {
    return shape.globalBatch / (dp * microBatchSize);
  }
  /// e.g. "dp=16 tp=8 pp=8 mbs=1 v=1 sp=none zero=0 recompute=full".
  std::string str() const;
};

/// What the model assumes of the runtime.
struct CostOptions {
  /// "fp32", "bf16" or "fp16": activation and gradient dtype (and the
  /// peakFlops entry used).
  std::string precision = "bf16";
  /// "adamw" (K = 12 bytes of fp32 master + two moments in mixed precision,
  /// 8 in fp32) or "sgd" (K = 4: the fp32 master in mixed precision).
  std::string optimizer = "adamw";
  /// Attention fused into one kernel (FlashAttention-style, Dao et al.
  /// 2022; Tessera's tsr.attention): no b·a·s^2 buffer and no traffic on
  /// it. False models Megatron-LM 2021's unfused scale-mask-softmax and
  /// attention dropout.
  bool fusedAttention = true;
  /// Causal attention in a fused kernel computes only the scores on and
  /// below the diagonal (FlashAttention-2, Dao 2023): half the attention
  /// core's FLOPs. Megatron-LM 2021's unfused kernels compute all of them.
  bool causal = false;
  /// The dtype of the layers' linear GEMMs (the four projections and the
  /// MLP, forward and backward) when it differs from `precision`, e.g.
  /// "fp8" for Float8 training (Micikevicius et al. 2022; torchtitan's
  /// Float8Linear): they run at the cluster's peak for it. Empty: the
  /// precision's. Attention, the head and everything else stay in
  /// `precision`.
  std::string linearPrecision;
  /// Dropout after attention and MLP (and on attention probabilities when
  /// unfused), as GPT training uses; affects traffic and activation memory.
  bool dropout = true;
  /// Rank order over the grid, slowest axis first: ranks r and r+1 differ
  /// on the last axis, and rank r runs on node r / devicesPerNode. The
  /// default keeps tp, then sp, inside a node (Megatron-LM's order, and
  /// planner::Plan's default rank order). Axes left out are slowest.
  std::vector<std::string> rankOrder = {"pp", "dp", "sp", "tp"};
};

/// One kind of collective in a step.
struct CollectiveUse {
  Collective kind = Collective::AllReduce;
  /// Grid axis: "dp", "tp", "sp" or "pp".
  std::string axis;
  /// Size of one call as nccl-tests counts it, bytes.
  double bytes = 0;
  /// Calls per step on one rank.
  double count = 0;
  /// Seconds of all calls (count · collectiveSeconds).
  double seconds = 0;
  /// Seconds that are on the critical path (not hidden by compute).
  double exposedSeconds = 0;
  bool withinNode = true;
};

/// Per-rank memory at the peak (the first pipeline stage), bytes.
struct MemoryUse {
  double parameters = 0, gradients = 0, optimizerState = 0, activations = 0;
  double total() const {
    return parameters + gradients + optimizerState + activations;
  }
};

struct Prediction {
  /// Predicted seconds of one optimizer step, and its parts (all on the
  /// critical path; they add up to stepSeconds).
  double stepSeconds = 0;
  double computeSeconds = 0;       ///< GEMMs + memory-bound kernels
  double communicationSeconds = 0; ///< exposed collectives
  double bubbleSeconds = 0;        ///< pipeline idle time
  double optimizerSeconds = 0;     ///< parameter update
  /// Model FLOPs of one step over all ranks: forward + backward, 3 passes
  /// (no recomputation), as PaLM's MFU counts them.
  double modelFlops = 0;
  /// FLOPs executed, recomputation included (Narayanan et al.'s count).
  double hardwareFlops = 0;
  /// modelFlops / (stepSeconds · ranks · peak).
  double mfu = 0;
  /// hardwareFlops / (stepSeconds · ranks): "achieved FLOP/s per GPU" of
  /// Narayanan et al. 2021, Table 1.
  double achievedFlopsPerDevice = 0;
  MemoryUse memory;
  std::vector<CollectiveUse> collectives;
};

/// Scores `c` for `shape` on `cluster`. Requires a candidate that divides
/// the shapes (Search checks; see dividesShapes) and a cluster with a peak
/// for options.precision. Errors: an unknown precision, sp kind, schedule
/// or recompute mode.
llvm::Expected<Prediction> predict(const TransformerShape &shape,
                                   const Candidate &c, const Cluster &cluster,
                                   const CostOptions &options);

/// Per-rank memory of `c` at its peak (the first pipeline stage): the model
/// state by the ZeRO paper's accounting and the activations by Korthikanti
/// et al. 2022 (see TransformerCost.cpp). Cheap: the search checks it
/// before scoring time. Requires divisibilityProblem(shape, c) == "".
MemoryUse predictMemory(const TransformerShape &shape, const Candidate &c,
                        const CostOptions &options);

/// Why `c` cannot split `shape` (e.g. "tp=3 does not divide the 32
/// heads"), or "" when it can.
std::string divisibilityProblem(const TransformerShape &shape,
                                const Candidate &c);

/// Seconds of one GEMM C[m, n] = A[m, k] · B[k, n] (`batch` of them) in
/// `dtype` on one device: gemmWorkSeconds (CostModel.h), i.e. the cluster's
/// measured GEMM table when it has points for dtype, else the
/// roofline max(2mnk / (peak · gemmPeakFraction), (mk + kn + mn) · e /
/// memoryBandwidth). Plus cluster.opOverhead.
double gemmSeconds(const Cluster &cluster, llvm::StringRef dtype, double m,
                   double n, double k, double batch = 1);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_TRANSFORMERCOST_H

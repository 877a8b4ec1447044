//===- TransformerCost.cpp - analytic step model of a transformer ---------===//

#include "compiler/planner/TransformerCost.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace tessera::planner;
using llvm::StringRef;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

TransformerShape TransformerShape::gpt(int64_t layers, int64_t hidden,
                                       int64_t heads, int64_t seq,
                                       int64_t vocab, int64_t globalBatch) {
  TransformerShape s;
  s.name = "gpt";
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.seq = seq;
  s.vocab = vocab;
  s.ffn = 4 * hidden;
  s.globalBatch = globalBatch;
  double h = double(hidden);
  s.paramsPerLayer = 12 * h * h + 13 * h;
  s.paramsOther = double(vocab) * h + double(seq) * h + 2 * h;
  return s;
}

llvm::Error TransformerShape::validate() const {
  for (auto [name, v] :
       {std::pair{"layers", layers}, std::pair{"hidden", hidden},
        std::pair{"heads", heads}, std::pair{"seq", seq},
        std::pair{"vocab", vocab}, std::pair{"ffn", ffn},
        std::pair{"global batch", globalBatch}})
    if (v < 1)
      return fail(llvm::Twine("model shape: ") + name + " must be >= 1, got " +
                  llvm::Twine(v));
  if (hidden % heads != 0)
    return fail("model shape: " + llvm::Twine(heads) +
                " heads do not divide the hidden size " + llvm::Twine(hidden));
  if (kvHeads < 0 || (kvHeads && heads % kvHeads != 0))
    return fail("model shape: " + llvm::Twine(kvHeads) +
                " key/value heads do not divide the " + llvm::Twine(heads) +
                " heads");
  return llvm::Error::success();
}

std::string Candidate::str() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "dp=" << dp << " tp=" << tp << " pp=" << pp;
  if (pp > 1)
    os << " v=" << virtualStages
       << " schedule=" << (virtualStages > 1 ? "interleaved" : schedule);
  os << " mbs=" << microBatchSize;
  if (sp != "none")
    os << " sp=" << sp;
  if (seqRanks() > 1)
    os << " sp-size=" << spSize;
  os << " zero=" << zero << " recompute=" << recompute;
  return out;
}

//===----------------------------------------------------------------------===//
// GEMM model
//===----------------------------------------------------------------------===//

/// gemmWorkSeconds at the cluster's peak for `dtype` (0 when it has none).
static double gemmLikeSeconds(const Cluster &cluster, StringRef dtype, double m,
                              double n, double k, double flops, double bytes) {
  auto it = cluster.peakFlops.find(dtype.str());
  double peak = it == cluster.peakFlops.end() ? 0 : it->second;
  return gemmWorkSeconds(cluster, dtype, peak, m, n, k, flops, bytes);
}

double tessera::planner::gemmSeconds(const Cluster &cluster, StringRef dtype,
                                     double m, double n, double k,
                                     double batch) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
    return 0;
  double e = double(dtypeBytes(dtype));
  double flops = 2 * m * n * k * batch;
  double bytes = (m * k + k * n + m * n) * e * batch;
  return gemmLikeSeconds(cluster, dtype, m, n, k, flops, bytes) +
         cluster.opOverhead;
}

//===----------------------------------------------------------------------===//
// Divisibility
//===----------------------------------------------------------------------===//

std::string tessera::planner::divisibilityProblem(const TransformerShape &s,
                                                  const Candidate &c) {
  std::string out;
  llvm::raw_string_ostream os(out);
  int64_t cs = c.seqRanks();
  int64_t headRanks = c.tp * (c.sp == "ulysses" ? cs : 1);
  if (s.heads % headRanks != 0) {
    if (c.sp == "ulysses")
      os << "tp x sp-size = " << c.tp * cs << " does not divide the " << s.heads
         << " heads";
    else
      os << "tp=" << c.tp << " does not divide the " << s.heads << " heads";
  } else if (s.keyValueHeads() % headRanks != 0) {
    os << (c.sp == "ulysses" ? "tp x sp-size = " : "tp=") << headRanks
       << " does not divide the " << s.keyValueHeads()
       << " key/value heads (grouped-query attention)";
  } else if (s.ffn % c.tp != 0) {
    os << "tp=" << c.tp << " does not divide the FFN width " << s.ffn;
  } else if (s.layers % (c.pp * c.virtualStages) != 0) {
    os << "pp x v = " << c.pp * c.virtualStages << " does not divide the "
       << s.layers << " layers";
  } else if (s.globalBatch % (c.dp * c.microBatchSize) != 0) {
    os << "dp x micro-batch size = " << c.dp * c.microBatchSize
       << " does not divide the global batch " << s.globalBatch;
  } else if (s.seq % cs != 0 || (c.sp == "megatron" && s.seq % c.tp != 0)) {
    os << (c.sp == "megatron" ? "tp" : "sp-size") << "="
       << (c.sp == "megatron" ? c.tp : cs)
       << " does not divide the sequence length " << s.seq;
  } else if (c.virtualStages > 1 &&
             (c.pp < 2 || c.microBatches(s) % c.pp != 0)) {
    os << "interleaving (v=" << c.virtualStages
       << ") needs pp > 1 and micro-batches (" << c.microBatches(s)
       << ") a multiple of pp=" << c.pp;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// The step
//===----------------------------------------------------------------------===//

namespace {

/// Scores one candidate; the fields mirror the symbols of the file comment.
struct StepModel {
  const TransformerShape &shape;
  const Candidate &c;
  const Cluster &cluster;
  const CostOptions &opt;
  Prediction out;

  std::string dtype;
  double e = 2, peak = 0;
  double h, a, s, f, V, b, t, p, v, cs, M, dh;
  bool megatronSP, ulysses, ring;
  std::vector<int64_t> rankShape; // grid sizes in rank order
  std::vector<std::string> rankNames;

  StepModel(const TransformerShape &shape, const Candidate &c,
            const Cluster &cluster, const CostOptions &opt)
      : shape(shape), c(c), cluster(cluster), opt(opt) {}

  // Kernel times carry cluster.computeScale (1 for the presets).
  double gemm(double m, double n, double k, double batch = 1) const {
    return gemmSeconds(cluster, dtype, m, n, k, batch) * cluster.computeScale;
  }
  double memory(double bytes) const {
    return cluster.memoryBandwidth > 0
               ? bytes / cluster.memoryBandwidth * cluster.computeScale
               : 0;
  }
  /// The fraction of the s x s scores a fused attention kernel computes:
  /// a causal FlashAttention skips the blocks above the diagonal.
  double scoreShare() const { return opt.causal ? 0.5 : 1.0; }

  bool withinNode(StringRef axis) const {
    for (size_t i = 0; i < rankNames.size(); ++i)
      if (rankNames[i] == axis)
        return axisWithinNode(cluster, rankShape, i);
    return true;
  }
  int64_t axisSize(StringRef axis) const {
    if (axis == "dp")
      return c.dp;
    if (axis == "tp")
      return c.tp;
    if (axis == "pp")
      return c.pp;
    return c.seqRanks();
  }
  /// Calls per step of every collective recorded: set before recording
  /// (layers per stage x micro-batches for a layer's, micro-batches for a
  /// micro-batch's, 1 for a step's).
  double perStep = 1;

  /// Records `count` calls (per unit of `perStep`) of `kind` over `axis`;
  /// returns the seconds of those `count` calls.
  double collective(Collective kind, StringRef axis, double bytes,
                    double count) {
    int64_t n = axisSize(axis);
    if (count <= 0 || (kind != Collective::SendRecv && n < 2))
      return 0;
    bool inside = withinNode(axis);
    const Cluster::Link &link = cluster.link(collectiveName(kind), inside);
    double one = collectiveSeconds(kind, bytes, n, link);
    CollectiveUse *use = nullptr;
    for (CollectiveUse &u : out.collectives)
      if (u.kind == kind && u.axis == axis && u.bytes == bytes)
        use = &u;
    if (!use) {
      out.collectives.emplace_back();
      use = &out.collectives.back();
      use->kind = kind;
      use->axis = axis.str();
      use->bytes = bytes;
      use->withinNode = inside;
    }
    use->count += count * perStep;
    use->seconds += one * count * perStep;
    use->exposedSeconds += one * count * perStep;
    return one * count;
  }
  /// Marks `seconds` (per unit of perStep) of the collective last recorded
  /// for (kind, axis) as hidden behind compute.
  void hide(Collective kind, StringRef axis, double seconds) {
    for (CollectiveUse &u : out.collectives)
      if (u.kind == kind && u.axis == axis)
        u.exposedSeconds -= seconds * perStep;
  }

  /// Seconds of the attention core's forward (scores, softmax, P·V) on one
  /// rank for one micro-batch and layer, and the FLOPs of it.
  double attentionForward(double *flopsOut = nullptr) const {
    double heads = b * a / t / (ulysses ? cs : 1);
    double sq = ring ? s / cs : s, sk = s;
    double flops = 4 * heads * sq * sk * dh;
    if (flopsOut)
      *flopsOut = flops;
    if (opt.fusedAttention) {
      // One kernel: Q, K, V read and O written; the scores stay on chip.
      double bytes = 4 * heads * sq * dh * e;
      return (gemmLikeSeconds(cluster, dtype, sq, sk, dh, flops * scoreShare(),
                              bytes) +
              cluster.opOverhead) *
             cluster.computeScale;
    }
    double scores = heads * sq * sk;
    double softmax =
        2 * scores * e + (opt.dropout ? 2 * scores * e + scores : 0);
    return gemm(sq, sk, dh, heads) + gemm(sq, dh, sk, heads) + memory(softmax) +
           cluster.opOverhead * (opt.dropout ? 2 : 1);
  }
  double attentionBackward() const {
    double heads = b * a / t / (ulysses ? cs : 1);
    double sq = ring ? s / cs : s, sk = s;
    if (opt.fusedAttention) {
      // FlashAttention's backward recomputes P: 5 GEMM-sized products.
      double flops = 10 * heads * sq * sk * dh * scoreShare();
      double bytes = 8 * heads * sq * dh * e;
      return (gemmLikeSeconds(cluster, dtype, sq, sk, dh, flops, bytes) +
              cluster.opOverhead) *
             cluster.computeScale;
    }
    double scores = heads * sq * sk;
    double softmax =
        3 * scores * e + (opt.dropout ? 2 * scores * e + scores : 0);
    // dS = dP·V^T style: two GEMMs per forward GEMM.
    return gemm(sq, dh, sk, heads) + gemm(sk, dh, sq, heads) +
           gemm(sq, sk, dh, heads) + gemm(sk, sq, dh, heads) + memory(softmax) +
           cluster.opOverhead * (opt.dropout ? 2 : 1);
  }

  llvm::Error run() {
    dtype = opt.precision;
    e = double(dtypeBytes(dtype));
    if (e == 0)
      return fail("unknown precision '" + dtype + "' (fp32, bf16 or fp16)");
    auto pk = cluster.peakFlops.find(dtype);
    if (pk == cluster.peakFlops.end() || !(pk->second > 0))
      return fail("cluster '" + cluster.name + "' has no peak FLOP/s for " +
                  dtype);
    peak = pk->second;
    if (!opt.linearPrecision.empty() &&
        !(cluster.peakFlops.count(opt.linearPrecision) &&
          cluster.peakFlops.at(opt.linearPrecision) > 0))
      return fail("cluster '" + cluster.name + "' has no peak FLOP/s for " +
                  opt.linearPrecision + " (the linear layers' precision)");
    if (!llvm::is_contained({"none", "megatron", "ulysses", "ring"}, c.sp))
      return fail("unknown sequence parallelism '" + c.sp + "'");
    if (!llvm::is_contained({"none", "selective", "full"}, c.recompute))
      return fail("unknown recompute mode '" + c.recompute + "'");
    if (!llvm::is_contained({"gpipe", "1f1b"}, c.schedule))
      return fail("unknown schedule '" + c.schedule + "'");
    if (std::string why = divisibilityProblem(shape, c); !why.empty())
      return fail(why);

    h = double(shape.hidden);
    a = double(shape.heads);
    s = double(shape.seq);
    f = double(shape.ffn);
    V = double(shape.vocab);
    b = double(c.microBatchSize);
    t = double(c.tp);
    p = double(c.pp);
    v = double(c.virtualStages);
    cs = double(c.seqRanks());
    M = double(c.microBatches(shape));
    dh = h / a;
    megatronSP = c.sp == "megatron" && c.tp > 1;
    ulysses = c.sp == "ulysses" && c.spSize > 1;
    ring = c.sp == "ring" && c.spSize > 1;
    // Axes the order leaves out go first (slowest), as Plan's
    // effectiveRankOrder puts them.
    for (const char *axis : {"pp", "dp", "sp", "tp"})
      if (!llvm::is_contained(opt.rankOrder, axis)) {
        rankNames.push_back(axis);
        rankShape.push_back(axisSize(axis));
      }
    for (const std::string &axis : opt.rankOrder) {
      rankNames.push_back(axis);
      rankShape.push_back(axisSize(axis));
    }

    // ---- One layer, one micro-batch, one rank. ----
    double tokens = b * s / cs;                        // rows of the GEMMs
    double tokensEW = megatronSP ? b * s / t : tokens; // rows elsewhere
    struct G {
      double m, n, k, batch;
    };
    // Q, K and V projections: K and V are kvHeads/heads as wide under GQA.
    const double qkv =
        h * (1 + 2 * double(shape.keyValueHeads()) / double(shape.heads));
    const G gemms[] = {{tokens, qkv / t, h, 1},
                       {tokens, h, h / t, 1},
                       {tokens, f / t, h, 1},
                       {tokens, h, f / t, 1}};
    double fwdGemm = 0, bwdGemm = 0;
    std::string linear =
        opt.linearPrecision.empty() ? dtype : opt.linearPrecision;
    auto linearGemm = [&](double m, double n, double k, double batch) {
      return gemmSeconds(cluster, linear, m, n, k, batch) *
             cluster.computeScale;
    };
    for (const G &g : gemms) {
      fwdGemm += linearGemm(g.m, g.n, g.k, g.batch);
      bwdGemm += linearGemm(g.m, g.k, g.n, g.batch) +
                 linearGemm(g.k, g.n, g.m, g.batch);
    }
    double attnF = attentionForward(), attnB = attentionBackward();
    // Memory-bound kernels: 2 LayerNorms, 2 residual adds (+ dropout and
    // its mask), the GeLU.
    double ewBytes =
        2 * 2 * tokensEW * h * e + 2 * 3 * tokensEW * h * e +
        (opt.dropout ? 2 * (2 * tokensEW * h * e + tokensEW * h) : 0) +
        2 * tokens * (f / t) * e;
    double ewKernels = opt.dropout ? 7 : 5;
    double ewF = memory(ewBytes) + ewKernels * cluster.opOverhead;
    double ewB = memory(2 * ewBytes) + ewKernels * cluster.opOverhead;

    // Tensor / sequence parallel collectives of one layer.
    double layersPerStage = double(shape.layers) / p;
    perStep = M * layersPerStage;
    double act = b * (s / cs) * h * e; // the full [b, s/c, h] activation
    auto tpPair = [&](double count) {
      if (c.tp < 2)
        return 0.0;
      if (megatronSP)
        return collective(Collective::AllGather, "tp", act, count) +
               collective(Collective::ReduceScatter, "tp", act, count);
      return collective(Collective::AllReduce, "tp", act, count);
    };
    double headShard = b * (s / cs) * (h / t) * e; // one rank's Q (or K, V, O)
    auto ulyssesA2A = [&](double count) {
      return ulysses ? collective(Collective::AllToAll, "sp", headShard, count)
                     : 0.0;
    };
    // Ring attention: c-1 exchanges of K and V (forward), of K, V, dK, dV
    // (backward), each hidden behind that step's block of attention.
    auto ringExposed = [&](double tensors, double attnSeconds) {
      if (!ring)
        return 0.0;
      double total =
          collective(Collective::SendRecv, "sp", tensors * headShard, cs - 1);
      double hidden = std::min(total, attnSeconds * (cs - 1) / cs);
      hide(Collective::SendRecv, "sp", hidden);
      return total - hidden;
    };

    double fwdComm = tpPair(2) + ulyssesA2A(4) + ringExposed(2, attnF);
    double bwdComm = tpPair(2) + ulyssesA2A(4) + ringExposed(4, attnB);
    double layerF = fwdGemm + attnF + ewF + fwdComm;
    double layerB = bwdGemm + attnB + ewB + bwdComm;
    if (c.recompute == "full")
      layerB += fwdGemm + attnF + ewF + tpPair(2) + ulyssesA2A(4) +
                ringExposed(2, attnF);
    else if (c.recompute == "selective")
      layerB += attnF;

    // ZeRO-3 (Rajbhandari et al. 2020; PyTorch FSDP, Zhao et al. 2023)
    // gathers each layer's parameters before the layer runs, forward and
    // backward, and reduce-scatters its gradients after its backward, one
    // collective per layer and micro-batch. Layer i+1's gather is
    // prefetched behind layer i's compute, so a layer takes the longer of
    // its compute and its collectives; the backward's gather and
    // reduce-scatter share the link. The first gather of each pass precedes
    // the first use and is exposed. Full recomputation reruns a layer's
    // forward inside its backward, with the parameters the backward
    // gathered (no third gather).
    double zeroGather = 0, zeroScatter = 0, zeroExposed = 0;
    if (c.dp > 1 && c.zero == 3) {
      double layerBytes = shape.paramsPerLayer / t * e;
      zeroGather = collective(Collective::AllGather, "dp", layerBytes, 2);
      zeroScatter = collective(Collective::ReduceScatter, "dp", layerBytes, 1);
      double ag = zeroGather / 2, rs = zeroScatter;
      double f0 = layerF, b0 = layerB;
      if (c.overlapGradients) {
        layerF = std::max(layerF, ag);
        layerB = std::max(layerB, ag + rs);
      } else {
        layerF += ag;
        layerB += ag + rs;
      }
      zeroExposed = (layerF - f0) + (layerB - b0);
    }

    // Embedding (first stage) and LM head + cross-entropy (last stage).
    double headF = gemm(tokens, V / t, h) + memory(3 * tokens * (V / t) * 4) +
                   3 * cluster.opOverhead;
    double headB = gemm(tokens, h, V / t) + gemm(h, V / t, tokens) +
                   memory(2 * tokens * (V / t) * 4) + 2 * cluster.opOverhead;
    double embedF = memory(2 * tokens * h * e) + cluster.opOverhead;
    double embedB = memory(2 * tokens * h * e) + cluster.opOverhead;
    // Vocab-parallel embedding: its output all-reduced; column-parallel
    // head: its input gradient all-reduced.
    perStep = M;
    if (c.tp > 1) {
      embedF += collective(Collective::AllReduce, "tp", act, 1);
      headB += collective(Collective::AllReduce, "tp", act, 1);
    }

    // ZeRO-3: the first gather of each pass, and the embedding and head
    // (everything outside the layers, gathered and reduce-scattered once
    // per micro-batch, exposed).
    double zeroEdges = 0;
    if (c.dp > 1 && c.zero == 3) {
      zeroEdges = 2 * zeroGather / 2;
      double otherBytes = shape.paramsOther / t * e;
      zeroEdges += collective(Collective::AllGather, "dp", otherBytes, 1) +
                   collective(Collective::ReduceScatter, "dp", otherBytes, 1);
      embedF += zeroEdges / 2;
      embedB += zeroEdges / 2;
    }

    double firstF = layersPerStage * layerF + embedF;
    double firstB = layersPerStage * layerB + embedB;
    double lastF = layersPerStage * layerF + (c.pp > 1 ? 0 : embedF) + headF;
    double lastB = layersPerStage * layerB + (c.pp > 1 ? 0 : embedB) + headB;
    // Pipeline sends: one activation per chunk boundary and micro-batch,
    // scattered over tp (Narayanan et al. 2021, section 4.1).
    if (c.pp > 1) {
      double msg = act / t;
      double send = collective(Collective::SendRecv, "pp", msg, 2 * v);
      firstF += send / 2;
      lastF += send / 2;
      firstB += send / 2;
      lastB += send / 2;
    }
    double tF = std::max(firstF, lastF), tB = std::max(firstB, lastB);

    double bubble = c.pp > 1 ? (p - 1) / v * (tF + tB) : 0;
    double pipelineSeconds = M * (tF + tB) + bubble;

    // ---- Data parallelism and ZeRO. ----
    // The first stage's parameters (it holds the embedding; the last stage's
    // tied head copy is the same size).
    double paramsRank =
        (layersPerStage * shape.paramsPerLayer + shape.paramsOther) / t;
    double gradBytes = paramsRank * e;
    double dpSeconds = 0, dpHideable = 0;
    if (c.dp > 1) {
      perStep = 1;
      if (c.zero == 3) {
        // Costed per layer inside the stage times above.
      } else if (c.zero >= 1) {
        double rs = collective(Collective::ReduceScatter, "dp", gradBytes, 1);
        double ag = collective(Collective::AllGather, "dp", gradBytes, 1);
        dpSeconds = rs + ag;
        // The reduce-scatter overlaps the last backward; the gather of the
        // updated parameters follows the update.
        dpHideable = c.overlapGradients ? std::min(rs, tB) : 0;
      } else {
        dpSeconds = collective(Collective::AllReduce, "dp", gradBytes, 1);
        dpHideable = c.overlapGradients ? tB : 0;
      }
    }
    double dpExposed = std::max(0.0, dpSeconds - dpHideable);
    for (CollectiveUse &u : out.collectives)
      if (u.axis == "dp" && dpSeconds > 0)
        u.exposedSeconds = u.seconds * dpExposed / dpSeconds;
    if (c.dp > 1 && c.zero == 3) {
      // Exposed: what the layers' collectives add to the stage times, and
      // the exposed edges, over every micro-batch (the bubble's share is
      // counted as bubble).
      double total = 0;
      for (const CollectiveUse &u : out.collectives)
        if (u.axis == "dp")
          total += u.seconds;
      double exposed = M * (layersPerStage * zeroExposed + zeroEdges);
      for (CollectiveUse &u : out.collectives)
        if (u.axis == "dp" && total > 0)
          u.exposedSeconds = u.seconds * std::min(1.0, exposed / total);
    }

    // ---- Optimizer update: stream state once. ----
    bool mixed = dtype != "fp32";
    double stateBytesPerParam = (opt.optimizer == "adamw" ? 8.0 : 0.0) +
                                4 /*master*/ + e /*grad*/ +
                                (mixed ? 2.0 : 0.0) /*low-precision copy*/;
    double updated = paramsRank / (c.zero >= 1 ? double(c.dp) : 1.0);
    double optimizerSeconds =
        memory(updated * stateBytesPerParam * 2) + 4 * cluster.opOverhead;

    // ---- Totals. ----
    double commExposed = 0;
    for (const CollectiveUse &u : out.collectives)
      commExposed += u.exposedSeconds;
    out.stepSeconds = pipelineSeconds + dpExposed + optimizerSeconds;
    out.bubbleSeconds = bubble;
    out.optimizerSeconds = optimizerSeconds;
    out.communicationSeconds = commExposed;
    out.computeSeconds = std::max(0.0, out.stepSeconds - bubble -
                                           optimizerSeconds - commExposed);

    double B = double(shape.globalBatch);
    double layerFlops = 2 * B * s * (4 * h * h + 2 * h * f) + 4 * B * s * s * h;
    double headFlops = 2 * B * s * h * V;
    out.modelFlops = 3 * (double(shape.layers) * layerFlops + headFlops);
    out.hardwareFlops = out.modelFlops;
    if (c.recompute == "full")
      out.hardwareFlops += double(shape.layers) * layerFlops;
    else if (c.recompute == "selective")
      out.hardwareFlops += double(shape.layers) * 4 * B * s * s * h;
    double ranks = double(c.ranks());
    out.mfu = out.modelFlops / (out.stepSeconds * ranks * peak);
    out.achievedFlopsPerDevice = out.hardwareFlops / (out.stepSeconds * ranks);

    out.memory = predictMemory(shape, c, opt);
    return llvm::Error::success();
  }
};

} // namespace

MemoryUse tessera::planner::predictMemory(const TransformerShape &shape,
                                          const Candidate &c,
                                          const CostOptions &opt) {
  double e = double(dtypeBytes(opt.precision));
  bool mixed = opt.precision != "fp32";
  double h = double(shape.hidden), a = double(shape.heads),
         s = double(shape.seq), V = double(shape.vocab);
  double b = double(c.microBatchSize), t = double(c.tp), p = double(c.pp),
         v = double(c.virtualStages), cs = double(c.seqRanks()),
         d = double(c.dp), M = double(c.microBatches(shape));
  bool megatronSP = c.sp == "megatron" && c.tp > 1;
  double layersPerStage = double(shape.layers) / p;
  double paramsRank =
      (layersPerStage * shape.paramsPerLayer + shape.paramsOther) / t;

  MemoryUse mem;
  // ZeRO accounting (Rajbhandari et al. 2020): 2 + 2 + K bytes per
  // parameter in mixed precision (K = 12 for Adam: fp32 master, m, v; 4 for
  // SGD: the master), 4 + 4 + 8 in fp32 (Adam) or 4 + 4 (SGD).
  double paramBytes = mixed ? 2 : 4;
  double optBytes = (opt.optimizer == "adamw" ? 8.0 : 0.0) + (mixed ? 4 : 0);
  mem.parameters = paramsRank * paramBytes / (c.zero >= 3 ? d : 1);
  // ZeRO-3 holds the layer being computed and the prefetched next one
  // unsharded.
  if (c.zero >= 3 && c.dp > 1)
    mem.parameters += 2 * shape.paramsPerLayer / t * paramBytes;
  mem.gradients = paramsRank * e / (c.zero >= 2 ? d : 1);
  mem.optimizerState = paramsRank * optBytes / (c.zero >= 1 ? d : 1);
  // Activations of one layer and micro-batch: Korthikanti et al. 2022,
  // Table 2, in 16-bit bytes of s·b·h (scaled by e / 2): 10 + 24/t without
  // and 34/t with Megatron-SP, plus 5as/(ht) for the unfused attention's
  // scores, softmax and dropout mask (none when fused or recomputed); full
  // recomputation keeps only the layer input. Ulysses and ring split it all
  // over the sequence ranks.
  double sbh = s * b * h / cs;
  double scoresTerm =
      opt.fusedAttention || c.recompute != "none" ? 0 : 5 * a * s / (h * t);
  double perLayer;
  if (c.recompute == "full")
    perLayer = 2 * sbh / (megatronSP ? t : 1);
  else
    perLayer = sbh * ((megatronSP ? 34 / t : 10 + 24 / t) + scoresTerm);
  perLayer *= e / 2;
  // Micro-batches in flight on the first stage: 1F1B keeps p (interleaved:
  // p·(1 + (p-1)/(p·v)), Narayanan et al. 2021), GPipe all M.
  double inFlight;
  if (c.pp == 1)
    inFlight = 1;
  else if (c.schedule == "gpipe" && c.virtualStages == 1)
    inFlight = M;
  else
    inFlight = std::min(M, p) * (v > 1 ? 1 + (p - 1) / (p * v) : 1.0);
  mem.activations = perLayer * layersPerStage * inFlight;
  // The head's fp32 logits and their gradient (last stage; the only stage
  // without pipelining, which is then also the fullest).
  if (c.pp == 1)
    mem.activations += 2 * (b * s / cs) * (V / t) * 4;
  return mem;
}

llvm::Expected<Prediction>
tessera::planner::predict(const TransformerShape &shape, const Candidate &c,
                          const Cluster &cluster, const CostOptions &options) {
  StepModel m(shape, c, cluster, options);
  if (llvm::Error err = m.run())
    return std::move(err);
  return std::move(m.out);
}

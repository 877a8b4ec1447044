//===- TransformerCostTest.cpp - the analytic step model, by hand ---------===//

#include "compiler/planner/TransformerCost.h"

#include "bench/planner/Torchtitan.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace tessera::planner;

namespace {

/// A one-node machine with round numbers: 100 TFLOP/s bf16, GEMMs at half of
/// it, 1 TB/s memory, links of 100 GB/s and no latency.
Cluster roundCluster(int64_t devicesPerNode = 8, int64_t nodes = 1) {
  Cluster c;
  c.name = "round";
  c.nodes = nodes;
  c.devicesPerNode = devicesPerNode;
  c.peakFlops = {{"bf16", 100e12}, {"fp32", 50e12}};
  c.memoryBytes = 80e9;
  c.memoryBandwidth = 1e12;
  c.gemmPeakFraction = 0.5;
  c.intraNode = {100e9, 0};
  c.interNode = {10e9, 0};
  return c;
}

const CollectiveUse *find(const Prediction &p, Collective kind,
                          llvm::StringRef axis) {
  for (const CollectiveUse &u : p.collectives)
    if (u.kind == kind && u.axis == axis)
      return &u;
  return nullptr;
}

TEST(TransformerCost, GemmRoofline) {
  Cluster c = roundCluster();
  // 2·1024^3 FLOP at 50 TFLOP/s; 3 MiB·2 bytes at 1 TB/s is less.
  EXPECT_NEAR(gemmSeconds(c, "bf16", 1024, 1024, 1024),
              2.0 * 1024 * 1024 * 1024 / 50e12, 1e-12);
  // A matrix-vector product is memory-bound: (1024·1024 + 1024 + 1024)
  // elements of 2 bytes at 1 TB/s.
  EXPECT_NEAR(gemmSeconds(c, "bf16", 1024, 1, 1024),
              (1024.0 * 1024 + 1024 + 1024) * 2 / 1e12, 1e-12);
  // A batch of 4 is 4 times one.
  EXPECT_NEAR(gemmSeconds(c, "bf16", 256, 256, 256, 4),
              4 * gemmSeconds(c, "bf16", 256, 256, 256), 1e-15);
  c.opOverhead = 1e-6;
  EXPECT_NEAR(gemmSeconds(c, "bf16", 1024, 1024, 1024),
              2.0 * 1024 * 1024 * 1024 / 50e12 + 1e-6, 1e-12);
}

TEST(TransformerCost, GemmTableNearestPoint) {
  Cluster c = roundCluster();
  c.gemm = {{"fp32", 64, 64, 64, 1e10}, {"fp32", 1024, 1024, 1024, 4e10}};
  // (900, 1000, 1100) is nearest to the 1024 point in log space.
  EXPECT_NEAR(gemmSeconds(c, "fp32", 900, 1000, 1100),
              2.0 * 900 * 1000 * 1100 / 4e10, 1e-12);
  EXPECT_NEAR(gemmSeconds(c, "fp32", 50, 70, 64), 2.0 * 50 * 70 * 64 / 1e10,
              1e-15);
  // No bf16 point: the roofline.
  EXPECT_NEAR(gemmSeconds(c, "bf16", 1024, 1024, 1024),
              2.0 * 1024 * 1024 * 1024 / 50e12, 1e-12);
}

TEST(TransformerCost, FlopsAreNarayananEquation3) {
  TransformerShape s = TransformerShape::gpt(24, 2304, 24, 2048, 51200, 512);
  Cluster c = roundCluster(8, 4);
  CostOptions o;
  Candidate full;
  full.dp = 32;
  full.microBatchSize = 4;
  full.recompute = "full";
  llvm::Expected<Prediction> p = predict(s, full, c, o);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  double B = 512, sq = 2048, l = 24, h = 2304, V = 51200;
  // With recomputation: 96 B s l h^2 (1 + s/6h + V/16lh).
  EXPECT_NEAR(p->hardwareFlops / (96 * B * sq * l * h * h *
                                  (1 + sq / (6 * h) + V / (16 * l * h))),
              1.0, 1e-12);
  // Model FLOPs (3 passes): 72 B s l h^2 (1 + s/6h + V/12lh).
  EXPECT_NEAR(p->modelFlops / (72 * B * sq * l * h * h *
                               (1 + sq / (6 * h) + V / (12 * l * h))),
              1.0, 1e-12);
  EXPECT_NEAR(p->mfu, p->modelFlops / (p->stepSeconds * 32 * 100e12), 1e-12);
  EXPECT_NEAR(p->achievedFlopsPerDevice,
              p->hardwareFlops / (p->stepSeconds * 32), 1e-3);
}

TEST(TransformerCost, TensorParallelAllReducesByHand) {
  // 2 layers, h = 1024, s = 512, b = 2, bf16: each all-reduce is b·s·h·2 =
  // 2 MiB; per layer 2 forward + 2 backward, plus the vocab-parallel
  // embedding's and the head's: 4·2 + 2 = 10 per micro-batch, 2 of them.
  TransformerShape s = TransformerShape::gpt(2, 1024, 16, 512, 32000, 4);
  Cluster c = roundCluster();
  Candidate tp;
  tp.tp = 2;
  tp.microBatchSize = 2;
  llvm::Expected<Prediction> p = predict(s, tp, c, CostOptions());
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  const CollectiveUse *ar = find(*p, Collective::AllReduce, "tp");
  ASSERT_NE(ar, nullptr);
  EXPECT_DOUBLE_EQ(ar->bytes, 2.0 * 512 * 1024 * 2);
  EXPECT_DOUBLE_EQ(ar->count, 2 * (4 * 2 + 2));
  // Ring all-reduce over 2 ranks at 100 GB/s: 2·(1/2)·bytes / β each.
  EXPECT_NEAR(ar->seconds, ar->count * ar->bytes / 100e9, 1e-12);
  EXPECT_TRUE(ar->withinNode);
  EXPECT_EQ(find(*p, Collective::AllReduce, "dp"), nullptr);

  // Megatron-SP: the same bus bytes as reduce-scatter + all-gather.
  tp.sp = "megatron";
  llvm::Expected<Prediction> sp = predict(s, tp, c, CostOptions());
  ASSERT_TRUE(static_cast<bool>(sp));
  const CollectiveUse *ag = find(*sp, Collective::AllGather, "tp");
  const CollectiveUse *rs = find(*sp, Collective::ReduceScatter, "tp");
  ASSERT_TRUE(ag && rs);
  // 2 forward + 2 backward per layer, 2 layers, 2 micro-batches.
  EXPECT_DOUBLE_EQ(ag->count, 16);
  EXPECT_DOUBLE_EQ(rs->count, 16);
  // Each moves (n-1)/n = 1/2 of its size over the bus.
  EXPECT_NEAR(ag->seconds + rs->seconds, 32 * ag->bytes / 2 / 100e9, 1e-12);
}

TEST(TransformerCost, PipelineBubble) {
  // p = 4, M = 8: idle (p-1)/(M+p-1) of the pipelined time; interleaving
  // with v = 2 halves the idle time.
  TransformerShape s = TransformerShape::gpt(8, 1024, 16, 512, 32000, 8);
  Cluster c = roundCluster();
  Candidate pp;
  pp.pp = 4;
  pp.microBatchSize = 1;
  llvm::Expected<Prediction> p = predict(s, pp, c, CostOptions());
  ASSERT_TRUE(static_cast<bool>(p));
  double pipelined = p->stepSeconds - p->optimizerSeconds;
  EXPECT_NEAR(p->bubbleSeconds / pipelined, 3.0 / 11.0, 1e-9);
  pp.virtualStages = 2;
  llvm::Expected<Prediction> v2 = predict(s, pp, c, CostOptions());
  ASSERT_TRUE(static_cast<bool>(v2));
  EXPECT_NEAR(v2->bubbleSeconds / (v2->stepSeconds - v2->optimizerSeconds),
              1.5 / 9.5, 1e-9);
  const CollectiveUse *send = find(*v2, Collective::SendRecv, "pp");
  ASSERT_NE(send, nullptr);
  EXPECT_DOUBLE_EQ(send->count, 8 * 2 * 2); // M · 2 directions · v
}

TEST(TransformerCost, MemoryByZeroAndKorthikanti) {
  TransformerShape s = TransformerShape::gpt(4, 1024, 16, 2048, 32000, 16);
  Candidate c;
  c.dp = 4;
  c.tp = 2;
  c.microBatchSize = 1;
  CostOptions o;
  o.fusedAttention = false;
  double params = (4 * s.paramsPerLayer + s.paramsOther) / 2;
  MemoryUse m = predictMemory(s, c, o);
  EXPECT_DOUBLE_EQ(m.parameters, 2 * params);
  EXPECT_DOUBLE_EQ(m.gradients, 2 * params);
  EXPECT_DOUBLE_EQ(m.optimizerState, 12 * params);
  // Korthikanti et al. Table 2: s·b·h·(10 + 24/t + 5as/(ht)) per layer.
  double sbh = 2048.0 * 1 * 1024;
  double layer = sbh * (10 + 24.0 / 2 + 5.0 * 16 * 2048 / (1024 * 2));
  double logits = 2 * 2048.0 * (32000 / 2) * 4;
  EXPECT_DOUBLE_EQ(m.activations, 4 * layer + logits);

  c.zero = 3;
  MemoryUse z3 = predictMemory(s, c, o);
  // The shards, plus the layer being computed and the prefetched next one
  // unsharded.
  EXPECT_DOUBLE_EQ(z3.parameters,
                   2 * params / 4 + 2 * 2 * s.paramsPerLayer / 2);
  EXPECT_DOUBLE_EQ(z3.gradients, 2 * params / 4);
  EXPECT_DOUBLE_EQ(z3.optimizerState, 12 * params / 4);
  c.zero = 1;
  MemoryUse z1 = predictMemory(s, c, o);
  EXPECT_DOUBLE_EQ(z1.gradients, 2 * params);
  EXPECT_DOUBLE_EQ(z1.optimizerState, 12 * params / 4);

  // Megatron-SP: 34/t; selective recomputation drops the scores term.
  c.zero = 0;
  c.sp = "megatron";
  c.recompute = "selective";
  EXPECT_DOUBLE_EQ(predictMemory(s, c, o).activations,
                   4 * sbh * 34 / 2 + logits);
  // Full recomputation keeps the layer input (over tp with SP).
  c.recompute = "full";
  EXPECT_DOUBLE_EQ(predictMemory(s, c, o).activations,
                   4 * 2 * sbh / 2 + logits);
  // 1F1B on the first stage keeps p micro-batches.
  Candidate pp;
  pp.pp = 2;
  pp.microBatchSize = 1;
  pp.recompute = "full";
  EXPECT_DOUBLE_EQ(predictMemory(s, pp, o).activations, 2 * 2 * sbh * 2);
}

TEST(TransformerCost, DivisibilityNamesTheShape) {
  TransformerShape s = TransformerShape::gpt(6, 768, 12, 1024, 50304, 8);
  Candidate c;
  c.tp = 5;
  EXPECT_EQ(divisibilityProblem(s, c), "tp=5 does not divide the 12 heads");
  c.tp = 1;
  c.pp = 4;
  EXPECT_EQ(divisibilityProblem(s, c),
            "pp x v = 4 does not divide the 6 layers");
  c.pp = 1;
  c.dp = 3;
  EXPECT_EQ(divisibilityProblem(s, c),
            "dp x micro-batch size = 3 does not divide the global batch 8");
  c.dp = 1;
  c.sp = "ulysses";
  c.spSize = 8;
  EXPECT_EQ(divisibilityProblem(s, c),
            "tp x sp-size = 8 does not divide the 12 heads");
  c.sp = "none";
  c.spSize = 1;
  EXPECT_EQ(divisibilityProblem(s, c), "");
  // predict() refuses what does not divide, naming it.
  c.tp = 5;
  llvm::Expected<Prediction> p = predict(s, c, roundCluster(), CostOptions());
  ASSERT_FALSE(static_cast<bool>(p));
  EXPECT_EQ(llvm::toString(p.takeError()), "tp=5 does not divide the 12 heads");
  c.tp = 1;
  CostOptions fp8;
  fp8.precision = "fp8";
  p = predict(s, c, roundCluster(), fp8);
  ASSERT_FALSE(static_cast<bool>(p));
  EXPECT_NE(llvm::toString(p.takeError()).find("unknown precision 'fp8'"),
            std::string::npos);
}

TEST(TransformerCost, DataParallelOverlapWithBackward) {
  // Bucketed gradients hide behind the last micro-batch's backward; without
  // overlap the all-reduce is all exposed.
  TransformerShape s = TransformerShape::gpt(2, 1024, 16, 512, 32000, 8);
  Cluster c = roundCluster(2, 2);
  Candidate dp;
  dp.dp = 4;
  dp.microBatchSize = 2;
  llvm::Expected<Prediction> hidden = predict(s, dp, c, CostOptions());
  dp.overlapGradients = false;
  llvm::Expected<Prediction> exposed = predict(s, dp, c, CostOptions());
  ASSERT_TRUE(hidden && exposed);
  const CollectiveUse *ar = find(*exposed, Collective::AllReduce, "dp");
  ASSERT_NE(ar, nullptr);
  EXPECT_FALSE(ar->withinNode); // dp = 4 over 2-GPU nodes
  EXPECT_DOUBLE_EQ(ar->exposedSeconds, ar->seconds);
  EXPECT_LT(find(*hidden, Collective::AllReduce, "dp")->exposedSeconds,
            ar->seconds);
  EXPECT_LT(hidden->stepSeconds, exposed->stepSeconds);
  EXPECT_NEAR(exposed->stepSeconds - hidden->stepSeconds,
              ar->seconds -
                  find(*hidden, Collective::AllReduce, "dp")->exposedSeconds,
              1e-12);
}

TEST(TransformerCost, ZeroThreeGathersPerLayer) {
  // ZeRO-3 over dp = 4 (2 nodes of 2): per layer and micro-batch one
  // all-gather forward, one backward, one reduce-scatter, of one layer's
  // parameters; the embedding's once per micro-batch.
  TransformerShape s = TransformerShape::gpt(4, 1024, 16, 512, 32000, 8);
  Cluster c = roundCluster(2, 2);
  Candidate z;
  z.dp = 4;
  z.zero = 3;
  z.microBatchSize = 1; // M = 2
  llvm::Expected<Prediction> p = predict(s, z, c, CostOptions());
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  double layerBytes = s.paramsPerLayer * 2, otherBytes = s.paramsOther * 2;
  double layerGathers = 0, otherGathers = 0, scatters = 0;
  for (const CollectiveUse &u : p->collectives) {
    ASSERT_EQ(u.axis, "dp");
    if (u.kind == Collective::AllGather && u.bytes == layerBytes)
      layerGathers += u.count;
    else if (u.kind == Collective::AllGather && u.bytes == otherBytes)
      otherGathers += u.count;
    else if (u.kind == Collective::ReduceScatter)
      scatters += u.count;
  }
  EXPECT_DOUBLE_EQ(layerGathers, 2 * 4 * 2);
  EXPECT_DOUBLE_EQ(otherGathers, 2);
  EXPECT_DOUBLE_EQ(scatters, 4 * 2 + 2);

  // A slow network: each layer's collectives are longer than its compute,
  // so the step grows by the gathers (latency included, paid per layer)
  // rather than hiding them behind the whole step.
  Cluster slow = c;
  slow.interNode = {1e9, 1e-3};
  llvm::Expected<Prediction> q = predict(s, z, slow, CostOptions());
  ASSERT_TRUE(static_cast<bool>(q));
  double ag =
      collectiveSeconds(Collective::AllGather, layerBytes, 4, slow.interNode);
  double rs = collectiveSeconds(Collective::ReduceScatter, layerBytes, 4,
                                slow.interNode);
  // Per micro-batch: 4 layers forward at ag, 4 backward at ag + rs, plus
  // the first gather of each pass.
  EXPECT_GT(q->stepSeconds, 2 * (4 * ag + 4 * (ag + rs) + 2 * ag));
  EXPECT_GT(q->communicationSeconds, 0.9 * 2 * (4 * ag + 4 * (ag + rs)));
  // The same bytes in one gather per micro-batch (the model before) would
  // pay the latency once; per layer it is paid 3 x 4 times per micro-batch.
  EXPECT_GT(q->stepSeconds, 2 * 3 * 4 * 3 * 1e-3);
}

// torchtitan's Llama 3.1 rows on H100 (bench/planner/Torchtitan.h):
// gemm_peak_fraction fitted on the 8B / 8-GPU row, the others held out,
// each within 15% of the published tokens/s per GPU.
TEST(TransformerCost, TorchtitanRowsWithinFifteenPercent) {
  double frac = torchtitan::fitGemmPeakFraction();
  ASSERT_GT(frac, 0.2);
  ASSERT_LT(frac, 0.6);
  std::vector<double> ratio;
  for (const torchtitan::Row &row : torchtitan::kRows) {
    llvm::Expected<double> t = torchtitan::predictTokensPerSecond(row, frac);
    ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
    ratio.push_back(*t / row.tokensPerSecond);
  }
  // 0, 1: 8B FSDP on 8 and 128 GPUs; 4: 70B FSDP x TP; 5, 6: 405B
  // FSDP x TP x PP, 1F1B and interleaved.
  for (size_t i : {0, 1, 4, 5, 6}) {
    EXPECT_TRUE(torchtitan::kRows[i].checked);
    EXPECT_NEAR(ratio[i], 1.0, 0.15) << torchtitan::kRows[i].name;
  }
  // ZeRO-3 at 128 ranks across 16 nodes costs a little, as measured
  // (5,605 against 5,762: -2.7%).
  EXPECT_LT(ratio[1] * torchtitan::kRows[1].tokensPerSecond,
            ratio[0] * torchtitan::kRows[0].tokensPerSecond);
  // Not asserted within 15%: the two 8B Float8 rows (2, 3), which the
  // model over-predicts (docs/Planner.md); they stay above the bf16 ones.
  EXPECT_GT(ratio[2] * torchtitan::kRows[2].tokensPerSecond,
            ratio[0] * torchtitan::kRows[0].tokensPerSecond);
}

} // namespace

//===- StepCostTest.cpp - predicted step time of a partitioned plan -------===//

#include "compiler/planner/StepCost.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

#include <cmath>

using namespace mlir;
using namespace tessera;
using namespace tessera::planner;

namespace {

class StepCostTest : public ::testing::Test {
protected:
  StepCostTest() {
    context
        .loadDialect<tsr::TsrDialect, func::FuncDialect, shard::ShardDialect>();
  }
  OwningOpRef<ModuleOp> parse(llvm::StringRef text) {
    return parseSourceString<ModuleOp>(text, &context);
  }
  Cluster cluster(llvm::StringRef spec) {
    llvm::Expected<Cluster> c = clusterPreset(spec);
    EXPECT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
    return *c;
  }
  MLIRContext context;
};

// A (dp=2, tp=4) grid: one local bf16 matmul 64x128 · 128x256 and its tp
// all-reduce.
constexpr llvm::StringLiteral kTpModule = R"mlir(
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x4)
  func.func @train_step(%a: tensor<64x128xbf16>, %b: tensor<128x256xbf16>) -> tensor<64x256xbf16> {
    %y = tsr.matmul %a, %b : tensor<64x128xbf16>, tensor<128x256xbf16> -> tensor<64x256xbf16>
    %r = shard.all_reduce %y on @grid grid_axes = [1] : tensor<64x256xbf16> -> tensor<64x256xbf16>
    %s = shard.all_slice %r on @grid grid_axes = [0] slice_axis = 0 : tensor<64x256xbf16> -> tensor<32x256xbf16>
    return %r : tensor<64x256xbf16>
  }
}
)mlir";

TEST_F(StepCostTest, MatmulAndTensorParallelAllReduceByHand) {
  OwningOpRef<ModuleOp> module = parse(kTpModule);
  ASSERT_TRUE(module);
  Cluster h100 = cluster("dgx-h100:1");
  // The preset figures this test is computed with.
  ASSERT_DOUBLE_EQ(h100.peakFlops.at("bf16"), 989e12);
  ASSERT_DOUBLE_EQ(h100.intraNode.bandwidth, 450e9);
  ASSERT_DOUBLE_EQ(h100.intraNode.latency, 3e-6);

  llvm::Expected<StepCost> cost = predictStepCost(*module, h100, "bf16", 0.5);
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());

  // 2·M·N·K = 2·64·256·128 FLOP at 989 TFLOP/s · 0.5.
  double flops = 2.0 * 64 * 256 * 128;
  EXPECT_DOUBLE_EQ(cost->flopsPerRank, flops);
  EXPECT_DOUBLE_EQ(cost->computeSeconds, flops / (989e12 * 0.5));

  // All-reduce of 64·256 bf16 = 32768 bytes over tp = 4 ranks on NVLink:
  // α·2(n−1) + 2(n−1)/n · S/β. The all_slice costs nothing.
  ASSERT_EQ(cost->collectives.size(), 1u);
  const CollectiveCost &ar = cost->collectives[0];
  EXPECT_EQ(ar.kind, "all_reduce");
  EXPECT_EQ(ar.axes, std::vector<int16_t>{1});
  EXPECT_DOUBLE_EQ(ar.bytes, 32768);
  EXPECT_TRUE(ar.withinNode);
  double comm = 3e-6 * 6 + 1.5 * 32768 / 450e9;
  EXPECT_DOUBLE_EQ(ar.seconds, comm);
  EXPECT_DOUBLE_EQ(cost->communicationSeconds, comm);
  EXPECT_DOUBLE_EQ(cost->stepSeconds, flops / (989e12 * 0.5) + comm);
  EXPECT_DOUBLE_EQ(cost->mfu, flops / (cost->stepSeconds * 989e12));
  EXPECT_LT(cost->mfu, 0.5);
  EXPECT_EQ(cost->ranks, 8);
  EXPECT_EQ(cost->axisNames, (std::vector<std::string>{"dp", "tp"}));
}

TEST_F(StepCostTest, SizesAsNcclTestsCountThemAndNetworkAxes) {
  // (dp=2, tp=8) on 2 nodes of 8: tp is node-local, dp and (dp, tp) span.
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x8)
  func.func @train_step(%x: tensor<16x32xf32>, %y: tensor<16x32xf32>) -> (tensor<32x32xf32>, tensor<8x32xf32>, tensor<16x32xf32>) {
    %g = shard.all_gather %x on @grid grid_axes = [0] gather_axis = 0 : tensor<16x32xf32> -> tensor<32x32xf32>
    %s = shard.reduce_scatter %y on @grid grid_axes = [0] scatter_axis = 0 : tensor<16x32xf32> -> tensor<8x32xf32>
    %a = shard.all_to_all %x on @grid grid_axes = [1] split_axis = 0 concat_axis = 1 : tensor<16x32xf32> -> tensor<2x256xf32>
    %r = shard.all_reduce %y on @grid grid_axes = [0, 1] : tensor<16x32xf32> -> tensor<16x32xf32>
    return %g, %s, %r : tensor<32x32xf32>, tensor<8x32xf32>, tensor<16x32xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Cluster c = cluster("dgx-h100:2");
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32", 0.5);
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  ASSERT_EQ(cost->collectives.size(), 4u);
  EXPECT_DOUBLE_EQ(cost->flopsPerRank, 0);
  // all-gather: the gathered result, 32·32·4 bytes, over dp = 2 (network).
  EXPECT_EQ(cost->collectives[0].kind, "all_gather");
  EXPECT_DOUBLE_EQ(cost->collectives[0].bytes, 32 * 32 * 4);
  EXPECT_FALSE(cost->collectives[0].withinNode);
  EXPECT_DOUBLE_EQ(cost->collectives[0].seconds, 8e-6 * 1 + 0.5 * 4096 / 50e9);
  // reduce-scatter: the operand before scattering, 16·32·4 bytes.
  EXPECT_EQ(cost->collectives[1].kind, "reduce_scatter");
  EXPECT_DOUBLE_EQ(cost->collectives[1].bytes, 16 * 32 * 4);
  EXPECT_FALSE(cost->collectives[1].withinNode);
  // all-to-all: one rank's send buffer, over tp = 8 (NVLink).
  EXPECT_EQ(cost->collectives[2].kind, "all_to_all");
  EXPECT_DOUBLE_EQ(cost->collectives[2].bytes, 16 * 32 * 4);
  EXPECT_TRUE(cost->collectives[2].withinNode);
  EXPECT_DOUBLE_EQ(cost->collectives[2].seconds,
                   3e-6 * 7 + 7.0 / 8 * 2048 / 450e9);
  // all-reduce over (dp, tp): n = 16, spans nodes.
  EXPECT_FALSE(cost->collectives[3].withinNode);
  EXPECT_DOUBLE_EQ(cost->collectives[3].seconds,
                   8e-6 * 30 + 30.0 / 16 * 2048 / 50e9);
  // No compute: MFU 0.
  EXPECT_DOUBLE_EQ(cost->mfu, 0);

  // Ranks laid out with tp slowest (rank order tp, dp): now dp's pairs are
  // neighbours in one node and tp's groups of 8 span both nodes.
  llvm::Expected<StepCost> swapped =
      predictStepCost(*module, c, "fp32", 0.5, {"tp", "dp"});
  ASSERT_TRUE(static_cast<bool>(swapped))
      << llvm::toString(swapped.takeError());
  EXPECT_TRUE(swapped->collectives[0].withinNode);  // all-gather over dp
  EXPECT_FALSE(swapped->collectives[2].withinNode); // all-to-all over tp
  EXPECT_GT(swapped->stepSeconds, cost->stepSeconds);
  // The default order is the grid's own.
  llvm::Expected<StepCost> same =
      predictStepCost(*module, c, "fp32", 0.5, {"dp", "tp"});
  ASSERT_TRUE(static_cast<bool>(same));
  EXPECT_DOUBLE_EQ(same->stepSeconds, cost->stepSeconds);
  llvm::Expected<StepCost> bad =
      predictStepCost(*module, c, "fp32", 0.5, {"pp", "dp", "tp"});
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError())
                .find("rank order names axis 'pp', which the grid does not "
                      "have"),
            std::string::npos);
}

TEST_F(StepCostTest, CalibratedGroupLinksByGroupSizeAndStride) {
  // dp=2 x tp=2 on 4 ranks, tp fastest: tp's pairs are ranks {0, 1} (stride
  // 1), dp's {0, 2} (stride 2), the (dp, tp) group all four (stride 1).
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(%x: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>) {
    %t = shard.all_reduce %x on @grid grid_axes = [1] : tensor<1024xf32> -> tensor<1024xf32>
    %d = shard.all_reduce %x on @grid grid_axes = [0] : tensor<1024xf32> -> tensor<1024xf32>
    %w = shard.all_reduce %x on @grid grid_axes = [0, 1] : tensor<1024xf32> -> tensor<1024xf32>
    return %t, %d, %w : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Cluster c;
  c.name = "cpu:4";
  c.devicesPerNode = 4;
  c.peakFlops["fp32"] = 1e10;
  c.intraNode = c.interNode = {1e9, 1e-5};
  auto &groups = c.collectiveLinks["all_reduce"].groups;
  groups.push_back({2, 1, {4e9, 1e-6}});
  groups.push_back({2, 2, {1e8, 1e-4}});
  groups.push_back({4, 1, {2e9, 2e-6}});
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  ASSERT_EQ(cost->collectives.size(), 3u);
  const double bytes = 4096;
  // tp: n = 2, 2 ring steps, bus factor 1, on the stride-1 pairs' link.
  EXPECT_EQ(cost->collectives[0].groupStride, 1);
  EXPECT_DOUBLE_EQ(cost->collectives[0].seconds, 2 * 1e-6 + bytes / 4e9);
  // dp: the stride-2 pairs' link.
  EXPECT_EQ(cost->collectives[1].groupStride, 2);
  EXPECT_DOUBLE_EQ(cost->collectives[1].seconds, 2 * 1e-4 + bytes / 1e8);
  // (dp, tp): all four ranks, 6 ring steps, bus factor 2·3/4.
  EXPECT_EQ(cost->collectives[2].groupStride, 1);
  EXPECT_DOUBLE_EQ(cost->collectives[2].seconds, 6 * 2e-6 + 1.5 * bytes / 2e9);
  // Laid out with dp fastest, dp's pairs are the stride-1 ones.
  llvm::Expected<StepCost> swapped =
      predictStepCost(*module, c, "fp32", std::nullopt, {"tp", "dp"});
  ASSERT_TRUE(static_cast<bool>(swapped))
      << llvm::toString(swapped.takeError());
  EXPECT_EQ(swapped->collectives[0].groupStride, 2);
  EXPECT_EQ(swapped->collectives[1].groupStride, 1);
  EXPECT_DOUBLE_EQ(swapped->collectives[1].seconds, 2 * 1e-6 + bytes / 4e9);
}

/// A calibrated CPU-like cluster of 2 devices: GEMM table on the full grid
/// m, n, k in {16, 256}, memory bandwidth, op overhead and an all_reduce
/// link of its own.
Cluster calibrated() {
  Cluster c;
  c.name = "cpu:2";
  c.nodes = 1;
  c.devicesPerNode = 2;
  c.peakFlops["fp32"] = 1e10;
  c.memoryBytes = 1e9;
  c.intraNode = c.interNode = {1e9, 1e-4};
  c.memoryBandwidth = 5e9;
  c.opOverhead = 1e-6;
  for (int64_t m : {16, 256})
    for (int64_t n : {16, 256})
      for (int64_t k : {16, 256})
        // 1 GFLOP/s at 16^3, times 2 for each dimension at 256.
        c.gemm.push_back({"fp32", m, n, k,
                          1e9 * (m == 256 ? 2 : 1) * (n == 256 ? 2 : 1) *
                              (k == 256 ? 2 : 1)});
  c.collectiveLinks["all_reduce"].intraNode = Cluster::Link{2e9, 2e-5};
  return c;
}

TEST_F(StepCostTest, GemmTableInterpolatesInLogSpace) {
  Cluster c = calibrated();
  double peak = c.peakFlops["fp32"];
  auto rate = [&](int64_t m, int64_t n, int64_t k) {
    return 2.0 * m * n * k / gemmSeconds(c, "fp32", peak, 1, m, n, k);
  };
  // On the grid: the measured rate.
  EXPECT_DOUBLE_EQ(rate(16, 16, 16), 1e9);
  EXPECT_DOUBLE_EQ(rate(256, 16, 256), 4e9);
  // m = 64 is half-way between 16 and 256 in log2 (4, 6, 8): the geometric
  // mean of the two neighbours, sqrt(1e9 · 2e9).
  EXPECT_NEAR(rate(64, 16, 16), std::sqrt(2.0) * 1e9, 1);
  // Half-way on all three axes: exp(mean of the 8 corners' logs) = 2^1.5 e9.
  EXPECT_NEAR(rate(64, 64, 64), std::pow(2.0, 1.5) * 1e9, 1);
  // Outside the table: clamped to its edges.
  EXPECT_DOUBLE_EQ(rate(4, 4, 4), 1e9);
  EXPECT_DOUBLE_EQ(rate(4096, 4096, 16), 4e9);
  // Batched: batch times one GEMM.
  EXPECT_DOUBLE_EQ(gemmSeconds(c, "fp32", peak, 3, 16, 16, 16),
                   3 * 2.0 * 16 * 16 * 16 / 1e9);
  // A point missing: the grid is incomplete, the nearest point (in log
  // space) is used: (200, 16, 16) is nearest to (256, 16, 16), 2e9.
  Cluster sparse = c;
  sparse.gemm.pop_back();
  EXPECT_DOUBLE_EQ(2.0 * 200 * 16 * 16 /
                       gemmSeconds(sparse, "fp32", peak, 1, 200, 16, 16),
                   2e9);
  // --gemm-efficiency overrides the table.
  EXPECT_DOUBLE_EQ(gemmSeconds(c, "fp32", peak, 1, 16, 16, 16, 0.5),
                   2.0 * 16 * 16 * 16 / (1e10 * 0.5));
  // No table for the dtype: the roofline. 256^3 fp32 at 1e10 · 0.5 is
  // compute bound; 16 x 16 x 1 moves (16 + 16 + 256) · 4 bytes at 5e9 B/s.
  c.gemmPeakFraction = 0.5;
  c.peakFlops["bf16"] = 1e10;
  EXPECT_DOUBLE_EQ(gemmSeconds(c, "bf16", 1e10, 1, 256, 256, 256),
                   2.0 * 256 * 256 * 256 / 5e9);
  EXPECT_DOUBLE_EQ(gemmSeconds(c, "fp32", 1e10, 1, 16, 1, 16),
                   2.0 * 16 * 16 / 1e9); // fp32 has a table: 16^3's rate
  c.gemm.clear();
  EXPECT_DOUBLE_EQ(gemmSeconds(c, "fp32", 1e10, 1, 16, 16, 1),
                   (16 + 16 + 256) * 4.0 / 5e9);
}

TEST_F(StepCostTest, RooflineOverheadAndPerKindLinksByHand) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module attributes {tsr.grid_axes = ["dp"]} {
  shard.grid @grid(shape = 2)
  func.func @train_step(%a: tensor<4x16x256xf32>, %w: tensor<256x16xf32>) -> tensor<64x16xf32> {
    %y = tsr.matmul %a, %w : tensor<4x16x256xf32>, tensor<256x16xf32> -> tensor<4x16x16xf32>
    %c = tsr.constant dense<1.0> : tensor<4x16x16xf32>
    %z = tsr.add %y, %c : tensor<4x16x16xf32>
    %r = tsr.reshape %z : tensor<4x16x16xf32> -> tensor<64x16xf32>
    %s = shard.all_reduce %r on @grid grid_axes = [0] : tensor<64x16xf32> -> tensor<64x16xf32>
    return %s : tensor<64x16xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Cluster c = calibrated();
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  // matmul with a rank-2 rhs: one GEMM (m = 4·16 = 64, n = 16, k = 256), at
  // the log-space mean of (16, 16, 256) 2e9 and (256, 16, 256) 4e9 FLOP/s.
  double gemm = 2.0 * 64 * 16 * 256 / std::sqrt(2e9 * 4e9);
  EXPECT_NEAR(cost->gemmSeconds, gemm, 1e-15);
  // add: 1024 elements, 3 · 4096 bytes at 5e9 B/s (memory bound); reshape:
  // a view, 0 bytes, 1024 FLOP at 1e10. The constant costs nothing.
  EXPECT_DOUBLE_EQ(cost->otherSeconds, 3 * 4096 / 5e9 + 1024 / 1e10);
  EXPECT_EQ(cost->kernels, 3);
  EXPECT_DOUBLE_EQ(cost->overheadSeconds, 3e-6);
  EXPECT_DOUBLE_EQ(cost->computeSeconds,
                   cost->gemmSeconds + cost->otherSeconds + 3e-6);
  // all_reduce uses its own link: 2e-5 · 2(n−1) + 2(n−1)/n · 4096 / 2e9.
  ASSERT_EQ(cost->collectives.size(), 1u);
  EXPECT_DOUBLE_EQ(cost->collectives[0].seconds, 2e-5 * 2 + 4096 / 2e9);
  EXPECT_DOUBLE_EQ(cost->stepSeconds,
                   cost->computeSeconds + cost->communicationSeconds);
  // FLOPs: the matmul, the add and the reshape (not the constant).
  EXPECT_DOUBLE_EQ(cost->flopsPerRank, 2.0 * 64 * 16 * 256 + 1024 + 1024);

  // The JSON form carries the same numbers.
  llvm::json::Value json = toJSON(*cost, c);
  const llvm::json::Object *o = json.getAsObject();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->getNumber("step_s"), cost->stepSeconds);
  EXPECT_EQ(o->getInteger("kernels"), 3);
  EXPECT_EQ(o->getString("cluster"), "cpu:2");
}

TEST_F(StepCostTest, SyncLagBackToBackAndOpKinds) {
  // Two adds (1024 elements each, memory bound: 3 · 4096 B at 5e9 B/s) and
  // three all-reduces: one between the adds, two in a row at the end.
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module attributes {tsr.grid_axes = ["dp"]} {
  shard.grid @grid(shape = 2)
  func.func @train_step(%x: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<1024xf32>) {
    %a = tsr.add %x, %x : tensor<1024xf32>
    %r = shard.all_reduce %a on @grid grid_axes = [0] : tensor<1024xf32> -> tensor<1024xf32>
    %b = tsr.add %r, %r : tensor<1024xf32>
    %s = shard.all_reduce %b on @grid grid_axes = [0] : tensor<1024xf32> -> tensor<1024xf32>
    %t = shard.all_reduce %x on @grid grid_axes = [0] : tensor<1024xf32> -> tensor<1024xf32>
    return %s, %t : tensor<1024xf32>, tensor<1024xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Cluster c = calibrated();
  // A measured group of 2 ranks: 1e-4 s after compute, 1e-5 s back to back.
  Cluster::Link measured{2e9, 2e-5, {{4096, 1e-4}}, 2, {{4096, 1e-5}}};
  c.collectiveLinks["all_reduce"].groups.push_back({2, 1, measured});
  const double add = 3 * 4096 / 5e9;

  // Without a sync lag (the default): compute + communication.
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  ASSERT_EQ(cost->collectives.size(), 3u);
  EXPECT_FALSE(cost->collectives[0].backToBack);
  EXPECT_FALSE(cost->collectives[1].backToBack);
  EXPECT_TRUE(cost->collectives[2].backToBack);
  EXPECT_DOUBLE_EQ(cost->collectives[1].seconds, 1e-4);
  EXPECT_DOUBLE_EQ(cost->collectives[2].seconds, 1e-5);
  // The compute after each collective: the second add after the first;
  // nothing after the second (the third follows at once) or the third.
  EXPECT_DOUBLE_EQ(cost->syncLagComputeSeconds, add);
  EXPECT_DOUBLE_EQ(cost->syncLagSeconds, 0);
  EXPECT_DOUBLE_EQ(cost->stepSeconds,
                   cost->computeSeconds + cost->communicationSeconds);
  // The adds by kind: two kernels, their roofline plus the overhead.
  ASSERT_EQ(cost->opKinds.size(), 1u);
  EXPECT_EQ(cost->opKinds.at("add").calls, 2);
  EXPECT_DOUBLE_EQ(cost->opKinds.at("add").seconds, 2 * (add + 1e-6));

  // With a fraction, the lag is added to the step; a window below the
  // segment caps it.
  c.syncLagFraction = 0.5;
  cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  EXPECT_DOUBLE_EQ(cost->syncLagSeconds, 0.5 * add);
  EXPECT_DOUBLE_EQ(cost->stepSeconds, cost->computeSeconds +
                                          cost->communicationSeconds +
                                          0.5 * add);
  c.syncLagWindow = add / 4;
  cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  EXPECT_DOUBLE_EQ(cost->syncLagComputeSeconds, add / 4);
  EXPECT_DOUBLE_EQ(cost->syncLagSeconds, 0.5 * add / 4);

  // The JSON form names them.
  llvm::json::Value json = toJSON(*cost, c);
  const llvm::json::Object *o = json.getAsObject();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->getNumber("sync_lag_s"), cost->syncLagSeconds);
  EXPECT_EQ(o->getNumber("sync_lag_compute_s"), cost->syncLagComputeSeconds);
  const llvm::json::Array *ops = o->getArray("ops");
  ASSERT_TRUE(ops && ops->size() == 1);
  EXPECT_EQ((*ops)[0].getAsObject()->getString("kind"), "add");
  EXPECT_EQ((*ops)[0].getAsObject()->getInteger("calls"), 2);
  const llvm::json::Array *colls = o->getArray("collectives");
  ASSERT_TRUE(colls && colls->size() == 3);
  EXPECT_EQ((*colls)[2].getAsObject()->getBoolean("back_to_back"), true);
}

TEST_F(StepCostTest, TranscendentalsAtTheirOwnRate) {
  // exp on 1024 elements: one transcendental each (getTranscendentals), 1
  // FLOP each, 2 · 4096 bytes. gelu_grad: two per element (erf and exp).
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module {
  func.func @train_step(%x: tensor<32x32xf32>) -> (tensor<32x32xf32>, tensor<32x32xf32>) {
    %e = tsr.exp %x : tensor<32x32xf32>
    %g = tsr.gelu_grad %x, %e : tensor<32x32xf32>
    return %e, %g : tensor<32x32xf32>, tensor<32x32xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  auto fn = module->lookupSymbol<func::FuncOp>("train_step");
  SmallVector<tsr::CostOpInterface> ops(fn.getOps<tsr::CostOpInterface>());
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].getTranscendentals(), 1024);
  EXPECT_EQ(ops[1].getTranscendentals(), 2048);

  Cluster c = calibrated();
  c.transcendentalRate = 1e8;
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  // max(F / peak + T / rate, B / bandwidth) per op: both are bound by their
  // transcendentals (1024 / 1e8 = 10.24 us against 8192 B / 5e9 = 1.6 us).
  double exp = std::max(1024 / 1e10 + 1024 / 1e8, 2 * 4096 / 5e9);
  double geluGrad =
      std::max(static_cast<double>(ops[1].getFlops()) / 1e10 + 2048 / 1e8,
               static_cast<double>(ops[1].getBytesAccessed()) / 5e9);
  EXPECT_DOUBLE_EQ(cost->otherSeconds, exp + geluGrad);
  EXPECT_DOUBLE_EQ(cost->computeSeconds, exp + geluGrad + 2 * 1e-6);
  // Without a rate they are not modelled.
  c.transcendentalRate = 0;
  cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost));
  EXPECT_LT(cost->otherSeconds, 1e-5);
}

TEST_F(StepCostTest, RmsNormAndSiluCosts) {
  // rms_norm over 64 columns of 32 rows: 4 FLOP per element + 2 per row, one
  // rsqrt per row; its gradient 11 per element + 3 per row. silu: 4 FLOP and
  // one exp per element, silu_grad 7 and one, sigmoid 3 and one. Bytes: every
  // operand and result once.
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module {
  func.func @train_step(%x: tensor<32x64xf32>, %g: tensor<64xf32>) -> (tensor<32x64xf32>, tensor<32x64xf32>, tensor<64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) {
    %y = tsr.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<32x64xf32>, tensor<64xf32>
    %dx, %dg = tsr.rms_norm_grad %x, %g, %y {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<32x64xf32>, tensor<64xf32>
    %a = tsr.silu %y : tensor<32x64xf32>
    %da = tsr.silu_grad %y, %a : tensor<32x64xf32>
    %s = tsr.sigmoid %a : tensor<32x64xf32>
    return %y, %dx, %dg, %da, %s : tensor<32x64xf32>, tensor<32x64xf32>, tensor<64xf32>, tensor<32x64xf32>, tensor<32x64xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  auto fn = module->lookupSymbol<func::FuncOp>("train_step");
  SmallVector<tsr::CostOpInterface> ops(fn.getOps<tsr::CostOpInterface>());
  ASSERT_EQ(ops.size(), 5u);
  const int64_t n = 32 * 64, rows = 32, f32 = 4;
  EXPECT_EQ(ops[0].getFlops(), 4 * n + 2 * rows);
  EXPECT_EQ(ops[0].getTranscendentals(), rows);
  EXPECT_EQ(ops[0].getBytesAccessed(), (2 * n + 64) * f32);
  EXPECT_EQ(ops[1].getFlops(), 11 * n + 3 * rows);
  EXPECT_EQ(ops[1].getTranscendentals(), rows);
  EXPECT_EQ(ops[1].getBytesAccessed(), (3 * n + 2 * 64) * f32);
  EXPECT_EQ(ops[2].getFlops(), 4 * n);
  EXPECT_EQ(ops[2].getTranscendentals(), n);
  EXPECT_EQ(ops[2].getBytesAccessed(), 2 * n * f32);
  EXPECT_EQ(ops[3].getFlops(), 7 * n);
  EXPECT_EQ(ops[3].getTranscendentals(), n);
  EXPECT_EQ(ops[3].getBytesAccessed(), 3 * n * f32);
  EXPECT_EQ(ops[4].getFlops(), 3 * n);
  EXPECT_EQ(ops[4].getTranscendentals(), n);

  // The planner times an unmeasured rms_norm by roofline with its rsqrts and
  // a measured one (calibration's "rms_norm") per element of x.
  Cluster c = calibrated();
  c.transcendentalRate = 1e8;
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  ASSERT_TRUE(cost->opKinds.count("rms_norm"));
  double roofline = std::max((4.0 * n + 2 * rows) / 1e10 + rows / 1e8,
                             (2.0 * n + 64) * f32 / 5e9);
  EXPECT_DOUBLE_EQ(cost->opKinds["rms_norm"].seconds, roofline + 1e-6);
  c.kernelSecondsPerElement["rms_norm"] = 3e-9;
  cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost));
  EXPECT_DOUBLE_EQ(cost->opKinds["rms_norm"].seconds, n * 3e-9 + 1e-6);
}

TEST_F(StepCostTest, MeasuredKernelsPerElement) {
  // A kernel the calibration measured is timed as elements of its first
  // operand x seconds per element (plus the per-kernel overhead), not by
  // roofline; one it did not measure keeps the roofline.
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module {
  func.func @train_step(%x: tensor<32x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> (tensor<32x64xf32>, tensor<32x64xf32>) {
    %y = tsr.layer_norm %x, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<32x64xf32>, tensor<64xf32>
    %e = tsr.exp %x : tensor<32x64xf32>
    return %y, %e : tensor<32x64xf32>, tensor<32x64xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Cluster c = calibrated();
  llvm::Expected<StepCost> roofline = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(roofline));
  c.kernelSecondsPerElement["layer_norm"] = 4e-9;
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  // exp by roofline: max(2048 / 1e10, 2 · 8192 B / 5e9).
  double exp = std::max(2048 / 1e10, 2 * 8192 / 5e9);
  EXPECT_DOUBLE_EQ(cost->otherSeconds, 2048 * 4e-9 + exp);
  EXPECT_GT(cost->otherSeconds, roofline->otherSeconds);
  EXPECT_DOUBLE_EQ(cost->computeSeconds, cost->otherSeconds + 2 * 1e-6);
}

TEST_F(StepCostTest, AttentionGemmsAndRingRotations) {
  // Causal attention over Sq = Sk = 128 in two row blocks of 64 rows: block
  // 0 sees 64 keys, block 1 all 128. b = 2·2 leading elements, Dh = Dv = 8.
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module attributes {tsr.grid_axes = ["sp"]} {
  shard.grid @grid(shape = 2)
  func.func @train_step(%q: tensor<2x2x128x8xf32>) -> (tensor<2x2x128x8xf32>, tensor<2x2x128x8xf32>) {
    %o, %lse = tsr.attention %q, %q, %q {causal = true, scale = 0.5 : f32} : tensor<2x2x128x8xf32>, tensor<2x2x128x8xf32>, tensor<2x2x128x8xf32> -> tensor<2x2x128x8xf32>, tensor<2x2x128xf32>
    %ro, %rlse = tsr.attention %q, %q, %q {causal = true, grid_axes = array<i16: 0>, ring_size = 2 : i64, scale = 0.5 : f32} : tensor<2x2x128x8xf32>, tensor<2x2x128x8xf32>, tensor<2x2x128x8xf32> -> tensor<2x2x128x8xf32>, tensor<2x2x128xf32>
    return %o, %ro : tensor<2x2x128x8xf32>, tensor<2x2x128x8xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  auto fn = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(fn);
  tsr::AttentionOp attention = *fn.getOps<tsr::AttentionOp>().begin();
  SmallVector<tsr::GemmShape> gemms = attention.getGemmShapes();
  ASSERT_EQ(gemms.size(), 4u);
  EXPECT_EQ(gemms[0], (tsr::GemmShape{4, 64, 64, 8}));  // S = Q Kᵀ
  EXPECT_EQ(gemms[1], (tsr::GemmShape{4, 64, 8, 64}));  // O += P V
  EXPECT_EQ(gemms[2], (tsr::GemmShape{4, 64, 128, 8})); // block 1
  EXPECT_EQ(gemms[3], (tsr::GemmShape{4, 64, 8, 128}));

  Cluster c = calibrated();
  llvm::Expected<StepCost> cost = predictStepCost(*module, c, "fp32");
  ASSERT_TRUE(static_cast<bool>(cost)) << llvm::toString(cost.takeError());
  // The ring attention (ring_size 2 over sp) rotates its local K and V once
  // (ring_size − 1) forward: 2 · 4·128·8 floats = 32768 bytes, a send_recv
  // over the plain intra-node link (no per-kind link for send_recv).
  ASSERT_EQ(cost->collectives.size(), 1u);
  EXPECT_EQ(cost->collectives[0].kind, "send_recv");
  EXPECT_DOUBLE_EQ(cost->collectives[0].bytes, 32768);
  EXPECT_DOUBLE_EQ(cost->collectives[0].seconds, 1e-4 + 32768 / 1e9);
  // Its GEMMs are the plain one's, twice (one set per K/V block).
  double plain = 0;
  for (const tsr::GemmShape &g : gemms)
    plain += gemmSeconds(c, "fp32", 1e10, g.batch, g.m, g.n, g.k);
  double flops = static_cast<double>(attention.getFlops());
  double gemmFlops = 0;
  for (const tsr::GemmShape &g : gemms)
    gemmFlops += static_cast<double>(g.flops());
  // Each attention's non-GEMM FLOPs (5 per score, counted over all Sk) are
  // timed at peak; the ring one counts ring_size x the scores.
  EXPECT_NEAR(cost->gemmSeconds,
              plain + (flops - gemmFlops) / 1e10 + 2 * plain +
                  (2 * flops - 2 * gemmFlops) / 1e10,
              1e-12);
}

// Grouped-query attention does the work of multi-head attention on K/V
// repeated per query head (the same scores, GEMMs and exps: the kernels loop
// over the query heads) but reads Hkv/H of the K/V bytes; its gradient
// writes dK/dV of K/V's size.
TEST_F(StepCostTest, GroupedQueryAttentionCosts) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
module {
  func.func @f(%q: tensor<2x8x128x16xf32>, %kv: tensor<2x2x128x16xf32>, %rep: tensor<2x8x128x16xf32>) -> (tensor<2x8x128x16xf32>, tensor<2x8x128x16xf32>, tensor<2x2x128x16xf32>, tensor<2x8x128x16xf32>) {
    %o, %l = tsr.attention %q, %kv, %kv {causal = true, scale = 0.25 : f32} : tensor<2x8x128x16xf32>, tensor<2x2x128x16xf32>, tensor<2x2x128x16xf32> -> tensor<2x8x128x16xf32>, tensor<2x8x128xf32>
    %ro, %rl = tsr.attention %q, %rep, %rep {causal = true, scale = 0.25 : f32} : tensor<2x8x128x16xf32>, tensor<2x8x128x16xf32>, tensor<2x8x128x16xf32> -> tensor<2x8x128x16xf32>, tensor<2x8x128xf32>
    %dq, %dk, %dv = tsr.attention_grad %q, %kv, %kv, %o, %l, %o {causal = true, scale = 0.25 : f32} : tensor<2x8x128x16xf32>, tensor<2x2x128x16xf32>, tensor<2x2x128x16xf32>, tensor<2x8x128x16xf32>, tensor<2x8x128xf32>
    %rq, %rk, %rv = tsr.attention_grad %q, %rep, %rep, %ro, %rl, %ro {causal = true, scale = 0.25 : f32} : tensor<2x8x128x16xf32>, tensor<2x8x128x16xf32>, tensor<2x8x128x16xf32>, tensor<2x8x128x16xf32>, tensor<2x8x128xf32>
    return %o, %ro, %dk, %rk : tensor<2x8x128x16xf32>, tensor<2x8x128x16xf32>, tensor<2x2x128x16xf32>, tensor<2x8x128x16xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  auto fn = module->lookupSymbol<func::FuncOp>("f");
  SmallVector<tsr::AttentionOp> fwd(fn.getOps<tsr::AttentionOp>());
  SmallVector<tsr::AttentionGradOp> bwd(fn.getOps<tsr::AttentionGradOp>());
  ASSERT_EQ(fwd.size(), 2u);
  ASSERT_EQ(bwd.size(), 2u);
  auto cost = [](Operation *op) { return cast<tsr::CostOpInterface>(op); };
  for (auto [gqa, mha] : {std::pair<Operation *, Operation *>{fwd[0], fwd[1]},
                          {bwd[0], bwd[1]}}) {
    EXPECT_EQ(cost(gqa).getFlops(), cost(mha).getFlops());
    EXPECT_EQ(cost(gqa).getTranscendentals(), cost(mha).getTranscendentals());
    EXPECT_EQ(cost(gqa).getGemmShapes(), cost(mha).getGemmShapes());
  }
  // The first GEMM runs once per query head: batch B·H = 16.
  EXPECT_EQ(fwd[0].getGemmShapes()[0], (tsr::GemmShape{16, 64, 64, 16}));
  // K and V: 2 of 8 heads, 4 bytes each: 2·(8 − 2)·128·16·4 fewer bytes
  // forward; backward also reads them and writes dK, dV of their size.
  const int64_t kvBytesSaved = 2 * (8 - 2) * 128 * 16 * 4;
  EXPECT_EQ(cost(fwd[1]).getBytesAccessed() - cost(fwd[0]).getBytesAccessed(),
            2 * kvBytesSaved);
  EXPECT_EQ(cost(bwd[1]).getBytesAccessed() - cost(bwd[0]).getBytesAccessed(),
            4 * kvBytesSaved);
}

TEST_F(StepCostTest, Errors) {
  OwningOpRef<ModuleOp> module = parse(kTpModule);
  ASSERT_TRUE(module);
  Cluster h100 = cluster("dgx-h100:1");
  auto message = [&](ModuleOp m, const Cluster &c, llvm::StringRef dtype,
                     double eff) {
    llvm::Expected<StepCost> cost = predictStepCost(m, c, dtype, eff);
    if (cost)
      return std::string("no error");
    return llvm::toString(cost.takeError());
  };
  EXPECT_NE(message(*module, h100, "fp8", 0.5).find("unknown dtype 'fp8'"),
            std::string::npos);
  EXPECT_NE(message(*module, h100, "bf16", 0).find("GEMM efficiency"),
            std::string::npos);
  EXPECT_NE(message(*module, h100, "bf16", 1.5).find("GEMM efficiency"),
            std::string::npos);

  Cluster small = h100;
  small.devicesPerNode = 4;
  EXPECT_NE(message(*module, small, "bf16", 0.5)
                .find("the plan needs 8 ranks but cluster"),
            std::string::npos);

  OwningOpRef<ModuleOp> pipelined = parse(R"mlir(
module {
  func.func @train_step() { return }
  func.func @stage_0() { return }
}
)mlir");
  ASSERT_TRUE(pipelined);
  EXPECT_NE(message(*pipelined, h100, "bf16", 0.5)
                .find("function @stage_0 besides @train_step and no "
                      "tsrt.pipeline_schedule"),
            std::string::npos);
  OwningOpRef<ModuleOp> empty = parse("module {}");
  EXPECT_NE(message(*empty, h100, "bf16", 0.5).find("no @train_step"),
            std::string::npos);
}

} // namespace

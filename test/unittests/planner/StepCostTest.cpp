//===- StepCostTest.cpp - predicted step time of a partitioned plan -------===//

#include "compiler/planner/StepCost.h"
#include "dialects/tsr/TsrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

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
                .find("pipeline plans are not costed yet"),
            std::string::npos);
  OwningOpRef<ModuleOp> empty = parse("module {}");
  EXPECT_NE(message(*empty, h100, "bf16", 0.5).find("no @train_step"),
            std::string::npos);
}

} // namespace

//===- FactorShardingTest.cpp - factor sharding library -------------------===//

#include "passes/sharding/FactorSharding.h"

#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace tessera;
using namespace tessera::sharding;

namespace {

class FactorShardingTest : public ::testing::Test {
protected:
  FactorShardingTest() {
    ctx.loadDialect<tsr::TsrDialect, func::FuncDialect, shard::ShardDialect>();
    grid.symbol = FlatSymbolRefAttr::get(&ctx, "grid");
    grid.shape = {2, 2};
  }
  MLIRContext ctx;
  Grid grid;

  static DimFactors dim(std::initializer_list<SubFactor> subs) {
    return DimFactors(subs);
  }
};

TEST_F(FactorShardingTest, CanonicalMergesEquivalentLayouts) {
  // {8 : [0], 4} is the plain block split [0] of 32.
  EXPECT_EQ(canonical(dim({{8, {0}}, {4, {}}}), grid), dim({{32, {0}}}));
  // {2 : [0], 4 : [1]}: one row of the major factor per rank = [0, 1].
  EXPECT_EQ(canonical(dim({{2, {0}}, {4, {1}}}), grid), dim({{8, {0, 1}}}));
  // {4 : [0], 4 : [1]} (batch over dp, heads over tp) is not contiguous.
  EXPECT_EQ(canonical(dim({{4, {0}}, {4, {1}}}), grid),
            dim({{4, {0}}, {4, {1}}}));
  // The fused QKV {3, 16 : [1]} stays factored.
  EXPECT_EQ(canonical(dim({{3, {}}, {16, {1}}}), grid),
            dim({{3, {}}, {16, {1}}}));
}

TEST_F(FactorShardingTest, CutAtFactorsSplitsHeads) {
  // D = 16 split over tp, cut as [H = 4, Dh = 4]: heads carry the split.
  auto cut = cutAtFactors(dim({{16, {1}}}), {4, 4}, grid);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ((*cut)[0], dim({{4, {1}}}));
  EXPECT_EQ((*cut)[1], dim({{4, {}}}));
  // B*H = {4 : [0], 4 : [1]} cut as [B, H].
  cut = cutAtFactors(dim({{4, {0}}, {4, {1}}}), {4, 4}, grid);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ((*cut)[0], dim({{4, {0}}}));
  EXPECT_EQ((*cut)[1], dim({{4, {1}}}));
  // [0, 1] over 8 cut as [2, 4]: axis 0 covers the 2 exactly.
  cut = cutAtFactors(dim({{8, {0, 1}}}), {2, 4}, grid);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ((*cut)[0], dim({{2, {0}}}));
  EXPECT_EQ((*cut)[1], dim({{4, {1}}}));
  // A split over 2 cannot be cut at a factor of 3.
  EXPECT_FALSE(cutAtFactors(dim({{6, {1}}}), {3, 2}, grid).has_value());
}

TEST_F(FactorShardingTest, AttrRoundTripsFactors) {
  auto attr = tsr::ShardingAttr::getFactored(
      &ctx, grid.symbol, {dim({{16, {}}}), dim({{4, {0}}, {4, {1}}})}, {1},
      grid.shape);
  EXPECT_TRUE(attr.isDimFactored(1));
  EXPECT_FALSE(attr.isDimFactored(0));
  EXPECT_EQ(attr.getDimFactors(1, 16), dim({{4, {0}}, {4, {1}}}));
  EXPECT_EQ(attr.getDimAxes(1), ArrayRef<int16_t>({0, 1}));
  EXPECT_EQ(attr.getPartialAxes(), ArrayRef<int16_t>({1}));
  auto qkv = tsr::ShardingAttr::getFactored(
      &ctx, grid.symbol, {dim({{3, {}}, {16, {1}}})}, {}, grid.shape);
  EXPECT_EQ(qkv.getDimChunks(0), 3);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << Attribute(attr);
  EXPECT_EQ(text,
            "#tsr.sharding<@grid, [[], {4 : [0], 4 : [1]}] partial = [1]>");
}

/// Parses one op and plans it with the given operand shardings.
static OpPlan planFirstOp(MLIRContext &ctx, StringRef ir,
                          ArrayRef<TensorSharding> operands, const Grid &grid,
                          OwningOpRef<ModuleOp> &module) {
  module = parseSourceString<ModuleOp>(ir, &ctx);
  Operation *op = nullptr;
  module->walk([&](tsr::ShardingRuleOpInterface i) {
    if (!op)
      op = i;
  });
  auto rule = cast<tsr::ShardingRuleOpInterface>(op).getShardingRule();
  SmallVector<TensorSharding> results;
  SmallVector<const TensorSharding *> ptrs;
  for (const TensorSharding &t : operands)
    ptrs.push_back(&t);
  FactorAssignment a =
      resolveFactors(rule, ptrs, {}, grid, Priority::MostSplit);
  for (auto &dims : rule.results) {
    TensorSharding t = project(rule, dims, a, grid);
    for (auto [d, r] : llvm::enumerate(t.dims))
      if (!r)
        r = DimFactors{SubFactor{
            cast<RankedTensorType>(op->getResult(0).getType()).getDimSize(d),
            {}}};
    results.push_back(t);
  }
  return planOp(rule, operands, results, grid);
}

TEST_F(FactorShardingTest, RowParallelMatmulIsPartial) {
  OwningOpRef<ModuleOp> m;
  const char *ir = R"(
    func.func @f(%x: tensor<8x32xf32>, %w: tensor<16x32xf32>) -> tensor<8x16xf32> {
      %y = tsr.matmul %x, %w {transpose_rhs = true} : tensor<8x32xf32>, tensor<16x32xf32> -> tensor<8x16xf32>
      return %y : tensor<8x16xf32>
    })";
  TensorSharding x, w;
  x.dims = {dim({{8, {0}}}), dim({{32, {1}}})};
  w.dims = {dim({{16, {}}}), dim({{32, {1}}})};
  OpPlan plan = planFirstOp(ctx, ir, {x, w}, grid, m);
  ASSERT_EQ(plan.results.size(), 1u);
  EXPECT_EQ(plan.results[0].partial, Axes({1}));
  EXPECT_EQ(*plan.results[0].dims[0], dim({{8, {0}}}));
  EXPECT_EQ(*plan.results[0].dims[1], dim({{16, {}}}));
  EXPECT_EQ(plan.operands[0], x);
}

TEST_F(FactorShardingTest, PartialPassesThroughLinearOps) {
  OwningOpRef<ModuleOp> m;
  const char *ir = R"(
    func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
      %y = tsr.mul %a, %b : tensor<4xf32>
      return %y : tensor<4xf32>
    })";
  TensorSharding a, b;
  a.dims = {dim({{4, {}}})};
  a.partial = {0};
  b.dims = {dim({{4, {}}})};
  OpPlan plan = planFirstOp(ctx, ir, {a, b}, grid, m);
  EXPECT_EQ(plan.results[0].partial, Axes({0}));
  EXPECT_EQ(plan.operands[0].partial, Axes({0}));
  // Both partial: a product of two partial sums is not linear.
  b.partial = {0};
  plan = planFirstOp(ctx, ir, {a, b}, grid, m);
  EXPECT_TRUE(plan.results[0].partial.empty());
  EXPECT_TRUE(plan.operands[0].partial.empty());
  EXPECT_TRUE(plan.operands[1].partial.empty());
}

} // namespace

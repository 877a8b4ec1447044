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

TEST_F(FactorShardingTest, ReducedByOpFactorIsNotAReduction) {
  // [N, V] -> scalar: N is an ordinary reduction, V is reduced by the op.
  tsr::ShardingRule rule;
  int64_t n = rule.addFactor(8);
  int64_t v = rule.addFactor(16, /*needReplication=*/false,
                             /*reducedByOp=*/true);
  rule.operands = {{{n}, {v}}};
  rule.results = {{}};
  EXPECT_TRUE(rule.isReduction(n));
  EXPECT_TRUE(rule.isReductionFor(n, 0));
  EXPECT_FALSE(rule.isReduction(v));
  EXPECT_FALSE(rule.isReductionFor(v, 0));
}

/// Plans the first op of `ir` and calls its rule's localize hook with the
/// plan's factor axes; returns the op.
static Operation *planAndLocalize(MLIRContext &ctx, StringRef ir,
                                  ArrayRef<TensorSharding> operands,
                                  const Grid &grid,
                                  OwningOpRef<ModuleOp> &module, OpPlan &plan) {
  plan = planFirstOp(ctx, ir, operands, grid, module);
  Operation *op = nullptr;
  module->walk([&](tsr::ShardingRuleOpInterface i) {
    if (!op)
      op = i;
  });
  auto rule = cast<tsr::ShardingRuleOpInterface>(op).getShardingRule();
  SmallVector<SmallVector<int16_t, 4>> axes;
  for (const auto &f : plan.factors) {
    SmallVector<int16_t, 4> a;
    for (const SubFactor &sub : *f)
      a.append(sub.axes.begin(), sub.axes.end());
    axes.push_back(a);
  }
  if (rule.localize)
    EXPECT_TRUE(succeeded(rule.localize(op, plan.localFactorSizes, axes)));
  return op;
}

static SmallVector<int16_t> gridAxesOf(Operation *op) {
  auto a = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes");
  if (!a)
    return {};
  return SmallVector<int16_t>(a.asArrayRef());
}

TEST_F(FactorShardingTest, VocabSplitGatherIsPartialAndMasked) {
  // Megatron's vocab-parallel embedding: table rows over tp (axis 1), ids
  // over dp. Each rank looks up only its rows: the result is partial over
  // tp and keeps the ids' dp split; the local op records grid_axes = [1].
  OwningOpRef<ModuleOp> m;
  const char *ir = R"(
    func.func @f(%t: tensor<16x8xf32>, %ids: tensor<4x4xi64>) -> tensor<4x4x8xf32> {
      %y = tsr.gather %t, %ids : tensor<16x8xf32>, tensor<4x4xi64> -> tensor<4x4x8xf32>
      return %y : tensor<4x4x8xf32>
    })";
  TensorSharding t, ids;
  t.dims = {dim({{16, {1}}}), dim({{8, {}}})};
  ids.dims = {dim({{4, {0}}}), dim({{4, {}}})};
  OpPlan plan;
  Operation *op = planAndLocalize(ctx, ir, {t, ids}, grid, m, plan);
  EXPECT_EQ(plan.operands[0], t); // no all-gather of the table
  EXPECT_EQ(plan.results[0].partial, Axes({1}));
  EXPECT_EQ(*plan.results[0].dims[0], dim({{4, {0}}}));
  EXPECT_EQ(gridAxesOf(op), SmallVector<int16_t>({1}));

  // Unsplit table: plain lookup, not partial, no grid_axes.
  t.dims = {dim({{16, {}}}), dim({{8, {}}})};
  op = planAndLocalize(ctx, ir, {t, ids}, grid, m, plan);
  EXPECT_TRUE(plan.results[0].partial.empty());
  EXPECT_TRUE(gridAxesOf(op).empty());
}

TEST_F(FactorShardingTest, VocabSplitGatherGradScattersLocalRows) {
  OwningOpRef<ModuleOp> m;
  const char *ir = R"(
    func.func @f(%ids: tensor<4x4xi64>, %dy: tensor<4x4x8xf32>) -> tensor<16x8xf32> {
      %g = tsr.gather_grad %ids, %dy : tensor<4x4xi64>, tensor<4x4x8xf32> -> tensor<16x8xf32>
      return %g : tensor<16x8xf32>
    })";
  TensorSharding ids, dy;
  ids.dims = {dim({{4, {0}}}), dim({{4, {}}})};
  dy.dims = {dim({{4, {0}}}), dim({{4, {}}}), dim({{8, {}}})};
  // The result's vocabulary split comes from its (recorded) sharding.
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ir, &ctx);
  Operation *op = nullptr;
  module->walk([&](tsr::ShardingRuleOpInterface i) {
    if (!op)
      op = i;
  });
  auto rule = cast<tsr::ShardingRuleOpInterface>(op).getShardingRule();
  TensorSharding result;
  result.dims = {dim({{16, {1}}}), dim({{8, {}}})};
  OpPlan plan = planOp(rule, {ids, dy}, {result}, grid);
  EXPECT_EQ(*plan.results[0].dims[0], dim({{16, {1}}}));
  EXPECT_EQ(plan.results[0].partial, Axes({0})); // dp gradient, not tp
  SmallVector<SmallVector<int16_t, 4>> axes;
  for (const auto &f : plan.factors) {
    SmallVector<int16_t, 4> a;
    for (const SubFactor &sub : *f)
      a.append(sub.axes.begin(), sub.axes.end());
    axes.push_back(a);
  }
  ASSERT_TRUE(succeeded(rule.localize(op, plan.localFactorSizes, axes)));
  EXPECT_EQ(gridAxesOf(op), SmallVector<int16_t>({1}));
}

TEST_F(FactorShardingTest, VocabParallelCrossEntropyReducesItself) {
  // Logits [N, V] with N over dp and V over tp: the loss is partial over
  // dp only (the op all-reduces max and sum-exp over tp), the logits are
  // not gathered, and the op records grid_axes = [1].
  OwningOpRef<ModuleOp> m;
  const char *ir = R"(
    func.func @f(%x: tensor<8x16xf32>, %l: tensor<8xi64>) -> tensor<f32> {
      %y = tsr.cross_entropy %x, %l : tensor<8x16xf32>, tensor<8xi64> -> tensor<f32>
      return %y : tensor<f32>
    })";
  TensorSharding x, l;
  x.dims = {dim({{8, {0}}}), dim({{16, {1}}})};
  l.dims = {dim({{8, {0}}})};
  OpPlan plan;
  Operation *op = planAndLocalize(ctx, ir, {x, l}, grid, m, plan);
  EXPECT_EQ(plan.operands[0], x);
  EXPECT_EQ(plan.results[0].partial, Axes({0}));
  EXPECT_EQ(gridAxesOf(op), SmallVector<int16_t>({1}));

  const char *gradIr = R"(
    func.func @f(%x: tensor<8x16xf32>, %l: tensor<8xi64>, %g: tensor<f32>) -> tensor<8x16xf32> {
      %y = tsr.cross_entropy_grad %x, %l, %g : tensor<8x16xf32>, tensor<8xi64>, tensor<f32>
      return %y : tensor<8x16xf32>
    })";
  TensorSharding g;
  op = planAndLocalize(ctx, gradIr, {x, l, g}, grid, m, plan);
  EXPECT_EQ(plan.operands[0], x);
  EXPECT_TRUE(plan.results[0].partial.empty());
  EXPECT_EQ(*plan.results[0].dims[1], dim({{16, {1}}}));
  EXPECT_EQ(gridAxesOf(op), SmallVector<int16_t>({1}));
}

} // namespace

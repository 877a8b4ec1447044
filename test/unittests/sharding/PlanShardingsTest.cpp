//===- PlanShardingsTest.cpp - Plan::shardings as #tsr.sharding -----------===//

#include "passes/sharding/PlanShardings.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace tessera;

namespace {

class PlanShardingsTest : public ::testing::Test {
protected:
  PlanShardingsTest() {
    ctx.loadDialect<tsr::TsrDialect, func::FuncDialect, shard::ShardDialect>();
    module = parseSourceString<ModuleOp>(R"mlir(
      func.func @train_step(
          %qkv: tensor<192x32xf32> {tsr.role = "param", tsr.name = "attn.qkv=w"},
          %fc: tensor<64x32xf32> {tsr.role = "param", tsr.name = "fc.weight"},
          %b: tensor<64xf32> {tsr.role = "param", tsr.name = "fc.bias"}) {
        return
      }
    )mlir",
                                         &ctx);
    func = module->lookupSymbol<func::FuncOp>("train_step");
    gridRef = FlatSymbolRefAttr::get(&ctx, "grid");
  }

  /// The attribute's text.
  static std::string text(Attribute a) {
    std::string s;
    llvm::raw_string_ostream os(s);
    a.print(os);
    return s;
  }

  /// The first error parsePlanShardings emits for `entries`, or "".
  std::string error(ArrayRef<std::string> entries) {
    std::string first;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      if (first.empty())
        first = d.str();
      return success();
    });
    if (succeeded(sharding::parsePlanShardings(entries, func, grid, gridRef)))
      return "";
    return first;
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  FlatSymbolRefAttr gridRef;
  planner::GridSpec grid = planner::gridOf(2, 2, 1, 1, "none", 1);
};

TEST_F(PlanShardingsTest, EntriesBecomeShardingsOfTheNamedArguments) {
  auto parsed = sharding::parsePlanShardings({"attn.qkv=w=[{3, 64 : tp}, -]",
                                              "fc.weight=[dp*tp, -]",
                                              "fc.bias=replicated"},
                                             func, grid, gridRef);
  ASSERT_TRUE(succeeded(parsed));
  ASSERT_EQ(parsed->size(), 3u);
  // The name holds '=': entries split at the last one.
  EXPECT_EQ(text(parsed->lookup("attn.qkv=w")),
            "#tsr.sharding<@grid, [{3, 64 : [1]}, []]>");
  EXPECT_EQ(text(parsed->lookup("fc.weight")),
            "#tsr.sharding<@grid, [[0, 1], []]>");
  EXPECT_EQ(text(parsed->lookup("fc.bias")), "#tsr.sharding<@grid, [[]]>");
}

TEST_F(PlanShardingsTest, LayoutOfInvertsShardingOf) {
  for (const char *t : {"[{3, 64 : tp}, -]", "[dp*tp, -]", "[-, tp]",
                        "[{4 : dp, 48 : tp}, -]", "replicated"}) {
    auto layout = planner::parseLayoutText(t, {192, 32}, &grid);
    ASSERT_TRUE(static_cast<bool>(layout))
        << llvm::toString(layout.takeError());
    tsr::ShardingAttr attr = sharding::shardingOf(*layout, grid, gridRef);
    EXPECT_EQ(
        planner::printLayoutText(sharding::layoutOf(attr, {192, 32}, grid)), t);
  }
  // Canonical: a single sub-factor is the plain split.
  auto single = planner::parseLayoutText("[{192 : tp}, -]", {192, 32}, &grid);
  ASSERT_TRUE(static_cast<bool>(single));
  EXPECT_EQ(text(sharding::shardingOf(*single, grid, gridRef)),
            "#tsr.sharding<@grid, [[1], []]>");
}

TEST_F(PlanShardingsTest, ErrorsNameTheEntry) {
  EXPECT_EQ(error({"fc.weight"}), "shardings: 'fc.weight' is not NAME=LAYOUT");
  EXPECT_EQ(error({"fc.w=[tp, -]"}),
            "shardings: 'fc.w' is not an argument of @train_step");
  EXPECT_EQ(error({"fc.weight=[tp]"}),
            "shardings: 'fc.weight': '[tp]': the layout has rank 1 but the "
            "tensor has rank 2 (shape [64, 32])");
  EXPECT_EQ(error({"fc.bias=[sp]"}),
            "shardings: 'fc.bias': '[sp]': column 2: unknown grid axis 'sp' "
            "(the grid's axes: dp, tp)");
}

} // namespace

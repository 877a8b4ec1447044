//===- LayoutTextTest.cpp - the layout notation ---------------------------===//

#include "common/plan/LayoutText.h"

#include <gtest/gtest.h>

using namespace tessera::planner;

namespace {

const GridSpec kGrid =
    gridOf(/*dp=*/2, /*tp=*/4, /*pp=*/1, /*microBatches=*/1, "none", 1);

TensorLayout parse(llvm::StringRef text, llvm::ArrayRef<int64_t> shape,
                   const GridSpec *grid = &kGrid) {
  llvm::Expected<TensorLayout> layout = parseLayoutText(text, shape, grid);
  EXPECT_TRUE(static_cast<bool>(layout))
      << text.str() << ": " << llvm::toString(layout.takeError());
  return layout ? *layout : TensorLayout();
}

/// The error message of parsing `text`, or "" when it parses.
std::string error(llvm::StringRef text, llvm::ArrayRef<int64_t> shape,
                  const GridSpec *grid = &kGrid) {
  llvm::Expected<TensorLayout> layout = parseLayoutText(text, shape, grid);
  return layout ? "" : llvm::toString(layout.takeError());
}

TEST(LayoutText, ParsesEachForm) {
  EXPECT_EQ(parse("replicated", {16, 32}),
            (TensorLayout{{{{16, {}}}, {{32, {}}}}}));
  EXPECT_EQ(parse("[tp, -]", {16, 32}),
            (TensorLayout{{{{16, {"tp"}}}, {{32, {}}}}}));
  EXPECT_EQ(parse("[-, dp*tp]", {16, 32}),
            (TensorLayout{{{{16, {}}}, {{32, {"dp", "tp"}}}}}));
  // A fused QKV weight [3 * 64, 32], each chunk split by heads.
  EXPECT_EQ(parse("[{3, 64 : tp}, -]", {192, 32}),
            (TensorLayout{{{{3, {}}, {64, {"tp"}}}, {{32, {}}}}}));
  // Blanks anywhere between tokens.
  EXPECT_EQ(parse("  [ { 3 , 64:tp } ,- ]  ", {192, 32}),
            parse("[{3, 64 : tp}, -]", {192, 32}));
  // A scalar.
  EXPECT_EQ(parse("[]", {}), TensorLayout());
  EXPECT_TRUE(parse("[-, -]", {16, 32}).replicated());
}

TEST(LayoutText, PrintsTheExplainNotation) {
  EXPECT_EQ(printLayoutText(TensorLayout::replicatedOf({16, 32})),
            "replicated");
  EXPECT_EQ(printLayoutText(TensorLayout{{{{16, {"tp"}}}, {{32, {}}}}}),
            "[tp, -]");
  EXPECT_EQ(printLayoutText(TensorLayout{{{{16, {}}}, {{32, {"dp", "tp"}}}}}),
            "[-, dp*tp]");
  EXPECT_EQ(
      printLayoutText(TensorLayout{{{{3, {}}, {64, {"tp"}}}, {{32, {}}}}}),
      "[{3, 64 : tp}, -]");
  EXPECT_EQ(printLayoutText(TensorLayout{{{{3, {"dp"}}, {64, {"tp"}}}}}),
            "[{3 : dp, 64 : tp}]");
  EXPECT_EQ(printLayoutText(TensorLayout()), "replicated");
}

TEST(LayoutText, RoundTrips) {
  struct Case {
    const char *text;
    std::vector<int64_t> shape;
  } cases[] = {{"replicated", {16, 32}},
               {"[tp, -]", {16, 32}},
               {"[-, tp]", {16, 32}},
               {"[dp*tp, -]", {16, 32}},
               {"[tp*dp, -]", {16, 32}},
               {"[dp, tp]", {16, 32}},
               {"[{3, 64 : tp}, -]", {192, 32}},
               {"[{3, 64 : tp}]", {192}},
               {"[{2 : dp, 8, 12 : tp}, -]", {192, 32}},
               {"[-, -, tp]", {2, 3, 4}}};
  for (const Case &c : cases) {
    TensorLayout layout = parse(c.text, c.shape);
    EXPECT_EQ(printLayoutText(layout), c.text);
    EXPECT_EQ(parse(printLayoutText(layout), c.shape), layout) << c.text;
  }
  // Non-canonical text prints canonically: replicated, one factor.
  EXPECT_EQ(printLayoutText(parse("[-, -]", {16, 32})), "replicated");
  EXPECT_EQ(printLayoutText(parse("[{16 : tp}, -]", {16, 32})), "[tp, -]");
}

TEST(LayoutText, WithoutAGridAnyAxisNameParses) {
  EXPECT_EQ(error("[{3, 5 : foo}, -]", {15, 2}, nullptr), "");
  EXPECT_NE(error("[{3, 5 : foo}, -]", {15, 2}), "");
}

TEST(LayoutText, Errors) {
  EXPECT_EQ(error("", {16}), "column 1: expected '[' or 'replicated'");
  EXPECT_EQ(error("replicate", {16}), "column 1: expected '[' or 'replicated'");
  EXPECT_EQ(error("replicated x", {16}),
            "column 12: unexpected 'x' after 'replicated'");
  EXPECT_EQ(error("[tp]]", {16}), "column 5: unexpected ']' after the layout");
  EXPECT_EQ(error("[tp -]", {16, 32}), "column 5: expected ',' or ']'");
  EXPECT_EQ(error("[tp", {16}), "column 4: expected ',' or ']'");
  EXPECT_EQ(error("[, -]", {16, 32}),
            "column 2: expected '-', a grid axis name or '{' for dim 0");
  EXPECT_EQ(error("[tp*]", {16}), "column 5: expected a grid axis name");
  EXPECT_EQ(error("[{}]", {16}),
            "column 3: expected a sub-factor size (a positive integer)");
  EXPECT_EQ(error("[{0, 16}]", {16}),
            "column 3: expected a sub-factor size (a positive integer)");
  EXPECT_EQ(error("[{4 : tp, 4]", {16}), "column 12: expected ',' or '}'");
  EXPECT_EQ(error("[{4 tp}]", {16}), "column 5: expected ',' or '}'");
  // Rank.
  EXPECT_EQ(error("[tp]", {16, 32}),
            "the layout has rank 1 but the tensor has rank 2 (shape [16, 32])");
  EXPECT_EQ(error("[tp, -, -]", {16, 32}),
            "column 8: more dims than the tensor's rank 2 (shape [16, 32])");
  // Sizes.
  EXPECT_EQ(error("[{3, 5 : tp}]", {16}),
            "dim 0: sub-factors 3 x 5 do not multiply to the dim's size 16 "
            "(shape [16])");
  EXPECT_EQ(error("[{4, 8 : tp}]", {16}),
            "dim 0: sub-factors 4 x 8 do not multiply to the dim's size 16 "
            "(shape [16])");
  EXPECT_EQ(error("[{99999999999999, 99999999999999}]", {16}),
            "dim 0: sub-factors 99999999999999 x 99999999999999 do not "
            "multiply to the dim's size 16 (shape [16])");
  // Axes.
  EXPECT_EQ(error("[sp]", {16}),
            "column 2: unknown grid axis 'sp' (the grid's axes: dp, tp)");
  EXPECT_EQ(error("[tp, tp]", {16, 32}),
            "column 6: grid axis 'tp' splits more than one factor of the "
            "tensor");
  EXPECT_EQ(error("[tp*tp]", {16}),
            "column 5: grid axis 'tp' splits more than one factor of the "
            "tensor");
  EXPECT_EQ(error("[tp]", {6}), "dim 0: 6 is not divisible by tp (4 ranks)");
  EXPECT_EQ(error("[dp*tp]", {12}),
            "dim 0: 12 is not divisible by dp*tp (8 ranks)");
  EXPECT_EQ(error("[{2, 3 : dp}]", {6}),
            "dim 0: 3 is not divisible by dp (2 ranks)");
}

TEST(Grid, AxesFollowTheDegrees) {
  EXPECT_EQ(gridOf(2, 2, 1, 1, "none", 1), (GridSpec{{"dp", "tp"}, {2, 2}}));
  EXPECT_EQ(gridOf(1, 2, 2, 4, "none", 1),
            (GridSpec{{"dp", "tp", "pp", "mb"}, {1, 2, 2, 4}}));
  // Micro-batches alone pipeline (pp = 1).
  EXPECT_EQ(gridOf(1, 1, 1, 2, "none", 1),
            (GridSpec{{"dp", "tp", "pp", "mb"}, {1, 1, 1, 2}}));
  // Megatron-SP uses tp; ulysses and ring add sp.
  EXPECT_EQ(gridOf(1, 2, 1, 1, "megatron", 1),
            (GridSpec{{"dp", "tp"}, {1, 2}}));
  EXPECT_EQ(gridOf(2, 1, 1, 1, "ring", 4),
            (GridSpec{{"dp", "tp", "sp"}, {2, 1, 4}}));
  GridSpec g = gridOf(2, 1, 1, 1, "ulysses", 4);
  EXPECT_EQ(g.axisIndex("sp"), std::optional<size_t>(2));
  EXPECT_EQ(g.axisIndex("pp"), std::nullopt);
  EXPECT_EQ(g.axisSize("sp"), 4);
  EXPECT_EQ(g.axisSize("pp"), 1);
  // With a pipeline, sp comes before pp and the virtual mb axis stays last
  // (the runtime's manifest requires mb_axis to be the last grid axis).
  EXPECT_EQ(gridOf(1, 1, 2, 4, "ring", 2),
            (GridSpec{{"dp", "tp", "sp", "pp", "mb"}, {1, 1, 2, 2, 4}}));
  EXPECT_EQ(gridOf(2, 2, 2, 1, "ulysses", 2),
            (GridSpec{{"dp", "tp", "sp", "pp", "mb"}, {2, 2, 2, 2, 1}}));
}

} // namespace

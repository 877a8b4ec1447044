//===- DropoutTest.cpp - training-mode dropout (Philox-4x32-10 mask) ------===//
//
// The dropout kernel on every backend against the host reference of
// common/random/Philox.h (bit for bit: the same mask, kept values x·scale
// with one f32 multiply), the step read from the operand at run time, a
// layout attribute (the rank at the grid's origin holds the first block of
// each split sub-factor), the kept fraction within 4 standard deviations,
// and the load errors both backends give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include "common/random/Philox.h"

#include <cmath>

using namespace tessera::conformance;
using namespace tessera::random;

namespace {

TESSERA_CONFORMANCE_FAMILY(DropoutTest, "dropout", "dropout");

constexpr double kRatio = 0.1;

std::string attrs(int64_t seed, int64_t opId, llvm::StringRef layout = "") {
  std::string s = f32Attr("ratio", kRatio) +
                  ", seed = " + std::to_string(seed) +
                  " : i64, op_id = " + std::to_string(opId) + " : i64";
  if (!layout.empty())
    s += ", layout = array<i64: " + layout.str() + ">";
  return s;
}

/// The host reference: global element g of `x`'s values.
std::vector<double> reference(const Tensor &x, DropoutKey key,
                              const std::vector<int64_t> &globalIndex) {
  std::vector<double> in = values(x), out(in.size());
  float scale = static_cast<float>(1.0 / (1.0 - kRatio));
  for (size_t i = 0; i < in.size(); ++i)
    out[i] = dropoutKeep(key, globalIndex[i], dropoutThreshold(kRatio))
                 ? static_cast<double>(static_cast<float>(in[i]) * scale)
                 : 0.0;
  return out;
}

TEST_P(DropoutTest, MatchesHostReference) {
  Tensor x = randomF32({4, 6, 10}, 3);
  for (float step : {0.0f, 1.0f, 41.0f}) {
    std::vector<Tensor> out =
        run("dropout", attrs(1234, 5), {x, f32({}, {step})}, {typeOf(x)});
    ASSERT_EQ(out.size(), 1u);
    std::vector<int64_t> g(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i)
      g[i] = i;
    expectEqual(out[0], DType::F32, {4, 6, 10},
                reference(x, {1234, static_cast<uint32_t>(step), 5}, g));
  }
}

TEST_P(DropoutTest, LayoutPlacesTheOriginBlock) {
  // Global [4, 6, 10]: dim 0 over axis 0 (2 ways), dim 1 striped
  // {3, 2 : [1]} over axis 1 (2 ways); the origin rank holds rows 0-1 and
  // sequence positions {0, 2, 4}.
  Tensor x = randomF32({2, 3, 10}, 4);
  tessera::runtime::exec::CompileOptions options;
  options.gridShape = {2, 2};
  std::vector<Tensor> out =
      run("dropout", attrs(7, 0, "1, 4, 1, 0, 2, 3, 0, 2, 1, 1, 1, 10, 0"),
          {x, f32({}, {3.0f})}, {typeOf(x)}, options);
  ASSERT_EQ(out.size(), 1u);
  std::vector<int64_t> g;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t d = 0; d < 10; ++d)
        g.push_back((b * 6 + 2 * s) * 10 + d);
  expectEqual(out[0], DType::F32, {2, 3, 10}, reference(x, {7, 3, 0}, g));
}

TEST_P(DropoutTest, KeptFractionWithinFourSigma) {
  const int64_t n = 1 << 18;
  Tensor x = randomF32({n}, 5, 1.0f, 2.0f);
  std::vector<Tensor> out =
      run("dropout", attrs(1234, 0), {x, f32({}, {2.0f})}, {typeOf(x)});
  ASSERT_EQ(out.size(), 1u);
  int64_t kept = 0;
  for (double v : values(out[0]))
    kept += v != 0.0;
  double p = 1 - kRatio;
  EXPECT_LT(std::abs(kept - n * p), 4 * std::sqrt(n * p * (1 - p)))
      << "kept " << kept << " of " << n;
}

TEST_P(DropoutTest, LoadErrors) {
  TensorType x{DType::F32, {4, 6}}, step{DType::F32, {}};
  EXPECT_EQ(
      loadError("dropout",
                f32Attr("ratio", 1.0) + ", seed = 1 : i64, op_id = 0 : i64",
                {x, step}, {x}),
      "attribute 'ratio' = 1.00 is outside [0, 1)");
  EXPECT_EQ(
      loadError("dropout", attrs(1, 0), {x, TensorType{DType::F32, {1}}}, {x}),
      "step has type tensor<1xf32>, expected f32 0-D");
  EXPECT_EQ(loadError("dropout", f32Attr("ratio", 0.5) + ", seed = 1 : i64",
                      {x, step}, {x}),
            "missing attribute 'op_id'");
  EXPECT_EQ(loadError("dropout", attrs(1, 0, "1, 4, 0"), {x, step}, {x}),
            "attribute 'layout': dimension 1 needs a sub-factor count >= 1");
  EXPECT_EQ(
      loadError("dropout", attrs(1, 0, "1, 4, 1, 3, 1, 6, 0"), {x, step}, {x}),
      "attribute 'layout': dimension 0 names a grid axis outside the 1 "
      "axes");
  EXPECT_EQ(
      loadError("dropout", attrs(1, 0, "1, 4, 0, 1, 12, 0"), {x, step}, {x}),
      "attribute 'layout' gives dimension 1 a local size of 12, but the "
      "operand has 6");
  EXPECT_EQ(
      loadError("dropout", attrs(1, 0, "1, 4, 0, 1, 6, 0, 7"), {x, step}, {x}),
      "attribute 'layout' has entries past the last dimension");
}

} // namespace

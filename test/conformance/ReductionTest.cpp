//===- ReductionTest.cpp - reduce_sum / reduce_mean / reduce_max ----------===//
//
// Every reduction over single, several, negative, all and no axes, with and
// without keepdim, and over unit dims, against a double reference; the
// 16-bit form; attribute errors with the text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(ReductionTest, "reductions", "reduce_sum",
                           "reduce_mean", "reduce_max", "sum_squares");

enum class Kind { Sum, Mean, Max };

/// Reduces `x` (double values, shape `shape`) over `axes` (normalised).
std::vector<double> reduce(const std::vector<double> &x,
                           const std::vector<int64_t> &shape,
                           std::vector<int64_t> axes, Kind kind,
                           std::vector<int64_t> &outShape, bool keep) {
  int64_t rank = shape.size();
  for (int64_t &a : axes)
    a = a < 0 ? a + rank : a;
  auto reduced = [&](int64_t d) {
    return std::find(axes.begin(), axes.end(), d) != axes.end();
  };
  outShape.clear();
  std::vector<int64_t> keptShape; // out shape with 1s at reduced dims
  for (int64_t d = 0; d < rank; ++d) {
    keptShape.push_back(reduced(d) ? 1 : shape[d]);
    if (!reduced(d) || keep)
      outShape.push_back(reduced(d) ? 1 : shape[d]);
  }
  int64_t n = 1, count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    n *= keptShape[d];
    if (reduced(d))
      count *= shape[d];
  }
  std::vector<double> out(n, kind == Kind::Max ? -INFINITY : 0.0);
  std::vector<int64_t> idx(rank, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d)
      o = o * keptShape[d] + (reduced(d) ? 0 : idx[d]);
    out[o] = kind == Kind::Max ? std::max(out[o], x[i]) : out[o] + x[i];
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  if (kind == Kind::Mean)
    for (double &v : out)
      v /= count;
  return out;
}

std::string axesAttr(const std::vector<int64_t> &axes, bool keep) {
  std::string s = "axes = array<i64";
  for (size_t i = 0; i < axes.size(); ++i)
    s += (i ? ", " : ": ") + std::to_string(axes[i]);
  s += ">";
  if (keep)
    s += ", keepdim = true";
  return s;
}

struct Case {
  std::vector<int64_t> shape, axes;
  bool keep;
};

TEST_P(ReductionTest, AxesKeepdimAndUnitDims) {
  std::vector<Case> cases = {
      {{3, 4, 5}, {1}, false},     {{3, 4, 5}, {1}, true},
      {{3, 4, 5}, {0, 2}, false},  {{3, 4, 5}, {-1}, false},
      {{3, 4, 5}, {-3, -1}, true}, {{3, 4, 5}, {0, 1, 2}, false},
      {{3, 4, 5}, {}, false},      {{1, 7, 1, 3}, {0, 2}, false},
      {{2, 1, 3}, {1}, true},      {{67, 129}, {0}, false},
      {{5}, {0}, false},
  };
  std::vector<std::pair<const char *, Kind>> kinds = {
      {"reduce_sum", Kind::Sum},
      {"reduce_mean", Kind::Mean},
      {"reduce_max", Kind::Max}};
  uint32_t seed = 1;
  for (const Case &c : cases) {
    Tensor x = randomF32(c.shape, seed++, -2.0f, 2.0f);
    for (const auto &[name, kind] : kinds) {
      std::string attrs = axesAttr(c.axes, c.keep);
      TensorType xt{DType::F32, c.shape};
      SCOPED_TRACE(std::string(name) + " " + xt.str() + " {" + attrs + "}");
      std::vector<int64_t> outShape;
      std::vector<double> want =
          reduce(values(x), c.shape, c.axes, kind, outShape, c.keep);
      std::vector<Tensor> r =
          run(name, attrs, {x}, {TensorType{DType::F32, outShape}});
      ASSERT_EQ(r.size(), 1u);
      expectNear(r[0], outShape, want, kind == Kind::Max ? 0 : 1e-5, 1e-6);
    }
  }
}

// reduce_max keeps -inf and propagates NaN? (max of {-inf, -inf} is -inf.)
TEST_P(ReductionTest, MaxOfInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = f32({2, 3}, {-inf, -inf, -inf, -1.0f, inf, 2.0f});
  std::vector<Tensor> r =
      run("reduce_max", axesAttr({1}, false), {x}, {{DType::F32, {2}}});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {2}, {-INFINITY, INFINITY}, 0, 0);
}

TEST_P(ReductionTest, Float16BitOperands) {
  Tensor x = randomF32({4, 50}, 9, 0.5f, 1.5f);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor h = narrow(x, dt);
    std::vector<int64_t> outShape;
    for (const auto &[name, kind] : {std::pair{"reduce_sum", Kind::Sum},
                                     std::pair{"reduce_mean", Kind::Mean},
                                     std::pair{"reduce_max", Kind::Max}}) {
      SCOPED_TRACE(name);
      std::vector<double> want =
          reduce(values(h), {4, 50}, {1}, kind, outShape, false);
      std::vector<Tensor> r =
          run(name, axesAttr({-1}, false), {h}, {TensorType{dt, {4}}});
      ASSERT_EQ(r.size(), 1u);
      ASSERT_EQ(r[0].dtype(), dt);
      expectNear(r[0], {4}, want, rtolFor(dt), 0);
    }
  }
}

TEST_P(ReductionTest, LoadErrors) {
  TensorType x{DType::F32, {3, 4, 5}};
  EXPECT_EQ(loadError("reduce_sum", axesAttr({1, -2}, false), {x},
                      {TensorType{DType::F32, {3, 5}}}),
            "attribute 'axes' repeats an axis");
  EXPECT_EQ(loadError("reduce_mean", axesAttr({3}, false), {x},
                      {TensorType{DType::F32, {3, 4}}}),
            "attribute 'axes' = 3 is out of range for rank 3");
  EXPECT_EQ(loadError("reduce_max", axesAttr({1}, true), {x},
                      {TensorType{DType::F32, {3, 5}}}),
            "result #0 has type tensor<3x5xf32>, expected tensor<3x1x5xf32>");
  EXPECT_EQ(loadError("reduce_sum", "axes = 1 : i64", {x},
                      {TensorType{DType::F32, {3, 5}}}),
            "attribute 'axes' must be an array<i64: ...>");
  EXPECT_EQ(loadError("reduce_sum", axesAttr({0}, false),
                      {TensorType{DType::I64, {3}}},
                      {TensorType{DType::I64, {}}}),
            "operand has unsupported type tensor<3xi64>");
}

// sum_squares (tsr-clip-grad's norm terms): every element's square summed
// into one f32 scalar, vs an f64 reference; rank 0, a single element and a
// shape longer than one thread block's stride.
TEST_P(ReductionTest, SumSquares) {
  uint32_t seed = 40;
  for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{
           {}, {1}, {5}, {3, 4, 5}, {67, 129}, {2, 3000}}) {
    Tensor x = randomF32(shape, seed++, -2.0f, 2.0f);
    SCOPED_TRACE((TensorType{DType::F32, shape}.str()));
    double want = 0;
    for (double v : values(x))
      want += v * v;
    std::vector<Tensor> r = run("sum_squares", "", {x}, {{DType::F32, {}}});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], {}, {want}, 1e-6, 0);
  }
}

TEST_P(ReductionTest, SumSquaresLoadErrors) {
  TensorType x{DType::F32, {3, 4}};
  EXPECT_EQ(loadError("sum_squares", "", {x}, {TensorType{DType::F32, {3}}}),
            "result #0 has type tensor<3xf32>, expected tensor<f32>");
  EXPECT_NE(loadError("sum_squares", "", {TensorType{DType::I64, {3}}},
                      {TensorType{DType::F32, {}}}),
            "");
}

} // namespace

//===- ShapeOpsTest.cpp - reshape, transpose, slice, concat, broadcast ----===//
//
// The data-movement kernels on f32, i64 and 16-bit floats (moved bit for
// bit): non-contiguous permutations, strided and offset slices, concat along
// negative and inner axes, broadcast of unit dims and rank extension, all
// against index arithmetic done here; errors with the text both backends
// must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(ShapeOpsTest, "shape", "reshape", "transpose",
                           "slice", "concat", "broadcast");

/// 0, 1, 2, ... as f32 (exact), so every output names its source element.
Tensor iota(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(i);
  return t;
}

std::vector<int64_t> strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// Calls f(flat output index, multi-index) for every element of `shape`.
template <typename F> void forEach(const std::vector<int64_t> &shape, F f) {
  int64_t n = tessera::runtime::shapeNumel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(i, idx);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

std::string i64Array(llvm::StringRef name, const std::vector<int64_t> &v) {
  std::string s = name.str() + " = array<i64";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : ": ") + std::to_string(v[i]);
  return s + ">";
}

TEST_P(ShapeOpsTest, Reshape) {
  Tensor x = iota({2, 3, 4});
  std::vector<Tensor> r = run("reshape", "", {x}, {{DType::F32, {4, 6}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {4, 6}, values(x));
  Tensor i = i64({2, 2}, {1, -2, 3, -4});
  r = run("reshape", "", {i}, {{DType::I64, {4, 1}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {4, 1}, {1, -2, 3, -4});
  Tensor s = f32({}, {2.5f});
  r = run("reshape", "", {s}, {{DType::F32, {1, 1}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {1, 1}, {2.5});
}

TEST_P(ShapeOpsTest, TransposeEveryPermutationOfRank3And4) {
  std::vector<int64_t> shape = {2, 3, 5};
  Tensor x = iota(shape);
  std::vector<std::vector<int64_t>> perms = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                             {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  std::vector<int64_t> st = strides(shape);
  for (const auto &perm : perms) {
    SCOPED_TRACE(i64Array("permutation", perm));
    std::vector<int64_t> out;
    for (int64_t p : perm)
      out.push_back(shape[p]);
    std::vector<double> want(x.numel());
    forEach(out, [&](int64_t i, const std::vector<int64_t> &idx) {
      int64_t src = 0;
      for (size_t k = 0; k < perm.size(); ++k)
        src += idx[k] * st[perm[k]];
      want[i] = src;
    });
    std::vector<Tensor> r = run("transpose", i64Array("permutation", perm), {x},
                                {TensorType{DType::F32, out}});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], DType::F32, out, want);
  }
  // The attention head split [B, S, H, D] -> [B, H, S, D], on bf16 (bit for
  // bit) and i64.
  std::vector<int64_t> s4 = {2, 5, 3, 4}, perm = {0, 2, 1, 3};
  std::vector<int64_t> out = {2, 3, 5, 4};
  Tensor x4 = iota(s4);
  std::vector<int64_t> st4 = strides(s4);
  std::vector<double> want(x4.numel());
  forEach(out, [&](int64_t i, const std::vector<int64_t> &idx) {
    int64_t src = 0;
    for (size_t k = 0; k < 4; ++k)
      src += idx[k] * st4[perm[k]];
    want[i] = src;
  });
  for (DType dt : {DType::BF16, DType::F16}) {
    Tensor h = narrow(x4, dt); // 0..119 are exact in both
    std::vector<Tensor> r = run("transpose", i64Array("permutation", perm), {h},
                                {TensorType{dt, out}});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], dt, out, want);
  }
  Tensor xi = Tensor::empty(DType::I64, s4);
  for (int64_t i = 0; i < xi.numel(); ++i)
    xi.data<int64_t>()[i] = i - 7;
  std::vector<Tensor> r = run("transpose", i64Array("permutation", perm), {xi},
                              {TensorType{DType::I64, out}});
  ASSERT_EQ(r.size(), 1u);
  for (double &w : want)
    w -= 7;
  expectEqual(r[0], DType::I64, out, want);
}

TEST_P(ShapeOpsTest, StridedAndOffsetSlices) {
  std::vector<int64_t> shape = {4, 6, 5};
  Tensor x = iota(shape);
  std::vector<int64_t> st = strides(shape);
  struct Case {
    std::vector<int64_t> starts, limits, steps;
  };
  for (const Case &c : {Case{{1, 0, 2}, {3, 6, 5}, {1, 1, 1}},
                        Case{{0, 1, 0}, {4, 6, 5}, {2, 2, 3}},
                        Case{{3, 5, 4}, {4, 6, 5}, {1, 1, 1}},
                        Case{{0, 2, 0}, {4, 2, 5}, {1, 1, 1}}}) { // empty
    std::string attrs = i64Array("start_indices", c.starts) + ", " +
                        i64Array("limit_indices", c.limits) + ", " +
                        i64Array("strides", c.steps);
    SCOPED_TRACE(attrs);
    std::vector<int64_t> out;
    for (size_t d = 0; d < 3; ++d)
      out.push_back((c.limits[d] - c.starts[d] + c.steps[d] - 1) / c.steps[d]);
    std::vector<double> want(tessera::runtime::shapeNumel(out));
    forEach(out, [&](int64_t i, const std::vector<int64_t> &idx) {
      int64_t src = 0;
      for (size_t d = 0; d < 3; ++d)
        src += (c.starts[d] + idx[d] * c.steps[d]) * st[d];
      want[i] = src;
    });
    std::vector<Tensor> r =
        run("slice", attrs, {x}, {TensorType{DType::F32, out}});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], DType::F32, out, want);
  }
  // i64 and bf16 slices (the labels shift of a causal LM; a K/V half).
  Tensor ids = i64({2, 5}, {0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
  std::string attrs = i64Array("start_indices", {0, 1}) + ", " +
                      i64Array("limit_indices", {2, 5}) + ", " +
                      i64Array("strides", {1, 1});
  std::vector<Tensor> r = run("slice", attrs, {ids}, {{DType::I64, {2, 4}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {2, 4}, {1, 2, 3, 4, 11, 12, 13, 14});
  Tensor h = narrow(iota({2, 5}), DType::BF16);
  r = run("slice", attrs, {h}, {{DType::BF16, {2, 4}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::BF16, {2, 4}, {1, 2, 3, 4, 6, 7, 8, 9});
}

TEST_P(ShapeOpsTest, ConcatAlongOuterInnerAndNegativeAxes) {
  Tensor a = iota({2, 3}), b = f32({2, 1}, {-1, -2}),
         c = f32({2, 2}, {10, 11, 12, 13});
  std::vector<Tensor> r =
      run("concat", "axis = -1 : i64", {a, b, c}, {{DType::F32, {2, 6}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {2, 6},
              {0, 1, 2, -1, 10, 11, 3, 4, 5, -2, 12, 13});
  Tensor d = f32({1, 3}, {7, 8, 9});
  r = run("concat", "axis = 0 : i64", {a, d}, {{DType::F32, {3, 3}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {3, 3}, {0, 1, 2, 3, 4, 5, 7, 8, 9});
  // Middle axis of rank 3 (the q/k/v split's inverse), i64 and f16.
  Tensor x = iota({2, 2, 2}), y = iota({2, 1, 2});
  std::vector<double> want = {0, 1, 2, 3, 0, 1, 4, 5, 6, 7, 2, 3};
  for (DType dt : {DType::F16, DType::BF16}) {
    r = run("concat", "axis = 1 : i64", {narrow(x, dt), narrow(y, dt)},
            {TensorType{dt, {2, 3, 2}}});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], dt, {2, 3, 2}, want);
  }
  Tensor ia = i64({2}, {1, 2}), ib = i64({3}, {3, 4, 5});
  r = run("concat", "axis = 0 : i64", {ia, ib}, {{DType::I64, {5}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {5}, {1, 2, 3, 4, 5});
  // A single operand is a copy.
  r = run("concat", "axis = 0 : i64", {ia}, {{DType::I64, {2}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {2}, {1, 2});
}

TEST_P(ShapeOpsTest, BroadcastUnitDimsAndRankExtension) {
  struct Case {
    std::vector<int64_t> from, to;
  };
  for (const Case &c : {Case{{3, 1}, {2, 3, 4}}, Case{{1, 4}, {3, 4}},
                        Case{{}, {2, 3}}, Case{{5}, {2, 1, 5}},
                        Case{{2, 1, 3}, {2, 4, 3}}, Case{{2, 3}, {2, 3}}}) {
    Tensor x = iota(c.from);
    TensorType to{DType::F32, c.to};
    SCOPED_TRACE(typeOf(x).str() + " -> " + to.str());
    std::vector<int64_t> st = strides(c.from);
    size_t off = c.to.size() - c.from.size();
    std::vector<double> want(tessera::runtime::shapeNumel(c.to));
    forEach(c.to, [&](int64_t i, const std::vector<int64_t> &idx) {
      int64_t src = 0;
      for (size_t d = 0; d < c.from.size(); ++d)
        src += (c.from[d] == 1 ? 0 : idx[d + off]) * st[d];
      want[i] = src;
    });
    std::vector<Tensor> r =
        run("broadcast", "", {x}, {TensorType{DType::F32, c.to}});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], DType::F32, c.to, want);
  }
  // i64 and i1 (a causal mask row broadcast over the batch).
  Tensor m = i1({1, 3}, {1, 0, 1});
  std::vector<Tensor> r = run("broadcast", "", {m}, {{DType::I1, {2, 3}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I1, {2, 3}, {1, 0, 1, 1, 0, 1});
  Tensor i = i64({2, 1}, {-5, 6});
  r = run("broadcast", "", {i}, {{DType::I64, {2, 2}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {2, 2}, {-5, -5, 6, 6});
  Tensor h = narrow(f32({2}, {1.5f, -2.25f}), DType::BF16);
  r = run("broadcast", "", {h}, {{DType::BF16, {2, 2}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::BF16, {2, 2}, {1.5, -2.25, 1.5, -2.25});
}

TEST_P(ShapeOpsTest, LoadErrors) {
  TensorType x{DType::F32, {2, 3}};
  EXPECT_EQ(loadError("reshape", "", {x}, {TensorType{DType::F32, {7}}}),
            "cannot reshape tensor<2x3xf32> to tensor<7xf32>");
  EXPECT_EQ(loadError("reshape", "", {x}, {TensorType{DType::I64, {6}}}),
            "cannot reshape tensor<2x3xf32> to tensor<6xi64>");
  EXPECT_EQ(loadError("transpose", i64Array("permutation", {0, 0}), {x}, {x}),
            "attribute 'permutation' is not a permutation of the 2 dimensions");
  EXPECT_EQ(loadError("transpose", "", {x}, {x}),
            "missing attribute 'permutation'");
  EXPECT_EQ(loadError("slice",
                      i64Array("start_indices", {0, 2}) + ", " +
                          i64Array("limit_indices", {2, 4}) + ", " +
                          i64Array("strides", {1, 1}),
                      {x}, {TensorType{DType::F32, {2, 2}}}),
            "bad slice [2:4:1] of dimension 1 (size 3)");
  EXPECT_EQ(loadError("slice",
                      i64Array("start_indices", {0}) + ", " +
                          i64Array("limit_indices", {2}) + ", " +
                          i64Array("strides", {1}),
                      {x}, {TensorType{DType::F32, {2}}}),
            "start_indices, limit_indices and strides need 2 entries");
  EXPECT_EQ(loadError("concat", "axis = 0 : i64",
                      {x, TensorType{DType::F32, {2, 4}}},
                      {TensorType{DType::F32, {4, 3}}}),
            "operand types tensor<2x3xf32> and tensor<2x4xf32> cannot be "
            "concatenated along dimension 0");
  EXPECT_EQ(loadError("concat", "axis = 2 : i64", {x, x},
                      {TensorType{DType::F32, {2, 6}}}),
            "attribute 'axis' = 2 is out of range for rank 2");
  EXPECT_EQ(
      loadError("broadcast", "", {x}, {TensorType{DType::F32, {2, 2, 2}}}),
      "cannot broadcast tensor<2x3xf32> to tensor<2x2x2xf32>");
  EXPECT_EQ(loadError("broadcast", "", {x}, {TensorType{DType::F32, {3}}}),
            "cannot broadcast tensor<2x3xf32> to tensor<3xf32>");
}

} // namespace

//===- MatmulTest.cpp - matmul with transposes and batches ----------------===//
//
// Every transpose combination, batched with equal batch dims, a shared
// rank-2 operand on either side, K = 0 (zeros), odd sizes, and bf16 / f16
// operands, against a double reference; shape errors with the text both
// backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(MatmulTest, "matmul", "matmul");

/// Reference: a [..., M, K] (or [..., K, M] if ta), b likewise; rank-2
/// operands are shared by every batch.
std::vector<double> matmulRef(const Tensor &a, const Tensor &b, bool ta,
                              bool tb, std::vector<int64_t> &outShape) {
  const auto &as = a.shape(), &bs = b.shape();
  size_t ra = as.size(), rb = bs.size();
  int64_t m = ta ? as[ra - 1] : as[ra - 2], k = ta ? as[ra - 2] : as[ra - 1];
  int64_t n = tb ? bs[rb - 2] : bs[rb - 1];
  std::vector<int64_t> batch(ra >= rb ? as.begin() : bs.begin(),
                             ra >= rb ? as.end() - 2 : bs.end() - 2);
  int64_t nb = tessera::runtime::shapeNumel(batch);
  bool aShared = ra == 2, bShared = rb == 2;
  std::vector<double> av = values(a), bv = values(b), out(nb * m * n, 0.0);
  for (int64_t p = 0; p < nb; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) {
          int64_t ao = (aShared ? 0 : p * m * k) + (ta ? l * m + i : i * k + l);
          int64_t bo = (bShared ? 0 : p * k * n) + (tb ? j * k + l : l * n + j);
          s += av[ao] * bv[bo];
        }
        out[(p * m + i) * n + j] = s;
      }
  outShape = batch;
  outShape.push_back(m);
  outShape.push_back(n);
  return out;
}

std::string transposeAttrs(bool ta, bool tb) {
  std::string s;
  if (ta)
    s += "transpose_lhs = true";
  if (tb)
    s += std::string(ta ? ", " : "") + "transpose_rhs = true";
  return s;
}

struct Case {
  std::vector<int64_t> a, b;
  bool ta, tb;
};

TEST_P(MatmulTest, TransposesAndBatches) {
  std::vector<Case> cases = {
      {{5, 7}, {7, 3}, false, false},
      {{7, 5}, {7, 3}, true, false},
      {{5, 7}, {3, 7}, false, true},
      {{7, 5}, {3, 7}, true, true},
      {{2, 3, 4, 6}, {2, 3, 6, 5}, false, false},
      {{2, 3, 6, 4}, {2, 3, 5, 6}, true, true},
      {{4, 9, 8}, {8, 10}, false, false}, // shared rhs (x @ W)
      {{4, 9, 8}, {10, 8}, false, true},  // shared rhs, nn.Linear
      {{9, 4}, {3, 9, 5}, true, false},   // shared lhs (dW-like)
      {{1, 33}, {33, 65}, false, false},  // odd sizes
      {{17, 1}, {1, 19}, false, false},   // outer product (K = 1)
  };
  uint32_t seed = 1;
  for (const Case &c : cases) {
    Tensor a = randomF32(c.a, seed++), b = randomF32(c.b, seed++);
    std::string attrs = transposeAttrs(c.ta, c.tb);
    SCOPED_TRACE(typeOf(a).str() + " x " + typeOf(b).str() + " {" + attrs +
                 "}");
    std::vector<int64_t> outShape;
    std::vector<double> want = matmulRef(a, b, c.ta, c.tb, outShape);
    std::vector<Tensor> r =
        run("matmul", attrs, {a, b}, {TensorType{DType::F32, outShape}});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], outShape, want, 1e-5, 1e-5);
  }
}

// K = 0: the result is all zeros (not left uninitialised).
TEST_P(MatmulTest, EmptyContractionWritesZeros) {
  Tensor a = Tensor::empty(DType::F32, {3, 0});
  Tensor b = Tensor::empty(DType::F32, {0, 4});
  std::vector<Tensor> r = run("matmul", "", {a, b}, {{DType::F32, {3, 4}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {3, 4}, std::vector<double>(12, 0.0));
}

// bf16 / f16 operands and result: f32 accumulation of the exact products,
// rounded once (f16 overflows to inf).
TEST_P(MatmulTest, Float16BitOperands) {
  Tensor a = randomF32({2, 5, 24}, 21), b = randomF32({24, 6}, 22);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor ha = narrow(a, dt), hb = narrow(b, dt);
    std::vector<int64_t> outShape;
    std::vector<double> want = matmulRef(ha, hb, false, false, outShape);
    std::vector<Tensor> r =
        run("matmul", "", {ha, hb}, {TensorType{dt, outShape}});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].dtype(), dt);
    expectNear(r[0], outShape, want, rtolFor(dt), 1e-3);
  }
  Tensor big = narrow(f32({1, 2}, {300.0f, 300.0f}), DType::F16);
  Tensor col = narrow(f32({2, 1}, {200.0f, 200.0f}), DType::F16);
  std::vector<Tensor> r =
      run("matmul", "", {big, col}, {TensorType{DType::F16, {1, 1}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F16, {1, 1}, {INFINITY}); // 120000 > 65504
}

TEST_P(MatmulTest, LoadErrors) {
  TensorType a{DType::F32, {2, 3}}, b{DType::F32, {4, 5}};
  EXPECT_EQ(loadError("matmul", "", {a, b}, {TensorType{DType::F32, {2, 5}}}),
            "contracting sizes differ: 3 vs 4 (tensor<2x3xf32>, "
            "tensor<4x5xf32>)");
  EXPECT_EQ(loadError("matmul", "", {TensorType{DType::F32, {3}}, b},
                      {TensorType{DType::F32, {5}}}),
            "operands must have rank >= 2, got tensor<3xf32> and "
            "tensor<4x5xf32>");
  EXPECT_EQ(loadError("matmul", "",
                      {TensorType{DType::F32, {2, 2, 3}},
                       TensorType{DType::F32, {3, 3, 4}}},
                      {TensorType{DType::F32, {2, 2, 4}}}),
            "batch dimensions differ: tensor<2x2x3xf32> and "
            "tensor<3x3x4xf32>");
  EXPECT_EQ(loadError("matmul", "",
                      {TensorType{DType::F32, {2, 2, 2, 3}},
                       TensorType{DType::F32, {2, 3, 4}}},
                      {TensorType{DType::F32, {2, 2, 2, 4}}}),
            "batch ranks differ: tensor<2x2x2x3xf32> and tensor<2x3x4xf32>");
  EXPECT_EQ(loadError("matmul", "transpose_lhs = 1 : i64",
                      {TensorType{DType::F32, {3, 2}},
                       TensorType{DType::F32, {3, 4}}},
                      {TensorType{DType::F32, {2, 4}}}),
            "attribute 'transpose_lhs' must be a bool");
  EXPECT_EQ(loadError("matmul", "", {a, TensorType{DType::I64, {3, 4}}},
                      {TensorType{DType::F32, {2, 4}}}),
            "rhs has unsupported type tensor<3x4xi64>");
  EXPECT_EQ(loadError("matmul", "transpose_rhs = true",
                      {a, TensorType{DType::F32, {5, 3}}},
                      {TensorType{DType::F32, {2, 3}}}),
            "result #0 has type tensor<2x3xf32>, expected tensor<2x5xf32>");
}

} // namespace

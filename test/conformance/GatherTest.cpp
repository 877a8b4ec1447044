//===- GatherTest.cpp - embedding lookup (gather) and its gradient --------===//
//
// gather of rows of a table (f32, i64, bf16: moved bit for bit) by i64 ids
// of any rank; gather_grad scatter-adds repeated ids and zeroes the rows no
// id names; an id outside [0, V) is a run error on every backend (naming
// the id and the range); shape and dtype errors are load errors with the
// text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(GatherTest, "gather", "gather", "gather_grad");

/// The rows of `table` (of any dtype, widened exactly) that `ids` name, in
/// the order of `ids`.
std::vector<double> gatherRef(const Tensor &table, const Tensor &ids) {
  std::vector<double> t = values(table), want;
  int64_t row = table.numel() / table.shape()[0];
  for (int64_t i = 0; i < ids.numel(); ++i)
    for (int64_t k = 0; k < row; ++k)
      want.push_back(t[ids.data<int64_t>()[i] * row + k]);
  return want;
}

/// The [V, D] gradient of a gather: the rows of `dy` ([ids..., D])
/// scatter-added at the rows `ids` name, zeros elsewhere.
std::vector<double> gatherGradRef(const Tensor &ids, const Tensor &dy,
                                  int64_t V, int64_t D) {
  std::vector<double> g = values(dy), want(V * D, 0.0);
  for (int64_t i = 0; i < ids.numel(); ++i)
    for (int64_t d = 0; d < D; ++d)
      want[ids.data<int64_t>()[i] * D + d] += g[i * D + d];
  return want;
}

TEST_P(GatherTest, LooksUpRowsForIdsOfAnyRank) {
  struct Lookup {
    Tensor table, ids;
    std::vector<int64_t> shape; // the result's
  };
  // Rank-2 ids into [7, 5]; rank-1 ids into a rank-3 table (rows of
  // [2, 2]), and into i64 and bf16 tables.
  Tensor t3 = randomF32({4, 2, 2}, 2);
  Tensor ids1 = i64({3}, {2, 2, 0});
  const std::vector<Lookup> lookups = {
      {randomF32({7, 5}, 1), i64({2, 3}, {6, 0, 3, 3, 1, 6}), {2, 3, 5}},
      {t3, ids1, {3, 2, 2}},
      {i64({3, 1}, {10, -20, 30}), ids1, {3, 1}}, // {30, 30, 10}
      {narrow(t3, DType::BF16), ids1, {3, 2, 2}},
  };
  for (const Lookup &c : lookups) {
    SCOPED_TRACE(typeOf(c.table).str());
    DType dt = c.table.dtype();
    std::vector<Tensor> r =
        run("gather", "", {c.table, c.ids}, {TensorType{dt, c.shape}});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], dt, c.shape, gatherRef(c.table, c.ids));
  }
}

TEST_P(GatherTest, GradScatterAddsRepeatedIdsAndZeroesUnusedRows) {
  constexpr int64_t V = 6, D = 3;
  Tensor ids = i64({2, 4}, {1, 4, 1, 1, 0, 4, 5, 1});
  Tensor dy = randomF32({2, 4, D}, 3);
  std::vector<Tensor> r =
      run("gather_grad", "", {ids, dy}, {{DType::F32, {V, D}}});
  ASSERT_EQ(r.size(), 1u);
  // rows 2, 3: exact zeros
  expectNear(r[0], {V, D}, gatherGradRef(ids, dy, V, D), 1e-6, 1e-7);
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(values(r[0])[2 * D + d], 0.0);
    EXPECT_EQ(values(r[0])[3 * D + d], 0.0);
  }
  // 16-bit gradients accumulate in f32 and round once.
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor hdy = narrow(dy, dt);
    r = run("gather_grad", "", {ids, hdy}, {TensorType{dt, {V, D}}});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].dtype(), dt);
    expectNear(r[0], {V, D}, gatherGradRef(ids, hdy, V, D), rtolFor(dt), 1e-3);
  }
}

// An id outside [0, V) is found while running (on a device, by finishStep)
// and names the id and the range. (The two backends word the rest
// differently: "id 7 at index 2 is out of range [0, 5)" on the cpu,
// "index 7 at flat position 2 is outside [0, 5)" on cuda.)
TEST_P(GatherTest, IdsOutOfRangeAreRunErrors) {
  Tensor table = randomF32({5, 2}, 4);
  for (int64_t bad : {7, 5, -1}) {
    SCOPED_TRACE(bad);
    Tensor ids = i64({3}, {0, 4, bad});
    std::string msg =
        runError("gather", "", {table, ids}, {{DType::F32, {3, 2}}});
    EXPECT_NE(msg.find("gather"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(bad) + " at "), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 5)"), std::string::npos) << msg;
    Tensor dy = randomF32({3, 2}, 5);
    msg = runError("gather_grad", "", {ids, dy}, {{DType::F32, {5, 2}}});
    EXPECT_NE(msg.find("gather_grad"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(bad) + " at "), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 5)"), std::string::npos) << msg;
  }
  // The backend is usable again after the error.
  Tensor ids = i64({1}, {4});
  std::vector<Tensor> r =
      run("gather", "", {table, ids}, {{DType::F32, {1, 2}}});
  ASSERT_EQ(r.size(), 1u);
  std::vector<double> t = values(table);
  expectEqual(r[0], DType::F32, {1, 2}, {t[8], t[9]});
}

TEST_P(GatherTest, LoadErrors) {
  TensorType table{DType::F32, {5, 2}}, ids{DType::I64, {3}};
  EXPECT_EQ(loadError("gather", "", {table, TensorType{DType::F32, {3}}},
                      {TensorType{DType::F32, {3, 2}}}),
            "indices has unsupported type tensor<3xf32>");
  EXPECT_EQ(
      loadError("gather", "", {table, ids}, {TensorType{DType::F32, {3, 5}}}),
      "result #0 has type tensor<3x5xf32>, expected tensor<3x2xf32>");
  EXPECT_EQ(loadError("gather", "", {TensorType{DType::F32, {}}, ids},
                      {TensorType{DType::F32, {3}}}),
            "table must have rank >= 1");
  EXPECT_EQ(loadError("gather_grad", "", {ids, TensorType{DType::F32, {3, 3}}},
                      {table}),
            "grad tensor<3x3xf32> does not match indices tensor<3xi64> and "
            "result tensor<5x2xf32>");
  EXPECT_EQ(loadError("gather_grad", "", {ids, TensorType{DType::F32, {3, 2}}},
                      {TensorType{DType::I64, {5, 2}}}),
            "result has unsupported type tensor<5x2xi64>");
}

} // namespace

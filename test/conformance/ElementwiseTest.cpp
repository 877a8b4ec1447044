//===- ElementwiseTest.cpp - elementwise kernels on every backend ---------===//
//
// add, sub, mul, div, pow, max, neg, exp, log, sqrt, rsqrt, tanh, erf,
// equal, select and convert (including bf16 / f16 narrowing and widening),
// against double references; i64 forms exactly; bf16 / f16 operands within
// their rounding; load errors with the text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <cmath>
#include <functional>
#include <limits>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(ElementwiseTest, "elementwise", "add", "sub", "mul",
                           "div", "pow", "max", "neg", "exp", "log", "sqrt",
                           "rsqrt", "tanh", "erf", "equal", "select",
                           "convert");

using Binary = std::function<double(double, double)>;
using Unary = std::function<double(double)>;

std::vector<double> zip(const Tensor &a, const Tensor &b, const Binary &f) {
  std::vector<double> x = values(a), y = values(b), r(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    r[i] = f(x[i], y[i]);
  return r;
}

std::vector<double> map(const Tensor &a, const Unary &f) {
  std::vector<double> x = values(a), r(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    r[i] = f(x[i]);
  return r;
}

TEST_P(ElementwiseTest, BinaryF32) {
  // An odd size (not a multiple of any vector width) in three dims.
  Tensor a = randomF32({3, 4, 5}, 1), b = randomF32({3, 4, 5}, 2);
  Tensor positive = randomF32({3, 4, 5}, 3, 0.1f, 3.0f);
  std::vector<std::pair<const char *, Binary>> cases = {
      {"add", [](double x, double y) { return x + y; }},
      {"sub", [](double x, double y) { return x - y; }},
      {"mul", [](double x, double y) { return x * y; }},
      {"div", [](double x, double y) { return x / y; }},
      {"max", [](double x, double y) { return std::max(x, y); }},
  };
  for (const auto &[name, f] : cases) {
    SCOPED_TRACE(name);
    std::vector<Tensor> r = run(name, "", {a, b}, {typeOf(a)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], a.shape(), zip(a, b, f), 1e-6, 1e-7);
  }
  std::vector<Tensor> r = run("pow", "", {positive, b}, {typeOf(a)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(
      r[0], a.shape(),
      zip(positive, b, [](double x, double y) { return std::pow(x, y); }), 1e-6,
      1e-7);
}

// torch.maximum semantics: NaN in either operand propagates.
TEST_P(ElementwiseTest, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = f32({4}, {nan, 1.0f, -2.0f, 3.0f});
  Tensor b = f32({4}, {1.0f, nan, -1.0f, -3.0f});
  std::vector<Tensor> r = run("max", "", {a, b}, {typeOf(a)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {4}, {NAN, NAN, -1.0, 3.0}, 0, 0);
}

// i64: exact; div truncates toward zero (C++ and torch.div(rounding_mode=
// "trunc")).
TEST_P(ElementwiseTest, BinaryAndNegI64) {
  Tensor a = i64({6}, {7, -7, 7, -7, 1LL << 40, 0});
  Tensor b = i64({6}, {2, 2, -2, -2, 3, 5});
  std::vector<std::pair<const char *, std::vector<double>>> cases = {
      {"add", {9, -5, 5, -9, (1LL << 40) + 3, 5}},
      {"sub", {5, -9, 9, -5, (1LL << 40) - 3, -5}},
      {"mul", {14, -14, -14, 14, 3.0 * (1LL << 40), 0}},
      {"div", {3, -3, -3, 3, static_cast<double>((1LL << 40) / 3), 0}},
      {"max", {7, 2, 7, -2, static_cast<double>(1LL << 40), 5}},
  };
  for (const auto &[name, want] : cases) {
    SCOPED_TRACE(name);
    std::vector<Tensor> r = run(name, "", {a, b}, {typeOf(a)});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], DType::I64, {6}, want);
  }
  std::vector<Tensor> r = run("neg", "", {a}, {typeOf(a)});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {6},
              {-7, 7, -7, 7, -static_cast<double>(1LL << 40), 0});
}

TEST_P(ElementwiseTest, UnaryF32) {
  Tensor x = randomF32({4, 33}, 7, -3.0f, 3.0f);
  Tensor pos = randomF32({4, 33}, 8, 0.05f, 4.0f);
  std::vector<std::tuple<const char *, const Tensor *, Unary>> cases = {
      {"neg", &x, [](double v) { return -v; }},
      {"exp", &x, [](double v) { return std::exp(v); }},
      {"tanh", &x, [](double v) { return std::tanh(v); }},
      {"erf", &x, [](double v) { return std::erf(v); }},
      {"log", &pos, [](double v) { return std::log(v); }},
      {"sqrt", &pos, [](double v) { return std::sqrt(v); }},
      {"rsqrt", &pos, [](double v) { return 1 / std::sqrt(v); }},
  };
  for (const auto &[name, in, f] : cases) {
    SCOPED_TRACE(name);
    std::vector<Tensor> r = run(name, "", {*in}, {typeOf(*in)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], in->shape(), map(*in, f), 2e-6, 1e-7);
  }
}

// log(0) = -inf, sqrt(-1) = NaN, exp(+-inf), as in IEEE / torch.
TEST_P(ElementwiseTest, UnaryEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = f32({3}, {0.0f, -inf, inf});
  std::vector<Tensor> r = run("log", "", {x}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {3}, {-INFINITY, NAN, INFINITY}, 0, 0);
  r = run("exp", "", {x}, {typeOf(x)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {3}, {1, 0, INFINITY}, 0, 0);
  Tensor neg = f32({2}, {-1.0f, 4.0f});
  r = run("sqrt", "", {neg}, {typeOf(neg)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {2}, {NAN, 2}, 0, 0);
}

TEST_P(ElementwiseTest, EqualAndSelect) {
  Tensor a = f32({5}, {1, 2, 3, 4, -0.0f});
  Tensor b = f32({5}, {1, 0, 3, 0, 0.0f});
  std::vector<Tensor> r = run("equal", "", {a, b}, {{DType::I1, {5}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I1, {5}, {1, 0, 1, 0, 1}); // -0 == +0
  Tensor ia = i64({5}, {5, 6, 7, 8, -1}), ib = i64({5}, {0, 6, 0, 8, -1});
  r = run("equal", "", {ia, ib}, {{DType::I1, {5}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I1, {5}, {0, 1, 0, 1, 1});

  Tensor cond = i1({5}, {0, 1, 0, 1, 1});
  r = run("select", "", {cond, a, b}, {typeOf(a)});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {5}, {1, 2, 3, 4, -0.0});
  r = run("select", "", {cond, ia, ib}, {typeOf(ia)});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {5}, {0, 6, 0, 8, -1});
  // Data-movement kernels take 16-bit floats as they are.
  Tensor ha = narrow(a, DType::BF16), hb = narrow(b, DType::BF16);
  r = run("select", "", {cond, ha, hb}, {typeOf(ha)});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::BF16, {5}, {1, 2, 3, 4, 0});
}

// f32 -> i64 truncates toward zero, anything -> i1 is (x != 0), i1 -> number
// is 0 / 1.
TEST_P(ElementwiseTest, ConvertBetweenF32I64AndI1) {
  Tensor f = f32({5}, {-2.7f, 0.0f, 0.5f, 3.9f, -0.5f});
  std::vector<Tensor> r = run("convert", "", {f}, {{DType::I64, {5}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I64, {5}, {-2, 0, 0, 3, 0});
  r = run("convert", "", {f}, {{DType::I1, {5}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I1, {5}, {1, 0, 1, 1, 1});
  Tensor b = i1({3}, {1, 0, 1});
  r = run("convert", "", {b}, {{DType::F32, {3}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {3}, {1, 0, 1});
  Tensor i = i64({3}, {-3, 0, 1LL << 24});
  r = run("convert", "", {i}, {{DType::F32, {3}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {3}, {-3, 0, 16777216.0});
  r = run("convert", "", {i}, {{DType::I1, {3}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::I1, {3}, {1, 0, 1});
}

// f32 -> bf16 rounds to nearest even (ties to even), keeps NaN a NaN;
// bf16 -> f32 / i64 is exact.
TEST_P(ElementwiseTest, ConvertBF16RoundsToNearestEven) {
  Tensor f = f32({6}, {1.00390625f, 1.01171875f, -3.5f, 0.0f, -1e30f,
                       std::numeric_limits<float>::quiet_NaN()});
  std::vector<Tensor> r = run("convert", "", {f}, {{DType::BF16, {6}}});
  ASSERT_EQ(r.size(), 1u);
  // 1 + 2^-8 is a tie -> 1 (even); 1 + 3·2^-8 is a tie -> 1 + 2^-6 (even).
  expectEqual(r[0], DType::BF16, {6},
              {1.0, 1.015625, -3.5, 0.0,
               tessera::runtime::toFloat(tessera::runtime::toBFloat16(-1e30f)),
               NAN});
  Tensor h = narrow(f32({4}, {-3.5f, 0.0f, 2.75f, 1e15f}), DType::BF16);
  r = run("convert", "", {h}, {{DType::F32, {4}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {4}, values(h));
  r = run("convert", "", {h}, {{DType::I64, {4}}});
  ASSERT_EQ(r.size(), 1u);
  std::vector<double> hv = values(h);
  expectEqual(r[0], DType::I64, {4}, {-3, 0, 2, std::trunc(hv[3])});
  Tensor i = i64({2}, {-3, 257});
  r = run("convert", "", {i}, {{DType::BF16, {2}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::BF16, {2}, {-3, 256}); // 257 -> tie -> 256
}

// f32 -> f16 rounds to nearest even, overflows to inf from 65520 and keeps
// subnormals; f16 -> f32 is exact.
TEST_P(ElementwiseTest, ConvertF16RoundsAndOverflows) {
  Tensor f = f32({6}, {65504.0f, 65520.0f, -1e6f, 1.0f + 1.0f / 2048,
                       5.9604645e-8f, 0.1f});
  std::vector<Tensor> r = run("convert", "", {f}, {{DType::F16, {6}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F16, {6},
              {65504.0, INFINITY, -INFINITY, 1.0, 5.9604644775390625e-8,
               0.0999755859375});
  Tensor h = narrow(f32({3}, {-2.5f, 0.1f, 6e-5f}), DType::F16);
  r = run("convert", "", {h}, {{DType::F32, {3}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F32, {3}, values(h));
  // bf16 <-> f16 goes through f32: each rounding once.
  Tensor b = narrow(f32({2}, {1.5f, 3e5f}), DType::BF16);
  r = run("convert", "", {b}, {{DType::F16, {2}}});
  ASSERT_EQ(r.size(), 1u);
  expectEqual(r[0], DType::F16, {2}, {1.5, INFINITY});
}

// 16-bit float operands of the arithmetic kernels: the f32 result of the
// exactly widened operands, rounded once.
TEST_P(ElementwiseTest, Float16BitOperands) {
  Tensor a = randomF32({2, 37}, 11), b = randomF32({2, 37}, 12);
  Tensor pos = randomF32({2, 37}, 13, 0.1f, 3.0f);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor ha = narrow(a, dt), hb = narrow(b, dt), hp = narrow(pos, dt);
    TensorType t{dt, a.shape()};
    std::vector<Tensor> r = run("add", "", {ha, hb}, {t});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].dtype(), dt);
    expectNear(r[0], a.shape(),
               zip(ha, hb, [](double x, double y) { return x + y; }),
               rtolFor(dt), 1e-6);
    r = run("mul", "", {ha, hb}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], a.shape(),
               zip(ha, hb, [](double x, double y) { return x * y; }),
               rtolFor(dt), 1e-6);
    r = run("pow", "", {hp, hb}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], a.shape(),
               zip(hp, hb, [](double x, double y) { return std::pow(x, y); }),
               rtolFor(dt), 1e-6);
    r = run("exp", "", {ha}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], a.shape(), map(ha, [](double v) { return std::exp(v); }),
               rtolFor(dt), 1e-6);
    r = run("neg", "", {ha}, {t});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], dt, a.shape(), map(ha, [](double v) { return -v; }));
    r = run("equal", "", {ha, ha}, {{DType::I1, a.shape()}});
    ASSERT_EQ(r.size(), 1u);
    expectEqual(r[0], DType::I1, a.shape(), std::vector<double>(74, 1.0));
  }
}

// Load errors: the same text on every backend (the program is validated the
// same way for all of them before the backend binds it).
TEST_P(ElementwiseTest, LoadErrors) {
  TensorType f2{DType::F32, {2}}, f3{DType::F32, {3}}, i2{DType::I64, {2}};
  EXPECT_EQ(loadError("frobnicate", "", {f2}, {f2}), "unknown kernel");
  EXPECT_EQ(loadError("add", "", {f2, f3}, {f2}),
            "operand #1 has type tensor<3xf32> but operand #0 has "
            "tensor<2xf32>; they must match");
  EXPECT_EQ(loadError("add", "", {f2, f2}, {f3}),
            "result #0 has type tensor<3xf32>, expected tensor<2xf32>");
  EXPECT_EQ(loadError("add", "", {f2}, {f2}),
            "expects 2 operand(s) and 1 result(s), got 1 and 1");
  EXPECT_EQ(loadError("pow", "", {i2, i2}, {i2}),
            "operand has unsupported type tensor<2xi64>");
  EXPECT_EQ(loadError("exp", "", {i2}, {i2}),
            "operand has unsupported type tensor<2xi64>");
  EXPECT_EQ(loadError("select", "", {f2, f2, f2}, {f2}),
            "condition has unsupported type tensor<2xf32>");
  EXPECT_EQ(loadError("select", "", {TensorType{DType::I1, {3}}, f2, f2}, {f2}),
            "condition tensor<3xi1> and values tensor<2xf32> differ in shape");
  EXPECT_EQ(loadError("equal", "", {f2, f2}, {f2}),
            "result #0 has type tensor<2xf32>, expected tensor<2xi1>");
  EXPECT_EQ(loadError("convert", "", {f2}, {TensorType{DType::I64, {3}}}),
            "cannot convert tensor<2xf32> to tensor<3xi64>");
}

} // namespace

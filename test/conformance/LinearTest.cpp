//===- LinearTest.cpp - fused linear layer (tsr-fuse-linear) --------------===//
//
// linear (GEMM + bias + activation, with and without the preactivation) and
// bias_activation_grad (activation gradient + bias gradient) against the
// unfused composition of the same backend's kernels (matmul, broadcast,
// add, gelu / relu / silu; gelu_grad / relu_grad / silu_grad, reduce_sum):
// equal up to fp32 reassociation. Also against a double reference, over
// every activation, transposes, batched and shared operands, a row count
// past one CPU row block (cpu::kLinearBlockBytes), and load errors with the
// text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <cmath>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(LinearTest, "linear", "linear",
                           "bias_activation_grad");

constexpr double kSqrt2OverPi = 0.7978845608028654;

/// tsr.linear's activations: attribute value, the unfused kernel and its
/// attributes, the double reference and its derivative.
struct Act {
  const char *name;
  const char *kernel, *kernelAttrs, *gradKernel;
  double (*f)(double);
  double (*df)(double);
};

const Act kActs[] = {
    {"none", nullptr, "", nullptr, [](double x) { return x; },
     [](double) { return 1.0; }},
    {"gelu", "gelu", "", "gelu_grad",
     [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
     [](double x) {
       return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
              x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
     }},
    {"gelu_tanh", "gelu", "approximate = \"tanh\"", "gelu_grad",
     [](double x) {
       return 0.5 * x *
              (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
     },
     [](double x) {
       double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
       return 0.5 * (1 + t) +
              0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * x * x);
     }},
    {"relu", "relu", "", "relu_grad", [](double x) { return x < 0 ? 0.0 : x; },
     [](double x) { return x > 0 ? 1.0 : 0.0; }},
    {"silu", "silu", "", "silu_grad",
     [](double x) { return x / (1 + std::exp(-x)); },
     [](double x) {
       double s = 1 / (1 + std::exp(-x));
       return s * (1 + x * (1 - s));
     }},
};

/// out = a · b (rank-2 operands shared by every batch), in double.
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

std::string linearAttrs(bool ta, bool tb, const char *act) {
  std::string s = std::string("activation = \"") + act + "\"";
  if (ta)
    s += ", transpose_lhs = true";
  if (tb)
    s += ", transpose_rhs = true";
  return s;
}

std::string transposeAttrs(bool ta, bool tb) {
  std::string s;
  if (ta)
    s += "transpose_lhs = true";
  if (tb)
    s += std::string(ta ? ", " : "") + "transpose_rhs = true";
  return s;
}

std::string leadingAxes(int64_t rank) {
  std::string s = "axes = array<i64";
  for (int64_t i = 0; i + 1 < rank; ++i)
    s += (i ? ", " : ": ") + std::to_string(i);
  return s + ">";
}

struct Case {
  std::vector<int64_t> a, b;
  bool ta, tb;
};

// The fused kernel against matmul -> broadcast(bias) -> add -> activation
// run as separate kernels on the same backend, and against a double
// reference; with and without the preactivation result.
TEST_P(LinearTest, MatchesUnfusedComposition) {
  std::vector<Case> cases = {
      {{4, 9, 8}, {10, 8}, false, true},        // nn.Linear, batch folded
      {{5, 7}, {7, 16}, false, false},          // plain
      {{7, 5}, {7, 16}, true, false},           // transposed lhs
      {{2, 3, 6, 4}, {2, 3, 5, 6}, true, true}, // batched both
      {{9, 4}, {3, 9, 8}, true, false},         // shared lhs
      {{1100, 16}, {16, 256}, false, false},    // two CPU row blocks
  };
  uint32_t seed = 100;
  for (const Case &c : cases) {
    Tensor a = randomF32(c.a, seed++), b = randomF32(c.b, seed++);
    std::vector<int64_t> outShape;
    std::vector<double> product = matmulRef(a, b, c.ta, c.tb, outShape);
    int64_t n = outShape.back();
    Tensor bias = randomF32({n}, seed++);
    std::vector<double> bv = values(bias);
    TensorType outType{DType::F32, outShape};
    // The unfused composition, once per case.
    std::vector<Tensor> mm =
        run("matmul", transposeAttrs(c.ta, c.tb), {a, b}, {outType});
    ASSERT_EQ(mm.size(), 1u);
    std::vector<Tensor> bb = run("broadcast", "", {bias}, {outType});
    ASSERT_EQ(bb.size(), 1u);
    std::vector<Tensor> pre = run("add", "", {mm[0], bb[0]}, {outType});
    ASSERT_EQ(pre.size(), 1u);
    std::vector<double> preRef = product;
    for (size_t i = 0; i < preRef.size(); ++i)
      preRef[i] += bv[i % n];
    for (const Act &act : kActs) {
      for (bool withPre : {false, true}) {
        if (withPre && !act.kernel)
          continue;
        std::string attrs = linearAttrs(c.ta, c.tb, act.name);
        SCOPED_TRACE(typeOf(a).str() + " x " + typeOf(b).str() + " {" + attrs +
                     "}" + (withPre ? " with preactivation" : ""));
        std::vector<TensorType> outs = {outType};
        if (withPre)
          outs.push_back(outType);
        std::vector<Tensor> r = run("linear", attrs, {a, b, bias}, outs);
        ASSERT_EQ(r.size(), outs.size());
        Tensor unfused = pre[0];
        if (act.kernel) {
          std::vector<Tensor> y =
              run(act.kernel, act.kernelAttrs, {pre[0]}, {outType});
          ASSERT_EQ(y.size(), 1u);
          unfused = y[0];
        }
        // Fused == unfused up to reassociation of the GEMM's sums.
        expectNear(r[0], outShape, values(unfused), 1e-6, 1e-6,
                   "result vs unfused");
        std::vector<double> want = preRef;
        for (double &v : want)
          v = act.f(v);
        expectNear(r[0], outShape, want, 1e-5, 1e-5, "result vs reference");
        if (withPre) {
          expectNear(r[1], outShape, values(pre[0]), 1e-6, 1e-6,
                     "preactivation vs unfused");
          expectNear(r[1], outShape, preRef, 1e-5, 1e-5,
                     "preactivation vs reference");
        }
      }
    }
  }
}

// The activation gradient and bias gradient against <act>_grad then
// reduce_sum over the leading axes, and a double reference.
TEST_P(LinearTest, BiasActivationGradMatchesUnfused) {
  uint32_t seed = 200;
  for (std::vector<int64_t> shape :
       std::vector<std::vector<int64_t>>{{8, 16, 24}, {33, 7}, {3, 700}}) {
    Tensor x = randomF32(shape, seed++, -3.0f, 3.0f);
    Tensor dy = randomF32(shape, seed++);
    int64_t n = shape.back();
    TensorType xType = typeOf(x), bType{DType::F32, {n}};
    std::vector<double> xv = values(x), dyv = values(dy);
    for (const Act &act : kActs) {
      if (!act.gradKernel)
        continue;
      SCOPED_TRACE(xType.str() + " " + act.name);
      std::string attrs = std::string("activation = \"") + act.name + "\"";
      std::vector<Tensor> r =
          run("bias_activation_grad", attrs, {x, dy}, {xType, bType});
      ASSERT_EQ(r.size(), 2u);
      std::vector<Tensor> g =
          run(act.gradKernel, act.kernelAttrs, {x, dy}, {xType});
      ASSERT_EQ(g.size(), 1u);
      std::vector<Tensor> s =
          run("reduce_sum", leadingAxes(static_cast<int64_t>(shape.size())),
              {g[0]}, {bType});
      ASSERT_EQ(s.size(), 1u);
      // The unfused gradient kernels may use vector math (VecMath.h): a few
      // ulps apart, with absolute slack near the derivative's zeros.
      expectNear(r[0], shape, values(g[0]), 2e-6, 1e-6, "dx vs unfused");
      expectNear(r[1], {n}, values(s[0]), 1e-6, 1e-6, "dbias vs unfused");
      std::vector<double> dx(xv.size()), db(n, 0.0);
      for (size_t i = 0; i < xv.size(); ++i) {
        dx[i] = dyv[i] * act.df(xv[i]);
        db[i % n] += dx[i];
      }
      expectNear(r[0], shape, dx, 2e-6, 1e-6, "dx vs reference");
      expectNear(r[1], {n}, db, 1e-5, 1e-5, "dbias vs reference");
    }
  }
}

TEST_P(LinearTest, LoadErrors) {
  TensorType a{DType::F32, {2, 3}}, w{DType::F32, {3, 5}},
      bias{DType::F32, {5}}, out{DType::F32, {2, 5}};
  EXPECT_EQ(
      loadError("linear", "", {a, w, TensorType{DType::F32, {1, 5}}}, {out}),
      "bias has type tensor<1x5xf32>, expected tensor<5xf32>");
  EXPECT_EQ(
      loadError("linear", "", {a, TensorType{DType::F32, {4, 5}}, bias}, {out}),
      "contracting sizes differ: 3 vs 4 (tensor<2x3xf32>, "
      "tensor<4x5xf32>)");
  EXPECT_EQ(loadError("linear", "activation = \"swish\"", {a, w, bias}, {out}),
            "attribute 'activation' must be \"none\", \"gelu\", "
            "\"gelu_tanh\", \"relu\" or \"silu\", got \"swish\"");
  EXPECT_EQ(loadError("linear", "", {a, w, bias}, {out, out}),
            "a preactivation result needs an activation");
  EXPECT_EQ(loadError("linear", "", {a, w}, {out}),
            "expects 3 operand(s) and 1 or 2 result(s), got 2 and 1");
  EXPECT_EQ(loadError("bias_activation_grad", "activation = \"none\"",
                      {out, out}, {out, bias}),
            "attribute 'activation' must be \"gelu\", \"gelu_tanh\", "
            "\"relu\" or \"silu\", got \"none\"");
  EXPECT_EQ(loadError("bias_activation_grad", "", {out, out}, {out, bias}),
            "missing attribute 'activation'");
  EXPECT_EQ(loadError("bias_activation_grad", "activation = \"gelu\"",
                      {out, out}, {out, TensorType{DType::F32, {2}}}),
            "result #1 has type tensor<2xf32>, expected tensor<5xf32>");
}

} // namespace

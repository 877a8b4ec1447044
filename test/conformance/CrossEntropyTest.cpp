//===- CrossEntropyTest.cpp - cross_entropy and cross_entropy_grad --------===//
//
// The summed natural-log cross-entropy of logits [N, V] against i64 labels
// (the compiler scales it to the mean) and its gradient scaled by an f32
// dloss, against a double reference and PyTorch constants; rows of large
// logits (stability); bf16 / f16 logits with an f32 loss; a label outside
// [0, V) is a run error on every backend; shape errors are load errors with
// the text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <cmath>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(CrossEntropyTest, "cross_entropy", "cross_entropy",
                           "cross_entropy_grad");

/// Sum over rows of logsumexp(x) - x[label], and d/dx · dloss.
double crossEntropyRef(const std::vector<double> &x,
                       const std::vector<int64_t> &labels, int64_t v,
                       double dloss, std::vector<double> &grad) {
  int64_t n = labels.size();
  double loss = 0;
  grad.assign(x.size(), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < v; ++j)
      mx = std::max(mx, x[r * v + j]);
    for (int64_t j = 0; j < v; ++j)
      s += std::exp(x[r * v + j] - mx);
    double lse = mx + std::log(s);
    loss += lse - x[r * v + labels[r]];
    for (int64_t j = 0; j < v; ++j)
      grad[r * v + j] =
          (std::exp(x[r * v + j] - lse) - (j == labels[r] ? 1 : 0)) * dloss;
  }
  return loss;
}

TEST_P(CrossEntropyTest, LossAndGradMatchReference) {
  for (auto [n, v] : {std::pair<int64_t, int64_t>{6, 9}, {3, 1000}, {1, 2}}) {
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(v));
    Tensor logits = randomF32({n, v}, n + v, -4.0f, 4.0f);
    logits.data<float>()[0] = 80.0f; // exp(80) overflows f32: stability
    std::vector<int64_t> lab;
    for (int64_t r = 0; r < n; ++r)
      lab.push_back((r * 7 + 3) % v);
    lab[0] = 0; // the large logit is the target of row 0
    Tensor labels = i64({n}, lab);
    std::vector<double> grad;
    double want = crossEntropyRef(values(logits), lab, v, 0.25, grad);
    std::vector<Tensor> r =
        run("cross_entropy", "", {logits, labels}, {{DType::F32, {}}});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], {}, {want}, 1e-5, 1e-6, "loss");
    Tensor dloss = f32({}, {0.25f});
    r = run("cross_entropy_grad", "", {logits, labels, dloss},
            {typeOf(logits)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], {n, v}, grad, 1e-5, 1e-7, "dlogits");
    // dloss may have any shape with one element.
    Tensor dloss1 = f32({1, 1}, {0.25f});
    r = run("cross_entropy_grad", "", {logits, labels, dloss1},
            {typeOf(logits)});
    ASSERT_EQ(r.size(), 1u);
    expectNear(r[0], {n, v}, grad, 1e-5, 1e-7, "dlogits (dloss [1, 1])");
  }
}

// Produced by (torch 1.13, /usr/bin/python3):
//   x = torch.tensor([[2., -1., 0.5], [0., 0., 3.]], requires_grad=True)
//   l = torch.nn.functional.cross_entropy(x, torch.tensor([0, 1]),
//                                         reduction='sum')
//   l.backward(); print(l.item(), x.grad)
TEST_P(CrossEntropyTest, MatchesTorch) {
  Tensor logits = f32({2, 3}, {2.0f, -1.0f, 0.5f, 0.0f, 0.0f, 3.0f});
  Tensor labels = i64({2}, {0, 1});
  std::vector<Tensor> r =
      run("cross_entropy", "", {logits, labels}, {{DType::F32, {}}});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {}, {3.3362343311309814}, 1e-6, 0);
  r = run("cross_entropy_grad", "", {logits, labels, f32({}, {1.0f})},
          {typeOf(logits)});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {2, 3},
             {-0.214402973651886, 0.03911257162690163, 0.17529039084911346,
              0.04527849704027176, -0.9547215104103088, 0.9094430208206177},
             1e-6, 1e-8);
}

TEST_P(CrossEntropyTest, Float16BitLogitsKeepAnF32Loss) {
  Tensor logits = randomF32({4, 50}, 31, -3.0f, 3.0f);
  Tensor labels = i64({4}, {0, 49, 7, 7});
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(tessera::runtime::dtypeName(dt));
    Tensor h = narrow(logits, dt);
    std::vector<double> grad;
    double want = crossEntropyRef(values(h), {0, 49, 7, 7}, 50, 1.0, grad);
    std::vector<Tensor> r =
        run("cross_entropy", "", {h, labels}, {{DType::F32, {}}});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].dtype(), DType::F32);
    expectNear(r[0], {}, {want}, 1e-5, 1e-5, "loss"); // f32 from exact inputs
    r = run("cross_entropy_grad", "", {h, labels, f32({}, {1.0f})},
            {TensorType{dt, {4, 50}}});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].dtype(), dt);
    expectNear(r[0], {4, 50}, grad, rtolFor(dt), 1e-4, "dlogits");
  }
}

// A label outside [0, V) names the label, its row and the range. (The
// backends word it differently: "label 9 in row 3 is out of range [0, 9)"
// on the cpu, "label 9 of row 3 is outside [0, 9)" on cuda.)
TEST_P(CrossEntropyTest, LabelsOutOfRangeAreRunErrors) {
  Tensor logits = randomF32({4, 9}, 41);
  for (int64_t bad : {9, -1}) {
    SCOPED_TRACE(bad);
    Tensor labels = i64({4}, {0, 8, 3, bad});
    std::string msg =
        runError("cross_entropy", "", {logits, labels}, {{DType::F32, {}}});
    EXPECT_NE(msg.find("label " + std::to_string(bad)), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 9)"), std::string::npos) << msg;
    msg = runError("cross_entropy_grad", "", {logits, labels, f32({}, {1.0f})},
                   {typeOf(logits)});
    EXPECT_NE(msg.find("label " + std::to_string(bad)), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("[0, 9)"), std::string::npos) << msg;
  }
}

TEST_P(CrossEntropyTest, LoadErrors) {
  TensorType logits{DType::F32, {4, 9}}, labels{DType::I64, {4}};
  TensorType loss{DType::F32, {}};
  EXPECT_EQ(loadError("cross_entropy", "",
                      {logits, TensorType{DType::I64, {3}}}, {loss}),
            "expects logits [N, V] and labels [N], got tensor<4x9xf32> and "
            "tensor<3xi64>");
  EXPECT_EQ(loadError("cross_entropy", "",
                      {TensorType{DType::F32, {2, 2, 9}}, labels}, {loss}),
            "expects logits [N, V] and labels [N], got tensor<2x2x9xf32> and "
            "tensor<4xi64>");
  EXPECT_EQ(loadError("cross_entropy", "",
                      {logits, TensorType{DType::F32, {4}}}, {loss}),
            "labels has unsupported type tensor<4xf32>");
  EXPECT_EQ(loadError("cross_entropy", "", {logits, labels},
                      {TensorType{DType::F32, {4}}}),
            "result #0 has type tensor<4xf32>, expected tensor<f32>");
  EXPECT_EQ(loadError("cross_entropy_grad", "",
                      {logits, labels, TensorType{DType::F32, {2}}}, {logits}),
            "grad must have one element, got tensor<2xf32>");
}

} // namespace

//===- OptimizerTest.cpp - sgd_update, adamw_update and their multi forms -===//
//
// Exact torch.optim arithmetic (torch 1.13): SGD with weight decay and
// AdamW over two steps (the second from the first's outputs), against
// PyTorch constants; a larger random tensor against a double reference of
// the same formulas; the manifest's double hyper-parameters
// (CompileOptions::optimizer: torch's AdamW constants are only reached with
// them); the multi-tensor forms (tsr-fuse-optimizer) bit for bit against
// the per-tensor kernels on tensors of several shapes, also when written
// in place; load errors with the text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include "llvm/Support/JSON.h"

#include <cmath>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(OptimizerTest, "optimizers", "sgd_update",
                           "adamw_update", "multi_sgd_update",
                           "multi_adamw_update");

std::string sgdAttrs(double wd) { return f32Attr("weight_decay", wd); }

std::string adamwAttrs(double b1, double b2, double eps, double wd) {
  return f32Attr("beta1", b1) + ", " + f32Attr("beta2", b2) + ", " +
         f32Attr("eps", eps) + ", " + f32Attr("weight_decay", wd);
}

/// The learning-rate operand: an f32 scalar (the "hyper" argument "lr").
Tensor lrOperand(double lr) { return f32({}, {static_cast<float>(lr)}); }

// Produced by (torch 1.13, /usr/bin/python3):
//   p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
//   o = torch.optim.SGD([p], lr=0.1, momentum=0, weight_decay=0.01)
//   p.grad = torch.tensor([0.1, -0.2, 0.3]); o.step(); print(p)
TEST_P(OptimizerTest, SgdMatchesTorch) {
  Tensor p = f32({3}, {0.5f, -1.0f, 2.0f}), g = f32({3}, {0.1f, -0.2f, 0.3f});
  llvm::json::Object manifest{{"lr", 0.1}, {"weight_decay", 0.01}};
  tessera::runtime::exec::CompileOptions options;
  options.optimizer = &manifest;
  std::vector<Tensor> r = run("sgd_update", sgdAttrs(0.01),
                              {p, g, lrOperand(0.1)}, {typeOf(p)}, options);
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {3},
             {0.4894999861717224, -0.9789999723434448, 1.968000054359436}, 2e-7,
             0);
}

// Produced by (torch 1.13, /usr/bin/python3):
//   p = torch.nn.Parameter(torch.tensor([[0.5, -1.0, 2.0], [0.0, 3.0, -0.25]]))
//   opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
//                           weight_decay=0.1)
//   for g in [torch.tensor([[0.1, -0.2, 0.3], [0.0, 1.5, -0.05]]),
//             torch.tensor([[-0.3, 0.25, 0.0], [0.7, -1.0, 0.01]])]:
//       p.grad = g.clone(); opt.step()
//       print(p, opt.state[p]['exp_avg'], opt.state[p]['exp_avg_sq'])
TEST_P(OptimizerTest, AdamWMatchesTorchOverTwoSteps) {
  Tensor p = f32({2, 3}, {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -0.25f});
  Tensor zeros = f32({2, 3}, std::vector<float>(6, 0.0f));
  Tensor g1 = f32({2, 3}, {0.1f, -0.2f, 0.3f, 0.0f, 1.5f, -0.05f});
  Tensor g2 = f32({2, 3}, {-0.3f, 0.25f, 0.0f, 0.7f, -1.0f, 0.01f});
  std::string attrs = adamwAttrs(0.9, 0.999, 1e-8, 0.1);
  // As in a plan: the manifest holds torch's doubles (with only the f32
  // attributes, 1 - beta2 would be 0.00099998713 instead of 0.001); the
  // learning rate is the f32 operand (f32(0.01) is within 2.3e-8 relative
  // of torch's double, far inside the tolerance).
  llvm::json::Object manifest{{"lr", 1e-2},
                              {"beta1", 0.9},
                              {"beta2", 0.999},
                              {"eps", 1e-8},
                              {"weight_decay", 0.1}};
  tessera::runtime::exec::CompileOptions options;
  options.optimizer = &manifest;
  TensorType t = typeOf(p);
  std::vector<Tensor> s1 =
      run("adamw_update", attrs,
          {p, g1, zeros, zeros, f32({}, {1.0f}), lrOperand(1e-2)}, {t, t, t},
          options);
  ASSERT_EQ(s1.size(), 3u);
  expectNear(s1[0], {2, 3},
             {0.4895000159740448, -0.9890000224113464, 1.9880000352859497, 0.0,
              2.986999988555908, -0.23975001275539398},
             3e-7, 1e-9, "p1");
  expectNear(s1[1], {2, 3},
             {0.010000000707805157, -0.020000001415610313, 0.030000001192092896,
              0.0, 0.15000000596046448, -0.005000000353902578},
             3e-7, 1e-12, "m1");
  expectNear(s1[2], {2, 3},
             {1.0000000656873453e-05, 4.0000002627493814e-05,
              9.000000864034519e-05, 0.0, 0.0022499999031424522,
              2.5000001642183634e-06},
             3e-7, 1e-14, "v1");
  std::vector<Tensor> s2 =
      run("adamw_update", attrs,
          {s1[0], g2, s1[1], s1[2], f32({1}, {2.0f}), lrOperand(1e-2)},
          {t, t, t}, options);
  ASSERT_EQ(s2.size(), 3u);
  expectNear(s2[0], {2, 3},
             {0.4939524233341217, -0.9896383881568909, 1.979311466217041,
              -0.007441368419677019, 2.98256778717041, -0.23440000414848328},
             3e-7, 1e-9, "p2");
  expectNear(s2[1], {2, 3},
             {-0.021000001579523087, 0.006999999284744263, 0.027000000700354576,
              0.07000000029802322, 0.03500000387430191, -0.0035000003408640623},
             3e-7, 1e-12, "m2");
  expectNear(s2[2], {2, 3},
             {9.999000758398324e-05, 0.00010246000601910055,
              8.991001232061535e-05, 0.0004900000058114529,
              0.0032477499917149544, 2.5975002699851757e-06},
             3e-7, 1e-14, "v2");
}

// A tensor larger than any vector width or chunk, at step 7, against the
// formulas of runtime/backends/cpu/CpuKernels.h in double.
TEST_P(OptimizerTest, RandomTensorsMatchTheFormulas) {
  constexpr int64_t n = 4099;
  Tensor p = randomF32({n}, 1), g = randomF32({n}, 2, -1e-2f, 1e-2f);
  Tensor m = randomF32({n}, 3, -1e-2f, 1e-2f), v = randomF32({n}, 4, 0, 1e-4f);
  // The f32 attributes and lr operand as the kernel sees them (no
  // manifest).
  double lr = 3e-4f, b1 = 0.8f, b2 = 0.95f, eps = 1e-6f, wd = 0.1f;
  double step = 7;
  std::vector<double> pv = values(p), gv = values(g), mv = values(m),
                      vv = values(v), wp(n), wm(n), wv(n), ws(n);
  for (int64_t i = 0; i < n; ++i) {
    double pi = pv[i] * (1 - lr * wd);
    wm[i] = mv[i] * b1 + (1 - b1) * gv[i];
    wv[i] = vv[i] * b2 + (1 - b2) * gv[i] * gv[i];
    double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    wp[i] = pi - lr / bc1 * wm[i] / (std::sqrt(wv[i]) / std::sqrt(bc2) + eps);
    ws[i] = pv[i] - lr * (gv[i] + wd * pv[i]);
  }
  TensorType t = typeOf(p);
  std::vector<Tensor> r =
      run("adamw_update", adamwAttrs(b1, b2, eps, wd),
          {p, g, m, v, f32({}, {7.0f}), lrOperand(lr)}, {t, t, t});
  ASSERT_EQ(r.size(), 3u);
  expectNear(r[0], {n}, wp, 1e-6, 1e-7, "p");
  expectNear(r[1], {n}, wm, 1e-6, 1e-10, "m");
  expectNear(r[2], {n}, wv, 1e-6, 1e-12, "v");
  r = run("sgd_update", sgdAttrs(wd), {p, g, lrOperand(lr)}, {t});
  ASSERT_EQ(r.size(), 1u);
  expectNear(r[0], {n}, ws, 1e-6, 1e-8, "sgd p");
}

// tsr.multi_sgd_update / tsr.multi_adamw_update: N = 4 tensors of
// different sizes (one past a vector width, one past the CUDA backend's
// 65536-element multi-tensor chunk, one scalar-like), updated in one call,
// must equal the per-tensor kernels bit for bit (same arithmetic, one
// tensor after another), under torch's double hyper-parameters from the
// manifest and at step 3.
TEST_P(OptimizerTest, MultiTensorUpdatesEqualPerTensorBitForBit) {
  const std::vector<std::vector<int64_t>> shapes = {
      {4, 33}, {65536 + 17}, {1}, {5, 3, 7}};
  size_t n = shapes.size();
  std::vector<Tensor> p, g, m, v;
  for (size_t i = 0; i < n; ++i) {
    auto seed = static_cast<uint32_t>(10 * (i + 1));
    p.push_back(randomF32(shapes[i], seed));
    g.push_back(randomF32(shapes[i], seed + 1, -1e-2f, 1e-2f));
    m.push_back(randomF32(shapes[i], seed + 2, -1e-2f, 1e-2f));
    v.push_back(randomF32(shapes[i], seed + 3, 0, 1e-4f));
  }
  llvm::json::Object manifest{{"lr", 3e-4},
                              {"beta1", 0.9},
                              {"beta2", 0.95},
                              {"eps", 1e-8},
                              {"weight_decay", 0.1}};
  tessera::runtime::exec::CompileOptions options;
  options.optimizer = &manifest;
  std::string attrs = adamwAttrs(0.9, 0.95, 1e-8, 0.1);
  Tensor step = f32({}, {3.0f}), lr = lrOperand(3e-4);

  std::vector<Tensor> ins;
  std::vector<TensorType> outs;
  for (const auto *group : {&p, &g, &m, &v})
    ins.insert(ins.end(), group->begin(), group->end());
  ins.push_back(step);
  ins.push_back(lr);
  for (int k = 0; k < 3; ++k)
    for (const Tensor &t : p)
      outs.push_back(typeOf(t));
  std::vector<Tensor> multi =
      run("multi_adamw_update", attrs, ins, outs, options);
  ASSERT_EQ(multi.size(), 3 * n);
  for (size_t i = 0; i < n; ++i) {
    TensorType t = typeOf(p[i]);
    std::vector<Tensor> one =
        run("adamw_update", attrs, {p[i], g[i], m[i], v[i], step, lr},
            {t, t, t}, options);
    ASSERT_EQ(one.size(), 3u);
    for (size_t k = 0; k < 3; ++k)
      expectBitEqual(
          multi[k * n + i], one[k],
          ("adamw tensor " + std::to_string(i) + " result " + std::to_string(k))
              .c_str());
  }

  std::vector<Tensor> sgdIns(p.begin(), p.end());
  sgdIns.insert(sgdIns.end(), g.begin(), g.end());
  sgdIns.push_back(lr);
  std::vector<TensorType> sgdOuts(outs.begin(), outs.begin() + n);
  std::vector<Tensor> sgd =
      run("multi_sgd_update", sgdAttrs(0.1), sgdIns, sgdOuts, options);
  ASSERT_EQ(sgd.size(), n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<Tensor> one = run("sgd_update", sgdAttrs(0.1), {p[i], g[i], lr},
                                  {typeOf(p[i])}, options);
    ASSERT_EQ(one.size(), 1u);
    expectBitEqual(sgd[i], one[0], ("sgd tensor " + std::to_string(i)).c_str());
  }
}

// In place, as the memory plan runs them (tsrt.in_place: every result
// written over the argument it replaces): still the per-tensor values.
TEST_P(OptimizerTest, MultiTensorAdamWInPlace) {
  Tensor p0 = randomF32({7}, 1), p1 = randomF32({2, 5}, 2);
  Tensor g0 = randomF32({7}, 3, -1e-2f, 1e-2f),
         g1 = randomF32({2, 5}, 4, -1e-2f, 1e-2f);
  Tensor m0 = randomF32({7}, 5, -1e-2f, 1e-2f),
         m1 = randomF32({2, 5}, 6, -1e-2f, 1e-2f);
  Tensor v0 = randomF32({7}, 7, 0, 1e-4f), v1 = randomF32({2, 5}, 8, 0, 1e-4f);
  std::string attrs = adamwAttrs(0.9, 0.999, 1e-8, 0.01);
  const char *program = R"mlir(module {
  func.func @kernel(%p0: tensor<7xf32>, %p1: tensor<2x5xf32>,
      %g0: tensor<7xf32>, %g1: tensor<2x5xf32>,
      %m0: tensor<7xf32>, %m1: tensor<2x5xf32>,
      %v0: tensor<7xf32>, %v1: tensor<2x5xf32>,
      %t: tensor<f32>, %lr: tensor<f32>)
      -> (tensor<7xf32>, tensor<2x5xf32>, tensor<7xf32>, tensor<2x5xf32>,
          tensor<7xf32>, tensor<2x5xf32>) {
    %r:6 = tsrt.kernel "multi_adamw_update"(%p0, %p1, %g0, %g1, %m0, %m1, %v0, %v1, %t, %lr)
        {attrs = {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32,
         weight_decay = 0.01 : f32}, tsrt.in_place = array<i64: 0, 1, 4, 5, 6, 7>,
         tsrt.offsets = array<i64: -1, -1, -1, -1, -1, -1>}
        : (tensor<7xf32>, tensor<2x5xf32>, tensor<7xf32>, tensor<2x5xf32>,
           tensor<7xf32>, tensor<2x5xf32>, tensor<7xf32>, tensor<2x5xf32>,
           tensor<f32>, tensor<f32>)
        -> (tensor<7xf32>, tensor<2x5xf32>, tensor<7xf32>, tensor<2x5xf32>,
            tensor<7xf32>, tensor<2x5xf32>)
    return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<7xf32>, tensor<2x5xf32>, tensor<7xf32>, tensor<2x5xf32>, tensor<7xf32>, tensor<2x5xf32>
  }
}
)mlir";
  Tensor step = f32({}, {2.0f}), lr = lrOperand(1e-3);
  // The harness uploads copies: the program overwrites its arguments.
  llvm::Expected<std::vector<Tensor>> inPlace =
      tryRunProgram(program, {p0, p1, g0, g1, m0, m1, v0, v1, step, lr});
  ASSERT_TRUE(static_cast<bool>(inPlace))
      << llvm::toString(inPlace.takeError());
  ASSERT_EQ(inPlace->size(), 6u);
  const Tensor *ps[] = {&p0, &p1}, *gs[] = {&g0, &g1}, *ms[] = {&m0, &m1},
               *vs[] = {&v0, &v1};
  for (size_t i = 0; i < 2; ++i) {
    TensorType t = typeOf(*ps[i]);
    std::vector<Tensor> one =
        run("adamw_update", attrs, {*ps[i], *gs[i], *ms[i], *vs[i], step, lr},
            {t, t, t});
    ASSERT_EQ(one.size(), 3u);
    for (size_t k = 0; k < 3; ++k)
      expectBitEqual(
          (*inPlace)[2 * k + i], one[k],
          ("tensor " + std::to_string(i) + " result " + std::to_string(k))
              .c_str());
  }
}

TEST_P(OptimizerTest, LoadErrors) {
  TensorType p{DType::F32, {3}}, s{DType::F32, {}};
  // The learning rate is operand 2 (sgd) / 5 (adamw), not an attribute.
  EXPECT_EQ(loadError("sgd_update", sgdAttrs(0), {p, p}, {p}),
            "expects 3 operand(s) and 1 result(s), got 2 and 1");
  EXPECT_EQ(loadError("sgd_update", f32Attr("lr", 0.1), {p, p, s}, {p}),
            "missing attribute 'weight_decay'");
  EXPECT_EQ(loadError("sgd_update", sgdAttrs(0),
                      {p, TensorType{DType::F32, {4}}, s}, {p}),
            "operand #1 has type tensor<4xf32> but operand #0 has "
            "tensor<3xf32>; they must match");
  EXPECT_EQ(loadError("sgd_update", sgdAttrs(0),
                      {p, p, TensorType{DType::I64, {}}}, {p}),
            "lr has unsupported type tensor<i64>");
  EXPECT_EQ(loadError("adamw_update", adamwAttrs(0.9, 0.999, 1e-8, 0.01),
                      {p, p, p, p, TensorType{DType::F32, {2}}, s}, {p, p, p}),
            "step must have one element, got tensor<2xf32>");
  EXPECT_EQ(loadError("adamw_update", adamwAttrs(0.9, 0.999, 1e-8, 0.01),
                      {p, p, p, p, TensorType{DType::I64, {}}, s}, {p, p, p}),
            "step has unsupported type tensor<i64>");
  EXPECT_EQ(loadError("adamw_update", adamwAttrs(0.9, 0.999, 1e-8, 0.01),
                      {p, p, p, p, s, TensorType{DType::F32, {3}}}, {p, p, p}),
            "lr must have one element, got tensor<3xf32>");
  EXPECT_EQ(
      loadError("adamw_update", sgdAttrs(0), {p, p, p, p, s, s}, {p, p, p}),
      "missing attribute 'beta1'");
  EXPECT_EQ(loadError("adamw_update", adamwAttrs(0.9, 0.999, 1e-8, 0.01),
                      {p, p, p, p, s, s}, {p, p}),
            "expects 6 operand(s) and 3 result(s), got 6 and 2");
  // Multi-tensor forms: N parameters (N = results / 3 for AdamW), each
  // group's entry i of parameter i's type, then the scalars.
  TensorType q{DType::F32, {2, 2}};
  EXPECT_EQ(loadError("multi_sgd_update", sgdAttrs(0), {p, q, p, s}, {p, q}),
            "expects 2*N + 1 operand(s) and 1*N result(s) for N >= 1 "
            "parameters, got 4 and 2");
  EXPECT_EQ(loadError("multi_sgd_update", sgdAttrs(0), {p, q, q, q, s}, {p, q}),
            "operand #2 has type tensor<2x2xf32> but parameter #0 has "
            "tensor<3xf32>; they must match");
  EXPECT_EQ(loadError("multi_sgd_update", sgdAttrs(0), {p, q, p, q, s}, {p, p}),
            "result #1 has type tensor<3xf32>, expected tensor<2x2xf32>");
  EXPECT_EQ(loadError("multi_sgd_update", sgdAttrs(0),
                      {p, q, p, q, TensorType{DType::F32, {2}}}, {p, q}),
            "lr must have one element, got tensor<2xf32>");
  EXPECT_EQ(loadError("multi_adamw_update", adamwAttrs(0.9, 0.999, 1e-8, 0.01),
                      {p, p, p, p, s, s}, {p, p}),
            "expects 4*N + 2 operand(s) and 3*N result(s) for N >= 1 "
            "parameters, got 6 and 2");
  EXPECT_EQ(loadError("multi_adamw_update", adamwAttrs(0.9, 0.999, 1e-8, 0.01),
                      {p, p, p, p, TensorType{DType::I64, {}}, s}, {p, p, p}),
            "step has unsupported type tensor<i64>");
  EXPECT_EQ(loadError("multi_adamw_update", sgdAttrs(0), {p, p, p, p, s, s},
                      {p, p, p}),
            "missing attribute 'beta1'");
  TensorType i{DType::I64, {3}};
  EXPECT_EQ(loadError("multi_adamw_update", adamwAttrs(0.9, 0.999, 1e-8, 0.01),
                      {i, i, i, i, s, s}, {i, i, i}),
            "param has unsupported type tensor<3xi64>");
}

} // namespace

//===- ProgramTest.cpp - multi-kernel programs on every backend -----------===//
//
// Executor-level conformance: a whole training step of a two-layer MLP
// (matmul, gelu, a reshape view and back, cross-entropy, their gradients
// and SGD) as one tsrt program, against a double reference of the same
// composition; the same program with a static memory plan (intermediates
// at tsrt.offsets in an arena allocated on the backend, the SGD updates
// written into their arguments with tsrt.in_place) gives bit-identical
// results on the same backend; bad arena offsets are load errors with the
// text both backends must give. Runs only kernels the other families
// register (so it registers none).
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <cmath>

using namespace tessera::conformance;

namespace {

class ProgramTest : public KernelTest {};
TESSERA_CONFORMANCE_BACKENDS(ProgramTest);

constexpr int64_t N = 4, Din = 8, H = 16, V = 5;

/// The step: (x, w1, w2, labels, dloss, lr) -> (loss, w1', w2'). `arena`
/// non-empty: the function's tsrt.arena_bytes; `off(name)` gives each
/// intermediate's tsrt.offsets (empty: none); `inPlace`: the updates
/// overwrite w1 and w2.
std::string stepProgram(const std::string &arena,
                        const std::function<std::string(const char *)> &off,
                        bool inPlace) {
  auto o = [&](const char *name) {
    std::string s = off ? off(name) : "";
    return s.empty() ? std::string() : ", tsrt.offsets = array<i64: " + s + ">";
  };
  std::string w1Place = inPlace ? ", tsrt.in_place = array<i64: 1>, "
                                  "tsrt.offsets = array<i64: -1>"
                                : "";
  std::string w2Place = inPlace ? ", tsrt.in_place = array<i64: 2>, "
                                  "tsrt.offsets = array<i64: -1>"
                                : "";
  std::string sgd = "{attrs = {weight_decay = 1.000000e-02 : f32}";
  return R"(module {
  func.func @kernel(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32>,
                    %w2: tensor<16x5xf32>, %labels: tensor<4xi64>,
                    %dl: tensor<f32>, %lr: tensor<f32>)
      -> (tensor<f32>, tensor<8x16xf32>, tensor<16x5xf32>))" +
         (arena.empty()
              ? std::string()
              : " attributes {tsrt.arena_bytes = " + arena + " : i64}") +
         R"( {
    %h = tsrt.kernel "matmul"(%x, %w1) {attrs = {})" +
         o("h") + R"(} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %a = tsrt.kernel "gelu"(%h) {attrs = {approximate = "tanh"})" +
         o("a") + R"(} : (tensor<4x16xf32>) -> tensor<4x16xf32>
    %a3 = tsrt.kernel "reshape"(%a) {attrs = {}} : (tensor<4x16xf32>) -> tensor<2x2x16xf32>
    %a2 = tsrt.kernel "reshape"(%a3) {attrs = {}} : (tensor<2x2x16xf32>) -> tensor<4x16xf32>
    %z = tsrt.kernel "matmul"(%a2, %w2) {attrs = {})" +
         o("z") + R"(} : (tensor<4x16xf32>, tensor<16x5xf32>) -> tensor<4x5xf32>
    %loss = tsrt.kernel "cross_entropy"(%z, %labels) {attrs = {}} : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
    %dz = tsrt.kernel "cross_entropy_grad"(%z, %labels, %dl) {attrs = {})" +
         o("dz") +
         R"(} : (tensor<4x5xf32>, tensor<4xi64>, tensor<f32>) -> tensor<4x5xf32>
    %dw2 = tsrt.kernel "matmul"(%a2, %dz) {attrs = {transpose_lhs = true})" +
         o("dw2") +
         R"(} : (tensor<4x16xf32>, tensor<4x5xf32>) -> tensor<16x5xf32>
    %da = tsrt.kernel "matmul"(%dz, %w2) {attrs = {transpose_rhs = true})" +
         o("da") +
         R"(} : (tensor<4x5xf32>, tensor<16x5xf32>) -> tensor<4x16xf32>
    %dh = tsrt.kernel "gelu_grad"(%h, %da) {attrs = {approximate = "tanh"})" +
         o("dh") +
         R"(} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %dw1 = tsrt.kernel "matmul"(%x, %dh) {attrs = {transpose_lhs = true})" +
         o("dw1") +
         R"(} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
    %w1n = tsrt.kernel "sgd_update"(%w1, %dw1, %lr) )" +
         sgd + w1Place + "}" +
         R"( : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    %w2n = tsrt.kernel "sgd_update"(%w2, %dw2, %lr) )" +
         sgd + w2Place + "}" +
         R"( : (tensor<16x5xf32>, tensor<16x5xf32>, tensor<f32>) -> tensor<16x5xf32>
    return %loss, %w1n, %w2n : tensor<f32>, tensor<8x16xf32>, tensor<16x5xf32>
  }
}
)";
}

struct StepRef {
  double loss;
  std::vector<double> w1, w2;
};

StepRef stepRef(const Tensor &xT, const Tensor &w1T, const Tensor &w2T,
                const std::vector<int64_t> &labels, double dloss) {
  std::vector<double> x = values(xT), w1 = values(w1T), w2 = values(w2T);
  std::vector<double> h(N * H, 0), a(N * H), z(N * V, 0), dz(N * V);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < H; ++j) {
      for (int64_t k = 0; k < Din; ++k)
        h[i * H + j] += x[i * Din + k] * w1[k * H + j];
      double v = h[i * H + j];
      a[i * H + j] =
          0.5 * v *
          (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    }
  StepRef r{0, w1, w2};
  for (int64_t i = 0; i < N; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; ++j) {
      for (int64_t k = 0; k < H; ++k)
        z[i * V + j] += a[i * H + k] * w2[k * V + j];
      mx = std::max(mx, z[i * V + j]);
    }
    for (int64_t j = 0; j < V; ++j)
      s += std::exp(z[i * V + j] - mx);
    double lse = mx + std::log(s);
    r.loss += lse - z[i * V + labels[i]];
    for (int64_t j = 0; j < V; ++j)
      dz[i * V + j] =
          (std::exp(z[i * V + j] - lse) - (j == labels[i] ? 1 : 0)) * dloss;
  }
  std::vector<double> dw2(H * V, 0), dh(N * H, 0), dw1(Din * H, 0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t k = 0; k < H; ++k) {
      double da = 0;
      for (int64_t j = 0; j < V; ++j) {
        dw2[k * V + j] += a[i * H + k] * dz[i * V + j];
        da += dz[i * V + j] * w2[k * V + j];
      }
      double v = h[i * H + k];
      double t = std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
      dh[i * H + k] =
          da * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * 0.7978845608028654 *
                                    (1 + 3 * 0.044715 * v * v));
    }
  for (int64_t k = 0; k < Din; ++k)
    for (int64_t j = 0; j < H; ++j)
      for (int64_t i = 0; i < N; ++i)
        dw1[k * H + j] += x[i * Din + k] * dh[i * H + j];
  // The lr operand (f32) and the f32 attribute, as the kernel sees them
  // without a manifest.
  double lr = 0.1f, wd = 0.01f;
  for (size_t i = 0; i < r.w1.size(); ++i)
    r.w1[i] -= lr * (dw1[i] + wd * w1[i]);
  for (size_t i = 0; i < r.w2.size(); ++i)
    r.w2[i] -= lr * (dw2[i] + wd * w2[i]);
  return r;
}

TEST_P(ProgramTest, TrainingStepMatchesTheComposedReference) {
  Tensor x = randomF32({N, Din}, 1), w1 = randomF32({Din, H}, 2, -0.5f, 0.5f);
  Tensor w2 = randomF32({H, V}, 3, -0.5f, 0.5f);
  Tensor labels = i64({N}, {4, 0, 2, 2});
  Tensor dl = f32({}, {0.25f});
  StepRef want = stepRef(x, w1, w2, {4, 0, 2, 2}, 0.25);
  llvm::Expected<std::vector<Tensor>> r =
      tryRunProgram(stepProgram("", nullptr, false),
                    {x, w1, w2, labels, dl, f32({}, {0.1f})});
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->size(), 3u);
  expectNear((*r)[0], {}, {want.loss}, 1e-5, 1e-6, "loss");
  expectNear((*r)[1], {Din, H}, want.w1, 1e-5, 1e-6, "w1'");
  expectNear((*r)[2], {H, V}, want.w2, 1e-5, 1e-6, "w2'");

  // The same step with a static memory plan: every intermediate at its own
  // 64-byte aligned arena offset, the updates written in place.
  std::map<std::string, int64_t> offsets = {
      {"h", 0},     {"a", 256},   {"z", 512},   {"dz", 640},
      {"dw2", 768}, {"da", 1152}, {"dh", 1408}, {"dw1", 1664}};
  std::string planned = stepProgram(
      "2176",
      [&](const char *name) { return std::to_string(offsets.at(name)); }, true);
  llvm::Expected<std::vector<Tensor>> p =
      tryRunProgram(planned, {x, w1, w2, labels, dl, f32({}, {0.1f})});
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  ASSERT_EQ(p->size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    expectBitEqual((*p)[i], (*r)[i], "planned result #" + std::to_string(i));
}

TEST_P(ProgramTest, BadArenaOffsetsAreLoadErrors) {
  auto error = [&](const std::string &arena, int64_t hOffset) {
    std::string text = stepProgram(
        arena,
        [&](const char *name) {
          return std::string(name) == "h" ? std::to_string(hOffset) : "";
        },
        false);
    llvm::Expected<std::vector<Tensor>> r =
        tryRunProgram(text, {randomF32({N, Din}, 1), randomF32({Din, H}, 2),
                             randomF32({H, V}, 3), i64({N}, {0, 1, 2, 3}),
                             f32({}, {1.0f}), f32({}, {0.1f})});
    return r ? std::string() : llvm::toString(r.takeError());
  };
  std::string msg = error("128", 0);
  EXPECT_NE(msg.find("op #0 (kernel \"matmul\")"), std::string::npos) << msg;
  EXPECT_NE(msg.find("result #0 (256 bytes) at arena offset 0 is unaligned or "
                     "beyond tsrt.arena_bytes = 128"),
            std::string::npos)
      << msg;
  msg = error("1024", 32);
  EXPECT_NE(msg.find("result #0 (256 bytes) at arena offset 32 is unaligned"),
            std::string::npos)
      << msg;
}

} // namespace

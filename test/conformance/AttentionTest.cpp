//===- AttentionTest.cpp - fused attention forward and backward -----------===//
//
// "attention" (q, k, v [, mask]) -> (o, lse) and "attention_grad" (q, k, v,
// o, lse, do [, mask]) -> (dq, dk, dv) against a double reference of
// softmax(scale · QKᵀ + mask) V: multi-head and flattened batches,
// causal masking, Sq != Sk, an additive mask with a fully masked row (o = 0,
// lse = -inf, zero gradients, never NaN), grouped-query attention (Ainslie
// et al. 2023: query head h reads K/V head h / (H / Hkv)), sequences longer
// than one row block, and bf16 / f16 operands with an f32 log-sum-exp;
// shape and attribute errors with the text both backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <cmath>
#include <limits>

using namespace tessera::conformance;

namespace {

[[maybe_unused]] const bool kRegistered =
    registerKernels("attention", {"attention", "attention_grad"});

struct Dims {
  int64_t batch, sq, sk, dh, dv, group;
};

struct AttentionRef {
  std::vector<double> o, lse, dq, dk, dv;
};

/// Q [batch, sq, dh], K [batch/group, sk, dh], V [batch/group, sk, dv],
/// optional mask [sq, sk] (empty: none), dout [batch, sq, dv] (empty: no
/// backward).
AttentionRef attentionRef(const Dims &d, const std::vector<double> &q,
                          const std::vector<double> &k,
                          const std::vector<double> &v,
                          const std::vector<double> &mask,
                          const std::vector<double> &dout, double scale,
                          bool causal) {
  AttentionRef r;
  r.o.assign(d.batch * d.sq * d.dv, 0.0);
  r.lse.assign(d.batch * d.sq, -INFINITY);
  int64_t kvBatch = d.batch / d.group;
  r.dq.assign(d.batch * d.sq * d.dh, 0.0);
  r.dk.assign(kvBatch * d.sk * d.dh, 0.0);
  r.dv.assign(kvBatch * d.sk * d.dv, 0.0);
  std::vector<double> s(d.sk), p(d.sk);
  for (int64_t b = 0; b < d.batch; ++b) {
    int64_t kb = b / d.group;
    for (int64_t i = 0; i < d.sq; ++i) {
      const double *qi = &q[(b * d.sq + i) * d.dh];
      double mx = -INFINITY;
      for (int64_t j = 0; j < d.sk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d.dh; ++c)
          dot += qi[c] * k[(kb * d.sk + j) * d.dh + c];
        s[j] = scale * dot + (mask.empty() ? 0 : mask[i * d.sk + j]);
        if (causal && j > i)
          s[j] = -INFINITY;
        mx = std::max(mx, s[j]);
      }
      if (mx == -INFINITY)
        continue; // no allowed key: o = 0, lse = -inf, zero gradients
      double sum = 0;
      for (int64_t j = 0; j < d.sk; ++j)
        sum += std::exp(s[j] - mx);
      r.lse[b * d.sq + i] = mx + std::log(sum);
      double *oi = &r.o[(b * d.sq + i) * d.dv];
      for (int64_t j = 0; j < d.sk; ++j) {
        p[j] = std::exp(s[j] - mx) / sum;
        for (int64_t c = 0; c < d.dv; ++c)
          oi[c] += p[j] * v[(kb * d.sk + j) * d.dv + c];
      }
      if (dout.empty())
        continue;
      const double *doi = &dout[(b * d.sq + i) * d.dv];
      double delta = 0;
      for (int64_t c = 0; c < d.dv; ++c)
        delta += doi[c] * oi[c];
      for (int64_t j = 0; j < d.sk; ++j) {
        double dp = 0;
        for (int64_t c = 0; c < d.dv; ++c) {
          dp += doi[c] * v[(kb * d.sk + j) * d.dv + c];
          r.dv[(kb * d.sk + j) * d.dv + c] += p[j] * doi[c];
        }
        double ds = p[j] * (dp - delta);
        for (int64_t c = 0; c < d.dh; ++c) {
          r.dq[(b * d.sq + i) * d.dh + c] +=
              scale * ds * k[(kb * d.sk + j) * d.dh + c];
          r.dk[(kb * d.sk + j) * d.dh + c] += scale * ds * qi[c];
        }
      }
    }
  }
  return r;
}

std::string attrs(double scale, bool causal) {
  return f32Attr("scale", scale) + (causal ? ", causal = true" : "");
}

struct Case {
  const char *what;
  std::vector<int64_t> q, k, v; // full shapes
  double scale;
  bool causal, mask;
};

class AttentionTest : public KernelTest {
protected:
  /// Runs forward and backward of `c` on `dt` (q, k, v and do rounded to
  /// it) and compares with the reference on the rounded values.
  void check(const Case &c, DType dt, uint32_t seed);
};
TESSERA_CONFORMANCE_BACKENDS(AttentionTest);

void AttentionTest::check(const Case &c, DType dt, uint32_t seed) {
  SCOPED_TRACE(std::string(c.what) + " " + tessera::runtime::dtypeName(dt));
  size_t r = c.q.size();
  std::vector<int64_t> lead(c.q.begin(), c.q.end() - 2);
  int64_t batch = tessera::runtime::shapeNumel(lead);
  int64_t kvBatch = tessera::runtime::shapeNumel(
      std::vector<int64_t>(c.k.begin(), c.k.end() - 2));
  Dims d{batch,      c.q[r - 2], c.k[r - 2],
         c.q[r - 1], c.v[r - 1], batch / kvBatch};
  Tensor q = randomF32(c.q, seed), k = randomF32(c.k, seed + 1),
         v = randomF32(c.v, seed + 2);
  std::vector<int64_t> oShape = lead, lseShape = lead;
  oShape.insert(oShape.end(), {d.sq, d.dv});
  lseShape.push_back(d.sq);
  Tensor dout = randomF32(oShape, seed + 3);
  Tensor mask;
  if (c.mask) {
    mask = randomF32({d.sq, d.sk}, seed + 4, -1.0f, 1.0f);
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < d.sk; ++j) // row 1: no allowed key
      mask.data<float>()[1 * d.sk + j] = -inf;
    mask.data<float>()[0 * d.sk + 2] = -inf; // one masked key in row 0
  }
  if (dt != DType::F32) {
    q = narrow(q, dt), k = narrow(k, dt), v = narrow(v, dt);
    dout = narrow(dout, dt);
  }
  AttentionRef want =
      attentionRef(d, values(q), values(k), values(v),
                   c.mask ? values(mask) : std::vector<double>{}, values(dout),
                   c.scale, c.causal);
  std::vector<Tensor> ins = {q, k, v};
  if (c.mask)
    ins.push_back(mask);
  std::vector<Tensor> fwd =
      run("attention", attrs(c.scale, c.causal), ins,
          {TensorType{dt, oShape}, TensorType{DType::F32, lseShape}});
  ASSERT_EQ(fwd.size(), 2u);
  ASSERT_EQ(fwd[0].dtype(), dt);
  ASSERT_EQ(fwd[1].dtype(), DType::F32);
  double tol = dt == DType::F32 ? 1e-5 : rtolFor(dt);
  expectNear(fwd[0], oShape, want.o, tol, dt == DType::F32 ? 1e-6 : 4 * tol,
             "o");
  expectNear(fwd[1], lseShape, want.lse, 1e-5, 1e-5, "lse");
  std::vector<Tensor> bins = {q, k, v, fwd[0], fwd[1], dout};
  if (c.mask)
    bins.push_back(mask);
  std::vector<Tensor> g = run("attention_grad", attrs(c.scale, c.causal), bins,
                              {typeOf(q), typeOf(k), typeOf(v)});
  ASSERT_EQ(g.size(), 3u);
  double gtol = dt == DType::F32 ? 1e-4 : 4 * rtolFor(dt);
  double gatol = dt == DType::F32 ? 1e-5 : 8 * rtolFor(dt);
  expectNear(g[0], c.q, want.dq, gtol, gatol, "dq");
  expectNear(g[1], c.k, want.dk, gtol, gatol, "dk");
  expectNear(g[2], c.v, want.dv, gtol, gatol, "dv");
}

// {what, q, k, v (full shapes), scale, causal, mask}: a case per row, or
// two where it is long (clang-format would give each value its own line).
// clang-format off
const std::vector<Case> kCases = {
    {"multi-head", {2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, 0.5, false, false},
    {"causal, Dv != Dh", {6, 7, 8}, {6, 7, 8}, {6, 7, 3}, 0.35, true, false},
    {"Sq != Sk", {2, 4, 8}, {2, 6, 8}, {2, 6, 5}, 0.25, false, false},
    {"mask with a dead row",
     {2, 2, 5, 4}, {2, 2, 6, 4}, {2, 2, 6, 4}, 0.5, false, true},
    {"causal + mask",
     {1, 2, 6, 4}, {1, 2, 6, 4}, {1, 2, 6, 4}, 0.5, true, true},
    {"GQA causal", {2, 6, 5, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, 0.5, true, false},
    {"MQA", {1, 4, 3, 8}, {1, 1, 3, 8}, {1, 1, 3, 8}, 0.3, false, false},
    {"long causal",
     {1, 2, 70, 8}, {1, 2, 70, 8}, {1, 2, 70, 8}, 0.35, true, false},
};
// clang-format on

TEST_P(AttentionTest, ForwardAndBackwardF32) {
  uint32_t seed = 1;
  for (const Case &c : kCases) {
    check(c, DType::F32, seed);
    seed += 10;
  }
}

// 16-bit q, k, v, do: o and the gradients in that dtype, lse f32.
TEST_P(AttentionTest, Float16BitOperandsKeepAnF32Lse) {
  for (DType dt : {DType::BF16, DType::F16}) {
    check(kCases[0], dt, 101);
    check(kCases[5], dt, 111); // GQA causal
  }
}

TEST_P(AttentionTest, LoadErrors) {
  TensorType q{DType::F32, {2, 4, 8}}, k6{DType::F32, {2, 6, 8}};
  TensorType o{DType::F32, {2, 4, 8}}, lse{DType::F32, {2, 4}};
  EXPECT_EQ(loadError("attention", attrs(1, true), {q, k6, k6}, {o, lse}),
            "causal attention needs Sq == Sk");
  EXPECT_EQ(loadError("attention", "", {q, q, q}, {o, lse}),
            "missing attribute 'scale'");
  EXPECT_EQ(loadError("attention", attrs(1, false),
                      {q, q, q, TensorType{DType::F32, {4, 5}}}, {o, lse}),
            "mask tensor<4x5xf32> is not [Sq, Sk]");
  EXPECT_EQ(loadError("attention", attrs(1, false),
                      {q, TensorType{DType::F32, {2, 4, 6}}, q}, {o, lse}),
            "operand types tensor<2x4x8xf32>, tensor<2x4x6xf32>, "
            "tensor<2x4x8xf32> are not Q [b..., Sq, Dh], K [b..., Sk, Dh], "
            "V [b..., Sk, Dv] (or, with rank >= 4, K/V with Hkv heads "
            "dividing Q's H at dim rank-3)");
  EXPECT_EQ(loadError("attention", attrs(1, false), {q, q, q},
                      {o, TensorType{DType::F32, {2, 8}}}),
            "result #1 has type tensor<2x8xf32>, expected tensor<2x4xf32>");
  EXPECT_EQ(loadError("attention", attrs(1, false), {q, q}, {o, lse}),
            "expects 3 operand(s) and 2 result(s), got 2 and 2");
  EXPECT_EQ(loadError("attention_grad", attrs(1, false), {q, q, q, o, o, o},
                      {q, q, q}),
            "output, lse and grad tensor<2x4x8xf32>, tensor<2x4x8xf32>, "
            "tensor<2x4x8xf32> should be tensor<2x4x8xf32>, tensor<2x4xf32>, "
            "tensor<2x4x8xf32>");
  EXPECT_EQ(loadError("attention", attrs(1, false) + ", ring_size = 0 : i64",
                      {q, q, q}, {o, lse}),
            "ring_size must be >= 1, got 0");
  // GQA: Hkv must divide H.
  TensorType q4{DType::F32, {2, 6, 4, 8}}, o4{DType::F32, {2, 6, 4, 8}},
      lse4{DType::F32, {2, 6, 4}}, kv4{DType::F32, {2, 4, 4, 8}};
  EXPECT_NE(loadError("attention", attrs(1, false), {q4, kv4, kv4}, {o4, lse4})
                .find("Hkv heads dividing Q's H"),
            std::string::npos);
}

} // namespace

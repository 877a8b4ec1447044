//===- AttentionTest.cpp - Tests of the CPU attention kernels -------------===//
//
// attentionForward/Backward against a naive double-precision reference that
// materialises the full S x S softmax; ringAttentionForward/Backward on a
// striped sequence, one std::thread per ring rank, against the plain kernels
// on the global tensors.
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/Attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace tessera::runtime::cpu;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kGuard = 12345.0f;
constexpr int64_t kGuardElems = 16;

std::vector<float> randomVec(size_t n, unsigned seed, float lo = -1.0f,
                             float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// Workspace of exactly `n` floats, NaN-filled (so a kernel that reads
/// scratch it did not write shows up), followed by guard values.
struct Workspace {
  std::vector<float> buf;
  int64_t n;
  explicit Workspace(int64_t n) : buf(n + kGuardElems, kNaN), n(n) {
    std::fill(buf.begin() + n, buf.end(), kGuard);
  }
  float *data() { return buf.data(); }
  bool guardIntact() const {
    return std::all_of(buf.begin() + n, buf.end(),
                       [](float x) { return x == kGuard; });
  }
};

/// max |a - b| / max |b| (b is the reference); -inf must match -inf exactly.
double relError(const std::vector<float> &a, const std::vector<double> &b) {
  EXPECT_EQ(a.size(), b.size());
  double maxDiff = 0, maxRef = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i])) {
      EXPECT_TRUE(std::isinf(a[i]) && (a[i] < 0) == (b[i] < 0))
          << "at " << i << ": " << a[i] << " vs " << b[i];
      continue;
    }
    if (!std::isfinite(a[i]))
      return kInf;
    maxDiff = std::max(maxDiff, std::abs(double(a[i]) - b[i]));
    maxRef = std::max(maxRef, std::abs(b[i]));
  }
  return maxDiff / std::max(maxRef, 1e-30);
}

double relError(const std::vector<float> &a, const std::vector<float> &b) {
  return relError(a, std::vector<double>(b.begin(), b.end()));
}

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

/// Naive attention in double with the full sq x sk probability matrix.
Reference naiveAttention(const AttentionDims &d, const std::vector<float> &q,
                         const std::vector<float> &k,
                         const std::vector<float> &v, const float *mask,
                         float scale, bool causal,
                         const std::vector<float> &dout) {
  Reference r;
  r.o.assign(d.batch * d.sq * d.dv, 0.0);
  r.lse.assign(d.batch * d.sq, -kInf);
  r.dq.assign(d.batch * d.sq * d.dh, 0.0);
  r.dk.assign(d.batch * d.sk * d.dh, 0.0);
  r.dv.assign(d.batch * d.sk * d.dv, 0.0);
  for (int64_t b = 0; b < d.batch; ++b) {
    const float *qb = q.data() + b * d.sq * d.dh;
    const float *kb = k.data() + b * d.sk * d.dh;
    const float *vb = v.data() + b * d.sk * d.dv;
    const float *dob = dout.data() + b * d.sq * d.dv;
    std::vector<double> P(d.sq * d.sk, 0.0), dP(d.sq * d.sk, 0.0);
    for (int64_t i = 0; i < d.sq; ++i) {
      std::vector<double> s(d.sk);
      double m = -kInf;
      for (int64_t j = 0; j < d.sk; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < d.dh; ++c)
          acc += double(qb[i * d.dh + c]) * kb[j * d.dh + c];
        acc *= scale;
        if (mask)
          acc += mask[i * d.sk + j];
        if (causal && j > i)
          acc = -kInf;
        s[j] = acc;
        m = std::max(m, acc);
      }
      if (m == -kInf)
        continue; // O = 0, lse = -inf, P row = 0
      double l = 0;
      for (int64_t j = 0; j < d.sk; ++j)
        l += std::exp(s[j] - m);
      r.lse[b * d.sq + i] = m + std::log(l);
      for (int64_t j = 0; j < d.sk; ++j) {
        double p = std::exp(s[j] - m) / l;
        P[i * d.sk + j] = p;
        for (int64_t c = 0; c < d.dv; ++c)
          r.o[(b * d.sq + i) * d.dv + c] += p * vb[j * d.dv + c];
      }
    }
    // dV = P^T dO, dP = dO V^T
    for (int64_t i = 0; i < d.sq; ++i)
      for (int64_t j = 0; j < d.sk; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < d.dv; ++c) {
          r.dv[(b * d.sk + j) * d.dv + c] +=
              P[i * d.sk + j] * dob[i * d.dv + c];
          acc += double(dob[i * d.dv + c]) * vb[j * d.dv + c];
        }
        dP[i * d.sk + j] = acc;
      }
    // dS = P * (dP - rowsum(dP * P)); dQ = scale dS K; dK = scale dS^T Q
    for (int64_t i = 0; i < d.sq; ++i) {
      double rs = 0;
      for (int64_t j = 0; j < d.sk; ++j)
        rs += dP[i * d.sk + j] * P[i * d.sk + j];
      for (int64_t j = 0; j < d.sk; ++j) {
        double ds = P[i * d.sk + j] * (dP[i * d.sk + j] - rs);
        for (int64_t c = 0; c < d.dh; ++c) {
          r.dq[(b * d.sq + i) * d.dh + c] += scale * ds * kb[j * d.dh + c];
          r.dk[(b * d.sk + j) * d.dh + c] += scale * ds * qb[i * d.dh + c];
        }
      }
    }
  }
  return r;
}

struct Result {
  std::vector<float> o, lse, dq, dk, dv;
};

/// Runs attentionForward + attentionBackward with exactly-sized, NaN-filled
/// workspaces and NaN-prefilled outputs.
Result runPlain(const AttentionDims &d, const std::vector<float> &q,
                const std::vector<float> &k, const std::vector<float> &v,
                const float *mask, float scale, bool causal,
                const std::vector<float> &dout) {
  Result r;
  r.o.assign(d.batch * d.sq * d.dv, kNaN);
  r.lse.assign(d.batch * d.sq, kNaN);
  r.dq.assign(d.batch * d.sq * d.dh, kNaN);
  r.dk.assign(d.kvBatch() * d.sk * d.dh, kNaN); // GQA: the K/V heads only
  r.dv.assign(d.kvBatch() * d.sk * d.dv, kNaN);
  Workspace wf(attentionWorkspaceElems(d, false));
  attentionForward(d, q.data(), k.data(), v.data(), mask, scale, causal,
                   r.o.data(), r.lse.data(), wf.data());
  EXPECT_TRUE(wf.guardIntact()) << "forward wrote past its workspace";
  Workspace wb(attentionWorkspaceElems(d, true));
  attentionBackward(d, q.data(), k.data(), v.data(), r.o.data(), r.lse.data(),
                    dout.data(), mask, scale, causal, r.dq.data(), r.dk.data(),
                    r.dv.data(), wb.data());
  EXPECT_TRUE(wb.guardIntact()) << "backward wrote past its workspace";
  return r;
}

constexpr double kTol = 1e-5;

void checkAgainstNaive(const AttentionDims &d, bool causal,
                       const std::vector<float> *mask = nullptr,
                       unsigned seed = 1) {
  auto q = randomVec(d.batch * d.sq * d.dh, seed);
  auto k = randomVec(d.batch * d.sk * d.dh, seed + 1);
  auto v = randomVec(d.batch * d.sk * d.dv, seed + 2);
  auto dout = randomVec(d.batch * d.sq * d.dv, seed + 3);
  // A larger scale than 1/sqrt(dh) makes the softmax peaky, which exercises
  // the max subtraction.
  const float scale = 2.0f / std::sqrt(float(d.dh));
  const float *m = mask ? mask->data() : nullptr;
  Reference ref = naiveAttention(d, q, k, v, m, scale, causal, dout);
  Result got = runPlain(d, q, k, v, m, scale, causal, dout);
  EXPECT_LT(relError(got.o, ref.o), kTol);
  EXPECT_LT(relError(got.lse, ref.lse), kTol);
  EXPECT_LT(relError(got.dq, ref.dq), kTol);
  EXPECT_LT(relError(got.dk, ref.dk), kTol);
  EXPECT_LT(relError(got.dv, ref.dv), kTol);
}

//===----------------------------------------------------------------------===//
// Plain attention vs the naive reference.
//===----------------------------------------------------------------------===//

TEST(Attention, NonCausal) { checkAgainstNaive({3, 128, 128, 16, 16}, false); }

TEST(Attention, Causal) { checkAgainstNaive({3, 128, 128, 16, 16}, true); }

TEST(Attention, CausalRowsNotMultipleOfBlock) {
  checkAgainstNaive({2, 100, 100, 8, 8}, true, nullptr, 7);
}

TEST(Attention, HeadDimsDiffer) {
  checkAgainstNaive({2, 96, 96, 12, 20}, false, nullptr, 11);
  checkAgainstNaive({2, 96, 96, 20, 5}, true, nullptr, 13);
}

TEST(Attention, QueryAndKeyLengthsDiffer) {
  checkAgainstNaive({2, 100, 77, 16, 24}, false, nullptr, 17);
  checkAgainstNaive({2, 30, 150, 16, 8}, false, nullptr, 19);
}

TEST(Attention, TinyShapes) {
  // (With a single key, dQ and dK are exactly 0: not a relative comparison.)
  checkAgainstNaive({1, 1, 2, 4, 3}, false, nullptr, 23);
  checkAgainstNaive({1, 2, 2, 4, 3}, true, nullptr, 29);
  checkAgainstNaive({1, 3, 3, 1, 1}, true, nullptr, 31);
}

/// Additive mask with finite values, scattered -inf, and rows / row blocks
/// that are entirely -inf (O = 0, lse = -inf, zero gradients).
std::vector<float> makeMask(int64_t sq, int64_t sk, unsigned seed) {
  auto mask = randomVec(sq * sk, seed, -2.0f, 2.0f);
  std::mt19937 gen(seed + 100);
  std::bernoulli_distribution drop(0.3);
  for (float &x : mask)
    if (drop(gen))
      x = -std::numeric_limits<float>::infinity();
  for (int64_t i : {int64_t(0), int64_t(5), sq - 1})
    for (int64_t j = 0; j < sk; ++j)
      mask[i * sk + j] = -std::numeric_limits<float>::infinity();
  return mask;
}

TEST(Attention, AdditiveMaskWithNegInf) {
  AttentionDims d{2, 90, 70, 16, 12};
  auto mask = makeMask(d.sq, d.sk, 31);
  checkAgainstNaive(d, false, &mask, 37);
}

TEST(Attention, AdditiveMaskAndCausal) {
  AttentionDims d{2, 130, 130, 8, 8};
  auto mask = makeMask(d.sq, d.sk, 41);
  checkAgainstNaive(d, true, &mask, 43);
}

TEST(Attention, FullyMaskedRowIsZeroWithNegInfLse) {
  AttentionDims d{1, 70, 40, 4, 4};
  auto mask = makeMask(d.sq, d.sk, 47);
  auto q = randomVec(d.sq * d.dh, 1), k = randomVec(d.sk * d.dh, 2),
       v = randomVec(d.sk * d.dv, 3), dout = randomVec(d.sq * d.dv, 4);
  Result got = runPlain(d, q, k, v, mask.data(), 0.5f, false, dout);
  for (int64_t i : {int64_t(0), int64_t(5), d.sq - 1}) {
    EXPECT_TRUE(std::isinf(got.lse[i]) && got.lse[i] < 0);
    for (int64_t c = 0; c < d.dv; ++c)
      EXPECT_EQ(got.o[i * d.dv + c], 0.0f);
    for (int64_t c = 0; c < d.dh; ++c)
      EXPECT_EQ(got.dq[i * d.dh + c], 0.0f);
  }
  for (float x : got.dk)
    EXPECT_TRUE(std::isfinite(x));
}

TEST(Attention, Deterministic) {
  AttentionDims d{2, 100, 100, 16, 16};
  auto q = randomVec(d.batch * d.sq * d.dh, 1),
       k = randomVec(d.batch * d.sk * d.dh, 2),
       v = randomVec(d.batch * d.sk * d.dv, 3),
       dout = randomVec(d.batch * d.sq * d.dv, 4);
  Result a = runPlain(d, q, k, v, nullptr, 0.25f, true, dout);
  Result b = runPlain(d, q, k, v, nullptr, 0.25f, true, dout);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

//===----------------------------------------------------------------------===//
// Grouped-query attention vs the reference on repeated K/V.
//===----------------------------------------------------------------------===//

/// Hugging Face's repeat_kv: [kvBatch, s, dim] -> [kvBatch * group, s, dim]
/// where row b is a copy of row b / group.
std::vector<float> repeatKV(const std::vector<float> &x, int64_t kvBatch,
                            int64_t group, int64_t rowElems) {
  std::vector<float> out(kvBatch * group * rowElems);
  for (int64_t b = 0; b < kvBatch * group; ++b)
    std::copy_n(x.data() + (b / group) * rowElems, rowElems,
                out.data() + b * rowElems);
  return out;
}

/// The gradient of repeat_kv: sums each group of rows.
std::vector<double> sumGroups(const std::vector<double> &x, int64_t kvBatch,
                              int64_t group, int64_t rowElems) {
  std::vector<double> out(kvBatch * rowElems, 0.0);
  for (int64_t b = 0; b < kvBatch * group; ++b)
    for (int64_t e = 0; e < rowElems; ++e)
      out[(b / group) * rowElems + e] += x[b * rowElems + e];
  return out;
}

/// The GQA kernels (K/V with batch / group rows) against the naive
/// reference run on K/V repeated per query head, whose K/V gradients are
/// then summed over each group.
void checkGroupedAgainstRepeated(const AttentionDims &d, bool causal,
                                 const std::vector<float> *mask = nullptr,
                                 unsigned seed = 1) {
  SCOPED_TRACE("batch=" + std::to_string(d.batch) +
               " group=" + std::to_string(d.group) + (causal ? " causal" : ""));
  ASSERT_EQ(d.batch % d.group, 0);
  const int64_t kvb = d.kvBatch();
  auto q = randomVec(d.batch * d.sq * d.dh, seed);
  auto k = randomVec(kvb * d.sk * d.dh, seed + 1);
  auto v = randomVec(kvb * d.sk * d.dv, seed + 2);
  auto dout = randomVec(d.batch * d.sq * d.dv, seed + 3);
  const float scale = 2.0f / std::sqrt(float(d.dh));
  const float *m = mask ? mask->data() : nullptr;
  AttentionDims mha{d.batch, d.sq, d.sk, d.dh, d.dv};
  Reference ref = naiveAttention(mha, q, repeatKV(k, kvb, d.group, d.sk * d.dh),
                                 repeatKV(v, kvb, d.group, d.sk * d.dv), m,
                                 scale, causal, dout);
  Result got = runPlain(d, q, k, v, m, scale, causal, dout);
  ASSERT_EQ(got.dk.size(), size_t(kvb * d.sk * d.dh));
  ASSERT_EQ(got.dv.size(), size_t(kvb * d.sk * d.dv));
  EXPECT_LT(relError(got.o, ref.o), kTol);
  EXPECT_LT(relError(got.lse, ref.lse), kTol);
  EXPECT_LT(relError(got.dq, ref.dq), kTol);
  EXPECT_LT(relError(got.dk, sumGroups(ref.dk, kvb, d.group, d.sk * d.dh)),
            kTol);
  EXPECT_LT(relError(got.dv, sumGroups(ref.dv, kvb, d.group, d.sk * d.dv)),
            kTol);
}

TEST(GroupedQueryAttention, MatchesRepeatedKV) {
  // [B = 2, H = 8] query heads over Hkv = 4 (n_rep 2) and Hkv = 2 (n_rep 4).
  checkGroupedAgainstRepeated({16, 100, 100, 16, 16, 2}, true, nullptr, 3);
  checkGroupedAgainstRepeated({16, 100, 100, 16, 16, 4}, false, nullptr, 5);
  // Several row blocks, sq != sk, dh != dv.
  checkGroupedAgainstRepeated({6, 130, 77, 12, 20, 3}, false, nullptr, 7);
}

TEST(GroupedQueryAttention, MultiQuery) {
  // MQA (Shazeer 2019): one K/V head for all query heads of a sample.
  checkGroupedAgainstRepeated({8, 70, 70, 8, 8, 8}, true, nullptr, 9);
}

TEST(GroupedQueryAttention, MaskAndCausal) {
  AttentionDims d{4, 130, 130, 8, 8, 2};
  auto mask = makeMask(d.sq, d.sk, 53);
  checkGroupedAgainstRepeated(d, true, &mask, 59);
  checkGroupedAgainstRepeated(d, false, &mask, 61);
}

TEST(GroupedQueryAttention, GroupOfOneIsMultiHead) {
  AttentionDims d{4, 50, 50, 8, 8, 1};
  checkGroupedAgainstRepeated(d, true, nullptr, 67);
}

//===----------------------------------------------------------------------===//
// Ring attention, one thread per rank.
//===----------------------------------------------------------------------===//

/// Reusable barrier (the project is C++17: no std::barrier).
class Barrier {
public:
  explicit Barrier(int n) : n(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    int64_t gen = generation;
    if (++count == n) {
      count = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }

private:
  std::mutex mu;
  std::condition_variable cv;
  int n, count = 0;
  int64_t generation = 0;
};

/// In-process ring: rotate(buf, n) on rank r sends buf to rank r+1 and
/// receives rank r-1's buffer (what MPI_Sendrecv_replace does).
struct Ring {
  int size;
  Barrier barrier;
  std::vector<std::vector<float>> mailbox;
  explicit Ring(int size) : size(size), barrier(size), mailbox(size) {}
  void rotate(int rank, float *buf, int64_t n) {
    mailbox[(rank + 1) % size].assign(buf, buf + n);
    barrier.wait();
    EXPECT_EQ(int64_t(mailbox[rank].size()), n);
    std::copy(mailbox[rank].begin(), mailbox[rank].end(), buf);
    barrier.wait();
  }
};

/// global [batch, S, dim] -> rank r's [batch, S/K, dim] (rows r, r+K, ...).
std::vector<float> stripe(const std::vector<float> &g, int64_t batch, int64_t S,
                          int64_t dim, int64_t K, int64_t r) {
  int64_t n = S / K;
  std::vector<float> out(batch * n * dim);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(g.data() + (b * S + i * K + r) * dim, dim,
                  out.data() + (b * n + i) * dim);
  return out;
}

void unstripe(const std::vector<float> &l, int64_t batch, int64_t S,
              int64_t dim, int64_t K, int64_t r, std::vector<float> &g) {
  int64_t n = S / K;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(l.data() + (b * n + i) * dim, dim,
                  g.data() + (b * S + i * K + r) * dim);
}

/// Ring attention over K ranks; with group > 1 (GQA) K/V have batch / group
/// rows and the rotating blocks are that size.
void checkRing(int64_t batch, int64_t S, int64_t dh, int64_t dv, int K,
               bool causal, int64_t group = 1) {
  SCOPED_TRACE("K=" + std::to_string(K) + " S=" + std::to_string(S) +
               (causal ? " causal" : " non-causal") +
               " group=" + std::to_string(group));
  ASSERT_EQ(S % K, 0);
  ASSERT_EQ(batch % group, 0);
  const int64_t kvb = batch / group;
  AttentionDims gd{batch, S, S, dh, dv, group};
  auto q = randomVec(batch * S * dh, 101), k = randomVec(kvb * S * dh, 102),
       v = randomVec(kvb * S * dv, 103), dout = randomVec(batch * S * dv, 104);
  const float scale = 1.5f / std::sqrt(float(dh));
  Result want = runPlain(gd, q, k, v, nullptr, scale, causal, dout);
  AttentionDims mha{batch, S, S, dh, dv};
  Reference exact = naiveAttention(mha, q, repeatKV(k, kvb, group, S * dh),
                                   repeatKV(v, kvb, group, S * dv), nullptr,
                                   scale, causal, dout);
  exact.dk = sumGroups(exact.dk, kvb, group, S * dh);
  exact.dv = sumGroups(exact.dv, kvb, group, S * dv);

  const int64_t n = S / K;
  AttentionDims ld{batch, n, n, dh, dv, group};
  Result got;
  got.o.assign(want.o.size(), kNaN);
  got.lse.assign(want.lse.size(), kNaN);
  got.dq.assign(want.dq.size(), kNaN);
  got.dk.assign(want.dk.size(), kNaN);
  got.dv.assign(want.dv.size(), kNaN);
  Ring ring(K);
  std::mutex resultMu;
  std::atomic<int> badGuards{0};
  std::vector<int> fwdRotations(K, 0), bwdRotations(K, 0);
  std::vector<std::vector<int64_t>> bwdSizes(K);
  auto rankMain = [&](int r) {
    auto lq = stripe(q, batch, S, dh, K, r), lk = stripe(k, kvb, S, dh, K, r),
         lv = stripe(v, kvb, S, dv, K, r),
         ldo = stripe(dout, batch, S, dv, K, r);
    std::vector<float> o(batch * n * dv, kNaN), lse(batch * n, kNaN),
        dq(batch * n * dh, kNaN), dk(kvb * n * dh, kNaN),
        dvv(kvb * n * dv, kNaN);
    Workspace wf(ringAttentionWorkspaceElems(ld, false));
    ringAttentionForward(
        ld, r, K, lq.data(), lk.data(), lv.data(), scale, causal,
        [&](float *buf, int64_t cnt) {
          ++fwdRotations[r];
          ring.rotate(r, buf, cnt);
        },
        o.data(), lse.data(), wf.data());
    Workspace wb(ringAttentionWorkspaceElems(ld, true));
    ringAttentionBackward(
        ld, r, K, lq.data(), lk.data(), lv.data(), o.data(), lse.data(),
        ldo.data(), scale, causal,
        [&](float *buf, int64_t cnt) {
          ++bwdRotations[r];
          bwdSizes[r].push_back(cnt);
          ring.rotate(r, buf, cnt);
        },
        dq.data(), dk.data(), dvv.data(), wb.data());
    if (!wf.guardIntact() || !wb.guardIntact())
      ++badGuards;
    std::lock_guard<std::mutex> lock(resultMu);
    unstripe(o, batch, S, dv, K, r, got.o);
    unstripe(lse, batch, S, 1, K, r, got.lse);
    unstripe(dq, batch, S, dh, K, r, got.dq);
    unstripe(dk, kvb, S, dh, K, r, got.dk);
    unstripe(dvv, kvb, S, dv, K, r, got.dv);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < K; ++r)
    threads.emplace_back(rankMain, r);
  for (auto &t : threads)
    t.join();

  EXPECT_EQ(badGuards.load(), 0) << "ring kernel wrote past its workspace";
  const int64_t kv = kvb * n * (dh + dv); // the rotating K/V heads only
  for (int r = 0; r < K; ++r) {
    EXPECT_EQ(fwdRotations[r], K - 1);
    EXPECT_EQ(bwdRotations[r], K == 1 ? 0 : K);
    for (size_t i = 0; i < bwdSizes[r].size(); ++i)
      EXPECT_EQ(bwdSizes[r][i], i + 1 < bwdSizes[r].size() ? 2 * kv : kv);
  }
  EXPECT_LT(relError(got.o, want.o), kTol);
  EXPECT_LT(relError(got.lse, want.lse), kTol);
  EXPECT_LT(relError(got.dq, want.dq), kTol);
  EXPECT_LT(relError(got.dk, want.dk), kTol);
  EXPECT_LT(relError(got.dv, want.dv), kTol);
  // And both against the exact double reference.
  EXPECT_LT(relError(got.o, exact.o), kTol);
  EXPECT_LT(relError(got.dq, exact.dq), kTol);
  EXPECT_LT(relError(got.dk, exact.dk), kTol);
  EXPECT_LT(relError(got.dv, exact.dv), kTol);
}

TEST(RingAttention, MatchesPlainCausal) {
  for (int K : {1, 2, 4})
    checkRing(2, 200, 16, 16, K, true);
}

TEST(RingAttention, MatchesPlainNonCausal) {
  for (int K : {1, 2, 4})
    checkRing(2, 200, 16, 16, K, false);
}

TEST(RingAttention, GroupedQuery) {
  for (int K : {2, 4}) {
    checkRing(8, 200, 16, 16, K, true, /*group=*/4);
    checkRing(6, 96, 8, 12, K, false, /*group=*/3);
  }
}

TEST(RingAttention, HeadDimsDifferAndSeveralRowBlocks) {
  for (int K : {2, 4})
    checkRing(1, 4 * 96, 12, 20, K, true);
  checkRing(1, 3 * 70, 8, 4, 3, false);
}

//===----------------------------------------------------------------------===//
// Workspace sizes: O(blockRows * sk) (+ the local K/V blocks for the ring),
// never sq * sk.
//===----------------------------------------------------------------------===//

TEST(AttentionWorkspace, PlainIsRowBlocked) {
  AttentionDims d{1, 4096, 4096, 64, 64};
  for (bool bwd : {false, true}) {
    int64_t ws = attentionWorkspaceElems(d, bwd);
    EXPECT_LT(ws, 4096 * 4096 / 8);
    EXPECT_LE(ws, 2 * kAttentionBlockRows * d.sk + 2 * kAttentionBlockRows);
    // Linear, not quadratic, in the sequence length.
    AttentionDims d2{1, 8192, 8192, 64, 64};
    EXPECT_LE(attentionWorkspaceElems(d2, bwd), 2 * ws);
  }
}

TEST(AttentionWorkspace, RingIsBlocksPlusRowBlock) {
  const int64_t S = 4096, K = 4, n = S / K;
  AttentionDims d{1, n, n, 64, 64};
  for (bool bwd : {false, true}) {
    int64_t ws = ringAttentionWorkspaceElems(d, bwd);
    int64_t kvBlocks = (bwd ? 2 : 1) * d.batch * n * (d.dh + d.dv);
    EXPECT_LE(ws, kvBlocks + 2 * kAttentionBlockRows * n + d.batch * n);
    EXPECT_LT(ws, n * n / 2);
    AttentionDims d2{1, 2 * n, 2 * n, 64, 64};
    EXPECT_LE(ringAttentionWorkspaceElems(d2, bwd), 2 * ws);
  }
}

// GQA: the rotating blocks hold the Hkv heads, not H copies.
TEST(AttentionWorkspace, RingBlocksAreKeyValueHeads) {
  const int64_t n = 256;
  AttentionDims mha{8, n, n, 64, 64}, gqa{8, n, n, 64, 64, 4};
  for (bool bwd : {false, true}) {
    int64_t kvBlocks = (bwd ? 2 : 1) * n * (64 + 64);
    EXPECT_EQ(ringAttentionWorkspaceElems(mha, bwd) -
                  ringAttentionWorkspaceElems(gqa, bwd),
              (8 - 2) * kvBlocks);
    EXPECT_EQ(attentionWorkspaceElems(mha, bwd),
              attentionWorkspaceElems(gqa, bwd));
  }
}

} // namespace

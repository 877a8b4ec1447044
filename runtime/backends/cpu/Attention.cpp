//===- Attention.cpp - Memory-efficient and ring attention on CPU ---------===//
//
// See Attention.h for shapes, the algorithm and its sources.
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/Attention.h"
#include "runtime/backends/cpu/VecMath.h"

#include "dialects/tsrt/AttentionWorkspace.h"

#include <cblas.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

using namespace tessera::runtime::cpu;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t blockRows(int64_t sq) { return std::min(sq, kAttentionBlockRows); }

/// Number of leading keys that can be allowed for some query row at or before
/// global position qMax (keys have increasing positions).
int64_t causalKeyLimit(int64_t sk, SeqPositions kPos, int64_t qMax) {
  if (qMax < kPos.start)
    return 0;
  return std::min(sk, (qMax - kPos.start) / kPos.stride + 1);
}

/// S[rows x nc] = scale * Q_blk K[0:nc]^T + mask, causal entries -> -inf.
/// Returns nothing; S has row stride nc.
void computeScores(int64_t rows, int64_t nc, int64_t dh, int64_t sk,
                   const float *qBlk, const float *kb, const float *maskBlk,
                   float scale, bool causal, SeqPositions qPos, int64_t i0,
                   SeqPositions kPos, float *s) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nc, dh, scale,
              qBlk, dh, kb, dh, 0.0f, s, nc);
  for (int64_t ii = 0; ii < rows; ++ii) {
    float *srow = s + ii * nc;
    if (maskBlk) {
      const float *mrow = maskBlk + ii * sk;
      for (int64_t j = 0; j < nc; ++j)
        srow[j] += mrow[j];
    }
    if (causal) {
      int64_t allowed = causalKeyLimit(nc, kPos, qPos.at(i0 + ii));
      for (int64_t j = allowed; j < nc; ++j)
        srow[j] = kNegInf;
    }
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Workspace sizes.
//===----------------------------------------------------------------------===//

// One definition shared with the executor and the memory plan
// (dialects/tsrt/AttentionWorkspace.h).

int64_t
tessera::runtime::cpu::attentionBlockWorkspaceElems(const AttentionDims &d,
                                                    bool backward) {
  return tessera::tsrt::attentionBlockWorkspaceElems(d.sq, d.sk, backward);
}

int64_t tessera::runtime::cpu::attentionWorkspaceElems(const AttentionDims &d,
                                                       bool backward) {
  return tessera::tsrt::attentionWorkspaceElems(d.batch, d.kvBatch(), d.sq,
                                                d.sk, d.dh, d.dv, backward,
                                                /*ring=*/false);
}

int64_t
tessera::runtime::cpu::ringAttentionWorkspaceElems(const AttentionDims &d,
                                                   bool backward) {
  return tessera::tsrt::attentionWorkspaceElems(d.batch, d.kvBatch(), d.sq,
                                                d.sk, d.dh, d.dv, backward,
                                                /*ring=*/true);
}

//===----------------------------------------------------------------------===//
// Block primitives.
//===----------------------------------------------------------------------===//

void tessera::runtime::cpu::attentionBlockForward(
    const AttentionDims &d, const float *q, const float *k, const float *v,
    const float *mask, float scale, bool causal, SeqPositions qPos,
    SeqPositions kPos, float *oAcc, float *rowMax, float *rowSum,
    float *workspace) {
  assert(qPos.stride >= 1 && kPos.stride >= 1 && "positions must increase");
  assert(d.group >= 1 && d.batch % d.group == 0 && "group must divide batch");
  const int64_t R = blockRows(d.sq);
  float *s = workspace;
  for (int64_t b = 0; b < d.batch; ++b) {
    const float *kb = k + (b / d.group) * d.sk * d.dh;
    const float *vb = v + (b / d.group) * d.sk * d.dv;
    for (int64_t i0 = 0; i0 < d.sq; i0 += R) {
      const int64_t rows = std::min(R, d.sq - i0);
      const int64_t nc =
          causal ? causalKeyLimit(d.sk, kPos, qPos.at(i0 + rows - 1)) : d.sk;
      if (nc == 0)
        continue; // every row of the block fully masked: state unchanged
      const int64_t row0 = b * d.sq + i0;
      computeScores(rows, nc, d.dh, d.sk, q + row0 * d.dh, kb,
                    mask ? mask + i0 * d.sk : nullptr, scale, causal, qPos, i0,
                    kPos, s);
      for (int64_t ii = 0; ii < rows; ++ii) {
        float *srow = s + ii * nc;
        const float bmax = tessera::runtime::vecmath::max(srow, nc);
        const float mOld = rowMax[row0 + ii];
        const float mNew = std::max(mOld, bmax);
        if (mNew == kNegInf) {
          // No allowed key so far: contribute nothing, keep -inf.
          std::fill(srow, srow + nc, 0.0f);
          continue;
        }
        // P = exp(S - mNew) in place (exp(-inf) == 0) and its row sum.
        const double sum =
            tessera::runtime::vecmath::expSum(srow, mNew, srow, nc);
        if (mOld != mNew) {
          // mOld == -inf means the state is empty (sum 0, acc 0).
          float alpha = mOld == kNegInf ? 0.0f : std::exp(mOld - mNew);
          rowSum[row0 + ii] *= alpha;
          float *orow = oAcc + (row0 + ii) * d.dv;
          for (int64_t c = 0; c < d.dv; ++c)
            orow[c] *= alpha;
        }
        rowSum[row0 + ii] += static_cast<float>(sum);
        rowMax[row0 + ii] = mNew;
      }
      // acc += P V
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d.dv, nc,
                  1.0f, s, nc, vb, d.dv, 1.0f, oAcc + row0 * d.dv, d.dv);
    }
  }
}

void tessera::runtime::cpu::attentionBlockFinalize(int64_t rows, int64_t dv,
                                                   float *oAcc,
                                                   const float *rowMax,
                                                   const float *rowSum,
                                                   float *lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float *orow = oAcc + r * dv;
    const float l = rowSum[r];
    const float m = rowMax[r];
    if (!(l > 0.0f) || m == kNegInf) {
      std::fill(orow, orow + dv, 0.0f);
      lse[r] = kNegInf;
      continue;
    }
    const float inv = 1.0f / l;
    for (int64_t c = 0; c < dv; ++c)
      orow[c] *= inv;
    lse[r] = static_cast<float>(static_cast<double>(m) + std::log(double(l)));
  }
}

void tessera::runtime::cpu::attentionDelta(int64_t rows, int64_t dv,
                                           const float *dout, const float *o,
                                           float *delta) {
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < dv; ++c)
      acc += double(dout[r * dv + c]) * double(o[r * dv + c]);
    delta[r] = static_cast<float>(acc);
  }
}

void tessera::runtime::cpu::attentionBlockBackward(
    const AttentionDims &d, const float *q, const float *k, const float *v,
    const float *dout, const float *lse, const float *delta, const float *mask,
    float scale, bool causal, SeqPositions qPos, SeqPositions kPos, float *dq,
    float *dk, float *dv, float *workspace) {
  assert(qPos.stride >= 1 && kPos.stride >= 1 && "positions must increase");
  const int64_t R = blockRows(d.sq);
  float *p = workspace;             // P, then dS      [rows x nc]
  float *dp = workspace + R * d.sk; // dP             [rows x nc]
  assert(d.group >= 1 && d.batch % d.group == 0 && "group must divide batch");
  for (int64_t b = 0; b < d.batch; ++b) {
    // GQA: the group's query rows all add into their K/V row's dK, dV.
    const int64_t kvRow = b / d.group;
    const float *kb = k + kvRow * d.sk * d.dh;
    const float *vb = v + kvRow * d.sk * d.dv;
    float *dkb = dk + kvRow * d.sk * d.dh;
    float *dvb = dv + kvRow * d.sk * d.dv;
    for (int64_t i0 = 0; i0 < d.sq; i0 += R) {
      const int64_t rows = std::min(R, d.sq - i0);
      const int64_t nc =
          causal ? causalKeyLimit(d.sk, kPos, qPos.at(i0 + rows - 1)) : d.sk;
      if (nc == 0)
        continue;
      const int64_t row0 = b * d.sq + i0;
      const float *qBlk = q + row0 * d.dh;
      const float *doBlk = dout + row0 * d.dv;
      computeScores(rows, nc, d.dh, d.sk, qBlk, kb,
                    mask ? mask + i0 * d.sk : nullptr, scale, causal, qPos, i0,
                    kPos, p);
      for (int64_t ii = 0; ii < rows; ++ii) {
        float *prow = p + ii * nc;
        const float l = lse[row0 + ii];
        if (l == kNegInf) {
          std::fill(prow, prow + nc, 0.0f);
          continue;
        }
        tessera::runtime::vecmath::expScale(prow, l, 1.0f, prow, nc);
      }
      // dV[0:nc] += P^T dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, d.dv, rows, 1.0f,
                  p, nc, doBlk, d.dv, 1.0f, dvb, d.dv);
      // dP = dO V[0:nc]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nc, d.dv, 1.0f,
                  doBlk, d.dv, vb, d.dv, 0.0f, dp, nc);
      // dS = P * (dP - delta)   (in place over P)
      for (int64_t ii = 0; ii < rows; ++ii) {
        float *prow = p + ii * nc;
        const float *dprow = dp + ii * nc;
        const float del = delta[row0 + ii];
        for (int64_t j = 0; j < nc; ++j)
          prow[j] = prow[j] * (dprow[j] - del);
      }
      // dQ_blk += scale dS K[0:nc]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d.dh, nc,
                  scale, p, nc, kb, d.dh, 1.0f, dq + row0 * d.dh, d.dh);
      // dK[0:nc] += scale dS^T Q_blk
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, d.dh, rows,
                  scale, p, nc, qBlk, d.dh, 1.0f, dkb, d.dh);
    }
  }
}

//===----------------------------------------------------------------------===//
// Plain attention.
//===----------------------------------------------------------------------===//

void tessera::runtime::cpu::attentionForward(const AttentionDims &d,
                                             const float *q, const float *k,
                                             const float *v, const float *mask,
                                             float scale, bool causal, float *o,
                                             float *lse, float *workspace) {
  assert((!causal || d.sq == d.sk) && "causal attention needs sq == sk");
  const int64_t R = blockRows(d.sq);
  float *rowMax = workspace + attentionBlockWorkspaceElems(d, false);
  float *rowSum = rowMax + R;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t i0 = 0; i0 < d.sq; i0 += R) {
      const int64_t rows = std::min(R, d.sq - i0);
      const int64_t row0 = b * d.sq + i0;
      AttentionDims sub{1, rows, d.sk, d.dh, d.dv};
      float *oBlk = o + row0 * d.dv;
      std::fill(oBlk, oBlk + rows * d.dv, 0.0f);
      std::fill(rowMax, rowMax + rows, kNegInf);
      std::fill(rowSum, rowSum + rows, 0.0f);
      const int64_t kvRow = b / d.group;
      attentionBlockForward(sub, q + row0 * d.dh, k + kvRow * d.sk * d.dh,
                            v + kvRow * d.sk * d.dv,
                            mask ? mask + i0 * d.sk : nullptr, scale, causal,
                            SeqPositions{i0, 1}, SeqPositions{0, 1}, oBlk,
                            rowMax, rowSum, workspace);
      attentionBlockFinalize(rows, d.dv, oBlk, rowMax, rowSum, lse + row0);
    }
  }
}

void tessera::runtime::cpu::attentionBackward(
    const AttentionDims &d, const float *q, const float *k, const float *v,
    const float *o, const float *lse, const float *dout, const float *mask,
    float scale, bool causal, float *dq, float *dk, float *dv,
    float *workspace) {
  assert((!causal || d.sq == d.sk) && "causal attention needs sq == sk");
  std::fill(dq, dq + d.batch * d.sq * d.dh, 0.0f);
  std::fill(dk, dk + d.kvBatch() * d.sk * d.dh, 0.0f);
  std::fill(dv, dv + d.kvBatch() * d.sk * d.dv, 0.0f);
  const int64_t R = blockRows(d.sq);
  float *delta = workspace + attentionBlockWorkspaceElems(d, true);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t i0 = 0; i0 < d.sq; i0 += R) {
      const int64_t rows = std::min(R, d.sq - i0);
      const int64_t row0 = b * d.sq + i0;
      AttentionDims sub{1, rows, d.sk, d.dh, d.dv};
      attentionDelta(rows, d.dv, dout + row0 * d.dv, o + row0 * d.dv, delta);
      const int64_t kvRow = b / d.group;
      attentionBlockBackward(
          sub, q + row0 * d.dh, k + kvRow * d.sk * d.dh,
          v + kvRow * d.sk * d.dv, dout + row0 * d.dv, lse + row0, delta,
          mask ? mask + i0 * d.sk : nullptr, scale, causal, SeqPositions{i0, 1},
          SeqPositions{0, 1}, dq + row0 * d.dh, dk + kvRow * d.sk * d.dh,
          dv + kvRow * d.sk * d.dv, workspace);
    }
  }
}

//===----------------------------------------------------------------------===//
// Ring attention (striped).
//===----------------------------------------------------------------------===//

void tessera::runtime::cpu::ringAttentionForward(
    const AttentionDims &d, int64_t ringRank, int64_t ringSize, const float *q,
    const float *k, const float *v, float scale, bool causal,
    const std::function<void(float *, int64_t)> &rotate, float *o, float *lse,
    float *workspace) {
  assert(d.sq == d.sk && "striped ring attention needs local sq == sk");
  assert(ringSize >= 1 && ringRank >= 0 && ringRank < ringSize);
  const int64_t kElems = d.kvBatch() * d.sk * d.dh;
  const int64_t vElems = d.kvBatch() * d.sk * d.dv;
  float *bufK = workspace;
  float *bufV = bufK + kElems;
  float *rowSum = bufV + vElems;
  float *scores = rowSum + d.batch * d.sq;
  std::memcpy(bufK, k, sizeof(float) * kElems);
  std::memcpy(bufV, v, sizeof(float) * vElems);
  const int64_t rows = d.batch * d.sq;
  std::fill(o, o + rows * d.dv, 0.0f);
  std::fill(lse, lse + rows, kNegInf); // running max
  std::fill(rowSum, rowSum + rows, 0.0f);
  const SeqPositions qPos{ringRank, ringSize};
  for (int64_t step = 0; step < ringSize; ++step) {
    const int64_t src = ((ringRank - step) % ringSize + ringSize) % ringSize;
    attentionBlockForward(d, q, bufK, bufV, nullptr, scale, causal, qPos,
                          SeqPositions{src, ringSize}, o, lse, rowSum, scores);
    if (step + 1 < ringSize)
      rotate(bufK, kElems + vElems);
  }
  attentionBlockFinalize(rows, d.dv, o, lse, rowSum, lse);
}

void tessera::runtime::cpu::ringAttentionBackward(
    const AttentionDims &d, int64_t ringRank, int64_t ringSize, const float *q,
    const float *k, const float *v, const float *o, const float *lse,
    const float *dout, float scale, bool causal,
    const std::function<void(float *, int64_t)> &rotate, float *dq, float *dk,
    float *dv, float *workspace) {
  assert(d.sq == d.sk && "striped ring attention needs local sq == sk");
  assert(ringSize >= 1 && ringRank >= 0 && ringRank < ringSize);
  const int64_t kElems = d.kvBatch() * d.sk * d.dh;
  const int64_t vElems = d.kvBatch() * d.sk * d.dv;
  float *bufK = workspace;
  float *bufV = bufK + kElems;
  float *bufDK = bufV + vElems;
  float *bufDV = bufDK + kElems;
  float *delta = bufDV + vElems;
  float *scratch = delta + d.batch * d.sq;
  std::memcpy(bufK, k, sizeof(float) * kElems);
  std::memcpy(bufV, v, sizeof(float) * vElems);
  std::fill(bufDK, bufDK + kElems + vElems, 0.0f);
  const int64_t rows = d.batch * d.sq;
  std::fill(dq, dq + rows * d.dh, 0.0f);
  attentionDelta(rows, d.dv, dout, o, delta);
  const SeqPositions qPos{ringRank, ringSize};
  for (int64_t step = 0; step < ringSize; ++step) {
    const int64_t src = ((ringRank - step) % ringSize + ringSize) % ringSize;
    attentionBlockBackward(d, q, bufK, bufV, dout, lse, delta, nullptr, scale,
                           causal, qPos, SeqPositions{src, ringSize}, dq, bufDK,
                           bufDV, scratch);
    if (step + 1 < ringSize)
      rotate(bufK, 2 * (kElems + vElems));
    else if (ringSize > 1)
      rotate(bufDK, kElems + vElems); // only the gradients go home
  }
  std::memcpy(dk, bufDK, sizeof(float) * kElems);
  std::memcpy(dv, bufDV, sizeof(float) * vElems);
}

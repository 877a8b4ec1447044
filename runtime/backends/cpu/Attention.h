//===- Attention.h - Memory-efficient and ring attention on CPU -*- C++ -*-===//
//
// Scaled dot-product attention, forward and backward, that never holds the
// full sq x sk score matrix, plus its ring (sequence-parallel) form.
//
// Shapes (all fp32, row major, contiguous): `batch` is the product of the
// leading dims (e.g. B*H);
//   Q [batch, sq, dh], K [batch/group, sk, dh], V [batch/group, sk, dv],
//   O [batch, sq, dv], LSE [batch, sq], optional additive mask [sq, sk]
//   (broadcast over batch; entries finite or -inf).
// Grouped-query attention (Ainslie et al. 2023, "GQA", arXiv:2305.13245;
// multi-query attention, Shazeer 2019, is group = H): `group` = n_rep
// consecutive query batch rows share one K/V batch row, query row b uses
// K/V row b / group. With Q [B, H, ...] and K/V [B, Hkv, ...] flattened,
// b = x*H + h and b / group = x*Hkv + h / (H/Hkv), the head mapping of
// Hugging Face's repeat_kv, so K/V are never copied per query head. The
// backward accumulates dK/dV over the group's query heads.
//
// Algorithm.
//  - Query rows are processed in row blocks of kAttentionBlockRows (64): for
//    one row block the scores S = scale * Q_blk K^T (+ mask, causal -inf) are
//    formed with one cblas_sgemm, so scratch is O(blockRows * sk), never
//    sq * sk (memory-efficient attention, Rabe & Staats 2021,
//    "Self-attention Does Not Need O(n^2) Memory", arXiv:2112.05682).
//  - Softmax is online over K/V blocks (FlashAttention, Dao et al. 2022,
//    arXiv:2205.14135, Alg. 1): per row a running max m and running sum l
//    and an unnormalised output accumulator; a new block with row max m' and
//    probabilities p = exp(s - max(m, m')) rescales the old state by
//    exp(m - max(m, m')). Finalisation: O = acc / l, lse = m + log l.
//  - The backward recomputes P = exp(scale*s + mask - lse) per row block from
//    Q, K and lse (FlashAttention Alg. 2): dV += P^T dO, dP = dO V^T,
//    dS = P * (dP - delta) with delta_i = sum_c dO_ic O_ic,
//    dQ += scale dS K, dK += scale dS^T Q.
//  - Ring attention (Liu et al. 2023, "Ring Attention with Blockwise
//    Transformers for Near-Infinite Context", arXiv:2310.01889): the sequence
//    is split over a ring of ranks; each rank keeps its Q block and the K/V
//    blocks travel around the ring, each one folded into the online softmax.
//  - Striped layout (Brandon et al. 2023, "Striped Attention: Faster Ring
//    Attention for Causal Transformers", arXiv:2311.09431): local row i of
//    ring rank r is global position i*ringSize + r, so with causal masking
//    every (Q block, K/V block) pair is ~triangular and the work is balanced.
//
// -inf handling: a row that has no allowed key in a block keeps running max
// -inf and contributes nothing (no NaN); a row with no allowed key at all
// gets O = 0 and lse = -inf, and zero gradients.
//
// Everything is deterministic (fixed loop and GEMM order; OpenBLAS itself is
// deterministic for a fixed thread count).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CPU_ATTENTION_H
#define TESSERA_RUNTIME_BACKENDS_CPU_ATTENTION_H

#include "dialects/tsrt/AttentionWorkspace.h"

#include <cstdint>
#include <functional>

namespace tessera {
namespace runtime {
namespace cpu {

/// Query rows per row block (bounds the score scratch to blockRows x sk);
/// defined with the workspace formulas in dialects/tsrt/AttentionWorkspace.h.
constexpr int64_t kAttentionBlockRows = tsrt::kAttentionBlockRows;

/// Shapes: `batch` = product of the leading dims (e.g. B*H); Q [batch, sq, dh],
/// K [batch/group, sk, dh], V [batch/group, sk, dv], O [batch, sq, dv],
/// LSE [batch, sq]. `group` (>= 1, dividing batch) is the number of query
/// heads per K/V head (GQA's n_rep; 1 for multi-head attention).
struct AttentionDims {
  int64_t batch, sq, sk, dh, dv;
  int64_t group = 1;
  /// Leading K/V rows: batch / group.
  int64_t kvBatch() const { return batch / group; }
};

/// Global sequence positions of a block's rows: row i is at start + i*stride.
/// Causal masking allows key j for query i iff kPos(j) <= qPos(i).
/// stride must be >= 1.
struct SeqPositions {
  int64_t start = 0, stride = 1;
  int64_t at(int64_t i) const { return start + i * stride; }
};

//===----------------------------------------------------------------------===//
// Plain (single-device) attention.
//===----------------------------------------------------------------------===//

/// Floats of scratch the caller must pass as `workspace`:
///   forward:  blockRows * sk (scores) + 2 * blockRows (running max/sum);
///   backward: 2 * blockRows * sk (P/dS and dP) + blockRows (delta).
/// (blockRows = min(sq, kAttentionBlockRows); 0 when nothing to do.)
int64_t attentionWorkspaceElems(const AttentionDims &d, bool backward);

/// O = softmax(scale * Q K^T + mask, causal) V, row by row in blocks of
/// query rows; lse[b, i] = log sum_j exp(scale*s_ij + mask_ij) over allowed
/// j (natural log). mask: optional additive [sq, sk] (nullptr: none),
/// broadcast over batch. causal requires sq == sk (positions 0..sq-1).
/// A row with no allowed key gets O = 0 and lse = -inf.
/// o and lse are overwritten.
void attentionForward(const AttentionDims &d, const float *q, const float *k,
                      const float *v, const float *mask, float scale,
                      bool causal, float *o, float *lse, float *workspace);

/// Gradients of attentionForward (dq, dk, dv are OVERWRITTEN). Recomputes P
/// per row block from Q, K and lse (P = exp(scale*s + mask - lse)); never
/// holds sq x sk.  delta_i = sum_c dout_ic * o_ic; dS = P * (dP - delta).
/// o and lse must be attentionForward's outputs for the same inputs.
void attentionBackward(const AttentionDims &d, const float *q, const float *k,
                       const float *v, const float *o, const float *lse,
                       const float *dout, const float *mask, float scale,
                       bool causal, float *dq, float *dk, float *dv,
                       float *workspace);

//===----------------------------------------------------------------------===//
// Ring attention (striped layout).
//===----------------------------------------------------------------------===//

/// Floats of scratch for ringAttentionForward / ringAttentionBackward
/// (kvBatch = batch / group: the rotating blocks hold the K/V heads only).
///   forward:  kvBatch*sk*(dh+dv)    rotating packed [K|V] block
///           + batch*sq              running row sum
///           + blockRows*sk          row-block scores
///   backward: kvBatch*sk*2*(dh+dv)  rotating packed [K|V|dK|dV] block
///           + batch*sq              delta
///           + 2*blockRows*sk        row-block P/dS and dP
/// i.e. O(local K/V + blockRows * local sk), never local sq x sk.
int64_t ringAttentionWorkspaceElems(const AttentionDims &d, bool backward);

/// Ring attention on a striped sequence split over a ring of `ringSize`
/// ranks: local row i of rank r is global position i*ringSize + r (sq == sk
/// locally, the same for all ranks). `rotate(buf, n)` sends n floats to the
/// next rank ((r+1) % K) and overwrites buf with the previous rank's n floats
/// (the caller implements it with MPI_Sendrecv_replace). K/V blocks travel
/// the ring; softmax is online (running row max and sum), so no rank ever
/// holds more than its local sq x (local sk) scores, and only row-blocked.
/// Forward: K-1 rotations of the packed [K|V] block (n = kvBatch*sk*(dh+dv),
/// buf = the start of the workspace). After s rotations a rank holds the
/// block of rank (r - s) mod K. o and lse are overwritten (o is used as the
/// unnormalised accumulator and lse as the running max meanwhile).
/// Every rank must make the same calls (rotate is collective).
void ringAttentionForward(const AttentionDims &d, int64_t ringRank,
                          int64_t ringSize, const float *q, const float *k,
                          const float *v, float scale, bool causal,
                          const std::function<void(float *, int64_t)> &rotate,
                          float *o, float *lse, float *workspace);

/// Backward: dK/dV accumulators travel with their K/V block (packed
/// [K|V|dK|dV]), K rotations in all, so each block's gradients end at its
/// owner. The first K-1 rotations move the whole packed block
/// (n = kvBatch*sk*2*(dh+dv), buf = workspace); the last one moves only the
/// [dK|dV] half (buf = workspace + kvBatch*sk*(dh+dv),
/// n = kvBatch*sk*(dh+dv)).
/// With ringSize == 1 there is no rotation at all. dq, dk, dv overwritten.
/// o and lse: ringAttentionForward's outputs.
void ringAttentionBackward(const AttentionDims &d, int64_t ringRank,
                           int64_t ringSize, const float *q, const float *k,
                           const float *v, const float *o, const float *lse,
                           const float *dout, float scale, bool causal,
                           const std::function<void(float *, int64_t)> &rotate,
                           float *dq, float *dk, float *dv, float *workspace);

//===----------------------------------------------------------------------===//
// Block primitives (what the drivers above are built from).
//===----------------------------------------------------------------------===//

/// Floats of scratch for attentionBlockForward (blockRows * sk) or
/// attentionBlockBackward (2 * blockRows * sk).
int64_t attentionBlockWorkspaceElems(const AttentionDims &d, bool backward);

/// Folds one K/V block into the online-softmax state of the query rows
/// (query row b against K/V row b / d.group):
/// oAcc [batch, sq, dv] (unnormalised), rowMax [batch, sq] (start at -inf),
/// rowSum [batch, sq] (start at 0). Allowed keys: causal ? kPos(j) <= qPos(i)
/// : all; mask (optional, [sq, sk], row stride sk, broadcast over batch) is
/// added to the scaled scores.
void attentionBlockForward(const AttentionDims &d, const float *q,
                           const float *k, const float *v, const float *mask,
                           float scale, bool causal, SeqPositions qPos,
                           SeqPositions kPos, float *oAcc, float *rowMax,
                           float *rowSum, float *workspace);

/// oAcc /= rowSum; lse = rowMax + log(rowSum); rows with rowSum == 0 get
/// oAcc = 0 and lse = -inf. `rows` = batch*sq. lse may alias rowMax.
void attentionBlockFinalize(int64_t rows, int64_t dv, float *oAcc,
                            const float *rowMax, const float *rowSum,
                            float *lse);

/// delta[r] = sum_c dout[r, c] * o[r, c] (accumulated in double), rows =
/// batch*sq.
void attentionDelta(int64_t rows, int64_t dv, const float *dout, const float *o,
                    float *delta);

/// Gradient contributions of one K/V block, ACCUMULATED into dq [batch, sq,
/// dh], dk [kvBatch, sk, dh], dv [kvBatch, sk, dv] (query row b adds into
/// K/V row b / d.group, so dK/dV sum over each group). lse and delta
/// [batch, sq]
/// are the final (whole-sequence) ones. Masking as attentionBlockForward.
void attentionBlockBackward(const AttentionDims &d, const float *q,
                            const float *k, const float *v, const float *dout,
                            const float *lse, const float *delta,
                            const float *mask, float scale, bool causal,
                            SeqPositions qPos, SeqPositions kPos, float *dq,
                            float *dk, float *dv, float *workspace);

} // namespace cpu
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CPU_ATTENTION_H

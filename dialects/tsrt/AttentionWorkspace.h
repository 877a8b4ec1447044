//===- AttentionWorkspace.h - attention kernel scratch sizes ----*- C++ -*-===//
//
// The scratch the CPU attention kernels need per call, in floats: one
// definition that the kernels (runtime/backends/cpu/Attention.cpp), the
// executor that allocates it as a counted runtime tensor
// (runtime/backends/cpu/CpuBackend.cpp) and the static memory plan that
// predicts it as the instruction's workspace (passes/lowering/MemoryPlan.cpp)
// all use, so that prediction and measurement cannot drift. Header-only and
// free of MLIR so the runtime backends can include it.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_DIALECTS_TSRT_ATTENTIONWORKSPACE_H
#define TESSERA_DIALECTS_TSRT_ATTENTIONWORKSPACE_H

#include <algorithm>
#include <cstdint>

namespace tessera::tsrt {

/// Query rows per row block of the attention kernels (bounds the score
/// scratch to blockRows x sk).
constexpr int64_t kAttentionBlockRows = 64;

/// Floats of the row-block scratch: blockRows · sk scores (forward) or
/// 2 · blockRows · sk for P/dS and dP (backward), blockRows = min(sq, 64).
inline int64_t attentionBlockWorkspaceElems(int64_t sq, int64_t sk,
                                            bool backward) {
  return (backward ? 2 : 1) * std::min(sq, kAttentionBlockRows) * sk;
}

/// Floats of scratch of one attention / attention_grad call with Q
/// [batch, sq, dh], K [kvBatch, sk, dh], V [kvBatch, sk, dv] (local shapes;
/// kvBatch < batch under grouped-query attention, where batch / kvBatch
/// query heads share each K/V head).
///   plain forward:  blockRows·sk (scores) + 2·blockRows (running max/sum)
///   plain backward: 2·blockRows·sk (P/dS, dP) + blockRows (delta)
///   ring forward:   kvBatch·sk·(dh+dv) (rotating packed [K|V] block)
///                   + batch·sq (running row sum) + blockRows·sk
///   ring backward:  2·kvBatch·sk·(dh+dv) (rotating [K|V|dK|dV] block)
///                   + batch·sq (delta) + 2·blockRows·sk
inline int64_t attentionWorkspaceElems(int64_t batch, int64_t kvBatch,
                                       int64_t sq, int64_t sk, int64_t dh,
                                       int64_t dv, bool backward, bool ring) {
  int64_t block = attentionBlockWorkspaceElems(sq, sk, backward);
  if (ring)
    return (backward ? 2 : 1) * kvBatch * sk * (dh + dv) + batch * sq + block;
  int64_t rows = std::min(sq, kAttentionBlockRows);
  return block + (backward ? 1 : 2) * rows;
}

} // namespace tessera::tsrt

#endif // TESSERA_DIALECTS_TSRT_ATTENTIONWORKSPACE_H

//===- Philox.h - Philox-4x32-10 and the dropout mask key ------*- C++ -*-===//
//
// Philox-4x32-10, the counter-based generator of Salmon, Moraes, Dror and
// Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC'11), with the
// paper's constants (the multipliers 0xD2511F53, 0xCD9E8D57 and the Weyl key
// increments 0x9E3779B9, 0xBB67AE85) and 10 rounds: the generator of cuRAND's
// CURAND_RNG_PSEUDO_PHILOX4_32_10 and of PyTorch's CUDA generator. It maps a
// 128-bit counter and a 64-bit key to 128 random bits with no state, so any
// element's draw is computed independently from its key and index. The
// Random123 known-answer vectors are checked in test/unittests/random.
//
// Tessera's dropout (tsr.dropout) draws element i (its row-major index in
// the GLOBAL tensor) of op `opId` at training step `step` with run seed
// `seed` as word i mod 4 of
//
//     philox4x32_10(counter = {lo32(i/4), hi32(i/4), step, opId},
//                   key     = {lo32(seed), hi32(seed)})
//
// and keeps it when (word >> 8) >= ceil(ratio · 2^24) (a 24-bit uniform
// against the ratio, exact in f32), scaling kept elements by 1/(1 − ratio).
// The draw does not depend on how the tensor is split over ranks or
// micro-batches, so every plan applies the serial run's mask.
//
// Header-only and usable from CUDA device code (TESSERA_HOST_DEVICE).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_RANDOM_PHILOX_H
#define TESSERA_COMMON_RANDOM_PHILOX_H

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera {
namespace random {

struct Philox4x32 {
  uint32_t v[4];
};

/// Philox-4x32 with `rounds` rounds (10 for Philox-4x32-10) of `counter`
/// under `key`.
TESSERA_HOST_DEVICE inline Philox4x32
philox4x32(Philox4x32 counter, uint32_t key0, uint32_t key1, int rounds = 10) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2],
           c3 = counter.v[3];
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32),
             lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32),
             lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ key0, n1 = lo1, n2 = hi0 ^ c3 ^ key1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  return {{c0, c1, c2, c3}};
}

/// The key of one dropout op's draws at one step (see the file comment).
struct DropoutKey {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t opId = 0;
};

/// The 24-bit threshold of `ratio` in [0, 1): an element is kept when its
/// 24-bit uniform is >= the threshold (probability 1 − ceil(r·2^24)/2^24).
inline uint32_t dropoutThreshold(double ratio) {
  return static_cast<uint32_t>(std::ceil(ratio * 16777216.0));
}

/// The four raw words of global elements 4q .. 4q+3.
TESSERA_HOST_DEVICE inline Philox4x32 dropoutWords(const DropoutKey &k,
                                                   uint64_t q) {
  return philox4x32({{static_cast<uint32_t>(q), static_cast<uint32_t>(q >> 32),
                      k.step, k.opId}},
                    static_cast<uint32_t>(k.seed),
                    static_cast<uint32_t>(k.seed >> 32));
}

/// Whether global element `index` is kept.
TESSERA_HOST_DEVICE inline bool dropoutKeep(const DropoutKey &k, uint64_t index,
                                            uint32_t threshold) {
  Philox4x32 w = dropoutWords(k, index >> 2);
  return (w.v[index & 3] >> 8) >= threshold;
}

/// One sub-factor of a split tensor as the dropout kernel walks it: the
/// local tensor is row-major over the sub-factors' local sizes and the global
/// tensor row-major over their global sizes (runtime/executor/Layout.h), so
/// local sub-index j of a factor is global sub-index `offset + j`.
struct DropoutFactor {
  int64_t localSize = 1;
  int64_t offset = 0;       ///< first global sub-index this rank holds
  int64_t globalStride = 1; ///< product of the global sizes of later factors
};

/// The global row-major index of local element `local` (row-major over the
/// factors' local sizes).
TESSERA_HOST_DEVICE inline uint64_t
dropoutGlobalIndex(const DropoutFactor *factors, int numFactors,
                   int64_t local) {
  uint64_t global = 0;
  for (int f = numFactors - 1; f >= 0; --f) {
    int64_t j = local % factors[f].localSize;
    local /= factors[f].localSize;
    global += static_cast<uint64_t>(factors[f].offset + j) *
              static_cast<uint64_t>(factors[f].globalStride);
  }
  return global;
}

} // namespace random
} // namespace tessera

#endif // TESSERA_COMMON_RANDOM_PHILOX_H

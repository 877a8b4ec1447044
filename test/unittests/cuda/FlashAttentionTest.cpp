//===- FlashAttentionTest.cpp - fused attention vs the CPU kernel ---------===//
//
// Three kinds of tests:
//  - Host tests (run everywhere): the tiling and online-softmax functions of
//    FlashAttention.h, and a host emulation of the CUDA kernels' tiled
//    algorithm built from exactly those functions and tile sizes, compared
//    with cpu::attentionForward / attentionBackward; plus the launch
//    functions' argument validation (which returns before touching a
//    device).
//  - Kernel simulation (runs everywhere): the kernels of
//    FlashAttentionKernels.cuh themselves, compiled by the host compiler and
//    run with one std::thread per CUDA thread, real block barriers, warp
//    shuffles, NaN-poisoned shared memory with a guard zone and a WMMA
//    model that distributes stores over the lanes, compared with the CPU
//    kernel (f32 FMA kernels, bf16/f16 tensor-core and CUDA-core kernels).
//    It cannot check what only hardware shows: WMMA alignment rules,
//    register limits, or races that its scheduling happens not to expose.
//  - Device tests (CudaTest fixture, skipped without a GPU): the CUDA
//    kernels against cpu::attentionForward / attentionBackward on the same
//    (for bf16/f16: rounded) inputs.
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cuda/FlashAttention.h"

#include "runtime/backends/cpu/Attention.h"

#include "CudaTestUtil.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

//===----------------------------------------------------------------------===//
// Host simulation of the CUDA execution model, just enough for the
// FlashAttention kernels (FlashAttentionKernels.cuh compiled by the host
// compiler): each CUDA thread of a block is a std::thread, __syncthreads is a
// barrier of the block, a shuffle is an exchange through a buffer between
// two barriers of the warp, and dynamic shared memory is a buffer poisoned
// with NaN and followed by a guard zone that must stay untouched.
//===----------------------------------------------------------------------===//

namespace {
namespace flash_sim {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

class Barrier {
public:
  explicit Barrier(int n) : n(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    const long g = generation;
    if (++count == n) {
      count = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != g; });
  }

private:
  std::mutex m;
  std::condition_variable cv;
  int n, count = 0;
  long generation = 0;
};

/// State of the block being simulated (blocks run one after the other).
struct Block {
  std::unique_ptr<Barrier> block;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> exchange; // one slot per thread, for shuffles
  std::vector<float> smem;     // dynamic shared memory + guard zone
};
Block *current = nullptr;

constexpr int kGuardFloats = 1024;

} // namespace flash_sim
} // namespace

// Internal linkage: these names must not clash with anything else linked
// into the test binary.

static thread_local flash_sim::Dim3 threadIdx;
static flash_sim::Dim3 blockIdx, blockDim, gridDim;

static void __syncthreads() { flash_sim::current->block->wait(); }

static float __shfl_xor_sync(unsigned, float value, int laneMask) {
  flash_sim::Block &b = *flash_sim::current;
  const unsigned t = threadIdx.x;
  flash_sim::Barrier &warp = *b.warps[t / 32];
  b.exchange[t] = value;
  warp.wait();
  const float other = b.exchange[(t & ~31u) | ((t & 31u) ^ laneMask)];
  warp.wait();
  return other;
}

static float *flashSharedMemory() { return flash_sim::current->smem.data(); }

/// WMMA as the kernels use it (m16n16k16, f32 accumulators). A simulated
/// fragment holds the whole 16 x 16 tile in every lane; store_matrix_sync
/// writes from each lane only the elements e with e % 32 == lane, so a
/// kernel that reads another lane's stores without a barrier reads the NaN
/// poison.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "only m16n16k16 simulated");
  float v[16 * 16];
};
inline float simToFloat(float x) { return x; }
inline float simToFloat(__half x) { return __half2float(x); }
inline float simToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, float x) {
  for (float &e : f.v)
    e = x;
}
template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p,
                      unsigned ldm) {
  static_assert(std::is_same<L, row_major>::value ||
                    std::is_same<L, col_major>::value,
                "operand fragments have a layout");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.v[r * 16 + c] = simToFloat(
          std::is_same<L, row_major>::value ? p[r * ldm + c] : p[c * ldm + r]);
}
template <typename T, typename La, typename Lb>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, La> &a,
              const fragment<matrix_b, 16, 16, 16, T, Lb> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
  float out[16 * 16];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float acc = c.v[r * 16 + n];
      for (int k = 0; k < 16; ++k)
        acc = std::fma(a.v[r * 16 + k], b.v[k * 16 + n], acc);
      out[r * 16 + n] = acc;
    }
  std::copy(out, out + 16 * 16, d.v);
}
inline void store_matrix_sync(float *p,
                              const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  const unsigned lane = threadIdx.x % 32;
  for (unsigned e = lane; e < 16 * 16; e += 32) {
    const unsigned r = e / 16, c = e % 16;
    p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.v[e];
  }
}
} // namespace wmma
} // namespace nvcuda

#include "runtime/backends/cuda/FlashAttentionKernels.cuh"

using namespace tessera::runtime;
using namespace tessera::runtime::test;
using cuda::FlashDims;

namespace {

constexpr float kInf = INFINITY;

//===----------------------------------------------------------------------===//
// Problem set-up shared by host and device tests.
//===----------------------------------------------------------------------===//

enum class MaskKind { None, Random, WithDeadRows };

struct Case {
  int64_t batch, sq, sk, dh, dv;
  bool causal;
  MaskKind mask;
  /// Query rows per K/V row (grouped-query attention's n_rep): K and V have
  /// batch / group rows. The host emulation takes only group = 1.
  int64_t group = 1;
  int64_t kvBatch() const { return batch / group; }
};

std::string describe(const Case &c) {
  std::string m = c.mask == MaskKind::None     ? "none"
                  : c.mask == MaskKind::Random ? "random"
                                               : "dead-rows";
  return "batch=" + std::to_string(c.batch) + " sq=" + std::to_string(c.sq) +
         " sk=" + std::to_string(c.sk) + " dh=" + std::to_string(c.dh) +
         " dv=" + std::to_string(c.dv) + " causal=" + std::to_string(c.causal) +
         " mask=" + m + " group=" + std::to_string(c.group);
}

/// Additive mask [sq, sk]: finite values in [-1, 1) with ~20% -inf entries;
/// WithDeadRows also makes rows 1 and sq-1 entirely -inf (those rows must
/// get O = 0, lse = -inf and zero gradients).
Tensor makeMask(const Case &c, unsigned seed) {
  Tensor m = randomF32({c.sq, c.sk}, seed, -1.0f, 1.0f);
  std::mt19937 gen(seed + 17);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  float *p = m.data<float>();
  for (int64_t i = 0; i < m.numel(); ++i)
    if (u(gen) < 0.2f)
      p[i] = -kInf;
  if (c.mask == MaskKind::WithDeadRows)
    for (int64_t row : {int64_t(1), c.sq - 1})
      if (row >= 0 && row < c.sq)
        std::fill(p + row * c.sk, p + (row + 1) * c.sk, -kInf);
  return m;
}

float scaleOf(const Case &c) {
  return 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(c.dh, 1)));
}

/// Inputs of one case (f32; for bf16/f16 runs already rounded to `dtype`).
struct Inputs {
  Tensor q, k, v, dout, mask; // mask null when none
};

/// f32 values of `t` rounded to `dtype` and back (identity for F32).
Tensor roundTo(const Tensor &t, DType dtype) {
  Tensor r = t.clone();
  float *p = r.data<float>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (dtype == DType::BF16)
      p[i] = toFloat(toBFloat16(p[i]));
    else if (dtype == DType::F16)
      p[i] = toFloat(toFloat16(p[i]));
  }
  return r;
}

Inputs makeInputs(const Case &c, unsigned seed, DType dtype = DType::F32) {
  Inputs in;
  in.q = roundTo(randomF32({c.batch, c.sq, c.dh}, seed + 1), dtype);
  in.k = roundTo(randomF32({c.kvBatch(), c.sk, c.dh}, seed + 2), dtype);
  in.v = roundTo(randomF32({c.kvBatch(), c.sk, c.dv}, seed + 3), dtype);
  in.dout = roundTo(randomF32({c.batch, c.sq, c.dv}, seed + 4), dtype);
  if (c.mask != MaskKind::None)
    in.mask = makeMask(c, seed + 5);
  return in;
}

const float *maskPtr(const Inputs &in) {
  return in.mask.isNull() ? nullptr : in.mask.data<float>();
}

cpu::AttentionDims cpuDims(const Case &c) {
  return cpu::AttentionDims{c.batch, c.sq, c.sk, c.dh, c.dv, c.group};
}

struct Forward {
  Tensor o, lse;
};
struct Backward {
  Tensor dq, dk, dv;
};

Forward cpuForward(const Case &c, const Inputs &in) {
  cpu::AttentionDims d = cpuDims(c);
  Forward f{Tensor::empty(DType::F32, {c.batch, c.sq, c.dv}),
            Tensor::empty(DType::F32, {c.batch, c.sq})};
  std::vector<float> ws(
      std::max<int64_t>(1, cpu::attentionWorkspaceElems(d, false)));
  cpu::attentionForward(d, in.q.data<float>(), in.k.data<float>(),
                        in.v.data<float>(), maskPtr(in), scaleOf(c), c.causal,
                        f.o.data<float>(), f.lse.data<float>(), ws.data());
  return f;
}

Backward cpuBackward(const Case &c, const Inputs &in, const Forward &f) {
  cpu::AttentionDims d = cpuDims(c);
  Backward g{Tensor::empty(DType::F32, {c.batch, c.sq, c.dh}),
             Tensor::empty(DType::F32, {c.kvBatch(), c.sk, c.dh}),
             Tensor::empty(DType::F32, {c.kvBatch(), c.sk, c.dv})};
  std::vector<float> ws(
      std::max<int64_t>(1, cpu::attentionWorkspaceElems(d, true)));
  cpu::attentionBackward(d, in.q.data<float>(), in.k.data<float>(),
                         in.v.data<float>(), f.o.data<float>(),
                         f.lse.data<float>(), in.dout.data<float>(),
                         maskPtr(in), scaleOf(c), c.causal, g.dq.data<float>(),
                         g.dk.data<float>(), g.dv.data<float>(), ws.data());
  return g;
}

//===----------------------------------------------------------------------===//
// Host emulation of the CUDA kernels' tiled algorithm: the same tile sizes,
// the same visiting order and tile skipping, the same FlashAttention.h
// functions, f32 FMA arithmetic. Nothing of size sq x sk is formed (only one
// kFlashBlockQ x kFlashBlockK tile at a time).
//===----------------------------------------------------------------------===//

constexpr int64_t BQ = cuda::kFlashBlockQ, BK = cuda::kFlashBlockK;

/// Scores of the tile (query tile qt, key tile kt) into s[BQ][BK]
/// (disallowed or out-of-range pairs: -inf), as tileScores in the kernel.
void emulateTileScores(const Case &c, const Inputs &in, int64_t b, int64_t qt,
                       int64_t kt, std::vector<float> &s) {
  const float *q = in.q.data<float>() + b * c.sq * c.dh;
  const float *k = in.k.data<float>() + b * c.sk * c.dh;
  const float *mask = maskPtr(in);
  for (int64_t r = 0; r < BQ; ++r)
    for (int64_t j = 0; j < BK; ++j) {
      const int64_t qi = qt * BQ + r, kj = kt * BK + j;
      float x = -kInf;
      if (cuda::flashKeyAllowed(qi, kj, c.sq, c.sk, c.causal)) {
        float dot = 0.0f;
        for (int64_t e = 0; e < c.dh; ++e)
          dot = std::fma(q[qi * c.dh + e], k[kj * c.dh + e], dot);
        x = cuda::flashScore(dot, scaleOf(c),
                             mask ? mask[qi * c.sk + kj] : 0.0f);
      }
      s[r * BK + j] = x;
    }
}

Forward emulateForward(const Case &c, const Inputs &in) {
  EXPECT_EQ(c.group, 1) << "the emulation is multi-head only";
  Forward f{Tensor::zeros(DType::F32, {c.batch, c.sq, c.dv}),
            Tensor::empty(DType::F32, {c.batch, c.sq})};
  const int64_t qTiles = cuda::flashNumTiles(c.sq, BQ);
  std::vector<float> s(BQ * BK), acc(BQ * c.dv);
  std::vector<cuda::FlashRowState> st(BQ);
  for (int64_t b = 0; b < c.batch; ++b) {
    const float *v = in.v.data<float>() + b * c.sk * c.dv;
    for (int64_t qt = 0; qt < qTiles; ++qt) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(st.begin(), st.end(), cuda::flashRowInit());
      const int64_t nk = cuda::flashNumKvTiles(qt, c.sq, c.sk, c.causal);
      for (int64_t kt = 0; kt < nk; ++kt) {
        emulateTileScores(c, in, b, qt, kt, s);
        for (int64_t r = 0; r < BQ; ++r) {
          float mx = -kInf;
          for (int64_t j = 0; j < BK; ++j)
            mx = std::max(mx, s[r * BK + j]);
          const float alpha = cuda::flashRowRescale(st[r], mx);
          float sum = 0.0f;
          for (int64_t j = 0; j < BK; ++j) {
            s[r * BK + j] = cuda::flashProb(s[r * BK + j], st[r].m);
            sum += s[r * BK + j];
          }
          st[r].l += sum;
          for (int64_t e = 0; e < c.dv; ++e) {
            float a = acc[r * c.dv + e] * alpha;
            for (int64_t j = 0; j < BK; ++j) {
              const int64_t kj = kt * BK + j;
              const float vv = kj < c.sk ? v[kj * c.dv + e] : 0.0f;
              a = std::fma(s[r * BK + j], vv, a);
            }
            acc[r * c.dv + e] = a;
          }
        }
      }
      for (int64_t r = 0; r < BQ && qt * BQ + r < c.sq; ++r) {
        const int64_t row = b * c.sq + qt * BQ + r;
        float inv, lse;
        cuda::flashFinalize(st[r], &inv, &lse);
        f.lse.data<float>()[row] = lse;
        for (int64_t e = 0; e < c.dv; ++e)
          f.o.data<float>()[row * c.dv + e] = acc[r * c.dv + e] * inv;
      }
    }
  }
  return f;
}

Backward emulateBackward(const Case &c, const Inputs &in, const Forward &f) {
  EXPECT_EQ(c.group, 1) << "the emulation is multi-head only";
  Backward g{Tensor::zeros(DType::F32, {c.batch, c.sq, c.dh}),
             Tensor::zeros(DType::F32, {c.batch, c.sk, c.dh}),
             Tensor::zeros(DType::F32, {c.batch, c.sk, c.dv})};
  const float scale = scaleOf(c);
  const int64_t qTiles = cuda::flashNumTiles(c.sq, BQ);
  const int64_t kTiles = cuda::flashNumTiles(c.sk, BK);
  // Delta (the preprocessing kernel).
  std::vector<float> delta(c.batch * c.sq);
  for (int64_t r = 0; r < c.batch * c.sq; ++r) {
    float a = 0.0f;
    for (int64_t e = 0; e < c.dv; ++e)
      a = std::fma(in.dout.data<float>()[r * c.dv + e],
                   f.o.data<float>()[r * c.dv + e], a);
    delta[r] = a;
  }
  std::vector<float> s(BQ * BK), ds(BQ * BK);
  // dS of tile (qt, kt) for batch b into ds (P into s).
  auto tileGrads = [&](int64_t b, int64_t qt, int64_t kt) {
    emulateTileScores(c, in, b, qt, kt, s);
    const float *dout = in.dout.data<float>() + b * c.sq * c.dv;
    const float *v = in.v.data<float>() + b * c.sk * c.dv;
    for (int64_t r = 0; r < BQ; ++r) {
      const int64_t qi = qt * BQ + r;
      const float lse = qi < c.sq ? f.lse.data<float>()[b * c.sq + qi] : -kInf;
      const float del = qi < c.sq ? delta[b * c.sq + qi] : 0.0f;
      for (int64_t j = 0; j < BK; ++j) {
        const int64_t kj = kt * BK + j;
        float dp = 0.0f;
        if (qi < c.sq && kj < c.sk)
          for (int64_t e = 0; e < c.dv; ++e)
            dp = std::fma(dout[qi * c.dv + e], v[kj * c.dv + e], dp);
        const float p = cuda::flashRecomputeP(s[r * BK + j], lse);
        s[r * BK + j] = p;
        ds[r * BK + j] = p * (dp - del);
      }
    }
  };
  for (int64_t b = 0; b < c.batch; ++b) {
    const float *q = in.q.data<float>() + b * c.sq * c.dh;
    const float *k = in.k.data<float>() + b * c.sk * c.dh;
    const float *dout = in.dout.data<float>() + b * c.sq * c.dv;
    // dK, dV: parallel over key tiles, query tiles from flashFirstQTile.
    for (int64_t kt = 0; kt < kTiles; ++kt) {
      std::vector<float> dk(BK * c.dh, 0.0f), dv(BK * c.dv, 0.0f);
      for (int64_t qt = cuda::flashFirstQTile(kt, c.causal); qt < qTiles;
           ++qt) {
        tileGrads(b, qt, kt);
        for (int64_t j = 0; j < BK; ++j)
          for (int64_t r = 0; r < BQ; ++r) {
            const int64_t qi = qt * BQ + r;
            if (qi >= c.sq)
              continue; // zero-padded rows contribute p = ds = 0
            for (int64_t e = 0; e < c.dv; ++e)
              dv[j * c.dv + e] = std::fma(s[r * BK + j], dout[qi * c.dv + e],
                                          dv[j * c.dv + e]);
            for (int64_t e = 0; e < c.dh; ++e)
              dk[j * c.dh + e] =
                  std::fma(ds[r * BK + j], q[qi * c.dh + e], dk[j * c.dh + e]);
          }
      }
      for (int64_t j = 0; j < BK && kt * BK + j < c.sk; ++j) {
        const int64_t row = b * c.sk + kt * BK + j;
        for (int64_t e = 0; e < c.dh; ++e)
          g.dk.data<float>()[row * c.dh + e] = scale * dk[j * c.dh + e];
        for (int64_t e = 0; e < c.dv; ++e)
          g.dv.data<float>()[row * c.dv + e] = dv[j * c.dv + e];
      }
    }
    // dQ: parallel over query tiles, key tiles below flashNumKvTiles.
    for (int64_t qt = 0; qt < qTiles; ++qt) {
      std::vector<float> dq(BQ * c.dh, 0.0f);
      const int64_t nk = cuda::flashNumKvTiles(qt, c.sq, c.sk, c.causal);
      for (int64_t kt = 0; kt < nk; ++kt) {
        tileGrads(b, qt, kt);
        for (int64_t r = 0; r < BQ; ++r)
          for (int64_t j = 0; j < BK; ++j) {
            const int64_t kj = kt * BK + j;
            if (kj >= c.sk)
              continue;
            for (int64_t e = 0; e < c.dh; ++e)
              dq[r * c.dh + e] =
                  std::fma(ds[r * BK + j], k[kj * c.dh + e], dq[r * c.dh + e]);
          }
      }
      for (int64_t r = 0; r < BQ && qt * BQ + r < c.sq; ++r) {
        const int64_t row = b * c.sq + qt * BQ + r;
        for (int64_t e = 0; e < c.dh; ++e)
          g.dq.data<float>()[row * c.dh + e] = scale * dq[r * c.dh + e];
      }
    }
  }
  return g;
}

/// Element i of an f32, bf16 or f16 host tensor as float.
float valueAt(const Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case DType::BF16:
    return toFloat(t.data<BFloat16>()[i]);
  case DType::F16:
    return toFloat(t.data<Float16>()[i]);
  default:
    return t.data<float>()[i];
  }
}

/// Largest |a - b| over the elements, relative to max(max |b|, 1e-3)
/// (f32/bf16/f16 tensors of one shape; infinities and NaNs must match).
/// Rounding differences between two f32 summation orders are relative to the
/// magnitudes summed, so entries near zero are judged against the
/// tensor's scale rather than their own.
double scaledError(const Tensor &a, const Tensor &b) {
  EXPECT_EQ(a.shape(), b.shape());
  double scale = 1e-3, worst = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    float y = valueAt(b, i);
    if (std::isfinite(y))
      scale = std::max(scale, std::fabs(double(y)));
  }
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    float x = valueAt(a, i), y = valueAt(b, i);
    if (std::isnan(x) || std::isnan(y))
      return INFINITY; // the reference never has NaN
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y)
        return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(double(x) - y) / scale);
  }
  return worst;
}

bool allFinite(const Tensor &t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(valueAt(t, i)))
      return false;
  return true;
}

/// Cases exercising partial tiles, several tiles, sq != sk, causal, masks
/// with dead rows, head dims 1..128 with dh != dv.
std::vector<Case> hostCases() {
  return {
      {2, 5, 7, 3, 4, false, MaskKind::None},
      {1, 1, 1, 1, 1, false, MaskKind::None},
      {2, 70, 70, 16, 16, true, MaskKind::None},
      {1, 130, 130, 8, 5, true, MaskKind::None},
      {2, 129, 65, 12, 20, false, MaskKind::Random},
      {1, 64, 200, 33, 7, false, MaskKind::WithDeadRows},
      {1, 131, 131, 9, 9, true, MaskKind::WithDeadRows},
      {1, 67, 67, 128, 96, true, MaskKind::Random},
  };
}

//===----------------------------------------------------------------------===//
// Host tests of the pure logic.
//===----------------------------------------------------------------------===//

TEST(FlashAttentionLogic, TileCounts) {
  EXPECT_EQ(cuda::flashNumTiles(0, 64), 0);
  EXPECT_EQ(cuda::flashNumTiles(1, 64), 1);
  EXPECT_EQ(cuda::flashNumTiles(64, 64), 1);
  EXPECT_EQ(cuda::flashNumTiles(65, 64), 2);
  // Non-causal: every key tile.
  EXPECT_EQ(cuda::flashNumKvTiles(0, 10, 200, false), 4);
  // Causal: the diagonal tile is the last one visited.
  EXPECT_EQ(cuda::flashNumKvTiles(0, 200, 200, true), 1);
  EXPECT_EQ(cuda::flashNumKvTiles(2, 200, 200, true), 3);
  EXPECT_EQ(cuda::flashNumKvTiles(3, 200, 200, true), 4); // partial last tile
  EXPECT_EQ(cuda::flashNumKvTiles(0, 0, 0, true), 0);
  EXPECT_EQ(cuda::flashFirstQTile(0, true), 0);
  EXPECT_EQ(cuda::flashFirstQTile(3, true), 3);
  EXPECT_EQ(cuda::flashFirstQTile(3, false), 0);
}

// Brute force: the tiles the kernels skip hold no allowed (query, key) pair,
// and the tiles they visit from both sides are the same set.
TEST(FlashAttentionLogic, SkippedTilesAreFullyMasked) {
  for (int64_t n : {1, 63, 64, 65, 128, 130, 257}) {
    for (bool causal : {false, true}) {
      const int64_t qTiles = cuda::flashNumTiles(n, BQ);
      const int64_t kTiles = cuda::flashNumTiles(n, BK);
      for (int64_t qt = 0; qt < qTiles; ++qt)
        for (int64_t kt = 0; kt < kTiles; ++kt) {
          bool any = false;
          for (int64_t i = qt * BQ; i < (qt + 1) * BQ; ++i)
            for (int64_t j = kt * BK; j < (kt + 1) * BK; ++j)
              any |= cuda::flashKeyAllowed(i, j, n, n, causal);
          const bool visitedByQ = kt < cuda::flashNumKvTiles(qt, n, n, causal);
          const bool visitedByK = qt >= cuda::flashFirstQTile(kt, causal);
          EXPECT_EQ(visitedByQ, visitedByK) << n << " " << qt << " " << kt;
          if (any)
            EXPECT_TRUE(visitedByQ) << n << " " << qt << " " << kt;
          if (causal)
            EXPECT_EQ(visitedByQ, any) << n << " " << qt << " " << kt;
        }
    }
  }
}

TEST(FlashAttentionLogic, KeyAllowed) {
  EXPECT_TRUE(cuda::flashKeyAllowed(3, 3, 5, 5, true));
  EXPECT_FALSE(cuda::flashKeyAllowed(3, 4, 5, 5, true));
  EXPECT_TRUE(cuda::flashKeyAllowed(3, 4, 5, 5, false));
  EXPECT_FALSE(cuda::flashKeyAllowed(5, 0, 5, 5, false)); // padding row
  EXPECT_FALSE(cuda::flashKeyAllowed(0, 7, 5, 7, false)); // padding key
}

TEST(FlashAttentionLogic, OnlineSoftmaxMerge) {
  // Two tiles folded one after the other equal the softmax of their union.
  const float t1[] = {0.5f, -1.0f, 2.0f};
  const float t2[] = {3.0f, -kInf, 1.0f};
  cuda::FlashRowState st = cuda::flashRowInit();
  float acc = 0.0f; // sum of p * value with value = index
  auto fold = [&](const float *t, int base) {
    float mx = -kInf;
    for (int j = 0; j < 3; ++j)
      mx = std::max(mx, t[j]);
    float alpha = cuda::flashRowRescale(st, mx);
    acc *= alpha;
    for (int j = 0; j < 3; ++j) {
      float p = cuda::flashProb(t[j], st.m);
      st.l += p;
      acc += p * static_cast<float>(base + j);
    }
  };
  fold(t1, 0);
  fold(t2, 3);
  double z = 0, num = 0;
  const float all[] = {0.5f, -1.0f, 2.0f, 3.0f, -kInf, 1.0f};
  for (int j = 0; j < 6; ++j) {
    z += std::exp(double(all[j]));
    num += std::exp(double(all[j])) * j;
  }
  float inv, lse;
  ASSERT_TRUE(cuda::flashFinalize(st, &inv, &lse));
  EXPECT_NEAR(lse, std::log(z), 1e-6);
  EXPECT_NEAR(acc * inv, num / z, 1e-6);
}

TEST(FlashAttentionLogic, EmptyRowsStayEmpty) {
  cuda::FlashRowState st = cuda::flashRowInit();
  EXPECT_EQ(cuda::flashRowRescale(st, -kInf), 1.0f);
  EXPECT_EQ(st.m, -kInf);
  EXPECT_EQ(st.l, 0.0f);
  EXPECT_EQ(cuda::flashProb(-kInf, st.m), 0.0f); // not NaN
  float inv, lse;
  EXPECT_FALSE(cuda::flashFinalize(st, &inv, &lse));
  EXPECT_EQ(inv, 0.0f);
  EXPECT_EQ(lse, -kInf);
  EXPECT_EQ(cuda::flashRecomputeP(-kInf, -kInf), 0.0f);
  EXPECT_EQ(cuda::flashRecomputeP(1.0f, -kInf), 0.0f);
  // The first non-empty tile discards the (empty) accumulator: alpha = 0.
  EXPECT_EQ(cuda::flashRowRescale(st, 2.0f), 0.0f);
  EXPECT_EQ(st.m, 2.0f);
}

TEST(FlashAttentionLogic, LaunchConfiguration) {
  EXPECT_EQ(cuda::flashPaddedHeadDim(1, 1), 64);
  EXPECT_EQ(cuda::flashPaddedHeadDim(64, 64), 64);
  EXPECT_EQ(cuda::flashPaddedHeadDim(64, 65), 128);
  EXPECT_EQ(cuda::flashPaddedHeadDim(128, 3), 128);
  EXPECT_EQ(cuda::flashPaddedHeadDim(129, 3), 0);
  EXPECT_EQ(cuda::flashPaddedHeadDim(3, 129), 0);
  // Shared memory must fit sm_80's opt-in maximum (163 KiB per block).
  constexpr int kSm80MaxSmem = 163 * 1024;
  for (int D : {64, 128}) {
    EXPECT_LE(cuda::flashForwardSharedBytes(D), kSm80MaxSmem);
    EXPECT_LE(cuda::flashBackwardSharedBytes(D), kSm80MaxSmem);
  }
  for (int D : {64, 128})
    EXPECT_LE(cuda::flashForwardWmmaSharedBytes(D), kSm80MaxSmem);
  EXPECT_EQ(cuda::flashForwardWmmaSharedBytes(128), 112640);
  for (int D : {64, 128})
    EXPECT_LE(cuda::flashBackwardWmmaSharedBytes(D), kSm80MaxSmem);
  EXPECT_EQ(cuda::flashBackwardWmmaSharedBytes(64), 90624);
  EXPECT_EQ(cuda::flashBackwardWmmaSharedBytes(128), 123392);
  EXPECT_TRUE(cuda::flashUsesTensorCores(DType::BF16, 8));
  EXPECT_TRUE(cuda::flashUsesTensorCores(DType::F16, 9));
  EXPECT_FALSE(cuda::flashUsesTensorCores(DType::F16, 7));
  EXPECT_FALSE(cuda::flashUsesTensorCores(DType::F32, 9));
  EXPECT_EQ(cuda::flashForwardSharedBytes(64), 66560);
  EXPECT_EQ(cuda::flashBackwardSharedBytes(128), 149248);
  FlashDims d{3, 100, 50, 64, 64};
  EXPECT_EQ(cuda::flashAttentionScratchBytes(d, DType::F32, false), 0);
  EXPECT_GE(cuda::flashAttentionScratchBytes(d, DType::BF16, true),
            3 * 100 * 4);
  EXPECT_EQ(cuda::flashAttentionScratchBytes(d, DType::F32, true) % 256, 0);
}

// Validation happens before any CUDA call, so these run without a GPU.
TEST(FlashAttentionLogic, RejectsBadArguments) {
  FlashDims big{1, 4, 4, 129, 64};
  EXPECT_EQ(cuda::flashAttentionForward(big, DType::F32, nullptr, nullptr,
                                        nullptr, nullptr, 1.0f, false, nullptr,
                                        nullptr, nullptr),
            cudaErrorInvalidValue);
  FlashDims bigV{1, 4, 4, 64, 200};
  EXPECT_EQ(cuda::flashAttentionBackward(bigV, DType::F32, nullptr, nullptr,
                                         nullptr, nullptr, nullptr, nullptr,
                                         nullptr, 1.0f, false, nullptr, nullptr,
                                         nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
  FlashDims rect{1, 4, 5, 8, 8};
  EXPECT_EQ(cuda::flashAttentionForward(rect, DType::F32, nullptr, nullptr,
                                        nullptr, nullptr, 1.0f, true, nullptr,
                                        nullptr, nullptr),
            cudaErrorInvalidValue);
  FlashDims ok{1, 4, 4, 8, 8};
  EXPECT_EQ(cuda::flashAttentionForward(ok, DType::I64, nullptr, nullptr,
                                        nullptr, nullptr, 1.0f, false, nullptr,
                                        nullptr, nullptr),
            cudaErrorInvalidValue);
  FlashDims neg{1, -1, 4, 8, 8};
  EXPECT_EQ(cuda::flashAttentionForward(neg, DType::F32, nullptr, nullptr,
                                        nullptr, nullptr, 1.0f, false, nullptr,
                                        nullptr, nullptr),
            cudaErrorInvalidValue);
  // GQA: the group must divide the query rows and be >= 1.
  for (int64_t group : {0, 3}) {
    FlashDims gqa{4, 4, 4, 8, 8, group};
    EXPECT_EQ(cuda::flashAttentionForward(gqa, DType::F32, nullptr, nullptr,
                                          nullptr, nullptr, 1.0f, false,
                                          nullptr, nullptr, nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(cuda::flashAttentionBackward(gqa, DType::F32, nullptr, nullptr,
                                           nullptr, nullptr, nullptr, nullptr,
                                           nullptr, 1.0f, false, nullptr,
                                           nullptr, nullptr, nullptr, nullptr),
              cudaErrorInvalidValue);
  }
}

//===----------------------------------------------------------------------===//
// Host emulation of the tiled algorithm vs the CPU kernel.
//===----------------------------------------------------------------------===//

TEST(FlashAttentionEmulation, ForwardMatchesCpu) {
  unsigned seed = 100;
  for (const Case &c : hostCases()) {
    SCOPED_TRACE(describe(c));
    Inputs in = makeInputs(c, seed += 10);
    Forward ref = cpuForward(c, in);
    Forward got = emulateForward(c, in);
    EXPECT_LE(scaledError(got.o, ref.o), 1e-5);
    EXPECT_LE(scaledError(got.lse, ref.lse), 1e-5);
    EXPECT_TRUE(allFinite(got.o));
    if (c.mask == MaskKind::WithDeadRows) {
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t row : {int64_t(1), c.sq - 1}) {
          EXPECT_EQ(got.lse.data<float>()[b * c.sq + row], -kInf);
          for (int64_t e = 0; e < c.dv; ++e)
            EXPECT_EQ(got.o.data<float>()[(b * c.sq + row) * c.dv + e], 0.0f);
        }
    }
  }
}

// No keys at all (sk = 0): every row is empty. (Not compared with the CPU
// kernel, whose BLAS calls reject a zero leading dimension.)
TEST(FlashAttentionEmulation, NoKeysGivesZeroOutput) {
  Case c{2, 3, 0, 4, 4, false, MaskKind::None};
  Inputs in = makeInputs(c, 90);
  Forward f = emulateForward(c, in);
  for (int64_t i = 0; i < f.o.numel(); ++i)
    EXPECT_EQ(f.o.data<float>()[i], 0.0f);
  for (int64_t i = 0; i < f.lse.numel(); ++i)
    EXPECT_EQ(f.lse.data<float>()[i], -kInf);
  Backward g = emulateBackward(c, in, f);
  for (int64_t i = 0; i < g.dq.numel(); ++i)
    EXPECT_EQ(g.dq.data<float>()[i], 0.0f);
}

TEST(FlashAttentionEmulation, BackwardMatchesCpu) {
  unsigned seed = 200;
  for (const Case &c : hostCases()) {
    SCOPED_TRACE(describe(c));
    Inputs in = makeInputs(c, seed += 10);
    Forward f = cpuForward(c, in);
    Backward ref = cpuBackward(c, in, f);
    Backward got = emulateBackward(c, in, f);
    EXPECT_LE(scaledError(got.dq, ref.dq), 1e-5);
    EXPECT_LE(scaledError(got.dk, ref.dk), 1e-5);
    EXPECT_LE(scaledError(got.dv, ref.dv), 1e-5);
    EXPECT_TRUE(allFinite(got.dq) && allFinite(got.dk) && allFinite(got.dv));
    if (c.mask == MaskKind::WithDeadRows) {
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t e = 0; e < c.dh; ++e)
          EXPECT_EQ(got.dq.data<float>()[(b * c.sq + 1) * c.dh + e], 0.0f);
    }
  }
}

//===----------------------------------------------------------------------===//
// The CUDA kernels themselves, run by the host simulation, vs the CPU kernel.
//===----------------------------------------------------------------------===//

/// Runs `kernel` for blocks 0 .. blocks-1 of kFlashThreads threads with
/// `smemBytes` of dynamic shared memory; fails the test when a block writes
/// past its shared memory.
void simulateLaunch(int64_t blocks, int smemBytes,
                    const std::function<void()> &kernel) {
  using namespace flash_sim;
  const int threads = cuda::kFlashThreads;
  blockDim.x = threads;
  gridDim.x = static_cast<unsigned>(blocks);
  for (int64_t id = 0; id < blocks; ++id) {
    blockIdx.x = static_cast<unsigned>(id);
    Block b;
    b.block = std::make_unique<Barrier>(threads);
    for (int w = 0; w < threads / 32; ++w)
      b.warps.push_back(std::make_unique<Barrier>(32));
    b.exchange.assign(threads, 0.0f);
    b.smem.assign(smemBytes / 4 + kGuardFloats, NAN);
    current = &b;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&kernel, t] {
        threadIdx.x = static_cast<unsigned>(t);
        kernel();
      });
    for (std::thread &t : pool)
      t.join();
    current = nullptr;
    for (int i = smemBytes / 4; i < smemBytes / 4 + kGuardFloats; ++i)
      if (!std::isnan(b.smem[i])) {
        ADD_FAILURE() << "shared memory written past " << smemBytes << " bytes";
        break;
      }
  }
}

/// Host tensor of `dtype` holding the (already representable) f32 values.
Tensor castHost(const Tensor &f32, DType dtype) {
  if (dtype == DType::F32)
    return f32.clone();
  Tensor t = Tensor::empty(dtype, f32.shape());
  const float *p = f32.data<float>();
  for (int64_t i = 0; i < f32.numel(); ++i) {
    if (dtype == DType::BF16)
      t.data<BFloat16>()[i] = toBFloat16(p[i]);
    else
      t.data<Float16>()[i] = toFloat16(p[i]);
  }
  return t;
}

/// Simulated forward then backward (the backward from the CPU forward's o,
/// rounded to the dtype, and lse) of one case, with kernels <T, D>.
template <typename T, int D>
std::pair<Forward, Backward> simulateT(const Case &c, const Inputs &in,
                                       const Forward &cpuFwd, DType dtype,
                                       int computeMajor) {
  namespace fd = cuda::flash_detail;
  Tensor q = castHost(in.q, dtype), k = castHost(in.k, dtype),
         v = castHost(in.v, dtype), dout = castHost(in.dout, dtype),
         o = castHost(cpuFwd.o, dtype);
  Forward f{Tensor::empty(dtype, {c.batch, c.sq, c.dv}),
            Tensor::empty(DType::F32, {c.batch, c.sq})};
  Backward g{Tensor::empty(dtype, {c.batch, c.sq, c.dh}),
             Tensor::empty(dtype, {c.kvBatch(), c.sk, c.dh}),
             Tensor::empty(dtype, {c.kvBatch(), c.sk, c.dv})};
  // Poison: every output must be overwritten.
  for (Tensor *t : {&f.o, &f.lse, &g.dq, &g.dk, &g.dv})
    std::memset(t->raw(), 0x7f, t->bytes());
  std::vector<float> delta(std::max<int64_t>(1, c.batch * c.sq), NAN);
  fd::FlashArgs<T> a{};
  a.batch = c.batch;
  a.group = c.group;
  a.sq = c.sq;
  a.sk = c.sk;
  a.dh = static_cast<int>(c.dh);
  a.dv = static_cast<int>(c.dv);
  a.scale = scaleOf(c);
  a.causal = c.causal;
  a.qTiles = cuda::flashNumTiles(c.sq, BQ);
  a.kTiles = cuda::flashNumTiles(c.sk, BK);
  a.q = static_cast<const T *>(q.raw());
  a.k = static_cast<const T *>(k.raw());
  a.v = static_cast<const T *>(v.raw());
  a.o = static_cast<const T *>(o.raw());
  a.dout = static_cast<const T *>(dout.raw());
  a.mask = maskPtr(in);
  a.lse = cpuFwd.lse.data<float>();
  a.delta = delta.data();
  a.out = static_cast<T *>(f.o.raw());
  a.lseOut = f.lse.data<float>();
  a.dq = static_cast<T *>(g.dq.raw());
  a.dk = static_cast<T *>(g.dk.raw());
  a.dv_ = static_cast<T *>(g.dv.raw());
  if (cuda::flashUsesTensorCores(dtype, computeMajor)) {
    if constexpr (!std::is_same<T, float>::value)
      simulateLaunch(c.batch * a.qTiles, cuda::flashForwardWmmaSharedBytes(D),
                     [&] { fd::flashForwardWmmaKernel<T, D>(a); });
  } else {
    simulateLaunch(c.batch * a.qTiles, cuda::flashForwardSharedBytes(D),
                   [&] { fd::flashForwardKernel<T, D>(a); });
  }
  const int64_t rows = c.batch * c.sq;
  if (rows > 0) // one block: the kernel's warps stride over the rows
    simulateLaunch(1, 0, [&] {
      fd::flashDeltaKernel<T>(a.dout, a.o, rows, a.dv, delta.data());
    });
  if (cuda::flashUsesTensorCores(dtype, computeMajor)) {
    if constexpr (!std::is_same<T, float>::value) {
      const int smem = cuda::flashBackwardWmmaSharedBytes(D);
      simulateLaunch(c.kvBatch() * a.kTiles, smem,
                     [&] { fd::flashBackwardKVWmmaKernel<T, D>(a); });
      simulateLaunch(c.batch * a.qTiles, smem,
                     [&] { fd::flashBackwardQWmmaKernel<T, D>(a); });
    }
  } else {
    const int smem = cuda::flashBackwardSharedBytes(D);
    simulateLaunch(c.kvBatch() * a.kTiles, smem,
                   [&] { fd::flashBackwardKVKernel<T, D>(a); });
    simulateLaunch(c.batch * a.qTiles, smem,
                   [&] { fd::flashBackwardQKernel<T, D>(a); });
  }
  return {std::move(f), std::move(g)};
}

/// As the launchers do on a device of compute capability `computeMajor`.
template <typename T>
std::pair<Forward, Backward> simulateAs(const Case &c, const Inputs &in,
                                        const Forward &cpuFwd, DType dtype,
                                        int computeMajor = 9) {
  if (cuda::flashPaddedHeadDim(c.dh, c.dv) == 64)
    return simulateT<T, 64>(c, in, cpuFwd, dtype, computeMajor);
  return simulateT<T, 128>(c, in, cpuFwd, dtype, computeMajor);
}

/// Simulates the kernels for `dtype` on inputs rounded to it and compares
/// with the CPU kernel: f32 at 1e-5 of the tensors' scale; bf16/f16 at 2e-2
/// of the tensors' scale (the tensor-core kernels round P and dS to the
/// storage type, so elementwise errors near zero are not meaningful).
void checkSimulated(const Case &c, DType dtype, unsigned seed,
                    int computeMajor = 9) {
  SCOPED_TRACE(describe(c));
  Inputs in = makeInputs(c, seed, dtype);
  Forward ref = cpuForward(c, in);
  Forward cpuFwd{roundTo(ref.o, dtype), ref.lse};
  Backward refGrad = cpuBackward(c, in, cpuFwd);
  std::pair<Forward, Backward> got =
      dtype == DType::F32
          ? simulateAs<float>(c, in, cpuFwd, dtype, computeMajor)
      : dtype == DType::BF16
          ? simulateAs<__nv_bfloat16>(c, in, cpuFwd, dtype, computeMajor)
          : simulateAs<__half>(c, in, cpuFwd, dtype, computeMajor);
  auto expectClose = [&](const Tensor &a, const Tensor &b, const char *what) {
    EXPECT_TRUE(allFinite(a)) << what;
    EXPECT_LE(scaledError(a, b), dtype == DType::F32 ? 1e-5 : 2e-2) << what;
  };
  expectClose(got.first.o, ref.o, "o");
  EXPECT_LE(scaledError(got.first.lse, ref.lse), 1e-5) << "lse";
  expectClose(got.second.dq, refGrad.dq, "dq");
  expectClose(got.second.dk, refGrad.dk, "dk");
  expectClose(got.second.dv, refGrad.dv, "dv");
}

TEST(FlashAttentionKernelSim, F32MatchesCpu) {
  unsigned seed = 1000;
  for (const Case &c : std::vector<Case>{
           {2, 5, 7, 3, 4, false, MaskKind::None},
           {1, 130, 130, 8, 5, true, MaskKind::None},
           {2, 129, 65, 12, 20, false, MaskKind::Random},
           {1, 131, 131, 9, 9, true, MaskKind::WithDeadRows},
           {1, 67, 67, 128, 96, true, MaskKind::Random},
       })
    checkSimulated(c, DType::F32, seed += 10);
}

TEST(FlashAttentionKernelSim, HalfTypesMatchCpu) {
  Case c{1, 70, 70, 16, 24, true, MaskKind::WithDeadRows};
  checkSimulated(c, DType::BF16, 1100);
  checkSimulated(c, DType::F16, 1200);
  Case wide{1, 67, 100, 100, 72, false, MaskKind::Random}; // D = 128
  checkSimulated(wide, DType::BF16, 1300);
}

// Below sm_80 bf16/f16 take the f32 CUDA-core kernels.
TEST(FlashAttentionKernelSim, HalfTypesOnCudaCoresMatchCpu) {
  Case c{1, 70, 70, 16, 24, true, MaskKind::WithDeadRows};
  checkSimulated(c, DType::BF16, 1400, /*computeMajor=*/7);
  checkSimulated(c, DType::F16, 1500, /*computeMajor=*/7);
}

// Grouped-query attention: query row b reads K/V row b / group and the
// dK/dV kernel sums over the group's query rows (the CPU kernel is checked
// against repeated K/V in AttentionTest).
TEST(FlashAttentionKernelSim, GroupedQueryMatchesCpu) {
  unsigned seed = 1600;
  for (const Case &c : std::vector<Case>{
           {4, 70, 70, 16, 16, true, MaskKind::None, 2},
           {6, 33, 65, 8, 12, false, MaskKind::Random, 3},
           {4, 66, 66, 72, 72, true, MaskKind::WithDeadRows, 4}, // MQA, D 128
       })
    checkSimulated(c, DType::F32, seed += 10);
  Case half{4, 70, 70, 16, 24, true, MaskKind::Random, 2};
  checkSimulated(half, DType::BF16, 1700);
  checkSimulated(half, DType::F16, 1710, /*computeMajor=*/7);
}

TEST(FlashAttentionKernelSim, NoQueriesGiveZeroKeyGradients) {
  Case c{1, 0, 5, 4, 4, false, MaskKind::None};
  Inputs in = makeInputs(c, 1300);
  Forward none{Tensor::empty(DType::F32, {1, 0, 4}),
               Tensor::empty(DType::F32, {1, 0})};
  std::pair<Forward, Backward> got = simulateAs<float>(c, in, none, DType::F32);
  for (const Tensor *t : {&got.second.dk, &got.second.dv})
    for (int64_t i = 0; i < t->numel(); ++i)
      EXPECT_EQ(t->data<float>()[i], 0.0f);
}

//===----------------------------------------------------------------------===//
// Device tests (skipped without a GPU).
//===----------------------------------------------------------------------===//

class FlashAttentionTest : public CudaTest {
protected:
  const float *devMask(const Inputs &in, Tensor &holder) {
    if (in.mask.isNull())
      return nullptr;
    holder = dev(in.mask);
    return static_cast<const float *>(holder.raw());
  }

  /// Device forward on `in` (values representable in dtype).
  Forward deviceForward(const Case &c, const Inputs &in, DType dtype) {
    Tensor q = dev(castHost(in.q, dtype)), k = dev(castHost(in.k, dtype)),
           v = dev(castHost(in.v, dtype)), maskHolder;
    Tensor o = devEmpty(dtype, {c.batch, c.sq, c.dv});
    Tensor lse = devEmpty(DType::F32, {c.batch, c.sq});
    FlashDims d{c.batch, c.sq, c.sk, c.dh, c.dv, c.group};
    EXPECT_EQ(cuda::flashAttentionForward(
                  d, dtype, q.raw(), k.raw(), v.raw(), devMask(in, maskHolder),
                  scaleOf(c), c.causal, o.raw(),
                  static_cast<float *>(lse.raw()), nullptr),
              cudaSuccess);
    return Forward{host(o), host(lse)};
  }

  /// Device backward with o and lse given (host f32, o representable).
  Backward deviceBackward(const Case &c, const Inputs &in, const Forward &f,
                          DType dtype) {
    Tensor q = dev(castHost(in.q, dtype)), k = dev(castHost(in.k, dtype)),
           v = dev(castHost(in.v, dtype)), o = dev(castHost(f.o, dtype)),
           dout = dev(castHost(in.dout, dtype)), lse = dev(f.lse), maskHolder;
    FlashDims d{c.batch, c.sq, c.sk, c.dh, c.dv, c.group};
    const int64_t scratchBytes =
        cuda::flashAttentionScratchBytes(d, dtype, true);
    Tensor scratch =
        devEmpty(DType::F32, {std::max<int64_t>(1, scratchBytes / 4)});
    Backward g{devEmpty(dtype, {c.batch, c.sq, c.dh}),
               devEmpty(dtype, {c.kvBatch(), c.sk, c.dh}),
               devEmpty(dtype, {c.kvBatch(), c.sk, c.dv})};
    // Poison the outputs: they must be overwritten, not accumulated into.
    EXPECT_EQ(cudaMemset(g.dq.raw(), 0x7f, g.dq.bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemset(g.dk.raw(), 0x7f, g.dk.bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemset(g.dv.raw(), 0x7f, g.dv.bytes()), cudaSuccess);
    EXPECT_EQ(cuda::flashAttentionBackward(
                  d, dtype, q.raw(), k.raw(), v.raw(), o.raw(),
                  static_cast<const float *>(lse.raw()), dout.raw(),
                  devMask(in, maskHolder), scaleOf(c), c.causal, g.dq.raw(),
                  g.dk.raw(), g.dv.raw(), scratch.raw(), nullptr),
              cudaSuccess);
    return Backward{host(g.dq), host(g.dk), host(g.dv)};
  }

  /// f32: error <= 1e-4 relative to the tensor's scale (scaledError; the
  /// f32 summation orders differ from the CPU's BLAS). bf16/f16: <= 2e-2
  /// of the tensor's scale (the tensor-core kernels round P and dS to the
  /// storage type, so elementwise errors near zero are not meaningful).
  void expectClose(const Tensor &got, const Tensor &ref, DType dtype) {
    EXPECT_TRUE(allFinite(got));
    EXPECT_LE(scaledError(got, ref), dtype == DType::F32 ? 1e-4 : 2e-2);
  }

  void checkForward(const Case &c, DType dtype, unsigned seed) {
    SCOPED_TRACE(describe(c));
    Inputs in = makeInputs(c, seed, dtype);
    Forward ref = cpuForward(c, in);
    Forward got = deviceForward(c, in, dtype);
    expectClose(got.o, ref.o, dtype);
    // lse is f32 for every dtype and computed from the same rounded inputs.
    EXPECT_LE(scaledError(got.lse, ref.lse), 1e-4);
  }

  void checkBackward(const Case &c, DType dtype, unsigned seed) {
    SCOPED_TRACE(describe(c));
    Inputs in = makeInputs(c, seed, dtype);
    Forward f = cpuForward(c, in);
    f.o = roundTo(f.o, dtype); // what a dtype forward would have stored
    Backward ref = cpuBackward(c, in, f);
    Backward got = deviceBackward(c, in, f, dtype);
    expectClose(got.dq, ref.dq, dtype);
    expectClose(got.dk, ref.dk, dtype);
    expectClose(got.dv, ref.dv, dtype);
  }
};

std::vector<Case> deviceCases() {
  std::vector<Case> cases = hostCases();
  cases.push_back({3, 256, 256, 64, 64, true, MaskKind::None});
  cases.push_back({2, 200, 333, 128, 128, false, MaskKind::WithDeadRows});
  cases.push_back({2, 97, 97, 80, 32, true, MaskKind::WithDeadRows});
  return cases;
}

TEST_F(FlashAttentionTest, ForwardF32MatchesCpu) {
  unsigned seed = 300;
  for (const Case &c : deviceCases())
    checkForward(c, DType::F32, seed += 10);
}

TEST_F(FlashAttentionTest, BackwardF32MatchesCpu) {
  unsigned seed = 400;
  for (const Case &c : deviceCases())
    checkBackward(c, DType::F32, seed += 10);
}

TEST_F(FlashAttentionTest, ForwardHalfTypesMatchCpu) {
  unsigned seed = 500;
  for (DType dtype : {DType::BF16, DType::F16})
    for (const Case &c : deviceCases())
      checkForward(c, dtype, seed += 10);
}

TEST_F(FlashAttentionTest, BackwardHalfTypesMatchCpu) {
  unsigned seed = 600;
  for (DType dtype : {DType::BF16, DType::F16})
    for (const Case &c : deviceCases())
      checkBackward(c, dtype, seed += 10);
}

TEST_F(FlashAttentionTest, GroupedQueryMatchesCpu) {
  unsigned seed = 1800;
  for (const Case &c : std::vector<Case>{
           {8, 130, 130, 64, 64, true, MaskKind::None, 4},
           {6, 97, 150, 32, 48, false, MaskKind::WithDeadRows, 3},
           {4, 256, 256, 128, 128, true, MaskKind::Random, 4}, // MQA
       }) {
    checkForward(c, DType::F32, seed += 10);
    checkBackward(c, DType::F32, seed += 10);
    for (DType dtype : {DType::BF16, DType::F16}) {
      checkForward(c, dtype, seed += 10);
      checkBackward(c, dtype, seed += 10);
    }
  }
}

TEST_F(FlashAttentionTest, DeadRowsGiveZerosNotNaN) {
  Case c{2, 70, 70, 16, 16, true, MaskKind::WithDeadRows};
  Inputs in = makeInputs(c, 700);
  Forward f = deviceForward(c, in, DType::F32);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t row : {int64_t(1), c.sq - 1}) {
      EXPECT_EQ(f.lse.data<float>()[b * c.sq + row], -kInf);
      for (int64_t e = 0; e < c.dv; ++e)
        EXPECT_EQ(f.o.data<float>()[(b * c.sq + row) * c.dv + e], 0.0f);
    }
  EXPECT_TRUE(allFinite(f.o));
  Backward g = deviceBackward(c, in, f, DType::F32);
  EXPECT_TRUE(allFinite(g.dq) && allFinite(g.dk) && allFinite(g.dv));
  for (int64_t e = 0; e < c.dh; ++e)
    EXPECT_EQ(g.dq.data<float>()[1 * c.dh + e], 0.0f);
}

TEST_F(FlashAttentionTest, BackwardIsDeterministic) {
  Case c{2, 150, 150, 64, 64, true, MaskKind::Random};
  Inputs in = makeInputs(c, 800);
  Forward f = cpuForward(c, in);
  Backward a = deviceBackward(c, in, f, DType::F32);
  Backward b = deviceBackward(c, in, f, DType::F32);
  expectEqualBytes(a.dq, b.dq);
  expectEqualBytes(a.dk, b.dk);
  expectEqualBytes(a.dv, b.dv);
}

TEST_F(FlashAttentionTest, EmptyShapesLaunchNothing) {
  FlashDims d{0, 0, 0, 8, 8};
  EXPECT_EQ(cuda::flashAttentionForward(d, DType::F32, nullptr, nullptr,
                                        nullptr, nullptr, 1.0f, true, nullptr,
                                        nullptr, nullptr),
            cudaSuccess);
  // sq = 0: dK and dV must still be overwritten with zeros.
  Case c{1, 0, 5, 4, 4, false, MaskKind::None};
  Inputs in = makeInputs(c, 900);
  Forward f = cpuForward(c, in);
  Backward g = deviceBackward(c, in, f, DType::F32);
  for (int64_t i = 0; i < g.dk.numel(); ++i)
    EXPECT_EQ(g.dk.data<float>()[i], 0.0f);
  for (int64_t i = 0; i < g.dv.numel(); ++i)
    EXPECT_EQ(g.dv.data<float>()[i], 0.0f);
}

} // namespace

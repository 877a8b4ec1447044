//===- FusedElementwise.cpp - the CPU fused elementwise kernel ------------===//
//
// cpu::fusedElementwise interprets a tsr.fused_elementwise program
// (common/fusion/ElementwiseProgram.h) over tiles of kTile elements: per
// tile, each operand is a pointer into its tensor (full-shape operands) or
// gathered through its index map into a tile buffer (broadcast ones); each
// instruction is one tight loop over the tile writing its own tile buffer,
// so the intermediates stay in L1; the result slots are copied out at the
// end of the tile (after every read of the tile's operands, so a result may
// share storage with an operand). No code is generated at run time.
//
// Each opcode's per-element expression is the unfused kernel's
// (CpuKernels.cpp), written the same way, so the results are bitwise equal
// to running the ops one by one (the conformance suite checks it).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/CpuKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace tessera::runtime;
using tessera::fusion::ElementwiseProgram;
using tessera::fusion::ElemInstr;
using tessera::fusion::ElemOp;

namespace {

constexpr int64_t kTile = 512;

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kGeluTanhBeta = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluTanhKappa = 0.044715f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f; // 1/sqrt(2 pi)

template <typename F>
inline void loop1(const float *a, float *o, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    o[i] = f(a[i]);
}
template <typename F>
inline void loop2(const float *a, const float *b, float *o, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    o[i] = f(a[i], b[i]);
}

float geluTanhGrad(float v, float dy) {
  float v2 = v * v;
  float inner = kGeluTanhBeta * (v + kGeluTanhKappa * v2 * v);
  float t = std::tanh(inner);
  float left = 0.5f * v;
  float right = 1.0f + t;
  float leftDerivative = 0.5f * right;
  float rightDerivative = 1.0f - t * t;
  float innerDerivative = kGeluTanhBeta * (1.0f + 3.0f * kGeluTanhKappa * v2);
  return dy * (leftDerivative + left * rightDerivative * innerDerivative);
}

/// One instruction over n elements: `a`, `b`, `c` its operands' tile
/// pointers (`mask` for select's condition), `o` its tile buffer.
void runInstr(ElemOp op, const float *a, const float *b, const float *c,
              const uint8_t *mask, float *o, int64_t n) {
  switch (op) {
  case ElemOp::Add:
    return loop2(a, b, o, n, [](float x, float y) { return x + y; });
  case ElemOp::Sub:
    return loop2(a, b, o, n, [](float x, float y) { return x - y; });
  case ElemOp::Mul:
    return loop2(a, b, o, n, [](float x, float y) { return x * y; });
  case ElemOp::Div:
    return loop2(a, b, o, n, [](float x, float y) { return x / y; });
  case ElemOp::Pow:
    return loop2(a, b, o, n, [](float x, float y) { return std::pow(x, y); });
  case ElemOp::Max:
    return loop2(a, b, o, n, [](float x, float y) {
      if (std::isnan(x) || std::isnan(y))
        return std::numeric_limits<float>::quiet_NaN();
      return x > y ? x : y;
    });
  case ElemOp::Neg:
    return loop1(a, o, n, [](float x) { return -x; });
  case ElemOp::Exp:
    return loop1(a, o, n, [](float x) { return std::exp(x); });
  case ElemOp::Log:
    return loop1(a, o, n, [](float x) { return std::log(x); });
  case ElemOp::Sqrt:
    return loop1(a, o, n, [](float x) { return std::sqrt(x); });
  case ElemOp::Rsqrt:
    return loop1(a, o, n, [](float x) { return 1.0f / std::sqrt(x); });
  case ElemOp::Tanh:
    return loop1(a, o, n, [](float x) { return std::tanh(x); });
  case ElemOp::Erf:
    return loop1(a, o, n, [](float x) { return std::erf(x); });
  case ElemOp::Relu:
    return loop1(a, o, n, [](float x) { return x < 0.0f ? 0.0f : x; });
  case ElemOp::Sigmoid:
    return loop1(a, o, n, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
  case ElemOp::Silu:
    return loop1(a, o, n, [](float x) {
      if (x == -std::numeric_limits<float>::infinity())
        return -0.0f;
      return x / (1.0f + std::exp(-x));
    });
  case ElemOp::Gelu:
    return loop1(a, o, n, [](float x) {
      return 0.5f * x * (1.0f + std::erf(x * kSqrt1_2));
    });
  case ElemOp::GeluTanh:
    return loop1(a, o, n, [](float x) {
      float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    });
  case ElemOp::Select:
    for (int64_t i = 0; i < n; ++i)
      o[i] = mask[i] ? b[i] : c[i];
    return;
  case ElemOp::ReluGrad:
    return loop2(a, b, o, n,
                 [](float x, float dy) { return x > 0.0f ? dy : 0.0f; });
  case ElemOp::GeluGrad:
    return loop2(a, b, o, n, [](float v, float dy) {
      float cdf = 0.5f * (1.0f + std::erf(v * kSqrt1_2));
      float pdf = std::exp(-0.5f * v * v) * kInvSqrt2Pi;
      return dy * (cdf + v * pdf);
    });
  case ElemOp::GeluTanhGrad:
    return loop2(a, b, o, n, geluTanhGrad);
  case ElemOp::SiluGrad:
    return loop2(a, b, o, n, [](float v, float dy) {
      float d;
      if (std::isinf(v)) {
        d = v > 0 ? 1.0f : 0.0f;
      } else {
        float s = 1.0f / (1.0f + std::exp(-v));
        d = s * (1.0f + v * (1.0f - s));
      }
      return dy * d;
    });
  }
}

/// Gathers elements [start, start + n) of the iteration space from an
/// operand with element strides `strides` (0 on broadcast dims) over
/// `shape`, one innermost row segment at a time: a copy where the operand
/// runs along the innermost dimension, a fill where it is broadcast there.
template <typename T>
void gatherTile(const T *src, const std::vector<int64_t> &shape,
                const std::vector<int64_t> &strides, int64_t start, int64_t n,
                T *dst) {
  size_t rank = shape.size();
  int64_t width = rank ? shape[rank - 1] : 1;
  int64_t inner = rank ? strides[rank - 1] : 0;
  for (int64_t pos = start, end = start + n; pos < end;) {
    int64_t row = pos / width, col = pos - row * width;
    int64_t len = std::min(width - col, end - pos);
    int64_t off = 0;
    for (size_t d = rank ? rank - 1 : 0; d-- > 0;) {
      int64_t q = row / shape[d];
      off += (row - q * shape[d]) * strides[d];
      row = q;
    }
    if (inner)
      std::memcpy(dst, src + off + col, static_cast<size_t>(len) * sizeof(T));
    else
      std::fill(dst, dst + len, src[off]);
    dst += len;
    pos += len;
  }
}

} // namespace

void cpu::fusedElementwise(const ElementwiseProgram &p,
                           llvm::ArrayRef<const Tensor *> in,
                           llvm::MutableArrayRef<Tensor> out) {
  int64_t total = out.empty() ? 0 : out[0].numel();
  int32_t nIn = p.numInputs;
  int32_t nSlots = p.numSlots();
  size_t nInstr = p.instrs.size();
  // Per-thread scratch: a tile buffer per instruction and per broadcast
  // operand (f32; masks as bytes). Grows once, then reused.
  thread_local std::vector<float> scratch;
  thread_local std::vector<uint8_t> maskScratch;
  size_t need = static_cast<size_t>(nSlots) * kTile;
  if (scratch.size() < need)
    scratch.resize(need);
  if (maskScratch.size() < static_cast<size_t>(nIn) * kTile)
    maskScratch.resize(static_cast<size_t>(nIn) * kTile);
  // Operands read directly (full shape) vs gathered (broadcast).
  constexpr int kMaxSlots =
      tessera::fusion::kMaxFusedInputs + tessera::fusion::kMaxFusedInstrs;
  bool direct[tessera::fusion::kMaxFusedInputs] = {};
  for (int32_t i = 0; i < nIn; ++i)
    direct[i] = p.inputNumel[i] == total;
  const float *ptr[kMaxSlots] = {};
  const uint8_t *maskPtr[tessera::fusion::kMaxFusedInputs] = {};
  for (int64_t start = 0; start < total; start += kTile) {
    int64_t n = std::min(kTile, total - start);
    for (int32_t i = 0; i < nIn; ++i) {
      float *buf = scratch.data() + static_cast<size_t>(i) * kTile;
      if (p.inputIsMask[i]) {
        const uint8_t *src = in[i]->data<uint8_t>();
        if (direct[i]) {
          maskPtr[i] = src + start;
        } else {
          uint8_t *m = maskScratch.data() + static_cast<size_t>(i) * kTile;
          gatherTile(src, p.shape, p.inputStrides[i], start, n, m);
          maskPtr[i] = m;
        }
        continue;
      }
      const float *src = in[i]->data<float>();
      if (direct[i]) {
        ptr[i] = src + start;
      } else if (p.inputNumel[i] == 1) {
        std::fill(buf, buf + n, src[0]);
        ptr[i] = buf;
      } else {
        gatherTile(src, p.shape, p.inputStrides[i], start, n, buf);
        ptr[i] = buf;
      }
    }
    for (size_t k = 0; k < nInstr; ++k) {
      const ElemInstr &ins = p.instrs[k];
      float *o = scratch.data() + static_cast<size_t>(nIn + k) * kTile;
      if (ins.op == ElemOp::Select)
        runInstr(ins.op, nullptr, ptr[ins.args[1]], ptr[ins.args[2]],
                 maskPtr[ins.args[0]], o, n);
      else
        runInstr(ins.op, ptr[ins.args[0]], ptr[ins.args[1]], ptr[ins.args[2]],
                 nullptr, o, n);
      ptr[nIn + k] = o;
    }
    for (size_t r = 0; r < p.outputs.size(); ++r)
      std::memcpy(out[r].data<float>() + start, ptr[p.outputs[r]],
                  static_cast<size_t>(n) * sizeof(float));
  }
}

//===- FusedElementwise.cpp - the CPU fused elementwise kernel ------------===//
//
// cpu::fusedElementwise interprets a tsr.fused_elementwise program
// (common/fusion/ElementwiseProgram.h) over tiles of kTile elements: per
// tile, each operand is a pointer into its tensor (full-shape operands) or
// gathered through its index map into a tile buffer (broadcast ones); each
// instruction is one tight loop over the tile writing its own tile buffer,
// so the intermediates stay in L1; a result slot is written straight into
// its result tensor, or, when a result shares storage with an operand,
// copied out at the end of the tile (after every read of the tile's
// operands). No code is generated at run time.
//
// Each opcode computes what the unfused kernel computes: the arithmetic
// ones as inline loops with the same expressions, the transcendental ones
// and the activation gradients by calling the unfused kernel itself on the
// tile, so the results are bitwise equal to running the ops one by one (the
// conformance suite checks it), whichever math the unfused kernels use.
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

/// Runs an unfused kernel on tile views: the transcendental opcodes and
/// the activation gradients call the very kernel of their tsr op on the
/// tile (Tensor views of the tile buffers, no copy), so they compute what
/// it computes element by element, however it is implemented (C library
/// or vectorised math): a tile starts at a multiple of 512 elements, like
/// the unfused kernel's vector blocks.
Tensor tileView(const float *p, int64_t n) {
  return Tensor::view(const_cast<float *>(p), DType::F32, {n});
}
template <typename K>
void unaryKernel(K kernel, const float *a, float *o, int64_t n) {
  Tensor in = tileView(a, n), out = tileView(o, n);
  kernel(in, out);
}
template <typename K>
void binaryKernel(K kernel, const float *a, const float *b, float *o,
                  int64_t n) {
  Tensor x = tileView(a, n), y = tileView(b, n), out = tileView(o, n);
  kernel(x, y, out);
}

/// One instruction over n elements: `a`, `b`, `c` its operands' tile
/// pointers (`mask` for select's condition), `o` its tile buffer. The
/// arithmetic opcodes are inline loops with the unfused kernels' exact
/// expressions (CpuKernels.cpp).
void runInstr(ElemOp op, const float *a, const float *b, const float *c,
              const uint8_t *mask, float *o, int64_t n) {
  using cpu::GeluApproximate;
  switch (op) {
  case ElemOp::Add:
    return loop2(a, b, o, n, [](float x, float y) { return x + y; });
  case ElemOp::Sub:
    return loop2(a, b, o, n, [](float x, float y) { return x - y; });
  case ElemOp::Mul:
    return loop2(a, b, o, n, [](float x, float y) { return x * y; });
  case ElemOp::Div:
    return loop2(a, b, o, n, [](float x, float y) { return x / y; });
  case ElemOp::Max:
    return loop2(a, b, o, n, [](float x, float y) {
      if (std::isnan(x) || std::isnan(y))
        return std::numeric_limits<float>::quiet_NaN();
      return x > y ? x : y;
    });
  case ElemOp::Neg:
    return loop1(a, o, n, [](float x) { return -x; });
  case ElemOp::Relu:
    return loop1(a, o, n, [](float x) { return x < 0.0f ? 0.0f : x; });
  case ElemOp::Select:
    for (int64_t i = 0; i < n; ++i)
      o[i] = mask[i] ? b[i] : c[i];
    return;
  case ElemOp::ReluGrad:
    return loop2(a, b, o, n,
                 [](float x, float dy) { return x > 0.0f ? dy : 0.0f; });
  case ElemOp::Pow:
    return binaryKernel(&cpu::pow, a, b, o, n);
  case ElemOp::Exp:
    return unaryKernel(&cpu::exp, a, o, n);
  case ElemOp::Log:
    return unaryKernel(&cpu::log, a, o, n);
  case ElemOp::Sqrt:
    return unaryKernel(&cpu::sqrt, a, o, n);
  case ElemOp::Rsqrt:
    return unaryKernel(&cpu::rsqrt, a, o, n);
  case ElemOp::Tanh:
    return unaryKernel(&cpu::tanh, a, o, n);
  case ElemOp::Erf:
    return unaryKernel(&cpu::erf, a, o, n);
  case ElemOp::Sigmoid:
    return unaryKernel(&cpu::sigmoid, a, o, n);
  case ElemOp::Silu:
    return unaryKernel(&cpu::silu, a, o, n);
  case ElemOp::Gelu:
  case ElemOp::GeluTanh: {
    GeluApproximate approx =
        op == ElemOp::Gelu ? GeluApproximate::None : GeluApproximate::Tanh;
    return unaryKernel(
        [approx](const Tensor &in, Tensor &out) { cpu::gelu(in, approx, out); },
        a, o, n);
  }
  case ElemOp::GeluGrad:
  case ElemOp::GeluTanhGrad: {
    GeluApproximate approx =
        op == ElemOp::GeluGrad ? GeluApproximate::None : GeluApproximate::Tanh;
    return binaryKernel(
        [approx](const Tensor &x, const Tensor &dy, Tensor &dx) {
          cpu::geluGrad(x, dy, approx, dx);
        },
        a, b, o, n);
  }
  case ElemOp::SiluGrad:
    return binaryKernel(&cpu::siluGrad, a, b, o, n);
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
  // An instruction whose slot is a result writes the result tensor directly
  // unless some result shares storage with an input (then every result
  // goes through the tile buffer and is copied out after the tile's reads).
  bool overlap = false;
  for (const Tensor &o : out)
    for (const Tensor *i : in) {
      auto *ob = static_cast<const char *>(o.raw());
      auto *ib = static_cast<const char *>(i->raw());
      overlap |= ob < ib + i->bytes() && ib < ob + o.bytes();
    }
  float *outOf[kMaxSlots] = {};
  if (!overlap)
    for (size_t r = 0; r < p.outputs.size(); ++r)
      outOf[p.outputs[r]] = out[r].data<float>();
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
      float *o = outOf[nIn + k]
                     ? outOf[nIn + k] + start
                     : scratch.data() + static_cast<size_t>(nIn + k) * kTile;
      if (ins.op == ElemOp::Select)
        runInstr(ins.op, nullptr, ptr[ins.args[1]], ptr[ins.args[2]],
                 maskPtr[ins.args[0]], o, n);
      else
        runInstr(ins.op, ptr[ins.args[0]], ptr[ins.args[1]], ptr[ins.args[2]],
                 nullptr, o, n);
      ptr[nIn + k] = o;
    }
    if (overlap)
      for (size_t r = 0; r < p.outputs.size(); ++r)
        std::memcpy(out[r].data<float>() + start, ptr[p.outputs[r]],
                    static_cast<size_t>(n) * sizeof(float));
  }
}

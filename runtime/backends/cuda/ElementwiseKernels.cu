//===- ElementwiseKernels.cu - CUDA elementwise, layout, reductions -------===//
//
// See ElementwiseKernels.h. Every kernel is a grid-stride loop with 64-bit
// indices; floating-point values are loaded as f32 (toF32), computed in f32
// and rounded on the store (fromF32). The arithmetic of the activations
// and their gradients uses __fmul_rn / __fadd_rn so that nvcc does not
// contract it into FMAs and the f32 results follow the CPU kernels'
// expressions operation by operation (the transcendentals themselves are
// CUDA's expf / erff / tanhf, within 2 ulp of the host libm).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cuda/ElementwiseKernels.h"

#include "runtime/backends/cuda/CudaDType.cuh"

#include <math_constants.h>

#include <cstdint>
#include <type_traits>

namespace tessera {
namespace runtime {
namespace cuda {

namespace {

using namespace elem;

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kGeluTanhBeta = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluTanhKappa = 0.044715f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f; // 1/sqrt(2 pi)

/// Largest grid.x used by the grid-stride loops below.
constexpr int64_t kMaxBlocks = 65535LL * 8;

__device__ __forceinline__ int64_t globalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t gridThreads() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

__device__ __forceinline__ float quietNaN() {
  return __int_as_float(0x7fc00000);
}

bool sameShape(const Tensor &a, const Tensor &b) {
  return a.shape() == b.shape();
}

bool isFloat(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

/// Launches `kernel` with the standard 1-D grid for `threads` threads of
/// work (nothing when threads <= 0).
template <typename... KArgs, typename... Args>
cudaError_t launchOver(int64_t threads, cudaStream_t stream,
                       void (*kernel)(KArgs...), Args... args) {
  if (threads <= 0)
    return cudaSuccess;
  kernel<<<gridFor(threads), kThreadsPerBlock, 0, stream>>>(args...);
  return cudaGetLastError();
}

/// Launches `kernel` over `n` elements, one thread each.
template <typename... KArgs, typename... Args>
cudaError_t launch1D(int64_t n, cudaStream_t stream, void (*kernel)(KArgs...),
                     Args... args) {
  return launchOver(n, stream, kernel, args...);
}

/// Calls f(U{}) with U the unsigned integer type of `bytes` (1, 2, 4, 8).
template <typename F> cudaError_t dispatchBySize(size_t bytes, F &&f) {
  switch (bytes) {
  case 1:
    return f(uint8_t());
  case 2:
    return f(uint16_t());
  case 4:
    return f(uint32_t());
  case 8:
    return f(uint64_t());
  default:
    return cudaErrorInvalidValue;
  }
}

//===----------------------------------------------------------------------===//
// Scalar math (device)
//===----------------------------------------------------------------------===//

template <BinaryOp Op>
__device__ __forceinline__ float binaryF(float x, float y) {
  if constexpr (Op == BinaryOp::Add)
    return __fadd_rn(x, y);
  else if constexpr (Op == BinaryOp::Sub)
    return __fsub_rn(x, y);
  else if constexpr (Op == BinaryOp::Mul)
    return __fmul_rn(x, y);
  else if constexpr (Op == BinaryOp::Div)
    return __fdiv_rn(x, y);
  else if constexpr (Op == BinaryOp::Pow)
    return powf(x, y);
  else {
    if (isnan(x) || isnan(y))
      return quietNaN();
    return x > y ? x : y;
  }
}

template <BinaryOp Op>
__device__ __forceinline__ int64_t binaryI(int64_t x, int64_t y) {
  // Through uint64 so that overflow wraps instead of being undefined.
  uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  if constexpr (Op == BinaryOp::Add)
    return static_cast<int64_t>(ux + uy);
  else if constexpr (Op == BinaryOp::Sub)
    return static_cast<int64_t>(ux - uy);
  else if constexpr (Op == BinaryOp::Mul)
    return static_cast<int64_t>(ux * uy);
  else if constexpr (Op == BinaryOp::Div) {
    if (y == 0)
      return 0;
    if (y == -1) // INT64_MIN / -1 wraps to INT64_MIN
      return static_cast<int64_t>(0 - ux);
    return x / y; // truncates toward zero
  } else
    return x > y ? x : y;
}

__device__ __forceinline__ float geluErfF(float x) {
  // 0.5f * x * (1.0f + erf(x * kSqrt1_2))
  float e = erff(__fmul_rn(x, kSqrt1_2));
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, e));
}

__device__ __forceinline__ float geluTanhF(float x) {
  // inner = beta * (x + kappa * x * x * x); 0.5f * x * (1.0f + tanh(inner))
  float k3 = __fmul_rn(__fmul_rn(__fmul_rn(kGeluTanhKappa, x), x), x);
  float inner = __fmul_rn(kGeluTanhBeta, __fadd_rn(x, k3));
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

/// dy * gelu'(v), the CPU kernel's formulas.
__device__ __forceinline__ float geluErfGradF(float v, float dy) {
  float cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(v, kSqrt1_2))));
  float pdf = __fmul_rn(expf(__fmul_rn(__fmul_rn(-0.5f, v), v)), kInvSqrt2Pi);
  return __fmul_rn(dy, __fadd_rn(cdf, __fmul_rn(v, pdf)));
}

__device__ __forceinline__ float geluTanhGradF(float v, float dy) {
  float v2 = __fmul_rn(v, v);
  float inner = __fmul_rn(
      kGeluTanhBeta, __fadd_rn(v, __fmul_rn(__fmul_rn(kGeluTanhKappa, v2), v)));
  float t = tanhf(inner);
  float left = __fmul_rn(0.5f, v);
  float right = __fadd_rn(1.0f, t);
  float leftDerivative = __fmul_rn(0.5f, right);
  float rightDerivative = __fsub_rn(1.0f, __fmul_rn(t, t));
  float innerDerivative = __fmul_rn(
      kGeluTanhBeta,
      __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f, kGeluTanhKappa), v2)));
  return __fmul_rn(
      dy, __fadd_rn(leftDerivative, __fmul_rn(__fmul_rn(left, rightDerivative),
                                              innerDerivative)));
}

/// cpu::sigmoid / cpu::silu / cpu::siluGrad, with their rounding order.
__device__ __forceinline__ float sigmoidF(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

__device__ __forceinline__ float siluF(float x) {
  if (x == -INFINITY)
    return -0.0f; // the limit; the formula gives -inf / inf
  return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}

__device__ __forceinline__ float siluGradF(float v, float dy) {
  float d;
  if (isinf(v)) {
    d = v > 0.0f ? 1.0f : 0.0f;
  } else {
    float s = sigmoidF(v);
    d = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(v, __fsub_rn(1.0f, s))));
  }
  return __fmul_rn(dy, d);
}

template <UnaryOp Op> __device__ __forceinline__ float unaryF(float x) {
  if constexpr (Op == UnaryOp::Neg)
    return -x;
  else if constexpr (Op == UnaryOp::Exp)
    return expf(x);
  else if constexpr (Op == UnaryOp::Log)
    return logf(x);
  else if constexpr (Op == UnaryOp::Sqrt)
    return __fsqrt_rn(x);
  else if constexpr (Op == UnaryOp::Rsqrt)
    return __fdiv_rn(1.0f, __fsqrt_rn(x));
  else if constexpr (Op == UnaryOp::Tanh)
    return tanhf(x);
  else if constexpr (Op == UnaryOp::Erf)
    return erff(x);
  else if constexpr (Op == UnaryOp::Relu)
    return x < 0.0f ? 0.0f : x;
  else if constexpr (Op == UnaryOp::Gelu)
    return geluErfF(x);
  else if constexpr (Op == UnaryOp::GeluTanh)
    return geluTanhF(x);
  else if constexpr (Op == UnaryOp::Sigmoid)
    return sigmoidF(x);
  else
    return siluF(x);
}

template <BiasActivation A> __device__ __forceinline__ float activate(float v) {
  if constexpr (A == BiasActivation::None)
    return v;
  else if constexpr (A == BiasActivation::Relu)
    return v < 0.0f ? 0.0f : v;
  else if constexpr (A == BiasActivation::Gelu)
    return geluErfF(v);
  else
    return geluTanhF(v);
}

template <BiasActivation A>
__device__ __forceinline__ float activateGrad(float v, float dy) {
  if constexpr (A == BiasActivation::None)
    return dy;
  else if constexpr (A == BiasActivation::Relu)
    return v > 0.0f ? dy : 0.0f;
  else if constexpr (A == BiasActivation::Gelu)
    return geluErfGradF(v, dy);
  else
    return geluTanhGradF(v, dy);
}

//===----------------------------------------------------------------------===//
// Elementwise kernels
//===----------------------------------------------------------------------===//

// No __restrict__: outputs may alias inputs (same index only).

/// 16 bytes of T, loaded and stored as one vector (ld/st.global.v4).
template <typename T> struct alignas(16) Vec16 {
  static constexpr int kWidth = 16 / sizeof(T);
  T v[kWidth];
};

/// With Vectorised, the pointers are 16-byte aligned (checked by the
/// launcher): the first n / kWidth * kWidth elements go as 16-byte vectors,
/// the rest one by one. Each thread reads its elements before writing them,
/// so out may be a or b.
template <typename T, BinaryOp Op, bool Vectorised>
__global__ void binaryFloatKernel(const T *a, const T *b, T *out, int64_t n) {
  int64_t done = 0;
  if constexpr (Vectorised) {
    constexpr int W = Vec16<T>::kWidth;
    int64_t nv = n / W;
    const auto *va = reinterpret_cast<const Vec16<T> *>(a);
    const auto *vb = reinterpret_cast<const Vec16<T> *>(b);
    auto *vo = reinterpret_cast<Vec16<T> *>(out);
    for (int64_t i = globalThread(); i < nv; i += gridThreads()) {
      Vec16<T> x = va[i], y = vb[i], r;
#pragma unroll
      for (int k = 0; k < W; ++k)
        r.v[k] = fromF32<T>(binaryF<Op>(toF32(x.v[k]), toF32(y.v[k])));
      vo[i] = r;
    }
    done = nv * W;
  }
  for (int64_t i = done + globalThread(); i < n; i += gridThreads())
    out[i] = fromF32<T>(binaryF<Op>(toF32(a[i]), toF32(b[i])));
}

/// True when every pointer is 16-byte aligned (vector loads allowed).
template <typename... P> bool aligned16(const P *...ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % 16 == 0) && ...);
}

/// Threads needed for n elements processed `width` at a time.
int64_t vectorThreads(int64_t n, bool vectorised, int width) {
  return vectorised ? (n + width - 1) / width : n;
}

template <BinaryOp Op>
__global__ void binaryI64Kernel(const int64_t *a, const int64_t *b,
                                int64_t *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = binaryI<Op>(a[i], b[i]);
}

template <typename T>
__global__ void equalFloatKernel(const T *a, const T *b, uint8_t *out,
                                 int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = toF32(a[i]) == toF32(b[i]) ? 1 : 0;
}

__global__ void equalI64Kernel(const int64_t *a, const int64_t *b, uint8_t *out,
                               int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = a[i] == b[i] ? 1 : 0;
}

__global__ void equalI1Kernel(const uint8_t *a, const uint8_t *b, uint8_t *out,
                              int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = (a[i] != 0) == (b[i] != 0) ? 1 : 0;
}

template <typename U>
__global__ void selectKernel(const uint8_t *cond, const U *a, const U *b,
                             U *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = cond[i] ? a[i] : b[i];
}

/// As binaryFloatKernel: 16-byte vectors when Vectorised, then the tail.
template <typename T, UnaryOp Op, bool Vectorised>
__global__ void unaryFloatKernel(const T *in, T *out, int64_t n) {
  int64_t done = 0;
  if constexpr (Vectorised) {
    constexpr int W = Vec16<T>::kWidth;
    int64_t nv = n / W;
    const auto *vi = reinterpret_cast<const Vec16<T> *>(in);
    auto *vo = reinterpret_cast<Vec16<T> *>(out);
    for (int64_t i = globalThread(); i < nv; i += gridThreads()) {
      Vec16<T> x = vi[i], r;
#pragma unroll
      for (int k = 0; k < W; ++k)
        r.v[k] = fromF32<T>(unaryF<Op>(toF32(x.v[k])));
      vo[i] = r;
    }
    done = nv * W;
  }
  for (int64_t i = done + globalThread(); i < n; i += gridThreads())
    out[i] = fromF32<T>(unaryF<Op>(toF32(in[i])));
}

__global__ void negI64Kernel(const int64_t *in, int64_t *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = static_cast<int64_t>(0 - static_cast<uint64_t>(in[i]));
}

template <typename T>
__global__ void reluGradKernel(const T *x, const T *dy, T *dx, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    dx[i] = fromF32<T>(toF32(x[i]) > 0.0f ? toF32(dy[i]) : 0.0f);
}

template <typename T, bool Tanh>
__global__ void geluGradKernel(const T *x, const T *dy, T *dx, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float v = toF32(x[i]), g = toF32(dy[i]);
    dx[i] = fromF32<T>(Tanh ? geluTanhGradF(v, g) : geluErfGradF(v, g));
  }
}

template <typename T>
__global__ void siluGradKernel(const T *x, const T *dy, T *dx, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    dx[i] = fromF32<T>(siluGradF(toF32(x[i]), toF32(dy[i])));
}

__global__ void dropoutKernel(const float *x, const float *step,
                              DropoutLaunch l, float *y, int64_t n) {
  tessera::random::DropoutKey key{l.seed, static_cast<uint32_t>(*step), l.opId};
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    uint64_t g =
        tessera::random::dropoutGlobalIndex(l.factors, l.numFactors, i);
    bool keep = tessera::random::dropoutKeep(key, g, l.threshold);
    y[i] = keep ? __fmul_rn(x[i], l.scale) : 0.0f;
  }
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

template <typename T>
constexpr bool isFloatType =
    std::is_same<T, float>::value || std::is_same<T, __nv_bfloat16>::value ||
    std::is_same<T, __half>::value;

/// Device storage type of each dtype (i1 is uint8_t).
template <typename From, typename To>
__device__ __forceinline__ To convertOne(From v) {
  if constexpr (std::is_same<To, uint8_t>::value) { // -> i1: x != 0
    if constexpr (isFloatType<From>)
      return toF32(v) != 0.0f ? 1 : 0;
    else
      return v != 0 ? 1 : 0;
  } else if constexpr (isFloatType<To>) {
    float f;
    if constexpr (isFloatType<From>)
      f = toF32(v);
    else if constexpr (std::is_same<From, int64_t>::value)
      f = __ll2float_rn(v);
    else
      f = static_cast<float>(v); // i1: the byte's value
    return fromF32<To>(f);
  } else { // -> i64
    if constexpr (isFloatType<From>)
      return __float2ll_rz(toF32(v)); // truncates; saturates; NaN -> 0
    else
      return static_cast<int64_t>(v);
  }
}

template <typename From, typename To>
__global__ void convertKernel(const From *in, To *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = convertOne<From, To>(in[i]);
}

/// Calls f(TypeTag<T>{}) with T the device storage type of any dtype.
template <typename F> cudaError_t dispatchAny(DType dtype, F &&f) {
  switch (dtype) {
  case DType::I64:
    return f(TypeTag<int64_t>{});
  case DType::I1:
    return f(TypeTag<uint8_t>{});
  default:
    return dispatchFloat(dtype, std::forward<F>(f));
  }
}

//===----------------------------------------------------------------------===//
// Bias + activation
//===----------------------------------------------------------------------===//

/// Column of flat index i in rows of `cols` (32-bit arithmetic when the
/// tensor has at most UINT32_MAX elements).
__device__ __forceinline__ int64_t columnOf(int64_t i, int64_t cols,
                                            bool small) {
  if (small)
    return static_cast<uint32_t>(i) % static_cast<uint32_t>(cols);
  return i % cols;
}

template <typename T, BiasActivation A>
__global__ void biasActivationKernel(const T *x, const T *bias, T *out,
                                     int64_t n, int64_t cols) {
  const bool small = n <= static_cast<int64_t>(UINT32_MAX);
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float v = __fadd_rn(toF32(x[i]), toF32(bias[columnOf(i, cols, small)]));
    out[i] = fromF32<T>(activate<A>(v));
  }
}

template <typename T, BiasActivation A>
__global__ void biasActivationGradKernel(const T *x, const T *bias, const T *dy,
                                         T *dx, int64_t n, int64_t cols) {
  const bool small = n <= static_cast<int64_t>(UINT32_MAX);
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float v = __fadd_rn(toF32(x[i]), toF32(bias[columnOf(i, cols, small)]));
    dx[i] = fromF32<T>(activateGrad<A>(v, toF32(dy[i])));
  }
}

template <typename F> cudaError_t dispatchAct(BiasActivation act, F &&f) {
  switch (act) {
  case BiasActivation::None:
    return f(std::integral_constant<BiasActivation, BiasActivation::None>{});
  case BiasActivation::Relu:
    return f(std::integral_constant<BiasActivation, BiasActivation::Relu>{});
  case BiasActivation::Gelu:
    return f(std::integral_constant<BiasActivation, BiasActivation::Gelu>{});
  case BiasActivation::GeluTanh:
    return f(
        std::integral_constant<BiasActivation, BiasActivation::GeluTanh>{});
  }
  return cudaErrorInvalidValue;
}

//===----------------------------------------------------------------------===//
// Layout kernels (raw elements U of 1, 2, 4, 8 or 16 bytes)
//===----------------------------------------------------------------------===//

/// out[i] = in[map(i)]; Idx is uint32_t when n <= UINT32_MAX (cheaper
/// unravelling), else int64_t.
template <typename U, typename Idx>
__global__ void gatherKernel(const U *in, U *out, IndexMap m, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = in[mapIndexAs<Idx>(m, static_cast<Idx>(i))];
}

/// Tiled transpose (blocks of kTile x kTileRows threads): reads a tile
/// along the source-contiguous dim a, writes it along the
/// destination-contiguous dim b; the +1 column avoids bank conflicts.
template <typename U>
__global__ void tiledTransposeKernel(const U *in, U *out, TiledTranspose t) {
  __shared__ U tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tilesA = (t.sizeA + kTile - 1) / kTile;
  const int64_t tilesB = (t.sizeB + kTile - 1) / kTile;
  for (int64_t z = blockIdx.z; z < t.batch; z += gridDim.z) {
    const int64_t srcBase = mapIndex(t.batchSrc, z);
    const int64_t dstBase = mapIndex(t.batchDst, z);
    for (int64_t ta = blockIdx.y; ta < tilesA; ta += gridDim.y) {
      for (int64_t tb = blockIdx.x; tb < tilesB; tb += gridDim.x) {
        const int64_t a0 = ta * kTile, b0 = tb * kTile;
        for (int j = ty; j < kTile; j += kTileRows) {
          int64_t a = a0 + tx, b = b0 + j;
          if (a < t.sizeA && b < t.sizeB)
            tile[j][tx] = in[srcBase + b * t.srcStrideB + a];
        }
        __syncthreads();
        for (int j = ty; j < kTile; j += kTileRows) {
          int64_t a = a0 + j, b = b0 + tx;
          if (a < t.sizeA && b < t.sizeB)
            out[dstBase + a * t.dstStrideA + b] = tile[tx][j];
        }
        __syncthreads();
      }
    }
  }
}

/// dst[r * dstPitch + c] = src[r * rowElems + c] for r < rows, c < rowElems
/// (pitches in units U).
template <typename U>
__global__ void copyRowsKernel(const U *src, U *dst, int64_t rows,
                               int64_t rowElems, int64_t dstPitch) {
  int64_t n = rows * rowElems;
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    int64_t r = i / rowElems;
    dst[r * dstPitch + (i - r * rowElems)] = src[i];
  }
}

/// Copies through an index map (elements of `esize` bytes, n outputs).
cudaError_t launchGather(const void *in, void *out, size_t esize,
                         const IndexMap &m, int64_t n, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  bool small = n <= static_cast<int64_t>(UINT32_MAX);
  return dispatchBySize(esize, [&](auto tag) {
    using U = decltype(tag);
    auto kernel = small ? gatherKernel<U, uint32_t> : gatherKernel<U, int64_t>;
    return launch1D(n, stream, kernel, static_cast<const U *>(in),
                    static_cast<U *>(out), m, n);
  });
}

/// out = in permuted by `perm` (out.shape[k] = shape[perm[k]]).
cudaError_t launchPermute(const void *in, void *out, size_t esize,
                          const std::vector<int64_t> &shape,
                          const std::vector<int64_t> &perm,
                          cudaStream_t stream) {
  IndexMap m;
  if (!transposeMap(shape, perm, m))
    return cudaErrorInvalidValue;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  if (n == 0)
    return cudaSuccess;
  TiledTranspose t;
  if (!tiledTransposeOf(m, t))
    return launchGather(in, out, esize, m, n, stream);
  Grid3 g = tiledTransposeGrid(t);
  return dispatchBySize(esize, [&](auto tag) {
    using U = decltype(tag);
    tiledTransposeKernel<U>
        <<<dim3(g.x, g.y, g.z), dim3(kTile, kTileRows), 0, stream>>>(
            static_cast<const U *>(in), static_cast<U *>(out), t);
    return cudaGetLastError();
  });
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

enum class RedKind { Sum, Mean, Max };

template <RedKind K> __device__ __forceinline__ double redInit() {
  return K == RedKind::Max ? -CUDART_INF : 0.0;
}

/// `left` holds earlier elements than `right`.
template <RedKind K>
__device__ __forceinline__ double redCombine(double left, double right) {
  if constexpr (K == RedKind::Max)
    return isnan(left) || left >= right ? left : right;
  else
    return left + right;
}

template <RedKind K, typename T>
__device__ __forceinline__ T redFinish(double acc, double scale) {
  if constexpr (K == RedKind::Mean)
    return fromF32<T>(static_cast<float>(acc * scale));
  else
    return fromF32<T>(static_cast<float>(acc));
}

/// Row reduction (inner == 1): one block of kReduceThreads per (row,
/// split); each thread folds a strided subset in order, then a fixed
/// shared-memory tree. splits == 1 writes out, else partial[row * splits +
/// split].
template <typename T, RedKind K>
__global__ void reduceRowsKernel(const T *in, int64_t outer, int64_t red,
                                 int64_t splits, T *out, double *partial,
                                 double scale) {
  __shared__ double sh[kReduceThreads];
  const int tid = threadIdx.x;
  const int64_t chunk = reduceChunk(red, splits);
  for (int64_t blk = blockIdx.x; blk < outer * splits; blk += gridDim.x) {
    ReduceBlock b = reduceBlockOf(blk, splits, 1);
    int64_t row = b.outer, sp = b.split;
    int64_t begin = sp * chunk;
    int64_t end = begin + chunk < red ? begin + chunk : red;
    const T *p = in + row * red;
    double acc = redInit<K>();
    for (int64_t j = begin + tid; j < end; j += kReduceThreads)
      acc = redCombine<K>(acc, static_cast<double>(toF32(p[j])));
    sh[tid] = acc;
    __syncthreads();
    for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
      if (tid < s)
        sh[tid] = redCombine<K>(sh[tid], sh[tid + s]);
      __syncthreads();
    }
    if (tid == 0) {
      if (splits == 1)
        out[row] = redFinish<K, T>(sh[0], scale);
      else
        partial[partialIndex(row, sp, 0, splits, 1)] = sh[0];
    }
    __syncthreads();
  }
}

/// Column reduction (inner > 1): blocks of kTile columns x kTileRows
/// threads per (outer, split, column tile); thread (x, y) folds rows y, y +
/// kTileRows, ... of its column in order, then a fixed tree over y.
/// splits == 1 writes out, else partial[(o * splits + split) * inner + c].
template <typename T, RedKind K>
__global__ void reduceColsKernel(const T *in, int64_t outer, int64_t red,
                                 int64_t inner, int64_t splits, T *out,
                                 double *partial, double scale) {
  __shared__ double sh[kTileRows][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t chunk = reduceChunk(red, splits);
  const int64_t colTiles = (inner + kTile - 1) / kTile;
  const int64_t blocks = outer * splits * colTiles;
  for (int64_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    ReduceBlock b = reduceBlockOf(blk, splits, colTiles);
    int64_t sp = b.split, o = b.outer;
    int64_t col = b.colTile * kTile + tx;
    int64_t begin = sp * chunk;
    int64_t end = begin + chunk < red ? begin + chunk : red;
    double acc = redInit<K>();
    if (col < inner) {
      const T *p = in + o * red * inner + col;
      for (int64_t j = begin + ty; j < end; j += kTileRows)
        acc = redCombine<K>(acc, static_cast<double>(toF32(p[j * inner])));
    }
    sh[ty][tx] = acc;
    __syncthreads();
    for (int s = kTileRows / 2; s > 0; s >>= 1) {
      if (ty < s)
        sh[ty][tx] = redCombine<K>(sh[ty][tx], sh[ty + s][tx]);
      __syncthreads();
    }
    if (ty == 0 && col < inner) {
      if (splits == 1)
        out[o * inner + col] = redFinish<K, T>(sh[0][tx], scale);
      else
        partial[partialIndex(o, sp, col, splits, inner)] = sh[0][tx];
    }
    __syncthreads();
  }
}

/// Short reductions (inner == 1, red <= kShortReduce): one thread per
/// output folds its row in order.
template <typename T, RedKind K>
__global__ void reduceShortRowsKernel(const T *in, int64_t outer, int64_t red,
                                      T *out, double scale) {
  for (int64_t o = globalThread(); o < outer; o += gridThreads()) {
    const T *p = in + o * red;
    double acc = redInit<K>();
    for (int64_t j = 0; j < red; ++j)
      acc = redCombine<K>(acc, static_cast<double>(toF32(p[j])));
    out[o] = redFinish<K, T>(acc, scale);
  }
}

/// Second stage: out[o * inner + c] = fold over the splits in order.
template <typename T, RedKind K>
__global__ void reduceFinishKernel(const double *partial, int64_t outer,
                                   int64_t inner, int64_t splits, T *out,
                                   double scale) {
  int64_t n = outer * inner;
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    int64_t o = i / inner, c = i - o * inner;
    double acc = redInit<K>();
    for (int64_t s = 0; s < splits; ++s)
      acc = redCombine<K>(acc, partial[partialIndex(o, s, c, splits, inner)]);
    out[i] = redFinish<K, T>(acc, scale);
  }
}

/// Longest row reduced by one thread instead of one block.
constexpr int64_t kShortReduce = 32;

unsigned cappedBlocks(int64_t n) {
  if (n < 1)
    return 1;
  return static_cast<unsigned>(n > kMaxBlocks ? kMaxBlocks : n);
}

/// Reduces in (contiguous [outer, red, inner] of `dtype`) into out
/// ([outer, inner]); `partial` holds outer * inner * splits doubles when
/// splits > 1.
template <RedKind K>
cudaError_t launchReduce(DType dtype, const void *in, void *out, int64_t outer,
                         int64_t red, int64_t inner, double *partial,
                         cudaStream_t stream) {
  if (outer * inner == 0)
    return cudaSuccess;
  // Same scale as the CPU: 1 / count, NaN for an empty mean (0 * inf).
  double scale = 1.0 / static_cast<double>(red);
  int64_t splits = reduceSplits(outer, red, inner);
  return dispatchFloat(dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    const T *pin = static_cast<const T *>(in);
    T *pout = static_cast<T *>(out);
    if (inner == 1 && red <= kShortReduce) {
      return launch1D(outer, stream, reduceShortRowsKernel<T, K>, pin, outer,
                      red, pout, scale);
    }
    if (inner == 1) {
      reduceRowsKernel<T, K>
          <<<cappedBlocks(outer * splits), kReduceThreads, 0, stream>>>(
              pin, outer, red, splits, pout, partial, scale);
    } else {
      int64_t colTiles = (inner + kTile - 1) / kTile;
      reduceColsKernel<T, K>
          <<<cappedBlocks(outer * splits * colTiles), dim3(kTile, kTileRows), 0,
             stream>>>(pin, outer, red, inner, splits, pout, partial, scale);
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || splits == 1)
      return err;
    return launch1D(outer * inner, stream, reduceFinishKernel<T, K>,
                    static_cast<const double *>(partial), outer, inner, splits,
                    pout, scale);
  });
}

/// Scratch layout: [permuted input][partials], each 256-byte aligned.
struct ReduceScratch {
  int64_t permutedBytes = 0, partialBytes = 0;
};

ReduceScratch reduceScratchLayout(DType dtype, const ReducePlan &p,
                                  int64_t numel) {
  ReduceScratch s;
  if (p.needsTranspose)
    s.permutedBytes =
        alignScratch(numel * static_cast<int64_t>(dtypeSize(dtype)));
  int64_t splits = reduceSplits(p.outer, p.red, p.inner);
  if (splits > 1)
    s.partialBytes = alignScratch(p.outer * p.inner * splits *
                                  static_cast<int64_t>(sizeof(double)));
  return s;
}

template <RedKind K>
cudaError_t reduceImpl(const Tensor &in, const std::vector<int64_t> &axes,
                       bool keepDim, Tensor &out, void *scratch,
                       int64_t scratchBytes, cudaStream_t stream) {
  if (!isFloat(in.dtype()) || out.dtype() != in.dtype())
    return cudaErrorInvalidValue;
  ReducePlan plan;
  if (!planReduce(in.shape(), axes, plan))
    return cudaErrorInvalidValue;
  // out's shape: in's without (or with 1 for) the reduced dims.
  std::vector<int64_t> expected;
  for (int64_t d = 0; d < in.rank(); ++d) {
    bool reduced = false;
    for (int64_t a : axes)
      reduced |= a == d;
    if (!reduced)
      expected.push_back(in.shape()[d]);
    else if (keepDim)
      expected.push_back(1);
  }
  if (expected != out.shape())
    return cudaErrorInvalidValue;
  if (out.numel() == 0)
    return cudaSuccess;
  ReduceScratch layout = reduceScratchLayout(in.dtype(), plan, in.numel());
  if (scratchBytes < layout.permutedBytes + layout.partialBytes ||
      (layout.permutedBytes + layout.partialBytes > 0 && !scratch))
    return cudaErrorInvalidValue;
  const void *src = in.raw();
  if (plan.needsTranspose) {
    cudaError_t err = launchPermute(in.raw(), scratch, dtypeSize(in.dtype()),
                                    plan.dims, plan.perm, stream);
    if (err != cudaSuccess)
      return err;
    src = scratch;
  } else if (plan.red == 1) {
    // Nothing reduced (or only size-1 dims): the values themselves.
    return cudaMemcpyAsync(out.raw(), src, out.bytes(),
                           cudaMemcpyDeviceToDevice, stream);
  }
  double *partial = reinterpret_cast<double *>(static_cast<char *>(scratch) +
                                               layout.permutedBytes);
  return launchReduce<K>(in.dtype(), src, out.raw(), plan.outer, plan.red,
                         plan.inner, layout.partialBytes ? partial : nullptr,
                         stream);
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace {
template <typename F> cudaError_t dispatchBinaryOp(BinaryOp op, F &&f) {
  switch (op) {
  case BinaryOp::Add:
    return f(std::integral_constant<BinaryOp, BinaryOp::Add>{});
  case BinaryOp::Sub:
    return f(std::integral_constant<BinaryOp, BinaryOp::Sub>{});
  case BinaryOp::Mul:
    return f(std::integral_constant<BinaryOp, BinaryOp::Mul>{});
  case BinaryOp::Div:
    return f(std::integral_constant<BinaryOp, BinaryOp::Div>{});
  case BinaryOp::Pow:
    return f(std::integral_constant<BinaryOp, BinaryOp::Pow>{});
  case BinaryOp::Max:
    return f(std::integral_constant<BinaryOp, BinaryOp::Max>{});
  }
  return cudaErrorInvalidValue;
}

template <typename F> cudaError_t dispatchUnaryOp(UnaryOp op, F &&f) {
  switch (op) {
  case UnaryOp::Neg:
    return f(std::integral_constant<UnaryOp, UnaryOp::Neg>{});
  case UnaryOp::Exp:
    return f(std::integral_constant<UnaryOp, UnaryOp::Exp>{});
  case UnaryOp::Log:
    return f(std::integral_constant<UnaryOp, UnaryOp::Log>{});
  case UnaryOp::Sqrt:
    return f(std::integral_constant<UnaryOp, UnaryOp::Sqrt>{});
  case UnaryOp::Rsqrt:
    return f(std::integral_constant<UnaryOp, UnaryOp::Rsqrt>{});
  case UnaryOp::Tanh:
    return f(std::integral_constant<UnaryOp, UnaryOp::Tanh>{});
  case UnaryOp::Erf:
    return f(std::integral_constant<UnaryOp, UnaryOp::Erf>{});
  case UnaryOp::Relu:
    return f(std::integral_constant<UnaryOp, UnaryOp::Relu>{});
  case UnaryOp::Gelu:
    return f(std::integral_constant<UnaryOp, UnaryOp::Gelu>{});
  case UnaryOp::GeluTanh:
    return f(std::integral_constant<UnaryOp, UnaryOp::GeluTanh>{});
  case UnaryOp::Sigmoid:
    return f(std::integral_constant<UnaryOp, UnaryOp::Sigmoid>{});
  case UnaryOp::Silu:
    return f(std::integral_constant<UnaryOp, UnaryOp::Silu>{});
  }
  return cudaErrorInvalidValue;
}
} // namespace

cudaError_t binary(BinaryOp op, const Tensor &a, const Tensor &b, Tensor &out,
                   cudaStream_t stream) {
  if (!sameShape(a, b) || !sameShape(a, out) || a.dtype() != b.dtype() ||
      a.dtype() != out.dtype())
    return cudaErrorInvalidValue;
  int64_t n = out.numel();
  if (a.dtype() == DType::I64) {
    if (op == BinaryOp::Pow)
      return cudaErrorInvalidValue;
    return dispatchBinaryOp(op, [&](auto opTag) {
      return launch1D(n, stream, binaryI64Kernel<decltype(opTag)::value>,
                      static_cast<const int64_t *>(a.raw()),
                      static_cast<const int64_t *>(b.raw()),
                      static_cast<int64_t *>(out.raw()), n);
    });
  }
  return dispatchFloat(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pa = static_cast<const T *>(a.raw());
    const T *pb = static_cast<const T *>(b.raw());
    T *po = static_cast<T *>(out.raw());
    bool vec = aligned16(pa, pb, po);
    int64_t threads = vectorThreads(n, vec, Vec16<T>::kWidth);
    return dispatchBinaryOp(op, [&](auto opTag) {
      constexpr BinaryOp O = decltype(opTag)::value;
      return launchOver(threads, stream,
                        vec ? binaryFloatKernel<T, O, true>
                            : binaryFloatKernel<T, O, false>,
                        pa, pb, po, n);
    });
  });
}

cudaError_t equal(const Tensor &a, const Tensor &b, Tensor &out,
                  cudaStream_t stream) {
  if (!sameShape(a, b) || !sameShape(a, out) || a.dtype() != b.dtype() ||
      out.dtype() != DType::I1)
    return cudaErrorInvalidValue;
  int64_t n = out.numel();
  auto *po = static_cast<uint8_t *>(out.raw());
  if (a.dtype() == DType::I64)
    return launch1D(n, stream, equalI64Kernel,
                    static_cast<const int64_t *>(a.raw()),
                    static_cast<const int64_t *>(b.raw()), po, n);
  if (a.dtype() == DType::I1)
    return launch1D(n, stream, equalI1Kernel,
                    static_cast<const uint8_t *>(a.raw()),
                    static_cast<const uint8_t *>(b.raw()), po, n);
  return dispatchFloat(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch1D(n, stream, equalFloatKernel<T>,
                    static_cast<const T *>(a.raw()),
                    static_cast<const T *>(b.raw()), po, n);
  });
}

cudaError_t select(const Tensor &cond, const Tensor &a, const Tensor &b,
                   Tensor &out, cudaStream_t stream) {
  if (cond.dtype() != DType::I1 || !sameShape(cond, out) || !sameShape(a, b) ||
      !sameShape(a, out) || a.dtype() != b.dtype() || a.dtype() != out.dtype())
    return cudaErrorInvalidValue;
  int64_t n = out.numel();
  return dispatchBySize(dtypeSize(out.dtype()), [&](auto tag) {
    using U = decltype(tag);
    return launch1D(
        n, stream, selectKernel<U>, static_cast<const uint8_t *>(cond.raw()),
        static_cast<const U *>(a.raw()), static_cast<const U *>(b.raw()),
        static_cast<U *>(out.raw()), n);
  });
}

cudaError_t unary(UnaryOp op, const Tensor &in, Tensor &out,
                  cudaStream_t stream) {
  if (!sameShape(in, out) || in.dtype() != out.dtype())
    return cudaErrorInvalidValue;
  int64_t n = out.numel();
  if (in.dtype() == DType::I64) {
    if (op != UnaryOp::Neg)
      return cudaErrorInvalidValue;
    return launch1D(n, stream, negI64Kernel,
                    static_cast<const int64_t *>(in.raw()),
                    static_cast<int64_t *>(out.raw()), n);
  }
  return dispatchFloat(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pi = static_cast<const T *>(in.raw());
    T *po = static_cast<T *>(out.raw());
    bool vec = aligned16(pi, po);
    int64_t threads = vectorThreads(n, vec, Vec16<T>::kWidth);
    return dispatchUnaryOp(op, [&](auto opTag) {
      constexpr UnaryOp O = decltype(opTag)::value;
      return launchOver(threads, stream,
                        vec ? unaryFloatKernel<T, O, true>
                            : unaryFloatKernel<T, O, false>,
                        pi, po, n);
    });
  });
}

cudaError_t reluGrad(const Tensor &x, const Tensor &dy, Tensor &dx,
                     cudaStream_t stream) {
  if (!sameShape(x, dy) || !sameShape(x, dx) || x.dtype() != dy.dtype() ||
      x.dtype() != dx.dtype())
    return cudaErrorInvalidValue;
  int64_t n = dx.numel();
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch1D(
        n, stream, reluGradKernel<T>, static_cast<const T *>(x.raw()),
        static_cast<const T *>(dy.raw()), static_cast<T *>(dx.raw()), n);
  });
}

cudaError_t geluGrad(const Tensor &x, const Tensor &dy,
                     GeluApproximate approximate, Tensor &dx,
                     cudaStream_t stream) {
  if (!sameShape(x, dy) || !sameShape(x, dx) || x.dtype() != dy.dtype() ||
      x.dtype() != dx.dtype())
    return cudaErrorInvalidValue;
  int64_t n = dx.numel();
  bool tanhForm = approximate == GeluApproximate::Tanh;
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto kernel = tanhForm ? geluGradKernel<T, true> : geluGradKernel<T, false>;
    return launch1D(n, stream, kernel, static_cast<const T *>(x.raw()),
                    static_cast<const T *>(dy.raw()),
                    static_cast<T *>(dx.raw()), n);
  });
}

cudaError_t siluGrad(const Tensor &x, const Tensor &dy, Tensor &dx,
                     cudaStream_t stream) {
  if (!sameShape(x, dy) || !sameShape(x, dx) || x.dtype() != dy.dtype() ||
      x.dtype() != dx.dtype())
    return cudaErrorInvalidValue;
  int64_t n = dx.numel();
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch1D(
        n, stream, siluGradKernel<T>, static_cast<const T *>(x.raw()),
        static_cast<const T *>(dy.raw()), static_cast<T *>(dx.raw()), n);
  });
}

cudaError_t convert(const Tensor &in, Tensor &out, cudaStream_t stream) {
  if (in.numel() != out.numel())
    return cudaErrorInvalidValue;
  int64_t n = in.numel();
  if (in.dtype() == out.dtype()) {
    if (n == 0 || in.raw() == out.raw())
      return cudaSuccess;
    return cudaMemcpyAsync(out.raw(), in.raw(), in.bytes(),
                           cudaMemcpyDeviceToDevice, stream);
  }
  return dispatchAny(in.dtype(), [&](auto fromTag) {
    using From = typename decltype(fromTag)::type;
    return dispatchAny(out.dtype(), [&](auto toTag) {
      using To = typename decltype(toTag)::type;
      return launch1D(n, stream, convertKernel<From, To>,
                      static_cast<const From *>(in.raw()),
                      static_cast<To *>(out.raw()), n);
    });
  });
}

//===----------------------------------------------------------------------===//
// Bias + activation
//===----------------------------------------------------------------------===//

namespace {
/// x [..., N] as [R, N] with bias [N]; false on a shape / dtype mismatch.
bool biasShapes(const Tensor &x, const Tensor &bias, int64_t &rows,
                int64_t &cols) {
  if (!isFloat(x.dtype()) || bias.dtype() != x.dtype() || x.rank() < 1 ||
      bias.rank() != 1 || bias.dim(0) != x.dim(-1))
    return false;
  cols = x.dim(-1);
  rows = 1;
  for (int64_t d = 0; d + 1 < x.rank(); ++d)
    rows *= x.shape()[d];
  return true;
}
} // namespace

cudaError_t biasActivation(const Tensor &x, const Tensor &bias,
                           BiasActivation act, Tensor &out,
                           cudaStream_t stream) {
  int64_t rows, cols;
  if (!biasShapes(x, bias, rows, cols) || !sameShape(x, out) ||
      out.dtype() != x.dtype())
    return cudaErrorInvalidValue;
  int64_t n = x.numel();
  return dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatchAct(act, [&](auto actTag) {
      return launch1D(
          n, stream, biasActivationKernel<T, decltype(actTag)::value>,
          static_cast<const T *>(x.raw()), static_cast<const T *>(bias.raw()),
          static_cast<T *>(out.raw()), n, cols);
    });
  });
}

int64_t biasActivationGradScratchBytes(DType dtype,
                                       const std::vector<int64_t> &xShape) {
  if (xShape.empty())
    return 0;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < xShape.size(); ++d)
    rows *= xShape[d];
  return reduceScratchBytes(dtype, {rows, xShape.back()}, {0});
}

cudaError_t biasActivationGrad(const Tensor &x, const Tensor &bias,
                               const Tensor &dy, BiasActivation act, Tensor &dx,
                               Tensor &dbias, void *scratch,
                               int64_t scratchBytes, cudaStream_t stream) {
  int64_t rows, cols;
  if (!biasShapes(x, bias, rows, cols) || !sameShape(x, dy) ||
      !sameShape(x, dx) || dy.dtype() != x.dtype() || dx.dtype() != x.dtype() ||
      !sameShape(bias, dbias) || dbias.dtype() != x.dtype())
    return cudaErrorInvalidValue;
  if (scratchBytes < biasActivationGradScratchBytes(x.dtype(), x.shape()))
    return cudaErrorInvalidValue;
  int64_t n = x.numel();
  cudaError_t err = dispatchFloat(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return dispatchAct(act, [&](auto actTag) {
      return launch1D(
          n, stream, biasActivationGradKernel<T, decltype(actTag)::value>,
          static_cast<const T *>(x.raw()), static_cast<const T *>(bias.raw()),
          static_cast<const T *>(dy.raw()), static_cast<T *>(dx.raw()), n,
          cols);
    });
  });
  if (err != cudaSuccess)
    return err;
  // dbias = reduce_sum(dx as [rows, cols], axis 0).
  Tensor dx2 = Tensor::view(dx.raw(), dx.dtype(), {rows, cols});
  return reduceSum(dx2, {0}, /*keepDim=*/false, dbias, scratch, scratchBytes,
                   stream);
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

cudaError_t broadcast(const Tensor &in, Tensor &out, cudaStream_t stream) {
  IndexMap m;
  if (in.dtype() != out.dtype() || !broadcastMap(in.shape(), out.shape(), m))
    return cudaErrorInvalidValue;
  return launchGather(in.raw(), out.raw(), dtypeSize(in.dtype()), m,
                      out.numel(), stream);
}

cudaError_t transpose(const Tensor &in, const std::vector<int64_t> &perm,
                      Tensor &out, cudaStream_t stream) {
  if (in.dtype() != out.dtype() || perm.size() != in.shape().size() ||
      out.shape().size() != perm.size())
    return cudaErrorInvalidValue;
  for (size_t k = 0; k < perm.size(); ++k)
    if (perm[k] < 0 || perm[k] >= in.rank() ||
        out.shape()[k] != in.shape()[perm[k]])
      return cudaErrorInvalidValue;
  return launchPermute(in.raw(), out.raw(), dtypeSize(in.dtype()), in.shape(),
                       perm, stream);
}

cudaError_t slice(const Tensor &in, const std::vector<int64_t> &starts,
                  const std::vector<int64_t> &limits,
                  const std::vector<int64_t> &strides, Tensor &out,
                  cudaStream_t stream) {
  IndexMap m;
  if (in.dtype() != out.dtype() ||
      !sliceMap(in.shape(), starts, limits, strides, out.shape(), m))
    return cudaErrorInvalidValue;
  return launchGather(in.raw(), out.raw(), dtypeSize(in.dtype()), m,
                      out.numel(), stream);
}

cudaError_t concat(const std::vector<const Tensor *> &inputs, int64_t axis,
                   Tensor &out, cudaStream_t stream) {
  int64_t r = out.rank();
  if (axis < 0 || axis >= r)
    return cudaErrorInvalidValue;
  int64_t total = 0;
  for (const Tensor *t : inputs) {
    if (!t || t->dtype() != out.dtype() || t->rank() != r)
      return cudaErrorInvalidValue;
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && t->shape()[d] != out.shape()[d])
        return cudaErrorInvalidValue;
    total += t->shape()[axis];
  }
  if (total != out.shape()[axis])
    return cudaErrorInvalidValue;
  if (out.numel() == 0)
    return cudaSuccess;
  int64_t esize = static_cast<int64_t>(dtypeSize(out.dtype()));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= out.shape()[d];
  for (int64_t d = axis + 1; d < r; ++d)
    inner *= out.shape()[d];
  int64_t outRow = out.shape()[axis] * inner * esize;
  int64_t colOff = 0;
  for (const Tensor *t : inputs) {
    int64_t row = t->shape()[axis] * inner * esize;
    if (row == 0)
      continue;
    const char *src = static_cast<const char *>(t->raw());
    char *dst = static_cast<char *>(out.raw()) + colOff;
    int unit = copyUnitBytes(reinterpret_cast<uintptr_t>(src),
                             reinterpret_cast<uintptr_t>(dst), row, outRow);
    auto copy = [&](auto tag) {
      using U = decltype(tag);
      return launch1D(outer * (row / unit), stream, copyRowsKernel<U>,
                      reinterpret_cast<const U *>(src),
                      reinterpret_cast<U *>(dst), outer, row / unit,
                      outRow / unit);
    };
    cudaError_t err = unit == 16 ? copy(uint4()) : dispatchBySize(unit, copy);
    if (err != cudaSuccess)
      return err;
    colOff += row;
  }
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

int64_t reduceScratchBytes(DType dtype, const std::vector<int64_t> &inShape,
                           const std::vector<int64_t> &axes) {
  ReducePlan plan;
  if (!planReduce(inShape, axes, plan))
    return -1;
  int64_t numel = 1;
  for (int64_t d : inShape)
    numel *= d;
  ReduceScratch s = reduceScratchLayout(dtype, plan, numel);
  return s.permutedBytes + s.partialBytes;
}

cudaError_t reduceSum(const Tensor &in, const std::vector<int64_t> &axes,
                      bool keepDim, Tensor &out, void *scratch,
                      int64_t scratchBytes, cudaStream_t stream) {
  return reduceImpl<RedKind::Sum>(in, axes, keepDim, out, scratch, scratchBytes,
                                  stream);
}
cudaError_t reduceMean(const Tensor &in, const std::vector<int64_t> &axes,
                       bool keepDim, Tensor &out, void *scratch,
                       int64_t scratchBytes, cudaStream_t stream) {
  return reduceImpl<RedKind::Mean>(in, axes, keepDim, out, scratch,
                                   scratchBytes, stream);
}
cudaError_t reduceMax(const Tensor &in, const std::vector<int64_t> &axes,
                      bool keepDim, Tensor &out, void *scratch,
                      int64_t scratchBytes, cudaStream_t stream) {
  return reduceImpl<RedKind::Max>(in, axes, keepDim, out, scratch, scratchBytes,
                                  stream);
}

constexpr int kSumSquaresThreads = 1024;

__global__ void sumSquaresKernel(const float *x, int64_t n, float *out) {
  __shared__ double part[kSumSquaresThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += kSumSquaresThreads) {
    double v = x[i];
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kSumSquaresThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *out = static_cast<float>(part[0]);
}

cudaError_t sumSquares(const Tensor &in, Tensor &out, cudaStream_t stream) {
  if (in.dtype() != DType::F32 || out.dtype() != DType::F32 || out.numel() != 1)
    return cudaErrorInvalidValue;
  sumSquaresKernel<<<1, kSumSquaresThreads, 0, stream>>>(
      static_cast<const float *>(in.raw()), in.numel(),
      static_cast<float *>(out.raw()));
  return cudaGetLastError();
}

} // namespace cuda
} // namespace runtime
} // namespace tessera

namespace tessera {
namespace runtime {
namespace cuda {

cudaError_t dropout(const Tensor &x, const Tensor &step,
                    const DropoutLaunch &launch, Tensor &y,
                    cudaStream_t stream) {
  if (!sameShape(x, y) || x.dtype() != DType::F32 || y.dtype() != DType::F32 ||
      step.dtype() != DType::F32 || step.numel() != 1 ||
      launch.numFactors < 0 || launch.numFactors > DropoutLaunch::kMaxFactors)
    return cudaErrorInvalidValue;
  int64_t n = y.numel();
  return launch1D(n, stream, dropoutKernel, static_cast<const float *>(x.raw()),
                  static_cast<const float *>(step.raw()), launch,
                  static_cast<float *>(y.raw()), n);
}

//===----------------------------------------------------------------------===//
// Fused elementwise (tsr.fused_elementwise)
//===----------------------------------------------------------------------===//

namespace {

using tessera::fusion::ElemOp;
constexpr int kFusedSlots =
    tessera::fusion::kMaxFusedInputs + tessera::fusion::kMaxFusedInstrs;

/// The program and its operands, passed by value (kernel parameter space).
struct FusedLaunch {
  int32_t nIn = 0, nInstr = 0, nOut = 0, rank = 0;
  int64_t total = 0;
  int64_t shape[tessera::fusion::kMaxFusedRank] = {};
  int64_t strides[tessera::fusion::kMaxFusedInputs]
                 [tessera::fusion::kMaxFusedRank] = {};
  const void *in[tessera::fusion::kMaxFusedInputs] = {};
  uint8_t mask[tessera::fusion::kMaxFusedInputs] = {};
  uint8_t full[tessera::fusion::kMaxFusedInputs] = {};
  float *out[tessera::fusion::kMaxFusedOutputs] = {};
  int16_t outputs[tessera::fusion::kMaxFusedOutputs] = {};
  uint8_t op[tessera::fusion::kMaxFusedInstrs] = {};
  int16_t args[tessera::fusion::kMaxFusedInstrs][3] = {};
};

__device__ __forceinline__ float fusedOp(ElemOp op, float a, float b, float c) {
  switch (op) {
  case ElemOp::Add:
    return binaryF<BinaryOp::Add>(a, b);
  case ElemOp::Sub:
    return binaryF<BinaryOp::Sub>(a, b);
  case ElemOp::Mul:
    return binaryF<BinaryOp::Mul>(a, b);
  case ElemOp::Div:
    return binaryF<BinaryOp::Div>(a, b);
  case ElemOp::Pow:
    return binaryF<BinaryOp::Pow>(a, b);
  case ElemOp::Max:
    return binaryF<BinaryOp::Max>(a, b);
  case ElemOp::Neg:
    return unaryF<UnaryOp::Neg>(a);
  case ElemOp::Exp:
    return unaryF<UnaryOp::Exp>(a);
  case ElemOp::Log:
    return unaryF<UnaryOp::Log>(a);
  case ElemOp::Sqrt:
    return unaryF<UnaryOp::Sqrt>(a);
  case ElemOp::Rsqrt:
    return unaryF<UnaryOp::Rsqrt>(a);
  case ElemOp::Tanh:
    return unaryF<UnaryOp::Tanh>(a);
  case ElemOp::Erf:
    return unaryF<UnaryOp::Erf>(a);
  case ElemOp::Relu:
    return unaryF<UnaryOp::Relu>(a);
  case ElemOp::Sigmoid:
    return unaryF<UnaryOp::Sigmoid>(a);
  case ElemOp::Silu:
    return unaryF<UnaryOp::Silu>(a);
  case ElemOp::Gelu:
    return unaryF<UnaryOp::Gelu>(a);
  case ElemOp::GeluTanh:
    return unaryF<UnaryOp::GeluTanh>(a);
  case ElemOp::Select:
    return a != 0.0f ? b : c; // a: the condition as 0 / 1
  case ElemOp::ReluGrad:
    return a > 0.0f ? b : 0.0f;
  case ElemOp::GeluGrad:
    return geluErfGradF(a, b);
  case ElemOp::GeluTanhGrad:
    return geluTanhGradF(a, b);
  case ElemOp::SiluGrad:
    return siluGradF(a, b);
  }
  return 0.0f;
}

__global__ void fusedElementwiseKernel(FusedLaunch l) {
  float r[kFusedSlots];
  for (int64_t e = globalThread(); e < l.total; e += gridThreads()) {
    for (int i = 0; i < l.nIn; ++i) {
      int64_t off = e;
      if (!l.full[i]) {
        off = 0;
        int64_t rem = e;
        for (int d = l.rank - 1; d >= 0; --d) {
          int64_t q = rem / l.shape[d];
          off += (rem - q * l.shape[d]) * l.strides[i][d];
          rem = q;
        }
      }
      r[i] = l.mask[i]
                 ? (static_cast<const uint8_t *>(l.in[i])[off] ? 1.0f : 0.0f)
                 : static_cast<const float *>(l.in[i])[off];
    }
    for (int k = 0; k < l.nInstr; ++k)
      r[l.nIn + k] = fusedOp(static_cast<ElemOp>(l.op[k]), r[l.args[k][0]],
                             r[l.args[k][1]], r[l.args[k][2]]);
    for (int o = 0; o < l.nOut; ++o)
      l.out[o][e] = r[l.outputs[o]];
  }
}

} // namespace

cudaError_t fusedElementwise(const tessera::fusion::ElementwiseProgram &p,
                             const Tensor *const *in, Tensor *out,
                             cudaStream_t stream) {
  FusedLaunch l;
  l.nIn = p.numInputs;
  l.nInstr = static_cast<int32_t>(p.instrs.size());
  l.nOut = static_cast<int32_t>(p.outputs.size());
  l.rank = static_cast<int32_t>(p.shape.size());
  if (l.nIn > tessera::fusion::kMaxFusedInputs ||
      l.nInstr > tessera::fusion::kMaxFusedInstrs || l.nOut < 1 ||
      l.nOut > tessera::fusion::kMaxFusedOutputs ||
      l.rank > tessera::fusion::kMaxFusedRank)
    return cudaErrorInvalidValue;
  l.total = out[0].numel();
  for (int d = 0; d < l.rank; ++d)
    l.shape[d] = p.shape[d];
  for (int i = 0; i < l.nIn; ++i) {
    DType want = p.inputIsMask[i] ? DType::I1 : DType::F32;
    if (in[i]->dtype() != want || in[i]->numel() != p.inputNumel[i])
      return cudaErrorInvalidValue;
    l.in[i] = in[i]->raw();
    l.mask[i] = p.inputIsMask[i];
    l.full[i] = p.inputNumel[i] == l.total;
    for (int d = 0; d < l.rank; ++d)
      l.strides[i][d] = p.inputStrides[i][d];
  }
  for (int o = 0; o < l.nOut; ++o) {
    if (out[o].dtype() != DType::F32 || out[o].numel() != l.total)
      return cudaErrorInvalidValue;
    l.out[o] = static_cast<float *>(out[o].raw());
    l.outputs[o] = static_cast<int16_t>(p.outputs[o]);
  }
  for (int k = 0; k < l.nInstr; ++k) {
    l.op[k] = static_cast<uint8_t>(p.instrs[k].op);
    for (int j = 0; j < 3; ++j)
      l.args[k][j] = static_cast<int16_t>(p.instrs[k].args[j]);
  }
  return launch1D(l.total, stream, fusedElementwiseKernel, l);
}

} // namespace cuda
} // namespace runtime
} // namespace tessera

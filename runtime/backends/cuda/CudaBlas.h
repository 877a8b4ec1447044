//===- CudaBlas.h - GEMMs through cuBLASLt ----------------------*- C++ -*-===//
//
// Matrix products of the CUDA backend, with exactly cpu::matmul's semantics
// (runtime/backends/cpu/CpuKernels.h), run by cuBLASLt with optional fused
// epilogues (bias, GELU, GELU backward).
//
// Row-major / column-major mapping. Tessera tensors are row-major, cuBLASLt
// is column-major. A row-major [R, C] matrix is, byte for byte, the
// column-major [C, R] matrix (its transpose). The row-major product
//   C[M, N] = op(A)[M, K] · op(B)[K, N]
// is therefore computed as the column-major product
//   C^T[N, M] = op(B)^T[N, K] · op(A)^T[K, M]
// i.e. cuBLASLt's operand "A" is Tessera's b and cuBLASLt's "B" is
// Tessera's a, with cuBLASLt's m = N, n = M, k = K. Batches are strided
// (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_OFFSET), with stride 0
// for a rank-2 operand shared by every batch. When b is shared and a is not
// transposed, a's leading dims are folded into its rows (one GEMM of
// [batch·M, K] x [K, N]), as cpu::matmul does.
//
// Precision: f32 inputs use CUBLAS_COMPUTE_32F (true fp32, no TF32) unless
// `allowTf32`; bf16 and f16 inputs/outputs accumulate in f32
// (CUBLAS_COMPUTE_32F, f32 scale type). Split-K reductions of 16-bit outputs
// are restricted to f32 partials (no reduction in the output type).
//
// The cuBLASLt GELU epilogues compute the TANH approximation of GELU,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel,
// "Gaussian Error Linear Units", 2016), and its derivative. They match
// torch.nn.functional.gelu(approximate="tanh") / cpu::gelu(GeluApproximate::
// Tanh) only; the integrator must not use them for the exact (erf) GELU.
//
// Alignment: any pointer aligned to its element type works. The plan is
// chosen for the actual alignment of each pointer (and batch stride), up to
// 256 bytes; 16-byte-aligned pointers with N and K multiples of 8 (16-bit)
// or 4 (f32) get the fastest (tensor-core / TMA) kernels.
//
// In place: never. out must not overlap a, b, bias or aux.
//
// Steady state and CUDA graphs: a BlasHandle caches, per distinct problem
// (geometry, dtype, epilogue, compute mode, pointer alignments), the matmul
// descriptor, the matrix layouts and the algorithm chosen once by
// cublasLtMatmulAlgoGetHeuristic. After the first (warm-up) call of a
// problem, `matmul` creates no descriptor, queries no heuristic, allocates
// no device memory and never synchronises, so it may be captured in a CUDA
// graph. The first call of a problem should happen outside capture.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_BACKENDS_CUDA_CUDABLAS_H
#define TESSERA_RUNTIME_BACKENDS_CUDA_CUDABLAS_H

#include "runtime/backends/cuda/CudaCommon.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {
namespace runtime {
namespace cuda {

//===----------------------------------------------------------------------===//
// Geometry (pure host logic, no CUDA call)
//===----------------------------------------------------------------------===//

/// One column-major operand as cuBLASLt sees it (in elements).
struct LtOperand {
  int64_t rows = 0;        ///< CUBLASLT_MATRIX_LAYOUT_ROWS (stored matrix)
  int64_t cols = 0;        ///< CUBLASLT_MATRIX_LAYOUT_COLS
  int64_t ld = 1;          ///< CUBLASLT_MATRIX_LAYOUT_LD (>= max(rows, 1))
  int64_t batchStride = 0; ///< STRIDED_BATCH_OFFSET; 0: shared by batches
  bool transpose = false;  ///< CUBLAS_OP_T applied to it (never for D)
};

/// The cuBLASLt problem for out = op(a) · op(b) in row-major terms.
struct MatmulGeometry {
  /// Row-major problem: op(a) is [M, K], op(b) is [K, N], out [..., M, N].
  int64_t m = 0, n = 0, k = 0;
  /// Product of out's leading dims (the batches cpu::matmul loops over).
  int64_t outBatch = 1;
  /// True when a's leading dims were folded into the rows of one GEMM
  /// (b rank 2, a not transposed); then `batch` is 1.
  bool folded = false;
  /// cuBLASLt problem: D (ltM x ltN) = op(A) (ltM x ltK) · op(B) (ltK x ltN)
  /// repeated `batch` times. ltM = N, ltN = M (· outBatch when folded).
  int64_t ltM = 0, ltN = 0, ltK = 0;
  int64_t batch = 1;
  LtOperand ltA; ///< cuBLASLt "A": Tessera's b
  LtOperand ltB; ///< cuBLASLt "B": Tessera's a
  LtOperand ltD; ///< cuBLASLt "C" and "D": out (ld = N)
  /// Empty when the shapes are valid; otherwise why not (names the shapes).
  std::string error;
};

/// Plans the GEMM of cpu::matmul's contract:
///   a: [..., M, K] ([..., K, M] if transposeA)
///   b: [..., K, N] ([..., N, K] if transposeB)
///   out: [..., M, N]
/// Each of a and b is either rank 2 (shared by every batch) or has leading
/// dims whose product equals the product of out's leading dims. Sets
/// `error` (and nothing else is meaningful) for ranks < 2, a K mismatch, an
/// out whose last two dims are not [M, N], or mismatched batch products.
MatmulGeometry planMatmul(llvm::ArrayRef<int64_t> shapeA,
                          llvm::ArrayRef<int64_t> shapeB,
                          llvm::ArrayRef<int64_t> shapeOut, bool transposeA,
                          bool transposeB);

/// Result shape of matmul(a, b) with the executor's batch rules: equal
/// ranks need equal leading dims; otherwise the rank-2 operand is shared and
/// the other one's leading dims are the result's. Error names the shapes.
llvm::Expected<std::vector<int64_t>>
matmulResultShape(llvm::ArrayRef<int64_t> shapeA,
                  llvm::ArrayRef<int64_t> shapeB, bool transposeA,
                  bool transposeB);

/// Largest power of two (at most 256) dividing the byte address of every
/// batch matrix: `address`, address + stride·i for i < batch. Used for
/// cuBLASLt's MIN_ALIGNMENT preferences (and the plan cache key).
unsigned batchAlignment(uintptr_t address, int64_t strideBytes, int64_t batch);

//===----------------------------------------------------------------------===//
// Epilogues
//===----------------------------------------------------------------------===//

/// What cuBLASLt applies to the product P = op(a)·op(b) ([..., M, N], f32
/// inside) before storing out. bias is a device vector [N] in out's dtype,
/// added to every row of P; aux a device tensor of out's shape and dtype.
/// GELU is the tanh form (see the file comment). Epilogues other than None
/// require a single GEMM: out batch 1, or a batched a with a shared rank-2
/// b and transposeA = false (leading dims folded into rows); otherwise an
/// error is returned. Aux epilogues require N % 8 == 0 (cuBLASLt: aux ld
/// divisible by 8). out must not alias bias or aux.
struct MatmulEpilogue {
  enum class Kind {
    None,        ///< out = P
    Bias,        ///< out = P + bias
    Gelu,        ///< out = gelu(P)
    BiasGelu,    ///< out = gelu(P + bias)
    GeluAux,     ///< aux = P; out = gelu(P)                   (aux: output)
    BiasGeluAux, ///< aux = P + bias; out = gelu(aux)          (aux: output)
    DGelu,       ///< out = P * gelu'(aux)                     (aux: input)
    DGeluBGrad,  ///< out = P * gelu'(aux); bias[j] = sum_i out[i, j]
                 ///< (aux: input, bias: OUTPUT [N], the bias gradient)
  };
  Kind kind = Kind::None;
  Tensor bias; ///< [N], out's dtype; null unless the kind uses it
  Tensor aux;  ///< out's shape and dtype; null unless the kind uses it

  static MatmulEpilogue none() { return {}; }
  static MatmulEpilogue withBias(Tensor bias) {
    return {Kind::Bias, std::move(bias), Tensor()};
  }
  static MatmulEpilogue gelu() { return {Kind::Gelu, Tensor(), Tensor()}; }
  static MatmulEpilogue biasGelu(Tensor bias) {
    return {Kind::BiasGelu, std::move(bias), Tensor()};
  }
  static MatmulEpilogue geluAux(Tensor preActivation) {
    return {Kind::GeluAux, Tensor(), std::move(preActivation)};
  }
  static MatmulEpilogue biasGeluAux(Tensor bias, Tensor preActivation) {
    return {Kind::BiasGeluAux, std::move(bias), std::move(preActivation)};
  }
  static MatmulEpilogue dGelu(Tensor preActivation) {
    return {Kind::DGelu, Tensor(), std::move(preActivation)};
  }
  static MatmulEpilogue dGeluBGrad(Tensor preActivation, Tensor biasGrad) {
    return {Kind::DGeluBGrad, std::move(biasGrad), std::move(preActivation)};
  }

  bool usesBias() const {
    return kind == Kind::Bias || kind == Kind::BiasGelu ||
           kind == Kind::BiasGeluAux || kind == Kind::DGeluBGrad;
  }
  bool usesAux() const {
    return kind == Kind::GeluAux || kind == Kind::BiasGeluAux ||
           kind == Kind::DGelu || kind == Kind::DGeluBGrad;
  }
};

/// "none", "bias", "gelu", "bias_gelu", "gelu_aux", "bias_gelu_aux",
/// "dgelu", "dgelu_bgrad".
const char *epilogueName(MatmulEpilogue::Kind kind);

/// Every check `matmul` makes before touching the device (only shapes and
/// dtypes are read, so host tensors work too): non-null tensors; a, b, out
/// of one dtype among f32, bf16, f16; the shapes (planMatmul); the
/// epilogue's tensors (bias [N] and aux of out's shape, in out's dtype);
/// the epilogue's restrictions (single GEMM, N % 8 == 0 with aux, K > 0
/// unless the epilogue is None, DGelu or DGeluBGrad); out not the same
/// storage as a, b, bias or aux. The message starts with "cuda::matmul: "
/// and names the shapes and dtypes.
llvm::Error validateMatmul(const Tensor &a, const Tensor &b, bool transposeA,
                           bool transposeB, const Tensor &out,
                           const MatmulEpilogue &epilogue);

/// Creates and frees the cuBLASLt matmul descriptor, matrix layouts and
/// heuristic preference that `matmul` would build for this geometry, dtype
/// and epilogue (with null bias / aux pointers), without a handle or a
/// device: checks that cuBLASLt accepts every attribute. Does not run the
/// heuristic, so it cannot tell whether an algorithm exists.
llvm::Error checkMatmulDescriptors(const MatmulGeometry &geometry, DType dtype,
                                   bool allowTf32, MatmulEpilogue::Kind kind);

//===----------------------------------------------------------------------===//
// Handle and launch
//===----------------------------------------------------------------------===//

class BlasHandle;

/// out = epilogue(op(a) · op(b)) on `stream`, asynchronously (see
/// cpu::matmul for the shapes; all tensors in device memory). a, b, out
/// (and bias / aux) are all f32, all bf16 or all f16. K = 0 writes zeros
/// (and a zero bias gradient for DGeluBGrad) with cudaMemsetAsync. With
/// `allowTf32`, f32 products use TF32 tensor cores
/// (CUBLAS_COMPUTE_32F_FAST_TF32: ~10-bit mantissa inputs, f32 accumulate).
/// out must not overlap a, b, bias or aux. Errors: anything validateMatmul
/// rejects; no cuBLASLt algorithm for the problem (e.g. an epilogue that
/// cuBLASLt does not support for these types: the caller may fall back to
/// an unfused epilogue); a cuBLASLt or CUDA failure (the message names the
/// shapes, dtypes, epilogue and the cuBLASLt status name and string).
/// Thread safe (calls on one handle are serialised); calls on one handle
/// share its workspace, so they must be ordered on the device (one stream,
/// or one handle per stream).
llvm::Error matmul(BlasHandle &handle, const Tensor &a, const Tensor &b,
                   bool transposeA, bool transposeB, Tensor &out,
                   const MatmulEpilogue &epilogue, cudaStream_t stream,
                   bool allowTf32 = false);

/// A cuBLASLt handle, its device workspace and the per-problem plan cache.
/// Bound to the device current at create(); use it on that device only.
class BlasHandle {
public:
  /// NVIDIA recommends 32 MiB of cuBLASLt workspace on Hopper (4 MiB
  /// suffices on Ampere).
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;

  /// Creates the cuBLASLt handle and cudaMallocs `workspaceBytes` of
  /// workspace (0: none; fewer algorithms, no split-K). Errors: cuBLASLt
  /// init failure, allocation failure (names the bytes).
  static llvm::Expected<std::unique_ptr<BlasHandle>>
  create(size_t workspaceBytes = kDefaultWorkspaceBytes);

  ~BlasHandle();
  BlasHandle(const BlasHandle &) = delete;
  BlasHandle &operator=(const BlasHandle &) = delete;

  size_t workspaceBytes() const;
  /// Number of cached plans (distinct problems seen so far).
  size_t cachedPlans() const;

  struct Impl;

private:
  explicit BlasHandle(std::unique_ptr<Impl> state);
  std::unique_ptr<Impl> impl;

  friend llvm::Error matmul(BlasHandle &handle, const Tensor &a,
                            const Tensor &b, bool transposeA, bool transposeB,
                            Tensor &out, const MatmulEpilogue &epilogue,
                            cudaStream_t stream, bool allowTf32);
};

} // namespace cuda
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_BACKENDS_CUDA_CUDABLAS_H

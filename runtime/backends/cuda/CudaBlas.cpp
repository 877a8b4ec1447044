//===- CudaBlas.cpp - GEMMs through cuBLASLt ------------------------------===//
//
// See CudaBlas.h for the row-major -> column-major mapping and the plan
// cache. Host code only (compiled by the C++ compiler).
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cuda/CudaBlas.h"

#include "runtime/backends/cuda/CudaRuntime.h"

#include "llvm/ADT/Twine.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <climits>
#include <map>
#include <mutex>

using namespace tessera::runtime;
using namespace tessera::runtime::cuda;

namespace {

int64_t product(llvm::ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

std::string shapeStr(llvm::ArrayRef<int64_t> dims) {
  return shapeToString(std::vector<int64_t>(dims.begin(), dims.end()));
}

const char *boolStr(bool b) { return b ? "true" : "false"; }

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

} // namespace

//===----------------------------------------------------------------------===//
// Geometry
//===----------------------------------------------------------------------===//

MatmulGeometry cuda::planMatmul(llvm::ArrayRef<int64_t> shapeA,
                                llvm::ArrayRef<int64_t> shapeB,
                                llvm::ArrayRef<int64_t> shapeOut,
                                bool transposeA, bool transposeB) {
  MatmulGeometry g;
  auto fail = [&](const std::string &why) {
    g = MatmulGeometry();
    g.error = why + " (a " + shapeStr(shapeA) + ", b " + shapeStr(shapeB) +
              ", out " + shapeStr(shapeOut) + ", transposeA " +
              boolStr(transposeA) + ", transposeB " + boolStr(transposeB) + ")";
    return g;
  };
  size_t ra = shapeA.size(), rb = shapeB.size(), ro = shapeOut.size();
  if (ra < 2 || rb < 2 || ro < 2)
    return fail("a, b and out must have rank >= 2");
  for (llvm::ArrayRef<int64_t> s : {shapeA, shapeB, shapeOut})
    for (int64_t d : s)
      if (d < 0)
        return fail("negative dimension");
  int64_t m = transposeA ? shapeA[ra - 1] : shapeA[ra - 2];
  int64_t ka = transposeA ? shapeA[ra - 2] : shapeA[ra - 1];
  int64_t kb = transposeB ? shapeB[rb - 1] : shapeB[rb - 2];
  int64_t n = transposeB ? shapeB[rb - 2] : shapeB[rb - 1];
  if (ka != kb)
    return fail("contracting sizes differ: K = " + std::to_string(ka) +
                " in a vs " + std::to_string(kb) + " in b");
  if (shapeOut[ro - 2] != m || shapeOut[ro - 1] != n)
    return fail("out must end in [M, N] = [" + std::to_string(m) + ", " +
                std::to_string(n) + "]");
  int64_t outBatch = product(shapeOut.drop_back(2));
  if (ra > 2 && product(shapeA.drop_back(2)) != outBatch)
    return fail("a's batch dims do not match out's (neither equal in "
                "product nor a rank 2)");
  if (rb > 2 && product(shapeB.drop_back(2)) != outBatch)
    return fail("b's batch dims do not match out's (neither equal in "
                "product nor b rank 2)");

  g.m = m;
  g.n = n;
  g.k = ka;
  g.outBatch = outBatch;
  // One GEMM over [outBatch * M, K] x [K, N] when b is shared and a's rows
  // are contiguous (not transposed): row-major a [..., M, K] is then one
  // row-major [outBatch * M, K] matrix, and out likewise [outBatch * M, N].
  g.folded = rb == 2 && !transposeA && ra > 2;
  int64_t rows = g.folded ? outBatch * m : m;
  g.batch = g.folded ? 1 : outBatch;
  g.ltM = n;
  g.ltN = rows;
  g.ltK = ka;
  // cuBLASLt A = Tessera b. Row-major b [K, N] is column-major [N, K], which
  // is op(b)^T as needed; row-major b [N, K] (transposeB) is column-major
  // [K, N], whose transpose is op(b)^T.
  if (transposeB)
    g.ltA = {ka, n, std::max<int64_t>(ka, 1), 0, true};
  else
    g.ltA = {n, ka, std::max<int64_t>(n, 1), 0, false};
  // cuBLASLt B = Tessera a: row-major a [M, K] is column-major [K, M] =
  // op(a)^T; row-major a [K, M] (transposeA) is column-major [M, K].
  if (transposeA)
    g.ltB = {m, ka, std::max<int64_t>(m, 1), 0, true};
  else
    g.ltB = {ka, rows, std::max<int64_t>(ka, 1), 0, false};
  // D = out: row-major [rows, N] is column-major [N, rows].
  g.ltD = {n, rows, std::max<int64_t>(n, 1), 0, false};
  if (g.batch > 1) {
    g.ltA.batchStride = rb > 2 ? ka * n : 0;
    g.ltB.batchStride = ra > 2 ? m * ka : 0;
    g.ltD.batchStride = m * n;
  }
  return g;
}

llvm::Expected<std::vector<int64_t>>
cuda::matmulResultShape(llvm::ArrayRef<int64_t> shapeA,
                        llvm::ArrayRef<int64_t> shapeB, bool transposeA,
                        bool transposeB) {
  size_t ra = shapeA.size(), rb = shapeB.size();
  auto fail = [&](const std::string &why) {
    return makeError("cuda::matmul: " + why + " (a " + shapeStr(shapeA) +
                     ", b " + shapeStr(shapeB) + ", transposeA " +
                     boolStr(transposeA) + ", transposeB " +
                     boolStr(transposeB) + ")");
  };
  if (ra < 2 || rb < 2)
    return fail("operands must have rank >= 2");
  int64_t m = transposeA ? shapeA[ra - 1] : shapeA[ra - 2];
  int64_t ka = transposeA ? shapeA[ra - 2] : shapeA[ra - 1];
  int64_t kb = transposeB ? shapeB[rb - 1] : shapeB[rb - 2];
  int64_t n = transposeB ? shapeB[rb - 2] : shapeB[rb - 1];
  if (ka != kb)
    return fail("contracting sizes differ: " + std::to_string(ka) + " vs " +
                std::to_string(kb));
  llvm::ArrayRef<int64_t> batchA = shapeA.drop_back(2),
                          batchB = shapeB.drop_back(2);
  std::vector<int64_t> result;
  if (ra == rb) {
    if (batchA != batchB)
      return fail("batch dimensions differ");
    result.assign(batchA.begin(), batchA.end());
  } else if (rb == 2) {
    result.assign(batchA.begin(), batchA.end());
  } else if (ra == 2) {
    result.assign(batchB.begin(), batchB.end());
  } else {
    return fail("batch ranks differ");
  }
  result.push_back(m);
  result.push_back(n);
  return result;
}

unsigned cuda::batchAlignment(uintptr_t address, int64_t strideBytes,
                              int64_t batch) {
  uintptr_t bits = address;
  if (batch > 1)
    bits |= static_cast<uintptr_t>(strideBytes);
  unsigned alignment = 256;
  while (alignment > 1 && bits % alignment != 0)
    alignment >>= 1;
  return alignment;
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

const char *cuda::epilogueName(MatmulEpilogue::Kind kind) {
  switch (kind) {
  case MatmulEpilogue::Kind::None:
    return "none";
  case MatmulEpilogue::Kind::Bias:
    return "bias";
  case MatmulEpilogue::Kind::Gelu:
    return "gelu";
  case MatmulEpilogue::Kind::BiasGelu:
    return "bias_gelu";
  case MatmulEpilogue::Kind::GeluAux:
    return "gelu_aux";
  case MatmulEpilogue::Kind::BiasGeluAux:
    return "bias_gelu_aux";
  case MatmulEpilogue::Kind::DGelu:
    return "dgelu";
  case MatmulEpilogue::Kind::DGeluBGrad:
    return "dgelu_bgrad";
  }
  return "?";
}

namespace {

std::string tensorStr(const Tensor &t) {
  if (t.isNull())
    return "null";
  return shapeToString(t.shape()) + " " + dtypeName(t.dtype());
}

/// "(a [2, 3] f32, b [3, 4] f32, out [2, 4] f32, transposeA false, ...)".
std::string describe(const Tensor &a, const Tensor &b, bool transposeA,
                     bool transposeB, const Tensor &out,
                     const MatmulEpilogue &epilogue) {
  std::string s = "(a " + tensorStr(a) + ", b " + tensorStr(b) + ", out " +
                  tensorStr(out) + ", transposeA " + boolStr(transposeA) +
                  ", transposeB " + boolStr(transposeB) + ", epilogue " +
                  epilogueName(epilogue.kind);
  if (!epilogue.bias.isNull())
    s += ", bias " + tensorStr(epilogue.bias);
  if (!epilogue.aux.isNull())
    s += ", aux " + tensorStr(epilogue.aux);
  return s + ")";
}

bool isBlasFloat(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

/// validateMatmul, also returning the geometry when valid.
llvm::Error validate(const Tensor &a, const Tensor &b, bool transposeA,
                     bool transposeB, const Tensor &out,
                     const MatmulEpilogue &epilogue, MatmulGeometry &g) {
  using Kind = MatmulEpilogue::Kind;
  auto fail = [&](const std::string &why) {
    return makeError("cuda::matmul: " + why + " " +
                     describe(a, b, transposeA, transposeB, out, epilogue));
  };
  if (a.isNull() || b.isNull() || out.isNull())
    return fail("a, b and out must not be null");
  if (!isBlasFloat(a.dtype()) || !isBlasFloat(b.dtype()) ||
      !isBlasFloat(out.dtype()))
    return fail("unsupported dtype (f32, bf16 or f16 only)");
  if (a.dtype() != b.dtype() || a.dtype() != out.dtype())
    return fail("a, b and out must have one dtype");
  g = planMatmul(a.shape(), b.shape(), out.shape(), transposeA, transposeB);
  if (!g.error.empty())
    return makeError("cuda::matmul: " + g.error);

  if (epilogue.usesBias()) {
    const Tensor &bias = epilogue.bias;
    if (bias.isNull())
      return fail("the epilogue needs a bias tensor");
    if (bias.dtype() != out.dtype() || bias.rank() != 1 || bias.dim(0) != g.n)
      return fail("bias must be [N] = [" + std::to_string(g.n) +
                  "] in out's dtype");
  } else if (!epilogue.bias.isNull()) {
    return fail("a bias tensor was given but the epilogue does not use it");
  }
  if (epilogue.usesAux()) {
    const Tensor &aux = epilogue.aux;
    if (aux.isNull())
      return fail("the epilogue needs an aux tensor");
    if (aux.dtype() != out.dtype() || aux.shape() != out.shape())
      return fail("aux must have out's shape and dtype");
    if (g.n % 8 != 0)
      return fail("aux epilogues need N % 8 == 0 (cuBLASLt aux leading "
                  "dimension), got N = " +
                  std::to_string(g.n));
  } else if (!epilogue.aux.isNull()) {
    return fail("an aux tensor was given but the epilogue does not use it");
  }
  if (epilogue.kind != Kind::None && g.batch != 1)
    return fail("epilogues need a single GEMM (out batch 1, or a shared "
                "rank-2 b with transposeA false), got " +
                std::to_string(g.batch) + " batches");
  if (g.k == 0 && epilogue.kind != Kind::None && epilogue.kind != Kind::DGelu &&
      epilogue.kind != Kind::DGeluBGrad)
    return fail("K = 0 is supported with epilogues none, dgelu and "
                "dgelu_bgrad only");
  if (out.numel() > 0) {
    if (out.sharesStorageWith(a) || out.sharesStorageWith(b))
      return fail("out must not alias a or b");
    if (out.sharesStorageWith(epilogue.bias) ||
        out.sharesStorageWith(epilogue.aux))
      return fail("out must not alias the epilogue's bias or aux");
  }
  // cuBLASLt takes an int32 batch count.
  if (g.batch > INT32_MAX)
    return fail("too many batches for cuBLASLt");
  return llvm::Error::success();
}

} // namespace

llvm::Error cuda::validateMatmul(const Tensor &a, const Tensor &b,
                                 bool transposeA, bool transposeB,
                                 const Tensor &out,
                                 const MatmulEpilogue &epilogue) {
  MatmulGeometry g;
  return validate(a, b, transposeA, transposeB, out, epilogue, g);
}

//===----------------------------------------------------------------------===//
// Handle and plan cache
//===----------------------------------------------------------------------===//

namespace {

llvm::Error ltCheck(cublasStatus_t status, const llvm::Twine &what) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return llvm::Error::success();
  return makeError(what + ": " + cublasLtGetStatusName(status) + ": " +
                   cublasLtGetStatusString(status));
}

cudaDataType_t cudaTypeOf(DType d) {
  switch (d) {
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

cublasLtEpilogue_t ltEpilogue(MatmulEpilogue::Kind kind) {
  using Kind = MatmulEpilogue::Kind;
  switch (kind) {
  case Kind::None:
    return CUBLASLT_EPILOGUE_DEFAULT;
  case Kind::Bias:
    return CUBLASLT_EPILOGUE_BIAS;
  case Kind::Gelu:
    return CUBLASLT_EPILOGUE_GELU;
  case Kind::BiasGelu:
    return CUBLASLT_EPILOGUE_GELU_BIAS;
  case Kind::GeluAux:
    return CUBLASLT_EPILOGUE_GELU_AUX;
  case Kind::BiasGeluAux:
    return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case Kind::DGelu:
    return CUBLASLT_EPILOGUE_DGELU;
  case Kind::DGeluBGrad:
    return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

/// Everything that determines a plan: the geometry, types, epilogue and the
/// alignment classes of the pointers (the heuristic's choice depends on
/// them; a later call with pointers at least as aligned reuses the plan).
struct PlanKey {
  std::array<int64_t, 28> v{};
  bool operator<(const PlanKey &o) const { return v < o.v; }
};

PlanKey makeKey(const MatmulGeometry &g, DType dtype, bool tf32,
                MatmulEpilogue::Kind kind,
                const std::array<unsigned, 5> &alignments) {
  PlanKey key;
  size_t i = 0;
  auto put = [&](int64_t x) { key.v[i++] = x; };
  put(static_cast<int64_t>(dtype));
  put(tf32);
  put(static_cast<int64_t>(kind));
  put(g.ltM);
  put(g.ltN);
  put(g.ltK);
  put(g.batch);
  for (const LtOperand *op : {&g.ltA, &g.ltB, &g.ltD}) {
    put(op->rows);
    put(op->cols);
    put(op->ld);
    put(op->batchStride);
    put(op->transpose);
  }
  for (unsigned al : alignments)
    put(al);
  return key;
}

/// A cached cuBLASLt problem: descriptor, layouts and algorithm.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layoutA = nullptr, layoutB = nullptr,
                         layoutD = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
    if (layoutD)
      cublasLtMatrixLayoutDestroy(layoutD);
    if (layoutB)
      cublasLtMatrixLayoutDestroy(layoutB);
    if (layoutA)
      cublasLtMatrixLayoutDestroy(layoutA);
    if (desc)
      cublasLtMatmulDescDestroy(desc);
  }
};

llvm::Error makeLayout(cublasLtMatrixLayout_t &layout, cudaDataType_t type,
                       const LtOperand &op, int64_t batch) {
  if (llvm::Error e = ltCheck(cublasLtMatrixLayoutCreate(
                                  &layout, type, static_cast<uint64_t>(op.rows),
                                  static_cast<uint64_t>(op.cols), op.ld),
                              "cublasLtMatrixLayoutCreate"))
    return e;
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    int64_t stride = op.batchStride;
    if (llvm::Error e =
            ltCheck(cublasLtMatrixLayoutSetAttribute(
                        layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                        sizeof(count)),
                    "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)"))
      return e;
    if (llvm::Error e =
            ltCheck(cublasLtMatrixLayoutSetAttribute(
                        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        &stride, sizeof(stride)),
                    "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)"))
      return e;
  }
  return llvm::Error::success();
}

template <typename T>
llvm::Error setDesc(cublasLtMatmulDesc_t desc,
                    cublasLtMatmulDescAttributes_t attr, const T &value,
                    const char *what) {
  return ltCheck(
      cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)),
      llvm::Twine("cublasLtMatmulDescSetAttribute(") + what + ")");
}

/// Points the descriptor at this call's bias and aux (host-side attribute
/// writes only; no allocation, no device work).
llvm::Error setEpiloguePointers(cublasLtMatmulDesc_t desc,
                                const MatmulEpilogue &epilogue) {
  if (epilogue.usesBias()) {
    const void *bias = epilogue.bias.raw();
    if (llvm::Error e =
            setDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "BIAS"))
      return e;
  }
  if (epilogue.usesAux()) {
    const void *aux = epilogue.aux.raw();
    if (llvm::Error e = setDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                aux, "EPILOGUE_AUX_POINTER"))
      return e;
  }
  return llvm::Error::success();
}

/// Creates the descriptor, layouts and heuristic preference of a problem
/// (host-only cuBLASLt calls: no handle, no device needed).
llvm::Error describePlan(Plan &plan, const MatmulGeometry &g, DType dtype,
                         bool tf32, const MatmulEpilogue &epilogue,
                         const std::array<unsigned, 5> &alignments,
                         size_t workspaceBytes) {
  cublasComputeType_t compute = dtype == DType::F32 && tf32
                                    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                    : CUBLAS_COMPUTE_32F;
  if (llvm::Error e =
          ltCheck(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F),
                  "cublasLtMatmulDescCreate"))
    return e;
  int32_t opA = g.ltA.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t opB = g.ltB.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint32_t ep = static_cast<uint32_t>(ltEpilogue(epilogue.kind));
  if (llvm::Error e =
          setDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, opA, "TRANSA"))
    return e;
  if (llvm::Error e =
          setDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, opB, "TRANSB"))
    return e;
  if (llvm::Error e =
          setDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, ep, "EPILOGUE"))
    return e;
  if (epilogue.usesAux()) {
    // aux has out's layout: column-major [N, rows], ld N (validated
    // N % 8 == 0); one GEMM, so no aux batch stride. Bias and aux dtypes
    // are left at cuBLASLt's default, out's dtype.
    int64_t auxLd = g.ltD.ld;
    if (llvm::Error e = setDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                auxLd, "EPILOGUE_AUX_LD"))
      return e;
  }
  // The heuristic reads the bias / aux pointers' alignment.
  if (llvm::Error e = setEpiloguePointers(plan.desc, epilogue))
    return e;

  cudaDataType_t type = cudaTypeOf(dtype);
  if (llvm::Error e = makeLayout(plan.layoutA, type, g.ltA, g.batch))
    return e;
  if (llvm::Error e = makeLayout(plan.layoutB, type, g.ltB, g.batch))
    return e;
  if (llvm::Error e = makeLayout(plan.layoutD, type, g.ltD, g.batch))
    return e;

  if (llvm::Error e = ltCheck(cublasLtMatmulPreferenceCreate(&plan.pref),
                              "cublasLtMatmulPreferenceCreate"))
    return e;
  cublasLtMatmulPreference_t pref = plan.pref;
  uint64_t maxWorkspace = workspaceBytes;
  // 16-bit outputs: split-K partial sums in f32 only (never in the output
  // type), so every reduction accumulates in f32.
  uint32_t reductionMask =
      dtype == DType::F32
          ? static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK)
          : static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE |
                                  CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  auto setPref = [&](cublasLtMatmulPreferenceAttributes_t attr,
                     const void *value, size_t size, const char *what) {
    return ltCheck(
        cublasLtMatmulPreferenceSetAttribute(pref, attr, value, size),
        llvm::Twine("cublasLtMatmulPreferenceSetAttribute(") + what + ")");
  };
  if (llvm::Error e =
          setPref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &maxWorkspace,
                  sizeof(maxWorkspace), "MAX_WORKSPACE_BYTES"))
    return e;
  if (llvm::Error e =
          setPref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductionMask,
                  sizeof(reductionMask), "REDUCTION_SCHEME_MASK"))
    return e;
  // alignments: [A (b), B (a), C/D (out), bias, aux].
  uint32_t alA = alignments[0], alB = alignments[1], alD = alignments[2];
  if (llvm::Error e = setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alA,
                              sizeof(alA), "MIN_ALIGNMENT_A_BYTES"))
    return e;
  if (llvm::Error e = setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alB,
                              sizeof(alB), "MIN_ALIGNMENT_B_BYTES"))
    return e;
  if (llvm::Error e = setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alD,
                              sizeof(alD), "MIN_ALIGNMENT_C_BYTES"))
    return e;
  if (llvm::Error e = setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alD,
                              sizeof(alD), "MIN_ALIGNMENT_D_BYTES"))
    return e;

  return llvm::Error::success();
}

} // namespace

struct BlasHandle::Impl {
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  mutable std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  ~Impl() {
    plans.clear();
    if (lt)
      cublasLtDestroy(lt);
    if (workspace)
      cudaFree(workspace);
  }

  /// Builds the plan of one problem (descriptor, layouts, one heuristic
  /// query).
  llvm::Expected<std::unique_ptr<Plan>>
  buildPlan(const MatmulGeometry &g, DType dtype, bool tf32,
            const MatmulEpilogue &epilogue,
            const std::array<unsigned, 5> &alignments) {
    auto plan = std::make_unique<Plan>();
    if (llvm::Error e = describePlan(*plan, g, dtype, tf32, epilogue,
                                     alignments, workspaceBytes))
      return e;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (llvm::Error e = ltCheck(cublasLtMatmulAlgoGetHeuristic(
                                    lt, plan->desc, plan->layoutA,
                                    plan->layoutB, plan->layoutD, plan->layoutD,
                                    plan->pref, 1, &result, &found),
                                "cublasLtMatmulAlgoGetHeuristic"))
      return e;
    if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS)
      return makeError("cublasLtMatmulAlgoGetHeuristic: no cuBLASLt "
                       "algorithm for this problem");
    plan->algo = result.algo;
    return plan;
  }
};

llvm::Error cuda::checkMatmulDescriptors(const MatmulGeometry &geometry,
                                         DType dtype, bool allowTf32,
                                         MatmulEpilogue::Kind kind) {
  MatmulEpilogue epilogue;
  epilogue.kind = kind;
  Plan plan;
  return describePlan(plan, geometry, dtype, allowTf32, epilogue,
                      {256, 256, 256, 256, 256},
                      BlasHandle::kDefaultWorkspaceBytes);
}

BlasHandle::BlasHandle(std::unique_ptr<Impl> state) : impl(std::move(state)) {}

BlasHandle::~BlasHandle() = default;

size_t BlasHandle::workspaceBytes() const { return impl->workspaceBytes; }

size_t BlasHandle::cachedPlans() const {
  std::lock_guard<std::mutex> lock(impl->mutex);
  return impl->plans.size();
}

llvm::Expected<std::unique_ptr<BlasHandle>>
BlasHandle::create(size_t workspaceBytes) {
  auto impl = std::make_unique<Impl>();
  if (llvm::Error e = ltCheck(cublasLtCreate(&impl->lt), "cublasLtCreate"))
    return e;
  if (workspaceBytes > 0) {
    if (llvm::Error e =
            check(cudaMalloc(&impl->workspace, workspaceBytes),
                  llvm::Twine("cuBLASLt workspace: cudaMalloc of ") +
                      llvm::Twine(workspaceBytes) + " bytes"))
      return e;
  }
  impl->workspaceBytes = workspaceBytes;
  return std::unique_ptr<BlasHandle>(new BlasHandle(std::move(impl)));
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

llvm::Error cuda::matmul(BlasHandle &handle, const Tensor &a, const Tensor &b,
                         bool transposeA, bool transposeB, Tensor &out,
                         const MatmulEpilogue &epilogue, cudaStream_t stream,
                         bool allowTf32) {
  MatmulGeometry g;
  if (llvm::Error e = validate(a, b, transposeA, transposeB, out, epilogue, g))
    return e;
  auto context = [&]() {
    return " " + describe(a, b, transposeA, transposeB, out, epilogue);
  };
  auto withContext = [&](llvm::Error e) -> llvm::Error {
    if (!e)
      return e;
    return makeError("cuda::matmul: " + llvm::toString(std::move(e)) +
                     context());
  };
  bool biasGrad = epilogue.kind == MatmulEpilogue::Kind::DGeluBGrad;
  if (out.numel() == 0 || g.k == 0) {
    // Empty product: out = 0 (the sum over K = 0 terms), dgelu of 0 is 0,
    // and the bias gradient sums zeros. Nothing to do for an empty out.
    if (out.numel() > 0)
      if (llvm::Error e =
              check(cudaMemsetAsync(out.raw(), 0, out.bytes(), stream),
                    "cudaMemsetAsync(out)"))
        return withContext(std::move(e));
    // The epilogue is const but its bias gradient is an output: write it
    // through a (storage-sharing) copy of the Tensor.
    Tensor dbias = epilogue.bias;
    if (biasGrad && dbias.numel() > 0)
      if (llvm::Error e =
              check(cudaMemsetAsync(dbias.raw(), 0, dbias.bytes(), stream),
                    "cudaMemsetAsync(bias gradient)"))
        return withContext(std::move(e));
    return llvm::Error::success();
  }

  size_t elem = dtypeSize(out.dtype());
  auto address = [](const void *p) { return reinterpret_cast<uintptr_t>(p); };
  std::array<unsigned, 5> alignments = {
      batchAlignment(address(b.raw()),
                     g.ltA.batchStride * static_cast<int64_t>(elem), g.batch),
      batchAlignment(address(a.raw()),
                     g.ltB.batchStride * static_cast<int64_t>(elem), g.batch),
      batchAlignment(address(out.raw()),
                     g.ltD.batchStride * static_cast<int64_t>(elem), g.batch),
      epilogue.usesBias() ? batchAlignment(address(epilogue.bias.raw()), 0, 1)
                          : 0u,
      epilogue.usesAux() ? batchAlignment(address(epilogue.aux.raw()), 0, 1)
                         : 0u};
  BlasHandle::Impl &impl = *handle.impl;
  PlanKey key = makeKey(g, out.dtype(), allowTf32 && out.dtype() == DType::F32,
                        epilogue.kind, alignments);

  std::lock_guard<std::mutex> lock(impl.mutex);
  auto it = impl.plans.find(key);
  if (it == impl.plans.end()) {
    llvm::Expected<std::unique_ptr<Plan>> plan =
        impl.buildPlan(g, out.dtype(), allowTf32, epilogue, alignments);
    if (!plan)
      return withContext(plan.takeError());
    it = impl.plans.emplace(key, std::move(*plan)).first;
  }
  Plan &plan = *it->second;
  if (llvm::Error e = setEpiloguePointers(plan.desc, epilogue))
    return withContext(std::move(e));
  const float alpha = 1.0f, beta = 0.0f;
  // cuBLASLt A = b, B = a, C = D = out (beta = 0: C is not read).
  return withContext(
      ltCheck(cublasLtMatmul(impl.lt, plan.desc, &alpha, b.raw(), plan.layoutA,
                             a.raw(), plan.layoutB, &beta, out.raw(),
                             plan.layoutD, out.raw(), plan.layoutD, &plan.algo,
                             impl.workspace, impl.workspaceBytes, stream),
              "cublasLtMatmul"));
}

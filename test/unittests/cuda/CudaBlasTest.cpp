//===- CudaBlasTest.cpp - cuBLASLt GEMMs against cpu::matmul --------------===//
//
// Host tests (run everywhere, no GPU): the row-major -> column-major
// geometry of planMatmul, checked by emulating the planned cuBLASLt
// strided-batched GEMM on host numbers and comparing with a naive
// row-major product; shape / dtype / epilogue validation; result shapes;
// pointer alignment classes.
//
// Device tests (skipped without a GPU): cuda::matmul against cpu::matmul
// for f32 / bf16 / f16, every layout, the fused epilogues against
// cpu::matmul + bias + cpu::gelu(Tanh) / cpu::geluGrad(Tanh), the plan
// cache and CUDA graph capture.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/backends/cuda/CudaBlas.h"

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <sstream>

using namespace tessera::runtime;
using namespace tessera::runtime::test;
using cuda::MatmulEpilogue;
using cuda::MatmulGeometry;

namespace {

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

int64_t prod(const std::vector<int64_t> &v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i)
    p *= v[i];
  return p;
}

std::vector<int64_t> concat(std::vector<int64_t> lead,
                            const std::vector<int64_t> &tail) {
  lead.insert(lead.end(), tail.begin(), tail.end());
  return lead;
}

/// One matmul problem in cpu::matmul's terms.
struct Case {
  std::vector<int64_t> a, b, out;
  bool ta = false, tb = false;
  std::string str() const {
    std::ostringstream os;
    os << "a " << shapeToString(a) << ", b " << shapeToString(b) << ", out "
       << shapeToString(out) << ", ta " << ta << ", tb " << tb;
    return os.str();
  }
};

/// Every batch arrangement cpu::matmul accepts, for one M, N, K and
/// transposes.
std::vector<Case> batchArrangements(int64_t m, int64_t n, int64_t k, bool ta,
                                    bool tb) {
  std::vector<int64_t> am =
      ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
  std::vector<int64_t> bm =
      tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
  std::vector<int64_t> om = {m, n};
  return {
      {am, bm, om, ta, tb},                                 // plain
      {concat({2, 3}, am), bm, concat({2, 3}, om), ta, tb}, // b shared
      {am, concat({4}, bm), concat({4}, om), ta, tb},       // a shared
      {concat({2, 3}, am), concat({2, 3}, bm), concat({2, 3}, om), ta, tb},
      {concat({6}, am), concat({2, 3}, bm), concat({2, 3}, om), ta, tb},
      {am, bm, concat({3}, om), ta, tb},              // both shared
      {concat({1}, am), bm, concat({1}, om), ta, tb}, // batch 1
  };
}

//===----------------------------------------------------------------------===//
// Host: geometry
//===----------------------------------------------------------------------===//

/// Naive row-major reference of cpu::matmul on doubles.
std::vector<double> rowMajorReference(const Case &c,
                                      const std::vector<double> &a,
                                      const std::vector<double> &b) {
  size_t ra = c.a.size(), rb = c.b.size(), ro = c.out.size();
  int64_t m = c.out[ro - 2], n = c.out[ro - 1];
  int64_t k = c.ta ? c.a[ra - 2] : c.a[ra - 1];
  int64_t batch = prod(c.out, 0, ro - 2);
  std::vector<double> out(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t p = 0; p < batch; ++p) {
    int64_t baseA = ra == 2 ? 0 : p * m * k, baseB = rb == 2 ? 0 : p * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < k; ++l) {
          double x = c.ta ? a[baseA + l * m + i] : a[baseA + i * k + l];
          double y = c.tb ? b[baseB + j * k + l] : b[baseB + l * n + j];
          acc += x * y;
        }
        out[p * m * n + i * n + j] = acc;
      }
  }
  return out;
}

/// Runs the planned cuBLASLt problem, D = op(A) · op(B) per batch in
/// column-major terms, on host buffers (A = Tessera b, B = Tessera a, D =
/// out), checking every access against the layouts and buffers. Reports
/// problems as test failures naming `what`.
std::vector<double> emulateColumnMajor(const MatmulGeometry &g,
                                       const std::vector<double> &A,
                                       const std::vector<double> &B,
                                       size_t outSize,
                                       const std::string &what) {
  std::vector<double> D(outSize, NAN);
  std::vector<int> writes(outSize, 0);
  // The shapes cuBLASLt is given must agree with m, n, k.
  auto opRows = [](const cuda::LtOperand &o) {
    return o.transpose ? o.cols : o.rows;
  };
  auto opCols = [](const cuda::LtOperand &o) {
    return o.transpose ? o.rows : o.cols;
  };
  EXPECT_EQ(opRows(g.ltA), g.ltM) << what;
  EXPECT_EQ(opCols(g.ltA), g.ltK) << what;
  EXPECT_EQ(opRows(g.ltB), g.ltK) << what;
  EXPECT_EQ(opCols(g.ltB), g.ltN) << what;
  EXPECT_EQ(g.ltD.rows, g.ltM) << what;
  EXPECT_EQ(g.ltD.cols, g.ltN) << what;
  EXPECT_FALSE(g.ltD.transpose) << what;
  for (const cuda::LtOperand *o : {&g.ltA, &g.ltB, &g.ltD}) {
    EXPECT_GE(o->ld, std::max<int64_t>(o->rows, 1)) << what;
    EXPECT_GE(o->batchStride, 0) << what;
  }
  int bad = 0;
  // Element (r, c) of the stored column-major matrix of batch p.
  auto at = [&](const std::vector<double> &buf, const cuda::LtOperand &o,
                int64_t p, int64_t r, int64_t c) -> double {
    int64_t idx = p * o.batchStride + r + c * o.ld;
    if (r < 0 || r >= o.rows || c < 0 || c >= o.cols || idx < 0 ||
        idx >= static_cast<int64_t>(buf.size())) {
      if (bad++ < 3)
        ADD_FAILURE() << what << ": out-of-layout access batch " << p << " ("
                      << r << ", " << c << ") index " << idx;
      return 0;
    }
    return buf[static_cast<size_t>(idx)];
  };
  for (int64_t p = 0; p < g.batch; ++p)
    for (int64_t i = 0; i < g.ltM; ++i)
      for (int64_t j = 0; j < g.ltN; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < g.ltK; ++l) {
          double x =
              g.ltA.transpose ? at(A, g.ltA, p, l, i) : at(A, g.ltA, p, i, l);
          double y =
              g.ltB.transpose ? at(B, g.ltB, p, j, l) : at(B, g.ltB, p, l, j);
          acc += x * y;
        }
        int64_t idx = p * g.ltD.batchStride + i + j * g.ltD.ld;
        if (idx < 0 || idx >= static_cast<int64_t>(outSize)) {
          if (bad++ < 3)
            ADD_FAILURE() << what << ": D write out of bounds, index " << idx;
          continue;
        }
        D[static_cast<size_t>(idx)] = acc;
        ++writes[static_cast<size_t>(idx)];
      }
  for (size_t i = 0; i < outSize; ++i)
    if (writes[i] != 1 && bad++ < 3)
      ADD_FAILURE() << what << ": out element " << i << " written " << writes[i]
                    << " times";
  return D;
}

std::vector<double> smallInts(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-4, 4);
  std::vector<double> v(n);
  for (double &x : v)
    x = dist(gen);
  return v;
}

TEST(CudaBlasGeometry, EmulatedColumnMajorGemmMatchesRowMajor) {
  const int64_t sizes[][3] = {{1, 1, 1}, {1, 5, 3}, {4, 1, 3}, {3, 4, 1},
                              {5, 7, 6}, {8, 8, 8}, {2, 3, 0}, {0, 3, 2}};
  int checked = 0;
  unsigned seed = 1;
  for (const auto &s : sizes)
    for (int t = 0; t < 4; ++t)
      for (const Case &c : batchArrangements(s[0], s[1], s[2], t & 1, t & 2)) {
        MatmulGeometry g = cuda::planMatmul(c.a, c.b, c.out, c.ta, c.tb);
        ASSERT_EQ(g.error, "") << c.str();
        EXPECT_EQ(g.m, s[0]) << c.str();
        EXPECT_EQ(g.n, s[1]) << c.str();
        EXPECT_EQ(g.k, s[2]) << c.str();
        std::vector<double> a = smallInts(shapeNumel(c.a), seed++);
        std::vector<double> b = smallInts(shapeNumel(c.b), seed++);
        std::vector<double> want = rowMajorReference(c, a, b);
        std::vector<double> got =
            emulateColumnMajor(g, b, a, want.size(), c.str());
        // Small integers: both orders of summation are exact.
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << c.str() << " element " << i;
        ++checked;
      }
  EXPECT_EQ(checked, 8 * 4 * 7);
}

TEST(CudaBlasGeometry, SharedBFoldsLeadingDimsOfA) {
  // a [2, 3, 5, 4] · b [4, 7]: one GEMM of [30, 4] x [4, 7].
  MatmulGeometry g =
      cuda::planMatmul({2, 3, 5, 4}, {4, 7}, {2, 3, 5, 7}, false, false);
  ASSERT_EQ(g.error, "");
  EXPECT_TRUE(g.folded);
  EXPECT_EQ(g.batch, 1);
  EXPECT_EQ(g.outBatch, 6);
  EXPECT_EQ(g.ltM, 7);
  EXPECT_EQ(g.ltN, 30);
  EXPECT_EQ(g.ltK, 4);
  EXPECT_EQ(g.ltD.ld, 7);
  // Transposed a cannot be folded: strided batches with b's stride 0.
  g = cuda::planMatmul({6, 4, 5}, {4, 7}, {6, 5, 7}, true, false);
  ASSERT_EQ(g.error, "");
  EXPECT_FALSE(g.folded);
  EXPECT_EQ(g.batch, 6);
  EXPECT_EQ(g.ltA.batchStride, 0);
  EXPECT_EQ(g.ltB.batchStride, 20);
  EXPECT_EQ(g.ltD.batchStride, 35);
  // Shared a: a's stride is 0.
  g = cuda::planMatmul({5, 4}, {3, 4, 7}, {3, 5, 7}, false, false);
  ASSERT_EQ(g.error, "");
  EXPECT_EQ(g.batch, 3);
  EXPECT_EQ(g.ltB.batchStride, 0);
  EXPECT_EQ(g.ltA.batchStride, 28);
}

TEST(CudaBlasGeometry, RejectsMismatchedShapesWithAClearMessage) {
  struct Bad {
    std::vector<int64_t> a, b, out;
    bool ta, tb;
    const char *why;
  } bad[] = {
      {{2, 3}, {4, 5}, {2, 5}, false, false, "contracting sizes differ"},
      {{2, 3}, {5, 3}, {2, 5}, false, false, "contracting sizes differ"},
      {{3, 2}, {4, 5}, {2, 5}, true, false, "contracting sizes differ"},
      {{2, 3}, {3, 5}, {2, 4}, false, false, "out must end in [M, N]"},
      {{2, 3}, {3, 5}, {5, 2}, false, false, "out must end in [M, N]"},
      {{3}, {3, 5}, {5}, false, false, "rank >= 2"},
      {{2, 2, 3}, {3, 3, 5}, {2, 2, 5}, false, false, "b's batch dims"},
      {{4, 2, 3}, {3, 5}, {2, 2, 5}, false, false, "a's batch dims"},
      {{2, 3}, {3, 5}, {2, 3, 5}, false, false, "out must end in"},
  };
  for (const Bad &c : bad) {
    MatmulGeometry g = cuda::planMatmul(c.a, c.b, c.out, c.ta, c.tb);
    EXPECT_NE(g.error.find(c.why), std::string::npos)
        << "got '" << g.error << "' for a " << shapeToString(c.a);
    // The message names every shape.
    EXPECT_NE(g.error.find(shapeToString(c.a)), std::string::npos) << g.error;
    EXPECT_NE(g.error.find(shapeToString(c.b)), std::string::npos) << g.error;
    EXPECT_NE(g.error.find(shapeToString(c.out)), std::string::npos) << g.error;
  }
}

TEST(CudaBlasGeometry, ResultShapeFollowsTheExecutorsBatchRules) {
  auto shape = [](std::vector<int64_t> a, std::vector<int64_t> b, bool ta,
                  bool tb) -> std::vector<int64_t> {
    llvm::Expected<std::vector<int64_t>> s =
        cuda::matmulResultShape(a, b, ta, tb);
    if (!s) {
      ADD_FAILURE() << llvm::toString(s.takeError());
      return {};
    }
    return *s;
  };
  EXPECT_EQ(shape({2, 3}, {3, 5}, false, false), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(shape({3, 2}, {5, 3}, true, true), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(shape({7, 2, 3}, {3, 5}, false, false),
            (std::vector<int64_t>{7, 2, 5}));
  EXPECT_EQ(shape({2, 3}, {4, 3, 5}, false, false),
            (std::vector<int64_t>{4, 2, 5}));
  EXPECT_EQ(shape({4, 2, 3}, {4, 5, 3}, false, true),
            (std::vector<int64_t>{4, 2, 5}));
  for (auto bad : {std::make_pair(std::vector<int64_t>{4, 2, 3},
                                  std::vector<int64_t>{5, 3, 5}),
                   std::make_pair(std::vector<int64_t>{1, 4, 2, 3},
                                  std::vector<int64_t>{4, 3, 5}),
                   std::make_pair(std::vector<int64_t>{2, 3},
                                  std::vector<int64_t>{4, 5})}) {
    llvm::Expected<std::vector<int64_t>> s =
        cuda::matmulResultShape(bad.first, bad.second, false, false);
    ASSERT_FALSE(bool(s));
    std::string msg = llvm::toString(s.takeError());
    EXPECT_NE(msg.find(shapeToString(bad.first)), std::string::npos) << msg;
  }
}

TEST(CudaBlasGeometry, BatchAlignment) {
  EXPECT_EQ(cuda::batchAlignment(0x10000, 0, 1), 256u);
  EXPECT_EQ(cuda::batchAlignment(0x10004, 0, 1), 4u);
  EXPECT_EQ(cuda::batchAlignment(0x10010, 0, 1), 16u);
  // Batch matrices at base + 6 bytes * i: 2-byte aligned only.
  EXPECT_EQ(cuda::batchAlignment(0x10000, 6, 2), 2u);
  // The stride does not matter for one batch, nor a 0 stride.
  EXPECT_EQ(cuda::batchAlignment(0x10000, 6, 1), 256u);
  EXPECT_EQ(cuda::batchAlignment(0x10000, 0, 9), 256u);
  EXPECT_EQ(cuda::batchAlignment(0x10000, 4 * 40, 3), 32u);
}

// cuBLASLt's descriptor calls need no device: every attribute matmul sets
// (types, sizes, values) must be accepted for every dtype and epilogue, on
// plain, folded and strided-batched geometries.
TEST(CudaBlasGeometry, CuBlasLtAcceptsEveryDescriptor) {
  using Kind = MatmulEpilogue::Kind;
  const Kind kinds[] = {Kind::None,     Kind::Bias,      Kind::Gelu,
                        Kind::BiasGelu, Kind::GeluAux,   Kind::BiasGeluAux,
                        Kind::DGelu,    Kind::DGeluBGrad};
  const Case cases[] = {
      {{33, 40}, {40, 64}, {33, 64}, false, false},
      {{2, 3, 5, 40}, {64, 40}, {2, 3, 5, 64}, false, true},
      {{4, 40, 5}, {4, 40, 64}, {4, 5, 64}, true, false},
      {{5, 40}, {4, 64, 40}, {4, 5, 64}, false, true},
  };
  for (const Case &c : cases) {
    MatmulGeometry g = cuda::planMatmul(c.a, c.b, c.out, c.ta, c.tb);
    ASSERT_EQ(g.error, "") << c.str();
    for (DType d : {DType::F32, DType::BF16, DType::F16})
      for (bool tf32 : {false, true})
        for (Kind kind : kinds) {
          if (kind != Kind::None && g.batch != 1)
            continue;
          llvm::Error e = cuda::checkMatmulDescriptors(g, d, tf32, kind);
          EXPECT_FALSE(bool(e)) << c.str() << " " << dtypeName(d) << " "
                                << cuda::epilogueName(kind) << ": "
                                << llvm::toString(std::move(e));
        }
  }
}

//===----------------------------------------------------------------------===//
// Host: validation (host tensors: only shapes and dtypes are read)
//===----------------------------------------------------------------------===//

std::string validationError(const Tensor &a, const Tensor &b, bool ta, bool tb,
                            const Tensor &out, const MatmulEpilogue &ep) {
  return errorMessage(cuda::validateMatmul(a, b, ta, tb, out, ep));
}

TEST(CudaBlasValidate, DTypes) {
  Tensor a = Tensor::zeros(DType::F32, {2, 3}),
         b = Tensor::zeros(DType::F32, {3, 4});
  Tensor out = Tensor::zeros(DType::F32, {2, 4});
  EXPECT_EQ(validationError(a, b, false, false, out, {}), "");
  for (DType d : {DType::BF16, DType::F16}) {
    Tensor a16 = Tensor::zeros(d, {2, 3}), b16 = Tensor::zeros(d, {3, 4}),
           o16 = Tensor::zeros(d, {2, 4});
    EXPECT_EQ(validationError(a16, b16, false, false, o16, {}), "");
    std::string msg = validationError(a16, b, false, false, o16, {});
    EXPECT_NE(msg.find("one dtype"), std::string::npos) << msg;
  }
  Tensor ai = Tensor::zeros(DType::I64, {2, 3}),
         bi = Tensor::zeros(DType::I64, {3, 4}),
         oi = Tensor::zeros(DType::I64, {2, 4});
  std::string msg = validationError(ai, bi, false, false, oi, {});
  EXPECT_NE(msg.find("unsupported dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("i64"), std::string::npos) << msg;
  msg = validationError(Tensor(), b, false, false, out, {});
  EXPECT_NE(msg.find("null"), std::string::npos) << msg;
}

TEST(CudaBlasValidate, ShapesAreNamed) {
  Tensor a = Tensor::zeros(DType::F32, {2, 3}),
         b = Tensor::zeros(DType::F32, {4, 5});
  Tensor out = Tensor::zeros(DType::F32, {2, 5});
  std::string msg = validationError(a, b, false, false, out, {});
  EXPECT_EQ(msg.rfind("cuda::matmul: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("contracting sizes differ"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 5]"), std::string::npos) << msg;
}

TEST(CudaBlasValidate, Epilogues) {
  const int64_t n = 16;
  Tensor a = Tensor::zeros(DType::BF16, {2, 3, 5, 4});
  Tensor b = Tensor::zeros(DType::BF16, {4, n});
  Tensor out = Tensor::zeros(DType::BF16, {2, 3, 5, n});
  Tensor bias = Tensor::zeros(DType::BF16, {n});
  Tensor aux = Tensor::zeros(DType::BF16, {2, 3, 5, n});
  // Folded (shared b, a not transposed): every epilogue is fine.
  for (const MatmulEpilogue &ep :
       {MatmulEpilogue::withBias(bias), MatmulEpilogue::gelu(),
        MatmulEpilogue::biasGelu(bias), MatmulEpilogue::geluAux(aux),
        MatmulEpilogue::biasGeluAux(bias, aux), MatmulEpilogue::dGelu(aux),
        MatmulEpilogue::dGeluBGrad(aux, bias)})
    EXPECT_EQ(validationError(a, b, false, false, out, ep), "")
        << cuda::epilogueName(ep.kind);

  auto expectError = [](const Tensor &x, const Tensor &y, bool ta,
                        const Tensor &z, const MatmulEpilogue &ep,
                        const char *why) {
    std::string msg = validationError(x, y, ta, false, z, ep);
    EXPECT_NE(msg.find(why), std::string::npos)
        << "epilogue " << cuda::epilogueName(ep.kind) << ": '" << msg << "'";
  };
  // Missing, mis-shaped, mis-typed bias.
  expectError(a, b, false, out, {MatmulEpilogue::Kind::Bias, {}, {}},
              "needs a bias");
  expectError(a, b, false, out,
              MatmulEpilogue::withBias(Tensor::zeros(DType::BF16, {n + 1})),
              "bias must be [N]");
  expectError(a, b, false, out,
              MatmulEpilogue::withBias(Tensor::zeros(DType::F32, {n})),
              "bias must be [N]");
  expectError(a, b, false, out,
              MatmulEpilogue::withBias(Tensor::zeros(DType::BF16, {1, n})),
              "bias must be [N]");
  expectError(a, b, false, out, {MatmulEpilogue::Kind::None, bias, {}},
              "does not use it");
  // Aux.
  expectError(a, b, false, out, {MatmulEpilogue::Kind::GeluAux, {}, {}},
              "needs an aux");
  expectError(a, b, false, out,
              MatmulEpilogue::geluAux(Tensor::zeros(DType::BF16, {30, n})),
              "aux must have out's shape");
  {
    Tensor b12 = Tensor::zeros(DType::BF16, {4, 12});
    Tensor o12 = Tensor::zeros(DType::BF16, {2, 3, 5, 12});
    expectError(
        a, b12, false, o12,
        MatmulEpilogue::dGelu(Tensor::zeros(DType::BF16, {2, 3, 5, 12})),
        "N % 8 == 0");
    // Bias alone needs no N % 8.
    EXPECT_EQ(validationError(
                  a, b12, false, false, o12,
                  MatmulEpilogue::withBias(Tensor::zeros(DType::BF16, {12}))),
              "");
  }
  // Batched GEMMs take no epilogue.
  {
    Tensor bb = Tensor::zeros(DType::BF16, {2, 3, 4, n});
    expectError(a, bb, false, out, MatmulEpilogue::withBias(bias),
                "single GEMM");
    Tensor at = Tensor::zeros(DType::BF16, {2, 3, 4, 5});
    expectError(at, b, true, out, MatmulEpilogue::withBias(bias),
                "single GEMM");
  }
  // K = 0.
  {
    Tensor a0 = Tensor::zeros(DType::BF16, {5, 0});
    Tensor b0 = Tensor::zeros(DType::BF16, {0, n});
    Tensor o0 = Tensor::zeros(DType::BF16, {5, n});
    Tensor aux0 = Tensor::zeros(DType::BF16, {5, n});
    expectError(a0, b0, false, o0, MatmulEpilogue::withBias(bias), "K = 0");
    EXPECT_EQ(validationError(a0, b0, false, false, o0, {}), "");
    EXPECT_EQ(validationError(a0, b0, false, false, o0,
                              MatmulEpilogue::dGeluBGrad(aux0, bias)),
              "");
  }
  // Aliasing.
  {
    Tensor sq = Tensor::zeros(DType::F32, {4, 4});
    Tensor other = Tensor::zeros(DType::F32, {4, 4});
    expectError(sq, other, false, sq, {}, "must not alias");
    Tensor auxSq = Tensor::zeros(DType::F32, {4, 8});
    Tensor b8 = Tensor::zeros(DType::F32, {4, 8});
    expectError(sq, b8, false, auxSq, MatmulEpilogue::geluAux(auxSq),
                "must not alias");
  }
}

TEST(CudaBlasValidate, EpilogueNames) {
  EXPECT_STREQ(cuda::epilogueName(MatmulEpilogue::Kind::None), "none");
  EXPECT_STREQ(cuda::epilogueName(MatmulEpilogue::Kind::BiasGeluAux),
               "bias_gelu_aux");
  EXPECT_STREQ(cuda::epilogueName(MatmulEpilogue::Kind::DGeluBGrad),
               "dgelu_bgrad");
}

//===----------------------------------------------------------------------===//
// Device tests
//===----------------------------------------------------------------------===//

/// f32 host tensor rounded to `dtype` (round to nearest even).
Tensor castFromF32(const Tensor &t, DType dtype) {
  if (dtype == DType::F32)
    return t.clone();
  Tensor r = Tensor::empty(dtype, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float x = t.data<float>()[i];
    if (dtype == DType::BF16)
      r.data<BFloat16>()[i] = toBFloat16(x);
    else
      r.data<Float16>()[i] = toFloat16(x);
  }
  return r;
}

/// Host f32 copy of a f32 / bf16 / f16 host tensor (exact).
Tensor widenToF32(const Tensor &t) {
  if (t.dtype() == DType::F32)
    return t.clone();
  Tensor r = Tensor::empty(DType::F32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    r.data<float>()[i] = t.dtype() == DType::BF16
                             ? toFloat(t.data<BFloat16>()[i])
                             : toFloat(t.data<Float16>()[i]);
  return r;
}

/// Random values in [-1, 1) representable in `dtype`; `wide` gets the same
/// values in f32.
Tensor randomIn(DType dtype, std::vector<int64_t> shape, unsigned seed,
                Tensor &wide) {
  Tensor t = castFromF32(randomF32(std::move(shape), seed, -1.0f, 1.0f), dtype);
  wide = widenToF32(t);
  return t;
}

Tensor cpuMatmul(const Tensor &a32, const Tensor &b32, bool ta, bool tb,
                 const std::vector<int64_t> &outShape) {
  Tensor out = Tensor::empty(DType::F32, outShape);
  cpu::matmul(a32, b32, ta, tb, out);
  return out;
}

class CudaBlasTest : public CudaTest {
protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped())
      return;
    llvm::Expected<std::unique_ptr<cuda::BlasHandle>> h =
        cuda::BlasHandle::create();
    ASSERT_TRUE(bool(h)) << llvm::toString(h.takeError());
    handle = std::move(*h);
  }

  /// Device tensor of `shape` filled with a garbage pattern (so unwritten
  /// elements show).
  Tensor devGarbage(DType dtype, std::vector<int64_t> shape) {
    Tensor t = devEmpty(dtype, std::move(shape));
    EXPECT_EQ(cudaMemset(t.raw(), 0x7f, std::max<size_t>(t.bytes(), 1)),
              cudaSuccess);
    return t;
  }

  /// cuda::matmul on device copies of host a and b; host result.
  Tensor gpuMatmul(const Tensor &a, const Tensor &b, bool ta, bool tb,
                   const std::vector<int64_t> &outShape,
                   const MatmulEpilogue &ep = {}, bool tf32 = false) {
    Tensor da = dev(a), db = dev(b);
    Tensor out = devGarbage(a.dtype(), outShape);
    llvm::Error e = cuda::matmul(*handle, da, db, ta, tb, out, ep,
                                 /*stream=*/nullptr, tf32);
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    return host(out);
  }

  std::unique_ptr<cuda::BlasHandle> handle;
};

TEST_F(CudaBlasTest, F32MatchesCpuForEveryLayout) {
  const int64_t sizes[][3] = {{1, 1, 1},   {1, 33, 17},  {29, 1, 64},
                              {16, 24, 1}, {37, 19, 53}, {64, 128, 96}};
  unsigned seed = 10;
  for (const auto &s : sizes)
    for (int t = 0; t < 4; ++t)
      for (const Case &c : batchArrangements(s[0], s[1], s[2], t & 1, t & 2)) {
        Tensor a32, b32;
        Tensor a = randomIn(DType::F32, c.a, seed++, a32);
        Tensor b = randomIn(DType::F32, c.b, seed++, b32);
        Tensor want = cpuMatmul(a32, b32, c.ta, c.tb, c.out);
        Tensor got = gpuMatmul(a, b, c.ta, c.tb, c.out);
        EXPECT_LE(maxRelativeError(got, want, /*floor=*/1.0), 1e-5) << c.str();
      }
}

TEST_F(CudaBlasTest, KZeroWritesZeros) {
  for (DType d : {DType::F32, DType::BF16, DType::F16}) {
    Tensor a = Tensor::zeros(d, {2, 5, 0}), b = Tensor::zeros(d, {0, 8});
    Tensor got = widenToF32(gpuMatmul(a, b, false, false, {2, 5, 8}));
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_EQ(got.data<float>()[i], 0.0f) << dtypeName(d) << " " << i;
  }
  // Empty out: nothing launched, no error.
  Tensor a = Tensor::zeros(DType::F32, {0, 3}),
         b = Tensor::zeros(DType::F32, {3, 4});
  EXPECT_EQ(gpuMatmul(a, b, false, false, {0, 4}).numel(), 0);
}

TEST_F(CudaBlasTest, Bf16AndF16MatchCpuOnRoundedInputs) {
  const int64_t sizes[][3] = {{1, 33, 17}, {37, 19, 53}, {64, 128, 96}};
  unsigned seed = 100;
  for (DType d : {DType::BF16, DType::F16})
    for (const auto &s : sizes)
      for (int t = 0; t < 4; ++t)
        for (const Case &c :
             batchArrangements(s[0], s[1], s[2], t & 1, t & 2)) {
          Tensor a32, b32;
          Tensor a = randomIn(d, c.a, seed++, a32);
          Tensor b = randomIn(d, c.b, seed++, b32);
          // Reference: f32 product of the rounded inputs, rounded once.
          Tensor want = castFromF32(cpuMatmul(a32, b32, c.ta, c.tb, c.out), d);
          Tensor got = gpuMatmul(a, b, c.ta, c.tb, c.out);
          ASSERT_EQ(got.dtype(), d);
          EXPECT_LE(maxRelativeError(got, want, /*floor=*/1e-2), 2e-2)
              << dtypeName(d) << " " << c.str();
        }
}

TEST_F(CudaBlasTest, Tf32IsOptIn) {
  Tensor a32, b32;
  Tensor a = randomIn(DType::F32, {64, 96}, 7, a32);
  Tensor b = randomIn(DType::F32, {96, 128}, 8, b32);
  Tensor want = cpuMatmul(a32, b32, false, false, {64, 128});
  Tensor fast = gpuMatmul(a, b, false, false, {64, 128}, {}, /*tf32=*/true);
  EXPECT_LE(maxRelativeError(fast, want, 1.0), 2e-2);
  Tensor exact = gpuMatmul(a, b, false, false, {64, 128});
  EXPECT_LE(maxRelativeError(exact, want, 1.0), 1e-5);
  EXPECT_EQ(handle->cachedPlans(), 2u);
}

/// The error of column sums got[j] ~ want[j] = sum_r terms[r, j] (f32,
/// terms [rows, n]): max over j of |got[j] - want[j]| / max(sum_r
/// |terms[r, j]|, 1). A computed sum is accurate relative to the sum of its
/// terms' magnitudes, not to the sum itself, which cancellation can make
/// arbitrarily small (Higham, "Accuracy and Stability of Numerical
/// Algorithms", 2nd ed., section 4.2).
double maxColumnSumError(const Tensor &got, const Tensor &want,
                         const Tensor &terms) {
  int64_t n = want.numel(), rows = terms.numel() / n;
  EXPECT_EQ(got.numel(), n);
  double worst = 0;
  for (int64_t j = 0; j < n && j < got.numel(); ++j) {
    double mag = 0;
    for (int64_t r = 0; r < rows; ++r)
      mag += std::fabs(terms.data<float>()[r * n + j]);
    double err = std::fabs(static_cast<double>(got.data<float>()[j]) -
                           want.data<float>()[j]);
    if (std::isnan(err))
      return INFINITY;
    worst = std::max(worst, err / std::max(mag, 1.0));
  }
  return worst;
}

/// The epilogue reference in f32: P = op(a) op(b) over rows x n, then the
/// epilogue. Returns out; sets auxOut (pre-activation) and biasGrad.
Tensor epilogueReference(MatmulEpilogue::Kind kind, const Tensor &p,
                         const Tensor &bias32, const Tensor &auxIn32,
                         Tensor &auxOut, Tensor &biasGrad) {
  using Kind = MatmulEpilogue::Kind;
  int64_t n = p.dim(-1), rows = p.numel() / n;
  Tensor pre = p.clone();
  bool hasBias =
      kind == Kind::Bias || kind == Kind::BiasGelu || kind == Kind::BiasGeluAux;
  if (hasBias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        pre.data<float>()[r * n + j] += bias32.data<float>()[j];
  auxOut = pre.clone();
  Tensor out = Tensor::empty(DType::F32, p.shape());
  switch (kind) {
  case Kind::None:
  case Kind::Bias:
    return pre;
  case Kind::Gelu:
  case Kind::BiasGelu:
  case Kind::GeluAux:
  case Kind::BiasGeluAux:
    cpu::gelu(pre, cpu::GeluApproximate::Tanh, out);
    return out;
  case Kind::DGelu:
  case Kind::DGeluBGrad: {
    cpu::geluGrad(auxIn32, p, cpu::GeluApproximate::Tanh, out);
    biasGrad = Tensor::zeros(DType::F32, {n});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        biasGrad.data<float>()[j] += out.data<float>()[r * n + j];
    return out;
  }
  }
  return out;
}

TEST_F(CudaBlasTest, EpiloguesMatchCpu) {
  using Kind = MatmulEpilogue::Kind;
  const Kind kinds[] = {Kind::None,     Kind::Bias,      Kind::Gelu,
                        Kind::BiasGelu, Kind::GeluAux,   Kind::BiasGeluAux,
                        Kind::DGelu,    Kind::DGeluBGrad};
  // (a, b, out, ta, tb): folded leading dims, M = 1, transposed b,
  // transposed a (single batch).
  const Case cases[] = {
      {{2, 3, 5, 40}, {40, 64}, {2, 3, 5, 64}, false, false},
      {{1, 40}, {40, 64}, {1, 64}, false, false},
      {{33, 40}, {64, 40}, {33, 64}, false, true},
      {{40, 33}, {40, 72}, {33, 72}, true, false},
  };
  unsigned seed = 1000;
  for (DType d : {DType::F32, DType::BF16, DType::F16})
    for (const Case &c : cases)
      for (Kind kind : kinds) {
        int64_t n = c.out.back();
        Tensor a32, b32, bias32, aux32;
        Tensor a = randomIn(d, c.a, seed++, a32);
        Tensor b = randomIn(d, c.b, seed++, b32);
        Tensor bias = randomIn(d, {n}, seed++, bias32);
        // DGelu's pre-activation input, in [-3, 3) to cover GELU's bend.
        Tensor auxIn = castFromF32(randomF32(c.out, seed++, -3.0f, 3.0f), d);
        aux32 = widenToF32(auxIn);

        MatmulEpilogue ep;
        ep.kind = kind;
        Tensor devAux;
        if (kind == Kind::Bias || kind == Kind::BiasGelu ||
            kind == Kind::BiasGeluAux)
          ep.bias = dev(bias);
        if (kind == Kind::DGeluBGrad)
          ep.bias = devGarbage(d, {n});
        if (kind == Kind::GeluAux || kind == Kind::BiasGeluAux)
          ep.aux = devGarbage(d, c.out);
        if (kind == Kind::DGelu || kind == Kind::DGeluBGrad)
          ep.aux = dev(auxIn);

        Tensor p = cpuMatmul(a32, b32, c.ta, c.tb, c.out);
        Tensor wantAux, wantBiasGrad;
        Tensor want =
            epilogueReference(kind, p, bias32, aux32, wantAux, wantBiasGrad);
        Tensor got = gpuMatmul(a, b, c.ta, c.tb, c.out, ep);

        bool gelu = kind != Kind::None && kind != Kind::Bias;
        // f32: exact product and bias; GELU in f32 (cuBLASLt's tanh may be
        // an approximation); 16-bit: one rounding of the output.
        double tol = d != DType::F32 ? 2e-2 : gelu ? 2e-3 : 1e-5;
        std::string what = std::string(dtypeName(d)) + " " +
                           cuda::epilogueName(kind) + " " + c.str();
        EXPECT_LE(maxRelativeError(got, castFromF32(want, d), 1.0), tol)
            << what;
        if (kind == Kind::GeluAux || kind == Kind::BiasGeluAux) {
          EXPECT_LE(
              maxRelativeError(host(ep.aux), castFromF32(wantAux, d), 1.0),
              d == DType::F32 ? 1e-5 : 2e-2)
              << what << " (aux)";
        }
        if (kind == Kind::DGeluBGrad) {
          // cuBLASLt sums the epilogue's 16-bit outputs: each term carries
          // one rounding, so the error scales with the sum of |terms|.
          EXPECT_LE(
              maxColumnSumError(widenToF32(host(ep.bias)), wantBiasGrad, want),
              d == DType::F32 ? 2e-3 : 1e-2)
              << what << " (bias gradient)";
        }
      }
}

// With K = 1 and b = ones, P = a exactly, so the epilogue's GELU (and
// GELU derivative) is seen directly. The tanh and erf forms differ by up to
// 4.7e-4 (derivatives 8.7e-4) on [-6, 6]: the mean error tells which form
// cuBLASLt computes even if its tanh is itself approximate.
TEST_F(CudaBlasTest, GeluEpiloguesAreTheTanhForm) {
  const int64_t rows = 1024, n = 8;
  Tensor x = Tensor::empty(DType::F32, {rows, 1});
  for (int64_t i = 0; i < rows; ++i)
    x.data<float>()[i] = -6.0f + 12.0f * static_cast<float>(i) / rows;
  Tensor ones = Tensor::empty(DType::F32, {1, n});
  for (int64_t j = 0; j < n; ++j)
    ones.data<float>()[j] = 1.0f;
  Tensor xn = cpuMatmul(x, ones, false, false, {rows, n}); // x per column
  Tensor onesOut = Tensor::empty(DType::F32, {rows, n});
  for (int64_t i = 0; i < onesOut.numel(); ++i)
    onesOut.data<float>()[i] = 1.0f;

  auto meanAbsDiff = [](const Tensor &p, const Tensor &q) {
    double s = 0;
    for (int64_t i = 0; i < p.numel(); ++i)
      s += std::fabs(double(p.data<float>()[i]) - q.data<float>()[i]);
    return s / static_cast<double>(p.numel());
  };
  Tensor tanhRef = Tensor::empty(DType::F32, {rows, n});
  Tensor erfRef = Tensor::empty(DType::F32, {rows, n});

  // Forward: out = gelu(x).
  cpu::gelu(xn, cpu::GeluApproximate::Tanh, tanhRef);
  cpu::gelu(xn, cpu::GeluApproximate::None, erfRef);
  Tensor got =
      gpuMatmul(x, ones, false, false, {rows, n}, MatmulEpilogue::gelu());
  EXPECT_LE(maxRelativeError(got, tanhRef, 1.0), 2e-3);
  EXPECT_LT(meanAbsDiff(got, tanhRef), meanAbsDiff(got, erfRef));

  // Backward: aux = x, P = 1, out = gelu'(x).
  Tensor oneCol = Tensor::empty(DType::F32, {rows, 1});
  for (int64_t i = 0; i < rows; ++i)
    oneCol.data<float>()[i] = 1.0f;
  cpu::geluGrad(xn, onesOut, cpu::GeluApproximate::Tanh, tanhRef);
  cpu::geluGrad(xn, onesOut, cpu::GeluApproximate::None, erfRef);
  Tensor dgot = gpuMatmul(oneCol, ones, false, false, {rows, n},
                          MatmulEpilogue::dGelu(dev(xn)));
  EXPECT_LE(maxRelativeError(dgot, tanhRef, 1.0), 2e-3);
  EXPECT_LT(meanAbsDiff(dgot, tanhRef), meanAbsDiff(dgot, erfRef));
}

TEST_F(CudaBlasTest, EpilogueErrorsLaunchNothing) {
  Tensor a = dev(Tensor::zeros(DType::F32, {2, 5, 4}));
  Tensor b = dev(Tensor::zeros(DType::F32, {2, 4, 8}));
  Tensor bias = dev(Tensor::zeros(DType::F32, {8}));
  Tensor out = devEmpty(DType::F32, {2, 5, 8});
  llvm::Error e = cuda::matmul(*handle, a, b, false, false, out,
                               MatmulEpilogue::withBias(bias), nullptr);
  std::string msg = errorMessage(std::move(e));
  EXPECT_NE(msg.find("single GEMM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 5, 4]"), std::string::npos) << msg;
  EXPECT_EQ(handle->cachedPlans(), 0u);
}

TEST_F(CudaBlasTest, PlansAreCachedAndGraphCaptureReplays) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  Tensor a32, b32, bias32;
  Tensor a = randomIn(DType::BF16, {4, 8, 48}, 1, a32);
  Tensor b = randomIn(DType::BF16, {48, 64}, 2, b32);
  Tensor bias = randomIn(DType::BF16, {64}, 3, bias32);
  Tensor da = dev(a), db = dev(b), dbias = dev(bias);
  Tensor out = devGarbage(DType::BF16, {4, 8, 64});
  MatmulEpilogue ep = MatmulEpilogue::biasGelu(dbias);

  // Warm-up: one plan; the same problem again reuses it.
  ASSERT_NO_ERR(cuda::matmul(*handle, da, db, false, false, out, ep, stream));
  ASSERT_NO_ERR(cuda::matmul(*handle, da, db, false, false, out, ep, stream));
  EXPECT_EQ(handle->cachedPlans(), 1u);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  // Capture the steady-state call.
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  llvm::Error captured =
      cuda::matmul(*handle, da, db, false, false, out, ep, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_NO_ERR(std::move(captured));
  EXPECT_EQ(handle->cachedPlans(), 1u);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  // New inputs in the same buffers, garbage out, then replay.
  Tensor a2_32;
  Tensor a2 = randomIn(DType::BF16, {4, 8, 48}, 4, a2_32);
  ASSERT_EQ(cudaMemcpy(da.raw(), a2.raw(), a2.bytes(), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(out.raw(), 0x7f, out.bytes()), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  Tensor p = cpuMatmul(a2_32, b32, false, false, {4, 8, 64});
  Tensor unusedAux, unusedGrad;
  Tensor want = epilogueReference(MatmulEpilogue::Kind::BiasGelu, p, bias32,
                                  Tensor(), unusedAux, unusedGrad);
  EXPECT_LE(maxRelativeError(host(out), castFromF32(want, DType::BF16), 1.0),
            2e-2);

  // A different problem gets its own plan.
  Tensor out2 = devEmpty(DType::BF16, {4, 8, 64});
  ASSERT_NO_ERR(cuda::matmul(*handle, da, db, false, false, out2,
                             MatmulEpilogue::none(), stream));
  EXPECT_EQ(handle->cachedPlans(), 2u);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

} // namespace

//===- RingAttentionTest.cpp - ring attention through the executor --------===//
//
// A tsrt program whose "attention" / "attention_grad" kernels carry
// `grid_axes` over a 2-rank axis and `ring_size = 2` (what the partitioner
// makes of a striped sequence split, test/Passes/sharding/ring-attention.mlir)
// is compiled and run on pairs of ranks: each rank holds the stripe of
// global rows i·2 + r, and its outputs, log-sum-exp and gradients equal those
// rows of the plain kernels run on the whole sequence; each rotation is
// recorded as Send traffic and the scratch is the counted heap tensor of
// ringAttentionWorkspaceElems floats. A ring_size that is not the size of
// the grid_axes, and a mask, are load errors (those run on every rank).
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Program.h"

#include "dialects/tsrt/TsrtDialect.h"
#include "runtime/backends/cpu/Attention.h"
#include "runtime/backends/cpu/CpuKernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

#include <cmath>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

namespace {

constexpr int64_t kRing = 2, kB = 3, kS = 8, kD = 4, kDv = 5;
constexpr int64_t kLocal = kS / kRing;

/// The program at local shapes: q, k [B, S/2, D], v, dout [B, S/2, Dv].
std::string ringProgram(llvm::StringRef dtype, int64_t ringSize,
                        llvm::StringRef extraOperand = "",
                        llvm::StringRef extraType = "") {
  auto t = [&](int64_t d) {
    return ("tensor<" + std::to_string(kB) + "x" + std::to_string(kLocal) +
            "x" + std::to_string(d) + "x" + dtype + ">")
        .str();
  };
  std::string lse =
      "tensor<" + std::to_string(kB) + "x" + std::to_string(kLocal) + "xf32>";
  std::string attrs = "{attrs = {causal = true, grid_axes = array<i16: 1>, "
                      "ring_size = " +
                      std::to_string(ringSize) +
                      " : i64, scale = 5.000000e-01 : f32}}";
  std::string q = t(kD), v = t(kDv);
  return "module {\n  func.func @ring(%q: " + q + ", %k: " + q + ", %v: " + v +
         ", %do: " + v + extraType.str() + ") -> (" + v + ", " + lse + ", " +
         q + ", " + q + ", " + v + ") {\n" +
         "    %o:2 = tsrt.kernel \"attention\"(%q, %k, %v" +
         extraOperand.str() + ") " + attrs + " : (" + q + ", " + q + ", " + v +
         (extraOperand.empty() ? std::string() : ", tensor<4x4xf32>") +
         ") -> (" + v + ", " + lse + ")\n" +
         "    %g:3 = tsrt.kernel \"attention_grad\"(%q, %k, %v, %o#0, %o#1, "
         "%do) " +
         attrs + " : (" + q + ", " + q + ", " + v + ", " + v + ", " + lse +
         ", " + v + ") -> (" + q + ", " + q + ", " + v + ")\n" +
         "    return %o#0, %o#1, %g#0, %g#1, %g#2 : " + v + ", " + lse + ", " +
         q + ", " + q + ", " + v + "\n  }\n}\n";
}

/// Compiles @ring on a [1, 2] grid (the ring is axis 1).
llvm::Expected<Program> compile(mlir::MLIRContext &ctx,
                                const std::string &text) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
  if (!module)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "parse error:\n" + text);
  CompileOptions options;
  options.gridShape = {1, kRing};
  return Program::compile(*module, "ring", options, "ring.mlir");
}

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  registry.insert<tessera::tsrt::TsrtDialect, mlir::func::FuncDialect>();
  return std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
}

Tensor filled(std::vector<int64_t> shape, float seed) {
  Tensor f = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < f.numel(); ++i)
    f.data<float>()[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return f;
}

/// Rows r, r + K, r + 2K, ... of [B, S, d] (rank r's stripe).
Tensor stripe(const Tensor &global, int64_t r) {
  int64_t b = global.dim(0), s = global.dim(1);
  int64_t d = global.shape().size() > 2 ? global.dim(2) : 1;
  std::vector<int64_t> shape = global.shape();
  shape[1] = s / kRing;
  Tensor local = Tensor::empty(DType::F32, shape);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < s / kRing; ++i)
      for (int64_t c = 0; c < d; ++c)
        local.data<float>()[(bi * (s / kRing) + i) * d + c] =
            global.data<float>()[(bi * s + i * kRing + r) * d + c];
  return local;
}

Tensor toDType(const Tensor &f, DType dtype) {
  if (dtype == DType::F32)
    return f;
  Tensor h = Tensor::empty(dtype, f.shape());
  cpu::convert(f, h);
  return h;
}

Tensor toF32(const Tensor &t) {
  if (t.dtype() == DType::F32)
    return t;
  Tensor f = Tensor::empty(DType::F32, t.shape());
  cpu::convert(t, f);
  return f;
}

void expectClose(const Tensor &actual, const Tensor &expected, double rtol,
                 const std::string &what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  double num = 0, den = 0, worst = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.data<float>()[i], e = expected.data<float>()[i];
    num += (a - e) * (a - e);
    den += e * e;
    worst = std::max(worst, std::abs(a - e));
  }
  EXPECT_LE(std::sqrt(num), rtol * std::sqrt(den) + 1e-12)
      << what << ": worst abs diff " << worst;
}

/// The world split into rings of 2 (ranks 2j, 2j+1); null on a world of
/// odd size (the test is skipped there).
struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;
  Ring() {
    mpi::Communicator world = mpi::Communicator::world();
    if (world.size() % kRing)
      return;
    MPI_Comm_split(MPI_COMM_WORLD, world.rank() / kRing, world.rank(), &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  ~Ring() {
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
  }
};

void runRing(DType dtype, double rtol) {
  Ring ring;
  if (ring.comm == MPI_COMM_NULL)
    GTEST_SKIP() << "needs an even number of ranks";
  auto ctxOwner = makeContext();
  llvm::Expected<Program> program =
      compile(*ctxOwner, ringProgram(dtype == DType::F32 ? "f32" : "bf16", 2));
  ASSERT_TRUE(bool(program)) << llvm::toString(program.takeError());
  ASSERT_EQ(program->commAxes().size(), 1u);
  EXPECT_EQ(program->commAxes()[0], std::vector<int64_t>{1});

  // Global inputs (the same on every rank), rounded to the dtype so that the
  // reference sees exactly the values the ring kernel widens.
  auto input = [&](std::vector<int64_t> shape, float seed) {
    return toF32(toDType(filled(shape, seed), dtype));
  };
  Tensor q = input({kB, kS, kD}, 0.1f), k = input({kB, kS, kD}, 0.7f);
  Tensor v = input({kB, kS, kDv}, 1.3f), dout = input({kB, kS, kDv}, 2.1f);

  // Reference: the plain kernels on the whole sequence.
  cpu::AttentionDims d{kB, kS, kS, kD, kDv};
  Tensor o = Tensor::empty(DType::F32, {kB, kS, kDv});
  Tensor lse = Tensor::empty(DType::F32, {kB, kS});
  Tensor dq = Tensor::empty(DType::F32, {kB, kS, kD});
  Tensor dk = Tensor::empty(DType::F32, {kB, kS, kD});
  Tensor dv = Tensor::empty(DType::F32, {kB, kS, kDv});
  std::vector<float> ws(std::max(cpu::attentionWorkspaceElems(d, false),
                                 cpu::attentionWorkspaceElems(d, true)));
  cpu::attentionForward(d, q.data<float>(), k.data<float>(), v.data<float>(),
                        nullptr, 0.5f, true, o.data<float>(), lse.data<float>(),
                        ws.data());
  if (dtype != DType::F32) // the ring's O is rounded before the backward
    o = toF32(toDType(o, dtype));
  cpu::attentionBackward(d, q.data<float>(), k.data<float>(), v.data<float>(),
                         o.data<float>(), lse.data<float>(), dout.data<float>(),
                         nullptr, 0.5f, true, dq.data<float>(),
                         dk.data<float>(), dv.data<float>(), ws.data());

  mpi::Communicator comm(ring.comm);
  int r = comm.rank();
  mpi::TrafficCounter traffic;
  ExecContext ctx;
  ctx.comms = {comm};
  ctx.traffic = &traffic;
  std::vector<Tensor> args = {
      toDType(stripe(q, r), dtype), toDType(stripe(k, r), dtype),
      toDType(stripe(v, r), dtype), toDType(stripe(dout, r), dtype)};
  llvm::Expected<std::vector<Tensor>> out = program->run(ctx, args);
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  ASSERT_EQ(out->size(), 5u);
  expectClose(toF32((*out)[0]), toF32(toDType(stripe(o, r), dtype)), rtol,
              "output");
  expectClose((*out)[1], stripe(lse, r), 1e-5, "lse");
  expectClose(toF32((*out)[2]), stripe(dq, r), rtol, "dq");
  expectClose(toF32((*out)[3]), stripe(dk, r), rtol, "dk");
  expectClose(toF32((*out)[4]), stripe(dv, r), rtol, "dv");

  // One forward rotation of [K|V], then one of [K|V|dK|dV] and one of
  // [dK|dV] in the backward (n floats each, 4 bytes a float).
  double kv = kB * kLocal * (kD + kDv) * 4.0;
  EXPECT_EQ(traffic.stepBytes(mpi::CollectiveKind::Send), kv + 2 * kv + kv);
  EXPECT_EQ(traffic.stepBytes(), 4 * kv);
}

TEST(RingAttention, MatchesPlainAttentionOnTheGatheredSequence) {
  runRing(DType::F32, 1e-5);
}

TEST(RingAttention, Bf16GoesThroughTheWideningAdapter) {
  runRing(DType::BF16, 1e-2);
}

TEST(RingAttention, ScratchIsACountedHeapTensor) {
  Ring ring;
  if (ring.comm == MPI_COMM_NULL)
    GTEST_SKIP() << "needs an even number of ranks";
  auto ctxOwner = makeContext();
  llvm::Expected<Program> program = compile(*ctxOwner, ringProgram("f32", 2));
  ASSERT_TRUE(bool(program)) << llvm::toString(program.takeError());
  // Run only the forward kernel, with its results preallocated, so that the
  // scratch is the only allocation during the call.
  const Instruction &fwd = program->instructions().at(0);
  ASSERT_EQ(fwd.kernel, "attention");
  Tensor q = filled({kB, kLocal, kD}, 0.1f), k = filled({kB, kLocal, kD}, 0.4f);
  Tensor v = filled({kB, kLocal, kDv}, 0.9f);
  std::vector<Tensor> outs = {Tensor::empty(DType::F32, {kB, kLocal, kDv}),
                              Tensor::empty(DType::F32, {kB, kLocal})};
  ExecContext ctx;
  ctx.comms = {mpi::Communicator(ring.comm)};
  resetHeapBytesPeak();
  int64_t before = heapBytesLive();
  std::vector<const Tensor *> ins = {&q, &k, &v};
  llvm::Error e = fwd.fn(ctx, ins, outs);
  ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  cpu::AttentionDims d{kB, kLocal, kLocal, kD, kDv};
  int64_t bytes = cpu::ringAttentionWorkspaceElems(d, false) * 4;
  EXPECT_EQ(heapBytesPeak() - before, (bytes + 63) / 64 * 64);
  EXPECT_EQ(heapBytesLive(), before);
}

TEST(RingAttention, RingSizeMustBeTheCommunicatorSize) {
  auto ctxOwner = makeContext();
  llvm::Expected<Program> program = compile(*ctxOwner, ringProgram("f32", 4));
  ASSERT_FALSE(bool(program));
  std::string msg = llvm::toString(program.takeError());
  EXPECT_NE(msg.find("ring_size 4 does not match the 2 ranks of its "
                     "grid_axes"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("\"attention\""), std::string::npos) << msg;
}

TEST(RingAttention, MaskIsALoadError) {
  auto ctxOwner = makeContext();
  llvm::Expected<Program> program = compile(
      *ctxOwner, ringProgram("f32", 2, ", %m", ", %m: tensor<4x4xf32>"));
  ASSERT_FALSE(bool(program));
  std::string msg = llvm::toString(program.takeError());
  EXPECT_NE(msg.find("ring attention takes no mask operand"), std::string::npos)
      << msg;
}

} // namespace

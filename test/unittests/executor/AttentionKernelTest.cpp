//===- AttentionKernelTest.cpp - the attention kernels through resolveKernel =//
//
// "attention" / "attention_grad" as the executor resolves them: the results
// equal the CPU kernels of runtime/backends/cpu/Attention.h called directly,
// with the optional mask operand; the row-block scratch is a counted heap
// allocation of attentionWorkspaceElems floats (what tsr-plan-memory
// predicts as workspace); bf16 operands go through the widening adapter with
// an f32 log-sum-exp; bad shapes and attributes are load errors.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Backend.h"

#include "runtime/backends/cpu/Attention.h"
#include "runtime/backends/cpu/CpuKernels.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

#include <cmath>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

namespace {

Tensor filled(DType dtype, std::vector<int64_t> shape, float seed) {
  Tensor f = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < f.numel(); ++i)
    f.data<float>()[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  if (dtype == DType::F32)
    return f;
  Tensor h = Tensor::empty(dtype, shape);
  cpu::convert(f, h);
  return h;
}

mlir::DictionaryAttr attrs(mlir::MLIRContext &ctx, float scale, bool causal) {
  mlir::Builder b(&ctx);
  return b.getDictionaryAttr({b.getNamedAttr("scale", b.getF32FloatAttr(scale)),
                              b.getNamedAttr("causal", b.getBoolAttr(causal))});
}

llvm::Error resolve(llvm::StringRef name, mlir::DictionaryAttr dict,
                    const std::vector<const Tensor *> &ins,
                    const std::vector<TensorType> &outTypes,
                    Instruction &inst) {
  std::vector<TensorType> inTypes;
  for (const Tensor *t : ins)
    inTypes.push_back({t->dtype(), t->shape()});
  CompileOptions options;
  return resolveKernel(name, dict, inTypes, outTypes, options, inst);
}

std::vector<Tensor> run(Instruction &inst,
                        const std::vector<const Tensor *> &ins,
                        const std::vector<TensorType> &outTypes) {
  std::vector<Tensor> outs;
  for (const TensorType &t : outTypes)
    outs.push_back(Tensor::empty(t.dtype, t.shape));
  if (llvm::Error e = inst.fn(ExecContext{}, ins, outs))
    ADD_FAILURE() << llvm::toString(std::move(e));
  return outs;
}

constexpr int64_t B = 2, H = 3, S = 5, D = 4;

TEST(AttentionKernel, ForwardWithMaskMatchesKernelAndCountsWorkspace) {
  mlir::MLIRContext ctx;
  Tensor q = filled(DType::F32, {B, H, S, D}, 0.1f);
  Tensor k = filled(DType::F32, {B, H, S, D}, 0.7f);
  Tensor v = filled(DType::F32, {B, H, S, D}, 1.3f);
  Tensor mask = filled(DType::F32, {S, S}, 2.9f);
  mask.data<float>()[3] = -INFINITY;
  std::vector<TensorType> outTypes = {{DType::F32, {B, H, S, D}},
                                      {DType::F32, {B, H, S}}};
  Instruction inst;
  ASSERT_FALSE(bool(resolve("attention", attrs(ctx, 0.5f, true),
                            {&q, &k, &v, &mask}, outTypes, inst)));
  // Preallocate the results so the only allocation during the call is the
  // kernel's scratch.
  std::vector<Tensor> outs;
  for (const TensorType &t : outTypes)
    outs.push_back(Tensor::empty(t.dtype, t.shape));
  resetHeapBytesPeak();
  int64_t before = heapBytesLive();
  std::vector<const Tensor *> ins = {&q, &k, &v, &mask};
  ASSERT_FALSE(bool(inst.fn(ExecContext{}, ins, outs)));
  cpu::AttentionDims d{B * H, S, S, D, D};
  int64_t ws = cpu::attentionWorkspaceElems(d, false) * 4;
  EXPECT_EQ(heapBytesPeak() - before, (ws + 63) / 64 * 64);
  EXPECT_EQ(heapBytesLive(), before);

  Tensor o = Tensor::empty(DType::F32, {B, H, S, D});
  Tensor lse = Tensor::empty(DType::F32, {B, H, S});
  std::vector<float> scratch(cpu::attentionWorkspaceElems(d, false));
  cpu::attentionForward(d, q.data<float>(), k.data<float>(), v.data<float>(),
                        mask.data<float>(), 0.5f, true, o.data<float>(),
                        lse.data<float>(), scratch.data());
  for (int64_t i = 0; i < o.numel(); ++i)
    EXPECT_EQ(outs[0].data<float>()[i], o.data<float>()[i]) << i;
  for (int64_t i = 0; i < lse.numel(); ++i)
    EXPECT_EQ(outs[1].data<float>()[i], lse.data<float>()[i]) << i;
}

TEST(AttentionKernel, BackwardMatchesKernel) {
  mlir::MLIRContext ctx;
  Tensor q = filled(DType::F32, {B * H, S, D}, 0.2f);
  Tensor k = filled(DType::F32, {B * H, S, D}, 0.5f);
  Tensor v = filled(DType::F32, {B * H, S, 2}, 0.9f);
  Tensor dout = filled(DType::F32, {B * H, S, 2}, 1.7f);
  std::vector<TensorType> fwdTypes = {{DType::F32, {B * H, S, 2}},
                                      {DType::F32, {B * H, S}}};
  Instruction fwd, bwd;
  ASSERT_FALSE(bool(resolve("attention", attrs(ctx, 0.25f, false), {&q, &k, &v},
                            fwdTypes, fwd)));
  std::vector<Tensor> ol = run(fwd, {&q, &k, &v}, fwdTypes);
  std::vector<TensorType> bwdTypes = {{DType::F32, {B * H, S, D}},
                                      {DType::F32, {B * H, S, D}},
                                      {DType::F32, {B * H, S, 2}}};
  std::vector<const Tensor *> ins = {&q, &k, &v, &ol[0], &ol[1], &dout};
  ASSERT_FALSE(bool(
      resolve("attention_grad", attrs(ctx, 0.25f, false), ins, bwdTypes, bwd)));
  std::vector<Tensor> g = run(bwd, ins, bwdTypes);
  cpu::AttentionDims d{B * H, S, S, D, 2};
  std::vector<float> scratch(cpu::attentionWorkspaceElems(d, true));
  Tensor dq = Tensor::empty(DType::F32, {B * H, S, D});
  Tensor dk = Tensor::empty(DType::F32, {B * H, S, D});
  Tensor dv = Tensor::empty(DType::F32, {B * H, S, 2});
  cpu::attentionBackward(
      d, q.data<float>(), k.data<float>(), v.data<float>(), ol[0].data<float>(),
      ol[1].data<float>(), dout.data<float>(), nullptr, 0.25f, false,
      dq.data<float>(), dk.data<float>(), dv.data<float>(), scratch.data());
  for (int64_t i = 0; i < dq.numel(); ++i) {
    EXPECT_EQ(g[0].data<float>()[i], dq.data<float>()[i]) << i;
    EXPECT_EQ(g[1].data<float>()[i], dk.data<float>()[i]) << i;
  }
  for (int64_t i = 0; i < dv.numel(); ++i)
    EXPECT_EQ(g[2].data<float>()[i], dv.data<float>()[i]) << i;
}

// bf16 operands: widened exactly, the f32 kernel, O rounded to bf16 and the
// log-sum-exp left f32.
TEST(AttentionKernel, Bf16KeepsF32Lse) {
  mlir::MLIRContext ctx;
  Tensor q = filled(DType::BF16, {B * H, S, D}, 0.3f);
  Tensor k = filled(DType::BF16, {B * H, S, D}, 0.6f);
  Tensor v = filled(DType::BF16, {B * H, S, D}, 0.8f);
  std::vector<TensorType> outTypes = {{DType::BF16, {B * H, S, D}},
                                      {DType::F32, {B * H, S}}};
  Instruction inst;
  ASSERT_FALSE(bool(resolve("attention", attrs(ctx, 0.5f, true), {&q, &k, &v},
                            outTypes, inst)));
  std::vector<Tensor> outs = run(inst, {&q, &k, &v}, outTypes);
  auto wide = [](const Tensor &h) {
    Tensor f = Tensor::empty(DType::F32, h.shape());
    cpu::convert(h, f);
    return f;
  };
  Tensor qw = wide(q), kw = wide(k), vw = wide(v);
  cpu::AttentionDims d{B * H, S, S, D, D};
  std::vector<float> scratch(cpu::attentionWorkspaceElems(d, false));
  Tensor o = Tensor::empty(DType::F32, {B * H, S, D});
  Tensor lse = Tensor::empty(DType::F32, {B * H, S});
  cpu::attentionForward(d, qw.data<float>(), kw.data<float>(), vw.data<float>(),
                        nullptr, 0.5f, true, o.data<float>(), lse.data<float>(),
                        scratch.data());
  for (int64_t i = 0; i < o.numel(); ++i)
    EXPECT_EQ(outs[0].data<BFloat16>()[i].bits,
              toBFloat16(o.data<float>()[i]).bits)
        << i;
  for (int64_t i = 0; i < lse.numel(); ++i)
    EXPECT_EQ(outs[1].data<float>()[i], lse.data<float>()[i]) << i;
}

// Grouped-query attention: K/V [B, Hkv, S, D] with Hkv dividing H; the
// executor passes group = H / Hkv to the kernel, and the gradients of K and
// V have K/V's shape.
TEST(AttentionKernel, GroupedQueryMatchesKernel) {
  mlir::MLIRContext ctx;
  constexpr int64_t Hq = 6, Hkv = 2;
  Tensor q = filled(DType::F32, {B, Hq, S, D}, 0.4f);
  Tensor k = filled(DType::F32, {B, Hkv, S, D}, 0.8f);
  Tensor v = filled(DType::F32, {B, Hkv, S, 3}, 1.1f);
  Tensor dout = filled(DType::F32, {B, Hq, S, 3}, 1.9f);
  std::vector<TensorType> fwdTypes = {{DType::F32, {B, Hq, S, 3}},
                                      {DType::F32, {B, Hq, S}}};
  Instruction fwd, bwd;
  ASSERT_FALSE(bool(resolve("attention", attrs(ctx, 0.5f, true), {&q, &k, &v},
                            fwdTypes, fwd)));
  std::vector<Tensor> ol = run(fwd, {&q, &k, &v}, fwdTypes);
  std::vector<TensorType> bwdTypes = {{DType::F32, {B, Hq, S, D}},
                                      {DType::F32, {B, Hkv, S, D}},
                                      {DType::F32, {B, Hkv, S, 3}}};
  std::vector<const Tensor *> ins = {&q, &k, &v, &ol[0], &ol[1], &dout};
  ASSERT_FALSE(bool(
      resolve("attention_grad", attrs(ctx, 0.5f, true), ins, bwdTypes, bwd)));
  std::vector<Tensor> g = run(bwd, ins, bwdTypes);

  cpu::AttentionDims d{B * Hq, S, S, D, 3, Hq / Hkv};
  Tensor o = Tensor::empty(DType::F32, {B, Hq, S, 3});
  Tensor lse = Tensor::empty(DType::F32, {B, Hq, S});
  std::vector<float> ws(cpu::attentionWorkspaceElems(d, true));
  cpu::attentionForward(d, q.data<float>(), k.data<float>(), v.data<float>(),
                        nullptr, 0.5f, true, o.data<float>(), lse.data<float>(),
                        ws.data());
  Tensor dq = Tensor::empty(DType::F32, {B, Hq, S, D});
  Tensor dk = Tensor::empty(DType::F32, {B, Hkv, S, D});
  Tensor dv = Tensor::empty(DType::F32, {B, Hkv, S, 3});
  cpu::attentionBackward(d, q.data<float>(), k.data<float>(), v.data<float>(),
                         o.data<float>(), lse.data<float>(), dout.data<float>(),
                         nullptr, 0.5f, true, dq.data<float>(),
                         dk.data<float>(), dv.data<float>(), ws.data());
  for (int64_t i = 0; i < o.numel(); ++i)
    EXPECT_EQ(ol[0].data<float>()[i], o.data<float>()[i]) << i;
  for (int64_t i = 0; i < dq.numel(); ++i)
    EXPECT_EQ(g[0].data<float>()[i], dq.data<float>()[i]) << i;
  for (int64_t i = 0; i < dk.numel(); ++i)
    EXPECT_EQ(g[1].data<float>()[i], dk.data<float>()[i]) << i;
  for (int64_t i = 0; i < dv.numel(); ++i)
    EXPECT_EQ(g[2].data<float>()[i], dv.data<float>()[i]) << i;
  // Query heads 0..2 share K/V head 0: their outputs differ from heads 3..5
  // (K/V head 1), so the mapping is h / n_rep, not h mod Hkv.
  EXPECT_NE(o.data<float>()[0], o.data<float>()[3 * S * 3]);
}

TEST(AttentionKernel, BadShapesAndAttributesAreLoadErrors) {
  mlir::MLIRContext ctx;
  TensorType q{DType::F32, {2, 4, 8}}, k6{DType::F32, {2, 6, 8}};
  TensorType o{DType::F32, {2, 4, 8}}, lse{DType::F32, {2, 4}};
  CompileOptions options;
  auto error = [&](llvm::StringRef name, mlir::DictionaryAttr dict,
                   std::vector<TensorType> ins, std::vector<TensorType> outs) {
    Instruction inst;
    llvm::Error e = resolveKernel(name, dict, ins, outs, options, inst);
    return e ? llvm::toString(std::move(e)) : std::string();
  };
  EXPECT_EQ(error("attention", attrs(ctx, 1, true), {q, k6, k6}, {o, lse}),
            "causal attention needs Sq == Sk");
  EXPECT_NE(error("attention", attrs(ctx, 1, false),
                  {q, q, q, TensorType{DType::F32, {4, 5}}}, {o, lse})
                .find("is not [Sq, Sk]"),
            std::string::npos);
  EXPECT_NE(error("attention", attrs(ctx, 1, false),
                  {q, TensorType{DType::F32, {2, 4, 6}}, q}, {o, lse})
                .find("are not Q [b..., Sq, Dh]"),
            std::string::npos);
  EXPECT_NE(error("attention", attrs(ctx, 1, false), {q, q, q},
                  {o, TensorType{DType::F32, {2, 8}}})
                .find("result #1"),
            std::string::npos);
  EXPECT_EQ(
      error("attention", mlir::DictionaryAttr::get(&ctx), {q, q, q}, {o, lse}),
      "missing attribute 'scale'");
  EXPECT_NE(error("attention_grad", attrs(ctx, 1, false), {q, q, q, o, o, o},
                  {q, q, q})
                .find("output, lse and grad"),
            std::string::npos);
  EXPECT_NE(error("attention", attrs(ctx, 1, false), {q, q}, {o, lse})
                .find("expects 3 operand(s)"),
            std::string::npos);
  // GQA: Hkv must divide H, only the head dim may differ, rank >= 4.
  TensorType q4{DType::F32, {2, 6, 4, 8}}, o4{DType::F32, {2, 6, 4, 8}},
      lse4{DType::F32, {2, 6, 4}};
  for (TensorType kv : {TensorType{DType::F32, {2, 4, 4, 8}},
                        TensorType{DType::F32, {1, 2, 4, 8}}})
    EXPECT_NE(error("attention", attrs(ctx, 1, false), {q4, kv, kv}, {o4, lse4})
                  .find("Hkv heads dividing Q's H"),
              std::string::npos);
  EXPECT_NE(error("attention", attrs(ctx, 1, false),
                  {q, TensorType{DType::F32, {1, 4, 8}},
                   TensorType{DType::F32, {1, 4, 8}}},
                  {o, lse})
                .find("are not Q [b..., Sq, Dh]"),
            std::string::npos);
}

} // namespace

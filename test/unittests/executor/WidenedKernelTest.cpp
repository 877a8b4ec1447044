//===- WidenedKernelTest.cpp - bf16 kernels through the f32 adapter -------===//
//
// resolveKernel on bf16 operand/result types: the adapter widens bf16
// operands exactly, runs the f32 kernel and rounds bf16 results to nearest
// even, so a bf16 kernel's result equals the f32 kernel on the widened
// inputs, rounded. f32 results (cross_entropy's loss) stay f32.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Backend.h"

#include "runtime/backends/cpu/CpuKernels.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

#include <cmath>
#include <functional>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

namespace {

Tensor bf16Of(const Tensor &f) {
  Tensor h = Tensor::empty(DType::BF16, f.shape());
  cpu::convert(f, h);
  return h;
}

Tensor f32Of(const Tensor &h) {
  Tensor f = Tensor::empty(DType::F32, h.shape());
  cpu::convert(h, f);
  return f;
}

/// Builds a kernel's attributes in the test's context.
using AttrsFn = std::function<mlir::DictionaryAttr(mlir::MLIRContext &)>;

/// Runs kernel `name` (attributes from `attrs`, none by default) resolved for
/// `ins` -> `outTypes`.
std::vector<Tensor> runKernel(llvm::StringRef name,
                              std::vector<const Tensor *> ins,
                              std::vector<TensorType> outTypes,
                              AttrsFn attrs = nullptr) {
  mlir::MLIRContext ctx;
  std::vector<TensorType> inTypes;
  for (const Tensor *t : ins)
    inTypes.push_back({t->dtype(), t->shape()});
  Instruction inst;
  CompileOptions options;
  mlir::DictionaryAttr dict =
      attrs ? attrs(ctx) : mlir::DictionaryAttr::get(&ctx, {});
  if (llvm::Error e =
          resolveKernel(name, dict, inTypes, outTypes, options, inst)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return {};
  }
  EXPECT_TRUE(inst.allocateResults);
  std::vector<Tensor> outs;
  for (const TensorType &t : outTypes)
    outs.push_back(Tensor::empty(t.dtype, t.shape));
  if (llvm::Error e = inst.fn(ExecContext{}, ins, outs))
    ADD_FAILURE() << llvm::toString(std::move(e));
  return outs;
}

TEST(WidenedKernels, MatmulEqualsRoundedF32) {
  Tensor a = Tensor::fromVector<float>({2, 3},
                                       {0.1f, -1.3f, 2.7f, 3.3f, 0.01f, -0.5f});
  Tensor b =
      Tensor::fromVector<float>({3, 2}, {1.1f, 0.2f, -0.7f, 5.5f, 0.3f, -2.9f});
  Tensor ah = bf16Of(a), bh = bf16Of(b);
  // Reference: the f32 kernel on the widened bf16 values, rounded.
  Tensor aw = f32Of(ah), bw = f32Of(bh);
  Tensor ref = Tensor::empty(DType::F32, {2, 2});
  cpu::matmul(aw, bw, false, false, ref);
  std::vector<Tensor> out =
      runKernel("matmul", {&ah, &bh}, {TensorType{DType::BF16, {2, 2}}});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].dtype(), DType::BF16);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(out[0].data<BFloat16>()[i].bits,
              toBFloat16(ref.data<float>()[i]).bits)
        << i;
}

// f16 goes through the same adapter: the f32 kernel on exactly widened
// values, each result rounded to nearest even (overflowing to inf).
TEST(WidenedKernels, F16MatmulEqualsRoundedF32) {
  Tensor a = Tensor::fromVector<float>({2, 3},
                                       {0.1f, -1.3f, 2.7f, 3.3f, 0.01f, -0.5f});
  Tensor b =
      Tensor::fromVector<float>({3, 2}, {1.1f, 0.2f, -0.7f, 5.5f, 3e4f, -2.9f});
  Tensor ah = Tensor::empty(DType::F16, a.shape());
  Tensor bh = Tensor::empty(DType::F16, b.shape());
  cpu::convert(a, ah);
  cpu::convert(b, bh);
  Tensor aw = f32Of(ah), bw = f32Of(bh);
  Tensor ref = Tensor::empty(DType::F32, {2, 2});
  cpu::matmul(aw, bw, false, false, ref);
  std::vector<Tensor> out =
      runKernel("matmul", {&ah, &bh}, {TensorType{DType::F16, {2, 2}}});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].dtype(), DType::F16);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(out[0].data<Float16>()[i].bits,
              toFloat16(ref.data<float>()[i]).bits)
        << i;
  // 2.7 * 3e4 = 81000 (and more) is beyond 65504: inf, as on hardware.
  EXPECT_TRUE(std::isinf(toFloat(out[0].data<Float16>()[0])));
}

// rms_norm / rms_norm_grad and silu / silu_grad on bf16 and f16: the
// statistics are computed in f32 (or wider) from the exactly widened
// inputs and only the results are rounded.
TEST(WidenedKernels, RmsNormAndSiluEqualRoundedF32) {
  Tensor x = Tensor::fromVector<float>(
      {2, 4}, {0.1f, -1.3f, 2.7f, 3.3f, 0.01f, -0.5f, 60.0f, -7.25f});
  Tensor w = Tensor::fromVector<float>({4}, {1.1f, 0.2f, -0.7f, 5.5f});
  AttrsFn attrs = [](mlir::MLIRContext &ctx) {
    mlir::Builder b(&ctx);
    return b.getDictionaryAttr(
        {b.getNamedAttr("axis", b.getI64IntegerAttr(1)),
         b.getNamedAttr("epsilon", b.getF32FloatAttr(1e-6f))});
  };
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(dt));
    auto narrow = [&](const Tensor &f) {
      Tensor h = Tensor::empty(dt, f.shape());
      cpu::convert(f, h);
      return h;
    };
    auto bitsEqual = [&](const Tensor &got, const Tensor &ref32) {
      ASSERT_EQ(got.dtype(), dt);
      Tensor want = narrow(ref32);
      for (int64_t i = 0; i < got.numel(); ++i)
        EXPECT_EQ(static_cast<const uint16_t *>(got.raw())[i],
                  static_cast<const uint16_t *>(want.raw())[i])
            << i;
    };
    Tensor xh = narrow(x), wh = narrow(w);
    Tensor dyh = narrow(Tensor::fromVector<float>(
        {2, 4}, {0.5f, -0.25f, 1.0f, 2.0f, -1.5f, 0.125f, 0.75f, -3.0f}));
    Tensor xw = f32Of(xh), ww = f32Of(wh), dyw = f32Of(dyh);
    TensorType xt{dt, {2, 4}}, wt{dt, {4}};

    Tensor ref = Tensor::empty(DType::F32, {2, 4});
    cpu::rmsNorm(xw, ww, 1, 1e-6f, ref);
    std::vector<Tensor> out = runKernel("rms_norm", {&xh, &wh}, {xt}, attrs);
    ASSERT_EQ(out.size(), 1u);
    bitsEqual(out[0], ref);

    Tensor rdx = Tensor::empty(DType::F32, {2, 4});
    Tensor rdw = Tensor::empty(DType::F32, {4});
    cpu::rmsNormGrad(xw, ww, dyw, 1, 1e-6f, rdx, rdw);
    out = runKernel("rms_norm_grad", {&xh, &wh, &dyh}, {xt, wt}, attrs);
    ASSERT_EQ(out.size(), 2u);
    bitsEqual(out[0], rdx);
    bitsEqual(out[1], rdw);

    cpu::silu(xw, ref);
    out = runKernel("silu", {&xh}, {xt});
    ASSERT_EQ(out.size(), 1u);
    bitsEqual(out[0], ref);
    cpu::siluGrad(xw, dyw, ref);
    out = runKernel("silu_grad", {&xh, &dyh}, {xt});
    ASSERT_EQ(out.size(), 1u);
    bitsEqual(out[0], ref);
  }
}

TEST(WidenedKernels, CrossEntropyKeepsF32Loss) {
  Tensor logits = Tensor::fromVector<float>(
      {2, 3}, {0.5f, -1.0f, 2.0f, 0.0f, 0.25f, -0.75f});
  Tensor labels = Tensor::fromVector<int64_t>({2}, {2, 0});
  Tensor lh = bf16Of(logits);
  Tensor lw = f32Of(lh);
  Tensor ref = Tensor::empty(DType::F32, {});
  ASSERT_FALSE(bool(cpu::crossEntropy(lw, labels, ref)));
  std::vector<Tensor> out =
      runKernel("cross_entropy", {&lh, &labels}, {TensorType{DType::F32, {}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data<float>()[0], ref.data<float>()[0]);
}

TEST(WidenedKernels, ErrorsNameTheKernelProblem) {
  mlir::MLIRContext ctx;
  Instruction inst;
  CompileOptions options;
  TensorType h{DType::BF16, {2}};
  llvm::Error e = resolveKernel("frobnicate", mlir::DictionaryAttr::get(&ctx),
                                {h}, {h}, options, inst);
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(llvm::toString(std::move(e)), "unknown kernel");
  // Shape checks still apply on the widened types.
  llvm::Error e2 =
      resolveKernel("add", mlir::DictionaryAttr::get(&ctx),
                    {h, TensorType{DType::BF16, {3}}}, {h}, options, inst);
  ASSERT_TRUE(bool(e2));
  llvm::consumeError(std::move(e2));
}

} // namespace

//===- KernelDescTest.cpp - tsrt kernels decoded into typed descriptors ---===//
//
// decodeKernel: the kind comes from the name (one table, every name round
// trips), the attributes come out typed and normalised (negative axes,
// sorted reduction axes, optimizer hyper-parameters from the manifest), the
// attention shapes (with GQA's group) and the vocab-parallel scratch are
// derived, 16-bit kernels are validated on widened types while data
// movement is not, and every check is a load error with the executor's
// message. checkCollective normalises dims and checks the blocks.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/KernelDesc.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/BackendRegistry.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/JSON.h"
#include "gtest/gtest.h"

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

namespace {

TensorType f32(std::vector<int64_t> shape) { return {DType::F32, shape}; }

struct Decoder {
  mlir::MLIRContext ctx;
  mlir::Builder b{&ctx};
  CompileOptions options;

  llvm::Expected<KernelDesc> decode(llvm::StringRef name,
                                    std::vector<mlir::NamedAttribute> attrs,
                                    std::vector<TensorType> ins,
                                    std::vector<TensorType> outs, int comm = -1,
                                    int64_t commSize = 0) {
    return decodeKernel(name, b.getDictionaryAttr(attrs), ins, outs, options,
                        comm, commSize);
  }
  std::string error(llvm::StringRef name,
                    std::vector<mlir::NamedAttribute> attrs,
                    std::vector<TensorType> ins, std::vector<TensorType> outs) {
    llvm::Expected<KernelDesc> d = decode(name, attrs, ins, outs);
    if (d)
      return "";
    return llvm::toString(d.takeError());
  }
};

TEST(KernelDesc, EveryNameMapsToOneKind) {
  for (size_t i = 0; i < kNumKernelKinds; ++i) {
    KernelKind k = static_cast<KernelKind>(i);
    std::optional<KernelKind> back = kernelKindOf(kernelName(k));
    ASSERT_TRUE(back.has_value()) << kernelName(k).str();
    EXPECT_EQ(*back, k);
  }
  EXPECT_EQ(kernelKindOf("reduce_mean"), KernelKind::ReduceMean);
  EXPECT_FALSE(kernelKindOf("Matmul").has_value());
  EXPECT_TRUE(isDataMovement(KernelKind::Gather));
  EXPECT_FALSE(isDataMovement(KernelKind::Matmul));
}

TEST(KernelDesc, MatmulAttributesAreTyped) {
  Decoder t;
  llvm::Expected<KernelDesc> d = t.decode(
      "matmul", {t.b.getNamedAttr("transpose_rhs", t.b.getBoolAttr(1))},
      {f32({2, 3, 4}), f32({5, 4})}, {f32({2, 3, 5})});
  ASSERT_TRUE(static_cast<bool>(d)) << llvm::toString(d.takeError());
  EXPECT_EQ(d->kind, KernelKind::Matmul);
  EXPECT_EQ(d->name(), "matmul");
  EXPECT_FALSE(d->get<MatmulAttrs>().transposeLhs);
  EXPECT_TRUE(d->get<MatmulAttrs>().transposeRhs);
  EXPECT_FALSE(d->widened);
  EXPECT_FALSE(d->hasGridAxes());
  // The inferred result is compared with the declared one.
  EXPECT_EQ(
      t.error("matmul", {}, {f32({2, 3, 4}), f32({4, 5})}, {f32({2, 3, 6})}),
      "result #0 has type tensor<2x3x6xf32>, expected "
      "tensor<2x3x5xf32>");
}

TEST(KernelDesc, ReductionAxesAreNormalisedAndSorted) {
  Decoder t;
  llvm::Expected<KernelDesc> d =
      t.decode("reduce_sum",
               {t.b.getNamedAttr("axes", t.b.getDenseI64ArrayAttr({-1, 0}))},
               {f32({2, 3, 4})}, {f32({3})});
  ASSERT_TRUE(static_cast<bool>(d)) << llvm::toString(d.takeError());
  EXPECT_EQ(d->get<ReduceAttrs>().axes, (std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(d->get<ReduceAttrs>().keepDim);
  EXPECT_EQ(
      t.error("reduce_sum",
              {t.b.getNamedAttr("axes", t.b.getDenseI64ArrayAttr({1, -2}))},
              {f32({2, 3, 4})}, {f32({2, 4})}),
      "attribute 'axes' repeats an axis");
  EXPECT_EQ(t.error("reduce_sum", {}, {f32({2})}, {f32({2})}),
            "missing attribute 'axes'");
}

TEST(KernelDesc, NormAndGeluAttributes) {
  Decoder t;
  llvm::Expected<KernelDesc> d =
      t.decode("layer_norm",
               {t.b.getNamedAttr("axis", t.b.getI64IntegerAttr(-1)),
                t.b.getNamedAttr("epsilon", t.b.getF32FloatAttr(1e-5f))},
               {f32({2, 8}), f32({8}), f32({8})}, {f32({2, 8})});
  ASSERT_TRUE(static_cast<bool>(d)) << llvm::toString(d.takeError());
  EXPECT_EQ(d->get<NormAttrs>().axis, 1);
  EXPECT_EQ(d->get<NormAttrs>().epsilon, 1e-5f);
  llvm::Expected<KernelDesc> g = t.decode(
      "gelu_grad", {t.b.getNamedAttr("approximate", t.b.getStringAttr("tanh"))},
      {f32({4}), f32({4})}, {f32({4})});
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->get<GeluAttrs>().approximate, GeluApproximate::Tanh);
  EXPECT_EQ(t.error("gelu",
                    {t.b.getNamedAttr("approximate", t.b.getStringAttr("erf"))},
                    {f32({4})}, {f32({4})}),
            "attribute 'approximate' must be \"none\" or \"tanh\", got "
            "\"erf\"");
}

TEST(KernelDesc, AttentionShapesAndGroupedQueries) {
  Decoder t;
  // Q [B=2, H=6, S=4, Dh=8], K/V with Hkv = 2 heads: group 3.
  TensorType q = f32({2, 6, 4, 8}), kv = f32({2, 2, 4, 8});
  llvm::Expected<KernelDesc> d =
      t.decode("attention",
               {t.b.getNamedAttr("scale", t.b.getF32FloatAttr(0.5f)),
                t.b.getNamedAttr("causal", t.b.getBoolAttr(true))},
               {q, kv, kv}, {q, f32({2, 6, 4})});
  ASSERT_TRUE(static_cast<bool>(d)) << llvm::toString(d.takeError());
  const AttentionAttrs &a = d->get<AttentionAttrs>();
  EXPECT_EQ(a.batch, 12);
  EXPECT_EQ(a.sq, 4);
  EXPECT_EQ(a.sk, 4);
  EXPECT_EQ(a.dh, 8);
  EXPECT_EQ(a.dv, 8);
  EXPECT_EQ(a.group, 3);
  EXPECT_EQ(a.scale, 0.5f);
  EXPECT_TRUE(a.causal);
  EXPECT_FALSE(a.hasMask);
  EXPECT_EQ(a.ringSize, 1);
  // Ring attention: ring_size must match the grid_axes' ranks.
  llvm::Expected<KernelDesc> ring =
      t.decode("attention",
               {t.b.getNamedAttr("scale", t.b.getF32FloatAttr(1)),
                t.b.getNamedAttr("ring_size", t.b.getI64IntegerAttr(2))},
               {q, kv, kv}, {q, f32({2, 6, 4})}, /*comm=*/0, /*commSize=*/4);
  ASSERT_FALSE(static_cast<bool>(ring));
  EXPECT_EQ(llvm::toString(ring.takeError()),
            "ring_size 2 does not match the 4 ranks of its grid_axes");
}

TEST(KernelDesc, HyperParametersComeFromTheManifestWhenTheyRoundTheSame) {
  Decoder t;
  llvm::json::Object optimizer{{"beta1", 0.9}, {"weight_decay", 0.25}};
  t.options.optimizer = &optimizer;
  llvm::Expected<KernelDesc> d =
      t.decode("adamw_update",
               {t.b.getNamedAttr("beta1", t.b.getF32FloatAttr(0.9f)),
                t.b.getNamedAttr("beta2", t.b.getF32FloatAttr(0.999f)),
                t.b.getNamedAttr("eps", t.b.getF32FloatAttr(1e-8f)),
                t.b.getNamedAttr("weight_decay", t.b.getF32FloatAttr(0.5f))},
               {f32({3}), f32({3}), f32({3}), f32({3}), f32({}), f32({})},
               {f32({3}), f32({3}), f32({3})});
  ASSERT_TRUE(static_cast<bool>(d)) << llvm::toString(d.takeError());
  EXPECT_EQ(d->get<AdamwAttrs>().beta1, 0.9); // the manifest's double
  // 0.25 does not round to the attribute's 0.5: the attribute wins.
  EXPECT_EQ(d->get<AdamwAttrs>().weightDecay, 0.5);
}

TEST(KernelDesc, TheLearningRateIsAnF32ScalarOperand) {
  Decoder t;
  auto wd = t.b.getNamedAttr("weight_decay", t.b.getF32FloatAttr(0.0f));
  llvm::Expected<KernelDesc> d =
      t.decode("sgd_update", {wd}, {f32({3}), f32({3}), f32({})}, {f32({3})});
  ASSERT_TRUE(static_cast<bool>(d)) << llvm::toString(d.takeError());
  // The old form without the lr operand.
  llvm::Expected<KernelDesc> old =
      t.decode("sgd_update", {wd}, {f32({3}), f32({3})}, {f32({3})});
  ASSERT_FALSE(static_cast<bool>(old));
  EXPECT_EQ(llvm::toString(old.takeError()),
            "expects 3 operand(s) and 1 result(s), got 2 and 1");
  llvm::Expected<KernelDesc> wide =
      t.decode("sgd_update", {wd}, {f32({3}), f32({3}), f32({2})}, {f32({3})});
  ASSERT_FALSE(static_cast<bool>(wide));
  EXPECT_EQ(llvm::toString(wide.takeError()),
            "lr must have one element, got tensor<2xf32>");
}

TEST(KernelDesc, SixteenBitKernelsAreCheckedWidened) {
  Decoder t;
  TensorType h{DType::BF16, {2, 2}};
  llvm::Expected<KernelDesc> d = t.decode("matmul", {}, {h, h}, {h});
  ASSERT_TRUE(static_cast<bool>(d)) << llvm::toString(d.takeError());
  EXPECT_TRUE(d->widened);
  EXPECT_TRUE(d->hasFloat16());
  EXPECT_EQ(d->operands[0], h); // the declared types are kept
  // Data movement takes 16-bit types as they are.
  llvm::Expected<KernelDesc> r =
      t.decode("reshape", {}, {h}, {TensorType{DType::BF16, {4}}});
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_FALSE(r->widened);
  EXPECT_EQ(t.error("frobnicate", {}, {h}, {h}), "unknown kernel");
}

TEST(KernelDesc, VocabParallelCrossEntropyScratch) {
  Decoder t;
  TensorType logits = f32({4, 8}), labels{DType::I64, {4}};
  llvm::Expected<KernelDesc> plain =
      t.decode("cross_entropy", {}, {logits, labels}, {f32({})});
  ASSERT_TRUE(static_cast<bool>(plain)) << llvm::toString(plain.takeError());
  EXPECT_EQ(plain->get<CrossEntropyAttrs>().scratchPerRow, 0);
  llvm::Expected<KernelDesc> vp = t.decode(
      "cross_entropy_grad", {}, {logits, labels, f32({})}, {logits}, 1, 2);
  ASSERT_TRUE(static_cast<bool>(vp)) << llvm::toString(vp.takeError());
  EXPECT_EQ(vp->commIndex, 1);
  EXPECT_EQ(vp->commSize, 2);
  EXPECT_EQ(vp->get<CrossEntropyAttrs>().scratchPerRow, 2);
}

TEST(KernelDesc, CollectivesAreCheckedAndNormalised) {
  CollectiveSpec gather{CollectiveOp::AllGather, 0, 2, -1, 0, false};
  ASSERT_FALSE(checkCollective(gather, f32({3, 4}), f32({3, 8})));
  EXPECT_EQ(gather.dim, 1);
  CollectiveSpec scatter{CollectiveOp::ReduceScatter, 0, 3, 1, 0, false};
  llvm::Error e = checkCollective(scatter, f32({3, 4}), f32({3, 1}));
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(llvm::toString(std::move(e)),
            "dimension 1 of tensor<3x4xf32> is not divisible by 3 ranks");
  CollectiveSpec a2a{CollectiveOp::AllToAll, 0, 2, 0, -1, false};
  ASSERT_FALSE(checkCollective(a2a, f32({4, 3}), f32({2, 6})));
  EXPECT_EQ(a2a.dim2, 1);
}

// Every registered backend binds every kernel kind (a kernel on each
// backend, DESIGN.md's op contract), and says so without a device.
TEST(KernelDesc, EveryBackendBindsEveryKind) {
  std::vector<std::string> all;
  for (size_t i = 0; i < kNumKernelKinds; ++i)
    all.push_back(kernelName(static_cast<KernelKind>(i)).str());
  for (const std::string &backend : registeredBackendNames())
    EXPECT_EQ(registeredKernelNames(backend), all) << backend;
}

} // namespace

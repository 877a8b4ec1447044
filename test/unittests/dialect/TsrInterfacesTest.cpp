//===- TsrInterfacesTest.cpp - tsr op interface answers -------------------===//
//
// The op facts passes and the planner ask through interfaces instead of
// switching on op names: the precision policy (tsr-mixed-precision), the
// optimizer-update contract (tsr-mixed-precision, tsr-zero-sharding), the
// kernel's own messages and calibration units (the step-cost planner) and
// the selective-recompute trait (tsr-recompute).
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace tessera;

namespace {

class TsrInterfacesTest : public ::testing::Test {
protected:
  TsrInterfacesTest() {
    context
        .loadDialect<tsr::TsrDialect, func::FuncDialect, shard::ShardDialect>();
  }
  /// Parses `text` and returns the ops of its function @f (nested ops
  /// included, in order); fails the test on a parse error.
  SmallVector<Operation *> ops(llvm::StringRef text) {
    module = parseSourceString<ModuleOp>(text, &context);
    EXPECT_TRUE(module);
    SmallVector<Operation *> result;
    if (!module)
      return result;
    auto fn = module->lookupSymbol<func::FuncOp>("f");
    EXPECT_TRUE(fn);
    if (fn)
      fn.walk([&](Operation *op) {
        if (op != fn && !isa<func::ReturnOp>(op))
          result.push_back(op);
      });
    return result;
  }
  /// The kernel messages (CostOpInterface) of each op of `text`'s @f.
  SmallVector<SmallVector<tsr::KernelMessage>>
  kernelMessages(llvm::StringRef text) {
    SmallVector<SmallVector<tsr::KernelMessage>> result;
    for (Operation *op : ops(text))
      result.push_back(cast<tsr::CostOpInterface>(op).getKernelMessages());
    return result;
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

using Kind = tsr::KernelMessage::Kind;

TEST_F(TsrInterfacesTest, PrecisionPolicy) {
  SmallVector<Operation *> o = ops(R"mlir(
func.func @f(%x: tensor<4x8xf32>, %l: tensor<4xi64>, %s: tensor<f32>,
             %q: tensor<2x16x8xf32>) {
  %a = tsr.add %x, %x : tensor<4x8xf32>
  %ce = tsr.cross_entropy %x, %l : tensor<4x8xf32>, tensor<4xi64> -> tensor<f32>
  %g = tsr.cross_entropy_grad %x, %l, %s : tensor<4x8xf32>, tensor<4xi64>, tensor<f32>
  %o, %lse = tsr.attention %q, %q, %q {scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32> -> tensor<2x16x8xf32>, tensor<2x16xf32>
  %dq, %dk, %dv = tsr.attention_grad %q, %q, %q, %o, %lse, %o {scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16xf32>
  return
}
)mlir");
  ASSERT_EQ(o.size(), 5u);
  auto policy = [&](size_t i) {
    return cast<tsr::MixedPrecisionOpInterface>(o[i]);
  };
  // add: nothing stays f32, no seed.
  for (unsigned i = 0; i < 2; ++i)
    EXPECT_FALSE(policy(0).keepsF32Operand(i));
  EXPECT_FALSE(policy(0).keepsF32Result(0));
  EXPECT_FALSE(policy(0).getLossSeedOperand().has_value());
  // cross_entropy: the summed loss (result 0), not the logits.
  EXPECT_TRUE(policy(1).keepsF32Result(0));
  EXPECT_FALSE(policy(1).keepsF32Operand(0));
  EXPECT_FALSE(policy(1).getLossSeedOperand().has_value());
  // cross_entropy_grad: the seed (operand 2) stays f32 and is the loss
  // seed; the logits and the result do not.
  EXPECT_FALSE(policy(2).keepsF32Operand(0));
  EXPECT_TRUE(policy(2).keepsF32Operand(2));
  EXPECT_FALSE(policy(2).keepsF32Result(0));
  EXPECT_EQ(policy(2).getLossSeedOperand(), std::optional<unsigned>(2));
  // attention: lse (result 1), not the output.
  EXPECT_FALSE(policy(3).keepsF32Result(0));
  EXPECT_TRUE(policy(3).keepsF32Result(1));
  EXPECT_FALSE(policy(3).keepsF32Operand(0));
  // attention_grad: lse (operand 4) only.
  for (unsigned i = 0; i < 6; ++i)
    EXPECT_EQ(policy(4).keepsF32Operand(i), i == 4) << "operand " << i;
  for (unsigned i = 0; i < 3; ++i)
    EXPECT_FALSE(policy(4).keepsF32Result(i));
}

TEST_F(TsrInterfacesTest, OptimizerUpdates) {
  SmallVector<Operation *> o = ops(R"mlir(
func.func @f(%p: tensor<4x8xf32>, %g: tensor<4x8xf32>, %m: tensor<4x8xf32>,
             %v: tensor<4x8xf32>, %t: tensor<f32>, %lr: tensor<f32>) {
  %p1 = tsr.sgd_update %p, %g, %lr {weight_decay = 0.0 : f32} : tensor<4x8xf32>
  %p2, %m2, %v2 = tsr.adamw_update %p, %g, %m, %v, %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4x8xf32>, tensor<f32>
  %a = tsr.add %p, %g : tensor<4x8xf32>
  return
}
)mlir");
  ASSERT_EQ(o.size(), 3u);
  Block &body = module->lookupSymbol<func::FuncOp>("f").front();
  auto sgd = cast<tsr::OptimizerUpdateOpInterface>(o[0]);
  EXPECT_EQ(sgd.getParamOperand().get(), body.getArgument(0));
  EXPECT_EQ(sgd.getParamOperand().getOperandNumber(), 0u);
  EXPECT_EQ(sgd.getGradOperand().get(), body.getArgument(1));
  EXPECT_EQ(sgd.getGradOperand().getOperandNumber(), 1u);
  EXPECT_EQ(sgd.getLearningRateOperand().get(), body.getArgument(5));
  EXPECT_EQ(sgd.getLearningRateOperand().getOperandNumber(), 2u);
  EXPECT_TRUE(sgd.getOptimizerState().empty());
  EXPECT_EQ(sgd.getUpdatedParam(), o[0]->getResult(0));
  EXPECT_TRUE(sgd.getUpdatedOptimizerState().empty());

  auto adamw = cast<tsr::OptimizerUpdateOpInterface>(o[1]);
  EXPECT_EQ(adamw.getParamOperand().get(), body.getArgument(0));
  EXPECT_EQ(adamw.getGradOperand().get(), body.getArgument(1));
  EXPECT_EQ(adamw.getLearningRateOperand().get(), body.getArgument(5));
  EXPECT_EQ(adamw.getLearningRateOperand().getOperandNumber(), 5u);
  SmallVector<Value> state = adamw.getOptimizerState();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0], body.getArgument(2)); // exp_avg
  EXPECT_EQ(state[1], body.getArgument(3)); // exp_avg_sq
  EXPECT_EQ(adamw.getUpdatedParam(), o[1]->getResult(0));
  ResultRange updated = adamw.getUpdatedOptimizerState();
  ASSERT_EQ(updated.size(), 2u);
  EXPECT_EQ(updated[0], o[1]->getResult(1));
  EXPECT_EQ(updated[1], o[1]->getResult(2));

  EXPECT_FALSE(isa<tsr::OptimizerUpdateOpInterface>(o[2]));
}

TEST_F(TsrInterfacesTest, RingAttentionMessages) {
  // Local K, V [2, 16, 8] f32: 2 · 256 floats · 4 bytes = 2048 bytes.
  SmallVector<SmallVector<tsr::KernelMessage>> m = kernelMessages(R"mlir(
func.func @f(%q: tensor<2x16x8xf32>) {
  %o, %lse = tsr.attention %q, %q, %q {scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32> -> tensor<2x16x8xf32>, tensor<2x16xf32>
  %ro, %rl = tsr.attention %q, %q, %q {grid_axes = array<i16: 1, 2>, ring_size = 3 : i64, scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32> -> tensor<2x16x8xf32>, tensor<2x16xf32>
  %dq, %dk, %dv = tsr.attention_grad %q, %q, %q, %ro, %rl, %ro {grid_axes = array<i16: 1, 2>, ring_size = 3 : i64, scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16xf32>
  %u, %ul = tsr.attention %q, %q, %q {ring_size = 2 : i64, scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32> -> tensor<2x16x8xf32>, tensor<2x16xf32>
  return
}
)mlir");
  // Plain attention, and one not yet partitioned (no grid_axes): none.
  // Forward ring of 3: two rotations of K and V. Backward: two rotations of
  // K, V, dK and dV, then dK and dV once more.
  tsr::KernelMessage kv{Kind::SendRecv, {1, 2}, 2048};
  tsr::KernelMessage kvGrads{Kind::SendRecv, {1, 2}, 4096};
  using Messages = SmallVector<tsr::KernelMessage>;
  EXPECT_EQ(m,
            (SmallVector<Messages>{{}, {kv, kv}, {kvGrads, kvGrads, kv}, {}}));
}

TEST_F(TsrInterfacesTest, VocabParallelCrossEntropyMessages) {
  // N = 6 rows: the f64 row max (48 bytes), then the sums (96 bytes
  // forward with the target logits, 48 backward).
  SmallVector<SmallVector<tsr::KernelMessage>> m = kernelMessages(R"mlir(
func.func @f(%x: tensor<6x8xf32>, %l: tensor<6xi64>, %s: tensor<f32>) {
  %ce = tsr.cross_entropy %x, %l : tensor<6x8xf32>, tensor<6xi64> -> tensor<f32>
  %vce = tsr.cross_entropy %x, %l {grid_axes = array<i16: 0>} : tensor<6x8xf32>, tensor<6xi64> -> tensor<f32>
  %vg = tsr.cross_entropy_grad %x, %l, %s {grid_axes = array<i16: 0>} : tensor<6x8xf32>, tensor<6xi64>, tensor<f32>
  %e = tsr.cross_entropy %x, %l {grid_axes = array<i16>} : tensor<6x8xf32>, tensor<6xi64> -> tensor<f32>
  return
}
)mlir");
  // The plain op, and one with no axes (not vocab-parallel): none.
  tsr::KernelMessage rowMax{Kind::AllReduce, {0}, 48};
  tsr::KernelMessage sums{Kind::AllReduce, {0}, 96};
  using Messages = SmallVector<tsr::KernelMessage>;
  EXPECT_EQ(m,
            (SmallVector<Messages>{{}, {rowMax, sums}, {rowMax, rowMax}, {}}));
}

TEST_F(TsrInterfacesTest, MeasuredUnits) {
  SmallVector<Operation *> o = ops(R"mlir(
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %q: tensor<2x16x8xf32>) {
  %c = tsr.constant dense<1.0> : tensor<4x8xf32>
  %e = tsr.exp %x : tensor<4x8xf32>
  %m = tsr.matmul %x, %w : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
  %o, %lse = tsr.attention %q, %q, %q {scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32> -> tensor<2x16x8xf32>, tensor<2x16xf32>
  %dq, %dk, %dv = tsr.attention_grad %q, %q, %q, %o, %lse, %o {scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16xf32>
  return
}
)mlir");
  SmallVector<int64_t> units;
  for (Operation *op : o)
    units.push_back(cast<tsr::CostOpInterface>(op).getMeasuredUnits());
  // The constant: -1 (no operands); exp: the elements of operand 0; the
  // matmul: -1 (GEMM-like: timed by the GEMM table); the fused attention
  // kernels: the scores they form, 2 · 16 · 16.
  ASSERT_EQ(units, (SmallVector<int64_t>{-1, 32, -1, 512, 512}));
  EXPECT_EQ(units[3], cast<tsr::CostOpInterface>(o[3]).getTranscendentals());
}

// The fused residual add + norm ops (tsr-fuse-norm) cost one tensor read
// (forward) or two accesses (backward: the input gradient written and read
// back) fewer than the pair they replace, so the step model prices the
// saving; FLOPs and transcendentals are counted per element and row.
TEST_F(TsrInterfacesTest, FusedNormCost) {
  SmallVector<Operation *> o = ops(R"mlir(
func.func @f(%x: tensor<16x64xf32>, %r: tensor<16x64xf32>, %g: tensor<64xf32>) {
  %h = tsr.add %x, %r : tensor<16x64xf32>
  %y = tsr.layer_norm %h, %g, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  %fh, %fy = tsr.add_layer_norm %x, %r, %g, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  %dx, %dg, %db = tsr.layer_norm_grad %h, %g, %x {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  %s = tsr.add %r, %dx : tensor<16x64xf32>
  %fs, %fdg, %fdb = tsr.layer_norm_grad_add %h, %g, %x, %r {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  %ry = tsr.rms_norm %h, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  %rh, %rfy = tsr.add_rms_norm %x, %r, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  %rdx, %rdg = tsr.rms_norm_grad %h, %g, %x {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  %rs, %rfdg = tsr.rms_norm_grad_add %h, %g, %x, %r {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<16x64xf32>, tensor<64xf32>
  return
}
)mlir");
  ASSERT_EQ(o.size(), 10u);
  auto cost = [&](size_t i) { return cast<tsr::CostOpInterface>(o[i]); };
  const int64_t tensorBytes = 16 * 64 * 4, rows = 16, n = 16 * 64;
  // add (3 tensors) + layer_norm (2 + 2 params) vs 4 tensors + 2 params.
  EXPECT_EQ(cost(0).getBytesAccessed() + cost(1).getBytesAccessed() -
                cost(2).getBytesAccessed(),
            tensorBytes);
  EXPECT_EQ(cost(2).getFlops(), 9 * n + 3 * rows);
  EXPECT_EQ(cost(2).getTranscendentals(), rows);
  // layer_norm_grad + add vs the fused gradient: dx is neither written nor
  // read back.
  EXPECT_EQ(cost(3).getBytesAccessed() + cost(4).getBytesAccessed() -
                cost(5).getBytesAccessed(),
            2 * tensorBytes);
  EXPECT_EQ(cost(5).getFlops(), 18 * n + 4 * rows);
  EXPECT_EQ(cost(0).getBytesAccessed() + cost(6).getBytesAccessed() -
                cost(7).getBytesAccessed(),
            tensorBytes);
  EXPECT_EQ(cost(7).getFlops(), cost(6).getFlops() + n);
  EXPECT_EQ(cost(8).getBytesAccessed() + cost(4).getBytesAccessed() -
                cost(9).getBytesAccessed(),
            2 * tensorBytes);
  EXPECT_EQ(cost(9).getFlops(), cost(8).getFlops() + n);
  EXPECT_EQ(cost(9).getTranscendentals(), rows);
}

TEST_F(TsrInterfacesTest, SelectiveRecomputeTrait) {
  SmallVector<Operation *> o = ops(R"mlir(
func.func @f(%q: tensor<2x16x8xf32>) {
  %o, %lse = tsr.attention %q, %q, %q {scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32> -> tensor<2x16x8xf32>, tensor<2x16xf32>
  %dq, %dk, %dv = tsr.attention_grad %q, %q, %q, %o, %lse, %o {scale = 0.5 : f32} : tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16xf32>
  %s = tsr.softmax %q {axis = 2 : i64} : tensor<2x16x8xf32>
  return
}
)mlir");
  ASSERT_EQ(o.size(), 3u);
  EXPECT_TRUE(o[0]->hasTrait<tsr::SelectiveRecompute>());
  EXPECT_FALSE(o[1]->hasTrait<tsr::SelectiveRecompute>());
  EXPECT_FALSE(o[2]->hasTrait<tsr::SelectiveRecompute>());
}

TEST_F(TsrInterfacesTest, DiscardableAttrNamesAndAccessors) {
  // The names the IR (and every lit test) spells.
  EXPECT_EQ(tsr::kRoleAttrName, "tsr.role");
  EXPECT_EQ(tsr::kNameAttrName, "tsr.name");
  EXPECT_EQ(tsr::kInitAttrName, "tsr.init");
  EXPECT_EQ(tsr::kWeightsAttrName, "tsr.weights");
  EXPECT_EQ(tsr::kGridAxesAttrName, "tsr.grid_axes");
  EXPECT_EQ(tsr::kForwardAttrName, "tsr.fwd");
  EXPECT_EQ(tsr::kBackwardAttrName, "tsr.bwd");
  EXPECT_EQ(tsr::kShardingAttrName, "tsr.sharding");
  EXPECT_EQ(tsr::kShardingsAttrName, "tsr.shardings");
  EXPECT_EQ(tsr::kVocabParallelAttrName, "tsr.vocab_parallel");
  EXPECT_EQ(tsr::kZeroReplicatedAttrName, "tsr.zero_replicated");
  EXPECT_TRUE(tsr::isTsrAttrName("tsr.role"));
  EXPECT_FALSE(tsr::isTsrAttrName("tsrt.role"));
  EXPECT_FALSE(tsr::isTsrAttrName("tsr"));
  EXPECT_FALSE(tsr::isTsrAttrName("ts.r"));

  SmallVector<Operation *> o = ops(R"mlir(
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @f(%p: tensor<4x8xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1], []]>},
               %x: tensor<4x8xf32> {tsr.role = 3 : i64})
      -> (tensor<4x8xf32> {tsr.name = "y", tsr.role = "loss"}) {
    %a = tsr.add %p, %x {tsr.fwd = 7 : i64} : tensor<4x8xf32>
    %b = tsr.neg %a {tsr.bwd = 7 : i64} : tensor<4x8xf32>
    return %b : tensor<4x8xf32>
  }
}
)mlir");
  ASSERT_EQ(o.size(), 2u);
  auto fn = module->lookupSymbol<func::FuncOp>("f");
  EXPECT_EQ(tsr::getArgName(fn, 0).getValue(), "w");
  EXPECT_EQ(tsr::getArgRole(fn, 0).getValue(), "param");
  EXPECT_FALSE(tsr::getArgName(fn, 1));
  EXPECT_FALSE(tsr::getArgRole(fn, 1)); // not a string
  EXPECT_EQ(tsr::getResultName(fn, 0).getValue(), "y");
  EXPECT_EQ(tsr::getResultRole(fn, 0).getValue(), "loss");
  tsr::ShardingAttr sharding = tsr::getArgSharding(fn, 0);
  ASSERT_TRUE(sharding);
  EXPECT_EQ(sharding.getDimAxes(0), ArrayRef<int16_t>({1}));
  EXPECT_FALSE(tsr::getArgSharding(fn, 1));
  EXPECT_FALSE(tsr::getResultSharding(fn, 0));
  ArrayAttr axes = tsr::getGridAxes(*module);
  ASSERT_TRUE(axes);
  EXPECT_EQ(axes.size(), 2u);
  tsr::setGridAxes(*module, Builder(&context).getStrArrayAttr({"pp"}));
  EXPECT_EQ(cast<StringAttr>(tsr::getGridAxes(*module)[0]).getValue(), "pp");
  EXPECT_EQ(tsr::getForwardId(o[0]).getInt(), 7);
  EXPECT_FALSE(tsr::getBackwardId(o[0]));
  EXPECT_FALSE(tsr::isBackward(o[0]));
  EXPECT_EQ(tsr::getBackwardId(o[1]).getInt(), 7);
  EXPECT_TRUE(tsr::isBackward(o[1]));
}

} // namespace

namespace {

/// tsr.fused_elementwise's cost is the unfused ops' FLOPs and
/// transcendentals, and its bytes are its inputs and results only: less
/// than the unfused ops' bytes by the intermediates' writes and reads and
/// the broadcast's materialisation.
TEST_F(TsrInterfacesTest, FusedElementwiseCostShowsTheSaving) {
  SmallVector<Operation *> o = ops(R"mlir(
func.func @f(%x: tensor<8x64xf32>, %bias: tensor<64xf32>, %r: tensor<8x64xf32>) {
  %b = tsr.broadcast %bias : tensor<64xf32> -> tensor<8x64xf32>
  %s = tsr.add %x, %b : tensor<8x64xf32>
  %y = tsr.gelu %s {approximate = "tanh"} : tensor<8x64xf32>
  %z = tsr.silu %y : tensor<8x64xf32>
  %f = tsr.fused_elementwise %x, %bias {ops = ["add", "gelu_tanh", "silu"], args = array<i64: 0, 1, 2, 3>, outputs = array<i64: 4>} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  return
}
)mlir");
  ASSERT_EQ(o.size(), 5u);
  auto cost = [&](size_t i) { return cast<tsr::CostOpInterface>(o[i]); };
  int64_t flops = 0, transcendentals = 0, bytes = 0;
  for (size_t i = 1; i < 4; ++i) { // add, gelu, silu (the broadcast moves)
    flops += cost(i).getFlops();
    transcendentals += cost(i).getTranscendentals();
  }
  for (size_t i = 0; i < 4; ++i)
    bytes += cost(i).getBytesAccessed();
  EXPECT_EQ(cost(4).getFlops(), flops);
  EXPECT_EQ(flops, 512 * (1 + 1 + 4));
  EXPECT_EQ(cost(4).getTranscendentals(), transcendentals);
  EXPECT_EQ(transcendentals, 512 * 2);
  // x, bias and the result: 2 * 512 * 4 + 64 * 4 bytes.
  EXPECT_EQ(cost(4).getBytesAccessed(), 2 * 512 * 4 + 64 * 4);
  EXPECT_LT(cost(4).getBytesAccessed(), bytes);
  EXPECT_EQ(cost(4).getMeasuredUnits(), -1);
}

/// Its sharding rule: the result's dims are factors shared by every
/// result; the bias's dim takes the result's last factor, a size-1 dim a
/// factor of its own, a scalar none.
TEST_F(TsrInterfacesTest, FusedElementwiseShardingRule) {
  SmallVector<Operation *> o = ops(R"mlir(
func.func @f(%x: tensor<8x64xf32>, %s: tensor<f32>, %c: tensor<8x1xf32>) {
  %y, %z = tsr.fused_elementwise %x, %s, %c {ops = ["mul", "add"], args = array<i64: 0, 1, 3, 2>, outputs = array<i64: 4, 3>} : (tensor<8x64xf32>, tensor<f32>, tensor<8x1xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>)
  return
}
)mlir");
  ASSERT_EQ(o.size(), 1u);
  tsr::ShardingRule rule =
      cast<tsr::ShardingRuleOpInterface>(o[0]).getShardingRule();
  ASSERT_EQ(rule.results.size(), 2u);
  ASSERT_EQ(rule.operands.size(), 3u);
  EXPECT_EQ(rule.results[0], rule.results[1]);
  ASSERT_EQ(rule.results[0].size(), 2u);
  EXPECT_EQ(rule.operands[0], rule.results[0]);
  EXPECT_TRUE(rule.operands[1].empty());
  ASSERT_EQ(rule.operands[2].size(), 2u);
  EXPECT_EQ(rule.operands[2][0], rule.results[0][0]);
  EXPECT_NE(rule.operands[2][1], rule.results[0][1]);
  EXPECT_TRUE(rule.linearGroups.empty());
}

} // namespace

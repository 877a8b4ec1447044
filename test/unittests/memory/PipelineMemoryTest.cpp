//===- PipelineMemoryTest.cpp - memory plan of pipeline plans -------------===//
//
// artifact::memoryReport on a hand-written two-stage pipeline program after
// tsr-plan-memory: every stage's peak computed by hand from the functions'
// heap profiles and the schedule (docs/PipelineMemory.md).
//
//===----------------------------------------------------------------------===//

#include "compiler/artifact/Memory.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/lowering/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace tessera;

namespace {

// Stage 0 (chunk 0): forward saves %a (1 KiB) and sends %b (1 KiB);
// backward receives a gradient (1 KiB), returns an accumulator (1 KiB),
// and has a 1 KiB constant. Stage 1 (chunk 1): forward receives, returns a
// 64-byte accumulator; backward sends an argument; apply returns arguments.
constexpr const char *kProgram = R"mlir(
func.func private @train_step(tensor<256xf32> {tsrt.role = "param"}, tensor<256xf32> {tsrt.role = "param"}) -> (tensor<f32> {tsrt.role = "loss"}, tensor<256xf32> {tsrt.role = "param"}, tensor<256xf32> {tsrt.role = "param"})
func.func @forward_0(%x: tensor<256xf32> {tsrt.arg = 0 : i64}) -> (tensor<256xf32> {tsrt.saved = 0 : i64}) {
  %a = tsrt.kernel "exp"(%x) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
  %b = tsrt.kernel "exp"(%a) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
  tsrt.send %b to chunk 1 channel 0 : tensor<256xf32>
  return %a : tensor<256xf32>
}
func.func @backward_0(%a: tensor<256xf32> {tsrt.saved = 0 : i64}) -> (tensor<256xf32> {tsrt.acc = 0 : i64}) {
  %g = tsrt.recv from chunk 1 channel 1 : tensor<256xf32>
  %k = tsrt.constant dense<1.0> : tensor<256xf32>
  %d = tsrt.kernel "mul"(%g, %a) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  %e = tsrt.kernel "add"(%d, %k) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  return %e : tensor<256xf32>
}
func.func @apply_0(%x: tensor<256xf32> {tsrt.arg = 0 : i64}, %g: tensor<256xf32> {tsrt.acc = 0 : i64}) -> (tensor<256xf32> {tsrt.result = 1 : i64}) {
  %n = tsrt.kernel "sub"(%x, %g) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  return %n : tensor<256xf32>
}
func.func @forward_1(%y: tensor<256xf32> {tsrt.arg = 1 : i64}) -> (tensor<f32> {tsrt.acc = 1 : i64}) {
  %r = tsrt.recv from chunk 0 channel 0 : tensor<256xf32>
  %m = tsrt.kernel "mul"(%r, %y) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  %l = tsrt.kernel "reduce_sum"(%m) {attrs = {axes = [0]}} : (tensor<256xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
func.func @backward_1(%y: tensor<256xf32> {tsrt.arg = 1 : i64}) -> () {
  tsrt.send %y to chunk 0 channel 1 : tensor<256xf32>
  return
}
func.func @apply_1(%y: tensor<256xf32> {tsrt.arg = 1 : i64}, %l: tensor<f32> {tsrt.acc = 1 : i64}) -> (tensor<f32> {tsrt.result = 0 : i64}, tensor<256xf32> {tsrt.result = 2 : i64}) {
  return %l, %y : tensor<f32>, tensor<256xf32>
}
tsrt.pipeline_schedule {kind = "gpipe", stages = 2 : i64, virtual_stages = 1 : i64, micro_batches = 2 : i64, forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1], apply = [@apply_0, @apply_1], actions = ["F0.0 F0.1 B0.0 B0.1", "F1.0 F1.1 B1.0 B1.1"]}
)mlir";

llvm::json::Object plannedReport(MLIRContext &context) {
  context.loadDialect<tsrt::TsrtDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kProgram, &context);
  EXPECT_TRUE(module);
  PassManager pm(&context);
  pm.addNestedPass<func::FuncOp>(lowering::createPlanMemory());
  EXPECT_TRUE(succeeded(pm.run(*module)));
  return artifact::memoryReport(*module);
}

TEST(PipelineMemory, EachStageIsItsScheduleReplayedOverTheHeapProfiles) {
  MLIRContext context;
  llvm::json::Object report = plannedReport(context);
  ASSERT_TRUE(report.getBoolean("planned").value_or(false));
  const llvm::json::Array *stages = report.getArray("stages");
  ASSERT_TRUE(stages && stages->size() == 2);
  const llvm::json::Object *s0 = (*stages)[0].getAsObject();
  const llvm::json::Object *s1 = (*stages)[1].getAsObject();
  // Stage 0: the executor waits for F0.0's and F0.1's sends only at the end
  // of B0.0, which receives stage 1's gradient (schedule::sendReleases), so
  // during B0.0 two
  // stashed sets (2 KiB) + two pending sends (2 KiB) + backward's own
  // peak (2 KiB) = 6 KiB of heap, plus the 1 KiB parameter and the 1 KiB
  // constant.
  EXPECT_EQ(s0->getInteger("peak_bytes"), 8192);
  EXPECT_EQ(s0->getInteger("activation_sets_at_peak"), 2);
  EXPECT_EQ(s0->getInteger("max_activation_sets"), 2);
  const llvm::json::Object *b0 = s0->getObject("breakdown");
  ASSERT_TRUE(b0);
  EXPECT_EQ(b0->getInteger("parameters"), 1024);
  EXPECT_EQ(b0->getInteger("constants"), 1024);
  EXPECT_EQ(b0->getInteger("activation_stash"), 2048);
  EXPECT_EQ(b0->getInteger("sends"), 2048);
  EXPECT_EQ(b0->getInteger("function"), 2048);
  EXPECT_EQ(b0->getInteger("accumulators"), 0);
  // One prediction: the release point is fixed, not a band.
  EXPECT_FALSE(s0->getInteger("peak_bytes_sends_early").has_value());
  // Stage 1: F1.1 runs (2 KiB: the receive buffer and the product) while
  // the 64-byte loss accumulator (cloned from F1.0's result) is held; it
  // sends an argument (no bytes of its own).
  EXPECT_EQ(s1->getInteger("peak_bytes"), 1024 + 2048 + 64);
  EXPECT_EQ(report.getInteger("peak_bytes_per_rank"), 8192);
  EXPECT_EQ(report.getInteger("peak_stage"), 0);
}

TEST(PipelineMemory, WithoutHeapProfilesThereIsNoPrediction) {
  MLIRContext context;
  context.loadDialect<tsrt::TsrtDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(kProgram, &context);
  ASSERT_TRUE(module);
  llvm::json::Object report = artifact::memoryReport(*module);
  EXPECT_FALSE(report.getBoolean("planned").value_or(true));
  EXPECT_FALSE(artifact::predictedPeak(report).has_value());
}

} // namespace

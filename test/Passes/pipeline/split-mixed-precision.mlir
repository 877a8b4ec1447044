// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-mixed-precision{precision=bf16},tsr-sharding-annotate{dp=2 pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split)' %s | FileCheck %s
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-mixed-precision{precision=fp16 loss-scale=256.0},tsr-sharding-annotate{pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split)' %s | FileCheck %s --check-prefix=FP16

// Mixed precision with pipelining: the micro-batch gradient accumulators are
// f32 (each bf16/f16 contribution is widened where it is returned), and the
// apply function narrows the f32 sum back before the dp all-reduce, which
// stays bf16 as without pipelining. The loss accumulator is f32 already.
func.func @forward(
    %wte: tensor<16x8xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x8xf32>},
    %w1: tensor<8x8xf32> {tsr.name = "w1", tsr.role = "param", tsr.init = dense<0.25> : tensor<8x8xf32>},
    %w2: tensor<8x8xf32> {tsr.name = "w2", tsr.role = "param", tsr.init = dense<0.125> : tensor<8x8xf32>},
    %head: tensor<16x8xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x8xf32>},
    %tokens: tensor<4x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<4x3x16xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<16x8xf32>, tensor<4x3xi64> -> tensor<4x3x8xf32>
  %h1 = tsr.matmul %e, %w1 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g1 = tsr.gelu %h1 : tensor<4x3x8xf32>
  %h2 = tsr.matmul %g1, %w2 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g2 = tsr.gelu %h2 : tensor<4x3x8xf32>
  %l = tsr.matmul %g2, %head {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<16x8xf32> -> tensor<4x3x16xf32>
  return %l : tensor<4x3x16xf32>
}

// Each bf16 weight gradient is widened right after it is made and returned
// as an f32 accumulator.
// CHECK-LABEL: func.func @backward_0(
// CHECK-SAME: -> (tensor<8x8xf32> {tsrt.acc = {{[0-9]+}} : i64}, tensor<8x8xf32> {tsrt.acc = {{[0-9]+}} : i64}, tensor<16x8xf32> {tsrt.acc = {{[0-9]+}} : i64})
// CHECK: %[[DW:.*]] = tsr.matmul {{.*}} -> tensor<8x8xbf16>
// CHECK-NEXT: %[[DWF:.*]] = tsr.convert %[[DW]] : tensor<8x8xbf16> -> tensor<8x8xf32>
// CHECK: %[[DE:.*]] = tsr.gather_grad {{.*}} -> tensor<16x8xbf16>
// CHECK-NEXT: %[[DEF:.*]] = tsr.convert %[[DE]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK-NEXT: return %[[DWF]], %{{.*}}, %[[DEF]] : tensor<8x8xf32>, tensor<8x8xf32>, tensor<16x8xf32>

// The apply function takes the f32 sums, narrows each to bf16, all-reduces
// it over dp in bf16 and widens it for the f32 update (the M = 1 plan's
// types). No f32 gradient all-reduce.
// CHECK-LABEL: func.func @apply_0(
// CHECK-SAME: %[[ACC:[a-z0-9]+]]: tensor<16x8xf32> {tsrt.acc = {{[0-9]+}} : i64}
// CHECK-NOT: shard.all_reduce {{.*}}xf32>
// CHECK: %[[N:.*]] = tsr.convert %[[ACC]] : tensor<16x8xf32> -> tensor<16x8xbf16>
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[N]] on @grid grid_axes = [0] : tensor<16x8xbf16> -> tensor<16x8xbf16>
// CHECK-NEXT: %[[G:.*]] = tsr.convert %[[R]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK-NEXT: tsr.sgd_update %{{.*}}, %[[G]]
// CHECK-NOT: shard.all_reduce {{.*}}xf32>
// CHECK: return

// The loss is an f32 accumulator as it is (no convert), all-reduced in f32.
// CHECK-LABEL: func.func @forward_1(
// CHECK-SAME: tensor<f32> {tsrt.acc = 0 : i64})
// CHECK-LABEL: func.func @apply_1(
// CHECK-SAME: %[[LOSS:[a-z0-9]+]]: tensor<f32> {tsrt.acc = 0 : i64}
// CHECK: shard.all_reduce %[[LOSS]] on @grid grid_axes = [0] : tensor<f32> -> tensor<f32>

// fp16 without dp: the f16 head gradient is widened for accumulation; the
// apply function narrows the f32 sum to f16 (the type the non-pipelined
// step's update reads), widens it and unscales it by 1/S in f32.
// FP16-LABEL: func.func @backward_1(
// FP16-SAME: -> (tensor<16x8xf32> {tsrt.acc = 1 : i64})
// FP16: %[[DH:.*]] = tsr.matmul {{.*}} -> tensor<16x8xf16>
// FP16-NEXT: %[[DHF:.*]] = tsr.convert %[[DH]] : tensor<16x8xf16> -> tensor<16x8xf32>
// FP16: return %[[DHF]] : tensor<16x8xf32>
// FP16-LABEL: func.func @apply_1(
// FP16-SAME: %[[ACC:[a-z0-9]+]]: tensor<16x8xf32> {tsrt.acc = 1 : i64}
// FP16-NOT: shard.all_reduce
// FP16: %[[N:.*]] = tsr.convert %[[ACC]] : tensor<16x8xf32> -> tensor<16x8xf16>
// FP16-NEXT: %[[W:.*]] = tsr.convert %[[N]] : tensor<16x8xf16> -> tensor<16x8xf32>
// FP16: %[[U:.*]] = tsr.mul %[[W]], %{{.*}} : tensor<16x8xf32>
// FP16-NEXT: tsr.sgd_update %{{.*}}, %[[U]]

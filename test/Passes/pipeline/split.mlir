// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split)' %s | FileCheck %s
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{pp=2 micro-batches=4},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split{schedule=gpipe stages=0,2})' %s | FileCheck %s --check-prefix=GPIPE

// A small LM: embedding -> two linear + GELU layers -> head.
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

// The step keeps only its signature; the mb axis is the batch's minor split.
// CHECK-LABEL: func.func private @train_step(
// CHECK-SAME: tsr.role = "tokens", tsr.sharding = #tsr.sharding<@grid, {{\[}}[3], []]>

// Chunk 0: embedding and the first two linear layers (balanced by cost); sends the activation and
// keeps what its backward needs.
// CHECK-LABEL: func.func @forward_0(
// CHECK-SAME: {tsrt.arg = 0 : i64}
// CHECK-SAME: -> (tensor<2x3x8xf32> {tsrt.saved = 0 : i64}
// CHECK: tsr.gather
// CHECK: tsr.matmul
// CHECK: tsr.gelu
// CHECK: %[[H:.*]] = tsr.matmul
// CHECK-NEXT: tsrt.send %[[H]] to chunk 1 channel 0 : tensor<2x3x8xf32>
// CHECK-NOT: tsrt.recv
// CHECK: return

// Its backward receives the gradient from chunk 1 and returns gradient
// contributions to accumulate over micro-batches.
// CHECK-LABEL: func.func @backward_0(
// CHECK-SAME: {tsrt.saved = 0 : i64}
// CHECK-SAME: -> (tensor<8x8xf32> {tsrt.acc = {{[0-9]+}} : i64}
// CHECK: %[[DH:.*]] = tsrt.recv from chunk 1 channel 1 : tensor<2x3x8xf32>
// CHECK: tsr.matmul %[[DH]]
// CHECK: tsr.gather_grad
// CHECK-NOT: tsrt.send

// The optimizer runs once per step on the accumulated gradients.
// The learning rate, @train_step's "hyper" argument 6 (after 4 params,
// tokens, labels), is bound in the apply function that updates.
// CHECK-LABEL: func.func @apply_0(
// CHECK-SAME: {tsrt.acc = {{[0-9]+}} : i64}
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {tsrt.arg = 6 : i64}
// CHECK-COUNT-3: tsr.sgd_update {{.*}}, %[[LR]] {weight_decay
// CHECK: return

// Chunk 1: receives, computes the loss (an accumulation), sends the gradient.
// CHECK-LABEL: func.func @forward_1(
// CHECK-SAME: tensor<f32> {tsrt.acc = 0 : i64})
// CHECK: tsrt.recv from chunk 0 channel 0
// CHECK: tsr.cross_entropy
// CHECK-LABEL: func.func @backward_1(
// CHECK: tsr.cross_entropy_grad
// CHECK: tsrt.send %{{.*}} to chunk 0 channel 1
// CHECK-LABEL: func.func @apply_1(
// CHECK-SAME: -> (tensor<f32> {tsrt.result = 0 : i64}, tensor<16x8xf32> {tsrt.result = 4 : i64})
// No data-parallel axis: nothing left to all-reduce.
// CHECK-NOT: shard.all_reduce

// CHECK: tsrt.pipeline_schedule
// CHECK-SAME: actions = ["F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"]
// CHECK-SAME: kind = "1f1b", micro_batches = 2 : i64
// CHECK-SAME: stages = 2 : i64

// --pp-stages moves the cut; GPipe runs every forward first.
// GPIPE: tsrt.pipeline_schedule
// GPIPE-SAME: actions = ["F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3", "F1.0 F1.1 F1.2 F1.3 B1.0 B1.1 B1.2 B1.3"]
// GPIPE-SAME: first_layer = array<i64: 0, 2>
// GPIPE-SAME: kind = "gpipe", micro_batches = 4 : i64

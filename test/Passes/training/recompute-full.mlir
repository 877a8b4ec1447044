// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" --tsr-recompute="mode=full" %s | FileCheck %s
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" --tsr-recompute="mode=none" %s | FileCheck %s --check-prefix=NONE

// Two residual blocks: layers are [embedding], [block 1], [block 2],
// [head + loss] (one activation crosses between them). Full recomputation
// remakes each block's matmul in front of its gelu_grad, so the forward
// pre-activations die in forward; the checkpoints (block inputs) are still
// read by backward. The last layer (head + loss) is not recomputed.
func.func @forward(
    %wte: tensor<16x8xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x8xf32>},
    %w1: tensor<8x8xf32> {tsr.name = "w1", tsr.role = "param", tsr.init = dense<0.25> : tensor<8x8xf32>},
    %w2: tensor<8x8xf32> {tsr.name = "w2", tsr.role = "param", tsr.init = dense<0.125> : tensor<8x8xf32>},
    %head: tensor<16x8xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x8xf32>},
    %tokens: tensor<4x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<4x3x16xf32> {tsr.name = "logits"}) {
  %x = tsr.gather %wte, %tokens : tensor<16x8xf32>, tensor<4x3xi64> -> tensor<4x3x8xf32>
  %h1 = tsr.matmul %x, %w1 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g1 = tsr.gelu %h1 : tensor<4x3x8xf32>
  %y = tsr.add %x, %g1 : tensor<4x3x8xf32>
  %h2 = tsr.matmul %y, %w2 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g2 = tsr.gelu %h2 : tensor<4x3x8xf32>
  %z = tsr.add %y, %g2 : tensor<4x3x8xf32>
  %l = tsr.matmul %z, %head {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<16x8xf32> -> tensor<4x3x16xf32>
  return %l : tensor<4x3x16xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK: %[[X:.*]] = tsr.gather %arg0, %arg4 {tsr.fwd = 0 : i64}
// CHECK: %[[H1:.*]] = tsr.matmul %[[X]], %arg1 {transpose_rhs = true, tsr.fwd = 1 : i64}
// CHECK: tsr.gelu %[[H1]] {tsr.fwd = 2 : i64}
// CHECK: %[[Y:.*]] = tsr.add %[[X]], %{{.*}} {tsr.fwd = 3 : i64}
// CHECK: %[[H2:.*]] = tsr.matmul %[[Y]], %arg2 {transpose_rhs = true, tsr.fwd = 4 : i64}
// CHECK: tsr.cross_entropy_grad
// CHECK-NOT: tsr.gelu_grad %[[H2]]
// CHECK: %[[R2:.*]] = tsr.matmul %[[Y]], %arg2 {transpose_rhs = true, tsr.bwd = 4 : i64}
// CHECK-NEXT: tsr.gelu_grad %[[R2]], %{{.*}} {tsr.bwd = 5 : i64}
// CHECK-NOT: tsr.gelu_grad %[[H1]]
// CHECK: %[[R1:.*]] = tsr.matmul %[[X]], %arg1 {transpose_rhs = true, tsr.bwd = 1 : i64}
// CHECK-NEXT: tsr.gelu_grad %[[R1]], %{{.*}} {tsr.bwd = 2 : i64}
// CHECK: tsr.gather_grad

// NONE: %[[H2:.*]] = tsr.matmul %{{.*}}, %arg2 {transpose_rhs = true, tsr.fwd = 4 : i64}
// NONE-NOT: tsr.bwd = 4 : i64} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
// NONE: tsr.gelu_grad %[[H2]]

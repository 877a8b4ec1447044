// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" %s | FileCheck %s

// Autodiff treats tsr.attention as one op: one tsr.attention_grad reads the
// forward's q, k, v, output and log-sum-exp (no S x S tensor is kept) plus
// the output's cotangent and the mask, which gets no gradient; the lse result
// has no cotangent. Both carry the forward's tag (tsr.fwd / tsr.bwd).
func.func @forward(
    %wte: tensor<16x2xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x2xf32>},
    %wq: tensor<2x2xf32> {tsr.name = "wq", tsr.role = "param", tsr.init = dense<0.25> : tensor<2x2xf32>},
    %head: tensor<16x2xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x2xf32>},
    %tokens: tensor<3x4xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<3x4x16xf32> {tsr.name = "logits"}) {
  %x = tsr.gather %wte, %tokens : tensor<16x2xf32>, tensor<3x4xi64> -> tensor<3x4x2xf32>
  %q = tsr.matmul %x, %wq {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<2x2xf32> -> tensor<3x4x2xf32>
  %m = tsr.constant dense<[[0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000]]> : tensor<4x4xf32>
  %o, %lse = tsr.attention %q, %x, %x, %m {scale = 0.5 : f32} : tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<4x4xf32> -> tensor<3x4x2xf32>, tensor<3x4xf32>
  %l = tsr.matmul %o, %head {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<16x2xf32> -> tensor<3x4x16xf32>
  return %l : tensor<3x4x16xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK: %[[M:.*]] = tsr.constant dense<{{.*}}> : tensor<4x4xf32>
// CHECK: %[[X:.*]] = tsr.gather {{.*}} {tsr.fwd = 0 : i64}
// CHECK: %[[Q:.*]] = tsr.matmul %[[X]], %arg1 {transpose_rhs = true, tsr.fwd = 1 : i64}
// CHECK: %[[O:.*]], %[[LSE:.*]] = tsr.attention %[[Q]], %[[X]], %[[X]], %[[M]] {scale = 5.000000e-01 : f32, tsr.fwd = [[ID:[0-9]+]] : i64}
// CHECK: %[[DO:.*]] = tsr.matmul %{{.*}}, %arg2 {tsr.bwd = {{[0-9]+}} : i64}
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = tsr.attention_grad %[[Q]], %[[X]], %[[X]], %[[O]], %[[LSE]], %[[DO]], %[[M]] {scale = 5.000000e-01 : f32, tsr.bwd = [[ID]] : i64}
// CHECK-SAME: : tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<3x4xf32>, tensor<4x4xf32>
// CHECK-NOT: tsr.softmax
// CHECK: tsr.add %[[DK]], %[[DV]]
// CHECK: return

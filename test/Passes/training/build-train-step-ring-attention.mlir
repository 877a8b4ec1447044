// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" %s | FileCheck %s

// Autodiff carries ring attention's ring_size to the tsr.attention_grad it
// builds, so that the partitioner gives the backward the same ring (striped
// sequence split) as the forward.
func.func @forward(
    %wte: tensor<16x2xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x2xf32>},
    %wq: tensor<2x2xf32> {tsr.name = "wq", tsr.role = "param", tsr.init = dense<0.25> : tensor<2x2xf32>},
    %head: tensor<16x2xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x2xf32>},
    %tokens: tensor<3x4xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<3x4x16xf32> {tsr.name = "logits"}) {
  %x = tsr.gather %wte, %tokens : tensor<16x2xf32>, tensor<3x4xi64> -> tensor<3x4x2xf32>
  %q = tsr.matmul %x, %wq {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<2x2xf32> -> tensor<3x4x2xf32>
  %o, %lse = tsr.attention %q, %x, %x {causal = true, ring_size = 2 : i64, scale = 0.5 : f32} : tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<3x4x2xf32> -> tensor<3x4x2xf32>, tensor<3x4xf32>
  %l = tsr.matmul %o, %head {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<16x2xf32> -> tensor<3x4x16xf32>
  return %l : tensor<3x4x16xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK: %[[O:.*]], %[[LSE:.*]] = tsr.attention %[[Q:.*]], %[[X:.*]], %[[X]] {causal = true, ring_size = 2 : i64, scale = 5.000000e-01 : f32, tsr.fwd = [[ID:[0-9]+]] : i64}
// CHECK: tsr.attention_grad %[[Q]], %[[X]], %[[X]], %[[O]], %[[LSE]], %{{.*}} {causal = true, ring_size = 2 : i64, scale = 5.000000e-01 : f32, tsr.bwd = [[ID]] : i64}

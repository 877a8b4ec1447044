// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" --tsr-recompute="mode=selective" %s | FileCheck %s

// One attention block: selective recomputation (Korthikanti et al., 2022)
// remakes only the fused attention (its output and log-sum-exp) from the
// saved q, k and v, in front of the layer's backward; the projections
// q = x·Wq and k = x·Wk are kept, and both backward readers of the output
// (the out-projection's weight gradient and attention_grad) read the clone.
func.func @forward(
    %wte: tensor<16x2xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x2xf32>},
    %wq: tensor<2x2xf32> {tsr.name = "wq", tsr.role = "param", tsr.init = dense<0.25> : tensor<2x2xf32>},
    %wk: tensor<2x2xf32> {tsr.name = "wk", tsr.role = "param", tsr.init = dense<0.125> : tensor<2x2xf32>},
    %wo: tensor<2x2xf32> {tsr.name = "wo", tsr.role = "param", tsr.init = dense<0.75> : tensor<2x2xf32>},
    %head: tensor<16x2xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x2xf32>},
    %tokens: tensor<3x4xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<3x4x16xf32> {tsr.name = "logits"}) {
  %x = tsr.gather %wte, %tokens : tensor<16x2xf32>, tensor<3x4xi64> -> tensor<3x4x2xf32>
  %q = tsr.matmul %x, %wq {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<2x2xf32> -> tensor<3x4x2xf32>
  %k = tsr.matmul %x, %wk {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<2x2xf32> -> tensor<3x4x2xf32>
  %o, %lse = tsr.attention %q, %k, %x {causal = true, scale = 0.5 : f32} : tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<3x4x2xf32> -> tensor<3x4x2xf32>, tensor<3x4xf32>
  %p = tsr.matmul %o, %wo {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<2x2xf32> -> tensor<3x4x2xf32>
  %y = tsr.add %x, %p : tensor<3x4x2xf32>
  %l = tsr.matmul %y, %head {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<16x2xf32> -> tensor<3x4x16xf32>
  return %l : tensor<3x4x16xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK: %[[Q:.*]] = tsr.matmul %{{.*}}, %arg1 {transpose_rhs = true, tsr.fwd = 1 : i64}
// CHECK: %[[K:.*]] = tsr.matmul %{{.*}}, %arg2 {transpose_rhs = true, tsr.fwd = 2 : i64}
// CHECK: %[[O:.*]], %[[LSE:.*]] = tsr.attention %[[Q]], %[[K]], %[[X:.*]] {causal = true, scale = 5.000000e-01 : f32, tsr.fwd = 3 : i64}
// CHECK: tsr.cross_entropy_grad
// CHECK-NOT: %[[O]]
// CHECK-NOT: %[[LSE]]
// CHECK: %[[O2:.*]], %[[LSE2:.*]] = tsr.attention %[[Q]], %[[K]], %[[X]] {causal = true, scale = 5.000000e-01 : f32, tsr.bwd = 3 : i64}
// CHECK-NOT: %[[O]]
// CHECK: tsr.reshape %[[O2]] {tsr.bwd = 4 : i64}
// CHECK-NOT: %[[O]]
// CHECK: tsr.attention_grad %[[Q]], %[[K]], %[[X]], %[[O2]], %[[LSE2]], %{{.*}} {causal = true, scale = 5.000000e-01 : f32, tsr.bwd = 3 : i64}
// CHECK-NOT: tsr.matmul %{{.*}}, %arg1 {transpose_rhs = true, tsr.bwd
// CHECK: return

// Without recomputation (the same step), attention_grad reads the forward's
// output and log-sum-exp.
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" %s | FileCheck %s --check-prefix=NONE
// NONE: %[[O:.*]], %[[LSE:.*]] = tsr.attention {{.*}}tsr.fwd = 3 : i64
// NONE-NOT: tsr.attention {{.*}}tsr.bwd
// NONE: tsr.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[LSE]], %{{.*}} {causal = true, scale = 5.000000e-01 : f32, tsr.bwd = 3 : i64}

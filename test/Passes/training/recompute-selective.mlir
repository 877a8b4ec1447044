// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" --tsr-recompute="mode=selective" %s | FileCheck %s

// One attention-like block (S = 4 > head dim 2): selective recomputation
// (Korthikanti et al., 2022) remakes only the S x S scores and their softmax
// from the saved q and k; the projections q = x·Wq and k = x·Wk are kept.
func.func @forward(
    %wte: tensor<16x2xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x2xf32>},
    %wq: tensor<2x2xf32> {tsr.name = "wq", tsr.role = "param", tsr.init = dense<0.25> : tensor<2x2xf32>},
    %wk: tensor<2x2xf32> {tsr.name = "wk", tsr.role = "param", tsr.init = dense<0.125> : tensor<2x2xf32>},
    %head: tensor<16x2xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x2xf32>},
    %tokens: tensor<3x4xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<3x4x16xf32> {tsr.name = "logits"}) {
  %x = tsr.gather %wte, %tokens : tensor<16x2xf32>, tensor<3x4xi64> -> tensor<3x4x2xf32>
  %q = tsr.matmul %x, %wq {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<2x2xf32> -> tensor<3x4x2xf32>
  %k = tsr.matmul %x, %wk {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<2x2xf32> -> tensor<3x4x2xf32>
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<3x4x2xf32> -> tensor<3x4x4xf32>
  %p = tsr.softmax %s {axis = 2 : i64} : tensor<3x4x4xf32>
  %o = tsr.matmul %p, %x : tensor<3x4x4xf32>, tensor<3x4x2xf32> -> tensor<3x4x2xf32>
  %y = tsr.add %x, %o : tensor<3x4x2xf32>
  %l = tsr.matmul %y, %head {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<16x2xf32> -> tensor<3x4x16xf32>
  return %l : tensor<3x4x16xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK: %[[Q:.*]] = tsr.matmul %{{.*}}, %arg1 {transpose_rhs = true, tsr.fwd = 1 : i64}
// CHECK: %[[K:.*]] = tsr.matmul %{{.*}}, %arg2 {transpose_rhs = true, tsr.fwd = 2 : i64}
// CHECK: %[[S:.*]] = tsr.matmul %[[Q]], %[[K]] {transpose_rhs = true, tsr.fwd = 3 : i64}
// CHECK: %[[P:.*]] = tsr.softmax %[[S]] {axis = 2 : i64, tsr.fwd = 4 : i64}
// CHECK: tsr.cross_entropy_grad
// CHECK-NOT: %[[P]]
// CHECK: %[[S2:.*]] = tsr.matmul %[[Q]], %[[K]] {transpose_rhs = true, tsr.bwd = 3 : i64}
// CHECK-NEXT: %[[P2:.*]] = tsr.softmax %[[S2]] {axis = 2 : i64, tsr.bwd = 4 : i64}
// CHECK: tsr.softmax_grad %[[P2]]
// CHECK-NOT: tsr.matmul %{{.*}}, %arg1 {transpose_rhs = true, tsr.bwd
// CHECK: return

// RUN: tessera-import --raise-only %s | FileCheck %s
// The raising patterns on hand-written tsr IR (what the importer produces
// from the exporter's decompositions), including near misses that must stay.

// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<4x16x32xf32>, %[[G:.*]]: tensor<32xf32>, %[[B:.*]]: tensor<32xf32>)
// CHECK-NEXT: %[[Y:.*]] = tsr.layer_norm %[[X]], %[[G]], %[[B]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : tensor<4x16x32xf32>, tensor<32xf32>
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm(%x: tensor<4x16x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<4x16x32xf32> {
  %m = tsr.reduce_mean %x {axes = array<i64: 2>, keepdim = true} : tensor<4x16x32xf32> -> tensor<4x16x1xf32>
  %mb = tsr.broadcast %m : tensor<4x16x1xf32> -> tensor<4x16x32xf32>
  %d = tsr.sub %x, %mb : tensor<4x16x32xf32>
  %two = tsr.constant dense<2.0> : tensor<4x16x32xf32>
  %sq = tsr.pow %d, %two : tensor<4x16x32xf32>
  %v = tsr.reduce_mean %sq {axes = array<i64: 2>, keepdim = true} : tensor<4x16x32xf32> -> tensor<4x16x1xf32>
  %eps = tsr.constant dense<1.0e-05> : tensor<4x16x1xf32>
  %ve = tsr.add %v, %eps : tensor<4x16x1xf32>
  %s = tsr.sqrt %ve : tensor<4x16x1xf32>
  %sb = tsr.broadcast %s : tensor<4x16x1xf32> -> tensor<4x16x32xf32>
  %n = tsr.div %d, %sb : tensor<4x16x32xf32>
  %gr = tsr.reshape %g : tensor<32xf32> -> tensor<1x1x32xf32>
  %gb = tsr.broadcast %gr : tensor<1x1x32xf32> -> tensor<4x16x32xf32>
  %y0 = tsr.mul %n, %gb : tensor<4x16x32xf32>
  %br = tsr.reshape %b : tensor<32xf32> -> tensor<1x1x32xf32>
  %bb = tsr.broadcast %br : tensor<1x1x32xf32> -> tensor<4x16x32xf32>
  %y = tsr.add %bb, %y0 : tensor<4x16x32xf32>
  return %y : tensor<4x16x32xf32>
}

// Over the last two axes, without gamma/beta (ones/zeros), variance by x*x.
// CHECK-LABEL: func.func @layer_norm_no_affine
// CHECK-DAG: %[[ONE:.*]] = tsr.constant dense<1.000000e+00> : tensor<16x32xf32>
// CHECK-DAG: %[[ZERO:.*]] = tsr.constant dense<0.000000e+00> : tensor<16x32xf32>
// CHECK: %[[Y:.*]] = tsr.layer_norm %arg0, %[[ONE]], %[[ZERO]] {axis = 1 : i64, epsilon = 1.000000e-03 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm_no_affine(%x: tensor<4x16x32xf32>) -> tensor<4x16x32xf32> {
  %m = tsr.reduce_mean %x {axes = array<i64: 1, 2>, keepdim = true} : tensor<4x16x32xf32> -> tensor<4x1x1xf32>
  %mb = tsr.broadcast %m : tensor<4x1x1xf32> -> tensor<4x16x32xf32>
  %d = tsr.sub %x, %mb : tensor<4x16x32xf32>
  %sq = tsr.mul %d, %d : tensor<4x16x32xf32>
  %v = tsr.reduce_mean %sq {axes = array<i64: 1, 2>, keepdim = true} : tensor<4x16x32xf32> -> tensor<4x1x1xf32>
  %eps = tsr.constant dense<1.0e-03> : tensor<4x1x1xf32>
  %ve = tsr.add %eps, %v : tensor<4x1x1xf32>
  %s = tsr.sqrt %ve : tensor<4x1x1xf32>
  %sb = tsr.broadcast %s : tensor<4x1x1xf32> -> tensor<4x16x32xf32>
  %n = tsr.div %d, %sb : tensor<4x16x32xf32>
  return %n : tensor<4x16x32xf32>
}

// Near miss: the mean is over a non-trailing axis.
// CHECK-LABEL: func.func @not_layer_norm
// CHECK-NOT: tsr.layer_norm
// CHECK: tsr.sqrt
func.func @not_layer_norm(%x: tensor<4x16x32xf32>) -> tensor<4x16x32xf32> {
  %m = tsr.reduce_mean %x {axes = array<i64: 1>, keepdim = true} : tensor<4x16x32xf32> -> tensor<4x1x32xf32>
  %mb = tsr.broadcast %m : tensor<4x1x32xf32> -> tensor<4x16x32xf32>
  %d = tsr.sub %x, %mb : tensor<4x16x32xf32>
  %sq = tsr.mul %d, %d : tensor<4x16x32xf32>
  %v = tsr.reduce_mean %sq {axes = array<i64: 1>, keepdim = true} : tensor<4x16x32xf32> -> tensor<4x1x32xf32>
  %eps = tsr.constant dense<1.0e-03> : tensor<4x1x32xf32>
  %ve = tsr.add %eps, %v : tensor<4x1x32xf32>
  %s = tsr.sqrt %ve : tensor<4x1x32xf32>
  %sb = tsr.broadcast %s : tensor<4x1x32xf32> -> tensor<4x16x32xf32>
  %n = tsr.div %d, %sb : tensor<4x16x32xf32>
  return %n : tensor<4x16x32xf32>
}

// The exporter's order: Div √2 → Erf → Add 1 → Mul x → Mul 0.5.
// CHECK-LABEL: func.func @gelu
// CHECK-NEXT: %[[Y:.*]] = tsr.gelu %arg0 : tensor<8x64xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gelu(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %c = tsr.constant dense<1.41421354> : tensor<8x64xf32>
  %d = tsr.div %x, %c : tensor<8x64xf32>
  %e = tsr.erf %d : tensor<8x64xf32>
  %one = tsr.constant dense<1.0> : tensor<8x64xf32>
  %a = tsr.add %e, %one : tensor<8x64xf32>
  %m = tsr.mul %x, %a : tensor<8x64xf32>
  %half = tsr.constant dense<0.5> : tensor<8x64xf32>
  %y = tsr.mul %m, %half : tensor<8x64xf32>
  return %y : tensor<8x64xf32>
}

// Permuted: 0.5 * x first, then * (erf(x * 1/√2) + 1), operands swapped.
// CHECK-LABEL: func.func @gelu_permuted
// CHECK-NEXT: %[[Y:.*]] = tsr.gelu %arg0 : tensor<8x64xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gelu_permuted(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %c = tsr.constant dense<0.707106769> : tensor<8x64xf32>
  %d = tsr.mul %c, %x : tensor<8x64xf32>
  %e = tsr.erf %d : tensor<8x64xf32>
  %one = tsr.constant dense<1.0> : tensor<8x64xf32>
  %a = tsr.add %one, %e : tensor<8x64xf32>
  %half = tsr.constant dense<0.5> : tensor<8x64xf32>
  %h = tsr.mul %half, %x : tensor<8x64xf32>
  %y = tsr.mul %a, %h : tensor<8x64xf32>
  return %y : tensor<8x64xf32>
}

// Near miss: erf of a different value.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: tsr.gelu
// CHECK: tsr.erf
func.func @not_gelu(%x: tensor<8x64xf32>, %z: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %c = tsr.constant dense<1.41421354> : tensor<8x64xf32>
  %d = tsr.div %z, %c : tensor<8x64xf32>
  %e = tsr.erf %d : tensor<8x64xf32>
  %one = tsr.constant dense<1.0> : tensor<8x64xf32>
  %a = tsr.add %e, %one : tensor<8x64xf32>
  %m = tsr.mul %x, %a : tensor<8x64xf32>
  %half = tsr.constant dense<0.5> : tensor<8x64xf32>
  %y = tsr.mul %m, %half : tensor<8x64xf32>
  return %y : tensor<8x64xf32>
}

// x * 1.0 folds; x * 2.0 stays.
// CHECK-LABEL: func.func @mul_one
// CHECK-NEXT: %[[C:.*]] = tsr.constant dense<2.000000e+00>
// CHECK-NEXT: %[[Y:.*]] = tsr.mul %arg0, %[[C]]
// CHECK-NEXT: return %[[Y]]
func.func @mul_one(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %one = tsr.constant dense<1.0> : tensor<4x4xf32>
  %a = tsr.mul %x, %one : tensor<4x4xf32>
  %two = tsr.constant dense<2.0> : tensor<4x4xf32>
  %b = tsr.mul %a, %two : tensor<4x4xf32>
  return %b : tensor<4x4xf32>
}

// A transpose of the last two dims folds into the matmul's flags.
// CHECK-LABEL: func.func @matmul_transpose
// CHECK-NEXT: %[[Y:.*]] = tsr.matmul %arg0, %arg1 {transpose_rhs = true} : tensor<4x16x32xf32>, tensor<96x32xf32> -> tensor<4x16x96xf32>
// CHECK-NEXT: %[[Z:.*]] = tsr.matmul %arg2, %arg3 {transpose_lhs = true} : tensor<2x8x4xf32>, tensor<2x8x5xf32> -> tensor<2x4x5xf32>
func.func @matmul_transpose(%x: tensor<4x16x32xf32>, %w: tensor<96x32xf32>, %a: tensor<2x8x4xf32>, %b: tensor<2x8x5xf32>) -> (tensor<4x16x96xf32>, tensor<2x4x5xf32>) {
  %wt = tsr.transpose %w {permutation = array<i64: 1, 0>} : tensor<96x32xf32> -> tensor<32x96xf32>
  %y = tsr.matmul %x, %wt : tensor<4x16x32xf32>, tensor<32x96xf32> -> tensor<4x16x96xf32>
  %at = tsr.transpose %a {permutation = array<i64: 0, 2, 1>} : tensor<2x8x4xf32> -> tensor<2x4x8xf32>
  %z = tsr.matmul %at, %b : tensor<2x4x8xf32>, tensor<2x8x5xf32> -> tensor<2x4x5xf32>
  return %y, %z : tensor<4x16x96xf32>, tensor<2x4x5xf32>
}

// tanh-approximate GELU as torch exports it: 0.5 * (x * (1 + tanh(β * (x + κ * x * (x * x))))).
// CHECK-LABEL: func.func @gelu_tanh
// CHECK-NEXT: %[[Y:.*]] = tsr.gelu %arg0 {approximate = "tanh"} : tensor<8x64xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gelu_tanh(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %sq = tsr.mul %x, %x : tensor<8x64xf32>
  %cube = tsr.mul %x, %sq : tensor<8x64xf32>
  %kappa = tsr.constant dense<0.044715> : tensor<8x64xf32>
  %kc = tsr.mul %kappa, %cube : tensor<8x64xf32>
  %s = tsr.add %x, %kc : tensor<8x64xf32>
  %beta = tsr.constant dense<0.797884583> : tensor<8x64xf32>
  %in = tsr.mul %beta, %s : tensor<8x64xf32>
  %t = tsr.tanh %in : tensor<8x64xf32>
  %one = tsr.constant dense<1.0> : tensor<8x64xf32>
  %a = tsr.add %one, %t : tensor<8x64xf32>
  %m = tsr.mul %x, %a : tensor<8x64xf32>
  %half = tsr.constant dense<0.5> : tensor<8x64xf32>
  %y = tsr.mul %half, %m : tensor<8x64xf32>
  return %y : tensor<8x64xf32>
}

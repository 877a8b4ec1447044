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

// RMSNorm as the TorchScript export of HF LlamaRMSNorm imports (torch 1.13,
// opset 17): Pow 2 → ReduceMean(-1, keepdims) → Add ε → Sqrt → Div(1, ·) →
// Mul(x, ·) → Mul(w, ·), the weight first.
// CHECK-LABEL: func.func @rms_norm_torchscript
// CHECK-SAME: (%[[X:.*]]: tensor<2x16x64xf32>, %[[W:.*]]: tensor<64xf32>)
// CHECK-NEXT: %[[Y:.*]] = tsr.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : tensor<2x16x64xf32>, tensor<64xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_torchscript(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>) -> tensor<2x16x64xf32> {
  %c2 = tsr.constant dense<2.0> : tensor<f32>
  %c2r = tsr.reshape %c2 : tensor<f32> -> tensor<1x1x1xf32>
  %two = tsr.broadcast %c2r : tensor<1x1x1xf32> -> tensor<2x16x64xf32>
  %sq = tsr.pow %x, %two : tensor<2x16x64xf32>
  %ms = tsr.reduce_mean %sq {axes = array<i64: 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  %eps = tsr.constant dense<1.0e-06> : tensor<2x16x1xf32>
  %v = tsr.add %ms, %eps : tensor<2x16x1xf32>
  %s = tsr.sqrt %v : tensor<2x16x1xf32>
  %one = tsr.constant dense<1.0> : tensor<2x16x1xf32>
  %r = tsr.div %one, %s : tensor<2x16x1xf32>
  %rb = tsr.broadcast %r : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %n = tsr.mul %x, %rb : tensor<2x16x64xf32>
  %wr = tsr.reshape %w : tensor<64xf32> -> tensor<1x1x64xf32>
  %wb = tsr.broadcast %wr : tensor<1x1x64xf32> -> tensor<2x16x64xf32>
  %y = tsr.mul %wb, %n : tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// x · rsqrt(ε + mean(x·x)) with the operands the other way round, the
// weight last; over the last two axes with a [16, 64] weight.
// CHECK-LABEL: func.func @rms_norm_rsqrt
// CHECK-NEXT: %[[Y:.*]] = tsr.rms_norm %arg0, %arg1 {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x16x64xf32>, tensor<16x64xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_rsqrt(%x: tensor<2x16x64xf32>, %w: tensor<16x64xf32>) -> tensor<2x16x64xf32> {
  %sq = tsr.mul %x, %x : tensor<2x16x64xf32>
  %ms = tsr.reduce_mean %sq {axes = array<i64: 1, 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x1x1xf32>
  %eps = tsr.constant dense<1.0e-05> : tensor<2x1x1xf32>
  %v = tsr.add %eps, %ms : tensor<2x1x1xf32>
  %r = tsr.rsqrt %v : tensor<2x1x1xf32>
  %rb = tsr.broadcast %r : tensor<2x1x1xf32> -> tensor<2x16x64xf32>
  %n = tsr.mul %rb, %x : tensor<2x16x64xf32>
  %wb = tsr.broadcast %w : tensor<16x64xf32> -> tensor<2x16x64xf32>
  %y = tsr.mul %n, %wb : tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// x / sqrt(mean(x²) + ε), no weight: the scale is ones.
// CHECK-LABEL: func.func @rms_norm_div_no_weight
// CHECK: %[[ONE:.*]] = tsr.constant dense<1.000000e+00> : tensor<64xf32>
// CHECK-NEXT: %[[Y:.*]] = tsr.rms_norm %arg0, %[[ONE]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_div_no_weight(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  %sq = tsr.mul %x, %x : tensor<2x16x64xf32>
  %ms = tsr.reduce_mean %sq {axes = array<i64: 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  %eps = tsr.constant dense<1.0e-06> : tensor<2x16x1xf32>
  %v = tsr.add %ms, %eps : tensor<2x16x1xf32>
  %s = tsr.sqrt %v : tensor<2x16x1xf32>
  %sb = tsr.broadcast %s : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %y = tsr.div %x, %sb : tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// Gemma: x_normed · (1 + w); the add stays and feeds the scale.
// CHECK-LABEL: func.func @rms_norm_gemma
// CHECK: %[[S:.*]] = tsr.add %{{.*}}, %arg1 : tensor<64xf32>
// CHECK: %[[Y:.*]] = tsr.rms_norm %arg0, %[[S]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_gemma(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>) -> tensor<2x16x64xf32> {
  %sq = tsr.mul %x, %x : tensor<2x16x64xf32>
  %ms = tsr.reduce_mean %sq {axes = array<i64: 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  %eps = tsr.constant dense<1.0e-06> : tensor<2x16x1xf32>
  %v = tsr.add %ms, %eps : tensor<2x16x1xf32>
  %s = tsr.sqrt %v : tensor<2x16x1xf32>
  %one = tsr.constant dense<1.0> : tensor<2x16x1xf32>
  %r = tsr.div %one, %s : tensor<2x16x1xf32>
  %rb = tsr.broadcast %r : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %n = tsr.mul %x, %rb : tensor<2x16x64xf32>
  %c1 = tsr.constant dense<1.0> : tensor<64xf32>
  %w1 = tsr.add %c1, %w : tensor<64xf32>
  %wb = tsr.broadcast %w1 : tensor<64xf32> -> tensor<2x16x64xf32>
  %y = tsr.mul %n, %wb : tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// Near miss: a weight of the wrong shape ([16, 64] for a norm over the last
// axis only) is not absorbed; the norm is raised with ones and the product
// stays.
// CHECK-LABEL: func.func @rms_norm_weight_wrong_shape
// CHECK: %[[ONE:.*]] = tsr.constant dense<1.000000e+00> : tensor<64xf32>
// CHECK: %[[N:.*]] = tsr.rms_norm %arg0, %[[ONE]] {axis = 2 : i64
// CHECK: %[[WB:.*]] = tsr.broadcast %arg1 : tensor<16x64xf32> -> tensor<2x16x64xf32>
// CHECK: tsr.mul %[[N]], %[[WB]]
func.func @rms_norm_weight_wrong_shape(%x: tensor<2x16x64xf32>, %w: tensor<16x64xf32>) -> tensor<2x16x64xf32> {
  %sq = tsr.mul %x, %x : tensor<2x16x64xf32>
  %ms = tsr.reduce_mean %sq {axes = array<i64: 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  %eps = tsr.constant dense<1.0e-06> : tensor<2x16x1xf32>
  %v = tsr.add %ms, %eps : tensor<2x16x1xf32>
  %r = tsr.rsqrt %v : tensor<2x16x1xf32>
  %rb = tsr.broadcast %r : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %n = tsr.mul %x, %rb : tensor<2x16x64xf32>
  %wb = tsr.broadcast %w : tensor<16x64xf32> -> tensor<2x16x64xf32>
  %y = tsr.mul %n, %wb : tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// Near misses that stay as they are: the mean over a non-trailing axis, over
// non-adjacent axes, ε not a splat (and ε a parameter), the mean of another
// tensor's square, and 2 / sqrt(·) instead of 1 / sqrt(·).
// CHECK-LABEL: func.func @not_rms_norm
// CHECK-NOT: tsr.rms_norm
// CHECK-COUNT-5: tsr.rsqrt
// CHECK-NOT: tsr.rms_norm
// CHECK: tsr.sqrt
// CHECK-NOT: tsr.rms_norm
// CHECK: tsr.rsqrt
// CHECK-NOT: tsr.rms_norm
// CHECK: return
func.func @not_rms_norm(%x: tensor<2x16x64xf32>, %z: tensor<2x16x64xf32>, %e: tensor<2x16x1xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  %sq = tsr.mul %x, %x : tensor<2x16x64xf32>
  // Mean over axis 1 (not trailing).
  %m1 = tsr.reduce_mean %sq {axes = array<i64: 1>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x1x64xf32>
  %e1 = tsr.constant dense<1.0e-06> : tensor<2x1x64xf32>
  %v1 = tsr.add %m1, %e1 : tensor<2x1x64xf32>
  %r1 = tsr.rsqrt %v1 : tensor<2x1x64xf32>
  %b1 = tsr.broadcast %r1 : tensor<2x1x64xf32> -> tensor<2x16x64xf32>
  %y1 = tsr.mul %x, %b1 : tensor<2x16x64xf32>
  // Mean over axes 0 and 2 (not adjacent).
  %m2 = tsr.reduce_mean %sq {axes = array<i64: 0, 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<1x16x1xf32>
  %e2 = tsr.constant dense<1.0e-06> : tensor<1x16x1xf32>
  %v2 = tsr.add %m2, %e2 : tensor<1x16x1xf32>
  %r2 = tsr.rsqrt %v2 : tensor<1x16x1xf32>
  %b2 = tsr.broadcast %r2 : tensor<1x16x1xf32> -> tensor<2x16x64xf32>
  %y2 = tsr.mul %x, %b2 : tensor<2x16x64xf32>
  // ε varies per row (not a splat).
  %m3 = tsr.reduce_mean %sq {axes = array<i64: 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  %e3 = tsr.constant dense<[[[1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06]], [[1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [1.0e-06], [2.0e-06]]]> : tensor<2x16x1xf32>
  %v3 = tsr.add %m3, %e3 : tensor<2x16x1xf32>
  %r3 = tsr.rsqrt %v3 : tensor<2x16x1xf32>
  %b3 = tsr.broadcast %r3 : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %y3 = tsr.mul %x, %b3 : tensor<2x16x64xf32>
  // ε a parameter (as the dynamo exporter's scalar initializers import).
  %v4 = tsr.add %m3, %e : tensor<2x16x1xf32>
  %r4 = tsr.rsqrt %v4 : tensor<2x16x1xf32>
  %b4 = tsr.broadcast %r4 : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %y4 = tsr.mul %x, %b4 : tensor<2x16x64xf32>
  // The statistic of x scales z.
  %e5 = tsr.constant dense<1.0e-06> : tensor<2x16x1xf32>
  %v5 = tsr.add %m3, %e5 : tensor<2x16x1xf32>
  %r5 = tsr.rsqrt %v5 : tensor<2x16x1xf32>
  %b5 = tsr.broadcast %r5 : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %y5 = tsr.mul %z, %b5 : tensor<2x16x64xf32>
  // x · (2 / sqrt(·)).
  %s6 = tsr.sqrt %v5 : tensor<2x16x1xf32>
  %two = tsr.constant dense<2.0> : tensor<2x16x1xf32>
  %r6 = tsr.div %two, %s6 : tensor<2x16x1xf32>
  %b6 = tsr.broadcast %r6 : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %y6 = tsr.mul %x, %b6 : tensor<2x16x64xf32>
  // x³'s mean.
  %three = tsr.constant dense<3.0> : tensor<2x16x64xf32>
  %cube = tsr.pow %x, %three : tensor<2x16x64xf32>
  %m7 = tsr.reduce_mean %cube {axes = array<i64: 2>, keepdim = true} : tensor<2x16x64xf32> -> tensor<2x16x1xf32>
  %v7 = tsr.add %m7, %e5 : tensor<2x16x1xf32>
  %r7 = tsr.rsqrt %v7 : tensor<2x16x1xf32>
  %b7 = tsr.broadcast %r7 : tensor<2x16x1xf32> -> tensor<2x16x64xf32>
  %y7 = tsr.mul %x, %b7 : tensor<2x16x64xf32>
  return %y1, %y2, %y3, %y4, %y5, %y6, %y7 : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// SiLU: x · sigmoid(x) in either order; the decomposed sigmoid
// 1 / (1 + exp(−x)) is raised first.
// CHECK-LABEL: func.func @silu
// CHECK-NEXT: %[[A:.*]] = tsr.silu %arg0 : tensor<8x64xf32>
// CHECK-NEXT: %[[B:.*]] = tsr.silu %arg1 : tensor<8x64xf32>
// CHECK-NEXT: %[[C:.*]] = tsr.silu %arg2 : tensor<8x64xf32>
// CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
func.func @silu(%x: tensor<8x64xf32>, %y: tensor<8x64xf32>, %z: tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>) {
  %sx = tsr.sigmoid %x : tensor<8x64xf32>
  %a = tsr.mul %x, %sx : tensor<8x64xf32>
  %sy = tsr.sigmoid %y : tensor<8x64xf32>
  %b = tsr.mul %sy, %y : tensor<8x64xf32>
  %n = tsr.neg %z : tensor<8x64xf32>
  %e = tsr.exp %n : tensor<8x64xf32>
  %one = tsr.constant dense<1.0> : tensor<8x64xf32>
  %d = tsr.add %e, %one : tensor<8x64xf32>
  %sz = tsr.div %one, %d : tensor<8x64xf32>
  %c = tsr.mul %z, %sz : tensor<8x64xf32>
  return %a, %b, %c : tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>
}

// Near misses: x · sigmoid(y) stays (the decomposed sigmoid is still
// raised to tsr.sigmoid), and a sigmoid used elsewhere too stays for that
// user while the product becomes tsr.silu; 2 / (1 + exp(−x)) is not a
// sigmoid.
// CHECK-LABEL: func.func @not_silu
// CHECK: %[[SY:.*]] = tsr.sigmoid %arg1
// CHECK-NEXT: %[[A:.*]] = tsr.mul %arg0, %[[SY]]
// CHECK-NEXT: %[[SX:.*]] = tsr.sigmoid %arg0
// CHECK-NEXT: %[[B:.*]] = tsr.silu %arg0
// CHECK-NOT: tsr.sigmoid
// CHECK: %[[D:.*]] = tsr.div
// CHECK-NEXT: return %[[A]], %[[B]], %[[SX]], %[[D]]
func.func @not_silu(%x: tensor<8x64xf32>, %y: tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>) {
  %n = tsr.neg %y : tensor<8x64xf32>
  %e = tsr.exp %n : tensor<8x64xf32>
  %one = tsr.constant dense<1.0> : tensor<8x64xf32>
  %d = tsr.add %one, %e : tensor<8x64xf32>
  %sy = tsr.div %one, %d : tensor<8x64xf32>
  %a = tsr.mul %x, %sy : tensor<8x64xf32>
  %sx = tsr.sigmoid %x : tensor<8x64xf32>
  %b = tsr.mul %x, %sx : tensor<8x64xf32>
  %nx = tsr.neg %x : tensor<8x64xf32>
  %ex = tsr.exp %nx : tensor<8x64xf32>
  %dx = tsr.add %one, %ex : tensor<8x64xf32>
  %two = tsr.constant dense<2.0> : tensor<8x64xf32>
  %q = tsr.div %two, %dx : tensor<8x64xf32>
  return %a, %b, %sx, %q : tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>
}

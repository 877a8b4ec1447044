// RUN: tessera-import --raise-only %s | FileCheck %s
// Raising the exporter's attention chains to tsr.attention: the PyTorch
// MultiheadAttention form (Q divided before the matmul, K transposed from
// [S, B*H, Dh], an additive 0/-inf mask), the hand-written GPT-2 form (the
// scores multiplied, masked_fill as a select on a constant lower-triangular
// mask), a general additive mask kept as the operand, and near misses.

// CHECK-LABEL: func.func @mha_causal
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x2xf32>, %[[K:.*]]: tensor<4x2x2xf32>, %[[V:.*]]: tensor<2x4x2xf32>)
// CHECK-NEXT: %[[KT:.*]] = tsr.transpose %[[K]] {permutation = array<i64: 1, 0, 2>} : tensor<4x2x2xf32> -> tensor<2x4x2xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %[[Q]], %[[KT]], %[[V]] {causal = true, scale = 0.707106769 : f32} : tensor<2x4x2xf32>, tensor<2x4x2xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>, tensor<2x4xf32>
// CHECK-NEXT: return %[[O]]
func.func @mha_causal(%q: tensor<2x4x2xf32>, %k: tensor<4x2x2xf32>, %v: tensor<2x4x2xf32>) -> tensor<2x4x2xf32> {
  %c = tsr.constant dense<1.41421354> : tensor<2x4x2xf32>
  %qs = tsr.div %q, %c : tensor<2x4x2xf32>
  %kt = tsr.transpose %k {permutation = array<i64: 1, 2, 0>} : tensor<4x2x2xf32> -> tensor<2x2x4xf32>
  %s = tsr.matmul %qs, %kt : tensor<2x4x2xf32>, tensor<2x2x4xf32> -> tensor<2x4x4xf32>
  %mask = tsr.constant dense<[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]> : tensor<1x4x4xf32>
  %mb = tsr.broadcast %mask : tensor<1x4x4xf32> -> tensor<2x4x4xf32>
  %sm = tsr.add %s, %mb : tensor<2x4x4xf32>
  %p = tsr.softmax %sm {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>
  return %o : tensor<2x4x2xf32>
}

// CHECK-LABEL: func.func @handwritten_causal
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x2xf32>, %[[K:.*]]: tensor<1x2x4x2xf32>, %[[V:.*]]: tensor<1x2x4x2xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 5.000000e-01 : f32} : tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32> -> tensor<1x2x4x2xf32>, tensor<1x2x4xf32>
// CHECK-NEXT: return %[[O]]
func.func @handwritten_causal(%q: tensor<1x2x4x2xf32>, %k: tensor<1x2x4x2xf32>, %v: tensor<1x2x4x2xf32>) -> tensor<1x2x4x2xf32> {
  %kt = tsr.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x2xf32> -> tensor<1x2x2x4xf32>
  %s = tsr.matmul %q, %kt : tensor<1x2x4x2xf32>, tensor<1x2x2x4xf32> -> tensor<1x2x4x4xf32>
  %c = tsr.constant dense<0.5> : tensor<1x2x4x4xf32>
  %ss = tsr.mul %s, %c : tensor<1x2x4x4xf32>
  // bias[:S, :S] == 0: true strictly above the diagonal.
  %drop = tsr.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %db = tsr.broadcast %drop : tensor<1x1x4x4xi1> -> tensor<1x2x4x4xi1>
  %ninf = tsr.constant dense<0xFF800000> : tensor<1x2x4x4xf32>
  %sm = tsr.select %db, %ninf, %ss : tensor<1x2x4x4xi1>, tensor<1x2x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x2xf32> -> tensor<1x2x4x2xf32>
  return %o : tensor<1x2x4x2xf32>
}

// A mask that is not causal (the last key is masked out for every query)
// stays an operand, as [Sq, Sk]; no mask and no scale give scale = 1.
// CHECK-LABEL: func.func @general_mask
// CHECK: %[[M:.*]] = tsr.constant dense<{{.*}}> : tensor<4x4xf32>
// CHECK: tsr.attention %arg0, %arg1, %arg2, %[[M]] {scale = 2.500000e-01 : f32} : tensor<2x4x2xf32>, tensor<2x4x2xf32>, tensor<2x4x2xf32>, tensor<4x4xf32> -> tensor<2x4x2xf32>, tensor<2x4xf32>
// CHECK-NOT: tsr.softmax
// CHECK: tsr.attention %arg0, %arg1, %arg2 {scale = 1.000000e+00 : f32} : tensor<2x4x2xf32>, tensor<2x4x2xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>, tensor<2x4xf32>
// CHECK-NOT: tsr.softmax
func.func @general_mask(%q: tensor<2x4x2xf32>, %k: tensor<2x4x2xf32>, %v: tensor<2x4x2xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xf32>) {
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x2xf32>, tensor<2x4x2xf32> -> tensor<2x4x4xf32>
  %mask = tsr.constant dense<[[[0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000]]]> : tensor<1x4x4xf32>
  %mb = tsr.broadcast %mask : tensor<1x4x4xf32> -> tensor<2x4x4xf32>
  %c = tsr.constant dense<4.0> : tensor<2x4x4xf32>
  %ss = tsr.div %s, %c : tensor<2x4x4xf32>
  %sm = tsr.add %mb, %ss : tensor<2x4x4xf32>
  %p = tsr.softmax %sm {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>
  %s2 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x2xf32>, tensor<2x4x2xf32> -> tensor<2x4x4xf32>
  %p2 = tsr.softmax %s2 {axis = 2 : i64} : tensor<2x4x4xf32>
  %o2 = tsr.matmul %p2, %v : tensor<2x4x4xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>
  return %o, %o2 : tensor<2x4x2xf32>, tensor<2x4x2xf32>
}

// Near misses that must stay: the scores have another user; the softmax is
// not over the last axis; a scale applied after a general (not 0/-inf) mask
// would scale the mask too.
// CHECK-LABEL: func.func @not_attention
// CHECK-NOT: tsr.attention
// CHECK: tsr.softmax %{{.*}} {axis = 2 : i64}
// CHECK-NOT: tsr.attention
// CHECK: tsr.softmax %{{.*}} {axis = 1 : i64}
// CHECK-NOT: tsr.attention
// CHECK: tsr.softmax %{{.*}} {axis = 2 : i64}
// CHECK-NOT: tsr.attention
// CHECK: return
func.func @not_attention(%q: tensor<2x4x2xf32>, %k: tensor<2x4x2xf32>, %v: tensor<2x4x2xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x4xf32>, tensor<2x4x2xf32>, tensor<2x4x2xf32>) {
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x2xf32>, tensor<2x4x2xf32> -> tensor<2x4x4xf32>
  %c = tsr.constant dense<0.5> : tensor<2x4x4xf32>
  %ss = tsr.mul %s, %c : tensor<2x4x4xf32>
  %p = tsr.softmax %ss {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>
  %s2 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x2xf32>, tensor<2x4x2xf32> -> tensor<2x4x4xf32>
  %p2 = tsr.softmax %s2 {axis = 1 : i64} : tensor<2x4x4xf32>
  %o2 = tsr.matmul %p2, %v : tensor<2x4x4xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>
  %s3 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x2xf32>, tensor<2x4x2xf32> -> tensor<2x4x4xf32>
  %mask = tsr.constant dense<[[[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]]> : tensor<1x4x4xf32>
  %mb = tsr.broadcast %mask : tensor<1x4x4xf32> -> tensor<2x4x4xf32>
  %sm3 = tsr.add %s3, %mb : tensor<2x4x4xf32>
  %ss3 = tsr.mul %sm3, %c : tensor<2x4x4xf32>
  %p3 = tsr.softmax %ss3 {axis = 2 : i64} : tensor<2x4x4xf32>
  %o3 = tsr.matmul %p3, %v : tensor<2x4x4xf32>, tensor<2x4x2xf32> -> tensor<2x4x2xf32>
  return %o, %s, %o2, %o3 : tensor<2x4x2xf32>, tensor<2x4x4xf32>, tensor<2x4x2xf32>, tensor<2x4x2xf32>
}

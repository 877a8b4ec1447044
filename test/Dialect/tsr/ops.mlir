// RUN: tessera-opt %s | tessera-opt | FileCheck %s
// Round-trip of the custom assembly of every op family.

// CHECK-LABEL: func.func @roundtrip
func.func @roundtrip(%x: tensor<8x16x64xf32>, %w: tensor<256x64xf32>, %g: tensor<64xf32>, %ids: tensor<8x16xi64>) -> tensor<8x16x4x64xf32> {
  // CHECK: tsr.gather
  %e = tsr.gather %w, %ids : tensor<256x64xf32>, tensor<8x16xi64> -> tensor<8x16x64xf32>
  // CHECK: tsr.add
  %a = tsr.add %x, %e : tensor<8x16x64xf32>
  // CHECK: tsr.layer_norm {{.*}} {axis = 2 : i64
  %n = tsr.layer_norm %a, %g, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<8x16x64xf32>, tensor<64xf32>
  // CHECK: tsr.matmul {{.*}} {transpose_rhs = true}
  %y = tsr.matmul %n, %w {transpose_rhs = true} : tensor<8x16x64xf32>, tensor<256x64xf32> -> tensor<8x16x256xf32>
  // CHECK: tsr.reshape
  %r = tsr.reshape %y : tensor<8x16x256xf32> -> tensor<8x16x4x64xf32>
  // CHECK: tsr.softmax {{.*}} {axis = 3 : i64}
  %s = tsr.softmax %r {axis = 3 : i64} : tensor<8x16x4x64xf32>
  return %s : tensor<8x16x4x64xf32>
}

// CHECK-LABEL: func.func @sharding_attr
// CHECK-SAME: #tsr.sharding<@grid, {{\[\[}}0], []] partial = [1]>
// CHECK-SAME: #tsr.sharding<@grid, {{\[\[}}], {3, 64 : [1]}]>
func.func @sharding_attr() attributes {a = #tsr.sharding<@grid, [[0], []] partial = [1]>, b = #tsr.sharding<@grid, [[], {3, 64 : [1]}]>} {
  return
}

// CHECK-LABEL: func.func @attention
// CHECK: %[[O:.*]], %[[L:.*]] = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f32} : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x6xf32> -> tensor<2x4x16x6xf32>, tensor<2x4x16xf32>
// CHECK: tsr.attention %arg0, %arg1, %arg2, %arg3 {scale = 1.250000e-01 : f32} : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x6xf32>, tensor<16x16xf32> -> tensor<2x4x16x6xf32>, tensor<2x4x16xf32>
// CHECK: tsr.attention_grad %arg0, %arg1, %arg2, %[[O]], %[[L]], %[[O]], %arg3 {causal = true, scale = 1.250000e-01 : f32} : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16xf32>, tensor<16x16xf32>
func.func @attention(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x8xf32>, %v: tensor<2x4x16x6xf32>, %m: tensor<16x16xf32>) -> tensor<2x4x16x8xf32> {
  %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.125 : f32} : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x6xf32> -> tensor<2x4x16x6xf32>, tensor<2x4x16xf32>
  %o2, %l2 = tsr.attention %q, %k, %v, %m {scale = 0.125 : f32} : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x6xf32>, tensor<16x16xf32> -> tensor<2x4x16x6xf32>, tensor<2x4x16xf32>
  %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %l, %o, %m {causal = true, scale = 0.125 : f32} : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16x6xf32>, tensor<2x4x16xf32>, tensor<16x16xf32>
  return %dq : tensor<2x4x16x8xf32>
}

// RMSNorm, SiLU, sigmoid and their gradients; result types are inferred.
// CHECK-LABEL: func.func @rms_norm_silu
// CHECK: %[[Y:.*]] = tsr.rms_norm %arg0, %arg1 {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %[[DX:.*]], %{{.*}} = tsr.rms_norm_grad %arg0, %arg1, %[[Y]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: tsr.rms_norm_grad %arg2, %arg3, %arg2 {axis = 1 : i64, {{.*}}} : tensor<2x4x8xbf16>, tensor<4x8xbf16>
// CHECK: %[[A:.*]] = tsr.silu %[[DX]] : tensor<2x4x8xf32>
// CHECK: %[[G:.*]] = tsr.silu_grad %[[A]], %[[Y]] : tensor<2x4x8xf32>
// CHECK: tsr.sigmoid %[[G]] : tensor<2x4x8xf32>
func.func @rms_norm_silu(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %xb: tensor<2x4x8xbf16>, %wb: tensor<4x8xbf16>) -> (tensor<2x4x8xf32>, tensor<4x8xbf16>) {
  %y = tsr.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-06 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %dx, %dw = tsr.rms_norm_grad %x, %w, %y {axis = 2 : i64, epsilon = 1.0e-06 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %dxb, %dwb = tsr.rms_norm_grad %xb, %wb, %xb {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<2x4x8xbf16>, tensor<4x8xbf16>
  %a = tsr.silu %dx : tensor<2x4x8xf32>
  %g = tsr.silu_grad %a, %y : tensor<2x4x8xf32>
  %s = tsr.sigmoid %g : tensor<2x4x8xf32>
  return %s, %dwb : tensor<2x4x8xf32>, tensor<4x8xbf16>
}

// Grouped-query attention: 8 query heads share 2 K/V heads; the gradient of
// K and V has their (2-head) types.
// CHECK-LABEL: func.func @attention_gqa
// CHECK: %[[O:.*]], %[[L:.*]] = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f32} : tensor<2x8x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x6xf32> -> tensor<2x8x16x6xf32>, tensor<2x8x16xf32>
// CHECK: tsr.attention_grad %arg0, %arg1, %arg2, %[[O]], %[[L]], %[[O]] {causal = true, scale = 1.250000e-01 : f32} : tensor<2x8x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x6xf32>, tensor<2x8x16x6xf32>, tensor<2x8x16xf32>
func.func @attention_gqa(%q: tensor<2x8x16x8xf32>, %k: tensor<2x2x16x8xf32>, %v: tensor<2x2x16x6xf32>) -> tensor<2x2x16x8xf32> {
  %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.125 : f32} : tensor<2x8x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x6xf32> -> tensor<2x8x16x6xf32>, tensor<2x8x16xf32>
  %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %l, %o {causal = true, scale = 0.125 : f32} : tensor<2x8x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x6xf32>, tensor<2x8x16x6xf32>, tensor<2x8x16xf32>
  return %dk : tensor<2x2x16x8xf32>
}

// CHECK-LABEL: func.func @sum_squares
// CHECK: tsr.sum_squares %{{.*}} : tensor<8x16xf32> -> tensor<f32>
func.func @sum_squares(%g: tensor<8x16xf32>) -> tensor<f32> {
  %0 = tsr.sum_squares %g : tensor<8x16xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// CHECK-LABEL: func.func @linear
// CHECK: %[[Y:.*]] = tsr.linear %{{.*}}, %{{.*}}, %{{.*}} {transpose_rhs = true} : tensor<8x16x64xf32>, tensor<256x64xf32>, tensor<256xf32> -> tensor<8x16x256xf32>
// CHECK: %{{.*}}, %{{.*}} = tsr.linear %[[Y]], %{{.*}}, %{{.*}} {activation = "gelu_tanh"} : tensor<8x16x256xf32>, tensor<256x256xf32>, tensor<256xf32> -> tensor<8x16x256xf32>, tensor<8x16x256xf32>
// CHECK: tsr.bias_activation_grad %{{.*}}, %{{.*}} {activation = "silu"} : tensor<8x16x256xf32> -> tensor<256xf32>
func.func @linear(%x: tensor<8x16x64xf32>, %w: tensor<256x64xf32>, %w2: tensor<256x256xf32>, %b: tensor<256xf32>) -> (tensor<8x16x256xf32>, tensor<256xf32>) {
  %y = tsr.linear %x, %w, %b {transpose_rhs = true} : tensor<8x16x64xf32>, tensor<256x64xf32>, tensor<256xf32> -> tensor<8x16x256xf32>
  %a, %pre = tsr.linear %y, %w2, %b {activation = "gelu_tanh"} : tensor<8x16x256xf32>, tensor<256x256xf32>, tensor<256xf32> -> tensor<8x16x256xf32>, tensor<8x16x256xf32>
  %dx, %db = tsr.bias_activation_grad %pre, %a {activation = "silu"} : tensor<8x16x256xf32> -> tensor<256xf32>
  return %dx, %db : tensor<8x16x256xf32>, tensor<256xf32>
}

// CHECK-LABEL: func.func @fused_elementwise
// CHECK: %{{.*}}:2 = tsr.fused_elementwise %arg0, %arg1, %arg2 {args = array<i64: 0, 1, 3, 2, 4>, ops = ["mul", "add", "gelu_tanh"], outputs = array<i64: 5, 3>} : (tensor<8x16x64xf32>, tensor<f32>, tensor<64xf32>) -> (tensor<8x16x64xf32>, tensor<8x16x64xf32>)
func.func @fused_elementwise(%x: tensor<8x16x64xf32>, %s: tensor<f32>, %b: tensor<64xf32>) -> tensor<8x16x64xf32> {
  %y, %xs = tsr.fused_elementwise %x, %s, %b {ops = ["mul", "add", "gelu_tanh"], args = array<i64: 0, 1, 3, 2, 4>, outputs = array<i64: 5, 3>} : (tensor<8x16x64xf32>, tensor<f32>, tensor<64xf32>) -> (tensor<8x16x64xf32>, tensor<8x16x64xf32>)
  return %y : tensor<8x16x64xf32>
}

// Multi-tensor updates (tsr-fuse-optimizer) round-trip.
// CHECK-LABEL: func.func @multi_updates
// CHECK: %{{.*}}:2 = tsr.multi_sgd_update[%arg0, %arg1, %arg0, %arg1], %arg2 {weight_decay = 0.000000e+00 : f32} : tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>
// CHECK: %{{.*}}:6 = tsr.multi_adamw_update[%arg0, %arg1, %arg0, %arg1, %arg0, %arg1, %arg0, %arg1], %arg2, %arg2 {beta1 = 0.899999976 : f32, beta2 = 9.990000e-01 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.00999999977 : f32} : tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>
func.func @multi_updates(%p: tensor<4xf32>, %q: tensor<2x3xf32>, %s: tensor<f32>) -> (tensor<4xf32>, tensor<2x3xf32>) {
  %0:2 = tsr.multi_sgd_update [%p, %q, %p, %q], %s {weight_decay = 0.0 : f32} : tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>
  %1:6 = tsr.multi_adamw_update [%p, %q, %p, %q, %p, %q, %p, %q], %s, %s {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>
  return %0#0, %1#1 : tensor<4xf32>, tensor<2x3xf32>
}

// The fused residual add + norm ops of tsr-fuse-norm; result types are
// inferred.
// CHECK-LABEL: func.func @fused_norm
// CHECK: %[[H:.*]], %[[Y:.*]] = tsr.add_layer_norm %arg0, %arg1, %arg2, %arg2 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %[[H2:.*]], %[[Y2:.*]] = tsr.add_rms_norm %[[H]], %[[Y]], %arg2 {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %[[DX:.*]], %{{.*}}, %{{.*}} = tsr.layer_norm_grad_add %[[H2]], %arg2, %[[Y2]], %arg1 {axis = 2 : i64, {{.*}}} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: tsr.rms_norm_grad_add %arg3, %arg4, %arg3, %arg3 {axis = 1 : i64, {{.*}}} : tensor<2x4x8xbf16>, tensor<4x8xbf16>
func.func @fused_norm(%x: tensor<2x4x8xf32>, %r: tensor<2x4x8xf32>, %g: tensor<8xf32>, %xb: tensor<2x4x8xbf16>, %wb: tensor<4x8xbf16>) -> (tensor<2x4x8xf32>, tensor<4x8xbf16>) {
  %h, %y = tsr.add_layer_norm %x, %r, %g, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %h2, %y2 = tsr.add_rms_norm %h, %y, %g {axis = 2 : i64, epsilon = 1.0e-06 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %dx, %dg, %db = tsr.layer_norm_grad_add %h2, %g, %y2, %r {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %dxb, %dwb = tsr.rms_norm_grad_add %xb, %wb, %xb, %xb {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<2x4x8xbf16>, tensor<4x8xbf16>
  return %dx, %dwb : tensor<2x4x8xf32>, tensor<4x8xbf16>
}

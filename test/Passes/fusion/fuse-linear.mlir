// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-fuse-linear))' %s | FileCheck %s

// The MLP of the example GPT after partition: bias as [1, 1, N] reshape +
// broadcast, GELU whose input the backward's gelu_grad reads, and the bias
// gradient as a reduce_sum of the gelu_grad.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:.*]]: tensor<8x64x64xf32>, %[[W:.*]]: tensor<256x64xf32>, %[[B:.*]]: tensor<256xf32>, %[[DY:.*]]: tensor<8x64x256xf32>)
// CHECK-NOT: tsr.broadcast
// CHECK: %[[A:.*]], %[[PRE:.*]] = tsr.linear %[[X]], %[[W]], %[[B]] {activation = "gelu", transpose_rhs = true, tsr.fwd = 30 : i64} : tensor<8x64x64xf32>, tensor<256x64xf32>, tensor<256xf32> -> tensor<8x64x256xf32>, tensor<8x64x256xf32>
// CHECK-NOT: tsr.gelu
// CHECK: %[[DX:.*]], %[[DB:.*]] = tsr.bias_activation_grad %[[PRE]], %[[DY]] {activation = "gelu", tsr.bwd = 34 : i64} : tensor<8x64x256xf32> -> tensor<256xf32>
// CHECK-NOT: tsr.reduce_sum
// CHECK: return %[[A]], %[[DX]], %[[DB]]
func.func @mlp(%x: tensor<8x64x64xf32>, %w: tensor<256x64xf32>, %b: tensor<256xf32>, %dy: tensor<8x64x256xf32>) -> (tensor<8x64x256xf32>, tensor<8x64x256xf32>, tensor<256xf32>) {
  %mm = tsr.matmul %x, %w {transpose_rhs = true, tsr.fwd = 30 : i64} : tensor<8x64x64xf32>, tensor<256x64xf32> -> tensor<8x64x256xf32>
  %b3 = tsr.reshape %b : tensor<256xf32> -> tensor<1x1x256xf32>
  %bb = tsr.broadcast %b3 : tensor<1x1x256xf32> -> tensor<8x64x256xf32>
  %h = tsr.add %bb, %mm : tensor<8x64x256xf32>
  %a = tsr.gelu %h : tensor<8x64x256xf32>
  %dh = tsr.gelu_grad %h, %dy {tsr.bwd = 34 : i64} : tensor<8x64x256xf32>
  %db = tsr.reduce_sum %dh {axes = array<i64: 0, 1>} : tensor<8x64x256xf32> -> tensor<256xf32>
  return %a, %dh, %db : tensor<8x64x256xf32>, tensor<8x64x256xf32>, tensor<256xf32>
}

// A projection without activation, the bias [1, N] as the add's rhs; the
// tanh GELU, ReLU and SiLU without other readers of the sum (no
// preactivation result).
// CHECK-LABEL: func.func @plain_and_activations
// CHECK: %[[P:.*]] = tsr.linear %{{.*}}, %{{.*}}, %{{.*}} {transpose_rhs = true} : tensor<512x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<512x64xf32>
// CHECK: %[[T:.*]] = tsr.linear %[[P]], %{{.*}}, %{{.*}} {activation = "gelu_tanh"} : tensor<512x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<512x64xf32>
// CHECK: %[[R:.*]] = tsr.linear %[[T]], %{{.*}}, %{{.*}} {activation = "relu"} : tensor<512x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<512x64xf32>
// CHECK: %[[S:.*]] = tsr.linear %[[R]], %{{.*}}, %{{.*}} {activation = "silu"} : tensor<512x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<512x64xf32>
// CHECK-NOT: tsr.add
// CHECK: return %[[S]]
func.func @plain_and_activations(%x: tensor<512x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>) -> tensor<512x64xf32> {
  %b2 = tsr.reshape %b : tensor<64xf32> -> tensor<1x64xf32>
  %bb = tsr.broadcast %b2 : tensor<1x64xf32> -> tensor<512x64xf32>
  %0 = tsr.matmul %x, %w {transpose_rhs = true} : tensor<512x64xf32>, tensor<64x64xf32> -> tensor<512x64xf32>
  %1 = tsr.add %0, %bb : tensor<512x64xf32>
  %2 = tsr.matmul %1, %w : tensor<512x64xf32>, tensor<64x64xf32> -> tensor<512x64xf32>
  %3 = tsr.add %2, %bb : tensor<512x64xf32>
  %4 = tsr.gelu %3 {approximate = "tanh"} : tensor<512x64xf32>
  %5 = tsr.matmul %4, %w : tensor<512x64xf32>, tensor<64x64xf32> -> tensor<512x64xf32>
  %6 = tsr.add %5, %bb : tensor<512x64xf32>
  %7 = tsr.relu %6 : tensor<512x64xf32>
  %8 = tsr.matmul %7, %w : tensor<512x64xf32>, tensor<64x64xf32> -> tensor<512x64xf32>
  %9 = tsr.add %8, %bb : tensor<512x64xf32>
  %10 = tsr.silu %9 : tensor<512x64xf32>
  return %10 : tensor<512x64xf32>
}

// Must not fuse: the matmul has another reader; the broadcast value is not
// a bias (a [S, N] position table); the other operand is no broadcast (a
// residual); bf16.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: tsr.linear
// CHECK-COUNT-4: tsr.add
// CHECK-NOT: tsr.linear
func.func @not_fused(%x: tensor<8x64x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>, %pos: tensor<64x64xf32>, %xh: tensor<8x64x64xbf16>, %wh: tensor<64x64xbf16>, %bh: tensor<64xbf16>) -> (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xbf16>) {
  %bb = tsr.broadcast %b : tensor<64xf32> -> tensor<8x64x64xf32>
  %0 = tsr.matmul %x, %w : tensor<8x64x64xf32>, tensor<64x64xf32> -> tensor<8x64x64xf32>
  %1 = tsr.add %0, %bb : tensor<8x64x64xf32>
  %pb = tsr.broadcast %pos : tensor<64x64xf32> -> tensor<8x64x64xf32>
  %2 = tsr.matmul %x, %w {transpose_rhs = true} : tensor<8x64x64xf32>, tensor<64x64xf32> -> tensor<8x64x64xf32>
  %3 = tsr.add %2, %pb : tensor<8x64x64xf32>
  %4 = tsr.matmul %1, %w : tensor<8x64x64xf32>, tensor<64x64xf32> -> tensor<8x64x64xf32>
  %5 = tsr.add %4, %x : tensor<8x64x64xf32>
  %bbh = tsr.broadcast %bh : tensor<64xbf16> -> tensor<8x64x64xbf16>
  %6 = tsr.matmul %xh, %wh : tensor<8x64x64xbf16>, tensor<64x64xbf16> -> tensor<8x64x64xbf16>
  %7 = tsr.add %6, %bbh : tensor<8x64x64xbf16>
  return %0, %1, %3, %5, %7 : tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xbf16>
}

// Must not fuse the bias gradient: a reduce_sum that keeps its dims, one
// that leaves out a leading dim, one of a gradient that is not an
// activation's.
// CHECK-LABEL: func.func @backward_not_fused
// CHECK-NOT: tsr.bias_activation_grad
// CHECK: tsr.gelu_grad
// CHECK: tsr.reduce_sum
// CHECK: tsr.relu_grad
// CHECK: tsr.reduce_sum
// CHECK: tsr.softmax_grad
// CHECK: tsr.reduce_sum
// CHECK-NOT: tsr.bias_activation_grad
func.func @backward_not_fused(%x: tensor<8x64x256xf32>, %dy: tensor<8x64x256xf32>) -> (tensor<1x1x256xf32>, tensor<64x256xf32>, tensor<256xf32>) {
  %0 = tsr.gelu_grad %x, %dy : tensor<8x64x256xf32>
  %1 = tsr.reduce_sum %0 {axes = array<i64: 0, 1>, keepdim = true} : tensor<8x64x256xf32> -> tensor<1x1x256xf32>
  %2 = tsr.relu_grad %x, %dy : tensor<8x64x256xf32>
  %3 = tsr.reduce_sum %2 {axes = array<i64: 0>} : tensor<8x64x256xf32> -> tensor<64x256xf32>
  %4 = tsr.softmax_grad %x, %dy {axis = 2 : i64} : tensor<8x64x256xf32>
  %5 = tsr.reduce_sum %4 {axes = array<i64: 0, 1>} : tensor<8x64x256xf32> -> tensor<256xf32>
  return %1, %3, %5 : tensor<1x1x256xf32>, tensor<64x256xf32>, tensor<256xf32>
}

// The bias gradient of a SiLU and of a ReLU: fused.
// CHECK-LABEL: func.func @backward_silu_relu
// CHECK: %{{.*}}, %[[DB1:.*]] = tsr.bias_activation_grad %{{.*}}, %{{.*}} {activation = "silu"} : tensor<512x64xf32> -> tensor<64xf32>
// CHECK: %{{.*}}, %[[DB2:.*]] = tsr.bias_activation_grad %{{.*}}, %{{.*}} {activation = "relu"} : tensor<512x64xf32> -> tensor<64xf32>
// CHECK: return %[[DB1]], %[[DB2]]
func.func @backward_silu_relu(%x: tensor<512x64xf32>, %dy: tensor<512x64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %0 = tsr.silu_grad %x, %dy : tensor<512x64xf32>
  %1 = tsr.reduce_sum %0 {axes = array<i64: 0>} : tensor<512x64xf32> -> tensor<64xf32>
  %2 = tsr.relu_grad %x, %dy : tensor<512x64xf32>
  %3 = tsr.reduce_sum %2 {axes = array<i64: 0>} : tensor<512x64xf32> -> tensor<64xf32>
  return %1, %3 : tensor<64xf32>, tensor<64xf32>
}

// HF GPT-2's MLP (Conv1D on [B·S, N] rows, GELU on [B, S, N]): the
// activation and the gradient's reduce_sum read through a tsr.reshape that
// keeps the last dimension.
// CHECK-LABEL: func.func @hf_gpt2_mlp
// CHECK: %[[A:.*]], %[[PRE:.*]] = tsr.linear %{{.*}}, %{{.*}}, %{{.*}} {activation = "gelu_tanh"} : tensor<64x64xf32>, tensor<64x128xf32>, tensor<128xf32> -> tensor<64x128xf32>, tensor<64x128xf32>
// CHECK: %[[A3:.*]] = tsr.reshape %[[A]] : tensor<64x128xf32> -> tensor<4x16x128xf32>
// CHECK: %[[PRE3:.*]] = tsr.reshape %[[PRE]] : tensor<64x128xf32> -> tensor<4x16x128xf32>
// CHECK: %[[DX:.*]], %[[DB:.*]] = tsr.bias_activation_grad %[[PRE3]], %{{.*}} {activation = "gelu_tanh"} : tensor<4x16x128xf32> -> tensor<128xf32>
// CHECK: %[[DX2:.*]] = tsr.reshape %[[DX]] : tensor<4x16x128xf32> -> tensor<64x128xf32>
// CHECK-NOT: tsr.reduce_sum
// CHECK: return %[[A3]], %[[DX2]], %[[DB]]
func.func @hf_gpt2_mlp(%x: tensor<64x64xf32>, %w: tensor<64x128xf32>, %b: tensor<128xf32>, %dy: tensor<4x16x128xf32>) -> (tensor<4x16x128xf32>, tensor<64x128xf32>, tensor<128xf32>) {
  %mm = tsr.matmul %x, %w : tensor<64x64xf32>, tensor<64x128xf32> -> tensor<64x128xf32>
  %b2 = tsr.reshape %b : tensor<128xf32> -> tensor<1x128xf32>
  %bb = tsr.broadcast %b2 : tensor<1x128xf32> -> tensor<64x128xf32>
  %h = tsr.add %mm, %bb : tensor<64x128xf32>
  %h3 = tsr.reshape %h : tensor<64x128xf32> -> tensor<4x16x128xf32>
  %a = tsr.gelu %h3 {approximate = "tanh"} : tensor<4x16x128xf32>
  %dh = tsr.gelu_grad %h3, %dy {approximate = "tanh"} : tensor<4x16x128xf32>
  %dh2 = tsr.reshape %dh : tensor<4x16x128xf32> -> tensor<64x128xf32>
  %db = tsr.reduce_sum %dh2 {axes = array<i64: 0>} : tensor<64x128xf32> -> tensor<128xf32>
  return %a, %dh2, %db : tensor<4x16x128xf32>, tensor<64x128xf32>, tensor<128xf32>
}

// Must not fuse away a value tessera-check traces (tsr.trace).
// CHECK-LABEL: func.func @traced
// CHECK-NOT: tsr.linear
// CHECK-NOT: tsr.bias_activation_grad
// CHECK: return
func.func @traced(%x: tensor<512x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>, %dy: tensor<512x64xf32>) -> (tensor<512x64xf32>, tensor<64xf32>) {
  %bb = tsr.broadcast %b : tensor<64xf32> -> tensor<512x64xf32>
  %0 = tsr.matmul %x, %w {tsr.trace = 0 : i64} : tensor<512x64xf32>, tensor<64x64xf32> -> tensor<512x64xf32>
  %1 = tsr.add %0, %bb : tensor<512x64xf32>
  %2 = tsr.gelu_grad %x, %dy {tsr.trace = 1 : i64} : tensor<512x64xf32>
  %3 = tsr.reduce_sum %2 {axes = array<i64: 0>} : tensor<512x64xf32> -> tensor<64xf32>
  return %1, %3 : tensor<512x64xf32>, tensor<64xf32>
}

// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-fuse-elementwise))' --split-input-file %s | FileCheck %s

// A bias broadcast into add + gelu + a residual mul: one kernel; the
// broadcast is taken in (the kernel reads the [64] bias).
// CHECK-LABEL: func.func @bias_gelu_chain
// CHECK-NOT: tsr.broadcast
// CHECK: %[[F:.*]] = tsr.fused_elementwise %arg0, %arg1, %arg2 {args = array<i64: 0, 1, 3, 4, 2>, ops = ["add", "gelu_tanh", "mul"], outputs = array<i64: 5>} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
// CHECK-NEXT: return %[[F]]
func.func @bias_gelu_chain(%x: tensor<8x64xf32>, %bias: tensor<64xf32>, %r: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %b = tsr.broadcast %bias : tensor<64xf32> -> tensor<8x64xf32>
  %s = tsr.add %x, %b : tensor<8x64xf32>
  %y = tsr.gelu %s {approximate = "tanh"} : tensor<8x64xf32>
  %z = tsr.mul %y, %r : tensor<8x64xf32>
  return %z : tensor<8x64xf32>
}

// -----

// An intermediate read outside the group (by a reduction) is a result too;
// the fused op sits before its first outside reader.
// CHECK-LABEL: func.func @multi_output
// CHECK: %[[F:.*]]:2 = tsr.fused_elementwise %arg0, %arg1 {args = array<i64: 0, 1, 2, 3, 2>, ops = ["add", "exp", "mul"], outputs = array<i64: 2, 4>}
// CHECK-NEXT: %[[S:.*]] = tsr.reduce_sum %[[F]]#0
// CHECK-NEXT: return %[[F]]#1, %[[S]]
func.func @multi_output(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>) {
  %a = tsr.add %x, %y : tensor<4x8xf32>
  %e = tsr.exp %a : tensor<4x8xf32>
  %m = tsr.mul %e, %a : tensor<4x8xf32>
  %s = tsr.reduce_sum %a {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4xf32>
  return %m, %s : tensor<4x8xf32>, tensor<4xf32>
}

// -----

// A diamond (one value read by two branches that meet again) is one group.
// CHECK-LABEL: func.func @diamond
// CHECK-NEXT: %[[F:.*]] = tsr.fused_elementwise %arg0, %arg1 {args = array<i64: 0, 1, 2, 2, 3, 4>, ops = ["add", "exp", "tanh", "mul"], outputs = array<i64: 5>}
// CHECK-NEXT: return %[[F]]
func.func @diamond(%x: tensor<16xf32>, %y: tensor<16xf32>) -> tensor<16xf32> {
  %a = tsr.add %x, %y : tensor<16xf32>
  %b = tsr.exp %a : tensor<16xf32>
  %c = tsr.tanh %a : tensor<16xf32>
  %d = tsr.mul %b, %c : tensor<16xf32>
  return %d : tensor<16xf32>
}

// -----

// A select on a mask made outside (equal is not fused: its result is i1):
// the condition is an i1 input of the fused op. The activation gradients
// fuse too.
// CHECK-LABEL: func.func @select_and_grads
// CHECK: %[[M:.*]] = tsr.equal
// CHECK-NEXT: %[[F:.*]] = tsr.fused_elementwise %[[M]], %arg0, %arg1 {args = array<i64: 0, 1, 2, 1, 3>, ops = ["select", "gelu_grad"], outputs = array<i64: 4>} : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
func.func @select_and_grads(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %m = tsr.equal %x, %y : tensor<4x4xf32> -> tensor<4x4xi1>
  %s = tsr.select %m, %x, %y : tensor<4x4xi1>, tensor<4x4xf32>
  %g = tsr.gelu_grad %x, %s : tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}

// -----

// Must not fuse: a single op (nothing to save).
// CHECK-LABEL: func.func @single_op
// CHECK-NEXT: tsr.add
// CHECK-NEXT: return
func.func @single_op(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %a = tsr.add %x, %y : tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// Must not fuse: a broadcast that is also read outside the group stays a
// kernel, leaving a single op.
// CHECK-LABEL: func.func @shared_broadcast
// CHECK-NEXT: tsr.broadcast
// CHECK-NEXT: tsr.add
// CHECK-NEXT: tsr.reduce_sum
// CHECK-NOT: tsr.fused_elementwise
func.func @shared_broadcast(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>) {
  %bb = tsr.broadcast %b : tensor<8xf32> -> tensor<4x8xf32>
  %a = tsr.add %x, %bb : tensor<4x8xf32>
  %s = tsr.reduce_sum %bb {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4xf32>
  return %a, %s : tensor<4x8xf32>, tensor<4xf32>
}

// -----

// Must not fuse across a reduction that reads the group and feeds it back
// (a cycle): the add stays; the mul fuses only with its broadcast operand.
// CHECK-LABEL: func.func @no_cycle_through_reduction
// CHECK-NEXT: %[[A:.*]] = tsr.add %arg0, %arg1
// CHECK-NEXT: %[[S:.*]] = tsr.reduce_sum %[[A]]
// CHECK-NEXT: %[[F:.*]] = tsr.fused_elementwise %[[A]], %[[S]] {args = array<i64: 0, 1>, ops = ["mul"], outputs = array<i64: 2>} : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[F]]
func.func @no_cycle_through_reduction(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = tsr.add %x, %y : tensor<4x8xf32>
  %s = tsr.reduce_sum %a {axes = array<i64: 1>, keepdim = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %b = tsr.broadcast %s : tensor<4x1xf32> -> tensor<4x8xf32>
  %m = tsr.mul %a, %b : tensor<4x8xf32>
  return %m : tensor<4x8xf32>
}

// -----

// Must not fuse: bf16 values (the kernel runs f32 programs), and an op
// tagged for tessera-check's trace.
// CHECK-LABEL: func.func @bf16_and_traced
// CHECK-NEXT: tsr.add
// CHECK-NEXT: tsr.mul
// CHECK-NEXT: tsr.exp
// CHECK-NEXT: tsr.neg
// CHECK-NOT: tsr.fused_elementwise
func.func @bf16_and_traced(%x: tensor<4xbf16>, %y: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xf32>) {
  %a = tsr.add %x, %x : tensor<4xbf16>
  %m = tsr.mul %a, %x : tensor<4xbf16>
  %e = tsr.exp %y {tsr.trace = 7 : i64} : tensor<4xf32>
  %n = tsr.neg %e : tensor<4xf32>
  return %m, %n : tensor<4xbf16>, tensor<4xf32>
}

// -----

// Must not fuse ops of different shapes, nor matmuls.
// CHECK-LABEL: func.func @shapes_and_matmul
// CHECK-NEXT: tsr.exp
// CHECK-NEXT: tsr.matmul
// CHECK-NEXT: tsr.neg
// CHECK-NOT: tsr.fused_elementwise
func.func @shapes_and_matmul(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %e = tsr.exp %x : tensor<4x8xf32>
  %y = tsr.matmul %e, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  %n = tsr.neg %y : tensor<4x2xf32>
  return %n : tensor<4x2xf32>
}

// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-fuse-optimizer))' %s | FileCheck %s
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=1},tsr-fuse-optimizer))' %S/../zero/Inputs/adamw_step.mlir | FileCheck %s --check-prefix=Z1
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-fuse-optimizer),tsr-lower-to-runtime,func.func(tsr-plan-memory))' %S/../zero/Inputs/adamw_step.mlir | FileCheck %s --check-prefix=MEM

// SGD: the two updates with weight decay 0.01 and the same lr become one
// multi_sgd_update at the place of the last; the one without decay (a
// different group, alone) stays.
// CHECK-LABEL: func.func @sgd
// CHECK-SAME: (%[[W:[a-z0-9]+]]: tensor<8x4xf32>, %[[B:[a-z0-9]+]]: tensor<4xf32>, %[[E:[a-z0-9]+]]: tensor<4x4xf32>, %[[LR:[a-z0-9]+]]: tensor<f32>)
// CHECK-NEXT: %[[DW:.*]] = tsr.mul %[[W]], %[[W]]
// CHECK-NEXT: %[[DB:.*]] = tsr.mul %[[B]], %[[B]]
// CHECK-NEXT: %[[B1:.*]] = tsr.sgd_update %[[B]], %[[DB]], %[[LR]] {weight_decay = 0.000000e+00 : f32} : tensor<4xf32>
// CHECK-NEXT: %[[DE:.*]] = tsr.mul %[[E]], %[[E]]
// CHECK-NEXT: %[[R:.*]]:2 = tsr.multi_sgd_update[%[[W]], %[[E]], %[[DW]], %[[DE]]], %[[LR]] {weight_decay = 0.00999999977 : f32} : tensor<8x4xf32>, tensor<4x4xf32>, tensor<8x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: return %[[R]]#0, %[[B1]], %[[R]]#1
// CHECK-NOT: tsr.sgd_update
func.func @sgd(%w: tensor<8x4xf32>, %b: tensor<4xf32>, %e: tensor<4x4xf32>, %lr: tensor<f32>) -> (tensor<8x4xf32>, tensor<4xf32>, tensor<4x4xf32>) {
  %dw = tsr.mul %w, %w : tensor<8x4xf32>
  %w1 = tsr.sgd_update %w, %dw, %lr {weight_decay = 0.01 : f32} : tensor<8x4xf32>
  %db = tsr.mul %b, %b : tensor<4xf32>
  %b1 = tsr.sgd_update %b, %db, %lr {weight_decay = 0.0 : f32} : tensor<4xf32>
  %de = tsr.mul %e, %e : tensor<4x4xf32>
  %e1 = tsr.sgd_update %e, %de, %lr {weight_decay = 0.01 : f32} : tensor<4x4xf32>
  return %w1, %b1, %e1 : tensor<8x4xf32>, tensor<4xf32>, tensor<4x4xf32>
}

// Must not fuse: different hyper-parameters (betas, eps, the learning-rate
// operand, the step operand).
// CHECK-LABEL: func.func @different_hypers
// CHECK-COUNT-5: tsr.adamw_update
// CHECK-NOT: multi_adamw_update
func.func @different_hypers(%p: tensor<4xf32>, %g: tensor<4xf32>, %t: tensor<f32>, %t2: tensor<f32>, %lr: tensor<f32>, %lr2: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %p1, %m1, %v1 = tsr.adamw_update %p, %g, %g, %g, %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<f32>
  %p2, %m2, %v2 = tsr.adamw_update %p, %g, %g, %g, %t, %lr {beta1 = 0.8 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<f32>
  %p3, %m3, %v3 = tsr.adamw_update %p, %g, %g, %g, %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-06 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<f32>
  %p4, %m4, %v4 = tsr.adamw_update %p, %g, %g, %g, %t, %lr2 {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<f32>
  %p5, %m5, %v5 = tsr.adamw_update %p, %g, %g, %g, %t2, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<f32>
  return %p1, %p2, %p3, %p4, %p5 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// Must not fuse: an update whose old parameter is read after it (fp16
// dynamic loss scaling's select(ok, new, old)): the new value could not
// take the old one's buffer, and fused, every new value would be alive at
// once. The other pair fuses.
// CHECK-LABEL: func.func @old_value_read_later
// CHECK-NEXT: %[[A1:.*]] = tsr.sgd_update %arg0
// CHECK-NEXT: tsr.select %arg4, %[[A1]], %arg0
// CHECK-NEXT: %[[B1:.*]] = tsr.sgd_update %arg1
// CHECK-NEXT: tsr.select %arg4, %[[B1]], %arg1
// CHECK-NOT: multi_sgd_update
func.func @old_value_read_later(%a: tensor<4xf32>, %b: tensor<4xf32>, %g: tensor<4xf32>, %lr: tensor<f32>, %ok: tensor<4xi1>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a1 = tsr.sgd_update %a, %g, %lr {weight_decay = 0.0 : f32} : tensor<4xf32>
  %a2 = tsr.select %ok, %a1, %a : tensor<4xi1>, tensor<4xf32>
  %b1 = tsr.sgd_update %b, %g, %lr {weight_decay = 0.0 : f32} : tensor<4xf32>
  %b2 = tsr.select %ok, %b1, %b : tensor<4xi1>, tensor<4xf32>
  return %a2, %b2 : tensor<4xf32>, tensor<4xf32>
}

// Must not fuse: an update reading an earlier one's result (no single
// kernel can run both), and updates tessera-check traces (tsr.trace).
// CHECK-LABEL: func.func @dependent
// CHECK-COUNT-2: tsr.sgd_update
// CHECK-NOT: multi_sgd_update
func.func @dependent(%a: tensor<4xf32>, %b: tensor<4xf32>, %lr: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a1 = tsr.sgd_update %a, %a, %lr {weight_decay = 0.0 : f32} : tensor<4xf32>
  %b1 = tsr.sgd_update %b, %a1, %lr {weight_decay = 0.0 : f32} : tensor<4xf32>
  return %a1, %b1 : tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: func.func @traced
// CHECK-COUNT-2: tsr.sgd_update
// CHECK-NOT: multi_sgd_update
func.func @traced(%a: tensor<4xf32>, %b: tensor<4xf32>, %lr: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a1 = tsr.sgd_update %a, %a, %lr {weight_decay = 0.0 : f32, tsr.trace = 1 : i64} : tensor<4xf32>
  %b1 = tsr.sgd_update %b, %b, %lr {weight_decay = 0.0 : f32, tsr.trace = 2 : i64} : tensor<4xf32>
  return %a1, %b1 : tensor<4xf32>, tensor<4xf32>
}

// ZeRO-1 (dp = 2): w's update runs on its shard (an all_slice of w) and
// was followed by the all-gather of the new shard, which moves after the
// fused update; b (not divisible by dp) is updated whole. Results: params,
// then exp_avg, then exp_avg_sq.
// Z1-LABEL: func.func @train_step
// Z1-DAG: %[[RS:.*]] = shard.reduce_scatter
// Z1-DAG: %[[AR:.*]] = shard.all_reduce
// Z1-NOT: tsr.adamw_update
// Z1: %[[SL:.*]] = shard.all_slice %arg0
// Z1-NEXT: %[[R:.*]]:6 = tsr.multi_adamw_update[%[[SL]], %arg1, %[[RS]], %[[AR]], %arg2, %arg4, %arg3, %arg5], %arg6, %arg8 {beta1 = 0.899999976 : f32, beta2 = 9.990000e-01 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.00999999977 : f32} : tensor<4x4xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<3xf32>
// Z1-NEXT: %[[AG:.*]] = shard.all_gather %[[R]]#0
// Z1-NEXT: return %[[AG]], %[[R]]#1, %[[R]]#2, %[[R]]#4, %[[R]]#3, %[[R]]#5, %arg6

// Lowered and memory-planned: one multi_adamw_update kernel whose six
// results are written in place of the arguments they replace (w, b,
// w.exp_avg, b.exp_avg, w.exp_avg_sq, b.exp_avg_sq: arguments 0, 1, 2, 4,
// 3, 5).
// MEM-LABEL: func.func @train_step
// MEM: tsrt.kernel "multi_adamw_update"
// MEM-SAME: tsrt.in_place = array<i64: 0, 1, 2, 4, 3, 5>, tsrt.offsets = array<i64: -1, -1, -1, -1, -1, -1>
// MEM-NOT: "adamw_update"

// RUN: tessera-opt --tsr-build-train-step="optimizer=adamw" --tsr-mixed-precision="precision=fp16 initial-loss-scale=1024 loss-scale-window=4 min-loss-scale=2" %s | FileCheck %s
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-mixed-precision="precision=fp16" %s | FileCheck %s --check-prefix=SGD

// fp16 dynamic loss scaling (Micikevicius et al., 2018; Megatron-LM's
// DynamicGradScaler): the scale is training state, three f32 scalar
// opt_state arguments after AdamW's step, returned last. S = 1024 while the
// state is 0 (its initial value); the seed is multiplied by S and each
// gradient by 1/S after its sum (the found-inf term) is taken; every param
// and opt_state result becomes select(ok, new, old); the scale doubles after
// 4 clean steps and halves (not below 2) on a skipped one.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<8x4xf32> {{[{][^}]*}}tsr.name = "wte", tsr.role = "param"}
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<8x4xf32> {tsr.name = "wte.exp_avg", tsr.role = "opt_state"}
// CHECK-SAME: %[[STEP:[a-z0-9]+]]: tensor<f32> {tsr.name = "step", tsr.role = "opt_state"}
// CHECK-SAME: %[[LS:[a-z0-9]+]]: tensor<f32> {tsr.name = "loss_scale", tsr.role = "opt_state"}
// CHECK-SAME: %[[GOOD:[a-z0-9]+]]: tensor<f32> {tsr.name = "loss_scale.good_steps", tsr.role = "opt_state"}
// CHECK-SAME: %[[SKIP:[a-z0-9]+]]: tensor<f32> {tsr.name = "loss_scale.skipped_steps", tsr.role = "opt_state"}
// CHECK-SAME: %{{[a-z0-9]+}}: tensor<2x3xi64> {tsr.name = "input_ids", tsr.role = "tokens"}
// CHECK-SAME: tensor<f32> {tsr.name = "step", tsr.role = "opt_state"}, tensor<f32> {tsr.name = "loss_scale", tsr.role = "opt_state"}, tensor<f32> {tsr.name = "loss_scale.good_steps", tsr.role = "opt_state"}, tensor<f32> {tsr.name = "loss_scale.skipped_steps", tsr.role = "opt_state"})
// S is made right before its readers (a value made at the top and read at
// the end would cross every forward layer boundary): once for the seed...
// CHECK: %[[ZERO:.*]] = tsr.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[UNSET:.*]] = tsr.equal %[[LS]], %[[ZERO]] : tensor<f32> -> tensor<i1>
// CHECK-NEXT: %[[INIT:.*]] = tsr.constant dense<1.024000e+03> : tensor<f32>
// CHECK-NEXT: %[[S0:.*]] = tsr.select %[[UNSET]], %[[INIT]], %[[LS]] : tensor<i1>, tensor<f32>
// CHECK-NEXT: %[[SEED:.*]] = tsr.mul %{{.*}}, %[[S0]] : tensor<f32>
// CHECK-NEXT: tsr.cross_entropy_grad %{{.*}}, %{{.*}}, %[[SEED]] {{.*}}: tensor<6x8xf16>, tensor<6xi64>, tensor<f32>
// ...and once before the first update, for the unscale and the state
// update. Each gradient's f32 sum reads its own convert (the update's
// convert moves after the decision and must not live until then).
// CHECK: %[[G0:.*]] = tsr.gather_grad {{.*}} -> tensor<8x4xf16>
// CHECK: %[[GS:.*]] = tsr.convert %[[G0]] : tensor<8x4xf16> -> tensor<8x4xf32>
// CHECK-NEXT: %[[T0:.*]] = tsr.reduce_sum %[[GS]] {axes = array<i64: 0, 1>} : tensor<8x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[ZERO1:.*]] = tsr.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[UNSET1:.*]] = tsr.equal %[[LS]], %[[ZERO1]] : tensor<f32> -> tensor<i1>
// CHECK-NEXT: %[[INIT1:.*]] = tsr.constant dense<1.024000e+03> : tensor<f32>
// CHECK-NEXT: %[[S:.*]] = tsr.select %[[UNSET1]], %[[INIT1]], %[[LS]] : tensor<i1>, tensor<f32>
// CHECK-NEXT: %[[ONE:.*]] = tsr.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[INV:.*]] = tsr.div %[[ONE]], %[[S]] : tensor<f32>
// CHECK-NEXT: tsr.convert %{{.*}} : tensor<4xf16> -> tensor<4xf32>
// CHECK-NEXT: tsr.reduce_sum %{{.*}} {axes = array<i64: 0>} : tensor<4xf32> -> tensor<f32>
// CHECK-NEXT: tsr.convert %{{.*}} : tensor<8x4xf16> -> tensor<8x4xf32>
// CHECK-NEXT: tsr.reduce_sum %{{.*}} {axes = array<i64: 0, 1>} : tensor<8x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[SUM:.*]] = tsr.add
// CHECK-NEXT: %[[TOTAL:.*]] = tsr.add %[[SUM]]
// CHECK-NEXT: %[[Z:.*]] = tsr.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[NAN:.*]] = tsr.mul %[[TOTAL]], %[[Z]] : tensor<f32>
// CHECK-NEXT: %[[OK:.*]] = tsr.equal %[[NAN]], %[[Z]] : tensor<f32> -> tensor<i1>
// Then each update, right after the decision, and its selects.
// CHECK-NEXT: %[[G:.*]] = tsr.convert %[[G0]] : tensor<8x4xf16> -> tensor<8x4xf32>
// CHECK-NEXT: %[[INVB:.*]] = tsr.broadcast %[[INV]] : tensor<f32> -> tensor<8x4xf32>
// CHECK-NEXT: %[[GU:.*]] = tsr.mul %[[G]], %[[INVB]] : tensor<8x4xf32>
// CHECK-NEXT: %[[NW:[a-z_0-9]+]], %[[NM:[a-z_0-9]+]], %{{.*}} = tsr.adamw_update %[[W]], %[[GU]], %[[M]]
// CHECK-NEXT: %[[OKB:.*]] = tsr.broadcast %[[OK]] : tensor<i1> -> tensor<8x4xi1>
// CHECK-NEXT: %[[W1:.*]] = tsr.select %[[OKB]], %[[NW]], %[[W]] : tensor<8x4xi1>, tensor<8x4xf32>
// CHECK-NEXT: %[[M1:.*]] = tsr.select %[[OKB]], %[[NM]], %[[M]] : tensor<8x4xi1>, tensor<8x4xf32>
// CHECK-NEXT: tsr.select %[[OKB]]
// CHECK-NEXT: tsr.convert %{{.*}} : tensor<4xf16> -> tensor<4xf32>
// CHECK: tsr.adamw_update
// CHECK: tsr.adamw_update
// CHECK: %[[STEP1:.*]] = tsr.select %[[OK]], %{{.*}}, %[[STEP]] : tensor<i1>, tensor<f32>
// CHECK: %[[GOOD1:.*]] = tsr.add %[[GOOD]], %{{.*}} : tensor<f32>
// CHECK-NEXT: %[[WIN:.*]] = tsr.constant dense<4.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[GROW:.*]] = tsr.equal %[[GOOD1]], %[[WIN]] : tensor<f32> -> tensor<i1>
// CHECK-NEXT: %[[TWO:.*]] = tsr.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[S2:.*]] = tsr.mul %[[S]], %[[TWO]] : tensor<f32>
// CHECK-NEXT: %[[SOK:.*]] = tsr.select %[[GROW]], %[[S2]], %[[S]]
// CHECK-NEXT: %[[GOK:.*]] = tsr.select %[[GROW]], %[[Z]], %[[GOOD1]]
// CHECK-NEXT: %[[MIN:.*]] = tsr.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[HALF:.*]] = tsr.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[SH:.*]] = tsr.mul %[[S]], %[[HALF]] : tensor<f32>
// CHECK-NEXT: %[[SBAD:.*]] = tsr.max %[[SH]], %[[MIN]] : tensor<f32>
// CHECK-NEXT: %[[LS1:.*]] = tsr.select %[[OK]], %[[SOK]], %[[SBAD]]
// CHECK-NEXT: %[[GOOD2:.*]] = tsr.select %[[OK]], %[[GOK]], %[[Z]]
// CHECK-NEXT: %[[SKIP1:.*]] = tsr.add %[[SKIP]], %{{.*}} : tensor<f32>
// CHECK-NEXT: %[[SKIP2:.*]] = tsr.select %[[OK]], %[[SKIP]], %[[SKIP1]]
// CHECK-NEXT: return %{{.*}}, %[[W1]], {{.*}}, %[[M1]], {{.*}}, %[[STEP1]], %[[LS1]], %[[GOOD2]], %[[SKIP2]] :

// SGD has no optimizer state: the three scalars follow the params and
// frozen tensors; the default initial scale is 1024.
// SGD-LABEL: func.func @train_step
// SGD-SAME: tsr.name = "ln.bias", tsr.role = "frozen"}, %{{[a-z0-9]+}}: tensor<f32> {tsr.name = "loss_scale", tsr.role = "opt_state"}
// SGD: tsr.constant dense<1.024000e+03> : tensor<f32>
// SGD: tsr.sgd_update
// SGD: tsr.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x4xi1>, tensor<8x4xf32>

func.func @forward(
    %wte: tensor<8x4xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<8x4xf32>},
    %ln_g: tensor<4xf32> {tsr.name = "ln.weight", tsr.role = "param", tsr.init = dense<1.0> : tensor<4xf32>},
    %ln_b: tensor<4xf32> {tsr.name = "ln.bias", tsr.role = "frozen", tsr.init = dense<0.0> : tensor<4xf32>},
    %w: tensor<8x4xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<8x4xf32>},
    %tokens: tensor<2x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<2x3x8xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %n = tsr.layer_norm %e, %ln_g, %ln_b {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
  %g = tsr.gelu %n : tensor<2x3x4xf32>
  %r = tsr.add %g, %e : tensor<2x3x4xf32>
  %l = tsr.matmul %r, %w {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<8x4xf32> -> tensor<2x3x8xf32>
  return %l : tensor<2x3x8xf32>
}

// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-mixed-precision="precision=fp16 loss-scale=1024" %s | FileCheck %s
// RUN: tessera-opt --tsr-build-train-step="optimizer=adamw" --tsr-mixed-precision="precision=fp16 loss-scale=256" %s | FileCheck %s --check-prefix=ADAMW

// fp16 mixed precision (Micikevicius et al., 2018) on a tiny LM: the step
// is retyped to f16 exactly as for bf16, plus static loss scaling: the
// cross-entropy gradient's f32 seed is multiplied by S (here 1024) and
// every gradient by 1/S in f32 right after its convert to f32, before its
// update (one scalar 1/S constant, broadcast per gradient). The loss itself
// is not scaled.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<8x4xf32> {{[{][^}]*}}tsr.name = "wte", tsr.role = "param"}
// CHECK-SAME: %[[LNG:[a-z0-9]+]]: tensor<4xf32>
// CHECK-SAME: %[[HEAD:[a-z0-9]+]]: tensor<8x4xf32>
// CHECK-SAME: %[[LNB:[a-z0-9]+]]: tensor<4xf32>
// CHECK-SAME: -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"}, tensor<8x4xf32>
// CHECK: %[[WTE16:.*]] = tsr.convert %[[WTE]] : tensor<8x4xf32> -> tensor<8x4xf16>
// CHECK: tsr.gather %[[WTE16]], %{{.*}} : tensor<8x4xf16>, tensor<2x3xi64> -> tensor<2x3x4xf16>
// CHECK: tsr.layer_norm {{.*}} : tensor<2x3x4xf16>, tensor<4xf16>
// CHECK: %[[SUM:.*]] = tsr.cross_entropy %{{.*}}, %{{.*}} {{.*}}: tensor<6x8xf16>, tensor<6xi64> -> tensor<f32>
// CHECK: %[[LOSS:.*]] = tsr.mul %[[SUM]], %{{.*}} : tensor<f32>
// CHECK: %[[SEED:.*]] = tsr.mul %{{.*}}, %{{.*}} {{.*}}: tensor<f32>
// CHECK: %[[S:.*]] = tsr.constant dense<1.024000e+03> : tensor<f32>
// CHECK-NEXT: %[[SCALED:.*]] = tsr.mul %[[SEED]], %[[S]] : tensor<f32>
// CHECK-NEXT: tsr.cross_entropy_grad %{{.*}}, %{{.*}}, %[[SCALED]] {{.*}}: tensor<6x8xf16>, tensor<6xi64>, tensor<f32>
// CHECK: %[[DWTE:.*]] = tsr.gather_grad {{.*}} -> tensor<8x4xf16>
// CHECK: %[[DWTE32:.*]] = tsr.convert %[[DWTE]] : tensor<8x4xf16> -> tensor<8x4xf32>
// CHECK-NEXT: %[[INV:.*]] = tsr.constant dense<9.765625E-4> : tensor<f32>
// CHECK-NEXT: %[[INVB:.*]] = tsr.broadcast %[[INV]] : tensor<f32> -> tensor<8x4xf32>
// CHECK-NEXT: %[[DWTEU:.*]] = tsr.mul %[[DWTE32]], %[[INVB]] : tensor<8x4xf32>
// CHECK-NEXT: %[[NWTE:.*]] = tsr.sgd_update %[[WTE]], %[[DWTEU]], {{.*}} : tensor<8x4xf32>
// CHECK: tsr.convert {{.*}} : tensor<4xf16> -> tensor<4xf32>
// CHECK-NEXT: tsr.broadcast %[[INV]] : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT: tsr.mul
// CHECK-NEXT: tsr.sgd_update %[[LNG]], {{.*}} : tensor<4xf32>
// CHECK: tsr.convert {{.*}} : tensor<8x4xf16> -> tensor<8x4xf32>
// CHECK-NEXT: tsr.broadcast %[[INV]] : tensor<f32> -> tensor<8x4xf32>
// CHECK-NEXT: tsr.mul
// CHECK-NEXT: tsr.sgd_update %[[HEAD]], {{.*}} : tensor<8x4xf32>
// CHECK-NOT: f16
// CHECK: return %[[LOSS]], %[[NWTE]]

// AdamW, S = 256: the step counter and optimizer state stay f32.
// ADAMW-LABEL: func.func @train_step
// ADAMW-NOT: tsr.convert %{{.*}} : tensor<f32> -> tensor<f16>
// ADAMW: tsr.constant dense<2.560000e+02> : tensor<f32>
// ADAMW: %[[G:.*]] = tsr.convert %{{.*}} : tensor<8x4xf16> -> tensor<8x4xf32>
// ADAMW-NEXT: %[[INV:.*]] = tsr.constant dense<3.906250e-03> : tensor<f32>
// ADAMW-NEXT: %[[INVB:.*]] = tsr.broadcast %[[INV]] : tensor<f32> -> tensor<8x4xf32>
// ADAMW-NEXT: %[[GU:.*]] = tsr.mul %[[G]], %[[INVB]] : tensor<8x4xf32>
// ADAMW-NEXT: tsr.adamw_update %{{.*}}, %[[GU]], %{{.*}}, %{{.*}}, %{{.*}} {{.*}} : tensor<8x4xf32>, tensor<f32>

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

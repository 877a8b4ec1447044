// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-mixed-precision %s | FileCheck %s
// RUN: tessera-opt --tsr-build-train-step="optimizer=adamw" --tsr-mixed-precision="precision=bf16" %s | FileCheck %s --check-prefix=ADAMW
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-mixed-precision="precision=fp32" %s | FileCheck %s --check-prefix=FP32

// A tiny LM: embedding (read twice), layer norm with a frozen bias, gelu,
// residual, head. Params and the frozen bias are converted once to bf16;
// forward and backward run in bf16; the loss and the SGD/AdamW updates stay
// f32 on the f32 master weights.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<8x4xf32> {{[{][^}]*}}tsr.name = "wte", tsr.role = "param"}
// CHECK-SAME: %[[LNG:[a-z0-9]+]]: tensor<4xf32>
// CHECK-SAME: %[[HEAD:[a-z0-9]+]]: tensor<8x4xf32>
// CHECK-SAME: %[[LNB:[a-z0-9]+]]: tensor<4xf32>
// The step's signature keeps f32 (params, loss).
// CHECK-SAME: -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"}, tensor<8x4xf32>
// CHECK: %[[WTE16:.*]] = tsr.convert %[[WTE]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK: %[[EMB:.*]] = tsr.gather %[[WTE16]], %{{.*}} : tensor<8x4xbf16>, tensor<2x3xi64> -> tensor<2x3x4xbf16>
// CHECK-DAG: %[[LNG16:.*]] = tsr.convert %[[LNG]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK-DAG: %[[LNB16:.*]] = tsr.convert %[[LNB]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK: tsr.layer_norm %[[EMB]], %[[LNG16]], %[[LNB16]] {{.*}} : tensor<2x3x4xbf16>, tensor<4xbf16>
// CHECK: tsr.gelu {{.*}} : tensor<2x3x4xbf16>
// CHECK: %[[HEAD16:.*]] = tsr.convert %[[HEAD]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK: tsr.matmul %{{.*}}, %[[HEAD16]] {{.*}} -> tensor<2x3x8xbf16>
// The summed loss is an f32 scalar of bf16 logits; the loss chain stays f32.
// CHECK: %[[SUM:.*]] = tsr.cross_entropy %{{.*}}, %{{.*}} {{.*}}: tensor<6x8xbf16>, tensor<6xi64> -> tensor<f32>
// CHECK: %[[LOSS:.*]] = tsr.mul %[[SUM]], %{{.*}} : tensor<f32>
// CHECK: tsr.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {{.*}}: tensor<6x8xbf16>, tensor<6xi64>, tensor<f32>
// Backward in bf16; each gradient converted to f32 right before its update,
// which reads the f32 master weight.
// CHECK: tsr.layer_norm_grad {{.*}} : tensor<2x3x4xbf16>, tensor<4xbf16>
// CHECK: %[[DWTE:.*]] = tsr.gather_grad {{.*}} -> tensor<8x4xbf16>
// CHECK: %[[DWTE32:.*]] = tsr.convert %[[DWTE]] : tensor<8x4xbf16> -> tensor<8x4xf32>
// CHECK-NEXT: %[[NWTE:.*]] = tsr.sgd_update %[[WTE]], %[[DWTE32]], {{.*}} : tensor<8x4xf32>
// CHECK: tsr.convert {{.*}} : tensor<4xbf16> -> tensor<4xf32>
// CHECK-NEXT: tsr.sgd_update %[[LNG]], {{.*}} : tensor<4xf32>
// CHECK: tsr.convert {{.*}} : tensor<8x4xbf16> -> tensor<8x4xf32>
// CHECK-NEXT: tsr.sgd_update %[[HEAD]], {{.*}} : tensor<8x4xf32>
// CHECK-NOT: bf16
// CHECK: return %[[LOSS]], %[[NWTE]]

// AdamW: optimizer state and the step counter are never converted.
// ADAMW-LABEL: func.func @train_step
// ADAMW-NOT: tsr.convert %{{.*}} : tensor<f32> -> tensor<bf16>
// ADAMW: %[[G:.*]] = tsr.convert %{{.*}} : tensor<8x4xbf16> -> tensor<8x4xf32>
// ADAMW-NEXT: tsr.adamw_update %{{.*}}, %[[G]], %{{.*}}, %{{.*}}, %{{.*}} {{.*}} : tensor<8x4xf32>, tensor<f32>

// fp32: nothing changes.
// FP32-LABEL: func.func @train_step
// FP32-NOT: bf16

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

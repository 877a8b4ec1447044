// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-clip-grad="max-norm=0.5" %s | FileCheck %s
// RUN: tessera-opt --tsr-build-train-step="optimizer=adamw" --tsr-mixed-precision="precision=fp16" --tsr-clip-grad="max-norm=0.5" %s | FileCheck %s --check-prefix=FP16
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-clip-grad="max-norm=0" %s | FileCheck %s --check-prefix=OFF
// RUN: not tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-clip-grad="max-norm=-1" %s 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-clip-grad="max-norm=0.5" --tsr-clip-grad="max-norm=0.5" %s 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not tessera-opt --tsr-clip-grad="max-norm=0.5" %s 2>&1 | FileCheck %s --check-prefix=NOSTEP

// Gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_):
// one tsr.sum_squares per updated parameter (ln.bias is frozen: no term),
// a chain of scalar adds, sqrt, coef = C / max(norm + 1e-6, C), every
// update after the coefficient reading g * coef, and the pre-clip norm as
// the last result (tsr.role = "grad_norm").

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"}, {{.*}}, tensor<f32> {tsr.name = "grad_norm", tsr.role = "grad_norm"})
// CHECK: %[[GH:.*]] = tsr.matmul {{.*}} -> tensor<8x4xf32>
// CHECK-NEXT: %[[TH:.*]] = tsr.sum_squares %[[GH]] : tensor<8x4xf32> -> tensor<f32>
// CHECK: %{{.*}}, %[[GLN:.*]], %{{.*}} = tsr.layer_norm_grad
// CHECK-NEXT: %[[TLN:.*]] = tsr.sum_squares %[[GLN]] : tensor<4xf32> -> tensor<f32>
// CHECK: %[[GE:.*]] = tsr.gather_grad {{.*}} -> tensor<8x4xf32>
// CHECK-NEXT: %[[TE:.*]] = tsr.sum_squares %[[GE]] : tensor<8x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[S1:.*]] = tsr.add %[[TE]], %[[TLN]] : tensor<f32>
// CHECK-NEXT: %[[S2:.*]] = tsr.add %[[S1]], %[[TH]] : tensor<f32>
// CHECK-NEXT: %[[NORM:.*]] = tsr.sqrt %[[S2]] : tensor<f32>
// CHECK-NEXT: %[[C:.*]] = tsr.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[EPS:.*]] = tsr.constant dense<9.99999997E-7> : tensor<f32>
// CHECK-NEXT: %[[NE:.*]] = tsr.add %[[NORM]], %[[EPS]] : tensor<f32>
// CHECK-NEXT: %[[D:.*]] = tsr.max %[[NE]], %[[C]] : tensor<f32>
// CHECK-NEXT: %[[COEF:.*]] = tsr.div %[[C]], %[[D]] : tensor<f32>
// CHECK-NEXT: %[[CB:.*]] = tsr.broadcast %[[COEF]] : tensor<f32> -> tensor<8x4xf32>
// CHECK-NEXT: %[[GEC:.*]] = tsr.mul %[[GE]], %[[CB]] : tensor<8x4xf32>
// CHECK-NEXT: %[[WTE:.*]] = tsr.sgd_update %arg0, %[[GEC]]
// CHECK-NEXT: %[[CB2:.*]] = tsr.broadcast %[[COEF]] : tensor<f32> -> tensor<4xf32>
// CHECK-NEXT: %[[GLNC:.*]] = tsr.mul %[[GLN]], %[[CB2]] : tensor<4xf32>
// CHECK-NEXT: %[[LNW:.*]] = tsr.sgd_update %arg1, %[[GLNC]]
// CHECK-NEXT: %[[CB3:.*]] = tsr.broadcast %[[COEF]] : tensor<f32> -> tensor<8x4xf32>
// CHECK-NEXT: %[[GHC:.*]] = tsr.mul %[[GH]], %[[CB3]] : tensor<8x4xf32>
// CHECK-NEXT: %[[HW:.*]] = tsr.sgd_update %arg2, %[[GHC]]
// CHECK-NEXT: return %{{.*}}, %[[WTE]], %[[LNW]], %[[HW]], %[[NORM]]

// fp16 (dynamic loss scaling): the terms read the unscaled f32 gradient
// (g16 -> f32, times 1/S) that each update reads; the skip decision's
// selects still follow each update.
// FP16-LABEL: func.func @train_step
// FP16: %[[UN:.*]] = tsr.mul %{{.*}}, %{{.*}} : tensor<8x4xf32>
// FP16-NEXT: tsr.sum_squares %[[UN]] : tensor<8x4xf32> -> tensor<f32>
// FP16: %[[NORM:.*]] = tsr.sqrt
// FP16: %[[COEF:.*]] = tsr.div
// FP16: %[[CB:.*]] = tsr.broadcast %[[COEF]] : tensor<f32> -> tensor<8x4xf32>
// FP16-NEXT: %[[GC:.*]] = tsr.mul %[[UN]], %[[CB]] : tensor<8x4xf32>
// FP16-NEXT: %[[P:[a-z_0-9]+]], %{{.*}}, %{{.*}} = tsr.adamw_update %arg0, %[[GC]]
// FP16-NEXT: tsr.select %{{.*}}, %[[P]], %arg0
// FP16: return {{.*}}, %[[NORM]] : {{.*}}

// OFF-LABEL: func.func @train_step
// OFF-NOT: tsr.sum_squares
// OFF-NOT: grad_norm

// NEG: error: tsr-clip-grad: max-norm must be a finite number >= 0 (0: no clipping), got -1.000000e+00
// TWICE: error: tsr-clip-grad: @train_step already has a "grad_norm" result (the pass runs once)
// NOSTEP: error: tsr-clip-grad needs a @train_step with a body (run tsr-build-train-step first)

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

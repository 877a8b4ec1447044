// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-mixed-precision="precision=bf16" %s | FileCheck %s -DLOW=bf16
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-mixed-precision="precision=fp16" %s | FileCheck %s -DLOW=f16

// RMSNorm and SiLU under mixed precision: like layer_norm they run on the
// low-precision copies (their kernels compute the statistics and the
// exponentials in f32 and round the results), the norm weight's gradient
// is converted to f32 right before its update of the f32 master weight.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[NW:[a-z0-9]+]]: tensor<4xf32> {{[{][^}]*}}tsr.name = "norm.weight", tsr.role = "param"}
// CHECK-DAG: %[[NW16:.*]] = tsr.convert %[[NW]] : tensor<4xf32> -> tensor<4x[[LOW]]>
// CHECK: tsr.rms_norm %{{.*}}, %[[NW16]] {{.*}} : tensor<2x3x4x[[LOW]]>, tensor<4x[[LOW]]>
// CHECK: tsr.silu %{{.*}} : tensor<2x3x6x[[LOW]]>
// CHECK: tsr.cross_entropy %{{.*}}, %{{.*}} {{.*}}: tensor<6x8x[[LOW]]>, tensor<6xi64> -> tensor<f32>
// CHECK: tsr.silu_grad %{{.*}}, %{{.*}} : tensor<2x3x6x[[LOW]]>
// CHECK: %{{.*}}, %[[DNW:.*]] = tsr.rms_norm_grad {{.*}} : tensor<2x3x4x[[LOW]]>, tensor<4x[[LOW]]>
// CHECK: %[[DNW32:.*]] = tsr.convert %[[DNW]] : tensor<4x[[LOW]]> -> tensor<4xf32>
// CHECK: tsr.sgd_update %[[NW]], {{.*}}: tensor<4xf32>
func.func @forward(
    %wte: tensor<8x4xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<8x4xf32>},
    %nw: tensor<4xf32> {tsr.name = "norm.weight", tsr.role = "param", tsr.init = dense<1.0> : tensor<4xf32>},
    %wg: tensor<6x4xf32> {tsr.name = "gate.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<6x4xf32>},
    %wd: tensor<4x6xf32> {tsr.name = "down.weight", tsr.role = "param", tsr.init = dense<0.3> : tensor<4x6xf32>},
    %head: tensor<8x4xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<8x4xf32>},
    %tokens: tensor<2x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<2x3x8xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %n = tsr.rms_norm %e, %nw {axis = 2 : i64, epsilon = 1.0e-06 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
  %g = tsr.matmul %n, %wg {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<6x4xf32> -> tensor<2x3x6xf32>
  %a = tsr.silu %g : tensor<2x3x6xf32>
  %d = tsr.matmul %a, %wd {transpose_rhs = true} : tensor<2x3x6xf32>, tensor<4x6xf32> -> tensor<2x3x4xf32>
  %r = tsr.add %e, %d : tensor<2x3x4xf32>
  %l = tsr.matmul %r, %head {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<8x4xf32> -> tensor<2x3x8xf32>
  return %l : tensor<2x3x8xf32>
}

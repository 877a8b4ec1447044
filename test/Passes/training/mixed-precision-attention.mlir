// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd" --tsr-mixed-precision="precision=bf16" %s | FileCheck %s

// Mixed precision keeps tsr.attention's log-sum-exp f32 (its result 1 and
// attention_grad's operand 4) while the output, the mask and the gradients
// follow the bf16 operands.
func.func @forward(
    %wte: tensor<16x2xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x2xf32>},
    %head: tensor<16x2xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x2xf32>},
    %tokens: tensor<3x4xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<3x4x16xf32> {tsr.name = "logits"}) {
  %x = tsr.gather %wte, %tokens : tensor<16x2xf32>, tensor<3x4xi64> -> tensor<3x4x2xf32>
  %m = tsr.constant dense<0.0> : tensor<4x4xf32>
  %o, %lse = tsr.attention %x, %x, %x, %m {causal = true, scale = 0.5 : f32} : tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<3x4x2xf32>, tensor<4x4xf32> -> tensor<3x4x2xf32>, tensor<3x4xf32>
  %l = tsr.matmul %o, %head {transpose_rhs = true} : tensor<3x4x2xf32>, tensor<16x2xf32> -> tensor<3x4x16xf32>
  return %l : tensor<3x4x16xf32>
}

// CHECK-LABEL: func.func @train_step(
// CHECK: %[[O:.*]], %[[LSE:.*]] = tsr.attention %[[X:.*]], %[[X]], %[[X]], %{{.*}} {causal = true, scale = 5.000000e-01 : f32, tsr.fwd = {{[0-9]+}} : i64} : tensor<3x4x2xbf16>, tensor<3x4x2xbf16>, tensor<3x4x2xbf16>, tensor<4x4xbf16> -> tensor<3x4x2xbf16>, tensor<3x4xf32>
// CHECK: tsr.attention_grad %[[X]], %[[X]], %[[X]], %[[O]], %[[LSE]], %{{.*}}, %{{.*}} {causal = true, scale = 5.000000e-01 : f32, tsr.bwd = {{[0-9]+}} : i64} : tensor<3x4x2xbf16>, tensor<3x4x2xbf16>, tensor<3x4x2xbf16>, tensor<3x4x2xbf16>, tensor<3x4xf32>, tensor<4x4xbf16>

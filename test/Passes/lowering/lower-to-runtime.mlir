// RUN: tessera-opt --tsr-lower-to-runtime %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK: module attributes {tsrt.grid_axes = ["dp", "tp"], tsrt.grid_shape = array<i64: 2, 2>}
// CHECK-NOT: shard.grid
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  // CHECK-LABEL: func.func @train_step
  // CHECK-SAME: tsrt.name = "w", tsrt.role = "param"
  // CHECK-NOT: tsr.init
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.init = dense<1.0> : tensor<8x4xf32>},
                        %x: tensor<2x4xf32> {tsr.name = "tokens", tsr.role = "tokens"}) -> (tensor<2x8xf32> {tsr.role = "loss"}) {
    // CHECK: %[[C:.*]] = tsrt.constant dense<2.000000e+00> : tensor<2x4xf32>
    %c = tsr.constant dense<2.0> : tensor<2x4xf32>
    // CHECK: %[[M:.*]] = tsrt.kernel "mul"(%arg1, %[[C]]) {attrs = {}}
    %m = tsr.mul %x, %c : tensor<2x4xf32>
    // CHECK: %[[Y:.*]] = tsrt.kernel "matmul"(%[[M]], %arg0) {attrs = {transpose_lhs = false, transpose_rhs = true}}
    %y = tsr.matmul %m, %w {transpose_rhs = true} : tensor<2x4xf32>, tensor<8x4xf32> -> tensor<2x8xf32>
    // CHECK: %[[R:.*]] = tsrt.all_reduce %[[Y]] {grid_axes = array<i16: 1>}
    %r = shard.all_reduce %y on @grid grid_axes = [1] : tensor<2x8xf32> -> tensor<2x8xf32>
    // CHECK: tsrt.all_gather %[[R]] {dim = 0 : i64, grid_axes = array<i16: 0>}
    %g = shard.all_gather %r on @grid grid_axes = [0] gather_axis = 0 : tensor<2x8xf32> -> tensor<4x8xf32>
    // CHECK: return %[[R]]
    return %r : tensor<2x8xf32>
  }
}

// -----

module {
  shard.grid @grid(shape = 2)
  func.func @bad(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{has no runtime lowering}}
    %0 = shard.broadcast %x on @grid grid_axes = [0] root = [0] : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

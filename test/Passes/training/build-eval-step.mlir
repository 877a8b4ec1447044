// RUN: tessera-opt --tsr-build-eval-step %s -split-input-file -verify-diagnostics | FileCheck %s

// @eval_step: @train_step's loss only; the backward, the update, the
// gradient all-reduce and the optimizer state argument are gone, the
// forward's tp all-reduce and the loss's dp all-reduce stay, and the kept
// arguments keep their attributes. @train_step is unchanged.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[G:.*]] = shard.all_reduce {{.*}} grid_axes = [0]
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}} :
// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: (%[[W:.*]]: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[\], \[1\]\]}}>},
// CHECK-SAME: %[[X:.*]]: tensor<2x8xf32> {tsr.name = "tokens", tsr.role = "tokens"},
// CHECK-SAME: %[[L:.*]]: tensor<2x4xf32> {tsr.name = "labels", tsr.role = "labels"})
// CHECK-SAME: -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"})
// CHECK-NEXT: %[[Y:.*]] = tsr.matmul %[[X]], %[[W]]
// CHECK-NEXT: %[[R:.*]] = shard.all_reduce %[[Y]] on @grid grid_axes = [1]
// CHECK-NEXT: %[[P:.*]] = tsr.mul %[[R]], %[[L]]
// CHECK-NEXT: %[[S:.*]] = tsr.reduce_sum
// CHECK-NEXT: %[[LOSS:.*]] = shard.all_reduce %[[S]] on @grid grid_axes = [0]
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// CHECK-NEXT: }
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
                        %m: tensor<8x4xf32> {tsr.name = "w.momentum", tsr.role = "opt_state"},
                        %x: tensor<2x8xf32> {tsr.name = "tokens", tsr.role = "tokens"},
                        %lab: tensor<2x4xf32> {tsr.name = "labels", tsr.role = "labels"})
      -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"},
          tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
          tensor<8x4xf32> {tsr.name = "w.momentum", tsr.role = "opt_state"}) {
    %y = tsr.matmul %x, %w : tensor<2x8xf32>, tensor<8x4xf32> -> tensor<2x4xf32>
    %r = shard.all_reduce %y on @grid grid_axes = [1] : tensor<2x4xf32> -> tensor<2x4xf32>
    %p = tsr.mul %r, %lab : tensor<2x4xf32>
    %s = tsr.reduce_sum %p {axes = array<i64: 0, 1>} : tensor<2x4xf32> -> tensor<f32>
    %loss = shard.all_reduce %s on @grid grid_axes = [0] : tensor<f32> -> tensor<f32>
    %gw = tsr.matmul %x, %lab {transpose_lhs = true} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<8x4xf32>
    %g = shard.all_reduce %gw on @grid grid_axes = [0] : tensor<8x4xf32> -> tensor<8x4xf32>
    %m1 = tsr.add %m, %g : tensor<8x4xf32>
    %w1 = tsr.sub %w, %m1 : tensor<8x4xf32>
    return %loss, %w1, %m1 : tensor<f32>, tensor<8x4xf32>, tensor<8x4xf32>
  }
}

// -----

// Dropout is the identity in evaluation (tsr.dropout has the
// IdentityInInference trait): @eval_step reads the dropout's input, and the
// rng.step state only the dropout read is no argument any more.
// CHECK-LABEL: func.func @train_step
// CHECK: tsr.dropout
// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32> {tsr.name = "tokens", tsr.role = "tokens"}, %[[L:.*]]: tensor<4x8xf32> {tsr.name = "labels", tsr.role = "labels"}) -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"})
// CHECK-NEXT: %[[P:.*]] = tsr.mul %[[X]], %[[L]]
// CHECK-NEXT: %[[S:.*]] = tsr.reduce_sum %[[P]]
// CHECK-NEXT: return %[[S]] : tensor<f32>
module {
  func.func @train_step(%x: tensor<4x8xf32> {tsr.name = "tokens", tsr.role = "tokens"},
                        %lab: tensor<4x8xf32> {tsr.name = "labels", tsr.role = "labels"},
                        %step: tensor<f32> {tsr.name = "rng.step", tsr.role = "opt_state"})
      -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"},
          tensor<f32> {tsr.name = "rng.step", tsr.role = "opt_state"}) {
    %d = tsr.dropout %x, %step {ratio = 1.000000e-01 : f32, seed = 1234, op_id = 0} : tensor<4x8xf32>, tensor<f32>
    %p = tsr.mul %d, %lab : tensor<4x8xf32>
    %s = tsr.reduce_sum %p {axes = array<i64: 0, 1>} : tensor<4x8xf32> -> tensor<f32>
    %one = tsr.constant dense<1.0> : tensor<f32>
    %s1 = tsr.add %step, %one : tensor<f32>
    return %s, %s1 : tensor<f32>, tensor<f32>
  }
}

// -----

// expected-error @+1 {{tsr-build-eval-step: no func.func @train_step to derive the evaluation function from}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{tsr-build-eval-step: the module already has a symbol @eval_step}}
module {
  func.func @train_step(%x: tensor<f32> {tsr.name = "tokens", tsr.role = "tokens"}) -> (tensor<f32> {tsr.role = "loss"}) {
    return %x : tensor<f32>
  }
  func.func @eval_step(%x: tensor<f32>) -> tensor<f32> {
    return %x : tensor<f32>
  }
}

// -----

module {
  // expected-error @+1 {{tsr-build-eval-step: @train_step has no result with tsr.role = "loss"}}
  func.func @train_step(%x: tensor<f32> {tsr.name = "w", tsr.role = "param"}) -> (tensor<f32> {tsr.name = "w", tsr.role = "param"}) {
    return %x : tensor<f32>
  }
}

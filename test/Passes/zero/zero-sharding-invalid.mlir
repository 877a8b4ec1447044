// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=1}))' %s -split-input-file -verify-diagnostics
// RUN: not tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=4}))' %S/Inputs/adamw_step.mlir 2>&1 | FileCheck %s --check-prefix=STAGE
// STAGE: error: tsr-zero-sharding: stage must be 0, 1, 2 or 3, got 4

// The gradient is not reduced over dp: the pass runs after partition.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                        %g: tensor<8x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}) {
    // expected-error @+1 {{parameter 'w': its gradient is not a shard.all_reduce over the dp axis (run tsr-zero-sharding after tsr-sharding-partition)}}
    %w1 = tsr.sgd_update %w, %g, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// -----

// An all-reduce over tp only is not a data-parallel gradient reduction.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                        %g: tensor<8x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}) {
    %r = shard.all_reduce %g on @grid grid_axes = [1] : tensor<8x4xf32> -> tensor<8x4xf32>
    // expected-error @+1 {{parameter 'w': its gradient is not a shard.all_reduce over the dp axis}}
    %w1 = tsr.sgd_update %w, %r, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// -----

// The reduced gradient is read elsewhere too (e.g. by a gradient-norm
// computation), so it cannot become a shard.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                        %g: tensor<8x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}, tensor<8x4xf32> {tsr.name = "n", tsr.role = "loss"}) {
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<8x4xf32> -> tensor<8x4xf32>
    %n = tsr.mul %r, %r : tensor<8x4xf32>
    // expected-error @+1 {{parameter 'w': its gradient all-reduce has uses other than the update}}
    %w1 = tsr.sgd_update %w, %r, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1, %n : tensor<8x4xf32>, tensor<8x4xf32>
  }
}

// -----

// Optimizer state must be an opt_state argument used only by its update.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                        %m: tensor<8x4xf32> {tsr.name = "w.exp_avg", tsr.role = "opt_state"},
                        %v: tensor<8x4xf32> {tsr.name = "w.exp_avg_sq", tsr.role = "opt_state"},
                        %t: tensor<f32> {tsr.name = "step", tsr.role = "opt_state"},
                        %g: tensor<8x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}, tensor<8x4xf32> {tsr.name = "x", tsr.role = "loss"}) {
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<8x4xf32> -> tensor<8x4xf32>
    %x = tsr.mul %m, %m : tensor<8x4xf32>
    // expected-error @+1 {{parameter 'w': its optimizer state 'w.exp_avg' has uses other than the update}}
    %w1, %m1, %v1 = tsr.adamw_update %w, %r, %m, %v, %t, %hlr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<8x4xf32>, tensor<f32>
    return %w1, %x : tensor<8x4xf32>, tensor<8x4xf32>
  }
}

// -----

// Only function arguments with tsr.role = "param" can be sharded.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                        %g: tensor<8x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}) {
    %w2 = tsr.mul %w, %w : tensor<8x4xf32>
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<8x4xf32> -> tensor<8x4xf32>
    // expected-error @+1 {{updates a value that is not a function argument with tsr.role = "param"}}
    %w1 = tsr.sgd_update %w2, %r, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// -----

// A parameter already split over dp cannot be sharded again.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step(%w: tensor<4x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
                        %g: tensor<4x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper", tsr.sharding = #tsr.sharding<@grid, []>})
      -> (tensor<4x4xf32> {tsr.name = "w", tsr.role = "param"}) {
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<4x4xf32> -> tensor<4x4xf32>
    // expected-error @+1 {{parameter 'w': it is already split over the dp axis}}
    %w1 = tsr.sgd_update %w, %r, %hlr {weight_decay = 0.0 : f32} : tensor<4x4xf32>
    return %w1 : tensor<4x4xf32>
  }
}

// -----

// The data axis is found by name. (The pass runs on each function and
// checks the grid of the module that holds it.)
// expected-error @+1 {{tsr-zero-sharding: the module's tsr.grid_axes has no "dp" axis of the grid}}
module attributes {tsr.grid_axes = ["data", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step() {
    return
  }
}

// -----

// expected-error @+1 {{tsr-zero-sharding needs exactly one shard.grid (run it after tsr-sharding-partition), found 0}}
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  func.func @train_step() {
    return
  }
}

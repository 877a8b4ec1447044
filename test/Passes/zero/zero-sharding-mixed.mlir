// Mixed precision (tsr-mixed-precision): the gradient is all-reduced in
// bf16 and converted to f32 for the update. ZeRO reduce-scatters the bf16
// gradient and converts the shard; under ZeRO-1 the convert moves after the
// reduce-scatter, which now sits after backward.
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=1}))' %s | FileCheck %s --check-prefix=Z1
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=2}))' %s | FileCheck %s --check-prefix=Z2

module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                        %g: tensor<8x4xbf16> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}) {
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<8x4xbf16> -> tensor<8x4xbf16>
    %c = tsr.convert %r : tensor<8x4xbf16> -> tensor<8x4xf32>
    %x = tsr.mul %w, %w {tsr.bwd = 0 : i64} : tensor<8x4xf32>
    %w1 = tsr.sgd_update %w, %c, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// Z1-LABEL: func.func @train_step
// Z1: tsr.mul
// Z1-NEXT: %[[RS:.*]] = shard.reduce_scatter %arg1 on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xbf16> -> tensor<4x4xbf16>
// Z1-NEXT: %[[C:.*]] = tsr.convert %[[RS]] : tensor<4x4xbf16> -> tensor<4x4xf32>
// Z1-NEXT: %[[P:.*]] = shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// Z1-NEXT: tsr.sgd_update %[[P]], %[[C]], {{.*}} : tensor<4x4xf32>

// Z2-LABEL: func.func @train_step
// Z2-NEXT: %[[RS:.*]] = shard.reduce_scatter %arg1 on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xbf16> -> tensor<4x4xbf16>
// Z2-NEXT: %[[C:.*]] = tsr.convert %[[RS]] : tensor<4x4xbf16> -> tensor<4x4xf32>
// Z2-NEXT: tsr.mul

// Gradients that reach the update through more than the dp all-reduce.
// Sequence parallelism: a sequence-sharded parameter's gradient is reduced
// over dp on its shard, then made whole over sp. The dp sum commutes with
// that movement, so the all-reduce drops dp (erased: no axis left) and the
// reduce-scatter over dp follows the all-gather, on the whole gradient.
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=2}))' %s -split-input-file | FileCheck %s --check-prefix=Z2
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=1}))' %s -split-input-file | FileCheck %s --check-prefix=Z1

module attributes {tsr.grid_axes = ["dp", "tp", "sp"]} {
  shard.grid @grid(shape = 2x1x2)
  func.func @sp(%w: tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"},
                %g: tensor<4x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"}) {
    %x = tsr.mul %w, %w {tsr.bwd = 0 : i64} : tensor<8x4xf32>
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<4x4xf32> -> tensor<4x4xf32>
    %v = tsr.reshape %r : tensor<4x4xf32> -> tensor<4x1x4xf32>
    %a = shard.all_gather %v on @grid grid_axes = [2] gather_axis = 1 : tensor<4x1x4xf32> -> tensor<4x2x4xf32>
    %f = tsr.reshape %a : tensor<4x2x4xf32> -> tensor<8x4xf32>
    %w1 = tsr.sgd_update %w, %f, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// Z2-LABEL: func.func @sp
// Z2-NOT: shard.all_reduce
// Z2: %[[V:.*]] = tsr.reshape %arg1 : tensor<4x4xf32> -> tensor<4x1x4xf32>
// Z2-NEXT: %[[A:.*]] = shard.all_gather %[[V]] on @grid grid_axes = [2] gather_axis = 1
// Z2-NEXT: %[[F:.*]] = tsr.reshape %[[A]] : tensor<4x2x4xf32> -> tensor<8x4xf32>
// Z2-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[F]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// Z2-NEXT: %[[P:.*]] = shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// Z2-NEXT: %[[U:.*]] = tsr.sgd_update %[[P]], %[[RS]], {{.*}} : tensor<4x4xf32>
// Z2-NEXT: shard.all_gather %[[U]] on @grid grid_axes = [0] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>

// -----

// Megatron-SP with tp: the other axes' part of the all-reduce stays where
// it was; ZeRO-1 puts the reduce-scatter right before the first update.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @megatron(%w: tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"},
                      %g: tensor<4x4xf32> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"}) {
    %r = shard.all_reduce %g on @grid grid_axes = [0, 1] : tensor<4x4xf32> -> tensor<4x4xf32>
    %a = shard.all_gather %r on @grid grid_axes = [1] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
    %x = tsr.mul %w, %w {tsr.bwd = 0 : i64} : tensor<8x4xf32>
    %w1 = tsr.sgd_update %w, %a, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// Z1-LABEL: func.func @megatron
// Z1-NEXT: %[[R:.*]] = shard.all_reduce %arg1 on @grid grid_axes = [1] : tensor<4x4xf32> -> tensor<4x4xf32>
// Z1-NEXT: %[[A:.*]] = shard.all_gather %[[R]] on @grid grid_axes = [1] gather_axis = 0
// Z1-NEXT: tsr.mul
// Z1-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[A]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// Z1-NEXT: shard.all_slice %arg0
// Z1-NEXT: tsr.sgd_update %{{.*}}, %[[RS]]

// -----

// fp16 (tsr-mixed-precision with a loss scale S): the f16 gradient is
// reduced, converted to f32 and multiplied by 1/S. The f16 gradient is
// reduce-scattered; the convert and the unscale run on the shard, the
// uniform 1/S broadcast again at the shard's shape (no all_slice).
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @fp16(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                  %g: tensor<8x4xf16> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}) {
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<8x4xf16> -> tensor<8x4xf16>
    %x = tsr.mul %w, %w {tsr.bwd = 0 : i64} : tensor<8x4xf32>
    %c = tsr.convert %r : tensor<8x4xf16> -> tensor<8x4xf32>
    %s = tsr.constant dense<9.765625E-4> : tensor<f32>
    %b = tsr.broadcast %s : tensor<f32> -> tensor<8x4xf32>
    %u = tsr.mul %c, %b : tensor<8x4xf32>
    %w1 = tsr.sgd_update %w, %u, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// Z1-LABEL: func.func @fp16
// Z1: tsr.mul
// Z1: %[[RS:.*]] = shard.reduce_scatter %arg1 on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf16> -> tensor<4x4xf16>
// Z1-NEXT: %[[C:.*]] = tsr.convert %[[RS]] : tensor<4x4xf16> -> tensor<4x4xf32>
// Z1-NEXT: %[[BS:.*]] = tsr.broadcast %{{.*}} : tensor<f32> -> tensor<4x4xf32>
// Z1-NEXT: %[[U:.*]] = tsr.mul %[[C]], %[[BS]] : tensor<4x4xf32>
// Z1-NEXT: %[[P:.*]] = shard.all_slice %arg0
// Z1-NEXT: tsr.sgd_update %[[P]], %[[U]], {{.*}} : tensor<4x4xf32>

// Z2-LABEL: func.func @fp16
// Z2-NEXT: %[[RS:.*]] = shard.reduce_scatter %arg1 on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf16> -> tensor<4x4xf16>
// Z2-NEXT: tsr.mul
// Z2-NEXT: %[[C:.*]] = tsr.convert %[[RS]] : tensor<4x4xf16> -> tensor<4x4xf32>

// -----

// bf16 with ring SP: the reduced bf16 shard is converted to f32 before the
// all-gather over sp. The gather and the reduce-scatter carry bf16; the
// convert moves to the shard.
module attributes {tsr.grid_axes = ["dp", "tp", "sp"]} {
  shard.grid @grid(shape = 2x1x2)
  func.func @bf16(%w: tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"},
                  %g: tensor<4x4xbf16> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"}) {
    %x = tsr.mul %w, %w {tsr.bwd = 0 : i64} : tensor<8x4xf32>
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<4x4xbf16> -> tensor<4x4xbf16>
    %c = tsr.convert %r : tensor<4x4xbf16> -> tensor<4x4xf32>
    %v = tsr.reshape %c : tensor<4x4xf32> -> tensor<4x1x4xf32>
    %a = shard.all_gather %v on @grid grid_axes = [2] gather_axis = 1 : tensor<4x1x4xf32> -> tensor<4x2x4xf32>
    %f = tsr.reshape %a : tensor<4x2x4xf32> -> tensor<8x4xf32>
    %w1 = tsr.sgd_update %w, %f, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// Z2-LABEL: func.func @bf16
// Z2-NOT: shard.all_reduce
// Z2: %[[V:.*]] = tsr.reshape %arg1 : tensor<4x4xbf16> -> tensor<4x1x4xbf16>
// Z2-NEXT: %[[A:.*]] = shard.all_gather %[[V]] on @grid grid_axes = [2] gather_axis = 1 : tensor<4x1x4xbf16> -> tensor<4x2x4xbf16>
// Z2-NEXT: %[[F:.*]] = tsr.reshape %[[A]] : tensor<4x2x4xbf16> -> tensor<8x4xbf16>
// Z2-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[F]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xbf16> -> tensor<4x4xbf16>
// Z2-NEXT: %[[C:.*]] = tsr.convert %[[RS]] : tensor<4x4xbf16> -> tensor<4x4xf32>
// Z2-NEXT: %[[P:.*]] = shard.all_slice %arg0
// Z2-NEXT: tsr.sgd_update %[[P]], %[[C]]

// -----

// fp16 with Megatron-SP: the reduced f16 sequence shard is converted and
// unscaled before the all-gather over tp. The convert and the unscale
// move after the reduce-scatter; the broadcast 1/S is made again at the
// shard's shape.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @fp16_megatron(%w: tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"},
                           %g: tensor<4x4xf16> {tsr.name = "g", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "pos_emb", tsr.role = "param"}) {
    %x = tsr.mul %w, %w {tsr.bwd = 0 : i64} : tensor<8x4xf32>
    %r = shard.all_reduce %g on @grid grid_axes = [0] : tensor<4x4xf16> -> tensor<4x4xf16>
    %c = tsr.convert %r : tensor<4x4xf16> -> tensor<4x4xf32>
    %s = tsr.constant dense<9.765625E-4> : tensor<f32>
    %b = tsr.broadcast %s : tensor<f32> -> tensor<4x4xf32>
    %u = tsr.mul %c, %b : tensor<4x4xf32>
    %a = shard.all_gather %u on @grid grid_axes = [1] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
    %w1 = tsr.sgd_update %w, %a, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// Z2-LABEL: func.func @fp16_megatron
// Z2-NOT: shard.all_reduce
// Z2: %[[A:.*]] = shard.all_gather %arg1 on @grid grid_axes = [1] gather_axis = 0 : tensor<4x4xf16> -> tensor<8x4xf16>
// Z2-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[A]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf16> -> tensor<4x4xf16>
// Z2-NEXT: %[[C:.*]] = tsr.convert %[[RS]] : tensor<4x4xf16> -> tensor<4x4xf32>
// Z2-NEXT: %[[B:.*]] = tsr.broadcast %{{.*}} : tensor<f32> -> tensor<4x4xf32>
// Z2-NEXT: %[[U:.*]] = tsr.mul %[[C]], %[[B]] : tensor<4x4xf32>
// Z2-NEXT: %[[P:.*]] = shard.all_slice %arg0
// Z2-NEXT: tsr.sgd_update %[[P]], %[[U]]

// -----

// A gradient that backward computed whole on every dp rank (the partition
// all-gathered its inputs over dp instead of reducing it, as the sharding
// search may do for an LM head under Megatron-SP): no reduction to turn
// into a reduce-scatter; each rank slices its shard before the update.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @whole(%w: tensor<8x4xf32> {tsr.name = "head", tsr.role = "param"},
                   %x: tensor<8x4xf32> {tsr.name = "x", tsr.role = "tokens"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
      -> (tensor<8x4xf32> {tsr.name = "head", tsr.role = "param"}) {
    %g = tsr.mul %x, %w {tsr.bwd = 0 : i64} : tensor<8x4xf32>
    %w1 = tsr.sgd_update %w, %g, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %w1 : tensor<8x4xf32>
  }
}

// Z1-LABEL: func.func @whole
// Z1-NEXT: %[[G:.*]] = tsr.mul %arg1, %arg0 {tsr.bwd = 0 : i64} : tensor<8x4xf32>
// Z1-NEXT: %[[S:.*]] = shard.all_slice %[[G]] on @grid grid_axes = [0] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// Z1-NEXT: %[[P:.*]] = shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// Z1-NEXT: %[[U:.*]] = tsr.sgd_update %[[P]], %[[S]], {{.*}} : tensor<4x4xf32>
// Z1-NEXT: shard.all_gather %[[U]]

// The fused residual add + norm ops of tsr-fuse-norm on an activation whose
// hidden dim is split over tp and whose rows over dp: as tsr.layer_norm and
// tsr.rms_norm, the normalized dim must be whole (the sharding rules mark
// it), the rows stay split, the residual and the addend follow the input,
// and the weight gradients over dp-split rows are partial sums.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(
      %x: tensor<4x8xf32> {tsr.role = "param", tsr.name = "x",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
      %r: tensor<4x8xf32> {tsr.role = "param", tsr.name = "r",
                           tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
      %w: tensor<8xf32> {tsr.role = "param", tsr.name = "w",
                         tsr.sharding = #tsr.sharding<@grid, [[1]]>},
      %b: tensor<8xf32> {tsr.role = "param", tsr.name = "b",
                         tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %dy: tensor<4x8xf32> {tsr.role = "param", tsr.name = "dy",
                            tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>})
      -> (tensor<4x8xf32> {tsr.name = "h",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x8xf32> {tsr.name = "ln",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x8xf32> {tsr.name = "rms_h",
                           tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
          tensor<4x8xf32> {tsr.name = "rms",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x8xf32> {tsr.name = "ln_dx",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<8xf32> {tsr.name = "ln_dw",
                         tsr.sharding = #tsr.sharding<@grid, [[1]]>},
          tensor<8xf32> {tsr.name = "ln_db",
                         tsr.sharding = #tsr.sharding<@grid, [[]]>},
          tensor<4x8xf32> {tsr.name = "rms_dx",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<8xf32> {tsr.name = "rms_dw",
                         tsr.sharding = #tsr.sharding<@grid, [[1]]>}) {
    %h, %ln = tsr.add_layer_norm %x, %r, %w, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    %rh, %rms = tsr.add_rms_norm %r, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    %ldx, %ldw, %ldb = tsr.layer_norm_grad_add %x, %w, %dy, %r {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    %rdx, %rdw = tsr.rms_norm_grad_add %x, %w, %dy, %dy {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    return %h, %ln, %rh, %rms, %ldx, %ldw, %ldb, %rdx, %rdw : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>
  }
}

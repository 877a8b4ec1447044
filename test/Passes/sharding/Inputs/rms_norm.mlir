// tsr.rms_norm next to tsr.layer_norm on the same activation, whose hidden
// dim is split over tp and whose rows over dp: both norms need the hidden
// dim whole (their sharding rules mark it), the rows stay split, and the
// weight gradients over dp-split rows are partial sums. The SwiGLU gate
// (silu and silu_grad) is elementwise and keeps any split.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(
      %x: tensor<4x8xf32> {tsr.role = "param", tsr.name = "x",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
      %w: tensor<8xf32> {tsr.role = "param", tsr.name = "w",
                         tsr.sharding = #tsr.sharding<@grid, [[1]]>},
      %b: tensor<8xf32> {tsr.role = "param", tsr.name = "b",
                         tsr.sharding = #tsr.sharding<@grid, [[1]]>},
      %dy: tensor<4x8xf32> {tsr.role = "param", tsr.name = "dy",
                            tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>})
      -> (tensor<4x8xf32> {tsr.name = "ln",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x8xf32> {tsr.name = "rms",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x8xf32> {tsr.name = "ln_dx",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<8xf32> {tsr.name = "ln_dw",
                         tsr.sharding = #tsr.sharding<@grid, [[1]]>},
          tensor<4x8xf32> {tsr.name = "rms_dx",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<8xf32> {tsr.name = "rms_dw",
                         tsr.sharding = #tsr.sharding<@grid, [[1]]>},
          tensor<4x8xf32> {tsr.name = "silu",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x8xf32> {tsr.name = "silu_dx",
                           tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>}) {
    %ln = tsr.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    %rms = tsr.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    %ldx, %ldw, %ldb = tsr.layer_norm_grad %x, %w, %dy {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    %rdx, %rdw = tsr.rms_norm_grad %x, %w, %dy {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
    %a = tsr.silu %x : tensor<4x8xf32>
    %da = tsr.silu_grad %x, %dy : tensor<4x8xf32>
    return %ln, %rms, %ldx, %ldw, %rdx, %rdw, %a, %da : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  }
}

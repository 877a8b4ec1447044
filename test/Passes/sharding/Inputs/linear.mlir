// tsr-fuse-linear's ops under sharding. A column-parallel tsr.linear (N over
// tp, rows over dp) keeps every split; a row-parallel one (K over tp) needs
// K whole, since the bias and the activation are not linear: its operands
// are all-gathered over tp instead of its result becoming partial. The bias
// gradient of tsr.bias_activation_grad over dp-split rows is a partial sum
// (all-reduced over dp); its input gradient keeps the split.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(
      %x: tensor<4x8xf32> {tsr.role = "param", tsr.name = "x",
                           tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
      %w1: tensor<16x8xf32> {tsr.role = "param", tsr.name = "w1",
                             tsr.sharding = #tsr.sharding<@grid, [[1], []]>},
      %b1: tensor<16xf32> {tsr.role = "param", tsr.name = "b1",
                           tsr.sharding = #tsr.sharding<@grid, [[1]]>},
      %w2: tensor<8x16xf32> {tsr.role = "param", tsr.name = "w2",
                             tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
      %b2: tensor<8xf32> {tsr.role = "param", tsr.name = "b2",
                          tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %dy: tensor<4x16xf32> {tsr.role = "param", tsr.name = "dy",
                             tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>})
      -> (tensor<4x16xf32> {tsr.name = "h",
                            tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x16xf32> {tsr.name = "pre",
                            tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<4x8xf32> {tsr.name = "out",
                           tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
          tensor<4x16xf32> {tsr.name = "dpre",
                            tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
          tensor<16xf32> {tsr.name = "db1",
                          tsr.sharding = #tsr.sharding<@grid, [[1]]>}) {
    %h, %pre = tsr.linear %x, %w1, %b1 {activation = "gelu_tanh", transpose_rhs = true} : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>, tensor<4x16xf32>
    %out = tsr.linear %h, %w2, %b2 {activation = "relu", transpose_rhs = true} : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %dpre, %db1 = tsr.bias_activation_grad %pre, %dy {activation = "gelu_tanh"} : tensor<4x16xf32> -> tensor<16xf32>
    return %h, %pre, %out, %dpre, %db1 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x8xf32>, tensor<4x16xf32>, tensor<16xf32>
  }
}

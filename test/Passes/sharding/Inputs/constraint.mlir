// tsr.sharding_constraint and the fused reshards: a row-parallel matmul's
// partial result constrained to a row split (one reduce-scatter), a
// column-parallel matmul reading that row-split activation (the activation
// is all-gathered; the weight, a fixed argument, keeps its split), and a row
// split turned into a column split (one all-to-all).
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(
      %x: tensor<4x8xf32> {tsr.role = "param", tsr.name = "x",
                           tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
      %w: tensor<8x8xf32> {tsr.role = "param", tsr.name = "w",
                           tsr.sharding = #tsr.sharding<@grid, [[1], []]>},
      %v: tensor<8x6xf32> {tsr.role = "param", tsr.name = "v",
                           tsr.sharding = #tsr.sharding<@grid, [[], [1]]>})
      -> (tensor<4x8xf32> {tsr.name = "a",
                           tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
          tensor<4x6xf32> {tsr.name = "b",
                           tsr.sharding = #tsr.sharding<@grid, [[], [1]]>}) {
    %y = tsr.matmul %x, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    %ys = tsr.sharding_constraint %y {sharding = #tsr.sharding<@grid, [[1], []]>} : tensor<4x8xf32>
    %g = tsr.gelu %ys : tensor<4x8xf32>
    %b = tsr.matmul %g, %v : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
    %a = tsr.sharding_constraint %g {sharding = #tsr.sharding<@grid, [[], [1]]>} : tensor<4x8xf32>
    return %a, %b : tensor<4x8xf32>, tensor<4x6xf32>
  }
}

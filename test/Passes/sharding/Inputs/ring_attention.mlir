// Ring attention and its gradient on a dp x tp x sp = 1 x 2 x 2 grid: the
// (batch·head) dim is split over tp and the sequence is striped over sp
// ({S/2, 2 : [sp]}: rank r holds positions 2·i + r). Used by
// ring-attention.mlir with simulate.py.
module attributes {tsr.grid_axes = ["dp", "tp", "sp"]} {
  shard.grid @grid(shape = 1x2x2)
  func.func @train_step(
      %q: tensor<4x8x3xf32> {tsr.name = "q", tsr.role = "input", tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>},
      %k: tensor<4x8x3xf32> {tsr.name = "k", tsr.role = "input", tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>},
      %v: tensor<4x8x5xf32> {tsr.name = "v", tsr.role = "input", tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>},
      %do: tensor<4x8x5xf32> {tsr.name = "do", tsr.role = "input", tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>})
      -> (tensor<4x8x5xf32> {tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>},
          tensor<4x8xf32> {tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}]>},
          tensor<4x8x3xf32> {tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>},
          tensor<4x8x3xf32> {tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>},
          tensor<4x8x5xf32> {tsr.sharding = #tsr.sharding<@grid, [[1], {4, 2 : [2]}, []]>}) {
    %o, %l = tsr.attention %q, %k, %v {causal = true, ring_size = 2 : i64, scale = 0.5 : f32} : tensor<4x8x3xf32>, tensor<4x8x3xf32>, tensor<4x8x5xf32> -> tensor<4x8x5xf32>, tensor<4x8xf32>
    %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %l, %do {causal = true, ring_size = 2 : i64, scale = 0.5 : f32} : tensor<4x8x3xf32>, tensor<4x8x3xf32>, tensor<4x8x5xf32>, tensor<4x8x5xf32>, tensor<4x8xf32>
    return %o, %l, %dq, %dk, %dv : tensor<4x8x5xf32>, tensor<4x8xf32>, tensor<4x8x3xf32>, tensor<4x8x3xf32>, tensor<4x8x5xf32>
  }
}

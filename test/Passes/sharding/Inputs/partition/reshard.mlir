// Inputs/reshard.mlir annotated for tsr-sharding-partition (grid dp=2 tp=2):
// a factored dim ({3, 2 : [tp]}) gathered for a softmax that keeps only the
// row split, a non-splat constant sliced to the rows' layout, and a result
// whose required sharding moves the split axes around.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(
      %x: tensor<4x6xf32> {tsr.role = "param", tsr.name = "x",
                           tsr.sharding = #tsr.sharding<@grid, [[0], {3, 2 : [1]}]>})
      -> (tensor<4x6xf32> {tsr.role = "param", tsr.name = "y",
                           tsr.sharding = #tsr.sharding<@grid, [[1], [0]]>}) {
    %s = tsr.softmax %x {axis = 1 : i64,
                         tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<4x6xf32>
    %c = tsr.constant {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]}
        dense<[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [7.0, 8.0, 9.0, 10.0, 11.0, 12.0],
               [13.0, 14.0, 15.0, 16.0, 17.0, 18.0], [19.0, 20.0, 21.0, 22.0, 23.0, 24.0]]> : tensor<4x6xf32>
    %y = tsr.add %s, %c {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<4x6xf32>
    return %y : tensor<4x6xf32>
  }
}

// A partitioned AdamW train step on a dp=2 grid (the shape of
// tsr-sharding-partition's output): `w` [8, 4] is used in forward and in
// backward, `b` [3] has no dimension divisible by dp=2. Forward ops carry
// tsr.fwd, backward ops tsr.bwd; each gradient is all-reduced over dp right
// where it is final.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x1)
  func.func @train_step(
      %w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>},
      %b: tensor<3xf32> {tsr.name = "b", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %wm: tensor<8x4xf32> {tsr.name = "w.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[], []]>},
      %wv: tensor<8x4xf32> {tsr.name = "w.exp_avg_sq", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[], []]>},
      %bm: tensor<3xf32> {tsr.name = "b.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %bv: tensor<3xf32> {tsr.name = "b.exp_avg_sq", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %t: tensor<f32> {tsr.name = "step", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, []>},
      %x: tensor<2x8xf32> {tsr.name = "x", tsr.role = "tokens", tsr.sharding = #tsr.sharding<@grid, [[0], []]>}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper", tsr.sharding = #tsr.sharding<@grid, []>})
      -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>},
          tensor<3xf32> {tsr.name = "b", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>},
          tensor<8x4xf32> {tsr.name = "w.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[], []]>},
          tensor<8x4xf32> {tsr.name = "w.exp_avg_sq", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[], []]>},
          tensor<3xf32> {tsr.name = "b.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[]]>},
          tensor<3xf32> {tsr.name = "b.exp_avg_sq", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, [[]]>},
          tensor<f32> {tsr.name = "step", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, []>}) {
    %y = tsr.matmul %x, %w {tsr.fwd = 0 : i64} : tensor<2x8xf32>, tensor<8x4xf32> -> tensor<2x4xf32>
    %dx = tsr.matmul %y, %w {transpose_rhs = true, tsr.bwd = 0 : i64} : tensor<2x4xf32>, tensor<8x4xf32> -> tensor<2x8xf32>
    %gw = tsr.matmul %dx, %y {transpose_lhs = true, tsr.bwd = 0 : i64} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<8x4xf32>
    %gwr = shard.all_reduce %gw on @grid grid_axes = [0] : tensor<8x4xf32> -> tensor<8x4xf32>
    %gb = tsr.mul %b, %b {tsr.bwd = 1 : i64} : tensor<3xf32>
    %gbr = shard.all_reduce %gb on @grid grid_axes = [0] : tensor<3xf32> -> tensor<3xf32>
    %w1, %wm1, %wv1 = tsr.adamw_update %w, %gwr, %wm, %wv, %t, %hlr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<8x4xf32>, tensor<f32>
    %b1, %bm1, %bv1 = tsr.adamw_update %b, %gbr, %bm, %bv, %t, %hlr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<3xf32>, tensor<f32>
    return %w1, %b1, %wm1, %wv1, %bm1, %bv1, %t : tensor<8x4xf32>, tensor<3xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>
  }
}

// tsr.fused_elementwise's sharding rule: elementwise over the result's
// dimensions, each input mapped through its broadcast (trailing-aligned)
// dimensions. Propagation gives the op the layout of its split input; the
// partitioner then runs it on local pieces, slicing the replicated bias
// along the split it shares with the result and keeping the scalar whole.
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate))' %s | FileCheck %s --check-prefix=PROP
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %s | FileCheck %s --check-prefix=PART

module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  // PROP-LABEL: func.func @fused
  // PROP: tsr.fused_elementwise {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>, #tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
  // PART-LABEL: func.func @fused
  // PART-SAME: %arg0: tensor<2x4xf32>
  // PART: %[[B:.*]] = shard.all_slice %arg2 on @grid grid_axes = [1] slice_axis = 0 : tensor<8xf32> -> tensor<4xf32>
  // PART: tsr.fused_elementwise %arg0, %arg1, %[[B]] {{.*}} : (tensor<2x4xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
  func.func @fused(%x: tensor<4x8xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
                   %s: tensor<f32> {tsr.sharding = #tsr.sharding<@grid, []>},
                   %b: tensor<8xf32> {tsr.sharding = #tsr.sharding<@grid, [[]]>}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
    %y, %xs = tsr.fused_elementwise %x, %s, %b {ops = ["mul", "add", "gelu_tanh"], args = array<i64: 0, 1, 3, 2, 4>, outputs = array<i64: 5, 3>} : (tensor<4x8xf32>, tensor<f32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
    return %y, %xs : tensor<4x8xf32>, tensor<4x8xf32>
  }
}

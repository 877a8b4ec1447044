// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %s -verify-diagnostics

// The ring factor (ring_size = 4) split over sp = 2 ranks would leave two
// stripes per rank, which is not the striped layout the kernel computes.
module attributes {tsr.grid_axes = ["dp", "tp", "sp"]} {
  shard.grid @grid(shape = 1x1x2)
  func.func @ring_too_small(%q: tensor<2x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {2, 4 : [2]}, []]>})
      -> tensor<2x8x4xf32> {
    // expected-error @+1 {{ring attention's ring factor (4) must be split over grid axes of exactly 4 ranks, but each rank keeps 2 stripes}}
    %o, %l = tsr.attention %q, %q, %q {ring_size = 4 : i64, scale = 0.5 : f32} : tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32> -> tensor<2x8x4xf32>, tensor<2x8xf32>
    return %o : tensor<2x8x4xf32>
  }
}

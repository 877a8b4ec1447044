// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate))' %s | FileCheck %s
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %s | FileCheck %s --check-prefix=PART

// The multi-tensor updates' sharding rule: parameter i, its gradient, its
// optimizer state and result i share their factors, each kept whole (the
// factor model makes every result depend on every factor, so it cannot
// express that result i does not depend on parameter j: a split parameter
// would make the other results partial); step and lr are replicated. A
// propagation through the fused op therefore gathers split operands and
// gives replicated results, never partial ones (no all_reduce). The
// fusion runs after partition, on local shapes, where nothing propagates
// through it.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  // CHECK-LABEL: func.func @multi_adamw
  // CHECK: tsr.multi_adamw_update{{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], []]>, #tsr.sharding<@grid, {{\[\[}}], []]>, #tsr.sharding<@grid, {{\[\[}}]]>, #tsr.sharding<@grid, {{\[\[}}], []]>, #tsr.sharding<@grid, {{\[\[}}], []]>, #tsr.sharding<@grid, {{\[\[}}]]>, #tsr.sharding<@grid, {{\[\[}}], []]>, #tsr.sharding<@grid, {{\[\[}}], []]>, #tsr.sharding<@grid, {{\[\[}}]]>]
  // PART-LABEL: func.func @multi_adamw
  // PART-COUNT-8: shard.all_gather
  // PART: tsr.multi_adamw_update[{{.*}}: tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>
  // PART-NOT: shard.all_reduce
  // PART-COUNT-2: shard.all_slice
  // PART-NOT: shard.all_reduce
  func.func @multi_adamw(
      %w: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
      %u: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
      %b: tensor<3xf32> {tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %gw: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
      %gu: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
      %gb: tensor<3xf32> {tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %mw: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
      %mu: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
      %mb: tensor<3xf32> {tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %vw: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
      %vu: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
      %vb: tensor<3xf32> {tsr.sharding = #tsr.sharding<@grid, [[]]>},
      %t: tensor<f32> {tsr.sharding = #tsr.sharding<@grid, []>},
      %lr: tensor<f32> {tsr.sharding = #tsr.sharding<@grid, []>})
      -> (tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
          tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [1]]>},
          tensor<3xf32> {tsr.sharding = #tsr.sharding<@grid, [[]]>}) {
    %r:9 = tsr.multi_adamw_update [%w, %u, %b, %gw, %gu, %gb, %mw, %mu, %mb, %vw, %vu, %vb], %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>
    return %r#0, %r#1, %r#2 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<3xf32>
  }
}

// RUN: tessera-opt --tsr-sharding-propagate %s | FileCheck %s

// tsr.attention's rule: the leading (batch, head) dims split with Q, K, V,
// O, the log-sum-exp and every gradient; Sq, Sk, Dh and Dv stay whole (a
// split sequence or head dim is dropped, not propagated), and the [Sq, Sk]
// mask stays replicated.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  // CHECK-LABEL: func.func @attention
  func.func @attention(%q: tensor<2x4x8x6xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], [1], [], []]>},
                       %k: tensor<2x4x8x6xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], [], [1], []]>},
                       %v: tensor<2x4x8x6xf32>,
                       %m: tensor<8x8xf32>,
                       %do: tensor<2x4x8x6xf32>) -> (tensor<2x4x8x6xf32>, tensor<2x4x8x6xf32>) {
    // CHECK: tsr.attention {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>, #tsr.sharding<@grid, {{\[\[}}0], [1], []]>]}
    %o, %l = tsr.attention %q, %k, %v, %m {causal = true, scale = 0.5 : f32} : tensor<2x4x8x6xf32>, tensor<2x4x8x6xf32>, tensor<2x4x8x6xf32>, tensor<8x8xf32> -> tensor<2x4x8x6xf32>, tensor<2x4x8xf32>
    // CHECK: tsr.attention_grad {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>, #tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>, #tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>]}
    %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %l, %do, %m {causal = true, scale = 0.5 : f32} : tensor<2x4x8x6xf32>, tensor<2x4x8x6xf32>, tensor<2x4x8x6xf32>, tensor<2x4x8x6xf32>, tensor<2x4x8xf32>, tensor<8x8xf32>
    return %o, %dk : tensor<2x4x8x6xf32>, tensor<2x4x8x6xf32>
  }
}

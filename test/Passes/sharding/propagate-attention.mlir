// RUN: tessera-opt --split-input-file --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate))' %s | FileCheck %s

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

// -----

// Grouped-query attention (8 query heads over 2 K/V heads): the query's head
// dim is the factors (hkv = 2, major; n_rep = 4, minor), hkv shared with
// K/V. Heads split over tp (2 ranks, dividing Hkv) split hkv, so K, V and
// their gradients are split over tp as well.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  // CHECK-LABEL: func.func @gqa_heads
  func.func @gqa_heads(%q: tensor<2x8x8x6xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], [1], [], []]>},
                       %k: tensor<2x2x8x6xf32>, %v: tensor<2x2x8x6xf32>,
                       %do: tensor<2x8x8x6xf32>) -> (tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>) {
    // CHECK: tsr.attention {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>, #tsr.sharding<@grid, {{\[\[}}0], [1], []]>]}
    %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.5 : f32} : tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>, tensor<2x2x8x6xf32> -> tensor<2x8x8x6xf32>, tensor<2x8x8xf32>
    // CHECK: tsr.attention_grad {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>, #tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>, #tsr.sharding<@grid, {{\[\[}}0], [1], [], []]>]}
    %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %l, %do {causal = true, scale = 0.5 : f32} : tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>, tensor<2x2x8x6xf32>, tensor<2x8x8x6xf32>, tensor<2x8x8xf32>
    return %o, %dk : tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>
  }
}

// -----

// tp = 4 does not divide the 2 K/V heads: the query's {8 : [tp]} does not
// cut at the hkv factor, so the heads stay whole (Megatron-LM splits whole
// K/V heads; the partitioner gathers Q).
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 1x4)
  // CHECK-LABEL: func.func @gqa_tp_not_dividing_kv_heads
  func.func @gqa_tp_not_dividing_kv_heads(%q: tensor<2x8x8x6xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [1], [], []]>},
                       %k: tensor<2x2x8x6xf32>, %v: tensor<2x2x8x6xf32>) -> tensor<2x8x8x6xf32> {
    // CHECK: tsr.attention {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [], [], []]>, #tsr.sharding<@grid, {{\[\[}}], [], []]>]}
    %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.5 : f32} : tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>, tensor<2x2x8x6xf32> -> tensor<2x8x8x6xf32>, tensor<2x8x8xf32>
    return %o : tensor<2x8x8x6xf32>
  }
}

// -----

// The query heads of each group split over tp (n_rep split, K/V replicated):
// the forward's results keep the split, and the backward's dK and dV, which
// sum over the group's query heads, are partial sums over tp.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 1x2)
  // CHECK-LABEL: func.func @gqa_nrep_split
  func.func @gqa_nrep_split(%q: tensor<2x8x8x6xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {2, 4 : [1]}, [], []]>},
                       %k: tensor<2x2x8x6xf32>, %v: tensor<2x2x8x6xf32>,
                       %do: tensor<2x8x8x6xf32>) -> (tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>) {
    // CHECK: tsr.attention {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], {2, 4 : [1]}, [], []]>, #tsr.sharding<@grid, {{\[\[}}], {2, 4 : [1]}, []]>]}
    %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.5 : f32} : tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>, tensor<2x2x8x6xf32> -> tensor<2x8x8x6xf32>, tensor<2x8x8xf32>
    // CHECK: tsr.attention_grad {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], {2, 4 : [1]}, [], []]>, #tsr.sharding<@grid, {{\[\[}}], [], [], []] partial = [1]>, #tsr.sharding<@grid, {{\[\[}}], [], [], []] partial = [1]>]}
    %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %l, %do {causal = true, scale = 0.5 : f32} : tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>, tensor<2x2x8x6xf32>, tensor<2x8x8x6xf32>, tensor<2x8x8xf32>
    return %o, %dk : tensor<2x8x8x6xf32>, tensor<2x2x8x6xf32>
  }
}

// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate))' %S/Inputs/mha_block.mlir | FileCheck %s --check-prefix=MHA
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate))' %S/Inputs/mlp.mlir | FileCheck %s --check-prefix=MLP
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate))' --split-input-file %s | FileCheck %s

// Transformer block, dp=2 tp=2: Megatron's plan falls out of the op rules.
// MHA-LABEL: func.func @train_step
// Column-parallel fused QKV: each rank computes its heads of Q, K and V.
// MHA: tsr.matmul {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [0], {3, 16 : [1]}]>]} : tensor<4x4x16xf32>, tensor<16x48xf32> -> tensor<4x4x48xf32>
// MHA-COUNT-3: tsr.slice {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [0], [1]]>]}
// [S, B, D] -> [S, B*H, Dh]: batch over dp (major), heads over tp (minor).
// MHA-COUNT-3: tsr.reshape {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], {4 : [0], 4 : [1]}, []]>]} : tensor<4x4x16xf32> -> tensor<4x16x4xf32>
// MHA: tsr.softmax {{.*}}tsr.shardings = [#tsr.sharding<@grid, [{4 : [0], 4 : [1]}, [], []]>]}
// [S, B*H, Dh] -> [S*B, D] keeps the heads split on D for the row-parallel out_proj.
// MHA: tsr.reshape {{.*}}tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, [1]]>]} : tensor<4x16x4xf32> -> tensor<16x16xf32>
// Row-parallel out_proj: partial over tp (Megatron's g).
// MHA-NEXT: tsr.matmul {{.*}}tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []] partial = [1]>]}
// MHA: tsr.matmul %{{.*}}, %arg10 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], [1]]>]}
// MHA: tsr.matmul %{{.*}}, %arg12 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], []] partial = [1]>]}
// The summed loss is partial over dp, through the scaling mul.
// MHA: tsr.cross_entropy {{.*}}tsr.shardings = [#tsr.sharding<@grid, [] partial = [0]>]}
// MHA: tsr.mul {{.*}}tsr.shardings = [#tsr.sharding<@grid, [] partial = [0]>]}
// Backward of the column-parallel MLP input: partial over tp (Megatron's f).
// MHA: tsr.matmul %{{.*}}, %arg10 {tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], []] partial = [1]>]}
// Weight gradients contract the batch: partial over dp, split like the weight.
// MHA: tsr.matmul {{.*}}transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}1], []] partial = [0]>]} : tensor<16x32xf32>, tensor<16x16xf32> -> tensor<32x16xf32>
// LayerNorm gradient: input gradient whole, scale/bias gradients partial over dp.
// MHA: tsr.layer_norm_grad {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], []]>, #tsr.sharding<@grid, {{\[\[}}]] partial = [0]>, #tsr.sharding<@grid, {{\[\[}}]] partial = [0]>]}
// The Q/K/V gradients concatenate locally into the fused layout.
// MHA: tsr.concat {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [0], {3, 16 : [1]}]>]}
// MHA: tsr.matmul {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [0], []] partial = [1]>]} : tensor<4x4x48xf32>, tensor<16x48xf32> -> tensor<4x4x16xf32>
// MHA: tsr.transpose {{.*}}tsr.shardings = [#tsr.sharding<@grid, [{3, 16 : [1]}, []] partial = [0]>]} : tensor<16x48xf32> -> tensor<48x16xf32>
// MHA: tsr.sgd_update %arg4, {{.*}}tsr.shardings = [#tsr.sharding<@grid, [{3, 16 : [1]}, []]>]

// MLP-LABEL: func.func @train_step
// The vocab-parallel lookup in the tp-split table is partial over tp.
// MLP: tsr.gather %arg0, %arg6 {tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], []] partial = [1]>]}
// MLP: tsr.matmul %{{.*}}, %arg1 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], [1]]>]}
// MLP: tsr.broadcast %arg2 {tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], [1]]>]}
// MLP: tsr.gelu {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], [1]]>]}
// MLP: tsr.matmul %{{.*}}, %arg3 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], []] partial = [1]>]}
// Vocab parallelism: the lookup in the tp-split table is partial over tp;
// the LM head's logits stay split over the vocabulary into the
// cross-entropy, whose loss is partial over dp only (it reduces over tp
// itself); the table gradient is split like the table, partial over dp.
// MLP: tsr.matmul %{{.*}}, %arg5 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
// MLP: tsr.cross_entropy {{.*}}tsr.shardings = [#tsr.sharding<@grid, [] partial = [0]>]}
// MLP: tsr.cross_entropy_grad {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
// MLP: tsr.gather_grad {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}1], []] partial = [0]>]}

// Backward propagation: a constant and a broadcast's new dim take their
// consumers' split (dim 0), and a dim first reached unsplit (the broadcast
// bias's dim 1, from the replicated %b) takes the split that reaches it
// later from the add (splits only grow), so the mul runs on local pieces.
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  // CHECK-LABEL: func.func @backward
  func.func @backward(%x: tensor<4x8xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], [1]]>},
                      %r: tensor<4x8xf32> {tsr.sharding = #tsr.sharding<@grid, [[], []]>},
                      %b: tensor<8xf32> {tsr.sharding = #tsr.sharding<@grid, [[]]>}) -> tensor<4x8xf32> {
    // CHECK: tsr.constant {tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
    %c = tsr.constant dense<2.0> : tensor<4x8xf32>
    // CHECK: tsr.broadcast %arg2 {tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
    %bb = tsr.broadcast %b : tensor<8xf32> -> tensor<4x8xf32>
    // CHECK: tsr.mul {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
    %m = tsr.mul %c, %bb : tensor<4x8xf32>
    // CHECK: tsr.add %arg1, {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
    %a = tsr.add %r, %x : tensor<4x8xf32>
    // CHECK: tsr.add {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], [1]]>]}
    %y = tsr.add %a, %m : tensor<4x8xf32>
    // Softmax's axis stays whole.
    // CHECK: tsr.softmax {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], []]>]}
    %s = tsr.softmax %y {axis = 1 : i64} : tensor<4x8xf32>
    return %s : tensor<4x8xf32>
  }
}

// -----
// A value's dims are split over disjoint grid axes. The vocab-parallel
// embedding's gradient (issue 20's LLaMA at tp2): gather_grad's result takes
// its vocab split from the table's update and, separately, its hidden split
// from the incoming gradient; both over tp. Each projection is valid alone;
// together they would split two dims over one axis, which has no local
// block (partition then mixed rows of different vocab shards). The hidden
// split, reached first, stays; the update's vocab split is resharded to.
module attributes {tsr.grid_axes = ["tp"]} {
  shard.grid @grid(shape = 2)
  // CHECK-LABEL: func.func @disjoint_axes
  func.func @disjoint_axes(%table: tensor<8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[0], []]>},
                           %ids: tensor<2x3xi64> {tsr.sharding = #tsr.sharding<@grid, [[], []]>},
                           %g: tensor<2x3x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [], [0]]>}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper", tsr.sharding = #tsr.sharding<@grid, []>}) -> tensor<8x4xf32> {
    // CHECK: tsr.gather_grad {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [0]]>]}
    %gg = tsr.gather_grad %ids, %g : tensor<2x3xi64>, tensor<2x3x4xf32> -> tensor<8x4xf32>
    // CHECK: tsr.sgd_update {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], []]>]
    %u = tsr.sgd_update %table, %gg, %hlr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
    return %u : tensor<8x4xf32>
  }
}

// -----
// An elementwise copy of an argument (tsr-mixed-precision's bf16 copy of a
// parameter) is laid out as the argument and as firmly: at a column-parallel
// matmul reading a row-split (Megatron-SP sequence-split) constrained
// activation, the weight copy keeps its column split over tp and the
// activation is gathered, as with the f32 weight itself.
module attributes {tsr.grid_axes = ["tp"]} {
  shard.grid @grid(shape = 2)
  // CHECK-LABEL: func.func @argument_copy
  func.func @argument_copy(%x: tensor<4x8xbf16> {tsr.sharding = #tsr.sharding<@grid, [[], []]>},
                           %v: tensor<8x6xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [0]]>}) -> tensor<4x6xbf16> {
    // CHECK: tsr.sharding_constraint {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}0], []]>]
    %xs = tsr.sharding_constraint %x {sharding = #tsr.sharding<@grid, [[0], []]>} : tensor<4x8xbf16>
    // CHECK: tsr.convert {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [0]]>]
    %vb = tsr.convert %v : tensor<8x6xf32> -> tensor<8x6xbf16>
    // CHECK: tsr.matmul {{.*}}tsr.shardings = [#tsr.sharding<@grid, {{\[\[}}], [0]]>]
    %b = tsr.matmul %xs, %vb : tensor<4x8xbf16>, tensor<8x6xbf16> -> tensor<4x6xbf16>
    return %b : tensor<4x6xbf16>
  }
}

// ZeRO on a dp=2 x tp=2 grid, after annotate/propagate/partition of a small
// MLP with SGD (no optimizer state). The dp axis is appended as the minor
// axis of the first plain dimension whose local size is divisible by dp,
// including a dimension already split over tp (fc1.weight [[1], []] ->
// [[1, 0], []]: dp rank j keeps block j of the tp rank's rows). The token
// embedding and the LM head are split over the vocabulary (vocab
// parallelism), and ZeRO shards their tp pieces over dp the same way.
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=3}))' %S/../sharding/Inputs/mlp.mlir | FileCheck %s --check-prefix=Z3
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=1}))' %S/../sharding/Inputs/mlp.mlir | FileCheck %s --check-prefix=Z1 --implicit-check-not=shard.all_reduce

// Z3-LABEL: func.func @train_step
// Z3-SAME: %arg0: tensor<16x16xf32> {tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1, 0], []]>, tsr.vocab_parallel}
// Z3-SAME: %arg1: tensor<8x16xf32> {tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1, 0], []]>}
// Z3-SAME: %arg2: tensor<8xf32> {tsr.name = "fc1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1, 0]]>}
// Z3-SAME: %arg3: tensor<8x16xf32> {tsr.name = "fc2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], [1]]>}
// Z3-SAME: %arg4: tensor<8xf32> {tsr.name = "fc2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0]]>}
// Z3-NOT: tsr.zero_replicated
// Without tsr.bwd tags every use counts as forward: one gather per
// parameter, before its first use.
// Z3-SAME: %arg5: tensor<16x16xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1, 0], []]>, tsr.vocab_parallel}
// Z3: shard.all_gather %arg0 on @grid grid_axes = [0] gather_axis = 0 : tensor<16x16xf32> -> tensor<32x16xf32>
// Z3-NEXT: tsr.gather %{{.*}} {grid_axes = array<i16: 1>} : tensor<32x16xf32>
// Z3-NEXT: shard.all_reduce {{.*}} grid_axes = [1]
// Z3-NEXT: shard.all_gather %arg1 on @grid grid_axes = [0] gather_axis = 0 : tensor<8x16xf32> -> tensor<16x16xf32>
// The tp all-reduces of activations are untouched; every dp gradient
// all-reduce is a reduce-scatter.
// Z3: shard.all_reduce {{.*}} grid_axes = [1]
// Z3: shard.reduce_scatter {{.*}} grid_axes = [0] scatter_axis = 0 : tensor<32x16xf32> -> tensor<16x16xf32>
// Z3: %[[U:.*]] = tsr.sgd_update %arg1, %{{.*}} : tensor<8x16xf32>
// Z3-NOT: shard.all_gather

// Z1-LABEL: func.func @train_step
// Z1-SAME: %arg1: tensor<16x16xf32> {tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>}
// tp all-reduces: the vocab-parallel lookup, fc2 (g), the loss over dp, then
// backward the LM head's input gradient (for fc2's weight gradient, and
// after its reshape for fc2's input gradient), the lookup's output again for
// fc1's weight gradient, and the embedding's input gradient.
// Z1: shard.all_reduce {{.*}} grid_axes = [1] : tensor<2x8x16xf32>
// Z1: shard.all_reduce {{.*}} grid_axes = [1] : tensor<2x8x16xf32>
// Z1: shard.all_reduce {{.*}} grid_axes = [0] : tensor<f32>
// Z1: shard.all_reduce {{.*}} grid_axes = [1] : tensor<16x16xf32>
// Z1: shard.all_reduce {{.*}} grid_axes = [1] : tensor<2x8x16xf32>
// Z1: shard.all_reduce {{.*}} grid_axes = [1] : tensor<16x16xf32>
// Z1: shard.all_reduce {{.*}} grid_axes = [1] : tensor<2x8x16xf32>
// Z1-COUNT-4: shard.reduce_scatter {{.*}} grid_axes = [0]
// fc2's bias gradient is partial over dp and tp: its tp part stays an
// all-reduce, its dp part becomes the reduce-scatter.
// Z1-NEXT: shard.all_reduce {{.*}} grid_axes = [1] : tensor<16xf32>
// Z1-NEXT: shard.reduce_scatter {{.*}} grid_axes = [0] scatter_axis = 0 : tensor<16xf32> -> tensor<8xf32>
// Z1-NEXT: shard.reduce_scatter {{.*}} grid_axes = [0]
// Z1-NEXT: shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 0 : tensor<32x16xf32> -> tensor<16x16xf32>
// Z1-NEXT: tsr.sgd_update {{.*}} : tensor<16x16xf32>
// Z1-NEXT: shard.all_gather {{.*}} : tensor<16x16xf32> -> tensor<32x16xf32>
// Z1-NEXT: shard.all_slice %arg1 on @grid grid_axes = [0] slice_axis = 0 : tensor<16x16xf32> -> tensor<8x16xf32>

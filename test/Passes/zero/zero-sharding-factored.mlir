// ZeRO on a dimension written with sub-factors: the fused QKV bias of an
// attention block on dp=2 x tp=2 is [{3, 16 : [1]}] (local [24] = 3 chunks x
// 8 of the rank's heads). A contiguous dp block of the local [24] would cut
// across the Q/K/V chunks, so the pass views it as [3, 8], splits the
// 8 over dp (layout {3, 16 : [1, 0]}, local [12]) and reshapes around each
// collective. Plain dimensions are preferred: the fused QKV weight (dim 0
// factored) is split along its plain dim 1.
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=1}))' %S/../sharding/Inputs/mha_block.mlir | FileCheck %s --check-prefix=Z1
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=3}))' %S/../sharding/Inputs/mha_block.mlir | FileCheck %s --check-prefix=Z3

// Z1-LABEL: func.func @train_step
// Z1-SAME: %arg4: tensor<24x16xf32> {tsr.name = "self_attn.in_proj_weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1]}, []]>}
// Z1-SAME: %arg5: tensor<24xf32> {tsr.name = "self_attn.in_proj_bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1]}]>}
// Z1-NOT: tsr.zero_replicated
// Z1: %[[G:.*]] = tsr.reshape %{{.*}} : tensor<24xf32> -> tensor<3x8xf32>
// Z1-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[G]] on @grid grid_axes = [0] scatter_axis = 1 : tensor<3x8xf32> -> tensor<3x4xf32>
// Z1-NEXT: %[[GS:.*]] = tsr.reshape %[[RS]] : tensor<3x4xf32> -> tensor<12xf32>
// Z1: shard.all_slice %arg4 on @grid grid_axes = [0] slice_axis = 1 : tensor<24x16xf32> -> tensor<24x8xf32>
// Z1: %[[P:.*]] = tsr.reshape %arg5 : tensor<24xf32> -> tensor<3x8xf32>
// Z1-NEXT: %[[PS:.*]] = shard.all_slice %[[P]] on @grid grid_axes = [0] slice_axis = 1 : tensor<3x8xf32> -> tensor<3x4xf32>
// Z1-NEXT: %[[PL:.*]] = tsr.reshape %[[PS]] : tensor<3x4xf32> -> tensor<12xf32>
// Z1-NEXT: %[[U:.*]] = tsr.sgd_update %[[PL]], %[[GS]], {{.*}} : tensor<12xf32>
// Z1-NEXT: %[[UV:.*]] = tsr.reshape %[[U]] : tensor<12xf32> -> tensor<3x4xf32>
// Z1-NEXT: %[[AG:.*]] = shard.all_gather %[[UV]] on @grid grid_axes = [0] gather_axis = 1 : tensor<3x4xf32> -> tensor<3x8xf32>
// Z1-NEXT: tsr.reshape %[[AG]] : tensor<3x8xf32> -> tensor<24xf32>

// Z3-LABEL: func.func @train_step
// Z3-SAME: %arg4: tensor<24x8xf32> {tsr.name = "self_attn.in_proj_weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1]}, [0]]>}
// Z3-SAME: %arg5: tensor<12xf32> {tsr.name = "self_attn.in_proj_bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1, 0]}]>}
// Z3: %[[V:.*]] = tsr.reshape %arg5 : tensor<12xf32> -> tensor<3x4xf32>
// Z3-NEXT: %[[AG:.*]] = shard.all_gather %[[V]] on @grid grid_axes = [0] gather_axis = 1 : tensor<3x4xf32> -> tensor<3x8xf32>
// Z3-NEXT: tsr.reshape %[[AG]] : tensor<3x8xf32> -> tensor<24xf32>
// Z3: shard.reduce_scatter %{{.*}} on @grid grid_axes = [0] scatter_axis = 1 : tensor<3x8xf32> -> tensor<3x4xf32>
// Z3: tsr.sgd_update %arg5, %{{.*}} : tensor<12xf32>

// tsr-zero-sharding on a partitioned AdamW step (dp = 2): `w` [8, 4] is
// sharded along dim 0 ([4, 4] per dp rank); `b` [3] has no dimension divisible
// by 2 and keeps its all-reduce and replicated state.
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=1}))' %S/Inputs/adamw_step.mlir | FileCheck %s --check-prefixes=CHECK,Z1
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=2}))' %S/Inputs/adamw_step.mlir | FileCheck %s --check-prefixes=CHECK,Z2
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=3}))' %S/Inputs/adamw_step.mlir | FileCheck %s --check-prefix=Z3
// Stage 0, and any stage with dp = 1, change nothing.
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=0}))' %S/Inputs/adamw_step.mlir | FileCheck %s --check-prefix=OFF
// RUN: sed 's/shape = 2x1/shape = 1x1/' %S/Inputs/adamw_step.mlir | tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=3}))' | FileCheck %s --check-prefix=OFF

// ZeRO-1 and ZeRO-2: the optimizer state of `w` is a dp shard (argument and
// result), its parameter stays whole.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], []]>}
// CHECK-SAME: %arg2: tensor<4x4xf32> {tsr.name = "w.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>}
// CHECK-SAME: %arg3: tensor<4x4xf32> {tsr.name = "w.exp_avg_sq", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>}
// CHECK-SAME: %arg4: tensor<3xf32> {tsr.name = "b.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}]]>}
// CHECK-SAME: -> (tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], []]>}
// CHECK-SAME: tensor<4x4xf32> {tsr.name = "w.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>}
// CHECK-SAME: attributes {tsr.zero_replicated = ["b"]}
// CHECK: %[[GW:.*]] = tsr.matmul {{.*}}tsr.bwd = 0{{.*}} -> tensor<8x4xf32>
// ZeRO-2: the reduce-scatter replaces the all-reduce where the gradient is
// final, before the rest of backward.
// Z2-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[GW]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: tsr.mul {{.*}}tsr.bwd = 1
// CHECK-NEXT: %[[GB:.*]] = shard.all_reduce {{.*}} grid_axes = [0] : tensor<3xf32> -> tensor<3xf32>
// ZeRO-1: the reduce-scatters come after backward, together.
// Z1-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[GW]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[PS:.*]] = shard.all_slice %arg0 on @grid grid_axes = [0] slice_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[P1:.*]], %[[M1:.*]], %[[V1:.*]] = tsr.adamw_update %[[PS]], %[[RS]], %arg2, %arg3, %arg6, {{.*}} : tensor<4x4xf32>, tensor<f32>
// CHECK-NEXT: %[[W1:.*]] = shard.all_gather %[[P1]] on @grid grid_axes = [0] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
// CHECK-NEXT: %[[B1:.*]], %{{.*}}, %{{.*}} = tsr.adamw_update %arg1, %[[GB]], %arg4, %arg5, %arg6, {{.*}} : tensor<3xf32>, tensor<f32>
// CHECK-NEXT: return %[[W1]], %[[B1]], %[[M1]], %[[V1]], {{.*}} : tensor<8x4xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>

// ZeRO-3: `w` itself is stored as the dp shard; it is gathered before its
// forward use and again, separately, before its backward use; the update
// runs on the stored shard and nothing is gathered after it.
// Z3-LABEL: func.func @train_step
// Z3-SAME: %arg0: tensor<4x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>}
// Z3-SAME: %arg1: tensor<3xf32> {tsr.name = "b", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}]]>}
// Z3-SAME: %arg2: tensor<4x4xf32> {tsr.name = "w.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>}
// Z3-SAME: -> (tensor<4x4xf32> {tsr.name = "w", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>}
// Z3-NEXT: %[[F:.*]] = shard.all_gather %arg0 on @grid grid_axes = [0] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
// Z3-NEXT: %[[Y:.*]] = tsr.matmul %arg7, %[[F]] {tsr.fwd = 0 : i64}
// Z3-NEXT: %[[B:.*]] = shard.all_gather %arg0 on @grid grid_axes = [0] gather_axis = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
// Z3-NEXT: tsr.matmul %[[Y]], %[[B]] {transpose_rhs = true, tsr.bwd = 0 : i64}
// Z3-NEXT: %[[GW:.*]] = tsr.matmul
// Z3-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[GW]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<8x4xf32> -> tensor<4x4xf32>
// Z3-NEXT: tsr.mul
// Z3-NEXT: shard.all_reduce
// Z3-NEXT: %[[P1:.*]], %{{.*}}, %{{.*}} = tsr.adamw_update %arg0, %[[RS]], %arg2, %arg3, %arg6, {{.*}} : tensor<4x4xf32>, tensor<f32>
// Z3-NEXT: tsr.adamw_update %arg1
// Z3-NEXT: return %[[P1]], {{.*}} : tensor<4x4xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>

// OFF-LABEL: func.func @train_step
// OFF-NOT: tsr.zero_replicated
// OFF-NOT: shard.reduce_scatter
// OFF-NOT: shard.all_gather
// OFF-NOT: shard.all_slice
// OFF: return

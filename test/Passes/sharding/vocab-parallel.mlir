// Vocab parallelism (Megatron-LM, Shoeybi et al. 2019) on the MLP + LM head
// train step at dp=1 tp=2: the embedding table and the LM head are split
// over the vocabulary, the lookup is masked and all-reduced, and the
// cross-entropy reduces over the split vocabulary inside its kernel
// (grid_axes), so the [N, V] logits are never all-gathered.
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=1 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/mlp.mlir | FileCheck %s --implicit-check-not=shard.all_gather --implicit-check-not=shard.all_slice
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=1 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-lower-to-runtime,func.func(tsr-plan-memory))' %S/Inputs/mlp.mlir | FileCheck %s --check-prefix=RT
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=1 tp=2 vocab-parallel=false},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/mlp.mlir | FileCheck %s --check-prefix=OFF

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<32x16xf32> {tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>, tsr.vocab_parallel}
// CHECK-SAME: %arg5: tensor<32x16xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>, tsr.vocab_parallel}
// Masked lookup in the local 32 rows, then the all-reduce over tp.
// CHECK: %[[E:.*]] = tsr.gather %arg0, %arg6 {grid_axes = array<i16: 1>} : tensor<32x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
// CHECK-NEXT: shard.all_reduce %[[E]] on @grid grid_axes = [1] : tensor<4x8x16xf32>
// The column-parallel LM head gives this rank's 32 of the 64 vocabulary
// columns, read directly by the vocab-parallel cross-entropy.
// CHECK: %[[L:.*]] = tsr.matmul %{{.*}}, %arg5 {transpose_rhs = true} : tensor<32x16xf32>, tensor<32x16xf32> -> tensor<32x32xf32>
// CHECK-NOT: shard.
// CHECK: tsr.cross_entropy %[[L]], %{{.*}} {grid_axes = array<i16: 1>} : tensor<32x32xf32>, tensor<32xi64> -> tensor<f32>
// CHECK: tsr.cross_entropy_grad %[[L]], %{{.*}}, %{{.*}} {grid_axes = array<i16: 1>} : tensor<32x32xf32>, tensor<32xi64>, tensor<f32>
// The head's input gradient contracts the split vocabulary: all-reduced.
// CHECK-NEXT: %[[DX:.*]] = tsr.matmul %{{.*}}, %arg5 : tensor<32x32xf32>, tensor<32x16xf32> -> tensor<32x16xf32>
// CHECK-NEXT: shard.all_reduce %[[DX]] on @grid grid_axes = [1]
// The embedding gradient scatters only this rank's rows.
// CHECK: tsr.gather_grad %arg6, %{{.*}} {grid_axes = array<i16: 1>} : tensor<4x8xi64>, tensor<4x8x16xf32> -> tensor<32x16xf32>
// CHECK: return

// The runtime program keeps grid_axes on the kernels, and the memory plan
// counts the cross-entropy's f64 statistics (N = 32 rows: 3 x 32 x 8 =
// 768 bytes forward, 512 backward) as workspace (the forward's is the one
// at this program's peak).
// RT: tsrt.peak_bytes = {{{.*}}workspace = 768 : i64}
// RT: tsrt.kernel "gather"({{.*}}) {attrs = {grid_axes = array<i16: 1>}
// RT: tsrt.kernel "cross_entropy"({{.*}}) {attrs = {grid_axes = array<i16: 1>}
// RT: tsrt.kernel "cross_entropy_grad"({{.*}}) {attrs = {grid_axes = array<i16: 1>}
// RT: tsrt.kernel "gather_grad"({{.*}}) {attrs = {grid_axes = array<i16: 1>}

// --vocab-parallel off: table and head replicated, no kernel communicates.
// OFF-LABEL: func.func @train_step
// OFF-SAME: %arg0: tensor<64x16xf32> {tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], []]>}
// OFF: tsr.gather %arg0, %arg6 : tensor<64x16xf32>
// OFF-NOT: grid_axes = array
// OFF: tsr.cross_entropy %{{.*}}, %{{.*}} : tensor<32x64xf32>
// OFF-NOT: grid_axes = array
// OFF: return

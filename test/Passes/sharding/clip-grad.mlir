// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-clip-grad{max-norm=1},tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/mlp.mlir | FileCheck %s

// tsr-clip-grad's norm under dp2 x tp2 (Megatron MLP, vocab-parallel
// embedding and head): each gradient is all-reduced over dp ONCE, and both
// its norm term and its clipped update read that value (the propagation
// does not pass the dp-partial gradient through the clip's mul and reduce
// it a second time). Each term is reduced over exactly the axes its
// gradient is split over: the tp-split gradients' terms (embedding and
// head vocab rows, fc1 column, fc2 row) are partial over tp and summed by
// one scalar all-reduce over tp; fc2.bias, replicated over tp (its
// gradient all-reduced over dp and tp), adds its term unreduced, so it
// counts once, not tp times.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<f32> {tsr.name = "grad_norm", tsr.role = "grad_norm", tsr.sharding = #tsr.sharding<@grid, []>}
// head.weight (vocab rows over tp): term partial over tp.
// CHECK: %[[HG:.*]] = shard.all_reduce %{{.*}} on @grid grid_axes = [0] : tensor<32x16xf32> -> tensor<32x16xf32>
// CHECK-NEXT: %[[HT:.*]] = tsr.sum_squares %[[HG]] : tensor<32x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[HTR:.*]] = shard.all_reduce %[[HT]] on @grid grid_axes = [1] : tensor<f32> -> tensor<f32>
// fc2.bias (replicated over tp): no tp reduction of its term.
// CHECK: %[[BG:.*]] = shard.all_reduce %{{.*}} on @grid grid_axes = [0, 1] : tensor<16xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[BT:.*]] = tsr.sum_squares %[[BG]] : tensor<16xf32> -> tensor<f32>
// CHECK-NOT: shard.all_reduce %[[BT]]
// fc2.weight, fc1.bias, fc1.weight, tok_emb.weight (split over tp).
// CHECK: %[[W2G:.*]] = shard.all_reduce %{{.*}} on @grid grid_axes = [0] : tensor<16x16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: %[[W2T:.*]] = tsr.sum_squares %[[W2G]] : tensor<16x16xf32> -> tensor<f32>
// CHECK: %[[B1G:.*]] = shard.all_reduce %{{.*}} on @grid grid_axes = [0] : tensor<16xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[B1T:.*]] = tsr.sum_squares %[[B1G]] : tensor<16xf32> -> tensor<f32>
// CHECK: %[[W1G:.*]] = shard.all_reduce %{{.*}} on @grid grid_axes = [0] : tensor<16x16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: %[[W1T:.*]] = tsr.sum_squares %[[W1G]] : tensor<16x16xf32> -> tensor<f32>
// CHECK: %[[EG:.*]] = shard.all_reduce %{{.*}} on @grid grid_axes = [0] : tensor<32x16xf32> -> tensor<32x16xf32>
// CHECK-NEXT: %[[ET:.*]] = tsr.sum_squares %[[EG]] : tensor<32x16xf32> -> tensor<f32>
// The tp-partial terms are summed first, then one scalar all-reduce.
// CHECK-NEXT: %[[S1:.*]] = tsr.add %[[ET]], %[[W1T]] : tensor<f32>
// CHECK-NEXT: %[[S2:.*]] = tsr.add %[[S1]], %[[B1T]] : tensor<f32>
// CHECK-NEXT: %[[S3:.*]] = tsr.add %[[S2]], %[[W2T]] : tensor<f32>
// CHECK-NEXT: %[[TP:.*]] = shard.all_reduce %[[S3]] on @grid grid_axes = [1] : tensor<f32> -> tensor<f32>
// CHECK-NEXT: %[[S4:.*]] = tsr.add %[[TP]], %[[BT]] : tensor<f32>
// CHECK-NEXT: %[[S5:.*]] = tsr.add %[[S4]], %[[HTR]] : tensor<f32>
// CHECK-NEXT: %[[NORM:.*]] = tsr.sqrt %[[S5]] : tensor<f32>
// The clipped updates read the same reduced gradients: no more all-reduces.
// CHECK-NOT: shard.all_reduce
// CHECK: tsr.mul %[[EG]], %{{.*}} : tensor<32x16xf32>
// CHECK: tsr.mul %[[W1G]], %{{.*}} : tensor<16x16xf32>
// CHECK: tsr.mul %[[B1G]], %{{.*}} : tensor<16xf32>
// CHECK: tsr.mul %[[W2G]], %{{.*}} : tensor<16x16xf32>
// CHECK: tsr.mul %[[BG]], %{{.*}} : tensor<16xf32>
// CHECK: tsr.mul %[[HG]], %{{.*}} : tensor<32x16xf32>
// CHECK: return {{.*}}, %[[NORM]] :

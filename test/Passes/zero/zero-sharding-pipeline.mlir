// ZeRO under a pipeline (dp 2 x pp 2, 2 micro-batches), through
// tsr-pipeline-split. Each gradient's all-reduce over dp and mb becomes the
// mb accumulation (summed across micro-batches by the runtime) and a
// reduce-scatter over dp in the apply function of the stage that holds the
// parameter; the slice of a parameter before its update goes to that
// stage too, so no stage reads a parameter it does not update.
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{dp=2 pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=1}),tsr-pipeline-split)' %s | FileCheck %s --check-prefix=Z1
// ZeRO-3: the parameters' all-gathers are placed with their readers, per
// micro-batch: forward_c gathers before its forward uses, backward_c again
// before the backward uses (the gathered copy is not kept across phases or
// micro-batches), and the split's chunk assignment is the same as without
// ZeRO (the gathers are not layers).
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{dp=2 pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=3}),tsr-pipeline-split)' %s | FileCheck %s --check-prefix=Z3

// A small LM: embedding -> two linear + GELU layers -> head.
func.func @forward(
    %wte: tensor<16x8xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x8xf32>},
    %w1: tensor<8x8xf32> {tsr.name = "w1", tsr.role = "param", tsr.init = dense<0.25> : tensor<8x8xf32>},
    %w2: tensor<8x8xf32> {tsr.name = "w2", tsr.role = "param", tsr.init = dense<0.125> : tensor<8x8xf32>},
    %head: tensor<16x8xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<16x8xf32>},
    %tokens: tensor<4x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<4x3x16xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<16x8xf32>, tensor<4x3xi64> -> tensor<4x3x8xf32>
  %h1 = tsr.matmul %e, %w1 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g1 = tsr.gelu %h1 : tensor<4x3x8xf32>
  %h2 = tsr.matmul %g1, %w2 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g2 = tsr.gelu %h2 : tensor<4x3x8xf32>
  %l = tsr.matmul %g2, %head {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<16x8xf32> -> tensor<4x3x16xf32>
  return %l : tensor<4x3x16xf32>
}

// Chunk 0 holds wte, w1, w2 (step arguments 0-2): its apply function
// reduce-scatters their accumulated gradients, updates the shards and
// gathers the new parameters.
// Z1-LABEL: func.func @apply_0(
// Z1-SAME: %[[G:[a-z0-9]+]]: tensor<16x8xf32> {tsrt.acc = 1 : i64}
// Z1-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xf32> {tsrt.arg = 0 : i64}
// Z1: %[[RS:.*]] = shard.reduce_scatter %[[G]] on @grid grid_axes = [0] scatter_axis = 0 : tensor<16x8xf32> -> tensor<8x8xf32>
// Z1: %[[S:.*]] = shard.all_slice %[[WTE]] on @grid grid_axes = [0] slice_axis = 0 : tensor<16x8xf32> -> tensor<8x8xf32>
// Z1-NEXT: %[[U:.*]] = tsr.sgd_update %[[S]], %[[RS]], {{.*}} : tensor<8x8xf32>
// Z1-NEXT: shard.all_gather %[[U]] on @grid grid_axes = [0] gather_axis = 0 : tensor<8x8xf32> -> tensor<16x8xf32>
// Z1-COUNT-2: tsr.sgd_update
// Z1: return
// Chunk 1 holds only the head (argument 3): no slice of chunk 0's
// parameters is replicated into it.
// Z1-LABEL: func.func @apply_1(
// Z1-NOT: tsrt.arg = 0
// Z1-NOT: tsrt.arg = 1
// Z1-NOT: tsrt.arg = 2
// Z1-SAME: {tsrt.arg = 3 : i64}
// Z1: shard.all_slice
// Z1-NEXT: tsr.sgd_update
// Z1-NEXT: shard.all_gather
// Z1-NOT: tsr.sgd_update
// Z1: return

// Z3-LABEL: func.func @forward_0(
// Z3-SAME: %[[WTE:[a-z0-9]+]]: tensor<8x8xf32> {tsrt.arg = 0 : i64}
// Z3: %[[A:.*]] = shard.all_gather %[[WTE]] on @grid grid_axes = [0] gather_axis = 0 : tensor<8x8xf32> -> tensor<16x8xf32>
// Z3-NEXT: tsr.gather %[[A]]
// Z3: shard.all_gather {{.*}} : tensor<4x8xf32> -> tensor<8x8xf32>
// Z3-NEXT: tsr.matmul
// Z3: shard.all_gather {{.*}} : tensor<4x8xf32> -> tensor<8x8xf32>
// Z3-NEXT: tsr.matmul
// Z3: tsrt.send
// The embedding table is not read by its gradient (gather_grad): gathered
// in forward only. The two weights are gathered again.
// Z3-LABEL: func.func @backward_0(
// Z3-COUNT-2: shard.all_gather {{.*}} : tensor<4x8xf32> -> tensor<8x8xf32>
// Z3-NOT: shard.all_gather
// Z3: tsr.gather_grad
// Z3-LABEL: func.func @apply_0(
// Z3-NOT: shard.all_gather
// Z3-COUNT-3: tsr.sgd_update %arg{{[0-9]+}}, %reduce_scatter
// Z3-NOT: shard.all_gather
// Z3: return
// Z3-LABEL: func.func @forward_1(
// Z3: shard.all_gather {{.*}} : tensor<8x8xf32> -> tensor<16x8xf32>
// Z3-NEXT: tsr.matmul
// Z3-LABEL: func.func @backward_1(
// Z3: shard.all_gather {{.*}} : tensor<8x8xf32> -> tensor<16x8xf32>
// Z3-NEXT: tsr.matmul

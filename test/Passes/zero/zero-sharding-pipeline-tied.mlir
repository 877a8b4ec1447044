// ZeRO-3 under a pipeline with a tied weight (the embedding table is also
// the LM head): its forward all-gather is read by chunks 0 and 1, which the
// split rejects as it rejects the tied parameter itself without ZeRO.
// RUN: not tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{dp=2 pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=3}),tsr-pipeline-split)' %s 2>&1 | FileCheck %s --check-prefix=Z3
// Z3: error: 'shard.all_gather' op is read in pipeline chunks 0 and 1 (parameter 'wte'); a parameter shared by several chunks (tied weights) is not supported with pipeline parallelism
// RUN: not tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{dp=2 pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split)' %s 2>&1 | FileCheck %s --check-prefix=Z0
// Z0: error: 'tsr.gather' op uses 'wte' in pipeline chunk 0 but chunk 1 uses it too; a parameter shared by several chunks (tied weights) is not supported with pipeline parallelism

func.func @forward(
    %wte: tensor<16x8xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<16x8xf32>},
    %w1: tensor<8x8xf32> {tsr.name = "w1", tsr.role = "param", tsr.init = dense<0.25> : tensor<8x8xf32>},
    %w2: tensor<8x8xf32> {tsr.name = "w2", tsr.role = "param", tsr.init = dense<0.125> : tensor<8x8xf32>},
    %tokens: tensor<4x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<4x3x16xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<16x8xf32>, tensor<4x3xi64> -> tensor<4x3x8xf32>
  %h1 = tsr.matmul %e, %w1 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g1 = tsr.gelu %h1 : tensor<4x3x8xf32>
  %h2 = tsr.matmul %g1, %w2 {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<8x8xf32> -> tensor<4x3x8xf32>
  %g2 = tsr.gelu %h2 : tensor<4x3x8xf32>
  %l = tsr.matmul %g2, %wte {transpose_rhs = true} : tensor<4x3x8xf32>, tensor<16x8xf32> -> tensor<4x3x16xf32>
  return %l : tensor<4x3x16xf32>
}

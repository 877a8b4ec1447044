// tsr-print-pipeline-schedule: one line per rank (dp x tp x pp, pp fastest),
// with its stage's actions and peak activation sets against the bound.
// 1F1B holds at most P - stage micro-batches; GPipe holds all M.
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{dp=2 pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split,tsr-print-pipeline-schedule)' %s -o /dev/null | FileCheck %s
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{pp=2 micro-batches=4},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split{schedule=gpipe},tsr-print-pipeline-schedule)' %s -o /dev/null | FileCheck %s --check-prefix=GPIPE
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{pp=2 micro-batches=4},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split{schedule=1f1b},tsr-print-pipeline-schedule)' %s -o /dev/null | FileCheck %s --check-prefix=ONEF
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-build-train-step{optimizer=sgd lr=0.5},tsr-sharding-annotate{pp=2 micro-batches=2},func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-pipeline-split{schedule=interleaved virtual-stages=2},tsr-print-pipeline-schedule)' %s -o /dev/null | FileCheck %s --check-prefix=INTERLEAVED
// RUN: not tessera-opt --tsr-print-pipeline-schedule %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOSCHED

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

// CHECK: pipeline schedule: 1f1b, 2 stages x 1 virtual = 2 chunks, 2 micro-batches
// CHECK-NEXT: predicted bubble fraction: (P - 1) / (V*M + P - 1) = 1 / 3 = 0.333
// CHECK-NEXT: simulated bubble fraction (chunk FLOPs, backward = 2 x forward): 0.{{[0-9]+}}
// CHECK-NEXT: rank 0 (dp=0 tp=0 pp=0) stage 0: F0.0 F0.1 B0.0 B0.1
// CHECK-NEXT:   peak activation sets 2 (bound 2)
// CHECK-NEXT: rank 1 (dp=0 tp=0 pp=1) stage 1: F1.0 B1.0 F1.1 B1.1
// CHECK-NEXT:   peak activation sets 1 (bound 1)
// CHECK-NEXT: rank 2 (dp=1 tp=0 pp=0) stage 0: F0.0 F0.1 B0.0 B0.1
// CHECK-NEXT:   peak activation sets 2 (bound 2)
// CHECK-NEXT: rank 3 (dp=1 tp=0 pp=1) stage 1: F1.0 B1.0 F1.1 B1.1
// CHECK-NEXT:   peak activation sets 1 (bound 1)

// GPIPE: predicted bubble fraction: (P - 1) / (V*M + P - 1) = 1 / 5 = 0.200
// GPIPE-NEXT: simulated bubble fraction
// GPIPE-NEXT: rank 0 (dp=0 tp=0 pp=0) stage 0: F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3
// GPIPE-NEXT:   peak activation sets 4 (bound 4)
// GPIPE-NEXT: rank 1 (dp=0 tp=0 pp=1) stage 1: F1.0 F1.1 F1.2 F1.3 B1.0 B1.1 B1.2 B1.3
// GPIPE-NEXT:   peak activation sets 4 (bound 4)

// ONEF: rank 0 (dp=0 tp=0 pp=0) stage 0: F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3
// ONEF-NEXT:   peak activation sets 2 (bound 2)
// ONEF-NEXT: rank 1 (dp=0 tp=0 pp=1) stage 1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3
// ONEF-NEXT:   peak activation sets 1 (bound 1)

// Interleaved: stage 0 runs chunks 0 and 2, stage 1 chunks 1 and 3.
// INTERLEAVED: pipeline schedule: interleaved, 2 stages x 2 virtual = 4 chunks, 2 micro-batches
// INTERLEAVED-NEXT: predicted bubble fraction: (P - 1) / (V*M + P - 1) = 1 / 5 = 0.200
// INTERLEAVED-NEXT: simulated bubble fraction
// INTERLEAVED-NEXT: rank 0 (dp=0 tp=0 pp=0) stage 0: F0.0 F0.1 F2.0
// INTERLEAVED: rank 1 (dp=0 tp=0 pp=1) stage 1: F1.0

// NOSCHED: error: no tsrt.pipeline_schedule to print (run tsr-pipeline-split first)

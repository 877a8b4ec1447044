// The ZeRO collectives lower to tsrt collectives the runtime executes:
// shard.all_slice becomes tsrt.all_slice (a local copy of the rank's block).
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-zero-sharding{stage=1}),tsr-lower-to-runtime)' %S/Inputs/adamw_step.mlir | FileCheck %s

// CHECK-LABEL: func.func @train_step
// CHECK: tsrt.all_reduce %{{.*}} {grid_axes = array<i16: 0>} : tensor<3xf32> -> tensor<3xf32>
// CHECK: tsrt.reduce_scatter %{{.*}} {dim = 0 : i64, grid_axes = array<i16: 0>} : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: tsrt.all_slice %arg0 {dim = 0 : i64, grid_axes = array<i16: 0>} : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: tsrt.kernel "adamw_update"
// CHECK: tsrt.all_gather %{{.*}} {dim = 0 : i64, grid_axes = array<i16: 0>} : tensor<4x4xf32> -> tensor<8x4xf32>

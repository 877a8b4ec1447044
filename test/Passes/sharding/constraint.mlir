// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/constraint.mlir | FileCheck %s --implicit-check-not=shard.all_reduce --implicit-check-not=shard.all_slice --implicit-check-not=tsr.sharding_constraint
// RUN: tessera-opt %S/Inputs/constraint.mlir --mlir-print-op-generic > %t.serial.mlir
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/constraint.mlir --mlir-print-op-generic > %t.part.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.part.mlir | FileCheck %s --check-prefix=SIM
// SIM: OK: 2 results on 4 ranks match the serial run

// The weight %arg1 keeps its row split (a fixed argument wins over the
// constraint's proposal), so the matmul is partial over tp and the
// constraint's row split is one reduce-scatter, not all-reduce + slice.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg1: tensor<4x8xf32>
// CHECK: %[[Y:.*]] = tsr.matmul %arg0, %arg1 : tensor<4x4xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[RS:.*]] = shard.reduce_scatter %[[Y]] on @grid grid_axes = [1] scatter_axis = 0 : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %[[G:.*]] = tsr.gelu %[[RS]] : tensor<2x8xf32>
// Row split -> column split over the same axis: one all-to-all.
// CHECK-NEXT: %[[A:.*]] = shard.all_to_all %[[G]] on @grid grid_axes = [1] split_axis = 1 concat_axis = 0 : tensor<2x8xf32> -> tensor<4x4xf32>
// Column-parallel matmul: the row-split activation is gathered, the
// weight's column split stays.
// CHECK-NEXT: %[[F:.*]] = shard.all_gather %[[G]] on @grid grid_axes = [1] gather_axis = 0 : tensor<2x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = tsr.matmul %[[F]], %arg2 : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT: return %[[A]], %[[B]]

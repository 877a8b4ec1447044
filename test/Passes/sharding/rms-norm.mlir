// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/rms_norm.mlir | FileCheck %s
// RUN: tessera-opt %S/Inputs/rms_norm.mlir --mlir-print-op-generic > %t.serial.mlir
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/rms_norm.mlir --mlir-print-op-generic > %t.part.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.part.mlir | FileCheck %s --check-prefix=SIM
// SIM: OK: 8 results on 4 ranks match the serial run

// tsr.rms_norm over a hidden dim split over tp is handled exactly as
// tsr.layer_norm: the activation and the weight are all-gathered over tp (the
// normalized dim stays whole; the dp-split rows stay split), the result is
// sliced back to the tp split; the weight gradient of dp-split rows is a
// partial sum all-reduced over dp. silu and silu_grad keep the split.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<2x4xf32>
// CHECK-DAG: %[[DY:.*]] = shard.all_gather %arg3 on @grid grid_axes = [1] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
// CHECK-DAG: %[[W:.*]] = shard.all_gather %arg1 on @grid grid_axes = [1] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
// CHECK-DAG: %[[X:.*]] = shard.all_gather %arg0 on @grid grid_axes = [1] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
// CHECK: %[[LN:.*]] = tsr.layer_norm %[[X]], %[[W]], %{{.*}} {{.*}} : tensor<2x8xf32>, tensor<8xf32>
// CHECK-NEXT: shard.all_slice %[[LN]] on @grid grid_axes = [1] slice_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[RMS:.*]] = tsr.rms_norm %[[X]], %[[W]] {{.*}} : tensor<2x8xf32>, tensor<8xf32>
// CHECK-NEXT: shard.all_slice %[[RMS]] on @grid grid_axes = [1] slice_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %{{.*}}, %[[LDW:.*]], %{{.*}} = tsr.layer_norm_grad %[[X]], %[[W]], %[[DY]]
// CHECK-NEXT: %[[LDWR:.*]] = shard.all_reduce %[[LDW]] on @grid grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
// CHECK-NEXT: shard.all_slice %[[LDWR]] on @grid grid_axes = [1] slice_axis = 0 : tensor<8xf32> -> tensor<4xf32>
// CHECK-NEXT: shard.all_slice
// CHECK-NEXT: %{{.*}}, %[[RDW:.*]] = tsr.rms_norm_grad %[[X]], %[[W]], %[[DY]]
// CHECK-NEXT: %[[RDWR:.*]] = shard.all_reduce %[[RDW]] on @grid grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
// CHECK-NEXT: shard.all_slice %[[RDWR]] on @grid grid_axes = [1] slice_axis = 0 : tensor<8xf32> -> tensor<4xf32>
// CHECK-NEXT: shard.all_slice
// CHECK-NEXT: tsr.silu %arg0 : tensor<2x4xf32>
// CHECK-NEXT: tsr.silu_grad %arg0, %arg3 : tensor<2x4xf32>
// CHECK-NEXT: return

// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/fused_norm.mlir | FileCheck %s
// RUN: tessera-opt %S/Inputs/fused_norm.mlir --mlir-print-op-generic > %t.serial.mlir
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/fused_norm.mlir --mlir-print-op-generic > %t.part.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.part.mlir | FileCheck %s --check-prefix=SIM
// SIM: OK: 9 results on 4 ranks match the serial run

// The sharding rules of the tsr-fuse-norm ops (tsr.add_layer_norm,
// tsr.add_rms_norm, tsr.layer_norm_grad_add, tsr.rms_norm_grad_add): the
// tp-split hidden dim of the input, the gradient and the weight is
// all-gathered (the normalized dim stays whole), the residual and the
// addend (already whole over tp) are used as they are, the dp-split rows
// stay split, the sum and the normalized rows are sliced back to their
// result sharding, and the weight gradients of dp-split rows are partial
// sums all-reduced over dp.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<2x4xf32>
// CHECK-SAME: %arg1: tensor<2x8xf32>
// CHECK-DAG: %[[DY:.*]] = shard.all_gather %arg4 on @grid grid_axes = [1] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
// CHECK-DAG: %[[W:.*]] = shard.all_gather %arg2 on @grid grid_axes = [1] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
// CHECK-DAG: %[[X:.*]] = shard.all_gather %arg0 on @grid grid_axes = [1] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
// CHECK: %[[H:.*]], %[[LN:.*]] = tsr.add_layer_norm %[[X]], %arg1, %[[W]], %arg3 {{.*}} : tensor<2x8xf32>, tensor<8xf32>
// CHECK-DAG: shard.all_slice %[[LN]] on @grid grid_axes = [1] slice_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK-DAG: shard.all_slice %[[H]] on @grid grid_axes = [1] slice_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK: %[[RH:.*]], %[[RMS:.*]] = tsr.add_rms_norm %arg1, %[[X]], %[[W]] {{.*}} : tensor<2x8xf32>, tensor<8xf32>
// CHECK-NEXT: shard.all_slice %[[RMS]] on @grid grid_axes = [1] slice_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[LDX:.*]], %[[LDW:.*]], %[[LDB:.*]] = tsr.layer_norm_grad_add %[[X]], %[[W]], %[[DY]], %arg1
// CHECK-DAG: shard.all_reduce %[[LDB]] on @grid grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
// CHECK-DAG: %[[LDWR:.*]] = shard.all_reduce %[[LDW]] on @grid grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
// CHECK-DAG: shard.all_slice %[[LDWR]] on @grid grid_axes = [1] slice_axis = 0 : tensor<8xf32> -> tensor<4xf32>
// CHECK-DAG: shard.all_slice %[[LDX]] on @grid grid_axes = [1] slice_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK: %[[RDX:.*]], %[[RDW:.*]] = tsr.rms_norm_grad_add %[[X]], %[[W]], %[[DY]], %[[DY]]
// CHECK-NEXT: %[[RDWR:.*]] = shard.all_reduce %[[RDW]] on @grid grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
// CHECK-NEXT: shard.all_slice %[[RDWR]] on @grid grid_axes = [1] slice_axis = 0 : tensor<8xf32> -> tensor<4xf32>
// CHECK-NEXT: shard.all_slice %[[RDX]] on @grid grid_axes = [1] slice_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: return {{.*}}, %[[RH]],

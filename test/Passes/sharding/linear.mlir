// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/linear.mlir | FileCheck %s
// RUN: tessera-opt %S/Inputs/linear.mlir --mlir-print-op-generic > %t.serial.mlir
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/linear.mlir --mlir-print-op-generic > %t.part.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.part.mlir | FileCheck %s --check-prefix=SIM
// SIM: OK: 5 results on 4 ranks match the serial run

// The sharding rules of tsr-fuse-linear's ops (see Inputs/linear.mlir).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<2x8xf32>
// CHECK: %[[W2:.*]] = shard.all_gather %arg3 on @grid grid_axes = [1] gather_axis = 1 : tensor<8x8xf32> -> tensor<8x16xf32>
// CHECK: %[[H:.*]], %[[PRE:.*]] = tsr.linear %arg0, %arg1, %arg2 {activation = "gelu_tanh", transpose_rhs = true} : tensor<2x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<2x8xf32>, tensor<2x8xf32>
// CHECK-NEXT: %[[HG:.*]] = shard.all_gather %[[H]] on @grid grid_axes = [1] gather_axis = 1 : tensor<2x8xf32> -> tensor<2x16xf32>
// CHECK-NEXT: %[[OUT:.*]] = tsr.linear %[[HG]], %[[W2]], %arg4 {activation = "relu", transpose_rhs = true} : tensor<2x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %[[DX:.*]], %[[DB:.*]] = tsr.bias_activation_grad %[[PRE]], %arg5 {activation = "gelu_tanh"} : tensor<2x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[DBR:.*]] = shard.all_reduce %[[DB]] on @grid grid_axes = [0] : tensor<8xf32> -> tensor<8xf32>
// CHECK-NEXT: return %[[H]], %[[PRE]], %[[OUT]], %[[DX]], %[[DBR]]

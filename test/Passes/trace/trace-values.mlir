// RUN: tessera-opt --tsr-trace-values %s -split-input-file -verify-diagnostics | FileCheck %s

// Every op of @train_step with results gets an id in program order, except
// constants; other functions are left alone.
// CHECK-LABEL: func.func @train_step
func.func @train_step(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // CHECK: tsr.constant
  // CHECK-NOT: tsr.trace
  %c = tsr.constant dense<1.0> : tensor<4x8xf32>
  // CHECK: tsr.matmul {{.*}}{tsr.trace = 0 : i64}
  %0 = tsr.matmul %x, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  // CHECK: tsr.add {{.*}}{tsr.trace = 1 : i64}
  %1 = tsr.add %0, %c : tensor<4x8xf32>
  // CHECK: tsr.gelu {{.*}}{tsr.trace = 2 : i64}
  %2 = tsr.gelu %1 : tensor<4x8xf32>
  // CHECK: return
  return %2 : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @helper
// CHECK-NOT: tsr.trace
func.func @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tsr.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @below {{tsr-trace-values: no func.func @train_step with a body (run it after tsr-build-train-step)}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = tsr.gelu %x : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

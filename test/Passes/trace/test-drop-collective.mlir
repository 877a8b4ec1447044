// RUN: tessera-opt --tsr-test-drop-collective=index=1 %s -split-input-file -verify-diagnostics | FileCheck %s

// Testing-only pass: the second shard.all_reduce goes, its operand is used
// in place of its result; the first stays.
module {
  shard.grid @grid(shape = 1x2)
  // CHECK-LABEL: func.func @train_step
  func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
    // CHECK: %[[A:.*]] = shard.all_reduce %arg0
    %a = shard.all_reduce %x on @grid grid_axes = [1] : tensor<4xf32> -> tensor<4xf32>
    // CHECK-NEXT: %[[G:.*]] = tsr.gelu %[[A]]
    %g = tsr.gelu %a : tensor<4xf32>
    // CHECK-NOT: shard.all_reduce
    %b = shard.all_reduce %g on @grid grid_axes = [1] : tensor<4xf32> -> tensor<4xf32>
    // CHECK: tsr.add %[[G]], %[[G]]
    %s = tsr.add %b, %b : tensor<4xf32>
    return %s : tensor<4xf32>
  }
}

// -----

// expected-error @below {{tsr-test-drop-collective: index 1 out of range: the module has 1 shard.all_reduce ops}}
module {
  shard.grid @grid(shape = 1x2)
  func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
    %a = shard.all_reduce %x on @grid grid_axes = [1] : tensor<4xf32> -> tensor<4xf32>
    return %a : tensor<4xf32>
  }
}

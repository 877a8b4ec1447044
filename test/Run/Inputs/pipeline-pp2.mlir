// Two-chunk model (chunk 0: x = E[tokens]; chunk 1: logits = x·W) with mean
// cross-entropy and SGD as a 1F1B pipeline: pp=2 stages, 2 micro-batches of
// 2 sequences (global batch 4 x seq 8, vocabulary 16). The same step as
// pipeline-serial.mlir.
module {
  tsrt.pipeline_schedule {kind = "1f1b", stages = 2 : i64,
      virtual_stages = 1 : i64, micro_batches = 2 : i64,
      forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1],
      apply = [@apply_0, @apply_1],
      actions = ["F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"]}

  func.func @forward_0(%E: tensor<16x16xf32> {tsrt.arg = 0 : i64},
                       %tok: tensor<2x8xi64> {tsrt.arg = 2 : i64}) {
    %x3 = tsrt.kernel "gather"(%E, %tok) {attrs = {}} : (tensor<16x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
    %x = tsrt.kernel "reshape"(%x3) {attrs = {}} : (tensor<2x8x16xf32>) -> tensor<16x16xf32>
    tsrt.send %x to chunk 1 channel 0 : tensor<16x16xf32>
    return
  }

  func.func @forward_1(%W: tensor<16x16xf32> {tsrt.arg = 1 : i64},
                       %lab: tensor<2x8xi64> {tsrt.arg = 3 : i64})
      -> (tensor<16x16xf32> {tsrt.saved = 0 : i64},
          tensor<16x16xf32> {tsrt.saved = 1 : i64},
          tensor<f32> {tsrt.acc = 0 : i64}) {
    %x = tsrt.recv from chunk 0 channel 0 : tensor<16x16xf32>
    %logits = tsrt.kernel "matmul"(%x, %W) {attrs = {}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<2x8xi64>) -> tensor<16xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {}} : (tensor<16x16xf32>, tensor<16xi64>) -> tensor<f32>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %loss = tsrt.kernel "mul"(%ce, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %x, %logits, %loss : tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>
  }

  func.func @backward_1(%x: tensor<16x16xf32> {tsrt.saved = 0 : i64},
                        %logits: tensor<16x16xf32> {tsrt.saved = 1 : i64},
                        %W: tensor<16x16xf32> {tsrt.arg = 1 : i64},
                        %lab: tensor<2x8xi64> {tsrt.arg = 3 : i64})
      -> (tensor<16x16xf32> {tsrt.acc = 1 : i64}) {
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<2x8xi64>) -> tensor<16xi64>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %dlogits = tsrt.kernel "cross_entropy_grad"(%logits, %l, %inv) {attrs = {}} : (tensor<16x16xf32>, tensor<16xi64>, tensor<f32>) -> tensor<16x16xf32>
    %dW = tsrt.kernel "matmul"(%x, %dlogits) {attrs = {transpose_lhs = true}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    %dx = tsrt.kernel "matmul"(%dlogits, %W) {attrs = {transpose_rhs = true}} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    tsrt.send %dx to chunk 0 channel 1 : tensor<16x16xf32>
    return %dW : tensor<16x16xf32>
  }

  func.func @backward_0(%tok: tensor<2x8xi64> {tsrt.arg = 2 : i64})
      -> (tensor<16x16xf32> {tsrt.acc = 2 : i64}) {
    %dx = tsrt.recv from chunk 1 channel 1 : tensor<16x16xf32>
    %dx3 = tsrt.kernel "reshape"(%dx) {attrs = {}} : (tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %dE = tsrt.kernel "gather_grad"(%tok, %dx3) {attrs = {}} : (tensor<2x8xi64>, tensor<2x8x16xf32>) -> tensor<16x16xf32>
    return %dE : tensor<16x16xf32>
  }

  func.func @apply_0(%E: tensor<16x16xf32> {tsrt.arg = 0 : i64},
                     %dE: tensor<16x16xf32> {tsrt.acc = 2 : i64}, %hlr: tensor<f32> {tsrt.arg = 4 : i64})
      -> (tensor<16x16xf32> {tsrt.result = 1 : i64}) {
    %g = tsrt.all_reduce %dE {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<16x16xf32> -> tensor<16x16xf32>
    %E1 = tsrt.kernel "sgd_update"(%E, %g, %hlr) {attrs = {weight_decay = 0.000000e+00 : f32}} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
    return %E1 : tensor<16x16xf32>
  }

  func.func @apply_1(%W: tensor<16x16xf32> {tsrt.arg = 1 : i64},
                     %dW: tensor<16x16xf32> {tsrt.acc = 1 : i64},
                     %lossp: tensor<f32> {tsrt.acc = 0 : i64}, %hlr: tensor<f32> {tsrt.arg = 4 : i64})
      -> (tensor<f32> {tsrt.result = 0 : i64},
          tensor<16x16xf32> {tsrt.result = 2 : i64}) {
    %g = tsrt.all_reduce %dW {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<16x16xf32> -> tensor<16x16xf32>
    %loss = tsrt.all_reduce %lossp {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<f32> -> tensor<f32>
    %W1 = tsrt.kernel "sgd_update"(%W, %g, %hlr) {attrs = {weight_decay = 0.000000e+00 : f32}} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
    return %loss, %W1 : tensor<f32>, tensor<16x16xf32>
  }
}

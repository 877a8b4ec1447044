// The bigram model of bigram-dp1.mlir on one rank, issuing every kind of
// collective over its 1-rank grid axis (each an identity there): the
// vocab-parallel lookup, cross-entropy and their gradients (grid_axes),
// all_gather, reduce_scatter, all_slice, all_to_all, the loss all_reduce
// and the gradient's all_reduce_start / wait. Same losses and weights as
// bigram-dp1.mlir. It runs the device collectives of --backend cuda
// --collectives nccl on a single rank (e2e.cuda.nccl.serial).
module attributes {tsrt.grid_axes = ["dp"], tsrt.grid_shape = array<i64: 1>} {
  func.func @train_step(%w: tensor<16x16xf32>, %tok: tensor<4x8xi64>, %lab: tensor<4x8xi64>, %hlr: tensor<f32>)
      -> (tensor<f32>, tensor<16x16xf32>) {
    %x0 = tsrt.kernel "gather"(%w, %tok) {attrs = {grid_axes = array<i16: 0>}} : (tensor<16x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
    %x1 = tsrt.all_gather %x0 {grid_axes = array<i16: 0>, dim = 1 : i64} : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
    %x2 = tsrt.reduce_scatter %x1 {grid_axes = array<i16: 0>, dim = 2 : i64} : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
    %x3 = tsrt.all_slice %x2 {grid_axes = array<i16: 0>, dim = 0 : i64} : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
    %x = tsrt.all_to_all %x3 {grid_axes = array<i16: 0>, split_dim = 1 : i64, concat_dim = 2 : i64} : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
    %logits = tsrt.kernel "reshape"(%x) {attrs = {}} : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<4x8xi64>) -> tensor<32xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {grid_axes = array<i16: 0>}} : (tensor<32x16xf32>, tensor<32xi64>) -> tensor<f32>
    %sum = tsrt.all_reduce %ce {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<f32> -> tensor<f32>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %loss = tsrt.kernel "mul"(%sum, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %dlogits = tsrt.kernel "cross_entropy_grad"(%logits, %l, %inv) {attrs = {grid_axes = array<i16: 0>}} : (tensor<32x16xf32>, tensor<32xi64>, tensor<f32>) -> tensor<32x16xf32>
    %dx = tsrt.kernel "reshape"(%dlogits) {attrs = {}} : (tensor<32x16xf32>) -> tensor<4x8x16xf32>
    %dwp = tsrt.kernel "gather_grad"(%tok, %dx) {attrs = {grid_axes = array<i16: 0>}} : (tensor<4x8xi64>, tensor<4x8x16xf32>) -> tensor<16x16xf32>
    %pending = tsrt.all_reduce_start %dwp {grid_axes = array<i16: 0>} : tensor<16x16xf32> -> tensor<16x16xf32>
    %dw = tsrt.wait %pending, %dwp : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
    %w1 = tsrt.kernel "sgd_update"(%w, %dw, %hlr) {attrs = {weight_decay = 0.000000e+00 : f32}} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
    return %loss, %w1 : tensor<f32>, tensor<16x16xf32>
  }
}

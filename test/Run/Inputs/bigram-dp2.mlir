// The bigram model of bigram-dp1.mlir, data parallel over grid axis 0 (dp=2):
// each rank takes 2 of the 4 samples; the loss sum and the gradient are
// all-reduced over dp.
module attributes {tsrt.grid_axes = ["dp"], tsrt.grid_shape = array<i64: 2>} {
  func.func @train_step(%w: tensor<16x16xf32>, %tok: tensor<2x8xi64>, %lab: tensor<2x8xi64>, %hlr: tensor<f32>)
      -> (tensor<f32>, tensor<16x16xf32>) {
    %x = tsrt.kernel "gather"(%w, %tok) {attrs = {}} : (tensor<16x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
    %logits = tsrt.kernel "reshape"(%x) {attrs = {}} : (tensor<2x8x16xf32>) -> tensor<16x16xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<2x8xi64>) -> tensor<16xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {}} : (tensor<16x16xf32>, tensor<16xi64>) -> tensor<f32>
    %sum = tsrt.all_reduce %ce {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<f32> -> tensor<f32>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %loss = tsrt.kernel "mul"(%sum, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %dlogits = tsrt.kernel "cross_entropy_grad"(%logits, %l, %inv) {attrs = {}} : (tensor<16x16xf32>, tensor<16xi64>, tensor<f32>) -> tensor<16x16xf32>
    %dx = tsrt.kernel "reshape"(%dlogits) {attrs = {}} : (tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %dwp = tsrt.kernel "gather_grad"(%tok, %dx) {attrs = {}} : (tensor<2x8xi64>, tensor<2x8x16xf32>) -> tensor<16x16xf32>
    %dw = tsrt.all_reduce %dwp {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<16x16xf32> -> tensor<16x16xf32>
    %w1 = tsrt.kernel "sgd_update"(%w, %dw, %hlr) {attrs = {weight_decay = 0.000000e+00 : f32}} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
    return %loss, %w1 : tensor<f32>, tensor<16x16xf32>
  }
}

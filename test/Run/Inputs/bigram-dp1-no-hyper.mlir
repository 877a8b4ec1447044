// A plan compiled before learning rates became runtime inputs: no "hyper"
// argument "lr" (this one only evaluates the bigram model's loss).
module attributes {tsrt.grid_axes = ["dp"], tsrt.grid_shape = array<i64: 1>} {
  func.func @train_step(%w: tensor<16x16xf32>, %tok: tensor<4x8xi64>, %lab: tensor<4x8xi64>)
      -> tensor<f32> {
    %x = tsrt.kernel "gather"(%w, %tok) {attrs = {}} : (tensor<16x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
    %logits = tsrt.kernel "reshape"(%x) {attrs = {}} : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<4x8xi64>) -> tensor<32xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {}} : (tensor<32x16xf32>, tensor<32xi64>) -> tensor<f32>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %loss = tsrt.kernel "mul"(%ce, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

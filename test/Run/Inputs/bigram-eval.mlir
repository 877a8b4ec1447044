// bigram-dp1.mlir with the forward-only @eval_step that tsr-build-eval-step
// derives from it (manifest "eval": arguments [0, 1, 2], result 0).
module attributes {tsrt.grid_axes = ["dp"], tsrt.grid_shape = array<i64: 1>} {
  func.func @train_step(%w: tensor<16x16xf32>, %tok: tensor<4x8xi64>, %lab: tensor<4x8xi64>, %hlr: tensor<f32>)
      -> (tensor<f32>, tensor<16x16xf32>) {
    %x = tsrt.kernel "gather"(%w, %tok) {attrs = {}} : (tensor<16x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
    %logits = tsrt.kernel "reshape"(%x) {attrs = {}} : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<4x8xi64>) -> tensor<32xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {}} : (tensor<32x16xf32>, tensor<32xi64>) -> tensor<f32>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %loss = tsrt.kernel "mul"(%ce, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %dlogits = tsrt.kernel "cross_entropy_grad"(%logits, %l, %inv) {attrs = {}} : (tensor<32x16xf32>, tensor<32xi64>, tensor<f32>) -> tensor<32x16xf32>
    %dx = tsrt.kernel "reshape"(%dlogits) {attrs = {}} : (tensor<32x16xf32>) -> tensor<4x8x16xf32>
    %dw = tsrt.kernel "gather_grad"(%tok, %dx) {attrs = {}} : (tensor<4x8xi64>, tensor<4x8x16xf32>) -> tensor<16x16xf32>
    %w1 = tsrt.kernel "sgd_update"(%w, %dw, %hlr) {attrs = {weight_decay = 0.000000e+00 : f32}} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
    return %loss, %w1 : tensor<f32>, tensor<16x16xf32>
  }
  func.func @eval_step(%w: tensor<16x16xf32>, %tok: tensor<4x8xi64>, %lab: tensor<4x8xi64>)
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

// The step of pipeline-pp2.mlir on one rank, the whole batch at once.
module {
  func.func @train_step(%E: tensor<16x16xf32>, %W: tensor<16x16xf32>,
                        %tok: tensor<4x8xi64>, %lab: tensor<4x8xi64>, %hlr: tensor<f32>)
      -> (tensor<f32>, tensor<16x16xf32>, tensor<16x16xf32>) {
    %x3 = tsrt.kernel "gather"(%E, %tok) {attrs = {}} : (tensor<16x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
    %x = tsrt.kernel "reshape"(%x3) {attrs = {}} : (tensor<4x8x16xf32>) -> tensor<32x16xf32>
    %logits = tsrt.kernel "matmul"(%x, %W) {attrs = {}} : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<4x8xi64>) -> tensor<32xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {}} : (tensor<32x16xf32>, tensor<32xi64>) -> tensor<f32>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %loss = tsrt.kernel "mul"(%ce, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %dlogits = tsrt.kernel "cross_entropy_grad"(%logits, %l, %inv) {attrs = {}} : (tensor<32x16xf32>, tensor<32xi64>, tensor<f32>) -> tensor<32x16xf32>
    %dW = tsrt.kernel "matmul"(%x, %dlogits) {attrs = {transpose_lhs = true}} : (tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<16x16xf32>
    %dx = tsrt.kernel "matmul"(%dlogits, %W) {attrs = {transpose_rhs = true}} : (tensor<32x16xf32>, tensor<16x16xf32>) -> tensor<32x16xf32>
    %dx3 = tsrt.kernel "reshape"(%dx) {attrs = {}} : (tensor<32x16xf32>) -> tensor<4x8x16xf32>
    %dE = tsrt.kernel "gather_grad"(%tok, %dx3) {attrs = {}} : (tensor<4x8xi64>, tensor<4x8x16xf32>) -> tensor<16x16xf32>
    %E1 = tsrt.kernel "sgd_update"(%E, %dE, %hlr) {attrs = {weight_decay = 0.000000e+00 : f32}} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
    %W1 = tsrt.kernel "sgd_update"(%W, %dW, %hlr) {attrs = {weight_decay = 0.000000e+00 : f32}} : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xf32>
    return %loss, %E1, %W1 : tensor<f32>, tensor<16x16xf32>, tensor<16x16xf32>
  }
}

// Embedding + MLP + LM head; forward, backward and SGD. Used by the sharding tests.
func.func @train_step(
    %wte: tensor<64x16xf32> {tsr.role = "param", tsr.name = "tok_emb.weight"},
    %w1: tensor<32x16xf32> {tsr.role = "param", tsr.name = "fc1.weight"},
    %b1: tensor<32xf32> {tsr.role = "param", tsr.name = "fc1.bias"},
    %w2: tensor<16x32xf32> {tsr.role = "param", tsr.name = "fc2.weight"},
    %b2: tensor<16xf32> {tsr.role = "param", tsr.name = "fc2.bias"},
    %wh: tensor<64x16xf32> {tsr.role = "param", tsr.name = "head.weight"},
    %tokens: tensor<4x8xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<4x8xi64> {tsr.role = "labels", tsr.name = "labels"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
    -> (tensor<f32> {tsr.role = "loss", tsr.name = "loss"},
        tensor<64x16xf32> {tsr.role = "param", tsr.name = "tok_emb.weight"},
        tensor<32x16xf32> {tsr.role = "param", tsr.name = "fc1.weight"},
        tensor<32xf32> {tsr.role = "param", tsr.name = "fc1.bias"},
        tensor<16x32xf32> {tsr.role = "param", tsr.name = "fc2.weight"},
        tensor<16xf32> {tsr.role = "param", tsr.name = "fc2.bias"},
        tensor<64x16xf32> {tsr.role = "param", tsr.name = "head.weight"}) {
  %e = tsr.gather %wte, %tokens : tensor<64x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
  %h = tsr.matmul %e, %w1 {transpose_rhs = true} : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  %b1b = tsr.broadcast %b1 : tensor<32xf32> -> tensor<4x8x32xf32>
  %h1 = tsr.add %h, %b1b : tensor<4x8x32xf32>
  %g = tsr.gelu %h1 : tensor<4x8x32xf32>
  %y = tsr.matmul %g, %w2 {transpose_rhs = true} : tensor<4x8x32xf32>, tensor<16x32xf32> -> tensor<4x8x16xf32>
  %b2b = tsr.broadcast %b2 : tensor<16xf32> -> tensor<4x8x16xf32>
  %y1 = tsr.add %y, %b2b : tensor<4x8x16xf32>
  %r = tsr.add %y1, %e : tensor<4x8x16xf32>
  %r2 = tsr.reshape %r : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %logits = tsr.matmul %r2, %wh {transpose_rhs = true} : tensor<32x16xf32>, tensor<64x16xf32> -> tensor<32x64xf32>
  %lab = tsr.reshape %labels : tensor<4x8xi64> -> tensor<32xi64>
  %ce = tsr.cross_entropy %logits, %lab : tensor<32x64xf32>, tensor<32xi64> -> tensor<f32>
  %scale = tsr.constant dense<0.03125> : tensor<f32>
  %loss = tsr.mul %ce, %scale : tensor<f32>
  %dlog = tsr.cross_entropy_grad %logits, %lab, %scale : tensor<32x64xf32>, tensor<32xi64>, tensor<f32>
  %dr2 = tsr.matmul %dlog, %wh : tensor<32x64xf32>, tensor<64x16xf32> -> tensor<32x16xf32>
  %dwh = tsr.matmul %dlog, %r2 {transpose_lhs = true} : tensor<32x64xf32>, tensor<32x16xf32> -> tensor<64x16xf32>
  %dr = tsr.reshape %dr2 : tensor<32x16xf32> -> tensor<4x8x16xf32>
  %db2 = tsr.reduce_sum %dr {axes = array<i64: 0, 1>} : tensor<4x8x16xf32> -> tensor<16xf32>
  %dg = tsr.matmul %dr, %w2 : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  %g2 = tsr.reshape %g : tensor<4x8x32xf32> -> tensor<32x32xf32>
  %dw2 = tsr.matmul %dr2, %g2 {transpose_lhs = true} : tensor<32x16xf32>, tensor<32x32xf32> -> tensor<16x32xf32>
  %dh1 = tsr.gelu_grad %h1, %dg : tensor<4x8x32xf32>
  %db1 = tsr.reduce_sum %dh1 {axes = array<i64: 0, 1>} : tensor<4x8x32xf32> -> tensor<32xf32>
  %de1 = tsr.matmul %dh1, %w1 : tensor<4x8x32xf32>, tensor<32x16xf32> -> tensor<4x8x16xf32>
  %dh12 = tsr.reshape %dh1 : tensor<4x8x32xf32> -> tensor<32x32xf32>
  %e2 = tsr.reshape %e : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %dw1 = tsr.matmul %dh12, %e2 {transpose_lhs = true} : tensor<32x32xf32>, tensor<32x16xf32> -> tensor<32x16xf32>
  %de = tsr.add %de1, %dr : tensor<4x8x16xf32>
  %dwte = tsr.gather_grad %tokens, %de : tensor<4x8xi64>, tensor<4x8x16xf32> -> tensor<64x16xf32>
  %nwte = tsr.sgd_update %wte, %dwte, %hlr {weight_decay = 0.0 : f32} : tensor<64x16xf32>
  %nw1 = tsr.sgd_update %w1, %dw1, %hlr {weight_decay = 0.0 : f32} : tensor<32x16xf32>
  %nb1 = tsr.sgd_update %b1, %db1, %hlr {weight_decay = 0.0 : f32} : tensor<32xf32>
  %nw2 = tsr.sgd_update %w2, %dw2, %hlr {weight_decay = 0.0 : f32} : tensor<16x32xf32>
  %nb2 = tsr.sgd_update %b2, %db2, %hlr {weight_decay = 0.0 : f32} : tensor<16xf32>
  %nwh = tsr.sgd_update %wh, %dwh, %hlr {weight_decay = 0.0 : f32} : tensor<64x16xf32>
  return %loss, %nwte, %nw1, %nb1, %nw2, %nb2, %nwh : tensor<f32>, tensor<64x16xf32>, tensor<32x16xf32>, tensor<32xf32>, tensor<16x32xf32>, tensor<16xf32>, tensor<64x16xf32>
}

// BERT's MLM head: a dense + GELU transform, then the decoder, whose weight
// is the token embedding's (tied, read transposed).
func.func @train_step(
    %emb: tensor<64x16xf32> {tsr.role = "param", tsr.name = "word_embeddings.weight"},
    %wd: tensor<16x16xf32> {tsr.role = "param", tsr.name = "transform.dense.weight"},
    %tokens: tensor<4x8xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<4x8xi64> {tsr.role = "labels", tsr.name = "labels"}) -> tensor<f32> {
  %e = tsr.gather %emb, %tokens : tensor<64x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
  %h = tsr.matmul %e, %wd {transpose_rhs = true} : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
  %g = tsr.gelu %h : tensor<4x8x16xf32>
  %y = tsr.matmul %g, %emb {transpose_rhs = true} : tensor<4x8x16xf32>, tensor<64x16xf32> -> tensor<4x8x64xf32>
  %l = tsr.reshape %y : tensor<4x8x64xf32> -> tensor<32x64xf32>
  %lab = tsr.reshape %labels : tensor<4x8xi64> -> tensor<32xi64>
  %loss = tsr.cross_entropy %l, %lab : tensor<32x64xf32>, tensor<32xi64> -> tensor<f32>
  return %loss : tensor<f32>
}

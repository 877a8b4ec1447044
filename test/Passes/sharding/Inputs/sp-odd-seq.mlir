// Tokens [2, 3]: a sequence of 3 that tp=2 cannot split.
func.func @train_step(
    %table: tensor<8x4xf32> {tsr.role = "param", tsr.name = "emb"},
    %tokens: tensor<2x3xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<2x3xi64> {tsr.role = "labels", tsr.name = "labels"}) -> tensor<2x3x4xf32> {
  %e = tsr.gather %table, %tokens : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  return %e : tensor<2x3x4xf32>
}

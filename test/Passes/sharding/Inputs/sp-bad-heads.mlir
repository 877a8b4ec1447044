// An attention whose leading dim (5) is not a multiple of the batch (2):
// Ulysses cannot tell its heads.
func.func @train_step(
    %q: tensor<5x4x2xf32> {tsr.role = "frozen", tsr.name = "q"},
    %tokens: tensor<2x4xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<2x4xi64> {tsr.role = "labels", tsr.name = "labels"}) -> tensor<5x4x2xf32> {
  %o, %lse = tsr.attention %q, %q, %q {scale = 1.0 : f32, causal = true} : tensor<5x4x2xf32>, tensor<5x4x2xf32>, tensor<5x4x2xf32> -> tensor<5x4x2xf32>, tensor<5x4xf32>
  return %o : tensor<5x4x2xf32>
}

// Embedding + a gated MLP (SwiGLU: down(silu(gate(x)) * up(x)), LLaMA's) +
// LM head; forward only, enough for tsr-sharding-annotate.
func.func @train_step(
    %wte: tensor<64x16xf32> {tsr.role = "param", tsr.name = "embed.weight"},
    %wg: tensor<32x16xf32> {tsr.role = "param", tsr.name = "gate_proj.weight"},
    %wu: tensor<32x16xf32> {tsr.role = "param", tsr.name = "up_proj.weight"},
    %wd: tensor<16x32xf32> {tsr.role = "param", tsr.name = "down_proj.weight"},
    %wh: tensor<64x16xf32> {tsr.role = "param", tsr.name = "lm_head.weight"},
    %tokens: tensor<4x8xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<4x8xi64> {tsr.role = "labels", tsr.name = "labels"})
    -> (tensor<f32> {tsr.role = "loss", tsr.name = "loss"}) {
  %e = tsr.gather %wte, %tokens : tensor<64x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
  %g = tsr.matmul %e, %wg {transpose_rhs = true} : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  %u = tsr.matmul %e, %wu {transpose_rhs = true} : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  %a = tsr.silu %g : tensor<4x8x32xf32>
  %h = tsr.mul %a, %u : tensor<4x8x32xf32>
  %y = tsr.matmul %h, %wd {transpose_rhs = true} : tensor<4x8x32xf32>, tensor<16x32xf32> -> tensor<4x8x16xf32>
  %r = tsr.add %y, %e : tensor<4x8x16xf32>
  %r2 = tsr.reshape %r : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %logits = tsr.matmul %r2, %wh {transpose_rhs = true} : tensor<32x16xf32>, tensor<64x16xf32> -> tensor<32x64xf32>
  %lab = tsr.reshape %labels : tensor<4x8xi64> -> tensor<32xi64>
  %ce = tsr.cross_entropy %logits, %lab : tensor<32x64xf32>, tensor<32xi64> -> tensor<f32>
  return %ce : tensor<f32>
}

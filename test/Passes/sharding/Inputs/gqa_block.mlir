// A grouped-query attention block as Hugging Face writes it (LLaMA): separate
// q/k/v projections, 4 query heads over 2 key/value heads (the raised
// tsr.attention reads the un-repeated K/V), o_proj, then an MLP.
func.func @train_step(
    %x: tensor<2x4x16xf32> {tsr.role = "frozen", tsr.name = "x"},
    %wq: tensor<16x16xf32> {tsr.role = "param", tsr.name = "q_proj.weight"},
    %wk: tensor<8x16xf32> {tsr.role = "param", tsr.name = "k_proj.weight"},
    %wv: tensor<8x16xf32> {tsr.role = "param", tsr.name = "v_proj.weight"},
    %wo: tensor<16x16xf32> {tsr.role = "param", tsr.name = "o_proj.weight"},
    %w1: tensor<32x16xf32> {tsr.role = "param", tsr.name = "fc1.weight"},
    %w2: tensor<16x32xf32> {tsr.role = "param", tsr.name = "fc2.weight"},
    %labels: tensor<2x4xi64> {tsr.role = "labels", tsr.name = "labels"}) -> tensor<2x4x16xf32> {
  %q0 = tsr.matmul %x, %wq {transpose_rhs = true} : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %k0 = tsr.matmul %x, %wk {transpose_rhs = true} : tensor<2x4x16xf32>, tensor<8x16xf32> -> tensor<2x4x8xf32>
  %v0 = tsr.matmul %x, %wv {transpose_rhs = true} : tensor<2x4x16xf32>, tensor<8x16xf32> -> tensor<2x4x8xf32>
  %q1 = tsr.reshape %q0 : tensor<2x4x16xf32> -> tensor<2x4x4x4xf32>
  %k1 = tsr.reshape %k0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v1 = tsr.reshape %v0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = tsr.transpose %q1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x4x4xf32> -> tensor<2x4x4x4xf32>
  %k = tsr.transpose %k1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %v = tsr.transpose %v1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.5 : f32} : tensor<2x4x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x4x4x4xf32>, tensor<2x4x4xf32>
  %o1 = tsr.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x4x4xf32> -> tensor<2x4x4x4xf32>
  %o2 = tsr.reshape %o1 : tensor<2x4x4x4xf32> -> tensor<2x4x16xf32>
  %a = tsr.matmul %o2, %wo {transpose_rhs = true} : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
  %r = tsr.add %x, %a : tensor<2x4x16xf32>
  %h = tsr.matmul %r, %w1 {transpose_rhs = true} : tensor<2x4x16xf32>, tensor<32x16xf32> -> tensor<2x4x32xf32>
  %g = tsr.gelu %h : tensor<2x4x32xf32>
  %m = tsr.matmul %g, %w2 {transpose_rhs = true} : tensor<2x4x32xf32>, tensor<16x32xf32> -> tensor<2x4x16xf32>
  %y = tsr.add %r, %m : tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// RUN: tessera-opt --tsr-sharding-annotate="dp=2 tp=3" %s -split-input-file -verify-diagnostics
// RUN: not tessera-opt --tsr-sharding-annotate="dp=3 tp=1" %S/Inputs/mlp.mlir 2>&1 | FileCheck %s --check-prefix=DP

// tp=3 does not divide the 4 heads of a fused QKV projection ([S,B,D] ->
// [S, B*H, Dh] with H = 4): not an error for the sharding search, which
// splits the projection's columns and reshards before the heads (the input
// `x` is frozen here, so the projection is not a block weight it must
// split). Grouped-query attention whose K/V heads tp does not divide is
// not an error either (the search keeps K/V whole when that saves
// collectives).
func.func @train_step(
    %win: tensor<36x12xf32> {tsr.role = "param", tsr.name = "attn.in_proj_weight"},
    %x: tensor<4x2x12xf32> {tsr.role = "frozen", tsr.name = "x"},
    %labels: tensor<2x4xi64> {tsr.role = "labels", tsr.name = "labels"}) -> tensor<4x8x3xf32> {
  %qkv = tsr.matmul %x, %win {transpose_rhs = true} : tensor<4x2x12xf32>, tensor<36x12xf32> -> tensor<4x2x36xf32>
  %q = tsr.slice %qkv {start_indices = array<i64: 0, 0, 0>, limit_indices = array<i64: 4, 2, 12>, strides = array<i64: 1, 1, 1>} : tensor<4x2x36xf32> -> tensor<4x2x12xf32>
  %k = tsr.slice %qkv {start_indices = array<i64: 0, 0, 12>, limit_indices = array<i64: 4, 2, 24>, strides = array<i64: 1, 1, 1>} : tensor<4x2x36xf32> -> tensor<4x2x12xf32>
  %q2 = tsr.reshape %q : tensor<4x2x12xf32> -> tensor<4x8x3xf32>
  return %q2 : tensor<4x8x3xf32>
}

// -----

// tp=3 divides no dimension of the MLP's second weight [16, 32] (the first
// reads the frozen `x`, so it is not a block weight the search must split).
func.func @train_step(
    %w1: tensor<32x16xf32> {tsr.role = "param", tsr.name = "fc1.weight"},
    %w2: tensor<16x32xf32> {tsr.role = "param", tsr.name = "fc2.weight"},
    %x: tensor<2x4x16xf32> {tsr.role = "frozen", tsr.name = "x"}) -> tensor<2x4x16xf32> {
  %h = tsr.matmul %x, %w1 {transpose_rhs = true} : tensor<2x4x16xf32>, tensor<32x16xf32> -> tensor<2x4x32xf32>
  %g = tsr.relu %h : tensor<2x4x32xf32>
  // expected-error @+1 {{tp=3 does not divide any dimension of parameter 'fc2.weight' [16, 32] so that it can be split}}
  %y = tsr.matmul %g, %w2 {transpose_rhs = true} : tensor<2x4x32xf32>, tensor<16x32xf32> -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// dp=2 does not divide the batch of 3.
// expected-error @+1 {{dp=2 does not divide the batch size 3 of 'tokens' [3, 4]}}
func.func @train_step(
    %tokens: tensor<3x4xi64> {tsr.role = "tokens", tsr.name = "tokens"}) -> tensor<3x4xi64> {
  return %tokens : tensor<3x4xi64>
}

// DP: dp=3 does not divide the batch size 4 of 'tokens' [4, 8]

// -----

// Vocab parallelism: tp=3 does not divide the 16-row embedding table.
func.func @train_step(
    %wte: tensor<16x8xf32> {tsr.role = "param", tsr.name = "tok_emb.weight"},
    %tokens: tensor<2x4xi64> {tsr.role = "tokens", tsr.name = "tokens"}) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{tp=3 does not divide the vocabulary size 16 of embedding table 'tok_emb.weight' [16, 8] (use --vocab-parallel off)}}
  %e = tsr.gather %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}

// -----

// Vocab parallelism: tp=3 does not divide the LM head's 16 vocabulary
// columns (the embedding table is frozen, so only the head is split).
func.func @train_step(
    %wte: tensor<16x12xf32> {tsr.role = "frozen", tsr.name = "tok_emb.weight"},
    %wh: tensor<16x12xf32> {tsr.role = "param", tsr.name = "head.weight"},
    %tokens: tensor<2x4xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<8xi64> {tsr.role = "labels", tsr.name = "labels"}) -> tensor<f32> {
  %e = tsr.gather %wte, %tokens : tensor<16x12xf32>, tensor<2x4xi64> -> tensor<2x4x12xf32>
  %x = tsr.reshape %e : tensor<2x4x12xf32> -> tensor<8x12xf32>
  // expected-error @+1 {{tp=3 does not divide the vocabulary size 16 of LM head 'head.weight' [16, 12] (use --vocab-parallel off)}}
  %logits = tsr.matmul %x, %wh {transpose_rhs = true} : tensor<8x12xf32>, tensor<16x12xf32> -> tensor<8x16xf32>
  %loss = tsr.cross_entropy %logits, %labels : tensor<8x16xf32>, tensor<8xi64> -> tensor<f32>
  return %loss : tensor<f32>
}

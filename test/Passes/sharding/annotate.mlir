// RUN: tessera-opt --tsr-sharding-annotate="dp=2 tp=2" %S/Inputs/mha_block.mlir | FileCheck %s --check-prefix=MHA
// RUN: tessera-opt --tsr-sharding-annotate="dp=2 tp=2" %S/Inputs/mlp.mlir | FileCheck %s --check-prefix=MLP
// RUN: tessera-opt --tsr-sharding-annotate="dp=2 tp=2 vocab-parallel=false" %S/Inputs/mha_block.mlir | FileCheck %s --check-prefix=OFF
// RUN: tessera-opt --tsr-sharding-annotate="dp=2 tp=2 vocab-parallel=false" %S/Inputs/mlp.mlir | FileCheck %s --check-prefix=OFF
// RUN: tessera-opt --tsr-sharding-annotate %S/Inputs/mlp.mlir | FileCheck %s --check-prefix=SERIAL
// RUN: tessera-opt --tsr-sharding-annotate="dp=2 tp=2" %s | FileCheck %s
// RUN: tessera-opt --tsr-sharding-annotate="dp=2 tp=2" %S/Inputs/gqa_block.mlir | FileCheck %s --check-prefix=GQA
// RUN: tessera-opt --tsr-sharding-annotate="dp=1 tp=2" %S/Inputs/tied_mlm_head.mlir | FileCheck %s --check-prefix=TIED
// RUN: tessera-opt --tsr-sharding-annotate="dp=1 tp=2" %S/Inputs/swiglu.mlir | FileCheck %s --check-prefix=GATED

// A gated MLP (SwiGLU, GeGLU): both linear layers that feed the gating
// product are column-split and the down projection row-split, as in
// Megatron-LM, so silu(gate) * up stays local. (Only the gate was split
// before, leaving up_proj replicated with an all-gathered gradient.)
// GATED-LABEL: func.func @train_step
// GATED-SAME: tsr.name = "gate_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// GATED-SAME: tsr.name = "up_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// GATED-SAME: tsr.name = "down_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>

// An LM head tied to the token embedding (BERT's MLM decoder after a dense +
// GELU transform): the table is split over the vocabulary only. This input
// has no attention, so every layer counts as a block and the transform is a
// weight matrix the search splits (in a real BERT it follows the last block
// and stays whole: test/Passes/sharding/hf-*.test).
// TIED-LABEL: func.func @train_step
// TIED-SAME: tsr.name = "word_embeddings.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>, tsr.vocab_parallel}
// TIED-SAME: tsr.name = "transform.dense.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>}


// Separate Q, K, V projections of a grouped-query attention (4 query heads
// over 2 K/V heads): each column-split over tp (whole K/V heads per rank),
// o_proj row-split, and the MLP after it still paired column/row.
// GQA-LABEL: func.func @train_step
// GQA-SAME: tsr.name = "q_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// GQA-SAME: tsr.name = "k_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// GQA-SAME: tsr.name = "v_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// GQA-SAME: tsr.name = "o_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>
// GQA-SAME: tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// GQA-SAME: tsr.name = "fc2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>

// Transformer block: the fused QKV weight/bias are column-split by heads as
// 3 chunks each split over tp, out_proj row-split (bias replicated), the MLP
// column/row pair, the token embedding and the LM head split over the
// vocabulary (vocab parallelism, on by default), everything else
// replicated; the batch split over dp.
// MHA: module attributes {tsr.grid_axes = ["dp", "tp"]{{[,}]}}
// MHA: shard.grid @grid(shape = 2x2)
// MHA-LABEL: func.func @train_step
// MHA-SAME: tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>, tsr.vocab_parallel}
// MHA-SAME: tsr.name = "pos_emb", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], []]>
// MHA-SAME: tsr.name = "norm1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}]]>
// MHA-SAME: tsr.name = "self_attn.in_proj_weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1]}, []]>
// MHA-SAME: tsr.name = "self_attn.in_proj_bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1]}]>
// MHA-SAME: tsr.name = "self_attn.out_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>
// MHA-SAME: tsr.name = "self_attn.out_proj.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}]]>
// MHA-SAME: tsr.name = "norm2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}]]>
// MHA-SAME: tsr.name = "linear1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// MHA-SAME: tsr.name = "linear1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1]]>
// MHA-SAME: tsr.name = "linear2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>
// MHA-SAME: tsr.name = "linear2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}]]>
// MHA-SAME: tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>, tsr.vocab_parallel}
// MHA-SAME: tsr.name = "tokens", tsr.role = "tokens", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>
// MHA-SAME: tsr.name = "labels", tsr.role = "labels", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}0], []]>
// Results follow their arguments; the loss is replicated.
// MHA-SAME: tsr.name = "loss", tsr.role = "loss", tsr.sharding = #tsr.sharding<@grid, []>
// MHA-SAME: tsr.name = "self_attn.in_proj_weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1]}, []]>
// MHA-SAME: tsr.name = "self_attn.in_proj_bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 16 : [1]}]>
// MHA-SAME: tsr.name = "self_attn.out_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>

// MLP-LABEL: func.func @train_step
// MLP-SAME: tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>, tsr.vocab_parallel}
// MLP-SAME: tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>
// MLP-SAME: tsr.name = "fc1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1]]>
// MLP-SAME: tsr.name = "fc2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], [1]]>
// MLP-SAME: tsr.name = "fc2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}]]>
// MLP-SAME: tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>, tsr.vocab_parallel}

// --vocab-parallel off: the embedding and the LM head stay replicated.
// OFF-LABEL: func.func @train_step
// OFF-SAME: tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], []]>}
// OFF-SAME: tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], []]>}
// OFF-NOT: tsr.vocab_parallel

// Defaults dp=1 tp=1: a 1x1 grid and nothing split.
// SERIAL: shard.grid @grid(shape = 1x1)
// SERIAL-NOT: {{\[}}0]
// SERIAL-NOT: {{\[}}1]

// Optimizer state takes its parameter's sharding; `step` and frozen values
// are replicated; new parameters and states follow their arguments.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %arg0: tensor<64x16xf32> {tsr.name = "emb", tsr.role = "frozen", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}], []]>}
// CHECK-SAME: %arg1: tensor<32x16xf32> {tsr.init = dense<1.000000e+00> : tensor<32x16xf32>, tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>}
// CHECK-SAME: %arg3: tensor<32x16xf32> {tsr.name = "fc1.weight.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>}
// CHECK-SAME: %arg4: tensor<32x16xf32> {tsr.name = "fc1.weight.exp_avg_sq", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>}
// CHECK-SAME: %arg5: tensor<f32> {tsr.name = "step", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, []>}
// CHECK-SAME: -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss", tsr.sharding = #tsr.sharding<@grid, []>}
// CHECK-SAME: tensor<32x16xf32> {tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>}
// CHECK-SAME: tensor<32x16xf32> {tsr.name = "fc1.weight.exp_avg", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, {{\[\[}}1], []]>}
// CHECK-SAME: tensor<f32> {tsr.name = "step", tsr.role = "opt_state", tsr.sharding = #tsr.sharding<@grid, []>}
func.func @train_step(
    %emb: tensor<64x16xf32> {tsr.role = "frozen", tsr.name = "emb"},
    %w1: tensor<32x16xf32> {tsr.role = "param", tsr.name = "fc1.weight", tsr.init = dense<1.0> : tensor<32x16xf32>},
    %w2: tensor<16x32xf32> {tsr.role = "param", tsr.name = "fc2.weight"},
    %m1: tensor<32x16xf32> {tsr.role = "opt_state", tsr.name = "fc1.weight.exp_avg"},
    %v1: tensor<32x16xf32> {tsr.role = "opt_state", tsr.name = "fc1.weight.exp_avg_sq"},
    %step: tensor<f32> {tsr.role = "opt_state", tsr.name = "step"},
    %tokens: tensor<4x8xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<4x8xi64> {tsr.role = "labels", tsr.name = "labels"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
    -> (tensor<f32> {tsr.role = "loss", tsr.name = "loss"},
        tensor<32x16xf32> {tsr.role = "param", tsr.name = "fc1.weight"},
        tensor<32x16xf32> {tsr.role = "opt_state", tsr.name = "fc1.weight.exp_avg"},
        tensor<32x16xf32> {tsr.role = "opt_state", tsr.name = "fc1.weight.exp_avg_sq"},
        tensor<f32> {tsr.role = "opt_state", tsr.name = "step"}) {
  %e = tsr.gather %emb, %tokens : tensor<64x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
  %h = tsr.matmul %e, %w1 {transpose_rhs = true} : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  %g = tsr.relu %h : tensor<4x8x32xf32>
  %y = tsr.matmul %g, %w2 {transpose_rhs = true} : tensor<4x8x32xf32>, tensor<16x32xf32> -> tensor<4x8x16xf32>
  %l = tsr.reshape %y : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %lab = tsr.reshape %labels : tensor<4x8xi64> -> tensor<32xi64>
  %loss = tsr.cross_entropy %l, %lab : tensor<32x16xf32>, tensor<32xi64> -> tensor<f32>
  %dw1 = tsr.mul %w1, %w1 : tensor<32x16xf32>
  %p, %m, %v = tsr.adamw_update %w1, %dw1, %m1, %v1, %step, %hlr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<32x16xf32>, tensor<f32>
  return %loss, %p, %m, %v, %step : tensor<f32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<f32>
}

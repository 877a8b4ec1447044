// RUN: tessera-opt %s -split-input-file -verify-diagnostics

func.func @matmul_k_mismatch(%a: tensor<4x8xf32>, %b: tensor<7x16xf32>) {
  // expected-error @+1 {{matmul contracting dimensions differ: 8 vs 7}}
  %0 = tsr.matmul %a, %b : tensor<4x8xf32>, tensor<7x16xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @reshape_count(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{cannot reshape 32 elements into 30}}
  %0 = tsr.reshape %a : tensor<4x8xf32> -> tensor<5x6xf32>
  return
}

// -----

func.func @broadcast_bad(%a: tensor<3xf32>) {
  // expected-error @+1 {{input dimension 0 of size 3 cannot broadcast to 4}}
  %0 = tsr.broadcast %a : tensor<3xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @reduce_axes(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{axes must be sorted, distinct and in [0, 2)}}
  %0 = tsr.reduce_sum %a {axes = array<i64: 2>} : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @transpose_perm(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{permutation is not a permutation of [0, 2)}}
  %0 = tsr.transpose %a {permutation = array<i64: 0, 0>} : tensor<4x8xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @slice_oob(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{slice of dimension 1 is out of bounds [0, 8)}}
  %0 = tsr.slice %a {start_indices = array<i64: 0, 4>, limit_indices = array<i64: 4, 9>, strides = array<i64: 1, 1>} : tensor<4x8xf32> -> tensor<4x5xf32>
  return
}

// -----

func.func @layer_norm_scale(%x: tensor<4x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{scale shape must be input.shape[1:]}}
  %0 = tsr.layer_norm %x, %g, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @gelu_mode(%x: tensor<4xf32>) {
  // expected-error @+1 {{approximate must be "none" or "tanh", got "fast"}}
  %0 = tsr.gelu %x {approximate = "fast"} : tensor<4xf32>
  return
}

// -----

func.func @ce_shapes(%l: tensor<4x8xf32>, %y: tensor<5xi64>) {
  // expected-error @+1 {{expects logits [N, V] and labels [N]}}
  %0 = tsr.cross_entropy %l, %y : tensor<4x8xf32>, tensor<5xi64> -> tensor<f32>
  return
}

// -----

func.func @adamw_beta(%p: tensor<4xf32>, %t: tensor<f32>, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"}) {
  // expected-error @+1 {{betas must be in [0, 1)}}
  %0:3 = tsr.adamw_update %p, %p, %p, %p, %t, %hlr {beta1 = 1.5 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @sgd_negative_weight_decay(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be >= 0, got -1.000000e-01}}
  %0 = tsr.sgd_update %p, %p, %lr {weight_decay = -0.1 : f32} : tensor<4xf32>
  return
}

// -----

func.func @adamw_negative_weight_decay(%p: tensor<4xf32>, %t: tensor<f32>, %lr: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be >= 0}}
  %0:3 = tsr.adamw_update %p, %p, %p, %p, %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = -1.0 : f32} : tensor<4xf32>, tensor<f32>
  return
}

// -----

// The learning rate is an f32 0-D tensor (the "hyper" argument "lr").
func.func @sgd_lr_not_scalar(%p: tensor<4xf32>, %lr: tensor<4xf32>) {
  // expected-error @+1 {{operand #2 must be 0-D f32 tensor, but got 'tensor<4xf32>'}}
  %0 = "tsr.sgd_update"(%p, %p, %lr) {weight_decay = 0.0 : f32} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @sgd_lr_attribute(%p: tensor<4xf32>) {
  // expected-error @+1 {{expected 3 operands, but found 2}}
  %0 = "tsr.sgd_update"(%p, %p) {lr = 1.0e-03 : f32, weight_decay = 0.0 : f32} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @gather_grad_shape(%i: tensor<4xi64>, %g: tensor<4x3xf32>) {
  // expected-error @+1 {{does not match a gather}}
  %0 = tsr.gather_grad %i, %g : tensor<4xi64>, tensor<4x3xf32> -> tensor<10x5xf32>
  return
}

// -----

func.func @sharding_constraint_rank(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{sharding has 1 dimensions, the tensor 2}}
  %0 = tsr.sharding_constraint %x {sharding = #tsr.sharding<@grid, [[1]]>} : tensor<4x8xf32>
  return
}

// -----

func.func @attention_rank(%q: tensor<16x8xf32>) {
  // expected-error @+1 {{query must have rank >= 3}}
  %o, %l = tsr.attention %q, %q, %q {scale = 1.0 : f32} : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32> -> tensor<16x8xf32>, tensor<16xf32>
  return
}

// -----

func.func @sharding_constraint_partial(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{sharding must not be partial}}
  %0 = tsr.sharding_constraint %x {sharding = #tsr.sharding<@grid, [[1], []] partial = [0]>} : tensor<4x8xf32>
  return
}

// -----

func.func @attention_int(%q: tensor<2x4x8xi64>) {
  // expected-error @+1 {{query must have a float element type}}
  %o, %l = tsr.attention %q, %q, %q {scale = 1.0 : f32} : tensor<2x4x8xi64>, tensor<2x4x8xi64>, tensor<2x4x8xi64> -> tensor<2x4x8xi64>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_ranks(%q: tensor<2x4x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{query, key and value must have one rank}}
  %o, %l = tsr.attention %q, %k, %q {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_elem(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{query, key and value must have one element type}}
  %o, %l = tsr.attention %q, %k, %k {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_batch(%q: tensor<2x4x8xf32>, %k: tensor<3x4x8xf32>) {
  // expected-error @+1 {{must have the same leading (batch) dims}}
  %o, %l = tsr.attention %q, %k, %k {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<3x4x8xf32>, tensor<3x4x8xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_gqa_rank3(%q: tensor<8x4x8xf32>, %k: tensor<2x4x8xf32>) {
  // expected-error @+1 {{except the head dim (rank - 3) with rank >= 4}}
  %o, %l = tsr.attention %q, %k, %k {scale = 1.0 : f32} : tensor<8x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<8x4x8xf32>, tensor<8x4xf32>
  return
}

// -----

func.func @attention_gqa_batch(%q: tensor<2x8x4x8xf32>, %k: tensor<3x2x4x8xf32>) {
  // expected-error @+1 {{must have the same leading (batch) dims, except the head dim}}
  %o, %l = tsr.attention %q, %k, %k {scale = 1.0 : f32} : tensor<2x8x4x8xf32>, tensor<3x2x4x8xf32>, tensor<3x2x4x8xf32> -> tensor<2x8x4x8xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @attention_gqa_divide(%q: tensor<2x8x4x8xf32>, %k: tensor<2x3x4x8xf32>) {
  // expected-error @+1 {{grouped-query attention needs the key/value head count 3 to divide the query head count 8}}
  %o, %l = tsr.attention %q, %k, %k {scale = 1.0 : f32} : tensor<2x8x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32> -> tensor<2x8x4x8xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @attention_gqa_more_kv(%q: tensor<2x2x4x8xf32>, %k: tensor<2x4x4x8xf32>) {
  // expected-error @+1 {{key/value head count 4 to divide the query head count 2}}
  %o, %l = tsr.attention %q, %k, %k {scale = 1.0 : f32} : tensor<2x2x4x8xf32>, tensor<2x4x4x8xf32>, tensor<2x4x4x8xf32> -> tensor<2x2x4x8xf32>, tensor<2x2x4xf32>
  return
}

// -----

func.func @attention_gqa_kv_mismatch(%q: tensor<2x8x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x4x4x8xf32>) {
  // expected-error @+1 {{key and value must have the same leading dims}}
  %o, %l = tsr.attention %q, %k, %v {scale = 1.0 : f32} : tensor<2x8x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x4x4x8xf32> -> tensor<2x8x4x8xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @attention_grad_gqa_divide(%q: tensor<2x8x4x8xf32>, %k: tensor<2x3x4x8xf32>, %l: tensor<2x8x4xf32>) {
  // expected-error @+1 {{grouped-query attention needs the key/value head count 3 to divide the query head count 8}}
  %dq, %dk, %dv = tsr.attention_grad %q, %k, %k, %q, %l, %q {scale = 1.0 : f32} : tensor<2x8x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x8x4x8xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<2x4x8xf32>, %k: tensor<2x4x6xf32>) {
  // expected-error @+1 {{key head dim 6 does not match query head dim 8}}
  %o, %l = tsr.attention %q, %k, %k {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x6xf32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_value_len(%q: tensor<2x4x8xf32>, %v: tensor<2x5x8xf32>) {
  // expected-error @+1 {{value sequence length 5 does not match key sequence length 4}}
  %o, %l = tsr.attention %q, %q, %v {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x5x8xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_causal(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>) {
  // expected-error @+1 {{causal attention needs Sq == Sk, got 4 and 6}}
  %o, %l = tsr.attention %q, %k, %k {causal = true, scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_mask_shape(%q: tensor<2x4x8xf32>, %m: tensor<4x5xf32>) {
  // expected-error @+1 {{mask must be [Sq, Sk] = [4, 4] of the query's element type}}
  %o, %l = tsr.attention %q, %q, %q, %m {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x5xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_mask_type(%q: tensor<2x4x8xf32>, %m: tensor<4x4xbf16>) {
  // expected-error @+1 {{mask must be [Sq, Sk] = [4, 4] of the query's element type}}
  %o, %l = tsr.attention %q, %q, %q, %m {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x4xbf16> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_output(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{output type 'tensor<2x4x6xf32>' should be 'tensor<2x4x8xf32>'}}
  %o, %l = tsr.attention %q, %q, %q {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x6xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_lse_f32(%q: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{lse type 'tensor<2x4xbf16>' should be 'tensor<2x4xf32>'}}
  %o, %l = tsr.attention %q, %q, %q {scale = 1.0 : f32} : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16> -> tensor<2x4x8xbf16>, tensor<2x4xbf16>
  return
}

// -----

func.func @attention_lse_shape(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{lse type 'tensor<2x8xf32>' should be 'tensor<2x4xf32>'}}
  %o, %l = tsr.attention %q, %q, %q {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @attention_grad_causal(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %o: tensor<2x4x8xf32>, %l: tensor<2x4xf32>) {
  // expected-error @+1 {{causal attention needs Sq == Sk, got 4 and 6}}
  %dq, %dk, %dv = tsr.attention_grad %q, %k, %k, %o, %l, %o {causal = true, scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_grad_lse(%q: tensor<2x4x8xf32>, %l: tensor<2x5xf32>) {
  // expected-error @+1 {{lse type 'tensor<2x5xf32>' should be 'tensor<2x4xf32>'}}
  %dq, %dk, %dv = tsr.attention_grad %q, %q, %q, %q, %l, %q {scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x5xf32>
  return
}

// -----

func.func @attention_ring_size(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{ring_size must be >= 1, got 0}}
  %o, %l = tsr.attention %q, %q, %q {ring_size = 0 : i64, scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_ring_mask(%q: tensor<2x4x8xf32>, %m: tensor<4x4xf32>) {
  // expected-error @+1 {{ring attention (ring_size 2) takes no mask operand}}
  %o, %l = tsr.attention %q, %q, %q, %m {ring_size = 2 : i64, scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x4xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_ring_sq_sk(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>) {
  // expected-error @+1 {{ring attention needs Sq == Sk, got 4 and 6}}
  %o, %l = tsr.attention %q, %k, %k {ring_size = 2 : i64, scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32> -> tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_ring_divisible(%q: tensor<2x6x8xf32>) {
  // expected-error @+1 {{ring attention needs the sequence length 6 to be divisible by ring_size 4}}
  %o, %l = tsr.attention %q, %q, %q {causal = true, ring_size = 4 : i64, scale = 1.0 : f32} : tensor<2x6x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32> -> tensor<2x6x8xf32>, tensor<2x6xf32>
  return
}

// -----

func.func @attention_grad_ring_size(%q: tensor<2x4x8xf32>, %l: tensor<2x4xf32>) {
  // expected-error @+1 {{ring_size must be >= 1, got -1}}
  %dq, %dk, %dv = tsr.attention_grad %q, %q, %q, %q, %l, %q {ring_size = -1 : i64, scale = 1.0 : f32} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @attention_grad_ring_divisible(%q: tensor<2x6x8xf32>, %l: tensor<2x6xf32>) {
  // expected-error @+1 {{ring attention needs the sequence length 6 to be divisible by ring_size 4}}
  %dq, %dk, %dv = tsr.attention_grad %q, %q, %q, %q, %l, %q {ring_size = 4 : i64, scale = 1.0 : f32} : tensor<2x6x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>, tensor<2x6x8xf32>, tensor<2x6xf32>
  return
}

// -----

func.func @sharding_axis_twice(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{grid axis 1 splits more than one dimension}}
  %0 = tsr.sharding_constraint %x {sharding = #tsr.sharding<@grid, [[1], [0, 1]]>} : tensor<4x8xf32>
  return
}

// -----

func.func @sharding_partial_and_split(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{grid axis 0 is partial and also splits a dimension or is repeated}}
  %0 = tsr.sharding_constraint %x {sharding = #tsr.sharding<@grid, [[0], []] partial = [0]>} : tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_axis(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{axis 2 out of range for rank 2}}
  %0 = tsr.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_scale_shape(%x: tensor<4x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{scale shape must be input.shape[1:], got 'tensor<4xf32>'}}
  %0 = tsr.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @rms_norm_scale_type(%x: tensor<4x8xf32>, %g: tensor<8xbf16>) {
  // expected-error @+1 {{scale element type must be the input's ('f32'), got 'tensor<8xbf16>'}}
  %0 = tsr.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<8xbf16>
  return
}

// -----

func.func @rms_norm_int(%x: tensor<4x8xi64>, %g: tensor<8xi64>) {
  // expected-error @+1 {{expects a float element type, got 'tensor<4x8xi64>'}}
  %0 = tsr.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xi64>, tensor<8xi64>
  return
}

// -----

func.func @rms_norm_grad_scale(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{scale shape must be input.shape[1:], got 'tensor<8xf32>'}}
  %0, %1 = tsr.rms_norm_grad %x, %g, %x {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @silu_int(%x: tensor<4xi64>) {
  // expected-error @+1 {{expects a float element type, got 'tensor<4xi64>'}}
  %0 = tsr.silu %x : tensor<4xi64>
  return
}

// -----

func.func @silu_grad_int(%x: tensor<4xi64>) {
  // expected-error @+1 {{expects a float element type, got 'tensor<4xi64>'}}
  %0 = tsr.silu_grad %x, %x : tensor<4xi64>
  return
}

// -----

func.func @sigmoid_int(%x: tensor<4xi64>) {
  // expected-error @+1 {{expects a float element type, got 'tensor<4xi64>'}}
  %0 = tsr.sigmoid %x : tensor<4xi64>
  return
}

// -----

func.func @dropout_int(%x: tensor<4xi64>, %s: tensor<f32>) {
  // expected-error @+1 {{input must be a float tensor, got 'tensor<4xi64>'}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = 0 : i64} : tensor<4xi64>, tensor<f32>
  return
}

// -----

func.func @sum_squares_bf16(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{input must be an f32 tensor, got 'tensor<4x8xbf16>'}}
  %0 = tsr.sum_squares %x : tensor<4x8xbf16> -> tensor<f32>
  return
}

// -----

func.func @dropout_step_shape(%x: tensor<4xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{step must be a 0-D f32 tensor, got 'tensor<1xf32>'}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = 0 : i64} : tensor<4xf32>, tensor<1xf32>
  return
}

// -----

func.func @dropout_ratio(%x: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{ratio must be in [0, 1), got 1.000000e+00}}
  %0 = tsr.dropout %x, %s {ratio = 1.0 : f32, seed = 1234 : i64, op_id = 0 : i64} : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @dropout_op_id(%x: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{op_id must be in [0, 2^32), got -1}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = -1 : i64} : tensor<4xf32>, tensor<f32>
  return
}

// -----

func.func @dropout_layout_short(%x: tensor<4x8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{layout ends early at dimension 1}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = 0 : i64, layout = array<i64: 1, 4, 0, 1, 8>} : tensor<4x8xf32>, tensor<f32>
  return
}

// -----

func.func @dropout_layout_count(%x: tensor<4x8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{layout: dimension 0 needs a sub-factor count >= 1}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = 0 : i64, layout = array<i64: 0>} : tensor<4x8xf32>, tensor<f32>
  return
}

// -----

func.func @dropout_layout_size(%x: tensor<4x8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{layout: dimension 1 has a sub-factor of size 0 split over 1 axes}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = 0 : i64, layout = array<i64: 1, 4, 0, 1, 0, 1, 0>} : tensor<4x8xf32>, tensor<f32>
  return
}

// -----

func.func @dropout_layout_axis(%x: tensor<4x8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{layout: negative grid axis -2}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = 0 : i64, layout = array<i64: 1, 4, 1, -2, 1, 8, 0>} : tensor<4x8xf32>, tensor<f32>
  return
}

// -----

func.func @dropout_layout_extra(%x: tensor<4x8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{layout has 1 entries past the last dimension}}
  %0 = tsr.dropout %x, %s {ratio = 1.0e-01 : f32, seed = 1234 : i64, op_id = 0 : i64, layout = array<i64: 1, 4, 0, 1, 8, 0, 3>} : tensor<4x8xf32>, tensor<f32>
  return
}

// -----

func.func @sum_squares_not_scalar(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %0 = tsr.sum_squares %x : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @linear_k_mismatch(%x: tensor<4x8xf32>, %w: tensor<7x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{matmul contracting dimensions differ: 8 vs 7}}
  %0 = tsr.linear %x, %w, %b : tensor<4x8xf32>, tensor<7x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_result_type(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{result type 'tensor<4x8xf32>' should be 'tensor<4x16xf32>'}}
  %0 = tsr.linear %x, %w, %b : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @linear_bias_shape(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<1x16xf32>) {
  // expected-error @+1 {{bias must be of type 'tensor<16xf32>', got 'tensor<1x16xf32>'}}
  %0 = tsr.linear %x, %w, %b : tensor<4x8xf32>, tensor<8x16xf32>, tensor<1x16xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_activation(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{activation must be "none", "gelu", "gelu_tanh", "relu" or "silu", got "swish"}}
  %0 = tsr.linear %x, %w, %b {activation = "swish"} : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_preactivation_without_activation(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{has a preactivation result but no activation}}
  %0, %1 = tsr.linear %x, %w, %b : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x16xf32>, tensor<4x16xf32>
  return
}

// -----

func.func @linear_preactivation_type(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{preactivation type 'tensor<16x4xf32>' should be 'tensor<4x16xf32>'}}
  %0, %1 = tsr.linear %x, %w, %b {activation = "relu"} : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x16xf32>, tensor<16x4xf32>
  return
}

// -----

func.func @linear_integer(%x: tensor<4x8xi64>, %w: tensor<8x16xi64>, %b: tensor<16xi64>) {
  // expected-error @+1 {{expects a float element type, got 'tensor<4x16xi64>'}}
  %0 = tsr.linear %x, %w, %b : tensor<4x8xi64>, tensor<8x16xi64>, tensor<16xi64> -> tensor<4x16xi64>
  return
}

// -----

func.func @bias_activation_grad_none(%x: tensor<4x16xf32>, %dy: tensor<4x16xf32>) {
  // expected-error @+1 {{activation must be "gelu", "gelu_tanh", "relu" or "silu", got "none"}}
  %0, %1 = tsr.bias_activation_grad %x, %dy {activation = "none"} : tensor<4x16xf32> -> tensor<16xf32>
  return
}

// -----

func.func @bias_activation_grad_bias_type(%x: tensor<4x16xf32>, %dy: tensor<4x16xf32>) {
  // expected-error @+1 {{bias_grad type 'tensor<4xf32>' should be 'tensor<16xf32>'}}
  %0, %1 = tsr.bias_activation_grad %x, %dy {activation = "gelu"} : tensor<4x16xf32> -> tensor<4xf32>
  return
}

// -----

func.func @bias_activation_grad_rank0(%x: tensor<f32>, %dy: tensor<f32>) {
  // expected-error @+1 {{expects an input of rank >= 1, got 'tensor<f32>'}}
  %0, %1 = tsr.bias_activation_grad %x, %dy {activation = "relu"} : tensor<f32> -> tensor<1xf32>
  return
}

// -----

func.func @bias_activation_grad_integer(%x: tensor<4x16xi64>, %dy: tensor<4x16xi64>) {
  // expected-error @+1 {{expects a float element type, got 'tensor<4x16xi64>'}}
  %0, %1 = tsr.bias_activation_grad %x, %dy {activation = "relu"} : tensor<4x16xi64> -> tensor<16xi64>
  return
}

// -----

func.func @fused_unknown_opcode(%x: tensor<4xf32>) {
  // expected-error @+1 {{instruction 0 has unknown opcode 'cosh'}}
  %0 = tsr.fused_elementwise %x {ops = ["cosh"], args = array<i64: 0>, outputs = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_args_count(%x: tensor<4xf32>) {
  // expected-error @+1 {{'args' has 3 entries, expected 2}}
  %0 = tsr.fused_elementwise %x {ops = ["add"], args = array<i64: 0, 0, 0>, outputs = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_forward_slot(%x: tensor<4xf32>) {
  // expected-error @+1 {{instruction 0 ('exp') reads slot 1, not an earlier slot in [0, 1)}}
  %0 = tsr.fused_elementwise %x {ops = ["exp"], args = array<i64: 1>, outputs = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_condition_not_i1(%x: tensor<4xf32>) {
  // expected-error @+1 {{instruction 0 ('select') argument 0 (slot 0) must be an i1 operand}}
  %0 = tsr.fused_elementwise %x {ops = ["select"], args = array<i64: 0, 0, 0>, outputs = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_mask_as_value(%m: tensor<4xi1>) {
  // expected-error @+1 {{instruction 0 ('neg') argument 0 (slot 0) must be an f32 value}}
  %0 = tsr.fused_elementwise %m {ops = ["neg"], args = array<i64: 0>, outputs = array<i64: 1>} : (tensor<4xi1>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_output_not_computed(%x: tensor<4xf32>) {
  // expected-error @+1 {{output 0 is slot 0, not a computed slot in [1, 2)}}
  %0 = tsr.fused_elementwise %x {ops = ["neg"], args = array<i64: 0>, outputs = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_output_twice(%x: tensor<4xf32>) {
  // expected-error @+1 {{slot 1 is output twice}}
  %0:2 = tsr.fused_elementwise %x {ops = ["neg"], args = array<i64: 0>, outputs = array<i64: 1, 1>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @fused_outputs_vs_results(%x: tensor<4xf32>) {
  // expected-error @+1 {{has 1 results but 2 outputs}}
  %0 = tsr.fused_elementwise %x {ops = ["neg", "exp"], args = array<i64: 0, 1>, outputs = array<i64: 1, 2>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_result_shapes(%x: tensor<4xf32>) {
  // expected-error @+1 {{results must have one shape, got 'tensor<4xf32>' and 'tensor<2x2xf32>'}}
  %0:2 = tsr.fused_elementwise %x {ops = ["neg", "exp"], args = array<i64: 0, 1>, outputs = array<i64: 1, 2>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<2x2xf32>)
  return
}

// -----

func.func @fused_result_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{results must be f32, got 'tensor<4xbf16>'}}
  %0 = tsr.fused_elementwise %x {ops = ["neg"], args = array<i64: 0>, outputs = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xbf16>
  return
}

// -----

func.func @fused_input_type(%x: tensor<4xi64>) {
  // expected-error @+1 {{inputs must be f32 or i1, got 'tensor<4xi64>'}}
  %0 = tsr.fused_elementwise %x {ops = ["neg"], args = array<i64: 0>, outputs = array<i64: 1>} : (tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_not_broadcastable(%x: tensor<3xf32>) {
  // expected-error @+1 {{operand 0 does not broadcast to the result shape}}
  %0 = tsr.fused_elementwise %x {ops = ["neg"], args = array<i64: 0>, outputs = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @fused_empty(%x: tensor<4xf32>) {
  // expected-error @+1 {{has an empty program}}
  %0 = tsr.fused_elementwise %x {ops = [], args = array<i64>, outputs = array<i64: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Multi-tensor updates (tsr-fuse-optimizer): N parameters, then N of each
// other operand group; entry i of every group is parameter i's type; the
// result types are inferred.
func.func @multi_sgd_count(%p: tensor<4xf32>, %q: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{expects 2 tensor operands per parameter and at least one parameter, got 3}}
  %0:2 = tsr.multi_sgd_update [%p, %q, %p], %lr {weight_decay = 0.0 : f32} : tensor<4xf32>, tensor<2xf32>, tensor<4xf32>
  return
}

// -----

func.func @multi_sgd_grad_type(%p: tensor<4xf32>, %q: tensor<2xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{tensor operand 3 has type 'tensor<4xf32>' but parameter 1 has 'tensor<2xf32>'}}
  %0:2 = tsr.multi_sgd_update [%p, %q, %p, %p], %lr {weight_decay = 0.0 : f32} : tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @multi_sgd_result_type(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{result 0 has type 'tensor<3xf32>' but parameter 0 has 'tensor<4xf32>'}}
  %0 = "tsr.multi_sgd_update"(%p, %p, %lr) {weight_decay = 0.0 : f32} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<3xf32>
  return
}

// -----

func.func @multi_sgd_none(%lr: tensor<f32>) {
  // expected-error @+1 {{expects 1 results per parameter and at least one parameter, got 0 results}}
  "tsr.multi_sgd_update"(%lr) {weight_decay = 0.0 : f32} : (tensor<f32>) -> ()
  return
}

// -----

func.func @multi_sgd_negative_weight_decay(%p: tensor<4xf32>, %lr: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be >= 0}}
  %0 = tsr.multi_sgd_update [%p, %p], %lr {weight_decay = -1.0 : f32} : tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @multi_sgd_integer(%p: tensor<4xi64>, %lr: tensor<f32>) {
  // expected-error @+1 {{parameter must be a floating-point tensor}}
  %0 = tsr.multi_sgd_update [%p, %p], %lr {weight_decay = 0.0 : f32} : tensor<4xi64>, tensor<4xi64>
  return
}

// -----

func.func @multi_adamw_count(%p: tensor<4xf32>, %t: tensor<f32>, %lr: tensor<f32>) {
  // expected-error @+1 {{expects 4 tensor operands per parameter and at least one parameter, got 6}}
  %0:3 = tsr.multi_adamw_update [%p, %p, %p, %p, %p, %p], %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @multi_adamw_state_type(%p: tensor<4xf32>, %v: tensor<2x2xf32>, %t: tensor<f32>, %lr: tensor<f32>) {
  // expected-error @+1 {{tensor operand 3 has type 'tensor<2x2xf32>' but parameter 0 has 'tensor<4xf32>'}}
  %0:3 = tsr.multi_adamw_update [%p, %p, %p, %v], %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x2xf32>
  return
}

// -----

func.func @multi_adamw_beta(%p: tensor<4xf32>, %t: tensor<f32>, %lr: tensor<f32>) {
  // expected-error @+1 {{betas must be in [0, 1)}}
  %0:3 = tsr.multi_adamw_update [%p, %p, %p, %p], %t, %lr {beta1 = 0.9 : f32, beta2 = 1.0 : f32, eps = 1.0e-08 : f32, weight_decay = 0.01 : f32} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @multi_adamw_negative_weight_decay(%p: tensor<4xf32>, %t: tensor<f32>, %lr: tensor<f32>) {
  // expected-error @+1 {{weight_decay must be >= 0}}
  %0:3 = tsr.multi_adamw_update [%p, %p, %p, %p], %t, %lr {beta1 = 0.9 : f32, beta2 = 0.999 : f32, eps = 1.0e-08 : f32, weight_decay = -0.5 : f32} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @add_layer_norm_scale(%x: tensor<4x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{scale shape must be input.shape[1:], got 'tensor<4xf32>'}}
  %h, %y = tsr.add_layer_norm %x, %x, %g, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @add_layer_norm_axis(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{axis 2 out of range for rank 2}}
  %h, %y = tsr.add_layer_norm %x, %x, %g, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @add_layer_norm_residual_type(%x: tensor<4x8xf32>, %r: tensor<4x4xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{all of {input, residual, sum, result} have same type}}
  %h, %y = "tsr.add_layer_norm"(%x, %r, %g, %g) {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<4x4xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @add_rms_norm_scale_type(%x: tensor<4x8xf32>, %g: tensor<8xbf16>) {
  // expected-error @+1 {{scale element type must be the input's ('f32'), got 'tensor<8xbf16>'}}
  %h, %y = tsr.add_rms_norm %x, %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<8xbf16>
  return
}

// -----

func.func @add_rms_norm_int(%x: tensor<4x8xi64>, %g: tensor<8xi64>) {
  // expected-error @+1 {{expects a float element type, got 'tensor<4x8xi64>'}}
  %h, %y = tsr.add_rms_norm %x, %x, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xi64>, tensor<8xi64>
  return
}

// -----

func.func @layer_norm_grad_add_scale(%x: tensor<4x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{scale shape must be input.shape[1:], got 'tensor<4xf32>'}}
  %dx, %dg, %db = tsr.layer_norm_grad_add %x, %g, %x, %x {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @layer_norm_grad_add_addend_type(%x: tensor<4x8xf32>, %a: tensor<4x8xbf16>, %g: tensor<8xf32>) {
  // expected-error @+1 {{all of {input, grad, addend, input_grad} have same type}}
  %dx, %dg, %db = "tsr.layer_norm_grad_add"(%x, %g, %x, %a) {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @rms_norm_grad_add_axis(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{axis -1 out of range for rank 2}}
  %dx, %dw = tsr.rms_norm_grad_add %x, %g, %x, %x {axis = -1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return
}

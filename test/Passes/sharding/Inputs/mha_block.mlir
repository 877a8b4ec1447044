// A pre-norm transformer block in PyTorch 1.13's MultiheadAttention layout:
// fused QKV MatMul + bias + three chunk Slices, [S,B,D] -> [S,B*H,Dh] reshapes,
// softmax, out_proj on [S*B, D], GELU MLP, LM head; forward, hand-written
// backward (Q/K/V gradients concatenated) and SGD. Used by the sharding tests.
// B=4 S=4 D=16 H=4 Dh=4 F=32 V=32; PyTorch 1.13 MultiheadAttention layout.
func.func @train_step(
    %wte: tensor<32x16xf32> {tsr.role = "param", tsr.name = "tok_emb.weight"},
    %pos: tensor<4x16xf32> {tsr.role = "param", tsr.name = "pos_emb"},
    %g1: tensor<16xf32> {tsr.role = "param", tsr.name = "norm1.weight"},
    %be1: tensor<16xf32> {tsr.role = "param", tsr.name = "norm1.bias"},
    %win: tensor<48x16xf32> {tsr.role = "param", tsr.name = "self_attn.in_proj_weight"},
    %bin: tensor<48xf32> {tsr.role = "param", tsr.name = "self_attn.in_proj_bias"},
    %wout: tensor<16x16xf32> {tsr.role = "param", tsr.name = "self_attn.out_proj.weight"},
    %bout: tensor<16xf32> {tsr.role = "param", tsr.name = "self_attn.out_proj.bias"},
    %g2: tensor<16xf32> {tsr.role = "param", tsr.name = "norm2.weight"},
    %be2: tensor<16xf32> {tsr.role = "param", tsr.name = "norm2.bias"},
    %w1: tensor<32x16xf32> {tsr.role = "param", tsr.name = "linear1.weight"},
    %b1: tensor<32xf32> {tsr.role = "param", tsr.name = "linear1.bias"},
    %w2: tensor<16x32xf32> {tsr.role = "param", tsr.name = "linear2.weight"},
    %b2: tensor<16xf32> {tsr.role = "param", tsr.name = "linear2.bias"},
    %wh: tensor<32x16xf32> {tsr.role = "param", tsr.name = "head.weight"},
    %tokens: tensor<4x4xi64> {tsr.role = "tokens", tsr.name = "tokens"},
    %labels: tensor<4x4xi64> {tsr.role = "labels", tsr.name = "labels"}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
    -> (tensor<f32> {tsr.role = "loss", tsr.name = "loss"},
        tensor<48x16xf32> {tsr.role = "param", tsr.name = "self_attn.in_proj_weight"},
        tensor<48xf32> {tsr.role = "param", tsr.name = "self_attn.in_proj_bias"},
        tensor<16x16xf32> {tsr.role = "param", tsr.name = "self_attn.out_proj.weight"},
        tensor<16xf32> {tsr.role = "param", tsr.name = "self_attn.out_proj.bias"},
        tensor<32x16xf32> {tsr.role = "param", tsr.name = "linear1.weight"},
        tensor<16x32xf32> {tsr.role = "param", tsr.name = "linear2.weight"},
        tensor<32x16xf32> {tsr.role = "param", tsr.name = "tok_emb.weight"},
        tensor<4x16xf32> {tsr.role = "param", tsr.name = "pos_emb"},
        tensor<16xf32> {tsr.role = "param", tsr.name = "norm1.weight"},
        tensor<16xf32> {tsr.role = "param", tsr.name = "norm1.bias"},
        tensor<16xf32> {tsr.role = "param", tsr.name = "norm2.weight"},
        tensor<16xf32> {tsr.role = "param", tsr.name = "norm2.bias"},
        tensor<32xf32> {tsr.role = "param", tsr.name = "linear1.bias"},
        tensor<16xf32> {tsr.role = "param", tsr.name = "linear2.bias"},
        tensor<32x16xf32> {tsr.role = "param", tsr.name = "head.weight"}) {
  // ---- forward ----
  %e = tsr.gather %wte, %tokens : tensor<32x16xf32>, tensor<4x4xi64> -> tensor<4x4x16xf32>
  %posb = tsr.broadcast %pos : tensor<4x16xf32> -> tensor<4x4x16xf32>
  %x = tsr.add %e, %posb : tensor<4x4x16xf32>
  %n1 = tsr.layer_norm %x, %g1, %be1 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<4x4x16xf32>, tensor<16xf32>
  %xt = tsr.transpose %n1 {permutation = array<i64: 1, 0, 2>} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
  %winT = tsr.transpose %win {permutation = array<i64: 1, 0>} : tensor<48x16xf32> -> tensor<16x48xf32>
  %qkv0 = tsr.matmul %xt, %winT : tensor<4x4x16xf32>, tensor<16x48xf32> -> tensor<4x4x48xf32>
  %binb = tsr.broadcast %bin : tensor<48xf32> -> tensor<4x4x48xf32>
  %qkv = tsr.add %qkv0, %binb : tensor<4x4x48xf32>
  %q = tsr.slice %qkv {start_indices = array<i64: 0, 0, 0>, limit_indices = array<i64: 4, 4, 16>, strides = array<i64: 1, 1, 1>} : tensor<4x4x48xf32> -> tensor<4x4x16xf32>
  %k = tsr.slice %qkv {start_indices = array<i64: 0, 0, 16>, limit_indices = array<i64: 4, 4, 32>, strides = array<i64: 1, 1, 1>} : tensor<4x4x48xf32> -> tensor<4x4x16xf32>
  %v = tsr.slice %qkv {start_indices = array<i64: 0, 0, 32>, limit_indices = array<i64: 4, 4, 48>, strides = array<i64: 1, 1, 1>} : tensor<4x4x48xf32> -> tensor<4x4x16xf32>
  %q2 = tsr.reshape %q : tensor<4x4x16xf32> -> tensor<4x16x4xf32>
  %k2 = tsr.reshape %k : tensor<4x4x16xf32> -> tensor<4x16x4xf32>
  %v2 = tsr.reshape %v : tensor<4x4x16xf32> -> tensor<4x16x4xf32>
  %qt = tsr.transpose %q2 {permutation = array<i64: 1, 0, 2>} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
  %kt = tsr.transpose %k2 {permutation = array<i64: 1, 0, 2>} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
  %vt = tsr.transpose %v2 {permutation = array<i64: 1, 0, 2>} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
  %sq = tsr.constant dense<2.0> : tensor<16x4x4xf32>
  %qs = tsr.div %qt, %sq : tensor<16x4x4xf32>
  %kT = tsr.transpose %kt {permutation = array<i64: 0, 2, 1>} : tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %s = tsr.matmul %qs, %kT : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %one = tsr.constant dense<1.0> : tensor<16x4x4xf32>
  %s1 = tsr.mul %s, %one : tensor<16x4x4xf32>
  %mask = tsr.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %maskb = tsr.broadcast %mask : tensor<4x4xf32> -> tensor<16x4x4xf32>
  %s2 = tsr.add %s1, %maskb : tensor<16x4x4xf32>
  %p = tsr.softmax %s2 {axis = 2 : i64} : tensor<16x4x4xf32>
  %o = tsr.matmul %p, %vt : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %ot = tsr.transpose %o {permutation = array<i64: 1, 0, 2>} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
  %o2 = tsr.reshape %ot : tensor<4x16x4xf32> -> tensor<16x16xf32>
  %a = tsr.matmul %o2, %wout {transpose_rhs = true} : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
  %boutb = tsr.broadcast %bout : tensor<16xf32> -> tensor<16x16xf32>
  %a1 = tsr.add %a, %boutb : tensor<16x16xf32>
  %a2 = tsr.reshape %a1 : tensor<16x16xf32> -> tensor<4x4x16xf32>
  %a3 = tsr.transpose %a2 {permutation = array<i64: 1, 0, 2>} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
  %x1 = tsr.add %x, %a3 : tensor<4x4x16xf32>
  %n2 = tsr.layer_norm %x1, %g2, %be2 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<4x4x16xf32>, tensor<16xf32>
  %h = tsr.matmul %n2, %w1 {transpose_rhs = true} : tensor<4x4x16xf32>, tensor<32x16xf32> -> tensor<4x4x32xf32>
  %b1b = tsr.broadcast %b1 : tensor<32xf32> -> tensor<4x4x32xf32>
  %h1 = tsr.add %h, %b1b : tensor<4x4x32xf32>
  %g = tsr.gelu %h1 : tensor<4x4x32xf32>
  %y = tsr.matmul %g, %w2 {transpose_rhs = true} : tensor<4x4x32xf32>, tensor<16x32xf32> -> tensor<4x4x16xf32>
  %b2b = tsr.broadcast %b2 : tensor<16xf32> -> tensor<4x4x16xf32>
  %y1 = tsr.add %y, %b2b : tensor<4x4x16xf32>
  %x2 = tsr.add %x1, %y1 : tensor<4x4x16xf32>
  %x2f = tsr.reshape %x2 : tensor<4x4x16xf32> -> tensor<16x16xf32>
  %logits = tsr.matmul %x2f, %wh {transpose_rhs = true} : tensor<16x16xf32>, tensor<32x16xf32> -> tensor<16x32xf32>
  %lab = tsr.reshape %labels : tensor<4x4xi64> -> tensor<16xi64>
  %ce = tsr.cross_entropy %logits, %lab : tensor<16x32xf32>, tensor<16xi64> -> tensor<f32>
  %scale = tsr.constant dense<0.0625> : tensor<f32>
  %loss = tsr.mul %ce, %scale : tensor<f32>
  // ---- backward ----
  %dlog = tsr.cross_entropy_grad %logits, %lab, %scale : tensor<16x32xf32>, tensor<16xi64>, tensor<f32>
  %dx2f = tsr.matmul %dlog, %wh : tensor<16x32xf32>, tensor<32x16xf32> -> tensor<16x16xf32>
  %dwh = tsr.matmul %dlog, %x2f {transpose_lhs = true} : tensor<16x32xf32>, tensor<16x16xf32> -> tensor<32x16xf32>
  %dx2 = tsr.reshape %dx2f : tensor<16x16xf32> -> tensor<4x4x16xf32>
  %db2 = tsr.reduce_sum %dx2 {axes = array<i64: 0, 1>} : tensor<4x4x16xf32> -> tensor<16xf32>
  %dg = tsr.matmul %dx2, %w2 : tensor<4x4x16xf32>, tensor<16x32xf32> -> tensor<4x4x32xf32>
  %gf = tsr.reshape %g : tensor<4x4x32xf32> -> tensor<16x32xf32>
  %dw2 = tsr.matmul %dx2f, %gf {transpose_lhs = true} : tensor<16x16xf32>, tensor<16x32xf32> -> tensor<16x32xf32>
  %dh = tsr.gelu_grad %h1, %dg : tensor<4x4x32xf32>
  %db1 = tsr.reduce_sum %dh {axes = array<i64: 0, 1>} : tensor<4x4x32xf32> -> tensor<32xf32>
  %dn2 = tsr.matmul %dh, %w1 : tensor<4x4x32xf32>, tensor<32x16xf32> -> tensor<4x4x16xf32>
  %dhf = tsr.reshape %dh : tensor<4x4x32xf32> -> tensor<16x32xf32>
  %n2f = tsr.reshape %n2 : tensor<4x4x16xf32> -> tensor<16x16xf32>
  %dw1 = tsr.matmul %dhf, %n2f {transpose_lhs = true} : tensor<16x32xf32>, tensor<16x16xf32> -> tensor<32x16xf32>
  %dx1a, %dg2, %dbe2 = tsr.layer_norm_grad %x1, %g2, %dn2 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<4x4x16xf32>, tensor<16xf32>
  %dx1 = tsr.add %dx2, %dx1a : tensor<4x4x16xf32>
  %da2 = tsr.transpose %dx1 {permutation = array<i64: 1, 0, 2>} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
  %da1 = tsr.reshape %da2 : tensor<4x4x16xf32> -> tensor<16x16xf32>
  %dbout = tsr.reduce_sum %da1 {axes = array<i64: 0>} : tensor<16x16xf32> -> tensor<16xf32>
  %do2 = tsr.matmul %da1, %wout : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
  %dwout = tsr.matmul %da1, %o2 {transpose_lhs = true} : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
  %dot = tsr.reshape %do2 : tensor<16x16xf32> -> tensor<4x16x4xf32>
  %do = tsr.transpose %dot {permutation = array<i64: 1, 0, 2>} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
  %dp = tsr.matmul %do, %vt {transpose_rhs = true} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %dvt = tsr.matmul %p, %do {transpose_lhs = true} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %ds2 = tsr.softmax_grad %p, %dp {axis = 2 : i64} : tensor<16x4x4xf32>
  %ds = tsr.mul %ds2, %one : tensor<16x4x4xf32>
  %dqs = tsr.matmul %ds, %kT {transpose_rhs = true} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %dkT = tsr.matmul %qs, %ds {transpose_lhs = true} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %dkt = tsr.transpose %dkT {permutation = array<i64: 0, 2, 1>} : tensor<16x4x4xf32> -> tensor<16x4x4xf32>
  %dqt = tsr.div %dqs, %sq : tensor<16x4x4xf32>
  %dq2 = tsr.transpose %dqt {permutation = array<i64: 1, 0, 2>} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
  %dk2 = tsr.transpose %dkt {permutation = array<i64: 1, 0, 2>} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
  %dv2 = tsr.transpose %dvt {permutation = array<i64: 1, 0, 2>} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
  %dq = tsr.reshape %dq2 : tensor<4x16x4xf32> -> tensor<4x4x16xf32>
  %dk = tsr.reshape %dk2 : tensor<4x16x4xf32> -> tensor<4x4x16xf32>
  %dv = tsr.reshape %dv2 : tensor<4x16x4xf32> -> tensor<4x4x16xf32>
  %dqkv = tsr.concat %dq, %dk, %dv {axis = 2 : i64} : (tensor<4x4x16xf32>, tensor<4x4x16xf32>, tensor<4x4x16xf32>) -> tensor<4x4x48xf32>
  %dbin = tsr.reduce_sum %dqkv {axes = array<i64: 0, 1>} : tensor<4x4x48xf32> -> tensor<48xf32>
  %dxt = tsr.matmul %dqkv, %winT {transpose_rhs = true} : tensor<4x4x48xf32>, tensor<16x48xf32> -> tensor<4x4x16xf32>
  %xtf = tsr.reshape %xt : tensor<4x4x16xf32> -> tensor<16x16xf32>
  %dqkvf = tsr.reshape %dqkv : tensor<4x4x48xf32> -> tensor<16x48xf32>
  %dwinT = tsr.matmul %xtf, %dqkvf {transpose_lhs = true} : tensor<16x16xf32>, tensor<16x48xf32> -> tensor<16x48xf32>
  %dwin = tsr.transpose %dwinT {permutation = array<i64: 1, 0>} : tensor<16x48xf32> -> tensor<48x16xf32>
  %dn1 = tsr.transpose %dxt {permutation = array<i64: 1, 0, 2>} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
  %dxa, %dg1, %dbe1 = tsr.layer_norm_grad %x, %g1, %dn1 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<4x4x16xf32>, tensor<16xf32>
  %dx = tsr.add %dx1, %dxa : tensor<4x4x16xf32>
  %dpos = tsr.reduce_sum %dx {axes = array<i64: 0>} : tensor<4x4x16xf32> -> tensor<4x16xf32>
  %dwte = tsr.gather_grad %tokens, %dx : tensor<4x4xi64>, tensor<4x4x16xf32> -> tensor<32x16xf32>
  // ---- update ----
  %nwin = tsr.sgd_update %win, %dwin, %hlr {weight_decay = 0.0 : f32} : tensor<48x16xf32>
  %nbin = tsr.sgd_update %bin, %dbin, %hlr {weight_decay = 0.0 : f32} : tensor<48xf32>
  %nwout = tsr.sgd_update %wout, %dwout, %hlr {weight_decay = 0.0 : f32} : tensor<16x16xf32>
  %nbout = tsr.sgd_update %bout, %dbout, %hlr {weight_decay = 0.0 : f32} : tensor<16xf32>
  %nw1 = tsr.sgd_update %w1, %dw1, %hlr {weight_decay = 0.0 : f32} : tensor<32x16xf32>
  %nw2 = tsr.sgd_update %w2, %dw2, %hlr {weight_decay = 0.0 : f32} : tensor<16x32xf32>
  %nwte = tsr.sgd_update %wte, %dwte, %hlr {weight_decay = 0.0 : f32} : tensor<32x16xf32>
  %npos = tsr.sgd_update %pos, %dpos, %hlr {weight_decay = 0.0 : f32} : tensor<4x16xf32>
  %ng1 = tsr.sgd_update %g1, %dg1, %hlr {weight_decay = 0.0 : f32} : tensor<16xf32>
  %nbe1 = tsr.sgd_update %be1, %dbe1, %hlr {weight_decay = 0.0 : f32} : tensor<16xf32>
  %ng2 = tsr.sgd_update %g2, %dg2, %hlr {weight_decay = 0.0 : f32} : tensor<16xf32>
  %nbe2 = tsr.sgd_update %be2, %dbe2, %hlr {weight_decay = 0.0 : f32} : tensor<16xf32>
  %nb1 = tsr.sgd_update %b1, %db1, %hlr {weight_decay = 0.0 : f32} : tensor<32xf32>
  %nb2 = tsr.sgd_update %b2, %db2, %hlr {weight_decay = 0.0 : f32} : tensor<16xf32>
  %nwh = tsr.sgd_update %wh, %dwh, %hlr {weight_decay = 0.0 : f32} : tensor<32x16xf32>
  return %loss, %nwin, %nbin, %nwout, %nbout, %nw1, %nw2, %nwte, %npos, %ng1, %nbe1, %ng2, %nbe2, %nb1, %nb2, %nwh : tensor<f32>, tensor<48x16xf32>, tensor<48xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<32x16xf32>, tensor<16x32xf32>, tensor<32x16xf32>, tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<32xf32>, tensor<16xf32>, tensor<32x16xf32>
}

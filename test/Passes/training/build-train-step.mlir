// RUN: tessera-opt --tsr-build-train-step %s -split-input-file | FileCheck %s --check-prefixes=CHECK,ADAMW
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd lr=0.5" %s -split-input-file | FileCheck %s --check-prefixes=CHECK,SGD
// RUN: tessera-opt --tsr-build-train-step="optimizer=sgd weight-decay=0.25" %s -split-input-file | FileCheck %s --check-prefix=SGDWD
// RUN: tessera-opt --tsr-build-train-step="optimizer=adamw weight-decay=0.25 exclude-weight-decay=1" %s -split-input-file | FileCheck %s --check-prefix=EXCL

// A tiny LM: embedding, layer norm (frozen bias), gelu, residual, head.
// The embedding is used twice (gather and residual), so its cotangents are
// accumulated.

// CHECK-NOT: func.func @forward
// CHECK-LABEL: func.func @train_step
// Params first (attributes and initial values kept), then frozen.
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<8x4xf32> {tsr.init = dense<5.000000e-01> : tensor<8x4xf32>, tsr.name = "wte", tsr.role = "param"}
// CHECK-SAME: %[[LNG:[a-z0-9]+]]: tensor<4xf32> {tsr.init = dense<1.000000e+00> : tensor<4xf32>, tsr.name = "ln.weight", tsr.role = "param"}
// CHECK-SAME: %[[HEAD:[a-z0-9]+]]: tensor<8x4xf32> {tsr.init = {{[^}]*}}, tsr.name = "head.weight", tsr.role = "param"}
// CHECK-SAME: %[[LNB:[a-z0-9]+]]: tensor<4xf32> {tsr.init = dense<0.000000e+00> : tensor<4xf32>, tsr.name = "ln.bias", tsr.role = "frozen"}
// AdamW state: exp_avg / exp_avg_sq per param, then the step.
// ADAMW-SAME: %[[M0:[a-z0-9]+]]: tensor<8x4xf32> {tsr.name = "wte.exp_avg", tsr.role = "opt_state"}
// ADAMW-SAME: %[[V0:[a-z0-9]+]]: tensor<8x4xf32> {tsr.name = "wte.exp_avg_sq", tsr.role = "opt_state"}
// ADAMW-SAME: tensor<4xf32> {tsr.name = "ln.weight.exp_avg", tsr.role = "opt_state"}
// ADAMW-SAME: tensor<4xf32> {tsr.name = "ln.weight.exp_avg_sq", tsr.role = "opt_state"}
// ADAMW-SAME: tensor<8x4xf32> {tsr.name = "head.weight.exp_avg", tsr.role = "opt_state"}
// ADAMW-SAME: tensor<8x4xf32> {tsr.name = "head.weight.exp_avg_sq", tsr.role = "opt_state"}
// ADAMW-SAME: %[[STEP:[a-z0-9]+]]: tensor<f32> {tsr.name = "step", tsr.role = "opt_state"}
// SGD-NOT: opt_state
// CHECK-SAME: %[[TOK:[a-z0-9]+]]: tensor<2x3xi64> {tsr.name = "input_ids", tsr.role = "tokens"}
// CHECK-SAME: %[[LAB:[a-z0-9]+]]: tensor<2x3xi64> {tsr.name = "labels", tsr.role = "labels"}
// Last, the learning rate: a runtime input (role "hyper"), not an attribute.
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
// Results: loss, new params, new optimizer state.
// CHECK-SAME: -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"},
// CHECK-SAME: tensor<8x4xf32> {tsr.name = "wte", tsr.role = "param"},
// CHECK-SAME: tensor<4xf32> {tsr.name = "ln.weight", tsr.role = "param"},
// CHECK-SAME: tensor<8x4xf32> {tsr.name = "head.weight", tsr.role = "param"}
// ADAMW-SAME: tensor<8x4xf32> {tsr.name = "wte.exp_avg", tsr.role = "opt_state"}
// ADAMW-SAME: tensor<f32> {tsr.name = "step", tsr.role = "opt_state"})
// SGD-SAME: ) {

// CHECK-DAG: %[[ONE:.*]] = tsr.constant dense<1.000000e+00> : tensor<f32>
// CHECK-DAG: %[[INVN:.*]] = tsr.constant dense<0.166666672> : tensor<f32>
// CHECK: %[[EMB:.*]] = tsr.gather %[[WTE]], %[[TOK]]
// CHECK: %[[LOGITS:.*]] = tsr.matmul %{{.*}}, %[[HEAD]] {transpose_rhs = true
// Loss: summed cross-entropy over [B*S, V] rows, times the separate 1/(B*S).
// CHECK: %[[ROWS:.*]] = tsr.reshape %[[LOGITS]] {{.*}}: tensor<2x3x8xf32> -> tensor<6x8xf32>
// CHECK: %[[LAB1:.*]] = tsr.reshape %[[LAB]] {{.*}}: tensor<2x3xi64> -> tensor<6xi64>
// CHECK: %[[SUM:.*]] = tsr.cross_entropy %[[ROWS]], %[[LAB1]] {{.*}}: tensor<6x8xf32>, tensor<6xi64> -> tensor<f32>
// CHECK: %[[LOSS:.*]] = tsr.mul %[[SUM]], %[[INVN]] {{.*}}: tensor<f32>
// Backward from dloss = 1.
// CHECK: %[[DSUM:.*]] = tsr.mul %[[ONE]], %[[INVN]] {{.*}}: tensor<f32>
// CHECK: %[[DROWS:.*]] = tsr.cross_entropy_grad %[[ROWS]], %[[LAB1]], %[[DSUM]]
// CHECK: %[[DLOGITS:.*]] = tsr.reshape %[[DROWS]] {{.*}}: tensor<6x8xf32> -> tensor<2x3x8xf32>
// dW of the head: one 2-D matmul over the flattened rows.
// CHECK: %[[DHEAD:.*]] = tsr.matmul %{{.*}}, %{{.*}} {transpose_lhs = true{{.*}} : tensor<6x8xf32>, tensor<6x4xf32> -> tensor<8x4xf32>
// CHECK: tsr.gelu_grad
// CHECK: %{{.*}}, %[[DLNG:.*]], %{{.*}} = tsr.layer_norm_grad %[[EMB]], %[[LNG]]
// CHECK: %[[DEMB:.*]] = tsr.add
// CHECK: %[[DWTE:.*]] = tsr.gather_grad %[[TOK]], %[[DEMB]] {{.*}}: tensor<2x3xi64>, tensor<2x3x4xf32> -> tensor<8x4xf32>

// ADAMW: %[[STEP1:.*]] = tsr.add %[[STEP]], %[[ONE]] : tensor<f32>
// ADAMW: %[[P0:.*]], %[[M1:.*]], %[[V1:.*]] = tsr.adamw_update %[[WTE]], %[[DWTE]], %[[M0]], %[[V0]], %[[STEP1]], %[[LR]] {beta1 = 0.899999976 : f32, beta2 = 9.990000e-01 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.00999999977 : f32}
// ADAMW: tsr.adamw_update %[[LNG]], %[[DLNG]], {{.*}}, %[[STEP1]], %[[LR]]
// ADAMW: tsr.adamw_update %[[HEAD]], %[[DHEAD]], {{.*}}, %[[STEP1]], %[[LR]]
// ADAMW: return %[[LOSS]], %[[P0]], {{.*}}, %[[M1]], %[[V1]], {{.*}}, %[[STEP1]] :
// ADAMW-NOT: tsr.adamw_update

// SGD: %[[P0:.*]] = tsr.sgd_update %[[WTE]], %[[DWTE]], %[[LR]] {weight_decay = 0.000000e+00 : f32} : tensor<8x4xf32>
// SGD: %[[P1:.*]] = tsr.sgd_update %[[LNG]], %[[DLNG]], %[[LR]]
// SGD: %[[P2:.*]] = tsr.sgd_update %[[HEAD]], %[[DHEAD]], %[[LR]]
// SGD: return %[[LOSS]], %[[P0]], %[[P1]], %[[P2]] : tensor<f32>, tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>

// SGDWD-LABEL: func.func @train_step
// SGDWD: tsr.sgd_update {{.*}} {weight_decay = 2.500000e-01 : f32} : tensor<8x4xf32>
// SGDWD: tsr.sgd_update {{.*}} {weight_decay = 2.500000e-01 : f32} : tensor<4xf32>

// Megatron-LM's no-weight-decay group: the 1-D LayerNorm weight gets 0, the
// 2-D weights keep 0.25.
// EXCL-LABEL: func.func @train_step
// EXCL: tsr.adamw_update {{.*}}weight_decay = 2.500000e-01 : f32} : tensor<8x4xf32>
// EXCL: tsr.adamw_update {{.*}}weight_decay = 0.000000e+00 : f32} : tensor<4xf32>
// EXCL: tsr.adamw_update {{.*}}weight_decay = 2.500000e-01 : f32} : tensor<8x4xf32>
func.func @forward(
    %wte: tensor<8x4xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<8x4xf32>},
    %ln_g: tensor<4xf32> {tsr.name = "ln.weight", tsr.role = "param", tsr.init = dense<1.0> : tensor<4xf32>},
    %ln_b: tensor<4xf32> {tsr.name = "ln.bias", tsr.role = "frozen", tsr.init = dense<0.0> : tensor<4xf32>},
    %w: tensor<8x4xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<8x4xf32>},
    %tokens: tensor<2x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<2x3x8xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %n = tsr.layer_norm %e, %ln_g, %ln_b {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
  %g = tsr.gelu %n : tensor<2x3x4xf32>
  %r = tsr.add %g, %e : tensor<2x3x4xf32>
  %l = tsr.matmul %r, %w {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<8x4xf32> -> tensor<2x3x8xf32>
  return %l : tensor<2x3x8xf32>
}

// -----

// Logits [N, V]; a value used twice (%a) accumulates with tsr.add; a param
// the loss does not depend on is returned unchanged.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x5xf32> {tsr.init = {{[^}]*}}, tsr.name = "w", tsr.role = "param"}
// CHECK-SAME: %[[U:[a-z0-9]+]]: tensor<3xf32> {tsr.init = {{[^}]*}}, tsr.name = "unused", tsr.role = "param"}
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<6x4xf32> {tsr.name = "features", tsr.role = "input"}
// CHECK-SAME: %[[LAB:[a-z0-9]+]]: tensor<6xi64> {tsr.name = "labels", tsr.role = "labels"}
// CHECK: tsr.cross_entropy %{{.*}}, %[[LAB]] {{.*}}: tensor<6x5xf32>, tensor<6xi64> -> tensor<f32>
// CHECK: %[[D1:.*]] = tsr.mul %[[DY:.*]], %{{.*}} : tensor<6x5xf32>
// CHECK: %[[D2:.*]] = tsr.mul %{{.*}}, %{{.*}} : tensor<6x5xf32>
// CHECK: %[[ACC:.*]] = tsr.add %[[D1]], %{{.*}} : tensor<6x5xf32>
// CHECK: %[[DW:.*]] = tsr.matmul %[[X]], %[[ACC]] {transpose_lhs = true{{.*}} : tensor<6x4xf32>, tensor<6x5xf32> -> tensor<4x5xf32>
// SGD: %[[W1:.*]] = tsr.sgd_update %[[W]], %[[DW]]
// SGD-NOT: tsr.sgd_update
// SGD: return %{{.*}}, %[[W1]], %[[U]] :
// ADAMW: %[[W1:.*]], %[[M1:.*]], %[[V1:.*]] = tsr.adamw_update %[[W]], %[[DW]]
// ADAMW-NOT: tsr.adamw_update
// ADAMW: return %{{.*}}, %[[W1]], %[[U]], %[[M1]], %[[V1]], %{{.*}}, %{{.*}}, %{{.*}} :
func.func @forward(
    %w: tensor<4x5xf32> {tsr.name = "w", tsr.role = "param", tsr.init = dense<0.1> : tensor<4x5xf32>},
    %unused: tensor<3xf32> {tsr.name = "unused", tsr.role = "param", tsr.init = dense<0.0> : tensor<3xf32>},
    %x: tensor<6x4xf32> {tsr.name = "features", tsr.role = "input"})
    -> tensor<6x5xf32> {
  %a = tsr.matmul %x, %w : tensor<6x4xf32>, tensor<4x5xf32> -> tensor<6x5xf32>
  %t = tsr.tanh %a : tensor<6x5xf32>
  %b = tsr.mul %t, %a : tensor<6x5xf32>
  return %b : tensor<6x5xf32>
}

// -----

// Cotangents of disjoint slices of one value (a fused QKV projection) are
// assembled by one concat, not summed as zero-padded pieces.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[WQKV:[a-z0-9]+]]: tensor<6x2xf32>
// CHECK-NOT: tsr.add {{.*}} : tensor<4x6xf32>
// CHECK: %[[DQKV:.*]] = tsr.concat %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64{{.*}} : (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x6xf32>
// CHECK-NOT: tsr.add {{.*}} : tensor<4x6xf32>
// CHECK: tsr.matmul %[[DQKV]], %{{.*}} {transpose_lhs = true{{.*}}} : tensor<4x6xf32>, tensor<4x2xf32> -> tensor<6x2xf32>
func.func @forward(
    %wqkv: tensor<6x2xf32> {tsr.name = "qkv", tsr.role = "param", tsr.init = dense<0.1> : tensor<6x2xf32>},
    %x: tensor<4x2xf32> {tsr.name = "x", tsr.role = "input"})
    -> tensor<4x2xf32> {
  %qkv = tsr.matmul %x, %wqkv {transpose_rhs = true} : tensor<4x2xf32>, tensor<6x2xf32> -> tensor<4x6xf32>
  %q = tsr.slice %qkv {start_indices = array<i64: 0, 0>, limit_indices = array<i64: 4, 2>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<4x2xf32>
  %k = tsr.slice %qkv {start_indices = array<i64: 0, 2>, limit_indices = array<i64: 4, 4>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<4x2xf32>
  %v = tsr.slice %qkv {start_indices = array<i64: 0, 4>, limit_indices = array<i64: 4, 6>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<4x2xf32>
  %qk = tsr.mul %q, %k : tensor<4x2xf32>
  %o = tsr.mul %qk, %v : tensor<4x2xf32>
  return %o : tensor<4x2xf32>
}

// -----

// A LLaMA-style block: RMSNorm, a SwiGLU MLP (silu(gate) · up, down) and
// the residual. The backward uses the fused rms_norm_grad (dx and dw) and
// silu_grad.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[NW:[a-z0-9]+]]: tensor<4xf32> {tsr.init = {{[^}]*}}, tsr.name = "norm.weight", tsr.role = "param"}
// CHECK: %[[X:.*]] = tsr.gather
// CHECK: %[[N:.*]] = tsr.rms_norm %[[X]], %[[NW]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32{{.*}}} : tensor<2x3x4xf32>, tensor<4xf32>
// CHECK: %[[GATE:.*]] = tsr.matmul %[[N]], %{{.*}} {transpose_rhs = true
// CHECK: %[[UP:.*]] = tsr.matmul %[[N]], %{{.*}} {transpose_rhs = true
// CHECK: %[[ACT:.*]] = tsr.silu %[[GATE]] {{.*}}: tensor<2x3x6xf32>
// CHECK: tsr.cross_entropy
// CHECK: %[[DACT:.*]] = tsr.mul %{{.*}}, %[[UP]] {{.*}}: tensor<2x3x6xf32>
// CHECK: %[[DGATE:.*]] = tsr.silu_grad %[[GATE]], %[[DACT]] {{.*}}: tensor<2x3x6xf32>
// CHECK: %[[DX:.*]], %[[DNW:.*]] = tsr.rms_norm_grad %[[X]], %[[NW]], %{{.*}} {axis = 2 : i64, epsilon = 9.99999997E-7 : f32{{.*}}} : tensor<2x3x4xf32>, tensor<4xf32>
// CHECK: {{tsr.sgd_update|tsr.adamw_update}} %[[NW]], %[[DNW]]
// CHECK-NOT: tsr.sigmoid
func.func @forward(
    %wte: tensor<8x4xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.5> : tensor<8x4xf32>},
    %nw: tensor<4xf32> {tsr.name = "norm.weight", tsr.role = "param", tsr.init = dense<1.0> : tensor<4xf32>},
    %wg: tensor<6x4xf32> {tsr.name = "gate.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<6x4xf32>},
    %wu: tensor<6x4xf32> {tsr.name = "up.weight", tsr.role = "param", tsr.init = dense<0.2> : tensor<6x4xf32>},
    %wd: tensor<4x6xf32> {tsr.name = "down.weight", tsr.role = "param", tsr.init = dense<0.3> : tensor<4x6xf32>},
    %head: tensor<8x4xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.init = dense<0.1> : tensor<8x4xf32>},
    %tokens: tensor<2x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<2x3x8xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %n = tsr.rms_norm %e, %nw {axis = 2 : i64, epsilon = 1.0e-06 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
  %g = tsr.matmul %n, %wg {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<6x4xf32> -> tensor<2x3x6xf32>
  %u = tsr.matmul %n, %wu {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<6x4xf32> -> tensor<2x3x6xf32>
  %a = tsr.silu %g : tensor<2x3x6xf32>
  %h = tsr.mul %a, %u : tensor<2x3x6xf32>
  %d = tsr.matmul %h, %wd {transpose_rhs = true} : tensor<2x3x6xf32>, tensor<4x6xf32> -> tensor<2x3x4xf32>
  %r = tsr.add %e, %d : tensor<2x3x4xf32>
  %l = tsr.matmul %r, %head {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<8x4xf32> -> tensor<2x3x8xf32>
  return %l : tensor<2x3x8xf32>
}

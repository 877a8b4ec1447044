// RUN: tessera-import --raise-only %s | FileCheck %s
// Raising the attention forms of Hugging Face models (transformers 4.49) as
// the TorchScript and dynamo exporters write them, in hand-written tsr IR:
// finfo.min masks (select and additive), masks with leading batch dims,
// BERT's all-zero extended mask, grouped-query attention through repeat_kv,
// softmax between f32 casts, the scale on Q; and the near misses that must
// not be raised (or not as GQA).

// GPT-2 (TorchScript): scores / sqrt(dh), then
// where(causal_bool, scores, finfo(f32).min).
// CHECK-LABEL: func.func @gpt2_select_finfo_min
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 5.000000e-01 : f32} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>, tensor<2x4x4xf32>
// CHECK-NEXT: return %[[O]]
func.func @gpt2_select_finfo_min(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> tensor<2x4x4x2xf32> {
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %c = tsr.constant dense<2.0> : tensor<2x4x4x4xf32>
  %kt = tsr.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<2x4x4x2xf32> -> tensor<2x4x2x4xf32>
  %s = tsr.matmul %q, %kt : tensor<2x4x4x2xf32>, tensor<2x4x2x4xf32> -> tensor<2x4x4x4xf32>
  %ss = tsr.div %s, %c : tensor<2x4x4x4xf32>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>
  %sm = tsr.select %kb, %ss, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}

// LLaMA / Qwen2 / Mistral (dynamo): 4 query heads over 2 K/V heads through
// repeat_kv (unsqueeze, expand, reshape), Q·Kᵀ with transpose_rhs, * scaling,
// + the causal finfo.min mask folded with the batch ([B, 1, S, S]).
// CHECK-LABEL: func.func @llama_gqa_dynamo
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x4x2xf32>, %[[K:.*]]: tensor<2x2x4x2xf32>, %[[V:.*]]: tensor<2x2x4x2xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %[[Q]], %[[K]], %[[V]] {causal = true, scale = 0.707106769 : f32} : tensor<2x4x4x2xf32>, tensor<2x2x4x2xf32>, tensor<2x2x4x2xf32> -> tensor<2x4x4x2xf32>, tensor<2x4x4xf32>
// CHECK-NEXT: return %[[O]]
func.func @llama_gqa_dynamo(%q: tensor<2x4x4x2xf32>, %k: tensor<2x2x4x2xf32>, %v: tensor<2x2x4x2xf32>) -> tensor<2x4x4x2xf32> {
  %mask = tsr.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]], [[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<2x1x4x4xf32>
  %scaling = tsr.constant dense<0.707106769> : tensor<f32>
  %k1 = tsr.reshape %k : tensor<2x2x4x2xf32> -> tensor<2x2x1x4x2xf32>
  %k2 = tsr.broadcast %k1 : tensor<2x2x1x4x2xf32> -> tensor<2x2x2x4x2xf32>
  %kr = tsr.reshape %k2 : tensor<2x2x2x4x2xf32> -> tensor<2x4x4x2xf32>
  %v1 = tsr.reshape %v : tensor<2x2x4x2xf32> -> tensor<2x2x1x4x2xf32>
  %v2 = tsr.broadcast %v1 : tensor<2x2x1x4x2xf32> -> tensor<2x2x2x4x2xf32>
  %vr = tsr.reshape %v2 : tensor<2x2x2x4x2xf32> -> tensor<2x4x4x2xf32>
  %s = tsr.matmul %q, %kr {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %c1 = tsr.reshape %scaling : tensor<f32> -> tensor<1x1x1x1xf32>
  %c = tsr.broadcast %c1 : tensor<1x1x1x1xf32> -> tensor<2x4x4x4xf32>
  %ss = tsr.mul %s, %c : tensor<2x4x4x4xf32>
  %mb = tsr.broadcast %mask : tensor<2x1x4x4xf32> -> tensor<2x4x4x4xf32>
  %sm = tsr.add %ss, %mb : tensor<2x4x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %vr : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}

// LLaMA (TorchScript): Kᵀ is a Transpose of the repeated K, the mask is a
// full constant (the importer folds the Expand), and the Q/K/V heads come
// from [B, S, H, D] projections: the un-repeated K/V are the transposes.
// CHECK-LABEL: func.func @llama_gqa_torchscript
// CHECK-DAG: %[[QT:.*]] = tsr.transpose %arg0 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
// CHECK-DAG: %[[KT:.*]] = tsr.transpose %arg1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x2xf32> -> tensor<2x2x4x2xf32>
// CHECK-DAG: %[[VT:.*]] = tsr.transpose %arg2 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x2xf32> -> tensor<2x2x4x2xf32>
// CHECK: tsr.attention %[[QT]], %[[KT]], %[[VT]] {causal = true, scale = 0.353553385 : f32} : tensor<2x4x4x2xf32>, tensor<2x2x4x2xf32>, tensor<2x2x4x2xf32> -> tensor<2x4x4x2xf32>, tensor<2x4x4xf32>
// CHECK-NOT: tsr.softmax
func.func @llama_gqa_torchscript(%qp: tensor<2x4x4x2xf32>, %kp: tensor<2x4x2x2xf32>, %vp: tensor<2x4x2x2xf32>) -> tensor<2x4x4x2xf32> {
  %mask = tsr.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]], [[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<2x1x4x4xf32>
  %scaling = tsr.constant dense<0.353553385> : tensor<2x4x4x4xf32>
  %q = tsr.transpose %qp {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  %k = tsr.transpose %kp {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x2xf32> -> tensor<2x2x4x2xf32>
  %v = tsr.transpose %vp {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x2xf32> -> tensor<2x2x4x2xf32>
  %k1 = tsr.reshape %k : tensor<2x2x4x2xf32> -> tensor<2x2x1x4x2xf32>
  %k2 = tsr.broadcast %k1 : tensor<2x2x1x4x2xf32> -> tensor<2x2x2x4x2xf32>
  %kr = tsr.reshape %k2 : tensor<2x2x2x4x2xf32> -> tensor<2x4x4x2xf32>
  %v1 = tsr.reshape %v : tensor<2x2x4x2xf32> -> tensor<2x2x1x4x2xf32>
  %v2 = tsr.broadcast %v1 : tensor<2x2x1x4x2xf32> -> tensor<2x2x2x4x2xf32>
  %vr = tsr.reshape %v2 : tensor<2x2x2x4x2xf32> -> tensor<2x4x4x2xf32>
  %kt = tsr.transpose %kr {permutation = array<i64: 0, 1, 3, 2>} : tensor<2x4x4x2xf32> -> tensor<2x4x2x4xf32>
  %s = tsr.matmul %q, %kt : tensor<2x4x4x2xf32>, tensor<2x4x2x4xf32> -> tensor<2x4x4x4xf32>
  %ss = tsr.mul %s, %scaling : tensor<2x4x4x4xf32>
  %mb = tsr.broadcast %mask : tensor<2x1x4x4xf32> -> tensor<2x4x4x4xf32>
  %sm = tsr.add %ss, %mb : tensor<2x4x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %vr : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}

// BERT (TorchScript): the extended attention mask of an unpadded batch
// folds to a full all-zero (-0.0) constant; scores / sqrt(dh). No mask.
// CHECK-LABEL: func.func @bert_zero_mask
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {scale = 2.500000e-01 : f32} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>, tensor<2x4x4xf32>
// CHECK-NEXT: return %[[O]]
func.func @bert_zero_mask(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> tensor<2x4x4x2xf32> {
  %zero = tsr.constant dense<-0.0> : tensor<2x4x4x4xf32>
  %c = tsr.constant dense<4.0> : tensor<2x4x4x4xf32>
  %kt = tsr.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<2x4x4x2xf32> -> tensor<2x4x2x4xf32>
  %s = tsr.matmul %q, %kt : tensor<2x4x4x2xf32>, tensor<2x4x2x4xf32> -> tensor<2x4x4x4xf32>
  %ss = tsr.div %s, %c : tensor<2x4x4x4xf32>
  %sm = tsr.add %ss, %zero : tensor<2x4x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}

// BERT with padding: an extended mask [B, 1, 1, S] that is the same for every
// sample (the last key padded in both) becomes the [Sq, Sk] operand with its
// exact finfo.min values; the same mask in dynamo's [B, 1, Sq, Sk] form.
// CHECK-LABEL: func.func @bert_padding_same_for_batch
// CHECK: %[[M:.*]] = tsr.constant dense<{{\[}}[0.000000e+00, 0.000000e+00, 0.000000e+00, -3.40282347E+38], [0.000000e+00, 0.000000e+00, 0.000000e+00, -3.40282347E+38], [0.000000e+00, 0.000000e+00, 0.000000e+00, -3.40282347E+38], [0.000000e+00, 0.000000e+00, 0.000000e+00, -3.40282347E+38]]> : tensor<4x4xf32>
// CHECK: tsr.attention %arg0, %arg1, %arg2, %[[M]] {scale = 2.500000e-01 : f32}
// CHECK-NOT: tsr.softmax
func.func @bert_padding_same_for_batch(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> tensor<2x4x4x2xf32> {
  %mask = tsr.constant dense<[[[[0.0, 0.0, 0.0, -3.40282347E+38]]], [[[0.0, 0.0, 0.0, -3.40282347E+38]]]]> : tensor<2x1x1x4xf32>
  %c = tsr.constant dense<4.0> : tensor<2x4x4x4xf32>
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %ss = tsr.div %s, %c : tensor<2x4x4x4xf32>
  %mb = tsr.broadcast %mask : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
  %sm = tsr.add %ss, %mb : tensor<2x4x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}

// The rule for a finite fill (dropsKey): -1e30 (and below) drops the key, so
// this is causal; -1e29 does not, so it stays an explicit mask (exact).
// CHECK-LABEL: func.func @causal_threshold
// CHECK: %[[M:.*]] = tsr.constant dense<{{\[}}[0.000000e+00, -1.000000e+29, -1.000000e+29, -1.000000e+29]{{.*}}> : tensor<4x4xf32>
// CHECK-NEXT: tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.000000e+00 : f32}
// CHECK-NEXT: tsr.attention %arg0, %arg1, %arg2, %[[M]] {scale = 1.000000e+00 : f32}
// CHECK-NOT: tsr.softmax
func.func @causal_threshold(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>) {
  %m30 = tsr.constant dense<[[[[0.0, -1.0E+30, -1.0E+30, -1.0E+30], [0.0, 0.0, -1.0E+30, -1.0E+30], [0.0, 0.0, 0.0, -1.0E+30], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %m29 = tsr.constant dense<[[[[0.0, -1.0E+29, -1.0E+29, -1.0E+29], [0.0, 0.0, -1.0E+29, -1.0E+29], [0.0, 0.0, 0.0, -1.0E+29], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %mb = tsr.broadcast %m30 : tensor<1x1x4x4xf32> -> tensor<2x4x4x4xf32>
  %sm = tsr.add %s, %mb : tensor<2x4x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  %s2 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %mb2 = tsr.broadcast %m29 : tensor<1x1x4x4xf32> -> tensor<2x4x4x4xf32>
  %sm2 = tsr.add %s2, %mb2 : tensor<2x4x4x4xf32>
  %p2 = tsr.softmax %sm2 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o2 = tsr.matmul %p2, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o, %o2 : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>
}

// f16's finfo.min (-65504, its lowest finite value) drops the key as well.
// CHECK-LABEL: func.func @f16_finfo_min
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.000000e+00 : f32} : tensor<2x4x2xf16>
func.func @f16_finfo_min(%q: tensor<2x4x2xf16>, %k: tensor<2x4x2xf16>, %v: tensor<2x4x2xf16>) -> tensor<2x4x2xf16> {
  %m = tsr.constant dense<[[0.0, -65504.0, -65504.0, -65504.0], [0.0, 0.0, -65504.0, -65504.0], [0.0, 0.0, 0.0, -65504.0], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf16>
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x2xf16>, tensor<2x4x2xf16> -> tensor<2x4x4xf16>
  %mb = tsr.broadcast %m : tensor<4x4xf16> -> tensor<2x4x4xf16>
  %sm = tsr.add %s, %mb : tensor<2x4x4xf16>
  %p = tsr.softmax %sm {axis = 2 : i64} : tensor<2x4x4xf16>
  %o = tsr.matmul %p, %v : tensor<2x4x4xf16>, tensor<2x4x2xf16> -> tensor<2x4x2xf16>
  return %o : tensor<2x4x2xf16>
}

// Hugging Face's eager softmax on bf16: scores cast to f32, softmax, cast
// back; Gemma-style scale on Q before the matmul.
// CHECK-LABEL: func.func @bf16_softmax_casts_q_scaled
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 2.500000e-01 : f32} : tensor<2x4x4x2xbf16>, tensor<2x4x4x2xbf16>, tensor<2x4x4x2xbf16> -> tensor<2x4x4x2xbf16>, tensor<2x4x4xf32>
// CHECK-NEXT: return %[[O]]
func.func @bf16_softmax_casts_q_scaled(%q: tensor<2x4x4x2xbf16>, %k: tensor<2x4x4x2xbf16>, %v: tensor<2x4x4x2xbf16>) -> tensor<2x4x4x2xbf16> {
  %mask = tsr.constant dense<[[[[0.0, -3.38953139E+38, -3.38953139E+38, -3.38953139E+38], [0.0, 0.0, -3.38953139E+38, -3.38953139E+38], [0.0, 0.0, 0.0, -3.38953139E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xbf16>
  %c = tsr.constant dense<0.25> : tensor<2x4x4x2xbf16>
  %qs = tsr.mul %q, %c : tensor<2x4x4x2xbf16>
  %s = tsr.matmul %qs, %k {transpose_rhs = true} : tensor<2x4x4x2xbf16>, tensor<2x4x4x2xbf16> -> tensor<2x4x4x4xbf16>
  %mb = tsr.broadcast %mask : tensor<1x1x4x4xbf16> -> tensor<2x4x4x4xbf16>
  %sm = tsr.add %s, %mb : tensor<2x4x4x4xbf16>
  %up = tsr.convert %sm : tensor<2x4x4x4xbf16> -> tensor<2x4x4x4xf32>
  %p = tsr.softmax %up {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %pd = tsr.convert %p : tensor<2x4x4x4xf32> -> tensor<2x4x4x4xbf16>
  %o = tsr.matmul %pd, %v : tensor<2x4x4x4xbf16>, tensor<2x4x4x2xbf16> -> tensor<2x4x4x2xbf16>
  return %o : tensor<2x4x4x2xbf16>
}

// Near misses.
// (1) A padding mask that differs between the samples: not raised.
// (2) A select whose fill (-1e29) does not drop the key: not raised.
// (3) A general keep-mask with a finite fill scaled after the select: the
//     scale would change the fill, not raised.
// (4) The softmax computed in bf16 from f32 scores (a downcast): not raised.
// CHECK-LABEL: func.func @not_raised
// CHECK-NOT: tsr.attention
// CHECK: return
func.func @not_raised(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xbf16>) {
  %pad = tsr.constant dense<[[[[0.0, 0.0, 0.0, -3.40282347E+38]]], [[[0.0, 0.0, -3.40282347E+38, -3.40282347E+38]]]]> : tensor<2x1x1x4xf32>
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %mb = tsr.broadcast %pad : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
  %sm = tsr.add %s, %mb : tensor<2x4x4x4xf32>
  %p = tsr.softmax %sm {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>
  %fill = tsr.constant dense<-1.0E+29> : tensor<2x4x4x4xf32>
  %s2 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %sm2 = tsr.select %kb, %s2, %fill : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p2 = tsr.softmax %sm2 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o2 = tsr.matmul %p2, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %keep3 = tsr.constant dense<[[[[true, true, true, false], [true, true, true, false], [true, true, true, false], [true, true, true, false]]]]> : tensor<1x1x4x4xi1>
  %kb3 = tsr.broadcast %keep3 : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %half = tsr.constant dense<0.5> : tensor<2x4x4x4xf32>
  %s3 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %sm3 = tsr.select %kb3, %s3, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %ss3 = tsr.mul %sm3, %half : tensor<2x4x4x4xf32>
  %p3 = tsr.softmax %ss3 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o3 = tsr.matmul %p3, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %qb = tsr.convert %q : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xbf16>
  %vb = tsr.convert %v : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xbf16>
  %s4 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %d4 = tsr.convert %s4 : tensor<2x4x4x4xf32> -> tensor<2x4x4x4xbf16>
  %p4 = tsr.softmax %d4 {axis = 3 : i64} : tensor<2x4x4x4xbf16>
  %o4 = tsr.matmul %p4, %vb : tensor<2x4x4x4xbf16>, tensor<2x4x4x2xbf16> -> tensor<2x4x4x2xbf16>
  return %o, %o2, %o3, %o4 : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xbf16>
}

// GQA near misses, raised as multi-head attention on the repeated K/V (the
// K operand keeps 4 heads): (1) the copies major, [B, n, Hkv, S, D] (query
// head h would read K/V head h mod Hkv, not h / n_rep); (2) K repeated but V
// not.
// CHECK-LABEL: func.func @gqa_near_misses
// CHECK: tsr.attention %arg0, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f32} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>
// CHECK: tsr.attention %arg0, %{{.*}}, %arg3 {scale = 1.000000e+00 : f32} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>
// CHECK-NOT: tsr.softmax
func.func @gqa_near_misses(%q: tensor<2x4x4x2xf32>, %k: tensor<2x2x4x2xf32>, %v: tensor<2x2x4x2xf32>, %vfull: tensor<2x4x4x2xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>) {
  %k1 = tsr.reshape %k : tensor<2x2x4x2xf32> -> tensor<2x1x2x4x2xf32>
  %k2 = tsr.broadcast %k1 : tensor<2x1x2x4x2xf32> -> tensor<2x2x2x4x2xf32>
  %kr = tsr.reshape %k2 : tensor<2x2x2x4x2xf32> -> tensor<2x4x4x2xf32>
  %v1 = tsr.reshape %v : tensor<2x2x4x2xf32> -> tensor<2x1x2x4x2xf32>
  %v2 = tsr.broadcast %v1 : tensor<2x1x2x4x2xf32> -> tensor<2x2x2x4x2xf32>
  %vr = tsr.reshape %v2 : tensor<2x2x2x4x2xf32> -> tensor<2x4x4x2xf32>
  %s = tsr.matmul %q, %kr {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %p = tsr.softmax %s {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %vr : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %ka = tsr.reshape %k : tensor<2x2x4x2xf32> -> tensor<2x2x1x4x2xf32>
  %kb = tsr.broadcast %ka : tensor<2x2x1x4x2xf32> -> tensor<2x2x2x4x2xf32>
  %kc = tsr.reshape %kb : tensor<2x2x2x4x2xf32> -> tensor<2x4x4x2xf32>
  %s2 = tsr.matmul %q, %kc {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %p2 = tsr.softmax %s2 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o2 = tsr.matmul %p2, %vfull : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o, %o2 : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>
}

// GPT-2 given an attention mask (transformers 4.49's eager attention):
// where(causal, scores, finfo.min) + the extended mask. Folded into one
// additive mask as the program rounds it: (1) an unpadded batch's all-zero
// mask leaves the causal select; (2) a mask that pads the last key of every
// sample gives the exact sums, finfo.min + finfo.min = -inf included;
// (3) the add inside the select (select(causal, s + m, -inf)): the dropped
// keys get the fill alone.
// CHECK-LABEL: func.func @gpt2_select_then_add
// CHECK-NEXT: %[[M:.*]] = tsr.constant dense<{{\[}}[0.000000e+00, -3.40282347E+38, -3.40282347E+38, 0xFF800000], [0.000000e+00, 0.000000e+00, -3.40282347E+38, 0xFF800000], [0.000000e+00, 0.000000e+00, 0.000000e+00, 0xFF800000], [0.000000e+00, 0.000000e+00, 0.000000e+00, -3.40282347E+38]]> : tensor<4x4xf32>
// CHECK-NEXT: %[[O1:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 5.000000e-01 : f32}
// CHECK-NEXT: %[[O2:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2, %[[M]] {scale = 5.000000e-01 : f32}
// CHECK-NEXT: %[[O3:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 5.000000e-01 : f32}
// CHECK-NEXT: return %[[O1]], %[[O2]], %[[O3]]
func.func @gpt2_select_then_add(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>) {
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %ninf = tsr.constant dense<0xFF800000> : tensor<2x4x4x4xf32>
  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %zero = tsr.constant dense<-0.0> : tensor<2x1x1x4xf32>
  %pad = tsr.constant dense<[[[[0.0, 0.0, 0.0, -3.40282347E+38]]], [[[0.0, 0.0, 0.0, -3.40282347E+38]]]]> : tensor<2x1x1x4xf32>
  %c = tsr.constant dense<2.0> : tensor<2x4x4x4xf32>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>

  %s1 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %ss1 = tsr.div %s1, %c : tensor<2x4x4x4xf32>
  %sel1 = tsr.select %kb, %ss1, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %zb = tsr.broadcast %zero : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
  %a1 = tsr.add %sel1, %zb : tensor<2x4x4x4xf32>
  %p1 = tsr.softmax %a1 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o1 = tsr.matmul %p1, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %s2 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %ss2 = tsr.div %s2, %c : tensor<2x4x4x4xf32>
  %sel2 = tsr.select %kb, %ss2, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %pb = tsr.broadcast %pad : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
  %a2 = tsr.add %pb, %sel2 : tensor<2x4x4x4xf32>
  %p2 = tsr.softmax %a2 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o2 = tsr.matmul %p2, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %s3 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %ss3 = tsr.div %s3, %c : tensor<2x4x4x4xf32>
  %zb3 = tsr.broadcast %zero : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
  %a3 = tsr.add %ss3, %zb3 : tensor<2x4x4x4xf32>
  %sel3 = tsr.select %kb, %a3, %ninf : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p3 = tsr.softmax %sel3 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o3 = tsr.matmul %p3, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o1, %o2, %o3 : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>
}

// Near misses of the select + add form, not raised: (1) the extended mask is
// a runtime value per sample ([B, 1, 1, S], tsr.attention's mask is one
// [Sq, Sk] for every sample); (2) a scale between the select and the add
// (it would scale the fill); (3) the select's fill is 0, not a dropping
// value; (4) the softmax runs over the query axis.
// CHECK-LABEL: func.func @gpt2_select_add_not_raised
// CHECK-NOT: tsr.attention
// CHECK: return
func.func @gpt2_select_add_not_raised(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>, %am: tensor<2x1x1x4xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>) {
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %zerof = tsr.constant dense<0.0> : tensor<2x4x4x4xf32>
  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %zero = tsr.constant dense<0.0> : tensor<2x1x1x4xf32>
  %c = tsr.constant dense<2.0> : tensor<2x4x4x4xf32>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>

  %s1 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %sel1 = tsr.select %kb, %s1, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %amb = tsr.broadcast %am : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
  %a1 = tsr.add %sel1, %amb : tensor<2x4x4x4xf32>
  %p1 = tsr.softmax %a1 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o1 = tsr.matmul %p1, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %s2 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %sel2 = tsr.select %kb, %s2, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %ss2 = tsr.div %sel2, %c : tensor<2x4x4x4xf32>
  %zb = tsr.broadcast %zero : tensor<2x1x1x4xf32> -> tensor<2x4x4x4xf32>
  %a2 = tsr.add %ss2, %zb : tensor<2x4x4x4xf32>
  %p2 = tsr.softmax %a2 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o2 = tsr.matmul %p2, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %s3 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %sel3 = tsr.select %kb, %s3, %zerof : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p3 = tsr.softmax %sel3 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o3 = tsr.matmul %p3, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %s4 = tsr.matmul %q, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %sel4 = tsr.select %kb, %s4, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p4 = tsr.softmax %sel4 {axis = 2 : i64} : tensor<2x4x4x4xf32>
  %o4 = tsr.matmul %p4, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o1, %o2, %o3, %o4 : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>
}

// The scale on both Q and K (Q·d^-¼ and K·d^-¼, the original GPT-2 and
// Whisper code): K scaled before its transpose (1) or Kᵀ scaled (2); the
// product of every constant factor is the op's scale.
// CHECK-LABEL: func.func @scaled_q_and_k
// CHECK-NEXT: %[[O1:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 2.500000e-01 : f32}
// CHECK-NEXT: %[[O2:.*]], %{{.*}} = tsr.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f32}
// CHECK-NEXT: return %[[O1]], %[[O2]]
func.func @scaled_q_and_k(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>) {
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>
  %half = tsr.constant dense<0.5> : tensor<2x4x4x2xf32>
  %two = tsr.constant dense<2.0> : tensor<2x4x4x2xf32>
  %halft = tsr.constant dense<0.5> : tensor<2x4x2x4xf32>
  %cs = tsr.constant dense<0.5> : tensor<2x4x4x4xf32>

  %q1 = tsr.mul %q, %half : tensor<2x4x4x2xf32>
  %k1 = tsr.div %k, %two : tensor<2x4x4x2xf32>
  %kt1 = tsr.transpose %k1 {permutation = array<i64: 0, 1, 3, 2>} : tensor<2x4x4x2xf32> -> tensor<2x4x2x4xf32>
  %s1 = tsr.matmul %q1, %kt1 : tensor<2x4x4x2xf32>, tensor<2x4x2x4xf32> -> tensor<2x4x4x4xf32>
  %m1 = tsr.select %kb, %s1, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p1 = tsr.softmax %m1 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o1 = tsr.matmul %p1, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %q2 = tsr.mul %half, %q : tensor<2x4x4x2xf32>
  %kt2 = tsr.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<2x4x4x2xf32> -> tensor<2x4x2x4xf32>
  %ks2 = tsr.mul %kt2, %halft : tensor<2x4x2x4xf32>
  %s2 = tsr.matmul %q2, %ks2 : tensor<2x4x4x2xf32>, tensor<2x4x2x4xf32> -> tensor<2x4x4x4xf32>
  %ss2 = tsr.mul %s2, %cs : tensor<2x4x4x4xf32>
  %m2 = tsr.select %kb, %ss2, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p2 = tsr.softmax %m2 {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o2 = tsr.matmul %p2, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o1, %o2 : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32>
}

// A negative scale after a causal mask would turn the dropped keys into the
// largest scores: not raised, even when a negative scale on Q makes the
// product of the factors positive.
// CHECK-LABEL: func.func @negative_scale_after_mask
// CHECK-NOT: tsr.attention
// CHECK: return
func.func @negative_scale_after_mask(%q: tensor<2x4x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> tensor<2x4x4x2xf32> {
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>
  %nq = tsr.constant dense<-1.0> : tensor<2x4x4x2xf32>
  %ns = tsr.constant dense<-1.0> : tensor<2x4x4x4xf32>
  %q1 = tsr.mul %q, %nq : tensor<2x4x4x2xf32>
  %s = tsr.matmul %q1, %k {transpose_rhs = true} : tensor<2x4x4x2xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x4xf32>
  %m = tsr.select %kb, %s, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %n = tsr.mul %m, %ns : tensor<2x4x4x4xf32>
  %p = tsr.softmax %n {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}

// GPT-2's reorder_and_upcast_attn: a [B·H, S, S] baddbmm (0 · empty +
// Q·Kᵀ · c) viewed as [B, H, S, S] for the mask and the softmax: raised with
// Q and K viewed likewise. A view that changes the last two dims (the
// softmax then runs over other keys) is not raised.
// CHECK-LABEL: func.func @gpt2_reorder_view
// CHECK: %[[Q:.*]] = tsr.reshape %arg0 : tensor<8x4x2xf32> -> tensor<2x4x4x2xf32>
// CHECK: %[[K:.*]] = tsr.reshape %arg1 : tensor<8x4x2xf32> -> tensor<2x4x4x2xf32>
// CHECK: tsr.attention %[[Q]], %[[K]], %arg2 {causal = true, scale = 5.000000e-01 : f32}
// CHECK: tsr.softmax %{{.*}} {axis = 3 : i64} : tensor<2x4x2x8xf32>
// CHECK-NOT: tsr.attention
// CHECK: return
func.func @gpt2_reorder_view(%q: tensor<8x4x2xf32>, %k: tensor<8x4x2xf32>, %v: tensor<2x4x4x2xf32>, %v2: tensor<2x4x8x2xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x2x2xf32>) {
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>
  %zeros = tsr.constant dense<0.0> : tensor<8x4x4xf32>
  %c = tsr.constant dense<0.5> : tensor<8x4x4xf32>
  %s = tsr.matmul %q, %k {transpose_rhs = true} : tensor<8x4x2xf32>, tensor<8x4x2xf32> -> tensor<8x4x4xf32>
  %ss = tsr.mul %s, %c : tensor<8x4x4xf32>
  %b = tsr.add %zeros, %ss : tensor<8x4x4xf32>
  %s4 = tsr.reshape %b : tensor<8x4x4xf32> -> tensor<2x4x4x4xf32>
  %m = tsr.select %kb, %s4, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p = tsr.softmax %m {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>

  %t = tsr.matmul %q, %k {transpose_rhs = true} : tensor<8x4x2xf32>, tensor<8x4x2xf32> -> tensor<8x4x4xf32>
  %t4 = tsr.reshape %t : tensor<8x4x4xf32> -> tensor<2x4x2x8xf32>
  %p2 = tsr.softmax %t4 {axis = 3 : i64} : tensor<2x4x2x8xf32>
  %o2 = tsr.matmul %p2, %v2 : tensor<2x4x2x8xf32>, tensor<2x4x8x2xf32> -> tensor<2x4x2x2xf32>
  return %o, %o2 : tensor<2x4x4x2xf32>, tensor<2x4x2x2xf32>
}

// The reorder form as transformers writes it: Kᵀ [B, H, Dh, S] (a transpose
// of K) reshaped to [B·H, Dh, S]: K is read before the reshape and the two
// transposes cancel, so the op reads K itself (no transpose back).
// CHECK-LABEL: func.func @gpt2_reorder_kt_view
// CHECK-NEXT: %[[Q:.*]] = tsr.reshape %arg0 : tensor<8x4x2xf32> -> tensor<2x4x4x2xf32>
// CHECK-NEXT: %[[O:.*]], %{{.*}} = tsr.attention %[[Q]], %arg1, %arg2 {causal = true, scale = 5.000000e-01 : f32}
// CHECK-NEXT: return %[[O]]
func.func @gpt2_reorder_kt_view(%q: tensor<8x4x2xf32>, %k: tensor<2x4x4x2xf32>, %v: tensor<2x4x4x2xf32>) -> tensor<2x4x4x2xf32> {
  %min = tsr.constant dense<-3.40282347E+38> : tensor<2x4x4x4xf32>
  %keep = tsr.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %kb = tsr.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x4x4x4xi1>
  %c = tsr.constant dense<0.5> : tensor<8x4x4xf32>
  %kt = tsr.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<2x4x4x2xf32> -> tensor<2x4x2x4xf32>
  %kt3 = tsr.reshape %kt : tensor<2x4x2x4xf32> -> tensor<8x2x4xf32>
  %s = tsr.matmul %q, %kt3 : tensor<8x4x2xf32>, tensor<8x2x4xf32> -> tensor<8x4x4xf32>
  %ss = tsr.mul %s, %c : tensor<8x4x4xf32>
  %s4 = tsr.reshape %ss : tensor<8x4x4xf32> -> tensor<2x4x4x4xf32>
  %m = tsr.select %kb, %s4, %min : tensor<2x4x4x4xi1>, tensor<2x4x4x4xf32>
  %p = tsr.softmax %m {axis = 3 : i64} : tensor<2x4x4x4xf32>
  %o = tsr.matmul %p, %v : tensor<2x4x4x4xf32>, tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}

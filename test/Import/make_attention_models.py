#!/usr/bin/python3
"""Writes small ONNX attention models in the forms Hugging Face's eager
attention takes, for test/Import/attention_numeric.test.

    make_attention_models.py OUTDIR

Inputs q, k, v float32 [B=2, H=2, S=8, D=4]; output o [2, 2, 8, 4].
- gpt2_attn_mask: GPT-2 (transformers 4.49) given an attention mask:
  Where(tril, q·kᵀ / sqrt(D), finfo.min) + the extended mask [B, 1, 1, S]
  (the same for both samples: the last two keys padded, finfo.min), softmax.
  The padded keys above the diagonal add finfo.min twice: -inf in f32.
- qk_scaled: q and k each multiplied by D^-1/4 (k before its transpose),
  Where(tril, q·kᵀ, -inf), softmax.
- gpt2_reorder: GPT-2's reorder_and_upcast_attn: the scores a
  [B·H, S, S] baddbmm (0 · empty + q·kᵀ · D^-1/2), viewed as [B, H, S, S]
  for Where(tril, ·, finfo.min) and the softmax.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
B, H, S, D = 2, 2, 8, 4
FMIN = np.finfo(np.float32).min


def const(name, value):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.asarray(value),
                                                          name))


def model(name, nodes):
    io = lambda n: helper.make_tensor_value_info(n, F, [B, H, S, D])  # noqa
    graph = helper.make_graph(nodes, name, [io("q"), io("k"), io("v")],
                              [io("o")])
    m = helper.make_model(graph, producer_name="make_attention_models.py",
                          opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def tril():
    return np.tril(np.ones((S, S), bool)).reshape(1, 1, S, S)


def cases():
    ext = np.zeros((B, 1, 1, S), np.float32)
    ext[..., -2:] = FMIN
    yield "gpt2_attn_mask", model("gpt2_attn_mask", [
        const("tril", tril()), const("fmin", np.float32(FMIN)),
        const("sqrt_d", np.float32(np.sqrt(D))), const("ext", ext),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Div", ["s", "sqrt_d"], ["ss"]),
        helper.make_node("Where", ["tril", "ss", "fmin"], ["sm"]),
        helper.make_node("Add", ["sm", "ext"], ["sa"]),
        helper.make_node("Softmax", ["sa"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"])])
    quarter = np.float32(D ** -0.25)
    yield "qk_scaled", model("qk_scaled", [
        const("tril", tril()), const("ninf", np.float32(-np.inf)),
        const("c", quarter),
        helper.make_node("Mul", ["q", "c"], ["qs"]),
        helper.make_node("Mul", ["k", "c"], ["ks"]),
        helper.make_node("Transpose", ["ks"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["qs", "kt"], ["s"]),
        helper.make_node("Where", ["tril", "s", "ninf"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"])])


    yield "gpt2_reorder", model("gpt2_reorder", [
        const("tril", tril()), const("fmin", np.float32(FMIN)),
        const("alpha", np.float32(D ** -0.5)),
        const("zeros", np.zeros((B * H, S, S), np.float32)),
        const("shape3", np.array([B * H, S, D], np.int64)),
        const("shape4", np.array([B, H, S, S], np.int64)),
        helper.make_node("Reshape", ["q", "shape3"], ["q3"]),
        helper.make_node("Reshape", ["k", "shape3"], ["k3"]),
        helper.make_node("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q3", "kt3"], ["s3"]),
        helper.make_node("Mul", ["s3", "alpha"], ["ss3"]),
        helper.make_node("Add", ["zeros", "ss3"], ["b3"]),
        helper.make_node("Reshape", ["b3", "shape4"], ["s4"]),
        helper.make_node("Where", ["tril", "s4", "fmin"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"])])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, m in cases():
        onnx.save(m, os.path.join(out, name + ".onnx"))


if __name__ == "__main__":
    main()

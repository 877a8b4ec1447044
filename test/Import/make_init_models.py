#!/usr/bin/python3
"""Writes ONNX models for the importer's initializer rules
(compiler/import/Initializers.h) and its external-data reader.

    make_init_models.py OUTDIR

rules.onnx — a tiny LM over int64 tokens [2, 4] whose initializers hit every
rule, in the forms PyTorch's exporters write them:
  emb       [8, 6]  embedding table (Gather)                  -> trained
  emb_t     [6, 8]  emb transposed (folded Transpose, tied)   -> tied to emb
  w         [6, 6]  MatMul weight                             -> trained
  ln_w      [6]     ones, scale of the first norm             -> trained
  ln_w2     Identity(ln_w), scale of the second norm          -> alias, trained
  zero_b    [6]     zeros read by two Adds (merged biases)    -> untied into 2
  eps       []      scalar                                    -> constant
  inv_freq  [1, 3]  MatMul with Range positions, then Cos     -> constant
  mask      [4, 4]  0 / -3.4e38 added to the scores           -> constant
  table     [4, 6]  multiplies the activations                -> constant
  tt        [2, 4, 6] one row repeated, added (folded lookup) -> trained [1, 1, 6]

external/ — the same tiny model with its weights in external data:
  good.onnx + good.onnx.data       (offsets, lengths: imports)
  inline.onnx                      (the same weights inline, to compare)
  missing.onnx                     (location names no file)
  short.onnx + short.onnx.data     (file shorter than offset + length)
  escape.onnx                      (location ../outside.data)
  absolute.onnx                    (location /etc/hostname)
  badoffset.onnx                   (offset "ten")
  badlength.onnx                   (length differs from the tensor's size)
  fifo.onnx + fifo.data            (the location is a FIFO)
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# The helpers of the op models (same folder).
from make_op_models import const, init, vi  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def save(m, path):
    m.ir_version = 8
    onnx.save(m, path)


def rules_model():
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((8, 6)).astype(np.float32)
    row = rng.standard_normal(6).astype(np.float32)
    mask = np.triu(np.full((4, 4), -3.4028234663852886e38, np.float32), 1)
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["h0"], name="lookup"),
        helper.make_node("Add", ["h0", "tt"], ["h1"], name="add_tt"),
        # norm 1: x * ln_w (+ zero_b), the exporters' decomposed form
        helper.make_node("Mul", ["h1", "ln_w"], ["n1"], name="norm1_scale"),
        helper.make_node("Add", ["n1", "zero_b"], ["n1b"], name="norm1_bias"),
        helper.make_node("MatMul", ["n1b", "w"], ["h2"], name="proj"),
        helper.make_node("Add", ["h2", "eps"], ["h3"], name="add_eps"),
        # positions -> rotary-like angles from inv_freq, folded
        const("start", np.array(0, np.int64)),
        const("limit", np.array(4, np.int64)),
        const("delta", np.array(1, np.int64)),
        helper.make_node("Range", ["start", "limit", "delta"], ["pos"],
                         name="range"),
        helper.make_node("Cast", ["pos"], ["posf"], name="cast", to=F),
        const("ax", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["posf", "ax"], ["pcol"], name="unsq"),
        helper.make_node("MatMul", ["pcol", "inv_freq"], ["ang"],
                         name="angles"),
        helper.make_node("Cos", ["ang"], ["cos3"], name="cos"),
        helper.make_node("Concat", ["cos3", "cos3"], ["cos6"], name="cat",
                         axis=-1),
        helper.make_node("Mul", ["h3", "cos6"], ["h4"], name="rotate"),
        helper.make_node("Mul", ["h4", "table"], ["h5"], name="scale_table"),
        # attention-like scores with an additive causal mask
        helper.make_node("Transpose", ["h5"], ["h5t"], name="kt",
                         perm=[0, 2, 1]),
        helper.make_node("MatMul", ["h5", "h5t"], ["s"], name="scores"),
        helper.make_node("Add", ["s", "mask"], ["sm"], name="add_mask"),
        helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "h5"], ["o"], name="pv"),
        # norm 2 with the de-duplicated alias of ln_w and the merged bias
        helper.make_node("Identity", ["ln_w"], ["ln_w2"], name="dedup"),
        helper.make_node("Mul", ["o", "ln_w2"], ["n2"], name="norm2_scale"),
        helper.make_node("Add", ["n2", "zero_b"], ["n2b"], name="norm2_bias"),
        helper.make_node("MatMul", ["n2b", "emb_t"], ["logits"],
                         name="lm_head"),
    ]
    inits = [
        init("emb", emb), init("emb_t", emb.T.copy()),
        init("w", rng.standard_normal((6, 6))),
        init("ln_w", np.ones(6)), init("zero_b", np.zeros(6)),
        init("eps", 1e-5), init("inv_freq", [[1.0, 0.1, 0.01]]),
        init("mask", mask), init("table", rng.standard_normal((4, 6))),
        init("tt", np.broadcast_to(row, (2, 4, 6)).copy()),
    ]
    graph = helper.make_graph(nodes, "rules", [vi("tokens", I64, [2, 4])],
                              [vi("logits", F, [2, 4, 8])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def small_model():
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["h"], name="lookup"),
        helper.make_node("MatMul", ["h", "w"], ["logits"], name="head"),
    ]
    inits = [init("emb", rng.standard_normal((8, 4))),
             init("w", rng.standard_normal((4, 8)))]
    graph = helper.make_graph(nodes, "small", [vi("tokens", I64, [2, 3])],
                              [vi("logits", F, [2, 3, 8])], inits)
    return helper.make_model(graph,
                             opset_imports=[helper.make_opsetid("", 17)])


def externalize(m, data_name, entries):
    """Moves every initializer to external data; `entries(i, name, nbytes,
    offset)` returns the key/value pairs written for initializer i."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    blob = b""
    for i, t in enumerate(m.graph.initializer):
        raw = numpy_helper.to_array(t).tobytes()
        blob += b"\0" * (-len(blob) % 16)  # 16-byte aligned, like torch
        offset = len(blob)
        blob += raw
        t.ClearField("float_data")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in entries(i, t.name, len(raw), offset):
            e = t.external_data.add()
            e.key, e.value = k, v
    return m, blob


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    save(rules_model(), os.path.join(out, "rules.onnx"))

    ext = os.path.join(out, "external")
    os.makedirs(ext, exist_ok=True)
    base = small_model()
    save(base, os.path.join(ext, "inline.onnx"))

    def std(data):
        return lambda i, n, size, off: [("location", data),
                                        ("offset", str(off)),
                                        ("length", str(size))]

    m, blob = externalize(base, "good.onnx.data", std("good.onnx.data"))
    save(m, os.path.join(ext, "good.onnx"))
    with open(os.path.join(ext, "good.onnx.data"), "wb") as f:
        f.write(blob)

    m, _ = externalize(base, "", std("no_such.data"))
    save(m, os.path.join(ext, "missing.onnx"))

    m, blob = externalize(base, "", std("short.onnx.data"))
    save(m, os.path.join(ext, "short.onnx"))
    with open(os.path.join(ext, "short.onnx.data"), "wb") as f:
        f.write(blob[:-5])

    m, blob = externalize(base, "", std("../outside.data"))
    save(m, os.path.join(ext, "escape.onnx"))
    with open(os.path.join(out, "outside.data"), "wb") as f:
        f.write(blob)

    m, _ = externalize(base, "", std("/etc/hostname"))
    save(m, os.path.join(ext, "absolute.onnx"))

    m, _ = externalize(base, "", lambda i, n, size, off: [
        ("location", "good.onnx.data"), ("offset", "ten")])
    save(m, os.path.join(ext, "badoffset.onnx"))

    m, _ = externalize(base, "", lambda i, n, size, off: [
        ("location", "good.onnx.data"), ("offset", str(off)),
        ("length", str(size + 4))])
    save(m, os.path.join(ext, "badlength.onnx"))

    m, _ = externalize(base, "", std("fifo.data"))
    save(m, os.path.join(ext, "fifo.onnx"))
    fifo = os.path.join(ext, "fifo.data")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes a GPT-shaped ONNX model of any size, by default WITHOUT weights.

    make_gpt_onnx.py [--layers L] [--hidden H] [--heads A] [--seq S]
                     [--vocab V] [--batch B] [--ffn F] [--opset 17]
                     [--weight-free-as inputs|initializers]
                     [--with-weights [--seed N]] -o OUT.onnx

Defaults are GPT-3 175B's shape (Brown et al. 2020): 96 layers, hidden
12288, 96 heads, sequence 2048, vocabulary 51200 (50257 padded), FFN 4 x
hidden; batch 1536 sequences (3.2M tokens). That is 175 billion parameters,
which no one can hold in memory here: the graph is built with onnx.helper
directly and never allocates the weights (the file is a few MB, mostly the
causal mask). Tessera plans such a file from its shapes alone (see
compiler/import/OnnxImporter.h, "Weight-free models"):

    make_gpt_onnx.py -o gpt3.onnx
    tessera-partition gpt3.onnx --dp 8 --tp 8 --explain

The graph is, node for node, what examples/gpt/export.py writes for
model.py's ``HandwrittenGPT`` (config ``handwritten``, opset 17): the same
parameter names (``tok_emb.weight``, ``pos_emb``, ``blocks.N.ln_1.weight``,
``blocks.N.attn.c_attn.weight`` [3H, H], ..., ``head.weight`` [V, H]) in
PyTorch layout, the same node names and op pattern, so that Tessera's
importer raises it the same way (LayerNormalization -> tsr.layer_norm; the
fused QKV MatMul + Split, [B, H, S, Dh] attention with the Where form of
the causal mask -> tsr.attention; the erf GELU -> tsr.gelu):

    tokens int64 [B, S] -> Gather(tok_emb.weight) + pos_emb
    per layer (pre-LN): x + c_proj(attn(ln_1(x))), then
                        x + mlp_proj(gelu(c_fc(ln_2(x))))
    ln_f -> head (Linear H -> V with bias) -> logits float32 [B, S, V]

test/e2e/generated_gpt.py checks that at the ``handwritten`` sizes the
import of this file equals the import of the exported model.

Weight-free forms (--weight-free-as):
  inputs        the parameters are graph inputs after ``tokens``, with no
                initializer: what torch.onnx.export(..., export_params=False)
                writes (default);
  initializers  the parameters are initializers with their dims and an
                empty raw_data (a shapes-only file).

--with-weights (small sizes only) writes the parameters as initializers
holding seeded random values instead (N(0, 0.02) weights and biases,
LayerNorm scales 1 + N(0, 0.02)), in state_dict order, so that the model
can be trained by tessera-partition + tessera-run or loaded into
``HandwrittenGPT`` with ``load_state_dict``.

The causal mask, a bool [S, S] constant, is one Constant node shared by all
layers (the exporter repeats it per layer; at S = 2048 that would be 4 MiB
per layer).
"""

import argparse
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GPT3_175B = dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200,
                 batch=1536)


def param_shapes(L, H, F, S, V):
    """(name, shape) of every parameter, in HandwrittenGPT's state_dict
    order."""
    out = [("pos_emb", [S, H]), ("tok_emb.weight", [V, H])]
    for i in range(L):
        p = f"blocks.{i}."
        out += [(p + "ln_1.weight", [H]), (p + "ln_1.bias", [H]),
                (p + "attn.c_attn.weight", [3 * H, H]),
                (p + "attn.c_attn.bias", [3 * H]),
                (p + "attn.c_proj.weight", [H, H]),
                (p + "attn.c_proj.bias", [H]),
                (p + "ln_2.weight", [H]), (p + "ln_2.bias", [H]),
                (p + "c_fc.weight", [F, H]), (p + "c_fc.bias", [F]),
                (p + "mlp_proj.weight", [H, F]), (p + "mlp_proj.bias", [H])]
    out += [("ln_f.weight", [H]), ("ln_f.bias", [H]),
            ("head.weight", [V, H]), ("head.bias", [V])]
    return out


class Graph:
    """Accumulates nodes with the exporter's naming (/scope/Op_k)."""

    def __init__(self):
        self.nodes = []
        self.counts = {}

    def node(self, scope, op, inputs, outputs=None, nout=1, **attrs):
        k = self.counts.get((scope, op), 0)
        self.counts[(scope, op)] = k + 1
        name = f"{scope}/{op}" + (f"_{k}" if k else "")
        if outputs is None:
            outputs = [f"{name}_output_{j}" for j in range(nout)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name,
                                           **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def const(self, scope, value):
        return self.node(scope, "Constant", [], value=numpy_helper.from_array(
            np.asarray(value), ""))


def build(L, H, A, S, V, B, F, opset=17, weights=None, weight_free_as="inputs"):
    """The ModelProto. `weights`: dict name -> float32 array, or None."""
    if H % A:
        raise ValueError(f"--hidden {H} is not divisible by --heads {A}")
    Dh = H // A
    g = Graph()
    shapes = param_shapes(L, H, F, S, V)

    # Linear weights are used transposed: /<name>/Transpose first, in order.
    linear = [n for n, _ in shapes if n.endswith(("c_attn.weight",
                                                   "c_proj.weight",
                                                   "c_fc.weight",
                                                   "mlp_proj.weight"))]
    linear.append("head.weight")
    for n in linear:
        g.node(f"/{n}", "Transpose", [n], outputs=[n + "_T"], perm=[1, 0])

    def linear_(scope, x, name):
        y = g.node(scope, "MatMul", [x, name + ".weight_T"])
        return g.node(scope, "Add", [name + ".bias", y])

    def layer_norm(scope, x, name):
        return g.node(scope, "LayerNormalization",
                      [x, name + ".weight", name + ".bias"], axis=-1,
                      epsilon=1e-5)

    x = g.node("/tok_emb", "Gather", ["tok_emb.weight", "tokens"])
    x = g.node("", "Add", [x, "pos_emb"])
    mask = None
    for i in range(L):
        blk = f"/blocks.{i}"
        p = f"blocks.{i}."
        h = layer_norm(f"{blk}/ln_1", x, p + "ln_1")
        qkv = linear_(f"{blk}/attn/c_attn", h, p + "attn.c_attn")
        att = f"{blk}/attn"
        split = g.const(att, np.array([H, H, H], np.int64))
        q, k, v = g.node(att, "Split", [qkv, split], nout=3, axis=2)
        heads = [g.const(att, np.array([B, S, A, Dh], np.int64))
                 for _ in range(3)]
        q = g.node(att, "Reshape", [q, heads[0]], allowzero=0)
        q = g.node(att, "Transpose", [q], perm=[0, 2, 1, 3])
        k = g.node(att, "Reshape", [k, heads[1]], allowzero=0)
        v = g.node(att, "Reshape", [v, heads[2]], allowzero=0)
        v = g.node(att, "Transpose", [v], perm=[0, 2, 1, 3])
        k = g.node(att, "Transpose", [k], perm=[0, 2, 3, 1])
        s = g.node(att, "MatMul", [q, k])
        scale = g.const(att, np.array(1.0 / math.sqrt(Dh), np.float32))
        s = g.node(att, "Mul", [s, scale])
        if mask is None:  # one causal mask for every layer
            mask = g.const(att, ~np.tril(np.ones((S, S), bool)))
        else:
            g.counts[(att, "Constant")] += 1  # keep the exporter's numbering
        ninf = g.const(att, np.array(-np.inf, np.float32))
        s = g.node(att, "Where", [mask, ninf, s])
        pr = g.node(att, "Softmax", [s], axis=-1)
        o = g.node(att, "MatMul", [pr, v])
        o = g.node(att, "Transpose", [o], perm=[0, 2, 1, 3])
        merged = g.const(att, np.array([B, S, H], np.int64))
        o = g.node(att, "Reshape", [o, merged], allowzero=0)
        o = linear_(f"{att}/c_proj", o, p + "attn.c_proj")
        x = g.node(blk, "Add", [x, o])
        h = layer_norm(f"{blk}/ln_2", x, p + "ln_2")
        h = linear_(f"{blk}/c_fc", h, p + "c_fc")
        act = f"{blk}/act"
        d = g.node(act, "Div", [h, g.const(act, np.array(math.sqrt(2.0),
                                                          np.float32))])
        e = g.node(act, "Erf", [d])
        e = g.node(act, "Add", [e, g.const(act, np.array(1.0, np.float32))])
        m = g.node(act, "Mul", [h, e])
        m = g.node(act, "Mul", [m, g.const(act, np.array(0.5, np.float32))])
        m = linear_(f"{blk}/mlp_proj", m, p + "mlp_proj")
        x = g.node(blk, "Add", [x, m])
    x = layer_norm("/ln_f", x, "ln_f")
    y = g.node("/head", "MatMul", [x, "head.weight_T"])
    g.node("/head", "Add", ["head.bias", y], outputs=["logits"])

    inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT64,
                                            [B, S])]
    inits = []
    for name, shape in shapes:
        if weights is not None:
            inits.append(numpy_helper.from_array(weights[name], name))
        elif weight_free_as == "inputs":
            inputs.append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, shape))
        else:
            t = TensorProto(name=name, data_type=TensorProto.FLOAT,
                            dims=shape)
            t.raw_data = b""  # present but empty: no values
            inits.append(t)
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             [B, S, V])]
    graph = helper.make_graph(g.nodes, "main_graph", inputs, outputs, inits)
    model = helper.make_model(
        graph, producer_name="tessera make_gpt_onnx.py",
        opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model.doc_string = (f"GPT-shaped model: layers {L}, hidden {H}, heads {A}, "
                        f"seq {S}, vocab {V}, batch {B}, ffn {F}; "
                        + ("with random weights" if weights is not None
                           else "weight-free"))
    return model


def random_weights(L, H, F, S, V, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(L, H, F, S, V):
        w = rng.standard_normal(shape).astype(np.float32) * np.float32(0.02)
        if ".ln_" in name or name.startswith("ln_f"):
            if name.endswith(".weight"):
                w = w + np.float32(1.0)
        out[name] = w
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    d = GPT3_175B
    ap.add_argument("--layers", type=int, default=d["layers"])
    ap.add_argument("--hidden", type=int, default=d["hidden"])
    ap.add_argument("--heads", type=int, default=d["heads"])
    ap.add_argument("--seq", type=int, default=d["seq"])
    ap.add_argument("--vocab", type=int, default=d["vocab"])
    ap.add_argument("--batch", type=int, default=d["batch"])
    ap.add_argument("--ffn", type=int, help="default: 4 x --hidden")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--weight-free-as", choices=["inputs", "initializers"],
                    default="inputs")
    ap.add_argument("--with-weights", action="store_true",
                    help="random initializers (small sizes only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    F = a.ffn or 4 * a.hidden
    for k in ("layers", "hidden", "heads", "seq", "vocab", "batch"):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be positive")
    if a.hidden % a.heads:
        ap.error(f"--hidden {a.hidden} is not divisible by --heads {a.heads}")
    nparams = sum(int(np.prod(s)) for _, s in
                  param_shapes(a.layers, a.hidden, F, a.seq, a.vocab))
    weights = None
    if a.with_weights:
        if nparams > 1 << 28:
            ap.error(f"--with-weights: {nparams} parameters is too many to "
                     "initialise here (limit 2^28)")
        weights = random_weights(a.layers, a.hidden, F, a.seq, a.vocab, a.seed)
    model = build(a.layers, a.hidden, a.heads, a.seq, a.vocab, a.batch, F,
                  a.opset, weights, a.weight_free_as)
    if weights is not None or a.weight_free_as == "inputs":
        # (the checker rejects initializers without values)
        onnx.checker.check_model(model)
    onnx.save(model, a.output)
    print(f"{a.output}: {nparams:,} parameters "
          f"({'random' if weights is not None else 'weight-free, as ' + a.weight_free_as}), "
          f"{len(model.graph.node)} nodes, {model.ByteSize():,} bytes")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Exports a named GPT config (examples/gpt/model.py) to ONNX for Tessera.

    export.py --config NAME [--opset N] [-o OUT.onnx]
    export.py --all            # every config in CONFIGS to its default path

The export uses torch.onnx.export with STATIC shapes: input ``tokens`` int64
[B, S], output ``logits`` float32 [B, S, V], opset from the config unless
--opset is given, export_params=True, do_constant_folding=True. The module is
exported in eval mode (so no Dropout nodes) with grad enabled and with
torch's fused fast paths (``_transformer_encoder_layer_fwd``,
``_native_multi_head_attention``) trapped, so only primitive ONNX ops appear.

The exporter's output is then post-processed so that **the initializers are
exactly the trainable parameters**, one per ``state_dict`` entry, with the
PyTorch name, shape and layout:

* torch's value-based initializer de-duplication (eval mode) replaces
  parameters that happen to hold equal values (every LayerNorm weight is 1,
  every attention bias is 0) by ``Identity`` nodes; these are undone, so no
  two parameters are tied.
* constant folding turns ``Transpose(W)`` of a Linear weight into an anonymous
  initializer ``onnx::MatMul_N`` holding W^T; these are replaced by the named
  parameter W ([out, in], as in PyTorch) followed by a ``Transpose`` node.
* every other folded constant (reshape shapes, slice bounds, the causal mask,
  scalars) becomes a ``Constant`` node, so nothing but parameters is an
  initializer.

Finally it checks the result (onnx.checker, static shapes, default domain
only, no Dropout/ATen, initializers == state_dict bit for bit, and logits of
a small torch-backed ONNX interpreter == PyTorch's logits) and prints the
op-type histogram.
"""

import argparse
import collections
import io
import os
import sys

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import CONFIGS, build_model, get_config  # noqa: E402
import onnx_eval  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class _FastPathTrap:
    """Makes torch's fused transformer kernels raise while exporting."""

    NAMES = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention")

    def __enter__(self):
        self.saved = {}
        for name in self.NAMES:
            if hasattr(torch, name):
                self.saved[name] = getattr(torch, name)

                def trap(*args, _name=name, **kwargs):
                    raise RuntimeError(f"fast path torch.{_name} was taken; "
                                       "the export would not be primitive ops")
                setattr(torch, name, trap)
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(torch, name, fn)
        return False


def torch_export(model, cfg, opset):
    """Runs torch.onnx.export and returns the loaded ModelProto."""
    model.eval()  # dropout=0 anyway; eval mode emits no Dropout nodes
    tokens = torch.zeros(cfg["batch"], cfg["seq"], dtype=torch.int64)
    buf = io.BytesIO()
    with torch.enable_grad(), _FastPathTrap():
        torch.onnx.export(model, (tokens,), buf, export_params=True,
                          opset_version=opset, do_constant_folding=True,
                          input_names=["tokens"], output_names=["logits"])
    return onnx.load_from_string(buf.getvalue())


def _params(model):
    return {k: v.detach().cpu().numpy().copy()
            for k, v in model.state_dict().items()}


def postprocess(proto, params):
    """Makes initializers == params (see module docstring). In place."""
    g = proto.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    front = []   # nodes that must come first (Constant, weight Transpose)
    rename = {}  # value name -> new value name

    # 1. Undo de-duplication: Identity(initializer) -> its own initializer.
    keep = []
    for n in g.node:
        if n.op_type == "Identity" and n.input[0] in inits:
            inits[n.output[0]] = inits[n.input[0]].copy()
        else:
            keep.append(n)

    # 2. Folded Linear-weight transposes -> named parameter + Transpose node.
    for name in [k for k in inits if k not in params]:
        v = inits[name]
        if v.ndim != 2 or v.dtype != np.float32:
            continue
        hits = [p for p, w in params.items() if p not in inits and
                w.shape == v.T.shape and np.array_equal(w, v.T)]
        if len(hits) > 1:
            raise RuntimeError(f"{name}: ambiguous transposed parameter {hits}")
        if hits:
            p = hits[0]
            inits[p] = params[p]
            del inits[name]
            rename[name] = p + "_T"
            front.append(helper.make_node("Transpose", [p], [p + "_T"],
                                          name=f"/{p}/Transpose", perm=[1, 0]))

    # 3. Remaining non-parameter initializers -> Constant nodes.
    for name in [k for k in inits if k not in params]:
        new = rename.get(name, name)
        front.insert(0, helper.make_node(
            "Constant", [], [new], name=f"/Constant_{new}",
            value=numpy_helper.from_array(inits.pop(name), new)))

    missing = sorted(set(params) - set(inits))
    if missing:
        raise RuntimeError(f"parameters not found among initializers: {missing}")

    for n in keep:
        for i, x in enumerate(n.input):
            if x in rename:
                n.input[i] = rename[x]
    del g.node[:]
    g.node.extend(front + keep)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(params[p], p)
                         for p in params)  # state_dict order
    names = {x.name for x in g.value_info}
    if names & set(rename):
        keep_vi = [x for x in g.value_info if x.name not in rename]
        del g.value_info[:]
        g.value_info.extend(keep_vi)
    return proto


def histogram(proto):
    return collections.Counter(n.op_type for n in proto.graph.node)


def check(proto, model, cfg):
    """Raises if the exported model breaks any of our export rules."""
    onnx.checker.check_model(proto)
    g = proto.graph
    hist = histogram(proto)
    bad = [n for n in g.node if n.domain not in ("", "ai.onnx")]
    if bad:
        raise RuntimeError(f"non-default-domain ops: {[n.op_type for n in bad]}")
    for op in ("Dropout", "ATen", "PythonOp"):
        if hist.get(op):
            raise RuntimeError(f"{op} nodes present")
    assert [i.name for i in g.input] == ["tokens"], [i.name for i in g.input]
    assert [o.name for o in g.output] == ["logits"], [o.name for o in g.output]

    def dims(vi):
        return [d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in vi.type.tensor_type.shape.dim]
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    assert g.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert dims(g.input[0]) == [B, S], dims(g.input[0])
    assert g.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert dims(g.output[0]) == [B, S, V], dims(g.output[0])

    params = _params(model)
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    assert list(inits) == list(params), "initializers != state_dict"
    for k, w in params.items():
        assert inits[k].shape == w.shape and np.array_equal(inits[k], w), k

    # Numerics: a torch-backed ONNX interpreter vs the module itself.
    gen = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, V, (B, S), generator=gen)
    with torch.no_grad():
        want = model.eval()(tokens).numpy()
    got = onnx_eval.run_model(proto, {"tokens": tokens.numpy()})["logits"]
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    if not err <= 1e-5:
        raise RuntimeError(f"ONNX interpreter logits differ from torch: {err}")
    return err


def export(name, opset=None, out=None, quiet=False):
    cfg = get_config(name)
    opset = opset or cfg["opset"]
    out = out or os.path.join(REPO_ROOT, cfg["out"])
    model = build_model(cfg)
    proto = postprocess(torch_export(model, cfg, opset), _params(model))
    err = check(proto, model, cfg)
    proto.doc_string = (f"Tessera examples/gpt/model.py config {name!r}, "
                        f"exported by examples/gpt/export.py")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    onnx.save(proto, out)
    if not quiet:
        hist = histogram(proto)
        nparams = sum(int(np.prod(i.dims)) for i in proto.graph.initializer)
        print(f"{name}: opset {opset} -> {os.path.relpath(out)} "
              f"({len(proto.graph.node)} nodes, "
              f"{len(proto.graph.initializer)} initializers, "
              f"{nparams} parameters, interpreter rel err {err:.1e})")
        for op, count in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {op:20s} {count}")
    return proto


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS))
    ap.add_argument("--opset", type=int, help="default: the config's opset")
    ap.add_argument("-o", "--output", help="default: the config's path")
    ap.add_argument("--all", action="store_true",
                    help="export every config to its default path")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.all:
        if args.config or args.output or args.opset:
            ap.error("--all takes no --config/--opset/-o")
        for name in CONFIGS:
            export(name)
    elif args.config:
        export(args.config, args.opset, args.output)
    else:
        ap.error("give --config NAME or --all")


if __name__ == "__main__":
    main()

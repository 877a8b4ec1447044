#!/usr/bin/python3
"""Exports a config of examples/gpt/model.py WITHOUT its weights.

    export_weight_free.py --config NAME -o OUT.onnx

torch.onnx.export(..., export_params=False) with examples/gpt/export.py's
settings (static shapes, opset from the config, eval mode, fused fast paths
trapped) but without constant folding, so the parameters become graph
inputs after ``tokens`` with no initializer, under their state_dict names:
the weight-free form Tessera plans from shapes alone. The shape subgraphs
are left for Tessera's importer to fold.

One fix-up: in eval mode the exporter de-duplicates parameters by value
(every LayerNorm weight is 1), replacing each duplicate by an ``Identity`` of
the first; as export.py does, these are undone, here by making each
duplicate a graph input of its own.
"""

import argparse
import os
import sys

import onnx
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
from export import _FastPathTrap  # noqa: E402
from model import CONFIGS, build_model, get_config  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = get_config(args.config)
    model = build_model(cfg).eval()
    tokens = torch.zeros(cfg["batch"], cfg["seq"], dtype=torch.int64)
    with torch.enable_grad(), _FastPathTrap():
        torch.onnx.export(model, (tokens,), args.output, export_params=False,
                          opset_version=cfg["opset"], do_constant_folding=False,
                          input_names=["tokens"], output_names=["logits"])
    proto = onnx.load(args.output)
    g = proto.graph
    inputs = {i.name: i for i in g.input}
    keep = []
    for n in g.node:
        if n.op_type == "Identity" and n.input[0] in inputs:
            dup = onnx.ValueInfoProto()
            dup.CopyFrom(inputs[n.input[0]])
            dup.name = n.output[0]
            g.input.append(dup)
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    # tokens, then the parameters in state_dict order
    by_name = {i.name: i for i in g.input}
    order = ["tokens"] + list(model.state_dict())
    if sorted(by_name) != sorted(order):
        raise SystemExit(f"graph inputs {sorted(by_name)} are not tokens + "
                         f"the state_dict {order}")
    ordered = [by_name[k] for k in order]
    del g.input[:]
    g.input.extend(ordered)
    onnx.checker.check_model(proto)
    onnx.save(proto, args.output)


if __name__ == "__main__":
    main()

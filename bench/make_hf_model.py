#!/usr/bin/env python3
"""Writes a Hugging Face model of the HF fixtures' families at any size, as
ONNX and as its weights (bench/compare.py's real-model peer).

    make_hf_model.py --family gpt2 --config '{"n_layer": 4, ...}'
                     --batch B --seq S -o OUT.onnx --weights OUT.npz

Run in the export-ts venv (scripts/python-env.sh export-ts: Debian's torch
1.13 + transformers 4.49). The model is test/e2e/hf/families.py's
logits-only subclass of the family's HF class with `--config` as its config
(eager attention), initialised as the fixtures are (HF's seeded
initialisation, every all-zero parameter given N(0, 0.02) values:
families.build), exported by the TorchScript exporter at opset 17 (input
`input_ids` int64 [B, S], output `logits`), and its named_parameters (tied
parameters once, HF's names) saved to OUT.npz, from which
bench/torch_peer.py loads the same weights into the PyTorch peers.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e", "hf"))
import families  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="gpt2", choices=sorted(families.FAMILIES))
    ap.add_argument("--config", required=True,
                    help="JSON object of config keyword arguments")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--seed", type=int, default=families.SEED)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--weights", required=True)
    args = ap.parse_args()

    import transformers
    _, cfg_name, _ = families.FAMILIES[args.family]
    cfg = getattr(transformers, cfg_name)(**json.loads(args.config))
    cfg._attn_implementation = "eager"
    torch.manual_seed(args.seed)
    model = families.model_class(args.family)(cfg)
    model.config._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(args.seed + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if not bool(p.any()):
                p.copy_(torch.randn(p.shape, generator=gen) *
                        families.ZERO_INIT_STD)
    model = model.float().eval()
    np.savez(args.weights, **{n: p.detach().numpy()
                              for n, p in model.named_parameters()})
    ids = torch.zeros(args.batch, args.seq, dtype=torch.int64)
    torch.onnx.export(model, (ids,), args.output, opset_version=17,
                      input_names=["input_ids"], output_names=["logits"])
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.output}: {args.family}, {n:,} parameters, "
          f"input [{args.batch}, {args.seq}]")


if __name__ == "__main__":
    main()

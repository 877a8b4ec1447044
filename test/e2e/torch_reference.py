#!/usr/bin/python3
"""PyTorch reference training run for Tessera's e2e "matches PyTorch" tests.

Builds the exact module that examples/gpt/export.py exported (same config,
same seed, so the same initial weights as the ONNX initializers), trains it
for K steps on the batches of DESIGN.md's data convention, and writes the
loss of every step (computed before that step's update).

    torch_reference.py --config NAME --data FILE [--data-dtype uint32] --steps K
        --optimizer sgd|adamw [--lr 1e-3] [--weight-decay X]
        [--beta1 0.9] [--beta2 0.999] [--eps 1e-8]
        --out FILE.json [--save-weights FILE.npz|FILE.safetensors]
        [--onnx MODEL.onnx] [--threads 1] [--global-batch B] [--seq-len S]

* loss: F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1)), i.e. the
  mean natural-log cross-entropy over all B*S tokens;
* optimizer: torch.optim.SGD(params, lr, weight_decay=wd) (momentum 0, default
  wd 0) or torch.optim.AdamW(params, lr, betas, eps, weight_decay) (default
  wd 0.01); fp32; deterministic algorithms; 1 thread unless --threads;
* --onnx: first checks that the ONNX initializers are exactly the module's
  state_dict (same names, shapes and bits); exits 2 on any mismatch;
* output JSON: {"losses": [...], "config": {...}, "optimizer": {...},
  "data": {...}, "steps": K, "torch": version};
* --save-weights: the final parameters keyed by state_dict name (= ONNX
  initializer name), as .npz or .safetensors (by extension).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO_ROOT, "examples", "gpt"))

import safetensors_lite  # noqa: E402
import tessera_data  # noqa: E402
from model import CONFIGS, build_model, get_config  # noqa: E402


def check_onnx_weights(model, onnx_path):
    """Returns a list of mismatch messages (empty when the weights agree)."""
    import onnx
    from onnx import numpy_helper
    proto = onnx.load(onnx_path)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    params = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    errors = []
    for name in sorted(set(params) - set(inits)):
        errors.append(f"parameter {name} is not an ONNX initializer")
    for name in sorted(set(inits) - set(params)):
        errors.append(f"ONNX initializer {name} is not a module parameter")
    for name in sorted(set(params) & set(inits)):
        a, b = params[name], inits[name]
        if a.shape != b.shape:
            errors.append(f"{name}: shape {list(a.shape)} vs ONNX {list(b.shape)}")
        elif a.dtype != b.dtype or not np.array_equal(a, b):
            errors.append(f"{name}: values differ (max |diff| "
                          f"{np.abs(a.astype(np.float64) - b).max():.3g})")
    return errors


def make_optimizer(args, params):
    if args.optimizer == "sgd":
        wd = 0.0 if args.weight_decay is None else args.weight_decay
        desc = {"name": "sgd", "lr": args.lr, "weight_decay": wd,
                "momentum": 0.0}
        return torch.optim.SGD(params, lr=args.lr, weight_decay=wd), desc
    wd = 0.01 if args.weight_decay is None else args.weight_decay
    desc = {"name": "adamw", "lr": args.lr, "beta1": args.beta1,
            "beta2": args.beta2, "eps": args.eps, "weight_decay": wd}
    return torch.optim.AdamW(params, lr=args.lr, betas=(args.beta1, args.beta2),
                             eps=args.eps, weight_decay=wd), desc


def save_weights(model, path, meta):
    tensors = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if path.endswith(".safetensors"):
        safetensors_lite.write(path, tensors,
                               {k: json.dumps(v) for k, v in meta.items()})
    else:
        np.savez(path, **tensors)


def train(cfg, tokens, steps, opt_args, log=None):
    """Trains build_model(cfg) for ``steps`` steps; returns (losses, model, desc)."""
    model = build_model(cfg)
    model.train()  # dropout is 0; train mode keeps torch off its fused paths
    opt, desc = make_optimizer(opt_args, model.parameters())
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    losses = []
    for step in range(steps):
        inputs, labels = tessera_data.batch(tokens, step, B, S)
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        if log:
            log(step, losses[-1])
    return losses, model, desc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--data", required=True, help="little-endian uint16 tokens")
    ap.add_argument("--data-dtype", choices=["uint16", "uint32"],
                    default="uint16", help="of --data (as tessera-run's)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="default 0 for sgd, 0.01 for adamw")
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--global-batch", type=int, help="override the config's B")
    ap.add_argument("--seq-len", type=int, help="override the config's S")
    ap.add_argument("--out", required=True, help="output JSON")
    ap.add_argument("--save-weights", help="final weights, .npz or .safetensors")
    ap.add_argument("--onnx", help="check the initial weights against this model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    cfg = get_config(args.config)
    if args.global_batch:
        cfg["batch"] = args.global_batch
    if args.seq_len:
        if args.seq_len != cfg["seq"]:
            ap.error("--seq-len must equal the config's seq (the positional "
                     "embedding is [seq, d_model])")

    if args.onnx:
        errors = check_onnx_weights(build_model(cfg), args.onnx)
        if errors:
            for e in errors:
                print(f"torch_reference: {args.onnx}: {e}", file=sys.stderr)
            return 2
        if not args.quiet:
            print(f"torch_reference: {args.onnx}: initializers == module "
                  f"weights", file=sys.stderr)

    tokens = tessera_data.load_tokens(
        args.data, "<u4" if args.data_dtype == "uint32" else "<u2")
    log = None if args.quiet else (
        lambda s, l: print(f"step {s} loss {l:.6f}", file=sys.stderr))
    t0 = time.perf_counter()
    losses, model, desc = train(cfg, tokens, args.steps, args, log)
    wall = time.perf_counter() - t0

    cfg_out = {k: v for k, v in cfg.items() if k != "out"}
    cfg_out["name"] = args.config
    result = {"losses": losses, "config": cfg_out, "optimizer": desc,
              "data": {"path": args.data, "tokens": int(tokens.size)},
              "steps": args.steps, "torch": torch.__version__,
              "threads": args.threads, "wall_s": wall}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    if args.save_weights:
        save_weights(model, args.save_weights,
                     {"config": args.config, "steps": args.steps,
                      "optimizer": desc})
    return 0


if __name__ == "__main__":
    sys.exit(main())

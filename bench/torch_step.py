#!/usr/bin/python3
"""PyTorch peer timing: one training step of a GPT config on the CPU.

    torch_step.py [--onnx-config example] [--threads T] [--steps N]
                  [--warmup 3] [--data examples/data/corpus.u16]

Times forward + cross-entropy + backward + torch.optim.AdamW step (defaults
lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.01) of examples/gpt/model.py's
config, fp32, ``torch.set_num_threads(T)``. Batches are the first ones of the
data file under DESIGN.md's convention (step k uses batch k; building them is
not timed). After ``--warmup`` untimed steps, N steps are timed one by one
with time.perf_counter. Prints one JSON object on stdout:

    {"bench": "torch_step", "config": ..., "threads": T, "steps": N,
     "median_step_s": ..., "min_step_s": ..., "tokens_per_step": B*S,
     "tokens_per_s": B*S / median_step_s, "torch": version, ...}
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(REPO_ROOT, "test", "e2e"))
from model import CONFIGS, build_model, get_config  # noqa: E402
import tessera_data  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx-config", default="example", choices=sorted(CONFIGS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(REPO_ROOT, "examples",
                                                   "data", "corpus.u16"))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    cfg = get_config(args.onnx_config)
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    tokens = tessera_data.load_tokens(args.data)
    total = args.warmup + args.steps
    batches = [tessera_data.batch(tokens, k, B, S) for k in range(total)]

    model = build_model(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01)
    times, losses = [], []
    for k, (inputs, labels) in enumerate(batches):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs).reshape(-1, V), labels.reshape(-1))
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if k >= args.warmup:
            times.append(dt)

    med = statistics.median(times) if times else float("nan")
    print(json.dumps({
        "bench": "torch_step", "config": args.onnx_config, "threads": args.threads,
        "steps": args.steps, "warmup": args.warmup, "batch": B, "seq": S,
        "median_step_s": med, "min_step_s": min(times) if times else None,
        "tokens_per_step": B * S, "tokens_per_s": B * S / med,
        "optimizer": "adamw", "final_loss": losses[-1],
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()

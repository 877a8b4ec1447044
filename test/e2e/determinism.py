#!/usr/bin/env python3
"""tessera-partition is deterministic: the same model and flags give the same
sharded IR, byte for byte, every run.

A pass that keys a map by Value or Operation * and erases ops mid-rewrite can
hand a new op the stale entry of one freed at the same address; the result
then depends on the allocator. This runs each plan --repeat times and fails
on any error or any difference between runs.

Usage: determinism.py --build BUILD_DIR [--repeat N]
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")

# (model, flags): one plan per sharding machinery that rewrites the IR.
PLANS = [
    ("sp_long_op17.onnx", "--tp 2 --precision bf16 --sp ulysses --sp-size 2"),
    ("sp_long_op17.onnx", "--tp 2 --sp ulysses --sp-size 2"),
    ("sp_long_op17.onnx", "--tp 2 --sp megatron"),
    ("handwritten_op17.onnx", "--tp 2 --sp ulysses --sp-size 2"),
    ("sp_long_op17.onnx", "--dp 2 --sp ring --sp-size 2"),
    ("sp_long_op17.onnx", "--dp 2 --tp 2 --zero 3"),
    ("prenorm_gelu_causal_op17.onnx", "--dp 2 --tp 2 --recompute selective"),
    ("pipeline_op17.onnx", "--pp 2 --micro-batches 4 --schedule 1f1b"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--repeat", type=int, default=25)
    args = ap.parse_args()
    tool = os.path.join(args.build, "tools", "tessera-partition",
                        "tessera-partition")
    ok = True
    with tempfile.TemporaryDirectory(prefix="tessera-determinism-") as work:
        out = os.path.join(work, "sharded.mlir")
        for model, flags in PLANS:
            cmd = [tool, os.path.join(MODELS, model), "-o", out, "--emit",
                   "sharded", "--optimizer", "adamw"] + flags.split()
            digests = {}
            failed = False
            for i in range(args.repeat):
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    print(f"FAIL {model} {flags}: run {i} exited "
                          f"{p.returncode}:\n{p.stderr}")
                    ok, failed = False, True
                    break
                with open(out, "rb") as f:
                    digests.setdefault(hashlib.sha256(f.read()).hexdigest(),
                                       []).append(i)
            if failed:
                continue
            if len(digests) > 1:
                print(f"FAIL {model} {flags}: {len(digests)} different "
                      f"outputs over {args.repeat} runs: "
                      + "; ".join(f"runs {v}" for v in digests.values()))
                ok = False
            else:
                print(f"ok   {model} {flags}: {args.repeat} identical runs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Checks of examples/gpt/make_gpt_onnx.py's generated GPT models.

    generated_gpt.py scale --build DIR [--max-rss-mb 2048] [--max-seconds 20]
                           [--dp 8] [--tp 8]
        Writes the default (GPT-3 175B-shaped, weight-free) model into the
        build tree and runs `tessera-partition MODEL --dp 8 --tp 8 --explain`.
        Passes when it succeeds within --max-seconds wall time and
        --max-rss-mb peak resident memory (the tool's own, from wait4), the
        plan covers all 175,245,043,712 parameters (the unsharded parameter
        + AdamW state bytes --explain prints are 12 per parameter + 4 for
        the step count) and no plan artifact was written. Prints the time
        and RSS.

    generated_gpt.py train --build DIR --optimizer sgd|adamw [--rtol 1e-4]
        Writes a small model with random weights at the sizes of model.py's
        `handwritten` config, compiles it with tessera-partition (serial),
        trains it 8 steps with tessera-run on DESIGN.md's data order, and
        trains model.py's HandwrittenGPT loaded with the same initial
        weights (load_state_dict of the ONNX initializers) in PyTorch on the
        same batches: every step's loss must match within rtol.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GEN = os.path.join(ROOT, "examples", "gpt", "make_gpt_onnx.py")
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import compare  # noqa: E402
from e2e import env, run  # noqa: E402

STEPS = 8
LR = {"sgd": 0.1, "adamw": 3e-3}
GPT3_PARAMS = 175_245_043_712




def tool(build, name):
    return os.path.join(build, "tools", name, name)


def scale(args):
    work = os.path.join(args.build, "test", "generated_gpt")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "gpt3_175b_weight_free.onnx")
    run(["/usr/bin/python3", GEN, "-o", model])
    cmd = [tool(args.build, "tessera-partition"), model, "--dp", str(args.dp),
           "--tp", str(args.tp), "--explain"]
    print("+", " ".join(cmd), flush=True)
    out_path = os.path.join(work, "explain.txt")
    err_path = os.path.join(work, "explain.err")
    t0 = time.perf_counter()
    with open(out_path, "w") as fo, open(err_path, "w") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=work, env=env())
        # wait4: this child's own peak RSS (ru_maxrss, KiB on Linux)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    rc = proc.returncode = os.waitstatus_to_exitcode(status)
    rss_mb = usage.ru_maxrss / 1024
    with open(out_path) as f:
        out = f.read()
    with open(err_path) as f:
        err = f.read()
    sys.stdout.write("\n".join(l for l in out.splitlines()
                               if not l.startswith("  blocks.")) + "\n")
    sys.stdout.write(err)
    ok = rc == 0
    print(f"tessera-partition exit {rc}, wall {wall:.2f} s (limit "
          f"{args.max_seconds} s), max RSS {rss_mb:.0f} MiB (limit "
          f"{args.max_rss_mb} MiB)")
    ok = ok and wall <= args.max_seconds and rss_mb <= args.max_rss_mb
    want = f"(unsharded: {12 * GPT3_PARAMS + 4})"
    if want not in out:
        print(f"expected the parameter + optimizer-state line to end {want}")
        ok = False
    if f"grid: dp={args.dp} x tp={args.tp}" not in out:
        print("expected the grid line")
        ok = False
    if os.path.exists(os.path.join(work, "plan.tsr")):
        print("a plan.tsr was written for a weight-free model")
        ok = False
    return ok


def torch_losses(onnx_path, optimizer):
    """HandwrittenGPT with the ONNX initializers, trained on the same data."""
    import onnx
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper
    import tessera_data
    from model import build_model, get_config
    from torch_reference import make_optimizer

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg = get_config("handwritten")
    model = build_model(cfg)
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
             for t in onnx.load(onnx_path).graph.initializer}
    model.load_state_dict(inits, strict=True)
    model.train()
    opt_args = argparse.Namespace(optimizer=optimizer, lr=LR[optimizer],
                                  weight_decay=None, beta1=0.9, beta2=0.999,
                                  eps=1e-8)
    opt, _ = make_optimizer(opt_args, model.parameters())
    tokens = tessera_data.load_tokens(CORPUS)
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    losses = []
    for step in range(STEPS):
        inputs, labels = tessera_data.batch(tokens, step, B, S)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs).reshape(-1, V),
                               labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses


def train(args):
    from model import get_config
    cfg = get_config("handwritten")
    with tempfile.TemporaryDirectory(prefix="tessera-generated-") as work:
        model = os.path.join(work, "gpt_small.onnx")
        run(["/usr/bin/python3", GEN, "--layers", str(cfg["layers"]),
             "--hidden", str(cfg["d_model"]), "--heads", str(cfg["nhead"]),
             "--seq", str(cfg["seq"]), "--vocab", str(cfg["vocab"]),
             "--batch", str(cfg["batch"]), "--ffn", str(cfg["d_ff"]),
             "--with-weights", "--seed", "1", "-o", model])
        plan = os.path.join(work, "plan.tsr")
        metrics = os.path.join(work, "metrics.jsonl")
        run([tool(args.build, "tessera-partition"), model, "-o", plan,
             "--optimizer", args.optimizer, "--lr", str(LR[args.optimizer])])
        run(["mpirun", "-np", "1", tool(args.build, "tessera-run"), plan,
             "--data", CORPUS, "--steps", str(STEPS), "--metrics", metrics])
        ref = os.path.join(work, "torch.json")
        with open(ref, "w") as f:
            json.dump({"losses": torch_losses(model, args.optimizer)}, f)
        rtol = args.rtol or 1e-4
        print(f"losses: tessera serial vs PyTorch HandwrittenGPT with the "
              f"generated weights (rtol {rtol})")
        ok, rows = compare.compare_losses(compare.load_losses(metrics),
                                          compare.load_losses(ref), rtol=rtol)
        for row in rows:
            print("  ", row)
        first = compare.load_losses(ref)
        if not first[STEPS - 1] < first[0]:
            print("the loss did not decrease")
            ok = False
        return ok


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["scale", "train"])
    p.add_argument("--build", required=True)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--rtol", type=float)
    p.add_argument("--dp", type=int, default=8)
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--max-rss-mb", type=float, default=2048)
    p.add_argument("--max-seconds", type=float, default=20)
    args = p.parse_args()
    args.build = os.path.abspath(args.build)
    ok = scale(args) if args.mode == "scale" else train(args)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""End-to-end checks of training-mode dropout (tsr.dropout, Philox-4x32-10
mask of the global element index) on the fixtures of dropout_export.py: a
GPT-2 (untied LM head, embd/resid dropout P, attention dropout 0) exported
by the TorchScript exporter in training mode. Every subcommand takes
--build DIR, prints every number it compares and exits 0 on a match, 1 on a
mismatch.

    dropout.py torch --build DIR [--rtol 1e-4]
        The P = 0 export (training-mode Dropout nodes of ratio 0): serial
        Tessera, 8 AdamW steps (lr 3e-3, DESIGN.md's batches), vs the 8
        PyTorch losses of gpt2_dropout.json. PyTorch's masks cannot be
        reproduced (its CPU generator is a Mersenne Twister), so this is
        the PyTorch comparison.

    dropout.py applied --build DIR
        The P = 0.1 export vs the P = 0 one (the same initial weights):
        the serial losses must differ (relative difference > 1e-5 at step
        0, whose near-uniform logits barely move, and > 1e-3 at step 1:
        the mask is applied), and two runs with --seed 1234 must be
        bitwise equal while --seed 1 differs (the seed keys the mask).

    dropout.py parallel --build DIR [--dp N] [--tp M] [--pp P
                        --micro-batches M --schedule S] [--sp KIND
                        [--sp-size K]] [--rtol 1e-5]
        The P = 0.1 export, 8 AdamW steps: the plan vs the serial run,
        every loss and every final weight within rtol (DESIGN.md's
        "matches the serial run"; the attention key bias's zero-gradient
        part is left out as in hf/hf_e2e.py). Equal masks on every plan
        are what makes this hold.

    dropout.py kept --build DIR
        tessera-check of the P = 0.1 export (2 SGD steps, lr 0.01, serial vs
        dp2 x tp2 (AdamW would amplify the key bias's zero-gradient noise):
        every traced value, each dropout result and its gradient included,
        equal within 1e-5), then, from the serial run's dumps, the kept
        fraction of every forward tsr.dropout result of each step (the
        elements that are not exactly 0): within 4 standard deviations of
        0.9 over the step's N dropped-out elements (sd = sqrt(0.09 N)).
"""

import argparse
import json
import os
import re
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "hf"))
import compare  # noqa: E402
import hf_e2e  # noqa: E402

MODELS = os.path.join(HERE, "models")
P10 = os.path.join(MODELS, "gpt2_dropout_p10.ts17.onnx")
P0 = os.path.join(MODELS, "gpt2_dropout_p0.ts17.onnx")
REF = os.path.join(MODELS, "gpt2_dropout.json")
RATIO = 0.1
LR = 3e-3


def reference():
    with open(REF) as f:
        return json.load(f)


def use_model(args, path):
    """Points hf_e2e's helpers at `path` (they take the model from
    hf_e2e.model_path)."""
    args.model = path
    hf_e2e.model_path = lambda a: a.model


def tessera(args, work, tag, extra=(), ranks=1, steps=hf_e2e.STEPS):
    return hf_e2e.tessera(args, work, tag, "adamw", lr=LR, extra=extra,
                          ranks=ranks, steps=steps)


def cmd_torch(args, work):
    use_model(args, P0)
    ref = reference()["models"]["p0"]["torch_losses"]
    metrics, _ = tessera(args, work, "p0")
    return hf_e2e.check_losses(compare.load_losses(metrics), dict(
        enumerate(ref)), args.rtol or 1e-4,
        "tessera serial (ratio 0, training-mode export) vs PyTorch")


def cmd_applied(args, work):
    use_model(args, P0)
    m0, _ = tessera(args, work, "p0", steps=2)
    use_model(args, P10)
    m1, w1 = tessera(args, work, "p10", steps=2)
    m2, w2 = tessera(args, work, "p10again", steps=2, extra=["--seed", "1234"])
    m3, _ = tessera(args, work, "p10seed1", steps=2, extra=["--seed", "1"])
    ok = True
    for step, need in ((0, 1e-5), (1, 1e-3)):
        l0, l1 = compare.load_losses(m0)[step], compare.load_losses(m1)[step]
        rel = abs(l1 - l0) / abs(l0)
        good = rel > need
        ok &= good
        print(f"step-{step} loss: ratio 0.1 {l1!r} vs ratio 0 {l0!r}: rel "
              f"diff {rel:.3e} (> {need}: "
              f"{'differs, the mask is applied' if good else 'SAME'})")
    a, b = compare.load_losses(m1), compare.load_losses(m2)
    same = a == b and all(
        np.array_equal(np.asarray(x), np.asarray(compare.load_weights(w2)[n]))
        for n, x in compare.load_weights(w1).items())
    print(f"--seed 1234 twice: losses {a} and {b}, weights "
          f"{'bitwise equal' if same else 'DIFFER'}")
    c = compare.load_losses(m3)
    seeded = c[0] != a[0]
    print(f"--seed 1: step-0 loss {c[0]!r} vs {a[0]!r}: "
          f"{'differs' if seeded else 'SAME'}")
    return ok and same and seeded


def cmd_parallel(args, work):
    use_model(args, P10)
    args.optimizer = "adamw"
    args.lr = LR
    return hf_e2e.cmd_parallel(args, work)


TRACE = re.compile(r"tsr\.dropout\b[^\n]*\{([^\n]*)\}")


def cmd_kept(args, work):
    check = os.path.join(args.build, "tools", "tessera-check",
                         "tessera-check")
    ir = os.path.join(work, "sharded.mlir")
    flags = [P10, "--steps", "2", "--dp", "2", "--tp", "2", "--optimizer",
             "sgd", "--lr", "0.01", "--data", hf_e2e.CORPUS]
    # The partitioned IR with the trace ids (tessera-check stops there),
    # then the check itself, keeping its dumps.
    hf_e2e.run([check] + flags + ["--emit-sharded-ir", ir])
    hf_e2e.run([check] + flags + ["--work-dir", work])
    # The forward dropouts' trace ids (their gradients carry tsr.bwd).
    ids = []
    with open(ir) as f:
        for line in f:
            if "tsr.dropout" not in line or "tsr.bwd" in line:
                continue
            m = re.search(r"tsr\.trace = (\d+)", line)
            if m:
                ids.append(int(m.group(1)))
    print(f"forward tsr.dropout trace ids: {ids}")
    dumps = [os.path.join(root, name) for root, _, files in os.walk(work)
             for name in files if name == "rank0.json"]
    serial = [d for d in dumps if "serial" in d]
    if len(ids) != 5 or not serial:
        print(f"FAIL: expected 5 forward dropouts and a serial dump, got "
              f"{len(ids)} and {dumps}")
        return False
    with open(serial[0]) as f:
        index = json.load(f)
    data = np.fromfile(serial[0][:-len("json")] + "bin", dtype=np.uint8)
    ok = True
    for step in sorted({t["step"] for t in index["tensors"]}):
        kept = total = 0
        for t in index["tensors"]:
            if t["step"] != step or t["trace"] not in ids:
                continue
            v = data[t["offset"]:t["offset"] + t["bytes"]].view("<f4")
            kept += int(np.count_nonzero(v))
            total += v.size
        p = 1 - RATIO
        sd = np.sqrt(total * p * (1 - p))
        z = (kept - total * p) / sd if sd else float("inf")
        good = total > 0 and abs(z) <= 4
        ok &= good
        print(f"step {step}: kept fraction {kept}/{total} = "
              f"{kept / max(total, 1):.5f} (expected {p}, {z:+.2f} sd) "
              f"{'ok' if good else 'MISMATCH'}")
    return ok


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["torch", "applied", "parallel",
                                        "kept"])
    ap.add_argument("--build", required=True)
    ap.add_argument("--rtol", type=float)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--schedule", default="1f1b")
    ap.add_argument("--virtual-stages", type=int, default=2)
    ap.add_argument("--sp")
    ap.add_argument("--sp-size", type=int, default=2)
    ap.add_argument("--keep", help="keep the work files in this folder")
    args = ap.parse_args()
    fn = {"torch": cmd_torch, "applied": cmd_applied,
          "parallel": cmd_parallel, "kept": cmd_kept}[args.command]
    try:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            ok = fn(args, args.keep)
        else:
            with tempfile.TemporaryDirectory() as work:
                ok = fn(args, work)
    except hf_e2e.Fail as e:
        print(f"FAIL: {e}")
        return 1
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Validation loss (tessera-run --eval-data) vs PyTorch and across plans.

    eval_loss.py --build DIR [--config prenorm_gelu_causal]
        [--optimizer adamw] [--plans serial,dp2xtp2,dp2.zero3]
    eval_loss.py --build DIR --dropout

Trains the example GPT config for STEPS steps on the example corpus with
``--eval-data VALID --eval-interval INTERVAL --eval-iters ITERS``, where
VALID is the corpus' second half (written to the work folder), and checks:

* the evaluation changes nothing: the serial run's losses and final
  weights are bit-identical to the same run without ``--eval-data``;
* the metrics hold "eval_loss" exactly at steps INTERVAL-1, 2*INTERVAL-1,
  ... and the last step, and rank 0 printed Megatron-LM's line
  "validation loss at iteration N | lm loss value: X | ..." with the same
  values;
* serial vs PyTorch: the final evaluation equals the mean over k < ITERS
  of F.cross_entropy of the PyTorch module (examples/gpt/model.py, the same
  config) in ``model.eval()`` mode under ``torch.no_grad()``, loaded with
  the serial run's final weights (--save-weights), on batch k of VALID by
  DESIGN.md's sampling formula (step k), within 1e-5 relative;
* every other plan's "eval_loss" values equal the serial run's within 1e-5
  relative (and its training losses too, as e2e.parallel checks).

With --dropout, evaluation runs without dropout (issue 24, must-show 6):
the GPT-2 fixtures of dropout_export.py (P = 0.1 and P = 0 training-mode
exports, the same initial weights) train 2 steps with SGD at lr 0 (so the
weights never change) with ``--eval-data`` = the training corpus,
``--eval-interval 1 --eval-iters 2``: eval batches 0 and 1 are then the
training batches of steps 0 and 1, and every evaluation of the P = 0.1
model (serial and dp2 x tp2) must equal the mean of the P = 0 model's two
training losses (1e-6 serial, 1e-5 dp2 x tp2), while the P = 0.1 model's
own step-0 training loss differs from the P = 0 one (> 1e-4: dropout is
on in training).

Exit 0 when everything holds, 1 otherwise.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

import compare  # noqa: E402
import tessera_data  # noqa: E402
from model import build_model, get_config  # noqa: E402

CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
STEPS = 5
INTERVAL = 2
ITERS = 3
LR = {"sgd": 0.1, "adamw": 3e-3}
# name -> (ranks, tessera-partition flags)
PLANS = {
    "serial": (1, []),
    "dp2xtp2": (4, ["--dp", "2", "--tp", "2"]),
    "dp2.zero3": (2, ["--dp", "2", "--zero", "3"]),
    "tp2": (2, ["--tp", "2"]),
}


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, env=env(), stdout=subprocess.PIPE,
                         text=True).stdout
    sys.stdout.write(out)
    return out


def tessera(args, work, tag, ranks, flags, evaluate=True):
    """Compiles and trains; returns (metrics path, weights path, stdout)."""
    plan = os.path.join(work, f"{tag}.tsr")
    metrics = os.path.join(work, f"{tag}.jsonl")
    weights = os.path.join(work, f"{tag}.safetensors")
    cfg = get_config(args.config)
    run([os.path.join(args.build, "tools", "tessera-partition",
                      "tessera-partition"),
         os.path.join(ROOT, cfg["out"]), "-o", plan, "--optimizer",
         args.optimizer, "--lr", str(LR[args.optimizer])] + flags)
    cmd = ["mpirun", "-np", str(ranks),
           os.path.join(args.build, "tools", "tessera-run", "tessera-run"),
           plan, "--data", CORPUS, "--steps", str(STEPS), "--metrics",
           metrics, "--save-weights", weights]
    if evaluate:
        cmd += ["--eval-data", args.valid, "--eval-interval", str(INTERVAL),
                "--eval-iters", str(ITERS)]
    return metrics, weights, run(cmd)


def check_dropout(args, work):
    """See the module docstring (--dropout)."""
    models = os.path.join(HERE, "models")
    ok = True

    def train(model, tag, ranks, flags):
        plan = os.path.join(work, f"{tag}.tsr")
        metrics = os.path.join(work, f"{tag}.jsonl")
        run([os.path.join(args.build, "tools", "tessera-partition",
                          "tessera-partition"),
             os.path.join(models, model), "-o", plan, "--optimizer", "sgd",
             "--lr", "0"] + flags)
        run(["mpirun", "-np", str(ranks),
             os.path.join(args.build, "tools", "tessera-run", "tessera-run"),
             plan, "--data", CORPUS, "--steps", "2", "--metrics", metrics,
             "--eval-data", CORPUS, "--eval-interval", "1", "--eval-iters",
             "2"])
        return compare.load_losses(metrics), eval_losses(metrics)

    p0_loss, _ = train("gpt2_dropout_p0.ts17.onnx", "p0", 1, [])
    want = (p0_loss[0] + p0_loss[1]) / 2
    print(f"P = 0 training losses (lr 0) {p0_loss}: mean {want!r}")
    p10_loss, p10_eval = train("gpt2_dropout_p10.ts17.onnx", "p10", 1, [])
    err = rel(p10_loss[0], p0_loss[0])
    print(f"P = 0.1 step-0 training loss {p10_loss[0]!r} vs P = 0 "
          f"{p0_loss[0]!r}: rel diff {err:.3e} (must exceed 1e-4: dropout "
          f"is applied in training)")
    ok &= err > 1e-4
    for tag, ranks, flags, rtol in (("serial", 1, [], 1e-6),
                                    ("dp2xtp2", 4,
                                     ["--dp", "2", "--tp", "2"], 1e-5)):
        ev = p10_eval if tag == "serial" else train(
            "gpt2_dropout_p10.ts17.onnx", "p10." + tag, ranks, flags)[1]
        if sorted(ev) != [0, 1]:
            print(f"FAIL: P = 0.1 {tag}: eval_loss at steps {sorted(ev)}")
            ok = False
        for s, v in sorted(ev.items()):
            e = rel(v, want)
            print(f"P = 0.1 {tag}: eval_loss after step {s}: {v!r} vs the "
                  f"P = 0 mean {want!r}: rel err {e:.3e} (rtol {rtol:g})")
            ok &= e <= rtol
    return ok


def eval_losses(metrics):
    """{step: eval_loss} of a --metrics file."""
    out = {}
    with open(metrics) as f:
        for line in f:
            rec = json.loads(line)
            if "eval_loss" in rec:
                out[rec["step"]] = rec["eval_loss"]
    return out


def rel(a, b):
    return abs(a - b) / abs(b)


def torch_eval(args, weights):
    """Mean PyTorch eval-mode loss of the ITERS batches of VALID."""
    cfg = get_config(args.config)
    model = build_model(cfg)
    state = {k: torch.from_numpy(np.asarray(v, dtype=np.float32))
             for k, v in compare.load_weights(weights).items()}
    model.load_state_dict(state, strict=True)
    model.eval()
    tokens = tessera_data.load_tokens(args.valid)
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    losses = []
    with torch.no_grad():
        for k in range(ITERS):
            inputs, labels = tessera_data.batch(tokens, k, B, S)
            logits = model(inputs)
            losses.append(float(F.cross_entropy(logits.reshape(-1, V),
                                                labels.reshape(-1))))
    return sum(losses) / len(losses)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", required=True)
    p.add_argument("--config", default="prenorm_gelu_causal")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    p.add_argument("--plans", default="serial,dp2xtp2,dp2.zero3")
    p.add_argument("--dropout", action="store_true",
                   help="check that evaluation runs without dropout instead")
    args = p.parse_args()
    if args.dropout:
        with tempfile.TemporaryDirectory(prefix="tessera-eval-") as work:
            ok = check_dropout(args, work)
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    plans = args.plans.split(",")
    if plans[0] != "serial":
        plans.insert(0, "serial")
    ok = True
    with tempfile.TemporaryDirectory(prefix="tessera-eval-") as work:
        tokens = np.fromfile(CORPUS, dtype="<u2")
        args.valid = os.path.join(work, "valid.u16")
        tokens[tokens.size // 2:].tofile(args.valid)

        want_steps = sorted({s for s in range(STEPS) if (s + 1) % INTERVAL == 0}
                            | {STEPS - 1})
        runs = {}
        for tag in plans:
            ranks, flags = PLANS[tag]
            m, w, out = tessera(args, work, tag, ranks, flags)
            runs[tag] = (m, w)
            ev = eval_losses(m)
            if sorted(ev) != want_steps:
                print(f"FAIL: {tag}: eval_loss at steps {sorted(ev)}, "
                      f"expected {want_steps}")
                ok = False
            printed = {int(n) - 1: float(x) for n, x in re.findall(
                r"validation loss at iteration (\d+) \| lm loss value: "
                r"([-+0-9.eE]+) \|", out)}
            if sorted(printed) != want_steps or any(
                    rel(printed[s], ev[s]) > 1e-6 for s in printed):
                print(f"FAIL: {tag}: printed validation losses {printed} "
                      f"!= metrics {ev}")
                ok = False

        # The evaluation changes no state.
        m0, w0, _ = tessera(args, work, "serial.noeval", 1, [],
                            evaluate=False)
        a, b = compare.load_losses(runs["serial"][0]), compare.load_losses(m0)
        wa, wb = (compare.load_weights(runs["serial"][1]),
                  compare.load_weights(w0))
        same = a == b and wa.keys() == wb.keys() and all(
            np.array_equal(wa[k], wb[k]) for k in wa)
        print(f"serial with --eval-data vs without: losses and weights "
              f"{'bit-identical' if same else 'DIFFER'}")
        ok &= same

        serial = eval_losses(runs["serial"][0])
        ref = torch_eval(args, runs["serial"][1])
        last = serial[STEPS - 1]
        err = rel(last, ref)
        print(f"final eval_loss: tessera serial {last:.9g}, PyTorch "
              f"model.eval() {ref:.9g}, rel err {err:.3e} (rtol 1e-5)")
        ok &= err <= 1e-5

        for tag in plans[1:]:
            ev = eval_losses(runs[tag][0])
            for s in sorted(serial):
                e = rel(ev.get(s, float("nan")), serial[s])
                print(f"{tag} vs serial: eval_loss at step {s}: "
                      f"{ev.get(s)} vs {serial[s]}, rel err {e:.3e}")
                ok &= e <= 1e-5
            print(f"{tag} vs serial: training losses (rtol 1e-5)")
            ok &= compare.compare_losses(compare.load_losses(runs[tag][0]),
                                         compare.load_losses(
                                             runs["serial"][0]), 1e-5)[0]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

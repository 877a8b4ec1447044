#!/usr/bin/python3
"""Compares two training runs: per-step losses, or final weights.

CLI (exit 0 = match, 1 = mismatch, 2 = unreadable input / usage):

    compare.py losses  A.jsonl|A.json  B.jsonl|B.json  [--rtol 1e-5]
    compare.py weights A.safetensors|A.npz  B.safetensors|B.npz  [--rtol 1e-5]

B is the reference: relative errors are |a-b|/|b| (losses) and
||a-b||_2 / ||b||_2 (weights; ||a-b||_2 itself when ||b||_2 == 0).

* A ``.jsonl`` file is a Tessera ``--metrics`` file: one JSON object per line
  with at least "step" and "loss" (lines without both are ignored, a step
  that appears twice is an error). A ``.json`` file is torch_reference.py's
  output, whose "losses"[s] is the loss of step s.
* Loss comparison fails when the step sets differ or any step's relative
  error exceeds rtol; every step is printed.
* Weight comparison fails when the tensor-name sets differ ("__metadata__" is
  not a tensor), a shape differs, or any tensor's relative L2 error exceeds
  rtol (plus --atol, default 0); the worst tensors are printed. --exclude
  REGEX skips matching tensors. Note: under AdamW the key third of
  nn.MultiheadAttention's in_proj_bias has an exactly-zero true gradient
  (softmax is shift-invariant), so its updates are rounding noise amplified
  by Adam and differ between any two summation orders; the loss does not
  depend on it at all.

As a library::

    from compare import load_losses, compare_losses, load_weights, compare_weights
    ok, rows = compare_losses(load_losses(a), load_losses(b), rtol=1e-5)
"""

import argparse
import json
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402


class InputError(Exception):
    """A file could not be read as the expected kind of run output."""


# ----------------------------------------------------------------- losses --

def load_losses(path):
    """Returns {step: loss} from a metrics .jsonl or a torch_reference .json."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from e
    if path.endswith(".jsonl"):
        losses = {}
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: bad JSON: {e}") from e
            if not isinstance(obj, dict) or "step" not in obj or "loss" not in obj:
                continue
            step = int(obj["step"])
            if step in losses:
                raise InputError(f"{path}:{lineno}: step {step} appears twice")
            losses[step] = float(obj["loss"])
        return losses
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: bad JSON: {e}") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("losses"), list):
        raise InputError(f"{path}: no \"losses\" list")
    return {s: float(l) for s, l in enumerate(obj["losses"])}


def rel_err(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.inf
    return abs(a - b) / abs(b) if b != 0 else abs(a - b)


def compare_losses(a, b, rtol):
    """Returns (ok, rows); rows are (step, loss_a, loss_b, rel_err) with None
    for a side that lacks the step."""
    rows, ok = [], True
    for step in sorted(set(a) | set(b)):
        la, lb = a.get(step), b.get(step)
        if la is None or lb is None:
            rows.append((step, la, lb, None))
            ok = False
            continue
        e = rel_err(la, lb)
        ok &= e <= rtol
        rows.append((step, la, lb, e))
    return ok, rows


def cmd_losses(args):
    a, b = load_losses(args.a), load_losses(args.b)
    ok, rows = compare_losses(a, b, args.rtol)
    print(f"{'step':>6} {'A':>16} {'B':>16} {'rel err':>10}")
    fmt = lambda v: f"{v:16.9g}" if v is not None else f"{'(missing)':>16}"
    for step, la, lb, e in rows:
        flag = "" if e is not None and e <= args.rtol else "  <-- FAIL"
        es = f"{e:10.3e}" if e is not None else f"{'-':>10}"
        print(f"{step:6d} {fmt(la)} {fmt(lb)} {es}{flag}")
    errs = [r[3] for r in rows if r[3] is not None]
    if len(a) != len(b) or set(a) != set(b):
        print(f"step sets differ: A has {len(a)} steps, B has {len(b)}")
    worst = max(errs) if errs else float("nan")
    print(f"{'OK' if ok else 'FAIL'}: {len(rows)} steps, worst rel err "
          f"{worst:.3e}, rtol {args.rtol:g}")
    return 0 if ok else 1


# ---------------------------------------------------------------- weights --

def load_weights(path):
    """Returns {name: float64 ndarray} from .safetensors or .npz."""
    try:
        if path.endswith(".npz"):
            with np.load(path) as z:
                return {k: z[k] for k in z.files}
        tensors, _ = safetensors_lite.read(path)
        return tensors
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: {e}") from e


def compare_weights(a, b, rtol, atol=0.0, exclude=()):
    """Returns (ok, problems, errs): problems are strings about names/shapes,
    errs is a list of (rel_err, name) sorted worst first. A tensor passes when
    ||a-b|| <= rtol*||b|| + atol; names matching a regex in ``exclude`` are
    skipped entirely."""
    pats = [re.compile(x) for x in exclude]
    keep = lambda n: not any(p.search(n) for p in pats)
    a = {n: v for n, v in a.items() if keep(n)}
    b = {n: v for n, v in b.items() if keep(n)}
    problems = []
    for n in sorted(set(a) - set(b)):
        problems.append(f"tensor {n} only in A")
    for n in sorted(set(b) - set(a)):
        problems.append(f"tensor {n} only in B")
    errs = []
    for n in sorted(set(a) & set(b)):
        x, y = np.asarray(a[n], np.float64), np.asarray(b[n], np.float64)
        if x.shape != y.shape:
            problems.append(f"tensor {n}: shape {list(x.shape)} vs {list(y.shape)}")
            continue
        nb = float(np.linalg.norm(y.ravel()))
        d = float(np.linalg.norm((x - y).ravel()))
        e = d / nb if nb > 0 else d
        errs.append((e if not math.isnan(e) else math.inf, n,
                     d <= rtol * nb + atol))
    errs.sort(reverse=True)
    ok = not problems and all(p for _, _, p in errs)
    return ok, problems, errs


def cmd_weights(args):
    a, b = load_weights(args.a), load_weights(args.b)
    ok, problems, errs = compare_weights(a, b, args.rtol, args.atol,
                                         args.exclude)
    for p in problems:
        print(p)
    shown = errs if args.all else errs[:args.top]
    for e, n, passed in shown:
        print(f"  {e:10.3e}  {n}{'' if passed else '  <-- FAIL'}")
    worst = f"{errs[0][0]:.3e} ({errs[0][1]})" if errs else "n/a"
    nfail = sum(not p for _, _, p in errs)
    tol = f"rtol {args.rtol:g}" + (f" + atol {args.atol:g}" if args.atol else "")
    print(f"{'OK' if ok else 'FAIL'}: {len(errs)} tensors compared, {nfail} over "
          f"{tol}, {len(problems)} name/shape problems; worst {worst}")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("losses", help="compare per-step losses")
    pw = sub.add_parser("weights", help="compare final weights")
    for p in (pl, pw):
        p.add_argument("a")
        p.add_argument("b", help="the reference")
        p.add_argument("--rtol", type=float, default=1e-5)
    pw.add_argument("--top", type=int, default=5, help="how many worst to print")
    pw.add_argument("--all", action="store_true", help="print every tensor")
    pw.add_argument("--atol", type=float, default=0.0,
                    help="absolute slack on ||a-b||_2 (default 0)")
    pw.add_argument("--exclude", action="append", default=[], metavar="REGEX",
                    help="skip tensors whose name matches (repeatable)")
    args = ap.parse_args(argv)
    try:
        return cmd_losses(args) if args.cmd == "losses" else cmd_weights(args)
    except InputError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""End-to-end checks of Tessera on the Hugging Face fixtures (README.md).

Every subcommand takes --build DIR --family F --exporter ts14|ts17|dynamo
(the model test/e2e/hf/models/F.E.onnx and its reference refs/F.E.json),
prints every number it compares and exits 0 on a match, 1 on a mismatch.

    hf_e2e.py import --build DIR --family F --exporter E
        tessera-partition (serial, SGD) compiles the model into a plan.

    hf_e2e.py torch --build DIR --family F --exporter E --optimizer sgd|adamw
                    [--rtol 1e-4]
        Serial Tessera run (tessera-partition + tessera-run, 8 steps on
        examples/data/corpus.u16, SGD lr 0.1 / AdamW lr 3e-3 as the
        reference) vs the reference's 8 PyTorch losses: every step within
        rtol relative.

    hf_e2e.py parallel --build DIR --family F --exporter E
                       --optimizer sgd|adamw --dp N --tp M [--rtol 1e-5]
                       [--pp P --micro-batches M [--schedule S]]
                       [--sp KIND [--sp-size K]]
        N*M-rank run vs the serial run: every step's loss within rtol
        relative and, after the last step, every parameter (--save-weights)
        within rtol relative L2. The attention key bias is left out of the
        weight comparison (its key part, for fused QKV biases): its true
        gradient is exactly zero (softmax is shift-invariant), so its
        values are rounding noise that differs between any two summation
        orders (AdamW amplifies it to ~lr per step); the loss does not
        depend on it. Which tensors were left out is printed.
        Pipeline and sequence parallelism: --pp P --micro-batches M
        [--schedule gpipe|1f1b|interleaved [--virtual-stages V]] and
        --sp megatron|ulysses|ring [--sp-size K] are passed to the
        parallel run's tessera-partition (N*M*P*K ranks; K counts only for
        ulysses and ring, megatron shards the sequence over tp). A model
        that ties its embedding and LM head (GPT-2) cannot be pipelined.

    hf_e2e.py oracle --build DIR --family F --exporter E [--rtol 1e-5]
        onnxruntime computes the logits of step 0's batch from the ONNX
        file; their mean cross-entropy must equal Tessera's step-0 loss
        within rtol relative. Needs onnxruntime: when this python lacks
        it, the script re-runs itself under the test venv
        (.venv/test/bin/python, made by scripts/python-env.sh test, which
        `make deps` runs).

    hf_e2e.py params --build DIR --family F --exporter E
        `tessera-partition --explain` must report a trained set
        ("trained: N parameters, E elements") with the reference's
        parameter count and element count.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(E2E))
sys.path.insert(0, E2E)
import compare  # noqa: E402

CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
TEST_PYTHON = os.path.join(ROOT, ".venv", "test", "bin", "python")
STEPS = 8
LR = {"sgd": 0.1, "adamw": 3e-3}  # the references' rates (make_fixtures.py)

# A parameter element whose gradient at step 0 is at most this (absolute,
# SGD probe) has an exactly-zero true gradient: rounding noise (~1e-12 here)
# against real gradients of 1e-6 and more.
ZERO_GRAD = 1e-9
# The probe's SGD learning rate (zero_gradient_parts).
PROBE_LR = 1e6


class Fail(Exception):
    pass


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def run(cmd, capture=False):
    print("+", " ".join(cmd), flush=True)
    if capture:
        p = subprocess.run(cmd, env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if p.returncode:
            print(p.stdout)
            raise Fail(f"{os.path.basename(cmd[0])} exited {p.returncode}")
        return p.stdout
    if subprocess.run(cmd, env=env()).returncode:
        raise Fail(f"{os.path.basename(cmd[0])} failed")
    return None


def model_path(args):
    return os.path.join(HERE, "models", f"{args.family}.{args.exporter}.onnx")


def reference(args):
    with open(os.path.join(HERE, "refs",
                           f"{args.family}.{args.exporter}.json")) as f:
        return json.load(f)


def partition_cmd(args, plan, optimizer, dp=1, tp=1, lr=None):
    return [os.path.join(args.build, "tools", "tessera-partition",
                         "tessera-partition"),
            model_path(args), "-o", plan, "--dp", str(dp), "--tp", str(tp),
            "--optimizer", optimizer, "--lr", str(lr or LR[optimizer])]


def tessera(args, work, tag, optimizer, dp=1, tp=1, steps=STEPS, lr=None,
            extra=(), ranks=None):
    """Compiles and trains; returns (metrics.jsonl, weights.safetensors).
    `extra` is passed to tessera-partition; `ranks` (default dp * tp) to
    mpirun."""
    plan = os.path.join(work, f"{tag}.tsr")
    metrics = os.path.join(work, f"{tag}.jsonl")
    weights = os.path.join(work, f"{tag}.safetensors")
    run(partition_cmd(args, plan, optimizer, dp, tp, lr) + list(extra))
    run(["mpirun", "-np", str(ranks or dp * tp),
         os.path.join(args.build, "tools", "tessera-run", "tessera-run"),
         plan, "--data", CORPUS, "--steps", str(steps), "--metrics", metrics,
         "--save-weights", weights])
    return metrics, weights


def check_losses(got, want, rtol, what):
    ok, rows = compare.compare_losses(got, want, rtol)
    print(f"losses: {what} (rtol {rtol})")
    for step, a, b, err in rows:
        print(f"   step {step}: {a!r:>22} vs {b!r:>22}  rel err "
              + (f"{err:.3e}" if err is not None else "missing")
              + ("" if err is not None and err <= rtol else "  MISMATCH"))
    return ok and len(rows) == STEPS


def step0_batch(B, S):
    """Inputs and labels of step 0 (DESIGN.md; test/e2e/tessera_data.py)."""
    tokens = np.fromfile(CORPUS, dtype="<u2").astype(np.int64)
    T = tokens.size
    starts = [(j * S) % (T - S - 1) for j in range(B)]
    return (np.stack([tokens[a:a + S] for a in starts]),
            np.stack([tokens[a + 1:a + S + 1] for a in starts]))


def zero_gradient_parts(args, work):
    """{name: bool mask} of the parameter elements whose true gradient is
    exactly zero, found by a probe: the serial plan trained with SGD for 0
    and for 1 step at lr PROBE_LR; g = (w1 - w0) / lr. The huge step makes
    fp32 resolve |g| far below ZERO_GRAD on any initial value (an element of
    magnitude 0.1 moves by 1e6 * g, visible from g ~ 1e-14), while a real
    gradient moves it by ~1e6 * 1e-6 and more. An element counts when
    |g| <= ZERO_GRAD; a tensor counts as a whole when ||g||_2 <= ZERO_GRAD."""
    plan = os.path.join(work, "probe.tsr")
    run(partition_cmd(args, plan, "sgd", lr=PROBE_LR))
    w = []
    for steps in (0, 1):
        out = os.path.join(work, f"probe{steps}.safetensors")
        run(["mpirun", "-np", "1", os.path.join(args.build, "tools",
             "tessera-run", "tessera-run"), plan, "--data", CORPUS,
             "--steps", str(steps), "--save-weights", out])
        w.append(compare.load_weights(out))
    parts = {}
    for name, w0 in w[0].items():
        w0 = np.asarray(w0, np.float64)
        g = (np.asarray(w[1][name], np.float64) - w0) / PROBE_LR
        if np.linalg.norm(g) <= ZERO_GRAD:
            parts[name] = np.ones(w0.shape, bool)
            continue
        mask = np.abs(g) <= ZERO_GRAD
        if mask.any():
            parts[name] = mask
    return parts, w[0]


def without(weights, parts):
    """The weights with the masked elements removed (flattened)."""
    out = dict(weights)
    for name, mask in parts.items():
        if name in out:
            keep = ~mask.ravel()
            if keep.any():
                out[name] = np.asarray(out[name]).ravel()[keep]
            else:
                del out[name]
    return out


# --------------------------------------------------------------- commands --

def cmd_import(args, work):
    plan = os.path.join(work, "plan.tsr")
    run(partition_cmd(args, plan, "sgd"))
    ok = os.path.getsize(plan) > 0
    print(f"import: {os.path.basename(model_path(args))} -> plan "
          f"({os.path.getsize(plan)} bytes)")
    # The raised patterns: every layer's attention is one tsr.attention (no
    # S x S softmax left), and the RMSNorm families' norms are rms_norm.
    ir = run(partition_cmd(args, "-", "sgd") + ["--emit", "import"],
             capture=True)
    layers = reference(args)["config"].get(
        "num_hidden_layers", reference(args)["config"].get("n_layer"))
    counts = {op: len(re.findall(rf"= tsr\.{op} ", ir))
              for op in ("attention", "softmax", "rms_norm", "layer_norm")}
    print(f"import: {layers} layers; tsr ops: " +
          ", ".join(f"{op} {n}" for op, n in counts.items()))
    if counts["attention"] != layers or counts["softmax"]:
        print(f"FAIL: expected {layers} tsr.attention and no tsr.softmax")
        ok = False
    norms = counts["rms_norm"] + counts["layer_norm"]
    if norms < 2 * layers:
        print(f"FAIL: expected at least {2 * layers} raised norms, got {norms}")
        ok = False
    return ok


def cmd_torch(args, work):
    rtol = args.rtol or 1e-4
    ref = reference(args)
    metrics, _ = tessera(args, work, "serial", args.optimizer)
    want = {s: v for s, v in enumerate(ref["losses"][args.optimizer])}
    return check_losses(compare.load_losses(metrics), want, rtol,
                        f"tessera serial vs PyTorch "
                        f"({ref['versions']['torch']}, {args.optimizer})")


def cmd_parallel(args, work):
    rtol = args.rtol or 1e-5
    ser_m, ser_w = tessera(args, work, "serial", args.optimizer, lr=args.lr)
    extra, ranks, what = [], args.dp * args.tp, f"dp{args.dp} x tp{args.tp}"
    if args.pp > 1 or args.micro_batches > 1:
        extra += ["--pp", str(args.pp), "--micro-batches",
                  str(args.micro_batches), "--schedule", args.schedule]
        if args.schedule == "interleaved":
            extra += ["--virtual-stages", str(args.virtual_stages)]
        ranks *= args.pp
        what = (f"pp{args.pp} x {what}, M={args.micro_batches} "
                f"{args.schedule}")
    if args.sp:
        extra += ["--sp", args.sp]
        what += f" + sp {args.sp}"
        if args.sp != "megatron":
            extra += ["--sp-size", str(args.sp_size)]
            ranks *= args.sp_size
            what += f" x{args.sp_size}"
    par_m, par_w = tessera(args, work, "parallel", args.optimizer, args.dp,
                           args.tp, lr=args.lr, extra=extra, ranks=ranks)
    what += f", {args.optimizer} lr {args.lr or LR[args.optimizer]}"
    ok = check_losses(compare.load_losses(par_m), compare.load_losses(ser_m),
                      rtol, f"{what} vs serial")
    parts, initial = zero_gradient_parts(args, work)
    for name, mask in sorted(parts.items()):
        print(f"left out: {int(mask.sum())} of {mask.size} elements of {name}"
              f" (zero true gradient: |g| <= {ZERO_GRAD} at step 0)")
    par = without(compare.load_weights(par_w), parts)
    ser = without(compare.load_weights(ser_w), parts)
    initial = without(initial, parts)
    return check_weights(par, ser, initial, rtol, what) and ok


def check_weights(par, ser, initial, rtol, what):
    """Every tensor: ||par - ser||_2 <= rtol * ||ser||_2 (DESIGN.md,
    "Equivalence"). Also prints each tensor's distance from its initial
    value, so that a tensor the run barely moved shows."""
    if set(par) != set(ser) or set(ser) != set(initial) or not ser:
        print(f"weights: tensor names differ: only in the {what} run "
              f"{sorted(set(par) - set(ser))}, only in the serial run "
              f"{sorted(set(ser) - set(par))}")
        return False
    f64 = {n: np.asarray(ser[n], np.float64) for n in ser}
    upd = np.concatenate([(f64[n] - np.asarray(initial[n], np.float64))
                          .ravel() for n in ser])
    u = float(np.sqrt(np.mean(upd ** 2)))
    rows, ok = [], True
    for n in ser:
        a, b = np.asarray(par[n], np.float64), f64[n]
        if a.shape != b.shape:
            print(f"weights: {n}: shape {list(a.shape)} vs {list(b.shape)}")
            ok = False
            continue
        d, nb = float(np.linalg.norm(a - b)), float(np.linalg.norm(b))
        moved = float(np.linalg.norm(b - np.asarray(initial[n], np.float64)))
        good = d <= rtol * nb
        ok &= good
        rows.append((d / nb if nb else float("inf"), n, moved / nb
                     if nb else float("inf"), good))
    print(f"weights: {what} vs serial, rtol {rtol}, RMS update u = {u:.3e}; "
          f"{len(rows)} tensors, worst first: rel L2 err, rel L2 moved "
          f"by training")
    for rel, n, moved, good in sorted(rows, reverse=True):
        print(f"   {rel:.3e}  {moved:.3e}  {n}"
              + ("" if good else "  MISMATCH"))
    return ok


def have_onnxruntime():
    import importlib.util
    return importlib.util.find_spec("onnxruntime") is not None


def cmd_oracle(args, work):
    import onnxruntime as ort
    rtol = args.rtol or 1e-5
    ref = reference(args)
    metrics, _ = tessera(args, work, "serial", "sgd", steps=1)
    tessera0 = compare.load_losses(metrics)[0]
    ids, labels = step0_batch(ref["batch"], ref["seq"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_path(args), so,
                                providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"input_ids": ids})[0]
    x = logits.astype(np.float64).reshape(-1, logits.shape[-1])
    y = labels.reshape(-1)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    oracle = float((lse - x[np.arange(y.size), y]).mean())
    err = abs(tessera0 - oracle) / abs(oracle)
    ok = err <= rtol
    print(f"step-0 loss: tessera {tessera0:.9f}, onnxruntime "
          f"{ort.__version__} {oracle:.9f}: rel err {err:.3e} "
          f"(rtol {rtol}) {'ok' if ok else 'MISMATCH'}")
    return ok


TRAINED = re.compile(r"trained: (\d+) parameters, (\d+) elements")


def cmd_params(args, work):
    ref = reference(args)["parameters"]
    out = run(partition_cmd(args, os.path.join(work, "plan.tsr"), "sgd")
              + ["--explain"], capture=True)
    found = TRAINED.search(out)
    if not found:
        print(out)
        raise Fail("--explain printed no 'trained: N parameters, E "
                   "elements' line")
    count, elements = int(found.group(1)), int(found.group(2))
    ok = (count, elements) == (ref["count"], ref["elements"])
    print(f"trained set: tessera {count} parameters, {elements} elements; "
          f"PyTorch {ref['count']} parameters, {ref['elements']} elements "
          f"{'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("import", "torch", "parallel", "oracle", "params"):
        p = sub.add_parser(name)
        p.add_argument("--build", required=True)
        p.add_argument("--family", required=True)
        p.add_argument("--exporter", required=True,
                       choices=("ts14", "ts17", "dynamo"))
        p.add_argument("--rtol", type=float)
        p.add_argument("--lr", type=float,
                       help="learning rate (default: SGD 0.1, AdamW 3e-3)")
        if name in ("torch", "parallel"):
            p.add_argument("--optimizer", required=True,
                           choices=("sgd", "adamw"))
        if name == "parallel":
            p.add_argument("--dp", type=int, default=1)
            p.add_argument("--tp", type=int, default=1)
            p.add_argument("--pp", type=int, default=1)
            p.add_argument("--micro-batches", type=int, default=1)
            p.add_argument("--schedule", default="1f1b",
                           choices=("gpipe", "1f1b", "interleaved"))
            p.add_argument("--virtual-stages", type=int, default=2)
            p.add_argument("--sp", choices=("megatron", "ulysses", "ring"))
            p.add_argument("--sp-size", type=int, default=2)
    args = ap.parse_args()
    if not os.path.exists(model_path(args)):
        print(f"hf_e2e: no model {model_path(args)}", file=sys.stderr)
        return 2
    if args.cmd == "oracle" and not have_onnxruntime():
        if os.environ.get("HF_E2E_REEXEC") or not os.path.exists(TEST_PYTHON):
            print(f"hf_e2e: oracle needs onnxruntime: {sys.executable} has "
                  f"none and {TEST_PYTHON} is missing or lacks it; run "
                  f"scripts/python-env.sh test (make deps does)",
                  file=sys.stderr)
            return 2
        os.environ["HF_E2E_REEXEC"] = "1"
        os.execv(TEST_PYTHON, [TEST_PYTHON, os.path.abspath(__file__)]
                 + sys.argv[1:])
    cmds = {"import": cmd_import, "torch": cmd_torch,
            "parallel": cmd_parallel, "oracle": cmd_oracle,
            "params": cmd_params}
    with tempfile.TemporaryDirectory(prefix="hf_e2e.") as work:
        try:
            ok = cmds[args.cmd](args, work)
        except Fail as e:
            print(f"FAIL: {e}")
            return 1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

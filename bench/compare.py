#!/usr/bin/python3
"""Tessera vs PyTorch eager vs torch.compile, serial and on 2 ranks.

    compare.py [--build build] [--models example,gpt2small,hf-gpt2]
               [--modes serial,2rank] [--repeats R] [--steps-scale X]
               [--cores 0,1] [--json OUT.json] [--keep DIR]

Environment (for `make bench`): BENCH_MODELS, BENCH_MODES, BENCH_REPEATS,
BENCH_STEPS_SCALE, BENCH_CORES set the defaults of the flags above.

For each model, on the same weights and the same batches (DESIGN.md's data
convention over examples/data/corpus.u16), AdamW fp32 (lr 1e-3, betas
0.9/0.999, eps 1e-8, weight decay 0.01 on both sides):

  serial  Tessera (tessera-partition, default fusion; tessera-run under
          `mpirun -np 1`), PyTorch eager (Debian's /usr/bin/python3, torch
          1.13; the HF model in the export-ts venv, the same torch) and
          torch.compile (inductor, CPU; the export-dynamo venv's PyPI torch
          2.x; AdamW(fused=True) when that torch has it), one thread each,
          every process pinned to the first core of --cores (taskset);
  2rank   Tessera dp2 (with --bucket-mb 25: bucketed gradient all-reduces
          overlapped with backward, DDP's default bucket size) and tp2
          (mpirun -np 2, rank r pinned to core r of --cores) and PyTorch DDP over gloo on 2 processes pinned the same
          way (global batch split in halves, as Tessera's dp2 splits it).

The PyTorch sides are started once per model (bench/torch_peer.py: built,
loaded, warmed up, compiled) and then serve timed steps; Tessera runs as a
fresh process each time. The runs are interleaved (A, B, C, A, B, C, ...),
--repeats rounds; a run's time is the median of its timed steps (Tessera:
steps after its warm-up steps), and each side prints the median and the
min-max of its runs' times. Ratios are Tessera's time / the peer's (serial:
below 1 = Tessera faster) and throughput ratios the peer's time /
Tessera's (2rank, same global batch: above 1 = Tessera faster), each as
the median over rounds of the round's ratio, with the min-max over rounds.
Step 0's loss of every side is printed: they agree (same weights, same
data) unless marked.

Models (`--models`):
  example    examples/gpt/gpt.onnx (2 layers, hidden 64, 4 heads, FFN 256,
             sequence 64, batch 8, vocabulary 256); the peer is
             examples/gpt/model.py's seeded `example` config
  gpt2small  GPT-2-small-shaped, scaled to fit: 6 layers, hidden 384, 6
             heads, FFN 1536, sequence 256, vocabulary 8192, batch 4
             (examples/gpt/make_gpt_onnx.py --with-weights; the peer is
             model.py's HandwrittenGPT loaded with its initializers)
  hf-gpt2    Hugging Face GPT2LMHeadModel (transformers 4.49 / 5.x), 4
             layers, hidden 256, 8 heads, sequence 256, vocabulary 8192,
             batch 8 (bench/make_hf_model.py: TorchScript export, opset 17)

It also prints the machine-independent counts of each model's serial plan
(tessera-partition --kernel-counts-json, compiler/planner/KernelCounts.h):
kernels per step and operand + result bytes of the non-GEMM kernels per
step, with `--fusion none` and with the default fusion.

A side that cannot run (a venv missing: create it with
scripts/python-env.sh export-dynamo / export-ts) is reported as missing and
left out of the ratios, and so is one whose process fails (its error is
printed). Exit status: 0, or 2 when a Tessera command fails.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
LR = 1e-3
# Tessera's dp2 plan: gradients all-reduced in buckets of 25 MiB started
# during backward, as DDP does by default (bucket_cap_mb=25).
DP2_FLAGS = ["--dp", "2", "--bucket-mb", "25"]
SYSTEM_PYTHON = "/usr/bin/python3"

MODELS = {
    "example": dict(
        title="example GPT (examples/gpt/gpt.onnx: 2 layers, hidden 64, "
              "4 heads, seq 64, batch 8, vocab 256)",
        batch=8, seq=64, vocab=256, warmup=3, steps=20),
    "gpt2small": dict(
        title="GPT-2-small-shaped (6 layers, hidden 384, 6 heads, seq 256, "
              "batch 4, vocab 8192; make_gpt_onnx.py)",
        layers=6, hidden=384, heads=6, batch=4, seq=256, vocab=8192,
        warmup=1, steps=3),
    "hf-gpt2": dict(
        title="HF GPT2LMHeadModel (4 layers, hidden 256, 8 heads, seq 256, "
              "batch 8, vocab 8192; TorchScript export)",
        layers=4, hidden=256, heads=8, batch=8, seq=256, vocab=8192,
        warmup=1, steps=3),
}


def env_default(name, default):
    return os.environ.get(name) or default


def tool_env():
    env = dict(os.environ)
    env.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    })
    return env


def run(cmd, quiet=True):
    """Runs cmd; on failure prints its output, names it and exits 2."""
    if not quiet:
        print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, env=tool_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"command failed (exit {proc.returncode}): "
                         f"{' '.join(cmd)}\n{proc.stdout[-4000:]}")
        sys.exit(2)
    return proc.stdout


def venv_python(name):
    """The venv's python once scripts/python-env.sh has finished it (its
    package stamp written), else None."""
    venv = os.path.join(ROOT, ".venv", name)
    path = os.path.join(venv, "bin", "python")
    done = os.path.exists(os.path.join(venv, ".tessera-packages"))
    return path if done and os.path.exists(path) else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ models --

def npz_from_onnx(onnx_path, out):
    """The ONNX file's initializers as an .npz (name -> array), for the
    peers (run with /usr/bin/python3, which has onnx)."""
    code = ("import sys, numpy as np, onnx\n"
            "from onnx import numpy_helper\n"
            "m = onnx.load(sys.argv[1])\n"
            "np.savez(sys.argv[2], **{i.name: numpy_helper.to_array(i) "
            "for i in m.graph.initializer})\n")
    run([SYSTEM_PYTHON, "-c", code, onnx_path, out])


def prepare(name, work):
    """(onnx path, peer spec path, {"eager": python, "compile": python}) of
    model `name`, written under `work`."""
    m = MODELS[name]
    spec = dict(batch=m["batch"], seq=m["seq"], vocab=m["vocab"], lr=LR,
                data=CORPUS)
    eager_py = SYSTEM_PYTHON
    if name == "example":
        onnx_path = os.path.join(ROOT, "examples", "gpt", "gpt.onnx")
        spec.update(kind="config", name="example")
    elif name == "gpt2small":
        onnx_path = os.path.join(work, f"{name}.onnx")
        run([SYSTEM_PYTHON, os.path.join(ROOT, "examples", "gpt",
                                         "make_gpt_onnx.py"),
             "--layers", str(m["layers"]), "--hidden", str(m["hidden"]),
             "--heads", str(m["heads"]), "--seq", str(m["seq"]),
             "--vocab", str(m["vocab"]), "--batch", str(m["batch"]),
             "--with-weights", "-o", onnx_path])
        weights = os.path.join(work, f"{name}.npz")
        npz_from_onnx(onnx_path, weights)
        spec.update(kind="handwritten", weights=weights, config=dict(
            vocab=m["vocab"], d_model=m["hidden"], nhead=m["heads"],
            d_ff=4 * m["hidden"], layers=m["layers"], seq=m["seq"],
            batch=m["batch"], activation="gelu", norm_first=True,
            causal=True, attention="handwritten", seed=0))
    elif name == "hf-gpt2":
        eager_py = venv_python("export-ts")
        if eager_py is None:
            return None, None, {}, ("needs the export-ts venv "
                                    "(scripts/python-env.sh export-ts)")
        onnx_path = os.path.join(work, f"{name}.onnx")
        weights = os.path.join(work, f"{name}.npz")
        config = dict(vocab_size=m["vocab"], n_positions=m["seq"],
                      n_embd=m["hidden"], n_layer=m["layers"],
                      n_head=m["heads"], resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, summary_first_dropout=0.0)
        run([eager_py, os.path.join(ROOT, "bench", "make_hf_model.py"),
             "--family", "gpt2", "--config", json.dumps(config),
             "--batch", str(m["batch"]), "--seq", str(m["seq"]),
             "-o", onnx_path, "--weights", weights])
        spec.update(kind="hf", family="gpt2", config=config, weights=weights)
    else:
        sys.exit(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    spec_path = os.path.join(work, f"{name}.spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    pythons = {"eager": eager_py, "compile": venv_python("export-dynamo")}
    return onnx_path, spec_path, pythons, None


# ----------------------------------------------------------------- tessera --

class Tessera:
    """A Tessera plan run as a fresh tessera-run per timed run."""

    def __init__(self, label, tools, plan, ranks, cores, warmup, work):
        self.label, self.tools, self.plan = label, tools, plan
        self.ranks, self.cores, self.warmup, self.work = (ranks, cores,
                                                          warmup, work)
        self.first_loss = None

    def command(self, steps, metrics):
        run_args = [self.tools["run"], self.plan, "--data", CORPUS,
                    "--steps", str(self.warmup + steps), "--metrics", metrics,
                    "--log-every", "0"]
        # Rank r on core cores[r]: taskset inside mpirun, which binds none.
        pick = "; ".join(f"[ \"$OMPI_COMM_WORLD_RANK\" = {r} ] && c={c}"
                         for r, c in enumerate(self.cores[:self.ranks]))
        script = f"c={self.cores[0]}; {pick}; exec taskset -c $c \"$@\""
        return (["mpirun", "-np", str(self.ranks), "--bind-to", "none",
                 "sh", "-c", script, "sh"] + run_args)

    def measure(self, steps):
        metrics = os.path.join(self.work, "metrics.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        run(self.command(steps, metrics))
        rows = [json.loads(line) for line in open(metrics) if line.strip()]
        rows.sort(key=lambda r: r["step"])
        if self.first_loss is None and rows:
            self.first_loss = rows[0].get("loss")
        times = [r["step_time_s"] for r in rows if r["step"] >= self.warmup]
        if not times:
            sys.exit(f"{self.label}: no steps after the warm-up in {metrics}")
        return statistics.median(times)

    def close(self):
        pass


class PeerFailed(Exception):
    """A PyTorch side did not start or stopped answering."""


class Peer:
    """bench/torch_peer.py processes (1, or 2 for DDP) serving timed steps."""

    def __init__(self, label, python, spec, compile_, world, cores, warmup):
        self.label = label
        self.procs = []
        self.info = {}
        port = free_port()
        cmd = [python, os.path.join(ROOT, "bench", "torch_peer.py"),
               "--spec", spec, "--threads", "1", "--warmup", str(warmup)]
        if compile_:
            cmd.append("--compile")
        self.log = tempfile.TemporaryFile(mode="w+")
        for r in range(world):
            full = ["taskset", "-c", str(cores[r])] + cmd
            if world > 1:
                full += ["--rank", str(r), "--world", str(world),
                         "--port", str(port)]
            self.procs.append(subprocess.Popen(
                full, env=tool_env(), text=True, bufsize=1,
                stdin=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                stderr=self.log))
        line = self.readline()
        if not line.startswith("READY "):
            self.fail(f"did not start ({line.strip()!r})")
        self.info = json.loads(line[len("READY "):])
        self.first_loss = self.info["losses"][0] if self.info["losses"] \
            else None

    def readline(self):
        line = self.procs[0].stdout.readline()
        if not line:
            self.fail("exited")
        return line

    def fail(self, what):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        self.log.seek(0)
        log = self.log.read()
        sys.stderr.write(f"{self.label}: {what}\n{log[-4000:]}\n")
        last = [line for line in log.splitlines() if line.strip()]
        raise PeerFailed(f"{self.label} {what}"
                         + (f": {last[-1].strip()}" if last else ""))

    def measure(self, steps):
        self.procs[0].stdin.write(f"run {steps}\n")
        self.procs[0].stdin.flush()
        return statistics.median(json.loads(self.readline())["times"])

    def close(self):
        try:
            self.procs[0].stdin.write("quit\n")
            self.procs[0].stdin.close()
        except (BrokenPipeError, OSError):
            pass
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


# ------------------------------------------------------------------ report --

def spread(xs):
    return statistics.median(xs), min(xs), max(xs)


def fmt_ms(xs):
    med, lo, hi = spread(xs)
    return f"{med * 1e3:10.2f} {lo * 1e3:9.2f}-{hi * 1e3:.2f}"


def kernel_counts(tools, onnx_path, work, fusion):
    out = os.path.join(work, f"counts-{fusion}.json")
    cmd = [tools["partition"], onnx_path, "-o", os.path.join(work, "c.tsr"),
           "--optimizer", "adamw", "--kernel-counts-json", out]
    if fusion != "default":
        cmd += ["--fusion", fusion]
    proc = subprocess.run(cmd, env=tool_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        return None
    return json.load(open(out))


def bench_model(name, args, tools, work, results):
    m = MODELS[name]
    mwork = os.path.join(work, name)
    os.makedirs(mwork, exist_ok=True)
    onnx_path, spec, pythons, why = prepare(name, mwork)
    print(f"\n=== {m['title']}", flush=True)
    if onnx_path is None:
        print(f"  skipped: {why}")
        results[name] = {"skipped": why}
        return
    steps = max(1, round(m["steps"] * args.steps_scale))
    warmup = m["warmup"]
    peer_warmup = max(3, warmup)
    res = results.setdefault(name, {"title": m["title"], "steps": steps})

    counts = {f: kernel_counts(tools, onnx_path, mwork, f)
              for f in ("none", "default")}
    res["counts"] = counts
    if all(counts.values()):
        print("  counts per step (tessera-partition --kernel-counts-json, "
              "serial plan):")
        for f, c in counts.items():
            print(f"    --fusion {f:8s} {c['kernels_per_step']:6d} kernels "
                  f"({c['gemm_kernels_per_step']} GEMM), non-GEMM bytes "
                  f"{c['non_gemm_bytes_per_step'] / 1e6:10.2f} MB")
    else:
        print("  counts: tessera-partition has no --kernel-counts-json")

    plans = {}
    for label, flags in (("serial", []), ("dp2", DP2_FLAGS),
                         ("tp2", ["--tp", "2"])):
        if label != "serial" and "2rank" not in args.modes:
            continue
        plans[label] = os.path.join(mwork, f"{label}.tsr")
        run([tools["partition"], onnx_path, "-o", plans[label],
             "--optimizer", "adamw", "--lr", f"{LR:g}"] + flags)

    for mode in args.modes:
        if mode == "serial":
            cores = [args.cores[0]]
            sides = [Tessera("tessera", tools, plans["serial"], 1, cores,
                             warmup, mwork)]
            peers = [("eager", "pytorch eager", False),
                     ("compile", "torch.compile", True)]
            world = 1
            what = (f"serial, 1 thread, every process on core "
                    f"{args.cores[0]}")
        else:
            cores = args.cores[:2]
            sides = [Tessera("tessera dp2 " + " ".join(DP2_FLAGS[2:]), tools,
                             plans["dp2"], 2, cores,
                             warmup, mwork),
                     Tessera("tessera tp2", tools, plans["tp2"], 2, cores,
                             warmup, mwork)]
            peers = [("eager", "pytorch DDP (gloo)", False)]
            world = 2
            what = (f"2 ranks, 1 thread each, rank r on core "
                    f"{','.join(map(str, cores))}[r]")
        missing = []
        for key, label, compile_ in peers:
            py = pythons.get(key)
            if py is None:
                missing.append(f"{label}: needs the export-dynamo venv "
                               "(scripts/python-env.sh export-dynamo)")
                continue
            t0 = time.time()
            try:
                peer = Peer(label, py, spec, compile_, world, cores,
                            peer_warmup)
            except PeerFailed as e:
                missing.append(str(e))
                continue
            peer.label = (f"{label} {peer.info['torch']}"
                          + (" (fused AdamW)" if peer.info.get("fused_adamw")
                             else ""))
            peer.start_s = time.time() - t0
            sides.append(peer)
        print(f"\n  -- {what}; {args.repeats} interleaved rounds x {steps} "
              f"timed steps", flush=True)
        times = {s.label: [] for s in sides}
        try:
            for _ in range(args.repeats):
                for s in sides:
                    times[s.label].append(s.measure(steps))
        finally:
            for s in sides:
                s.close()
        print(f"  {'side':40s} {'median ms':>10s} {'min-max ms':>16s}")
        for s in sides:
            print(f"  {s.label:40s} {fmt_ms(times[s.label])}")
        for line in missing:
            print(f"  missing: {line}")
        ratios = {}
        tess = [s for s in sides if isinstance(s, Tessera)]
        others = [s for s in sides if isinstance(s, Peer)]
        for t in tess:
            for p in others:
                per_round = [a / b if mode == "serial" else b / a
                             for a, b in zip(times[t.label], times[p.label])]
                key = f"{t.label} / {p.label}"
                ratios[key] = per_round
                med, lo, hi = spread(per_round)
                kind = ("time ratio" if mode == "serial"
                        else "throughput ratio")
                print(f"  {kind} {key}: {med:.2f} (rounds {lo:.2f}-{hi:.2f})")
        losses = "; ".join(f"{s.label} {s.first_loss:.5f}" for s in sides
                           if s.first_loss is not None)
        ref = tess[0].first_loss if tess else None
        bad = [s.label for s in sides if ref is not None and
               s.first_loss is not None and
               abs(s.first_loss - ref) > 1e-3 * abs(ref)]
        print(f"  step-0 loss: {losses}"
              + (f"  DIFFERENT: {', '.join(bad)}" if bad else " (agree)"))
        res[mode] = {"times_s": times, "ratios": ratios,
                     "first_loss": {s.label: s.first_loss for s in sides},
                     "missing": missing}
    results[name] = res


def summary(results, modes):
    print("\n=== summary (median over rounds; serial: Tessera time / peer "
          "time, below 1 = Tessera faster; 2rank: throughput Tessera / DDP, "
          "above 1 = Tessera faster)")
    for name, res in results.items():
        if "skipped" in res:
            print(f"  {name:10s} skipped: {res['skipped']}")
            continue
        parts = []
        for mode in modes:
            for key, rs in res.get(mode, {}).get("ratios", {}).items():
                med, lo, hi = spread(rs)
                parts.append(f"{key} {med:.2f} [{lo:.2f}-{hi:.2f}]")
        print(f"  {name:10s} " + "\n  {:10s} ".format("").join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default=env_default(
        "BENCH_MODELS", "example,gpt2small,hf-gpt2"))
    ap.add_argument("--modes", default=env_default("BENCH_MODES",
                                                   "serial,2rank"))
    ap.add_argument("--repeats", type=int,
                    default=int(env_default("BENCH_REPEATS", "3")))
    ap.add_argument("--steps-scale", type=float,
                    default=float(env_default("BENCH_STEPS_SCALE", "1")),
                    help="multiplies every model's timed steps per run")
    ap.add_argument("--cores", default=env_default("BENCH_CORES", "0,1"))
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--keep", help="work directory to keep")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    args.cores = [int(c) for c in args.cores.split(",")]
    if len(args.cores) < 2 and "2rank" in args.modes:
        sys.exit("--cores needs two cores for --modes 2rank")
    build = os.path.join(ROOT, args.build)
    tools = {"partition": os.path.join(build, "tools", "tessera-partition",
                                       "tessera-partition"),
             "run": os.path.join(build, "tools", "tessera-run",
                                 "tessera-run")}
    for t in tools.values():
        if not os.path.exists(t):
            sys.exit(f"{t} not found: build first (make build)")
    work = args.keep or tempfile.mkdtemp(prefix="tessera-compare-")
    os.makedirs(work, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    results = {}
    try:
        for name in [m for m in args.models.split(",") if m]:
            bench_model(name, args, tools, work, results)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    summary(results, args.modes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

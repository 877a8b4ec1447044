#!/usr/bin/python3
"""Where the step time goes, op by op: Tessera vs PyTorch eager.

    op_profile.py [--build build] [--model example|gpt2small|hf-gpt2]
                  [--steps N] [--core 0] [--markdown] [--json OUT.json]

On one core (taskset), one thread, the same model, weights and batch
(bench/compare.py's models), AdamW fp32:

  Tessera   tessera-partition (default fusion) + `tessera-run --profile`
            (per instruction kind: calls, host seconds and bytes read +
            written per step, step 0 left out), `--steps` + 1 steps;
  PyTorch   eager (Debian's torch 1.13; the HF model in the export-ts venv)
            under torch.profiler (record_shapes) for `--steps` steps after 2
            warm-up steps (bench/torch_peer.py --profile-steps).

Both are mapped to the same categories (bench/op_categories.py: GEMM,
attention, norm, activation, softmax/CE, optimizer, elementwise, embedding,
layout/copies, collectives, other) and printed side by side: milliseconds,
calls and MB moved per step, and Tessera's time over PyTorch's per
category. Tessera's "other" is the executor's own time (the step minus its
instructions). PyTorch's category times are self CPU times under the
profiler (nested calls not counted twice; an op's internal calls, e.g.
1.13's per-batch mm inside bmm, belong to the op), its step time the
median of as many steps without the profiler; its bytes are the calls' input
tensors only (the profiler records no output shapes); its attention is
not one op (its GEMMs and softmax land in those categories).
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import op_categories  # noqa: E402

ROOT = compare.ROOT


def tessera_profile(tools, onnx_path, work, steps, core):
    plan = os.path.join(work, "plan.tsr")
    compare.run([tools["partition"], onnx_path, "-o", plan, "--optimizer",
                 "adamw", "--lr", f"{compare.LR:g}"])
    prof = os.path.join(work, "tessera-profile.json")
    compare.run(["mpirun", "-np", "1", "--bind-to", "none", "taskset", "-c",
                 str(core), tools["run"], plan, "--data", compare.CORPUS,
                 "--steps", str(steps + 1), "--profile", prof,
                 "--log-every", "0"])
    data = json.load(open(prof))
    rank = data["ranks"][0]
    cats = {c: {"seconds": 0.0, "calls": 0.0, "bytes": 0.0}
            for c in op_categories.CATEGORIES}
    total = 0.0
    for op in rank["ops"]:
        c = cats[op_categories.category(op["kind"])]
        c["seconds"] += op["seconds_per_step"]
        c["calls"] += op["calls_per_step"]
        c["bytes"] += op.get("bytes_per_step", 0.0)
        total += op["seconds_per_step"]
    cats["other"]["seconds"] += max(0.0, rank["step_s"] - total)
    return {"step_s": rank["step_s"], "categories": cats,
            "ops": rank["ops"], "executor_s": rank["step_s"] - total}


def torch_profile(python, spec, work, steps, core):
    out = os.path.join(work, "torch-profile.json")
    compare.run(["taskset", "-c", str(core), python,
                 os.path.join(ROOT, "bench", "torch_peer.py"), "--spec", spec,
                 "--threads", "1", "--warmup", "2", "--profile-steps",
                 str(steps), "--profile-out", out])
    return json.load(open(out))


def table(model, t, p, markdown):
    rows = []
    for c in op_categories.CATEGORIES:
        a, b = t["categories"][c], p["categories"][c]
        if not (a["seconds"] or b["seconds"] or a["calls"] or b["calls"]):
            continue
        ratio = (f"{a['seconds'] / b['seconds']:.2f}"
                 if b["seconds"] > 0 and a["seconds"] > 0 else "-")
        rows.append((c, a["seconds"] * 1e3, a["calls"], a["bytes"] / 1e6,
                     b["seconds"] * 1e3, b["calls"], b["bytes"] / 1e6, ratio))
    rows.append(("step", t["step_s"] * 1e3, sum(r[2] for r in rows),
                 sum(r[3] for r in rows), p["step_s"] * 1e3,
                 sum(r[5] for r in rows), sum(r[6] for r in rows),
                 f"{t['step_s'] / p['step_s']:.2f}"))
    if markdown:
        print("| category | Tessera ms | calls | MB | PyTorch ms | calls | "
              "MB (inputs) | Tessera / PyTorch time |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            name = f"**{r[0]}**" if r[0] == "step" else r[0]
            print(f"| {name} | {r[1]:.2f} | {r[2]:.0f} | {r[3]:.1f} | "
                  f"{r[4]:.2f} | {r[5]:.0f} | {r[6]:.1f} | {r[7]} |")
        return
    print(f"{'category':14s} | {'Tessera ms':>10s} {'calls':>6s} "
          f"{'MB':>8s} | {'PyTorch ms':>10s} {'calls':>6s} {'MB in':>8s} "
          f"| {'T/P time':>8s}")
    for r in rows:
        print(f"{r[0]:14s} | {r[1]:10.2f} {r[2]:6.0f} {r[3]:8.1f} | "
              f"{r[4]:10.2f} {r[5]:6.0f} {r[6]:8.1f} | {r[7]:>8s}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="example", choices=sorted(
        compare.MODELS))
    ap.add_argument("--steps", type=int, default=None,
                    help="profiled steps (default: the model's bench steps)")
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    build = os.path.join(ROOT, args.build)
    tools = {"partition": os.path.join(build, "tools", "tessera-partition",
                                       "tessera-partition"),
             "run": os.path.join(build, "tools", "tessera-run",
                                 "tessera-run")}
    m = compare.MODELS[args.model]
    steps = args.steps or m["steps"]
    with tempfile.TemporaryDirectory(prefix="tessera-opprof-") as work:
        onnx_path, spec, pythons, why = compare.prepare(args.model, work)
        if onnx_path is None:
            sys.exit(f"{args.model}: {why}")
        t = tessera_profile(tools, onnx_path, work, steps, args.core)
        p = torch_profile(pythons["eager"], spec, work, steps, args.core)
    print(f"{m['title']}: {steps} profiled steps, 1 thread, core "
          f"{args.core}; Tessera {t['step_s'] * 1e3:.2f} ms/step (executor "
          f"{t['executor_s'] * 1e3:.2f} ms), PyTorch {p['torch']} eager "
          f"{p['step_s'] * 1e3:.2f} ms/step (median of {steps} steps "
          f"without the profiler; {p['profiled_step_s'] * 1e3:.2f} under it)")
    table(args.model, t, p, args.markdown)
    print("\nTessera kinds (ms/step, calls/step, MB/step):")
    for op in t["ops"][:14]:
        print(f"  {op['kind']:24s} {op['seconds_per_step'] * 1e3:9.2f} "
              f"{op['calls_per_step']:6.0f} "
              f"{op.get('bytes_per_step', 0) / 1e6:9.1f}  "
              f"[{op_categories.category(op['kind'])}]")
    print("PyTorch ops (self ms/step, calls/step) [category of the op's own "
          "name; in the table an op's internal calls count with their "
          "caller]:")
    for op in p["ops"][:14]:
        print(f"  {op['name']:40s} {op['self_seconds_per_step'] * 1e3:9.2f} "
              f"{op['calls_per_step']:6.0f}  [{op['category']}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "tessera": t, "pytorch": p}, f,
                      indent=1)


if __name__ == "__main__":
    main()

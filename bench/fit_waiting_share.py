#!/usr/bin/env python3
"""Fits a calibration's `waiting_rank_share` to real pipeline steps.

    bench/fit_waiting_share.py --cluster IN.json -o OUT.json [--force]
        [--build build] [--np 4] [--steps 20] [--repeat 8] [--no-bind]

`waiting_rank_share` (compiler/planner/Cluster.h) is how much of its core a
rank waiting for a pipeline message still takes when ranks share cores
(the CPU backend oversubscribed); the planner's pipeline simulation
(tsrt::schedule::simulate) gives the rest to the ranks that run.
`tessera-run --calibrate` measures it with a synthetic two-stage pipeline
of LayerSegment chunks, and that reads 0 to 0.3: bubbles almost free. The
executor's real pipelines are slower than that: on this machine the
example GPT's pp2 x dp2, pp4 and pp2 x tp2 plans ran 15-22% slower than
predicted with the synthetic's share (docs/Planner.md, "The waiting share,
from real pipeline steps"). So this script measures it the way Galvatron
and Alpa profile a cost they cannot derive: from real steps of a reference
model, here a GPT that is not the example (4 layers, hidden 64, 4 heads,
sequence 32, batch 16, vocabulary 256; written by
examples/gpt/make_gpt_onnx.py --with-weights).

For each reference plan (pipelines: pp2 x dp(N/2) with 4 micro-batches, pp
N with 2N micro-batches, pp2 x tp(N/2) with 4 micro-batches, 1F1B;
anchors: dpN, tpN, dp(N/2) x tp2) it partitions the model, runs `mpirun
-np N tessera-run` --repeat times round-robin (the median over runs of
each run's median step, the first step left out), and predicts the step
with `tessera-partition --cluster --predict-json` for waiting_rank_share
0, 0.05, ..., 1. The share written is the one for which each pipeline's
time relative to the anchors (their geometric mean) is predicted closest
to the measured one (least squares of the log ratios): relative, because
the host's speed drifts between a calibration and later runs by 10-20%
(docs/Planner.md), and an absolute fit would read that drift as a share.
OUT.json is IN.json with that share and a note in its `source`.

MPI runs as bench/planner_calibration.py runs it (ranks bound to cores
round-robin, OMPI_ALLOW_RUN_AS_ROOT, oversubscription allowed,
OPENBLAS_NUM_THREADS=1): run it on an otherwise idle machine, with the
binding the calibration used.

Errors: exit 1 when IN.json is unreadable or has no cores_per_node below
the rank count (nothing to fit), when OUT.json exists without --force or a
tool is missing; exit 2 when a tool fails (its output is printed).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planner_calibration import ROOT, mpi_env, run, step_times  # noqa: E402


def reference_plans(n):
    """(pipelines, anchors): name and tessera-partition flags."""
    pipelines = [
        (f"pp2 dp{n // 2} m4", ["--pp", "2", "--dp", str(n // 2),
                                "--micro-batches", "4"]),
        (f"pp{n} m{2 * n}", ["--pp", str(n), "--micro-batches", str(2 * n)]),
        (f"pp2 tp{n // 2} m4", ["--pp", "2", "--tp", str(n // 2),
                                "--micro-batches", "4"]),
    ]
    anchors = [
        (f"dp{n}", ["--dp", str(n)]),
        (f"tp{n}", ["--tp", str(n)]),
        (f"dp{n // 2} tp2", ["--dp", str(n // 2), "--tp", "2"]),
    ]
    return pipelines, anchors


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True,
                    help="calibration JSON (tessera-run --calibrate)")
    ap.add_argument("-o", dest="out", required=True,
                    help="where to write the calibration with the fitted "
                    "share")
    ap.add_argument("--force", action="store_true",
                    help="overwrite OUT.json")
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--no-bind", action="store_true",
                    help="let the OS place the ranks (as "
                    "planner_calibration.py --no-bind)")
    args = ap.parse_args()
    if args.np < 4 or args.np % 2:
        sys.exit("error: --np must be even and at least 4 (pp2 x dp/tp "
                 "np/2)")
    if os.path.exists(args.out) and not args.force:
        sys.exit(f"error: {args.out} exists (use --force to overwrite)")
    try:
        with open(args.cluster) as f:
            cluster = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"error: cannot read the calibration {args.cluster}: {e}")
    cores = cluster.get("cores_per_node", 0)
    if not (0 < cores < args.np):
        sys.exit(f"error: {args.cluster} has cores_per_node {cores} for "
                 f"{args.np} ranks: the ranks do not share cores, there is "
                 "no waiting share to fit")

    build = os.path.join(ROOT, args.build)
    partition = os.path.join(build, "tools/tessera-partition/tessera-partition")
    runner = os.path.join(build, "tools/tessera-run/tessera-run")
    for tool in (partition, runner):
        if not os.access(tool, os.X_OK):
            sys.exit(f"error: {tool} is missing (build first)")
    data = os.path.join(ROOT, "examples/data/corpus.u16")
    env = mpi_env(bind=not args.no_bind)
    work = tempfile.mkdtemp(prefix="tessera-fit-share-")
    model = os.path.join(work, "reference.onnx")
    run([sys.executable, os.path.join(ROOT, "examples/gpt/make_gpt_onnx.py"),
         "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32",
         "--vocab", "256", "--batch", "16", "--ffn", "256", "--with-weights",
         "-o", model], env)

    pipelines, anchors = reference_plans(args.np)
    plans = pipelines + anchors
    for i, (_, flags) in enumerate(plans):
        run([partition, model, "-o", os.path.join(work, f"plan{i}.tsr")] +
            flags, env)
    medians = [[] for _ in plans]
    for r in range(args.repeat):
        for i, (name, _) in enumerate(plans):
            metrics = os.path.join(work, f"plan{i}.{r}.jsonl")
            run(["mpirun", "-np", str(args.np), runner,
                 os.path.join(work, f"plan{i}.tsr"), "--data", data,
                 "--steps", str(args.steps), "--metrics", metrics,
                 "--log-every", "0"], env)
            medians[i].append(statistics.median(step_times(metrics)))
    measured = [statistics.median(m) for m in medians]

    shares = [k / 20 for k in range(21)]
    predicted = {}  # share -> [seconds per plan]
    for share in shares:
        trial = dict(cluster, waiting_rank_share=share)
        trial_file = os.path.join(work, "cluster.json")
        with open(trial_file, "w") as f:
            json.dump(trial, f)
        row = []
        for i, (_, flags) in enumerate(plans):
            if share > 0 and i >= len(pipelines):
                # No pipeline: the share does not enter its prediction.
                row.append(predicted[0.0][i])
                continue
            pred_file = os.path.join(work, "predict.json")
            run([partition, model, "-o", os.path.join(work, "p.tsr"),
                 "--cluster", trial_file, "--predict-json", pred_file] +
                flags, env)
            with open(pred_file) as f:
                row.append(json.load(f)["step_s"])
        predicted[share] = row

    # Each pipeline relative to the anchors (the geometric mean of the
    # plans without a pipeline, whose prediction the share does not
    # touch), so that a calibration taken in a faster or slower moment of
    # the host than these runs moves anchors and pipelines alike and not
    # the share.
    k = len(pipelines)

    def loss(share):
        pred, anchor_pred = predicted[share], geomean(predicted[share][k:])
        anchor_meas = geomean(measured[k:])
        return sum(math.log((p / anchor_pred) / (m / anchor_meas)) ** 2
                   for p, m in zip(pred[:k], measured[:k]))

    best = min(shares, key=loss)
    print(f"reference GPT (4 layers, hidden 64, seq 32, batch 16) on "
          f"{args.np} ranks, {cores:g} cores; calibration {args.cluster} "
          f"(its share {cluster.get('waiting_rank_share', 1)})")
    print(f"  {'plan':<16} {'measured ms':>11} {'share 0':>8} "
          f"{'share 1':>8} {'fitted':>8}")
    for i, (name, _) in enumerate(plans):
        print(f"  {name:<16} {measured[i] * 1e3:11.3f} "
              f"{predicted[0.0][i] * 1e3:8.3f} {predicted[1.0][i] * 1e3:8.3f}"
              f" {predicted[best][i] * 1e3:8.3f}")
    print(f"  fitted waiting_rank_share {best:.2f} (pipelines against the "
          f"anchors' geometric mean: sum of squared log ratios "
          f"{loss(best):.4f}; with share 0: {loss(0.0):.4f})")

    cluster["waiting_rank_share"] = best
    cluster["source"] = (
        cluster.get("source", "") +
        f"; waiting_rank_share {best:.2f} fitted by "
        f"bench/fit_waiting_share.py to real 1F1B steps of a reference GPT "
        f"({', '.join(f'{n}: {m * 1e3:.2f} ms' for (n, _), m in zip(plans, measured))})")
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cluster, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fits a calibration's `compute_scale`, `sync_lag_fraction` and
`waiting_rank_share` to real steps of a reference GPT.

    bench/fit_waiting_share.py --cluster IN.json -o OUT.json [--force]
        [--build build] [--np 4] [--steps 20] [--repeat 8] [--no-bind]

`waiting_rank_share` (common/cluster/Cluster.h) is how much of its core a
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

`sync_lag_fraction` and `compute_scale` (common/cluster/Cluster.h,
StepCost.h) say how a step's kernels run against the calibration's: the
compute right after a collective takes longer when ranks share cores (the
ranks leave a collective apart and the late ones wait for their turn on a
core), while long stretches of kernels run faster than the calibration's
kernels, which it times by the slowest of the ranks all computing at once.
On this machine plans whose collectives sit between their kernels (tp, sp,
ZeRO-3) ran 10-15% slower relative to plans whose collectives come in one
block (ZeRO-1, accumulation) than the calibrated kernels and collectives
say (docs/Planner.md, "The sync lag"); no synthetic measurement
reproduced it, so both are fitted here.

For each reference plan (pipelines: pp2 x dp(N/2) with 4 micro-batches, pp
N with 2N micro-batches, pp2 x tp(N/2) with 4 micro-batches, 1F1B;
anchors: dpN, tpN, dp(N/2) x tp2, dpN with ZeRO-1) it partitions the
model, runs `mpirun -np N tessera-run` --repeat times round-robin (the
median over runs of each run's median step, the first step left out), and
predicts the step with `tessera-partition --cluster --predict-json`.
First the compute scale (0.5, 0.52, ..., 1.5) and the sync lag fraction
(0, 0.025, ..., 0.5), from the anchors: the pair whose predictions are
closest to the measured steps (least squares of the log errors; for each
scale the predictions are linear in the fraction: step at fraction 0 +
fraction x `sync_lag_compute_s`). This fit is absolute: the scale also
takes up the host's drift between the calibration and these runs, which
the plans run right after them share. Then the share, with those: the
pipelines predicted for waiting_rank_share 0, 0.05, ..., 1, and the share
written is the one for which each pipeline's time relative to the anchors
(their geometric mean) is predicted closest to the measured one (least
squares of the log ratios; relative, so that the anchors' remaining error
is not read as a share). OUT.json is IN.json with the three and a note in
its `source`.

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
        (f"dp{n} zero1", ["--dp", str(n), "--zero", "1"]),
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

    def predict(trial, flags):
        """tessera-partition's prediction JSON for `flags` on `trial`."""
        trial_file = os.path.join(work, "cluster.json")
        with open(trial_file, "w") as f:
            json.dump(trial, f)
        pred_file = os.path.join(work, "predict.json")
        run([partition, model, "-o", os.path.join(work, "p.tsr"),
             "--cluster", trial_file, "--predict-json", pred_file] + flags,
            env)
        with open(pred_file) as f:
            return json.load(f)

    k = len(pipelines)
    anchor_meas = measured[k:]

    # 1. The compute scale and the sync lag, from the anchors alone (no
    # pipeline: the share does not enter their predictions). For each scale
    # the fraction enters linearly: step at fraction 0 + fraction x
    # sync_lag_compute_s.
    scales = [round(0.5 + j / 50, 2) for j in range(51)]
    fractions = [j / 40 for j in range(21)]
    lag0 = {scale: [predict(dict(cluster, compute_scale=scale,
                                 sync_lag_fraction=0.0), flags)
                    for _, flags in anchors]
            for scale in scales}

    def anchor_pred(scale, fraction):
        return [p["step_s"] + fraction * p["sync_lag_compute_s"]
                for p in lag0[scale]]

    def log_error(pred, meas):
        """Σ log(p/m)²: how far the predictions are from the runs."""
        return sum(math.log(p / m) ** 2 for p, m in zip(pred, meas))

    scale, fraction = min(
        ((sc, fr) for sc in scales for fr in fractions),
        key=lambda sf: log_error(anchor_pred(*sf), anchor_meas))
    cluster["compute_scale"] = scale
    cluster["sync_lag_fraction"] = fraction
    as_calibrated = anchor_pred(1.0, 0.0)
    anchors_fitted = anchor_pred(scale, fraction)

    # 2. The share, with that lag: each pipeline relative to the anchors
    # (their geometric mean, which the share does not touch), so that a
    # calibration taken in a faster or slower moment of the host than these
    # runs moves anchors and pipelines alike and not the share.
    shares = [j / 20 for j in range(21)]
    piped = {share: [predict(dict(cluster, waiting_rank_share=share),
                             flags)["step_s"] for _, flags in pipelines]
             for share in shares}

    def loss(share):
        am, ap = geomean(anchor_meas), geomean(anchors_fitted)
        return sum(math.log((p / ap) / (m / am)) ** 2
                   for p, m in zip(piped[share], measured[:k]))

    best = min(shares, key=loss)
    print(f"reference GPT (4 layers, hidden 64, seq 32, batch 16) on "
          f"{args.np} ranks, {cores:g} cores; calibration {args.cluster} "
          f"(its share {cluster.get('waiting_rank_share', 1)})")
    print(f"  {'anchor':<16} {'measured ms':>11} {'calibrated':>10} "
          f"{'fitted':>8}")
    for (name, _), m, p0, p in zip(anchors, anchor_meas, as_calibrated,
                                   anchors_fitted):
        print(f"  {name:<16} {m * 1e3:11.3f} {p0 * 1e3:10.3f} "
              f"{p * 1e3:8.3f}")
    print(f"  fitted compute_scale {scale:.2f} and sync_lag_fraction "
          f"{fraction:.3f} (sum of squared log errors "
          f"{log_error(anchors_fitted, anchor_meas):.4f}; as calibrated, "
          f"scale 1 and no lag: "
          f"{log_error(as_calibrated, anchor_meas):.4f})")
    print(f"  {'pipeline':<16} {'measured ms':>11} {'share 0':>8} "
          f"{'share 1':>8} {'fitted':>8}")
    for i, (name, _) in enumerate(pipelines):
        print(f"  {name:<16} {measured[i] * 1e3:11.3f} "
              f"{piped[0.0][i] * 1e3:8.3f} {piped[1.0][i] * 1e3:8.3f}"
              f" {piped[best][i] * 1e3:8.3f}")
    print(f"  fitted waiting_rank_share {best:.2f} (pipelines against the "
          f"anchors' geometric mean: sum of squared log ratios "
          f"{loss(best):.4f}; with share 0: {loss(0.0):.4f})")

    cluster["waiting_rank_share"] = best
    cluster["source"] = (
        cluster.get("source", "") +
        f"; compute_scale {scale:.2f}, sync_lag_fraction {fraction:.3f} and "
        f"waiting_rank_share {best:.2f} fitted by bench/fit_waiting_share.py to real steps of "
        f"a reference GPT "
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

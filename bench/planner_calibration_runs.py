#!/usr/bin/env python3
"""Compares several runs of bench/planner_calibration.py (their --keep dirs).

    bench/planner_calibration_runs.py DIR [DIR ...]

Each DIR holds one run's plans, predictions (planI.predict.json) and
measurements (planI.R.metrics.jsonl), as `planner_calibration.py --keep DIR`
leaves them. Every run has its own calibration, so it is one sample of both
the prediction and the measurement. This script separates the two:

  - reproducibility of the measurement: the Spearman correlation of each
    run's measured times with the mean of the other runs' (how far the
    ranking of the plans on this machine is a fact rather than noise);
  - per run: Spearman and median |relative error| of prediction against
    measurement, as planner_calibration.py prints them;
  - per plan, over the runs: predicted and measured time, each divided by
    its run's mean over the plans (so that a run on a slow or fast host,
    or a calibration taken in a slow or fast moment, counts alike), and
    their ratio. A ratio that stays off 1 across runs is a bias of the
    model for that plan; the spread (sd) says how much of it is noise.
  - the Spearman of the mean predicted against the mean measured times.

A measured time is the median over the run's repeats of the median step
(first step left out), as planner_calibration.py takes it.
"""

import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planner_calibration import PLANS, spearman, step_times  # noqa: E402


def load_run(directory):
    """(predicted, measured) seconds per plan of PLANS, in order."""
    predicted, measured = [], []
    for i, (name, _) in enumerate(PLANS):
        pred_file = os.path.join(directory, f"plan{i}.predict.json")
        runs = sorted(glob.glob(os.path.join(directory,
                                             f"plan{i}.*.metrics.jsonl")))
        if not os.path.exists(pred_file) or not runs:
            sys.exit(f"{directory}: no prediction or measurement of plan "
                     f"{i} ({name}); is it a planner_calibration.py --keep "
                     f"directory of a finished run?")
        with open(pred_file) as f:
            predicted.append(json.load(f)["step_s"])
        medians = []
        for path in runs:
            steps = step_times(path)
            if steps:
                medians.append(statistics.median(steps))
        if not medians:
            sys.exit(f"{directory}: plan {i} ({name}) has no timed step")
        measured.append(statistics.median(medians))
    return predicted, measured


def normalised(values):
    mean = statistics.mean(values)
    return [v / mean for v in values]


def main():
    dirs = sys.argv[1:]
    if len(dirs) < 2 or any(d in ("-h", "--help") for d in dirs):
        print(__doc__)
        return 0 if dirs and dirs[0] in ("-h", "--help") else 2
    runs = [load_run(d) for d in dirs]
    print(f"{len(runs)} runs of {len(PLANS)} plans")
    print(f"  {'run':<28} {'Spearman':>8} {'median err':>10} "
          f"{'measured vs others':>18}")
    for d, (pred, meas) in zip(dirs, runs):
        others = [statistics.mean(normalised(m)[i]
                                  for p, m in runs if m is not meas)
                  for i in range(len(PLANS))]
        err = statistics.median(abs(p / m - 1) for p, m in zip(pred, meas))
        print(f"  {d:<28} {spearman(pred, meas):8.3f} {err * 100:9.1f}% "
              f"{spearman(meas, others):18.3f}")
    preds = [normalised(p) for p, _ in runs]
    meass = [normalised(m) for _, m in runs]
    mean_pred = [statistics.mean(p[i] for p in preds)
                 for i in range(len(PLANS))]
    mean_meas = [statistics.mean(m[i] for m in meass)
                 for i in range(len(PLANS))]
    print()
    print("  per plan, each time over its run's mean over the plans")
    print(f"  {'plan':<26} {'measured':>14} {'predicted':>14} "
          f"{'ratio':>14}")
    order = sorted(range(len(PLANS)), key=lambda i: mean_meas[i])
    for i in order:
        ratios = [p[i] / m[i] for p, m in zip(preds, meass)]
        print(f"  {PLANS[i][0]:<26} "
              f"{mean_meas[i]:7.3f} ±{statistics.stdev(m[i] for m in meass):.3f}"
              f" {mean_pred[i]:7.3f} ±{statistics.stdev(p[i] for p in preds):.3f}"
              f" {statistics.mean(ratios):7.3f} ±{statistics.stdev(ratios):.3f}")
    print(f"  Spearman of the mean predicted against the mean measured: "
          f"{spearman(mean_pred, mean_meas):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Measured pipeline bubble of one tessera-run --trace file.

    pipeline_bubble.py TRACE.json --skip N

For every step after the first N (warm-up), the step's pipeline window runs
from the earliest "step" start to the latest forward/backward end over all
ranks. Each rank's compute is the sum over its forward and backward events
of dur - recv_wait_us (time blocked on tsrt.recv is not compute). The
bubble is the idle share of that window,

    bubble = 1 - sum_ranks compute / (ranks * window),

the quantity (P - 1) / (V*M + P - 1) predicts (Narayanan et al., 2021) when
the stages cost the same. Also reports the stage imbalance, the busiest
rank's compute over the mean (1.0 = balanced), which adds idle time the
formula does not count. Prints one JSON object: {"bubble", "imbalance",
"steps"} (means over the measured steps).
"""
import argparse
import json
import statistics

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("trace")
ap.add_argument("--skip", type=int, default=2, help="warm-up steps to drop")
args = ap.parse_args()

by_step = {}
for e in json.load(open(args.trace))["traceEvents"]:
    if e["ph"] != "X":
        continue
    by_step.setdefault(e["args"]["step"], []).append(e)

bubbles, imbalances = [], []
for step in sorted(by_step)[args.skip:]:
    events = by_step[step]
    ranks = sorted({e["pid"] for e in events})
    actions = [e for e in events if e["cat"] in ("forward", "backward")]
    start = min(e["ts"] for e in events if e["cat"] == "step")
    end = max(e["ts"] + e["dur"] for e in actions)
    compute = {r: 0.0 for r in ranks}
    for e in actions:
        compute[e["pid"]] += e["dur"] - e["args"]["recv_wait_us"]
    window = end - start
    bubbles.append(1 - sum(compute.values()) / (len(ranks) * window))
    imbalances.append(max(compute.values()) / statistics.mean(compute.values()))
if not bubbles:
    raise SystemExit(f"{args.trace}: no steps after the {args.skip} skipped")
print(json.dumps({"bubble": statistics.mean(bubbles),
                  "imbalance": statistics.mean(imbalances),
                  "steps": len(bubbles)}))

#!/usr/bin/python3
"""Rows of bench/memory_table.sh from one compile and one run.

    memory_table.py ZERO EXPLAIN.txt METRICS.jsonl

EXPLAIN.txt is `tessera-partition --explain` output: its "ZeRO stage ..."
line gives the model-state bytes per rank (parameters + gradients +
optimizer state, from the shard shapes) and the next line the ZeRO paper's
(2+2+K)·Ψ/N_d with this plan's byte sizes; "predicted peak memory per rank"
is the static memory plan. METRICS.jsonl is tessera-run --metrics output: its
"peak_bytes" list is the measured peak of every rank. Prints one table row.

    memory_table.py --pipeline SCHEDULE PLAN.tsr METRICS.jsonl

Pipeline rows, one per stage, from the plan's manifest ("memory"."stages":
the activation sets the schedule holds at most, the peak with sends
released at the end of their action and the peak with sends held as late
as the schedule forces) and the measured peak of that stage's ranks.
"""
import json
import re
import struct
import sys


def mib(n):
    return "-" if n is None else f"{n / 2**20:10.2f}"


def pipeline_rows(schedule, plan_path, metrics_path):
    with open(plan_path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        manifest = json.loads(
            json.loads(f.read(n))["__metadata__"]["tessera.manifest"])
    grid = manifest["grid"]
    sizes = dict(zip(grid["axes"], grid["shape"]))

    def stage_of(rank):
        coords = {}
        for axis in reversed(grid["rank_order"]):
            coords[axis] = rank % sizes[axis]
            rank //= sizes[axis]
        return coords["pp"]

    measured = [json.loads(line)["peak_bytes"] for line in open(metrics_path)]
    for st in manifest["memory"]["stages"]:
        mine = [m for step in measured for r, m in enumerate(step)
                if stage_of(r) == st["stage"]]
        predicted = st["peak_bytes"]
        off = [m for m in mine if m != predicted]
        verdict = ("exact" if not off else
                   f"{100 * (max(off, key=lambda m: abs(m - predicted)) - predicted) / predicted:+.3f}%")
        schedule_name, grid_name = (schedule.split() + [""])[:2]
        print(f"{schedule_name:>11} {grid_name:>8} {st['stage']:5} "
              f"{st['max_activation_sets']:4} {mib(predicted)} "
              f"{mib(max(mine))}  {verdict}")


if sys.argv[1] == "--pipeline":
    pipeline_rows(sys.argv[2], sys.argv[3], sys.argv[4])
    sys.exit(0)

zero, explain_path, metrics_path = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(explain_path).read()
peak = int(re.search(r"predicted peak memory per rank: (\d+) bytes", text)[1])
state = re.search(r"= (\d+) bytes\n\s+\(2\+2\+K\)\*Psi/N_d .*: (\d+) bytes "
                  r"\(stage 0: (\d+)\)", text)
model_state, formula = int(state[1]), int(state[2])
measured = [json.loads(line)["peak_bytes"] for line in open(metrics_path)]
worst = max(max(step) for step in measured)
best = min(min(step) for step in measured)


print(f"{zero:>4} {mib(model_state)} {mib(formula)} {mib(peak)} "
      f"{mib(worst)} {100 * (worst - peak) / peak:+8.3f}%"
      + ("" if best == worst else f"  (ranks differ: min {best})"))

#!/usr/bin/python3
"""Rows of bench/memory_table.sh from one compile and one run.

    memory_table.py ZERO EXPLAIN.txt METRICS.jsonl

EXPLAIN.txt is `tessera-partition --explain` output: its "ZeRO stage ..."
line gives the model-state bytes per rank (parameters + gradients +
optimizer state, from the shard shapes) and the next line the ZeRO paper's
(2+2+K)·Ψ/N_d with this plan's byte sizes; "predicted peak memory per rank"
is the static memory plan. METRICS.jsonl is tessera-run --metrics output: its
"peak_bytes" list is the measured peak of every rank. Prints one table row.
"""
import json
import re
import sys

zero, explain_path, metrics_path = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(explain_path).read()
peak = int(re.search(r"predicted peak memory per rank: (\d+) bytes", text)[1])
state = re.search(r"= (\d+) bytes\n\s+\(2\+2\+K\)\*Psi/N_d .*: (\d+) bytes "
                  r"\(stage 0: (\d+)\)", text)
model_state, formula = int(state[1]), int(state[2])
measured = [json.loads(line)["peak_bytes"] for line in open(metrics_path)]
worst = max(max(step) for step in measured)
best = min(min(step) for step in measured)


def mib(n):
    return "-" if n is None else f"{n / 2**20:10.2f}"


print(f"{zero:>4} {mib(model_state)} {mib(formula)} {mib(peak)} "
      f"{mib(worst)} {100 * (worst - peak) / peak:+8.3f}%"
      + ("" if best == worst else f"  (ranks differ: min {best})"))

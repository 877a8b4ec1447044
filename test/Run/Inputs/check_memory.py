#!/usr/bin/env python3
"""Checks the static memory plan's prediction against the runtime's
measurement.

Usage: check_memory.py PLAN.tsr METRICS.jsonl [--tolerance 0.01]

PLAN.tsr's manifest holds "memory": {"peak_bytes_per_rank": N, ...} (the
compiler's prediction); every record of METRICS.jsonl (tessera-run
--metrics) holds "peak_bytes": [one measured peak per rank]. Exits 1 when any
rank's measured peak differs from the prediction by more than the relative
tolerance (default 1%), or when either number is missing.

Pipeline plans predict per stage ("stages": [{"stage", "peak_bytes"}, ...]):
each rank is compared with the prediction of its stage, its coordinate on
the "pp" axis (ranks are laid out row-major over grid.rank_order).
"""
import json
import struct
import sys


def manifest(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["tessera.manifest"])


def main():
    args = sys.argv[1:]
    tolerance = 0.01
    if "--tolerance" in args:
        i = args.index("--tolerance")
        tolerance = float(args[i + 1])
        del args[i : i + 2]
    plan, metrics = args
    memory = manifest(plan).get("memory", {})
    if not memory.get("planned"):
        print(f"FAIL: {plan} has no memory prediction: {memory}")
        return 1
    predicted = memory["peak_bytes_per_rank"]
    stage_peaks = None
    if memory.get("stages"):
        grid = manifest(plan)["grid"]
        sizes = dict(zip(grid["axes"], grid["shape"]))
        order = grid["rank_order"]
        stage_peaks = {s["stage"]: s["peak_bytes"] for s in memory["stages"]}
        for s in memory["stages"]:
            print(f"predicted {s['peak_bytes']} bytes per rank of stage "
                  f"{s['stage']}: {s['breakdown']}")

        def stage_of(rank):
            coords = {}
            for axis in reversed(order):
                coords[axis] = rank % sizes[axis]
                rank //= sizes[axis]
            return coords["pp"]
    print(f"predicted {predicted} bytes per rank: {memory['breakdown']}")
    ok = True
    with open(metrics) as f:
        for line in f:
            rec = json.loads(line)
            measured = rec.get("peak_bytes")
            if not measured:
                print(f"FAIL: step {rec['step']} has no peak_bytes")
                return 1
            for rank, m in enumerate(measured):
                if stage_peaks is not None:
                    predicted = stage_peaks[stage_of(rank)]
                rel = abs(m - predicted) / predicted
                verdict = "ok" if rel <= tolerance else "FAIL"
                if rel > tolerance:
                    ok = False
                print(f"step {rec['step']} rank {rank}: measured {m} "
                      f"predicted {predicted} ({100 * rel:.3f}% off) "
                      f"{verdict}")
    print("memory prediction matches" if ok else "FAIL: prediction differs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

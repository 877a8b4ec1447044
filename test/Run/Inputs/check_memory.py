#!/usr/bin/env python3
"""Checks the static memory plan's prediction against the runtime's
measurement.

Usage: check_memory.py PLAN.tsr METRICS.jsonl [--tolerance 0.01]

PLAN.tsr's manifest holds "memory": {"peak_bytes_per_rank": N, ...} (the
compiler's prediction); every record of METRICS.jsonl (tessera-run
--metrics) holds "peak_bytes": [one measured peak per rank]. Exits 1 when any
rank's measured peak differs from the prediction by more than the relative
tolerance (default 1%), or when either number is missing.
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
                rel = abs(m - predicted) / predicted
                verdict = "ok" if rel <= tolerance else "FAIL"
                if rel > tolerance:
                    ok = False
                print(f"step {rec['step']} rank {rank}: measured {m} "
                      f"({100 * rel:.3f}% off) {verdict}")
    print("memory prediction matches" if ok else "FAIL: prediction differs")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

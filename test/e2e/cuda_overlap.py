#!/usr/bin/python3
"""Gradient all-reduce on the comm stream overlaps backward kernels (CUDA).

    cuda_overlap.py --build DIR [--config NAME] [--bucket-mb MB]

Compiles the example model for dp = 2 with bucketed gradient all-reduces
(tessera-partition --bucket-mb, which emits tsrt.all_reduce_start /
tsrt.wait), runs 3 steps on 2 ranks with tessera-run --backend cuda
--collectives nccl --trace, and reads the Chrome trace: the device
intervals of the last step (tid "compute": one per kernel, tid "comm": one
per collective, timed with CUDA events; see tessera-run --trace). Checked,
on every rank: some comm interval of an "all_reduce_start" overlaps in time
a compute interval of a backward kernel, i.e. a kernel of a later op of the
program (op #) that is not an optimizer update. Prints the intervals it
compares.

NCCL needs one GPU per rank: with fewer than 2 GPUs (or none, or a build
without the CUDA backend) the check is SKIPPED (exit 77) with the reason.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e  # noqa: E402

SKIPPED = 77
OP = re.compile(r"op #(\d+)")


def op_index(name):
    m = OP.search(name)
    return int(m.group(1)) if m else -1


def overlaps(trace, rank):
    """(start interval, kernel interval) pairs of rank `rank` that overlap."""
    events = [e for e in trace["traceEvents"]
              if e.get("ph") == "X" and e.get("pid") == rank
              and e.get("args", {}).get("stream") in ("compute", "comm")]
    comm = [e for e in events if e["args"]["stream"] == "comm"
            and e["name"].startswith("all_reduce_start")]
    compute = [e for e in events if e["args"]["stream"] == "compute"
               and not re.match(r"(sgd|adamw)_update", e["name"])]
    print(f"rank {rank}: {len(comm)} all_reduce_start intervals, "
          f"{len(compute)} kernel intervals")
    found = []
    for c in comm:
        for k in compute:
            if op_index(k["name"]) <= op_index(c["name"]):
                continue
            if k["ts"] < c["ts"] + c["dur"] and c["ts"] < k["ts"] + k["dur"]:
                found.append((c, k))
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--config", default="prenorm_gelu_causal")
    p.add_argument("--bucket-mb", default="0.05")
    args = p.parse_args()
    args.optimizer = "adamw"
    reason = e2e.cuda_unavailable(args)
    if reason is False:
        print("FAIL")
        return 1
    if reason is None and e2e.gpu_count() < 2:
        reason = (f"--collectives nccl on 2 ranks needs 2 GPUs; this machine "
                  f"has {e2e.gpu_count()}")
    if reason:
        print(f"SKIPPED: {reason}")
        return SKIPPED
    with tempfile.TemporaryDirectory(prefix="tessera-overlap-") as work:
        plan = os.path.join(work, "dp2.tsr")
        trace_path = os.path.join(work, "dp2.trace.json")
        e2e.run([os.path.join(args.build, "tools", "tessera-partition",
                              "tessera-partition"),
                 e2e.model_path(args.config), "-o", plan, "--dp", "2",
                 "--optimizer", "adamw", "--bucket-mb", args.bucket_mb])
        e2e.run(["mpirun", "-np", "2",
                 os.path.join(args.build, "tools", "tessera-run",
                              "tessera-run"),
                 plan, "--data", e2e.CORPUS, "--steps", "3", "--backend",
                 "cuda", "--collectives", "nccl", "--trace", trace_path])
        with open(trace_path) as f:
            trace = json.load(f)
    ok = True
    for rank in range(2):
        found = overlaps(trace, rank)
        if not found:
            print(f"rank {rank}: FAIL: no all_reduce_start on the comm stream "
                  f"overlaps a backward kernel")
            ok = False
            continue
        c, k = found[0]
        print(f"rank {rank}: {len(found)} overlapping pairs, e.g. "
              f"[{c['ts']:.1f}, {c['ts'] + c['dur']:.1f}] us {c['name']!r} "
              f"with [{k['ts']:.1f}, {k['ts'] + k['dur']:.1f}] us "
              f"{k['name']!r}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

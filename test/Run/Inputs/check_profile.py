#!/usr/bin/env python3
"""Checks a tessera-run --profile file against the plan's MLIR.

    check_profile.py PROFILE.json PLAN.mlir RANKS [--micro-batches M]

Counts the instructions of each kind in the plan (`tsrt.kernel "X"` is kind
X, any other tsrt op its name: all_reduce, send, recv, ...; constants are
materialised at load and not run) and checks that every rank's profile
lists exactly those kinds with those calls per step:
  - a plan with @train_step: every rank runs it once per step;
  - a pipeline plan (@forward_<c>, @backward_<c>, @apply_<c>; chunk c on
    stage c mod P, rank = stage): each of its chunks' forward and backward
    M times and its apply once, plus the executor's own entries
    (pipeline.accumulate and pipeline.complete_sends after each of the 2M
    actions, once more for the sends at the end, pipeline.loss_broadcast
    once).
Also checks that times are non-negative and that a rank's ops add up to no
more than its step time, and, for a plan with @train_step, that every
tsrt.kernel kind's bytes_per_step is its calls' operand + result bytes
from the types in the MLIR (a reshape, a view, moves none). Prints one
line per rank and OK, or FAIL lines.
"""
import collections
import json
import re
import sys


ELEMENT_BYTES = {"f32": 4, "i64": 8, "i32": 4, "bf16": 2, "f16": 2, "i1": 1}


def type_bytes(text):
    """Bytes of every tensor<...> type in `text`, summed."""
    total = 0
    for dims in re.findall(r"tensor<([^>]*)>", text):
        parts = dims.split("x")
        n = 1
        for d in parts[:-1]:
            n *= int(d)
        total += n * ELEMENT_BYTES[parts[-1]]
    return total


def functions(mlir, kernel_bytes=None):
    """{function name: Counter of instruction kinds}; adds each
    tsrt.kernel's operand + result bytes to kernel_bytes[function][kind]."""
    out, name = {}, None
    for line in open(mlir):
        m = re.search(r"func\.func @(\w+)", line)
        if m:
            name = m.group(1)
            out[name] = collections.Counter()
            if kernel_bytes is not None:
                kernel_bytes[name] = collections.Counter()
            continue
        if name is None:
            continue
        for kernel in re.findall(r'tsrt\.kernel "(\w+)"', line):
            out[name][kernel] += 1
            if kernel_bytes is not None and kernel != "reshape":
                kernel_bytes[name][kernel] += type_bytes(
                    line.rsplit(" : ", 1)[-1])
        for op in re.findall(r"=\s*tsrt\.(\w+)|^\s*tsrt\.(send)\b", line):
            op = op[0] or op[1]
            if op not in ("kernel", "constant"):
                out[name][op] += 1
    return out


def main():
    args = sys.argv[1:]
    micro = 1
    if "--micro-batches" in args:
        i = args.index("--micro-batches")
        micro = int(args[i + 1])
        del args[i:i + 2]
    profile, mlir, ranks = args[0], args[1], int(args[2])
    kernel_bytes = {}
    fns = functions(mlir, kernel_bytes)
    prof = json.load(open(profile))
    ok = prof["steps"] >= 1 and len(prof["ranks"]) == ranks
    if not ok:
        print(f"FAIL: steps {prof['steps']}, {len(prof['ranks'])} ranks")
    for r, rank in enumerate(prof["ranks"]):
        expected = collections.Counter()
        if "train_step" in fns:
            expected = fns["train_step"]
        else:
            chunks = sorted(int(n.split("_")[1]) for n in fns
                            if n.startswith("forward_"))
            for c in chunks:
                if c % ranks != r:
                    continue
                for kind, n in fns[f"forward_{c}"].items():
                    expected[kind] += micro * n
                for kind, n in fns[f"backward_{c}"].items():
                    expected[kind] += micro * n
                for kind, n in fns[f"apply_{c}"].items():
                    expected[kind] += n
            expected["pipeline.accumulate"] = 2 * micro
            expected["pipeline.complete_sends"] = 2 * micro + 1
            expected["pipeline.loss_broadcast"] = 1
        # Two rows are not instructions: "executor" (once per step) and
        # "profiler" (its clock reads: one per timed instruction call).
        own = {o["kind"]: o["calls_per_step"] for o in rank["ops"]
               if o["kind"] in ("executor", "profiler")}
        got = {o["kind"]: o["calls_per_step"] for o in rank["ops"]
               if o["kind"] not in own}
        if own != {"executor": 1, "profiler": sum(got.values())}:
            ok = False
            print(f"FAIL rank {r}: executor/profiler rows {own}, expected "
                  f"executor 1 and profiler {sum(got.values()):g}")
        if got != dict(expected):
            ok = False
            print(f"FAIL rank {r}: calls per step {sorted(got.items())}, "
                  f"expected {sorted(expected.items())}")
        if "train_step" in fns:
            for o in rank["ops"]:
                if o["kind"] not in kernel_bytes["train_step"] and \
                        o["kind"] != "reshape":
                    continue
                want = kernel_bytes["train_step"][o["kind"]]
                if o.get("bytes_per_step") != want:
                    ok = False
                    print(f"FAIL rank {r}: {o['kind']} moved "
                          f"{o.get('bytes_per_step')} bytes per step, the "
                          f"plan's types say {want}")
        # A rank's processor time in an op cannot exceed the op's wall
        # time (clock granularity aside).
        for o in rank["ops"]:
            cpu = o["cpu_seconds_per_step"]
            if cpu < 0 or cpu > o["seconds_per_step"] * 1.01 + 2e-5:
                ok = False
                print(f"FAIL rank {r}: {o['kind']} took {cpu} s of processor "
                      f"time in {o['seconds_per_step']} s")
        seconds = sum(o["seconds_per_step"] for o in rank["ops"])
        if min(o["seconds_per_step"] for o in rank["ops"]) < 0 or \
                seconds > rank["step_s"] * 1.001 + 1e-6:
            ok = False
            print(f"FAIL rank {r}: ops {seconds} s of a {rank['step_s']} s "
                  "step")
        print(f"rank {r} ({rank['coords']}): {len(got)} kinds, "
              f"{sum(got.values()):g} calls per step")
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Tests of tessera-check, the equivalence gate (docs/Check.md).

    check_gate.py equivalent --build DIR --model FILE.onnx [--steps K]
                             [tessera-check flags ...]
        tessera-check must exit 0 and print "equivalent: K steps, N tensors,
        worst relative error E (...)" with N > 0 and E <= the --rtol.

    check_gate.py planted --build DIR --model FILE.onnx [--steps K]
                          [--drop forward|backward]
                          [tessera-check flags, e.g. --tp 2 ...]
        Emits the traced partitioned IR (tessera-check --emit-sharded-ir),
        finds the first tensor-parallel shard.all_reduce after the first
        tsr.attention (--drop forward, the default) or the first of the
        backward (--drop backward), drops it with `tessera-opt
        --tsr-test-drop-collective{index=N}`, runs tessera-check
        --sharded-ir on the result and requires exit status 1 and a
        "diverges: step 0, tensor tID ..." line whose tID is the first traced
        op that (transitively) reads the dropped all-reduce's result, found
        here from the IR. The unmodified IR must pass (exit 0) through
        --sharded-ir too.

    check_gate.py errors --build DIR --model FILE.onnx
        Bad flags, a missing model, a pipeline plan, a --sharded-ir without
        trace ids and a run whose ranks fail (a token file too short) each
        exit 2 with one 'tessera-check: error: ...' line naming the problem.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ENV = dict(os.environ,
           OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           OPENBLAS_NUM_THREADS="1")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")


def tool(build, name):
    return os.path.join(build, "tools", name, name)


def run(cmd, timeout=900):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True,
                       timeout=timeout)
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    return p


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def rtol_of(flags):
    if "--rtol" in flags:
        return float(flags[flags.index("--rtol") + 1])
    return 1e-5


def equivalent(args, flags):
    p = run([tool(args.build, "tessera-check"), args.model, "--steps",
             str(args.steps)] + flags)
    if p.returncode != 0:
        fail(f"tessera-check exited {p.returncode}, expected 0")
    m = re.search(r"^equivalent: (\d+) steps?, (\d+) tensors, worst relative "
                  r"error (\S+) \((t\d+(#\d+)?), step \d+\)$", p.stdout, re.M)
    if not m:
        fail("no 'equivalent: ...' line")
    if int(m.group(1)) != args.steps or int(m.group(2)) == 0:
        fail("wrong step or tensor count")
    if float(m.group(3)) > rtol_of(flags):
        fail("the worst error exceeds the tolerance")
    print("OK:", m.group(0))


# An op line of the textual IR: results, op name, the rest.
OP_LINE = re.compile(r"^\s*((?:%[\w#:]+(?:, )?)+) = ([\w.]+)(.*)$")


def results_of(lhs):
    """%a, %b:2 -> ['%a', '%b#0', '%b#1'] and the bare names."""
    out = []
    for part in lhs.split(", "):
        name, _, count = part.partition(":")
        out.append(name)
        if count:
            out += [f"{name}#{i}" for i in range(int(count))]
    return out


def expected_divergence(ir_text, where):
    """(index of the dropped all-reduce, trace id of the first traced op
    reading its result transitively), from the traced sharded IR. `where`:
    "forward" drops the first tp all-reduce after the first tsr.attention,
    "backward" the first tp all-reduce of the backward (after the first op
    with tsr.bwd)."""
    lines = ir_text.splitlines()
    body = [i for i, l in enumerate(lines) if OP_LINE.match(l)]
    marker = " tsr.attention " if where == "forward" else "tsr.bwd = "
    start = next((i for i in body if marker in lines[i]), None)
    if start is None:
        fail(f"the sharded IR has no '{marker.strip()}'")
    reduces = [i for i in body if " shard.all_reduce " in lines[i]]
    target = next((i for i in reduces if i > start and
                   re.search(r"grid_axes = \[1\]", lines[i])), None)
    if target is None:
        fail(f"no tensor-parallel shard.all_reduce after '{marker.strip()}'")
    index = reduces.index(target)
    tainted = set(results_of(OP_LINE.match(lines[target]).group(1)))
    for i in body:
        if i <= target:
            continue
        m = OP_LINE.match(lines[i])
        operands = set(re.findall(r"%[\w]+(?:#\d+)?", m.group(3)))
        if not operands & tainted:
            continue
        trace = re.search(r"tsr\.trace = (\d+)", lines[i])
        if trace:
            return index, int(trace.group(1)), lines[i].strip()
        tainted |= set(results_of(m.group(1)))
    fail("nothing reads the all-reduce's result")


def planted(args, flags):
    with tempfile.TemporaryDirectory(prefix="check-gate-") as tmp:
        ir = os.path.join(tmp, "sharded.mlir")
        p = run([tool(args.build, "tessera-check"), args.model,
                 "--emit-sharded-ir", ir] + flags)
        if p.returncode != 0:
            fail("--emit-sharded-ir failed")
        with open(ir) as f:
            text = f.read()
        index, trace, line = expected_divergence(text, args.drop)
        print(f"dropping shard.all_reduce #{index}; expecting t{trace}: "
              f"{line[:160]}")
        # The unmodified IR passes.
        p = run([tool(args.build, "tessera-check"), args.model, "--steps",
                 str(args.steps), "--sharded-ir", ir] + flags)
        if p.returncode != 0 or not p.stdout.startswith("equivalent: "):
            fail(f"the unmodified sharded IR does not pass (exit "
                 f"{p.returncode})")
        dropped = os.path.join(tmp, "dropped.mlir")
        p = run([tool(args.build, "tessera-opt"), ir,
                 f"--tsr-test-drop-collective=index={index}", "-o", dropped])
        if p.returncode != 0:
            fail("tessera-opt --tsr-test-drop-collective failed")
        p = run([tool(args.build, "tessera-check"), args.model, "--steps",
                 str(args.steps), "--sharded-ir", dropped] + flags)
        if p.returncode != 1:
            fail(f"tessera-check exited {p.returncode}, expected 1")
        m = re.search(r"^diverges: step (\d+), tensor (t\d+)(#\d+)? produced "
                      r"by ([\w.]+) \(.*\) : relative error (\S+) > (\S+)$",
                      p.stdout, re.M)
        if not m:
            fail("no 'diverges: ...' line")
        if m.group(1) != "0" or m.group(2) != f"t{trace}":
            fail(f"named step {m.group(1)} tensor {m.group(2)}, expected "
                 f"step 0 tensor t{trace}")
        print(f"OK: names t{trace}, the first tensor after the dropped "
              "all-reduce")


def errors(args, flags):
    check = tool(args.build, "tessera-check")
    with tempfile.TemporaryDirectory(prefix="check-gate-") as tmp:
        short = os.path.join(tmp, "short.u16")
        with open(short, "wb") as f:
            f.write(b"\x01\x00" * 4)
        untraced = os.path.join(tmp, "untraced.mlir")
        p = run([tool(args.build, "tessera-partition"), args.model,
                 "--emit", "sharded", "--tp", "2", "-o", untraced])
        if p.returncode != 0:
            fail("tessera-partition --emit sharded failed")
        cases = [
            ([check, args.model, "--no-such-flag"], "no-such-flag"),
            ([check, os.path.join(tmp, "missing.onnx")], "does not exist"),
            ([check, args.model, "--steps", "0"], "--steps"),
            ([check, args.model, "--pp", "2"], "pipeline plans"),
            ([check, args.model, "--tp", "2", "--sharded-ir", untraced],
             "no tsr.trace ids"),
            ([check, args.model, "--tp", "2", "--data", short],
             "run (1 rank) failed"),
            ([check, args.model, "--tp", "2", "--np-launcher",
              "no-such-launcher"], "cannot find 'no-such-launcher'"),
        ]
        for cmd, text in cases:
            p = run(cmd)
            lines = p.stderr.strip().splitlines()
            if p.returncode != 2:
                fail(f"exit {p.returncode}, expected 2")
            if len(lines) != 1 or not lines[0].startswith(
                    "tessera-check: error: ") or text not in lines[0]:
                fail(f"expected one 'tessera-check: error: ...{text}...' "
                     "line on stderr")
        print(f"OK: {len(cases)} error cases exit 2 with one line")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["equivalent", "planted", "errors"])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--drop", choices=["forward", "backward"],
                    default="forward")
    args, flags = ap.parse_known_args()
    if "--data" not in flags and args.mode != "errors":
        flags += ["--data", CORPUS]
    {"equivalent": equivalent, "planted": planted, "errors": errors}[
        args.mode](args, flags)


if __name__ == "__main__":
    main()

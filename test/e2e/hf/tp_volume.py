#!/usr/bin/python3
"""The tp all-reduce traffic of every Hugging Face family equals Megatron-LM's.

    tp_volume.py --build DIR [--family F ...] [--exporter ts17 dynamo]
                 [--tp 2 4] [--expect-fail bert]

For each family's fixture (test/e2e/hf/models/FAMILY.EXPORTER.onnx) and tp,
runs

    tessera-partition MODEL --tp T --cluster dgx-h100:1 --predict-json J -o X

(the plan's predicted collectives, one entry per collective call, as
--explain's "kind axes count bytes ms link" table sums them) and compares
its tp all-reduces with Megatron-LM's (Shoeybi et al. 2019; Narayanan et
al. 2021, sec. 3.2): per transformer block 4 all-reduces of the B x S x h
fp32 activations (forward: attention output, MLP output; backward: the f
operators' input gradients before attention and MLP), plus the
vocabulary-parallel embedding's forward all-reduce and the LM head's
backward input-gradient all-reduce, each B*S*h*4 bytes: (4 L + 2) calls.
The vocabulary-parallel cross-entropy's all-reduces of per-row statistics
(at most 16 bytes per row) are counted apart.

Bytes convention: tessera-partition's "bytes" of a collective is its
message size (the buffer all-reduced, nccl-tests' "size"), not what a rank
sends; a ring all-reduce sends 2 (t - 1) / t of it per rank. Both are
printed; the check is on the message bytes, call by call, and on the
per-rank ring volume (the total the two conventions must agree on).

B and S come from the ONNX input (tokens [B, S]); h from the token
embedding initializer ([V, h], V = families.VOCAB) and L from the graph's
Softmax nodes (one per eager attention), all checked against families.py.

Exit status: 0 when every (family, exporter, tp) matches or is a listed
--expect-fail that still mismatches, 1 otherwise (an --expect-fail that
matches is also 1: remove it), 2 on a usage or tool error.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import families  # noqa: E402


def shapes(path):
    """(B, S, h, L) of a fixture, from its graph input and initializers."""
    m = onnx.load(path, load_external_data=False)
    tokens = m.graph.input[0].type.tensor_type.shape.dim
    b, s = (d.dim_value for d in tokens)
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    h = None
    for name, dims in inits.items():
        if len(dims) == 2 and dims[0] == families.VOCAB and h is None:
            h = dims[1]
    # One (eager) attention, so one Softmax, per block; the exporters rename
    # most initializers, so their names do not count the layers.
    layers = sum(n.op_type == "Softmax" for n in m.graph.node)
    if h is None:
        raise SystemExit(f"tp_volume.py: {path}: no [{families.VOCAB}, h] "
                         "embedding initializer")
    return b, s, h, layers


def run_partition(build, model, tp, work):
    out = os.path.join(work, "plan.json")
    cmd = [os.path.join(build, "tools", "tessera-partition",
                        "tessera-partition"), model, "--tp", str(tp),
           "--cluster", "dgx-h100:1", "--predict-json", out,
           "-o", os.path.join(work, "plan.tsr")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"tp_volume.py: {' '.join(cmd)} exited "
                         f"{r.returncode}")
    with open(out) as f:
        return json.load(f), " ".join(cmd)


def check(build, family, exporter, tp, work):
    model = os.path.join(HERE, "models", f"{family}.{exporter}.onnx")
    b, s, h, layers = shapes(model)
    problems = []
    if (b, s) != (families.BATCH, families.SEQ):
        problems.append(f"input [{b}, {s}] is not families.py's "
                        f"[{families.BATCH}, {families.SEQ}]")
    if (h, layers) != (families.HIDDEN, families.LAYERS):
        problems.append(f"h {h}, {layers} layers are not families.py's "
                        f"{families.HIDDEN}, {families.LAYERS}")
    plan, cmd = run_partition(build, model, tp, work)
    act = b * s * h * 4
    ring = 2 * (tp - 1) / tp
    reduces = [c for c in plan["collectives"]
               if c["kind"] == "all_reduce" and c["axes"] == ["tp"]]
    big = [c["bytes"] for c in reduces if c["bytes"] == act]
    stats = [c["bytes"] for c in reduces if c["bytes"] <= 16 * b * s]
    other = [c["bytes"] for c in reduces
             if c["bytes"] != act and c["bytes"] > 16 * b * s]
    want = 4 * layers + 2
    got_volume = ring * sum(big + other)
    want_volume = ring * want * act
    line = (f"{family}.{exporter} tp{tp}: B {b} S {s} h {h} L {layers}: "
            f"{len(big)} all-reduces of B*S*h*4 = {act} bytes "
            f"(Megatron {want}), {len(other)} of other sizes "
            f"{sorted(set(other))}, {len(stats)} of row statistics "
            f"({sum(stats)} bytes); ring volume per rank "
            f"{got_volume:.0f} bytes (Megatron {want_volume:.0f})")
    if len(big) != want or other:
        problems.append(f"{len(big)} activation all-reduces and "
                        f"{len(other)} others, Megatron has {want} and 0")
    if abs(got_volume - want_volume) > 0.5:
        problems.append(f"ring volume {got_volume:.0f} != {want_volume:.0f}")
    return line, problems, cmd


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--build", required=True)
    p.add_argument("--family", nargs="+", default=list(families.FAMILIES))
    p.add_argument("--exporter", nargs="+", default=["ts17", "dynamo"])
    p.add_argument("--tp", nargs="+", type=int, default=[2, 4])
    p.add_argument("--expect-fail", nargs="*", default=[],
                   help="families whose mismatch is known (reported, not "
                        "failed)")
    a = p.parse_args()
    for f in a.family + a.expect_fail:
        if f not in families.FAMILIES:
            p.error(f"unknown family '{f}' (one of "
                    f"{', '.join(families.FAMILIES)})")
    status = 0
    with tempfile.TemporaryDirectory() as work:
        for family in a.family:
            for exporter in a.exporter:
                for tp in a.tp:
                    line, problems, cmd = check(a.build, family, exporter, tp,
                                                work)
                    expected = family in a.expect_fail
                    if problems and expected:
                        verdict = "XFAIL (" + "; ".join(problems) + ")"
                    elif problems:
                        verdict = "FAIL (" + "; ".join(problems) + ")"
                        status = 1
                    elif expected:
                        verdict = "XPASS (remove --expect-fail " + family + ")"
                        status = 1
                    else:
                        verdict = "ok"
                    print(f"{line}: {verdict}")
                    if problems and not expected:
                        print(f"  command: {cmd}")
    return status


if __name__ == "__main__":
    sys.exit(main())

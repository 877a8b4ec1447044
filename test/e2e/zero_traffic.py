#!/usr/bin/python3
"""Collective bytes per rank and step under ZeRO-0/1/2/3 vs the ring volumes.

    zero_traffic.py --build DIR [--config prenorm_gelu_causal] [--dp 2,4]
                    [--steps 2] [--pp-config pipeline] [--pp-dp 2]

For every dp degree N and ZeRO stage, compiles the model with
`tessera-partition --dp N --zero Z --optimizer sgd`, trains `--steps` steps on
N ranks and checks every step's "bytes_sent" (tessera-run's metrics: rank 0's
collective bytes by the ring model, runtime/collectives/mpi TrafficCounter)
against the volume computed here, independently of the compiler, from the
ONNX file's parameters (fp32, B_p bytes each; every parameter of the test
model has a dimension divisible by N, so ZeRO shards all of them):

    data parallel (stage 0):  2(N-1)/N * sum_p B_p       (gradient all-reduce)
    ZeRO-1, ZeRO-2:           (N-1)/N * sum_p B_p         (reduce-scatter)
                            + (N-1)/N * sum_p B_p         (all-gather of the
                                                           updated shard)
                            = the same as stage 0
    ZeRO-3:                   (N-1)/N * sum_p B_p * (2 + r_p)
                              (reduce-scatter, all-gather before forward,
                               and, where backward reads the parameter
                               (r_p = 1), a second all-gather before backward)

plus, at every stage, the loss all-reduce: 2(N-1)/N * 4 bytes (one f32
scalar). r_p comes from the ONNX graph: a parameter is read by backward when
it reaches (through Transpose/Reshape/Cast/Identity) a MatMul or Gemm input
A/B, a Mul/Div operand or a LayerNormalization scale, whose gradients with
respect to the other operand multiply by it; a parameter that only feeds
Add/Sub (biases), Gemm's C, a LayerNormalization bias or Gather's table
(embeddings) is not. For parameters read by backward ZeRO-3 moves
3(N-1)/N * B_p, 1.5x data parallelism, as in the paper; the rest move
2(N-1)/N * B_p, the same as data parallelism (gathering them before backward
would be wasted traffic).

Pipelines (--pp-config, default the `pipeline` model, on pp 2 x dp N, N in
--pp-dp (default 2), with M = 4 micro-batches, 1F1B): rank 0 is stage 0, and its bytes_sent also holds
the stage's activation sends, so each stage Z is checked against the same
pipeline without ZeRO. The gradients are accumulated over the micro-batches
and reduced once per step, and ZeRO-3 gathers the stage's parameters per
micro-batch, so over the stage's parameters S (those its chunk functions
read, from the pipeline-split IR; their sizes and r_p from the ONNX file):

    ZeRO-1, ZeRO-2:  equal to stage 0 (reduce-scatter + all-gather once)
    ZeRO-3:          stage 0 + (N-1)/N * sum_{p in S} B_p * (M(1 + r_p) - 1)
                     (M forward gathers, M backward ones where r_p = 1, one
                      reduce-scatter, instead of one all-reduce)

Exit status 0 when every step of every run matches within 1e-9 relative.
"""

import argparse
import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
from e2e import CORPUS, env  # noqa: E402
from model import get_config  # noqa: E402

PASS_THROUGH = {"Transpose", "Reshape", "Cast", "Identity", "Unsqueeze",
                "Squeeze", "Flatten"}
# (op type, input index) pairs whose gradient w.r.t. another input reads
# this input; None = every input.
READ_BY_BACKWARD = {"MatMul": {0, 1}, "Gemm": {0, 1}, "Mul": None,
                    "Div": None, "LayerNormalization": {1}}


def parameters(model):
    """{name: (bytes, read_by_backward)} of the fp32 initializers."""
    consumers = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, i))

    def read_by_backward(value, seen):
        for node, i in consumers.get(value, []):
            if node.op_type in PASS_THROUGH and i == 0:
                if any(read_by_backward(o, seen | {o}) for o in node.output
                       if o not in seen):
                    return True
            elif node.op_type in READ_BY_BACKWARD:
                idx = READ_BY_BACKWARD[node.op_type]
                if idx is None or i in idx:
                    return True
        return False

    out = {}
    for init in model.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT or not init.dims:
            continue
        n = 1
        for d in init.dims:
            n *= d
        out[init.name] = (4 * n, read_by_backward(init.name, {init.name}))
    return out


def expected_bytes(params, n, zero):
    f = (n - 1) / n
    loss = 2 * f * 4
    if zero in (0, 1, 2):
        return loss + sum(2 * f * b for b, _ in params.values())
    return loss + sum(f * b * (3 if r else 2) for b, r in params.values())


def manifest(plan):
    with open(plan, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["tessera.manifest"])


def stage_params(plan, dump_dir, stage):
    """Names of the parameters chunk `stage`'s functions read (V = 1)."""
    [ir] = glob.glob(os.path.join(dump_dir, "*-pipeline-split.mlir"))
    text = open(ir).read()
    args = set()
    for fn in ("forward", "backward", "apply"):
        m = re.search(r"func\.func @%s_%d\((.*)" % (fn, stage), text)
        args |= {int(i) for i in re.findall(r"tsrt\.arg = (\d+)", m.group(1))}
    return {a["name"] for a in manifest(plan)["arguments"]
            if a["index"] in args and a["role"] == "param"}


def check_pipeline(args, work, partition, runner):
    """pp 2 x dp N, M micro-batches: rank 0's (stage 0's) bytes per step."""
    model_path = os.path.join(ROOT, get_config(args.pp_config)["out"])
    params = parameters(onnx.load(model_path))
    m, ok = 4, True
    for n in (int(x) for x in args.pp_dp.split(",")):
        f = (n - 1) / n
        base = None
        for zero in range(4):
            tag = f"pp2xdp{n}.m{m}.z{zero}"
            plan = os.path.join(work, tag + ".tsr")
            metrics = os.path.join(work, tag + ".jsonl")
            dump = os.path.join(work, tag + ".ir")
            run([partition, model_path, "-o", plan, "--pp", "2", "--dp",
                 str(n), "--micro-batches", str(m), "--zero", str(zero),
                 "--optimizer", "sgd", "--dump-ir-after-each", dump])
            run(["mpirun", "-np", str(2 * n), runner, plan, "--data", CORPUS,
                 "--steps", str(args.steps), "--metrics", metrics])
            with open(metrics) as fh:
                got = [json.loads(line)["bytes_sent"] for line in fh]
            if zero == 0:
                base = got
                print(f"{tag}: bytes_sent per rank per step {got} (stage 0's "
                      "reference)")
                continue
            names = stage_params(plan, dump, 0)
            extra = 0.0
            if zero == 3:
                extra = sum(f * b * (m * (2 if r else 1) - 1)
                            for name, (b, r) in params.items()
                            if name in names)
            want = [b + extra for b in base]
            good = len(got) == args.steps and all(
                abs(g - w) <= 1e-9 * w for g, w in zip(got, want))
            ok = ok and good
            print(f"{tag}: bytes_sent per rank per step {got}, expected "
                  f"{want} (stage 0: {len(names)} parameters) "
                  f"{'ok' if good else 'MISMATCH'}")
    return ok


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env(), stdout=subprocess.DEVNULL)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--config", default="prenorm_gelu_causal")
    p.add_argument("--dp", default="2,4")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--pp-dp", default="2",
                   help="dp degrees of the pipelined runs (pp 2 x dp N)")
    p.add_argument("--pp-config", default="pipeline",
                   help="the model of the pipelined runs ('' to skip them)")
    args = p.parse_args()

    model_path = os.path.join(ROOT, get_config(args.config)["out"])
    params = parameters(onnx.load(model_path))
    total = sum(b for b, _ in params.values())
    read = sum(b for b, r in params.values() if r)
    print(f"{len(params)} parameters, {total} bytes; read by backward: "
          f"{read} bytes ({', '.join(n for n, (_, r) in params.items() if r)})")
    partition = os.path.join(args.build, "tools", "tessera-partition",
                             "tessera-partition")
    runner = os.path.join(args.build, "tools", "tessera-run", "tessera-run")
    ok = True
    with tempfile.TemporaryDirectory(prefix="tessera-zero-traffic-") as work:
        for n in (int(x) for x in args.dp.split(",")):
            base = expected_bytes(params, n, 0)
            for zero in range(4):
                tag = f"dp{n}.z{zero}"
                plan = os.path.join(work, tag + ".tsr")
                metrics = os.path.join(work, tag + ".jsonl")
                run([partition, model_path, "-o", plan, "--dp", str(n),
                     "--zero", str(zero), "--optimizer", "sgd"])
                run(["mpirun", "-np", str(n), runner, plan, "--data", CORPUS,
                     "--steps", str(args.steps), "--metrics", metrics])
                want = expected_bytes(params, n, zero)
                with open(metrics) as f:
                    got = [json.loads(line)["bytes_sent"] for line in f]
                good = len(got) == args.steps and all(
                    abs(g - want) <= 1e-9 * want for g in got)
                ok = ok and good
                print(f"{tag}: bytes_sent per rank per step {got}, expected "
                      f"{want:.1f} ({want / base:.4f} x data parallel) "
                      f"{'ok' if good else 'MISMATCH'}")
        if args.pp_config:
            ok = check_pipeline(args, work, partition, runner) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

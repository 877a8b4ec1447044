#!/usr/bin/python3
"""Corrupt artifacts: tessera-run refuses each with one line, never a crash.

    corrupt_plan.py --build DIR [--cases 300] [--jobs 8] [--seed 26]
                    [--timeout-s 30] [--keep DIR]

Compiles examples/gpt/gpt.onnx with tessera-partition (one rank), checks that `tessera-run PLAN --steps 1`
trains, then writes --cases corruptions of the plan and runs `tessera-run
BAD --steps 1` on each under a timeout:

  - byte flips (XOR with a random non-zero byte) in the program's MLIR
    bytecode ("__program__"), in the weight tensors, and in the JSON header
    (the manifest, the digests, names, dtypes, shapes and offsets; never a
    padding blank, whose flip to another blank changes nothing);
  - truncations at random lengths (including inside the 8-byte header
    size);
  - edits of the 8-byte header length (0, +-1, +-8, random, the file size,
    2^63, 2^64 - 1);
  - bytes appended after the data.

Each run must exit with status 1 (not a signal, not a hang: the timeout
fails the test) and print exactly one line, "tessera-run: error: ..."
naming the corrupt file. Before the artifact carried section digests
(issue 26), a flip in the bytecode could corrupt the heap inside
mlir::readBytecodeFile (glibc abort, or LLVM's crash handler deadlocking).
Prints a summary per kind; exit status 0 when every case holds.
"""

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "examples", "gpt", "gpt.onnx")
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")


def sections(blob):
    """(header_begin, header_end, {name: (begin, end)} absolute, padding)."""
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    regions = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        regions[name] = (8 + n + b, 8 + n + end)
    return 8, 8 + n, regions


def corruptions(blob, count, rng):
    """Yields (kind, bytes) pairs, `count` in all."""
    hb, he, regions = sections(blob)
    program = regions["__program__"]
    weights = [r for k, r in regions.items() if k != "__program__" and
               r[1] > r[0]]
    header_pos = [i for i in range(hb, he) if blob[i] not in b" \t\r\n"]

    def flip(pos):
        b = bytearray(blob)
        b[pos] ^= rng.randrange(1, 256)
        return bytes(b)

    def with_length(n):
        return struct.pack("<Q", n % (1 << 64)) + blob[8:]

    n = he - hb
    plan = [("program-flip", 0.35), ("weight-flip", 0.15),
            ("header-flip", 0.25), ("truncate", 0.12),
            ("header-length", 0.08), ("append", 0.05)]
    kinds = []
    for kind, share in plan:
        kinds += [kind] * max(1, round(share * count))
    kinds = kinds[:count]
    fixed_lengths = [0, n - 1, n + 1, n - 8, n + 8, len(blob), 1 << 63,
                     (1 << 64) - 1, len(blob) - 8, len(blob) - 7]
    for i, kind in enumerate(kinds):
        if kind == "program-flip":
            yield kind, flip(rng.randrange(*program))
        elif kind == "weight-flip":
            yield kind, flip(rng.randrange(*rng.choice(weights)))
        elif kind == "header-flip":
            yield kind, flip(rng.choice(header_pos))
        elif kind == "truncate":
            cut = rng.choice([0, 1, 7, 8, 9, he - 1, he, len(blob) - 1,
                              rng.randrange(len(blob))])
            yield kind, blob[:cut]
        elif kind == "header-length":
            k = kinds[:i].count("header-length")
            length = (fixed_lengths[k] if k < len(fixed_lengths)
                      else rng.randrange(1 << 64))
            yield kind, with_length(length)
        else:
            yield kind, blob + bytes(rng.randrange(256) for _ in
                                     range(rng.choice([1, 8, 100])))


def run(tool, path, timeout):
    try:
        p = subprocess.run([tool, path, "--data", CORPUS, "--steps", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=ENV, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", ""
    return p.returncode, p.stdout.decode(errors="replace"), \
        p.stderr.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--cases", type=int, default=300)
    # Each run mostly waits (MPI start-up, about 1 s), so many run at once.
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--timeout-s", type=float, default=30)
    ap.add_argument("--keep", help="write the cases here (for debugging)")
    args = ap.parse_args()
    partition = os.path.join(args.build, "tools", "tessera-partition",
                             "tessera-partition")
    tool = os.path.join(args.build, "tools", "tessera-run", "tessera-run")
    work = args.keep or tempfile.mkdtemp(prefix="tessera-corrupt-")
    os.makedirs(work, exist_ok=True)
    good = os.path.join(work, "plan.tsr")
    subprocess.run([partition, MODEL, "-o", good], check=True, env=ENV,
                   stdout=subprocess.DEVNULL)
    rc, out, err = run(tool, good, args.timeout_s)
    if rc != 0:
        print(f"FAIL: the uncorrupted plan does not train: {rc}\n{err}")
        return 1
    blob = open(good, "rb").read()
    rng = random.Random(args.seed)
    cases = []
    for i, (kind, data) in enumerate(corruptions(blob, args.cases, rng)):
        path = os.path.join(work, f"bad_{i:03d}_{kind}.tsr")
        with open(path, "wb") as f:
            f.write(data)
        cases.append((i, kind, path))

    def check(case):
        i, kind, path = case
        rc, out, err = run(tool, path, args.timeout_s)
        lines = err.splitlines()
        if rc is None:
            return kind, f"{path}: no exit within {args.timeout_s} s (hang)"
        if rc < 0:
            return kind, f"{path}: killed by signal {-rc}: {err[-500:]}"
        if rc != 1:
            return kind, f"{path}: exit status {rc}, expected 1: {err[-500:]}"
        if len(lines) != 1 or not lines[0].startswith("tessera-run: error: "):
            return kind, f"{path}: expected one error line, got {lines!r}"
        if os.path.basename(path) not in lines[0]:
            return kind, f"{path}: the error does not name the file: " \
                         f"{lines[0]}"
        return kind, None

    failures, per_kind, examples = [], {}, {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for (kind, problem), (_, _, path) in zip(pool.map(check, cases),
                                                 cases):
            ok, total = per_kind.get(kind, (0, 0))
            per_kind[kind] = (ok + (problem is None), total + 1)
            if problem:
                failures.append(problem)
            elif kind not in examples:
                examples[kind] = run(tool, path, args.timeout_s)[2].strip()
    for kind, (ok, total) in per_kind.items():
        print(f"{kind:14} {ok}/{total} refused with one line, exit 1")
        if kind in examples:
            print(f"    e.g. {examples[kind]}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(cases) - len(failures)}/{len(cases)} corrupt artifacts "
          "refused cleanly")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

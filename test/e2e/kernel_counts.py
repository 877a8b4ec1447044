#!/usr/bin/python3
"""Kernel fusion's machine-independent counts on the example GPT (issue 25).

    kernel_counts.py --build BUILD [--model examples/gpt/gpt.onnx]

Runs `tessera-partition MODEL --optimizer adamw --kernel-counts-json` with
`--fusion none` and with `--fusion all` (compiler/planner/KernelCounts.h:
kernels per step and the operand + result bytes of the non-GEMM kernels per
step, serial plan) and checks them against the table below:

  - `--fusion none` must equal the table exactly, per kernel name (kernels
    and bytes) and in total:
    the unfused step is the baseline, and a change to it (a new op in the
    training step, a different lowering) must be seen and the table
    updated, not absorbed by the fusion bounds;
  - `--fusion all` must be at most the table's bounds per kernel name listed
    (names not listed, e.g. new fused kernels, are reported, not bounded)
    and at most the bounded totals;
  - with EXPECT_FUSED, `--fusion all` must launch strictly fewer kernels and
    move strictly fewer non-GEMM bytes than `--fusion none`.

Prints both tables side by side, then one line per failed check and
"N passed, N failed"; exits 1 on a failure. When a fusion lands, lower
the --fusion all bounds to what it reaches (and set EXPECT_FUSED), so that a later
change that breaks the fusion fails here.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

# The example GPT (2 layers, hidden 64, B=8, S=64, vocab 256), AdamW, one
# rank. Kernel name: (--fusion none: kernels, bytes per step, exactly;
#                     --fusion all: kernels, bytes per step, at most).
# Bytes: operand + result bytes of the kind's kernels (GEMM kinds too).
KINDS = {
    "adamw_update": (30, 3842288, 0, 0),
    "add": (19, 12189708, 1, 12),
    "attention": (2, 1064960, 2, 1064960),
    "attention_grad": (2, 2113536, 2, 2113536),
    "bias_activation_grad": (0, 0, 2, 3147776),
    "broadcast": (10, 3036672, 1, 147456),
    "concat": (2, 1572864, 2, 1572864),
    "cross_entropy": (1, 528388, 1, 528388),
    "cross_entropy_grad": (1, 1052676, 1, 1052676),
    "gather": (1, 200704, 1, 200704),
    "gather_grad": (1, 200704, 1, 200704),
    "gelu": (2, 2097152, 0, 0),
    "gelu_grad": (2, 3145728, 0, 0),
    "layer_norm": (5, 1313280, 0, 0),
    "layer_norm_grad": (5, 1969920, 1, 393984),
    "linear": (0, 0, 9, 6362624),
    "add_layer_norm": (0, 0, 5, 2624000),
    "layer_norm_grad_add": (0, 0, 4, 2100224),
    "multi_adamw_update": (0, 0, 1, 3842056),
    "matmul": (27, 15925248, 18, 10616832),
    "mul": (2, 24, 2, 24),
    "reduce_sum": (10, 3036672, 8, 1986048),
    "reshape": (46, 0, 37, 0),
    "slice": (6, 3145728, 6, 3145728),
    "transpose": (24, 6291456, 24, 6291456),
}
# Totals: (--fusion none exactly, --fusion all at most).
KERNELS = (198, 129)
NON_GEMM_BYTES = (43623964, 27234100)
# The fusion passes fuse something on this model: bias + GELU into the GEMM
# epilogue (`linear`, `bias_activation_grad`), residual add + LayerNorm and
# the norm gradient + residual add (`add_layer_norm`, `layer_norm_grad_add`),
# the 30 AdamW updates as one `multi_adamw_update`; --fusion all must be
# strictly below --fusion none in kernels and non-GEMM bytes. (The
# elementwise fusion finds no chain left on this model after those.)
EXPECT_FUSED = True


def counts(build, model, fusion, work):
    out = os.path.join(work, f"counts-{fusion}.json")
    cmd = [os.path.join(build, "tools", "tessera-partition",
                        "tessera-partition"), model, "--optimizer", "adamw",
           "--fusion", fusion, "-o", os.path.join(work, "plan.tsr"),
           "--kernel-counts-json", out]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {proc.returncode}:\n"
                 f"{proc.stdout}")
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "examples", "gpt",
                                                    "gpt.onnx"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        none = counts(args.build, args.model, "none", work)
        full = counts(args.build, args.model, "all", work)

    failures, passed = [], 0

    def check(ok, msg):
        nonlocal passed
        if ok:
            passed += 1
        else:
            failures.append(msg)

    names = sorted(set(KINDS) | set(none["kinds"]) | set(full["kinds"]))
    print(f"{'kernel':24s} {'none':>6s} {'golden':>6s} {'all':>6s} "
          f"{'<=':>6s}  {'none bytes':>12s} {'all bytes':>12s}")
    for n in names:
        kn = none["kinds"].get(n, {})
        ka = full["kinds"].get(n, {})
        golden, golden_bytes, bound, bound_bytes = KINDS.get(
            n, (None, None, None, None))
        print(f"{n:24s} {kn.get('kernels', 0):6d} "
              f"{'-' if golden is None else golden:>6} "
              f"{ka.get('kernels', 0):6d} {'-' if bound is None else bound:>6}"
              f"  {kn.get('bytes', 0):12d} {ka.get('bytes', 0):12d}"
              f"{'  GEMM' if kn.get('gemm') or ka.get('gemm') else ''}")
        check(kn.get("kernels", 0) == (golden or 0),
              f"--fusion none: {n}: {kn.get('kernels', 0)} kernels, the "
              f"table says {golden or 0} (update KINDS if the unfused step "
              "changed on purpose)")
        check(kn.get("bytes", 0) == (golden_bytes or 0),
              f"--fusion none: {n}: {kn.get('bytes', 0)} bytes, the table "
              f"says {golden_bytes or 0}")
        if bound is not None:
            check(ka.get("kernels", 0) <= bound,
                  f"--fusion all: {n}: {ka.get('kernels', 0)} kernels, more "
                  f"than {bound} (a fusion stopped firing?)")
            check(ka.get("bytes", 0) <= bound_bytes,
                  f"--fusion all: {n}: {ka.get('bytes', 0)} bytes, more "
                  f"than {bound_bytes} (a fusion stopped firing?)")
    print(f"{'total kernels':24s} {none['kernels_per_step']:6d} "
          f"{KERNELS[0]:6d} {full['kernels_per_step']:6d} {KERNELS[1]:6d}")
    print(f"{'non-GEMM bytes':24s} {none['non_gemm_bytes_per_step']:12d} "
          f"{NON_GEMM_BYTES[0]:12d} (none, golden)\n"
          f"{'':24s} {full['non_gemm_bytes_per_step']:12d} "
          f"{NON_GEMM_BYTES[1]:12d} (all, at most)")
    check(none["kernels_per_step"] == KERNELS[0],
          f"--fusion none: {none['kernels_per_step']} kernels per step, "
          f"the table says {KERNELS[0]}")
    check(none["non_gemm_bytes_per_step"] == NON_GEMM_BYTES[0],
          f"--fusion none: {none['non_gemm_bytes_per_step']} non-GEMM bytes "
          f"per step, the table says {NON_GEMM_BYTES[0]}")
    check(full["kernels_per_step"] <= KERNELS[1],
          f"--fusion all: {full['kernels_per_step']} kernels per step, more "
          f"than {KERNELS[1]}")
    check(full["non_gemm_bytes_per_step"] <= NON_GEMM_BYTES[1],
          f"--fusion all: {full['non_gemm_bytes_per_step']} non-GEMM bytes "
          f"per step, more than {NON_GEMM_BYTES[1]}")
    fewer = (full["kernels_per_step"] < none["kernels_per_step"] and
             full["non_gemm_bytes_per_step"] <
             none["non_gemm_bytes_per_step"])
    if EXPECT_FUSED:
        check(fewer, "--fusion all is not strictly below --fusion none in "
              "kernels and non-GEMM bytes per step")
    elif not fewer:
        print("note: --fusion all is not below --fusion none (EXPECT_FUSED "
              "is off: the fusion passes fuse nothing on this model yet)")
    for f in failures:
        print(f"FAIL: {f}")
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

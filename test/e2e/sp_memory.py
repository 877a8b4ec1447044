#!/usr/bin/python3
"""Ring attention's activation memory and traffic, measured by tessera-run.

    sp_memory.py --build DIR [--config sp_long] [--sizes 2,4]

Compiles the causal model serially (K = 1: one rank, plain attention over
the whole sequence) and with `--sp ring --sp-size K` for each K, runs one
step of each and reads the metrics of every run:

* "attention_scores_bytes": the largest score block an attention kernel
  allocated (rank 0; every rank holds the same shapes). At K the scores'
  part must fall K-fold or more against K = 1, and no run may allocate an
  S x S score buffer (S x S x 4 bytes for one head);
* "peak_bytes": every rank's measured peak (heap + arena), printed and
  required to fall as K grows;
* "bytes_send": the K/V blocks rotated around the ring, exactly
  L x kv x (K - 1 forward + 2(K - 1) + 1 backward) bytes with kv the bytes
  of one rank's K and V blocks, (B)(S/K)(2D) x 4.

Exit status 0 means every check passed; the output shows each number.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
from model import get_config  # noqa: E402

CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def run_one(build, model, work, k):
    plan = os.path.join(work, f"k{k}.tsr")
    metrics = os.path.join(work, f"k{k}.jsonl")
    flags = ["--sp", "ring", "--sp-size", str(k)] if k > 1 else []
    subprocess.run([os.path.join(build, "tools", "tessera-partition",
                                 "tessera-partition"), model, "-o", plan,
                    "--optimizer", "sgd"] + flags, check=True, env=env())
    subprocess.run(["mpirun", "-np", str(k),
                    os.path.join(build, "tools", "tessera-run", "tessera-run"),
                    plan, "--data", CORPUS, "--steps", "1", "--metrics",
                    metrics], check=True, env=env(),
                   stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        return json.loads(f.readline())


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--config", default="sp_long")
    p.add_argument("--sizes", default="2,4")
    args = p.parse_args()
    cfg = get_config(args.config)
    B, S, D, L = cfg["batch"], cfg["seq"], cfg["d_model"], cfg["layers"]
    model = os.path.join(ROOT, cfg["out"])
    sizes = [1] + [int(k) for k in args.sizes.split(",")]
    ok = True
    with tempfile.TemporaryDirectory(prefix="tessera-sp-memory-") as work:
        runs = {k: run_one(args.build, model, work, k) for k in sizes}
    base = runs[1]["attention_scores_bytes"]
    full = S * S * 4
    prev_peak = None
    for k in sizes:
        m = runs[k]
        scores, peak = m["attention_scores_bytes"], max(m["peak_bytes"])
        good = scores < full and (k == 1 or base / scores >= k)
        print(f"K={k}: attention score block {scores} bytes (K=1: {base}, "
              f"ratio {base / scores:.2f}; an S x S head would be {full}); "
              f"peak bytes per rank {m['peak_bytes']}: "
              f"{'ok' if good else 'MISMATCH'}")
        ok = ok and good
        if prev_peak is not None and not peak < prev_peak:
            print(f"   problem: the peak did not fall ({peak} >= {prev_peak})")
            ok = False
        prev_peak = peak
        if k > 1:
            kv = B * (S // k) * 2 * D * 4
            want = L * kv * ((k - 1) + 2 * (k - 1) + 1)
            sent = m["bytes_send"]
            good = abs(sent - want) <= 1e-9 * want
            print(f"   ring send bytes per rank {sent:.0f}, expected "
                  f"L kv (3(K-1) + 1) = {want:.0f}: "
                  f"{'ok' if good else 'MISMATCH'}")
            ok = ok and good
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""ctest e2e.fit_waiting_share: bench/fit_waiting_share.py runs the
reference GPT's three pipeline plans and three anchors without a pipeline
on 4 ranks, predicts them for shares 0, 0.05, ..., 1 on a given cluster,
and writes that cluster with the share whose pipeline-to-anchor ratios are
closest to the measured ones (and a note in its source); every other field
is kept. It refuses to overwrite OUT without
--force, and fails with a message for a calibration whose ranks do not
share cores and for a missing one.

    fit_waiting_share.py --build BUILD
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
SCRIPT = os.path.join(ROOT, "bench/fit_waiting_share.py")


def check(cond, msg):
    if not cond:
        sys.exit(f"fit_waiting_share: FAIL: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    # A cpu:4 cluster of 4 ranks on 2 cores (not measured: the test checks
    # the fit, not this machine's figures).
    cluster = {
        "name": "cpu:4", "nodes": 1, "devices_per_node": 4,
        "peak_flops": {"fp32": 2e10}, "memory_bytes": 4e9,
        "intra_node": {"bandwidth": 2e9, "latency": 2e-5},
        "inter_node": {"bandwidth": 2e9, "latency": 2e-5},
        "op_overhead": 2e-6, "memory_bandwidth": 2e10,
        "cores_per_node": 2, "waiting_rank_share": 0.0,
        "source": "test cluster",
    }
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "cpu-4.json")
        with open(src, "w") as f:
            json.dump(cluster, f)
        out = os.path.join(tmp, "fitted.json")
        cmd = [sys.executable, SCRIPT, "--cluster", src, "-o", out,
               "--build", args.build, "--repeat", "1", "--steps", "3"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        check(p.returncode == 0, f"fit failed:\n{p.stdout}{p.stderr}")
        fitted = json.load(open(out))
        share = fitted["waiting_rank_share"]
        check(any(abs(share - k / 20) < 1e-9 for k in range(21)),
              f"share {share} is not on the grid 0, 0.05, ..., 1")
        m = re.search(r"fitted waiting_rank_share ([0-9.]+)", p.stdout)
        check(m and abs(float(m.group(1)) - share) < 1e-9,
              f"printed share differs from the written {share}:\n{p.stdout}")
        check("fit_waiting_share.py" in fitted["source"] and
              fitted["source"].startswith("test cluster"),
              f"source: {fitted['source']}")
        for key, value in cluster.items():
            if key not in ("waiting_rank_share", "source"):
                check(fitted[key] == value, f"{key} changed: {fitted[key]}")
        # The table: three pipelines, each predicted slower with share 1
        # than with share 0 (a waiting rank that keeps its core share
        # leaves the running stages less), the fitted prediction in
        # between; three anchors without a pipeline, the same for every
        # share.
        rows = re.findall(r"^  ((?:pp|dp|tp)\S*(?: \S+)*?)\s+([0-9.]+)\s+"
                          r"([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$", p.stdout,
                          re.M)
        check(len(rows) == 6, f"expected 6 plan rows:\n{p.stdout}")
        rows = [(name, *map(float, r)) for name, *r in rows]
        pipes = [r for r in rows if r[0].startswith("pp")]
        anchors = [r for r in rows if not r[0].startswith("pp")]
        check(len(pipes) == 3, f"expected 3 pipelines:\n{p.stdout}")
        for name, measured, s0, s1, fit in pipes:
            check(measured > 0 and s0 < s1 and s0 <= fit <= s1,
                  f"{name}: measured {measured}, share 0 {s0}, share 1 "
                  f"{s1}, fitted {fit}")
        for name, measured, s0, s1, fit in anchors:
            check(measured > 0 and s0 == s1 == fit,
                  f"anchor {name}: share 0 {s0}, share 1 {s1}, fit {fit}")

        # The fitted share beats both ends of the grid, pipelines against
        # the anchors' geometric mean.
        def geomean(values):
            return math.exp(sum(map(math.log, values)) / len(values))

        def loss(col):
            am = geomean([r[1] for r in anchors])
            ap = geomean([r[col] for r in anchors])
            return sum(math.log((r[col] / ap) / (r[1] / am)) ** 2
                       for r in pipes)
        check(loss(4) <= min(loss(2), loss(3)) + 1e-4,
              f"fitted loss {loss(4)} above share 0 ({loss(2)}) or share 1 "
              f"({loss(3)})")

        # OUT exists: refused without --force, kept as it was.
        before = open(out).read()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        check(p.returncode == 1 and "exists (use --force" in p.stderr,
              f"overwrite without --force: rc {p.returncode}\n{p.stderr}")
        check(open(out).read() == before, "OUT changed without --force")
        # Ranks with a core each: nothing to fit.
        own = dict(cluster, cores_per_node=4)
        own_file = os.path.join(tmp, "own.json")
        with open(own_file, "w") as f:
            json.dump(own, f)
        p = subprocess.run([sys.executable, SCRIPT, "--cluster", own_file,
                            "-o", os.path.join(tmp, "x.json"), "--build",
                            args.build], capture_output=True, text=True)
        check(p.returncode == 1 and "do not share cores" in p.stderr,
              f"cores_per_node 4: rc {p.returncode}\n{p.stderr}")
        # A missing calibration.
        p = subprocess.run([sys.executable, SCRIPT, "--cluster",
                            os.path.join(tmp, "missing.json"), "-o",
                            os.path.join(tmp, "y.json"), "--build",
                            args.build], capture_output=True, text=True)
        check(p.returncode == 1 and "cannot read the calibration" in p.stderr,
              f"missing calibration: rc {p.returncode}\n{p.stderr}")
        check(not os.path.exists(os.path.join(tmp, "y.json")),
              "written despite the error")
    print("fit_waiting_share: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

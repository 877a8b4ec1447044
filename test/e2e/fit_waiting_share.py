#!/usr/bin/env python3
"""ctest e2e.fit_waiting_share: bench/fit_waiting_share.py runs the
reference GPT's three pipeline plans and four anchors without a pipeline
on 4 ranks; it fits the compute scale (0.5, 0.52, ..., 1.5) and sync lag
fraction (0, 0.025, ..., 0.5) whose anchor predictions are closest to the
measured steps, then predicts the pipelines for shares 0, 0.05, ..., 1 with
them, and writes the cluster with all three (and a note in its source);
every other field is kept. It refuses to overwrite OUT without
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
        fraction = fitted["sync_lag_fraction"]
        check(any(abs(fraction - k / 40) < 1e-9 for k in range(21)),
              f"sync lag fraction {fraction} is not on the grid 0, 0.025, "
              "..., 0.5")

        check(any(abs(share - k / 20) < 1e-9 for k in range(21)),
              f"share {share} is not on the grid 0, 0.05, ..., 1")
        m = re.search(r"fitted waiting_rank_share ([0-9.]+)", p.stdout)
        check(m and abs(float(m.group(1)) - share) < 1e-9,
              f"printed share differs from the written {share}:\n{p.stdout}")
        check("fit_waiting_share.py" in fitted["source"] and
              fitted["source"].startswith("test cluster"),
              f"source: {fitted['source']}")
        for key, value in cluster.items():
            if key not in ("waiting_rank_share", "sync_lag_fraction",
                           "compute_scale", "source"):
                check(fitted[key] == value, f"{key} changed: {fitted[key]}")
        # The tables: four anchors (measured, predicted as calibrated,
        # with the fitted scale and lag), three pipelines (measured, share
        # 0, share 1, fitted).
        num = r"\s+([0-9.]+)"
        anchors = re.findall(r"^  ((?:dp|tp)\S*(?: \S+)*?)" + num * 3 + "$",
                             p.stdout, re.M)
        pipes = re.findall(r"^  (pp\S*(?: \S+)*?)" + num * 4 + "$",
                           p.stdout, re.M)
        check(len(anchors) == 4 and len(pipes) == 3,
              f"expected 4 anchor and 3 pipeline rows:\n{p.stdout}")
        anchors = [(name, *map(float, r)) for name, *r in anchors]
        pipes = [(name, *map(float, r)) for name, *r in pipes]
        check(any(r[0] == "dp4 zero1" for r in anchors),
              f"no ZeRO-1 anchor:\n{p.stdout}")
        scale = fitted["compute_scale"]
        check(any(abs(scale - (0.5 + k / 50)) < 1e-9 for k in range(51)),
              f"compute scale {scale} is not on the grid 0.5, 0.52, ..., 1.5")
        m = re.search(r"fitted compute_scale ([0-9.]+) and "
                      r"sync_lag_fraction ([0-9.]+) \(sum of squared log "
                      r"errors ([0-9.]+); as calibrated, scale 1 and no "
                      r"lag: ([0-9.]+)\)", p.stdout)
        check(m and abs(float(m.group(1)) - scale) < 1e-9 and
              abs(float(m.group(2)) - fraction) < 1e-9,
              f"printed scale and fraction differ from the written "
              f"{scale}, {fraction}:\n{p.stdout}")
        # The fitted pair is at least as close to the runs as the
        # calibration alone (the table's figures give the same sums).
        fit_loss, cal_loss = float(m.group(3)), float(m.group(4))
        check(fit_loss <= cal_loss, f"fitted loss {fit_loss} above the "
              f"calibration's {cal_loss}")

        def log_error(col):
            return sum(math.log(r[col] / r[1]) ** 2 for r in anchors)
        check(abs(log_error(3) - fit_loss) < 2e-3 and
              abs(log_error(2) - cal_loss) < 2e-3,
              f"table and sums disagree:\n{p.stdout}")
        for name, measured, calibrated, fit in anchors:
            check(measured > 0 and calibrated > 0 and fit > 0,
                  f"anchor {name}: {measured}, {calibrated}, {fit}")
        # Each pipeline predicted slower with share 1 than with share 0 (a
        # waiting rank that keeps its core share leaves the running stages
        # less), the fitted prediction in between.
        for name, measured, s0, s1, fit in pipes:
            check(measured > 0 and s0 < s1 and s0 <= fit <= s1,
                  f"{name}: measured {measured}, share 0 {s0}, share 1 "
                  f"{s1}, fitted {fit}")

        # The fitted share beats both ends of its grid, pipelines against
        # the anchors' geometric mean.
        def geomean(values):
            return math.exp(sum(map(math.log, values)) / len(values))

        def loss(col):
            am = geomean([r[1] for r in anchors])
            ap = geomean([r[3] for r in anchors])
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

#!/usr/bin/env python3
"""ctest calibrate.quick: `mpirun -np 2 tessera-run --calibrate-quick OUT`
writes a cluster JSON with every calibrated field, refuses to overwrite it
without --force, and tessera-partition reads it (as a file and as the cpu:2
preset from TESSERA_CALIBRATION_DIR) to predict a small plan's step. Two
ranks confined to one CPU (taskset) measure `waiting_rank_share` with the
synthetic two-stage 1F1B step.

    calibrate_quick.py --build BUILD
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def check(cond, msg):
    if not cond:
        sys.exit(f"calibrate_quick: FAIL: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    runner = os.path.join(args.build, "tools/tessera-run/tessera-run")
    partition = os.path.join(args.build,
                             "tools/tessera-partition/tessera-partition")
    model = os.path.join(ROOT, "test/e2e/models/prenorm_gelu_causal_op17.onnx")
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "OPENBLAS_NUM_THREADS": "1"})
    with tempfile.TemporaryDirectory() as tmp:
        env["TESSERA_CALIBRATION_DIR"] = tmp
        # The default path: $TESSERA_CALIBRATION_DIR/cpu-2.json.
        out = os.path.join(tmp, "cpu-2.json")
        p = subprocess.run(["mpirun", "-np", "2", runner, "--calibrate-quick"],
                           env=env, capture_output=True, text=True,
                           timeout=300)
        check(p.returncode == 0, f"--calibrate-quick failed:\n{p.stdout}"
              f"{p.stderr}")
        check(os.path.exists(out), f"{out} not written:\n{p.stdout}")
        c = json.load(open(out))
        check(c["name"] == "cpu:2", c["name"])
        check(c["nodes"] == 1 and c["devices_per_node"] == 2, "grid")
        check(c["peak_flops"]["fp32"] > 0, "peak")
        check(c["memory_bytes"] > 0, "memory_bytes")
        check(c["memory_bandwidth"] > 0, "memory_bandwidth")
        check(c["op_overhead"] > 0, "op_overhead")
        check(c["gemm_peak_fraction"] == 1, "gemm_peak_fraction")
        check(len(c["gemm"]) == 8, f"{len(c['gemm'])} GEMM points")
        check(max(g["flops"] for g in c["gemm"]) == c["peak_flops"]["fp32"],
              "peak = best GEMM")
        for g in c["gemm"]:
            check(g["dtype"] == "fp32" and g["flops"] > 0, f"gemm {g}")
        for kind in ("all_reduce", "all_gather", "reduce_scatter",
                     "all_to_all", "send_recv"):
            for side in ("intra_node", "inter_node"):
                link = c["collectives"][kind][side]
                check(link["bandwidth"] > 0 and link["latency"] >= 0,
                      f"{kind}.{side}: {link}")
            # 2 ranks: the only group shape is the world's (2 ranks, 1 apart).
            groups = c["collectives"][kind]["groups"]
            check([(g["size"], g["stride"]) for g in groups] == [(2, 1)],
                  f"{kind}.groups: {groups}")
            check(groups[0]["bandwidth"] ==
                  c["collectives"][kind]["intra_node"]["bandwidth"],
                  f"{kind}: the world group is the intra-node link")
            # The times behind the fit, one per message size (quick: 1, 16
            # and 256 KiB), sizes ascending, times positive and never
            # smaller for a larger message; the plain link has none.
            measured = groups[0].get("measured", [])
            check(len(measured) == 3 and
                  all(t > 0 for _, t in measured) and
                  all(a[0] < b[0] and a[1] <= b[1]
                      for a, b in zip(measured, measured[1:])),
                  f"{kind}.groups[0].measured: {measured}")
            check("measured" not in c["collectives"][kind]["intra_node"],
                  f"{kind}.intra_node has no measured times")
        check(c["source"].startswith("measured by tessera-run --calibrate"),
              c["source"])

        # Oversubscribed (2 ranks confined to one CPU): the calibration
        # measures the share of its core a waiting rank keeps with a
        # two-stage 1F1B step, fitted through the pipeline simulation.
        shared_out = os.path.join(tmp, "shared.json")
        shared_env = dict(env, OMPI_MCA_hwloc_base_binding_policy="none")
        p = subprocess.run(["taskset", "-c", "0", "mpirun", "-np", "2",
                            runner, "--calibrate-quick", shared_out],
                           env=shared_env, capture_output=True, text=True,
                           timeout=300)
        check(p.returncode == 0, f"oversubscribed --calibrate-quick failed:\n"
              f"{p.stdout}{p.stderr}")
        shared = json.load(open(shared_out))
        check(shared["cores_per_node"] == 1,
              f"cores_per_node {shared['cores_per_node']} (one CPU)")
        check(0 <= shared["waiting_rank_share"] <= 1,
              f"waiting_rank_share {shared['waiting_rank_share']}")
        check("two-stage 1F1B step of 4 micro-batches" in p.stdout + p.stderr,
              f"no pipeline measurement in the log:\n{p.stdout}{p.stderr}")

        # Not overwritten without --force.
        before = open(out).read()
        p = subprocess.run(["mpirun", "-np", "2", runner, "--calibrate-quick",
                            out], env=env, capture_output=True, text=True,
                           timeout=300)
        check(p.returncode != 0 and "pass --force" in p.stderr,
              f"overwrite without --force: {p.returncode} {p.stderr}")
        check(open(out).read() == before, "file changed without --force")

        # The planner reads it, by path and as cpu:2.
        for spec in (out, "cpu:2"):
            pred = os.path.join(tmp, "predict.json")
            p = subprocess.run([partition, model, "-o",
                                os.path.join(tmp, "p.tsr"), "--dp", "2",
                                "--cluster", spec, "--explain",
                                "--predict-json", pred],
                               env=env, capture_output=True, text=True,
                               timeout=300)
            check(p.returncode == 0, f"tessera-partition --cluster {spec}: "
                  f"{p.stderr}")
            check("GEMMs from the measured table" in p.stdout, p.stdout)
            j = json.load(open(pred))
            check(j["cluster"] == "cpu:2" and j["step_s"] > 0 and
                  j["gemm_s"] > 0 and j["overhead_s"] > 0 and
                  j["communication_s"] > 0, f"prediction {j}")
    print("calibrate_quick: OK")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""`tessera-run --bench-collectives` prints nccl-tests' figures.

    bench_collectives.py --build DIR --np N [--backend cuda]

Runs `mpirun -np N tessera-run --bench-collectives --bench-max-bytes 65536`
and checks the table: one row per collective (all_reduce, all_gather,
reduce_scatter, all_to_all, send_recv) and size (1 KiB to 64 KiB, x4),
positive times, algbw = size / time and busbw = algbw x nccl-tests' factor
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
send_recv 1), up to the printed rounding. Then `--bench-max-bytes 10` must
fail with exit 1 and say why. Exit 0 when every check passes.

With --backend cuda the table comes from NCCL on each rank's GPU (no
send_recv row) and gets the same checks. Without a usable GPU (or NCCL)
tessera-run must refuse with exit 1 and say so; the check is then SKIPPED
(exit 77, ctest's skip code), never passed.
"""

import argparse
import os
import subprocess
import sys


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    n = args.np
    run = os.path.join(args.build, "tools", "tessera-run", "tessera-run")
    cmd = ["mpirun", "-np", str(n), run, "--bench-collectives",
           "--bench-max-bytes", "65536", "--backend", args.backend]
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    print(p.stdout)
    if args.backend == "cuda" and p.returncode != 0 and any(
            why in p.stdout for why in ("no CUDA device", "without NCCL",
                                        "NCCL needs one device per rank")):
        said = "--bench-collectives --backend cuda:" in p.stdout
        print("tessera-run refused --backend cuda "
              f"({'says why' if said else 'no reason given'})")
        if not said:
            return 1
        print("SKIPPED: no usable GPU (or NCCL) here; NCCL was not run")
        return 77
    ok = p.returncode == 0
    factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
              "reduce_scatter": (n - 1) / n, "all_to_all": (n - 1) / n}
    if args.backend == "cpu":
        factor["send_recv"] = 1.0
    sizes = [1024, 4096, 16384, 65536]
    rows = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 6 and f[0] in factor:
            rows[(f[0], int(f[1]))] = [float(x) for x in f[3:]]
    for kind, k in factor.items():
        for size in sizes:
            r = rows.get((kind, size))
            if r is None:
                print(f"FAIL: no row for {kind} at {size} bytes")
                ok = False
                continue
            t_us, algbw, busbw = r
            want_alg = size / (t_us * 1e-6) * 1e-9
            # The time is printed with 2 decimals (us), bandwidths with 3.
            alg_ok = t_us > 0 and abs(algbw - want_alg) <= 0.0015 + \
                want_alg * 0.01 / max(t_us, 0.01)
            bus_ok = abs(busbw - algbw * k) <= 0.0015 + 0.001 * k
            print(f"{kind:15s} {size:6d} B: {t_us:9.2f} us  algbw {algbw:.3f} "
                  f"(S/t {want_alg:.3f}) busbw {busbw:.3f} "
                  f"(algbw x {k:.3f} = {algbw * k:.3f}) "
                  f"{'ok' if alg_ok and bus_ok else 'MISMATCH'}")
            ok = ok and alg_ok and bus_ok
    bad = subprocess.run(["mpirun", "-np", str(n), run, "--bench-collectives",
                          "--bench-max-bytes", "10"], env=env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120)
    said = "--bench-max-bytes must be >= 1024" in bad.stdout
    print(f"--bench-max-bytes 10: exit {bad.returncode}, "
          f"{'says why' if said else 'no reason given'}")
    ok = ok and bad.returncode != 0 and said
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

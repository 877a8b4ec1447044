#!/usr/bin/python3
"""compare_runs.py A.jsonl B.jsonl A.safetensors B.safetensors [RTOL]

Pure-Python check (no numpy) that two tessera-run runs match: every step's
loss within RTOL (default 1e-5) relative, and every F32 tensor of the saved
weights within RTOL relative L2. Prints one line per quantity and "MATCH" or
"MISMATCH" last; exits 1 on a mismatch."""
import array
import json
import math
import struct
import sys


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def weights(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        b, e = entry["data_offsets"]
        a = array.array("f")
        a.frombytes(blob[8 + n + b:8 + n + e])
        out[name] = (entry["dtype"], entry["shape"], a)
    return out


def main():
    la, lb = losses(sys.argv[1]), losses(sys.argv[2])
    wa, wb = weights(sys.argv[3]), weights(sys.argv[4])
    rtol = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-5
    ok = len(la) == len(lb) and len(la) > 0 and sorted(wa) == sorted(wb)
    for step, (x, y) in enumerate(zip(la, lb)):
        good = abs(x - y) <= rtol * abs(y)
        ok &= good
        print(f"loss step {step}: {x:.6f} vs {y:.6f} {'ok' if good else 'BAD'}")
    for name in sorted(wa):
        if name not in wb:
            continue
        (da, sa, a), (db, sb, b) = wa[name], wb[name]
        num = math.sqrt(sum((p - q) ** 2 for p, q in zip(a, b)))
        den = math.sqrt(sum(q * q for q in b))
        good = da == db == "F32" and sa == sb and num <= rtol * den
        ok &= good
        print(f"weight {name} {sa}: rel L2 {num / den if den else num:.2e} "
              f"{'ok' if good else 'BAD'}")
    print("MATCH" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Plan search end to end, one core: generate weight-free GPT-3 175B and 1T
# ONNX files (examples/gpt/make_gpt_onnx.py), then time tessera-partition
# importing each and searching every plan of 1024 / 3072 A100s
# (--plan-only). Prints the search's own time and the whole command's.
# Issue 6 targets: under 5 s (175B on 1024 GPUs), under 10 s (1T on 3072).
# Usage: bench/planner_search.sh [BUILD_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PARTITION="$BUILD/tools/tessera-partition/tessera-partition"
status=0
run() { # name, limit seconds, cluster, devices, generator flags...
  local name=$1 limit=$2 cluster=$3 devices=$4
  shift 4
  /usr/bin/python3 "$ROOT/examples/gpt/make_gpt_onnx.py" "$@" \
    -o "$WORK/$name.onnx" > /dev/null
  local start end
  start=$(date +%s.%N)
  taskset -c 0 "$PARTITION" "$WORK/$name.onnx" --cluster "$cluster" \
    --devices "$devices" --precision bf16 --plan-only \
    --explain-json "$WORK/$name.json" > "$WORK/$name.txt"
  end=$(date +%s.%N)
  /usr/bin/python3 - "$WORK/$name.json" "$name" "$limit" "$start" "$end" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
name, limit, start, end = sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
total = end - start
ok = total < limit and r["chosen"] is not None
print(f"{name}: {r['model']['params'] / 1e9:.1f}B parameters on {r['devices']} devices "
      f"of {r['cluster']}: {r['considered']} plans, {r['feasible']} fit; "
      f"search {r['search_seconds']:.3f} s, import + search {total:.2f} s "
      f"(limit {limit:.0f} s) {'ok' if ok else 'FAIL'}")
print(f"  chosen: {r['chosen']['flags']}, step {r['chosen']['prediction']['step_seconds']:.2f} s, "
      f"MFU {100 * r['chosen']['prediction']['mfu']:.1f}%")
sys.exit(0 if ok else 1)
PY
}
run gpt3-175b 5 dgx-a100:128 1024 --layers 96 --hidden 12288 --heads 96 \
  --seq 2048 --vocab 51200 --batch 1536
run gpt-1t 10 dgx-a100:384 3072 --layers 128 --hidden 25600 --heads 160 \
  --seq 2048 --vocab 51200 --batch 3072
exit $status

#!/usr/bin/env bash
# The main job: compile the example GPT for a dp2 x tp2 grid and train it for
# 200 steps on 4 MPI ranks; prints a progress line per step and the mean loss
# of the first and last 10 steps.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${TESSERA_DEMO_DIR:-$ROOT/$BUILD/demo}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1

"$ROOT/$BUILD/tools/tessera-partition/tessera-partition" \
  "$ROOT/examples/gpt/gpt.onnx" -o "$OUT/plan.tsr" --dp 2 --tp 2 \
  --optimizer adamw --lr 3e-3
rm -f "$OUT/metrics.jsonl"
mpirun -np 4 "$ROOT/$BUILD/tools/tessera-run/tessera-run" "$OUT/plan.tsr" \
  --data "$ROOT/examples/data/corpus.u16" --steps 200 \
  --metrics "$OUT/metrics.jsonl"
/usr/bin/python3 - "$OUT/metrics.jsonl" <<'PY'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"demo: mean loss of the first 10 steps {first:.4f}, last 10 steps {last:.4f}")
sys.exit(0 if last < first - 0.5 else 1)
PY

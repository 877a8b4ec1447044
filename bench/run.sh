#!/usr/bin/env bash
# Benchmark: serial CPU training-step time of the example GPT, Tessera vs
# PyTorch (same model, batch, AdamW, fp32, one thread each), measured in one
# run. Prints both medians and the ratio tessera/pytorch (lower is better).
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${STEPS:-30}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1

"$ROOT/$BUILD/tools/tessera-partition/tessera-partition" \
  "$ROOT/examples/gpt/gpt.onnx" -o "$OUT/plan.tsr" --optimizer adamw
mpirun -np 1 "$ROOT/$BUILD/tools/tessera-run/tessera-run" "$OUT/plan.tsr" \
  --data "$ROOT/examples/data/corpus.u16" --steps "$STEPS" \
  --metrics "$OUT/tessera.jsonl" > /dev/null
/usr/bin/python3 "$ROOT/bench/torch_step.py" --onnx-config example \
  --threads 1 --steps "$STEPS" > "$OUT/torch.json"
/usr/bin/python3 - "$OUT/tessera.jsonl" "$OUT/torch.json" <<'PY'
import json, statistics, sys
times = [json.loads(l)["step_time_s"] for l in open(sys.argv[1])][3:]
tessera = statistics.median(times)
torch = json.load(open(sys.argv[2]))["median_step_s"]
print(f"example GPT (B=8, S=64, d=64, 2 layers), AdamW fp32, 1 thread")
print(f"  tessera median step: {tessera * 1e3:.2f} ms")
print(f"  pytorch median step: {torch * 1e3:.2f} ms")
print(f"  ratio tessera/pytorch: {tessera / torch:.2f}")
PY

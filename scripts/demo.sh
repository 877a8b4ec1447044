#!/usr/bin/env bash
# The main job: a LLaMA-architecture model built from Hugging Face
# transformers' own code (examples/llama: 3.8M parameters, exported by
# PyTorch's dynamo exporter with its weights in external data) trained on
# real text (the Debian license texts, BPE-tokenized with HF tokenizers) on
# 4 MPI ranks, with the parallel plan chosen by Tessera's planner:
#   1. calibrate this machine for 4 ranks (tessera-run --calibrate-quick);
#   2. tessera-partition --devices 4: search the plan, print it;
#   3. mpirun tessera-run for 200 steps, printing each step's loss;
#   4. compare the mean loss of the first and last 10 steps.
# Writes everything under $TESSERA_DEMO_DIR (default BUILD/demo).
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${TESSERA_DEMO_DIR:-$ROOT/$BUILD/demo}
STEPS=${TESSERA_DEMO_STEPS:-200}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
PARTITION="$ROOT/$BUILD/tools/tessera-partition/tessera-partition"
RUN="$ROOT/$BUILD/tools/tessera-run/tessera-run"
MODEL="$ROOT/examples/llama/llama.onnx"
DATA="$ROOT/examples/llama/corpus.u16"

echo "demo: calibrating this machine for 4 ranks"
mpirun -np 4 "$RUN" --calibrate "$OUT/cpu-4.json" --calibrate-quick --force \
  > "$OUT/calibrate.log"

echo "demo: choosing the plan for 4 devices"
"$PARTITION" "$MODEL" -o "$OUT/plan.tsr" --devices 4 \
  --cluster "$OUT/cpu-4.json" --optimizer adamw --lr 3e-3 \
  --explain-json "$OUT/plan.json" --explain > "$OUT/explain.txt"
grep -E "^initializers: |^plan search: |^  [0-9]+ plans considered|^chosen plan: |^  predicted step|^  memory per rank" \
  "$OUT/explain.txt" | sed 's/^/demo: /'
echo "demo: the whole explanation is in $OUT/explain.txt"
RANKS=$(/usr/bin/python3 - "$OUT/plan.json" <<'PY'
import json, sys
chosen = json.load(open(sys.argv[1]))["chosen"]
print(f"demo: chosen plan {chosen['flags']} on {chosen['ranks']} ranks, "
      f"predicted step {chosen['prediction']['step_seconds'] * 1e3:.1f} ms",
      file=sys.stderr)
print(chosen["ranks"])
PY
)

rm -f "$OUT/metrics.jsonl"
mpirun -np "$RANKS" "$RUN" "$OUT/plan.tsr" --data "$DATA" --steps "$STEPS" \
  --metrics "$OUT/metrics.jsonl"
/usr/bin/python3 - "$OUT/metrics.jsonl" <<'PY'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
print(f"demo: mean loss of the first 10 steps {first:.4f}, "
      f"last 10 steps {last:.4f}")
sys.exit(0 if last < first - 0.5 else 1)
PY

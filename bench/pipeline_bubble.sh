#!/usr/bin/env bash
# Benchmark: pipeline bubble of pp4 (4 ranks, one stage each) for M = 4, 8
# and 16 micro-batches under GPipe, 1F1B and interleaved 1F1B (V = 2), on an
# 8-layer GPT (examples/gpt/model.py config "bench_pipeline": d=128, ff=512,
# seq 32, batch 16). For each plan it prints, from --explain, the predicted
# bubble ((P - 1) / (V*M + P - 1), equal stages) and the bubble the schedule
# simulator gives with the stages' FLOPs (a machine-independent count that
# includes the stage imbalance), beside the bubble measured from tessera-run
# --trace (bench/pipeline_bubble.py: idle share of every step's
# forward/backward window over all ranks, time blocked on receives counted
# as idle) and the measured stage imbalance (busiest rank's compute / mean).
#   bench/pipeline_bubble.sh [BUILD]      (STEPS=8 by default, 2 warm-up)
# With fewer than 4 cores the ranks share cores, which stretches compute and
# waits alike; the comparison is then coarser, not wrong in kind.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${STEPS:-8}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
PARTITION="$ROOT/$BUILD/tools/tessera-partition/tessera-partition"
RUN="$ROOT/$BUILD/tools/tessera-run/tessera-run"

/usr/bin/python3 "$ROOT/examples/gpt/export.py" --config bench_pipeline \
  -o "$OUT/model.onnx" > /dev/null
echo "pp4, 8-layer GPT (d=128, ff=512, seq 32, batch 16), SGD fp32, 1 thread/rank, $(nproc) cores"
printf '%-12s %4s %10s %10s %10s %15s %10s\n' schedule M predicted simulated measured measured/pred imbalance
for schedule in gpipe 1f1b interleaved; do
  for M in 4 8 16; do
    extra=()
    [[ $schedule == interleaved ]] && extra=(--virtual-stages 2)
    "$PARTITION" "$OUT/model.onnx" -o "$OUT/plan.tsr" --pp 4 \
      --micro-batches "$M" --schedule "$schedule" "${extra[@]}" \
      --explain > "$OUT/explain.txt"
    predicted=$(sed -n 's/.*predicted bubble fraction: .* = //p' "$OUT/explain.txt")
    simulated=$(sed -n 's/.*simulated bubble fraction .*: //p' "$OUT/explain.txt")
    mpirun -np 4 "$RUN" "$OUT/plan.tsr" --data "$ROOT/examples/data/corpus.u16" \
      --steps "$STEPS" --log-every 0 --trace "$OUT/trace.json"
    /usr/bin/python3 - "$schedule" "$M" "$predicted" "$simulated" \
      "$(/usr/bin/python3 "$ROOT/bench/pipeline_bubble.py" "$OUT/trace.json" --skip 2)" <<'PY'
import json, sys
schedule, m = sys.argv[1], sys.argv[2]
predicted, simulated = float(sys.argv[3]), float(sys.argv[4])
measured = json.loads(sys.argv[5])
print(f"{schedule:<12} {m:>4} {predicted:>10.3f} {simulated:>10.3f} "
      f"{measured['bubble']:>10.3f} {measured['bubble'] / predicted:>15.2f} "
      f"{measured['imbalance']:>10.2f}")
PY
  done
done

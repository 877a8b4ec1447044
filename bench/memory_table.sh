#!/usr/bin/env bash
# Benchmark: memory per rank under ZeRO 0/1/2/3 (Rajbhandari et al. 2020) at
# dp4 with AdamW, fp32, for the example GPT and a larger generated config
# (examples/gpt/model.py "bench_memory_large": 24 layers, d = 512, 76 M
# parameters). For each stage it prints, in MiB per rank: the model state
# (parameters + gradients + optimizer state, from the plan's shard shapes),
# the ZeRO paper's (2+2+K)·Ψ/N_d with this plan's byte sizes (4-byte
# parameters and gradients, K = 8 for AdamW's two fp32 moments), the
# predicted peak of the static memory plan (tsr-plan-memory) and the peak
# tessera-run measured (largest over ranks and steps), with their difference.
# Then pipeline rows (docs/PipelineMemory.md): the example GPT at
# pp 2 and pp 2 x dp 2, M = 4, AdamW, under GPipe, 1F1B and interleaved 1F1B
# (V = 2), per stage: the most activation sets the schedule holds, the
# predicted peak (the one --memory-per-device checks) and the measured peak
# of the stage's ranks, "exact" when every rank and step matches to the
# byte (else the largest relative difference); then pp 2 x dp 2 with
# ZeRO-1, ZeRO-3, bf16 and bf16 + ZeRO-1.
#   bench/memory_table.sh [BUILD]      (2 steps per run)
#   PIPELINE_ONLY=1 bench/memory_table.sh [BUILD]   (the pipeline rows only)
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
PARTITION="$ROOT/$BUILD/tools/tessera-partition/tessera-partition"
RUN="$ROOT/$BUILD/tools/tessera-run/tessera-run"

if [ -z "${PIPELINE_ONLY:-}" ]; then
/usr/bin/python3 "$ROOT/examples/gpt/export.py" --config bench_memory_large \
  -o "$OUT/large.onnx" > /dev/null
for model in "$ROOT/examples/gpt/gpt.onnx" "$OUT/large.onnx"; do
  echo "$(basename "$model"), dp4, AdamW fp32 (MiB per rank)"
  printf '%4s %10s %10s %10s %10s %9s\n' zero state formula predicted measured diff
  for zero in 0 1 2 3; do
    "$PARTITION" "$model" -o "$OUT/plan.tsr" --dp 4 --zero "$zero" \
      --optimizer adamw --explain > "$OUT/explain.txt"
    mpirun -np 4 "$RUN" "$OUT/plan.tsr" --data "$ROOT/examples/data/corpus.u16" \
      --steps 2 --log-every 0 --metrics "$OUT/metrics.jsonl"
    /usr/bin/python3 "$ROOT/bench/memory_table.py" "$zero" "$OUT/explain.txt" \
      "$OUT/metrics.jsonl"
  done
done

fi

model="$ROOT/examples/gpt/gpt.onnx"
echo "gpt.onnx, 4 micro-batches, AdamW fp32 (MiB per rank; exact: bytes)"
printf '%11s %8s %5s %4s %10s %10s\n' schedule grid stage sets predicted measured
for grid in pp2 pp2xdp2; do
  for schedule in gpipe 1f1b interleaved; do
    extra=()
    [ "$schedule" = interleaved ] && extra=(--virtual-stages 2)
    np=2
    if [ "$grid" = pp2xdp2 ]; then extra+=(--dp 2); np=4; fi
    "$PARTITION" "$model" -o "$OUT/plan.tsr" --pp 2 --micro-batches 4 \
      --schedule "$schedule" "${extra[@]}" --optimizer adamw
    mpirun -np "$np" "$RUN" "$OUT/plan.tsr" \
      --data "$ROOT/examples/data/corpus.u16" \
      --steps 2 --log-every 0 --metrics "$OUT/metrics.jsonl"
    /usr/bin/python3 "$ROOT/bench/memory_table.py" --pipeline \
      "$schedule $grid" "$OUT/plan.tsr" "$OUT/metrics.jsonl"
  done
done
# pp 2 x dp 2 with ZeRO and with bf16 (issue 23).
for variant in "1f1b zero1:--schedule 1f1b --zero 1" \
  "gpipe zero3:--schedule gpipe --zero 3" \
  "gpipe bf16:--schedule gpipe --precision bf16" \
  "1f1b bf16+z1:--schedule 1f1b --precision bf16 --zero 1"; do
  name=${variant%%:*}
  read -r -a flags <<< "${variant#*:}"
  "$PARTITION" "$model" -o "$OUT/plan.tsr" --pp 2 --dp 2 --micro-batches 4 \
    --optimizer adamw "${flags[@]}"
  mpirun -np 4 "$RUN" "$OUT/plan.tsr" --data "$ROOT/examples/data/corpus.u16" \
    --steps 2 --log-every 0 --metrics "$OUT/metrics.jsonl"
  /usr/bin/python3 "$ROOT/bench/memory_table.py" --pipeline "$name" \
    "$OUT/plan.tsr" "$OUT/metrics.jsonl"
done

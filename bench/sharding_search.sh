#!/usr/bin/env bash
# The tp sharding search's speed on GPT-3 175B (issue 22), one core:
# generate the weight-free model (examples/gpt/make_gpt_onnx.py, Narayanan
# et al. 2021's shape: 96 layers, hidden 12288, 96 heads, sequence 2048,
# vocabulary 51200 = 50257 padded to a multiple of 8 x 128, batch 1536),
# then
#   1. tessera-sharding-search-bench: import, tsr-build-train-step, the
#      search graph of @train_step (sharding::buildSearchGraph) and
#      planner::searchShardings at tp 8 with the vocabulary pinned, as
#      tsr-sharding-annotate runs it; prints layers, distinct layers, graph
#      and search seconds, the predicted tp all-reduces per block. Target:
#      search under 1 s. Run on the graph as built (stopped after
#      SEARCH_TIMEOUT seconds, default 60), then with --prune (the ops that
#      read only constants dropped: the optimizer's step counter, which
#      otherwise breaks the layer chain into one whole-graph elimination).
#   2. tessera-partition MODEL --cluster dgx-a100:128 --plan-only: the whole
#      degree search, import included. Target: under 5 s.
# Exit status 1 when a target is missed; the numbers are printed either way.
# Usage: bench/sharding_search.sh [BUILD_DIR]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
BENCH="$BUILD/bench/planner/tessera-sharding-search-bench"
PARTITION="$BUILD/tools/tessera-partition/tessera-partition"
TIMEOUT="${SEARCH_TIMEOUT:-60}"
status=0
MODEL="$WORK/gpt3-175b.onnx"
/usr/bin/python3 "$ROOT/examples/gpt/make_gpt_onnx.py" --layers 96 \
  --hidden 12288 --heads 96 --seq 2048 --vocab 51200 --batch 1536 \
  -o "$MODEL" || exit 1

echo "== sharding search, tp 8, graph as built (stopped after ${TIMEOUT} s)"
timeout "$TIMEOUT" taskset -c 0 "$BENCH" "$MODEL" --tp 8 --vocab 51200 \
  --limit 1
rc=$?
if [ $rc -eq 124 ]; then
  echo "  FAIL: the search did not finish in ${TIMEOUT} s (limit 1 s)"
fi
[ $rc -eq 0 ] || status=1

echo "== sharding search, tp 8, --prune"
taskset -c 0 "$BENCH" "$MODEL" --tp 8 --vocab 51200 --limit 1 --prune ||
  status=1

echo "== tessera-partition --cluster dgx-a100:128 --plan-only"
start=$(date +%s.%N)
taskset -c 0 "$PARTITION" "$MODEL" --cluster dgx-a100:128 --plan-only \
  > "$WORK/plan.txt" 2>&1
rc=$?
end=$(date +%s.%N)
grep -iE "chosen|search" "$WORK/plan.txt" | head -5
/usr/bin/python3 - "$start" "$end" "$rc" <<'PY' || status=1
import sys
total = float(sys.argv[2]) - float(sys.argv[1])
ok = total < 5 and sys.argv[3] == "0"
print(f"  plan-only degree search: {total:.2f} s, exit {sys.argv[3]} "
      f"(limit 5 s) {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
exit $status

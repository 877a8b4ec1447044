#!/bin/bash
# Runs every libFuzzer target of test/fuzz for a set time (issue 26;
# docs/Fuzzing.md). `make fuzz` and CI call it.
#
#   scripts/fuzz.sh [BUILD]        BUILD defaults to build-san
#
# Configures BUILD if it has no CMakeCache.txt (clang-22, ASan + UBSan,
# TESSERA_FUZZ=ON: the sanitizer build directory, shared with `make
# sanitize`), builds the fuzz targets, then runs each one for FUZZ_SECONDS
# on a working corpus BUILD/fuzz/corpus/<target> that starts from the
# committed seeds (test/fuzz/corpus) and regression inputs
# (test/fuzz/regressions) and keeps what earlier runs found. Prints, per
# target, the executions, executions per second, the corpus size (inputs,
# bytes) and the findings; copies every crash, leak, timeout and
# out-of-memory input to FUZZ_FINDINGS and exits 1 when there is any (commit
# it to test/fuzz/regressions/<target> with its fix).
#
# Environment:
#   FUZZ_SECONDS   seconds per target (default 60)
#   FUZZ_RUNS      if set, a number of executions per target instead
#   FUZZ_SEED      if set, libFuzzer's -seed (CI sets 1, so that CI's runs
#                  start the same mutation sequence and a finding can be
#                  replayed; coverage feedback and timing still make runs
#                  only close to, not exactly, reproducible; unset, each run
#                  explores anew)
#   FUZZ_TARGETS   space-separated names (default: all, from
#                  BUILD/test/fuzz/targets.txt)
#   FUZZ_FINDINGS  where findings go (default BUILD/fuzz/findings)
#   JOBS           build parallelism and targets run at once (default 2)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build-san}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FINDINGS=${FUZZ_FINDINGS:-$BUILD/fuzz/findings}
JOBS=${JOBS:-2}

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=clang-22 \
    -DCMAKE_CXX_COMPILER=clang++-22 -DTESSERA_SANITIZE=address,undefined \
    -DTESSERA_ENABLE_CUDA=OFF -DTESSERA_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
if ! grep -q '^TESSERA_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  echo "fuzz.sh: error: $BUILD is not configured with -DTESSERA_FUZZ=ON" >&2
  exit 2
fi
cmake --build "$BUILD" -j "$JOBS" --target tessera-fuzzers

TARGETS=${FUZZ_TARGETS:-$(cat "$BUILD/test/fuzz/targets.txt")}
# MLIR, LLVM, libonnx and protobuf are not instrumented (docs/Sanitizers.md):
# container annotations and ODR checks are off for that mix. Leaks are
# checked (libFuzzer reports an input whose run leaks).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_container_overflow=0:detect_odr_violation=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

mkdir -p "$FINDINGS"
# Runs target $1; writes its summary row to BUILD/fuzz/$1.row and exits
# non-zero on a finding.
run_target() {
  local t=$1
  local exe=$BUILD/test/fuzz/tessera-$t-fuzzer
  local seeds=$ROOT/test/fuzz/corpus/$t
  [ -d "$seeds" ] || seeds=$ROOT/test/fuzz/corpus/onnx-import # onnx-proto
  local work=$BUILD/fuzz/corpus/$t
  local artifacts=$BUILD/fuzz/artifacts/$t
  local log=$BUILD/fuzz/$t.log
  rm -rf "$artifacts"
  mkdir -p "$work" "$artifacts"
  local dirs=("$work" "$seeds") r limit
  for r in $(printf '%s\n' "$t" "$(basename "$seeds")" | sort -u); do
    [ -d "$ROOT/test/fuzz/regressions/$r" ] &&
      dirs+=("$ROOT/test/fuzz/regressions/$r")
  done
  if [ -n "${FUZZ_RUNS:-}" ]; then
    limit=(-runs="$FUZZ_RUNS")
  else
    limit=(-max_total_time="$FUZZ_SECONDS")
  fi
  [ -n "${FUZZ_SEED:-}" ] && limit+=(-seed="$FUZZ_SEED")
  echo "== $t: ${limit[*]} (log $log)"
  local rc=0
  "$exe" "${limit[@]}" -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dirs[@]}" \
    > "$log" 2>&1 || rc=$?
  local execs rate files bytes found
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  files=$(find "$work" "$seeds" -type f | wc -l)
  bytes=$(find "$work" "$seeds" -type f -printf '%s\n' |
    awk '{s += $1} END {print s + 0}')
  found=$(find "$artifacts" -type f | wc -l)
  printf '%-18s %12s %10s %8s %12s %9s\n' "$t" "${execs:-?}" "${rate:-?}" \
    "$files" "$bytes" "$found" > "$BUILD/fuzz/$t.row"
  if [ "$found" -gt 0 ]; then
    mkdir -p "$FINDINGS/$t"
    cp "$artifacts"/* "$FINDINGS/$t/"
  fi
  if [ "$rc" -ne 0 ] || [ "$found" -gt 0 ]; then
    echo "FAIL: $t exited $rc with $found finding(s) in $FINDINGS/$t;" \
      "the end of its log:" >&2
    tail -n 40 "$log" >&2
    return 1
  fi
}

# JOBS targets at a time (one core each), so CI's fuzz step takes
# ceil(targets / JOBS) x FUZZ_SECONDS.
status=0
pids=()
for t in $TARGETS; do
  run_target "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$JOBS" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done

printf '%-18s %12s %10s %8s %12s %9s\n' target executions exec/s inputs \
  corpus-bytes findings
for t in $TARGETS; do cat "$BUILD/fuzz/$t.row" 2>/dev/null || echo "$t: no result"; done
[ "$status" -eq 0 ] && echo "fuzz: no findings" ||
  echo "fuzz: findings copied to $FINDINGS" >&2
exit "$status"

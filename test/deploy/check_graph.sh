#!/usr/bin/env bash
# Usage: check_graph.sh SOURCE_DIR SCRATCH_DIR [CMAKE_ARGS...]
#
# Configures SOURCE_DIR into SCRATCH_DIR with `cmake --graphviz` and checks
# that tessera-run's link graph (SCRATCH_DIR/g.dot.tessera-run, every target
# it links, directly or not) names no library defined under compiler/,
# passes/ or dialects/tsr (the compiler's), read from their CMakeLists.txt.
# As a control, the same check must fail for tessera-partition, which links
# the compiler: a check that cannot fail proves nothing. Exit 1 on a failure.
#
# cmake --graphviz evaluates each library's link items with that library as
# the target being linked, so the TESSERA_RUNTIME_* expressions (top-level
# CMakeLists.txt) show their shared branch there (LLVM, MLIR,
# libopenblas.so); tessera-run's own link line takes the static archives,
# which check_bundle.sh checks (it loads no libMLIR, libLLVM, libopenblas).
set -euo pipefail
SRC=$1 SCRATCH=$2
shift 2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
cmake -G Ninja -S "$SRC" -B "$SCRATCH/build" "$@" --graphviz="$SCRATCH/g.dot" \
  >"$SCRATCH/configure.log" 2>&1 || { cat "$SCRATCH/configure.log"; exit 1; }

# The compiler's libraries: every add_library name under those folders.
mapfile -t COMPILER < <(grep -rhoP 'add_library\(\s*\K[A-Za-z0-9_]+' \
  --include=CMakeLists.txt "$SRC/compiler" "$SRC/passes" "$SRC/dialects/tsr" |
  sort -u)
[ ${#COMPILER[@]} -ge 5 ] || { echo "FAIL: found only ${#COMPILER[@]} compiler libraries"; exit 1; }

# The targets in one executable's graph (node labels).
labels() { sed -n 's/.*\[ label = "\([^"]*\)".*/\1/p' "$SCRATCH/g.dot.$1" | sort -u; }
# The compiler libraries in one executable's graph.
compiler_libs_in() {
  comm -12 <(labels "$1") <(printf '%s\n' "${COMPILER[@]}")
}

for f in tessera-run tessera-partition; do
  [ -f "$SCRATCH/g.dot.$f" ] || { echo "FAIL: no graph for $f"; exit 1; }
done
# Sanity: the graph is the one expected (the runtime's libraries are in it).
for lib in TesseraExecutor TesseraTsrtDialect TesseraCluster; do
  labels tessera-run | grep -qx "$lib" || { echo "FAIL: $lib not in tessera-run's graph"; exit 1; }
done

echo "tessera-run links: $(labels tessera-run | tr '\n' ' ')"
bad=$(compiler_libs_in tessera-run)
if [ -n "$bad" ]; then
  echo "FAIL: tessera-run links compiler libraries: $(echo $bad)"
  exit 1
fi
control=$(compiler_libs_in tessera-partition)
if [ -z "$control" ]; then
  echo "FAIL: the check finds no compiler library in tessera-partition's graph either"
  exit 1
fi
echo "control: tessera-partition links compiler libraries: $(echo $control)"
echo "PASS: tessera-run's link graph names none of the ${#COMPILER[@]} compiler libraries"

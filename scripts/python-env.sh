#!/usr/bin/env bash
# Creates (idempotently) one of Tessera's Python virtual environments under
# .venv/NAME in the repository root and prints its python's path on stdout
# (everything else goes to stderr).
#
#   scripts/python-env.sh export-ts      TorchScript exporter: Debian's torch
#                                        1.13 and onnx 1.12 (system site
#                                        packages) + transformers 4.49, the
#                                        newest that runs on torch 1.13.
#   scripts/python-env.sh export-dynamo  dynamo exporter: PyPI torch 2.x (used
#                                        on the CPU), current transformers,
#                                        onnx, onnxscript, onnxruntime,
#                                        safetensors, tokenizers. Large (the
#                                        torch wheel pulls CUDA libraries).
#   scripts/python-env.sh test           what `make test` needs: onnxruntime
#                                        and current onnx over the system
#                                        site packages. Small.
#
# A venv is (re)built when it is missing or when the package list below
# changed since it was built (.venv/NAME/.tessera-packages records it).
# Needs Debian's python3-venv and python3-pip (scripts/install-deps.sh).
# The versions that made the committed fixtures are recorded in
# test/e2e/hf/README.md and in every reference JSON.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=${1:-}
case "$NAME" in
  export-ts)
    VENV_ARGS=(--system-site-packages)
    PKGS=("transformers==4.49.*" safetensors) ;;
  export-dynamo)
    VENV_ARGS=()
    PKGS=(torch transformers onnx onnxscript onnxruntime safetensors
          tokenizers numpy) ;;
  test)
    VENV_ARGS=(--system-site-packages)
    # Pinned: docs/OpCoverage.md records the node tests of this onnx
    # version (onnx-node.doc checks it is current).
    PKGS=("onnxruntime==1.32.0" "onnx==1.23.2" safetensors tokenizers) ;;
  *)
    echo "usage: $0 export-ts|export-dynamo|test" >&2
    exit 2 ;;
esac
DIR="$ROOT/.venv/$NAME"
STAMP="$DIR/.tessera-packages"
WANT="${VENV_ARGS[*]} | ${PKGS[*]}"
if [ ! -x "$DIR/bin/python" ] || [ ! -f "$STAMP" ] ||
   [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "python-env: creating $DIR ($WANT)" >&2
  rm -rf "$DIR"
  /usr/bin/python3 -m venv "${VENV_ARGS[@]}" "$DIR" >&2
  # --upgrade: a package that the system site already has (Debian's onnx
  # 1.12) is still installed at its current version in the venv.
  "$DIR/bin/python" -m pip install --quiet --disable-pip-version-check \
    --upgrade "${PKGS[@]}" >&2
  printf '%s' "$WANT" > "$STAMP"
fi
echo "$DIR/bin/python"

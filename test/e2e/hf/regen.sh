#!/usr/bin/env bash
# Regenerates every HF fixture: models/*.onnx (+ .onnx.data) and refs/*.json.
# KEEP_WORK=DIR keeps the intermediate files (initial weights, logits) there.
# Creates the venvs it needs (scripts/python-env.sh: export-dynamo is large,
# it downloads PyPI's torch). Usage: test/e2e/hf/regen.sh [--family F ...]
#
#   1. export-dynamo venv: each family's model is created once (HF's seeded
#      initialisation); its parameters go to a temporary safetensors file.
#   2. export-dynamo venv: dynamo export + PyTorch references (torch 2.x).
#   3. export-ts venv: the same weights loaded into transformers 4.49's model,
#      TorchScript exports at opset 14 and 17 + references (torch 1.13).
#   4. test venv: onnxruntime checks every export against PyTorch's logits
#      and records its step-0 loss in the reference JSON.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DYNAMO=$("$ROOT/scripts/python-env.sh" export-dynamo)
TS=$("$ROOT/scripts/python-env.sh" export-ts)
TEST=$("$ROOT/scripts/python-env.sh" test)
if [ -n "${KEEP_WORK:-}" ]; then
  # Keep the init weights and torch logits (make_fixtures.py describe --work).
  WORK=$KEEP_WORK
  mkdir -p "$WORK"
else
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
# Silence the transformers/torch warnings that say nothing about our files.
export TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
cd "$HERE"
"$DYNAMO" make_fixtures.py init --work "$WORK" "$@"
"$DYNAMO" make_fixtures.py export --exporter dynamo --work "$WORK" "$@"
"$TS" make_fixtures.py export --exporter ts14 --work "$WORK" "$@"
"$TS" make_fixtures.py export --exporter ts17 --work "$WORK" "$@"
"$TEST" make_fixtures.py check --work "$WORK" "$@"

#!/usr/bin/env bash
# Regenerates examples/llama: tokenizer.json and corpus.u16
# (make_tokenizer.py), then llama.onnx + llama.onnx.data (export.py), in the
# export-dynamo venv (scripts/python-env.sh creates it if missing). Both
# steps are deterministic: re-running gives the same files.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=$("$ROOT/scripts/python-env.sh" export-dynamo)
export RAYON_NUM_THREADS=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
"$PY" "$HERE/make_tokenizer.py"
"$PY" "$HERE/export.py"

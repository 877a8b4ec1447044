#!/bin/sh
# Regenerates every committed ONNX model from examples/gpt/model.py:
#   examples/gpt/gpt.onnx and test/e2e/models/*.onnx
# Usage: examples/gpt/export_all.sh   (from anywhere; uses Debian's python)
set -eu
exec /usr/bin/python3 "$(dirname "$0")/export.py" --all

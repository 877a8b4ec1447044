#!/bin/bash
# A stand-in for `tessera-eval --batch` (test/Tools/onnx-node-driver.test):
# answers PASS, but dies by SIGSEGV on a model whose path contains "crash"
# and hangs on one whose path contains "hang".
while IFS=$'\t' read -r model data mode; do
  case "$model" in
    *crash*) echo "Assertion \`false' failed (stand-in)" >&2; kill -SEGV $$ ;;
    *hang*) exec sleep 60 ;;
    *) echo "PASS: 1 output(s), max abs err 0, max rel err 0" ;;
  esac
done

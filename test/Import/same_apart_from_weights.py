#!/usr/bin/python3
"""Checks that two imported modules are the same apart from their weights.

    same_apart_from_weights.py A.mlir B.mlir

Drops from both: every `tsr.init = dense_resource<...> : tensor<...>`
argument attribute, the module attribute `tsr.weights = "absent"` and the
`{-# dialect_resources ... #-}` section holding the weight blobs; then the
texts must be equal. Exit 0 if so, else 1 with a unified diff.
"""

import difflib
import re
import sys


def strip(text):
    text = text.split("\n{-#", 1)[0]
    text = re.sub(r"tsr\.init = dense_resource<[^>]*> : tensor<[^>]*>, ", "",
                  text)
    text = text.replace(' attributes {tsr.weights = "absent"}', "")
    return text.rstrip() + "\n"


def main():
    a, b = sys.argv[1:3]
    ta, tb = (strip(open(p).read()) for p in (a, b))
    if ta == tb:
        print(f"same apart from weights: {a} {b}")
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        ta.splitlines(True), tb.splitlines(True), a, b))
    return 1


if __name__ == "__main__":
    sys.exit(main())

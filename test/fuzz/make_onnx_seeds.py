#!/usr/bin/python3
"""Writes the seed corpus of the ONNX importer's fuzz targets
(test/fuzz/corpus/onnx-import).

    make_onnx_seeds.py OPS.txt OUTDIR MODEL.onnx...

OPS.txt: `tessera-import --list-ops` (the supported op types, first word of
each line). Writes
  - node-<test>.onnx: from Debian's libonnx-testdata node tests
    (/usr/share/libonnx-testdata/data/node), the first two tests of every
    supported op whose model is under 4 KiB (test names sorted);
  - wf-<name>: each MODEL.onnx weight-free (float initializers lose their
    values, as export_weight_free.py's models have none), when that is under
    the fuzzers' 64 KiB input bound.
"""
import glob
import os
import sys

import onnx
from onnx import TensorProto

NODE_TESTS = "/usr/share/libonnx-testdata/data/node"


def main():
    ops = {line.split()[0] for line in open(sys.argv[1]) if line.strip()}
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    taken = {}
    for path in sorted(glob.glob(os.path.join(NODE_TESTS, "*", "model.onnx"))):
        if os.path.getsize(path) > 4096:
            continue
        m = onnx.load(path)
        kinds = {n.op_type for n in m.graph.node}
        if not kinds or not kinds <= ops:
            continue
        key = min(kinds)
        if taken.get(key, 0) >= 2:
            continue
        taken[key] = taken.get(key, 0) + 1
        name = os.path.basename(os.path.dirname(path))
        with open(os.path.join(out, "node-%s.onnx" % name[5:]), "wb") as f:
            f.write(open(path, "rb").read())
    for path in sys.argv[3:]:
        m = onnx.load(path, load_external_data=False)
        for t in m.graph.initializer:
            if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16,
                               TensorProto.BFLOAT16):
                t.ClearField("raw_data")
                t.ClearField("float_data")
                t.ClearField("int32_data")
                t.ClearField("external_data")
                t.data_location = TensorProto.DEFAULT
        data = m.SerializeToString()
        if len(data) <= 64 * 1024:
            with open(os.path.join(out, "wf-" + os.path.basename(path)),
                      "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()

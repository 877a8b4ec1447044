#!/usr/bin/python3
"""Writes malformed / unsupported ONNX fixtures for importer robustness tests.

    make_bad_inputs.py OUTDIR [--model VALID.onnx]

Files written to OUTDIR (deterministic: same bytes on every run):

* ``truncated.onnx``      the first 60% of the bytes of a valid model (default
                          test/e2e/models/prenorm_gelu_causal_op17.onnx); the
                          protobuf ends in the middle of a field.
* ``garbage.onnx``        4096 pseudo-random bytes (numpy seed 0); not a
                          parseable ModelProto.
* ``unsupported_op.onnx`` a small, valid (onnx.checker-clean) opset-17 model
                          X float[4,3,3] -> Det -> Y float[4] whose only node,
                          named ``my_unsupported_node``, is an op Tessera does
                          not support; the importer should name that node.

Each file's expected outcome is checked with the onnx package before exiting.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "models", "prenorm_gelu_causal_op17.onnx")


def unsupported_op_model():
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 3, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])
    node = helper.make_node("Det", ["X"], ["Y"], name="my_unsupported_node")
    graph = helper.make_graph([node], "unsupported_op", [x], [y])
    model = helper.make_model(graph, producer_name="make_bad_inputs.py",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--model", default=DEFAULT_MODEL,
                    help="valid model to truncate")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)

    valid = open(args.model, "rb").read()
    truncated = valid[:int(len(valid) * 0.6)]
    garbage = np.random.default_rng(0).integers(0, 256, 4096,
                                                dtype=np.uint8).tobytes()
    paths = {n: os.path.join(args.outdir, n) for n in
             ("truncated.onnx", "garbage.onnx", "unsupported_op.onnx")}
    with open(paths["truncated.onnx"], "wb") as f:
        f.write(truncated)
    with open(paths["garbage.onnx"], "wb") as f:
        f.write(garbage)
    onnx.save(unsupported_op_model(), paths["unsupported_op.onnx"])

    for name in ("truncated.onnx", "garbage.onnx"):
        try:
            onnx.load(paths[name])
        except Exception as e:  # noqa: BLE001 -- protobuf's DecodeError etc.
            print(f"{paths[name]}: does not parse ({type(e).__name__}), as intended")
        else:
            raise SystemExit(f"{paths[name]}: unexpectedly parses")
    onnx.checker.check_model(onnx.load(paths["unsupported_op.onnx"]))
    print(f"{paths['unsupported_op.onnx']}: valid; node 'my_unsupported_node' "
          f"is op Det")


if __name__ == "__main__":
    main()

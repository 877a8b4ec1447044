#!/usr/bin/python3
"""Writes the ONNX models of the importer's hostile-input tests (issue 26).

    make_hostile_models.py OUTDIR

Files written to OUTDIR (deterministic):

* ``split_overflow.onnx``   X float[4] -> Split (opset 13, sizes from a
                            constant [INT64_MAX, INT64_MAX, 6]) -> 3 outputs;
                            the sizes' int64 sum wraps around to 4, the axis
                            length: the importer must refuse the sizes
                            (before, std::accumulate overflowed, UBSan).
* ``split_num_outputs.onnx`` X float[4] -> Split (opset 18, num_outputs
                            INT64_MAX) -> 2 outputs: num_outputs must be the
                            output count (before, the chunk size overflowed
                            and INT64_MAX sizes were pushed: out of memory).
* ``opset99.onnx``          X float[4] -> Relu -> Y, default-domain opset 99:
                            newer than the importer knows; refused.
* ``trilu_huge.onnx``       X int64[INT64_MAX - 1, 5] -> Trilu (opset 14):
                            an input of 4.6e19 elements, refused as a graph
                            input (found by tessera-onnx-proto-fuzzer: the
                            Trilu mask loop ran for hours).
* ``trilu_big.onnx``        X int64[2^20, 2^19] -> Trilu: a describable
                            input (2^39 elements) whose mask (more than 2^24
                            elements, the folding bound) is refused.
* ``checker_multiline.onnx`` X float[4] -> Relu (an unknown attribute
                            ``bogus``) -> Y, opset 17: libonnx's checker
                            rejects it with a message of several lines,
                            which the importer prints on one.
"""

import os
import sys

from onnx import TensorProto, helper

INT64_MAX = 2**63 - 1


def model(nodes, outputs, opset, inits=(), x_type=TensorProto.FLOAT,
          x_shape=(4,)):
    x = helper.make_tensor_value_info("X", x_type, list(x_shape))
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["n"])
            for o in outputs]
    graph = helper.make_graph(nodes, "hostile", [x], outs,
                              initializer=list(inits))
    m = helper.make_model(graph, producer_name="make_hostile_models.py",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [3],
                               [INT64_MAX, INT64_MAX, 6])
    models = {
        "split_overflow.onnx": model(
            [helper.make_node("Split", ["X", "sizes"], ["A", "B", "C"],
                              name="split", axis=0)],
            ["A", "B", "C"], 13, [sizes]),
        "split_num_outputs.onnx": model(
            [helper.make_node("Split", ["X"], ["A", "B"], name="split",
                              axis=0, num_outputs=INT64_MAX)],
            ["A", "B"], 18),
        "opset99.onnx": model(
            [helper.make_node("Relu", ["X"], ["Y"], name="relu")], ["Y"], 99),
        "trilu_huge.onnx": model(
            [helper.make_node("Trilu", ["X"], ["Y"], name="trilu")], ["Y"],
            14, x_type=TensorProto.INT64, x_shape=(INT64_MAX - 1, 5)),
        "trilu_big.onnx": model(
            [helper.make_node("Trilu", ["X"], ["Y"], name="trilu")], ["Y"],
            14, x_type=TensorProto.INT64, x_shape=(1 << 20, 1 << 19)),
        "checker_multiline.onnx": model(
            [helper.make_node("Relu", ["X"], ["Y"], name="relu", bogus=1)],
            ["Y"], 17),
    }
    for name, m in models.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(m.SerializeToString())


if __name__ == "__main__":
    main()

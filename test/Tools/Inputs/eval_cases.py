#!/usr/bin/python3
"""Cases for test/Tools/tessera-eval.test.

    eval_cases.py make DIR
        Writes small ONNX models with data sets in ONNX's backend-test
        layout (DIR/<case>/model.onnx, DIR/<case>/<set>/input_<k>.pb,
        output_<k>.pb); expected outputs computed with numpy.
    eval_cases.py exit CODE CMD...
        Runs CMD, prints its stdout and stderr, and exits 0 iff CMD exited
        with CODE (lit's `not` cannot tell 1 from 2).
    eval_cases.py same A.pb B.pb
        Exits 0 iff the two TensorProto files hold equal arrays (NaN == NaN).
"""

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write(path, name, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def model(nodes, inputs, outputs, opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def case(root, name, m, ins, outs, data_set="test_data_set_0"):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    for k, (n, a) in enumerate(ins):
        write(os.path.join(d, data_set, f"input_{k}.pb"), n, a)
    for k, (n, a) in enumerate(outs):
        write(os.path.join(d, data_set, f"output_{k}.pb"), n, a)


def make(root):
    rng = np.random.default_rng(0)
    f32 = TensorProto.FLOAT
    vi = helper.make_tensor_value_info

    # Add: passes; the same with one expected element off by 0.5 fails.
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    add = model([helper.make_node("Add", ["x", "y"], ["z"])],
                [vi("x", f32, [2, 3]), vi("y", f32, [2, 3])],
                [vi("z", f32, [2, 3])])
    case(root, "add", add, [("x", x), ("y", y)], [("z", x + y)])
    wrong = x + y
    wrong[1, 2] += 0.5
    case(root, "add_wrong", add, [("x", x), ("y", y)], [("z", wrong)])
    # Within atol + rtol*|expected| (1e-5 each): a 5e-6 error passes.
    case(root, "add_close", add, [("x", x), ("y", y)],
         [("z", x + y + np.float32(5e-6))])
    case(root, "add_shape", add, [("x", x), ("y", y)],
         [("z", (x + y).reshape(3, 2))])
    case(root, "add_dtype", add, [("x", x), ("y", y)],
         [("z", (x + y).astype(np.float16))])

    # Division by zero: NaN and infinities must match exactly.
    a = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    b = np.array([0.0, 0.0, 0.0, 4.0], np.float32)
    div = model([helper.make_node("Div", ["a", "b"], ["c"])],
                [vi("a", f32, [4]), vi("b", f32, [4])], [vi("c", f32, [4])])
    with np.errstate(divide="ignore", invalid="ignore"):
        case(root, "div_nan", div, [("a", a), ("b", b)], [("c", a / b)])

    # Reshape with the shape as a graph input: needs --bind int or all.
    r = rng.standard_normal((2, 6)).astype(np.float32)
    shape = np.array([3, 4], np.int64)
    reshape = model([helper.make_node("Reshape", ["r", "shape"], ["s"])],
                    [vi("r", f32, [2, 6]), vi("shape", TensorProto.INT64, [2])],
                    [vi("s", f32, [3, 4])])
    case(root, "reshape", reshape, [("r", r), ("shape", shape)],
         [("s", r.reshape(3, 4))])

    # Symbolic dims take the dims of the given value.
    sym = model([helper.make_node("Relu", ["x"], ["y"])],
                [vi("x", f32, ["N", 3])], [vi("y", f32, ["N", 3])])
    case(root, "relu_symbolic", sym, [("x", x)], [("y", np.maximum(x, 0))])

    # A STRING input: no Tessera type.
    s = np.array(["a", "b"], dtype=object)
    ident = model([helper.make_node("Identity", ["s"], ["t"])],
                  [vi("s", TensorProto.STRING, [2])],
                  [vi("t", TensorProto.STRING, [2])])
    case(root, "string", ident, [("s", s)], [("t", s)])

    # An op the importer does not know.
    hs = model([helper.make_node("HardSwish", ["x"], ["y"], )],
               [vi("x", f32, [2, 3])], [vi("y", f32, [2, 3])], opset=14)
    case(root, "unknown_op", hs, [("x", x)], [("y", x)])


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2])
        return 0
    if sys.argv[1] == "exit":
        want = int(sys.argv[2])
        proc = subprocess.run(sys.argv[3:], capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stdout.write(proc.stderr)
        if proc.returncode != want:
            print(f"eval_cases: exit status {proc.returncode}, expected {want}")
            return 1
        return 0
    if sys.argv[1] == "same":
        arrays = []
        for path in sys.argv[2:4]:
            t = TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            arrays.append(numpy_helper.to_array(t))
        same = (arrays[0].dtype == arrays[1].dtype and
                arrays[0].shape == arrays[1].shape and
                np.array_equal(arrays[0], arrays[1], equal_nan=True))
        print("same" if same else f"differ: {arrays[0]!r} vs {arrays[1]!r}")
        return 0 if same else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Writes small single-purpose ONNX models for the importer's op tests.

    make_op_models.py OUTDIR

Every model is checked with onnx.checker (except the deliberately invalid
ones, named bad_*) and written as OUTDIR/<name>.onnx. test/Import/ops.test
imports each with tessera-import and checks the result with FileCheck.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, value, dtype=None):
    arr = np.asarray(value, dtype=dtype)
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(arr, name))


def init(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def model(name, nodes, inputs, outputs, inits=(), opset=17, check=True):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(graph, producer_name="make_op_models.py",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if check:
        onnx.checker.check_model(m)
    return m


def cases():
    rng = np.random.default_rng(0)
    w = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    yield "gemm", model("gemm", [
        helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm",
                         transB=1, alpha=0.5, beta=2.0)],
        [vi("a", F, [4, 3])], [vi("y", F, [4, 5])],
        [init("b", w(5, 3)), init("c", w(5))])

    yield "matmul_batch", model("matmul_batch", [
        helper.make_node("MatMul", ["a", "b"], ["y"], name="bmm"),
        helper.make_node("MatMul", ["y", "v"], ["z"], name="mv")],
        [vi("a", F, [2, 1, 4, 3]), vi("b", F, [3, 3, 5]), vi("v", F, [5])],
        [vi("z", F, [2, 3, 4])])

    # A mask computed from a shape subgraph: everything folds to a constant.
    yield "shape_fold", model("shape_fold", [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        const("one", np.array(1, np.int64)),
        helper.make_node("Gather", ["s", "one"], ["n"], name="gather_n"),
        const("zero", np.array(0, np.int64)),
        const("step", np.array(1, np.int64)),
        helper.make_node("Range", ["zero", "n", "step"], ["r"], name="range"),
        const("three", np.array(3, np.int64)),
        helper.make_node("Less", ["r", "three"], ["lt"], name="less"),
        const("n1", np.array([1], np.int64)),
        helper.make_node("Reshape", ["n", "n1"], ["n_1d"], name="n_1d"),
        helper.make_node("ConstantOfShape", ["n_1d"], ["zeros"],
                         name="zeros",
                         value=numpy_helper.from_array(
                             np.array([0.0], np.float32))),
        const("ninf", np.array(-np.inf, np.float32)),
        helper.make_node("Where", ["lt", "zeros", "ninf"], ["mask"],
                         name="where"),
        helper.make_node("Add", ["x", "mask"], ["y"], name="add_mask")],
        [vi("x", F, [2, 6])], [vi("y", F, [2, 6])])

    yield "slice", model("slice", [
        const("st", np.array([-3], np.int64)),
        const("en", np.array([np.iinfo(np.int64).max], np.int64)),
        const("ax", np.array([1], np.int64)),
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["a"],
                         name="tail"),
        const("st2", np.array([1, 0], np.int64)),
        const("en2", np.array([-1, 100], np.int64)),
        const("ax2", np.array([0, -1], np.int64)),
        const("sp2", np.array([1, 2], np.int64)),
        helper.make_node("Slice", ["x", "st2", "en2", "ax2", "sp2"], ["b"],
                         name="strided")],
        [vi("x", F, [4, 10])], [vi("a", F, [4, 3]), vi("b", F, [2, 5])])

    yield "reshape_ops", model("reshape_ops", [
        const("axes", np.array([0, 3], np.int64)),
        helper.make_node("Unsqueeze", ["x", "axes"], ["u"], name="unsq"),
        const("axes0", np.array([0], np.int64)),
        helper.make_node("Squeeze", ["u", "axes0"], ["s"], name="sq"),
        helper.make_node("Flatten", ["s"], ["f"], name="flat", axis=2),
        const("shp", np.array([0, -1], np.int64)),
        helper.make_node("Reshape", ["f", "shp"], ["y"], name="reshape")],
        [vi("x", F, [2, 3, 4])], [vi("y", F, [6, 4])])

    yield "where_equal", model("where_equal", [
        helper.make_node("Equal", ["x", "y"], ["m"], name="eq"),
        const("z", np.array(0.0, np.float32)),
        helper.make_node("Where", ["m", "x", "z"], ["out"], name="sel")],
        [vi("x", F, [3, 4]), vi("y", F, [4])], [vi("out", F, [3, 4])])

    yield "cast", model("cast", [
        helper.make_node("Cast", ["t"], ["same"], name="cast_same", to=I64),
        helper.make_node("Cast", ["same"], ["f"], name="cast_f", to=F),
        helper.make_node("Cast", ["f"], ["i"], name="cast_i", to=I64)],
        [vi("t", I64, [2, 3])], [vi("f", F, [2, 3]), vi("i", I64, [2, 3])])

    yield "dropout", model("dropout", [
        const("ratio", np.array(0.1, np.float32)),
        const("train", np.array(False)),
        helper.make_node("Dropout", ["x", "ratio", "train"], ["y"],
                         name="drop")],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])

    yield "bad_dropout_training", model("bad_dropout_training", [
        const("ratio", np.array(0.1, np.float32)),
        const("train", np.array(True)),
        helper.make_node("Dropout", ["x", "ratio", "train"], ["y"],
                         name="drop_train")],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])

    yield "bad_dynamic", model("bad_dynamic", [
        helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [vi("x", F, ["batch", 3])], [vi("y", F, ["batch", 3])])

    yield "reduce", model("reduce", [
        helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[-1],
                         keepdims=0),
        const("axes2", np.array([0], np.int64)),
        helper.make_node("ReduceSum", ["m", "axes2"], ["s"], name="sum")],
        [vi("x", F, [2, 3, 4])], [vi("s", F, [1, 3])], opset=13)

    # Opset 18 (newer than libonnx 1.12 knows): ReduceMean takes axes as an
    # input; imported without the ONNX checker, with a warning.
    yield "reduce_op18", model("reduce_op18", [
        const("axes", np.array([-1], np.int64)),
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean")],
        [vi("x", F, [2, 3, 4])], [vi("m", F, [2, 3, 1])], opset=18,
        check=False)

    yield "gather", model("gather", [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
        const("last", np.array(-1, np.int64)),
        helper.make_node("Gather", ["x", "last"], ["g"], name="pick",
                         axis=1)],
        [vi("ids", I64, [2, 3]), vi("x", F, [2, 5, 3])],
        [vi("e", F, [2, 3, 4]), vi("g", F, [2, 3])],
        [init("table", w(10, 4))])

    ext = init("w", w(4))
    ext.ClearField("raw_data")
    ext.data_location = TensorProto.EXTERNAL
    entry = ext.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    yield "bad_external", model("bad_external", [
        helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [vi("x", F, [4])], [vi("y", F, [4])], [ext], check=False)

    yield "int_initializer", model("int_initializer", [
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("Add", ["r", "b"], ["y"], name="add")],
        [vi("x", F, [2, 6])], [vi("y", F, [3, 4])],
        [init("shape", [3, 4], np.int64), init("b", w(4))])

    yield "softmax_op11", model("softmax_op11", [
        helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)],
        [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4])], opset=11)

    yield "expand_concat_split", model("expand_concat_split", [
        const("shape", np.array([2, 3, 4], np.int64)),
        helper.make_node("Expand", ["x", "shape"], ["e"], name="expand"),
        const("c", np.zeros((2, 3, 1), np.float32)),
        helper.make_node("Concat", ["e", "c"], ["cat"], name="cat", axis=-1),
        const("split", np.array([2, 3], np.int64)),
        helper.make_node("Split", ["cat", "split"], ["s0", "s1"],
                         name="split", axis=2)],
        [vi("x", F, [3, 1])], [vi("s0", F, [2, 3, 2]), vi("s1", F, [2, 3, 3])])

    yield "layernorm_nobias", model("layernorm_nobias", [
        helper.make_node("LayerNormalization", ["x", "g"], ["y"], name="ln",
                         axis=-2, epsilon=1e-3)],
        [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4])],
        [init("g", w(3, 4))])

    yield "bad_nonconst_less", model("bad_nonconst_less", [
        helper.make_node("Less", ["x", "y"], ["z"], name="my_less")],
        [vi("x", F, [3]), vi("y", F, [3])], [vi("z", BOOL, [3])])

    yield "bad_nonconst_shape", model("bad_nonconst_shape", [
        helper.make_node("Reshape", ["x", "s"], ["y"], name="dyn_reshape")],
        [vi("x", F, [6]), vi("s", I64, [2])], [vi("y", F, [2, 3])],
        check=False)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, m in cases():
        onnx.save(m, os.path.join(out, name + ".onnx"))


if __name__ == "__main__":
    main()

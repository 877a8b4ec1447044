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


def model(name, nodes, inputs, outputs, inits=(), opset=17, check=True,
          extra_opsets=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(graph, producer_name="make_op_models.py",
                          opset_imports=[helper.make_opsetid("", opset)] +
                          list(extra_opsets))
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

    # Training mode (TorchScript's TrainingMode.TRAINING export): ratio and
    # training_mode as Constant nodes or initializers; ratio 0 is the
    # identity.
    yield "dropout_training", model("dropout_training", [
        const("ratio", np.array(0.1, np.float32)),
        const("train", np.array(True)),
        helper.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"],
                         name="drop0"),
        helper.make_node("Dropout", ["y", "ratio_init", "train_init"],
                         ["z"], name="drop1"),
        const("zero", np.array(0.0, np.float32)),
        helper.make_node("Dropout", ["z", "zero", "train"], ["w"],
                         name="drop_zero")],
        [vi("x", F, [2, 3])], [vi("w", F, [2, 3])],
        inits=[init("ratio_init", 0.25), init("train_init", True, np.bool_)])

    yield "bad_dropout_ratio_input", model("bad_dropout_ratio_input", [
        const("train", np.array(True)),
        helper.make_node("Dropout", ["x", "r", "train"], ["y"],
                         name="drop_dyn")],
        [vi("x", F, [2, 3]), vi("r", F, [])], [vi("y", F, [2, 3])])

    yield "bad_dropout_mode_input", model("bad_dropout_mode_input", [
        const("ratio", np.array(0.1, np.float32)),
        helper.make_node("Dropout", ["x", "ratio", "t"], ["y"],
                         name="drop_mode")],
        [vi("x", F, [2, 3]), vi("t", BOOL, [])], [vi("y", F, [2, 3])])

    yield "bad_dropout_mask", model("bad_dropout_mask", [
        const("ratio", np.array(0.1, np.float32)),
        const("train", np.array(True)),
        helper.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"],
                         name="drop_mask")],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3]), vi("mask", BOOL, [2, 3])])

    yield "bad_dropout_ratio", model("bad_dropout_ratio", [
        const("ratio", np.array(1.0, np.float32)),
        const("train", np.array(True)),
        helper.make_node("Dropout", ["x", "ratio", "train"], ["y"],
                         name="drop_one")],
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

    # --- Ops of the Hugging Face exports (issue 20) -----------------------
    # A causal mask built the way transformers 4.49 does for LLaMA:
    # ConstantOfShape(min) -> Trilu(k=1) -> added to the scores; folds.
    yield "trilu_const", model("trilu_const", [
        const("shape", np.array([4, 4], np.int64)),
        helper.make_node("ConstantOfShape", ["shape"], ["full"], name="full",
                         value=numpy_helper.from_array(
                             np.array([-3.4028234663852886e38], np.float32))),
        const("one", np.array(1, np.int64)),
        helper.make_node("Trilu", ["full", "one"], ["mask"], name="triu",
                         upper=1),
        helper.make_node("Add", ["x", "mask"], ["y"], name="add")],
        [vi("x", F, [2, 4, 4])], [vi("y", F, [2, 4, 4])])

    # Trilu of a tensor: select with a constant keep-mask.
    yield "trilu_runtime", model("trilu_runtime", [
        const("k", np.array(-1, np.int64)),
        helper.make_node("Trilu", ["x", "k"], ["y"], name="tril", upper=0)],
        [vi("x", F, [2, 3, 3])], [vi("y", F, [2, 3, 3])])

    # Rotary tables: positions (Range) times inv_freq (a buffer stored as an
    # initializer), Cos and Sin, multiplied into the activations. The
    # initializer never meets the input except through the folded tables:
    # a constant, not a parameter.
    yield "rotary_fold", model("rotary_fold", [
        const("start", np.array(0, np.int64)),
        const("limit", np.array(4, np.int64)),
        const("delta", np.array(1, np.int64)),
        helper.make_node("Range", ["start", "limit", "delta"], ["pos"],
                         name="range"),
        helper.make_node("Cast", ["pos"], ["posf"], name="cast", to=F),
        const("ax", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["posf", "ax"], ["pcol"], name="unsq"),
        helper.make_node("MatMul", ["pcol", "inv_freq_row"], ["freqs"],
                         name="outer"),
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], name="cat",
                         axis=-1),
        helper.make_node("Cos", ["emb"], ["cos"], name="cos"),
        helper.make_node("Sin", ["emb"], ["sin"], name="sin"),
        helper.make_node("Mul", ["x", "cos"], ["xc"], name="mulcos"),
        helper.make_node("Mul", ["x", "sin"], ["xs"], name="mulsin"),
        helper.make_node("Add", ["xc", "xs"], ["y"], name="add")],
        [vi("x", F, [2, 4, 4])], [vi("y", F, [2, 4, 4])],
        [init("inv_freq_row", [[1.0, 0.01]])])

    yield "bad_sin_runtime", model("bad_sin_runtime", [
        helper.make_node("Sin", ["x"], ["y"], name="my_sin")],
        [vi("x", F, [3])], [vi("y", F, [3])])

    # CumSum (exclusive, reverse) and IsInf on constants, feeding the input.
    yield "cumsum_isinf", model("cumsum_isinf", [
        const("c", np.array([[1, 2, 3], [4, 5, 6]], np.float32)),
        const("axis", np.array(1, np.int64)),
        helper.make_node("CumSum", ["c", "axis"], ["cs"], name="cumsum",
                         exclusive=1, reverse=1),
        const("f", np.array([1.0, np.inf, -np.inf], np.float32)),
        helper.make_node("IsInf", ["f"], ["inf"], name="isinf",
                         detect_negative=0),
        const("zero", np.array(0.0, np.float32)),
        helper.make_node("Where", ["inf", "zero", "cs"], ["w"], name="where"),
        helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])

    # Opset-18 forms: ReduceMean's axes, Split's sizes and Pad's pads and
    # axes as inputs; Min of tensors.
    yield "opset18_forms", model("opset18_forms", [
        const("axes", np.array([-1], np.int64)),
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean"),
        const("sizes", np.array([1, 3], np.int64)),
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], name="split",
                         axis=1),
        const("pads", np.array([1, 2], np.int64)),
        const("pad_axes", np.array([-1], np.int64)),
        const("pad_value", np.array(0.5, np.float32)),
        helper.make_node("Pad", ["b", "pads", "pad_value", "pad_axes"], ["p"],
                         name="pad", mode="constant"),
        helper.make_node("Min", ["m", "a"], ["mn"], name="min")],
        [vi("x", F, [2, 4, 5])],
        [vi("mn", F, [2, 4, 5]), vi("p", F, [2, 3, 8])], opset=18,
        check=False)

    # Three unsupported op types (one of them twice, one in another domain):
    # one error names all three with their counts.
    yield "bad_three_unsupported", model("bad_three_unsupported", [
        helper.make_node("Det", ["x"], ["d"], name="det_1"),
        helper.make_node("Det", ["x"], ["d2"], name="det_2"),
        helper.make_node("Hardmax", ["x"], ["h"], name="hardmax_1"),
        helper.make_node("Relu", ["x"], ["r"], name="fine"),
        helper.make_node("MyOp", ["x"], ["c"], name="custom_1",
                         domain="com.example")],
        [vi("x", F, [3, 3])],
        [vi("d", F, []), vi("d2", F, []), vi("h", F, [3, 3]), vi("r", F, [3, 3]),
         vi("c", F, [3, 3])], check=False,
        extra_opsets=[helper.make_opsetid("com.example", 1)])

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

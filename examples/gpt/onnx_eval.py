"""A tiny ONNX interpreter (torch-backed) for the ops our exported models use.

This is a checking tool, not a runtime: export.py uses it to prove that the
exported (and post-processed) graph computes the same logits as the PyTorch
module, without needing onnxruntime. It supports only the op subset that
torch.onnx.export emits for examples/gpt/model.py at opsets 13-17 and raises
NotImplementedError on anything else.

    from onnx_eval import run_model
    outputs = run_model(onnx_model, {"tokens": np.ndarray})  # name -> ndarray
"""

import numpy as np
import onnx
import torch
from onnx import numpy_helper


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _axes_arg(node, inputs, attrs, idx):
    """Axes come from an attribute (older opsets) or an input (newer)."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(inputs) > idx and inputs[idx] is not None:
        return [int(a) for a in inputs[idx].tolist()]
    return None


_ONNX_TO_TORCH_DTYPE = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.BOOL: torch.bool,
}


def _layer_norm(x, scale, bias, axis, eps):
    axis = axis % x.dim()
    shape = x.shape[axis:]
    assert scale.shape == shape, "LayerNormalization: only full-suffix scale"
    return torch.nn.functional.layer_norm(x, shape, scale, bias, eps)


def _slice(x, starts, ends, axes, steps):
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    index = [slice(None)] * x.dim()
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        if sp != 1:
            raise NotImplementedError("Slice with step != 1")
        index[ax] = slice(int(st), int(en))  # python slicing clamps like ONNX
    return x[tuple(index)]


def _eval_node(node, inputs):
    op, a = node.op_type, _attrs(node)
    x = inputs[0] if inputs else None
    if op == "Constant":
        return [torch.from_numpy(numpy_helper.to_array(a["value"]).copy())]
    if op == "Identity":
        return [x]
    if op == "Gather":
        axis = a.get("axis", 0) % x.dim()
        idx = inputs[1].to(torch.int64)
        idx = torch.where(idx < 0, idx + x.shape[axis], idx)  # ONNX allows <0
        y = torch.index_select(x, axis, idx.reshape(-1))
        return [y.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])]
    if op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal"):
        fn = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
              "Div": torch.div, "Pow": torch.pow, "Equal": torch.eq}[op]
        if op == "Div" and not x.is_floating_point():
            return [torch.div(x, inputs[1], rounding_mode="trunc")]
        return [fn(x, inputs[1])]
    if op in ("Sqrt", "Erf", "Relu", "Tanh", "Neg", "Exp", "Sigmoid",
              "Reciprocal"):
        return [getattr(torch, op.lower())(x)]
    if op == "MatMul":
        return [torch.matmul(x, inputs[1])]
    if op == "Gemm":
        A = x.t() if a.get("transA", 0) else x
        B = inputs[1].t() if a.get("transB", 0) else inputs[1]
        y = a.get("alpha", 1.0) * (A @ B)
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + a.get("beta", 1.0) * inputs[2]
        return [y]
    if op == "Transpose":
        perm = a.get("perm", list(reversed(range(x.dim()))))
        return [x.permute(*perm)]
    if op == "Reshape":
        shape = [int(s) for s in inputs[1].tolist()]
        if a.get("allowzero", 0) == 0:
            shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return [x.reshape(shape)]
    if op == "Slice":
        t = lambda i: (inputs[i].tolist() if len(inputs) > i and
                       inputs[i] is not None else None)
        return [_slice(x, t(1), t(2), t(3), t(4))]
    if op == "Softmax":
        return [torch.softmax(x, a.get("axis", -1))]
    if op == "LayerNormalization":
        bias = inputs[2] if len(inputs) > 2 else None
        return [_layer_norm(x, inputs[1], bias, a.get("axis", -1),
                            a.get("epsilon", 1e-5))]
    if op == "ReduceMean":
        axes = _axes_arg(node, inputs, a, 1)
        dims = axes if axes is not None else list(range(x.dim()))
        return [x.mean(dim=dims, keepdim=bool(a.get("keepdims", 1)))]
    if op == "Shape":
        return [torch.tensor(list(x.shape), dtype=torch.int64)]
    if op == "Concat":
        return [torch.cat(inputs, dim=a["axis"])]
    if op == "Unsqueeze":
        y = x
        axes = _axes_arg(node, inputs, a, 1)
        rank = x.dim() + len(axes)
        for ax in sorted(ax % rank for ax in axes):
            y = y.unsqueeze(ax)
        return [y]
    if op == "Squeeze":
        axes = _axes_arg(node, inputs, a, 1)
        return [x.squeeze() if axes is None else
                x.squeeze(axes[0]) if len(axes) == 1 else
                x.reshape([s for i, s in enumerate(x.shape)
                           if i not in [ax % x.dim() for ax in axes]])]
    if op == "Cast":
        return [x.to(_ONNX_TO_TORCH_DTYPE[a["to"]])]
    if op == "Where":
        return [torch.where(x, inputs[1], inputs[2])]
    if op == "ConstantOfShape":
        value = (numpy_helper.to_array(a["value"]) if "value" in a
                 else np.zeros(1, np.float32))
        return [torch.full([int(d) for d in x.tolist()], value.item(),
                           dtype=torch.from_numpy(value.copy()).dtype)]
    if op == "Expand":  # numpy-style broadcast to a shape (ONNX Expand)
        shape = [int(d) for d in inputs[1].tolist()]
        return [x * torch.ones(shape, dtype=x.dtype)]
    if op == "Split":
        axis = a.get("axis", 0)
        if len(inputs) > 1 and inputs[1] is not None:
            sizes = [int(s) for s in inputs[1].tolist()]
        elif "split" in a:
            sizes = list(a["split"])
        else:
            n = len(node.output)
            sizes = [x.shape[axis] // n] * n
        return list(torch.split(x, sizes, dim=axis))
    raise NotImplementedError(f"onnx_eval: op {op} (node {node.name!r})")


def run_model(model, feeds, outputs=None):
    """Evaluates ``model`` on ``feeds`` (name -> np.ndarray).

    Returns a dict name -> np.ndarray for ``outputs`` (default: graph outputs).
    """
    env = {}
    for init in model.graph.initializer:
        env[init.name] = torch.from_numpy(numpy_helper.to_array(init).copy())
    for name, value in feeds.items():
        env[name] = torch.from_numpy(np.ascontiguousarray(value))
    with torch.no_grad():
        for node in model.graph.node:
            ins = [env[i] if i else None for i in node.input]
            outs = _eval_node(node, ins)
            for name, val in zip(node.output, outs):
                env[name] = val
    wanted = outputs or [o.name for o in model.graph.output]
    return {n: env[n].numpy() for n in wanted}

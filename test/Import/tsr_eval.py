#!/usr/bin/python3
"""Numeric check of the importer: evaluates the printed tsr module with numpy
and compares it with the ONNX model evaluated by examples/gpt/onnx_eval.py.

    tsr_eval.py IMPORTED.mlir MODEL.onnx [--seed N] [--rtol X] [--vocab V]

IMPORTED.mlir must be printed with all resources
(`tessera-import --elide-resource-limit=-1`), so the parameters' initial
values come from the module's `tsr.init` blobs (as the rest of the compiler
sees them). Random token ids in [0, vocab) feed both sides. Prints
`max relative error E: OK` (or FAIL, exit 1); E is max|a - b| / max|b|.

Only the op subset the importer emits is interpreted, from the generic text
of `func.func @forward`; an unknown op is an error.
"""

import argparse
import math
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "gpt"))

DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
          "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
          "i1": np.bool_}


def parse_type(text):
    """'4x16xf32' -> ((4, 16), np.float32)."""
    parts = text.split("x")
    return tuple(int(p) for p in parts[:-1]), DTYPES[parts[-1]]


def parse_resources(text):
    blobs = {}
    m = re.search(r"dialect_resources: \{\s*builtin: \{(.*?)\n\s*\}", text,
                  re.S)
    if m:
        for key, hexdata in re.findall(r"([\w.$]+): \"0x([0-9A-Fa-f]*)\"",
                                       m.group(1)):
            blobs[key] = bytes.fromhex(hexdata)[4:]  # drop the alignment
    return blobs


def hex_float(token, dtype):
    bits = int(token, 16)
    if dtype == np.float32:
        return np.frombuffer(np.uint32(bits).tobytes(), np.float32)[0]
    return np.frombuffer(np.uint64(bits).tobytes(), np.float64)[0]


def parse_dense(literal, shape, dtype):
    if literal.startswith('"0x'):
        data = bytes.fromhex(literal[3:-1])
        if dtype == np.bool_:
            return np.frombuffer(data, np.uint8).astype(np.bool_).reshape(shape)
        return np.frombuffer(data, dtype).reshape(shape).copy()
    lit = re.sub(r"0x[0-9A-Fa-f]+", lambda m: repr(float(hex_float(
        m.group(0), dtype))), literal)
    lit = lit.replace("true", "1").replace("false", "0")
    lit = lit.replace("inf", "float('inf')").replace("nan", "float('nan')")
    value = np.array(eval(lit), dtype=dtype)  # noqa: S307 - our own output
    return np.broadcast_to(value, shape).copy()


def parse_attrs(text):
    attrs = {}
    for key, val in re.findall(r"(\w+) = (array<i64[^>]*>|\"[^\"]*\"|[^,}]+)",
                               text):
        val = val.strip()
        if val.startswith("array<i64"):
            body = val[len("array<i64"):-1].lstrip(":").strip()
            attrs[key] = [int(v) for v in body.split(",")] if body else []
        elif val.startswith('"'):
            attrs[key] = val[1:-1]
        elif val in ("true", "false"):
            attrs[key] = val == "true"
        else:
            num = val.split(":")[0].strip()
            attrs[key] = float(num) if re.search(r"[.eE]", num) else int(num)
    return attrs


def erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def run_module(text, feeds):
    blobs = parse_resources(text)
    sig = re.search(r"func\.func @forward\((.*?)\) -> ", text, re.S).group(1)
    env = {}
    for name, ty, attrs in re.findall(
            r"(%arg\d+): tensor<([^>]*)>(?: \{((?:[^{}]|dense_resource<[^>]*>)*)\})?",
            sig):
        shape, dtype = parse_type(ty)
        res = re.search(r"tsr\.init = dense_resource<([^>]*)>", attrs or "")
        onnx_name = re.search(r'tsr\.name = "([^"]*)"', attrs or "").group(1)
        if res:
            env[name] = np.frombuffer(blobs[res.group(1)], dtype).reshape(shape)
        else:
            env[name] = np.asarray(feeds[onnx_name], dtype).reshape(shape)
    body = text[text.index(") {", text.index("func.func @forward")):]
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("return"):
            names = re.findall(r"%[\w]+", line.split(":")[0])
            return [env[n] for n in names]
        m = re.match(r"(%\w+)(?:, (%\w+))? = tsr\.(\w+) ?(.*)$", line)
        if not m:
            continue
        res, res2, op, rest = m.groups()
        types = re.findall(r"tensor<([^>]*)>", rest)
        attr_m = re.search(r"\{(.*)\}", rest)
        attrs = parse_attrs(attr_m.group(1)) if attr_m else {}
        head = rest.split("{")[0] if attr_m else rest.split(" : ")[0]
        args = [env[a] for a in re.findall(r"%\w+", head)]
        out_shape, out_dtype = parse_type(types[-1]) if types else (None, None)
        if op == "constant":
            lit = re.match(r"dense<(.*)> : tensor<", rest).group(1)
            val = parse_dense(lit, out_shape, out_dtype)
        elif op in ("add", "sub", "mul", "div", "pow", "max"):
            fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                  "div": np.divide, "pow": np.power, "max": np.maximum}[op]
            val = fn(args[0], args[1])
        elif op == "equal":
            val = args[0] == args[1]
        elif op == "select":
            val = np.where(args[0], args[1], args[2])
        elif op in ("neg", "exp", "log", "sqrt", "tanh", "relu", "erf",
                    "rsqrt", "sigmoid", "silu"):
            x = args[0]
            val = {"neg": lambda: -x, "exp": lambda: np.exp(x),
                   "log": lambda: np.log(x), "sqrt": lambda: np.sqrt(x),
                   "tanh": lambda: np.tanh(x),
                   "relu": lambda: np.maximum(x, 0),
                   "erf": lambda: erf(x),
                   "rsqrt": lambda: 1 / np.sqrt(x),
                   "sigmoid": lambda: 1 / (1 + np.exp(-x)),
                   "silu": lambda: x / (1 + np.exp(-x))}[op]()
        elif op == "gelu":
            x = args[0]
            if attrs.get("approximate", "none") == "tanh":
                val = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                             (x + 0.044715 * x ** 3)))
            else:
                val = 0.5 * x * (1 + erf(x / np.float32(math.sqrt(2))))
        elif op == "convert":
            val = args[0].astype(out_dtype)
        elif op == "reshape":
            val = args[0].reshape(out_shape)
        elif op == "broadcast":
            val = np.broadcast_to(args[0], out_shape).copy()
        elif op == "transpose":
            val = np.transpose(args[0], attrs["permutation"])
        elif op == "slice":
            val = args[0][tuple(slice(s, l, st) for s, l, st in zip(
                attrs["start_indices"], attrs["limit_indices"],
                attrs["strides"]))]
        elif op == "concat":
            val = np.concatenate(args, axis=attrs["axis"])
        elif op == "gather":
            val = args[0][args[1]]
        elif op == "matmul":
            a, b = args
            if attrs.get("transpose_lhs"):
                a = np.swapaxes(a, -1, -2)
            if attrs.get("transpose_rhs"):
                b = np.swapaxes(b, -1, -2)
            val = np.matmul(a, b)
        elif op in ("reduce_sum", "reduce_mean", "reduce_max"):
            fn = {"reduce_sum": np.sum, "reduce_mean": np.mean,
                  "reduce_max": np.max}[op]
            val = fn(args[0], axis=tuple(attrs["axes"]),
                     keepdims=bool(attrs.get("keepdim", False)))
        elif op == "softmax":
            x = args[0]
            e = np.exp(x - x.max(axis=attrs["axis"], keepdims=True))
            val = e / e.sum(axis=attrs["axis"], keepdims=True)
        elif op == "attention":
            q, k, v = args[:3]
            if q.ndim >= 4 and k.shape[-3] != q.shape[-3]:
                # Grouped-query attention: query head h reads K/V head
                # h // (H / Hkv), i.e. K/V repeated per query head.
                rep = q.shape[-3] // k.shape[-3]
                k, v = np.repeat(k, rep, axis=-3), np.repeat(v, rep, axis=-3)
            s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(
                attrs["scale"])
            if len(args) > 3:
                s = s + args[3]
            if attrs.get("causal"):
                sq, sk = s.shape[-2:]
                s = np.where(np.tril(np.ones((sq, sk), bool)), s, -np.inf)
            mx = s.max(axis=-1, keepdims=True)
            e = np.exp(s - mx)
            total = e.sum(axis=-1, keepdims=True)
            o_shape, o_dtype = parse_type(types[-2])
            env[res2] = (mx + np.log(total))[..., 0].astype(np.float32)
            val = np.matmul(e / total, v).astype(o_dtype)
            out_dtype = None
        elif op == "layer_norm":
            x, g, b = args
            axes = tuple(range(attrs["axis"], x.ndim))
            mean = x.mean(axis=axes, keepdims=True)
            var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
            val = (x - mean) / np.sqrt(var + np.float32(attrs["epsilon"])) \
                * g + b
        elif op == "rms_norm":
            x, w = args
            axes = tuple(range(attrs["axis"], x.ndim))
            ms = (x * x).mean(axis=axes, keepdims=True)
            val = x / np.sqrt(ms + np.float32(attrs["epsilon"])) * w
        else:
            raise SystemExit(f"tsr_eval.py: unsupported op tsr.{op}")
        val = np.asarray(val)
        if out_dtype is not None and op not in ("layer_norm",):
            val = val.astype(out_dtype, copy=False)
        env[res] = val
    raise SystemExit("tsr_eval.py: no return found")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mlir")
    ap.add_argument("onnx")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--vocab", type=int,
                    help="token ids in [0, VOCAB) (default: the rows of the "
                    "tok_emb* initializer, else 2)")
    args = ap.parse_args()

    import onnx
    from onnx_eval import run_model

    model = onnx.load(args.onnx)
    rng = np.random.default_rng(args.seed)
    feeds = {}
    inits = {i.name for i in model.graph.initializer}
    vocab = args.vocab or min((list(i.dims)[0] for i in model.graph.initializer
                               if i.name.startswith("tok_emb")), default=2)
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = rng.integers(0, vocab, shape, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    expected = run_model(model, feeds)
    got = run_module(open(args.mlir).read(), feeds)
    worst = 0.0
    for out, g in zip(model.graph.output, got):
        ref = np.asarray(expected[out.name], dtype=np.float64)
        if ref.shape != g.shape:
            raise SystemExit(f"{out.name}: shape {g.shape} != {ref.shape}")
        scale = max(np.abs(ref).max(), 1e-30)
        worst = max(worst, float(np.abs(g.astype(np.float64) - ref).max()
                                 / scale))
    ok = worst <= args.rtol
    print(f"max relative error {worst:.3g}: {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Numerical check of tsr-sharding-partition (numpy reference interpreter).

usage: simulate.py SERIAL.mlir PARTITIONED.mlir

Both files are printed with --mlir-print-op-generic. The serial @train_step
runs once on random global arguments; the partitioned one runs on every rank
of the grid (collectives simulated across ranks) on the local pieces of the
same arguments, cut by their `tsr.sharding` (per-dim sub-factors, each split
block-wise by its grid axes; local data row-major over the local sub-factor
sizes). Every returned local value must equal the matching piece of the
serial result (relative error <= 1e-5). sgd_update runs with lr = 1 so the
updated parameters are dominated by their gradients (adamw_update likewise). Prints a summary, exits 1 on a
mismatch.
"""
import itertools
import math
import re
import sys

import numpy as np

# ---------------------------------------------------------------- parsing

def split_top(s, sep=","):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [x.strip() for x in out]


def parse_tensor_type(t):
    m = re.match(r"tensor<([0-9x]*?)x?(f32|i64|i1)>", t.strip())
    if not m:
        raise ValueError(t)
    dims = [int(d) for d in m.group(1).split("x") if d] if m.group(1) else []
    return dims, m.group(2)


def parse_dense(text, shape, dtype):
    body = text.strip()
    if not body.startswith('"'):
        body = body.replace("0xFF800000", "-inf").replace("0x7F800000", "inf")
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        arr = np.frombuffer(raw, dtype=np.float32 if dtype == "f32" else np.int64)
        if arr.size == 1:
            return np.full(shape, arr[0], dtype=np.float64 if dtype == "f32" else np.int64)
        return arr.astype(np.float64 if dtype == "f32" else np.int64).reshape(shape)
    if not body.startswith("["):
        v = float(body) if dtype == "f32" else int(body)
        return np.full(shape, v, dtype=np.float64 if dtype == "f32" else np.int64)
    arr = eval(body.replace("inf", "float('inf')"))
    return np.array(arr, dtype=np.float64 if dtype == "f32" else np.int64).reshape(shape)


def parse_sharding(s):
    """'#tsr.sharding<@grid, [[0], {3, 64 : [1]}] partial = [1]>' ->
    (list of dims, each None (plain) + axes or list of (size, axes)), partial."""
    m = re.match(r"#tsr\.sharding<@\w+, \[(.*)\](?: partial = \[([0-9, ]*)\])?>$", s.strip())
    dims = []
    for d in split_top(m.group(1)):
        if d.startswith("{"):
            subs = []
            for f in split_top(d[1:-1]):
                if ":" in f:
                    size, axes = f.split(":", 1)
                    subs.append((int(size), [int(a) for a in axes.strip()[1:-1].split(",") if a.strip()]))
                else:
                    subs.append((int(f), []))
            dims.append(("factored", subs))
        else:
            dims.append(("plain", [int(a) for a in d[1:-1].split(",") if a.strip()]))
    partial = [int(a) for a in (m.group(2) or "").split(",") if a.strip()]
    return dims, partial


def parse_func(path):
    text = open(path).read()
    grid = None
    m = re.search(r'"shard.grid"\(\) <\{shape = array<i64: ([0-9, ]+)>, sym_name = "grid"\}>', text)
    if m:
        grid = [int(x) for x in m.group(1).split(",")]
    m = re.search(r"\^bb0\((.*?)\):\n", text)
    args = [a.split(":")[0].strip() for a in split_top(m.group(1))]
    arg_attrs = []
    m2 = re.search(r"arg_attrs = \[(.*?)\], function_type", text, re.S)
    for a in split_top(m2.group(1)):
        sh = re.search(r"tsr\.sharding = (#tsr\.sharding<.*?>)(?:[,}])", a)
        name = re.search(r'tsr\.name = "([^"]*)"', a).group(1)
        arg_attrs.append((name, sh.group(1) if sh else None))
    m3 = re.search(r"res_attrs = \[(.*?)\], sym_name", text, re.S)
    res_attrs = []
    for a in split_top(m3.group(1)):
        sh = re.search(r"tsr\.sharding = (#tsr\.sharding<.*?>)(?:[,}])", a)
        res_attrs.append(sh.group(1) if sh else None)
    body = text[text.index("^bb0"):]
    ops = []
    for line in body.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("})"):
            continue
        # Properties <{...}>, then discardable attributes {...} (e.g. the
        # vocab-parallel ops' grid_axes), read alike.
        m = re.match(r'(?:(%[\w#]+)(?::(\d+))? = )?"([\w.]+)"\((.*?)\)(?: <\{(.*)\}>)?(?: \{(.*)\})? : \((.*)\) -> (.*)$', line)
        if not m:
            raise ValueError("cannot parse: " + line)
        res, nres, name, operands, props, attrs, intypes, outtypes = m.groups()
        props = ", ".join(x for x in (props, attrs) if x)
        ops.append(dict(res=res, nres=int(nres or 1), name=name,
                        operands=[o.strip() for o in operands.split(",") if o.strip()],
                        props=props or "", intypes=intypes, outtypes=outtypes))
    return grid, args, arg_attrs, res_attrs, ops


def prop(props, key):
    for p in split_top(props):
        k, v = p.split("=", 1)
        if k.strip() == key:
            return v.strip()
    return None


def arr_prop(props, key):
    v = prop(props, key)
    return [int(x) for x in v[v.index(":") + 1:-1].split(",") if x.strip()]


def out_types(t):
    t = t.strip()
    if t.startswith("("):
        t = t[1:-1]
    return [parse_tensor_type(x) for x in split_top(t)]

# ---------------------------------------------------------------- semantics

def erf(x):
    return np.vectorize(math.erf)(x)


def gelu(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_grad(x, dy):
    cdf = 0.5 * (1 + erf(x / math.sqrt(2)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return dy * (cdf + x * pdf)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_tanh_grad(x, dy):
    t = np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * math.sqrt(2 / math.pi)
                 * (1 + 3 * 0.044715 * x * x))


# tsr.linear's / tsr.bias_activation_grad's activations: (f, dy * f').
ACTIVATIONS = {
    '"none"': (lambda a: a, lambda a, dy: dy),
    '"gelu"': (lambda a: gelu(a), gelu_grad),
    '"gelu_tanh"': (gelu_tanh, gelu_tanh_grad),
    '"relu"': (lambda a: np.maximum(a, 0.0), lambda a, dy: np.where(a > 0, dy, 0.0)),
    '"silu"': (lambda a: a * sigmoid(a), lambda a, dy: silu_grad(a, dy)),
}


def softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def matmul(a, b, ta, tb):
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def layer_norm(x, g, b, axis, eps):
    ax = tuple(range(axis, x.ndim))
    mu = x.mean(axis=ax, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=ax, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def layer_norm_grad(x, g, dy, axis, eps):
    ax = tuple(range(axis, x.ndim))
    lead = tuple(range(0, axis))
    n = np.prod([x.shape[a] for a in ax])
    mu = x.mean(axis=ax, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=ax, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(axis=ax, keepdims=True) - xhat * (dxhat * xhat).mean(axis=ax, keepdims=True))
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def rms_norm(x, g, axis, eps):
    ax = tuple(range(axis, x.ndim))
    return x / np.sqrt((x * x).mean(axis=ax, keepdims=True) + eps) * g


def rms_norm_grad(x, g, dy, axis, eps):
    ax = tuple(range(axis, x.ndim))
    lead = tuple(range(0, axis))
    rstd = 1 / np.sqrt((x * x).mean(axis=ax, keepdims=True) + eps)
    xhat = x * rstd
    dxhat = dy * g
    dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(axis=ax, keepdims=True))
    return dx, (dy * xhat).sum(axis=lead)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def silu_grad(x, dy):
    s = sigmoid(x)
    return dy * s * (1 + x * (1 - s))


def cross_entropy(logits, labels):
    lse = np.log(np.sum(np.exp(logits - logits.max(1, keepdims=True)), 1)) + logits.max(1)
    return np.array(np.sum(lse - logits[np.arange(len(labels)), labels]))


def cross_entropy_grad(logits, labels, g):
    p = softmax(logits, 1)
    p[np.arange(len(labels)), labels] -= 1
    return p * g


def gather_grad(idx, grad, rows):
    out = np.zeros((rows,) + grad.shape[idx.ndim:])
    np.add.at(out, idx.reshape(-1), grad.reshape((-1,) + grad.shape[idx.ndim:]))
    return out


def attention_scores(q, k, mask, scale, causal):
    s = scale * np.matmul(q, np.swapaxes(k, -1, -2))
    if mask is not None:
        s = s + mask
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    return s


def attention(q, k, v, mask, scale, causal):
    """Returns (output, lse), lse the natural-log log-sum-exp per row."""
    s = attention_scores(q, k, mask, scale, causal)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    l = np.sum(e, axis=-1, keepdims=True)
    return np.matmul(e / l, v), (m + np.log(l))[..., 0]


def attention_grad(q, k, v, o, lse, do, mask, scale, causal):
    p = np.exp(attention_scores(q, k, mask, scale, causal) - lse[..., None])
    dv = np.matmul(np.swapaxes(p, -1, -2), do)
    dp = np.matmul(do, np.swapaxes(v, -1, -2))
    ds = p * (dp - np.sum(do * o, axis=-1, keepdims=True))
    dq = scale * np.matmul(ds, k)
    dk = scale * np.matmul(np.swapaxes(ds, -1, -2), q)
    return dq, dk, dv


def attention_op(name, x, props):
    scale = float(prop(props, "scale").split(":")[0])
    causal = prop(props, "causal") == "true"
    if name == "tsr.attention":
        return list(attention(x[0], x[1], x[2], x[3] if len(x) > 3 else None, scale, causal))
    return list(attention_grad(*x[:6], x[6] if len(x) > 6 else None, scale, causal))


UNARY = {"tsr.relu": lambda a: np.maximum(a, 0.0), "tsr.neg": np.negative,
         "tsr.exp": np.exp, "tsr.log": np.log, "tsr.sqrt": np.sqrt,
         "tsr.rsqrt": lambda a: 1 / np.sqrt(a), "tsr.tanh": np.tanh,
         "tsr.erf": erf, "tsr.sigmoid": sigmoid,
         "tsr.silu": lambda a: a * sigmoid(a)}


def run(ops, env, collective=None):
    for op in ops:
        n, p, name = op["operands"], op["props"], op["name"]
        x = [env[o] for o in n]
        outs = out_types(op["outtypes"])
        if name == "func.return":
            return x
        if name == "tsr.constant":
            v = prop(p, "value")
            shape, dt = outs[0]
            # value = dense<...> : tensor<..>
            inner = re.match(r"dense<(.*)> : tensor<", v).group(1)
            r = [parse_dense(inner, shape, dt)]
        elif name in ("tsr.add", "tsr.sub", "tsr.mul", "tsr.div"):
            f = {"tsr.add": np.add, "tsr.sub": np.subtract, "tsr.mul": np.multiply, "tsr.div": np.divide}[name]
            r = [f(x[0], x[1])]
        elif name == "tsr.gather":
            r = [x[0][x[1]]]
        elif name == "tsr.sharding_constraint":
            r = [x[0]]
        elif name == "tsr.broadcast":
            r = [np.broadcast_to(x[0], outs[0][0]).copy()]
        elif name == "tsr.layer_norm":
            r = [layer_norm(x[0], x[1], x[2], int(prop(p, "axis").split(":")[0]), float(prop(p, "epsilon").split(":")[0]))]
        elif name == "tsr.layer_norm_grad":
            r = list(layer_norm_grad(x[0], x[1], x[2], int(prop(p, "axis").split(":")[0]), float(prop(p, "epsilon").split(":")[0])))
        elif name == "tsr.rms_norm":
            r = [rms_norm(x[0], x[1], int(prop(p, "axis").split(":")[0]), float(prop(p, "epsilon").split(":")[0]))]
        elif name == "tsr.rms_norm_grad":
            r = list(rms_norm_grad(x[0], x[1], x[2], int(prop(p, "axis").split(":")[0]), float(prop(p, "epsilon").split(":")[0])))
        elif name in ("tsr.add_layer_norm", "tsr.add_rms_norm",
                      "tsr.layer_norm_grad_add", "tsr.rms_norm_grad_add"):
            ax = int(prop(p, "axis").split(":")[0])
            eps = float(prop(p, "epsilon").split(":")[0])
            if name == "tsr.add_layer_norm":
                h = x[0] + x[1]
                r = [h, layer_norm(h, x[2], x[3], ax, eps)]
            elif name == "tsr.add_rms_norm":
                h = x[0] + x[1]
                r = [h, rms_norm(h, x[2], ax, eps)]
            else:
                f = layer_norm_grad if name == "tsr.layer_norm_grad_add" else rms_norm_grad
                r = list(f(x[0], x[1], x[2], ax, eps))
                r[0] = r[0] + x[3]
        elif name == "tsr.silu_grad":
            r = [silu_grad(x[0], x[1])]
        elif name == "tsr.transpose":
            r = [np.transpose(x[0], arr_prop(p, "permutation"))]
        elif name == "tsr.matmul":
            r = [matmul(x[0], x[1], prop(p, "transpose_lhs") == "true", prop(p, "transpose_rhs") == "true")]
        elif name == "tsr.linear":
            pre = matmul(x[0], x[1], prop(p, "transpose_lhs") == "true", prop(p, "transpose_rhs") == "true") + x[2]
            act = ACTIVATIONS[prop(p, "activation") or '"none"'][0]
            r = [act(pre), pre][:len(outs)]
        elif name == "tsr.bias_activation_grad":
            dx = ACTIVATIONS[prop(p, "activation")][1](x[0], x[1])
            r = [dx, np.sum(dx, axis=tuple(range(dx.ndim - 1)))]
        elif name == "tsr.reshape":
            r = [x[0].reshape(outs[0][0])]
        elif name == "tsr.slice":
            st, li, sd = arr_prop(p, "start_indices"), arr_prop(p, "limit_indices"), arr_prop(p, "strides")
            r = [x[0][tuple(slice(a, b, c) for a, b, c in zip(st, li, sd))]]
        elif name == "tsr.concat":
            r = [np.concatenate(x, axis=int(prop(p, "axis").split(":")[0]))]
        elif name == "tsr.softmax":
            r = [softmax(x[0], int(prop(p, "axis").split(":")[0]))]
        elif name == "tsr.softmax_grad":
            ax = int(prop(p, "axis").split(":")[0])
            y, dy = x
            r = [y * (dy - np.sum(dy * y, axis=ax, keepdims=True))]
        elif name in UNARY:
            r = [UNARY[name](x[0])]
        elif name == "tsr.relu_grad":
            r = [np.where(x[0] > 0, x[1], 0.0)]
        elif name == "tsr.pow":
            r = [np.power(x[0], x[1])]
        elif name == "tsr.max":
            r = [np.maximum(x[0], x[1])]
        elif name == "tsr.reduce_mean":
            r = [np.mean(x[0], axis=tuple(arr_prop(p, "axes")), keepdims=prop(p, "keepdim") == "true")]
        elif name == "tsr.reduce_max":
            r = [np.max(x[0], axis=tuple(arr_prop(p, "axes")), keepdims=prop(p, "keepdim") == "true")]
        elif name == "tsr.gelu":
            r = [gelu(x[0])]
        elif name == "tsr.gelu_grad":
            r = [gelu_grad(x[0], x[1])]
        elif name == "tsr.reduce_sum":
            ax = tuple(arr_prop(p, "axes"))
            r = [np.sum(x[0], axis=ax, keepdims=prop(p, "keepdim") == "true")]
        elif name in ("tsr.attention", "tsr.attention_grad"):
            r = attention_op(name, x, p)
        elif name == "tsr.cross_entropy":
            r = [cross_entropy(x[0], x[1])]
        elif name == "tsr.cross_entropy_grad":
            r = [cross_entropy_grad(x[0], x[1], x[2])]
        elif name == "tsr.gather_grad":
            r = [gather_grad(x[0], x[1], outs[0][0][0])]
        elif name == "tsr.sgd_update":
            lr = 1.0  # so that the gradient, not the old value, dominates
            wd = float(prop(p, "weight_decay").split(":")[0])
            r = [x[0] - lr * (x[1] + wd * x[0])]
        elif name == "tsr.adamw_update":
            f = lambda k: float(prop(p, k).split(":")[0])
            lr, b1, b2, eps, wd = 1.0, f("beta1"), f("beta2"), f("eps"), f("weight_decay")
            prm, g, m, v, t = x[:5]
            prm = prm * (1 - lr * wd)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            prm = prm - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
            r = [prm, m, v]
        elif name.startswith("shard."):
            r = [collective(op, x[0])]
        else:
            raise NotImplementedError(name)
        for v, (shape, _) in zip(r, outs):
            assert list(np.shape(v)) == list(shape), (name, np.shape(v), shape)
        if op["nres"] == 1 and len(r) == 1:
            env[op["res"]] = r[0]
        else:
            for i, v in enumerate(r):
                env[f"{op['res']}#{i}"] = v
    raise RuntimeError("no return")

# ---------------------------------------------------------------- sharding

def block(coord, axes, grid):
    idx, n = 0, 1
    for a in axes:
        idx = idx * grid[a] + coord[a]
        n *= grid[a]
    return idx, n


def local_piece(value, sharding, coord, grid):
    """Global -> local by the per-dim sub-factor layout."""
    if sharding is None:
        return value
    dims, _ = parse_sharding(sharding)
    v = value
    for d, (kind, spec) in enumerate(dims):
        size = v.shape[d]
        subs = [(size, spec)] if kind == "plain" else spec
        shape = list(v.shape)
        exp = v.reshape(shape[:d] + [s for s, _ in subs] + shape[d + 1:])
        for j, (s, axes) in enumerate(subs):
            i, n = block(coord, axes, grid)
            sl = [slice(None)] * exp.ndim
            sl[d + j] = slice(i * s // n, (i + 1) * s // n)
            exp = exp[tuple(sl)]
        local = int(np.prod([s // block(coord, a, grid)[1] for s, a in subs]))
        v = exp.reshape(shape[:d] + [local] + shape[d + 1:])
    return v


VOCAB_OPS = ("tsr.gather", "tsr.gather_grad", "tsr.cross_entropy",
             "tsr.cross_entropy_grad")


def vocab_parallel(op, state, ranks, grid):
    """A local op with `grid_axes`: its vocabulary dim is split over them
    (Megatron-LM's vocab-parallel embedding and cross-entropy). gather looks
    up only the rank's rows (zero elsewhere), gather_grad scatters only
    them; cross_entropy(_grad) equal the op on the full logits (the kernel's
    all-reduces), of which the gradient keeps the rank's columns."""
    axes = arr_prop(op["props"], "grid_axes")
    name = op["name"]
    outs = out_types(op["outtypes"])
    vals = {c: [state[c][o] for o in op["operands"]] for c in ranks}
    for c in ranks:
        i, n = block(c, axes, grid)
        x = vals[c]
        if name == "tsr.gather":
            table, ids = x
            rows = table.shape[0]
            local = ids - i * rows
            mask = (local >= 0) & (local < rows)
            out = table[np.clip(local, 0, rows - 1)]
            out = out * mask.reshape(mask.shape + (1,) * (out.ndim - mask.ndim))
        elif name == "tsr.gather_grad":
            ids, grad = x
            rows = outs[0][0][0]
            local = ids - i * rows
            mask = (local >= 0) & (local < rows)
            out = np.zeros((rows,) + grad.shape[ids.ndim:])
            np.add.at(out, local[mask], grad[mask])
        else:
            group = [g for g in ranks if all(g[a] == c[a] for a in range(len(grid)) if a not in axes)]
            group.sort(key=lambda g: block(g, axes, grid)[0])
            full = np.concatenate([vals[g][0] for g in group], axis=1)
            if name == "tsr.cross_entropy":
                out = cross_entropy(full, x[1])
            else:
                cols = x[0].shape[1]
                out = cross_entropy_grad(full, x[1], x[2])[:, i * cols:(i + 1) * cols]
        assert list(np.shape(out)) == list(outs[0][0]), (name, np.shape(out))
        state[c][op["res"]] = out


RING_OPS = ("tsr.attention", "tsr.attention_grad")


def ring_attention(op, state, ranks, grid):
    """A local ring attention (`grid_axes`, `ring_size` K): each rank of the
    ring holds the stripe of global rows i*K + r of every operand and result
    (sequence dim -2, the log-sum-exp's -1). The results equal the op on the
    interleaved (gathered) sequence, of which each rank keeps its stripe."""
    axes = arr_prop(op["props"], "grid_axes")
    outs = out_types(op["outtypes"])
    vals = {c: [state[c][o] for o in op["operands"]] for c in ranks}
    for c in ranks:
        i, n = block(c, axes, grid)
        group = [g for g in ranks if all(g[a] == c[a] for a in range(len(grid)) if a not in axes)]
        group.sort(key=lambda g: block(g, axes, grid)[0])

        def gather(j):
            pieces = [vals[g][j] for g in group]
            seq = -2 if pieces[0].ndim == vals[c][0].ndim else -1  # lse: -1
            full = np.stack(pieces, axis=seq if seq == -1 else -2)
            if seq == -1:
                return full.reshape(full.shape[:-2] + (-1,))
            return full.reshape(full.shape[:-3] + (-1, full.shape[-1]))

        full = attention_op(op["name"], [gather(j) for j in range(len(vals[c]))], op["props"])
        for r, (v, (shape, _)) in enumerate(zip(full, outs)):
            if v.ndim == vals[c][0].ndim:
                v = v.reshape(v.shape[:-2] + (-1, n, v.shape[-1]))[..., i, :]
            else:
                v = v.reshape(v.shape[:-1] + (-1, n))[..., i]
            assert list(v.shape) == list(shape), (op["name"], v.shape, shape)
            state[c][f"{op['res']}#{r}"] = v


def main():
    serial_path, part_path = sys.argv[1], sys.argv[2]
    _, sargs, sattrs, _, sops = parse_func(serial_path)
    grid, pargs, pattrs, pres, pops = parse_func(part_path)
    rng = np.random.default_rng(0)
    # Global arguments from the serial function's types.
    m = re.search(r"function_type = \((.*?)\) ->", open(serial_path).read())
    types = [parse_tensor_type(t) for t in split_top(m.group(1))]
    # Vocabulary: the smallest embedding table / logits width (8 if none).
    vocab = None
    for op in sops:
        ins = [parse_tensor_type(t)[0] for t in split_top(op["intypes"])] if op["intypes"] else []
        if op["name"] == "tsr.gather":
            v = ins[0][0]
        elif op["name"] in ("tsr.cross_entropy", "tsr.cross_entropy_grad"):
            v = ins[0][1]
        else:
            continue
        vocab = v if vocab is None else min(vocab, v)
    vocab = vocab or 8
    globals_ = {}
    for a, (name, _), (shape, dt) in zip(sargs, sattrs, types):
        if dt == "i64":
            # token ids / labels over the whole (smallest) vocabulary, so
            # that every rank of a vocab-parallel split owns some of them
            globals_[a] = rng.integers(0, vocab, size=shape)
        elif name == "step":
            globals_[a] = np.full(shape, 3.0)
        else:
            # positive, so that exp_avg_sq stays a valid second moment
            globals_[a] = np.abs(rng.standard_normal(shape)) * 0.5
    serial = run(sops, dict(globals_))

    ranks = list(itertools.product(*[range(g) for g in grid]))
    envs = {}
    for c in ranks:
        envs[c] = {pa: local_piece(globals_[sa], sh, c, grid)
                   for pa, sa, (_, sh) in zip(pargs, sargs, pattrs)}

    # Lock-step execution so collectives see every rank's value.
    results = {}
    state = {c: dict(envs[c]) for c in ranks}
    for op in pops:
        if op["name"] == "func.return":
            for c in ranks:
                results[c] = [state[c][o] for o in op["operands"]]
            break
        if op["name"] in VOCAB_OPS and prop(op["props"], "grid_axes"):
            vocab_parallel(op, state, ranks, grid)
            continue
        if op["name"] in RING_OPS and prop(op["props"], "grid_axes"):
            ring_attention(op, state, ranks, grid)
            continue
        if op["name"].startswith("shard."):
            axes = arr_prop(op["props"], "grid_axes")
            vals = {c: state[c][op["operands"][0]] for c in ranks}
            for c in ranks:
                group = [g for g in ranks if all(g[a] == c[a] for a in range(len(grid)) if a not in axes)]
                group.sort(key=lambda g: block(g, axes, grid)[0])
                if op["name"] == "shard.all_reduce":
                    out = sum(vals[g] for g in group)
                elif op["name"] == "shard.all_gather":
                    ax = int(prop(op["props"], "gather_axis").split(":")[0])
                    out = np.concatenate([vals[g] for g in group], axis=ax)
                elif op["name"] == "shard.all_slice":
                    ax = int(prop(op["props"], "slice_axis").split(":")[0])
                    i, n = block(c, axes, grid)
                    s = vals[c].shape[ax]
                    sl = [slice(None)] * vals[c].ndim
                    sl[ax] = slice(i * s // n, (i + 1) * s // n)
                    out = vals[c][tuple(sl)]
                elif op["name"] == "shard.reduce_scatter":
                    ax = int(prop(op["props"], "scatter_axis").split(":")[0])
                    total = sum(vals[g] for g in group)
                    i, n = block(c, axes, grid)
                    s = total.shape[ax]
                    sl = [slice(None)] * total.ndim
                    sl[ax] = slice(i * s // n, (i + 1) * s // n)
                    out = total[tuple(sl)]
                elif op["name"] == "shard.all_to_all":
                    # Chunk i of every rank's split axis goes to rank i;
                    # received chunks are concatenated in rank order.
                    sa = int(prop(op["props"], "split_axis").split(":")[0])
                    ca = int(prop(op["props"], "concat_axis").split(":")[0])
                    i, n = block(c, axes, grid)
                    chunks = []
                    for g in group:
                        s = vals[g].shape[sa]
                        sl = [slice(None)] * vals[g].ndim
                        sl[sa] = slice(i * s // n, (i + 1) * s // n)
                        chunks.append(vals[g][tuple(sl)])
                    out = np.concatenate(chunks, axis=ca)
                else:
                    raise NotImplementedError(op["name"])
                state[c][op["res"]] = out
            continue
        for c in ranks:
            run([op, {"name": "func.return", "operands": [], "props": "", "outtypes": "()", "res": None, "nres": 0}], state[c])

    worst = 0.0
    for r, sh in enumerate(pres):
        for c in ranks:
            want = local_piece(serial[r], sh, c, grid)
            got = results[c][r]
            if np.shape(want) != np.shape(got):
                print(f"result {r} rank {c}: shape {np.shape(got)} != {np.shape(want)}")
                sys.exit(1)
            err = np.linalg.norm(np.asarray(got - want).ravel()) / max(np.linalg.norm(np.asarray(want).ravel()), 1e-30)
            worst = max(worst, err)
            if err > 1e-5:
                print(f"MISMATCH result {r} rank {c}: rel err {err:.3e}")
                sys.exit(1)
    print(f"OK: {len(pres)} results on {len(ranks)} ranks match the serial run "
          f"(worst rel err {worst:.1e})")


if __name__ == "__main__":
    main()

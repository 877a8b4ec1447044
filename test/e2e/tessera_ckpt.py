"""Python side of Tessera's distributed checkpoint format (docs/Checkpoint.md).

An independent implementation used by tests: it writes checkpoints the C++
reader must accept (and corrupted ones it must refuse) and reads checkpoints
that tessera-run --save writes, with numpy and the small safetensors codec
next to this file (no package needed; the e2e test also reads them with the
`safetensors` package).

    from tessera_ckpt import write_checkpoint, read_checkpoint, split_rows
    write_checkpoint(root, step=4, consumed=32, plan={...},
                     tensors=[("w", "param", arr, split_rows(arr, 2)), ...])
    index, values = read_checkpoint(root)   # name -> global ndarray

A shard is given as (rank, ranges): ranges = one list of [begin, end)
intervals per dim; the stored array is the global one restricted to the
Cartesian product of those index sets (np.ix_).

CLI (lit fixtures):
    tessera_ckpt.py make ROOT [--corrupt KIND]      a small 2-rank checkpoint
    tessera_ckpt.py model OUT.onnx [--external]     the matching ONNX model
    tessera_ckpt.py check-convert ROOT FILE         FILE == the global values
    tessera_ckpt.py check-export ROOT OUT.onnx      initializers == values
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_lite  # noqa: E402


def _indices(ranges):
    return [np.concatenate([np.arange(b, e) for b, e in r]) if r else
            np.zeros(0, np.int64) for r in ranges]


def shard_of(arr, ranges):
    """The elements of ``arr`` in the Cartesian product of ``ranges``."""
    if arr.ndim == 0:
        return arr.copy()
    return np.ascontiguousarray(arr[np.ix_(*_indices(ranges))])


def full(arr):
    return [[[0, d]] for d in arr.shape]


def split_dim(arr, dim, parts, ranks=None):
    """Shards splitting ``dim`` into ``parts`` equal blocks, on ``ranks``."""
    ranks = ranks if ranks is not None else list(range(parts))
    step = arr.shape[dim] // parts
    out = []
    for i, r in enumerate(ranks):
        rg = full(arr)
        rg[dim] = [[i * step, (i + 1) * step]]
        out.append((r, rg))
    return out


def split_rows(arr, parts):
    return split_dim(arr, 0, parts)


def write_checkpoint(root, step, tensors, consumed=0, plan=None,
                     loss_scale=None, latest=True):
    """Writes ROOT/iter_NNNNNNN (rank files + index.json) and ROOT/latest.

    tensors: [(name, role, global ndarray, [(rank, ranges), ...])]."""
    name = f"iter_{step:07d}"
    folder = os.path.join(root, name)
    os.makedirs(folder, exist_ok=True)
    per_rank, index = {}, {}
    for order, (tname, role, arr, shards) in enumerate(tensors):
        entries = []
        for rank, ranges in shards:
            f = f"rank_{rank:05d}.safetensors"
            per_rank.setdefault(f, {})[tname] = shard_of(arr, ranges)
            entries.append({"file": f, "key": tname, "ranges": ranges})
        index[tname] = {"role": role,
                        "dtype": {np.dtype("<f4"): "F32",
                                  np.dtype("<i8"): "I64"}[arr.dtype],
                        "shape": list(arr.shape), "order": order,
                        "shards": entries}
    for f, values in per_rank.items():
        safetensors_lite.write(os.path.join(folder, f), values,
                               {"format": "tessera-checkpoint-shard"})
    doc = {"format": "tessera-checkpoint", "version": 1, "step": step,
           "consumed_samples": consumed, "plan": plan or {},
           "tensors": index}
    if loss_scale is not None:
        doc["loss_scale"] = loss_scale
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump(doc, f, indent=2)
    if latest:
        with open(os.path.join(root, "latest"), "w") as f:
            f.write(name + "\n")
    return folder


def resolve(path):
    if os.path.exists(os.path.join(path, "index.json")):
        return path
    with open(os.path.join(path, "latest")) as f:
        return os.path.join(path, f.read().strip())


def read_checkpoint(path):
    """(index dict, {name: global ndarray}) of ROOT or an iter_* folder."""
    folder = resolve(path)
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    files, values = {}, {}
    for name, t in index["tensors"].items():
        dt = {"F32": np.float32, "I64": np.int64}[t["dtype"]]
        out = np.full(t["shape"], np.nan if dt == np.float32 else -1, dt)
        for s in t["shards"]:
            if s["file"] not in files:
                files[s["file"]] = safetensors_lite.read(
                    os.path.join(folder, s["file"]))[0]
            piece = files[s["file"]][s["key"]]
            if out.ndim == 0:
                out[()] = piece
            else:
                out[np.ix_(*_indices(s["ranges"]))] = piece
        values[name] = out
    return index, values


# ------------------------------------------------------------ lit fixtures --

def fixture_values():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    qkv = rng.standard_normal((4, 3 * 4)).astype(np.float32)
    b = rng.standard_normal((6,)).astype(np.float32)
    m = rng.standard_normal((4, 6)).astype(np.float32)
    return w, qkv, b, m


def make_fixture(root, corrupt=None):
    w, qkv, b, m = fixture_values()
    # qkv: fused [4, 3*4] columns split tp2 per chunk (rank 1 holds columns
    # 2..4 of each chunk); w row split; b replicated (rank 0); m (w's AdamW
    # exp_avg) row split.
    qkv_shards = [(t, [[[0, 4]], [[c * 4 + 2 * t, c * 4 + 2 * t + 2]
                                  for c in range(3)]]) for t in range(2)]
    tensors = [("w", "param", w, split_rows(w, 2)),
               ("qkv", "param", qkv, qkv_shards),
               ("b", "frozen", b, [(0, full(b))]),
               ("w.exp_avg", "opt_state", m, split_rows(m, 2)),
               ("step", "opt_state", np.array(4.0, np.float32), [(0, [])])]
    plan = {"grid": {"axes": ["dp", "tp"], "shape": [1, 2]},
            "optimizer": {"kind": "adamw", "lr": 0.001}}
    folder = write_checkpoint(root, 4, tensors, consumed=32, plan=plan)
    index_path = os.path.join(folder, "index.json")
    with open(index_path) as f:
        index = json.load(f)
    if corrupt == "bad-json":
        with open(index_path, "w") as f:
            f.write("{\"format\": ")
        return
    if corrupt == "out-of-bounds":
        index["tensors"]["w"]["shards"][1]["ranges"][0] = [[2, 5]]
    elif corrupt == "overlap":
        index["tensors"]["w"]["shards"][1]["ranges"][0] = [[1, 3]]
    elif corrupt == "uncovered":
        del index["tensors"]["w"]["shards"][1]
    elif corrupt == "missing-file":
        os.remove(os.path.join(folder, "rank_00001.safetensors"))
    elif corrupt == "truncated":
        p = os.path.join(folder, "rank_00001.safetensors")
        data = open(p, "rb").read()
        open(p, "wb").write(data[:-8])
    elif corrupt == "wrong-shape":
        # The file holds a [2, 6] shard; the index claims [2, 5].
        index["tensors"]["w"]["shape"] = [4, 5]
        for s in index["tensors"]["w"]["shards"]:
            s["ranges"][1] = [[0, 5]]
    elif corrupt == "dangling-latest":
        with open(os.path.join(root, "latest"), "w") as f:
            f.write("iter_0000009\n")
    elif corrupt == "version":
        index["version"] = 2
    elif corrupt is not None:
        raise SystemExit(f"unknown corruption {corrupt}")
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)


def make_model(out, external=False, bad_shape=False, drop_qkv=False,
               location=None):
    """y = x @ w + b, z = x @ qkv: the fixture's params as initializers
    (plus an untrained initializer 'scale')."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w, qkv, b, _ = fixture_values()
    if bad_shape:
        w = w.T.copy()
    inits = [numpy_helper.from_array(np.zeros_like(w), "w"),
             numpy_helper.from_array(np.zeros_like(qkv), "qkv"),
             numpy_helper.from_array(np.zeros_like(b), "b"),
             numpy_helper.from_array(np.full((1,), 2.0, np.float32), "scale")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["y0"]),
             helper.make_node("Mul", ["y0", "scale"], ["y"]),
             helper.make_node("MatMul", ["x", "qkv"], ["z"])]
    if drop_qkv:  # qkv becomes a graph input: not an initializer
        inits = [t for t in inits if t.name != "qkv"]
    graph = helper.make_graph(
        nodes, "fixture",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])] +
        ([helper.make_tensor_value_info("qkv", TensorProto.FLOAT, [4, 12])]
         if drop_qkv else []),
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 12])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if external:
        onnx.save_model(model, out, save_as_external_data=True,
                        all_tensors_to_one_file=True,
                        location=location or os.path.basename(out) + ".data",
                        size_threshold=0)
    else:
        onnx.save_model(model, out)


def check_convert(root, path):
    _, values = read_checkpoint(root)
    got, meta = safetensors_lite.read(path)
    want = {k: v for k, v in values.items() if k in ("w", "qkv", "b")}
    assert list(got) == ["w", "qkv", "b"], list(got)
    for k, v in want.items():
        assert got[k].shape == v.shape and np.array_equal(got[k], v), k
    digests = json.loads(meta.pop("tessera.digests"))  # SafeTensors.h
    assert sorted(digests["tensors"]) == ["b", "qkv", "w"], digests
    assert meta == {"format": "pt", "tessera.steps": "4"}, meta
    print("convert ok:", ", ".join(f"{k}{list(v.shape)}" for k, v in got.items()))


def check_export(root, path):
    import onnx
    from onnx import numpy_helper
    _, values = read_checkpoint(root)
    bare = onnx.load(path, load_external_data=False)
    ext = [t.name for t in bare.graph.initializer
           if t.data_location == onnx.TensorProto.EXTERNAL]
    model = onnx.load(path)  # loads external data from the model's folder
    got = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for k in ("w", "qkv", "b"):
        assert np.array_equal(got[k], values[k]), k
    assert np.array_equal(got["scale"], np.full((1,), 2.0, np.float32))
    print("export ok; external:", ",".join(sorted(ext)) or "none")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("root")
    m.add_argument("--corrupt")
    o = sub.add_parser("model")
    o.add_argument("out")
    o.add_argument("--external", action="store_true")
    o.add_argument("--bad-shape", action="store_true")
    o.add_argument("--drop-qkv", action="store_true")
    o.add_argument("--location", help="external data file name")
    c = sub.add_parser("check-convert")
    c.add_argument("root")
    c.add_argument("file")
    e = sub.add_parser("check-export")
    e.add_argument("root")
    e.add_argument("model")
    a = ap.parse_args()
    if a.cmd == "make":
        make_fixture(a.root, a.corrupt)
    elif a.cmd == "model":
        make_model(a.out, a.external, a.bad_shape, a.drop_qkv, a.location)
    elif a.cmd == "check-convert":
        check_convert(a.root, a.file)
    else:
        check_export(a.root, a.model)


if __name__ == "__main__":
    main()

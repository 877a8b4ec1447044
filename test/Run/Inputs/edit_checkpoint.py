#!/usr/bin/python3
"""edit_checkpoint.py IN_DIR OUT_DIR [--drop NAME] [--grow NAME] [--add NAME]

Reads the Tessera checkpoint IN_DIR (an iter_* folder whose tensors are
each stored whole in one shard, as a 1-rank run saves them), applies the
edits and writes a checkpoint of the same format to OUT_DIR (an iter_*
folder with rank_00000.safetensors and index.json, plus OUT_DIR/../latest):
  --drop NAME  removes tensor NAME;
  --grow NAME  appends one zero row to NAME's first dimension;
  --add NAME   adds an f32 param NAME of shape [2] (zeros).
For tessera-run's checkpoint mismatch errors (test/Run/checkpoint-errors.test).
"""
import argparse
import json
import os
import struct

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for key, e in header.items():
        assert e["dtype"] == "F32", e
        b, end = e["data_offsets"]
        out[key] = np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for key, value in tensors.items():
        raw = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[key] = {"dtype": "F32", "shape": list(value.shape),
                       "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--drop")
    p.add_argument("--grow")
    p.add_argument("--add")
    a = p.parse_args()
    with open(os.path.join(a.src, "index.json")) as f:
        index = json.load(f)
    values, roles = {}, {}
    for name, t in index["tensors"].items():
        (shard,) = t["shards"]
        values[name] = read_safetensors(
            os.path.join(a.src, shard["file"]))[shard["key"]]
        roles[name] = t["role"]
    if a.drop:
        del values[a.drop]
    if a.grow:
        v = values[a.grow]
        values[a.grow] = np.concatenate([v, np.zeros((1,) + v.shape[1:],
                                                     dtype=v.dtype)])
    if a.add:
        values[a.add] = np.zeros([2], dtype=np.float32)
        roles[a.add] = "param"
    os.makedirs(a.dst, exist_ok=True)
    write_safetensors(os.path.join(a.dst, "rank_00000.safetensors"), values)
    index["tensors"] = {
        name: {"role": roles[name], "dtype": "F32", "shape": list(v.shape),
               "shards": [{"file": "rank_00000.safetensors", "key": name,
                           "ranges": [[[0, d]] for d in v.shape]}]}
        for name, v in values.items()}
    with open(os.path.join(a.dst, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(os.path.dirname(os.path.abspath(a.dst)), "latest"),
              "w") as f:
        f.write(os.path.basename(os.path.abspath(a.dst)) + "\n")


if __name__ == "__main__":
    main()

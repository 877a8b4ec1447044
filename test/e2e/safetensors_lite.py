"""Minimal safetensors reader/writer (json + numpy), no external package.

Format: 8-byte little-endian u64 header length N, N bytes of JSON header
``{name: {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
"__metadata__": {str: str}}``, then the raw little-endian tensor bytes;
offsets are relative to the end of the header.

    tensors, metadata = read("ckpt.safetensors")     # name -> np.ndarray
    write("out.safetensors", {"w": arr}, metadata={"step": "3"})
"""

import json
import struct

import numpy as np

_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
    "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2",
    "U8": "u1", "BOOL": "?",
}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read(path):
    """Returns ({name: ndarray}, metadata dict) of a .safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} exceeds file size")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: {name}: unsupported dtype {info['dtype']}")
        dt = np.dtype(_DTYPES[info["dtype"]])
        b, e = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        if not 0 <= b <= e <= len(data) or e - b != dt.itemsize * int(np.prod(shape)):
            raise ValueError(f"{path}: {name}: bad data_offsets {b, e}")
        tensors[name] = np.frombuffer(data[b:e], dtype=dt).reshape(shape).copy()
    return tensors, metadata


def write(path, tensors, metadata=None):
    """Writes {name: ndarray} (in the dict's order) to ``path``."""
    header, chunks, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.require(arr, requirements="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
        le = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        raw = le.tobytes()
        header[name] = {"dtype": _NAMES[np.dtype(le.dtype.str)],
                        "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for c in chunks:
            f.write(c)

#!/usr/bin/python3
"""st_header.py FILE.safetensors: prints each tensor's name, dtype and shape
(sorted by name) from the safetensors JSON header, and the metadata keys."""
import json
import struct
import sys

with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
meta = header.pop("__metadata__", {})
for name in sorted(header):
    print(name, header[name]["dtype"], header[name]["shape"])
print("metadata", sorted(meta))

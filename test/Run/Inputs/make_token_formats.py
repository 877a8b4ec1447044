#!/usr/bin/python3
"""make_token_formats.py DIR: the ids of make_tokens.py (200 ids in [0, 16))
in every format tessera-run reads (docs/DataFormats.md), plus broken ones:

  DIR/tokens.u32           plain uint32
  DIR/mm16.bin/.idx        Megatron-LM indexed dataset, uint16 (code 8),
                           documents of 1..29 ids
  DIR/mm32.bin/.idx        the same, int32 (code 4)
  DIR/badmagic, badversion, floatcode, truncated, shortbin, pointer
                           (.bin/.idx): mm16 with one fault each
Written by hand from indexed_dataset.py's layout (no Tessera code)."""
import os
import struct
import sys

out = sys.argv[1]
ids = [(7 * i * i + 3 * i) % 16 for i in range(200)]
with open(os.path.join(out, "tokens.u32"), "wb") as f:
    f.write(struct.pack("<%dI" % len(ids), *ids))

docs, i, k = [], 0, 1
while i < len(ids):
    docs.append(ids[i:i + k])
    i += k
    k = k % 29 + 1


def write(name, code, fmt, width, fault=None):
    n = len(docs)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, n, n + 1)
    idx += struct.pack("<%di" % n, *[len(d) for d in docs])
    ptrs, p = [], 0
    for d in docs:
        ptrs.append(p)
        p += len(d) * width
    if fault == "pointer":
        ptrs[3] += width
    idx += struct.pack("<%dq" % n, *ptrs)
    idx += struct.pack("<%dq" % (n + 1), *range(n + 1))
    binary = b"".join(struct.pack("<%d%s" % (len(d), fmt), *d) for d in docs)
    if fault == "badmagic":
        idx = b"MMIDIDY" + idx[7:]
    elif fault == "badversion":
        idx = idx[:9] + struct.pack("<Q", 3) + idx[17:]
    elif fault == "floatcode":
        idx = idx[:17] + bytes([6]) + idx[18:]
    elif fault == "truncated":
        idx = idx[:-5]
    elif fault == "shortbin":
        binary = binary[:-2]
    with open(os.path.join(out, name + ".idx"), "wb") as f:
        f.write(idx)
    with open(os.path.join(out, name + ".bin"), "wb") as f:
        f.write(binary)


write("mm16", 8, "H", 2)
write("mm32", 4, "i", 4)
for fault in ("badmagic", "badversion", "floatcode", "truncated", "shortbin",
              "pointer"):
    write(fault, 8, "H", 2, fault)

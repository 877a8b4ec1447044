#!/usr/bin/python3
"""make_tokens.py OUT.u16 [N]: N (default 200) uint16 tokens, little-endian,
a deterministic sequence in [0, 16) (the bigram test model's vocabulary)."""
import struct
import sys

n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<%dH" % n, *[(7 * i * i + 3 * i) % 16 for i in range(n)]))

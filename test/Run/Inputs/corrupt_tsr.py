#!/usr/bin/python3
"""corrupt_tsr.py IN OUT EDIT: writes a corrupted copy of the safetensors
file IN (a plan.tsr) to OUT, for tessera-run's integrity errors
(test/Run/integrity.test). EDIT is one of
  flip SECTION       XOR 0x01 into the middle byte of tensor SECTION's data,
                     or of metadata value SECTION inside the JSON header
                     (a character of the string, not its quotes);
  strip-digests      drop the "tessera.digests" metadata (an artifact of an
                     older Tessera), keeping everything else valid;
  set-length N       replace the 8-byte header length by N;
  append N           append N zero bytes after the data.
Or, `corrupt_tsr.py IN extract PROGRAM MANIFEST`: writes the program bytes
(MLIR bytecode) and the manifest JSON of IN, to repack an edited manifest
with tessera-pack-plan (which adds fresh digests).
"""
import json
import struct
import sys

src = sys.argv[1]
blob = bytearray(open(src, "rb").read())
(n,) = struct.unpack("<Q", blob[:8])
header = json.loads(blob[8:8 + n])
if sys.argv[2] == "extract":
    b, e = header["__program__"]["data_offsets"]
    open(sys.argv[3], "wb").write(bytes(blob[8 + n + b:8 + n + e]))
    open(sys.argv[4], "w").write(header["__metadata__"]["tessera.manifest"])
    sys.exit(0)
dst, edit = sys.argv[2], sys.argv[3]

if edit == "flip":
    name = sys.argv[4]
    if name in header:
        b, e = header[name]["data_offsets"]
        blob[8 + n + (b + e) // 2] ^= 0x01
    else:
        # The value's JSON text inside the header: flip a letter or digit in
        # its middle (stays valid JSON, changes the string).
        text = json.dumps(header["__metadata__"][name])[1:-1].encode()
        at = blob.find(text, 8, 8 + n)
        assert at > 0, "metadata value not found verbatim"
        mid = at + len(text) // 2
        while not chr(blob[mid]).isalnum():
            mid += 1
        blob[mid] ^= 0x01
elif edit == "strip-digests":
    header["__metadata__"].pop("tessera.digests")
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    blob = bytearray(struct.pack("<Q", len(text)) + text + blob[8 + n:])
elif edit == "set-length":
    blob[:8] = struct.pack("<Q", int(sys.argv[4]))
elif edit == "append":
    blob += bytes(int(sys.argv[4]))
else:
    sys.exit("unknown edit " + edit)
open(dst, "wb").write(bytes(blob))

#!/usr/bin/python3
"""Rewrites plan.tsr artifacts with their program as MLIR text: the seeds of
tessera-plan-fuzzer (test/fuzz/corpus/plan; see plan-fuzzer.cpp for why the
fuzzer does not mutate bytecode).

    make_plan_seeds.py TESSERA_OPT OUTDIR PLAN.tsr...

For each PLAN.tsr: reads the safetensors header, finds the program tensor
(the manifest's "program", raw U8 bytes of MLIR bytecode), prints it as text
with TESSERA_OPT (tessera-opt) and writes OUTDIR/<name> with the text in its place
(header offsets recomputed; everything else byte for byte the same)."""
import json
import os
import struct
import subprocess
import sys
import tempfile


def main():
    opt, outdir, plans = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(outdir, exist_ok=True)
    for path in plans:
        blob = open(path, "rb").read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        data = blob[8 + n:]
        manifest = json.loads(header["__metadata__"]["tessera.manifest"])
        prog = manifest["program"]
        b, e = header[prog]["data_offsets"]
        with tempfile.NamedTemporaryFile(suffix=".mlirbc") as f:
            f.write(data[b:e])
            f.flush()
            text = subprocess.run([opt, f.name], check=True,
                                  capture_output=True).stdout
        # Tensors in data order, the program's bytes replaced.
        entries = sorted((k for k in header if k != "__metadata__"),
                         key=lambda k: header[k]["data_offsets"][0])
        out = b""
        for k in entries:
            kb, ke = header[k]["data_offsets"]
            chunk = text if k == prog else data[kb:ke]
            header[k]["data_offsets"] = [len(out), len(out) + len(chunk)]
            if k == prog:
                header[k]["shape"] = [len(chunk)]
            out += chunk
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        name = os.path.basename(path)
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + out)


if __name__ == "__main__":
    main()

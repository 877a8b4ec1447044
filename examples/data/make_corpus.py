#!/usr/bin/python3
"""Builds examples/data/corpus.u16, the byte-level training corpus.

Source: the license texts in /usr/share/common-licenses/ (Debian package
``base-files``, present on every Debian system). The regular files there are
read in sorted (byte-wise) name order and concatenated; symbolic links
(GPL -> GPL-3, LGPL -> LGPL-3, GFDL -> GFDL-1.3) are skipped because they only
duplicate another file. Tokenization is byte-level: token id = byte value, so
the vocabulary is 256. Tokens are written as little-endian uint16, the format
of Tessera's ``--data FILE``.

    make_corpus.py [--src DIR] [-o OUT.u16]

Prints the files used, the token count and the SHA-256 of the output.
"""

import argparse
import hashlib
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def corpus_files(src):
    names = sorted(os.listdir(src))
    return [os.path.join(src, n) for n in names
            if os.path.isfile(os.path.join(src, n))
            and not os.path.islink(os.path.join(src, n))]


def build(src):
    data = b"".join(open(p, "rb").read() for p in corpus_files(src))
    return np.frombuffer(data, dtype=np.uint8).astype("<u2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default="/usr/share/common-licenses")
    ap.add_argument("-o", "--output", default=os.path.join(HERE, "corpus.u16"))
    args = ap.parse_args()
    files = corpus_files(args.src)
    tokens = build(args.src)
    with open(args.output, "wb") as f:
        f.write(tokens.tobytes())
    digest = hashlib.sha256(tokens.tobytes()).hexdigest()
    print(f"{len(files)} files: {' '.join(os.path.basename(p) for p in files)}")
    print(f"{tokens.size} tokens ({tokens.nbytes} bytes), "
          f"{np.unique(tokens).size} distinct -> {args.output}")
    print(f"sha256 {digest}")


if __name__ == "__main__":
    main()

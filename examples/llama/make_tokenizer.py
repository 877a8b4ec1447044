#!/usr/bin/env python3
"""Trains the LLaMA demo's byte-level BPE tokenizer and writes its corpus.

Source text: the license texts that examples/data/make_corpus.py reads
(/usr/share/common-licenses, regular files in sorted name order, symlinks
skipped). A Hugging Face `tokenizers` byte-level BPE (ByteLevel
pre-tokenizer and decoder, no special tokens, no added prefix space) is
trained on them with a vocabulary of --vocab tokens (256 byte tokens +
merges); each file is encoded separately and the ids concatenated in file
order (as make_corpus.py concatenates the bytes), written as little-endian
uint16: Tessera's --data format. Decoding the ids gives the texts back
exactly (checked).

    make_tokenizer.py [--src DIR] [--vocab 2048] [--out-dir examples/llama]

Writes tokenizer.json and corpus.u16; prints the token count and sha256s.
Runs in the export-dynamo venv (scripts/python-env.sh), or any env with
`tokenizers` and numpy. Deterministic: run with RAYON_NUM_THREADS=1
(regen.sh does) the files are identical on every run.
"""

import argparse
import hashlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "data"))
from make_corpus import corpus_files  # noqa: E402


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default="/usr/share/common-licenses")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--out-dir", default=HERE)
    args = ap.parse_args()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import trainers

    files = corpus_files(args.src)
    texts = [open(p, "rb").read().decode("utf-8") for p in files]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != args.vocab:
        sys.exit(f"make_tokenizer: trained {tok.get_vocab_size()} tokens, "
                 f"wanted {args.vocab}")
    ids = []
    for path, text in zip(files, texts):
        enc = tok.encode(text).ids
        if tok.decode(enc) != text:
            sys.exit(f"make_tokenizer: {path} does not round-trip")
        ids.extend(enc)
    tokens = np.asarray(ids, dtype="<u2")
    if tokens.max() >= args.vocab:
        sys.exit("make_tokenizer: token id out of range")
    os.makedirs(args.out_dir, exist_ok=True)
    tok_path = os.path.join(args.out_dir, "tokenizer.json")
    data_path = os.path.join(args.out_dir, "corpus.u16")
    tok.save(tok_path)
    tokens.tofile(data_path)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    print(f"{len(files)} files, {nbytes} bytes -> {tokens.size} tokens "
          f"({nbytes / tokens.size:.2f} bytes/token), vocabulary "
          f"{tok.get_vocab_size()}, {np.unique(tokens).size} ids used")
    print(f"{tok_path}: sha256 {sha256(tok_path)}")
    print(f"{data_path}: {os.path.getsize(data_path)} bytes, sha256 "
          f"{sha256(data_path)}")


if __name__ == "__main__":
    main()

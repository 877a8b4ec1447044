#!/usr/bin/env python3
"""Tokenizes text files into Tessera's token data (docs/DataFormats.md).

    tokenize_text.py TEXT... (--train-bpe V | --tokenizer tokenizer.json)
        [--save-tokenizer OUT.json] [--lines] [--append-eod]
        [-o TOKENS] [--dtype uint16|uint32] [--megatron PREFIX]

Tokenizer (Hugging Face ``tokenizers``; nothing is downloaded):
* ``--train-bpe V`` trains a byte-level BPE (Sennrich et al. 2016, "Neural
  Machine Translation of Rare Words with Subword Units"; GPT-2's byte-level
  variant) of at most V ids on the input files themselves: the alphabet is
  the bytes that occur, plus the special token ``<|endoftext|>``, then
  merges up to V; ``--save-tokenizer`` writes it as tokenizer.json;
* ``--tokenizer FILE`` loads any tokenizer.json (e.g. a model's).

Documents: each input file is one document, or with ``--lines`` each
non-empty line; ``--append-eod`` appends ``<|endoftext|>``'s id to every
document (Megatron-LM's preprocess_data.py --append-eod).

Outputs (at least one):
* ``-o TOKENS``: a plain token file, the documents' ids back to back,
  little-endian, no header; ``--dtype`` uint16 (default when the vocabulary
  has at most 65,536 ids) or uint32 (default above; tessera-run needs
  ``--data-dtype uint32`` then);
* ``--megatron PREFIX``: a Megatron-LM indexed dataset PREFIX.bin +
  PREFIX.idx (megatron/core/datasets/indexed_dataset.py, version 1), one
  sequence per document, ids in uint16 when the vocabulary has fewer than
  65,500 ids, else int32 (Megatron's DType.optimal_dtype).
Both hold the same token stream, so tessera-run gives the same batches from
either.

Errors (one line on stderr, exit status 1): unreadable inputs, a tokenizer
that does not load, ids that do not fit --dtype, no output requested.
"""

import argparse
import os
import struct
import sys

import numpy as np

EOD = "<|endoftext|>"

#: Megatron-LM's dtype codes (indexed_dataset.py, DType).
MEGATRON_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2,
                  np.dtype(np.int16): 3, np.dtype(np.int32): 4,
                  np.dtype(np.int64): 5, np.dtype(np.float64): 6,
                  np.dtype(np.float32): 7, np.dtype(np.uint16): 8}


class Error(Exception):
    """A one-line user-facing error."""


def plain_dtype(vocab_size, name=None):
    """The numpy dtype of a plain token file for a vocabulary (see -o)."""
    if name is None:
        name = "uint16" if vocab_size <= 65536 else "uint32"
    if name not in ("uint16", "uint32"):
        raise Error(f"--dtype must be uint16 or uint32, got {name!r}")
    if name == "uint16" and vocab_size > 65536:
        raise Error(f"a vocabulary of {vocab_size} ids does not fit uint16; "
                    f"use --dtype uint32")
    return np.dtype("<u2" if name == "uint16" else "<u4")


def megatron_dtype(vocab_size):
    """Megatron-LM's DType.optimal_dtype: uint16 below 65,500 ids, else
    int32."""
    return np.dtype(np.uint16 if vocab_size < 65500 else np.int32)


def write_plain(path, documents, dtype):
    """Writes the documents' ids back to back as little-endian `dtype`."""
    dtype = np.dtype(dtype).newbyteorder("<")
    with open(path, "wb") as f:
        for doc in documents:
            ids = np.asarray(doc, dtype=np.int64)
            check_range(ids, dtype, path)
            f.write(ids.astype(dtype).tobytes())


def check_range(ids, dtype, path):
    info = np.iinfo(dtype)
    if ids.size and (ids.min() < info.min or ids.max() > info.max):
        raise Error(f"{path}: id {int(ids.max())} does not fit {dtype.name}")


def write_megatron(prefix, documents, dtype):
    """Writes PREFIX.bin and PREFIX.idx as Megatron-LM's
    IndexedDatasetBuilder does with one sequence per document: the .idx is
    the magic "MMIDIDX\\0\\0", version 1 (u64), the dtype code (u8), the
    sequence count N and the document-index count N + 1 (u64 each), the
    sequence lengths (i32[N]), their byte offsets into the .bin (i64[N]) and
    the document indices 0, 1, ..., N (i64[N + 1]); little-endian."""
    dtype = np.dtype(dtype)
    lengths, pointers = [], []
    offset = 0
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            ids = np.asarray(doc, dtype=np.int64)
            check_range(ids, dtype, prefix + ".bin")
            f.write(ids.astype(dtype.newbyteorder("<")).tobytes())
            lengths.append(ids.size)
            pointers.append(offset)
            offset += ids.size * dtype.itemsize
    n = len(lengths)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", MEGATRON_CODES[dtype]))
        f.write(struct.pack("<Q", n))
        f.write(struct.pack("<Q", n + 1))
        f.write(np.asarray(lengths, dtype="<i4").tobytes())
        f.write(np.asarray(pointers, dtype="<i8").tobytes())
        f.write(np.arange(n + 1, dtype="<i8").tobytes())


def read_documents(paths, lines):
    docs = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise Error(f"{path}: cannot read: {e}")
        if lines:
            docs.extend(line for line in text.splitlines() if line.strip())
        else:
            docs.append(text)
    return docs


def train_bpe(texts, vocab_size):
    """A byte-level BPE of at most `vocab_size` ids trained on `texts`
    (one thread unless RAYON_NUM_THREADS says otherwise, so the result is
    the same on every run)."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, \
        trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                  special_tokens=[EOD], show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path):
    from tokenizers import Tokenizer
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises plain Exceptions
        raise Error(f"{path}: cannot load the tokenizer: "
                    f"{str(e).splitlines()[0] if str(e) else e}")


def tokenize(tok, docs, append_eod):
    eod = tok.token_to_id(EOD) if append_eod else None
    if append_eod and eod is None:
        raise Error(f"--append-eod: the tokenizer has no {EOD} token")
    out = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids = list(enc.ids)
        if append_eod:
            ids.append(eod)
        out.append(ids)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("inputs", nargs="+", metavar="TEXT")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--train-bpe", type=int, metavar="V",
                     help="train a byte-level BPE of at most V ids")
    src.add_argument("--tokenizer", metavar="FILE",
                     help="a tokenizer.json to load")
    ap.add_argument("--save-tokenizer", metavar="OUT.json")
    ap.add_argument("--lines", action="store_true",
                    help="one document per non-empty line")
    ap.add_argument("--append-eod", action="store_true")
    ap.add_argument("-o", "--output", metavar="TOKENS",
                    help="plain token file")
    ap.add_argument("--dtype", choices=["uint16", "uint32"],
                    help="of -o (default: by vocabulary size)")
    ap.add_argument("--megatron", metavar="PREFIX",
                    help="write PREFIX.bin and PREFIX.idx")
    args = ap.parse_args(argv)
    try:
        if not (args.output or args.megatron or args.save_tokenizer):
            raise Error("nothing to write: give -o, --megatron or "
                        "--save-tokenizer")
        docs = read_documents(args.inputs, args.lines)
        if args.train_bpe is not None:
            if args.train_bpe < 2:
                raise Error(f"--train-bpe must be >= 2, got {args.train_bpe}")
            tok = train_bpe(docs, args.train_bpe)
        else:
            tok = load_tokenizer(args.tokenizer)
        if args.save_tokenizer:
            tok.save(args.save_tokenizer)
        vocab = tok.get_vocab_size(with_added_tokens=True)
        ids = tokenize(tok, docs, args.append_eod)
        total = sum(len(d) for d in ids)
        if args.output:
            dtype = plain_dtype(vocab, args.dtype)
            write_plain(args.output, ids, dtype)
            print(f"tokenize_text: {args.output}: {total} tokens, "
                  f"{dtype.name}, vocabulary {vocab}", file=sys.stderr)
        if args.megatron:
            dtype = megatron_dtype(vocab)
            write_megatron(args.megatron, ids, dtype)
            print(f"tokenize_text: {args.megatron}.bin/.idx: {len(ids)} "
                  f"documents, {total} tokens, {dtype.name}, vocabulary "
                  f"{vocab}", file=sys.stderr)
    except (Error, OSError) as e:
        print(f"tokenize_text: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

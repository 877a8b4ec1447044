"""Python implementation of Tessera's training-data convention (DESIGN.md).

The data file holds token ids as little-endian uint16 (or uint32, or a
Megatron-LM .bin/.idx pair whose sequences, concatenated, are the stream;
docs/DataFormats.md); T = number of tokens.
For step ``s`` and global sample ``j`` (0 <= j < B)::

    n     = s*B + j
    start = (n*S) mod (T - S - 1)
    input  = tokens[start : start+S]
    labels = tokens[start+1 : start+S+1]

DP rank ``r`` of ``D`` takes samples ``j`` in ``[r*B/D, (r+1)*B/D)``
(see ``batch(..., rank=r, ranks=D)``).

    from tessera_data import load_tokens, batch
    toks = load_tokens("examples/data/corpus.u16")
    inputs, labels = batch(toks, step=0, B=8, S=64)   # int64 [B, S] each
"""

import numpy as np
import torch


def load_tokens(path, dtype="<u2"):
    """Returns the file's tokens (little-endian `dtype`, default uint16) as a
    1-D int64 numpy array."""
    return np.fromfile(path, dtype=dtype).astype(np.int64)


def sample_starts(step, B, S, T, rank=0, ranks=1):
    """Start offsets of this rank's samples of global step ``step``."""
    if T < S + 2:
        raise ValueError(f"data has {T} tokens; need at least S+2 = {S + 2}")
    if B % ranks:
        raise ValueError(f"global batch {B} not divisible by {ranks} ranks")
    lo, hi = rank * B // ranks, (rank + 1) * B // ranks
    return [((step * B + j) * S) % (T - S - 1) for j in range(lo, hi)]


def batch(tokens, step, B, S, rank=0, ranks=1):
    """(inputs, labels): int64 torch tensors [B/ranks, S] for ``step``."""
    tokens = np.asarray(tokens)
    starts = sample_starts(step, B, S, tokens.size, rank, ranks)
    inp = np.stack([tokens[a:a + S] for a in starts]).astype(np.int64)
    lab = np.stack([tokens[a + 1:a + S + 1] for a in starts]).astype(np.int64)
    return torch.from_numpy(inp), torch.from_numpy(lab)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="print a batch's start offsets")
    ap.add_argument("data")
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("-B", type=int, default=8)
    ap.add_argument("-S", type=int, default=64)
    a = ap.parse_args()
    toks = load_tokens(a.data)
    print(f"T={toks.size}", sample_starts(a.step, a.B, a.S, toks.size))

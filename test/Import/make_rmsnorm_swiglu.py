#!/usr/bin/python3
"""A tiny LLaMA-style LM (RMSNorm + SwiGLU MLPs, no attention) for the
rms_norm / silu raising tests, exported by the TorchScript exporter.

    make_rmsnorm_swiglu.py OUT.onnx [--tokens OUT.u16]
        [--losses OUT.json --steps K --lr X]

The module: token embedding [V, D], then L blocks h = h + down(silu(gate(n))
* up(n)) with n = RMSNorm(h) (HF LlamaRMSNorm and LlamaMLP, bias-free
Linears), a final RMSNorm and an LM head. RMSNorm weights are 1 + 0.1 * N(0,
1) so that they matter. torch.onnx.export (torch 1.13, opset 17) writes
RMSNorm as Pow 2 -> ReduceMean(-1) -> Add eps -> Sqrt -> Div(1, .) -> Mul(x,
.) -> Mul(w, .) and SiLU as Mul(x, Sigmoid(x)); input `input_ids` int64 [B,
S], output `logits` [B, S, V].

--tokens writes a deterministic token file (little-endian uint16 in [0, V)).
--losses trains the same module (same initial weights) with torch.optim.SGD
(momentum 0, weight decay 0) on the batches of DESIGN.md's data convention
(test/e2e/tessera_data.py) for K steps and writes {"losses": [...]}, the
mean cross-entropy of each step before its update (test/e2e/compare.py
reads it).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import tessera_data  # noqa: E402

V, D, HIDDEN, LAYERS, B, S = 32, 16, 24, 2, 4, 8
EPS = 1e-6


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm (Zhang & Sennrich 2019)."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.variance_epsilon = EPS

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * x.to(dtype)


class SwiGLU(nn.Module):
    """transformers' LlamaMLP: down(silu(gate(x)) * up(x)) (Shazeer 2020)."""

    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.norms = nn.ModuleList(RMSNorm(D) for _ in range(LAYERS))
        self.mlps = nn.ModuleList(SwiGLU(D, HIDDEN) for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for norm, mlp in zip(self.norms, self.mlps):
            h = h + mlp(norm(h))
        return self.lm_head(self.norm(h))


def build():
    torch.manual_seed(0)
    return TinyLM()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("onnx")
    ap.add_argument("--tokens")
    ap.add_argument("--losses")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()
    torch.set_num_threads(1)

    model = build().eval()
    ids = torch.zeros(B, S, dtype=torch.int64)
    torch.onnx.export(model, (ids,), args.onnx, export_params=True,
                      opset_version=17, do_constant_folding=True,
                      input_names=["input_ids"], output_names=["logits"])

    if args.tokens:
        n = 400
        toks = np.array([(7 * i * i + 3 * i + i // 5) % V for i in range(n)],
                        dtype="<u2")
        toks.tofile(args.tokens)
    if args.losses:
        if not args.tokens:
            ap.error("--losses needs --tokens")
        tokens = tessera_data.load_tokens(args.tokens)
        model = build().train()
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        losses = []
        for step in range(args.steps):
            inputs, labels = tessera_data.batch(tokens, step, B, S)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(inputs).reshape(-1, V),
                                   labels.reshape(-1))
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
        with open(args.losses, "w") as f:
            json.dump({"losses": losses}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

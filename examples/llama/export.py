#!/usr/bin/env python3
"""Exports the LLaMA demo model with PyTorch's dynamo exporter.

transformers' own `LlamaForCausalLM` (RMSNorm, rotary, SwiGLU, grouped-query
attention, untied head), random init (HF's, seed 0): vocabulary = the
tokenizer's (tokenizer.json, 2048), hidden 256, 4 layers, 8 query heads /
4 KV heads of head_dim 32, intermediate 640, max_position_embeddings = S,
no dropout, eager attention. forward(input_ids) returns the logits only.
Static input `input_ids` int64 [B, S] (default 8 x 128), output `logits`
float32 [B, S, V].

    export.py [--batch 8] [--seq 128] [-o examples/llama/llama.onnx]

`torch.onnx.export(..., dynamo=True)` with its defaults (opset, optimize)
and the weights in external data (llama.onnx.data). Checks with
onnxruntime that the file's logits equal PyTorch's within 1e-5 relative
(max |diff| / max |logit|) on a batch of corpus.u16, and prints the
parameter count, the sizes and sha256s. Runs in the export-dynamo venv
(scripts/python-env.sh export-dynamo).
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# make_fixtures.strip_paths: the exporter's recorded stack traces made
# relative to the checkout, as for the HF test fixtures.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "test", "e2e", "hf"))
from make_fixtures import strip_paths  # noqa: E402
CONFIG = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, head_dim=32, intermediate_size=640,
              attention_dropout=0.0, tie_word_embeddings=False)
SEED = 0
RTOL = 1e-5


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build(vocab, seq):
    import torch
    import transformers as T

    class LlamaLogits(T.LlamaForCausalLM):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids,
                                   use_cache=False).logits

    cfg = T.LlamaConfig(vocab_size=vocab, max_position_embeddings=seq,
                        **CONFIG)
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    return LlamaLogits(cfg).float().eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("-o", "--output", default=os.path.join(HERE, "llama.onnx"))
    args = ap.parse_args()
    import onnxruntime as ort
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    with open(os.path.join(HERE, "tokenizer.json")) as f:
        vocab = len(json.load(f)["model"]["vocab"])
    model = build(vocab, args.seq)
    tokens = np.fromfile(os.path.join(HERE, "corpus.u16"), "<u2")
    B, S = args.batch, args.seq
    ids = np.stack([tokens[j * S:(j + 1) * S] for j in range(B)]).astype(
        np.int64)
    x = torch.from_numpy(ids)
    for suffix in ("", ".data"):
        if os.path.exists(args.output + suffix):
            os.remove(args.output + suffix)
    torch.onnx.export(model, (x,), args.output, dynamo=True,
                      input_names=["input_ids"], output_names=["logits"],
                      external_data=True)
    strip_paths(args.output)
    with torch.no_grad():
        want = model(x).numpy()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    got = ort.InferenceSession(args.output, so, providers=[
        "CPUExecutionProvider"]).run(["logits"], {"input_ids": ids})[0]
    diff = float(np.abs(got.astype(np.float64) - want).max()
                 / np.abs(want).max())
    params = sum(p.numel() for p in model.parameters())
    print(f"LlamaForCausalLM vocab {vocab}, {CONFIG}: "
          f"{len(list(model.parameters()))} parameters, {params} elements")
    print(f"onnxruntime vs PyTorch logits [{B}, {S}, {vocab}]: "
          f"max rel diff {diff:.3g} (tolerance {RTOL})")
    for path in (args.output, args.output + ".data"):
        print(f"{path}: {os.path.getsize(path)} bytes, sha256 "
              f"{sha256(path)}")
    if got.shape != (B, S, vocab) or not diff <= RTOL:
        sys.exit("export.py: FAIL: onnxruntime's logits differ from "
                 "PyTorch's")


if __name__ == "__main__":
    main()

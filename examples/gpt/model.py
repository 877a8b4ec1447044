"""GPT-style causal language model built only from stock ``torch.nn`` modules.

The model is deliberately plain so that ``torch.onnx.export`` turns it into
primitive ONNX ops that Tessera's importer understands:

    tokens int64 [B, S]
      -> tok_emb (nn.Embedding, vocab x d_model)          Gather
      +  pos_emb (nn.Parameter, [S, d_model], learned)     Add
      -> encoder (nn.TransformerEncoder of
                  nn.TransformerEncoderLayer, batch_first,
                  dropout=0, optional causal float mask)
      -> ln_f    (nn.LayerNorm, only when norm_first=True)
      -> head    (nn.Linear d_model -> vocab, with bias)
    logits float32 [B, S, V]

``CONFIGS`` holds the named configurations used by the example, the e2e tests
and the benchmarks; ``build_model(cfg)`` seeds torch with ``cfg['seed']`` so
the same config always yields bit-identical initial weights (these are the
weights that end up as ONNX initializers, and that the PyTorch reference run
starts from).
"""

import copy

import torch
from torch import nn

_COMMON_SMALL = dict(vocab=256, d_model=32, nhead=4, d_ff=64, layers=2,
                     seq=16, batch=4, seed=0)

#: Named model configurations. ``opset`` and ``out`` (path relative to the
#: repository root) are used by export.py; everything else by build_model.
CONFIGS = {
    # Main example model: byte-level, pre-norm, GELU, causal.
    "example": dict(vocab=256, d_model=64, nhead=4, d_ff=256, layers=2,
                    seq=64, batch=8, activation="gelu", norm_first=True,
                    causal=True, seed=0, opset=17,
                    out="examples/gpt/gpt.onnx"),
    # Small e2e test models.
    "prenorm_gelu_causal": dict(_COMMON_SMALL, activation="gelu",
                                norm_first=True, causal=True, opset=17,
                                out="test/e2e/models/prenorm_gelu_causal_op17.onnx"),
    "postnorm_relu": dict(_COMMON_SMALL, activation="relu",
                          norm_first=False, causal=False, opset=13,
                          out="test/e2e/models/postnorm_relu_op13.onnx"),
    "postnorm_gelu_causal_op14": dict(_COMMON_SMALL, activation="gelu",
                                      norm_first=False, causal=True, opset=14,
                                      out="test/e2e/models/postnorm_gelu_causal_op14.onnx"),
    # Pipeline-parallel e2e model: 4 layers so that pp4 has a layer per
    # stage, batch 16 so that dp2 x 8 micro-batches divides it.
    "pipeline": dict(vocab=256, d_model=32, nhead=4, d_ff=64, layers=4, seq=8,
                     batch=16, activation="gelu", norm_first=True,
                     causal=True, seed=0, opset=17,
                     out="test/e2e/models/pipeline_op17.onnx"),
    # Sequence-parallel and vocab-parallel e2e model (issue 5): a causal
    # model with S = 256 (the minimum), 8 heads (divisible by
    # tp2 x sp2 and sp4) and a vocabulary of 512 (divisible by tp4).
    "sp_long": dict(vocab=512, d_model=64, nhead=8, d_ff=128, layers=2,
                    seq=256, batch=4, activation="gelu", norm_first=True,
                    causal=True, seed=0, opset=17,
                    out="test/e2e/models/sp_long_op17.onnx"),
    # bench/pipeline_bubble.sh: 8 equal layers, heavy enough per micro-batch
    # (about 13 MFLOP forward per layer at M = 16) that compute, not MPI
    # latency, sets the timeline. Exported by the benchmark, not committed.
    "bench_pipeline": dict(vocab=256, d_model=128, nhead=4, d_ff=512,
                           layers=8, seq=32, batch=16, activation="gelu",
                           norm_first=True, causal=True, seed=0, opset=17,
                           out="bench/models/pipeline_bench_op17.onnx"),
    # bench/memory_table.sh: a larger model, 24 layers of d = 512 (76 M
    # parameters, 1.2 GB of AdamW model state per rank without ZeRO), so
    # that model state dominates the peak. Exported by the benchmark.
    "bench_memory_large": dict(vocab=256, d_model=512, nhead=8, d_ff=2048,
                               layers=24, seq=32, batch=8, activation="gelu",
                               norm_first=True, causal=True, seed=0, opset=17,
                               out="bench/models/memory_large_op17.onnx"),
}


def get_config(name_or_cfg):
    """Returns a copy of a named config (or of a dict passed in)."""
    if isinstance(name_or_cfg, dict):
        return copy.deepcopy(name_or_cfg)
    if name_or_cfg not in CONFIGS:
        raise KeyError(f"unknown config {name_or_cfg!r}; known: "
                       f"{', '.join(sorted(CONFIGS))}")
    return copy.deepcopy(CONFIGS[name_or_cfg])


class GPT(nn.Module):
    """Decoder-only LM: embeddings + nn.TransformerEncoder + LM head."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = dict(cfg)
        V, D, S = cfg["vocab"], cfg["d_model"], cfg["seq"]
        self.tok_emb = nn.Embedding(V, D)
        # A plain parameter [S, D] exports as a single broadcasting Add with
        # an initializer named "pos_emb" (an nn.Embedding over arange(S)
        # would be constant-folded into an anonymous constant).
        self.pos_emb = nn.Parameter(torch.randn(S, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d_model=D, nhead=cfg["nhead"], dim_feedforward=cfg["d_ff"],
            dropout=0.0, activation=cfg["activation"],
            norm_first=cfg["norm_first"], batch_first=True)
        # enable_nested_tensor=False: never take the nested-tensor fast path.
        self.encoder = nn.TransformerEncoder(layer, cfg["layers"],
                                             enable_nested_tensor=False)
        # nn.TransformerEncoder deep-copies `layer`, so every layer would start
        # with identical weights. Re-draw them per layer (in order, from the
        # seeded RNG) so that a mix-up of layers cannot go unnoticed.
        for lyr in self.encoder.layers:
            lyr.linear1.reset_parameters()
            lyr.linear2.reset_parameters()
            lyr.self_attn.out_proj.reset_parameters()
            lyr.self_attn._reset_parameters()  # in_proj; zeroes both biases
        self.ln_f = nn.LayerNorm(D) if cfg["norm_first"] else None
        self.head = nn.Linear(D, V, bias=True)
        if cfg["causal"]:
            # Float mask: 0 on/below the diagonal, -inf above. Not part of the
            # state_dict; the exporter embeds it as a constant.
            mask = nn.Transformer.generate_square_subsequent_mask(S)
            self.register_buffer("causal_mask", mask, persistent=False)
        else:
            self.causal_mask = None

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb
        x = self.encoder(x, mask=self.causal_mask)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x)


def build_model(cfg):
    """Builds the model of ``cfg`` (a dict or a CONFIGS name) deterministically."""
    cfg = get_config(cfg)
    torch.manual_seed(cfg["seed"])
    return GPT(cfg)

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

The ``handwritten`` config (``attention="handwritten"``) instead builds
``HandwrittenGPT``: the same embeddings, pre-norm blocks, ``ln_f`` and head,
but each block's causal self-attention is written out in torch ops, GPT-2
style (fused ``c_attn``, ``masked_fill`` with a registered ``tril`` buffer),
so that the exporter emits the Where form of the mask.

The ``gqa`` config (``attention="gqa"``) builds ``HandwrittenGPT`` with
``GroupedQueryAttention`` blocks, written as Hugging Face's LLaMA/Qwen2
eager attention (transformers 4.49) is: separate q/k/v projections, rotary
position embeddings from precomputed tables, ``repeat_kv`` of ``nkv`` K/V
heads to ``nhead`` query heads, ``* scaling``, an additive causal mask
filled with ``torch.finfo(float32).min``, and a softmax in float32 cast
back to the query's dtype (Ainslie et al. 2023, "GQA").

``CONFIGS`` holds the named configurations used by the example, the e2e tests
and the benchmarks; ``build_model(cfg)`` seeds torch with ``cfg['seed']`` so
the same config always yields bit-identical initial weights (these are the
weights that end up as ONNX initializers, and that the PyTorch reference run
starts from).
"""

import copy
import math

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
    # Hand-written GPT-2-style causal self-attention (issue 5): the same
    # pre-norm GELU model, but each block is CausalSelfAttention + MLP
    # written out in torch ops instead of nn.TransformerEncoderLayer, so the
    # exporter emits the masked_fill (Where) form of the causal mask and the
    # scale applied to the scores.
    "handwritten": dict(_COMMON_SMALL, activation="gelu", norm_first=True,
                        causal=True, attention="handwritten", opset=17,
                        out="test/e2e/models/handwritten_op17.onnx"),
    # Grouped-query attention, LLaMA style: 4 query heads over 2 K/V heads
    # (n_rep 2, head dim 8), so tp2 splits whole K/V heads.
    "gqa": dict(_COMMON_SMALL, nkv=2, activation="gelu", norm_first=True,
                causal=True, attention="gqa", opset=17,
                out="test/e2e/models/gqa_op17.onnx"),
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


class CausalSelfAttention(nn.Module):
    """GPT-2-style causal self-attention written out in torch ops.

    One fused ``c_attn`` Linear D -> 3D, q/k/v split, [B, S, H, Dh] viewed as
    [B, H, S, Dh], scores scaled by 1/sqrt(Dh), ``masked_fill`` with a
    registered lower-triangular buffer, softmax, ``att @ v``, heads merged
    back and the ``c_proj`` output projection.
    """

    def __init__(self, d_model, nhead, seq):
        super().__init__()
        assert d_model % nhead == 0
        self.nhead = nhead
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        # Not in the state_dict; the exporter embeds it as a constant.
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)),
                             persistent=False)

    def forward(self, x):
        B, S, D = x.shape
        H = self.nhead
        q, k, v = self.c_attn(x).split(D, dim=2)
        q = q.view(B, S, H, D // H).transpose(1, 2)
        k = k.view(B, S, H, D // H).transpose(1, 2)
        v = v.view(B, S, H, D // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:S, :S] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, S, D)
        return self.c_proj(y)


class GroupedQueryAttention(nn.Module):
    """Grouped-query causal self-attention as Hugging Face's LlamaAttention
    (eager, transformers 4.49) computes it (Ainslie et al. 2023, "GQA").

    q/k/v projections (with biases, as Qwen2) to ``nhead`` query and
    ``nkv`` key/value heads of size Dh; rotary position embeddings (Su et
    al. 2021) applied with ``rotate_half`` from cos/sin tables precomputed
    for the fixed sequence length (buffers, so the exporter embeds them as
    constants); ``repeat_kv`` (unsqueeze, expand, reshape) so query head h
    reads K/V head h // (nhead / nkv); scores ``* Dh**-0.5`` plus an
    additive causal mask filled with ``torch.finfo(float32).min``; softmax
    in float32 cast back to the query's dtype; ``o_proj`` without bias.
    """

    def __init__(self, d_model, nhead, nkv, seq, theta=10000.0):
        super().__init__()
        assert d_model % nhead == 0 and nhead % nkv == 0
        self.nhead, self.nkv = nhead, nkv
        self.dh = d_model // nhead
        self.scaling = self.dh ** -0.5
        self.q_proj = nn.Linear(d_model, nhead * self.dh)
        self.k_proj = nn.Linear(d_model, nkv * self.dh)
        self.v_proj = nn.Linear(d_model, nkv * self.dh)
        self.o_proj = nn.Linear(nhead * self.dh, d_model, bias=False)
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.dh, 2).float()
                                    / self.dh))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)  # [S, Dh]
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mask = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)
        self.register_buffer("mask", mask[None, None], persistent=False)

    @staticmethod
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def repeat_kv(self, x):
        B, Hkv, S, Dh = x.shape
        n_rep = self.nhead // Hkv
        x = x[:, :, None, :, :].expand(B, Hkv, n_rep, S, Dh)
        return x.reshape(B, Hkv * n_rep, S, Dh)

    def forward(self, x):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.nhead, self.dh).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.nkv, self.dh).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nkv, self.dh).transpose(1, 2)
        cos, sin = self.cos[:S], self.sin[:S]
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        att = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        att = att + self.mask[:, :, :S, :S]
        att = torch.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, S, -1)
        return self.o_proj(y)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, cfg):
        super().__init__()
        D = cfg["d_model"]
        self.ln_1 = nn.LayerNorm(D)
        if cfg.get("attention") == "gqa":
            self.attn = GroupedQueryAttention(D, cfg["nhead"], cfg["nkv"],
                                              cfg["seq"])
        else:
            self.attn = CausalSelfAttention(D, cfg["nhead"], cfg["seq"])
        self.ln_2 = nn.LayerNorm(D)
        self.c_fc = nn.Linear(D, cfg["d_ff"])
        self.act = nn.GELU() if cfg["activation"] == "gelu" else nn.ReLU()
        self.mlp_proj = nn.Linear(cfg["d_ff"], D)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(self.act(self.c_fc(self.ln_2(x))))


class HandwrittenGPT(nn.Module):
    """Decoder-only LM like GPT, with hand-written blocks (config key
    ``attention="handwritten"`` or ``"gqa"``; always pre-norm and causal)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = dict(cfg)
        V, D, S = cfg["vocab"], cfg["d_model"], cfg["seq"]
        self.tok_emb = nn.Embedding(V, D)
        self.pos_emb = nn.Parameter(torch.randn(S, D) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["layers"]))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=True)

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


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
    if cfg.get("attention") in ("handwritten", "gqa"):
        return HandwrittenGPT(cfg)
    return GPT(cfg)

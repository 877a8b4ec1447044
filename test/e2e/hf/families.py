"""The Hugging Face model families of Tessera's HF fixtures and their configs.

Small random-init models built from transformers configs (nothing is
downloaded). Every family uses the same sizes so that every plan the tests
need divides: vocabulary 256 (the byte-level corpus examples/data/corpus.u16
has ids < 256), hidden 64, 2 layers, intermediate 128, 8 query heads of
head_dim 8 (4 KV heads where the family has grouped-query attention),
max_position_embeddings = S = 16, all dropouts 0, eager attention.

The same code runs under transformers 4.49 (the TorchScript exporter's env,
torch 1.13) and transformers 5.x (the dynamo exporter's env): `build(family)`
returns a module whose forward(input_ids int64 [B, S]) returns the logits
float32 [B, S, V] only (use_cache=False). The module is a subclass of the HF
class, so its parameter names are HF's own (``transformer.h.0.attn.c_attn.
weight``, ``model.layers.0.self_attn.q_proj.weight``, ...).

    import families
    model = families.build("llama")      # seeded HF initialisation

Importing this module needs neither torch nor transformers (the test venv
reads FAMILIES and the sizes).
"""

VOCAB = 256
HIDDEN = 64
LAYERS = 2
INTERMEDIATE = 128
HEADS = 8
KV_HEADS = 4
HEAD_DIM = 8
BATCH = 4
SEQ = 16

# family -> (HF class name, config class name, config kwargs)
FAMILIES = {
    # Tied wte / lm_head (HF default), learned positions, GELU (tanh), fused
    # QKV as Conv1D ([in, out] weights).
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=LAYERS,
        n_head=HEADS, n_inner=INTERMEDIATE, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0)),
    # Partial rotary (rotary_pct 0.25: 2 of 8 head dims), parallel residual,
    # fused QKV with bias, untied embed_out.
    "gptneox": ("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
        max_position_embeddings=SEQ, rotary_pct=0.25, attention_dropout=0.0,
        hidden_dropout=0.0, classifier_dropout=0.0)),
    # RMSNorm, rotary, SwiGLU, grouped-query attention, untied lm_head.
    "llama": ("LlamaForCausalLM", "LlamaConfig", dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        max_position_embeddings=SEQ, attention_dropout=0.0)),
    # Like LLaMA plus q/k/v biases. sliding_window=None: transformers 4.49
    # builds the sliding-window mask with aten::bitwise_or, which the
    # TorchScript exporter cannot export; with use_sliding_window=False the
    # window is not used anyway (and 4096 > S), so the math is unchanged.
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, max_position_embeddings=SEQ,
        use_sliding_window=False, sliding_window=None,
        tie_word_embeddings=False, attention_dropout=0.0)),
    # Post-LN encoder with the MLM head (dense + GELU + LayerNorm + decoder
    # tied to the word embeddings, separate decoder bias); one token type.
    "bert": ("BertForMaskedLM", "BertConfig", dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
        max_position_embeddings=SEQ, type_vocab_size=1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    # Tied embeddings scaled by sqrt(hidden), RMSNorm with (1 + w), GeGLU
    # (gelu tanh), GQA.
    "gemma": ("GemmaForCausalLM", "GemmaConfig", dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        max_position_embeddings=SEQ, hidden_act="gelu_pytorch_tanh",
        attention_dropout=0.0)),
}

# Parameters that transformers 5.x renamed: {family: {4.49 name: 5.x name}}.
# The init file uses the name of the env that made it; load_init maps.
RENAMED = {"gptneox": {"embed_out.weight": "lm_head.weight"}}

# Seed of each family's initialisation (HF's own _init_weights).
SEED = 1234


def config(family):
    """The transformers config of `family`, eager attention."""
    import transformers as T
    _, cfg_name, kwargs = FAMILIES[family]
    cfg = getattr(T, cfg_name)(**kwargs)
    cfg._attn_implementation = "eager"
    return cfg


def model_class(family):
    """A subclass of the family's HF class whose forward returns logits."""
    import transformers as T
    base = getattr(T, FAMILIES[family][0])
    takes_cache = family != "bert"

    class LogitsOnly(base):
        def forward(self, input_ids):  # noqa: D401
            kwargs = {"use_cache": False} if takes_cache else {}
            return super().forward(input_ids=input_ids, **kwargs).logits

    LogitsOnly.__name__ = base.__name__ + "LogitsOnly"
    return LogitsOnly


# Standard deviation given to parameters that HF initialises to zero.
ZERO_INIT_STD = 0.02


def build(family, seed=SEED):
    """The family's model with HF's seeded initialisation, fp32, eval mode,
    except that every parameter HF initialises to all zeros (the biases)
    gets N(0, ZERO_INIT_STD) values, as a trained checkpoint has: the dynamo
    exporter's optimizer deletes an all-zero Gemm bias
    (RemoveOptionalBiasFromGemm), so a fresh GPT-2 would reach the file
    without its 8 Conv1D biases, and no importer could train them. Norm
    weights keep HF's ones, so the exporters' merging of equal initializers
    (Identity nodes, shared initializers) is still exercised."""
    import torch
    torch.manual_seed(seed)
    model = model_class(family)(config(family))
    model.config._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if not bool(p.any()):
                p.copy_(torch.randn(p.shape, generator=gen) * ZERO_INIT_STD)
    return model.float().eval()


def shapes(model):
    """(names, shapes, elements) of named_parameters (tied weights once)."""
    names, dims = [], []
    for name, p in model.named_parameters():
        names.append(name)
        dims.append(list(p.shape))
    elements = sum(p.numel() for p in model.parameters())
    return names, dims, elements

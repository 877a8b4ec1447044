"""Common op categories for bench/op_profile.py: Tessera kernel kinds and
PyTorch (aten) op names mapped to the same few classes.

    category(kind)            Tessera's tsrt kernel / op name -> category
    torch_category(name)      an aten op name ("aten::addmm") -> category
    torch_profile(prof, steps) torch.profiler events -> per-category
                               {"seconds", "calls", "bytes"} per step

Categories (CATEGORIES, in table order): GEMM, attention, norm
(LayerNorm/RMSNorm), activation (GELU, ReLU, SiLU, tanh), softmax/CE
(softmax, log-softmax, cross-entropy, NLL), optimizer, elementwise
(arithmetic, reductions, masks, dropout), embedding (lookup and its
gradient), layout/copies (transpose, permute, reshape, contiguous, cat,
slice, broadcast/expand), collectives, other (everything else: the
executor's / framework's own work, allocation).

A fused Tessera kernel is classed by the first class its name matches in
TESSERA_RULES' order, so e.g. a "matmul_bias_gelu" kernel counts as GEMM
(its epilogue is part of the GEMM call) and "add_layer_norm" as norm.
"""

CATEGORIES = ["GEMM", "attention", "norm", "activation", "softmax/CE",
              "optimizer", "elementwise", "embedding", "layout/copies",
              "collectives", "other"]

# (substring of a Tessera kernel name, category), first match wins.
TESSERA_RULES = [
    ("matmul", "GEMM"), ("linear", "GEMM"), ("gemm", "GEMM"),
    ("attention", "attention"),
    ("norm", "norm"),
    ("adamw", "optimizer"), ("sgd", "optimizer"), ("optimizer", "optimizer"),
    ("cross_entropy", "softmax/CE"), ("softmax", "softmax/CE"),
    ("gelu", "activation"), ("relu", "activation"), ("silu", "activation"),
    ("sigmoid", "activation"), ("tanh", "activation"), ("erf", "activation"),
    ("gather", "embedding"),
    ("transpose", "layout/copies"), ("reshape", "layout/copies"),
    ("slice", "layout/copies"), ("concat", "layout/copies"),
    ("broadcast", "layout/copies"),
    ("all_reduce", "collectives"), ("all_gather", "collectives"),
    ("reduce_scatter", "collectives"), ("all_to_all", "collectives"),
    ("all_slice", "collectives"), ("send", "collectives"),
    ("recv", "collectives"), ("wait", "collectives"),
    ("add", "elementwise"), ("sub", "elementwise"), ("mul", "elementwise"),
    ("div", "elementwise"), ("pow", "elementwise"), ("max", "elementwise"),
    ("neg", "elementwise"), ("exp", "elementwise"), ("log", "elementwise"),
    ("sqrt", "elementwise"), ("equal", "elementwise"),
    ("select", "elementwise"), ("convert", "elementwise"),
    ("reduce", "elementwise"), ("sum_squares", "elementwise"),
    ("dropout", "elementwise"), ("fused", "elementwise"),
]


def category(kind):
    """The category of a Tessera kernel kind ('other' when none matches)."""
    for sub, cat in TESSERA_RULES:
        if sub in kind:
            return cat
    return "other"


TORCH_OPS = {
    "GEMM": {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm",
             "_addmm_activation", "einsum", "dot", "mv", "addmv"},
    "attention": {"scaled_dot_product_attention",
                  "_scaled_dot_product_attention_math",
                  "_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_flash_attention_for_cpu_backward",
                  "_native_multi_head_attention"},
    "norm": {"layer_norm", "native_layer_norm", "native_layer_norm_backward",
             "rms_norm", "_fused_rms_norm", "_fused_rms_norm_backward"},
    "activation": {"gelu", "gelu_backward", "relu", "relu_", "threshold",
                   "threshold_backward", "silu", "silu_backward", "tanh",
                   "tanh_backward", "sigmoid", "sigmoid_backward", "erf"},
    "softmax/CE": {"softmax", "_softmax", "_softmax_backward_data",
                   "log_softmax", "_log_softmax",
                   "_log_softmax_backward_data", "cross_entropy_loss",
                   "nll_loss", "nll_loss_forward", "nll_loss_backward",
                   "nll_loss_nd", "nll_loss2d_forward",
                   "nll_loss2d_backward"},
    "embedding": {"embedding", "embedding_backward",
                  "embedding_dense_backward", "index_select"},
    "layout/copies": {"transpose", "t", "permute", "view", "reshape",
                      "_reshape_alias", "contiguous", "clone", "copy_",
                      "cat", "split", "split_with_sizes", "chunk", "slice",
                      "select", "expand", "unsqueeze", "squeeze",
                      "as_strided", "_unsafe_view", "narrow", "stack",
                      "unbind", "flatten", "unflatten", "view_as",
                      "expand_as", "_to_copy", "to", "alias", "detach",
                      "numpy_T", "repeat", "unfold", "index", "new_zeros"},
    "elementwise": {"add", "add_", "sub", "sub_", "rsub", "mul", "mul_",
                    "div", "div_", "pow", "neg", "exp", "log", "sqrt",
                    "rsqrt", "masked_fill", "masked_fill_", "where",
                    "sum", "mean", "dropout", "native_dropout", "fill_",
                    "zero_", "ones_like", "zeros_like", "full", "lt", "gt",
                    "eq", "ne", "le", "ge", "maximum", "minimum", "clamp",
                    "addcmul_", "addcdiv_", "lerp_", "sqrt_", "abs",
                    "reciprocal", "_foreach_add", "bitwise_not", "tril",
                    "triu", "arange", "max", "amax", "scatter_add_",
                    "index_add_", "masked_scatter"},
}
_TORCH_INDEX = {op: cat for cat, ops in TORCH_OPS.items() for op in ops}

# Views: they move no data (bytes 0), though they are calls.
TORCH_VIEWS = {"view", "reshape", "_reshape_alias", "t", "transpose",
               "permute", "expand", "unsqueeze", "squeeze", "as_strided",
               "_unsafe_view", "narrow", "slice", "select", "split",
               "split_with_sizes", "chunk", "unbind", "alias", "detach",
               "view_as", "expand_as", "flatten", "unflatten", "numpy_T"}

# Allocation and bookkeeping: framework work, "other".
TORCH_OTHER = {"empty", "empty_like", "empty_strided", "resize_", "zeros",
               "ones", "item", "_local_scalar_dense", "is_nonzero",
               "result_type", "lift_fresh", "scalar_tensor"}


def torch_category(name):
    """The category of a profiler event name."""
    if name.startswith("Optimizer.") or "_fused_adam" in name or \
            name.startswith("aten::_foreach_"):
        return "optimizer"
    base = name.split("::", 1)[1] if name.startswith("aten::") else None
    if base is None:
        return "other"  # autograd::engine::..., record_function scopes
    if base in TORCH_OTHER:
        return "other"
    return _TORCH_INDEX.get(base, "other")


def _elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def torch_profile(events, steps):
    """Per category {"seconds", "calls", "bytes"} per step from the profiler's
    FunctionEvents (torch.profiler.profile(record_shapes=True).events()).

    Every event belongs to its outermost aten op (the op the model or
    autograd called: aten::linear with the aten::t and aten::addmm it calls,
    aten::bmm with the per-batch aten::select + aten::mm of 1.13's CPU
    bmm), classed by that op's name; every event inside an
    `Optimizer.step` scope is optimizer. seconds: self CPU time (nested
    calls not counted twice; framework scopes, e.g. the autograd engine's,
    are "other"). calls: the outermost aten ops. bytes: their input tensors,
    4 bytes per element (the profiler records no output shapes, so
    PyTorch's bytes are a lower bound: inputs only), 0 for views."""
    def classify(e):
        top, optimizer, p = None, False, e
        while p is not None:
            if p.name.startswith("Optimizer."):
                optimizer = True
            if p.name.startswith("aten::"):
                top = p
            p = p.cpu_parent
        if top is None:
            return ("optimizer" if optimizer else "other"), None
        return ("optimizer" if optimizer else torch_category(top.name)), top

    out = {c: {"seconds": 0.0, "calls": 0.0, "bytes": 0.0}
           for c in CATEGORIES}
    for e in events:
        c, top = classify(e)
        out[c]["seconds"] += e.self_cpu_time_total * 1e-6 / steps
        if top is not e or torch_category(e.name) == "other" and \
                c != "optimizer":
            continue
        out[c]["calls"] += 1.0 / steps
        if e.name.split("::", 1)[-1] in TORCH_VIEWS:
            continue
        shapes = getattr(e, "input_shapes", None) or []
        out[c]["bytes"] += sum(4 * _elements(s) for s in shapes
                               if isinstance(s, (list, tuple))
                               and all(isinstance(d, int) for d in s)) / steps
    return out

#!/usr/bin/env python3
"""Builds the training-mode dropout fixtures of test/e2e/dropout.py (run in
the export-ts venv: torch 1.13 + transformers 4.49, scripts/python-env.sh
export-ts):

    .venv/export-ts/bin/python test/e2e/dropout_export.py

A GPT-2 from test/e2e/hf/families.py's config (vocabulary 256, hidden 64, 2
layers, 8 heads, S = 16, HF's seeded initialisation) with untied embedding
and LM head (pipelines reject tied weights), embd_pdrop = resid_pdrop = P
and attn_pdrop = 0 (attention-probability dropout would sit inside the
fused attention, which has no mask), exported by the TorchScript exporter
at opset 17 in TRAINING mode (torch.onnx.TrainingMode.TRAINING), so every
nn.Dropout becomes ONNX Dropout(x, ratio, training_mode = true):

    test/e2e/models/gpt2_dropout_p10.ts17.onnx   P = 0.1
    test/e2e/models/gpt2_dropout_p0.ts17.onnx    P = 0 (training-mode
                                                  Dropout nodes of ratio 0)
    test/e2e/models/gpt2_dropout.json            the P = 0 model's 8 PyTorch
        AdamW losses (lr 3e-3, DESIGN.md's batches of
        examples/data/corpus.u16, B = 4, fp32, 1 thread, model.train()), and
        the Dropout nodes of each file (name, ratio, training_mode).

Both files hold the same initial weights (the same seeded model).
"""

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "hf"))

import families  # noqa: E402
import tessera_data  # noqa: E402

MODELS = os.path.join(HERE, "models")
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
STEPS = 8
LR = 3e-3
ADAMW = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def build(p):
    import torch
    import transformers as T
    kwargs = dict(families.FAMILIES["gpt2"][2])
    kwargs.update(resid_pdrop=p, embd_pdrop=p, attn_pdrop=0.0,
                  tie_word_embeddings=False)
    cfg = T.GPT2Config(**kwargs)
    cfg._attn_implementation = "eager"
    torch.manual_seed(families.SEED)
    model = families.model_class("gpt2")(cfg)
    gen = torch.Generator().manual_seed(families.SEED + 1)
    with torch.no_grad():
        for _, w in model.named_parameters():
            if not bool(w.any()):
                w.copy_(torch.randn(w.shape, generator=gen) *
                        families.ZERO_INIT_STD)
    return model.float()


def dropout_nodes(path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    out = []
    for n in m.graph.node:
        if n.op_type != "Dropout":
            continue
        get = (lambda k: float(consts[n.input[k]])
               if len(n.input) > k and n.input[k] in consts else None)
        out.append({"name": n.name, "ratio": get(1),
                    "training_mode": get(2)})
    return out


def train(model):
    import torch
    import torch.nn.functional as F
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, **ADAMW)
    tokens = tessera_data.load_tokens(CORPUS)
    B, S, V = families.BATCH, families.SEQ, families.VOCAB
    losses = []
    for step in range(STEPS):
        x, y = tessera_data.batch(tokens, step, B, S)
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        losses.append(float(loss.item()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def main():
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    ids = torch.zeros(families.BATCH, families.SEQ, dtype=torch.int64)
    ref = {"steps": STEPS, "lr": LR, "optimizer": "adamw", "models": {}}
    for tag, p in (("p10", 0.1), ("p0", 0.0)):
        model = build(p)
        model.train()
        path = os.path.join(MODELS, f"gpt2_dropout_{tag}.ts17.onnx")
        torch.onnx.export(model, (ids,), path, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False,
                          input_names=["input_ids"],
                          output_names=["logits"])
        nodes = dropout_nodes(path)
        print(f"{path}: {len(nodes)} Dropout nodes: {nodes}")
        ref["models"][tag] = {"ratio": p, "dropout_nodes": nodes}
    ref["models"]["p0"]["torch_losses"] = train(build(0.0))
    print("p0 torch losses:", ref["models"]["p0"]["torch_losses"])
    with open(os.path.join(MODELS, "gpt2_dropout.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

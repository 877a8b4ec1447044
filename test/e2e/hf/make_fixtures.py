#!/usr/bin/env python3
"""Builds the HF fixtures: ONNX exports of families.py's models by both
PyTorch exporters, and PyTorch reference trajectories. regen.sh runs the
stages in the right venvs (scripts/python-env.sh):

    make_fixtures.py init   --work DIR               (export-dynamo venv)
        Creates each family's model once (families.build: HF's seeded
        initialisation) and saves its parameters (named_parameters, so tied
        weights once) to DIR/<family>.init.safetensors, with a random
        [B, S] batch and the logits of this model on it
        (DIR/<family>.init.npz).

    make_fixtures.py export --exporter ts14|ts17|dynamo --work DIR
        (ts*: export-ts venv, torch 1.13 + transformers 4.49;
         dynamo: export-dynamo venv)
        Builds each model in this env, loads DIR/<family>.init.safetensors
        into it (every parameter must load, bit for bit), checks that its
        logits on the init batch equal the init env's within 1e-5 relative
        (same math under both transformers versions), exports it in eval
        mode to models/<family>.<exporter>.onnx (dynamo: + .onnx.data), and
        writes refs/<family>.<exporter>.json: 8 steps of PyTorch training of
        that module (SGD lr 0.1 and AdamW lr 3e-3, DESIGN.md's batches of
        examples/data/corpus.u16, B=4, S=16, fp32, 1 thread, deterministic
        algorithms, model.train() with dropout 0), the loss of each step
        computed before its update. Saves the torch logits of the check
        batches to DIR/<family>.<exporter>.npz for `check`.

    make_fixtures.py check --work DIR                 (test venv)
        Runs every export with onnxruntime: its logits on the random batch
        and on step 0's batch must equal PyTorch's within 1e-5 relative
        (max |diff| / max |torch|); records, in the reference JSON, the
        mean cross-entropy of the step-0 logits computed by onnxruntime.

    make_fixtures.py describe [--work DIR]            (test venv)
        Prints the README tables: parameters, initializers and op
        histograms per family and exporter. With --work (the init files of
        a `regen.sh` run with KEEP_WORK=DIR): per initializer, the PyTorch
        parameters whose values it holds (or their transpose), or
        "constant"; the Identity nodes; the parameters no initializer
        holds.

    make_fixtures.py sensitivity --work DIR [--sgd-lr X] [--adamw-lr Y]
                                                    (export-ts venv)
        The README's conditioning table: how far PyTorch's own final
        weights move when the initial weights change by 1e-7 relative
        (default rates: the references', SGD 0.1 and AdamW 3e-3).

Every stage takes --family F (repeatable; default all). Any mismatch exits 1
with a message naming the family and the numbers.
"""

import argparse
import collections
import hashlib
import json
import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

MODELS = os.path.join(HERE, "models")
REFS = os.path.join(HERE, "refs")
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
EXPORTERS = ("ts14", "ts17", "dynamo")
STEPS = 8
LR = {"sgd": 0.1, "adamw": 3e-3}  # test/e2e/e2e.py's rates
ADAMW = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
RTOL = 1e-5
SEED_BATCH = 99
# The dynamo exporter's default. Its onnxscript optimizer treats initializers
# as constants: it deletes all-zero Gemm biases (GPT-2's Conv1D biases),
# shares equal initializers and folds constant-index lookups (README.md).
# False keeps every parameter as an initializer under its own name.
DYNAMO_OPTIMIZE = True


def fail(msg):
    print(f"make_fixtures: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def rel_diff(a, b):
    """max |a - b| / max |b|."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def rel(path):
    return os.path.relpath(path, ROOT)


def onnx_path(family, exporter):
    return os.path.join(MODELS, f"{family}.{exporter}.onnx")


def ref_path(family, exporter):
    return os.path.join(REFS, f"{family}.{exporter}.json")


def random_batch(B, S, V):
    rng = np.random.default_rng(SEED_BATCH)
    return rng.integers(0, V, size=(B, S), dtype=np.int64)


def step_batch(step, B, S):
    """DESIGN.md's batch of `step` (tessera_data's rule) as numpy int64."""
    tokens = np.fromfile(CORPUS, dtype="<u2").astype(np.int64)
    T = tokens.size
    starts = [((step * B + j) * S) % (T - S - 1) for j in range(B)]
    inp = np.stack([tokens[a:a + S] for a in starts])
    lab = np.stack([tokens[a + 1:a + S + 1] for a in starts])
    return inp, lab


def cross_entropy(logits, labels):
    """Mean natural-log cross-entropy of float logits [.., V] (float64)."""
    x = np.asarray(logits, np.float64).reshape(-1, logits.shape[-1])
    y = np.asarray(labels).reshape(-1)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return float((lse - x[np.arange(y.size), y]).mean())


# ---------------------------------------------------------------- torch --

def torch_setup():
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return torch


def versions():
    import torch
    import transformers
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "transformers": transformers.__version__,
         "numpy": np.__version__}
    for mod in ("onnx", "onnxscript", "onnx_ir", "onnxruntime",
                "safetensors"):
        try:
            v[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return v


def cmd_init(args):
    torch = torch_setup()
    import families
    from safetensors.torch import save_file
    os.makedirs(args.work, exist_ok=True)
    for fam in args.family:
        model = families.build(fam)
        params = {n: p.detach().clone().contiguous()
                  for n, p in model.named_parameters()}
        save_file(params, os.path.join(args.work, f"{fam}.init.safetensors"),
                  metadata={"family": fam, **versions()})
        ids = random_batch(families.BATCH, families.SEQ, families.VOCAB)
        with torch.no_grad():
            logits = model(torch.from_numpy(ids)).numpy()
        np.savez(os.path.join(args.work, f"{fam}.init.npz"), ids=ids,
                 logits=logits)
        print(f"init {fam}: {len(params)} parameters, "
              f"{sum(p.numel() for p in params.values())} elements")


def load_init(model, fam, work):
    """Loads DIR/<fam>.init.safetensors into `model`; every named parameter
    must come from the file (tied aliases and buffers are not in it)."""
    import torch
    from safetensors.torch import load_file
    import families
    sd = load_file(os.path.join(work, f"{fam}.init.safetensors"))
    names = [n for n, _ in model.named_parameters()]
    for old, new in families.RENAMED.get(fam, {}).items():
        for a, b in ((old, new), (new, old)):
            if a in sd and a not in names and b in names:
                sd[b] = sd.pop(a)
    if sorted(names) != sorted(sd):
        fail(f"{fam}: parameters {sorted(set(names) ^ set(sd))} differ "
             f"between this env's model and the init file")
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected:
        fail(f"{fam}: unexpected keys {unexpected}")
    for n, p in model.named_parameters():
        if not torch.equal(p.detach(), sd[n]):
            fail(f"{fam}: parameter {n} did not load")
    return {n: t.clone() for n, t in sd.items()}


def train(model, init, opt_name, B, S, V):
    """The 8 losses of PyTorch training `model` from `init`."""
    import torch
    import torch.nn.functional as F
    import tessera_data
    model.load_state_dict(init, strict=False)
    model.train()
    params = list(model.parameters())
    if opt_name == "sgd":
        opt = torch.optim.SGD(params, lr=LR["sgd"])
    else:
        opt = torch.optim.AdamW(params, lr=LR["adamw"], **ADAMW)
    tokens = tessera_data.load_tokens(CORPUS)
    losses = []
    for step in range(STEPS):
        x, y = tessera_data.batch(tokens, step, B, S)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        losses.append(float(loss.item()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.load_state_dict(init, strict=False)
    model.eval()
    return losses


def strip_paths(path):
    """The dynamo exporter records each node's Python stack trace
    (metadata_props pkg.torch.onnx.stack_trace) with absolute paths; make
    them relative to the checkout and the venv so that the file does not
    depend on where it was made. Only those strings change; the weights in
    the external data file are untouched."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    prefixes = sorted({ROOT + os.sep, sys.prefix + os.sep}, key=len,
                      reverse=True)
    for node in m.graph.node:
        for prop in node.metadata_props:
            for p in prefixes:
                prop.value = prop.value.replace(p, "")
    onnx.save(m, path)


def export(model, ids, path, exporter):
    import torch
    for suffix in ("", ".data"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    x = torch.from_numpy(ids)
    if exporter == "dynamo":
        # The exporter's defaults: its opset, optimize=True, and weights in
        # external data (PATH.data).
        torch.onnx.export(model, (x,), path, dynamo=True,
                          input_names=["input_ids"], output_names=["logits"],
                          external_data=True, optimize=DYNAMO_OPTIMIZE)
        strip_paths(path)
    else:
        opset = int(exporter[2:])
        torch.onnx.export(model, (x,), path, opset_version=opset,
                          input_names=["input_ids"], output_names=["logits"])


def cmd_export(args):
    torch = torch_setup()
    import families
    os.makedirs(MODELS, exist_ok=True)
    os.makedirs(REFS, exist_ok=True)
    B, S, V = families.BATCH, families.SEQ, families.VOCAB
    for fam in args.family:
        model = families.build(fam)
        init = load_init(model, fam, args.work)
        check = np.load(os.path.join(args.work, f"{fam}.init.npz"))
        model.eval()
        with torch.no_grad():
            logits = model(torch.from_numpy(check["ids"])).numpy()
        d = rel_diff(logits, check["logits"])
        print(f"{fam}.{args.exporter}: torch logits vs the init env's: "
              f"max rel diff {d:.3g}")
        if not d <= RTOL:
            fail(f"{fam}: this env's model computes other logits than the "
                 f"init env's (max rel diff {d:.3g} > {RTOL})")
        path = onnx_path(fam, args.exporter)
        export(model, check["ids"], path, args.exporter)
        step0, _ = step_batch(0, B, S)
        with torch.no_grad():
            logits0 = model(torch.from_numpy(step0)).numpy()
        np.savez(os.path.join(args.work, f"{fam}.{args.exporter}.npz"),
                 ids=check["ids"], logits=logits, step0_logits=logits0)
        losses = {o: train(model, init, o, B, S, V) for o in ("sgd", "adamw")}
        names, dims, elements = families.shapes(model)
        files = [path] + ([path + ".data"] if args.exporter == "dynamo"
                          else [])
        tokens = np.fromfile(CORPUS, dtype="<u2")
        ref = {
            "family": fam,
            "exporter": args.exporter,
            "onnx": rel(path),
            "files": {os.path.basename(f): {"bytes": os.path.getsize(f),
                                            "sha256": sha256(f)}
                      for f in files},
            "hf_class": families.FAMILIES[fam][0],
            "config": families.FAMILIES[fam][2],
            "losses": losses,
            "optimizers": {
                "sgd": {"class": "torch.optim.SGD", "lr": LR["sgd"]},
                "adamw": {"class": "torch.optim.AdamW", "lr": LR["adamw"],
                          "betas": list(ADAMW["betas"]), "eps": ADAMW["eps"],
                          "weight_decay": ADAMW["weight_decay"]}},
            "loss": "F.cross_entropy(logits.reshape(-1, V), "
                    "labels.reshape(-1)), mean, natural log, before each "
                    "step's update",
            "parameters": {"count": len(names), "elements": elements,
                           "names": names, "shapes": dims},
            "versions": versions(),
            "data": {"path": rel(CORPUS), "tokens": int(tokens.size),
                     "sha256": sha256(CORPUS),
                     "rule": "DESIGN.md Training-run conventions "
                             "(test/e2e/tessera_data.py)"},
            "batch": B,
            "seq": S,
            "steps": STEPS,
            "torch_settings": {"threads": 1, "deterministic": True,
                               "dtype": "float32", "mode": "train",
                               "dropout": 0.0},
        }
        with open(ref_path(fam, args.exporter), "w") as f:
            json.dump(ref, f, indent=1)
            f.write("\n")
        print(f"{fam}.{args.exporter}: {rel(path)} "
              f"({sum(os.path.getsize(f) for f in files)} bytes); "
              f"{len(names)} parameters, {elements} elements; "
              f"sgd {['%.6f' % v for v in losses['sgd']]} "
              f"adamw {['%.6f' % v for v in losses['adamw']]}")


# ---------------------------------------------------------- onnxruntime --

def ort_session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def cmd_check(args):
    import onnxruntime as ort
    ok = True
    for fam in args.family:
        for exp in args.exporter:
            path = onnx_path(fam, exp)
            saved = np.load(os.path.join(args.work, f"{fam}.{exp}.npz"))
            sess = ort_session(path)
            got = sess.run(["logits"], {"input_ids": saved["ids"]})[0]
            d = rel_diff(got, saved["logits"])
            step0, labels0 = step_batch(0, saved["ids"].shape[0],
                                        saved["ids"].shape[1])
            got0 = sess.run(["logits"], {"input_ids": step0})[0]
            d0 = rel_diff(got0, saved["step0_logits"])
            loss0 = cross_entropy(got0, labels0)
            with open(ref_path(fam, exp)) as f:
                ref = json.load(f)
            torch0 = ref["losses"]["sgd"][0]
            print(f"{fam}.{exp}: onnxruntime vs torch logits: random batch "
                  f"max rel diff {d:.3g}, step-0 batch {d0:.3g}; step-0 "
                  f"loss onnxruntime {loss0:.7f} torch {torch0:.7f}")
            if not (d <= RTOL and d0 <= RTOL):
                print(f"FAIL: {fam}.{exp}: onnxruntime logits differ from "
                      f"PyTorch's by more than {RTOL}", file=sys.stderr)
                ok = False
            if got.shape != (ref["batch"], ref["seq"],
                             ref["config"]["vocab_size"]):
                print(f"FAIL: {fam}.{exp}: logits shape {got.shape}",
                      file=sys.stderr)
                ok = False
            ref["onnxruntime"] = {
                "version": ort.__version__,
                "step0_loss": loss0,
                "logits_max_rel_diff": {"random_batch": d, "step0_batch": d0},
            }
            with open(ref_path(fam, exp), "w") as f:
                json.dump(ref, f, indent=1)
                f.write("\n")
    if not ok:
        sys.exit(1)


def describe_model(path):
    """(model, initializers, op histogram, elements) of an ONNX file."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    inits = list(m.graph.initializer)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    elems = sum(int(np.prod(t.dims)) for t in inits)
    return m, inits, ops, elems


def initializer_map(fam, exp, work):
    """Prints, per initializer of the export, which PyTorch parameters hold
    the same values (or their transpose, `^T`), or `constant`; the Identity
    nodes; and the parameters whose values no initializer holds."""
    import onnx
    from onnx import numpy_helper
    import safetensors_lite
    params, _ = safetensors_lite.read(
        os.path.join(work, f"{fam}.init.safetensors"))
    path = onnx_path(fam, exp)
    m = onnx.load(path)
    ext = {t.name for t in onnx.load(path, load_external_data=False)
           .graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    users = collections.defaultdict(set)
    for n in m.graph.node:
        for i in n.input:
            users[i].add(n.op_type)
    held = set()
    print(f"{fam}.{exp}: {len(m.graph.initializer)} initializers "
          f"({len(ext)} in external data)")
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        same = []
        for pn, pv in params.items():
            if a.shape == pv.shape and np.array_equal(a, pv):
                same.append(pn)
            elif a.ndim == 2 and a.T.shape == pv.shape and \
                    np.array_equal(a.T, pv):
                same.append(pn + "^T")
        held.update(x.removesuffix("^T") for x in same)
        what = " = ".join(same) if same else \
            f"constant {a.dtype} ({np.unique(a).size} distinct values)"
        print(f"  {t.name:48s} {str(list(a.shape)):14s} "
              f"{'external' if t.name in ext else 'inline  '} "
              f"-> {','.join(sorted(users[t.name]))}: {what}")
    for n in m.graph.node:
        if n.op_type == "Identity":
            print(f"  Identity {n.input[0]} -> {n.output[0]}")
    print(f"  parameters no initializer holds: {sorted(set(params) - held)}")


def cmd_sensitivity(args):
    """How far PyTorch's own 8-step trajectory moves when every initial
    weight is scaled by (1 + 1e-7), a rounding-sized change: the largest
    relative loss change and, per family and optimizer, the tensor with the
    largest relative L2 change of its final value (the attention key
    biases without rotary, whose true gradient is zero, left out). Where
    this exceeds the parallel checks' 1e-5, a run that only sums in another
    order cannot be expected to match the serial run's weights within it."""
    import re
    torch = torch_setup()
    import torch.nn.functional as F
    import families
    import tessera_data
    zero_grad = (r"attention\.self\.key\.bias|c_attn\.bias|"
                 r"query_key_value\.bias")
    tokens = tessera_data.load_tokens(CORPUS)
    B, S, V = families.BATCH, families.SEQ, families.VOCAB

    def trajectory(fam, opt_name, scale):
        model = families.build(fam)
        load_init(model, fam, args.work)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
        model.train()
        params = list(model.parameters())
        opt = torch.optim.SGD(params, lr=args.sgd_lr) if opt_name == "sgd" \
            else torch.optim.AdamW(params, lr=args.adamw_lr, **ADAMW)
        losses = []
        for step in range(STEPS):
            x, y = tessera_data.batch(tokens, step, B, S)
            loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
            losses.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
        return losses, {n: p.detach().double().numpy()
                        for n, p in model.named_parameters()}

    print(f"SGD lr {args.sgd_lr}, AdamW lr {args.adamw_lr}\n")
    print("| family | optimizer | max rel loss change | worst final tensor "
          "(rel L2 change) |")
    print("|---|---|---|---|")
    for fam in args.family:
        for opt_name in ("sgd", "adamw"):
            l1, w1 = trajectory(fam, opt_name, 1.0)
            l2, w2 = trajectory(fam, opt_name, 1.0 + 1e-7)
            dl = max(abs(a - b) / abs(a) for a, b in zip(l1, l2))
            worst = max((np.linalg.norm(w1[n] - w2[n]) /
                         np.linalg.norm(w1[n]), n) for n in w1
                        if not re.search(zero_grad, n))
            print(f"| {fam} | {opt_name} | {dl:.1e} | {worst[0]:.1e} "
                  f"`{worst[1]}` |")


def cmd_describe(args):
    for fam in args.family:
        if args.work:
            for exp in args.exporter:
                initializer_map(fam, exp, args.work)
            continue
        ref = json.load(open(ref_path(fam, "ts14")))
        p = ref["parameters"]
        print(f"### {fam}: {ref['hf_class']}\n")
        print(f"PyTorch: {p['count']} parameters, {p['elements']} "
              f"elements.\n")
        print("| exporter | opset | initializers (elements) | ops |")
        print("|---|---|---|---|")
        for exp in args.exporter:
            m, inits, ops, elems = describe_model(onnx_path(fam, exp))
            opset = [o.version for o in m.opset_import
                     if o.domain in ("", "ai.onnx")][0]
            hist = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
            print(f"| {exp} | {opset} | {len(inits)} ({elems}) | {hist} |")
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("init", "export", "check", "describe", "sensitivity"):
        p = sub.add_parser(name)
        p.add_argument("--family", action="append")
        p.add_argument("--work", required=name != "describe")
        if name == "export":
            p.add_argument("--exporter", required=True, choices=EXPORTERS)
        if name == "sensitivity":
            p.add_argument("--sgd-lr", type=float, default=LR["sgd"])
            p.add_argument("--adamw-lr", type=float, default=LR["adamw"])
        elif name in ("check", "describe"):
            p.add_argument("--exporter", action="append",
                           choices=EXPORTERS)
    args = ap.parse_args()
    import families
    args.family = args.family or list(families.FAMILIES)
    if args.cmd in ("check", "describe"):
        args.exporter = args.exporter or list(EXPORTERS)
    {"init": cmd_init, "export": cmd_export, "check": cmd_check,
     "describe": cmd_describe, "sensitivity": cmd_sensitivity}[args.cmd](args)


if __name__ == "__main__":
    main()

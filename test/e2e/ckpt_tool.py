#!/usr/bin/env python3
"""End-to-end test of tessera-ckpt on a checkpoint written by tessera-run
(issue 24, must-show 4).

    ckpt_tool.py --build BUILD [--model M.onnx] [--data F] [--dp 2 --tp 2]
                 [--steps 4] [--optimizer adamw]

1. tessera-partition compiles the model for dp x tp; tessera-run trains K
   steps with `--save CK --save-weights W.safetensors`, and a second run
   trains K+1 steps (its step K+1 loss is the loss of the weights after K
   steps on batch K).
2. `tessera-ckpt inspect CK` lists every tensor; `tessera-ckpt convert CK
   --to C.safetensors` loads with the `safetensors` package (safe_open and
   safetensors.numpy.load_file), has the same names, order, shapes,
   metadata and values as W (bit for bit), and is the same file byte for
   byte.
3. `tessera-ckpt export CK --onnx M.onnx -o OUT.onnx` runs in onnxruntime:
   on batch K (DESIGN.md's sampling) the mean cross-entropy of its logits
   equals tessera-run's step K+1 loss within --rtol, while the untrained
   input model's loss differs (the weights really were replaced). Models
   with external data (LLaMA) get OUT.onnx.data.

Needs the test venv (scripts/python-env.sh test: onnxruntime, safetensors).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def run(cmd, capture=False):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, check=True, env=env(), text=True,
                       stdout=subprocess.PIPE if capture else None)
    if capture:
        print(r.stdout, end="")
        return r.stdout
    return None


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def batch(tokens, step, B, S):
    """DESIGN.md: sample j of step s starts at ((s*B + j)*S) mod (T-S-1)."""
    T = tokens.size
    starts = [((step * B + j) * S) % (T - S - 1) for j in range(B)]
    inp = np.stack([tokens[a:a + S] for a in starts]).astype(np.int64)
    lab = np.stack([tokens[a + 1:a + S + 1] for a in starts]).astype(np.int64)
    return inp, lab


def cross_entropy(logits, labels):
    x = logits.astype(np.float64).reshape(-1, logits.shape[-1])
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    picked = x[np.arange(x.shape[0]), labels.reshape(-1)]
    return float(np.mean(lse - picked))


def ort_loss(model, tokens, step):
    import onnxruntime as ort
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    B, S = inp.shape
    x, y = batch(tokens, step, B, S)
    logits = sess.run(None, {inp.name: x})[0]
    return cross_entropy(logits, y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", default=os.path.join(
        ROOT, "test", "e2e", "models", "prenorm_gelu_causal_op17.onnx"))
    ap.add_argument("--data", default=os.path.join(
        ROOT, "examples", "data", "corpus.u16"))
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--keep", help="work folder to keep (default: a temp)")
    args = ap.parse_args()

    import safetensors
    import safetensors.numpy

    tools = os.path.join(args.build, "tools")
    partition = os.path.join(tools, "tessera-partition", "tessera-partition")
    trun = os.path.join(tools, "tessera-run", "tessera-run")
    tckpt = os.path.join(tools, "tessera-ckpt", "tessera-ckpt")
    work = args.keep or tempfile.mkdtemp(prefix="ckpt-tool-")
    os.makedirs(work, exist_ok=True)
    K, ranks = args.steps, args.dp * args.tp

    plan = os.path.join(work, "plan.tsr")
    run([partition, args.model, "-o", plan, "--dp", str(args.dp), "--tp",
         str(args.tp), "--optimizer", args.optimizer, "--lr", args.lr])
    ck = os.path.join(work, "ck")
    weights = os.path.join(work, "weights.safetensors")
    m_k = os.path.join(work, "k.jsonl")
    m_k1 = os.path.join(work, "k1.jsonl")
    run(["mpirun", "-np", str(ranks), trun, plan, "--data", args.data,
         "--steps", str(K), "--metrics", m_k, "--save", ck,
         "--save-weights", weights])
    run(["mpirun", "-np", str(ranks), trun, plan, "--data", args.data,
         "--steps", str(K + 1), "--metrics", m_k1])
    loss_k1 = losses(m_k1)[K]
    assert losses(m_k1)[:K] == losses(m_k), "the two runs differ"

    out = run([tckpt, "inspect", ck], capture=True)
    assert f"step: {K}\n" in out, out

    # --- convert: loads with the safetensors package, equals --save-weights.
    conv = os.path.join(work, "converted.safetensors")
    run([tckpt, "convert", ck, "--to", conv])
    got = safetensors.numpy.load_file(conv)
    want = safetensors.numpy.load_file(weights)
    with safetensors.safe_open(conv, "np") as f:
        got_meta, got_keys = f.metadata(), list(f.keys())
    with safetensors.safe_open(weights, "np") as f:
        want_meta, want_keys = f.metadata(), list(f.keys())
    assert sorted(got_keys) == sorted(want_keys), (got_keys, want_keys)
    for name in want:
        a, b = got[name], want[name]
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), name
    assert got_meta == want_meta, (got_meta, want_meta)
    same_bytes = open(conv, "rb").read() == open(weights, "rb").read()
    print(f"convert: {len(got)} tensors equal --save-weights bit for bit; "
          f"metadata {got_meta}; same file bytes: {same_bytes}")
    assert same_bytes, "convert's file differs from --save-weights' bytes"

    # --- export: runs in onnxruntime with the trained model's loss.
    onnx_out = os.path.join(work, "trained.onnx")
    run([tckpt, "export", ck, "--onnx", args.model, "-o", onnx_out])
    tokens = np.fromfile(args.data, dtype="<u2").astype(np.int64)
    trained = ort_loss(onnx_out, tokens, K)
    untrained = ort_loss(args.model, tokens, K)
    rel = abs(trained - loss_k1) / abs(loss_k1)
    print(f"export: onnxruntime loss on batch {K} = {trained:.8f}, "
          f"tessera-run step {K + 1} loss = {loss_k1:.8f} (rel {rel:.2e}); "
          f"untrained model {untrained:.8f}")
    assert rel <= args.rtol, f"rel {rel} > {args.rtol}"
    assert abs(untrained - loss_k1) / abs(loss_k1) > 10 * args.rtol, \
        "the untrained model gives the same loss: nothing was trained/exported"
    if os.path.exists(args.model + ".data"):
        assert os.path.exists(onnx_out + ".data"), "no external data written"
        print("export: external data in", onnx_out + ".data")
    print("PASS")


if __name__ == "__main__":
    sys.exit(main())

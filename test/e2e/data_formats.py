#!/usr/bin/python3
"""Token data formats end to end (issue 24, must-show 7; docs/DataFormats.md).

    data_formats.py vocab70k --build DIR [--work DIR] [--rtol 1e-4]
        A GPT of 70,000 ids (examples/gpt/model.py, d_model 16, 1 layer,
        exported to ONNX here) trains on a uint32 token file whose ids
        reach above 65,535 (every third id is in [65536, 70000)):
        - the artifact's manifest records "vocab_size": 70000;
        - the serial run (--data-dtype uint32) matches PyTorch training the
          same module on the same batches: 8 losses within rtol;
        - a Megatron-LM .bin/.idx pair of the same ids (int32, as Megatron
          stores vocabularies of 65,500 ids or more), split into documents
          of uneven lengths, gives the same losses and weights bit for bit
          (serial) and the dp2 run on it matches the serial one within 1e-5;
        - a file holding the id 70000 is refused before any step with one
          line naming the file, the position and the id.

    data_formats.py megatron --build DIR --python PY [--work DIR]
        A text written here is tokenized by tools/tokenize_text.py (run
        with PY, which has Hugging Face `tokenizers`: a byte-level BPE of at
        most 256 ids trained on that text, one document per line, EOD
        appended) into a plain uint16 file and a Megatron .bin/.idx pair;
        - the saved tokenizer.json, reloaded with --tokenizer, gives the
          same ids; a missing one is a one-line error;
        - the pair reads back, with Megatron-LM's _IndexReader layout, as
          the plain file's ids (one sequence per document, document indices
          0..N);
        - on prenorm_gelu_causal (vocabulary 256) the pair gives the same
          losses and final weights bit for bit as the plain file, serial and
          dp2, and the serial run matches PyTorch within rtol.

Exit status 0 on success, 1 on a failed check.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import compare  # noqa: E402
import tessera_data  # noqa: E402
import tokenize_text  # noqa: E402

STEPS = 8
VOCAB70K = dict(vocab=70000, d_model=16, nhead=2, d_ff=32, layers=1, seq=8,
                batch=4, activation="gelu", norm_first=True, causal=True,
                seed=0, opset=17)
OPT = SimpleNamespace(optimizer="adamw", lr=3e-3, weight_decay=None,
                      beta1=0.9, beta2=0.999, eps=1e-8)


class CheckFailed(Exception):
    pass


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def run(cmd, expect_fail=False):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env(), capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    if expect_fail:
        if p.returncode == 0:
            raise CheckFailed(f"expected a failure: {' '.join(cmd)}")
    elif p.returncode != 0:
        raise CheckFailed(f"exit status {p.returncode}: {' '.join(cmd)}")
    return p


def tool(args, name):
    return os.path.join(args.build, "tools", name, name)


def partition(args, model, plan, dp=1):
    run([tool(args, "tessera-partition"), model, "-o", plan, "--dp", str(dp),
         "--optimizer", OPT.optimizer, "--lr", str(OPT.lr)])


def train(args, plan, data, tag, ranks=1, extra=()):
    metrics = os.path.join(args.work, f"{tag}.jsonl")
    weights = os.path.join(args.work, f"{tag}.safetensors")
    run(["mpirun", "-np", str(ranks), tool(args, "tessera-run"), plan,
         "--data", data, "--steps", str(STEPS), "--metrics", metrics,
         "--save-weights", weights] + list(extra))
    return metrics, weights


def manifest(plan):
    with open(plan, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["tessera.manifest"])


def same_bits(a, b, what):
    """Losses and final weights of runs a and b identical bit for bit."""
    la, lb = compare.load_losses(a[0]), compare.load_losses(b[0])
    if la != lb or len(la) != STEPS:
        raise CheckFailed(f"{what}: losses differ: {la} vs {lb}")
    wa, wb = compare.load_weights(a[1]), compare.load_weights(b[1])
    if sorted(wa) != sorted(wb):
        raise CheckFailed(f"{what}: different tensors")
    for k in wa:
        if wa[k].shape != wb[k].shape or wa[k].tobytes() != wb[k].tobytes():
            raise CheckFailed(f"{what}: weight {k} differs")
    print(f"OK {what}: {STEPS} losses and {len(wa)} weights identical bit "
          f"for bit")


def close(a, b, rtol, what, weights=True):
    ok, rows = compare.compare_losses(compare.load_losses(a[0]),
                                      compare.load_losses(b[0]), rtol)
    worst = max((r[3] for r in rows if r[3] is not None), default=None)
    if not ok or len(rows) != STEPS:
        raise CheckFailed(f"{what}: losses differ beyond {rtol}: {rows}")
    if weights:
        wok, problems, errs = compare.compare_weights(
            drop_key_bias(compare.load_weights(a[1])),
            drop_key_bias(compare.load_weights(b[1])), rtol)
        if not wok:
            raise CheckFailed(f"{what}: weights: {problems} {errs[:3]}")
    print(f"OK {what}: worst loss rel err {worst:.2e} (rtol {rtol:g})")


def drop_key_bias(weights):
    """Each fused in_proj_bias [3D] without its key third: the loss does not
    depend on the key bias (softmax is shift-invariant), so its updates are
    rounding noise (as e2e.py's drop_key_bias)."""
    out = dict(weights)
    for name, value in weights.items():
        if name.endswith("in_proj_bias"):
            d = value.shape[0] // 3
            out[name] = np.concatenate([value[:d], value[2 * d:]])
    return out


def vs_torch(cfg, tokens, metrics, rtol, what):
    import torch
    import torch_reference
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    losses, _, _ = torch_reference.train(cfg, tokens, STEPS, OPT)
    ref = os.path.join(os.path.dirname(metrics), "torch.json")
    with open(ref, "w") as f:
        json.dump({"losses": losses}, f)
    close((metrics, None), (ref, None), rtol, what, weights=False)


def documents(ids, seed):
    """Splits ids into documents of uneven lengths (some empty)."""
    rng = np.random.default_rng(seed)
    docs, i = [], 0
    while i < ids.size:
        n = int(rng.integers(0, 40))
        docs.append(ids[i:i + n])
        i += n
    return docs


def check_one_line_error(p, *needles):
    err = p.stderr.strip()
    lines = [l for l in err.splitlines() if "error" in l]
    if len(lines) != 1 or not all(n in lines[0] for n in needles):
        raise CheckFailed(f"expected one error line with {needles}, got:\n"
                          f"{err}")
    print(f"OK refused: {lines[0]}")


def cmd_vocab70k(args):
    import export
    model = os.path.join(args.work, "vocab70k.onnx")
    export.export(dict(VOCAB70K), out=model, quiet=True)
    plan = os.path.join(args.work, "vocab70k.tsr")
    partition(args, model, plan)
    vocab = manifest(plan).get("vocab_size")
    if vocab != 70000:
        raise CheckFailed(f"manifest vocab_size is {vocab}, expected 70000")
    print("OK manifest vocab_size 70000")

    i = np.arange(3001, dtype=np.int64)
    ids = np.where(i % 3 == 0, 65536 + (i * 131) % 4464, (i * 7919) % 70000)
    assert ids.max() > 65535 and ids.max() < 70000
    plain = os.path.join(args.work, "tokens.u32")
    tokenize_text.write_plain(plain, [ids], np.uint32)
    prefix = os.path.join(args.work, "megatron70k")
    tokenize_text.write_megatron(prefix, documents(ids, 1),
                                 tokenize_text.megatron_dtype(70000))
    with open(prefix + ".idx", "rb") as f:
        code = f.read(18)[17]
    if code != 4:
        raise CheckFailed(f"Megatron dtype code {code}, expected 4 (int32)")

    serial = train(args, plan, plain, "u32", extra=["--data-dtype", "uint32"])
    vs_torch(dict(VOCAB70K), tessera_data.load_tokens(plain, "<u4"),
             serial[0], args.rtol, "vocab 70000, uint32 file vs PyTorch")
    indexed = train(args, plan, prefix, "megatron")
    same_bits(serial, indexed, "vocab 70000: Megatron int32 .bin/.idx vs "
              "plain uint32")
    plan2 = os.path.join(args.work, "vocab70k.dp2.tsr")
    partition(args, model, plan2, dp=2)
    dp2 = train(args, plan2, prefix, "megatron.dp2", ranks=2)
    close(dp2, serial, 1e-5, "vocab 70000: dp2 on .bin/.idx vs serial")

    bad = os.path.join(args.work, "bad.u32")
    bad_ids = ids.copy()
    bad_ids[123] = 70000
    tokenize_text.write_plain(bad, [bad_ids], np.uint32)
    p = run([tool(args, "tessera-run"), plan, "--data", bad,
             "--data-dtype", "uint32"], expect_fail=True)
    check_one_line_error(p, bad, "token 123 is 70000",
                         "outside the model's vocabulary [0, 70000)")
    return 0


def read_megatron(prefix):
    """PREFIX.idx/.bin as Megatron-LM's _IndexReader reads them: (dtype,
    lengths, pointers, document indices, the .bin's ids)."""
    codes = {v: k for k, v in tokenize_text.MEGATRON_CODES.items()}
    with open(prefix + ".idx", "rb") as f:
        raw = f.read()
    if raw[:9] != b"MMIDIDX\x00\x00":
        raise CheckFailed("bad magic")
    version, = struct.unpack("<Q", raw[9:17])
    dtype = codes[raw[17]]
    n, m = struct.unpack("<QQ", raw[18:34])
    if version != 1 or len(raw) != 34 + 12 * n + 8 * m:
        raise CheckFailed(f"bad index: version {version}, {len(raw)} bytes")
    lengths = np.frombuffer(raw, "<i4", n, 34)
    pointers = np.frombuffer(raw, "<i8", n, 34 + 4 * n)
    docs = np.frombuffer(raw, "<i8", m, 34 + 12 * n)
    ids = np.fromfile(prefix + ".bin", dtype.newbyteorder("<"))
    return dtype, lengths, pointers, docs, ids


def write_text(path):
    """A deterministic English-like text, one short paragraph per line."""
    words = ("the model trains on tokens of text and every rank reads the "
             "same batches from the file so the plan matches the serial run "
             "data parallel tensor pipeline sequence expert optimizer state "
             "checkpoint resume learning rate warmup decay gradient norm clip "
             "evaluation loss vocabulary document index megatron").split()
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for _ in range(120):
            n = int(rng.integers(5, 30))
            f.write(" ".join(words[k] for k in rng.integers(0, len(words), n))
                    + ".\n")


def cmd_megatron(args):
    text = os.path.join(args.work, "text.txt")
    write_text(text)
    plain = os.path.join(args.work, "text.u16")
    prefix = os.path.join(args.work, "text")
    tok_json = os.path.join(args.work, "tokenizer.json")
    run([args.python, os.path.join(ROOT, "tools", "tokenize_text.py"), text,
         "--lines", "--append-eod", "--train-bpe", "256", "--save-tokenizer",
         tok_json, "-o", plain, "--megatron", prefix])
    with open(tok_json) as f:
        vocab = len(json.load(f)["model"]["vocab"])
    # The saved tokenizer reloads (--tokenizer) and gives the same ids.
    again = os.path.join(args.work, "again.u16")
    run([args.python, os.path.join(ROOT, "tools", "tokenize_text.py"), text,
         "--lines", "--append-eod", "--tokenizer", tok_json, "-o", again])
    with open(plain, "rb") as f, open(again, "rb") as g:
        if f.read() != g.read():
            raise CheckFailed("--tokenizer tokenizer.json gives other ids")
    p = run([args.python, os.path.join(ROOT, "tools", "tokenize_text.py"),
             text, "--tokenizer", os.path.join(args.work, "missing.json"),
             "-o", again], expect_fail=True)
    check_one_line_error(p, "tokenize_text: error:", "missing.json")
    tokens = tessera_data.load_tokens(plain)
    dtype, lengths, pointers, docs, ids = read_megatron(prefix)
    n = lengths.size
    if dtype != np.uint16 or n != 120 or list(docs) != list(range(n + 1)):
        raise CheckFailed(f"index: dtype {dtype}, {n} sequences, documents "
                          f"{list(docs)[:5]}...")
    if list(pointers) != list(np.concatenate([[0], np.cumsum(lengths)[:-1]])
                              * 2):
        raise CheckFailed("sequence pointers are not back to back")
    if not np.array_equal(ids.astype(np.int64), tokens) or \
            int(lengths.sum()) != tokens.size:
        raise CheckFailed("the .bin's ids differ from the plain file's")
    if tokens.max() >= 256 or vocab > 256:
        raise CheckFailed(f"tokenizer vocabulary {vocab}, max id "
                          f"{tokens.max()}: does not fit the model's 256")
    print(f"OK tokenize_text: {n} documents, {tokens.size} tokens, BPE "
          f"vocabulary {vocab}; .idx reads as Megatron's _IndexReader does")

    model = os.path.join(ROOT, "test", "e2e", "models",
                         "prenorm_gelu_causal_op17.onnx")
    plan = os.path.join(args.work, "prenorm.tsr")
    partition(args, model, plan)
    plan2 = os.path.join(args.work, "prenorm.dp2.tsr")
    partition(args, model, plan2, dp=2)
    a = train(args, plan, plain, "text.plain")
    b = train(args, plan, prefix, "text.megatron")
    same_bits(a, b, "Megatron uint16 .bin/.idx vs plain uint16 (serial)")
    # PREFIX.bin names the same dataset.
    c = train(args, plan2, plain, "text.plain.dp2", ranks=2)
    d = train(args, plan2, prefix + ".bin", "text.megatron.dp2", ranks=2)
    same_bits(c, d, "Megatron uint16 .bin/.idx vs plain uint16 (dp2)")
    from model import get_config
    vs_torch(get_config("prenorm_gelu_causal"), tokens, a[0], args.rtol,
             "BPE-tokenized text vs PyTorch")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["vocab70k", "megatron"])
    ap.add_argument("--build", required=True)
    ap.add_argument("--python", default=sys.executable,
                    help="python with `tokenizers` (megatron mode)")
    ap.add_argument("--work", help="keep the files here (default: a temp "
                    "dir, removed on success)")
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args(argv)
    tmp = None
    if not args.work:
        tmp = args.work = tempfile.mkdtemp(prefix=f"data_{args.mode}_")
    os.makedirs(args.work, exist_ok=True)
    try:
        rc = (cmd_vocab70k if args.mode == "vocab70k" else cmd_megatron)(args)
    except CheckFailed as e:
        print(f"FAIL: {e}", flush=True)
        return 1
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

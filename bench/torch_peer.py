#!/usr/bin/python3
"""PyTorch peer of bench/compare.py: a training step served over stdin.

    torch_peer.py --spec SPEC.json [--compile] [--threads 1] [--warmup W]
                  [--rank R --world 2 --port P]

Builds the model SPEC.json describes, loads its weights, trains it on the
batches of DESIGN.md's data convention (test/e2e/tessera_data.py: step k
uses batch k; DP rank r of D its rows [r*B/D, (r+1)*B/D)) with
torch.optim.AdamW (lr, betas 0.9/0.999, eps 1e-8, weight decay 0.01:
Tessera's AdamW defaults), fp32, torch.set_num_threads(threads), and serves
timed steps, so that bench/compare.py can interleave its runs with
Tessera's without paying the start-up (and torch.compile's compilation) per
run:

  1. runs W warm-up steps (untimed; with --compile they compile), then
     prints one line  READY {"losses": [...], "torch": ..., ...}  where
     losses are the warm-up steps' losses (step 0's is from the initial
     weights; with --world 2 the mean over both ranks, like Tessera's);
  2. for each stdin line "run N": runs N more steps, each timed with
     time.perf_counter from zero_grad to the end of opt.step() (the loss
     read back as a float, which waits for the step), and prints one line
     {"times": [...]} (seconds);
  3. stops at "quit" or end of input.

With --world 2 (PyTorch DDP over gloo, Li et al. 2020) rank 0 reads stdin
and broadcasts each command; only rank 0 prints. --compile wraps the model
and loss in torch.compile (inductor; PyTorch 2.x only) and uses
AdamW(fused=True) when this PyTorch has a fused CPU AdamW, otherwise its
default implementation.

SPEC.json (written by bench/compare.py):
  {"kind": "config", "name": "example"}           examples/gpt/model.py's
                                                   seeded config
  {"kind": "handwritten", "config": {...},         model.py's HandwrittenGPT
   "weights": "W.npz"}                             loaded from W.npz
  {"kind": "hf", "family": "gpt2", "config":       a transformers model of the
   {...}, "weights": "W.npz"}                      HF fixtures' family with
                                                   this config, from W.npz
plus "batch", "seq", "vocab", "lr", "data" (the token file).
Every weights file entry must name a parameter of the model with its shape,
and every parameter must have one (tied parameters once).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e", "hf"))
import tessera_data  # noqa: E402


def load_weights(model, path):
    """Copies every array of the .npz at `path` into the parameter of that
    name; exits naming the first mismatch."""
    params = dict(model.named_parameters())
    arrays = np.load(path)
    seen = set()
    for name in arrays.files:
        if name not in params:
            sys.exit(f"{path}: {name!r} is not a parameter of the model")
        value = arrays[name]
        p = params[name]
        if tuple(value.shape) != tuple(p.shape):
            sys.exit(f"{path}: {name} has shape {list(value.shape)}, the "
                     f"model's is {list(p.shape)}")
        with torch.no_grad():
            p.copy_(torch.from_numpy(np.array(value, dtype=np.float32)))
        seen.add(name)
    missing = sorted(set(params) - seen)
    if missing:
        sys.exit(f"{path}: no weights for {len(missing)} parameter(s): "
                 f"{', '.join(missing[:5])}")


def build(spec):
    kind = spec["kind"]
    if kind == "config":
        from model import build_model, get_config
        return build_model(get_config(spec["name"]))
    if kind == "handwritten":
        from model import build_model
        model = build_model(dict(spec["config"]))
    elif kind == "hf":
        import transformers
        import families
        _, cfg_name, _ = families.FAMILIES[spec["family"]]
        cfg = getattr(transformers, cfg_name)(**spec["config"])
        cfg._attn_implementation = "eager"
        model = families.model_class(spec["family"])(cfg)
        model.config._attn_implementation = "eager"
    else:
        sys.exit(f"spec: unknown kind {kind!r}")
    load_weights(model, spec["weights"])
    return model


def profile(args, one_step):
    """--profile-steps N: N steps timed without the profiler (their median
    is "step_s"), then N under torch.profiler (their mean wall time is
    "profiled_step_s"), per category (bench/op_categories.py) and per op,
    per step, to --profile-out."""
    import torch.profiler as tp
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import op_categories
    n = args.profile_steps
    plain = sorted(one_step()[0] for _ in range(n))
    t0 = time.perf_counter()
    with tp.profile(activities=[tp.ProfilerActivity.CPU],
                    record_shapes=True) as prof:
        for _ in range(n):
            one_step()
    wall = (time.perf_counter() - t0) / n
    events = prof.events()
    ops = sorted(((e.key, e.self_cpu_time_total * 1e-6 / n, e.count / n)
                  for e in prof.key_averages()), key=lambda t: -t[1])
    with open(args.profile_out, "w") as f:
        json.dump({"torch": torch.__version__, "steps": n,
                   "step_s": plain[len(plain) // 2],
                   "profiled_step_s": wall,
                   "categories": op_categories.torch_profile(events, n),
                   "ops": [{"name": k, "self_seconds_per_step": t,
                            "calls_per_step": c,
                            "category": op_categories.torch_category(k)}
                           for k, t, c in ops]}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--port", type=int, default=29500)
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="instead of serving: profile this many steps after "
                         "the warm-up with torch.profiler and write "
                         "--profile-out")
    ap.add_argument("--profile-out")
    args = ap.parse_args()
    spec = json.load(open(args.spec))
    torch.set_num_threads(args.threads)
    B, S, V = spec["batch"], spec["seq"], spec["vocab"]

    dist = None
    if args.world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo",
                                init_method=f"tcp://127.0.0.1:{args.port}",
                                rank=args.rank, world_size=args.world)
    model = build(spec).float().train()
    fused = False
    opt_kwargs = dict(lr=spec["lr"], betas=(0.9, 0.999), eps=1e-8,
                      weight_decay=0.01)
    if args.compile:
        try:
            opt = torch.optim.AdamW(model.parameters(), fused=True,
                                    **opt_kwargs)
            fused = True
        except (RuntimeError, TypeError, ValueError):
            opt = torch.optim.AdamW(model.parameters(), **opt_kwargs)
    else:
        opt = torch.optim.AdamW(model.parameters(), **opt_kwargs)
    net = model
    if dist is not None:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # Non-float buffers (HF GPT-2's bool causal mask) are constants that
        # every rank builds alike; gloo cannot broadcast bool tensors.
        DDP._set_params_and_buffers_to_ignore_for_model(
            model, [n for n, b in model.named_buffers()
                    if not b.is_floating_point()])
        net = DDP(model)

    def loss_fn(inputs, labels):
        return F.cross_entropy(net(inputs).reshape(-1, V), labels.reshape(-1))

    if args.compile:
        loss_fn = torch.compile(loss_fn)

    tokens = tessera_data.load_tokens(spec["data"])
    step = [0]

    def one_step():
        inputs, labels = tessera_data.batch(tokens, step[0], B, S, args.rank,
                                            args.world)
        step[0] += 1
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(inputs, labels)
        loss.backward()
        opt.step()
        value = float(loss.item())
        return time.perf_counter() - t0, value

    losses = []
    for _ in range(args.warmup):
        _, value = one_step()
        if dist is not None:
            t = torch.tensor([value], dtype=torch.float64)
            dist.all_reduce(t)
            value = float(t.item()) / args.world
        losses.append(value)
    if args.profile_steps > 0:
        profile(args, one_step)
        return
    out = sys.stdout if args.rank == 0 else open(os.devnull, "w")
    print("READY " + json.dumps({
        "losses": losses, "torch": torch.__version__, "compile": args.compile,
        "fused_adamw": fused, "threads": args.threads, "world": args.world}),
        file=out, flush=True)

    while True:
        n = 0
        if args.rank == 0:
            line = sys.stdin.readline()
            parts = line.split()
            if len(parts) == 2 and parts[0] == "run":
                n = int(parts[1])
        if dist is not None:
            t = torch.tensor([n], dtype=torch.int64)
            dist.broadcast(t, 0)
            n = int(t.item())
        if n <= 0:
            break
        times = [one_step()[0] for _ in range(n)]
        print(json.dumps({"times": times}), file=out, flush=True)
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

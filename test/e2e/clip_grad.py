#!/usr/bin/python3
"""End-to-end checks of gradient clipping (tessera-partition --clip-grad C).

    clip_grad.py torch --build DIR [--config NAME] [--optimizer sgd|adamw]
                       [--clip C] [--rtol 1e-4]
        Serial Tessera run with --clip-grad C vs PyTorch training the same
        module with torch.nn.utils.clip_grad_norm_(params, C) before every
        optimizer step, on the same batches: every step's "grad_norm"
        (tessera-run's metrics; PyTorch: clip_grad_norm_'s return value, the
        norm before clipping) within 1e-6 relative, every loss and every
        final weight (relative L2) within --rtol. Fails unless clipping was
        active on every step (norm > C), so the test cannot pass with the
        clipping left out.

    clip_grad.py parallel --build DIR [--config NAME] [--optimizer ...]
                          [--clip C] [--rtol 1e-5] -- FLAGS...
        The serial --clip-grad run vs a parallel one compiled with FLAGS
        (e.g. --tp 2, --pp 2 --micro-batches 4 --schedule 1f1b, --dp 2
        --zero 3, --sp ring --sp-size 2) and the same C: every step's loss
        and grad_norm and every final weight within --rtol.

Both modes train for 8 steps (e2e.py's STEPS and learning rates).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e  # noqa: E402
import compare  # noqa: E402


def grad_norms(metrics):
    out = []
    with open(metrics) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if "grad_norm" not in rec:
                    raise SystemExit(f"{metrics}: step {rec.get('step')} has "
                                     f"no \"grad_norm\"")
                out.append(rec["grad_norm"])
    return out


def check_norms(a, b, rtol, what):
    ok = len(a) == len(b) == e2e.STEPS
    print(f"grad_norm: {what} (rtol {rtol})")
    for i, (x, y) in enumerate(zip(a, b)):
        rel = abs(x - y) / max(abs(y), 1e-30)
        good = rel <= rtol
        ok = ok and good
        print(f"   step {i}: {x:.9g} vs {y:.9g}  rel {rel:.3e}"
              f"{'' if good else '  FAIL'}")
    if len(a) != len(b) or len(a) != e2e.STEPS:
        print(f"   FAIL: {len(a)} vs {len(b)} steps (expected {e2e.STEPS})")
    return ok


def torch_clip_run(args, work):
    """PyTorch: the module of `args.config`, clip_grad_norm_ before every
    step. Returns (losses, norms, weights path)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch_reference
    import tessera_data
    from model import build_model, get_config

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg = get_config(args.config)
    opt_args = argparse.Namespace(optimizer=args.optimizer,
                                  lr=e2e.LR[args.optimizer],
                                  weight_decay=None, beta1=0.9, beta2=0.999,
                                  eps=1e-8)
    model = build_model(cfg)
    model.train()
    opt, _ = torch_reference.make_optimizer(opt_args, model.parameters())
    tokens = tessera_data.load_tokens(e2e.CORPUS)
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    losses, norms = [], []
    for step in range(e2e.STEPS):
        inputs, labels = tessera_data.batch(tokens, step, B, S)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs).reshape(-1, V),
                               labels.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        losses.append(float(loss.item()))
        norms.append(float(norm.item()))
    path = os.path.join(work, "torch.safetensors")
    tensors = {k: v.detach().numpy().astype(np.float32).copy()
               for k, v in model.state_dict().items()}
    import safetensors_lite
    safetensors_lite.write(path, tensors, {})
    return losses, norms, path


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["torch", "parallel"])
    p.add_argument("--build", required=True)
    p.add_argument("--config", default="prenorm_gelu_causal")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    p.add_argument("--clip", type=float, default=0.05,
                   help="C (small enough that every step clips)")
    p.add_argument("--rtol", type=float)
    argv = sys.argv[1:]
    flags = []
    if "--" in argv:
        flags = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = p.parse_args(argv)
    args.flags = flags
    clip = ["--clip-grad", repr(args.clip)]

    with tempfile.TemporaryDirectory(prefix="tessera-clip-") as work:
        serial_m, serial_w = e2e.tessera(args, work, 1, 1, "serial", clip)
        serial_norms = grad_norms(serial_m)
        if args.mode == "torch":
            rtol = args.rtol or 1e-4
            losses, norms, torch_w = torch_clip_run(args, work)
            ok = all(n > args.clip for n in norms)
            if not ok:
                print(f"FAIL: clipping is not active on every step (C = "
                      f"{args.clip}, PyTorch's norms {norms})")
            ok = check_norms(serial_norms, norms, 1e-6,
                             "tessera serial vs clip_grad_norm_") and ok
            ref = os.path.join(work, "torch.json")
            with open(ref, "w") as f:
                json.dump({"losses": losses}, f)
            print(f"losses: tessera serial vs PyTorch (rtol {rtol})")
            ok = e2e.check_losses(serial_m, ref, rtol) and ok
            ser, ref_w = (compare.load_weights(serial_w),
                          compare.load_weights(torch_w))
            if args.optimizer == "adamw":
                ser, ref_w = e2e.drop_key_bias(ser), e2e.drop_key_bias(ref_w)
            wok, problems, errs = compare.compare_weights(ser, ref_w,
                                                          rtol=rtol)
            print(f"weights: tessera serial vs PyTorch (rtol {rtol}), "
                  f"{len(errs)} tensors, worst first:")
            for problem in problems:
                print("   problem:", problem)
            for err, name, _ in errs[:3]:
                print(f"   {err:.3e}  {name}")
            ok = ok and wok
        else:
            rtol = args.rtol or 1e-5
            flags = list(args.flags)

            def flag(name, default):
                return (int(flags[flags.index(name) + 1]) if name in flags
                        else default)
            dp, tp, pp = flag("--dp", 1), flag("--tp", 1), flag("--pp", 1)
            # e2e.tessera adds --dp and --tp itself; --pp stays in the
            # flags (tessera-partition) and sets the rank count.
            for name in ("--dp", "--tp"):
                if name in flags:
                    i = flags.index(name)
                    del flags[i:i + 2]
            what = " ".join(args.flags)
            par_m, par_w = e2e.tessera(args, work, dp, tp, "parallel",
                                       clip + flags, pp=pp)
            print(f"losses: {what} vs serial (rtol {rtol})")
            ok = e2e.check_run(args, par_m, par_w, serial_m, serial_w, rtol,
                               what)
            ok = check_norms(grad_norms(par_m), serial_norms, rtol,
                             f"{what} vs serial") and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

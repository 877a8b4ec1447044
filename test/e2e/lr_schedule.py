#!/usr/bin/python3
"""LR schedules and --weight-decay-exclude: Tessera vs PyTorch, plans vs serial.

    lr_schedule.py torch --build DIR --schedule cosine|linear
                   [--weight-decay-exclude]
    lr_schedule.py parallel --build DIR --dp 2 --tp 2 [--schedule cosine]
    lr_schedule.py resume --build DIR [--schedule cosine]

`torch`: the serial tessera-run with Megatron-LM's flags (--lr,
--lr-warmup-init, --lr-warmup-iters, --lr-decay-style, --lr-decay-iters,
--min-lr) against PyTorch training the exported module (examples/gpt's
prenorm_gelu_causal, its ONNX initializers) with torch.optim.AdamW and
torch.optim.lr_scheduler.SequentialLR([LinearLR warmup, CosineAnnealingLR or
LinearLR decay], milestones=[W]) on the same batches (DESIGN.md's sampling),
step by step:
  * every step's learning rate (tessera-run's metrics "lr" vs the optimizer's
    param_groups lr when the step ran) within 1e-6 relative (the runtime
    rounds it to f32 for the kernels; the metric is the double);
  * every step's loss and the final weights within 1e-4 relative (the
    e2e.torch tolerance; the K third of in_proj_bias is left out as in
    e2e.py: its true gradient is exactly zero, so AdamW amplifies rounding
    noise there).
With --weight-decay-exclude, tessera-partition --weight-decay-exclude and
weight decay 0.1 against torch parameter groups: biases and 1-D parameters
with weight_decay 0 (Megatron-LM's default groups), the rest 0.1; as a
control, the same run without --weight-decay-exclude must differ from them.
`parallel`: a dp x tp plan with the schedule against the serial run with
the same schedule: losses and weights within 1e-5 relative.
`resume`: 8 steps straight vs 4 steps, --save, a new run with --load to 8,
under the schedule: the resumed steps' lr and losses and the final weights
bit for bit (the lr is recomputed from the global step, not checkpointed).
Exits 0 on success, 1 on a mismatch.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import compare  # noqa: E402
import safetensors_lite  # noqa: E402
import tessera_data  # noqa: E402
from model import get_config  # noqa: E402

CONFIG = "prenorm_gelu_causal"
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
STEPS = 8
PEAK, MIN_LR, INIT_FACTOR = 3e-3, 3e-4, 0.1
WARMUP = 2
# cosine reaches min_lr at the last step; linear holds it for one step after.
DECAY = {"cosine": 7, "linear": 6}


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env())


def schedule_flags(style):
    return ["--lr", repr(PEAK), "--lr-warmup-init", repr(INIT_FACTOR * PEAK),
            "--lr-warmup-iters", str(WARMUP), "--lr-decay-style", style,
            "--lr-decay-iters", str(DECAY[style]), "--min-lr", repr(MIN_LR)]


def tessera(args, work, tag, dp=1, tp=1, partition_extra=(), run_extra=()):
    """Compiles and trains; returns (metrics.jsonl, weights.safetensors)."""
    plan = os.path.join(work, f"{tag}.tsr")
    metrics = os.path.join(work, f"{tag}.jsonl")
    weights = os.path.join(work, f"{tag}.safetensors")
    model = os.path.join(ROOT, get_config(CONFIG)["out"])
    run([os.path.join(args.build, "tools", "tessera-partition",
                      "tessera-partition"), model, "-o", plan,
         "--dp", str(dp), "--tp", str(tp), "--optimizer", "adamw",
         "--lr", repr(PEAK)] + list(partition_extra))
    run(["mpirun", "-np", str(dp * tp),
         os.path.join(args.build, "tools", "tessera-run", "tessera-run"), plan,
         "--data", CORPUS, "--steps", str(STEPS), "--metrics", metrics,
         "--save-weights", weights] + list(run_extra))
    return metrics, weights


def metric_lrs(path):
    lrs = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                lrs[int(obj["step"])] = float(obj["lr"])
    return lrs


def drop_key_bias(weights):
    """Each fused in_proj_bias [3D] without its K third (see e2e.py)."""
    out = dict(weights)
    for name, value in weights.items():
        if name.endswith("in_proj_bias"):
            d = value.shape[0] // 3
            out[name] = np.concatenate([value[:d], value[2 * d:]])
    return out


def torch_run(style, weight_decay, exclude, out_weights):
    """PyTorch: AdamW + SequentialLR; returns (lrs, losses) per step."""
    import torch
    import torch.nn.functional as F
    from model import build_model
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg = get_config(CONFIG)
    model = build_model(cfg)
    model.train()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # Megatron-LM's default groups (megatron/core/optimizer):
        # no_wd = name.endswith(".bias") or len(param.shape) == 1.
        (no_decay if exclude and (name.endswith(".bias") or p.dim() == 1)
         else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=PEAK, betas=(0.9, 0.999), eps=1e-8)
    sched = torch.optim.lr_scheduler
    warm = sched.LinearLR(opt, start_factor=INIT_FACTOR, end_factor=1.0,
                          total_iters=WARMUP)
    if style == "cosine":
        tail = sched.CosineAnnealingLR(opt, T_max=DECAY[style] - WARMUP,
                                       eta_min=MIN_LR)
    else:
        tail = sched.LinearLR(opt, start_factor=1.0, end_factor=MIN_LR / PEAK,
                              total_iters=DECAY[style] - WARMUP)
    lr_sched = sched.SequentialLR(opt, [warm, tail], milestones=[WARMUP])
    tokens = tessera_data.load_tokens(CORPUS)
    B, S, V = cfg["batch"], cfg["seq"], cfg["vocab"]
    lrs, losses = [], []
    for step in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        inputs, labels = tessera_data.batch(tokens, step, B, S)
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
        loss.backward()
        opt.step()
        lr_sched.step()
        losses.append(float(loss.item()))
    safetensors_lite.write(
        out_weights,
        {k: v.detach().numpy().copy() for k, v in model.state_dict().items()},
        {})
    print(f"torch {torch.__version__}: no-decay params: {len(no_decay)}")
    return lrs, losses


def check_weights(a, b, rtol, what):
    wa, wb = drop_key_bias(compare.load_weights(a)), drop_key_bias(
        compare.load_weights(b))
    ok, problems, errs = compare.compare_weights(wa, wb, rtol=rtol)
    print(f"weights: {what} (rtol {rtol}), {len(errs)} tensors, worst first:")
    for problem in problems:
        print("   problem:", problem)
    for err, name, _ in errs[:3]:
        print(f"   {err:.3e}  {name}")
    return ok


def check_torch(args, work):
    wd = 0.1 if args.weight_decay_exclude else 0.01
    extra = ["--weight-decay", repr(wd)]
    if args.weight_decay_exclude:
        extra.append("--weight-decay-exclude")
    m, w = tessera(args, work, "serial", partition_extra=extra,
                   run_extra=schedule_flags(args.schedule))
    ref_w = os.path.join(work, "torch.safetensors")
    lrs, losses = torch_run(args.schedule, wd, args.weight_decay_exclude,
                            ref_w)
    got_lrs = metric_lrs(m)
    ok = True
    print(f"lr per step: tessera metrics vs torch {args.schedule} "
          f"(rtol 1e-6)")
    for s, want in enumerate(lrs):
        got = got_lrs.get(s, math.nan)
        err = compare.rel_err(got, want)
        print(f"   step {s}: {got:.9g} vs {want:.9g}  {err:.2e}")
        ok &= err <= 1e-6
    # The schedule is not trivial: warmup from 0.1·peak, down to min_lr.
    ok &= lrs[0] < 0.2 * PEAK and abs(lrs[-1] - MIN_LR) < 1e-12
    print("losses: tessera vs torch (rtol 1e-4)")
    lok, rows = compare.compare_losses(
        compare.load_losses(m), dict(enumerate(losses)), rtol=1e-4)
    for row in rows:
        print("  ", row)
    ok &= lok
    ok &= check_weights(w, ref_w, 1e-4, "tessera vs torch")
    if args.weight_decay_exclude:
        # Control: decaying every param (no --weight-decay-exclude) must
        # NOT match the torch groups, or this check could not fail.
        _, w_all = tessera(args, work, "decay-all",
                           partition_extra=["--weight-decay", repr(wd)],
                           run_extra=schedule_flags(args.schedule))
        differs = not check_weights(w_all, ref_w, 1e-4,
                                    "control: decay everything vs torch groups")
        print(f"control differs from the torch groups: {differs}")
        ok &= differs
    return ok


def check_parallel(args, work):
    flags = schedule_flags(args.schedule)
    sm, sw = tessera(args, work, "serial", run_extra=flags)
    pm, pw = tessera(args, work, f"dp{args.dp}xtp{args.tp}", args.dp, args.tp,
                     run_extra=flags)
    ok = metric_lrs(pm) == metric_lrs(sm)
    print(f"lr per step equal: {ok}")
    print(f"losses: dp{args.dp}xtp{args.tp} vs serial (rtol 1e-5)")
    lok, rows = compare.compare_losses(compare.load_losses(pm),
                                       compare.load_losses(sm), rtol=1e-5)
    for row in rows:
        print("  ", row)
    return ok and lok and check_weights(pw, sw, 1e-5, "parallel vs serial")


def check_resume(args, work):
    flags = schedule_flags(args.schedule)
    am, aw = tessera(args, work, "straight", run_extra=flags)
    ckpt = os.path.join(work, "ckpt")
    plan = os.path.join(work, "straight.tsr")
    exe = os.path.join(args.build, "tools", "tessera-run", "tessera-run")
    run(["mpirun", "-np", "1", exe, plan, "--data", CORPUS, "--steps", "4",
         "--save", ckpt] + flags)
    bm = os.path.join(work, "resumed.jsonl")
    bw = os.path.join(work, "resumed.safetensors")
    run(["mpirun", "-np", "1", exe, plan, "--data", CORPUS, "--steps",
         str(STEPS), "--load", ckpt, "--metrics", bm, "--save-weights", bw]
        + flags)
    a_lr, b_lr = metric_lrs(am), metric_lrs(bm)
    a_loss, b_loss = compare.load_losses(am), compare.load_losses(bm)
    ok = sorted(b_lr) == list(range(4, STEPS))
    for s in range(4, STEPS):
        same = a_lr[s] == b_lr.get(s) and a_loss[s] == b_loss.get(s)
        print(f"   step {s}: lr {a_lr[s]:.9g} vs {b_lr.get(s)}, loss "
              f"{a_loss[s]!r} vs {b_loss.get(s)!r}: "
              f"{'equal' if same else 'DIFFER'}")
        ok &= same
    wa, wb = compare.load_weights(aw), compare.load_weights(bw)
    bitwise = sorted(wa) == sorted(wb) and all(
        np.array_equal(wa[k], wb[k]) for k in wa)
    print(f"weights bit for bit: {bitwise}")
    return ok and bitwise


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["torch", "parallel", "resume"])
    p.add_argument("--build", required=True)
    p.add_argument("--schedule", choices=sorted(DECAY), default="cosine")
    p.add_argument("--weight-decay-exclude", action="store_true")
    p.add_argument("--dp", type=int, default=2)
    p.add_argument("--tp", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-lr-") as work:
        ok = {"torch": check_torch, "parallel": check_parallel,
              "resume": check_resume}[args.mode](args, work)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""End-to-end checks of Tessera against PyTorch and against itself.

    e2e.py torch    --build DIR --config NAME --optimizer sgd|adamw [--rtol 1e-4]
        Serial Tessera run (1 rank) vs PyTorch training the same module on the
        same batches: the 8 losses must match within rtol.

    e2e.py parallel --build DIR --config NAME --optimizer sgd|adamw --dp N --tp M
                    [--zero 0|1|2|3] [--bucket-mb MB] [--rtol 1e-5]
                    [--vocab-parallel on|off]
                    [--sp megatron|ulysses|ring [--sp-size K]] [--traffic]
                    [--rank-order AXES]
        dp*tp(*K)-rank run vs the serial run: every step's loss and every final
        parameter (relative L2) must match within rtol. --zero compiles the
        parallel run with that ZeRO stage (its final weights are gathered
        from the dp shards by --save-weights); --bucket-mb with gradient
        buckets overlapped with backward. --vocab-parallel is passed to
        the parallel run's tessera-partition; with `on` (and tp > 1) the
        check also fails unless the artifact's manifest lists the embedding
        and the LM head (weight and bias) as split over the vocabulary.
        --sp adds sequence parallelism (ulysses and ring on an sp axis of
        --sp-size ranks); with --traffic, check_sp_traffic's exact volumes
        (megatron: bytes_sent vs the same grid without --sp; ulysses: the
        all-to-all bytes of the paper).
        --rank-order (e.g. tp,dp) is passed to the parallel run's
        tessera-partition; the check also fails unless the manifest's
        "rank_order" is it and every rank ran at the coordinates it gives
        (check_rank_order, on tessera-run's --trace).
        With --traffic (dp = 1, vocab-parallel on) also a --vocab-parallel
        off run on the same grid: every step's "bytes_sent" of the on run
        must exceed the off run's by exactly the vocab-parallel all-reduces,
        2(tp-1)/tp * (2 * N*D*4 + 5 * N*8) bytes with N = B*S tokens: the
        lookup's [B, S, D] output, the LM head's [N, D] input gradient, and
        the cross-entropy's own f64 row statistics (max, sum-exp and target
        forward; max and sum-exp backward). The off run replicates the head,
        so it gathers nothing: the logits are never all-gathered either way.

    e2e.py pipeline --build DIR --config NAME --optimizer sgd|adamw
                    --grid PPxDPxTP --micro-batches 1,4,8
                    --schedules gpipe,1f1b,interleaved [--rtol 1e-5]
                    [--rank-order AXES] [--zero 1|2|3]
                    [--sp megatron|ulysses|ring [--sp-size K]] [--traffic]
        One serial run, then one run per (micro-batches, schedule) on a
        pp*dp*tp grid (interleaved with 2 virtual stages per stage, only for
        micro-batch counts that are a multiple of pp, as Megatron-LM
        requires); each must match the serial run like `parallel`, and its
        ranks must follow the rank order (--rank-order, default Megatron-LM's
        pp, dp, tp): the manifest's, and each rank's stage in the trace.
        --zero compiles every pipelined run with that ZeRO stage (sharded
        over dp inside each stage).
        --sp adds sequence parallelism to every pipeline run (ulysses and
        ring on an sp axis of --sp-size ranks, pp*dp*tp*K ranks; megatron
        over tp). --traffic also runs the same dp x tp (x sp) grid without
        pp and checks every pipeline run's collective bytes per step
        exactly (check_pipeline_traffic): the sum over all ranks of each
        non-send kind equals the run without pp's (every collective runs on
        the one stage that holds its layer, split over micro-batches), and
        the sends add, per stage boundary, M forward activations and M
        activation gradients of [B/dp/M, S/s, D] fp32 from every rank of a
        stage (s = --sp-size, tp for megatron, else 1).

    e2e.py recompute --build DIR --config NAME --optimizer sgd|adamw
                     --dp N --tp M [--pp P] [--modes selective,full]
        A run without recomputation on the dp x tp (x pp, with 4
        micro-batches, 1F1B) grid, then one per --recompute mode on the same
        grid: losses and final weights must be identical (recomputation
        repeats the same ops on the same data).

    e2e.py precision --build DIR --config NAME --optimizer sgd|adamw
                     [--dp N --tp M] [--traffic] [--rtol 2e-2]
                     [--precision-type bf16|fp16] [--loss-scale S]
                     [--pp P --micro-batches M --schedules KIND]
                     [--sp megatron] [--recompute selective|full]
        A bf16 run (--precision bf16: bf16 forward/backward and gradient
        all-reduce, fp32 master weights and optimizer state) on the dp x tp
        grid vs the fp32 serial run: every step's loss within rtol. --pp P
        (or --micro-batches M alone) makes it a pipeline plan of M
        micro-batches (default 4) with one --schedules kind (default 1f1b;
        interleaved with 2 virtual stages), whose micro-batch gradients are
        accumulated in f32; --sp megatron, --recompute and --loss-scale
        (fp16) are passed to the low-precision run's tessera-partition. With
        --traffic, also an fp32 run on the same grid: every step's
        "bytes_sent" of the bf16 run must be exactly the fp32 run's with
        the gradient all-reduce halved, i.e. L + (fp32 - L) / 2 where L is
        the f32 loss all-reduce, 2(dp-1)/dp * 4 bytes (dp > 1, tp = 1).
        A pipeline plan's rank 0 (stage 0, which does not hold the loss)
        sends its bf16 activations and gradient all-reduces: exactly half
        the fp32 plan's bytes (the gradient all-reduce stays bf16 though
        the micro-batch accumulation is f32).
        --precision-type fp16 does the same with --precision fp16 (static
        loss scale 1024); its --traffic also runs bf16 on the same grid:
        fp16's bytes_sent must equal bf16's exactly. With --zero Z the
        low-precision run uses ZeRO-Z and must also match the same run
        without ZeRO within 1e-5 (losses and final weights), and with fp16
        also the fp32 serial run's final weights within rtol.

    e2e.py loss-scale --build DIR --config NAME --optimizer sgd|adamw
                      [--dp N --tp M] [--sp KIND --sp-size K]
                      [--initial-loss-scale S] [--steps-total K]
                      [--same-as-static]
        fp16 dynamic loss scaling forced to overflow: --initial-loss-scale S
        (default 2^32, beyond fp16's 65504 as a backward seed) on the
        dp x tp (x sp) grid for K steps (default 30): the first k >= 1 steps must
        be skipped ("skipped" 1 in the metrics) with the scale halving
        each time (S/2, S/4, ...), then steps run (k < K - 4) and the
        last loss is below the first clean step's. Then a run of exactly k
        steps and one of 0 steps, both with --save-state: on every rank
        every parameter and optimizer-state shard (AdamW's moments and step
        count included) must be bit-identical, and the scale state must be
        S/2^k with k skipped steps counted. With --same-as-static instead:
        the default dynamic plan (initial 1024) and a --loss-scale 1024
        plan train 8 steps; no step may be skipped, and the losses and
        final weights must be bit-identical.

    e2e.py cuda --build DIR --config NAME --optimizer sgd|adamw
                [--precision-type bf16] [--rtol R]
        The serial plan (fp32, or bf16 with --precision-type given) run by
        tessera-run --backend cpu and --backend cuda: every step's loss and
        every final weight within rtol (fp32: 1e-4, bf16: 2e-2); and
        --backend cuda --cuda-graph (the step captured once and replayed)
        against the eager CUDA run within 1e-6. Without a
        usable GPU the check is SKIPPED (exit 77, which ctest reports as
        skipped), after checking that --backend cuda failed as it must: exit
        1 before any step, with a message that says no CUDA device exists.

    e2e.py cuda-dist --build DIR --config NAME --optimizer sgd|adamw
                     --collectives nccl|mpi [--dp N --tp M | --pp P]
                     [--bucket-mb MB] [--rtol R]
        The dp x tp plan (or, with --pp, a pp x 1 x 1 pipeline plan with 4
        micro-batches, 1F1B) run on N ranks by tessera-run --backend cpu and
        by --backend cuda --collectives X: every step's loss and every
        final weight within rtol (fp32: 1e-4). With dp = tp = pp = 1
        (a compiled dp=1 plan has no collective) the plan is instead the
        1-rank bigram plan test/Run/Inputs/bigram-dp1-collectives.mlir,
        which issues every collective kind (each an identity on one
        rank), on tokens of make_tokens.py.
        SKIPPED (exit 77, with the reason) without a usable GPU (after
        checking that --backend cuda refused to start with a clear error),
        and with --collectives nccl when there are fewer GPUs than ranks
        (NCCL needs one GPU per rank; --collectives mpi lets the ranks share
        one GPU).

Runs use DESIGN.md's data order on examples/data/corpus.u16. Exit status 0
means the check passed; the output shows every number compared.
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
from model import get_config  # noqa: E402

CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
STEPS = 8
# Learning rates large enough that 8 steps move the weights visibly, so a
# wrong gradient or update cannot hide under the 1e-5 weight tolerance.
LR = {"sgd": 0.1, "adamw": 3e-3}


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    return e


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env())


def model_path(config):
    return os.path.join(ROOT, get_config(config)["out"])


def tessera(args, workdir, dp, tp, tag, extra=(), pp=1, trace=False,
            run_extra=()):
    """Compiles and trains; returns (metrics.jsonl, weights.safetensors).
    With `trace`, tessera-run also writes {tag}.trace.json (--trace).
    `run_extra` is passed to tessera-run."""
    plan = os.path.join(workdir, f"{tag}.tsr")
    metrics = os.path.join(workdir, f"{tag}.jsonl")
    weights = os.path.join(workdir, f"{tag}.safetensors")
    run([os.path.join(args.build, "tools", "tessera-partition", "tessera-partition"),
         model_path(args.config), "-o", plan, "--dp", str(dp), "--tp", str(tp),
         "--optimizer", args.optimizer, "--lr", str(LR[args.optimizer])]
        + list(extra))
    sp = 1
    if "--sp" in extra and extra[list(extra).index("--sp") + 1] in ("ulysses",
                                                                     "ring"):
        sp = int(extra[list(extra).index("--sp-size") + 1])
    run(["mpirun", "-np", str(dp * tp * pp * sp),
         os.path.join(args.build, "tools", "tessera-run", "tessera-run"), plan,
         "--data", CORPUS, "--steps", str(STEPS), "--metrics", metrics,
         "--save-weights", weights]
        + (["--trace", os.path.join(workdir, f"{tag}.trace.json")]
           if trace else []) + list(run_extra))
    return metrics, weights


SKIPPED = 77  # ctest SKIP_RETURN_CODE


def check_cuda(args, work):
    """The CUDA backend against the CPU backend on one rank; SKIPPED when
    this machine has no usable GPU (after checking the error says so)."""
    low = ["--precision", args.precision_type] if args.precision_type else []
    rtol = args.rtol or (2e-2 if low else 1e-4)
    what = args.precision_type or "fp32"
    reason = cuda_unavailable(args)
    if reason is False:
        return False
    if reason:
        print(f"SKIPPED: {reason}")
        return SKIPPED
    cpu_m, cpu_w = tessera(args, work, 1, 1, f"cpu-{what}", low,
                           run_extra=["--backend", "cpu"])
    gpu_m, gpu_w = tessera(args, work, 1, 1, f"cuda-{what}", low,
                           run_extra=["--backend", "cuda"])
    print(f"losses: cuda vs cpu, serial {what} (rtol {rtol})")
    ok = check_run(args, gpu_m, gpu_w, cpu_m, cpu_w, rtol, f"cuda {what}")
    # The step recorded once as a CUDA graph and replayed must compute what
    # the eager CUDA run does.
    graph_m, graph_w = tessera(args, work, 1, 1, f"cuda-graph-{what}", low,
                               run_extra=["--backend", "cuda",
                                          "--cuda-graph"])
    print(f"losses: cuda --cuda-graph vs cuda, serial {what} (rtol 1e-6)")
    return check_run(args, graph_m, graph_w, gpu_m, gpu_w, 1e-6,
                     f"cuda graph {what}") and ok


def cuda_unavailable(args):
    """None when tessera-run --backend cuda can start here; else the reason
    (after checking that the refusal is the clear one), or False when the
    refusal is not clear (a failure)."""
    probe = subprocess.run(
        [os.path.join(args.build, "tools", "tessera-run", "tessera-run"),
         "--backend", "cuda", "--collectives", "mpi", "--data", CORPUS,
         "no-such-plan.tsr"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "no CUDA device" in probe.stdout or "without the CUDA backend" in \
            probe.stdout:
        clear = probe.returncode == 1 and "--backend cuda" in probe.stdout
        print(f"tessera-run --backend cuda on this machine: exit "
              f"{probe.returncode}: {probe.stdout.strip()}")
        if not clear:
            print("FAIL: expected exit 1 and a message naming --backend cuda")
            return False
        return "no usable GPU here; the CUDA backend was not run"
    return None


def gpu_count():
    """Number of NVIDIA GPUs (nvidia-smi -L), 0 without a driver."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def serial_collectives_runs(args, work, collectives):
    """The 1-rank bigram plan that issues every collective kind
    (test/Run/Inputs/bigram-dp1-collectives.mlir, each collective an
    identity on one rank) trained on --backend cpu and on --backend cuda
    --collectives X; returns ((cpu metrics, weights), (cuda ...))."""
    inputs = os.path.join(ROOT, "test", "Run", "Inputs")
    plan = os.path.join(work, "collectives.tsr")
    tokens = os.path.join(work, "tokens.u16")
    run(["/usr/bin/python3", os.path.join(inputs, "make_tokens.py"), tokens])
    run([os.path.join(args.build, "test", "unittests", "executor",
                      "tessera-pack-plan"),
         os.path.join(inputs, "bigram-dp1-collectives.mlir"),
         os.path.join(inputs, "bigram-dp1.json"), "-o", plan])
    out = []
    for tag, backend in (("cpu", ["--backend", "cpu"]),
                         ("cuda", ["--backend", "cuda", "--collectives",
                                   collectives])):
        metrics = os.path.join(work, f"{tag}.jsonl")
        weights = os.path.join(work, f"{tag}.safetensors")
        run([os.path.join(args.build, "tools", "tessera-run", "tessera-run"),
             plan, "--data", tokens, "--steps", str(STEPS), "--metrics",
             metrics, "--save-weights", weights] + backend)
        out.append((metrics, weights))
    return out


def check_cuda_dist(args, work):
    """A multi-rank plan on --backend cuda --collectives X against
    --backend cpu on the same ranks (see the module docstring)."""
    reason = cuda_unavailable(args)
    if reason is False:
        return False
    ranks = args.dp * args.tp * args.pp
    if reason is None and args.collectives == "nccl" and gpu_count() < ranks:
        reason = (f"--collectives nccl on {ranks} ranks needs {ranks} GPUs "
                  f"(NCCL refuses two ranks on one device); this machine "
                  f"has {gpu_count()}")
    if reason:
        print(f"SKIPPED: {reason}")
        return SKIPPED
    rtol = args.rtol or 1e-4
    if ranks == 1:
        (cpu_m, cpu_w), (gpu_m, gpu_w) = serial_collectives_runs(
            args, work, args.collectives)
        print(f"losses: cuda --collectives {args.collectives} vs cpu, one "
              f"rank, every collective kind (rtol {rtol})")
        return check_run(args, gpu_m, gpu_w, cpu_m, cpu_w, rtol,
                         f"cuda {args.collectives} serial collectives")
    extra, pp = [], 1
    if args.pp > 1:
        extra = ["--pp", str(args.pp), "--micro-batches", "4",
                 "--schedule", "1f1b"]
        pp = args.pp
    if args.bucket_mb is not None:
        extra += ["--bucket-mb", args.bucket_mb]
    what = f"dp{args.dp} x tp{args.tp} x pp{args.pp}"
    cpu_m, cpu_w = tessera(args, work, args.dp, args.tp, "cpu", extra, pp,
                           run_extra=["--backend", "cpu"])
    gpu_m, gpu_w = tessera(args, work, args.dp, args.tp, "cuda", extra, pp,
                           run_extra=["--backend", "cuda", "--collectives",
                                      args.collectives])
    print(f"losses: cuda --collectives {args.collectives} vs cpu, {what} "
          f"(rtol {rtol})")
    return check_run(args, gpu_m, gpu_w, cpu_m, cpu_w, rtol,
                     f"cuda {args.collectives} {what}")


def drop_key_bias(weights):
    """Replaces each fused in_proj_bias [3D] by its Q and V thirds [2D]."""
    out = dict(weights)
    for name, value in weights.items():
        if name.endswith("in_proj_bias"):
            d = value.shape[0] // 3
            out[name] = np.concatenate([value[:d], value[2 * d:]])
    return out


def manifest(plan):
    """The tessera.manifest JSON of a plan.tsr (safetensors metadata)."""
    import struct
    with open(plan, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["tessera.manifest"])


def default_rank_order(axes):
    """Megatron-LM's rank order (pp, dp, sp, tp) over the plan's rank axes."""
    return [a for a in ("pp", "dp", "sp", "tp") if a in axes]


def check_rank_order(plan, trace, want):
    """The manifest's rank order is `want` (or Megatron's default when None),
    and every world rank ran at the coordinates that order gives it:
    tessera-run's trace names each rank by its coordinates, and in pipeline
    plans each rank's events carry the stage its own grid gave it."""
    grid = manifest(plan)["grid"]
    sizes = {a: s for a, s in zip(grid["axes"], grid["shape"]) if a != "mb"}
    order = grid.get("rank_order")
    expected = want if want is not None else default_rank_order(list(sizes))
    # Axes of size 1 left out of --rank-order come first (slowest).
    expected = [a for a in default_rank_order(list(sizes))
                if a not in expected] + list(expected)
    print(f"rank order: {order} (expected {expected})")
    if order != expected:
        return False
    with open(trace) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("name") == "process_name"}
    stages = {}
    for e in events:
        if e.get("ph") == "X":
            stages.setdefault(e["pid"], set()).add(e["tid"])
    ok = len(names) == math.prod(sizes.values())
    for rank in sorted(names):
        coords, rem = {}, rank
        for a in reversed(order):
            coords[a] = rem % sizes[a]
            rem //= sizes[a]
        want_name = f"rank {rank} (" + " ".join(
            f"{a}={coords[a]}" for a in sizes) + ")"
        good = names[rank] == want_name
        if "pp" in sizes and stages.get(rank, {coords["pp"]}) != {coords["pp"]}:
            good = False
        print(f"   {names[rank]}: stages {sorted(stages.get(rank, []))}"
              + ("" if good else f"  expected {want_name}"))
        ok = ok and good
    return ok


def check_vocab_split(plan):
    """The plan splits the token embedding and the LM head over tp."""
    vocab = manifest(plan).get("vocab_parallel", {})
    params = sorted(vocab.get("params", []))
    print(f"vocab-parallel: enabled={vocab.get('enabled')} params={params}")
    want = {"tok_emb.weight", "head.weight", "head.bias"}
    if not vocab.get("enabled") or not want <= set(params):
        print(f"expected {sorted(want)} to be split over the vocabulary")
        return False
    return True


def check_vocab_traffic(args, work, on_metrics):
    """bytes_sent of vocab-parallel on minus off = its all-reduces."""
    if args.dp != 1:
        raise SystemExit("--traffic with --vocab-parallel needs --dp 1")
    cfg = get_config(args.config)
    n, d, tp = cfg["batch"] * cfg["seq"], cfg["d_model"], args.tp
    off_m, _ = tessera(args, work, 1, tp, "vocab-off",
                       ["--vocab-parallel", "off"])
    on, off = bytes_sent(on_metrics), bytes_sent(off_m)
    extra = 2 * (tp - 1) / tp * (2 * n * d * 4 + 5 * n * 8)
    good = len(on) == STEPS and len(off) == STEPS and all(
        abs((a - b) - extra) <= 1e-9 * a for a, b in zip(on, off))
    print(f"bytes_sent per rank per step: vocab-parallel on {on}, off {off}; "
          f"expected on - off = {extra} {'ok' if good else 'MISMATCH'}")
    return good


def step_metric(metrics, key):
    with open(metrics) as f:
        return [json.loads(line)[key] for line in f]


def check_sp_traffic(args, work, sp_metrics):
    """Sequence parallelism's collective volumes, exactly.

    megatron: the same plan without --sp on the same tp grid; Megatron-SP
    replaces each activation all-reduce of TP (2(n-1)/n X) by a
    reduce-scatter and an all-gather ((n-1)/n X each), so bytes_sent may
    differ only by the gradients of the parameters that now see sequence
    shards: an all-reduce of every 1-D tp-replicated parameter (LayerNorm
    scales and biases, row-parallel biases) and an all-gather of the
    position embedding [S, D].
    ulysses: the all-to-all volume is the paper's (Jacobs et al. 2023): per
    layer, 4 all-to-alls forward (Q, K, V in, O out) and 4 backward, each
    moving (P-1)/P of a rank's [B/dp, S/P, D/tp] activation.
    """
    cfg = get_config(args.config)
    B, S, D, L = cfg["batch"], cfg["seq"], cfg["d_model"], cfg["layers"]
    ok = True
    if args.sp == "megatron":
        n = args.tp
        tp_m, _ = tessera(args, work, args.dp, args.tp, "no-sp",
                          vocab_flags(args))
        plan = manifest(os.path.join(work, "parallel.tsr"))
        extra = 0.0
        for a in plan["arguments"]:
            if a["role"] != "param":
                continue
            split = any(f["axes"] for dim in a["layout"] for f in dim)
            numel = int(np.prod(a["shape"]))
            if split:
                continue
            if len(a["shape"]) == 1:
                extra += 2 * (n - 1) / n * 4 * numel
            elif a["shape"][0] == S:
                extra += (n - 1) / n * 4 * numel
        on, off = step_metric(sp_metrics, "bytes_sent"), step_metric(
            tp_m, "bytes_sent")
        ag = step_metric(sp_metrics, "bytes_all_gather")[0]
        rs = step_metric(sp_metrics, "bytes_reduce_scatter")[0]
        ar_tp = step_metric(tp_m, "bytes_all_reduce")[0]
        ok = all(abs((a - b) - extra) <= 1e-9 * a for a, b in zip(on, off))
        print(f"bytes_sent per rank per step: megatron-sp {on[0]:.0f} "
              f"(all-gather {ag:.0f} + reduce-scatter {rs:.0f}), tp {off[0]:.0f} "
              f"(all-reduce {ar_tp:.0f}); expected difference = sequence-"
              f"sharded parameter gradients {extra:.0f}: "
              f"{'ok' if ok else 'MISMATCH'}")
    elif args.sp == "ulysses":
        P = args.sp_size
        want = (2 * 4 * L * (P - 1) / P * (B // args.dp) * (S // P) *
                (D // args.tp) * 4)
        got = step_metric(sp_metrics, "bytes_all_to_all")
        ok = all(abs(g - want) <= 1e-9 * want for g in got)
        print(f"all-to-all bytes per rank per step: {got[0]:.0f}, the paper's "
              f"8 L (P-1)/P (B/dp)(S/P)(D/tp) x 4 bytes = {want:.0f}: "
              f"{'ok' if ok else 'MISMATCH'}")
    return ok


def sp_flags(args):
    """The --sp flags of the parallel runs (none without --sp)."""
    if not args.sp:
        return []
    return ["--sp", args.sp] + (["--sp-size", str(args.sp_size)]
                                if args.sp != "megatron" else [])


def sp_ranks(args):
    """Ranks of the sp axis (1 without one: megatron shards over tp)."""
    return args.sp_size if args.sp in ("ulysses", "ring") else 1


def check_pipeline_traffic(args, pipe_m, base_m, pp, dp, tp, m, v):
    """A pipeline run's collective bytes per step vs the same grid without
    pp (`base_m`, rank 0's metrics; that run is SPMD, so every rank moves
    the same bytes). `pipe_m` holds every rank's bytes per kind
    ("bytes_<kind>_per_rank"). For every kind but send, the sum over the
    pipeline run's ranks must equal the run without pp's sum over its
    ranks: each collective runs once on the ranks of the stage that holds
    its layer (activation collectives once per micro-batch on 1/M of the
    batch, gradient reductions once per step on the accumulated sum). The
    sends must add exactly the stage boundaries' traffic: pp*v - 1
    boundaries between consecutive chunks, each crossed by M forward
    activations and M activation gradients of [B/dp/M, S/s, D] fp32 per
    rank of a stage (dp*tp*sp ranks; s: the sequence split of the residual
    stream between layers, --sp-size for ulysses and ring, tp for megatron,
    else 1)."""
    cfg = get_config(args.config)
    B, S, D = cfg["batch"], cfg["seq"], cfg["d_model"]
    sp = sp_ranks(args)
    stage_ranks = dp * tp * sp
    seq_split = sp if sp > 1 else (tp if args.sp == "megatron" else 1)
    act = (B // dp // m) * (S // seq_split) * D * 4
    boundary = 2 * m * stage_ranks * act
    pipeline_sends = (pp * v - 1) * boundary
    ok = True
    kinds = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
             "send")
    with open(pipe_m) as f:
        pipe = [json.loads(line) for line in f]
    with open(base_m) as f:
        base = [json.loads(line) for line in f]
    for step, (p, b) in enumerate(zip(pipe, base)):
        for kind in kinds:
            got = sum(p[f"bytes_{kind}_per_rank"])
            want = stage_ranks * b[f"bytes_{kind}"]
            if kind == "send":
                want += pipeline_sends
            good = abs(got - want) <= 1e-9 * max(want, 1.0)
            if step == 0 or not good:
                extra = (f" = {stage_ranks} x {b['bytes_' + kind]:.0f} without "
                         f"pp + {pp * v - 1} boundaries x 2 x M={m} x "
                         f"{stage_ranks} ranks x {act} activation bytes"
                         if kind == "send" else
                         f" = {stage_ranks} ranks x {b['bytes_' + kind]:.0f} "
                         f"without pp")
                print(f"   step {step} {kind}: sum over ranks {got:.0f}, "
                      f"expected {want:.0f}{extra}: "
                      f"{'ok' if good else 'MISMATCH'}")
            ok = ok and good
    return ok


def vocab_flags(args):
    return ["--vocab-parallel", args.vocab_parallel] if args.vocab_parallel \
        else []


def order_list(args):
    return args.rank_order.split(",") if args.rank_order else None


def check_losses(a, b, rtol):
    ok, rows = compare.compare_losses(compare.load_losses(a),
                                      compare.load_losses(b), rtol=rtol)
    for row in rows:
        print("  ", row)
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["torch", "parallel", "pipeline",
                                    "recompute", "precision", "auto", "cuda",
                                    "cuda-dist", "loss-scale"])
    p.add_argument("--collectives", choices=["nccl", "mpi"], default="nccl",
                   help="cuda-dist: the transport of --backend cuda")
    p.add_argument("--build", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], required=True)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--rtol", type=float)
    p.add_argument("--grid", default="2x1x1", help="pipeline: PPxDPxTP")
    p.add_argument("--micro-batches", default=None,
                   help="pipeline: the list (default 1,4,8); precision: M")
    p.add_argument("--schedules", default=None,
                   help="pipeline: the list (default gpipe,1f1b,"
                        "interleaved); precision: one kind (default 1f1b)")
    p.add_argument("--recompute", choices=["selective", "full"], default=None,
                   help="precision: recomputation of the low-precision run")
    p.add_argument("--loss-scale", default=None,
                   help="precision: --loss-scale of the fp16 run")
    p.add_argument("--pp", type=int, default=1, help="recompute: stages")
    p.add_argument("--zero", type=int, default=0,
                   help="parallel: ZeRO stage of the parallel run")
    p.add_argument("--sp", choices=["megatron", "ulysses", "ring"],
                   default=None,
                   help="parallel, pipeline: sequence parallelism")
    p.add_argument("--sp-size", type=int, default=1)
    p.add_argument("--rank-order", default=None,
                   help="parallel, pipeline: tessera-partition --rank-order "
                        "for the parallel runs; the check also fails unless "
                        "the manifest and every rank's coordinates follow it")
    p.add_argument("--vocab-parallel", choices=["on", "off"], default=None,
                   help="parallel: vocab parallelism of the parallel run")
    p.add_argument("--bucket-mb", default=None,
                   help="parallel: gradient bucket size of the parallel run")
    p.add_argument("--modes", default="selective,full",
                   help="recompute: the --recompute modes to check")
    p.add_argument("--traffic", action="store_true",
                   help="precision: check bytes_sent against the fp32 run; "
                        "parallel with --sp: the sp volumes; pipeline: "
                        "the bytes against the grid without pp")
    p.add_argument("--devices", type=int, default=4,
                   help="auto: ranks the plan search plans for")
    p.add_argument("--cluster", default=None,
                   help="auto: cluster JSON (default: calibrate this machine "
                        "with tessera-run --calibrate-quick first)")
    p.add_argument("--precision-type", choices=["bf16", "fp16"],
                   default=None,
                   help="precision: the low-precision type to check")
    p.add_argument("--initial-loss-scale", default=str(2 ** 32),
                   help="loss-scale: the overflowing initial scale")
    p.add_argument("--steps-total", type=int, default=30,
                   help="loss-scale: steps of the metrics run")
    p.add_argument("--same-as-static", action="store_true",
                   help="loss-scale: instead, the default dynamic scale "
                        "without overflow vs --loss-scale 1024")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="tessera-e2e-") as work:
        if args.mode == "recompute":
            ok = check_recompute(args, work)
            print("PASS" if ok else "FAIL")
            return 0 if ok else 1
        if args.mode in ("cuda", "cuda-dist"):
            ok = (check_cuda if args.mode == "cuda" else check_cuda_dist)(
                args, work)
            if ok is SKIPPED:
                return SKIPPED
            print("PASS" if ok else "FAIL")
            return 0 if ok else 1
        if args.mode == "precision":
            args.precision_type = args.precision_type or "bf16"
            ok = check_precision(args, work)
            print("PASS" if ok else "FAIL")
            return 0 if ok else 1
        if args.mode == "loss-scale":
            ok = check_loss_scale(args, work)
            print("PASS" if ok else "FAIL")
            return 0 if ok else 1
        if args.mode == "auto":
            ok = check_auto(args, work)
            print("PASS" if ok else "FAIL")
            return 0 if ok else 1
        serial_m, serial_w = tessera(args, work, 1, 1, "serial")
        if args.mode == "torch":
            ref = os.path.join(work, "torch.json")
            run(["/usr/bin/python3", os.path.join(HERE, "torch_reference.py"),
                 "--config", args.config, "--data", CORPUS, "--steps", str(STEPS),
                 "--optimizer", args.optimizer, "--lr", str(LR[args.optimizer]),
                 "--out", ref, "-q"])
            rtol = args.rtol or 1e-4
            print(f"losses: tessera serial vs PyTorch (rtol {rtol})")
            ok = check_losses(serial_m, ref, rtol)
        elif args.mode == "pipeline":
            rtol = args.rtol or 1e-5
            pp, dp, tp = (int(x) for x in args.grid.split("x"))
            ok = True
            runs = 0
            if args.traffic:
                base_m, _ = tessera(args, work, dp, tp, "no-pp",
                                    sp_flags(args))
            for m in (int(x) for x in
                      (args.micro_batches or "1,4,8").split(",")):
                for schedule in (args.schedules
                                 or "gpipe,1f1b,interleaved").split(","):
                    extra = ["--pp", str(pp), "--micro-batches", str(m),
                             "--schedule", schedule]
                    if schedule == "interleaved":
                        if m % pp != 0:
                            print(f"(interleaved needs M % P == 0: skip M={m})")
                            continue
                        extra += ["--virtual-stages", "2"]
                    if args.rank_order:
                        extra += ["--rank-order", args.rank_order]
                    extra += sp_flags(args)
                    tag = f"pp{pp}xdp{dp}xtp{tp}.m{m}.{schedule}"
                    if args.zero:
                        extra += ["--zero", str(args.zero)]
                        tag += f".z{args.zero}"
                    if args.sp:
                        tag += f".sp-{args.sp}{sp_ranks(args)}"
                    par_m, par_w = tessera(args, work, dp, tp, tag, extra, pp,
                                           trace=True)
                    print(f"{tag} vs serial:")
                    ok = check_run(args, par_m, par_w, serial_m, serial_w,
                                   rtol, tag) and ok
                    ok = check_rank_order(
                        os.path.join(work, f"{tag}.tsr"),
                        os.path.join(work, f"{tag}.trace.json"),
                        order_list(args)) and ok
                    if args.traffic:
                        v = 2 if schedule == "interleaved" else 1
                        print(f"{tag} collective bytes per step vs the same "
                              f"grid without pp:")
                        ok = check_pipeline_traffic(args, par_m, base_m, pp,
                                                    dp, tp, m, v) and ok
                    runs += 1
            print(f"{runs} pipeline runs compared")
        else:
            rtol = args.rtol or 1e-5
            zero = ["--zero", str(args.zero)] if args.zero else []
            what = f"dp{args.dp} x tp{args.tp}" + (
                f" ZeRO-{args.zero}" if args.zero else "")
            if args.bucket_mb is not None:
                zero += ["--bucket-mb", args.bucket_mb]
                what += f" buckets of {args.bucket_mb} MiB"
            if args.vocab_parallel:
                zero += ["--vocab-parallel", args.vocab_parallel]
                what += f" vocab-parallel {args.vocab_parallel}"
            if args.sp:
                zero += ["--sp", args.sp]
                what += f" sp {args.sp}"
                if args.sp != "megatron":
                    zero += ["--sp-size", str(args.sp_size)]
                    what += f" x{args.sp_size}"
            if args.rank_order:
                zero += ["--rank-order", args.rank_order]
                what += f" rank order {args.rank_order}"
            par_m, par_w = tessera(args, work, args.dp, args.tp, "parallel",
                                   zero, trace=bool(args.rank_order))
            print(f"losses: {what} vs serial (rtol {rtol})")
            ok = check_run(args, par_m, par_w, serial_m, serial_w, rtol, what)
            if args.rank_order:
                ok = check_rank_order(os.path.join(work, "parallel.tsr"),
                                      os.path.join(work, "parallel.trace.json"),
                                      order_list(args)) and ok
            if args.vocab_parallel == "on" and args.tp > 1:
                ok = check_vocab_split(os.path.join(work, "parallel.tsr")) and ok
                if args.traffic and not args.sp:
                    ok = check_vocab_traffic(args, work, par_m) and ok
            if args.sp and args.traffic:
                ok = check_sp_traffic(args, work, par_m) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def peak_bytes(metrics):
    """The largest per-rank measured peak over the run's steps."""
    with open(metrics) as f:
        return max(max(json.loads(line)["peak_bytes"]) for line in f)


def check_recompute(args, work):
    """Each --recompute mode vs no recomputation on the same grid: exact,
    and (without pipelining, whose values live on the heap) a lower
    measured peak, so the rewrite did drop activations."""
    grid = f"dp{args.dp} x tp{args.tp} x pp{args.pp}"
    pipe = ["--pp", str(args.pp), "--micro-batches", "4"] if args.pp > 1 else []
    base_m, base_w = tessera(args, work, args.dp, args.tp, "no-recompute",
                             pipe, args.pp)
    ok = True
    for mode in args.modes.split(","):
        m, w = tessera(args, work, args.dp, args.tp, f"recompute-{mode}",
                       ["--recompute", mode] + pipe, args.pp)
        print(f"losses: {grid} --recompute {mode} vs none (exact)")
        ok = check_losses(m, base_m, 0.0) and ok
        wok, problems, errs = compare.compare_weights(
            compare.load_weights(w), compare.load_weights(base_w), rtol=0.0)
        print(f"weights: --recompute {mode} vs none (exact), {len(errs)} "
              f"tensors, worst first:")
        for problem in problems:
            print("   problem:", problem)
        for err, name, _ in errs[:3]:
            print(f"   {err:.3e}  {name}")
        ok = ok and wok
        if args.pp == 1:
            base_peak, peak = peak_bytes(base_m), peak_bytes(m)
            print(f"peak bytes per rank: --recompute {mode} {peak} vs none "
                  f"{base_peak}")
            if not peak < base_peak:
                print("   problem: recomputation did not lower the peak")
                ok = False
    return ok


def bytes_sent(metrics):
    with open(metrics) as f:
        return [json.loads(line)["bytes_sent"] for line in f]


def check_precision(args, work):
    """bf16 (or fp16) on dp x tp vs fp32 serial (losses); optionally the DP
    traffic."""
    rtol = args.rtol or 2e-2
    low = args.precision_type
    grid = f"dp{args.dp} x tp{args.tp}"
    sp = []
    if args.sp:
        sp = ["--sp", args.sp] + (["--sp-size", str(args.sp_size)]
                                  if args.sp != "megatron" else [])
        grid += f" sp {args.sp}" + (f" x{args.sp_size}"
                                    if args.sp != "megatron" else "")
    # The plan's shape (pipeline, sp), shared by the fp32 traffic run.
    pipe = []
    if args.pp > 1 or args.micro_batches:
        m = int(args.micro_batches or 4)
        schedule = args.schedules or "1f1b"
        pipe = ["--pp", str(args.pp), "--micro-batches", str(m),
                "--schedule", schedule]
        if schedule == "interleaved":
            pipe += ["--virtual-stages", "2"]
        grid += f" x pp{args.pp} ({schedule}, M={m})"
    shape = sp + pipe
    extra = []
    if args.recompute:
        extra += ["--recompute", args.recompute]
        grid += f" recompute {args.recompute}"
    if args.loss_scale:
        extra += ["--loss-scale", args.loss_scale]
        grid += f" loss scale {args.loss_scale}"
    zero = ["--zero", str(args.zero)] if args.zero else []
    serial_m, serial_w = tessera(args, work, 1, 1, "fp32-serial")
    bf16_m, bf16_w = tessera(args, work, args.dp, args.tp, low,
                             ["--precision", low] + shape + extra + zero,
                             args.pp)
    print(f"losses: {low} {grid}{' ZeRO-%d' % args.zero if zero else ''} "
          f"vs fp32 serial (rtol {rtol})")
    ok = check_losses(bf16_m, serial_m, rtol)
    if zero:
        # ZeRO reduce-scatters the same low-precision gradient and unscales
        # the shard: the same arithmetic as the run without it.
        plain_m, plain_w = tessera(args, work, args.dp, args.tp, low + "-z0",
                                   ["--precision", low] + shape + extra,
                                   args.pp)
        print(f"{low} {grid} ZeRO-{args.zero} vs without ZeRO:")
        ok = check_run(args, bf16_m, bf16_w, plain_m, plain_w, 1e-5,
                       f"{low} ZeRO-{args.zero} (reference: {low} without "
                       "ZeRO)") and ok
        if low == "fp16":
            # fp16's weights stay within rtol of fp32's too (bf16's do not,
            # with or without ZeRO: 7e-2 on a LayerNorm bias after 8 steps).
            print(f"{low} {grid} ZeRO-{args.zero} vs fp32 serial:")
            ok = check_run(args, bf16_m, bf16_w, serial_m, serial_w, rtol,
                           f"{low} ZeRO-{args.zero}") and ok
    if not args.traffic:
        return ok
    fp32_m, _ = tessera(args, work, args.dp, args.tp, "fp32", shape, args.pp)
    if pipe:
        full, half = bytes_sent(fp32_m), bytes_sent(bf16_m)
        want = [b / 2 for b in full]
        good = len(half) == STEPS and all(
            abs(h - w) <= 1e-9 * w for h, w in zip(half, want))
        print(f"bytes_sent of rank 0 (stage 0) per step: fp32 {full}, {low} "
              f"{half}; expected fp32 / 2 = {want} "
              f"{'ok' if good else 'MISMATCH'}")
        return ok and good
    n = args.dp
    loss = 2 * (n - 1) / n * 4
    full, half = bytes_sent(fp32_m), bytes_sent(bf16_m)
    want = [loss + (b - loss) / 2 for b in full]
    good = len(half) == STEPS and all(
        abs(h - w) <= 1e-9 * w for h, w in zip(half, want))
    print(f"bytes_sent per rank per step: fp32 {full}, {low} {half}; expected "
          f"{low} = loss all-reduce {loss} + (fp32 - {loss}) / 2 = {want} "
          f"{'ok' if good else 'MISMATCH'}")
    if low == "fp16":
        bf16 = bytes_sent(tessera(args, work, args.dp, args.tp, "bf16",
                                  ["--precision", "bf16"])[0])
        same = bf16 == half
        print(f"bytes_sent per rank per step: bf16 {bf16}, fp16 {half} "
              f"{'equal' if same else 'MISMATCH'}")
        good = good and same
    return ok and good


def check_same_as_static(args, work):
    """Dynamic loss scaling at its default initial scale (1024) without an
    overflow: losses and final weights bit-identical to --loss-scale 1024."""
    dyn_m, dyn_w = tessera(args, work, args.dp, args.tp, "dynamic",
                           ["--precision", "fp16"])
    sta_m, sta_w = tessera(args, work, args.dp, args.tp, "static",
                           ["--precision", "fp16", "--loss-scale", "1024"])
    dyn, sta = step_metric(dyn_m, "loss"), step_metric(sta_m, "loss")
    skipped = step_metric(dyn_m, "skipped")
    a, b = compare.load_weights(dyn_w), compare.load_weights(sta_w)
    same_w = sorted(a) == sorted(b) and all(
        a[n].tobytes() == b[n].tobytes() for n in a)
    ok = dyn == sta and same_w and not any(skipped)
    print(f"dynamic (default initial 1024) vs static 1024: losses "
          f"{'identical' if dyn == sta else 'DIFFER'} ({dyn} / {sta}), "
          f"skipped {skipped}, final weights "
          f"{'bit-identical' if same_w else 'DIFFER'}")
    return ok


def check_loss_scale(args, work):
    """fp16 dynamic loss scaling with an overflowing initial scale: skipped
    steps, the scale halving, state bit-identical, then training."""
    if args.same_as_static:
        return check_same_as_static(args, work)
    initial = float(args.initial_loss_scale)
    ranks = args.dp * args.tp
    sp = []
    if args.sp:
        sp = ["--sp", args.sp]
        if args.sp != "megatron":
            sp += ["--sp-size", str(args.sp_size)]
            ranks *= args.sp_size
    # A pipeline (--pp P [--micro-batches M --schedules KIND]): each stage
    # sums its own gradients' found-inf terms and the pp all-reduce makes
    # the skip decision the same on every stage.
    if args.pp > 1 or args.micro_batches:
        sp += ["--pp", str(args.pp), "--micro-batches",
               str(args.micro_batches or 4), "--schedule",
               args.schedules or "1f1b"]
        ranks *= args.pp
    plan = os.path.join(work, "ls.tsr")
    run([os.path.join(args.build, "tools", "tessera-partition",
                      "tessera-partition"),
         model_path(args.config), "-o", plan, "--dp", str(args.dp), "--tp",
         str(args.tp), "--optimizer", args.optimizer, "--lr",
         str(LR[args.optimizer]), "--precision", "fp16",
         "--initial-loss-scale", args.initial_loss_scale] + sp)
    tessera_run = os.path.join(args.build, "tools", "tessera-run",
                               "tessera-run")

    def train(steps, extra):
        run(["mpirun", "-np", str(ranks), tessera_run, plan, "--data", CORPUS,
             "--steps", str(steps), "--log-every", "0"] + extra)

    metrics = os.path.join(work, "ls.jsonl")
    train(args.steps_total, ["--metrics", metrics])
    with open(metrics) as f:
        recs = [json.loads(line) for line in f]
    for r in recs:
        print(f"  step {r['step']}: loss {r['loss']:.4f} loss_scale "
              f"{r['loss_scale']:g} skipped {r['skipped']}")
    k = 0
    while k < len(recs) and recs[k]["skipped"] == 1:
        k += 1
    ok = 1 <= k < len(recs) - 4
    print(f"leading skipped steps: {k} (want 1 <= k < {len(recs) - 4}) "
          f"{'ok' if ok else 'BAD'}")
    halving = all(recs[s]["loss_scale"] == initial / 2 ** (s + 1)
                  for s in range(k))
    print(f"scale after skipped step s is S/2^(s+1): "
          f"{'ok' if halving else 'BAD'}")
    trained = recs[-1]["loss"] < recs[min(k, len(recs) - 1)]["loss"]
    print(f"training after the skips: loss {recs[min(k, len(recs) - 1)]['loss']:.4f}"
          f" (step {k}) -> {recs[-1]['loss']:.4f} (last) "
          f"{'decreases' if trained else 'DOES NOT DECREASE'}")
    ok = ok and halving and trained
    if k < 1:
        return False

    before, after = os.path.join(work, "s0"), os.path.join(work, "sk")
    train(0, ["--save-state", before])
    train(k, ["--save-state", after])
    scale_names = ("loss_scale", "loss_scale.good_steps",
                   "loss_scale.skipped_steps")
    for r in range(ranks):
        a = compare.load_weights(f"{before}.rank{r}.safetensors")
        b = compare.load_weights(f"{after}.rank{r}.safetensors")
        names = sorted(n for n in a if n not in scale_names)
        same = sorted(b) == sorted(a) and all(
            a[n].shape == b[n].shape and a[n].tobytes() == b[n].tobytes()
            for n in names)
        want = {"loss_scale": initial / 2 ** k, "loss_scale.good_steps": 0,
                "loss_scale.skipped_steps": k}
        got = {n: float(b[n].reshape(-1)[0]) for n in scale_names}
        print(f"rank {r}: {len(names)} param/opt_state shards after {k} "
              f"skipped steps {'bit-identical' if same else 'DIFFER'} to the "
              f"initial ones; scale state {got} "
              f"{'ok' if got == want else f'BAD (want {want})'}")
        ok = ok and same and got == want
    return ok


def check_auto(args, work):
    """The plan the search chooses for --devices ranks on the calibrated
    cluster runs and matches the serial run (issue 6, "Equivalence")."""
    cluster = args.cluster
    if cluster is None:
        cluster = os.path.join(work, f"cpu-{args.devices}.json")
        run(["mpirun", "-np", str(args.devices),
             os.path.join(args.build, "tools", "tessera-run", "tessera-run"),
             "--calibrate", cluster, "--calibrate-quick"])
    plan = os.path.join(work, "auto.tsr")
    report = os.path.join(work, "auto.json")
    run([os.path.join(args.build, "tools", "tessera-partition",
                      "tessera-partition"),
         model_path(args.config), "-o", plan, "--devices", str(args.devices),
         "--cluster", cluster, "--explain-json", report,
         "--optimizer", args.optimizer, "--lr", str(LR[args.optimizer])])
    with open(report) as f:
        chosen = json.load(f)["chosen"]
    print(f"chosen plan for {args.devices} devices: {chosen['flags']} "
          f"({chosen['ranks']} ranks), predicted step "
          f"{chosen['prediction']['step_seconds'] * 1e3:.3f} ms")
    metrics = os.path.join(work, "auto.jsonl")
    weights = os.path.join(work, "auto.safetensors")
    run(["mpirun", "-np", str(chosen["ranks"]),
         os.path.join(args.build, "tools", "tessera-run", "tessera-run"), plan,
         "--data", CORPUS, "--steps", str(STEPS), "--metrics", metrics,
         "--save-weights", weights])
    serial_m, serial_w = tessera(args, work, 1, 1, "serial")
    rtol = args.rtol or 1e-5
    return check_run(args, metrics, weights, serial_m, serial_w, rtol,
                     "chosen plan " + chosen["flags"])


def check_run(args, par_m, par_w, serial_m, serial_w, rtol, what):
    """Losses and final weights of a parallel run vs the serial run."""
    ok = check_losses(par_m, serial_m, rtol)
    # Under AdamW the key third of in_proj_bias has an exactly-zero
    # true gradient (softmax is shift-invariant), so its update is
    # rounding noise amplified by Adam's normalisation and differs
    # between any two summation orders; the loss does not depend on
    # it. Compare the Q and V thirds of that bias, not the K third.
    par, ser = compare.load_weights(par_w), compare.load_weights(serial_w)
    if args.optimizer == "adamw":
        par, ser = drop_key_bias(par), drop_key_bias(ser)
    wok, problems, errs = compare.compare_weights(par, ser, rtol=rtol)
    print(f"weights: {what} vs serial (rtol {rtol}), "
          f"{len(errs)} tensors, worst first:")
    for problem in problems:
        print("   problem:", problem)
    for err, name, _ in errs[:3]:
        print(f"   {err:.3e}  {name}")
    return ok and wok


if __name__ == "__main__":
    sys.exit(main())

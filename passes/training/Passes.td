//===- Passes.td - training passes -------------------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_TRAINING_PASSES
#define TESSERA_PASSES_TRAINING_PASSES

include "mlir/Pass/PassBase.td"

def BuildTrainStep : Pass<"tsr-build-train-step", "::mlir::ModuleOp"> {
  let summary = "Turn @forward into @train_step: loss, backward, optimizer.";
  let description = [{
    Replaces `func.func @forward` (arguments with `tsr.role` = "param",
    "frozen", "input" or "rng_step", the importer's step counter of
    training-mode dropout; result: the logits, [B, S, V] or [N, V] float) by
    `func.func @train_step`:

    - arguments: the trainable params, the frozen params (both keep
      `tsr.role`, `tsr.name` and `tsr.init`), the optimizer state
      (`tsr.role = "opt_state"`, zero-initialised by the runtime: per param
      `<name>.exp_avg` and `<name>.exp_avg_sq`, then one scalar `step`, for
      AdamW; nothing for SGD; then, when @forward has an "rng_step"
      argument, the scalar `rng.step` that `tsr.dropout` reads, replicated
      and checkpointed like AdamW's step), the token ids (the first integer input,
      `tsr.role = "tokens"`; other inputs keep "input") and the `labels`
      (i64, the tokens' shape, `tsr.role = "labels"`) and, last, the
      learning rate (`tsr.role = "hyper"`, `tsr.name = "lr"`, `tensor<f32>`:
      a runtime input the runtime sets before every step from its LR
      schedule, initially the manifest's `optimizer.lr`; replicated, never
      returned);
    - results: the loss (`tsr.role = "loss"`, `tensor<f32>`), the updated
      params (`tsr.role = "param"`, `tsr.name`) and the updated optimizer
      state (same names as the arguments; `step' = step + 1`,
      `rng.step' = rng.step + 1`).

    The loss is the mean cross-entropy over all N = B·S tokens, kept as the
    sum times a separate constant 1/N (`tsr.mul`), so that data-parallel
    partitioning can make the sum partial while the constant stays the
    global count. The backward pass walks the forward ops in reverse and asks
    each op for its cotangents through `GradientOpInterface` (seed
    dloss = 1; values used several times accumulate with `tsr.add`); only
    values that depend on a trainable param are differentiated. Each param is
    updated by one `tsr.sgd_update` or `tsr.adamw_update` (torch.optim
    semantics; a param the loss does not depend on is returned unchanged).
    Weight decay applies to every param (torch.optim's default) unless
    `exclude-weight-decay=1`: then biases (names ending in ".bias") and
    1-D params (LayerNorm/RMSNorm weights) get `weight_decay = 0`, as
    Megatron-LM's default parameter groups (`--weight-decay-exclude` of
    tessera-partition).
    The new function is cleaned up by folding, dead-code elimination and CSE.

    Before:
    ```mlir
    func.func @forward(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.init = ...},
                       %tok: tensor<2x3xi64> {tsr.name = "tokens", tsr.role = "input"})
        -> (tensor<2x3x4xf32> {tsr.name = "logits"}) {
      %x = tsr.gather %w, %tok : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
      return %x : tensor<2x3x4xf32>
    }
    ```
    After (`optimizer=sgd`):
    ```mlir
    func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.init = ...},
                          %tok: tensor<2x3xi64> {tsr.name = "tokens", tsr.role = "tokens"},
                          %lab: tensor<2x3xi64> {tsr.name = "labels", tsr.role = "labels"},
                          %lr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper"})
        -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"},
            tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}) {
      %x = tsr.gather %w, %tok : ...
      %l2 = tsr.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
      %y = tsr.reshape %lab : tensor<2x3xi64> -> tensor<6xi64>
      %sum = tsr.cross_entropy %l2, %y : tensor<6x4xf32>, tensor<6xi64> -> tensor<f32>
      %inv = tsr.constant dense<0.166666672> : tensor<f32>
      %loss = tsr.mul %sum, %inv : tensor<f32>
      %dsum = tsr.mul %one, %inv : tensor<f32>
      %dl2 = tsr.cross_entropy_grad %l2, %y, %dsum : ...
      %dx = tsr.reshape %dl2 : tensor<6x4xf32> -> tensor<2x3x4xf32>
      %dw = tsr.gather_grad %tok, %dx : ... -> tensor<8x4xf32>
      %w1 = tsr.sgd_update %w, %dw, %lr {weight_decay = 0.0 : f32} : tensor<8x4xf32>
      return %loss, %w1 : tensor<f32>, tensor<8x4xf32>
    }
    ```
    Errors (no crash) when there is no `@forward` (or `@train_step` already
    exists), the forward returns nothing or non-float logits, an argument has
    an unknown role, or an op's gradient rule fails (the rule names the op
    and its location).

    Runs on the module: it creates the function `@train_step` from
    `@forward`.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "Optimizer: sgd or adamw (torch.optim semantics)">,
    Option<"lr", "lr", "double", /*default=*/"1e-3",
           "Default (peak) learning rate, checked >= 0; the step reads the "
           "learning rate from its \"hyper\" argument \"lr\" at run time">,
    Option<"excludeWeightDecay", "exclude-weight-decay", "bool",
           /*default=*/"false",
           "No weight decay for biases and 1-D params (Megatron-LM); default: "
           "decay every param (torch.optim)">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"-1.0",
           "Weight decay; negative means the optimizer's default (adamw "
           "0.01, sgd 0)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
  ];
  let dependentDialects = ["::tessera::tsr::TsrDialect",
                           "::mlir::func::FuncDialect"];
}

def BuildEvalStep : Pass<"tsr-build-eval-step", "::mlir::ModuleOp"> {
  let summary = "Add @eval_step: @train_step's loss only, forward only.";
  let description = [{
    Clones `func.func @train_step` (normally the partitioned one, so the
    clone keeps every sharding and collective of the training plan and runs
    on the same ranks with the same state tensors) into `func.func
    @eval_step`, which computes the validation loss as PyTorch does after
    `model.eval()`:

    - its only result is `@train_step`'s `tsr.role = "loss"` result (same
      attributes);
    - every op with the `IdentityInInference` trait (`tsr.dropout`) is
      replaced by its operand 0: the identity, whatever the op is;
    - everything the loss does not read is erased (dead-code elimination of
      side-effect-free ops: the backward, the optimizer updates, the
      gradient all-reduces and reduce-scatters); the collectives that feed
      the loss (tensor-parallel all-reduces, ZeRO-3's parameter all-gathers,
      the loss's data-parallel all-reduce) stay;
    - the arguments nothing reads any more (optimizer state, ...) are
      removed; the others keep `tsr.role`, `tsr.name` and `tsr.sharding`, by
      which the artifact's manifest maps them to `@train_step`'s (manifest
      key `"eval"`).

    `@train_step` is unchanged. The lowering (`tsr-lower-to-runtime`,
    `tsr-plan-memory`) then handles both functions; `tessera-partition` runs
    this pass first in its lowering stage for plans without pipeline
    parallelism (pipeline plans have no `@train_step` after
    `tsr-pipeline-split` and get no evaluation function).

    Before:
    ```mlir
    func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                          %m: tensor<8x4xf32> {tsr.name = "w.exp_avg", tsr.role = "opt_state"}, ...,
                          %tok: ..., %lab: ...)
        -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"}, tensor<8x4xf32> {...}, ...) {
      ... forward, %loss = tsr.mul %sum, %inv ...
      ... backward, %w1, %m1, %v1 = tsr.adamw_update ...
      return %loss, %w1, ... : ...
    }
    ```
    After (added beside it):
    ```mlir
    func.func @eval_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"},
                         %tok: ..., %lab: ...)
        -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"}) {
      ... forward, %loss = tsr.mul %sum, %inv ...
      return %loss : tensor<f32>
    }
    ```
    Errors (no crash): no `@train_step`, a symbol `@eval_step` already
    exists, `@train_step` has no loss result or more than one block, or an
    `IdentityInInference` op does not have one result of its operand 0's
    type.
  }];
  let dependentDialects = ["::tessera::tsr::TsrDialect",
                           "::mlir::func::FuncDialect"];
}

def Recompute : Pass<"tsr-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recomputation: drop forward activations and "
                "recompute them in backward, per layer.";
  let description = [{
    Runs on the `@train_step` of `tsr-build-train-step` (forward ops tagged
    `tsr.fwd`, backward ops `tsr.bwd`), before sharding. The forward ops are
    cut into *layers* at the points where exactly one activation crosses (a
    transformer's residual stream; common/layers/LayerCuts.h); constants
    (ops computed only from constants) and step arguments do not count.

    - `mode=full` (Chen et al., 2016, "Training Deep Nets with Sublinear
      Memory Cost"; Megatron-LM's full recomputation): for every layer but
      the last (whose backward starts right after its forward), the layer's
      forward ops that the backward reads are cloned in front of the first
      backward op that reads them, and the backward reads the clones. Only
      the activation entering each layer (the checkpoint) stays live from
      forward to backward.
    - `mode=selective` (Korthikanti et al., 2022, "Reducing Activation
      Recomputation in Large Transformer Models"): each fused
      `tsr.attention` and the ops that only carry its output on (same
      element count, every non-constant operand in the set: the transpose
      and reshape back to [B, S, D]) are recomputed from their saved Q, K
      and V. The attention kernel never materialises the S² scores
      (FlashAttention), so what selective drops is the attention output,
      its relayout and its log-sum-exp: the part of the attention block
      whose recomputation costs one attention forward and no matmul with a
      weight.
    - `mode=none`: nothing changes.

    The clones are tagged `tsr.bwd` with the id of the forward op they copy
    (so pipeline stages keep them with that op's backward) and compute
    bit-identical values, so training results do not change. The forward
    values that backward no longer reads die at their last forward use.

    Example (`mode=full`, schematic): before, `%h = tsr.gelu %x {tsr.fwd = 3}`
    is read by `tsr.gelu_grad %x, %dh {tsr.bwd = 3}`; after, the backward
    reads `%h2 = tsr.gelu %x {tsr.bwd = 3}` made right before it.

    Errors: an unknown `mode`; no `@train_step` with forward/backward tags
    (run `tsr-build-train-step` first).

    Runs on the module: it rewrites the function `@train_step`, found by its
    symbol, and fails when the module has none.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"full\"",
           "none, selective or full">,
  ];
  let dependentDialects = ["::tessera::tsr::TsrDialect"];
}

def MixedPrecision : Pass<"tsr-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "bf16/fp16 forward/backward with fp32 master weights and "
                "optimizer state (fp16: static loss scaling).";
  let description = [{
    Mixed-precision training (Micikevicius et al., 2018; Megatron-LM's bf16
    mode) as a rewrite of the f32 `@train_step` of `tsr-build-train-step`.
    Runs before `tsr-recompute` and sharding.

    - Each f32 step argument that the forward/backward reads (role "param",
      "frozen" or "input") is converted once to bf16 (`tsr.convert`, in front
      of its first reader); the forward and backward read the bf16 copy.
    - Every op with a bf16 operand is retyped: its f32 results become bf16
      and its other f32 operands are converted (constants once, right after
      their definition). Ops with no bf16 operand keep f32, so the loss
      chain (`cross_entropy`'s summed loss times 1/N) and the AdamW step
      counter stay f32.
    - Precision policy: `tsr.cross_entropy` keeps its f32 scalar result (the
      kernel accumulates in f32) and `tsr.cross_entropy_grad` its f32 seed;
      kernels whose numerics need f32 (layer-norm statistics, softmax,
      cross-entropy) compute in f32 internally and round their bf16
      results.
    - The optimizer updates (`tsr.sgd_update`, `tsr.adamw_update`) stay f32
      on the f32 master weights and optimizer state; each bf16 gradient is
      converted to f32 right before its update. Because `tsr.convert` is not
      linear in the sharding rules (a partial sum does not pass through it),
      `tsr-sharding-partition` inserts a data-parallel gradient's
      all-reduce on the bf16 value, halving its bytes.
    - Step arguments and results keep their types (f32 params, optimizer
      state and loss), so the artifact's manifest and checkpoints do not
      change.

    Shapes are unchanged; only element types change (f32 -> bf16 inside the
    step). `precision=fp32` leaves the step unchanged.

    Before (schematic, sgd):
    ```mlir
    %y = tsr.matmul %x, %w : tensor<8x64xf32>, tensor<64x64xf32> -> tensor<8x64xf32>
    ...
    %dw = tsr.matmul %x, %dy {transpose_lhs = true} : ... -> tensor<64x64xf32>
    %w1 = tsr.sgd_update %w, %dw, %lr {weight_decay = 0.0 : f32} : tensor<64x64xf32>
    ```
    After (`precision=bf16`):
    ```mlir
    %wb = tsr.convert %w : tensor<64x64xf32> -> tensor<64x64xbf16>
    %y = tsr.matmul %xb, %wb : tensor<8x64xbf16>, tensor<64x64xbf16> -> tensor<8x64xbf16>
    ...
    %dw = tsr.matmul %xb, %dy {transpose_lhs = true} : ... -> tensor<64x64xbf16>
    %dwf = tsr.convert %dw : tensor<64x64xbf16> -> tensor<64x64xf32>
    %w1 = tsr.sgd_update %w, %dwf, %lr {weight_decay = 0.0 : f32} : tensor<64x64xf32>
    ```
    `precision=fp16` retypes to f16 exactly as bf16 does and adds static
    loss scaling (Micikevicius et al., 2018), since fp16's range is narrow
    (largest finite 65504, smallest subnormal 2^-24): the f32 seed of each
    `tsr.cross_entropy_grad` (the 1 x 1/N cotangent of the loss) is
    multiplied by `loss-scale` S (an f32 `tsr.mul` by a constant), so the
    whole backward computes S times the gradients in f16; each gradient is
    multiplied by 1/S in f32 right after its convert to f32 and before its
    optimizer update, so the data-parallel all-reduce (inserted before the
    convert) still carries f16 and the update sees the true gradient:
    ```mlir
    %s = tsr.constant dense<1.024000e+03> : tensor<f32>
    %seed = tsr.mul %c, %s : tensor<f32>
    %dx = tsr.cross_entropy_grad %logits, %labels, %seed : ...
    ...
    %dwf = tsr.convert %dw : tensor<64x64xf16> -> tensor<64x64xf32>
    %inv = tsr.constant dense<9.765625E-4> : tensor<f32>   // once per step
    %invb = tsr.broadcast %inv : tensor<f32> -> tensor<64x64xf32>
    %dwu = tsr.mul %dwf, %invb : tensor<64x64xf32>
    %w1 = tsr.sgd_update %w, %dwu {...} : tensor<64x64xf32>
    ```
    S is a power of two, so both products are exact (barring f16 overflow
    or underflow). With `loss-scale` set the scale is static: a gradient
    beyond 65504 / S overflows to inf and the step is not skipped.

    Without `loss-scale`, fp16 uses dynamic loss scaling (Micikevicius et
    al., 2018; Megatron-LM's DynamicGradScaler with hysteresis 1). S is
    training state: three f32 scalar `opt_state` arguments, appended after
    the other optimizer state, and results of the same names,
    `loss_scale` (0, as all optimizer state starts, stands for
    `initial-loss-scale`, default 1024 as the static scale's, so a run is
    bit-identical to a static 1024 one until its first overflow or
    doubling; Megatron-LM's 2^32 or torch.cuda.amp's 2^16 would skip a
    small model's first steps), `loss_scale.good_steps` (clean steps since S
    last changed) and `loss_scale.skipped_steps` (steps skipped so far).
    The step computes `S = loss_scale == 0 ? initial : loss_scale`, seeds
    the backward with seed * S and unscales each gradient by 1/S (one
    `tsr.div`); right before each update it sums the f32 gradient
    (`tsr.reduce_sum` over all axes: finite iff every element is, since
    f16 values cannot overflow an f32 sum and inf - inf is NaN; each sum
    reads its own f32 convert of the gradient). After the last sum,
    `ok = (sum of sums) * 0 == 0`; the updates (with their converts and
    unscales) move after it, each followed by the selects of its results:
    every param and opt_state result becomes `tsr.select ok, new, old` (a
    skipped step leaves parameters and optimizer state, AdamW's step count
    included, bit-identical; the update's outputs are transient), and
    ```
    clean:   good' = good + 1; good' == window ? (S' = 2S, good' = 0) : S' = S
    skipped: S' = max(S / 2, min), good' = 0, skipped' = skipped + 1
    ```
    Only existing ops (reduce_sum, add, mul, equal, select, max, div) are
    used, so the sharding passes decide the collectives: the sum of a
    gradient split over tp/sp/dp (ZeRO) is partial and is all-reduced
    before the `tsr.equal`, and every rank of the grid takes the same
    decision.
    ```mlir
    %unset = tsr.equal %ls, %c0 : tensor<f32> -> tensor<i1>
    %S = tsr.select %unset, %c1024, %ls : tensor<i1>, tensor<f32>
    %seed = tsr.mul %c, %S : tensor<f32>
    ...
    %t = tsr.reduce_sum %dwf {axes = array<i64: 0, 1>} : tensor<64x64xf32> -> tensor<f32>
    %dwu = tsr.mul %dwf, %invb : tensor<64x64xf32>
    %w1 = tsr.sgd_update %w, %dwu {...} : tensor<64x64xf32>
    ...
    %z = tsr.mul %total, %c0 : tensor<f32>
    %ok = tsr.equal %z, %c0 : tensor<f32> -> tensor<i1>
    %okb = tsr.broadcast %ok : tensor<i1> -> tensor<64x64xi1>
    %w2 = tsr.select %okb, %w1, %w : tensor<64x64xi1>, tensor<64x64xf32>
    ```

    Errors (no crash): an unknown `precision`; `loss-scale` that is not a
    power of two > 0 (with fp16) or that is given with another precision;
    dynamic-scaling options with another precision or with `loss-scale`,
    an `initial-loss-scale` or `min-loss-scale` that is not a power of two
    > 0, `loss-scale-window` < 1, `min-loss-scale` > `initial-loss-scale`;
    fp16 on a step with no `tsr.cross_entropy_grad`; no `@train_step` with
    a body; a `@train_step` that already holds values of the low type; a
    non-`tsr` op that would have to run in bf16/f16.

    Runs on the module: it rewrites the function `@train_step`, found by its
    symbol, and fails when the module has none.
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"bf16\"",
           "Compute type of the forward and backward: fp32 (no change), "
           "bf16 or fp16 (with loss scaling)">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"-1.0",
           "fp16 only: the static loss scale S, a power of two > 0; the "
           "backward seed is multiplied by S and each gradient by 1/S "
           "before its optimizer update. -1 (the default): unset, dynamic "
           "loss scaling with fp16">,
    Option<"initialLossScale", "initial-loss-scale", "double",
           /*default=*/"-1.0",
           "fp16 dynamic loss scaling: the first step's scale, a power of "
           "two > 0. -1 (the default): 1024">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t",
           /*default=*/"1000",
           "fp16 dynamic loss scaling: clean steps in a row after which "
           "the scale doubles, >= 1">,
    Option<"minLossScale", "min-loss-scale", "double", /*default=*/"1.0",
           "fp16 dynamic loss scaling: the scale never halves below this "
           "power of two > 0 (<= the initial scale)">,
  ];
  let dependentDialects = ["::tessera::tsr::TsrDialect"];
}

def ClipGrad : Pass<"tsr-clip-grad", "::mlir::ModuleOp"> {
  let summary = "Gradient clipping by the global L2 norm (clip_grad_norm_).";
  let description = [{
    Clips the gradients of `@train_step`'s optimizer updates by their global
    L2 norm, exactly `torch.nn.utils.clip_grad_norm_(params, C)` (norm type
    2) and Megatron-LM's `--clip-grad C`:

        norm = sqrt(Σ_k Σ_i g_k,i²)          over every update's gradient
        coef = C / max(norm + 1e-6, C)       (= min(1, C / (norm + 1e-6)))
        g_k ← g_k · coef                      before each update

    One `tsr.sum_squares` per update (right after its gradient is made),
    a chain of scalar `tsr.add`s, `tsr.sqrt`, and the coefficient; every
    update (and what reads its results) moves after the coefficient. The
    pre-clip norm becomes a new last result, an f32 scalar with
    `tsr.role = "grad_norm"` and `tsr.name = "grad_norm"` (the runtime
    reports it; tessera-run's metrics write it per step).

    Why global: the pass runs before tsr-sharding-annotate, on global
    values, with one term per parameter. The partitioner then reduces each
    term by `tsr.sum_squares`'s sharding rule: a gradient split over grid
    axes (tp column/row, vocab-parallel, ZeRO's dp shards, sp) gives a term
    partial over exactly those axes, all-reduced as a scalar; a gradient
    replicated over an axis (a LayerNorm weight under tp) gives a
    replicated term, so each replicated parameter counts once (the bug
    class of pytorch#170862 and torchtitan#596). tsr-pipeline-split sums
    the per-stage terms with one scalar all-reduce over pp (the add chain
    is a cross-chunk sum); tsr-zero-sharding computes a sharded gradient's
    term on its dp shard and all-reduces it over dp.

    Order: after tsr-mixed-precision, so the norm is taken on the f32
    gradients each update reads (bf16: widened; fp16: unscaled by 1/S).
    With fp16 dynamic loss scaling a step with an inf/NaN gradient has a
    non-finite norm and is skipped as before (the clipped updates are
    discarded by the skip's selects).

    Before (SGD, one parameter):
    ```mlir
    %p1 = tsr.sgd_update %p, %g {lr = 1.0e-03 : f32, weight_decay = 0.0 : f32}
        : tensor<64x64xf32>
    return %loss, %p1 : tensor<f32>, tensor<64x64xf32>
    ```
    After (`max-norm=1.0`):
    ```mlir
    %t = tsr.sum_squares %g : tensor<64x64xf32> -> tensor<f32>
    %n = tsr.sqrt %t : tensor<f32>
    %d = tsr.max (tsr.add %n, 1e-6), 1.0
    %c = tsr.div 1.0, %d : tensor<f32>
    %cb = tsr.broadcast %c : tensor<f32> -> tensor<64x64xf32>
    %gc = tsr.mul %g, %cb : tensor<64x64xf32>
    %p1 = tsr.sgd_update %p, %gc {...} : tensor<64x64xf32>
    return %loss, %p1, %n : tensor<f32>, tensor<64x64xf32>, tensor<f32>
    ```

    Errors (no crash): `max-norm` negative, NaN or infinite; no
    `@train_step` with a body; a step that already has a "grad_norm"
    result; no optimizer update; a gradient that is not f32. `max-norm=0`
    (the default) leaves the module unchanged.
  }];
  let options = [
    Option<"maxNorm", "max-norm", "double", /*default=*/"0.0",
           "C: the largest global L2 norm of the gradients; larger ones are "
           "scaled down to it. 0 (the default): no clipping">,
  ];
  let dependentDialects = ["::tessera::tsr::TsrDialect"];
}

#endif // TESSERA_PASSES_TRAINING_PASSES

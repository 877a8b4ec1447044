//===- Passes.td - ZeRO passes ----------------------------------*- tablegen -*-===//
//
// ZeRO (Rajbhandari et al., 2020, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models") as a rewrite of the partitioned train step: the
// data-parallel gradient all-reduces become reduce-scatters, the optimizer
// runs on each dp rank's shard, and (stage 3) the parameters themselves are
// stored sharded and all-gathered where they are used. Every collective is a
// visible upstream `shard` op; the runtime has no ZeRO mode.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_ZERO_PASSES
#define TESSERA_PASSES_ZERO_PASSES

include "mlir/Pass/PassBase.td"

def ZeroSharding
    : InterfacePass<"tsr-zero-sharding", "::mlir::FunctionOpInterface"> {
  let summary = "Shard optimizer state, gradients and (stage 3) parameters "
                "over the dp grid axis (ZeRO-1/2/3).";
  let description = [{
    Runs after `tsr-sharding-partition`, on every function of the module that
    holds optimizer updates (`tsr.sgd_update`, `tsr.adamw_update`). The data
    axis is the grid axis named "dp" in the module's `tsr.grid_axes`; D is its
    size in the module's single `shard.grid`. With `stage=0` or D = 1 the pass
    changes nothing.

    For every updated parameter `p` (a function argument with `tsr.role =
    "param"`) whose gradient is a `shard.all_reduce` over grid axes that
    include dp, the pass picks the ZeRO dimension `d`: the first dimension of
    p's local type that is plain in its `tsr.sharding` (not written with
    sub-factors) and whose local size is divisible by D; failing that, the
    first sub-factor of a factored dimension whose local size is divisible
    by D. The dp axis is appended (as the minor axis) to that dimension's (or
    sub-factor's) axes, so that the dp rank with coordinate i holds block i
    of the local (tp) piece, which is what `shard.reduce_scatter` /
    `shard.all_slice` / `shard.all_gather` along `d` over dp produce and
    consume. With local shape [.., n_d, ..] the shard shape is
    [.., n_d / D, ..]. For a sub-factor (e.g. the fused QKV bias, whose only
    dimension is `{3, 64 : [1]}` on tp = 2, local [96] = 3 chunks x 32) the collectives
    act on the local value reshaped to [.., 3, 32, ..] along the sub-factor's
    dimension, with `tsr.reshape`s around them (layout `{3, 64 : [1, 0]}`,
    local [48]), since a contiguous block of [96] would cut across chunks.

    - `stage=1` (ZeRO-1, optimizer state sharded): each dp gradient
      all-reduce is replaced by a `shard.reduce_scatter` over dp along `d`
      (an all-reduce over the remaining axes is kept if it had any); the
      reduce-scatters are placed together right before the first optimizer
      update, i.e. after backward (full local gradients stay live until
      then). Before the update, `shard.all_slice` takes the rank's shard of
      the parameter; the update runs on [.., n_d / D, ..] with the optimizer
      state arguments/results (`tsr.role = "opt_state"`, e.g. AdamW's
      `exp_avg`, `exp_avg_sq`) now of the shard type and sharded over dp in
      their `tsr.sharding` (so the artifact's manifest lays them out as dp
      shards); the new parameter shard is `shard.all_gather`ed over dp and
      returned whole.
    - `stage=2` (ZeRO-2, gradients sharded too): as stage 1, but each
      reduce-scatter replaces the all-reduce in place, right after the
      gradient is final in backward, so the full local gradient dies there.
    - `stage=3` (ZeRO-3 / FSDP, parameters sharded): the parameter argument
      and its result become the dp shard (and so do the manifest's initial
      values and checkpoints, through the layout). Uses of the parameter
      before the first backward op (the first op with a `tsr.bwd`
      attribute) get one `shard.all_gather` placed right before the first
      such use; uses from backward on get a second, separate all-gather
      right before the first backward use (so the forward copy dies after
      forward). A parameter that backward does not read (biases, embedding
      tables) is gathered once. The gradient is reduce-scattered in place
      (as stage 2) and the update runs on the stored shard; nothing is
      gathered after it.

    A parameter without an eligible dimension (no local dimension or
    sub-factor divisible by D) stays dp-replicated with its plain all-reduce and unsharded optimizer state;
    its name is listed in the function attribute `tsr.zero_replicated`
    (printed by `tessera-partition --explain`). The scalar AdamW `step` stays
    replicated. Frozen parameters are not touched.

    Between the dp all-reduce and the update the gradient may pass through
    (each op used once, by the next):
    - data movement over other grid axes, which makes the gradient whole:
      `tsr.reshape`, `shard.all_gather` over non-dp axes, sum
      `shard.all_reduce` over non-dp axes. Under sequence parallelism a
      sequence-sharded parameter (e.g. a learned position embedding) has
      its gradient all-reduced over dp on its sequence shard and then
      all-gathered over sp (ring, Ulysses) or tp (Megatron-SP). A sum over
      dp commutes with that movement, so the all-reduce loses the dp axis
      (it is erased if no axis is left) and the reduce-scatter over dp
      follows the movement, on the whole gradient. The reduce-scatter then
      moves (N−1)/N·B, B the parameter's whole bytes, where the plain
      all-reduce moved 2(N−1)/N·B/K on the 1/K sequence shard.
    - elementwise ops (the `Elementwise` trait) nearest the update: mixed
      precision's `tsr.convert` of the reduced bf16/fp16 gradient to f32
      and fp16's 1/S unscale (`tsr.mul` by a broadcast scalar). The
      low-precision gradient is reduce-scattered (the same bytes as
      without ZeRO: half of fp32's), the elementwise ops run on the shard
      (moved after the reduce-scatter when needed), and their other
      operands are cut to the shard by `shard.all_slice` over dp (local,
      no traffic).
    - a `tsr.convert`, or an elementwise op whose other operand is
      uniform (made from rank-0 values only, e.g. the broadcast 1/S),
      among the data movement (mixed precision with SP converts and
      unscales the sequence shard before the all-gather): it moves after
      the reduce-scatter, a uniform operand made again at the shard's
      shape, and the movement and the reduce-scatter carry the reduced
      (bf16/fp16) type.

    A gradient with no dp collective on that path that a backward op
    (`tsr.bwd`) made is one the partition computed whole on every dp rank
    (it gathered the op's inputs over dp, e.g. an LM head's weight
    gradient under Megatron-SP when that is cheaper): it is sliced over dp
    (`shard.all_slice`, local) right before the update.

    Pipelines (`tsr-sharding-annotate{pp=P micro-batches=M}`, run before
    `tsr-pipeline-split`): the gradient's all-reduce is over dp and the
    micro-batch axis mb; it is split into the mb accumulation (an all-reduce
    over mb, summed by the runtime across micro-batches) and the
    reduce-scatter over dp, which runs once per step in the stage's apply
    function. Each stage thus shards over dp the optimizer state (and, with
    stage 3, the parameters) of the parameters it holds, as Megatron-LM's
    distributed optimizer does. ZeRO-2's gradients are accumulated whole
    over the micro-batches and reduce-scattered once per step (as in
    Megatron-LM; reduce-scattering each micro-batch's gradient would move
    M times the bytes), so under a pipeline it saves no gradient memory
    over ZeRO-1. ZeRO-3's all-gathers read only the parameter: the split
    puts each in the chunk and phase of its readers, so a stage gathers
    its parameters per micro-batch, before each forward and (for
    parameters backward reads) before each backward, and frees them after.
    Keeping them gathered across the step's micro-batches (torchtitan's
    FSDP + PP with `reshard_after_forward=False`) would cut the traffic by
    M but hold every whole parameter of the stage for the whole step,
    which is ZeRO-2's parameter memory; `--zero 2` is that choice here.
    DeepSpeed's pipeline engine does not support ZeRO-3 (nor ZeRO-2) at all.
    Per rank and step a stage's ZeRO-3 traffic is M·(N−1)/N·B per
    all-gather of a parameter of B bytes plus one reduce-scatter.

    Ring volumes per rank and step (B = a parameter's local bytes, N = D):
    all-reduce 2(N−1)/N·B; stages 1 and 2: reduce-scatter (N−1)/N·B +
    all-gather (N−1)/N·B, the same; stage 3: (N−1)/N·B per all-gather (two
    for a parameter that backward reads, 3(N−1)/N·B in all with the
    reduce-scatter, i.e. 1.5× data parallelism).

    Before (dp = 2, AdamW):
    ```mlir
    %g = shard.all_reduce %gl on @grid grid_axes = [0]
        : tensor<64x32xf32> -> tensor<64x32xf32>
    ...
    %p1, %m1, %v1 = tsr.adamw_update %p, %g, %m, %v, %t, %lr {...}
        : tensor<64x32xf32>, tensor<f32>
    ```
    After `stage=1` (`%m`, `%v` are now tensor<32x32xf32> arguments):
    ```mlir
    %gs = shard.reduce_scatter %gl on @grid grid_axes = [0] scatter_axis = 0
        : tensor<64x32xf32> -> tensor<32x32xf32>
    %ps = shard.all_slice %p on @grid grid_axes = [0] slice_axis = 0
        : tensor<64x32xf32> -> tensor<32x32xf32>
    %p1s, %m1, %v1 = tsr.adamw_update %ps, %gs, %m, %v, %t, %lr {...}
        : tensor<32x32xf32>, tensor<f32>
    %p1 = shard.all_gather %p1s on @grid grid_axes = [0] gather_axis = 0
        : tensor<32x32xf32> -> tensor<64x32xf32>
    ```

    A whole-tensor reduction that reads the gradient besides the update
    (an op whose sharding rule makes its rank-0 result partial over every
    split of its operand, e.g. tsr-clip-grad's `tsr.sum_squares`) reads
    the dp shard after the rewrite, and its scalar is all-reduced over dp;
    a uniform operand of the gradient's elementwise ops (fp16's broadcast
    1/S, the clip coefficient) is made again at the shard's shape. Ops the
    rewrite moved are put back in dependence order (a stable topological
    sort).

    Errors (naming the parameter): a dp gradient all-reduce or an optimizer
    state argument with uses other than the update and such reductions; a
    reduction that reads the gradient before it is whole over the non-dp
    axes; an updated parameter,
    or an optimizer state, that is not a function argument; a parameter
    whose gradient is not a dp all-reduce (the pass must run after
    `tsr-sharding-partition`), or that is already split over dp; a module
    without a "dp" grid axis or without a single `shard.grid`; `stage` > 3.

    Runs on each function (`FunctionOpInterface`; nest it, e.g.
    `builtin.module(func.func(tsr-zero-sharding))`); the grid (the single
    `shard.grid`, `tsr.grid_axes`) is the enclosing module's.
  }];
  let options = [
    Option<"stage", "stage", "int64_t", "0",
           "ZeRO stage: 0 (off), 1 (optimizer state), 2 (+ gradients), "
           "3 (+ parameters)">
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

#endif // TESSERA_PASSES_ZERO_PASSES

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
    replicated. Frozen parameters are not touched. Under mixed precision the
    gradient reaches the update through a `tsr.convert` of the all-reduced
    (bf16) gradient: the bf16 gradient is reduce-scattered and the convert
    applies to the shard (moved after the reduce-scatter when needed).

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
    %p1, %m1, %v1 = tsr.adamw_update %p, %g, %m, %v, %t {...}
        : tensor<64x32xf32>, tensor<f32>
    ```
    After `stage=1` (`%m`, `%v` are now tensor<32x32xf32> arguments):
    ```mlir
    %gs = shard.reduce_scatter %gl on @grid grid_axes = [0] scatter_axis = 0
        : tensor<64x32xf32> -> tensor<32x32xf32>
    %ps = shard.all_slice %p on @grid grid_axes = [0] slice_axis = 0
        : tensor<64x32xf32> -> tensor<32x32xf32>
    %p1s, %m1, %v1 = tsr.adamw_update %ps, %gs, %m, %v, %t {...}
        : tensor<32x32xf32>, tensor<f32>
    %p1 = shard.all_gather %p1s on @grid grid_axes = [0] gather_axis = 0
        : tensor<32x32xf32> -> tensor<64x32xf32>
    ```

    Errors (naming the parameter): a dp gradient all-reduce or an optimizer
    state argument with uses other than the update; an updated parameter,
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

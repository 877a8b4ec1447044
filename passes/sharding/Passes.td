//===- Passes.td - sharding passes ------------------------------*- tablegen -*-===//
//
// annotate (from the plan) -> propagate -> partition. The representation is
// `#tsr.sharding` (dialects/tsr/TsrAttrs.td): per tensor dimension, grid axes
// or sub-factors each with their own axes, plus partial-sum axes.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_SHARDING_PASSES
#define TESSERA_PASSES_SHARDING_PASSES

include "mlir/Pass/PassBase.td"

def ShardingAnnotate : Pass<"tsr-sharding-annotate", "::mlir::ModuleOp"> {
  let summary = "Create the dp x tp grid and annotate the train step's "
                "arguments with Megatron-style shardings.";
  let description = [{
    Adds `shard.grid @grid(shape = DPxTP)` and the module attribute
    `tsr.grid_axes = ["dp", "tp"]` (axis 0 = dp, axis 1 = tp), then gives
    every argument and result of each function with `tsr.role` argument
    attributes a `tsr.sharding`:

    - `tokens`/`labels`: dimension 0 (the batch) split over dp;
    - parameters, recognised from the IR's structure (never from names) among
      the forward ops (those not depending on the labels):
      * a linear layer (`tsr.matmul` with a parameter weight, possibly through
        `tsr.transpose`) whose output (plus a broadcast bias) is cut by
        `tsr.slice`s into k equal chunks on the last dim is a fused attention
        projection: its weight and bias are column-split by heads, as k chunks
        each split over tp (`{3, D : [1]}`), so every rank gets its heads of
        Q, K and V; the head count comes from the reshape that splits the
        chunk's features into [heads, head_dim];
      * the first linear layer reached from those slices is the attention
        output projection: row-split (split over tp along its input
        features); its bias is replicated;
      * separate Q, K and V projections (Hugging Face's q_proj, k_proj,
        v_proj): the three distinct linear layers that the query, key and
        value of a [B, H, S, Dh] `tsr.attention` are each computed from
        (through reshapes, transposes and the rotary embedding's
        elementwise ops, not through another linear layer) are
        column-split, and the first linear layer after the attention
        (o_proj) is row-split. Heads are split whole: tp must divide the
        query heads and, under grouped-query attention (K/V with Hkv < H
        heads), the Hkv key/value heads (Megatron-LM's rule; error naming
        the K or V projection otherwise);
      * a linear layer whose output reaches another linear layer through
        shape-preserving ops only (bias add, GELU, ...) is an MLP: the first
        is column-split (weight and bias), the second row-split (bias
        replicated); not when the second's weight is also an embedding
        table (an LM head tied to the token embedding, e.g. BERT's MLM
        decoder), which vocab parallelism splits instead;
      * with `vocab-parallel` (the default) and tp > 1, vocab parallelism
        (Megatron-LM, Shoeybi et al. 2019): the table read by a forward
        `tsr.gather` (the token embedding) is split over tp along its
        vocabulary rows, and the linear layer whose output reaches the
        logits of `tsr.cross_entropy` (the LM head, N = vocabulary) is
        column-split with its bias; both get the argument attribute
        `tsr.vocab_parallel`. The lookup's result is then partial over tp
        (all-reduced by the partitioner) and the cross-entropy reduces over
        the split vocabulary inside its kernel, so the logits are never
        gathered. Error (naming the parameter) when tp does not divide the
        vocabulary;
      * everything else (positional embedding, LayerNorms, frozen values, and
        the embedding and LM head without vocab parallelism) is replicated;
    - optimizer state `<param>.exp_avg`/`.exp_avg_sq` gets its parameter's
      sharding, `step` is replicated;
    - results named like an argument get that argument's sharding; the loss
      is replicated.

    With `pp` > 1 or `micro-batches` > 1 (pipeline parallelism) the grid is
    `dp x tp x pp x mb` with axes ["dp", "tp", "pp", "mb"]: `mb` is a virtual
    axis over the micro-batches of one step (not ranks), and the batch is
    split over [dp, mb] (dp major), so that every gradient and the loss
    become partial sums over `mb` that `tsr-pipeline-split` turns into
    accumulations over micro-batches.
    Errors (naming the parameter and sizes) when tp does not divide a fused
    attention projection's head count, the query or key/value heads of
    separate projections, or an MLP's hidden size, or dp does not divide the
    batch.

    Before:
    ```mlir
    func.func @train_step(%w: tensor<256x64xf32> {tsr.role = "param", tsr.name = "fc1.weight"}, ...,
                          %tokens: tensor<8x64xi64> {tsr.role = "tokens", tsr.name = "tokens"}, ...)
    ```
    After (`dp=2 tp=2`):
    ```mlir
    module attributes {tsr.grid_axes = ["dp", "tp"]} {
      shard.grid @grid(shape = 2x2)
      func.func @train_step(%w: tensor<256x64xf32> {..., tsr.sharding = #tsr.sharding<@grid, [[1], []]>}, ...,
                            %tokens: tensor<8x64xi64> {..., tsr.sharding = #tsr.sharding<@grid, [[0], []]>}, ...)
    ```

    Runs on the module: it creates the module's `shard.grid` and
    `tsr.grid_axes`, which the later passes read.
  }];
  let options = [
    Option<"dp", "dp", "int64_t", "1", "Data-parallel ranks (grid axis 0).">,
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel ranks (grid axis 1).">,
    Option<"pp", "pp", "int64_t", "1",
           "Pipeline stages (grid axis 2, only present when pp > 1 or "
           "micro-batches > 1).">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step (virtual grid axis 3, `mb`): the batch of "
           "each dp rank is split into this many micro-batches.">,
    Option<"vocabParallel", "vocab-parallel", "bool", "true",
           "With tp > 1, split the embedding table and the LM head (with "
           "its bias) over tp along the vocabulary (Megatron-LM's "
           "vocab-parallel embedding and cross-entropy); off: both are "
           "replicated.">,
    Option<"sp", "sp", "std::string", "\"none\"",
           "Sequence parallelism: none; megatron (Korthikanti et al. 2022: "
           "the residual stream, LayerNorms and dropout sharded along the "
           "sequence over tp, by tsr.sharding_constraint on every layer "
           "boundary); ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023: the "
           "sequence over a new `sp` axis, attention head-sharded over it "
           "by constraints on its Q, K and V, so the partitioner inserts "
           "the all-to-alls); ring (Liu et al. 2023: the sequence striped "
           "over `sp`, every tsr.attention given ring_size = sp-size).">,
    Option<"spSize", "sp-size", "int64_t", "1",
           "Ranks of the `sp` grid axis (ulysses, ring); the axis follows "
           "dp and tp (and pp, mb).">,
    ListOption<"shardings", "shardings", "std::string",
               "Parameter shardings pinned by the plan, each NAME=LAYOUT "
               "(layout in --explain's notation)">,
  ];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

def ShardingPropagate
    : InterfacePass<"tsr-sharding-propagate", "::mlir::FunctionOpInterface"> {
  let summary = "Give every tsr op result a sharding from the annotated "
                "arguments.";
  let description = [{
    Propagates factor shardings through every op using only its
    `ShardingRuleOpInterface` rule, forward and backward, to a fixpoint:
    each op's factors take the proposals of its operands' and results'
    known dimensions (cut at the factor boundaries, so a [S, B, D] -> [S, B*H,
    Dh] reshape carries a head split from D to the merged B*H dim); on a
    conflict fixed layouts win first (step arguments, then
    `tsr.sharding_constraint` results: a parameter's split is never given
    up for an activation's), then the most split proposal (ties: results,
    then operands in order), so parameter and activation splits are kept
    rather than replicated; factors that need replication stay whole. An
    elementwise one-operand op on a step argument (`tsr-mixed-precision`'s
    bf16/f16 copy of a parameter, which the forward and backward read
    instead of it) gives its result the argument's layout and firmness, so
    the parameter's split still wins at the ops that read the copy. A
    dimension takes a proposal when it is unknown, or when the proposal
    splits it more ways over axes its other dimensions do not use (splits
    only grow, so the fixpoint exists). Dimensions still unknown at the end
    are replicated. A final pass in program order computes partial sums: a
    result is partial over the axes of the split factors it reduces (a
    row-parallel matmul's output over tp, a weight gradient contracting the
    batch over dp, the loss over dp), recorded only where the value is
    stored as the op computes it, and partial sums pass through ops that are
    linear in them (rule's `linearGroups`), except a partial sum that
    another reader needs whole (it is in none of that reader's linear
    groups): it is reduced for that reader anyway, so every reader reads
    the reduced value and `tsr-sharding-partition` reduces it once
    (tsr-clip-grad's norm term and clipped update of a dp-partial
    gradient share one all-reduce).

    Every op gets `tsr.shardings = [...]`, one `#tsr.sharding` per result.
    Arguments keep their `tsr.sharding`.

    Before:
    ```mlir
    %y = tsr.matmul %x, %w2 {transpose_rhs = true} : tensor<8x64x256xf32>, tensor<64x256xf32> -> tensor<8x64x64xf32>
    ```
    After (%x [[0], [], [1]], %w2 [[], [1]]):
    ```mlir
    %y = tsr.matmul %x, %w2 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []] partial = [1]>]} : ...
    ```

    Runs on each function (`FunctionOpInterface`; nest it, e.g.
    `builtin.module(func.func(tsr-sharding-propagate))`), with the enclosing
    module's grid.
  }];
}

def ShardingPartition
    : InterfacePass<"tsr-sharding-partition", "::mlir::FunctionOpInterface"> {
  let summary = "Rewrite the sharded train step to per-rank shapes with "
                "shard collectives.";
  let description = [{
    For each op in program order, plans it with the same factor resolution
    as propagation (results' shardings first), reshards operands whose
    sharding differs from what the op needs, and rewrites the op to local
    types (local sizes are the row-major product of local sub-factor sizes;
    the rule's `localize` hook rewrites size-bearing attributes, e.g. a
    `tsr.slice` [D:2D] of a 3-chunk dim split over tp becomes [D/tp:2D/tp],
    and records `grid_axes` on ops whose vocabulary is split: the masked
    `tsr.gather` / `tsr.gather_grad` and `tsr.cross_entropy(_grad)`, which
    reduces over its split vocabulary itself (a `reducedByOp` factor), so its
    logits are not gathered); the rule's `recordLayouts` hook gives an op
    the layout its results got (`tsr.dropout` records it as its `layout`,
    so that its kernel finds every local element's global index, the
    micro-batch axis included).
    Resharding is
    - `shard.all_reduce ... reduction = sum` for partial sums, placed right
      after the partial value is produced and only on the path to a consumer
      that cannot take a partial sum (partial sums flow through linear ops);
    - `shard.all_gather` / `shard.all_slice` along the (sub-)factor that is
      split differently, through local `tsr.reshape`s when the dim has
      sub-factors: every dim is cut into the common refinement of its two
      layouts, so {H : [tp]} -> {H : [tp, sp]} is only a slice;
    - `shard.reduce_scatter` where a partial sum is then sliced over the
      same axes (Megatron-SP's row-parallel outputs), `shard.all_to_all`
      where one piece is gathered and another sliced over the same axes
      (Ulysses' sequence <-> head switch); a gather of a `tsr.reshape` is a
      reshape of its input's gather, so every view shares one all-gather
      (also when the target keeps some of the view's splits and only drops
      axes: a pipelined backward's [B·S, D] read of a Megatron-SP
      activation split over mb and tp reuses the forward's gather over tp);
    - `tsr.sharding_constraint` becomes the reshard of its input to its
      layout, and the op is removed (none remains after partition).
    Splat constants are re-splatted at the local shape; other split
    constants are all-sliced. Arguments and results take local types and
    keep `tsr.sharding` (the global -> local mapping the runtime uses to
    slice initial weights); returned values are resharded to the results'
    shardings. No `tsr.shardings` remains on ops.

    Before:
    ```mlir
    %y = tsr.matmul %x, %w2 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []] partial = [1]>]} : tensor<8x64x256xf32>, tensor<64x256xf32> -> tensor<8x64x64xf32>
    %z = tsr.add %y, %b {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<8x64x64xf32>
    ```
    After (dp=2 tp=2):
    ```mlir
    %y = tsr.matmul %x, %w2 : tensor<4x64x128xf32>, tensor<64x128xf32> -> tensor<4x64x64xf32>
    %r = shard.all_reduce %y on @grid grid_axes = [1] : tensor<4x64x64xf32> -> tensor<4x64x64xf32>
    %z = tsr.add %r, %b : tensor<4x64x64xf32>
    ```

    Runs on each function (`FunctionOpInterface`; nest it, e.g.
    `builtin.module(func.func(tsr-sharding-partition))`), with the enclosing
    module's grid.
  }];
  let dependentDialects = ["::mlir::shard::ShardDialect"];
}

#endif // TESSERA_PASSES_SHARDING_PASSES

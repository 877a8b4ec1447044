//===- Passes.td - pipeline-parallelism passes -------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_PIPELINE_PASSES
#define TESSERA_PASSES_PIPELINE_PASSES

include "mlir/Pass/PassBase.td"

def PipelineSplit : Pass<"tsr-pipeline-split", "::mlir::ModuleOp"> {
  let summary = "Split the partitioned @train_step into pipeline chunks with "
                "send/recv, micro-batch accumulation and a checked schedule.";
  let description = [{
    Runs after `tsr-sharding-partition` on a grid `dp x tp x pp x mb`
    (`tsr-sharding-annotate{pp=P micro-batches=M}`). P is the `pp` axis size
    and M the `mb` axis size.

    1. **Micro-batch and apply regions.** Every `shard.all_reduce` over the
       `mb` axis is an accumulation over micro-batches (the gradients and the
       loss are partial sums over the micro-batches): the ops it needs form
       the per-micro-batch region, everything after it the once-per-step
       apply region (the data-parallel all-reduce over the remaining axes and
       the optimizer). A micro-batch op that needs the result of such an
       all-reduce is an error.
    2. **Stages by cost.** The forward ops are cut into *layers* (pipeline
       units) at the points where exactly one activation crosses (a
       transformer's residual stream between blocks); constants and step
       arguments do not count. Each layer costs 3 x its forward FLOPs
       (forward + backward, through `CostOpInterface`) plus 10 FLOP per
       parameter element it owns (the optimizer). The layers are split into
       P·V contiguous chunks minimising the most expensive chunk (linear
       partition), unless `stages` gives the first layer of every chunk.
       Backward ops go to the chunk of the forward op they differentiate
       (`tsr.bwd = i` -> `tsr.fwd = i`, tagged by autodiff); untagged
       backward ops (collectives the partitioner inserted) follow their
       gradient operands' chunk, except that one whose results are larger
       than its operands (an all-gather) runs in its users' chunk when they
       share one earlier chunk, so a boundary carries the smaller tensor
       (Megatron-SP's gather in front of a row-parallel matmul's gradient);
       the apply ops go to
       the chunk whose accumulations they read; an apply op that reads none
       but whose results feed only one chunk's apply ops (e.g. ZeRO's
       `shard.all_slice` of a parameter before its update) to that chunk,
       so a stage reads only the parameters it updates; the others (e.g.
       AdamW's `step + 1`) are replicated into every chunk. An apply op
       that sums values of several chunks linearly (every operand in one
       linear group of its sharding rule, each operand owned by one chunk
       or itself such a sum: fp16 dynamic loss scaling's found-inf
       `tsr.add` chain) is split instead: each `@apply_c` computes it on
       its own chunk's terms with zeros for the others' (its partial),
       and its value is the partial's `shard.all_reduce` over pp where
       another op reads it, so every stage sees the whole sum (one chunk
       per stage only: tessera-partition keeps the static loss scale with
       the interleaved schedule). Untagged
       per-micro-batch ops that read only step arguments, constants and
       each other (values made from parameters by later passes, e.g.
       ZeRO-3's `shard.all_gather`s) are not layers: each goes to the chunk
       of its readers, in the forward phase if a forward op reads it (the
       backward then reads it from the activation set), else in the
       backward phase, so ZeRO-3 gathers a stage's parameters once per
       micro-batch in `@forward_c` and again in `@backward_c`.
    3. **Functions.** Chunk c gets `@forward_c`, `@backward_c` and `@apply_c`
       (contract in `tsrt.pipeline_schedule`'s description). A value made in
       chunk a and used in chunk b travels once per micro-batch by
       `tsrt.send` right after it is made and `tsrt.recv` right before its
       first use, on its own channel (forward values forward, gradients
       backward; a value used by several later chunks is sent to each).
       Forward values that a chunk's backward reads are its activation set
       (`tsrt.saved`). Constants are rematerialised in every function.
    4. **Schedule.** `tsrt.pipeline_schedule` records the chunks and every
       stage's actions for `schedule` (gpipe, 1f1b or interleaved with
       `virtual-stages` V), whose verifier proves send/recv matching,
       deadlock freedom and the in-flight bound.
    `@train_step` stays as a declaration carrying the arguments' and
    results' attributes (the artifact's manifest).

    **Accumulators are f32** (the runtime adds micro-batch results into f32
    buffers only). Under `tsr-mixed-precision` a gradient is bf16/f16, so
    the function that makes it widens each micro-batch's contribution with
    a `tsr.convert` to f32 and returns that as its `tsrt.acc` result:
    the sum over the M micro-batches is formed in f32 and rounded once, as
    in Megatron-LM's fp32 `main_grad` accumulation (Narayanan et al., 2021).
    `@apply_c` receives the f32 accumulator and narrows it back to the
    gradient's own type (`tsr.convert`) before the remaining all-reduce
    (over dp and any other non-`mb` axis) and the ops that read the sum,
    so the step's gradient collectives and the optimizer's input keep the
    types they have without pipelining: a bf16 pipeline plan all-reduces
    its gradients over dp in bf16, the same bytes as the M = 1 bf16 plan.
    (Megatron-LM's `--accumulate-allreduce-grads-in-fp32`, which its
    `arguments.py` turns on for bf16, all-reduces the f32 sum instead:
    twice the bytes, one rounding fewer; its newer `--grad-reduce-in-bf16`
    is the choice made here. The dp reduction adds in f32 per combine and
    rounds each partial sum to bf16, exactly as the non-pipelined plan.)
    f32 values (the loss) are accumulated as they are.

    Errors: a pipeline of more chunks than layers, bad `stages`, a
    parameter (or a value made from parameters only) used by more than one
    chunk (tied weights), a value that
    would travel backwards in its phase.

    Before (P = 2, M = 2, schematic):
    ```mlir
    %h = tsr.gelu %x {tsr.fwd = 3} ...
    %y = tsr.matmul %h, %w {tsr.fwd = 4} ...
    %dh = tsr.matmul %dy, %w {tsr.bwd = 4} ...
    %s = shard.all_reduce %dw on @grid grid_axes = [3] ...
    %w2 = tsr.sgd_update %w, %s, %lr ...
    ```
    After:
    ```mlir
    func.func @forward_0(...) -> (... {tsrt.saved = 0 : i64}) {
      %h = tsr.gelu %x ...
      tsrt.send %h to chunk 1 channel 0 : tensor<2x16x64xf32>
    }
    func.func @forward_1(%w: ... {tsrt.arg = 7 : i64}) -> ... {
      %h = tsrt.recv from chunk 0 channel 0 : tensor<2x16x64xf32>
      %y = tsr.matmul %h, %w ...
    }
    func.func @apply_1(%w: ... {tsrt.arg = 7 : i64},
                       %dw: ... {tsrt.acc = 3 : i64}) -> (... {tsrt.result = 2 : i64})
    // bf16: @backward_1 returns %g = tsr.convert %dw : ...xbf16 -> ...xf32
    // as tsrt.acc = 3; @apply_1 takes the f32 sum and narrows it:
    //   %s = tsr.convert %acc : tensor<64x64xf32> -> tensor<64x64xbf16>
    //   %r = shard.all_reduce %s on @grid grid_axes = [0] : ...xbf16
    tsrt.pipeline_schedule {kind = "1f1b", stages = 2, micro_batches = 2, ...}
    ```

    Runs on the module: it creates the chunk functions, turns `@train_step`
    into a declaration and adds the module's `tsrt.pipeline_schedule`.
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "gpipe, 1f1b or interleaved">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "Model chunks per stage (interleaved 1F1B)">,
    ListOption<"stages", "stages", "int64_t",
               "First layer of every chunk (default: balanced by cost)">,
  ];
  let dependentDialects = ["::tessera::tsrt::TsrtDialect",
                           "::mlir::shard::ShardDialect"];
}

def PrintPipelineSchedule
    : Pass<"tsr-print-pipeline-schedule", "::mlir::ModuleOp"> {
  let summary = "Print every rank's pipeline schedule and its in-flight peak.";
  let description = [{
    For the module's `tsrt.pipeline_schedule` (made by `tsr-pipeline-split`),
    prints to stdout one line per rank of the grid (all axes but `mb`,
    numbered in the IR's axis order: the last axis varies fastest, so with
    `dp x tp x pp` the ranks of one pipeline are consecutive; tessera-run
    numbers world ranks by the artifact's rank order instead, see
    `tessera-partition --rank-order`):

    ```
    pipeline schedule: 1f1b, 2 stages x 1 virtual = 2 chunks, 4 micro-batches
    predicted bubble fraction: (P - 1) / (V*M + P - 1) = 1 / 5 = 0.200
    rank 0 (dp=0 tp=0 pp=0) stage 0: F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3
      peak activation sets 2 (bound 2)
    ```

    `Fc.m` / `Bc.m` is the forward / backward of chunk c on micro-batch m;
    the peak counts activation sets held at once (one per forward not yet
    matched by its backward) and the bound is the schedule's (GPipe: V·M,
    1F1B: min(P − stage, M), interleaved: Megatron-LM's warm-up count + 1).
    The module is not changed. Errors: no `tsrt.pipeline_schedule`, or a
    grid without a `pp` axis.

    Runs on the module: the schedule is the module's
    `tsrt.pipeline_schedule` op, not a function's.
  }];
  let dependentDialects = ["::tessera::tsrt::TsrtDialect"];
}

#endif // TESSERA_PASSES_PIPELINE_PASSES

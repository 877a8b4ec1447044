//===- Passes.td - lowering passes -------------------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_LOWERING_PASSES
#define TESSERA_PASSES_LOWERING_PASSES

include "mlir/Pass/PassBase.td"

def LowerToRuntime : Pass<"tsr-lower-to-runtime", "::mlir::ModuleOp"> {
  let summary = "Lower partitioned tsr + shard IR to the tsrt runtime program.";
  let description = [{
    Every `tsr` op becomes a `tsrt.kernel` named after its mnemonic that
    carries the op's attributes; `tsr.constant` becomes `tsrt.constant`;
    `shard.all_reduce`/`all_gather`/`reduce_scatter`/`all_to_all` become the
    `tsrt` collectives over the same grid axes. The `shard.grid` is replaced
    by module attributes `tsrt.grid_axes` (names, from `tsr.grid_axes`) and
    `tsrt.grid_shape`. Argument and result attributes `tsr.role`/`tsr.name`
    become `tsrt.role`/`tsrt.name`; an op's `tsr.trace` id (tessera-check's
    programs only) becomes `tsrt.trace` on its `tsrt.kernel`, whose results
    `tessera-run --dump-tensors` then writes; everything else `tsr.*` is
    dropped (the artifact's manifest carries shardings and initial values).

    Before:
    ```mlir
    %0 = tsr.matmul %x, %w {transpose_rhs = true} : ...
    %1 = shard.all_reduce %0 on @grid grid_axes = [1] : ...
    ```
    After:
    ```mlir
    %0 = tsrt.kernel "matmul"(%x, %w) {attrs = {transpose_rhs = true}} : ...
    %1 = tsrt.all_reduce %0 {grid_axes = array<i16: 1>, reduction = "sum"} : ...
    ```
    Fails, naming the op, on an op of any other dialect or a collective the
    runtime does not implement (`shard.all_slice`, send/recv).

    Runs on the module: it replaces the module's `shard.grid` by module
    attributes and lowers every function.
  }];
  let dependentDialects = ["::tessera::tsrt::TsrtDialect"];
}

def PlanMemory
    : InterfacePass<"tsr-plan-memory", "::mlir::FunctionOpInterface"> {
  let summary = "Static memory plan: arena offsets and the predicted peak "
                "bytes per rank.";
  let description = [{
    Runs after `tsr-lower-to-runtime`, on every `func.func` of the module.
    All sizes and offsets are in bytes.

    *Liveness* mirrors the runtime's instruction list
    (runtime/executor/Program.cpp) exactly: every op other than
    `tsrt.constant` and `func.return` is one instruction; a value is released
    right after its last reader (right after its definition if nothing reads
    it); constants and returned values are never released. A `reshape`
    kernel's result is a view that shares its operand's storage (the runtime
    resolves it with `allocateResults = false`), so a *buffer* is the storage
    of a value together with all its views, live from its definition to the
    release of its last member. Arguments and constants are not arena
    buffers. Returned values outlive the program, and the arena is reused by
    the next step: results with `tsrt.role` "param" or "opt_state" (the
    updated state, which becomes the next step's arguments) are arena
    buffers live to the end of the program, and the executor copies them
    into the buffers of the arguments they replace right after it (so the
    updated state takes space the activations have freed instead of adding
    to the peak); every other returned value (the loss) is a heap
    allocation.

    *Offsets* come from greedy-by-size best-fit assignment (Pisarchyk & Lee,
    "Efficient Memory Management for Deep Neural Net Inference", 2020,
    section 4.3; the algorithm of TensorFlow Lite's GPU delegate,
    `greedy_by_size_assignment.cc`), implemented in OffsetAllocator.h:
    buffers in decreasing size each take the smallest gap, among buffers
    whose lifetimes intersect theirs, that fits, so freed space is reused.
    Buffer sizes are the runtime's allocation sizes: element bytes rounded
    up to 64 (at least 64); offsets are multiples of 64 and the arena is
    64-byte aligned.

    Results, per instruction op with results: `tsrt.offsets = array<i64:
    ...>`, one offset per result, or -1 for a result that is not placed in
    the arena (a view, or a returned value kept on the heap). Per function: `tsrt.arena_bytes` (the
    largest end offset), `tsrt.arena_live_bytes` (the most bytes of arena
    buffers live at one instruction, a lower bound on any arena; the gap is
    the allocator's fragmentation) and `tsrt.peak_bytes`, the predicted peak bytes one
    rank holds while running the function once, as a dictionary:
    `parameters` (param and frozen arguments), `optimizer_state`,
    `other_arguments` (arguments without one of those roles), `constants`,
    `arena` (activations and gradients), and at the instant the heap of the
    step peaks: `batch` (tokens/labels arguments, allocated before the step
    and freed at their release) and `updated_state` (returned values on the
    heap, allocated at their definition: the loss); `peak` is their sum. The artifact copies
    the prediction of `@train_step` into the manifest's "memory" object.

    Pipeline plans (a module with a `tsrt.pipeline_schedule`: several
    functions per chunk and an activation stash kept across them) keep their
    values on the heap (a value passed to MPI_Isend must outlive the run, and
    the executor holds results across runs), so their functions get no
    arena and no offsets but a heap profile, which the artifact composes
    along each stage's schedule into the stage's peak
    (compiler/artifact/Memory.cpp, docs/PipelineMemory.md):
    `tsrt.heap_profile = {peak, sent, constants}` (`peak`: the most bytes
    the run allocates at one instruction: results from their definition to
    their release, returned ones to the end, receive buffers from the start
    of the run since the MPI path posts every receive first, sent values to
    the end since the pending send holds them, and the kernels' workspaces;
    `sent`: bytes only pending sends hold after the run; `constants`) and
    `tsrt.result_bytes = array<i64: ...>` (per result, the bytes of the
    storage the run allocated for it; 0 for an argument, a constant or a
    storage an earlier result already counts).

    Before:
    ```mlir
    %0 = tsrt.kernel "exp"(%x) : (tensor<64xf32>) -> tensor<64xf32>
    %1 = tsrt.kernel "reshape"(%0) : (tensor<64xf32>) -> tensor<8x8xf32>
    ```
    After:
    ```mlir
    %0 = tsrt.kernel "exp"(%x) {tsrt.offsets = array<i64: 0>} : ...
    %1 = tsrt.kernel "reshape"(%0) {tsrt.offsets = array<i64: -1>} : ...
    ```
    Errors (naming the op or argument): an op that is not a `tsrt`
    instruction (the pass runs after lowering), a function without a single
    block or a `func.return`, and a type the runtime cannot hold (not a
    statically shaped f32/bf16/f16/i64/i1 tensor).

    Runs on each function (`FunctionOpInterface`; nest it, e.g.
    `builtin.module(func.func(tsr-plan-memory))`); whether the program is a
    pipeline plan is read from the enclosing module.
  }];
  let dependentDialects = ["::tessera::tsrt::TsrtDialect"];
}

def OverlapGradientCollectives
    : InterfacePass<"tsr-overlap-gradient-collectives",
                    "::mlir::FunctionOpInterface"> {
  let summary = "Bucket data-parallel gradient all-reduces and overlap them "
                "with backward.";
  let description = [{
    Runs on the `tsrt` program after `tsr-lower-to-runtime` and before
    `tsr-plan-memory`, as PyTorch DDP's gradient buckets (Li et al., 2020,
    "PyTorch Distributed: Experiences on Accelerating Data Parallel
    Training") and Megatron-LM's overlapped gradient reduction do. Every
    `tsrt.all_reduce` over a set of grid axes that contains `dp` is a
    gradient (or loss) reduction. In the order their inputs become ready,
    they are grouped into buckets of the same grid axes, reduction and
    element type until a bucket holds at least `bucket-mb` MiB (0: one per
    bucket); a bucket also closes before a collective whose input is ready
    only after a use of an earlier member's result. Each bucket becomes,
    right after its last input is made: the inputs flattened (`reshape`) and
    joined (`concat`, only for two or more members), one
    `tsrt.all_reduce_start`, and, right before the first use of any member's
    result, `tsrt.wait` and a `slice` + `reshape` per member (two or more
    members) — so the reduction runs while later backward ops compute.
    Bytes sent are unchanged (the ring volume is linear in bytes); memory
    pays one bucket buffer and the copies.

    Pipeline programs (with `tsrt.pipeline_schedule`) and programs without a
    `dp` axis are left unchanged. Errors: a negative `bucket-mb`.

    ```mlir
    %a = tsrt.all_reduce %ga {grid_axes = array<i16: 0>} : tensor<64xf32> -> tensor<64xf32>
    ```
    becomes (`bucket-mb=0`)
    ```mlir
    %s = tsrt.all_reduce_start %ga {grid_axes = array<i16: 0>} : tensor<64xf32> -> tensor<64xf32>
    ...   // later backward ops
    %a = tsrt.wait %s, %ga : tensor<64xf32>, tensor<64xf32> -> tensor<64xf32>
    ```

    Runs on each function (`FunctionOpInterface`; nest it, e.g.
    `builtin.module(func.func(tsr-overlap-gradient-collectives))`); the
    grid's axis names and whether the program is a pipeline plan are read
    from the enclosing module.
  }];
  let options = [
    Option<"bucketMb", "bucket-mb", "double", /*default=*/"25",
           "Bucket size in MiB (0: one collective per bucket)">,
  ];
  let dependentDialects = ["::tessera::tsrt::TsrtDialect"];
}

#endif // TESSERA_PASSES_LOWERING_PASSES

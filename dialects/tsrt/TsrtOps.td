//===- TsrtOps.td - Tessera runtime-program ops ------------*- tablegen -*-===//

#ifndef TESSERA_TSRT_OPS
#define TESSERA_TSRT_OPS

include "dialects/tsrt/TsrtDialect.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"

def Tsrt_KernelOp : Tsrt_Op<"kernel"> {
  let summary = "Calls one backend kernel.";
  let description = [{
    `kernel` names the kernel (the `tsr` op's mnemonic, e.g. "matmul");
    `attrs` are that op's attributes. Operands and results are local tensors.
    The runtime resolves the name to a function once, at load time; an
    unknown name is a load error naming the kernel.

    `attrs` may hold `grid_axes` (array<i16>): the kernel communicates over
    those grid axes itself. The runtime gives it a communicator over them
    (registered like a collective's), its rank there tells the kernel its
    block of a dimension split over them, and the all-reduces it makes are
    counted in the step's collective traffic. Used by the vocab-parallel
    kernels (Megatron-LM, Shoeybi et al. 2019): `gather` / `gather_grad`
    with the table's vocabulary rows split (masked lookup / scatter of the
    ids in the rank's range; the lookup's partial sum is all-reduced by a
    separate `tsrt.all_reduce`), and `cross_entropy` / `cross_entropy_grad`
    with the logits' vocabulary columns split (all-reduce MAX of the row
    max, all-reduce SUM of the sums of exponentials and of the target
    logits; the f64 statistics are a per-instruction workspace of the
    memory plan).

    ```mlir
    %y = tsrt.kernel "matmul"(%x, %w) {attrs = {transpose_rhs = true}}
        : (tensor<4x16x64xf32>, tensor<128x64xf32>) -> tensor<4x16x128xf32>
    %l = tsrt.kernel "cross_entropy"(%logits, %labels)
        {attrs = {grid_axes = array<i16: 1>}}
        : (tensor<512x256xf32>, tensor<512xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<AnyRankedTensor>:$args,
                       DictionaryAttr:$attrs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = [{
    $kernel `(` $args `)` attr-dict `:` functional-type($args, $results)
  }];
  let hasVerifier = 1;
}

def Tsrt_ConstantOp : Tsrt_Op<"constant", [ConstantLike, Pure,
    AllTypesMatch<["value", "result"]>]> {
  let summary = "Constant tensor, materialised once at load time.";
  let description = [{
    ```mlir
    %c = tsrt.constant dense<0.0> : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "attr-dict $value";
}

class Tsrt_CollectiveOp<string mnemonic, dag extraArgs, string doc>
    : Tsrt_Op<mnemonic> {
  let summary = doc;
  let arguments = !con((ins AnyRankedTensor:$input,
                            DenseI16ArrayAttr:$grid_axes), extraArgs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Tsrt_AllReduceOp : Tsrt_CollectiveOp<"all_reduce",
    (ins DefaultValuedStrAttr<StrAttr, "sum">:$reduction),
    "All-reduce over the ranks that differ only in `grid_axes`."> {
  let description = [{
    Ring volume per rank: 2(n−1)/n × tensor bytes.

    ```mlir
    %s = tsrt.all_reduce %g {grid_axes = array<i16: 0>, reduction = "sum"}
        : tensor<64x64xf32> -> tensor<64x64xf32>
    ```
  }];
}

def Tsrt_AllReduceStartOp : Tsrt_CollectiveOp<"all_reduce_start",
    (ins DefaultValuedStrAttr<StrAttr, "sum">:$reduction),
    "Starts a non-blocking all-reduce over `grid_axes`."> {
  let description = [{
    As `tsrt.all_reduce`, but only posts the reduction (MPI_Iallreduce) and
    returns at once, so that computation placed before the matching
    `tsrt.wait` overlaps with it (gradient buckets, as in PyTorch DDP, Li et
    al. 2020, and Megatron-LM). The result's bytes are undefined until
    `tsrt.wait` consumes it; the input must stay unchanged until then,
    which `tsrt.wait` ensures by reading it too. Volume as `all_reduce`.

    ```mlir
    %p = tsrt.all_reduce_start %g {grid_axes = array<i16: 0>}
        : tensor<4096xf32> -> tensor<4096xf32>
    %s = tsrt.wait %p, %g : tensor<4096xf32>, tensor<4096xf32> -> tensor<4096xf32>
    ```
  }];
}

def Tsrt_WaitOp : Tsrt_Op<"wait"> {
  let summary = "Completes a non-blocking collective.";
  let description = [{
    Waits (MPI_Wait) for the `tsrt.all_reduce_start` that made `pending`
    and yields its result, a view of `pending`'s buffer (no copy). `input`
    is that start's input: reading it here keeps its buffer alive and
    unchanged while the collective may still read it. Errors: `pending` is
    not made by a `tsrt.all_reduce_start`, `input` is not that op's input,
    or the result type differs from `pending`'s.
  }];
  let arguments = (ins AnyRankedTensor:$pending, AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $pending `,` $input attr-dict `:` type($pending) `,` type($input) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Tsrt_AllGatherOp : Tsrt_CollectiveOp<"all_gather", (ins I64Attr:$dim),
    "All-gather along tensor dimension `dim` over `grid_axes`."> {
  let description = [{
    Concatenates the ranks' blocks along `dim` in grid order. Volume per rank:
    (n−1)/n × result bytes.

    ```mlir
    %f = tsrt.all_gather %x {grid_axes = array<i16: 1>, dim = 1 : i64}
        : tensor<4x32xf32> -> tensor<4x64xf32>
    ```
  }];
}

def Tsrt_ReduceScatterOp : Tsrt_CollectiveOp<"reduce_scatter",
    (ins I64Attr:$dim),
    "Sum over `grid_axes`, each rank keeping its block along `dim`."> {
  let description = [{
    Volume per rank: (n−1)/n × input bytes.

    ```mlir
    %s = tsrt.reduce_scatter %x {grid_axes = array<i16: 0>, dim = 0 : i64}
        : tensor<64x64xf32> -> tensor<32x64xf32>
    ```
  }];
}

def Tsrt_AllSliceOp : Tsrt_CollectiveOp<"all_slice", (ins I64Attr:$dim),
    "Keeps this rank's block along `dim` over `grid_axes` (no traffic)."> {
  let description = [{
    The inverse of `all_gather` on a value replicated over `grid_axes`: the
    rank with (row-major) coordinate i on those axes keeps block i of n
    along `dim` (n = the product of their sizes; `dim` must be divisible by
    n). Nothing is sent. Lowered from upstream `shard.all_slice` (ZeRO-1/2
    slice each parameter before the sharded update).

    ```mlir
    %s = tsrt.all_slice %p {grid_axes = array<i16: 0>, dim = 0 : i64}
        : tensor<64x64xf32> -> tensor<32x64xf32>
    ```
  }];
}

def Tsrt_AllToAllOp : Tsrt_CollectiveOp<"all_to_all",
    (ins I64Attr:$split_dim, I64Attr:$concat_dim),
    "All-to-all: split `split_dim`, exchange, concatenate `concat_dim`."> {
  let description = [{
    Volume per rank: (n−1)/n × input bytes.

    ```mlir
    %y = tsrt.all_to_all %x {grid_axes = array<i16: 1>, split_dim = 2 : i64,
                             concat_dim = 1 : i64}
        : tensor<4x8x64xf32> -> tensor<4x16x32xf32>
    ```
  }];
}


//===----------------------------------------------------------------------===//
// Pipeline parallelism
//===----------------------------------------------------------------------===//

def Tsrt_SendOp : Tsrt_Op<"send"> {
  let summary = "Sends a value to another pipeline chunk (non-blocking).";
  let description = [{
    Point-to-point transfer of `input` to the rank that runs pipeline chunk
    `chunk` with the same dp/tp coordinates. `channel` identifies the
    transferred value (one send and one `tsrt.recv` per channel); the
    micro-batch is the running action's. The runtime posts an MPI_Isend and
    completes it by the end of the step, so a send never blocks and the
    schedule alone orders the ranks (see `tsrt.pipeline_schedule`).

    ```mlir
    tsrt.send %h to chunk 1 channel 0 : tensor<4x16x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$chunk,
                       I64Attr:$channel);
  let assemblyFormat =
      "$input `to` `chunk` $chunk `channel` $channel attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Tsrt_RecvOp : Tsrt_Op<"recv"> {
  let summary = "Receives a value sent by another pipeline chunk.";
  let description = [{
    The counterpart of `tsrt.send` on `channel` from chunk `chunk`. The
    runtime posts the receive (MPI_Irecv) when the program starts and waits
    for it here.

    ```mlir
    %h = tsrt.recv from chunk 0 channel 0 : tensor<4x16x32xf32>
    ```
  }];
  let arguments = (ins I64Attr:$chunk, I64Attr:$channel);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat =
      "`from` `chunk` $chunk `channel` $channel attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tsrt_PipelineScheduleOp : Tsrt_Op<"pipeline_schedule",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The pipeline's chunks and every stage's order of actions.";
  let description = [{
    A step of pipeline parallelism over `stages` (P) ranks of the `pp` grid
    axis, `virtual_stages` (V) model chunks per stage and `micro_batches` (M)
    micro-batches. Chunk c (0 <= c < P·V) runs on stage c mod P and has three
    functions:
    - `forward[c]`: one micro-batch's forward through the chunk. Arguments
      carry `tsrt.arg = i` (step argument i; tokens/labels are the
      micro-batch's slice). Results carry `tsrt.saved = k` (the chunk's
      activation set, kept for its backward) or `tsrt.acc = j` (added into
      accumulator j, e.g. the partial loss);
    - `backward[c]`: arguments `tsrt.arg = i` or `tsrt.saved = k`; results
      `tsrt.acc = j` (gradient contributions, summed over micro-batches);
    - `apply[c]`: once per step after every action: arguments `tsrt.arg = i`
      or `tsrt.acc = j` (the sum over micro-batches); results
      `tsrt.result = r` (step result r: updated parameter or optimizer
      state, or the loss). It holds the data-parallel all-reduces and the
      optimizer.
    Forward and backward programs exchange values with `tsrt.send` /
    `tsrt.recv`.

    `actions[s]` is stage s's order of actions: `F<chunk>.<micro-batch>` or
    `B<chunk>.<micro-batch>`, space separated. `kind` is "gpipe", "1f1b" or
    "interleaved". The verifier proves that every stage runs exactly its
    chunks' actions with each forward before its backward, that every send
    has exactly one matching recv, that the stages cannot deadlock
    (simulated together, with non-blocking sends and blocking recvs), and
    that no stage holds more activation sets than its schedule allows
    (1F1B: min(P − s, M)). Errors name the stage, chunk and micro-batch.

    Optional per-chunk figures for `--explain`: `flops` (FLOP of forward +
    backward for one micro-batch), `param_bytes`, `first_layer` (index of the
    chunk's first layer, i.e. pipeline unit) and `num_layers` (the model's).

    ```mlir
    tsrt.pipeline_schedule {kind = "1f1b", stages = 2 : i64,
        virtual_stages = 1 : i64, micro_batches = 2 : i64,
        forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1],
        apply = [@apply_0, @apply_1],
        actions = ["F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"]}
    ```
  }];
  let arguments = (ins StrAttr:$kind, I64Attr:$stages, I64Attr:$virtual_stages,
                       I64Attr:$micro_batches, SymbolRefArrayAttr:$forward,
                       SymbolRefArrayAttr:$backward, SymbolRefArrayAttr:$apply,
                       StrArrayAttr:$actions,
                       OptionalAttr<DenseI64ArrayAttr>:$flops,
                       OptionalAttr<DenseI64ArrayAttr>:$param_bytes,
                       OptionalAttr<DenseI64ArrayAttr>:$first_layer,
                       OptionalAttr<I64Attr>:$num_layers);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

#endif // TESSERA_TSRT_OPS

//===- TsrtOps.td - Tessera runtime-program ops ------------*- tablegen -*-===//

#ifndef TESSERA_TSRT_OPS
#define TESSERA_TSRT_OPS

include "dialects/tsrt/TsrtDialect.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Tsrt_KernelOp : Tsrt_Op<"kernel"> {
  let summary = "Calls one backend kernel.";
  let description = [{
    `kernel` names the kernel (the `tsr` op's mnemonic, e.g. "matmul");
    `attrs` are that op's attributes. Operands and results are local tensors.
    The runtime resolves the name to a function once, at load time; an
    unknown name is a load error naming the kernel.

    ```mlir
    %y = tsrt.kernel "matmul"(%x, %w) {attrs = {transpose_rhs = true}}
        : (tensor<4x16x64xf32>, tensor<128x64xf32>) -> tensor<4x16x128xf32>
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

#endif // TESSERA_TSRT_OPS

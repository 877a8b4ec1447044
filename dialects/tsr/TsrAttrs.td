//===- TsrAttrs.td - Tessera tensor dialect attributes -----*- tablegen -*-===//

#ifndef TESSERA_TSR_ATTRS
#define TESSERA_TSR_ATTRS

include "dialects/tsr/TsrDialect.td"
include "mlir/Dialect/Shard/IR/ShardBase.td"

def Tsr_ShardingAttr : AttrDef<Tsr_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a tensor is laid out over a `shard.grid`.";
  let description = [{
    `split_axes[d]` lists the grid axes that split tensor dimension `d`
    (major to minor, as in upstream `shard.sharding`); an empty list means the
    dimension is replicated. `partial_axes` lists grid axes over which the
    tensor is a partial sum: the full value is the sum over those ranks
    (the result of a matmul whose contracting dimension is split).

    `chunks` (optional, one entry per dimension, default 1) describes a
    dimension made of k equal chunks, each split by `split_axes` — a sharding
    of the dimension's minor factor. Rank r's local block is the r-th piece of
    every chunk, in chunk order. PyTorch's fused QKV projection is [.., 3·D]
    with chunks = 3: column-splitting it by heads keeps each rank's Q, K and V
    heads together, so the following Slice ops stay local.

    ```mlir
    // [B, S, D] activations: batch split over axis 0 (dp), partial over tp.
    #tsr.sharding<@grid, [[0], [], []] partial = [1]>
    ```
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$grid,
    "::mlir::shard::GridAxesArrayAttr":$split_axes,
    OptionalArrayRefParameter<"int16_t">:$partial_axes,
    OptionalArrayRefParameter<"int64_t">:$chunks
  );
  let assemblyFormat = [{
    `<` $grid `,` $split_axes (`partial` `=` `[` $partial_axes^ `]`)?
    (`chunks` `=` `[` $chunks^ `]`)? `>`
  }];
  let extraClassDeclaration = [{
    /// True when no dimension is split and nothing is partial.
    bool isReplicated() const;
    /// The grid axes splitting dimension `dim` (empty when replicated).
    ::llvm::ArrayRef<int16_t> getDimAxes(unsigned dim) const;
    /// Number of chunks of dimension `dim` (1 unless `chunks` says more).
    int64_t getDimChunks(unsigned dim) const;
  }];
}

#endif // TESSERA_TSR_ATTRS

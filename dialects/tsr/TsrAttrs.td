//===- TsrAttrs.td - Tessera tensor dialect attributes -----*- tablegen -*-===//

#ifndef TESSERA_TSR_ATTRS
#define TESSERA_TSR_ATTRS

include "dialects/tsr/TsrDialect.td"
include "mlir/Dialect/Shard/IR/ShardBase.td"

def Tsr_ShardingAttr : AttrDef<Tsr_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a tensor is laid out over a `shard.grid` (per-dim factors).";
  let description = [{
    One entry per tensor dimension, then optional `partial` axes.

    A *plain* dimension is written `[a, b]`: the grid axes splitting it, major
    to minor, as in upstream `shard.sharding` (`[]` = replicated). Rank
    (i_a, i_b) holds the contiguous block number i_a·|b| + i_b.

    A *factored* dimension is written `{s0 : [axes], s1, s2 : [axes], ...}`:
    the dimension is the row-major product of sub-factors of sizes s0·s1·…
    (major to minor), and each sub-factor is split (block-wise) by its own
    grid axes (none when `: [...]` is omitted). The local piece of the
    dimension is the row-major product of the local sub-factor sizes
    s_i / |axes_i|, which is exactly what a local reshape/slice/concat of
    local pieces produces. Examples:

    - PyTorch's fused QKV weight [3·D, D] column-split by heads over axis 1:
      `[{3, 64 : [1]}, []]` — each rank holds its heads of Q, then of K, then
      of V (local [3·D/tp, D]); a `tsr.slice` [D:2D] stays local ([D/tp:2D/tp]).
    - Attention scores [B·H, S, S] with the batch over dp and heads over tp:
      `[{8 : [0], 4 : [1]}, [], []]` — not expressible as one contiguous block
      per rank.

    `partial_axes` lists grid axes over which the tensor is a partial sum: the
    full value is the sum over those ranks (e.g. the result of a matmul whose
    contracting dimension is split).

    Attributes built through `ShardingAttr::getFactored` are canonical:
    adjacent sub-factors are merged where the layout allows it ({s : [a], t}
    with |a| dividing s is the plain block split [a]; {s : [a], t : [b]} with
    |a| = s is [a, b]), so equal layouts compare equal. `split_axes` always
    holds, per dimension, the concatenation of all its sub-factors' axes, so
    `getDimAxes(d)` gives how many ways dimension d is split whatever its form.

    ```mlir
    // [B, S, D] activations: batch split over axis 0 (dp), partial over tp.
    #tsr.sharding<@grid, [[0], [], []] partial = [1]>
    // [S, B*H, Dh]: B = 8 over dp, H = 4 over tp.
    #tsr.sharding<@grid, [[], {8 : [0], 4 : [1]}, []]>
    ```
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$grid,
    "::mlir::shard::GridAxesArrayAttr":$split_axes,
    OptionalArrayRefParameter<"int16_t">:$partial_axes,
    // Encoding of factored dims (empty when every dim is plain): per dim,
    // n (0 = plain), then n pairs (sub-factor size, number of its axes); the
    // axes themselves are the dim's `split_axes`, in order.
    OptionalArrayRefParameter<"int64_t">:$factors
  );
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// One sub-factor of a dimension: its size and the grid axes splitting it.
    struct SubFactor {
      int64_t size;
      ::llvm::SmallVector<int16_t, 2> axes;
      bool operator==(const SubFactor &o) const {
        return size == o.size && axes == o.axes;
      }
    };
    using DimFactors = ::llvm::SmallVector<SubFactor, 2>;

    /// Builds a canonical attribute from per-dim sub-factor lists (a dim with
    /// one sub-factor is printed plain).
    static ShardingAttr getFactored(::mlir::MLIRContext *ctx,
                                    ::mlir::FlatSymbolRefAttr grid,
                                    ::llvm::ArrayRef<DimFactors> dims,
                                    ::llvm::ArrayRef<int16_t> partial,
                                    ::llvm::ArrayRef<int64_t> gridShape);
    /// Builds a fully replicated attribute of `rank` dims.
    static ShardingAttr getReplicated(::mlir::MLIRContext *ctx,
                                      ::mlir::FlatSymbolRefAttr grid,
                                      unsigned rank);
    /// Merges adjacent sub-factors where the layout allows (see above).
    static void canonicalize(DimFactors &dim,
                             ::llvm::ArrayRef<int64_t> gridShape);

    /// Number of dimensions described.
    unsigned getRank() const { return getSplitAxes().size(); }
    /// True when no dimension is split and nothing is partial.
    bool isReplicated() const;
    /// All grid axes splitting dimension `dim` (empty when replicated).
    ::llvm::ArrayRef<int16_t> getDimAxes(unsigned dim) const;
    /// True when dimension `dim` is written with sub-factors.
    bool isDimFactored(unsigned dim) const;
    /// Sub-factors of dimension `dim` of global size `dimSize` (a plain dim
    /// is one sub-factor of size `dimSize`).
    DimFactors getDimFactors(unsigned dim, int64_t dimSize) const;
    /// Compatibility: k when dimension `dim` is {k, n : [axes]} (k chunks
    /// each split by axes, e.g. the fused QKV), otherwise 1.
    int64_t getDimChunks(unsigned dim) const;
  }];
}

#endif // TESSERA_TSR_ATTRS

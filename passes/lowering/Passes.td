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
    become `tsrt.role`/`tsrt.name`; everything else `tsr.*` is dropped (the
    artifact's manifest carries shardings and initial values).

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
  }];
  let dependentDialects = ["::tessera::tsrt::TsrtDialect"];
}

#endif // TESSERA_PASSES_LOWERING_PASSES

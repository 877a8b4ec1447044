//===- TsrtDialect.td - Tessera runtime-program dialect ----*- tablegen -*-===//

#ifndef TESSERA_TSRT_DIALECT
#define TESSERA_TSRT_DIALECT

include "mlir/IR/OpBase.td"

def Tsrt_Dialect : Dialect {
  let name = "tsrt";
  let cppNamespace = "::tessera::tsrt";
  let summary = "Tessera's runtime program: kernel and collective calls.";
  let description =
      [{
        What `tessera-run` executes. A runtime program is a module holding
    `func.func @train_step` whose body is a straight-line list of
    `tsrt.kernel` calls (one per backend kernel, named after the `tsr` op it
    implements), `tsrt.constant`s and collectives over grid axes. The module
    carries the grid as `tsrt.grid_axes` (axis names) and `tsrt.grid_shape`;
        function arguments and results carry `tsrt.role` ("param", "opt_state",
    "tokens", "labels", "loss") and `tsrt.name`.

    Phase invariant: only `tsrt`, `func.func` and `func.return` ops remain;
        every tensor has its local(per - rank) shape.
      }];
}

class Tsrt_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tsrt_Dialect, mnemonic, traits>;

#endif // TESSERA_TSRT_DIALECT

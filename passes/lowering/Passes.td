//===- Passes.td - lowering passes ------------------------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_LOWERING_PASSES
#define TESSERA_PASSES_LOWERING_PASSES

include "mlir/Pass/PassBase.td"

#endif // TESSERA_PASSES_LOWERING_PASSES

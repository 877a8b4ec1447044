//===- Passes.td - sharding passes ------------------------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_SHARDING_PASSES
#define TESSERA_PASSES_SHARDING_PASSES

include "mlir/Pass/PassBase.td"

#endif // TESSERA_PASSES_SHARDING_PASSES

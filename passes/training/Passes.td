//===- Passes.td - training passes ------------------------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_TRAINING_PASSES
#define TESSERA_PASSES_TRAINING_PASSES

include "mlir/Pass/PassBase.td"

#endif // TESSERA_PASSES_TRAINING_PASSES

//===- Passes.h - training passes -----------------------------------*- C++
//-*-===//

#ifndef TESSERA_PASSES_TRAINING_PASSES_H
#define TESSERA_PASSES_TRAINING_PASSES_H

#include "mlir/Pass/Pass.h"

namespace tessera::training {

#define GEN_PASS_DECL
#include "passes/training/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/training/Passes.h.inc"

} // namespace tessera::training

#endif // TESSERA_PASSES_TRAINING_PASSES_H

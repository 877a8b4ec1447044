//===- Passes.h - ZeRO passes -----------------------------------*- C++ -*-===//

#ifndef TESSERA_PASSES_ZERO_PASSES_H
#define TESSERA_PASSES_ZERO_PASSES_H

#include "mlir/Pass/Pass.h"

namespace tessera::zero {

#define GEN_PASS_DECL
#include "passes/zero/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/zero/Passes.h.inc"

} // namespace tessera::zero

#endif // TESSERA_PASSES_ZERO_PASSES_H

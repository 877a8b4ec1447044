//===- Passes.h - lowering passes -----------------------------------*- C++
//-*-===//

#ifndef TESSERA_PASSES_LOWERING_PASSES_H
#define TESSERA_PASSES_LOWERING_PASSES_H

#include "mlir/Pass/Pass.h"

namespace tessera::lowering {

#define GEN_PASS_DECL
#include "passes/lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/lowering/Passes.h.inc"

} // namespace tessera::lowering

#endif // TESSERA_PASSES_LOWERING_PASSES_H

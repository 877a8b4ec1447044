//===- Passes.h - sharding passes -----------------------------------*- C++
//-*-===//

#ifndef TESSERA_PASSES_SHARDING_PASSES_H
#define TESSERA_PASSES_SHARDING_PASSES_H

#include "mlir/Pass/Pass.h"

namespace tessera::sharding {

#define GEN_PASS_DECL
#include "passes/sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/sharding/Passes.h.inc"

} // namespace tessera::sharding

#endif // TESSERA_PASSES_SHARDING_PASSES_H

//===- Passes.h - fusion passes ---------------------------------*- C++ -*-===//

#ifndef TESSERA_PASSES_FUSION_PASSES_H
#define TESSERA_PASSES_FUSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace tessera::fusion {

#define GEN_PASS_DECL
#include "passes/fusion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/fusion/Passes.h.inc"

} // namespace tessera::fusion

#endif // TESSERA_PASSES_FUSION_PASSES_H

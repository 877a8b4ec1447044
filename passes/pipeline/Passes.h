//===- Passes.h - pipeline-parallelism passes -------------------*- C++ -*-===//

#ifndef TESSERA_PASSES_PIPELINE_PASSES_H
#define TESSERA_PASSES_PIPELINE_PASSES_H

#include "mlir/Pass/Pass.h"

namespace tessera::pipeline {

#define GEN_PASS_DECL
#include "passes/pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/pipeline/Passes.h.inc"

} // namespace tessera::pipeline

#endif // TESSERA_PASSES_PIPELINE_PASSES_H

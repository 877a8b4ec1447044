//===- Passes.h - value tracing passes --------------------------*- C++ -*-===//

#ifndef TESSERA_PASSES_TRACE_PASSES_H
#define TESSERA_PASSES_TRACE_PASSES_H

#include "mlir/Pass/Pass.h"

namespace tessera::trace {

#define GEN_PASS_DECL
#include "passes/trace/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/trace/Passes.h.inc"

} // namespace tessera::trace

#endif // TESSERA_PASSES_TRACE_PASSES_H

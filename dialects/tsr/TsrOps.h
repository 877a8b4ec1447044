//===- TsrOps.h - Tessera tensor ops ----------------------------*- C++ -*-===//

#ifndef TESSERA_DIALECTS_TSR_TSROPS_H
#define TESSERA_DIALECTS_TSR_TSROPS_H

#include "dialects/tsr/ShardingRule.h"
#include "dialects/tsr/TsrDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tessera::tsr::detail {
/// Default cost: one FLOP per result element; bytes = all operands + results.
int64_t defaultFlops(mlir::Operation *op);
int64_t defaultBytesAccessed(mlir::Operation *op);
} // namespace tessera::tsr::detail

#include "dialects/tsr/TsrInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/tsr/TsrOps.h.inc"

namespace tessera::tsr {
/// Bytes of a statically shaped tensor type (i1 counts as one byte).
int64_t getTensorBytes(mlir::Type type);
} // namespace tessera::tsr

#endif // TESSERA_DIALECTS_TSR_TSROPS_H

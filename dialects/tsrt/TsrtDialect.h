//===- TsrtDialect.h - Tessera runtime-program dialect ----------*- C++ -*-===//

#ifndef TESSERA_DIALECTS_TSRT_TSRTDIALECT_H
#define TESSERA_DIALECTS_TSRT_TSRTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/tsrt/TsrtDialect.h.inc"

#define GET_OP_CLASSES
#include "dialects/tsrt/TsrtOps.h.inc"

#endif // TESSERA_DIALECTS_TSRT_TSRTDIALECT_H

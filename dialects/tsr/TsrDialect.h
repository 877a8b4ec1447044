//===- TsrDialect.h - Tessera tensor dialect --------------------*- C++ -*-===//

#ifndef TESSERA_DIALECTS_TSR_TSRDIALECT_H
#define TESSERA_DIALECTS_TSR_TSRDIALECT_H

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Dialect.h"

// The attributes first: the dialect's discardable-attribute helpers
// (TsrDialect.td) read and write them.
#define GET_ATTRDEF_CLASSES
#include "dialects/tsr/TsrAttrs.h.inc"

#include "dialects/tsr/TsrDialect.h.inc"

#endif // TESSERA_DIALECTS_TSR_TSRDIALECT_H

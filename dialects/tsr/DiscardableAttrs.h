//===- DiscardableAttrs.h - tsr.* attribute names and accessors -*- C++ -*-===//
//
// The discardable attributes Tessera's passes attach to ops, to functions'
// arguments and results and to the module (`tsr.role`, `tsr.name`,
// `tsr.grid_axes`, ...) are declared once, in TsrDialect.td
// (`discardableAttrs`, which lists what each means). ODS generates a typed
// helper per attribute on TsrDialect (RoleAttrHelper, ...); this header names
// them for code that builds attribute lists or reads function arguments and
// results, which those helpers (ops only) do not cover. No code spells an
// attribute name as a string literal: it uses the constants or accessors
// below.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_DIALECTS_TSR_DISCARDABLEATTRS_H
#define TESSERA_DIALECTS_TSR_DISCARDABLEATTRS_H

#include "dialects/tsr/TsrDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringRef.h"

namespace tessera::tsr {

/// The attributes of TsrDialect.td's `discardableAttrs`, as
/// X(<constant stem>, <ODS helper stem>): the constant k<stem>AttrName is
/// TsrDialect::<helper stem>AttrHelper's name.
#define TESSERA_TSR_DISCARDABLE_ATTRS(X)                                       \
  X(Role, Role)                                                                \
  X(Name, Name)                                                                \
  X(Init, Init)                                                                \
  X(Weights, Weights)                                                          \
  X(GridAxes, GridAxes)                                                        \
  X(Forward, Fwd)                                                              \
  X(Backward, Bwd)                                                             \
  X(Sharding, Sharding)                                                        \
  X(Shardings, Shardings)                                                      \
  X(VocabParallel, VocabParallel)                                              \
  X(ZeroReplicated, ZeroReplicated)                                            \
  X(Trace, Trace)                                                              \
  X(TraceShardings, TraceShardings)

/// The attribute names (kRoleAttrName = "tsr.role", ...).
#define TESSERA_TSR_ATTR_NAME(Stem, Helper)                                    \
  inline constexpr llvm::StringLiteral k##Stem##AttrName =                     \
      TsrDialect::Helper##AttrHelper::getNameStr();
TESSERA_TSR_DISCARDABLE_ATTRS(TESSERA_TSR_ATTR_NAME)
#undef TESSERA_TSR_ATTR_NAME

/// True for a `tsr.`-prefixed (this dialect's) discardable attribute name.
bool isTsrAttrName(llvm::StringRef name);

/// The attributes functions carry on arguments and results, as
/// X(<accessor stem>, <attribute type>, <name constant>).
#define TESSERA_TSR_ARG_RESULT_ATTRS(X)                                        \
  X(Role, ::mlir::StringAttr, kRoleAttrName)                                   \
  X(Name, ::mlir::StringAttr, kNameAttrName)                                   \
  X(Sharding, ::tessera::tsr::ShardingAttr, kShardingAttrName)

/// getArg<Stem>(fn, i) / getResult<Stem>(fn, i): `tsr.role`, `tsr.name`
/// (strings) or `tsr.sharding` (a #tsr.sharding) of argument or result `i`
/// of `fn`, or null when absent (or of another attribute type).
#define TESSERA_TSR_DECLARE_ARG_RESULT_ACCESSORS(Stem, AttrT, Name)            \
  AttrT getArg##Stem(::mlir::FunctionOpInterface fn, unsigned i);              \
  AttrT getResult##Stem(::mlir::FunctionOpInterface fn, unsigned i);
TESSERA_TSR_ARG_RESULT_ATTRS(TESSERA_TSR_DECLARE_ARG_RESULT_ACCESSORS)
#undef TESSERA_TSR_DECLARE_ARG_RESULT_ACCESSORS

/// The module's `tsr.grid_axes` (the grid's axis names), or null.
mlir::ArrayAttr getGridAxes(mlir::Operation *module);
void setGridAxes(mlir::Operation *module, mlir::ArrayAttr axes);

/// An op's `tsr.fwd` (forward id) / `tsr.bwd` (the id of the forward op it
/// differentiates), or null.
mlir::IntegerAttr getForwardId(mlir::Operation *op);
mlir::IntegerAttr getBackwardId(mlir::Operation *op);
/// True when the op is part of the backward (carries `tsr.bwd`).
bool isBackward(mlir::Operation *op);

/// An op's `tsr.trace` id (tsr-trace-values), or null.
mlir::IntegerAttr getTraceId(mlir::Operation *op);
/// Records the layout of a traced op's local results (`tsr.trace_shardings`,
/// one #tsr.sharding per result) when the op carries `tsr.trace`; a no-op
/// otherwise, so untraced programs are unchanged.
void setTraceShardings(mlir::Operation *op,
                       llvm::ArrayRef<mlir::Attribute> shardings);
/// The `tsr.trace_shardings` of `op`, or null.
mlir::ArrayAttr getTraceShardings(mlir::Operation *op);

} // namespace tessera::tsr

#endif // TESSERA_DIALECTS_TSR_DISCARDABLEATTRS_H

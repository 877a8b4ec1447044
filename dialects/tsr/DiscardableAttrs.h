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

/// The attribute names, from TsrDialect.td's `discardableAttrs`.
inline constexpr llvm::StringLiteral kRoleAttrName =
    TsrDialect::RoleAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kNameAttrName =
    TsrDialect::NameAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kInitAttrName =
    TsrDialect::InitAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kWeightsAttrName =
    TsrDialect::WeightsAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kGridAxesAttrName =
    TsrDialect::GridAxesAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kForwardAttrName =
    TsrDialect::FwdAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kBackwardAttrName =
    TsrDialect::BwdAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kShardingAttrName =
    TsrDialect::ShardingAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kShardingsAttrName =
    TsrDialect::ShardingsAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kVocabParallelAttrName =
    TsrDialect::VocabParallelAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kZeroReplicatedAttrName =
    TsrDialect::ZeroReplicatedAttrHelper::getNameStr();

/// True for a `tsr.`-prefixed (this dialect's) discardable attribute name.
bool isTsrAttrName(llvm::StringRef name);

/// `tsr.role` / `tsr.name` of argument or result `i` of `fn`, or null when
/// absent (or not a string).
mlir::StringAttr getArgRole(mlir::FunctionOpInterface fn, unsigned i);
mlir::StringAttr getResultRole(mlir::FunctionOpInterface fn, unsigned i);
mlir::StringAttr getArgName(mlir::FunctionOpInterface fn, unsigned i);
mlir::StringAttr getResultName(mlir::FunctionOpInterface fn, unsigned i);

/// `tsr.sharding` of argument or result `i` of `fn`, or null when absent
/// (or not a #tsr.sharding).
ShardingAttr getArgSharding(mlir::FunctionOpInterface fn, unsigned i);
ShardingAttr getResultSharding(mlir::FunctionOpInterface fn, unsigned i);

/// The module's `tsr.grid_axes` (the grid's axis names), or null.
mlir::ArrayAttr getGridAxes(mlir::Operation *module);
void setGridAxes(mlir::Operation *module, mlir::ArrayAttr axes);

/// An op's `tsr.fwd` (forward id) / `tsr.bwd` (the id of the forward op it
/// differentiates), or null.
mlir::IntegerAttr getForwardId(mlir::Operation *op);
mlir::IntegerAttr getBackwardId(mlir::Operation *op);
/// True when the op is part of the backward (carries `tsr.bwd`).
bool isBackward(mlir::Operation *op);

} // namespace tessera::tsr

#endif // TESSERA_DIALECTS_TSR_DISCARDABLEATTRS_H

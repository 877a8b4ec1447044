//===- PlanShardings.h - the Plan's parameter shardings as IR ---*- C++ -*-===//
//
// tsr-sharding-annotate applies Plan::shardings (compiler/planner/Plan.h),
// which it receives as its `shardings` option: one "NAME=LAYOUT" entry per
// parameter, LAYOUT in --explain's notation (common/plan/LayoutText.h). These
// helpers turn the entries into `#tsr.sharding` attributes for the arguments
// of a function (matched by `tsr.name`) and back, with the grid axis names of
// common/plan/Grid.h mapped to axis indices.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_SHARDING_PLANSHARDINGS_H
#define TESSERA_PASSES_SHARDING_PLANSHARDINGS_H

#include "common/plan/Grid.h"
#include "common/plan/LayoutText.h"
#include "dialects/tsr/TsrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace tessera::sharding {

/// The `#tsr.sharding` on `gridRef` (a grid `grid`) of `layout`
/// (canonical: equal layouts give equal attributes). Every axis of `layout`
/// must be one of grid's (parseLayoutText with the grid checks it).
tsr::ShardingAttr shardingOf(const planner::TensorLayout &layout,
                             const planner::GridSpec &grid,
                             mlir::FlatSymbolRefAttr gridRef);

/// The layout of `sharding` for a tensor of global `shape` on `grid`, with
/// axis names (printLayoutText gives --explain's text). Partial axes are
/// not part of a layout and are ignored.
planner::TensorLayout layoutOf(tsr::ShardingAttr sharding,
                               llvm::ArrayRef<int64_t> shape,
                               const planner::GridSpec &grid);

/// Parses tsr-sharding-annotate's `shardings` entries ("NAME=LAYOUT", split
/// at the last '=') for the arguments of `func`: NAME is an argument's
/// `tsr.name`, LAYOUT is parsed for its (global) shape on `grid`. Returns
/// name -> sharding on `gridRef`. Emits an error on `func` naming the entry
/// and fails for an entry without '=', a name that no argument of `func`
/// has, or a layout that does not parse for that argument (syntax, rank,
/// unknown axis, sizes, divisibility).
mlir::FailureOr<llvm::StringMap<tsr::ShardingAttr>>
parsePlanShardings(llvm::ArrayRef<std::string> entries, mlir::func::FuncOp func,
                   const planner::GridSpec &grid,
                   mlir::FlatSymbolRefAttr gridRef);

} // namespace tessera::sharding

#endif // TESSERA_PASSES_SHARDING_PLANSHARDINGS_H

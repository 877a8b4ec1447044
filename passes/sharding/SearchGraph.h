//===- SearchGraph.h - the sharding search's view of tsr IR -----*- C++ -*-===//
//
// Builds compiler/planner's SearchGraph (ShardingSearch.h) from a function's
// forward ops (training::forwardOpsOf: a train step's forward, or an imported
// @forward): one search op per op with its ShardingRuleOpInterface rule
// (an op without a rule is kept whole), one tensor per value, layers from
// training::assignLayers. Parameters are the arguments with tsr.role
// "param"; the blocks' weight matrices (rank-2 parameters contracted with an
// activation inside the layers from the first tsr.attention's to the end of
// the last block) are `mustSplit`.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_SHARDING_SEARCHGRAPH_H
#define TESSERA_PASSES_SHARDING_SEARCHGRAPH_H

#include "compiler/planner/ShardingSearch.h"

#include "mlir/IR/Value.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseMap.h"

namespace tessera::sharding {

struct ExtractedGraph {
  planner::SearchGraph graph;
  /// Tensor index -> IR value, and back.
  std::vector<mlir::Value> values;
  llvm::DenseMap<mlir::Value, int> tensorOf;
  /// Search op index -> IR op.
  std::vector<mlir::Operation *> ops;
};

/// The search graph of `func`'s forward ops.
ExtractedGraph buildSearchGraph(mlir::FunctionOpInterface func);

} // namespace tessera::sharding

#endif // TESSERA_PASSES_SHARDING_SEARCHGRAPH_H

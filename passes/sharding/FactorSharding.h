//===- FactorSharding.h - factor shardings shared by the sharding passes --===//
//
// Plain, unit-tested helpers behind tsr-sharding-propagate and
// tsr-sharding-partition. A tensor's sharding is, per dimension, a list of
// sub-factors (size, grid axes) major to minor (`#tsr.sharding`'s model) plus
// the grid axes it is a partial sum over. An op's sharding rule
// (ShardingRuleOpInterface) names factors; an *assignment* gives each factor
// its own sub-factor list. Projecting a tensor onto an op's factors cuts its
// dimensions' sub-factor lists at the factor boundaries; projecting an
// assignment back onto a tensor concatenates its factors' lists.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_SHARDING_FACTORSHARDING_H
#define TESSERA_PASSES_SHARDING_FACTORSHARDING_H

#include "dialects/tsr/ShardingRule.h"
#include "dialects/tsr/TsrDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include <optional>

namespace tessera::sharding {

using SubFactor = tsr::ShardingAttr::SubFactor;
using DimFactors = tsr::ShardingAttr::DimFactors;
using Axes = llvm::SmallVector<int16_t, 4>;

/// The grid: its symbol and axis sizes.
struct Grid {
  mlir::FlatSymbolRefAttr symbol;
  llvm::SmallVector<int64_t, 2> shape;
  /// Number of ranks along `axes` (product of their sizes).
  int64_t size(llvm::ArrayRef<int16_t> axes) const;
};

/// A tensor's sharding while it is being computed: a dimension may still be
/// unknown (std::nullopt).
struct TensorSharding {
  std::vector<std::optional<DimFactors>> dims;
  Axes partial;
  /// How firmly the sharding is given: kDerived (propagated), kConstraint
  /// (a tsr.sharding_constraint's result) or kArgument (a step argument's,
  /// i.e. the plan's parameter and batch layouts). Higher wins in
  /// resolveFactors, so a constraint on an activation never takes an axis a
  /// parameter's layout needs.
  enum Firmness : uint8_t { kDerived = 0, kConstraint = 1, kArgument = 2 };
  uint8_t fixed = kDerived;

  static TensorSharding unknown(unsigned rank) {
    TensorSharding t;
    t.dims.resize(rank);
    return t;
  }
  static TensorSharding replicated(mlir::RankedTensorType type);
  /// From an attribute (null: replicated) for a tensor of global `type`.
  static TensorSharding fromAttr(mlir::Attribute attr,
                                 mlir::RankedTensorType type);
  /// Unknown dims are written replicated.
  tsr::ShardingAttr toAttr(const Grid &grid) const;
  bool isComplete() const;
  /// Unknown dimensions become one unsplit sub-factor of the dim's size.
  void complete(mlir::RankedTensorType type);
  /// Puts every known dim in canonical form.
  void canonicalize(const Grid &grid);
  bool operator==(const TensorSharding &o) const {
    return dims == o.dims && partial == o.partial;
  }
  bool operator!=(const TensorSharding &o) const { return !(*this == o); }
};

/// The module's grid: `@grid`, or its only `shard.grid`. Emits an error
/// when there is none.
mlir::FailureOr<Grid> getModuleGrid(mlir::ModuleOp module);

/// The grid of the module that holds `func` (getModuleGrid of its parent),
/// for the passes that run per function: they only read the module's
/// `shard.grid` symbols, which no function pass changes. Emits an error when
/// `func` is not inside a module or the module has no grid.
mlir::FailureOr<Grid> getEnclosingGrid(mlir::FunctionOpInterface func);

/// Local extent of a dimension: Π size_i / |axes_i|.
int64_t localExtent(const DimFactors &dim, const Grid &grid);
/// Local type of a tensor of global `type` under a complete sharding.
mlir::RankedTensorType localType(mlir::RankedTensorType type,
                                 const TensorSharding &sharding,
                                 const Grid &grid);
/// Number of ranks a dimension is split over.
int64_t splitWays(const DimFactors &dim, const Grid &grid);
/// Canonical form (see #tsr.sharding).
DimFactors canonical(DimFactors dim, const Grid &grid);

/// Cuts `dim` at the boundaries of consecutive factors of sizes
/// `factorSizes` (their product is the dim's size), splitting a sub-factor
/// where the layout allows ({a·b : [x]} = {a : [x], b} when |x| divides a;
/// = {a : [x'], b : [x'']} when |x'| = a). std::nullopt when impossible.
std::optional<llvm::SmallVector<DimFactors>>
cutAtFactors(const DimFactors &dim, llvm::ArrayRef<int64_t> factorSizes,
             const Grid &grid);

/// Splits sub-factor `f` into a major part of size `major` and the rest with
/// the same layout ({a·b : [x]} = {a : [x], b} when |x| divides a; = {a :
/// [x'], b : [x'']} when |x'| = a). std::nullopt when impossible.
std::optional<std::pair<SubFactor, SubFactor>>
splitSubFactor(const SubFactor &f, int64_t major, const Grid &grid);

/// One piece of the common refinement of two layouts of a dimension: its
/// size and the grid axes splitting it in each.
struct RefinedPiece {
  int64_t size;
  Axes have, want;
};
/// The coarsest list of pieces (major to minor) that both `have` and `want`
/// are products of, each piece split by a single axis list in each layout,
/// e.g. have {8 : [tp]}, want {8 : [tp, sp]} gives (tp-sized piece: [tp] /
/// [tp]) and (8/tp: [] / [sp]): only the second needs a slice.
/// std::nullopt when the layouts cut the dimension incompatibly.
std::optional<llvm::SmallVector<RefinedPiece>>
commonRefinement(const DimFactors &have, const DimFactors &want,
                 const Grid &grid);

/// One sub-factor list per rule factor (std::nullopt: unknown).
using FactorAssignment = llvm::SmallVector<std::optional<DimFactors>>;

enum class Priority {
  /// Propagation: every tensor proposes; the most split proposal wins, ties
  /// go to the earliest (results, then operands, in order).
  MostSplit,
  /// Partition: factors that appear in a result take the first result's
  /// layout; the others (reductions) the most split operand proposal.
  ResultsFirst,
};

/// Resolves the factor shardings of an op from its tensors' (possibly
/// incomplete) shardings. Factors needing replication are replicated; a grid
/// axis is used by at most one factor (a later factor that would reuse one
/// falls back to another proposal or stays unsplit). Proposals of fixed
/// tensors (TensorSharding::fixed: arguments, then constraints) win:
/// factors they split choose first, firmest first, and take the firmest
/// proposal whose axes are free.
FactorAssignment resolveFactors(const tsr::ShardingRule &rule,
                                llvm::ArrayRef<const TensorSharding *> operands,
                                llvm::ArrayRef<const TensorSharding *> results,
                                const Grid &grid, Priority priority);

/// The dims of a tensor with factors `dims` under `assignment` (unknown where
/// a factor is unknown); partial left empty.
TensorSharding project(const tsr::ShardingRule &rule,
                       const tsr::ShardingRule::TensorFactors &dims,
                       const FactorAssignment &assignment, const Grid &grid);

/// What an op does under complete shardings.
struct OpPlan {
  FactorAssignment factors;                    ///< complete
  llvm::SmallVector<TensorSharding> operands;  ///< what each operand must be
  llvm::SmallVector<TensorSharding> results;   ///< what each result will be
  llvm::SmallVector<int64_t> localFactorSizes; ///< per factor
};

/// True when some reader of `v` needs it whole: `v` is in none of that
/// reader's linear groups (`ruleOf` gives a reader's rule; readers it
/// returns null for are ignored). A partial `v` is then reduced for that
/// reader anyway, so its other readers are planned as reading the reduced
/// value (its sharding without partial axes): the partition reduces it
/// once for all of them (its reshard cache) instead of passing the partial
/// sum through a linear reader and reducing that reader's result again
/// (tsr-clip-grad's norm term and clipped update of a dp-partial gradient).
bool isReducedAnyway(
    mlir::Value v,
    llvm::function_ref<const tsr::ShardingRule *(mlir::Operation *)> ruleOf);

/// Plans an op from its operands' complete shardings (with partial axes) and
/// its results' complete dims. A result is partial over the axes of the split
/// factors it reduces (ShardingRule::isReductionFor) plus, when all operands
/// of one of the rule's linear groups are partial over the same axes P (not
/// used by any factor) and no other operand is partial, P — those operands
/// then stay partial (the all-reduce is deferred past the op). Any other
/// partial operand must be all-reduced first.
OpPlan planOp(const tsr::ShardingRule &rule,
              llvm::ArrayRef<TensorSharding> operands,
              llvm::ArrayRef<TensorSharding> results, const Grid &grid);

} // namespace tessera::sharding

#endif // TESSERA_PASSES_SHARDING_FACTORSHARDING_H

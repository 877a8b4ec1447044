//===- ShardingRule.h - factor-based sharding rules -------------*- C++ -*-===//
//
// The sharding rule an op answers through ShardingRuleOpInterface. Modelled on
// Shardy's OpShardingRule: the op's iteration space is a list of factors, and
// each operand/result dimension is the product of some factors, major to
// minor. Examples (factor names in comments):
//
//   add  [B,S,D] + [B,S,D] -> [B,S,D]     factors b,s,d; every dim one factor
//   matmul [B,S,K] x [K,N] -> [B,S,N]      factors b,s,k,n; k is a reduction
//   reshape [B,S,D] -> [B,S,H,Dh]          factors b,s,h,dh; operand dim 2 is
//                                           [h, dh], result dims 2,3 are h, dh
//   softmax over axis a                    factor of axis a needs replication
//
// A factor that appears in no result is a *reduction*: splitting it makes the
// results partial sums over the splitting axes. More precisely, a result is
// partial over the axes of every split operand factor it does not contain
// (layer_norm_grad's scale/bias gradients are partial over a split batch
// while its input gradient is not).
//
// `linearGroups` says where partial sums may pass through the op unreduced
// (add of two partial sums, a partial sum times a full value, a reshape of a
// partial sum), and `localize` rewrites size-bearing attributes when the
// partitioner gives the op local shapes.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_DIALECTS_TSR_SHARDINGRULE_H
#define TESSERA_DIALECTS_TSR_SHARDINGRULE_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>
#include <functional>

namespace tessera::tsr {

struct ShardingRule {
  struct Factor {
    /// Extent of the factor (elements).
    int64_t size = 1;
    /// The factor must not be split (e.g. softmax's axis): an operand split
    /// along it is all-gathered first.
    bool needReplication = false;
    /// The op reduces over this factor itself when it is split (it calls the
    /// collectives inside its kernel, e.g. Megatron's vocab-parallel
    /// cross-entropy all-reduces the row max and sum of exponentials over
    /// the vocabulary split): a result without the factor is then NOT
    /// partial over its axes, and the localized op gets the axes as its
    /// `grid_axes` attribute.
    bool reducedByOp = false;
  };
  /// Factor indices making up one tensor dimension, major to minor.
  using DimFactors = llvm::SmallVector<int64_t, 2>;
  /// Per tensor, one DimFactors per dimension.
  using TensorFactors = llvm::SmallVector<DimFactors, 4>;

  llvm::SmallVector<Factor> factors;
  llvm::SmallVector<TensorFactors> operands;
  llvm::SmallVector<TensorFactors> results;

  /// Operand groups in which the op is linear: when every operand of one
  /// group is partial over the same grid axes P and no other operand is
  /// partial, the results are partial over P as well, so no all-reduce is
  /// needed before the op. add/sub: {{0, 1}}; mul: {{0}, {1}}; div: {{0}};
  /// reshape/transpose/slice/broadcast/reduce_sum: {{0}}; matmul: {{0}, {1}}.
  llvm::SmallVector<llvm::SmallVector<unsigned, 2>, 2> linearGroups;

  /// Grid axes per factor (major to minor over the factor's sub-factors;
  /// empty when the factor is not split).
  using FactorAxes = llvm::ArrayRef<llvm::SmallVector<int16_t, 4>>;
  /// Called by the partitioner after it has given the op local operand and
  /// result types; `localFactorSizes[f]` is factor f's local extent and
  /// `factorAxes[f]` the grid axes it is split over. Rewrites attributes
  /// holding sizes or offsets (tsr.slice's bounds) and records the axes of
  /// `reducedByOp` factors or of a masked lookup (`grid_axes` on
  /// tsr.gather, tsr.cross_entropy). Null when the op has none.
  std::function<mlir::LogicalResult(mlir::Operation *,
                                    llvm::ArrayRef<int64_t> localFactorSizes,
                                    FactorAxes factorAxes)>
      localize;

  /// Called by the partitioner after `localize` with the layout each result
  /// was given (a `tsr.sharding` attribute: per dimension its sub-factors
  /// and their grid axes, a pipelined program's micro-batch axis included)
  /// and the results' global types. For ops whose kernel needs every local
  /// element's index in the global tensor (tsr.dropout's counter-based
  /// mask), which record the layout as an attribute. Null when the op has
  /// none.
  std::function<mlir::LogicalResult(
      mlir::Operation *, llvm::ArrayRef<mlir::Attribute> resultLayouts,
      llvm::ArrayRef<mlir::RankedTensorType> globalResults)>
      recordLayouts;

  /// Adds a factor and returns its index.
  int64_t addFactor(int64_t size, bool needReplication = false,
                    bool reducedByOp = false) {
    factors.push_back({size, needReplication, reducedByOp});
    return static_cast<int64_t>(factors.size()) - 1;
  }
  /// True when factor `f` appears in no result and is neither replicated nor
  /// reduced by the op itself (splitting it gives partial results).
  bool isReduction(int64_t f) const;
  /// True when factor `f` appears in some operand but not in result
  /// `result` and neither needs replication nor is reduced by the op
  /// itself (`reducedByOp`): splitting it makes that result partial.
  bool isReductionFor(int64_t f, unsigned result) const;
  /// Checks internal consistency against `op`'s operand/result shapes: every
  /// dimension equals the product of its factors' sizes. Returns failure with
  /// a diagnostic on `op` otherwise (used by tests and the verifier of
  /// sharding passes).
  mlir::LogicalResult verify(mlir::Operation *op) const;

  /// Rule where every operand and result has the shape of result 0 and each
  /// dimension is its own factor (elementwise ops).
  static ShardingRule elementwise(mlir::Operation *op);
  /// Rule for an op whose only operand/result has nothing shardable (all
  /// factors need replication); used for scalars and whole-tensor ops.
  static ShardingRule replicated(mlir::Operation *op);
};

} // namespace tessera::tsr

#endif // TESSERA_DIALECTS_TSR_SHARDINGRULE_H

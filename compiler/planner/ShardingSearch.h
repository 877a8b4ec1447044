//===- ShardingSearch.h - cost-based tensor-parallel sharding ---*- C++ -*-===//
//
// Chooses, for a tensor-parallel degree tp, how every operator of the
// forward graph is split over the `tp` grid axis, and so every parameter's
// and activation's layout, minimising the predicted communication time of a
// training step (forward and backward). This is the intra-operator pass of
// Alpa (Zheng et al., OSDI 2022): one variable per op whose values are the
// op's strategies (which factor of its sharding rule is split over tp, or
// none, or "pass a partial sum through" for ops linear in an operand), and a
// cost per tensor for resharding it between its producer's layout and every
// consumer's (all-reduce, all-gather, reduce-scatter, all-to-all, each
// priced forward and for its gradient in the backward). Alpa solves that
// with an ILP; here the graph is solved exactly by min-sum variable
// elimination (bucket elimination, Dechter 1999), which is cheap because a
// transformer layer has small tree-width, and over the layer chain by a
// dynamic program: the forward is cut into layers (one activation crossing
// each cut, training::assignLayers), each layer is solved once per pair of
// boundary layouts, and layers whose cost networks are identical are solved
// once, so a 96-layer model costs what its distinct layers do. See
// docs/ShardingSearch.md.
//
// Constraints: parameters marked `mustSplit` (the blocks' weight matrices:
// dividing them is why TP is asked for) pay a large penalty when left
// replicated, unless replicating one alone lowers the communication (K/V
// projections under grouped-query attention when tp does not divide the KV
// heads: Megatron-LM replicates them too); `pinned` layouts (vocabulary
// parallelism, --sharding) are fixed.
//
// The library is MLIR-free: passes/sharding/SearchGraph.h builds the graph
// from tsr IR (ShardingRuleOpInterface).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_SHARDINGSEARCH_H
#define TESSERA_COMPILER_PLANNER_SHARDINGSEARCH_H

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::planner {

/// A tensor's layout over the tp axis: whole (dim < 0), or dimension `dim`
/// viewed as [outer, rest] with `rest` block-split over the tp ranks (outer
/// 1: a plain block split; outer 3: a fused QKV's 3 chunks each split), and
/// possibly a partial sum over tp.
struct TpLayout {
  int dim = -1;
  int64_t outer = 1;
  bool partial = false;

  bool isSplit() const { return dim >= 0; }
  bool operator==(const TpLayout &o) const {
    return dim == o.dim && (dim < 0 || outer == o.outer) &&
           partial == o.partial;
  }
  bool operator!=(const TpLayout &o) const { return !(*this == o); }
  /// `--explain`'s notation for a tensor of `shape`: "replicated",
  /// "[-, tp]", "[{3, 64 : tp}, -]"; a partial sum adds " partial".
  std::string str(const std::vector<int64_t> &shape) const;
};

/// The forward graph of one function, as the search sees it.
struct SearchGraph {
  struct Factor {
    int64_t size = 1;
    /// Must not be split (softmax's axis, attention's sequence).
    bool needReplication = false;
    /// Split, the op reduces over it itself (vocab-parallel cross-entropy):
    /// results without it are whole, not partial.
    bool reducedByOp = false;
  };
  /// Per tensor dimension, factor indices major to minor.
  using TensorDims = std::vector<std::vector<int>>;
  struct Op {
    std::string name;  ///< e.g. "tsr.matmul"
    std::string where; ///< source location, for reports
    std::vector<Factor> factors;
    std::vector<int> operands, results; ///< tensor indices
    std::vector<TensorDims> operandDims, resultDims;
    /// Operand groups the op is linear in (ShardingRule::linearGroups).
    std::vector<std::vector<unsigned>> linearGroups;
    /// Layer of the forward (cuts where one activation crosses).
    int layer = 0;
  };
  enum class Kind { Activation, Parameter, Input, Constant };
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    int64_t elementBytes = 4;
    Kind kind = Kind::Activation;
    int producer = -1; ///< op (activations)
    /// Whether a gradient flows back into it (floating point, computed from
    /// a parameter).
    bool differentiable = true;
    /// Floating point (activations a weight is contracted with).
    bool floating = true;
    /// Parameters: a block weight matrix that tp must divide.
    bool mustSplit = false;
    /// Parameters: a layout fixed by the plan.
    std::optional<TpLayout> pinned;
  };
  std::vector<Tensor> tensors;
  std::vector<Op> ops; ///< in program order

  int64_t bytes(int tensor) const;
};

/// Collective cost of the tp group (Hockney α-β, ring algorithms).
struct ShardingSearchOptions {
  int64_t tp = 1;
  double latencySeconds = 5e-6;      ///< α per collective
  double bandwidthBytesPerS = 100e9; ///< β⁻¹, bytes/s per rank
  /// Largest intermediate table of the elimination (entries); a graph that
  /// needs more is an error naming the op.
  size_t maxTableEntries = size_t(1) << 22;
};

/// One collective the chosen layout implies, per step.
struct PredictedCollective {
  std::string kind; ///< all_reduce, all_gather, reduce_scatter, all_to_all
  bool backward = false;
  int tensor = -1;  ///< SearchGraph tensor whose value (or gradient) moves
  double bytes = 0; ///< bytes sent per rank (ring volume)
  int layer = 0;
};

struct ShardingSearchResult {
  /// Per tensor: a parameter's stored layout, an activation's layout as its
  /// producer leaves it.
  std::vector<TpLayout> layouts;
  /// Per op: the factor split over tp (-1: none or partial pass-through).
  std::vector<int> splitFactor;
  std::vector<PredictedCollective> collectives;
  /// Predicted communication time and bytes per rank of one step.
  double seconds = 0, bytes = 0;
  int64_t layers = 0, distinctLayers = 0;
  /// mustSplit parameters left whole: `exempt` because replicating them
  /// costs less communication (K/V under GQA), `unsplittable` because tp
  /// divides none of their dimensions.
  std::vector<int> exempt, unsplittable;
  /// Wall time of the search, seconds.
  double searchSeconds = 0;
};

/// Searches the layout of `graph` for options.tp ranks. Errors: tp < 1, a
/// malformed graph (dims that do not match shapes, bad indices), a layer
/// whose elimination table would exceed maxTableEntries.
llvm::Expected<ShardingSearchResult>
searchShardings(const SearchGraph &graph, const ShardingSearchOptions &options);

/// Prints the predicted collectives per layer (`--explain`).
void printPredictedCollectives(const SearchGraph &graph,
                               const ShardingSearchResult &result,
                               llvm::raw_ostream &os);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_SHARDINGSEARCH_H

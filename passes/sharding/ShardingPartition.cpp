//===- ShardingPartition.cpp - local shapes + shard collectives -----------===//
//
// See Passes.td. Ops are planned with FactorSharding's planOp (the same
// factor resolution as propagation, results first) and rewritten in place to
// local types; operands whose sharding differs from the plan are resharded.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"

#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace tessera::sharding {
#define GEN_PASS_DEF_SHARDINGPARTITION
#include "passes/sharding/Passes.h.inc"
} // namespace tessera::sharding

using namespace mlir;
using namespace tessera;
using namespace tessera::sharding;
using tsr::ShardingRule;
using tsr::ShardingRuleOpInterface;

namespace {

struct Partitioner {
  func::FuncOp func;
  Grid grid;
  DenseMap<Value, RankedTensorType> globalType;
  DenseMap<Value, TensorSharding> sharding;
  /// (value, target attr) -> resharded value.
  DenseMap<std::pair<Value, Attribute>, Value> cache;
  /// Ops created by the current reshard.
  SmallPtrSet<Operation *, 8> created;

  Value reshape(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getShape() == shape)
      return v;
    auto op = tsr::ReshapeOp::create(
        b, loc, RankedTensorType::get(shape, type.getElementType()), v);
    created.insert(op);
    return op;
  }

  /// Local shape with dim `d` replaced by `pieces`.
  static SmallVector<int64_t> expand(ArrayRef<int64_t> shape, int64_t d,
                                     ArrayRef<int64_t> pieces) {
    SmallVector<int64_t> out(shape.begin(), shape.begin() + d);
    out.append(pieces.begin(), pieces.end());
    out.append(shape.begin() + d + 1, shape.end());
    return out;
  }

  /// How one dimension gets from `have` to `want`.
  struct DimMove {
    /// Same: nothing to do. Refine: `have` cut at `want`'s sub-factors
    /// (`cut`) differs from `want` only in pieces that are whole here and
    /// split in `want`: those are sliced, nothing is gathered. Gather:
    /// anything else; the dimension is gathered whole, then sliced.
    enum Kind { Same, Refine, Gather } kind = Same;
    SmallVector<DimFactors> cut;
  };

  DimMove planDim(const DimFactors &have, const DimFactors &want) {
    DimMove m;
    if (have == want)
      return m;
    SmallVector<int64_t> sizes;
    for (const SubFactor &f : want)
      sizes.push_back(f.size);
    auto cut = cutAtFactors(have, sizes, grid);
    bool refine = bool(cut);
    if (cut)
      for (auto [j, piece] : llvm::enumerate(*cut))
        if (splitWays(piece, grid) != 1 &&
            piece != canonical(DimFactors{want[j]}, grid))
          refine = false;
    m.kind = refine ? DimMove::Refine : DimMove::Gather;
    if (refine)
      m.cut = std::move(*cut);
    return m;
  }

  /// Reshards `v` (global type `global`) from `from` to `to`. Collectives
  /// are placed right after `v`'s definition. Partial sums are reduced,
  /// dimensions whose layout `to` does not refine are all-gathered, and the
  /// rest is all-sliced; a reduction followed by a slice over the same axes
  /// is one reduce-scatter, and a gather of one dimension with a slice of
  /// another over the same axes is one all-to-all (Megatron-SP's and
  /// DeepSpeed-Ulysses' collectives fall out of these two rules).
  FailureOr<Value> reshard(Value v, RankedTensorType global,
                           const TensorSharding &from, const TensorSharding &to,
                           Location loc) {
    if (from == to)
      return v;
    Attribute key = to.toAttr(grid);
    auto it = cache.find({v, key});
    if (it != cache.end())
      return it->second;
    OpBuilder b(func.getContext());
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
    created.clear();
    StringRef gridName = grid.symbol.getValue();
    Value cur = v;
    TensorSharding curS = from;
    size_t rank = curS.dims.size();

    Axes reduce, keep;
    for (int16_t a : from.partial)
      (llvm::is_contained(to.partial, a) ? keep : reduce).push_back(a);
    for (int16_t a : to.partial)
      if (!llvm::is_contained(from.partial, a))
        return emitError(loc, "cannot make a value partial over axis ") << a;

    SmallVector<DimMove> moves;
    for (size_t d = 0; d < rank; ++d)
      moves.push_back(planDim(*curS.dims[d], *to.dims[d]));
    // The pieces to slice: (dim, piece) of a Refine dim, or of a Gather dim
    // after it is whole.
    auto slicedPieces = [&](size_t d) {
      SmallVector<size_t> pieces;
      if (moves[d].kind == DimMove::Same)
        return pieces;
      const DimFactors &want = *to.dims[d];
      for (size_t j = 0; j < want.size(); ++j) {
        if (want[j].axes.empty())
          continue;
        if (moves[d].kind == DimMove::Gather ||
            splitWays(moves[d].cut[j], grid) == 1)
          pieces.push_back(j);
      }
      return pieces;
    };

    // All-to-all: one dim gathered over axes X (one split sub-factor, and
    // wanted whole) and one dim refined by a slice over exactly X.
    if (reduce.empty()) {
      SmallVector<size_t> gathered, refined;
      for (size_t d = 0; d < rank; ++d) {
        if (moves[d].kind == DimMove::Gather)
          gathered.push_back(d);
        else if (moves[d].kind == DimMove::Refine)
          refined.push_back(d);
      }
      if (gathered.size() == 1 && refined.size() == 1) {
        size_t c = gathered[0], s = refined[0];
        const DimFactors &have = *curS.dims[c];
        SmallVector<size_t> splitSubs;
        for (size_t j = 0; j < have.size(); ++j)
          if (!have[j].axes.empty())
            splitSubs.push_back(j);
        SmallVector<size_t> cuts = slicedPieces(s);
        if (splitSubs.size() == 1 && splitWays(*to.dims[c], grid) == 1 &&
            cuts.size() == 1 &&
            have[splitSubs[0]].axes == (*to.dims[s])[cuts[0]].axes) {
          // Expanded local shape: dim c as have's sub-factors, dim s as
          // the cut pieces (before slicing).
          auto type = cast<RankedTensorType>(cur.getType());
          SmallVector<int64_t> shape;
          int64_t concatIdx = -1, splitIdx = -1;
          for (size_t d = 0; d < rank; ++d) {
            if (d == c) {
              for (auto [j, f] : llvm::enumerate(have)) {
                if (j == splitSubs[0])
                  concatIdx = shape.size();
                shape.push_back(f.size / grid.size(f.axes));
              }
            } else if (d == s) {
              for (auto [j, piece] : llvm::enumerate(moves[s].cut)) {
                if (j == cuts[0])
                  splitIdx = shape.size();
                shape.push_back(localExtent(piece, grid));
              }
            } else {
              shape.push_back(type.getDimSize(d));
            }
          }
          cur = reshape(b, loc, cur, shape);
          ArrayRef<int16_t> axes = have[splitSubs[0]].axes;
          int64_t n = grid.size(axes);
          SmallVector<int64_t> out(shape);
          out[splitIdx] /= n;
          out[concatIdx] *= n;
          auto op = shard::AllToAllOp::create(
              b, loc, RankedTensorType::get(out, type.getElementType()),
              gridName, axes, cur, APInt(64, splitIdx), APInt(64, concatIdx));
          created.insert(op);
          cur = op;
          cur = reshape(b, loc, cur,
                        localType(global, to, grid).getShape());
          cache[{v, key}] = cur;
          return cur;
        }
      }
    }

    // Reduce-scatter: a pending reduction over exactly the axes of one
    // slice; otherwise the reduction comes first.
    bool fuseReduce = false;
    if (!reduce.empty())
      for (size_t d = 0; d < rank && !fuseReduce; ++d)
        for (size_t j : slicedPieces(d))
          if ((*to.dims[d])[j].axes == reduce)
            fuseReduce = true;
    if (!reduce.empty() && !fuseReduce) {
      auto op =
          shard::AllReduceOp::create(b, loc, cur.getType(), gridName, reduce,
                                     cur, shard::ReductionKind::Sum);
      created.insert(op);
      cur = op;
      curS.partial = keep;
    }

    // Gather every dim `to` does not refine.
    for (size_t d = 0; d < rank; ++d) {
      if (moves[d].kind != DimMove::Gather)
        continue;
      const DimFactors &have = *curS.dims[d];
      auto type = cast<RankedTensorType>(cur.getType());
      SmallVector<int64_t> pieces;
      for (const SubFactor &f : have)
        pieces.push_back(f.size / grid.size(f.axes));
      cur = reshape(b, loc, cur, expand(type.getShape(), d, pieces));
      for (auto [j, f] : llvm::enumerate(have)) {
        if (f.axes.empty())
          continue;
        auto t = cast<RankedTensorType>(cur.getType());
        SmallVector<int64_t> shape(t.getShape());
        shape[d + j] = f.size;
        auto op = shard::AllGatherOp::create(
            b, loc, RankedTensorType::get(shape, t.getElementType()), gridName,
            f.axes, cur, APInt(64, d + j));
        created.insert(op);
        cur = op;
      }
      SmallVector<int64_t> shape(type.getShape());
      shape[d] = global.getDimSize(d);
      cur = reshape(b, loc, cur, shape);
      curS.dims[d] = DimFactors{SubFactor{global.getDimSize(d), {}}};
      moves[d].cut.clear();
      for (const SubFactor &f : *to.dims[d])
        moves[d].cut.push_back(DimFactors{SubFactor{f.size, {}}});
    }

    // Slice into the wanted layout (the fused reduction on its slice).
    for (size_t d = 0; d < rank; ++d) {
      if (moves[d].kind == DimMove::Same)
        continue;
      const DimFactors &want = *to.dims[d];
      auto type = cast<RankedTensorType>(cur.getType());
      SmallVector<int64_t> pieces;
      for (const DimFactors &piece : moves[d].cut)
        pieces.push_back(localExtent(piece, grid));
      cur = reshape(b, loc, cur, expand(type.getShape(), d, pieces));
      for (size_t j : slicedPieces(d)) {
        const SubFactor &f = want[j];
        auto t = cast<RankedTensorType>(cur.getType());
        SmallVector<int64_t> shape(t.getShape());
        shape[d + j] /= grid.size(f.axes);
        auto resultType = RankedTensorType::get(shape, t.getElementType());
        Operation *op;
        if (fuseReduce && f.axes == reduce) {
          op = shard::ReduceScatterOp::create(b, loc, resultType, gridName,
                                              f.axes, cur,
                                              shard::ReductionKind::Sum,
                                              APInt(64, d + j));
          fuseReduce = false;
          curS.partial = keep;
        } else {
          op = shard::AllSliceOp::create(b, loc, resultType, gridName, f.axes,
                                         cur, APInt(64, d + j));
        }
        created.insert(op);
        cur = op->getResult(0);
      }
      SmallVector<int64_t> shape(type.getShape());
      shape[d] = localExtent(want, grid);
      cur = reshape(b, loc, cur, shape);
      curS.dims[d] = want;
    }
    cache[{v, key}] = cur;
    return cur;
  }

  FailureOr<TensorSharding> recorded(Operation *op, unsigned r) {
    auto attrs = op->getAttrOfType<ArrayAttr>("tsr.shardings");
    if (!attrs || attrs.size() != op->getNumResults()) {
      op->emitOpError("has no tsr.shardings (run tsr-sharding-propagate)");
      return failure();
    }
    TensorSharding t = TensorSharding::fromAttr(
        attrs[r], cast<RankedTensorType>(op->getResult(r).getType()));
    t.canonicalize(grid);
    return t;
  }

  LogicalResult run() {
    // Global facts first: rules are computed on global types.
    SmallVector<Operation *> ops;
    std::vector<ShardingRule> rules;
    for (BlockArgument arg : func.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type)
        return func.emitError("argument ")
               << arg.getArgNumber() << " is not a ranked tensor";
      globalType[arg] = type;
      TensorSharding t = TensorSharding::fromAttr(
          func.getArgAttr(arg.getArgNumber(), "tsr.sharding"), type);
      t.canonicalize(grid);
      t.fixed = true;
      sharding[arg] = t;
    }
    Operation *terminator = nullptr;
    WalkResult walk = func.walk([&](Operation *op) {
      if (op == func)
        return WalkResult::advance();
      if (op->hasTrait<OpTrait::IsTerminator>()) {
        terminator = op;
        return WalkResult::advance();
      }
      auto iface = dyn_cast<ShardingRuleOpInterface>(op);
      if (!iface) {
        op->emitOpError("has no sharding rule (ShardingRuleOpInterface)");
        return WalkResult::interrupt();
      }
      ops.push_back(op);
      rules.push_back(iface.getShardingRule());
      for (auto [r, v] : llvm::enumerate(op->getResults())) {
        globalType[v] = cast<RankedTensorType>(v.getType());
        FailureOr<TensorSharding> t = recorded(op, r);
        if (failed(t))
          return WalkResult::interrupt();
        sharding[v] = *t;
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();

    for (BlockArgument arg : func.getArguments())
      arg.setType(localType(globalType[arg], sharding[arg], grid));

    for (auto [i, op] : llvm::enumerate(ops)) {
      const ShardingRule &rule = rules[i];
      SmallVector<TensorSharding> operands, results;
      for (Value v : op->getOperands()) {
        auto it = sharding.find(v);
        if (it == sharding.end())
          return op->emitOpError("operand without a sharding");
        operands.push_back(it->second);
      }
      for (Value v : op->getResults())
        results.push_back(sharding[v]);
      // A constraint is a reshard of its input; the op goes away.
      if (auto c = dyn_cast<tsr::ShardingConstraintOp>(op)) {
        Value in = c.getInput();
        FailureOr<Value> nv =
            reshard(in, globalType[in], operands[0], results[0], c.getLoc());
        if (failed(nv))
          return failure();
        globalType[*nv] = globalType[in];
        TensorSharding fixed = results[0];
        fixed.fixed = true;
        sharding[*nv] = fixed;
        c.getResult().replaceAllUsesWith(*nv);
        c.erase();
        continue;
      }
      OpPlan plan = planOp(rule, operands, results, grid);
      for (auto [o, v] : llvm::enumerate(op->getOperands())) {
        FailureOr<Value> nv = reshard(v, globalType[v], operands[o],
                                      plan.operands[o], op->getLoc());
        if (failed(nv))
          return failure();
        op->setOperand(o, *nv);
      }
      op->removeAttr("tsr.shardings");

      Attribute value;
      if (op->hasTrait<OpTrait::ConstantLike>() && op->getNumResults() == 1 &&
          matchPattern(op, m_Constant(&value))) {
        if (failed(localizeConstant(op, value, results[0])))
          return failure();
        continue;
      }
      for (auto [r, v] : llvm::enumerate(op->getResults()))
        v.setType(localType(globalType[v], plan.results[r], grid));
      if (rule.localize) {
        SmallVector<SmallVector<int16_t, 4>> factorAxes;
        for (const std::optional<DimFactors> &f : plan.factors) {
          SmallVector<int16_t, 4> axes;
          if (f)
            for (const SubFactor &sub : *f)
              axes.append(sub.axes.begin(), sub.axes.end());
          factorAxes.push_back(std::move(axes));
        }
        if (failed(rule.localize(op, plan.localFactorSizes, factorAxes)))
          return failure();
      }
      // The op produces plan.results; bring them to the recorded shardings.
      for (auto [r, v] : llvm::enumerate(op->getResults())) {
        if (plan.results[r] == results[r])
          continue;
        FailureOr<Value> nv = reshard(v, globalType[v], plan.results[r],
                                      results[r], op->getLoc());
        if (failed(nv))
          return failure();
        SmallPtrSet<Operation *, 8> chain = created;
        v.replaceUsesWithIf(*nv, [&](OpOperand &use) {
          return !chain.contains(use.getOwner());
        });
        globalType[*nv] = globalType[v];
        sharding[*nv] = results[r];
      }
    }

    // Returned values take the results' shardings.
    SmallVector<Type> resultTypes;
    if (terminator) {
      for (auto [r, v] : llvm::enumerate(terminator->getOperands())) {
        auto type = globalType.lookup(v);
        if (!type) {
          resultTypes.push_back(v.getType());
          continue;
        }
        TensorSharding want = TensorSharding::fromAttr(
            func.getResultAttr(r, "tsr.sharding"), type);
        want.canonicalize(grid);
        FailureOr<Value> nv =
            reshard(v, type, sharding[v], want, terminator->getLoc());
        if (failed(nv))
          return failure();
        terminator->setOperand(r, *nv);
        resultTypes.push_back(nv->getType());
      }
    }
    func.setFunctionType(FunctionType::get(
        func.getContext(), func.getBody().getArgumentTypes(), resultTypes));
    return success();
  }

  /// A constant with a split result: splats are re-splatted at the local
  /// shape; anything else stays global and is all-sliced.
  LogicalResult localizeConstant(Operation *op, Attribute value,
                                 const TensorSharding &want) {
    Value result = op->getResult(0);
    RankedTensorType global = globalType[result];
    if (localType(global, want, grid) == global && want.partial.empty())
      return success();
    auto dense = dyn_cast<DenseElementsAttr>(value);
    if (dense && dense.isSplat()) {
      RankedTensorType local = localType(global, want, grid);
      OpBuilder b(op);
      Operation *c = op->getDialect()->materializeConstant(
          b, dense.resizeSplat(local), local, op->getLoc());
      if (!c)
        return op->emitOpError("cannot re-splat constant at local shape");
      result.replaceAllUsesWith(c->getResult(0));
      globalType[c->getResult(0)] = global;
      sharding[c->getResult(0)] = want;
      op->erase();
      return success();
    }
    FailureOr<Value> nv = reshard(
        result, global, TensorSharding::replicated(global), want, op->getLoc());
    if (failed(nv))
      return failure();
    SmallPtrSet<Operation *, 8> chain = created;
    result.replaceUsesWithIf(
        *nv, [&](OpOperand &use) { return !chain.contains(use.getOwner()); });
    globalType[*nv] = global;
    sharding[*nv] = want;
    return success();
  }
};

struct ShardingPartitionPass
    : public tessera::sharding::impl::ShardingPartitionBase<
          ShardingPartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<Grid> grid = getModuleGrid(module);
    if (failed(grid))
      return signalPassFailure();
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      Partitioner p;
      p.func = func;
      p.grid = *grid;
      if (failed(p.run()))
        return signalPassFailure();
    }
  }
};
} // namespace

//===- ShardingPartition.cpp - local shapes + shard collectives -----------===//
//
// See Passes.td. Ops are planned with FactorSharding's planOp (the same
// factor resolution as propagation, results first) and rewritten in place to
// local types; operands whose sharding differs from the plan are resharded.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVectorExtras.h"

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
  FunctionOpInterface func;
  Grid grid;
  DenseMap<Value, RankedTensorType> globalType;
  DenseMap<Value, TensorSharding> sharding;
  /// (value, target attr) -> resharded value.
  DenseMap<std::pair<Value, Attribute>, Value> cache;
  /// Ops created by the current reshard.
  SmallPtrSet<Operation *, 8> created;
  /// Ops replaced during the rewrite, erased when it ends. The maps above
  /// are keyed by Value: erasing an op mid-rewrite would let a new op be
  /// allocated at its address and inherit its stale entries.
  SmallVector<Operation *> dead;
  /// Views that reshardViewInput bypassed: erased when the rewrite ends if
  /// nothing else reads them (tsr-pipeline-split rejects a dead op that
  /// reads a per-micro-batch value).
  SmallVector<Operation *> bypassed;

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

  /// Reshards `v` (global type `global`) from `from` to `to`. Collectives
  /// are placed right after `v`'s definition.
  ///
  /// Every dimension is cut into the common refinement of its two layouts
  /// (commonRefinement), so the value is one tensor of pieces, each split
  /// by one axis list before and one after. Partial sums are reduced,
  /// pieces split differently before are all-gathered and pieces split
  /// differently after are all-sliced, on that expanded tensor. A reduction
  /// and a slice over the same axes are one reduce-scatter, and one gathered
  /// piece with one sliced piece over the same axes is one all-to-all:
  /// Megatron-SP's and DeepSpeed-Ulysses' collectives fall out of these two
  /// rules. Dimensions whose layouts cut incompatibly are gathered whole
  /// first.
  FailureOr<Value> reshard(Value v, RankedTensorType global,
                           const TensorSharding &from, const TensorSharding &to,
                           Location loc) {
    if (from == to)
      return v;
    Attribute key = to.toAttr(grid);
    auto it = cache.find({v, key});
    if (it != cache.end())
      return it->second;
    // Gathering a reshape (a view) is a reshape of its gathered input: one
    // all-gather serves every view of a value (the backward's flattened
    // [B·S, D] reads and the forward's [B, S, D] ones alike).
    if (from.partial.empty() && to.partial.empty() &&
        llvm::all_of(to.dims,
                     [&](const auto &d) { return splitWays(*d, grid) == 1; }))
      if (auto view = v.getDefiningOp<tsr::ReshapeOp>()) {
        Value u = view.getInput();
        auto su = sharding.find(u);
        if (su != sharding.end() && su->second.partial.empty() &&
            globalType.count(u)) {
          RankedTensorType ut = globalType[u];
          FailureOr<Value> full =
              reshard(u, ut, su->second, TensorSharding::replicated(ut), loc);
          if (failed(full))
            return failure();
          OpBuilder b(view);
          b.setInsertionPointAfter(view);
          Value r = reshape(b, loc, *full, global.getShape());
          cache[{v, key}] = r;
          return r;
        }
      }
    // The same when `to` keeps some of `from`'s splits and only drops axes
    // (a pipelined step's backward reads the flattened [B·S, D] view split
    // over the micro-batch axis but no longer over tp): the input is
    // resharded without those axes, the all-gather every view of it shares.
    if (FailureOr<Value> r = reshardViewInput(v, global, from, to, key, loc);
        succeeded(r))
      return *r;
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

    // Incompatible cuts: gather the dimension whole (after any reduction,
    // which is then not fused).
    SmallVector<SmallVector<RefinedPiece>> pieces(rank);
    SmallVector<size_t> wholeGather;
    for (size_t d = 0; d < rank; ++d) {
      auto refined = commonRefinement(*curS.dims[d], *to.dims[d], grid);
      if (refined)
        pieces[d] = std::move(*refined);
      else
        wholeGather.push_back(d);
    }
    if (!wholeGather.empty()) {
      if (!reduce.empty()) {
        cur = allReduce(b, loc, cur, reduce);
        reduce.clear();
        curS.partial = keep;
      }
      for (size_t d : wholeGather) {
        cur = gatherDim(b, loc, cur, *curS.dims[d], d, global.getDimSize(d));
        curS.dims[d] = DimFactors{SubFactor{global.getDimSize(d), {}}};
        pieces[d] = *commonRefinement(*curS.dims[d], *to.dims[d], grid);
      }
    }

    // The expanded tensor: one dimension per piece.
    SmallVector<int64_t> shape;
    struct At {
      size_t index;
      const RefinedPiece *piece;
    };
    SmallVector<At> gathers, slices;
    for (size_t d = 0; d < rank; ++d)
      for (const RefinedPiece &p : pieces[d]) {
        if (p.have != p.want && !p.have.empty())
          gathers.push_back({shape.size(), &p});
        if (p.have != p.want && !p.want.empty())
          slices.push_back({shape.size(), &p});
        shape.push_back(p.size / grid.size(p.have));
      }
    Type element = cast<RankedTensorType>(cur.getType()).getElementType();
    // A reduction not fused into a slice comes first, on the unexpanded
    // value (tsr-zero-sharding finds gradients by that all-reduce).
    bool fuseReduce = llvm::any_of(slices, [&](const At &s) {
      return !reduce.empty() && s.piece->want == reduce;
    });
    if (!reduce.empty() && !fuseReduce) {
      cur = allReduce(b, loc, cur, reduce);
      reduce.clear();
    }
    if (gathers.empty() && slices.empty()) {
      cache[{v, key}] = cur;
      return cur;
    }
    cur = reshape(b, loc, cur, shape);

    bool allToAll = reduce.empty() && gathers.size() == 1 &&
                    slices.size() == 1 && gathers[0].index != slices[0].index &&
                    gathers[0].piece->want.empty() &&
                    slices[0].piece->have.empty() &&
                    gathers[0].piece->have == slices[0].piece->want;
    if (allToAll) {
      ArrayRef<int16_t> axes = gathers[0].piece->have;
      int64_t n = grid.size(axes);
      shape[slices[0].index] /= n;
      shape[gathers[0].index] *= n;
      auto op = shard::AllToAllOp::create(
          b, loc, RankedTensorType::get(shape, element), gridName, axes, cur,
          APInt(64, slices[0].index), APInt(64, gathers[0].index));
      created.insert(op);
      cur = op;
    } else {
      for (const At &g : gathers) {
        shape[g.index] = g.piece->size;
        auto op = shard::AllGatherOp::create(
            b, loc, RankedTensorType::get(shape, element), gridName,
            g.piece->have, cur, APInt(64, g.index));
        created.insert(op);
        cur = op;
      }
      for (const At &s : slices) {
        shape[s.index] /= grid.size(s.piece->want);
        auto type = RankedTensorType::get(shape, element);
        Operation *op;
        if (fuseReduce && s.piece->want == reduce) {
          op = shard::ReduceScatterOp::create(
              b, loc, type, gridName, s.piece->want, cur,
              shard::ReductionKind::Sum, APInt(64, s.index));
          fuseReduce = false;
        } else {
          op = shard::AllSliceOp::create(b, loc, type, gridName, s.piece->want,
                                         cur, APInt(64, s.index));
        }
        created.insert(op);
        cur = op->getResult(0);
      }
    }
    cur = reshape(b, loc, cur, localType(global, to, grid).getShape());
    cache[{v, key}] = cur;
    return cur;
  }

  /// `s` with the grid axes `drop` removed from every sub-factor,
  /// canonical.
  TensorSharding withoutAxes(const TensorSharding &s,
                             ArrayRef<int16_t> drop) const {
    TensorSharding out = s;
    for (auto &d : out.dims)
      if (d)
        for (SubFactor &f : *d)
          llvm::erase_if(
              f.axes, [&](int16_t a) { return llvm::is_contained(drop, a); });
    out.canonicalize(grid);
    return out;
  }

  /// reshard's second view rule: when `v` is a tsr.reshape of `u` and `to`
  /// is `from` without some axes G (nothing partial), `v` in `to` is the
  /// reshape of `u` resharded to its own layout without G. Failure (nothing
  /// emitted) when the rule does not apply.
  FailureOr<Value> reshardViewInput(Value v, RankedTensorType global,
                                    const TensorSharding &from,
                                    const TensorSharding &to, Attribute key,
                                    Location loc) {
    auto view = v.getDefiningOp<tsr::ReshapeOp>();
    if (!view || !from.partial.empty() || !to.partial.empty() ||
        !from.isComplete() || !to.isComplete())
      return failure();
    Axes drop;
    for (const auto &d : from.dims)
      for (const SubFactor &f : *d)
        for (int16_t a : f.axes)
          if (!llvm::is_contained(drop, a) &&
              llvm::none_of(to.dims, [&](const auto &t) {
                return llvm::any_of(*t, [&](const SubFactor &g) {
                  return llvm::is_contained(g.axes, a);
                });
              }))
            drop.push_back(a);
    TensorSharding want = to;
    want.canonicalize(grid);
    if (drop.empty() || withoutAxes(from, drop) != want)
      return failure();
    Value u = view.getInput();
    auto su = sharding.find(u);
    if (su == sharding.end() || !su->second.partial.empty() ||
        !su->second.isComplete() || !globalType.count(u))
      return failure();
    RankedTensorType ut = globalType[u];
    TensorSharding tu = withoutAxes(su->second, drop);
    // The local view must keep its element count (the layouts correspond).
    if (localType(ut, tu, grid).getNumElements() !=
        localType(global, to, grid).getNumElements())
      return failure();
    FailureOr<Value> part = reshard(u, ut, su->second, tu, loc);
    if (failed(part))
      return failure();
    OpBuilder b(view);
    b.setInsertionPointAfter(view);
    Value r = reshape(b, loc, *part, localType(global, to, grid).getShape());
    // The new view belongs to the bypassed one's phase (tsr-pipeline-split
    // places a backward op by its tsr.bwd; untagged, a view of a forward
    // value would count as forward).
    if (Operation *def = r.getDefiningOp(); def && def != view)
      if (Attribute bwd = view->getAttr(tsr::kBackwardAttrName))
        def->setAttr(tsr::kBackwardAttrName, bwd);
    cache[{v, key}] = r;
    if (!llvm::is_contained(bypassed, view.getOperation()))
      bypassed.push_back(view);
    return r;
  }

  Value allReduce(OpBuilder &b, Location loc, Value v, ArrayRef<int16_t> axes) {
    auto op =
        shard::AllReduceOp::create(b, loc, v.getType(), grid.symbol.getValue(),
                                   axes, v, shard::ReductionKind::Sum);
    created.insert(op);
    return op;
  }

  /// All-gathers dimension `d` (layout `have`) of `v` to its global size.
  Value gatherDim(OpBuilder &b, Location loc, Value v, const DimFactors &have,
                  size_t d, int64_t globalSize) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> pieces;
    for (const SubFactor &f : have)
      pieces.push_back(f.size / grid.size(f.axes));
    Value cur = reshape(b, loc, v, expand(type.getShape(), d, pieces));
    for (auto [j, f] : llvm::enumerate(have)) {
      if (f.axes.empty())
        continue;
      auto t = cast<RankedTensorType>(cur.getType());
      SmallVector<int64_t> shape(t.getShape());
      shape[d + j] = f.size;
      auto op = shard::AllGatherOp::create(
          b, loc, RankedTensorType::get(shape, t.getElementType()),
          grid.symbol.getValue(), f.axes, cur, APInt(64, d + j));
      created.insert(op);
      cur = op;
    }
    SmallVector<int64_t> shape(type.getShape());
    shape[d] = globalSize;
    return reshape(b, loc, cur, shape);
  }

  FailureOr<TensorSharding> recorded(Operation *op, unsigned r) {
    auto attrs = op->getAttrOfType<ArrayAttr>(tsr::kShardingsAttrName);
    if (!attrs || attrs.size() != op->getNumResults()) {
      op->emitOpError("has no tsr.shardings (run tsr-sharding-propagate)");
      return failure();
    }
    TensorSharding t = TensorSharding::fromAttr(
        attrs[r], cast<RankedTensorType>(op->getResult(r).getType()));
    t.canonicalize(grid);
    // Each grid axis may split one dimension only; a layout that reuses one
    // has no consistent local block (a bug in the pass that recorded it).
    SmallVector<int16_t> seen;
    for (const auto &dim : t.dims)
      if (dim)
        for (const SubFactor &f : *dim)
          for (int16_t a : f.axes) {
            if (llvm::is_contained(seen, a)) {
              op->emitOpError("result #")
                  << r << " has a sharding that splits two dimensions over "
                  << "grid axis " << a << ": " << attrs[r];
              return failure();
            }
            seen.push_back(a);
          }
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
          func.getArgAttr(arg.getArgNumber(), tsr::kShardingAttrName), type);
      t.canonicalize(grid);
      t.fixed = TensorSharding::kArgument;
      sharding[arg] = t;
    }
    Operation *terminator = nullptr;
    WalkResult walk = func.walk([&](Operation *op) {
      if (op == func.getOperation())
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
    DenseMap<Operation *, size_t> indexOf;
    for (auto [i, op] : llvm::enumerate(ops))
      indexOf[op] = i;
    auto ruleOf = [&](Operation *op) -> const ShardingRule * {
      auto it = indexOf.find(op);
      return it == indexOf.end() ? nullptr : &rules[it->second];
    };
    // Decided before the rewrite moves readers onto resharded values.
    DenseSet<Value> readReduced;
    for (Operation *op : ops)
      for (Value v : op->getOperands())
        if (isReducedAnyway(v, ruleOf))
          readReduced.insert(v);

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
        // Copy before inserting: operator[] may grow the map and free the
        // bucket the right-hand reference points into (ASan:
        // heap-use-after-free).
        RankedTensorType type = globalType[in];
        globalType[*nv] = type;
        TensorSharding fixed = results[0];
        fixed.fixed = TensorSharding::kConstraint;
        sharding[*nv] = fixed;
        c.getResult().replaceAllUsesWith(*nv);
        dead.push_back(c);
        continue;
      }
      // A partial operand that another reader reduces anyway is read
      // reduced (isReducedAnyway; the same plan tsr-sharding-propagate made).
      SmallVector<TensorSharding> planned = operands;
      for (auto [o, v] : llvm::enumerate(op->getOperands()))
        if (!planned[o].partial.empty() && readReduced.contains(v))
          planned[o].partial.clear();
      OpPlan plan = planOp(rule, planned, results, grid);
      for (auto [o, v] : llvm::enumerate(op->getOperands())) {
        FailureOr<Value> nv = reshard(v, globalType[v], operands[o],
                                      plan.operands[o], op->getLoc());
        if (failed(nv))
          return failure();
        op->setOperand(o, *nv);
      }
      op->removeAttr(tsr::kShardingsAttrName);

      Attribute value;
      if (op->hasTrait<OpTrait::ConstantLike>() && op->getNumResults() == 1 &&
          matchPattern(op, m_Constant(&value))) {
        if (failed(localizeConstant(op, value, results[0])))
          return failure();
        continue;
      }
      for (auto [r, v] : llvm::enumerate(op->getResults()))
        v.setType(localType(globalType[v], plan.results[r], grid));
      // tessera-check reassembles a traced op's local results by this layout.
      if (tsr::getTraceId(op))
        tsr::setTraceShardings(
            op, llvm::map_to_vector(plan.results, [&](const auto &t) {
              return Attribute(t.toAttr(grid));
            }));
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
      if (rule.recordLayouts) {
        SmallVector<Attribute> layouts;
        SmallVector<RankedTensorType> globals;
        for (auto [r, v] : llvm::enumerate(op->getResults())) {
          layouts.push_back(plan.results[r].toAttr(grid));
          globals.push_back(globalType[v]);
        }
        if (failed(rule.recordLayouts(op, layouts, globals)))
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
        // Copy before inserting: operator[] may grow the map and free the
        // bucket the right-hand reference points into (ASan:
        // heap-use-after-free).
        RankedTensorType type = globalType[v];
        globalType[*nv] = type;
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
            func.getResultAttr(r, tsr::kShardingAttrName), type);
        want.canonicalize(grid);
        FailureOr<Value> nv =
            reshard(v, type, sharding[v], want, terminator->getLoc());
        if (failed(nv))
          return failure();
        terminator->setOperand(r, *nv);
        resultTypes.push_back(nv->getType());
      }
    }
    func.setType(FunctionType::get(func.getContext(),
                                   func.getFunctionBody().getArgumentTypes(),
                                   resultTypes));
    for (Operation *op : llvm::reverse(dead))
      op->erase();
    dead.clear();
    for (Operation *op : llvm::reverse(bypassed))
      if (op->use_empty())
        op->erase();
    bypassed.clear();
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
      dead.push_back(op);
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

/// The sharding `v` was recorded with (its op's tsr.shardings, or an
/// argument's tsr.sharding); null when none.
static Attribute recordedSharding(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
    return func ? func.getArgAttr(arg.getArgNumber(), tsr::kShardingAttrName)
                : Attribute();
  }
  Operation *def = v.getDefiningOp();
  auto attrs = def->getAttrOfType<ArrayAttr>(tsr::kShardingsAttrName);
  unsigned r = cast<OpResult>(v).getResultNumber();
  return attrs && r < attrs.size() ? attrs[r] : Attribute();
}

/// Sums partial sums first: in a backward chain of single-use `tsr.add`s
/// with one layout (a gradient accumulated from several consumers, e.g. a
/// post-LN
/// block's Q, K and V input gradients added one by one to the whole one the
/// residual brings), the leaves that are partial sums over the same axes are
/// added together first, so one all-reduce follows instead of one per leaf
/// (an add passes a partial sum through only when every operand is one).
static void sumPartialSumsFirst(FunctionOpInterface func) {
  SmallVector<tsr::AddOp> roots;
  func.walk([&](tsr::AddOp add) {
    Value r = add.getResult();
    bool inner = r.hasOneUse() && isa<tsr::AddOp>(*r.getUsers().begin()) &&
                 r.getUsers().begin()->getResult(0).getType() == r.getType() &&
                 recordedSharding(r) ==
                     recordedSharding(r.getUsers().begin()->getResult(0));
    if (!inner)
      roots.push_back(add);
  });
  for (tsr::AddOp root : roots) {
    // Gradient accumulations only (autodiff's tsr.bwd): the forward keeps
    // the model's own order of additions.
    if (!root->hasAttr(tsr::kBackwardAttrName))
      continue;
    Attribute layout = recordedSharding(root.getResult());
    auto rootSharding = dyn_cast_or_null<tsr::ShardingAttr>(layout);
    if (!rootSharding || !rootSharding.getPartialAxes().empty())
      continue;
    SmallVector<Value> leaves;
    SmallVector<Operation *> chain;
    std::function<void(Value)> collect = [&](Value v) {
      auto add = v.getDefiningOp<tsr::AddOp>();
      if (add && v.getType() == root.getType() &&
          (add == root || (v.hasOneUse() && recordedSharding(v) == layout))) {
        chain.push_back(add);
        collect(add.getLhs());
        collect(add.getRhs());
        return;
      }
      leaves.push_back(v);
    };
    collect(root.getResult());
    SmallVector<Value> partial, whole;
    Attribute partialLayout;
    for (Value leaf : leaves) {
      auto sh = dyn_cast_or_null<tsr::ShardingAttr>(recordedSharding(leaf));
      bool isPartial = sh && !sh.getPartialAxes().empty() &&
                       (!partialLayout || partialLayout == sh);
      if (isPartial) {
        partialLayout = sh;
        partial.push_back(leaf);
      } else {
        whole.push_back(leaf);
      }
    }
    if (partial.size() < 2 || whole.empty())
      continue;
    OpBuilder b(root);
    auto sum = [&](ArrayRef<Value> terms, Attribute sharding) {
      Value acc = terms.front();
      for (Value t : terms.drop_front()) {
        auto add = tsr::AddOp::create(b, root.getLoc(), acc, t);
        add->setAttr(tsr::kShardingsAttrName, b.getArrayAttr({sharding}));
        acc = add.getResult();
      }
      return acc;
    };
    Value partialSum = sum(partial, partialLayout);
    Value wholeSum = sum(whole, layout);
    auto last = tsr::AddOp::create(b, root.getLoc(), wholeSum, partialSum);
    // The final add stands for the root: it keeps its attributes (tsr.bwd,
    // tsr.trace, its recorded layout).
    last->setAttrs(root->getAttrs());
    root.getResult().replaceAllUsesWith(last.getResult());
    for (Operation *op : chain)
      op->erase();
  }
}

struct ShardingPartitionPass
    : public tessera::sharding::impl::ShardingPartitionBase<
          ShardingPartitionPass> {
  void runOnOperation() override {
    FunctionOpInterface func = getOperation();
    if (func.isExternal())
      return;
    FailureOr<Grid> grid = getEnclosingGrid(func);
    if (failed(grid))
      return signalPassFailure();
    sumPartialSumsFirst(func);
    Partitioner p;
    p.func = func;
    p.grid = *grid;
    if (failed(p.run()))
      return signalPassFailure();
  }
};
} // namespace

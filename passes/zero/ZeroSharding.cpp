//===- ZeroSharding.cpp - ZeRO-1/2/3 over the dp grid axis ----------------===//
//
// See Passes.td (ZeroSharding). The pass first checks every optimizer update
// of a function and plans it (ZeroParam), so that a diagnostic leaves the IR
// unchanged, then rewrites the planned updates.
//
//===----------------------------------------------------------------------===//

#include "passes/zero/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/ShardingRule.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace tessera::zero {
#define GEN_PASS_DEF_ZEROSHARDING
#include "passes/zero/Passes.h.inc"
} // namespace tessera::zero

using namespace mlir;
using namespace tessera;

namespace {

/// One updated parameter and what ZeRO does with it.
struct ZeroParam {
  /// The update (tsr.sgd_update, tsr.adamw_update, ...).
  tsr::OptimizerUpdateOpInterface update;
  BlockArgument param;
  StringAttr name;
  shard::AllReduceOp gradReduce; ///< the dp all-reduce of the gradient
  /// Between the dp all-reduce and the update, in order: first the data
  /// movement that makes the gradient whole over the other grid axes
  /// (`tsr.reshape`, `shard.all_gather` / sum `shard.all_reduce` over
  /// non-dp axes; e.g. a sequence-sharded parameter's gradient under
  /// sequence parallelism; converts and uniform scalings may sit among
  /// it, see isElementwiseStep), then elementwise ops (mixed precision's
  /// `tsr.convert`, fp16's 1/S unscale). Each has one use, the next. With
  /// no dp all-reduce (gradReduce null) the gradient was computed whole on
  /// every dp rank (computedWhole).
  SmallVector<Operation *, 2> gather, elementwise;
  /// Whole-tensor reductions that read a value of the chain besides it
  /// (isScalarReduction: tsr-clip-grad's tsr.sum_squares of the gradient).
  /// After the rewrite they read the dp shard, and their scalar result is
  /// all-reduced over dp.
  SmallVector<Operation *, 1> reductions;
  SmallVector<BlockArgument> optState; ///< AdamW's exp_avg, exp_avg_sq
  /// The ZeRO dimension (-1: the parameter stays replicated), the local
  /// sizes of its sub-factors (one entry for a plain dimension) and the
  /// sub-factor split over dp. The collectives act on the local value viewed
  /// with `dim` expanded into `pieces`, along dimension `dim + sub`.
  int64_t dim = -1, sub = 0;
  SmallVector<int64_t> pieces;
};

/// The grid facts the rewrite needs.
struct GridInfo {
  StringAttr gridName; ///< the shard.grid's symbol
  int16_t dpAxis = -1;
  int64_t dp = 1;
  SmallVector<int64_t> shape;
};

StringAttr nameOf(FunctionOpInterface func, BlockArgument arg) {
  if (auto name = tsr::getArgName(func, arg.getArgNumber()))
    return name;
  return StringAttr::get(func.getContext(),
                         "#" + Twine(arg.getArgNumber()).str());
}

bool hasRole(FunctionOpInterface func, Value v, StringRef role) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &func.getFunctionBody().front())
    return false;
  auto attr = tsr::getArgRole(func, arg.getArgNumber());
  return attr && attr.getValue() == role;
}

tsr::ShardingAttr shardingOf(FunctionOpInterface func, BlockArgument arg) {
  return tsr::getArgSharding(func, arg.getArgNumber());
}

/// Sub-factors of dimension `d` of a value of local type `local` with
/// sharding `attr` (null = replicated).
tsr::ShardingAttr::DimFactors factorsOf(tsr::ShardingAttr attr,
                                        RankedTensorType local, int64_t d,
                                        const GridInfo &grid) {
  int64_t ways = 1;
  if (attr)
    for (int16_t a : attr.getDimAxes(d))
      ways *= grid.shape[a];
  int64_t global = local.getDimSize(d) * ways;
  if (attr)
    return attr.getDimFactors(d, global);
  return {{global, {}}};
}

/// `attr` (of a value of local type `local`; null = replicated) with the dp
/// axis appended as the minor axis of sub-factor `sub` of dimension `dim`.
tsr::ShardingAttr withDpOn(tsr::ShardingAttr attr, RankedTensorType local,
                           int64_t dim, int64_t sub, const GridInfo &grid) {
  MLIRContext *ctx = local.getContext();
  SmallVector<tsr::ShardingAttr::DimFactors> dims;
  for (int64_t d = 0; d < local.getRank(); ++d) {
    tsr::ShardingAttr::DimFactors factors = factorsOf(attr, local, d, grid);
    if (d == dim)
      factors[sub].axes.push_back(grid.dpAxis);
    dims.push_back(std::move(factors));
  }
  FlatSymbolRefAttr gridRef =
      attr ? attr.getGrid() : FlatSymbolRefAttr::get(grid.gridName);
  ArrayRef<int16_t> partial;
  if (attr)
    partial = attr.getPartialAxes();
  return tsr::ShardingAttr::getFactored(ctx, gridRef, dims, partial,
                                        grid.shape);
}

RankedTensorType shardType(RankedTensorType full, int64_t dim, int64_t dp) {
  SmallVector<int64_t> shape(full.getShape());
  shape[dim] /= dp;
  return RankedTensorType::get(shape, full.getElementType());
}

/// The type of `full` (a parameter's local type) with `p.dim` expanded into
/// its sub-factors, the dp-split one divided by `dp` when `shard` is set.
RankedTensorType viewType(RankedTensorType full, const ZeroParam &p, int64_t dp,
                          bool shard) {
  ArrayRef<int64_t> shape = full.getShape();
  SmallVector<int64_t> view(shape.begin(), shape.begin() + p.dim);
  for (auto [j, n] : llvm::enumerate(p.pieces))
    view.push_back(shard && static_cast<int64_t>(j) == p.sub ? n / dp : n);
  view.append(shape.begin() + p.dim + 1, shape.end());
  return RankedTensorType::get(view, full.getElementType());
}

/// A traced op (tessera-check) whose results became dp shards: its
/// `tsr.trace_shardings` gain the dp axis as withDpOn does. `full` is the
/// results' local type before ZeRO.
void retraceDpShards(Operation *op, RankedTensorType full, int64_t dim,
                     int64_t sub, const GridInfo &grid) {
  ArrayAttr old = tsr::getTraceShardings(op);
  if (!old)
    return;
  SmallVector<Attribute> now;
  for (Attribute a : old)
    now.push_back(
        withDpOn(dyn_cast<tsr::ShardingAttr>(a), full, dim, sub, grid));
  tsr::setTraceShardings(op, now);
}

/// `v` reshaped to `type` (itself when it already has that type).
Value reshapeTo(OpBuilder &b, Location loc, Value v, RankedTensorType type) {
  if (v.getType() == type)
    return v;
  return tsr::ReshapeOp::create(b, loc, type, v);
}

/// An op that reduces its single operand to a rank-0 result which its
/// sharding rule makes partial over every axis the operand is split over
/// (every operand factor is a reduction for the result), e.g.
/// tsr.sum_squares: reading a dp shard instead of the whole value, its
/// result is the dp-partial of the whole one.
bool isScalarReduction(Operation *op) {
  auto ruleOp = dyn_cast<tsr::ShardingRuleOpInterface>(op);
  if (!ruleOp || op->getNumOperands() != 1 || op->getNumResults() != 1)
    return false;
  auto result = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!result || result.getRank() != 0)
    return false;
  tsr::ShardingRule rule = ruleOp.getShardingRule();
  if (rule.operands.size() != 1 || rule.results.size() != 1 ||
      !rule.results[0].empty() || !rule.linearGroups.empty())
    return false;
  for (const auto &dim : rule.operands[0])
    for (int64_t f : dim)
      if (!rule.isReductionFor(f, 0))
        return false;
  return true;
}

/// True when `v` has exactly one use that is not a scalar reduction
/// (isScalarReduction); appends those reductions to `reductions`.
bool hasOneChainUse(Value v, SmallVectorImpl<Operation *> *reductions) {
  int chainUses = 0;
  SmallVector<Operation *, 1> found;
  for (Operation *user : v.getUsers()) {
    if (isScalarReduction(user))
      found.push_back(user);
    else
      ++chainUses;
  }
  if (chainUses != 1)
    return false;
  if (reductions)
    reductions->append(found.begin(), found.end());
  return true;
}
bool hasOneChainUse(Operation *op, SmallVectorImpl<Operation *> *reductions) {
  return op->getNumResults() == 1 &&
         hasOneChainUse(op->getResult(0), reductions);
}

struct ZeroShardingPass
    : public zero::impl::ZeroShardingBase<ZeroShardingPass> {
  using Base::Base;

  void runOnOperation() override {
    FunctionOpInterface func = getOperation();
    if (stage == 0)
      return;
    if (stage < 0 || stage > 3) {
      func.emitError("tsr-zero-sharding: stage must be 0, 1, 2 or 3, got ")
          << static_cast<int64_t>(stage);
      return signalPassFailure();
    }
    // The grid is the enclosing module's (its shard.grid and tsr.grid_axes,
    // which no function pass changes).
    auto module = func->getParentOfType<ModuleOp>();
    if (!module) {
      func.emitError("tsr-zero-sharding: the function must be inside a "
                     "module that holds its shard.grid");
      return signalPassFailure();
    }
    FailureOr<GridInfo> grid = gridInfo(module);
    if (failed(grid))
      return signalPassFailure();
    if (grid->dp == 1)
      return; // one data-parallel rank: nothing to shard
    if (!func.isExternal() && failed(runOnFunction(func, *grid)))
      return signalPassFailure();
  }

  FailureOr<GridInfo> gridInfo(ModuleOp module) {
    GridInfo info;
    SmallVector<shard::GridOp> grids(module.getOps<shard::GridOp>());
    if (grids.size() != 1)
      return module.emitError("tsr-zero-sharding needs exactly one shard.grid "
                              "(run it after tsr-sharding-partition), found ")
             << grids.size();
    info.gridName = grids.front().getSymNameAttr();
    info.shape.assign(grids.front().getShape().begin(),
                      grids.front().getShape().end());
    auto names = tsr::getGridAxes(module);
    if (names)
      for (auto [i, n] : llvm::enumerate(names))
        if (auto s = dyn_cast<StringAttr>(n); s && s.getValue() == "dp")
          info.dpAxis = static_cast<int16_t>(i);
    if (info.dpAxis < 0 ||
        info.dpAxis >= static_cast<int64_t>(info.shape.size()))
      return module.emitError("tsr-zero-sharding: the module's tsr.grid_axes "
                              "has no \"dp\" axis of the grid");
    info.dp = info.shape[info.dpAxis];
    if (info.dp < 1)
      return module.emitError("tsr-zero-sharding: the dp axis has no static "
                              "size");
    return info;
  }

  /// Checks one update and picks its ZeRO dimension.
  FailureOr<ZeroParam> plan(FunctionOpInterface func,
                            tsr::OptimizerUpdateOpInterface update,
                            const GridInfo &grid) {
    ZeroParam p;
    p.update = update;
    Value param = update.getParamOperand().get();
    if (!hasRole(func, param, "param"))
      return update->emitOpError(
          "updates a value that is not a function argument with tsr.role = "
          "\"param\"; tsr-zero-sharding cannot shard it");
    p.param = cast<BlockArgument>(param);
    p.name = nameOf(func, p.param);
    auto fail = [&](const Twine &msg) {
      return update->emitError("parameter '")
             << p.name.getValue() << "': " << msg;
    };
    if (failed(findGradChain(update.getGradOperand().get(), grid, p))) {
      if (!computedWhole(update.getGradOperand().get(), grid))
        return fail("its gradient is not a shard.all_reduce over the dp axis "
                    "(run tsr-zero-sharding after tsr-sharding-partition)");
      p.gradReduce = nullptr; // replicated over dp: sliced at the update
      p.gather.clear();
      p.elementwise.clear();
    }
    if (p.gradReduce) {
      if (p.gradReduce.getReduction() != shard::ReductionKind::Sum)
        return fail("its gradient all-reduce is not a sum");
      if (!hasOneChainUse(p.gradReduce.getOperation(), &p.reductions))
        return fail("its gradient all-reduce has uses other than the update "
                    "and whole-tensor reductions (tsr.sum_squares)");
      Value whole = p.gather.empty() ? p.gradReduce.getResult()
                                     : p.gather.back()->getResult(0);
      if (cast<ShapedType>(whole.getType()).getShape() !=
          cast<ShapedType>(param.getType()).getShape())
        return fail("its dp-reduced gradient, made whole over the other grid "
                    "axes, does not have the parameter's local shape");
    }
    if (p.gradReduce) {
      // Whole-tensor reductions of the gradient (tsr-clip-grad's norm
      // terms) may read it where it is whole over the other axes: the dp
      // all-reduce's result when nothing moves it, the end of the movement,
      // or an elementwise op after it (each becomes the dp shard).
      Value whole = p.gather.empty() ? p.gradReduce.getResult()
                                     : p.gather.back()->getResult(0);
      for (Operation *op : p.gather)
        for (Operation *user : op->getResult(0).getUsers())
          if (isScalarReduction(user) &&
              !llvm::is_contained(p.reductions, user))
            p.reductions.push_back(user);
      for (Operation *op : p.elementwise)
        for (Operation *user : op->getResult(0).getUsers())
          if (isScalarReduction(user))
            p.reductions.push_back(user);
      for (Operation *r : p.reductions) {
        Value in = r->getOperand(0);
        Operation *def = in.getDefiningOp();
        if (in != whole && !llvm::is_contained(p.elementwise, def))
          return fail("a whole-tensor reduction (" +
                      r->getName().getStringRef() +
                      ") reads its gradient before the gradient is whole "
                      "over the non-dp axes");
      }
    }
    for (Value state : update.getOptimizerState()) {
      if (!hasRole(func, state, "opt_state"))
        return fail("its optimizer state is not a function argument with "
                    "tsr.role = \"opt_state\"");
      if (!state.hasOneUse())
        return fail("its optimizer state '" +
                    nameOf(func, cast<BlockArgument>(state)).getValue() +
                    "' has uses other than the update");
      p.optState.push_back(cast<BlockArgument>(state));
    }
    auto type = cast<RankedTensorType>(param.getType());
    tsr::ShardingAttr attr = shardingOf(func, p.param);
    for (int64_t d = 0; attr && d < type.getRank(); ++d)
      if (llvm::is_contained(attr.getDimAxes(d), grid.dpAxis))
        return fail("it is already split over the dp axis");
    // Plain dimensions first (no reshapes), then sub-factors of factored
    // ones (e.g. the 64 of a fused QKV's {3, 64 : tp}).
    for (bool factored : {false, true})
      for (int64_t d = 0; d < type.getRank() && p.dim < 0; ++d) {
        if ((attr && attr.isDimFactored(d)) != factored)
          continue;
        SmallVector<int64_t> pieces;
        for (const auto &f : factorsOf(attr, type, d, grid)) {
          int64_t ways = 1;
          for (int16_t a : f.axes)
            ways *= grid.shape[a];
          pieces.push_back(f.size / ways);
        }
        for (auto [j, n] : llvm::enumerate(pieces))
          if (n % grid.dp == 0) {
            p.dim = d;
            p.sub = j;
            p.pieces = pieces;
            break;
          }
      }
    return p;
  }

  /// A value every element of which is the same scalar: made by an op from
  /// rank-0 operands only (e.g. fp16's broadcast 1/S). It equals its own
  /// shards, so an elementwise op with it may move across the dp
  /// reduction and the movement over other axes.
  static bool isUniform(Value v) {
    Operation *d = v.getDefiningOp();
    return d && d->getNumResults() == 1 && d->getNumOperands() > 0 &&
           llvm::all_of(d->getOperandTypes(), [](Type t) {
             auto ranked = dyn_cast<RankedTensorType>(t);
             return ranked && ranked.getRank() == 0;
           });
  }

  /// An elementwise op that may sit among the data movement between the dp
  /// all-reduce and the update and move after the reduce-scatter: a
  /// `tsr.convert` (the sum over dp is then taken in its input type, as
  /// without ZeRO) or an elementwise op whose other operands are uniform
  /// (fp16's unscale by 1/S, which commutes with the sum).
  static bool isElementwiseStep(Operation *d) {
    if (isa<tsr::ConvertOp>(d))
      return true;
    if (!d->hasTrait<OpTrait::Elementwise>() || d->getNumResults() != 1 ||
        d->getNumOperands() != 2)
      return false;
    return isUniform(d->getOperand(0)) != isUniform(d->getOperand(1));
  }

  /// The operand of a chain op that carries the gradient.
  static Value chainOperand(Operation *d) {
    if (d->getNumOperands() == 2 && isUniform(d->getOperand(0)))
      return d->getOperand(1);
    return d->getOperand(0);
  }

  /// Whether `v` is a gradient that backward computed whole on every dp
  /// rank (the partition gathered its inputs over dp instead of reducing
  /// it, e.g. an LM head's weight gradient from activations all-gathered
  /// over dp and tp): a backward op (`tsr.bwd`), reached through the chain
  /// ops findGradChain accepts without any collective over dp.
  static bool computedWhole(Value v, const GridInfo &grid) {
    for (int depth = 0; depth < 16; ++depth) {
      Operation *d = v.getDefiningOp();
      if (!d)
        return false;
      if (tsr::isBackward(d))
        return true;
      if (auto ag = dyn_cast<shard::AllGatherOp>(d);
          ag && !llvm::is_contained(ag.getGridAxes(), grid.dpAxis)) {
        v = ag.getInput();
        continue;
      }
      if (auto ar = dyn_cast<shard::AllReduceOp>(d);
          ar && !llvm::is_contained(ar.getGridAxes(), grid.dpAxis)) {
        v = ar.getInput();
        continue;
      }
      if (!isa<tsr::ReshapeOp>(d) && !isElementwiseStep(d))
        return false;
      v = chainOperand(d);
    }
    return false;
  }

  /// Finds the chain from the dp all-reduce to `v` (the update's gradient
  /// operand, or an elementwise op's operand on the way): single-use
  /// elementwise ops nearest the update (following an operand of the same
  /// shape whose own walk succeeds), then single-use data movement over
  /// non-dp axes. Fills p.gradReduce, p.gather and p.elementwise.
  static LogicalResult findGradChain(Value v, const GridInfo &grid,
                                     ZeroParam &p, int depth = 0) {
    if (depth > 8)
      return failure();
    auto overDp = [&](ArrayRef<int16_t> axes) {
      return llvm::is_contained(axes, grid.dpAxis);
    };
    SmallVector<Operation *> gather;
    for (Value u = v; Operation *d = u.getDefiningOp();) {
      if (auto ar = dyn_cast<shard::AllReduceOp>(d);
          ar && overDp(ar.getGridAxes())) {
        p.gradReduce = ar;
        p.gather.assign(gather.rbegin(), gather.rend());
        p.elementwise.clear();
        // Elementwise ops after the last movement are the elementwise
        // segment's.
        while (!p.gather.empty() && isElementwiseStep(p.gather.back()))
          p.elementwise.insert(p.elementwise.begin(), p.gather.pop_back_val());
        return success();
      }
      bool moves = isa<tsr::ReshapeOp>(d) || isElementwiseStep(d);
      if (auto ag = dyn_cast<shard::AllGatherOp>(d))
        moves = !overDp(ag.getGridAxes());
      if (auto ar = dyn_cast<shard::AllReduceOp>(d))
        moves = ar.getReduction() == shard::ReductionKind::Sum;
      if (!moves || !hasOneChainUse(d, nullptr))
        break;
      gather.push_back(d);
      u = chainOperand(d);
    }
    Operation *d = v.getDefiningOp();
    if (!d || !d->hasTrait<OpTrait::Elementwise>() || d->getNumResults() != 1 ||
        !hasOneChainUse(d, nullptr))
      return failure();
    auto shape = [](Value x) {
      return cast<ShapedType>(x.getType()).getShape();
    };
    for (Value operand : d->getOperands())
      if (shape(operand) == shape(v) &&
          succeeded(findGradChain(operand, grid, p, depth + 1))) {
        p.elementwise.push_back(d);
        return success();
      }
    return failure();
  }

  LogicalResult runOnFunction(FunctionOpInterface func, const GridInfo &grid) {
    Block &body = func.getFunctionBody().front();
    std::vector<ZeroParam> params;
    SmallVector<Attribute> replicated;
    // The end of backward: where ZeRO-1 puts its reduce-scatters.
    Operation *firstUpdate = nullptr;
    for (Operation &op : body) {
      auto update = dyn_cast<tsr::OptimizerUpdateOpInterface>(op);
      if (!update)
        continue;
      if (!firstUpdate)
        firstUpdate = &op;
      FailureOr<ZeroParam> p = plan(func, update, grid);
      if (failed(p))
        return failure();
      if (p->dim < 0)
        replicated.push_back(p->name);
      else
        params.push_back(*p);
    }
    if (params.empty() && replicated.empty())
      return success();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // The start of backward: ZeRO-3 gathers a parameter once for the uses
    // before it and once for the uses from it on.
    Operation *backwardStart = nullptr;
    for (Operation &op : body)
      if (tsr::isBackward(&op)) {
        backwardStart = &op;
        break;
      }

    OpBuilder b(func.getContext());
    StringRef gridName = grid.gridName.getValue();
    SmallVector<int16_t> dpAxes = {grid.dpAxis};
    // Gradients first, so that ZeRO-1's reduce-scatters stay together.
    for (ZeroParam &p : params) {
      auto full = cast<RankedTensorType>(p.param.getType());
      RankedTensorType local = shardType(full, p.dim, grid.dp);
      if (!p.gradReduce) {
        // Replicated over dp already: each rank takes its slice (local).
        OpOperand &grad = p.update.getGradOperand();
        auto type = cast<RankedTensorType>(grad.get().getType());
        Location loc = p.update->getLoc();
        b.setInsertionPoint(p.update);
        Value v = reshapeTo(b, loc, grad.get(),
                            viewType(type, p, grid.dp, /*shard=*/false));
        v = shard::AllSliceOp::create(
            b, loc, viewType(type, p, grid.dp, /*shard=*/true), gridName,
            dpAxes, v, APInt(64, p.dim + p.sub));
        grad.set(reshapeTo(b, loc, v, type.clone(local.getShape())));
        continue;
      }
      // All-reduce over dp -> reduce-scatter over dp (after an all-reduce
      // over the other axes, if the original had any). With data movement
      // between them (p.gather), the all-reduce keeps only the other axes
      // and the reduce-scatter follows the movement: a sum over dp
      // commutes with gathers and reshapes over the other axes.
      shard::AllReduceOp ar = p.gradReduce;
      Location loc = ar.getLoc();
      SmallVector<int16_t> others;
      for (int16_t a : ar.getGridAxes())
        if (a != grid.dpAxis)
          others.push_back(a);
      Operation *whole = p.gather.empty() ? ar.getOperation() : p.gather.back();
      bool atEnd = stage == 1 && whole->isBeforeInBlock(firstUpdate);
      // Without movement the other axes' all-reduce goes where the
      // reduce-scatter goes; with it, where the dp all-reduce was.
      b.setInsertionPoint(atEnd && p.gather.empty() ? firstUpdate : ar);
      Value grad = ar.getInput();
      if (!others.empty())
        grad =
            shard::AllReduceOp::create(b, loc, grad.getType(), gridName, others,
                                       grad, shard::ReductionKind::Sum);
      // Elementwise steps among the movement (mixed precision converts and
      // unscales before an all-gather over sp) move after the
      // reduce-scatter: the movement carries the reduced type, and so
      // does the reduce-scatter.
      SmallVector<Operation *> steps;
      if (!p.gather.empty()) {
        ar.getResult().replaceAllUsesWith(grad);
        ar.erase();
        for (Operation *op : p.gather) {
          Value in = chainOperand(op);
          if (isElementwiseStep(op)) {
            op->getResult(0).replaceAllUsesWith(in);
            steps.push_back(op);
            continue;
          }
          auto type = cast<RankedTensorType>(op->getResult(0).getType());
          op->getResult(0).setType(type.clone(
              cast<RankedTensorType>(in.getType()).getElementType()));
        }
        grad = whole->getResult(0);
        if (atEnd)
          b.setInsertionPoint(firstUpdate);
        else
          b.setInsertionPointAfter(whole);
      }
      auto reduced = cast<RankedTensorType>(grad.getType());
      full = full.clone(reduced.getElementType());
      local = local.clone(reduced.getElementType());
      SmallVector<OpOperand *> wholeUses;
      for (OpOperand &use : grad.getUses())
        wholeUses.push_back(&use);
      Value view =
          reshapeTo(b, loc, grad, viewType(full, p, grid.dp, /*shard=*/false));
      auto rs = shard::ReduceScatterOp::create(
          b, loc, viewType(full, p, grid.dp, /*shard=*/true),
          FlatSymbolRefAttr::get(grid.gridName), b.getDenseI16ArrayAttr(dpAxes),
          view,
          shard::ReductionKindAttr::get(b.getContext(),
                                        shard::ReductionKind::Sum),
          b.getIntegerAttr(b.getIndexType(), p.dim + p.sub));
      Value sharded = reshapeTo(b, loc, rs.getResult(), local);
      for (Operation *op : steps) {
        op->moveAfter(sharded.getDefiningOp());
        for (OpOperand &operand : op->getOpOperands()) {
          if (operand.get() == chainOperand(op)) {
            operand.set(sharded);
            continue;
          }
          // A uniform operand: its maker again, at the shard's shape.
          Operation *maker = operand.get().getDefiningOp();
          b.setInsertionPoint(op);
          Operation *clone = b.clone(*maker);
          auto type = cast<RankedTensorType>(clone->getResult(0).getType());
          clone->getResult(0).setType(type.clone(local.getShape()));
          operand.set(clone->getResult(0));
          if (maker->use_empty())
            maker->erase();
        }
        auto type = cast<RankedTensorType>(op->getResult(0).getType());
        retraceDpShards(op, type, p.dim, p.sub, grid);
        op->getResult(0).setType(type.clone(local.getShape()));
        sharded = op->getResult(0);
      }
      if (p.gather.empty()) {
        ar.getResult().replaceAllUsesWith(sharded);
        ar.erase();
      } else {
        for (OpOperand *use : wholeUses)
          use->set(sharded);
      }
      // The elementwise ops (e.g. mixed precision's convert and fp16's
      // unscale) run on the shard; their other operands are sliced to it.
      Value prev = sharded;
      for (Operation *op : p.elementwise) {
        Operation *def = prev.getDefiningOp();
        if (op->isBeforeInBlock(def))
          op->moveAfter(def);
        b.setInsertionPoint(op);
        for (OpOperand &operand : op->getOpOperands()) {
          if (operand.get() == prev)
            continue;
          if (isUniform(operand.get())) {
            // A uniform operand (fp16's 1/S, tsr-clip-grad's coefficient,
            // broadcast): its maker again, at the shard's shape.
            Operation *maker = operand.get().getDefiningOp();
            Operation *clone = b.clone(*maker);
            auto type = cast<RankedTensorType>(clone->getResult(0).getType());
            clone->getResult(0).setType(type.clone(local.getShape()));
            operand.set(clone->getResult(0));
            if (maker->use_empty())
              maker->erase();
            continue;
          }
          auto type = cast<RankedTensorType>(operand.get().getType());
          Value v = reshapeTo(b, loc, operand.get(),
                              viewType(type, p, grid.dp, /*shard=*/false));
          v = shard::AllSliceOp::create(
              b, loc, viewType(type, p, grid.dp, /*shard=*/true), gridName,
              dpAxes, v, APInt(64, p.dim + p.sub));
          operand.set(reshapeTo(b, loc, v, type.clone(local.getShape())));
        }
        auto type = cast<RankedTensorType>(op->getResult(0).getType());
        retraceDpShards(op, type, p.dim, p.sub, grid);
        op->getResult(0).setType(type.clone(local.getShape()));
        prev = op->getResult(0);
      }
      // Whole-tensor reductions now read the dp shard: their results are
      // dp-partial, summed by a scalar all-reduce over dp.
      for (Operation *r : p.reductions) {
        b.setInsertionPointAfter(r);
        Value partial = r->getResult(0);
        auto sum = shard::AllReduceOp::create(b, r->getLoc(), partial.getType(),
                                              gridName, dpAxes, partial,
                                              shard::ReductionKind::Sum);
        partial.replaceAllUsesExcept(sum.getResult(), sum);
      }
    }

    for (ZeroParam &p : params) {
      auto full = cast<RankedTensorType>(p.param.getType());
      RankedTensorType local = shardType(full, p.dim, grid.dp);
      Location loc = p.update->getLoc();

      // Optimizer state: arguments and results become dp shards.
      for (BlockArgument state : p.optState) {
        unsigned i = state.getArgNumber();
        func.setArgAttr(i, tsr::kShardingAttrName,
                        withDpOn(shardingOf(func, state),
                                 cast<RankedTensorType>(state.getType()), p.dim,
                                 p.sub, grid));
        state.setType(local);
      }
      auto resultAttr = [&](Value v, tsr::ShardingAttr attr) {
        for (OpOperand &use : v.getUses())
          if (use.getOwner() == ret)
            func.setResultAttr(use.getOperandNumber(), tsr::kShardingAttrName,
                               attr);
      };
      for (auto [state, updated] :
           llvm::zip_equal(p.optState, p.update.getUpdatedOptimizerState()))
        resultAttr(updated, shardingOf(func, state));

      // The dp shard of `v` (a value of the parameter's type) and back.
      RankedTensorType view = viewType(full, p, grid.dp, /*shard=*/false);
      RankedTensorType viewShard = viewType(full, p, grid.dp, /*shard=*/true);
      APInt axis(64, p.dim + p.sub);
      auto gather = [&](Location at, Value shard) {
        Value v = reshapeTo(b, at, shard, viewShard);
        v = shard::AllGatherOp::create(b, at, view, gridName, dpAxes, v, axis);
        return reshapeTo(b, at, v, full);
      };

      tsr::ShardingAttr paramAttr = shardingOf(func, p.param);
      if (stage < 3) {
        // Update the rank's slice, then gather the new parameter.
        b.setInsertionPoint(p.update);
        Value v = reshapeTo(b, loc, p.param, view);
        v = shard::AllSliceOp::create(b, loc, viewShard, gridName, dpAxes, v,
                                      axis);
        p.update.getParamOperand().set(reshapeTo(b, loc, v, local));
        retraceDpShards(p.update, full, p.dim, p.sub, grid);
        for (Value r : p.update->getResults())
          r.setType(local);
        Value newParam = p.update.getUpdatedParam();
        SmallVector<OpOperand *> uses;
        for (OpOperand &use : newParam.getUses())
          uses.push_back(&use);
        b.setInsertionPointAfter(p.update);
        Value gathered = gather(loc, newParam);
        for (OpOperand *use : uses)
          use->set(gathered);
        continue;
      }

      // ZeRO-3: the stored parameter is the shard; gather it before its
      // forward uses and, separately, before its backward uses.
      SmallVector<OpOperand *> forward, backward;
      for (OpOperand &use : p.param.getUses()) {
        Operation *user = body.findAncestorOpInBlock(*use.getOwner());
        if (user == p.update)
          continue;
        bool bwd = backwardStart && !user->isBeforeInBlock(backwardStart);
        (bwd ? backward : forward).push_back(&use);
      }
      p.param.setType(local);
      for (ArrayRef<OpOperand *> uses :
           {ArrayRef(forward), ArrayRef(backward)}) {
        if (uses.empty())
          continue;
        Operation *first =
            body.findAncestorOpInBlock(*uses.front()->getOwner());
        for (OpOperand *use : uses) {
          Operation *user = body.findAncestorOpInBlock(*use->getOwner());
          if (user->isBeforeInBlock(first))
            first = user;
        }
        b.setInsertionPoint(first);
        Value gathered = gather(first->getLoc(), p.param);
        for (OpOperand *use : uses)
          use->set(gathered);
      }
      tsr::ShardingAttr sharded = withDpOn(paramAttr, full, p.dim, p.sub, grid);
      func.setArgAttr(p.param.getArgNumber(), tsr::kShardingAttrName, sharded);
      retraceDpShards(p.update, full, p.dim, p.sub, grid);
      for (Value r : p.update->getResults())
        r.setType(local);
      resultAttr(p.update.getUpdatedParam(), sharded);
    }
    // Values the rewrite made later than their readers (an elementwise op
    // moved after its reduce-scatter, read by a reduction; ZeRO-1's
    // reduce-scatters in front of the first update) are read after them.
    if (!sortTopologically(&body))
      return func.emitError("tsr-zero-sharding: the rewritten step has a "
                            "cycle");
    if (!replicated.empty())
      func->setAttr(tsr::kZeroReplicatedAttrName,
                    ArrayAttr::get(func.getContext(), replicated));
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   ret.getOperandTypes()));
    return success();
  }
};

} // namespace

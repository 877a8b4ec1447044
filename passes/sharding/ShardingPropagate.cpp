//===- ShardingPropagate.cpp - factor sharding propagation ----------------===//
//
// Only ShardingRuleOpInterface is consulted; see Passes.td and
// FactorSharding.h for the model.
//
//===----------------------------------------------------------------------===//

#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace tessera::sharding {
#define GEN_PASS_DEF_SHARDINGPROPAGATE
#include "passes/sharding/Passes.h.inc"
} // namespace tessera::sharding

using namespace mlir;
using namespace tessera;
using namespace tessera::sharding;
using tsr::ShardingRule;
using tsr::ShardingRuleOpInterface;

namespace {
struct ShardingPropagatePass
    : public tessera::sharding::impl::ShardingPropagateBase<
          ShardingPropagatePass> {
  void runOnOperation() override {
    FunctionOpInterface func = getOperation();
    if (func.isExternal())
      return;
    FailureOr<Grid> grid = getEnclosingGrid(func);
    if (failed(grid) || failed(propagate(func, *grid)))
      return signalPassFailure();
  }

  LogicalResult propagate(FunctionOpInterface func, const Grid &grid) {
    DenseMap<Value, TensorSharding> state;
    for (BlockArgument arg : func.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type)
        return func.emitError("argument ")
               << arg.getArgNumber() << " is not a ranked tensor";
      TensorSharding t = TensorSharding::fromAttr(
          func.getArgAttr(arg.getArgNumber(), tsr::kShardingAttrName), type);
      t.canonicalize(grid);
      t.fixed = TensorSharding::kArgument;
      state[arg] = t;
    }
    SmallVector<Operation *> ops;
    std::vector<ShardingRule> rules;
    WalkResult walk = func.walk([&](Operation *op) {
      if (op == func.getOperation() || op->hasTrait<OpTrait::IsTerminator>())
        return WalkResult::advance();
      auto iface = dyn_cast<ShardingRuleOpInterface>(op);
      if (!iface) {
        op->emitOpError("has no sharding rule (ShardingRuleOpInterface)");
        return WalkResult::interrupt();
      }
      ShardingRule rule = iface.getShardingRule();
      if (failed(rule.verify(op)))
        return WalkResult::interrupt();
      ops.push_back(op);
      rules.push_back(std::move(rule));
      for (Value r : op->getResults())
        state[r] = TensorSharding::unknown(
            cast<RankedTensorType>(r.getType()).getRank());
      // An elementwise copy of an argument (tsr-mixed-precision's bf16
      // copy of a parameter, the one value its readers see) is laid out as
      // the argument and as firmly, so that a parameter's split still wins
      // over an activation's constraint (Megatron-SP's sequence split) at
      // the ops that read the copy.
      if (op->hasTrait<OpTrait::Elementwise>() && op->getNumOperands() == 1 &&
          op->getNumResults() == 1)
        if (auto arg = dyn_cast<BlockArgument>(op->getOperand(0));
            arg &&
            cast<RankedTensorType>(arg.getType()).getShape() ==
                cast<RankedTensorType>(op->getResult(0).getType()).getShape()) {
          // A copy first: inserting the result may grow the map and free
          // the argument's entry under a reference to it.
          TensorSharding t = state[arg];
          state[op->getResult(0)] = t;
        }
      // A constraint's result is given, like an argument's.
      if (auto c = dyn_cast<tsr::ShardingConstraintOp>(op)) {
        TensorSharding t =
            TensorSharding::fromAttr(c.getSharding(), c.getType());
        t.canonicalize(grid);
        t.fixed = TensorSharding::kConstraint;
        state[c.getResult()] = t;
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();

    auto visit = [&](size_t i) {
      Operation *op = ops[i];
      const ShardingRule &rule = rules[i];
      SmallVector<const TensorSharding *> operands, results;
      for (Value v : op->getOperands())
        operands.push_back(&state[v]);
      for (Value v : op->getResults())
        results.push_back(&state[v]);
      FactorAssignment assignment =
          resolveFactors(rule, operands, results, grid, Priority::MostSplit);
      bool changed = false;
      // A dim takes the projection when it is unknown, or when the
      // projection splits it more ways (splits only grow, so this
      // terminates): a layout reached late (Megatron-SP's sequence split
      // arriving at a row-parallel matmul's output from the residual add
      // after it) still wins over an unsplit one reached first. Either way
      // only over grid axes that no other dim of the value uses: a value's
      // dims are split over disjoint axes (two projections of one op can
      // each be valid alone and clash together, e.g. gather_grad's vocab
      // dim split by the table's update and its hidden dim by the incoming
      // gradient).
      auto merge = [&](Value v, const tsr::ShardingRule::TensorFactors &dims) {
        TensorSharding proj = project(rule, dims, assignment, grid);
        TensorSharding &cur = state[v];
        if (cur.fixed)
          return;
        for (auto [d, dim] : llvm::enumerate(proj.dims)) {
          if (!dim)
            continue;
          if (cur.dims[d] &&
              splitWays(*dim, grid) <= splitWays(*cur.dims[d], grid))
            continue;
          bool clash = false;
          for (auto [e, other] : llvm::enumerate(cur.dims))
            if (e != d && other)
              for (const SubFactor &f : *other)
                for (const SubFactor &g : *dim)
                  for (int16_t a : g.axes)
                    clash |= llvm::is_contained(f.axes, a);
          if (clash)
            continue;
          cur.dims[d] = dim;
          changed = true;
        }
      };
      for (auto [r, v] : llvm::enumerate(op->getResults()))
        merge(v, rule.results[r]);
      // Backward: into values defined by ops (arguments are fixed).
      for (auto [o, v] : llvm::enumerate(op->getOperands()))
        if (!isa<BlockArgument>(v))
          merge(v, rule.operands[o]);
      return changed;
    };
    for (int iter = 0; iter < 64; ++iter) {
      bool changed = false;
      for (size_t i = 0; i < ops.size(); ++i)
        changed |= visit(i);
      for (size_t i = ops.size(); i-- > 0;)
        changed |= visit(i);
      if (!changed)
        break;
    }

    // Unknown dims are replicated; then partial sums in program order.
    for (Operation *op : ops)
      for (Value r : op->getResults())
        state[r].complete(cast<RankedTensorType>(r.getType()));
    MLIRContext *ctx = func.getContext();
    // Readers of a partial sum that another reader reduces anyway read it
    // reduced (isReducedAnyway).
    DenseMap<Operation *, size_t> indexOf;
    for (auto [i, op] : llvm::enumerate(ops))
      indexOf[op] = i;
    auto ruleOf = [&](Operation *op) -> const ShardingRule * {
      auto it = indexOf.find(op);
      return it == indexOf.end() ? nullptr : &rules[it->second];
    };
    for (auto [i, op] : llvm::enumerate(ops)) {
      SmallVector<TensorSharding> operands, results;
      for (Value v : op->getOperands()) {
        operands.push_back(state[v]);
        if (!operands.back().partial.empty() && isReducedAnyway(v, ruleOf))
          operands.back().partial.clear();
      }
      for (Value v : op->getResults())
        results.push_back(state[v]);
      OpPlan plan = planOp(rules[i], operands, results, grid);
      SmallVector<Attribute> attrs;
      for (auto [r, v] : llvm::enumerate(op->getResults())) {
        // The op's output stays partial only where it is stored as the op
        // computes it; a value laid out otherwise is resharded after the
        // op, and that reshard reduces (a reduce-scatter where it can).
        state[v].partial = plan.results[r].dims == state[v].dims
                               ? plan.results[r].partial
                               : Axes();
        attrs.push_back(state[v].toAttr(grid));
      }
      op->setAttr(tsr::kShardingsAttrName, ArrayAttr::get(ctx, attrs));
    }
    return success();
  }
};
} // namespace

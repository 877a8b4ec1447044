//===- FactorSharding.cpp - factor shardings shared by the sharding passes ===//

#include "passes/sharding/FactorSharding.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace tessera;
using namespace tessera::sharding;
using tsr::ShardingAttr;
using tsr::ShardingRule;

int64_t Grid::size(ArrayRef<int16_t> axes) const {
  int64_t n = 1;
  for (int16_t a : axes)
    if (a >= 0 && a < static_cast<int64_t>(shape.size()))
      n *= shape[a];
  return n;
}

TensorSharding TensorSharding::replicated(RankedTensorType type) {
  TensorSharding t;
  for (int64_t size : type.getShape())
    t.dims.push_back(DimFactors{SubFactor{size, {}}});
  return t;
}

TensorSharding TensorSharding::fromAttr(Attribute attr, RankedTensorType type) {
  auto sharding = dyn_cast_or_null<ShardingAttr>(attr);
  if (!sharding)
    return replicated(type);
  TensorSharding t;
  for (int64_t d = 0; d < type.getRank(); ++d)
    t.dims.push_back(sharding.getDimFactors(d, type.getDimSize(d)));
  t.partial.assign(sharding.getPartialAxes().begin(),
                   sharding.getPartialAxes().end());
  return t;
}

ShardingAttr TensorSharding::toAttr(const Grid &grid) const {
  SmallVector<DimFactors> all;
  for (const std::optional<DimFactors> &d : dims)
    all.push_back(d ? *d : DimFactors{SubFactor{1, {}}});
  return ShardingAttr::getFactored(grid.symbol.getContext(), grid.symbol, all,
                                   partial, grid.shape);
}

bool TensorSharding::isComplete() const {
  return llvm::all_of(dims, [](const auto &d) { return d.has_value(); });
}

void TensorSharding::complete(RankedTensorType type) {
  for (auto [d, dim] : llvm::enumerate(dims))
    if (!dim)
      dim = DimFactors{SubFactor{type.getDimSize(d), {}}};
}

void TensorSharding::canonicalize(const Grid &grid) {
  for (auto &d : dims)
    if (d)
      d = sharding::canonical(*d, grid);
}

FailureOr<Grid> sharding::getModuleGrid(ModuleOp module) {
  auto grids = llvm::to_vector(module.getOps<shard::GridOp>());
  shard::GridOp grid = module.lookupSymbol<shard::GridOp>("grid");
  if (!grid && grids.size() == 1)
    grid = grids[0];
  if (!grid)
    return module.emitError("no shard.grid @grid (run tsr-sharding-annotate)");
  Grid g;
  g.symbol = FlatSymbolRefAttr::get(grid.getSymNameAttr());
  g.shape.assign(grid.getShape().begin(), grid.getShape().end());
  return g;
}

FailureOr<Grid> sharding::getEnclosingGrid(FunctionOpInterface func) {
  auto module = func->getParentOfType<ModuleOp>();
  if (!module)
    return func.emitError("must be inside a module that holds its shard.grid");
  return getModuleGrid(module);
}

int64_t sharding::splitWays(const DimFactors &dim, const Grid &grid) {
  int64_t n = 1;
  for (const SubFactor &f : dim)
    n *= grid.size(f.axes);
  return n;
}

int64_t sharding::localExtent(const DimFactors &dim, const Grid &grid) {
  int64_t n = 1;
  for (const SubFactor &f : dim)
    n *= f.size / grid.size(f.axes);
  return n;
}

RankedTensorType sharding::localType(RankedTensorType type,
                                     const TensorSharding &sharding,
                                     const Grid &grid) {
  SmallVector<int64_t> shape;
  for (auto [d, dim] : llvm::enumerate(sharding.dims))
    shape.push_back(dim ? localExtent(*dim, grid) : type.getDimSize(d));
  return RankedTensorType::get(shape, type.getElementType(),
                               type.getEncoding());
}

DimFactors sharding::canonical(DimFactors dim, const Grid &grid) {
  ShardingAttr::canonicalize(dim, grid.shape);
  return dim;
}

/// Splits sub-factor `f` into a major part of size `major` and the rest, so
/// that the layout is unchanged. std::nullopt when it is not possible.
std::optional<std::pair<SubFactor, SubFactor>>
sharding::splitSubFactor(const SubFactor &f, int64_t major, const Grid &grid) {
  if (major <= 0 || f.size % major != 0)
    return std::nullopt;
  int64_t minor = f.size / major;
  if (f.axes.empty())
    return std::make_pair(SubFactor{major, {}}, SubFactor{minor, {}});
  if (major % grid.size(f.axes) == 0)
    return std::make_pair(SubFactor{major, f.axes}, SubFactor{minor, {}});
  // A prefix of the axes covering exactly `major`, the rest splitting minor.
  for (size_t j = 1; j < f.axes.size(); ++j) {
    ArrayRef<int16_t> head(f.axes.data(), j),
        tail(f.axes.data() + j, f.axes.size() - j);
    if (grid.size(head) == major && minor % grid.size(tail) == 0)
      return std::make_pair(SubFactor{major, SmallVector<int16_t, 2>(head)},
                            SubFactor{minor, SmallVector<int16_t, 2>(tail)});
  }
  return std::nullopt;
}

std::optional<SmallVector<DimFactors>>
sharding::cutAtFactors(const DimFactors &dim, ArrayRef<int64_t> factorSizes,
                       const Grid &grid) {
  SmallVector<SubFactor> subs;
  for (const SubFactor &f : dim)
    if (f.size != 1 || !f.axes.empty())
      subs.push_back(f);
  SmallVector<DimFactors> result;
  size_t idx = 0;
  for (int64_t n : factorSizes) {
    DimFactors piece;
    int64_t remaining = n;
    while (remaining > 1) {
      if (idx >= subs.size())
        return std::nullopt;
      SubFactor &cur = subs[idx];
      if (remaining % cur.size == 0) {
        piece.push_back(cur);
        remaining /= cur.size;
        ++idx;
        continue;
      }
      auto split = splitSubFactor(cur, remaining, grid);
      if (!split)
        return std::nullopt;
      piece.push_back(split->first);
      cur = split->second;
      remaining = 1;
    }
    if (piece.empty())
      piece.push_back(SubFactor{1, {}});
    result.push_back(canonical(piece, grid));
  }
  for (; idx < subs.size(); ++idx)
    if (subs[idx].size != 1)
      return std::nullopt;
  return result;
}

static Axes toAxes(ArrayRef<int16_t> axes) {
  return Axes(axes.begin(), axes.end());
}

std::optional<SmallVector<RefinedPiece>>
sharding::commonRefinement(const DimFactors &have, const DimFactors &want,
                           const Grid &grid) {
  auto significant = [](const DimFactors &dim) {
    SmallVector<SubFactor> subs;
    for (const SubFactor &f : dim)
      if (f.size != 1 || !f.axes.empty())
        subs.push_back(f);
    return subs;
  };
  SmallVector<SubFactor> hs = significant(have), ws = significant(want);
  SmallVector<RefinedPiece> pieces;
  size_t i = 0, j = 0;
  while (i < hs.size() && j < ws.size()) {
    SubFactor &h = hs[i], &w = ws[j];
    if (h.size == w.size) {
      // Axis lists sharing a prefix ([tp] and [tp, sp]) split apart at it,
      // so that only the rest differs.
      size_t k = 0;
      while (k < h.axes.size() && k < w.axes.size() && h.axes[k] == w.axes[k])
        ++k;
      if (k > 0 && (k < h.axes.size() || k < w.axes.size())) {
        int64_t major = grid.size(ArrayRef<int16_t>(h.axes).take_front(k));
        auto hs2 = splitSubFactor(h, major, grid);
        auto ws2 = splitSubFactor(w, major, grid);
        if (hs2 && ws2 && hs2->first.axes == ws2->first.axes) {
          pieces.push_back(
              {major, toAxes(hs2->first.axes), toAxes(ws2->first.axes)});
          h = hs2->second;
          w = ws2->second;
          continue;
        }
      }
      pieces.push_back({h.size, toAxes(h.axes), toAxes(w.axes)});
      ++i;
      ++j;
    } else if (h.size % w.size == 0) {
      auto split = splitSubFactor(h, w.size, grid);
      if (!split)
        return std::nullopt;
      pieces.push_back({w.size, toAxes(split->first.axes), toAxes(w.axes)});
      h = split->second;
      ++j;
    } else if (w.size % h.size == 0) {
      auto split = splitSubFactor(w, h.size, grid);
      if (!split)
        return std::nullopt;
      pieces.push_back({h.size, toAxes(h.axes), toAxes(split->first.axes)});
      w = split->second;
      ++i;
    } else {
      return std::nullopt;
    }
  }
  for (; i < hs.size(); ++i)
    if (hs[i].size != 1)
      return std::nullopt;
  for (; j < ws.size(); ++j)
    if (ws[j].size != 1)
      return std::nullopt;
  if (pieces.empty())
    pieces.push_back({1, {}, {}});
  return pieces;
}

namespace {
struct Candidate {
  DimFactors dims;
  int64_t ways;
  bool fromResult;
  /// TensorSharding::fixed of the proposing tensor: firmer wins.
  uint8_t fixed;
};
} // namespace

static Axes axesOf(const DimFactors &dim) {
  Axes axes;
  for (const SubFactor &f : dim)
    axes.append(f.axes.begin(), f.axes.end());
  return axes;
}

FactorAssignment
sharding::resolveFactors(const ShardingRule &rule,
                         ArrayRef<const TensorSharding *> operands,
                         ArrayRef<const TensorSharding *> results,
                         const Grid &grid, Priority priority) {
  size_t numFactors = rule.factors.size();
  std::vector<SmallVector<Candidate, 2>> candidates(numFactors);
  SmallVector<bool> inResult(numFactors, false);
  for (const auto &r : rule.results)
    for (const auto &d : r)
      for (int64_t f : d)
        inResult[f] = true;

  auto propose = [&](const ShardingRule::TensorFactors &dims,
                     const TensorSharding *t, bool fromResult) {
    if (!t)
      return;
    for (auto [d, factors] : llvm::enumerate(dims)) {
      if (d >= t->dims.size() || !t->dims[d])
        continue;
      SmallVector<int64_t> sizes;
      for (int64_t f : factors)
        sizes.push_back(rule.factors[f].size);
      auto cut = cutAtFactors(*t->dims[d], sizes, grid);
      if (!cut)
        continue;
      for (auto [j, f] : llvm::enumerate(factors))
        candidates[f].push_back(
            {(*cut)[j], splitWays((*cut)[j], grid), fromResult, t->fixed});
    }
  };
  for (auto [i, dims] : llvm::enumerate(rule.results))
    propose(dims, i < results.size() ? results[i] : nullptr, true);
  for (auto [i, dims] : llvm::enumerate(rule.operands))
    propose(dims, i < operands.size() ? operands[i] : nullptr, false);

  FactorAssignment assignment(numFactors);
  SmallVector<int16_t> used;
  auto choose = [&](size_t f) {
    const ShardingRule::Factor &factor = rule.factors[f];
    DimFactors unsplit{SubFactor{factor.size, {}}};
    if (factor.needReplication) {
      assignment[f] = unsplit;
      return;
    }
    if (candidates[f].empty())
      return;
    SmallVector<Candidate, 2> order(candidates[f]);
    std::stable_sort(
        order.begin(), order.end(),
        [](const Candidate &a, const Candidate &b) { return a.ways > b.ways; });
    if (priority == Priority::ResultsFirst && inResult[f]) {
      auto first = llvm::find_if(
          candidates[f], [](const Candidate &c) { return c.fromResult; });
      if (first != candidates[f].end())
        order.insert(order.begin(), *first);
    }
    // Fixed shardings first (stable: among them, the order above).
    std::stable_sort(order.begin(), order.end(),
                     [](const Candidate &a, const Candidate &b) {
                       return a.fixed > b.fixed;
                     });
    for (const Candidate &c : order) {
      Axes axes = axesOf(c.dims);
      if (llvm::any_of(axes,
                       [&](int16_t a) { return llvm::is_contained(used, a); }))
        continue;
      used.append(axes.begin(), axes.end());
      assignment[f] = c.dims;
      return;
    }
    assignment[f] = unsplit;
  };
  // Factors a fixed sharding splits choose first, so that an activation's
  // proposal never takes a grid axis a parameter's (or a constraint's)
  // sharding needs (Megatron-SP: the sequence-sharded input of a
  // column-parallel matmul yields tp to the weight's columns and is
  // all-gathered).
  auto firmness = [&](size_t f) {
    uint8_t most = TensorSharding::kDerived;
    for (const Candidate &c : candidates[f])
      if (c.ways > 1)
        most = std::max(most, c.fixed);
    return most;
  };
  SmallVector<size_t> factorOrder;
  for (uint8_t level : {TensorSharding::kArgument, TensorSharding::kConstraint})
    for (size_t f = 0; f < numFactors; ++f)
      if (firmness(f) == level)
        factorOrder.push_back(f);
  if (priority == Priority::ResultsFirst) {
    for (size_t f = 0; f < numFactors; ++f)
      if (inResult[f] && firmness(f) == TensorSharding::kDerived)
        factorOrder.push_back(f);
    for (size_t f = 0; f < numFactors; ++f)
      if (!inResult[f] && firmness(f) == TensorSharding::kDerived)
        factorOrder.push_back(f);
  } else {
    for (size_t f = 0; f < numFactors; ++f)
      if (firmness(f) == TensorSharding::kDerived)
        factorOrder.push_back(f);
  }
  for (size_t f : factorOrder)
    choose(f);
  return assignment;
}

TensorSharding sharding::project(const ShardingRule &rule,
                                 const ShardingRule::TensorFactors &dims,
                                 const FactorAssignment &assignment,
                                 const Grid &grid) {
  TensorSharding t;
  for (const auto &factors : dims) {
    DimFactors dim;
    bool known = true;
    for (int64_t f : factors) {
      if (!assignment[f]) {
        known = false;
        break;
      }
      dim.append(assignment[f]->begin(), assignment[f]->end());
    }
    if (known && dim.empty())
      dim.push_back(SubFactor{1, {}});
    t.dims.push_back(known ? std::optional<DimFactors>(canonical(dim, grid))
                           : std::nullopt);
  }
  return t;
}

bool sharding::isReducedAnyway(
    Value v, llvm::function_ref<const ShardingRule *(Operation *)> ruleOf) {
  for (OpOperand &use : v.getUses()) {
    const ShardingRule *rule = ruleOf(use.getOwner());
    if (!rule)
      continue;
    unsigned n = use.getOperandNumber();
    if (llvm::none_of(rule->linearGroups, [&](ArrayRef<unsigned> group) {
          return llvm::is_contained(group, n);
        }))
      return true;
  }
  return false;
}

OpPlan sharding::planOp(const ShardingRule &rule,
                        ArrayRef<TensorSharding> operands,
                        ArrayRef<TensorSharding> results, const Grid &grid) {
  SmallVector<const TensorSharding *> ops, res;
  for (const TensorSharding &t : operands)
    ops.push_back(&t);
  for (const TensorSharding &t : results)
    res.push_back(&t);
  OpPlan plan;
  plan.factors = resolveFactors(rule, ops, res, grid, Priority::ResultsFirst);
  Axes used;
  for (auto [f, a] : llvm::enumerate(plan.factors)) {
    if (!a)
      a = DimFactors{SubFactor{rule.factors[f].size, {}}};
    Axes axes = axesOf(*a);
    used.append(axes.begin(), axes.end());
    plan.localFactorSizes.push_back(localExtent(*a, grid));
  }

  // Partial sums passing through a linear group.
  Axes pass;
  ArrayRef<unsigned> passGroup;
  for (const auto &group : rule.linearGroups) {
    if (group.empty() || group[0] >= operands.size())
      continue;
    const Axes &p = operands[group[0]].partial;
    if (p.empty())
      continue;
    bool ok = llvm::all_of(group, [&](unsigned i) {
      return i < operands.size() && operands[i].partial == p;
    });
    for (auto [i, t] : llvm::enumerate(operands))
      if (!llvm::is_contained(group, i) && !t.partial.empty())
        ok = false;
    if (llvm::any_of(p, [&](int16_t a) { return llvm::is_contained(used, a); }))
      ok = false;
    if (ok) {
      pass = p;
      passGroup = group;
      break;
    }
  }

  for (auto [i, dims] : llvm::enumerate(rule.operands)) {
    TensorSharding t = project(rule, dims, plan.factors, grid);
    if (llvm::is_contained(passGroup, i))
      t.partial = pass;
    plan.operands.push_back(std::move(t));
  }
  for (auto [r, dims] : llvm::enumerate(rule.results)) {
    TensorSharding t = project(rule, dims, plan.factors, grid);
    Axes partial = pass;
    for (size_t f = 0; f < rule.factors.size(); ++f) {
      if (!rule.isReductionFor(f, r))
        continue;
      Axes axes = axesOf(*plan.factors[f]);
      partial.append(axes.begin(), axes.end());
    }
    llvm::sort(partial);
    partial.erase(std::unique(partial.begin(), partial.end()), partial.end());
    t.partial = partial;
    plan.results.push_back(std::move(t));
  }
  return plan;
}

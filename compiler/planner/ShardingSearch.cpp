//===- ShardingSearch.cpp - cost-based tensor-parallel sharding -----------===//
//
// See ShardingSearch.h and docs/ShardingSearch.md. The pieces, in order:
//   candidate layouts (which "outer" views of each dimension any op can
//   split), each op's strategies, the reshard cost of one tensor given its
//   source's layout and its consumers' strategies, the cost network of one
//   layer, min-sum variable elimination, and the chain over layers.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/ShardingSearch.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <functional>
#include <set>
#include <tuple>

using namespace tessera::planner;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
/// Cost of a block weight left whole (seconds): above any communication.
constexpr double kUnsplitPenalty = 1e6;
/// Cost of splitting a parameter nobody asked to split: breaks ties towards
/// whole parameters (today's layout for biases of row-parallel layers, norm
/// weights, position embeddings).
constexpr double kOptionalSplitPenalty = 1e-12;
/// Most candidate outers per tensor dimension.
constexpr size_t kMaxOuters = 6;

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

//===----------------------------------------------------------------------===//
// Strategies and layouts
//===----------------------------------------------------------------------===//

/// What an op does over tp: nothing (whole), split one of its factors
/// (viewed as [outer, rest], rest split), or pass a partial sum through the
/// operands of one linear group.
struct Strategy {
  enum Kind { Whole, Split, Partial } kind = Whole;
  int factor = -1;
  int64_t outer = 1;
  int group = -1;
};

/// Where factor `f` sits in `dims`: the dimension and the product of the
/// factor sizes before it.
std::optional<std::pair<int, int64_t>>
locate(const SearchGraph::Op &op, const SearchGraph::TensorDims &dims, int f) {
  for (auto [d, fs] : llvm::enumerate(dims)) {
    int64_t prefix = 1;
    for (int g : fs) {
      if (g == f)
        return std::make_pair(static_cast<int>(d), prefix);
      prefix *= op.factors[g].size;
    }
  }
  return std::nullopt;
}

/// What a consumer needs of one operand, and the gradient it sends back.
struct Use {
  TpLayout need;   ///< partial: a partial sum is required
  TpLayout grad;   ///< the gradient contribution's layout
};

struct Model {
  const SearchGraph &g;
  const ShardingSearchOptions &opt;
  int64_t tp;
  std::vector<std::vector<std::set<int64_t>>> outers; // [tensor][dim]
  std::vector<std::vector<Strategy>> strategies;     // [op]
  std::vector<std::vector<TpLayout>> paramDomain;    // [tensor]
  std::vector<std::vector<std::pair<int, unsigned>>> uses; // [tensor]

  Model(const SearchGraph &g, const ShardingSearchOptions &opt)
      : g(g), opt(opt), tp(opt.tp) {}

  bool validSplit(int64_t size, int64_t outer) const {
    return outer >= 1 && size % outer == 0 && (size / outer) % tp == 0 &&
           size / outer >= tp;
  }

  void addOuter(int t, int d, int64_t outer) {
    auto &set = outers[t][d];
    if (set.size() < kMaxOuters && validSplit(g.tensors[t].shape[d], outer))
      set.insert(outer);
  }

  template <typename Fn> void forEachSlot(const SearchGraph::Op &op, Fn fn) {
    for (auto [k, t] : llvm::enumerate(op.operands))
      fn(t, op.operandDims[k]);
    for (auto [k, t] : llvm::enumerate(op.results))
      fn(t, op.resultDims[k]);
  }

  /// Candidate outers of every tensor dimension and every op's strategies:
  /// each op's own factor boundaries, then, to a fixpoint, sub-splits of a
  /// factor that match an outer a neighbour splits at (GPT-2's c_attn
  /// matmul splits its output features as 3 chunks because the Split after
  /// it cuts them so).
  void buildStrategies() {
    outers.resize(g.tensors.size());
    for (auto [t, tensor] : llvm::enumerate(g.tensors))
      outers[t].resize(tensor.shape.size());
    for (const SearchGraph::Op &op : g.ops)
      forEachSlot(op, [&](int t, const SearchGraph::TensorDims &dims) {
        for (auto [d, fs] : llvm::enumerate(dims)) {
          int64_t prefix = 1;
          for (int f : fs) {
            if (!op.factors[f].needReplication &&
                validSplit(op.factors[f].size, 1))
              addOuter(t, d, prefix);
            prefix *= op.factors[f].size;
          }
        }
      });
    std::vector<std::map<int, std::set<int64_t>>> subs(g.ops.size());
    for (int round = 0; round < 32; ++round) {
      bool changed = false;
      for (auto [i, op] : llvm::enumerate(g.ops))
        forEachSlot(op, [&](int t, const SearchGraph::TensorDims &dims) {
          for (auto [d, fs] : llvm::enumerate(dims)) {
            int64_t prefix = 1;
            for (int f : fs) {
              const SearchGraph::Factor &factor = op.factors[f];
              for (int64_t o : outers[t][d])
                if (!factor.needReplication && o % prefix == 0 &&
                    validSplit(factor.size, o / prefix))
                  changed |= subs[i][f].insert(o / prefix).second;
              prefix *= factor.size;
            }
          }
        });
      for (auto [i, op] : llvm::enumerate(g.ops))
        for (auto &[f, os] : subs[i])
          for (int64_t o : os)
            forEachSlot(op, [&](int t, const SearchGraph::TensorDims &dims) {
              if (auto at = locate(op, dims, f))
                addOuter(t, at->first, at->second * o);
            });
      if (!changed)
        break;
    }
    strategies.resize(g.ops.size());
    for (auto [i, op] : llvm::enumerate(g.ops)) {
      auto &list = strategies[i];
      list.push_back({});
      for (auto [f, factor] : llvm::enumerate(op.factors)) {
        if (factor.needReplication)
          continue;
        std::set<int64_t> os = subs[i][f];
        if (validSplit(factor.size, 1))
          os.insert(1);
        for (int64_t o : os)
          list.push_back({Strategy::Split, static_cast<int>(f), o, -1});
      }
      for (auto [k, group] : llvm::enumerate(op.linearGroups))
        list.push_back({Strategy::Partial, -1, 1, static_cast<int>(k)});
    }
    paramDomain.resize(g.tensors.size());
    uses.resize(g.tensors.size());
    for (auto [i, op] : llvm::enumerate(g.ops))
      for (auto [k, t] : llvm::enumerate(op.operands))
        uses[t].push_back({static_cast<int>(i), static_cast<unsigned>(k)});
    for (auto [t, tensor] : llvm::enumerate(g.tensors)) {
      if (tensor.kind != SearchGraph::Kind::Parameter)
        continue;
      if (tensor.pinned) {
        paramDomain[t] = {*tensor.pinned};
        continue;
      }
      paramDomain[t] = layoutsOf(t);
    }
  }

  /// Whole, then every candidate split of tensor `t`.
  std::vector<TpLayout> layoutsOf(int t) const {
    std::vector<TpLayout> list = {TpLayout{}};
    for (auto [d, os] : llvm::enumerate(outers[t]))
      for (int64_t o : os)
        list.push_back(TpLayout{static_cast<int>(d), o, false});
    return list;
  }

  /// The layout of result `r` of op `i` under strategy `s`.
  TpLayout resultLayout(int i, const Strategy &s, unsigned r) const {
    const SearchGraph::Op &op = g.ops[i];
    if (s.kind == Strategy::Whole)
      return {};
    if (s.kind == Strategy::Partial)
      return TpLayout{-1, 1, true};
    if (auto at = locate(op, op.resultDims[r], s.factor))
      return TpLayout{at->first, at->second * s.outer, false};
    if (op.factors[s.factor].reducedByOp)
      return {};
    return TpLayout{-1, 1, true};
  }

  /// What op `i` under strategy `s` needs of operand `k`.
  Use use(int i, const Strategy &s, unsigned k) const {
    const SearchGraph::Op &op = g.ops[i];
    if (s.kind == Strategy::Whole)
      return {};
    if (s.kind == Strategy::Partial) {
      bool inGroup = llvm::is_contained(op.linearGroups[s.group], k);
      // d(other operand) = partial · dy is partial itself.
      return inGroup ? Use{TpLayout{-1, 1, true}, {}}
                     : Use{{}, TpLayout{-1, 1, true}};
    }
    if (auto at = locate(op, op.operandDims[k], s.factor)) {
      TpLayout l{at->first, at->second * s.outer, false};
      return {l, l};
    }
    // The split factor is not in this operand: it is read whole and its
    // gradient sums over the split factor, a partial sum over tp.
    return {{}, TpLayout{-1, 1, true}};
  }

  //===--------------------------------------------------------------------===//
  // Reshard costs
  //===--------------------------------------------------------------------===//

  struct Moved {
    const char *kind;
    bool backward;
    double bytes;
  };

  /// The collectives that move one tensor of `bytes` from `source` to every
  /// `needs`, and its gradients `grads` back to the source's layout.
  /// Returns false when a need cannot be met (a partial sum asked of a whole
  /// tensor).
  bool collectives(const TpLayout &source, llvm::ArrayRef<TpLayout> needs,
                   llvm::ArrayRef<TpLayout> grads, bool differentiable,
                   double bytes, std::vector<Moved> *out,
                   double &seconds) const {
    double frac = double(tp - 1) / double(tp);
    seconds = 0;
    auto add = [&](const char *kind, bool backward, double volume) {
      seconds += opt.latencySeconds + volume / opt.bandwidthBytesPerS;
      if (out)
        out->push_back({kind, backward, volume});
    };
    // Forward: a partial source is reduced once (reduce-scatter when every
    // whole consumer wants the same split, else all-reduce); a split source
    // is gathered once for whole consumers, re-split by all-to-all for
    // consumers splitting another way.
    std::vector<TpLayout> distinct;
    for (const TpLayout &n : needs) {
      if (n.partial && !source.partial)
        return false;
      if (n != source && !n.partial && !llvm::is_contained(distinct, n))
        distinct.push_back(n);
    }
    if (source.partial) {
      if (!distinct.empty()) {
        bool oneSplit = distinct.size() == 1 && distinct[0].isSplit();
        oneSplit ? add("reduce_scatter", false, frac * bytes)
                 : add("all_reduce", false, 2 * frac * bytes);
      }
    } else if (source.isSplit()) {
      bool gather = llvm::any_of(distinct,
                                 [](const TpLayout &l) { return !l.isSplit(); });
      if (gather)
        add("all_gather", false, frac * bytes);
      else
        for (size_t i = 0; i < distinct.size(); ++i)
          add("all_to_all", false, frac * bytes / tp);
    }
    if (!differentiable)
      return true;
    // Backward: the gradients are summed into the source's layout (whole
    // when the source was a partial sum).
    TpLayout target = source;
    target.partial = false;
    if (source.partial)
      target = TpLayout{};
    bool anyPartial = false;
    std::vector<TpLayout> other;
    for (const TpLayout &gr : grads) {
      if (gr.partial)
        anyPartial = true;
      else if (gr != target && !llvm::is_contained(other, gr))
        other.push_back(gr);
    }
    if (anyPartial)
      target.isSplit() ? add("reduce_scatter", true, frac * bytes)
                       : add("all_reduce", true, 2 * frac * bytes);
    if (!target.isSplit()) {
      if (llvm::any_of(other, [](const TpLayout &l) { return l.isSplit(); }))
        add("all_gather", true, frac * bytes);
    } else {
      for (const TpLayout &l : other)
        if (l.isSplit())
          add("all_to_all", true, frac * bytes / tp);
    }
    return true;
  }
};

//===----------------------------------------------------------------------===//
// Min-sum variable elimination
//===----------------------------------------------------------------------===//

struct Factor {
  std::vector<int> scope;    ///< variables, first slowest
  std::vector<double> table; ///< row-major over the scope's domains
};

struct Network {
  std::vector<int> domain;
  std::vector<Factor> factors;
  /// What each variable stands for: an op (>= 0) or a parameter tensor
  /// (-2 - tensor) or a boundary (-1).
  std::vector<int> meaning;

  int addVar(int size, int what) {
    domain.push_back(size);
    meaning.push_back(what);
    return static_cast<int>(domain.size()) - 1;
  }
  /// Bytes identifying the network up to its meanings (for reuse across
  /// identical layers).
  std::string key() const {
    std::string k;
    auto put = [&](const void *p, size_t n) {
      k.append(static_cast<const char *>(p), n);
    };
    size_t n = domain.size();
    put(&n, sizeof n);
    put(domain.data(), n * sizeof(int));
    for (const Factor &f : factors) {
      size_t s = f.scope.size(), t = f.table.size();
      put(&s, sizeof s);
      put(f.scope.data(), s * sizeof(int));
      put(&t, sizeof t);
      put(f.table.data(), t * sizeof(double));
    }
    return k;
  }
};

struct Solution {
  double cost = kInf;
  std::vector<int> choice;
};

/// Exact minimum of Σ factors by bucket elimination with a min-weight order,
/// variables in `clamp` (>= 0) fixed.
llvm::Expected<Solution> solve(const Network &net,
                               const std::vector<int> &clamp,
                               size_t maxEntries) {
  size_t nv = net.domain.size();
  std::vector<int> value(nv, -1);
  for (size_t v = 0; v < nv; ++v)
    if (v < clamp.size() && clamp[v] >= 0)
      value[v] = clamp[v];
  // Restrict the factors to the free variables.
  std::vector<Factor> pool;
  double constant = 0;
  for (const Factor &f : net.factors) {
    Factor r;
    for (int v : f.scope)
      if (value[v] < 0)
        r.scope.push_back(v);
    size_t size = 1;
    for (int v : r.scope)
      size *= net.domain[v];
    r.table.assign(size, 0);
    std::vector<int> idx(r.scope.size(), 0);
    for (size_t e = 0; e < size; ++e) {
      // Index into f: free variables from idx, clamped from value.
      size_t fi = 0, j = 0;
      for (int v : f.scope) {
        int x = value[v] >= 0 ? value[v] : idx[j++];
        fi = fi * net.domain[v] + x;
      }
      r.table[e] = f.table[fi];
      for (int p = static_cast<int>(idx.size()) - 1; p >= 0; --p) {
        if (++idx[p] < net.domain[r.scope[p]])
          break;
        idx[p] = 0;
      }
    }
    if (r.scope.empty())
      constant += r.table[0];
    else
      pool.push_back(std::move(r));
  }
  struct Step {
    int var;
    std::vector<int> scope;
    std::vector<int> argmin;
  };
  std::vector<Step> steps;
  std::vector<char> done(nv, 0);
  for (size_t v = 0; v < nv; ++v)
    if (value[v] >= 0)
      done[v] = 1;
  for (;;) {
    // Min-weight: the free variable whose neighbourhood table is smallest.
    int best = -1;
    double bestWeight = kInf;
    for (size_t v = 0; v < nv; ++v) {
      if (done[v])
        continue;
      std::set<int> nb;
      for (const Factor &f : pool)
        if (llvm::is_contained(f.scope, static_cast<int>(v)))
          nb.insert(f.scope.begin(), f.scope.end());
      double w = 1;
      for (int u : nb)
        w *= net.domain[u];
      if (nb.empty())
        w = net.domain[v];
      if (w < bestWeight) {
        bestWeight = w;
        best = static_cast<int>(v);
      }
    }
    if (best < 0)
      break;
    done[best] = 1;
    std::vector<Factor> mine, rest;
    for (Factor &f : pool)
      (llvm::is_contained(f.scope, best) ? mine : rest).push_back(std::move(f));
    pool = std::move(rest);
    std::set<int> scopeSet;
    for (const Factor &f : mine)
      for (int u : f.scope)
        if (u != best)
          scopeSet.insert(u);
    Step step{best, std::vector<int>(scopeSet.begin(), scopeSet.end()), {}};
    size_t size = 1;
    for (int u : step.scope)
      size *= net.domain[u];
    if (size * net.domain[best] > maxEntries)
      return fail(llvm::formatv("the sharding search's elimination table "
                                "would have {0} entries (more than {1})",
                                size * net.domain[best], maxEntries));
    // Position of each variable in the combined (scope + best) assignment.
    std::vector<int> pos(nv, -1);
    for (auto [j, u] : llvm::enumerate(step.scope))
      pos[u] = static_cast<int>(j);
    pos[best] = static_cast<int>(step.scope.size());
    Factor out{step.scope, std::vector<double>(size, kInf)};
    step.argmin.assign(size, 0);
    std::vector<int> idx(step.scope.size() + 1, 0);
    for (size_t e = 0; e < size; ++e) {
      for (int x = 0; x < net.domain[best]; ++x) {
        idx.back() = x;
        double sum = 0;
        for (const Factor &f : mine) {
          size_t fi = 0;
          for (int u : f.scope)
            fi = fi * net.domain[u] + idx[pos[u]];
          sum += f.table[fi];
          if (sum == kInf)
            break;
        }
        if (sum < out.table[e]) {
          out.table[e] = sum;
          step.argmin[e] = x;
        }
      }
      for (int p = static_cast<int>(step.scope.size()) - 1; p >= 0; --p) {
        if (++idx[p] < net.domain[step.scope[p]])
          break;
        idx[p] = 0;
      }
    }
    if (out.scope.empty())
      constant += out.table[0];
    else
      pool.push_back(std::move(out));
    steps.push_back(std::move(step));
  }
  Solution sol;
  sol.cost = constant;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    size_t e = 0;
    for (int u : it->scope)
      e = e * net.domain[u] + value[u];
    value[it->var] = it->argmin[e];
  }
  sol.choice = value;
  return sol;
}

//===----------------------------------------------------------------------===//
// Layers and the chain
//===----------------------------------------------------------------------===//

struct Builder {
  Model &m;
  const SearchGraph &g;
  std::set<int> exempt; ///< parameter tensors without the unsplit penalty

  /// A tensor's consumers, as (variable, op, operand) in one network.
  struct Consumer {
    int var;
    int op;
    unsigned operand;
  };

  /// Adds the factor of one tensor: its source variable (or a fixed source
  /// layout when `sourceVar` < 0) and its consumers; `boundary` (>= 0) is
  /// an extra consumer that needs the tensor in the boundary variable's
  /// layout.
  void addTensorFactor(Network &net, int t, int sourceVar,
                       std::function<TpLayout(int)> sourceLayout,
                       const std::vector<Consumer> &consumers, int boundary,
                       const std::vector<TpLayout> &boundaryDomain,
                       bool usedAsStored = false) {
    const SearchGraph::Tensor &tensor = g.tensors[t];
    Factor f;
    if (sourceVar >= 0)
      f.scope.push_back(sourceVar);
    std::vector<int> consumerVars;
    for (const Consumer &c : consumers)
      if (!llvm::is_contained(consumerVars, c.var))
        consumerVars.push_back(c.var);
    f.scope.insert(f.scope.end(), consumerVars.begin(), consumerVars.end());
    if (boundary >= 0)
      f.scope.push_back(boundary);
    size_t size = 1;
    for (int v : f.scope)
      size *= net.domain[v];
    f.table.assign(size, 0);
    std::vector<int> idx(f.scope.size(), 0);
    double bytes = static_cast<double>(g.bytes(t));
    std::vector<TpLayout> needs, grads;
    for (size_t e = 0; e < size; ++e) {
      size_t j = 0;
      TpLayout source = sourceLayout(sourceVar >= 0 ? idx[j++] : 0);
      needs.clear();
      grads.clear();
      for (size_t c = 0; c < consumerVars.size(); ++c, ++j)
        for (const Consumer &con : consumers)
          if (con.var == consumerVars[c]) {
            Use u = m.use(con.op, m.strategies[con.op][idx[j]], con.operand);
            needs.push_back(u.need);
            grads.push_back(u.grad);
          }
      if (boundary >= 0) {
        needs.push_back(boundaryDomain[idx[j]]);
        grads.push_back(boundaryDomain[idx[j]]);
      }
      double seconds = 0;
      bool ok = !(usedAsStored && source.isSplit() &&
                  llvm::any_of(needs,
                               [&](const TpLayout &n) { return n != source; }));
      f.table[e] = ok && m.collectives(source, needs, grads,
                                       tensor.differentiable, bytes, nullptr,
                                       seconds)
                       ? seconds
                       : kInf;
      for (int p = static_cast<int>(idx.size()) - 1; p >= 0; --p) {
        if (++idx[p] < net.domain[f.scope[p]])
          break;
        idx[p] = 0;
      }
    }
    net.factors.push_back(std::move(f));
  }

  double paramPenalty(int t, const TpLayout &l) const {
    const SearchGraph::Tensor &tensor = g.tensors[t];
    if (tensor.pinned)
      return 0;
    if (tensor.mustSplit && !exempt.count(t))
      return l.isSplit() ? 0 : kUnsplitPenalty;
    return l.isSplit() ? kOptionalSplitPenalty : 0;
  }

  /// The cost network of the ops in [begin, end) (a layer, or everything):
  /// `inBoundary`/`outBoundary` (>= 0) are the tensors crossing into and
  /// out of it, with layouts `inDomain`/`outDomain`.
  Network build(int begin, int end, int inBoundary, int outBoundary,
                const std::vector<TpLayout> &inDomain,
                const std::vector<TpLayout> &outDomain, int &inVar,
                int &outVar) {
    Network net;
    std::vector<int> opVar(g.ops.size(), -1);
    for (int i = begin; i < end; ++i)
      opVar[i] = net.addVar(m.strategies[i].size(), i);
    inVar = inBoundary >= 0 ? net.addVar(inDomain.size(), -1) : -1;
    outVar = outBoundary >= 0 ? net.addVar(outDomain.size(), -1) : -1;
    auto consumersIn = [&](int t) {
      std::vector<Consumer> list;
      for (auto [op, k] : m.uses[t])
        if (op >= begin && op < end)
          list.push_back({opVar[op], op, k});
      return list;
    };
    // Activations produced here.
    for (int i = begin; i < end; ++i)
      for (auto [r, t] : llvm::enumerate(g.ops[i].results)) {
        int var = opVar[i];
        unsigned rr = static_cast<unsigned>(r);
        addTensorFactor(
            net, t, var,
            [&, i, rr](int s) {
              return m.resultLayout(i, m.strategies[i][s], rr);
            },
            consumersIn(t), t == outBoundary ? outVar : -1, outDomain);
      }
    // The tensor crossing in.
    if (inBoundary >= 0)
      addTensorFactor(
          net, inBoundary, inVar, [&](int s) { return inDomain[s]; },
          consumersIn(inBoundary), -1, {});
    // Parameters, inputs and constants read here.
    std::set<int> seen;
    for (int i = begin; i < end; ++i)
      for (int t : g.ops[i].operands) {
        const SearchGraph::Tensor &tensor = g.tensors[t];
        if (tensor.kind == SearchGraph::Kind::Activation || !seen.insert(t).second)
          continue;
        std::vector<Consumer> cons = consumersIn(t);
        bool own = tensor.kind == SearchGraph::Kind::Parameter &&
                   m.paramDomain[t].size() > 1;
        if (own) {
          const std::vector<TpLayout> &dom = m.paramDomain[t];
          int var = net.addVar(dom.size(), -2 - t);
          Factor pen{{var}, {}};
          for (const TpLayout &l : dom)
            pen.table.push_back(paramPenalty(t, l));
          net.factors.push_back(std::move(pen));
          // A split block weight is used as it is stored: gathering it
          // before use (ZeRO-3 over tp) would divide its memory but not
          // its work.
          addTensorFactor(
              net, t, var, [&, t](int s) { return m.paramDomain[t][s]; },
              cons, -1, {}, tensor.mustSplit);
          continue;
        }
        // A fixed source (input, constant, pinned parameter): priced per
        // consumer, so that a tensor read by every layer (a mask, a tied
        // embedding) does not couple them.
        TpLayout fixed = tensor.kind == SearchGraph::Kind::Parameter
                             ? m.paramDomain[t][0]
                             : TpLayout{};
        // A pinned parameter is used as the plan stores it (the
        // vocabulary-parallel table by its masked lookup).
        for (const Consumer &c : cons)
          addTensorFactor(
              net, t, -1, [fixed](int) { return fixed; }, {c}, -1, {},
              tensor.kind == SearchGraph::Kind::Parameter);
      }
    return net;
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

int64_t SearchGraph::bytes(int tensor) const {
  int64_t n = tensors[tensor].elementBytes;
  for (int64_t d : tensors[tensor].shape)
    n *= d;
  return n;
}

std::string TpLayout::str(const std::vector<int64_t> &shape) const {
  if (dim < 0)
    return partial ? "partial" : "replicated";
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d)
      s += ", ";
    if (static_cast<int>(d) != dim)
      s += "-";
    else if (outer == 1)
      s += "tp";
    else
      s += llvm::formatv("{{{0}, {1} : tp}", outer, shape[d] / outer).str();
  }
  s += "]";
  return partial ? s + " partial" : s;
}

static llvm::Error checkGraph(const SearchGraph &g) {
  int nt = static_cast<int>(g.tensors.size());
  for (auto [i, op] : llvm::enumerate(g.ops)) {
    if (op.operands.size() != op.operandDims.size() ||
        op.results.size() != op.resultDims.size())
      return fail(llvm::formatv("sharding search: op {0} ({1}) has {2} "
                                "operands/results but {3}/{4} dim lists",
                                i, op.name, op.operands.size() +
                                                op.results.size(),
                                op.operandDims.size(), op.resultDims.size()));
    auto check = [&](int t, const SearchGraph::TensorDims &dims) -> bool {
      if (t < 0 || t >= nt || dims.size() != g.tensors[t].shape.size())
        return false;
      for (auto [d, fs] : llvm::enumerate(dims)) {
        int64_t size = 1;
        for (int f : fs) {
          if (f < 0 || f >= static_cast<int>(op.factors.size()))
            return false;
          size *= op.factors[f].size;
        }
        if (size != g.tensors[t].shape[d])
          return false;
      }
      return true;
    };
    for (auto [k, t] : llvm::enumerate(op.operands))
      if (!check(t, op.operandDims[k]))
        return fail(llvm::formatv("sharding search: operand {0} of op {1} "
                                  "({2} at {3}) does not match its rule",
                                  k, i, op.name, op.where));
    for (auto [k, t] : llvm::enumerate(op.results))
      if (!check(t, op.resultDims[k]) ||
          g.tensors[t].producer != static_cast<int>(i))
        return fail(llvm::formatv("sharding search: result {0} of op {1} "
                                  "({2} at {3}) does not match its rule",
                                  k, i, op.name, op.where));
    if (i && op.layer < g.ops[i - 1].layer)
      return fail("sharding search: ops are not in layer order");
  }
  return llvm::Error::success();
}

namespace {
/// The chain: layers [begin, end) of ops, the tensor crossing each cut.
struct Chain {
  std::vector<int> begin, end;
  std::vector<int> boundary; ///< per cut (layers - 1)
};

/// Layers of `g` if they form a chain the dynamic program can use: one
/// activation crossing each cut, read only by the next layer, and every
/// parameter with a choice read by one layer only. Otherwise one layer.
Chain chainOf(const SearchGraph &g, const Model &m) {
  Chain whole{{0}, {static_cast<int>(g.ops.size())}, {}};
  Chain c;
  for (auto [i, op] : llvm::enumerate(g.ops))
    if (i == 0 || op.layer != g.ops[i - 1].layer) {
      if (i)
        c.end.push_back(static_cast<int>(i));
      c.begin.push_back(static_cast<int>(i));
    }
  c.end.push_back(static_cast<int>(g.ops.size()));
  size_t n = c.begin.size();
  if (n < 2)
    return whole;
  std::vector<int> layerOf(g.ops.size());
  for (size_t l = 0; l < n; ++l)
    for (int i = c.begin[l]; i < c.end[l]; ++i)
      layerOf[i] = static_cast<int>(l);
  c.boundary.assign(n - 1, -1);
  for (auto [t, tensor] : llvm::enumerate(g.tensors)) {
    const auto &uses = m.uses[t];
    if (uses.empty())
      continue;
    if (tensor.kind == SearchGraph::Kind::Activation) {
      int from = layerOf[tensor.producer];
      for (auto [op, k] : uses) {
        int to = layerOf[op];
        if (to == from)
          continue;
        if (to != from + 1)
          return whole;
        if (c.boundary[from] >= 0 && c.boundary[from] != static_cast<int>(t))
          return whole;
        c.boundary[from] = static_cast<int>(t);
      }
    } else if (tensor.kind == SearchGraph::Kind::Parameter &&
               m.paramDomain[t].size() > 1) {
      for (auto [op, k] : uses)
        if (layerOf[op] != layerOf[uses[0].first])
          return whole;
    }
  }
  for (int b : c.boundary)
    if (b < 0)
      return whole;
  return c;
}

/// Whether `a` is a strict sub-multiset of `b` (by kind, direction, bytes).
bool subsetOf(const std::vector<PredictedCollective> &a,
              const std::vector<PredictedCollective> &b) {
  std::multiset<std::tuple<std::string, bool, int64_t>> rest;
  for (const PredictedCollective &c : b)
    rest.insert({c.kind, c.backward, std::llround(c.bytes)});
  for (const PredictedCollective &c : a) {
    auto it = rest.find({c.kind, c.backward, std::llround(c.bytes)});
    if (it == rest.end())
      return false;
    rest.erase(it);
  }
  return !rest.empty();
}
} // namespace

llvm::Expected<ShardingSearchResult>
tessera::planner::searchShardings(const SearchGraph &graph,
                                  const ShardingSearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  if (options.tp < 1)
    return fail("sharding search: tp must be >= 1, got " +
                llvm::Twine(options.tp));
  if (llvm::Error err = checkGraph(graph))
    return std::move(err);
  Model m(graph, options);
  m.buildStrategies();
  Chain chain = chainOf(graph, m);
  size_t n = chain.begin.size();
  std::vector<std::vector<TpLayout>> cutDomain(chain.boundary.size());
  for (auto [c, t] : llvm::enumerate(chain.boundary))
    cutDomain[c] = m.layoutsOf(t);

  ShardingSearchResult result;
  result.layers = static_cast<int64_t>(n);
  Builder b{m, graph, {}};

  struct Layer {
    Network net;
    int inVar = -1, outVar = -1;
    std::string key;
  };
  struct Solved {
    /// [in][out] -> solution of the layer with those boundary layouts.
    std::vector<std::vector<Solution>> table;
  };

  // Solves every layer for every pair of boundary layouts, reusing the
  // solutions of identical networks; then the chain's dynamic program.
  auto solveAll = [&](std::vector<Layer> &layers,
                      std::vector<const Solved *> &solvedOf,
                      std::map<std::string, Solved> &cache,
                      std::vector<int> &cut) -> llvm::Error {
    layers.assign(n, {});
    solvedOf.assign(n, nullptr);
    for (size_t l = 0; l < n; ++l) {
      int in = l ? chain.boundary[l - 1] : -1;
      int out = l + 1 < n ? chain.boundary[l] : -1;
      static const std::vector<TpLayout> none;
      Layer &layer = layers[l];
      layer.net = b.build(chain.begin[l], chain.end[l], in, out,
                          l ? cutDomain[l - 1] : none,
                          l + 1 < n ? cutDomain[l] : none, layer.inVar,
                          layer.outVar);
      layer.key = layer.net.key();
      auto it = cache.find(layer.key);
      if (it == cache.end()) {
        Solved s;
        size_t ni = layer.inVar >= 0 ? layer.net.domain[layer.inVar] : 1;
        size_t no = layer.outVar >= 0 ? layer.net.domain[layer.outVar] : 1;
        s.table.assign(ni, std::vector<Solution>(no));
        for (size_t i = 0; i < ni; ++i)
          for (size_t o = 0; o < no; ++o) {
            std::vector<int> clamp(layer.net.domain.size(), -1);
            if (layer.inVar >= 0)
              clamp[layer.inVar] = static_cast<int>(i);
            if (layer.outVar >= 0)
              clamp[layer.outVar] = static_cast<int>(o);
            auto sol = solve(layer.net, clamp, options.maxTableEntries);
            if (!sol)
              return sol.takeError();
            s.table[i][o] = std::move(*sol);
          }
        it = cache.emplace(layer.key, std::move(s)).first;
      }
      solvedOf[l] = &it->second;
    }
    // Chain: best[c] = cheapest cost of layers 0..l ending with cut
    // layout c.
    cut.assign(n > 1 ? n - 1 : 0, 0);
    std::vector<std::vector<double>> best(n);
    std::vector<std::vector<int>> from(n);
    for (size_t l = 0; l < n; ++l) {
      const auto &t = solvedOf[l]->table;
      size_t no = t[0].size();
      best[l].assign(no, kInf);
      from[l].assign(no, 0);
      for (size_t o = 0; o < no; ++o)
        for (size_t i = 0; i < t.size(); ++i) {
          double prev = l ? best[l - 1][i] : 0;
          double c = prev + t[i][o].cost;
          if (c < best[l][o]) {
            best[l][o] = c;
            from[l][o] = static_cast<int>(i);
          }
        }
    }
    int o = 0;
    for (size_t l = n; l-- > 0;) {
      if (l + 1 < n)
        cut[l] = o;
      o = from[l][o];
    }
    result.seconds = best[n - 1][0];
    return llvm::Error::success();
  };

  std::vector<Layer> layers;
  std::vector<const Solved *> solvedOf;
  std::map<std::string, Solved> cache;
  std::vector<int> cut;
  if (llvm::Error err = solveAll(layers, solvedOf, cache, cut))
    return std::move(err);

  auto choiceOf = [&](size_t l) -> const Solution & {
    int i = l ? cut[l - 1] : 0;
    int o = l + 1 < n ? cut[l] : 0;
    return solvedOf[l]->table[i][o];
  };

  // Reads a choice of every layer back: layouts, strategies, collectives.
  auto assemble = [&](const std::function<const Solution &(size_t)> &solutionOf,
                      ShardingSearchResult &R) {
    R.collectives.clear();
    R.exempt.clear();
    R.unsplittable.clear();
    R.bytes = 0;
    R.layouts.assign(graph.tensors.size(), TpLayout{});
    R.splitFactor.assign(graph.ops.size(), -1);
    std::vector<int> opChoice(graph.ops.size(), 0);
    std::vector<int> cutChoice(cut);
    for (size_t l = 0; l < n; ++l) {
      const Solution &sol = solutionOf(l);
      const Network &net = layers[l].net;
      for (size_t v = 0; v < net.meaning.size(); ++v) {
        int what = net.meaning[v];
        if (what >= 0) {
          opChoice[what] = sol.choice[v];
          const Strategy &s = m.strategies[what][sol.choice[v]];
          if (s.kind == Strategy::Split)
            R.splitFactor[what] = s.factor;
        } else if (what <= -2) {
          int t = -2 - what;
          R.layouts[t] = m.paramDomain[t][sol.choice[v]];
        }
      }
    }
    for (auto [t, tensor] : llvm::enumerate(graph.tensors)) {
      if (tensor.kind == SearchGraph::Kind::Parameter &&
          m.paramDomain[t].size() == 1)
        R.layouts[t] = m.paramDomain[t][0];
      if (tensor.kind == SearchGraph::Kind::Activation && tensor.producer >= 0) {
        const SearchGraph::Op &op = graph.ops[tensor.producer];
        unsigned r = static_cast<unsigned>(
            llvm::find(op.results, static_cast<int>(t)) - op.results.begin());
        R.layouts[t] = m.resultLayout(
            tensor.producer, m.strategies[tensor.producer][opChoice[tensor.producer]],
            r);
      }
      if (tensor.mustSplit && !tensor.pinned && !R.layouts[t].isSplit())
        (b.exempt.count(t) ? R.exempt : R.unsplittable)
            .push_back(static_cast<int>(t));
    }
    // The collectives of the chosen layout, tensor by tensor (a boundary
    // tensor's producer side, then its consumers' side).
    std::vector<int> layerOf(graph.ops.size());
    for (size_t l = 0; l < n; ++l)
      for (int i = chain.begin[l]; i < chain.end[l]; ++i)
        layerOf[i] = static_cast<int>(l);
    auto record = [&](int t, TpLayout source, std::vector<TpLayout> needs,
                      std::vector<TpLayout> grads, int layer) {
      std::vector<Model::Moved> moved;
      double seconds;
      m.collectives(source, needs, grads, graph.tensors[t].differentiable,
                    static_cast<double>(graph.bytes(t)), &moved, seconds);
      for (const Model::Moved &mv : moved) {
        R.collectives.push_back({mv.kind, mv.backward, t, mv.bytes, layer});
        R.bytes += mv.bytes;
      }
    };
    for (auto [t, tensor] : llvm::enumerate(graph.tensors)) {
      int ti = static_cast<int>(t);
      if (m.uses[t].empty())
        continue;
      TpLayout source = R.layouts[t];
      int boundaryCut = -1;
      for (auto [c, bt] : llvm::enumerate(chain.boundary))
        if (bt == ti)
          boundaryCut = static_cast<int>(c);
      bool fixed = tensor.kind != SearchGraph::Kind::Activation &&
                   !(tensor.kind == SearchGraph::Kind::Parameter &&
                     m.paramDomain[t].size() > 1);
      std::vector<TpLayout> needsHere, gradsHere, needsNext, gradsNext;
      for (auto [op, k] : m.uses[t]) {
        Use u = m.use(op, m.strategies[op][opChoice[op]], k);
        if (fixed) {
          record(ti, source, {u.need}, {u.grad}, layerOf[op]);
          continue;
        }
        bool next = boundaryCut >= 0 && layerOf[op] == boundaryCut + 1;
        (next ? needsNext : needsHere).push_back(u.need);
        (next ? gradsNext : gradsHere).push_back(u.grad);
      }
      if (fixed)
        continue;
      int layer = tensor.producer >= 0 ? layerOf[tensor.producer]
                                       : layerOf[m.uses[t][0].first];
      if (boundaryCut >= 0) {
        TpLayout at = cutDomain[boundaryCut][cutChoice[boundaryCut]];
        needsHere.push_back(at);
        gradsHere.push_back(at);
        record(ti, source, needsHere, gradsHere, layer);
        record(ti, at, needsNext, gradsNext, layer + 1);
      } else {
        record(ti, source, needsHere, gradsHere, layer);
      }
    }
  };

  // Exemptions: a split block weight whose replication alone lowers the
  // layer's cost (tested once per distinct layer).
  std::set<std::string> tested;
  bool anyExempt = false;
  for (size_t l = 0; l < n; ++l) {
    Layer &layer = layers[l];
    if (!tested.insert(layer.key).second)
      continue;
    const Solution &sol = choiceOf(l);
    for (size_t v = 0; v < layer.net.meaning.size(); ++v) {
      int what = layer.net.meaning[v];
      if (what > -2)
        continue;
      int t = -2 - what;
      if (!graph.tensors[t].mustSplit ||
          !m.paramDomain[t][sol.choice[v]].isSplit())
        continue;
      Network trial = layer.net;
      for (Factor &f : trial.factors)
        if (f.scope.size() == 1 && f.scope[0] == static_cast<int>(v))
          for (double &x : f.table)
            x = std::min(x, 0.0);
      std::vector<int> clamp(trial.domain.size(), -1);
      if (layer.inVar >= 0)
        clamp[layer.inVar] = sol.choice[layer.inVar];
      if (layer.outVar >= 0)
        clamp[layer.outVar] = sol.choice[layer.outVar];
      auto alt = solve(trial, clamp, options.maxTableEntries);
      if (!alt)
        return alt.takeError();
      if (!(alt->cost < sol.cost * (1 - 1e-9) - 1e-15) ||
          m.paramDomain[t][alt->choice[v]].isSplit())
        continue;
      // Replicating it must remove collectives and add none (K/V under GQA
      // lose an all-gather); trading an all-reduce for an all-gather (a
      // row-parallel output projection left whole) is not a reason.
      ShardingSearchResult with, without;
      assemble([&](size_t l2) -> const Solution & { return choiceOf(l2); },
               with);
      assemble(
          [&](size_t l2) -> const Solution & {
            return l2 == l ? *alt : choiceOf(l2);
          },
          without);
      if (subsetOf(without.collectives, with.collectives)) {
        // The same variable of every layer with this network.
        for (size_t l2 = 0; l2 < n; ++l2)
          if (layers[l2].key == layer.key)
            b.exempt.insert(-2 - layers[l2].net.meaning[v]);
        anyExempt = true;
      }
    }
  }
  if (anyExempt) {
    cache.clear();
    if (llvm::Error err = solveAll(layers, solvedOf, cache, cut))
      return std::move(err);
  }

  assemble(choiceOf, result);
  std::set<std::string> keys;
  for (const Layer &layer : layers)
    keys.insert(layer.key);
  result.distinctLayers = static_cast<int64_t>(keys.size());
  result.searchSeconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  return result;
}

void tessera::planner::printPredictedCollectives(
    const SearchGraph &graph, const ShardingSearchResult &result,
    llvm::raw_ostream &os) {
  os << llvm::formatv("sharding search: {0} layers ({1} distinct), "
                      "predicted tp communication {2:F1} us, {3} bytes per "
                      "rank per step, searched in {4:F3} s\n",
                      result.layers, result.distinctLayers,
                      result.seconds * 1e6,
                      static_cast<int64_t>(result.bytes), result.searchSeconds);
  std::map<int, std::vector<const PredictedCollective *>> byLayer;
  for (const PredictedCollective &c : result.collectives)
    byLayer[c.layer].push_back(&c);
  for (auto &[layer, list] : byLayer) {
    os << "  layer " << layer << ":";
    for (const PredictedCollective *c : list) {
      const SearchGraph::Tensor &t = graph.tensors[c->tensor];
      os << llvm::formatv(" {0} {1}({2})", c->backward ? "bwd" : "fwd",
                          c->kind, t.name);
      os << ";";
    }
    os << "\n";
  }
}

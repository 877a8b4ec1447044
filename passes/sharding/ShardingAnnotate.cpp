//===- ShardingAnnotate.cpp - grid + Megatron argument shardings ----------===//
//
// Recognises the transformer's linear layers from the IR's structure (see
// Passes.td) and annotates the train step's arguments and results.
// Structural facts (which dims a matmul contracts, how a reshape splits a
// dimension into heads, which dim a slice chunks) are read from the ops'
// sharding rules, not from op names.
//
//===----------------------------------------------------------------------===//

#include "common/layers/LayerCuts.h"
#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"
#include "passes/sharding/PlanShardings.h"
#include "passes/sharding/SearchGraph.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace tessera::sharding {
#define GEN_PASS_DEF_SHARDINGANNOTATE
#include "passes/sharding/Passes.h.inc"
} // namespace tessera::sharding

using namespace mlir;
using namespace tessera;
using namespace tessera::sharding;
using tsr::ShardingRule;
using tsr::ShardingRuleOpInterface;

namespace {

constexpr int16_t kDpAxis = 0, kTpAxis = 1;

/// A forward linear layer: a matmul with a rank-2 parameter weight.
struct Linear {
  Operation *matmul = nullptr;
  unsigned weightOperand = 0;
  unsigned weightArg = 0;
  int64_t argDimN = 0, argDimK = 0; ///< dims of the parameter
  int64_t sizeN = 0, sizeK = 0;
  Value output; ///< after the bias add, if any
  std::optional<unsigned> biasArg;
};

struct Annotator {
  func::FuncOp func;
  int64_t dp, tp;
  Grid grid;
  llvm::DenseSet<Operation *> backward; // ops depending on the labels
  SmallVector<Linear> linears;

  StringRef role(unsigned i) {
    auto r = tsr::getArgRole(func, i);
    return r ? r.getValue() : "";
  }
  StringRef name(unsigned i) {
    auto n = tsr::getArgName(func, i);
    return n ? n.getValue() : "";
  }
  bool isForward(Operation *op) { return !backward.contains(op); }

  void computeBackward() {
    SmallVector<Value> work;
    for (BlockArgument arg : func.getArguments())
      if (role(arg.getArgNumber()) == "labels")
        work.push_back(arg);
    while (!work.empty()) {
      Value v = work.pop_back_val();
      for (Operation *user : v.getUsers())
        if (backward.insert(user).second)
          for (Value r : user->getResults())
            work.push_back(r);
    }
  }

  /// The parameter argument behind `v` (directly, or through one forward
  /// op that only permutes dims, e.g. tsr.transpose), with the map from
  /// v's dims to the argument's dims.
  std::optional<std::pair<unsigned, SmallVector<int64_t>>> traceParam(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner()->getParentOp() != func ||
          role(arg.getArgNumber()) != "param")
        return std::nullopt;
      SmallVector<int64_t> identity;
      for (int64_t d = 0; d < cast<RankedTensorType>(v.getType()).getRank();
           ++d)
        identity.push_back(d);
      return std::make_pair(arg.getArgNumber(), identity);
    }
    Operation *def = v.getDefiningOp();
    auto iface = dyn_cast_or_null<ShardingRuleOpInterface>(def);
    if (!iface || def->getNumOperands() != 1 || def->getNumResults() != 1 ||
        !isForward(def))
      return std::nullopt;
    ShardingRule rule = iface.getShardingRule();
    auto inner = traceParam(def->getOperand(0));
    if (!inner)
      return std::nullopt;
    SmallVector<int64_t> map;
    for (const auto &dim : rule.results[0]) {
      if (dim.size() != 1)
        return std::nullopt;
      int64_t found = -1;
      for (auto [j, odim] : llvm::enumerate(rule.operands[0]))
        if (odim.size() == 1 && odim[0] == dim[0])
          found = j;
      if (found < 0)
        return std::nullopt;
      map.push_back(inner->second[found]);
    }
    return std::make_pair(inner->first, map);
  }

  /// Recognises a forward matmul-like op with one rank-2 parameter operand
  /// contracting one factor with the activation.
  std::optional<Linear> asLinear(Operation *op) {
    auto iface = dyn_cast<ShardingRuleOpInterface>(op);
    if (!iface || op->getNumOperands() != 2 || op->getNumResults() != 1 ||
        !isForward(op))
      return std::nullopt;
    ShardingRule rule = iface.getShardingRule();
    for (unsigned w = 0; w < 2; ++w) {
      auto traced = traceParam(op->getOperand(w));
      if (!traced || traceParam(op->getOperand(1 - w)))
        continue;
      // The activation is floating point (an embedding lookup contracts
      // nothing: its other operand is the integer ids).
      auto act = dyn_cast<RankedTensorType>(op->getOperand(1 - w).getType());
      if (!act || !isa<FloatType>(act.getElementType()))
        continue;
      const auto &wdims = rule.operands[w];
      if (wdims.size() != 2 || wdims[0].size() != 1 || wdims[1].size() != 1)
        continue;
      const auto &res = rule.results[0];
      if (res.empty() || res.back().size() != 1)
        continue;
      int64_t n = res.back()[0];
      int64_t dimN = -1, dimK = -1;
      for (int64_t d = 0; d < 2; ++d) {
        int64_t f = wdims[d][0];
        if (f == n)
          dimN = d;
        else if (rule.isReduction(f))
          dimK = d;
      }
      if (dimN < 0 || dimK < 0)
        continue;
      Linear l;
      l.matmul = op;
      l.weightOperand = w;
      l.weightArg = traced->first;
      l.argDimN = traced->second[dimN];
      l.argDimK = traced->second[dimK];
      l.sizeN = rule.factors[n].size;
      l.sizeK = rule.factors[wdims[dimK][0]].size;
      l.output = op->getResult(0);
      // Bias: a forward two-operand user of the same type whose other operand
      // comes from a rank-1 parameter of size N (through reshape/broadcast).
      for (Operation *user : op->getResult(0).getUsers()) {
        if (!isForward(user) || user->getNumOperands() != 2 ||
            user->getNumResults() != 1 ||
            user->getResult(0).getType() != op->getResult(0).getType())
          continue;
        Value other = user->getOperand(0) == op->getResult(0)
                          ? user->getOperand(1)
                          : user->getOperand(0);
        // Through single-operand forward ops (reshape to [1, 1, N],
        // broadcast) back to the parameter.
        Value src = other;
        while (Operation *def = src.getDefiningOp()) {
          if (def->getNumOperands() != 1 || !isForward(def))
            break;
          src = def->getOperand(0);
        }
        auto barg = dyn_cast<BlockArgument>(src);
        if (!barg || barg.getOwner()->getParentOp() != func ||
            role(barg.getArgNumber()) != "param")
          continue;
        auto btype = cast<RankedTensorType>(barg.getType());
        if (btype.getRank() != 1 || btype.getDimSize(0) != l.sizeN)
          continue;
        l.biasArg = barg.getArgNumber();
        l.output = user->getResult(0);
        break;
      }
      return l;
    }
    return std::nullopt;
  }

  /// True when `v` reaches the logits operand of a tsr.cross_entropy
  /// through forward ops other than linear layers (reshape to [N, V], ...).
  bool reachesLogits(Value v) {
    SmallVector<Value> work{v};
    llvm::DenseSet<Value> seen;
    while (!work.empty()) {
      Value cur = work.pop_back_val();
      if (!seen.insert(cur).second)
        continue;
      for (OpOperand &use : cur.getUses()) {
        Operation *user = use.getOwner();
        if (isa<tsr::CrossEntropyOp>(user) && use.getOperandNumber() == 0)
          return true;
        if (!isForward(user) || linearOf(user))
          continue;
        for (Value r : user->getResults())
          work.push_back(r);
      }
    }
    return false;
  }

  Linear *linearOf(Operation *op) {
    for (Linear &l : linears)
      if (l.matmul == op)
        return &l;
    return nullptr;
  }

};

} // namespace

namespace {
struct ShardingAnnotatePass
    : public tessera::sharding::impl::ShardingAnnotateBase<
          ShardingAnnotatePass> {
  using ShardingAnnotateBase::ShardingAnnotateBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    if (dp < 1 || tp < 1 || pp < 1 || microBatches < 1) {
      module.emitError("dp, tp, pp and micro-batches must be positive");
      return signalPassFailure();
    }
    if (sp != "none" && sp != "megatron" && sp != "ulysses" && sp != "ring") {
      module.emitError("sp must be none, megatron, ulysses or ring, got '")
          << sp << "'";
      return signalPassFailure();
    }
    if (planner::spHasOwnAxis(sp) && spSize < 1) {
      module.emitError("sp-size must be positive");
      return signalPassFailure();
    }
    // The grid: dp, tp, [sp], [pp, mb] (common/plan/Grid.h, as Plan::grid()).
    planner::GridSpec spec =
        planner::gridOf(dp, tp, pp, microBatches, sp, spSize);
    SmallVector<int64_t> shape(spec.shape.begin(), spec.shape.end());
    SmallVector<StringRef> names(spec.names.begin(), spec.names.end());
    std::optional<size_t> spIndex = spec.axisIndex("sp");
    spAxis = spIndex ? static_cast<int16_t>(*spIndex) : -1;
    std::optional<size_t> mbIndex = spec.axisIndex("mb");
    mbAxis = mbIndex ? static_cast<int16_t>(*mbIndex) : -1;
    OpBuilder b(ctx);
    auto existing = module.lookupSymbol<shard::GridOp>("grid");
    if (existing) {
      if (existing.getShape() != ArrayRef<int64_t>(shape)) {
        existing.emitError("existing @grid does not have shape ")
            << llvm::make_range(shape.begin(), shape.end());
        return signalPassFailure();
      }
    } else {
      b.setInsertionPointToStart(module.getBody());
      shard::GridOp::create(b, module.getLoc(), b.getStringAttr("grid"),
                            b.getDenseI64ArrayAttr(shape));
    }
    module->setAttr(tsr::kGridAxesAttrName, b.getStrArrayAttr(names));

    Grid grid{FlatSymbolRefAttr::get(ctx, "grid"), {}};
    grid.shape.assign(shape.begin(), shape.end());
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      bool hasRoles = false;
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        hasRoles |= bool(func.getArgAttr(i, tsr::kRoleAttrName));
      if (!hasRoles)
        continue;
      if (failed(annotate(func, grid)))
        return signalPassFailure();
    }
  }

  static std::string shapeOf(RankedTensorType type) {
    std::string s = "[";
    llvm::raw_string_ostream os(s);
    llvm::interleaveComma(type.getShape(), os);
    os << "]";
    return s;
  }

  /// What annotate() decides for one function, step by step.
  struct AnnotateState {
    Annotator a;
    unsigned numArgs = 0;
    /// Per argument: one sub-factor list per dim (replicated by default).
    std::vector<SmallVector<DimFactors>> args;
    SmallVector<RankedTensorType> types;
    /// The embedding tables and LM heads kept whole (--vocab-parallel off).
    SmallVector<unsigned> vocabWhole;
    /// Arguments split along the vocabulary (tsr.vocab_parallel).
    SmallVector<unsigned> vocabSplit;
  };

  LogicalResult annotate(func::FuncOp func, const Grid &grid) {
    AnnotateState s;
    Annotator &a = s.a;
    a.func = func;
    a.dp = this->dp;
    a.tp = this->tp;
    a.grid = grid;
    a.computeBackward();
    if (failed(initLayouts(s)) || failed(splitBatch(s)) ||
        failed(splitSequence(s)))
      return failure();

    // Tensor parallelism: vocabulary parallelism pins the embedding and the
    // LM head, the sharding search chooses everything else.
    func.walk([&](Operation *op) {
      if (auto l = a.asLinear(op))
        a.linears.push_back(*l);
    });
    if (failed(splitVocabulary(s)) || failed(searchTensorSplits(s)))
      return failure();
    shareOptimizerState(s);
    writeShardings(s, grid);

    MLIRContext *ctx = func.getContext();
    if (sp == "megatron")
      return constrainResidualStream(func, grid, s.args, s.types);
    if (sp == "ulysses")
      return constrainAttentionHeads(func, grid, s.args, s.types);
    if (sp == "ring")
      func.walk([&](Operation *op) {
        if (isa<tsr::AttentionOp, tsr::AttentionGradOp>(op))
          op->setAttr("ring_size",
                      IntegerAttr::get(IntegerType::get(ctx, 64), spSize));
      });
    return success();
  }

  /// Every argument replicated; fails on an argument that is not a ranked
  /// tensor.
  LogicalResult initLayouts(AnnotateState &s) {
    func::FuncOp func = s.a.func;
    unsigned numArgs = func.getNumArguments();
    s.numArgs = numArgs;
    s.args.resize(numArgs);
    s.types.resize(numArgs);
    for (unsigned i = 0; i < numArgs; ++i) {
      auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      if (!type)
        return func.emitError("argument ") << i << " is not a ranked tensor";
      s.types[i] = type;
      for (int64_t size : type.getShape())
        s.args[i].push_back(DimFactors{SubFactor{size, {}}});
    }
    return success();
  }

  /// Data parallelism: the batch of the tokens and labels.
  LogicalResult splitBatch(AnnotateState &s) {
    Annotator &a = s.a;
    func::FuncOp func = a.func;
    int64_t dp = this->dp;
    auto &args = s.args;
    auto &types = s.types;
    for (unsigned i = 0; i < s.numArgs; ++i) {
      StringRef r = a.role(i);
      if (r != "tokens" && r != "labels")
        continue;
      if (types[i].getRank() < 1)
        return func.emitError("'") << a.name(i) << "' has no batch dimension";
      int64_t batch = types[i].getDimSize(0);
      if (batch % dp != 0)
        return func.emitError("dp=")
               << dp << " does not divide the batch size " << batch << " of '"
               << a.name(i) << "' " << shapeOf(types[i]);
      int64_t microBatches = this->microBatches;
      if ((batch / dp) % microBatches != 0)
        return func.emitError("micro-batches=")
               << microBatches << " does not divide the batch of each "
               << "data-parallel rank (" << batch << " / dp=" << dp << " = "
               << batch / dp << ") of '" << a.name(i) << "' "
               << shapeOf(types[i]);
      // Samples are split over dp first (DESIGN.md's data order), then each
      // dp rank's samples into micro-batches. In a pipelined step the mb
      // axis is always there, even when M = 1, so that the pipeline split
      // finds every accumulation by its all-reduce over mb.
      SmallVector<int16_t> axes;
      if (dp > 1)
        axes.push_back(kDpAxis);
      if (mbAxis >= 0)
        axes.push_back(mbAxis);
      if (!axes.empty())
        args[i][0] = DimFactors{SubFactor{batch, {axes.begin(), axes.end()}}};
    }
    return success();
  }

  /// Sequence parallelism over `sp`: the sequence dim of tokens and
  /// labels, block-split (Ulysses) or striped (ring: local position i of
  /// sp rank r is i·K + r, which balances causal attention's work).
  LogicalResult splitSequence(AnnotateState &s) {
    Annotator &a = s.a;
    func::FuncOp func = a.func;
    auto &args = s.args;
    auto &types = s.types;
    for (unsigned i = 0; i < s.numArgs && spAxis >= 0; ++i) {
      StringRef r = a.role(i);
      if (r != "tokens" && r != "labels")
        continue;
      if (types[i].getRank() < 2)
        return func.emitError("'")
               << a.name(i) << "' has no sequence dimension";
      int64_t seq = types[i].getDimSize(1);
      if (seq % spSize != 0)
        return func.emitError("sp-size=")
               << static_cast<int64_t>(spSize)
               << " does not divide the sequence length " << seq << " of '"
               << a.name(i) << "' " << shapeOf(types[i]);
      args[i][1] = sp == "ring" ? DimFactors{SubFactor{seq / spSize, {}},
                                             SubFactor{spSize, {spAxis}}}
                                : DimFactors{SubFactor{seq, {spAxis}}};
    }
    return success();
  }

  /// Vocab parallelism (Megatron-LM, Shoeybi et al. 2019): the embedding
  /// table's vocabulary rows and the LM head's vocabulary columns (with its
  /// bias) are split over tp. The lookup then gives partial sums that the
  /// partitioner all-reduces, and tsr.cross_entropy reduces over the split
  /// vocabulary itself, so the [N, V] logits are never gathered.
  LogicalResult splitVocabulary(AnnotateState &s) {
    Annotator &a = s.a;
    int64_t tp = this->tp;
    auto &args = s.args;
    auto &types = s.types;
    auto markVocab = [&](unsigned arg) {
      if (!llvm::is_contained(s.vocabSplit, arg))
        s.vocabSplit.push_back(arg);
    };
    if (tp <= 1)
      return success();
    WalkResult walk = a.func.walk([&](tsr::GatherOp gather) {
      if (!a.isForward(gather))
        return WalkResult::advance();
      // A lookup at constant indices (positions, BERT's token types) reads
      // a table, not a vocabulary: only tables indexed by the tokens are.
      Value idx = gather.getIndices();
      while (Operation *def = idx.getDefiningOp()) {
        if (!isa<tsr::ReshapeOp, tsr::BroadcastOp, tsr::ConvertOp>(def))
          break;
        idx = def->getOperand(0);
      }
      if (matchPattern(idx, m_Constant()))
        return WalkResult::advance();
      auto traced = a.traceParam(gather.getTable());
      if (!traced)
        return WalkResult::advance();
      unsigned arg = traced->first;
      int64_t dim = traced->second[0];
      int64_t vocab = types[arg].getDimSize(dim);
      if (!vocabParallel) {
        s.vocabWhole.push_back(arg);
        return WalkResult::advance();
      }
      if (vocab % tp != 0) {
        gather.emitError("tp=")
            << tp << " does not divide the vocabulary size " << vocab
            << " of embedding table '" << a.name(arg) << "' "
            << shapeOf(types[arg]) << " (use --vocab-parallel off)";
        return WalkResult::interrupt();
      }
      args[arg][dim] = DimFactors{SubFactor{vocab, {kTpAxis}}};
      markVocab(arg);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    for (Linear &l : a.linears) {
      if (!a.reachesLogits(l.output))
        continue;
      if (!vocabParallel) {
        s.vocabWhole.push_back(l.weightArg);
        continue;
      }
      if (l.sizeN % tp != 0)
        return l.matmul->emitError("tp=")
               << tp << " does not divide the vocabulary size " << l.sizeN
               << " of LM head '" << a.name(l.weightArg) << "' "
               << shapeOf(types[l.weightArg]) << " (use --vocab-parallel off)";
      DimFactors dim{SubFactor{l.sizeN, {kTpAxis}}};
      args[l.weightArg][l.argDimN] = dim;
      markVocab(l.weightArg);
      if (l.biasArg) {
        args[*l.biasArg][0] = dim;
        markVocab(*l.biasArg);
      }
    }
    return success();
  }

  /// Tensor parallelism by the cost-based sharding search
  /// (compiler/planner/ShardingSearch.h): every parameter the plan has not
  /// pinned gets the layout that minimises the step's predicted tp
  /// communication, with every block weight matrix split. Vocabulary-split
  /// tables and LM heads (splitVocabulary) are pinned.
  LogicalResult searchTensorSplits(AnnotateState &s) {
    Annotator &a = s.a;
    // The plan's pins (--sharding, or the whole layout tessera-partition
    // searched already) win over the search.
    planner::GridSpec gridSpec =
        planner::gridOf(dp, tp, pp, microBatches, sp, spSize);
    auto pins = parsePlanShardings(
        SmallVector<std::string>(shardings.begin(), shardings.end()), a.func,
        gridSpec, a.grid.symbol);
    if (failed(pins))
      return failure();
    auto applyPins = [&] {
      for (unsigned i = 0; i < s.numArgs; ++i) {
        auto it = pins->find(a.name(i));
        if (it == pins->end())
          continue;
        TensorSharding ts = TensorSharding::fromAttr(it->second, s.types[i]);
        ts.complete(s.types[i]);
        for (auto [d, dim] : llvm::enumerate(ts.dims))
          s.args[i][d] = *dim;
      }
    };
    if (tp <= 1) {
      applyPins();
      return success();
    }
    ExtractedGraph eg = buildSearchGraph(a.func);
    planner::SearchGraph &g = eg.graph;
    for (auto [t, tensor] : llvm::enumerate(g.tensors)) {
      if (tensor.kind != planner::SearchGraph::Kind::Parameter)
        continue;
      unsigned arg = cast<BlockArgument>(eg.values[t]).getArgNumber();
      if (llvm::is_contained(s.vocabWhole, arg))
        tensor.pinned = planner::TpLayout{};
      if (auto it = pins->find(a.name(arg)); it != pins->end()) {
        // The search sees a pin as its split over tp (one dimension, maybe
        // as chunks); other axes are applied after it.
        TensorSharding ts = TensorSharding::fromAttr(it->second, s.types[arg]);
        tensor.pinned = planner::TpLayout{};
        for (auto [d, dim] : llvm::enumerate(ts.dims)) {
          if (!dim)
            continue;
          int64_t outer = 1;
          for (const SubFactor &f : *dim) {
            if (llvm::is_contained(f.axes, kTpAxis)) {
              tensor.pinned = planner::TpLayout{static_cast<int>(d), outer, false};
              break;
            }
            outer *= f.size;
          }
        }
        continue;
      }
      if (!llvm::is_contained(s.vocabSplit, arg))
        continue;
      // Pinned as splitVocabulary laid it out: one dim split over tp.
      for (auto [d, dim] : llvm::enumerate(s.args[arg]))
        if (dim.size() == 1 && !dim[0].axes.empty())
          tensor.pinned = planner::TpLayout{static_cast<int>(d), 1, false};
    }
    planner::ShardingSearchOptions options;
    options.tp = tp;
    auto result = planner::searchShardings(g, options);
    if (!result)
      return a.func.emitError(llvm::toString(result.takeError()));
    recordSearch(g, *result);
    for (int t : result->unsplittable) {
      unsigned arg = cast<BlockArgument>(eg.values[t]).getArgNumber();
      Operation *user = nullptr;
      for (auto [i, op] : llvm::enumerate(g.ops))
        if (!user && llvm::is_contained(op.operands, t))
          user = eg.ops[i];
      return (user ? user->emitError() : a.func.emitError())
             << "tp="
             << static_cast<int64_t>(tp)
             << " does not divide any dimension of parameter '" << a.name(arg)
             << "' " << shapeOf(s.types[arg])
             << " so that it can be split (tensor parallelism splits every "
                "weight matrix of the blocks; the sharding search found no "
                "layout that divides it)";
    }
    for (auto [t, tensor] : llvm::enumerate(g.tensors)) {
      if (tensor.kind != planner::SearchGraph::Kind::Parameter)
        continue;
      const planner::TpLayout &l = result->layouts[t];
      if (!l.isSplit())
        continue;
      unsigned arg = cast<BlockArgument>(eg.values[t]).getArgNumber();
      int64_t size = s.types[arg].getDimSize(l.dim);
      s.args[arg][l.dim] =
          l.outer == 1
              ? DimFactors{SubFactor{size, {kTpAxis}}}
              : DimFactors{SubFactor{l.outer, {}},
                           SubFactor{size / l.outer, {kTpAxis}}};
    }
    applyPins();
    return success();
  }

  /// "tsr.matmul [4, 16, 64]": a search tensor's producer (or parameter
  /// name) and shape.
  static std::string tensorLabel(const planner::SearchGraph &g, int t) {
    const planner::SearchGraph::Tensor &tensor = g.tensors[t];
    std::string label = tensor.kind == planner::SearchGraph::Kind::Activation &&
                                tensor.producer >= 0
                            ? g.ops[tensor.producer].name
                            : tensor.name;
    label += " [";
    for (auto [i, d] : llvm::enumerate(tensor.shape))
      label += (i ? ", " : "") + std::to_string(d);
    return label + "]";
  }

  /// Records what the search predicted on the module (tsr.sharding_search)
  /// for `tessera-partition --explain`.
  void recordSearch(const planner::SearchGraph &g,
                    const planner::ShardingSearchResult &r) {
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    SmallVector<Attribute> list;
    for (const planner::PredictedCollective &c : r.collectives)
      list.push_back(b.getDictionaryAttr({
          b.getNamedAttr("layer", b.getI64IntegerAttr(c.layer)),
          b.getNamedAttr("kind", b.getStringAttr(c.kind)),
          b.getNamedAttr("backward", b.getBoolAttr(c.backward)),
          // The producing op and shape, not its source location (the IR
          // must not depend on whether locations were printed).
          b.getNamedAttr("tensor", b.getStringAttr(tensorLabel(g, c.tensor))),
          b.getNamedAttr("bytes", b.getI64IntegerAttr(
                                      static_cast<int64_t>(c.bytes + 0.5))),
      }));
    getOperation()->setAttr(
        tsr::kShardingSearchAttrName,
        b.getDictionaryAttr({
            b.getNamedAttr("layers", b.getI64IntegerAttr(r.layers)),
            b.getNamedAttr("distinct_layers",
                           b.getI64IntegerAttr(r.distinctLayers)),
            b.getNamedAttr("predicted_seconds", b.getF64FloatAttr(r.seconds)),
            b.getNamedAttr("bytes", b.getI64IntegerAttr(
                                        static_cast<int64_t>(r.bytes + 0.5))),
            b.getNamedAttr("collectives", b.getArrayAttr(list)),
        }));
  }

  /// Optimizer state follows its parameter.
  void shareOptimizerState(AnnotateState &s) {
    Annotator &a = s.a;
    auto &args = s.args;
    auto &types = s.types;
    llvm::StringMap<unsigned> byName;
    for (unsigned i = 0; i < s.numArgs; ++i)
      if (a.role(i) == "param" || a.role(i) == "frozen")
        byName[a.name(i)] = i;
    for (unsigned i = 0; i < s.numArgs; ++i) {
      if (a.role(i) != "opt_state")
        continue;
      StringRef n = a.name(i);
      for (StringRef suffix : {".exp_avg_sq", ".exp_avg"}) {
        if (!n.ends_with(suffix))
          continue;
        auto it = byName.find(n.drop_back(suffix.size()));
        if (it != byName.end() && types[it->second] == types[i])
          args[i] = args[it->second];
        break;
      }
    }
  }

  /// Sets the arguments' tsr.sharding (and tsr.vocab_parallel); results
  /// follow the argument of their name, the loss is replicated.
  void writeShardings(AnnotateState &s, const Grid &grid) {
    Annotator &a = s.a;
    func::FuncOp func = a.func;
    auto &args = s.args;
    auto &types = s.types;
    unsigned numArgs = s.numArgs;
    MLIRContext *ctx = func.getContext();
    SmallVector<tsr::ShardingAttr> attrs;
    for (unsigned i = 0; i < numArgs; ++i) {
      attrs.push_back(tsr::ShardingAttr::getFactored(ctx, grid.symbol, args[i],
                                                     {}, grid.shape));
      func.setArgAttr(i, tsr::kShardingAttrName, attrs.back());
      if (llvm::is_contained(s.vocabSplit, i))
        func.setArgAttr(i, tsr::kVocabParallelAttrName, UnitAttr::get(ctx));
    }
    llvm::StringMap<unsigned> argByName;
    for (unsigned i = 0; i < numArgs; ++i)
      argByName[a.name(i)] = i;
    for (unsigned r = 0; r < func.getNumResults(); ++r) {
      auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[r]);
      if (!type)
        continue;
      auto n = tsr::getResultName(func, r);
      auto role = tsr::getResultRole(func, r);
      tsr::ShardingAttr attr =
          tsr::ShardingAttr::getReplicated(ctx, grid.symbol, type.getRank());
      if (n && (!role || role.getValue() != "loss")) {
        auto it = argByName.find(n.getValue());
        if (it != argByName.end() && types[it->second] == type)
          attr = attrs[it->second];
      }
      func.setResultAttr(r, tsr::kShardingAttrName, attr);
    }
  }

  /// The batch and sequence sizes and the tokens' batch-dim layout.
  struct TokenLayout {
    int64_t batch = 0, seq = 0;
    DimFactors batchDim;
  };
  std::optional<TokenLayout> tokenLayout(func::FuncOp func,
                                         ArrayRef<SmallVector<DimFactors>> args,
                                         ArrayRef<RankedTensorType> types) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto role = tsr::getArgRole(func, i);
      if (!role || role.getValue() != "tokens" || types[i].getRank() != 2)
        continue;
      return TokenLayout{types[i].getDimSize(0), types[i].getDimSize(1),
                         args[i][0]};
    }
    return std::nullopt;
  }

  /// Megatron-SP (Korthikanti et al., 2022): every layer boundary of the
  /// forward (the residual stream [B, S, ...] between blocks, see
  /// training::assignLayers) is constrained to the sequence split over tp.
  /// Propagation then runs LayerNorm, dropout and the residual adds on
  /// sequence shards, and the partitioner turns TP's all-reduces into
  /// reduce-scatters into, and all-gathers out of, that layout.
  LogicalResult constrainResidualStream(func::FuncOp func, const Grid &grid,
                                        ArrayRef<SmallVector<DimFactors>> args,
                                        ArrayRef<RankedTensorType> types) {
    if (tp < 2)
      return func.emitError("sp=megatron shards the sequence over the tp "
                            "axis and needs tp > 1");
    auto tokens = tokenLayout(func, args, types);
    if (!tokens)
      return func.emitError("sp=megatron needs a [batch, sequence] tokens "
                            "argument");
    if (tokens->seq % tp != 0)
      return func.emitError("sp=megatron: tp=")
             << static_cast<int64_t>(tp)
             << " does not divide the sequence length " << tokens->seq;
    SmallVector<Operation *> forward = training::forwardOpsOf(func.front());
    SmallVector<int64_t> layerOf;
    training::assignLayers(forward, layerOf);
    SmallVector<Value> boundaries =
        training::layerBoundaryValues(forward, layerOf);
    // The residual stream's type: the first boundary shaped [B, S, ...].
    Type stream;
    for (Value v : boundaries) {
      auto t = dyn_cast_or_null<RankedTensorType>(v ? v.getType() : Type());
      if (t && t.getRank() >= 3 && t.getDimSize(0) == tokens->batch &&
          t.getDimSize(1) == tokens->seq && t.getElementType().isIntOrFloat() &&
          !t.getElementType().isInteger()) {
        stream = t;
        break;
      }
    }
    if (!stream)
      return func.emitError("sp=megatron: no layer boundary carries a "
                            "[batch, sequence, ...] activation");
    auto type = cast<RankedTensorType>(stream);
    SmallVector<DimFactors> dims;
    dims.push_back(tokens->batchDim);
    dims.push_back(DimFactors{SubFactor{tokens->seq, {kTpAxis}}});
    for (int64_t d = 2; d < type.getRank(); ++d)
      dims.push_back(DimFactors{SubFactor{type.getDimSize(d), {}}});
    auto sharding = tsr::ShardingAttr::getFactored(
        func.getContext(), grid.symbol, dims, {}, grid.shape);
    for (Value v : boundaries)
      if (v && v.getType() == stream)
        constrain(v, sharding);
    return success();
  }

  /// DeepSpeed-Ulysses (Jacobs et al., 2023): the Q, K and V of every
  /// tsr.attention (and attention_grad) are constrained to their heads
  /// split over [tp, sp] with the whole sequence, so the partitioner
  /// switches the sequence-sharded activations to head shards with one
  /// all-to-all each, and back after attention. Q is [B·H, S, Dh] (PyTorch's
  /// MultiheadAttention) or [B, H, S, Dh].
  LogicalResult constrainAttentionHeads(func::FuncOp func, const Grid &grid,
                                        ArrayRef<SmallVector<DimFactors>> args,
                                        ArrayRef<RankedTensorType> types) {
    auto tokens = tokenLayout(func, args, types);
    if (!tokens)
      return func.emitError("sp=ulysses needs a [batch, sequence] tokens "
                            "argument");
    SmallVector<int16_t, 2> headAxes;
    if (tp > 1)
      headAxes.push_back(kTpAxis);
    headAxes.push_back(spAxis);
    // The layout of a [B·H, S, d] or [B, H, S, d] attention tensor with the
    // heads split over `heads` and the sequence over `seq`.
    auto layout = [&](RankedTensorType type, int64_t numHeads,
                      ArrayRef<int16_t> heads, ArrayRef<int16_t> seq) {
      SmallVector<DimFactors> dims;
      DimFactors headDim{SubFactor{numHeads, {heads.begin(), heads.end()}}};
      if (type.getRank() == 3) {
        DimFactors lead = tokens->batchDim;
        lead.append(headDim.begin(), headDim.end());
        dims.push_back(lead);
      } else {
        dims.push_back(tokens->batchDim);
        dims.push_back(headDim);
      }
      dims.push_back(DimFactors{SubFactor{type.getDimSize(type.getRank() - 2),
                                          {seq.begin(), seq.end()}}});
      dims.push_back(
          DimFactors{SubFactor{type.getDimSize(type.getRank() - 1), {}}});
      return tsr::ShardingAttr::getFactored(func.getContext(), grid.symbol,
                                            dims, {}, grid.shape);
    };
    SmallVector<int16_t, 2> tpAxes(headAxes.begin(), headAxes.end() - 1);
    SmallVector<int16_t, 1> spAxes{spAxis};
    // In walk order, so the constraints (and the IR) do not depend on
    // pointer values.
    llvm::MapVector<Value, tsr::ShardingAttr> wanted;
    WalkResult walk = func.walk([&](Operation *op) {
      if (!isa<tsr::AttentionOp, tsr::AttentionGradOp>(op))
        return WalkResult::advance();
      for (unsigned o = 0; o < 3; ++o) {
        Value v = op->getOperand(o);
        auto type = cast<RankedTensorType>(v.getType());
        int64_t lead = 1;
        for (int64_t d = 0; d + 2 < type.getRank(); ++d)
          lead *= type.getDimSize(d);
        int64_t heads = lead / tokens->batch;
        if (lead % tokens->batch != 0 ||
            (type.getRank() == 4 && type.getDimSize(0) != tokens->batch) ||
            (type.getRank() != 3 && type.getRank() != 4)) {
          op->emitOpError("sp=ulysses: cannot find the heads of ")
              << type << " (expected [B·H, S, d] or [B, H, S, d] with B = "
              << tokens->batch << ")";
          return WalkResult::interrupt();
        }
        if (heads % (tp * spSize) != 0) {
          op->emitOpError("sp=ulysses: ")
              << (tp > 1 ? "tp x sp-size = " : "sp-size = ")
              << tp * static_cast<int64_t>(spSize) << " does not divide the "
              << heads << " attention heads";
          return WalkResult::interrupt();
        }
        // Q, K and V (of the forward, read again by the backward) on head
        // shards; the backward's dQ, dK and dV back on sequence shards, so
        // each direction is one all-to-all per tensor (Jacobs et al.,
        // 2023) and the rest of the backward stays sequence-local.
        wanted[v] = layout(type, heads, headAxes, {});
        if (isa<tsr::AttentionGradOp>(op))
          wanted[op->getResult(o)] = layout(type, heads, tpAxes, spAxes);
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    for (auto &[v, sharding] : wanted)
      constrain(v, sharding);
    return success();
  }

  /// Inserts `tsr.sharding_constraint` after `v`'s definition and makes
  /// every other use read it.
  static void constrain(Value v, tsr::ShardingAttr sharding) {
    OpBuilder b(v.getContext());
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
    auto c = tsr::ShardingConstraintOp::create(b, v.getLoc(), v, sharding);
    v.replaceAllUsesExcept(c.getResult(), c);
  }

  /// Grid axis indices of `sp` and `mb` (gridOf's order: dp, tp, [sp],
  /// [pp, mb]), -1 where the grid has none.
  int16_t spAxis = -1;
  int16_t mbAxis = -1;
};
} // namespace

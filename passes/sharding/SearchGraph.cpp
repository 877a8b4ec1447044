//===- SearchGraph.cpp - the sharding search's view of tsr IR -------------===//

#include "passes/sharding/SearchGraph.h"

#include "common/layers/LayerCuts.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseSet.h"

#include <limits>

using namespace mlir;
using namespace tessera;
using namespace tessera::sharding;
using planner::SearchGraph;

namespace {

/// A short description of `v` for reports: its producer and location.
std::string describe(Value v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (Operation *def = v.getDefiningOp()) {
    os << def->getName().getStringRef();
    if (def->getNumResults() > 1)
      os << "#" << cast<OpResult>(v).getResultNumber();
    if (auto loc = dyn_cast<NameLoc>(def->getLoc()))
      os << " '" << loc.getName().getValue() << "'";
    else if (auto fused = dyn_cast<FusedLoc>(def->getLoc())) {
      for (Location l : fused.getLocations())
        if (auto n = dyn_cast<NameLoc>(l)) {
          os << " '" << n.getName().getValue() << "'";
          break;
        }
    }
  }
  return s;
}

int64_t elementBytes(Type t) {
  auto type = dyn_cast<RankedTensorType>(t);
  if (!type)
    return 4;
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  return std::max<int64_t>(1, bits / 8);
}

} // namespace

ExtractedGraph sharding::buildSearchGraph(FunctionOpInterface func) {
  ExtractedGraph out;
  SearchGraph &g = out.graph;
  Block &body = func.getFunctionBody().front();
  training::StepOps step = training::classifyStepOps(body);
  SmallVector<int64_t> layerOf;
  training::assignLayers(step.forward, layerOf);

  auto tensorFor = [&](Value v) -> int {
    auto it = out.tensorOf.find(v);
    if (it != out.tensorOf.end())
      return it->second;
    SearchGraph::Tensor t;
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (type)
      t.shape.assign(type.getShape().begin(), type.getShape().end());
    t.elementBytes = elementBytes(v.getType());
    t.floating = type && isa<FloatType>(type.getElementType());
    t.kind = SearchGraph::Kind::Constant;
    t.differentiable = false;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto role = tsr::getArgRole(func, arg.getArgNumber());
      auto name = tsr::getArgName(func, arg.getArgNumber());
      t.name = name ? name.getValue().str()
                    : "arg" + std::to_string(arg.getArgNumber());
      if (role && role.getValue() == "param") {
        t.kind = SearchGraph::Kind::Parameter;
        t.differentiable = true;
      } else if (role &&
                 (role.getValue() == "tokens" || role.getValue() == "labels")) {
        t.kind = SearchGraph::Kind::Input;
      }
    } else {
      t.name = describe(v);
    }
    int index = static_cast<int>(g.tensors.size());
    g.tensors.push_back(std::move(t));
    out.values.push_back(v);
    out.tensorOf[v] = index;
    return index;
  };

  // Ops reading the labels (the loss, and a hand-written step's backward
  // without tsr.bwd tags) are not part of the forward the search lays out.
  llvm::DenseSet<Value> fromLabels;
  for (BlockArgument arg : body.getArguments()) {
    auto role = tsr::getArgRole(func, arg.getArgNumber());
    if (role && role.getValue() == "labels")
      fromLabels.insert(arg);
  }
  for (auto [i, op] : llvm::enumerate(step.forward)) {
    // An elementwise copy of a parameter in another element type (the bf16
    // or fp16 weight that mixed precision computes with) is the parameter
    // as far as the layout goes: it is laid out as the parameter is stored
    // (tsr-sharding-propagate gives it the argument's layout), so the search
    // sees the parameter itself, used as stored, rather than an op whose
    // whole result could be sliced for free.
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumOperands() == 1 &&
        op->getNumResults() == 1 &&
        op->getOperand(0).getType() != op->getResult(0).getType())
      if (auto arg = dyn_cast<BlockArgument>(op->getOperand(0))) {
        auto role = tsr::getArgRole(func, arg.getArgNumber());
        auto from = dyn_cast<RankedTensorType>(arg.getType());
        auto to = dyn_cast<RankedTensorType>(op->getResult(0).getType());
        if (role && role.getValue() == "param" && from && to &&
            from.getShape() == to.getShape()) {
          out.tensorOf[op->getResult(0)] = tensorFor(arg);
          continue;
        }
      }
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return fromLabels.contains(v); })) {
      for (Value r : op->getResults())
        fromLabels.insert(r);
      continue;
    }
    // An op reading only constants and optimizer state (the step counter's
    // increment) is no part of the forward the search lays out.
    if (llvm::none_of(op->getOperands(), [&](Value v) {
          auto it = out.tensorOf.find(v);
          if (it != out.tensorOf.end())
            return g.tensors[it->second].kind != SearchGraph::Kind::Constant;
          auto arg = dyn_cast<BlockArgument>(v);
          if (!arg)
            return false;
          auto role = tsr::getArgRole(func, arg.getArgNumber());
          return role &&
                 (role.getValue() == "param" || role.getValue() == "tokens");
        }))
      continue;
    SearchGraph::Op sop;
    sop.name = op->getName().getStringRef().str();
    sop.layer = static_cast<int>(layerOf[i]);
    {
      std::string loc;
      llvm::raw_string_ostream os(loc);
      op->getLoc().print(os);
      sop.where = loc;
    }
    bool ranked =
        llvm::all_of(op->getOperandTypes(), llvm::IsaPred<RankedTensorType>) &&
        llvm::all_of(op->getResultTypes(), llvm::IsaPred<RankedTensorType>);
    auto iface = dyn_cast<tsr::ShardingRuleOpInterface>(op);
    if (iface && ranked) {
      tsr::ShardingRule rule = iface.getShardingRule();
      for (const auto &f : rule.factors)
        sop.factors.push_back({f.size, f.needReplication, f.reducedByOp});
      auto convert = [](const tsr::ShardingRule::TensorFactors &tf) {
        SearchGraph::TensorDims dims;
        for (const auto &d : tf)
          dims.emplace_back(d.begin(), d.end());
        return dims;
      };
      for (const auto &tf : rule.operands)
        sop.operandDims.push_back(convert(tf));
      for (const auto &tf : rule.results)
        sop.resultDims.push_back(convert(tf));
      for (const auto &grp : rule.linearGroups)
        sop.linearGroups.emplace_back(grp.begin(), grp.end());
    } else {
      // No rule: every dimension its own factor that must stay whole.
      auto whole = [&](Type type) {
        SearchGraph::TensorDims dims;
        if (auto t = dyn_cast<RankedTensorType>(type))
          for (int64_t size : t.getShape()) {
            dims.push_back({static_cast<int>(sop.factors.size())});
            sop.factors.push_back({size, true, false});
          }
        return dims;
      };
      for (Type t : op->getOperandTypes())
        sop.operandDims.push_back(whole(t));
      for (Type t : op->getResultTypes())
        sop.resultDims.push_back(whole(t));
    }
    if (sop.operandDims.size() != op->getNumOperands() ||
        sop.resultDims.size() != op->getNumResults())
      continue;
    int index = static_cast<int>(g.ops.size());
    bool differentiable = false;
    for (Value v : op->getOperands()) {
      int t = tensorFor(v);
      sop.operands.push_back(t);
      differentiable |= g.tensors[t].differentiable;
    }
    for (Value v : op->getResults()) {
      int t = tensorFor(v);
      g.tensors[t].kind = SearchGraph::Kind::Activation;
      g.tensors[t].producer = index;
      auto type = dyn_cast<RankedTensorType>(v.getType());
      g.tensors[t].differentiable =
          differentiable && type && isa<FloatType>(type.getElementType());
      sop.results.push_back(t);
    }
    g.ops.push_back(std::move(sop));
    out.ops.push_back(op);
  }

  // Blocks: from the first layer holding an attention to the end of the
  // last block (as long as the first block).
  SmallVector<int> attentionLayers;
  for (auto [i, op] : llvm::enumerate(out.ops))
    if (isa<tsr::AttentionOp>(op) &&
        !llvm::is_contained(attentionLayers, g.ops[i].layer))
      attentionLayers.push_back(g.ops[i].layer);
  // The blocks end one block after the last attention (a block being the
  // layers from one attention to the next); what follows (an MLM head's
  // transform, the LM head) is not a block. With fewer than two attentions
  // (an MLP, one block, attention not raised) every layer counts. Before
  // the first attention there are only embeddings, which contract nothing.
  int firstBlock = 0, endBlock = std::numeric_limits<int>::max();
  if (attentionLayers.size() > 1)
    endBlock =
        attentionLayers.back() + (attentionLayers[1] - attentionLayers[0]);
  // A weight matrix: a rank-2 parameter that an op contracts with a
  // floating-point activation (one of the parameter's factors is reduced),
  // read directly or through single-operand ops (transpose, convert).
  // Each tensor's readers, (op, operand), found once.
  std::vector<SmallVector<std::pair<int, unsigned>, 2>> readers(
      g.tensors.size());
  for (auto [i, op] : llvm::enumerate(g.ops))
    for (auto [k, operand] : llvm::enumerate(op.operands))
      readers[operand].push_back(
          {static_cast<int>(i), static_cast<unsigned>(k)});
  for (auto [t, tensor] : llvm::enumerate(g.tensors)) {
    if (tensor.kind != SearchGraph::Kind::Parameter || tensor.shape.size() != 2)
      continue;
    SmallVector<int> work{static_cast<int>(t)};
    llvm::DenseSet<int> seen;
    while (!work.empty() && !g.tensors[t].mustSplit) {
      int cur = work.pop_back_val();
      if (!seen.insert(cur).second)
        continue;
      for (auto [i, k] : readers[cur]) {
        const SearchGraph::Op &op = g.ops[i];
        if (op.operands.size() == 1 && op.results.size() == 1) {
          work.push_back(op.results[0]);
          continue;
        }
        bool withActivation = llvm::any_of(op.operands, [&](int o) {
          const SearchGraph::Tensor &ot = g.tensors[o];
          return o != cur && ot.kind == SearchGraph::Kind::Activation &&
                 ot.floating;
        });
        bool contracts = false;
        for (const auto &dim : op.operandDims[k])
          for (int f : dim) {
            bool inResult = false;
            for (const auto &rd : op.resultDims)
              for (const auto &d : rd)
                inResult |= llvm::is_contained(d, f);
            contracts |= !inResult && !op.factors[f].needReplication &&
                         !op.factors[f].reducedByOp;
          }
        if (withActivation && contracts && op.layer >= firstBlock &&
            op.layer < endBlock)
          g.tensors[t].mustSplit = true;
      }
    }
  }
  return out;
}

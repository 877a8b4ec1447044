//===- PipelineSplit.cpp - @train_step -> pipeline chunks + schedule ------===//
//
// See Passes.td for the contract. The pass works in four steps on the
// partitioned @train_step: (1) classify ops into constants, per-micro-batch
// ops (forward/backward) and once-per-step apply ops; (2) cut the forward
// ops into layers and layers into chunks (StageBalance.h); (3) build every
// chunk's forward/backward/apply functions with send/recv; (4) emit the
// schedule, whose verifier checks it.
//
//===----------------------------------------------------------------------===//

#include "common/layers/LayerCuts.h"
#include "passes/pipeline/Passes.h"
#include "passes/pipeline/StageBalance.h"

#include "common/schedule/PipelineSchedule.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"
#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace tessera::pipeline {
#define GEN_PASS_DEF_PIPELINESPLIT
#include "passes/pipeline/Passes.h.inc"
} // namespace tessera::pipeline

using namespace mlir;
using namespace tessera;
namespace sched = tessera::tsrt::schedule;

namespace {

constexpr int64_t kReplicated = -1;
/// Optimizer FLOPs per parameter element in a layer's cost (AdamW's update
/// is about ten elementwise operations).
constexpr double kOptimizerFlopsPerParam = 10;

enum class Phase { Forward, Backward };

/// Everything the split needs to know about @train_step's ops.
struct StepAnalysis {
  func::FuncOp func;
  int16_t mbAxis = -1;
  SmallVector<int64_t> gridShape;
  DenseSet<Operation *> constant;     ///< rematerialised where used
  DenseSet<Operation *> micro;        ///< run once per micro-batch
  DenseMap<Operation *, Phase> phase; ///< of micro ops
  /// Micro ops that autodiff did not tag and that read only step arguments,
  /// constants and each other: ops later passes made from parameters
  /// (ZeRO-3's all-gathers). They belong to the phase and chunk of their
  /// readers, not to the layer where they happen to sit.
  llvm::SetVector<Operation *> fromParams;
  SmallVector<shard::AllReduceOp> accs; ///< all-reduces over mb
  DenseMap<Operation *, int64_t> accIndex;
  SmallVector<Operation *> forwardOps;  ///< micro forward ops, in order
  DenseMap<Operation *, int64_t> chunk; ///< every micro and apply op
  /// Apply ops that sum values of several chunks, linearly (their sharding
  /// rule's linear group holds every operand): fp16 dynamic loss scaling's
  /// sum of the gradients' sums. Each chunk computes the sum of its own
  /// terms (its partial) and the value is their shard.all_reduce over pp
  /// where a non-summing op reads it, so every stage sees the whole sum.
  DenseSet<Operation *> crossSum;
  int16_t ppAxis = -1;
  SmallVector<double> unitCost;
  SmallVector<int64_t> unitOf; ///< per forward op
  int64_t numUnits = 0;
};

/// The type micro-batch values of `type` are accumulated in: f32 for a float
/// narrower than f32 (bf16, f16; Megatron-LM's fp32 `main_grad`), else
/// `type` itself. The runtime adds the micro-batches' results into f32
/// buffers only.
Type accumulatorType(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked)
    return type;
  auto element = dyn_cast<FloatType>(ranked.getElementType());
  if (!element || element.getWidth() >= 32)
    return type;
  return ranked.clone(Float32Type::get(type.getContext()));
}

bool isMicroValue(const StepAnalysis &a, Value v) {
  Operation *d = v.getDefiningOp();
  return d && a.micro.contains(d);
}

/// Steps 1 and 2 up to the layers.
LogicalResult classify(StepAnalysis &a) {
  Block &body = a.func.front();
  // Constants: tsr ops whose operands are all constants.
  for (Operation &op : body.without_terminator()) {
    if (!op.getDialect() || op.getDialect()->getNamespace() != "tsr" ||
        op.getNumRegions() != 0)
      continue;
    if (llvm::all_of(op.getOperands(), [&](Value v) {
          Operation *d = v.getDefiningOp();
          return d && a.constant.contains(d);
        }))
      a.constant.insert(&op);
  }
  // Accumulations and the per-micro-batch region (what they need).
  SmallVector<Operation *> work;
  for (Operation &op : body.without_terminator())
    if (auto ar = dyn_cast<shard::AllReduceOp>(op))
      if (llvm::is_contained(ar.getGridAxes(), a.mbAxis)) {
        a.accIndex[ar] = a.accs.size();
        a.accs.push_back(ar);
        Operation *d = ar.getInput().getDefiningOp();
        if (!d || a.constant.contains(d))
          return ar.emitOpError("accumulates a value that is not computed "
                                "per micro-batch");
        work.push_back(d);
      }
  if (a.accs.empty())
    return a.func.emitError("no all-reduce over the micro-batch axis: run "
                            "tsr-sharding-annotate with pp or micro-batches "
                            "first");
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!a.micro.insert(op).second)
      continue;
    if (a.accIndex.count(op))
      return op->emitOpError("is a sum over micro-batches that a "
                             "per-micro-batch op needs; the step cannot be "
                             "split into micro-batches");
    for (Value v : op->getOperands())
      if (Operation *d = v.getDefiningOp(); d && !a.constant.contains(d))
        work.push_back(d);
  }
  // Phases, and apply ops must not read micro values except through an
  // accumulation.
  for (Operation &op : body) {
    // Made from parameters: reads only step arguments, constants and
    // values made from parameters, at least one of them a trainable
    // parameter or made from one (values made only from frozen buffers or
    // tokens, e.g. LLaMA's rotary tables, stay in the layers that read
    // them).
    auto isParam = [&](Value v) {
      auto arg = dyn_cast<BlockArgument>(v);
      auto role = arg ? tsr::getArgRole(a.func, arg.getArgNumber()) : nullptr;
      return role && role.getValue() == "param";
    };
    if (a.micro.contains(&op) && !tsr::getForwardId(&op) &&
        !tsr::isBackward(&op) &&
        llvm::all_of(op.getOperands(),
                     [&](Value v) {
                       Operation *d = v.getDefiningOp();
                       return !d || a.constant.contains(d) ||
                              a.fromParams.contains(d);
                     }) &&
        llvm::any_of(op.getOperands(), [&](Value v) {
          Operation *d = v.getDefiningOp();
          return isParam(v) || (d && a.fromParams.contains(d));
        })) {
      a.fromParams.insert(&op);
      continue;
    }
    if (a.micro.contains(&op)) {
      bool backward = tsr::isBackward(&op);
      for (Value v : op.getOperands())
        if (Operation *d = v.getDefiningOp();
            d && a.micro.contains(d) && a.phase[d] == Phase::Backward)
          backward = true;
      a.phase[&op] = backward ? Phase::Backward : Phase::Forward;
      if (!backward)
        a.forwardOps.push_back(&op);
      continue;
    }
    if (a.constant.contains(&op) || a.accIndex.count(&op))
      continue;
    for (Value v : op.getOperands())
      if (isMicroValue(a, v))
        return op.emitOpError("reads a per-micro-batch value that is not "
                              "summed over micro-batches first");
  }

  // A value made from parameters is forward when a forward op reads it
  // (backward then reads it from the activation set), else backward.
  for (Operation *op : llvm::reverse(a.fromParams)) {
    bool forward = llvm::any_of(op->getUsers(), [&](Operation *user) {
      return a.micro.contains(user) && a.phase.lookup(user) == Phase::Forward;
    });
    a.phase[op] = forward ? Phase::Forward : Phase::Backward;
  }

  // Layers: cut after forward op i when exactly one forward value made at or
  // before i is read by a forward op after i.
  a.numUnits = training::assignLayers(a.forwardOps, a.unitOf);
  a.unitCost.assign(a.numUnits, 0);
  DenseSet<Value> counted;
  for (auto [i, op] : llvm::enumerate(a.forwardOps)) {
    if (auto cost = dyn_cast<tsr::CostOpInterface>(op))
      a.unitCost[a.unitOf[i]] += 3.0 * cost.getFlops();
    // The parameters it reads, directly or through values made from them.
    SmallVector<Value> reads(op->getOperands());
    while (!reads.empty()) {
      Value v = reads.pop_back_val();
      if (Operation *d = v.getDefiningOp()) {
        if (a.fromParams.contains(d))
          reads.append(d->operand_begin(), d->operand_end());
        continue;
      }
      if (!counted.insert(v).second)
        continue;
      if (auto role =
              tsr::getArgRole(a.func, cast<BlockArgument>(v).getArgNumber());
          role && role.getValue() == "param")
        a.unitCost[a.unitOf[i]] +=
            kOptimizerFlopsPerParam *
            cast<RankedTensorType>(v.getType()).getNumElements();
    }
  }
  return success();
}

/// True when apply op `op` (whose operands' chunks are known) sums values of
/// several pipeline chunks linearly: a single result, every operand in one
/// linear group of its sharding rule (partial sums pass through it, as
/// through tsr.add), and every operand owned by one chunk or itself such a
/// sum, at least two chunks among them (so no replicated term would be
/// counted once per stage). Only for one chunk per stage: with interleaved
/// schedules a stage's chunks would have to be summed before the pp
/// all-reduce.
bool isCrossChunkSum(const StepAnalysis &a, Operation &op) {
  if (op.getNumResults() != 1 || op.getNumOperands() < 2 ||
      a.gridShape[a.ppAxis] < 2)
    return false;
  auto rule = dyn_cast<tsr::ShardingRuleOpInterface>(op);
  if (!rule)
    return false;
  tsr::ShardingRule r = rule.getShardingRule();
  if (!llvm::any_of(r.linearGroups, [&](ArrayRef<unsigned> group) {
        return group.size() == op.getNumOperands();
      }))
    return false;
  llvm::SmallDenseSet<int64_t> chunks;
  for (Value v : op.getOperands()) {
    Operation *d = v.getDefiningOp();
    if (!d || !a.chunk.count(d))
      return false;
    if (a.crossSum.contains(d)) {
      chunks.insert(kReplicated);
      continue;
    }
    if (a.chunk.lookup(d) == kReplicated)
      return false;
    chunks.insert(a.chunk.lookup(d));
  }
  return chunks.size() >= 2;
}

/// Step 2: chunks of every micro and apply op.
LogicalResult assignChunks(StepAnalysis &a, ArrayRef<int64_t> firstUnit) {
  auto chunkOfUnit = [&](int64_t u) {
    return static_cast<int64_t>(
        std::upper_bound(firstUnit.begin(), firstUnit.end(), u) -
        firstUnit.begin() - 1);
  };
  DenseMap<int64_t, int64_t> chunkOfForwardId;
  for (auto [i, op] : llvm::enumerate(a.forwardOps)) {
    a.chunk[op] = chunkOfUnit(a.unitOf[i]);
    if (auto id = tsr::getForwardId(op))
      chunkOfForwardId[id.getInt()] = a.chunk[op];
  }
  int64_t last = static_cast<int64_t>(firstUnit.size()) - 1;
  Block &body = a.func.front();
  for (Operation &op : body) {
    if (!a.micro.contains(&op) || a.phase[&op] != Phase::Backward ||
        a.fromParams.contains(&op))
      continue;
    if (auto id = tsr::getBackwardId(&op);
        id && chunkOfForwardId.count(id.getInt())) {
      a.chunk[&op] = chunkOfForwardId[id.getInt()];
      continue;
    }
    // Ops the backward did not tag (inserted by later passes) follow their
    // gradient operands, else their forward operands.
    int64_t c = INT64_MAX, f = -1;
    for (Value v : op.getOperands())
      if (Operation *d = v.getDefiningOp();
          d && a.micro.contains(d) && !a.fromParams.contains(d)) {
        if (a.phase[d] == Phase::Backward)
          c = std::min(c, a.chunk[d]);
        else
          f = std::max(f, a.chunk[d]);
      }
    a.chunk[&op] = c != INT64_MAX ? c : (f >= 0 ? f : last);
  }
  // Values made from parameters: the chunk of their readers.
  for (Operation *op : llvm::reverse(a.fromParams)) {
    int64_t c = kReplicated;
    for (Operation *user : op->getUsers()) {
      if (!a.micro.contains(user))
        continue;
      int64_t d = a.chunk.lookup(user);
      if (c != kReplicated && d != c) {
        InFlightDiagnostic diag = op->emitOpError("is read in pipeline chunks ")
                                  << c << " and " << d;
        for (Value v : op->getOperands())
          if (auto arg = dyn_cast<BlockArgument>(v))
            if (auto name = tsr::getArgName(a.func, arg.getArgNumber()))
              diag << " (parameter '" << name.getValue() << "')";
        diag << "; a parameter shared by several chunks (tied weights) is "
                "not supported with pipeline parallelism";
        return diag;
      }
      c = d;
    }
    a.chunk[op] = c == kReplicated ? last : c;
  }
  // An untagged backward op whose results are larger than its micro-batch
  // operands (an all-gather the partitioner put in front of a gradient's
  // consumer, e.g. Megatron-SP's gather before a row-parallel matmul's
  // backward) moves to its users' chunk when they all share one earlier
  // chunk: the stage boundary then carries the smaller operand, which often
  // crosses anyway, instead of the gathered result. Users first (reverse
  // order), so that a chain of such ops moves together.
  auto bytes = [](Value v) -> int64_t {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.hasStaticShape()
               ? t.getNumElements() * t.getElementTypeBitWidth() / 8
               : 0;
  };
  for (Operation &op : llvm::reverse(body)) {
    if (!a.micro.contains(&op) || a.phase[&op] != Phase::Backward ||
        (tsr::getBackwardId(&op) &&
         chunkOfForwardId.count(tsr::getBackwardId(&op).getInt())))
      continue;
    int64_t users = INT64_MAX;
    bool oneChunk = !op.use_empty();
    for (Operation *user : op.getUsers()) {
      if (!a.micro.contains(user) ||
          (users != INT64_MAX && a.chunk[user] != users)) {
        oneChunk = false;
        break;
      }
      users = a.chunk[user];
    }
    if (!oneChunk || users >= a.chunk[&op])
      continue;
    int64_t in = 0, out = 0;
    bool movable = true;
    for (Value v : op.getOperands())
      if (Operation *d = v.getDefiningOp(); d && a.micro.contains(d)) {
        in += bytes(v);
        // A forward value may only travel to later chunks.
        movable &= a.phase[d] == Phase::Backward || a.chunk[d] <= users;
      }
    for (Value v : op.getResults())
      out += bytes(v);
    if (movable && out > in)
      a.chunk[&op] = users;
  }
  // Apply ops: the chunk whose accumulations they read.
  SmallVector<Operation *> applyOps;
  for (Operation &op : body.without_terminator()) {
    if (a.micro.contains(&op) || a.constant.contains(&op))
      continue;
    int64_t c = kReplicated;
    auto join = [&](int64_t d, Value why) -> LogicalResult {
      if (d == kReplicated || d == c)
        return success();
      if (c != kReplicated) {
        InFlightDiagnostic diag = op.emitOpError("combines values of pipeline "
                                                 "chunks ")
                                  << c << " and " << d;
        if (auto arg = dyn_cast<BlockArgument>(why))
          if (auto name = tsr::getArgName(a.func, arg.getArgNumber()))
            diag << " (parameter '" << name.getValue() << "')";
        diag << "; a parameter used by several chunks (tied weights) is not "
                "supported with pipeline parallelism";
        return diag;
      }
      c = d;
      return success();
    };
    if (auto ar = dyn_cast<shard::AllReduceOp>(op);
        ar && a.accIndex.count(ar)) {
      a.chunk[&op] = a.chunk[ar.getInput().getDefiningOp()];
      continue;
    }
    if (isCrossChunkSum(a, op)) {
      a.crossSum.insert(&op);
      a.chunk[&op] = kReplicated;
      applyOps.push_back(&op);
      continue;
    }
    for (Value v : op.getOperands())
      if (Operation *d = v.getDefiningOp(); d && a.chunk.count(d))
        if (failed(join(a.chunk[d], v)))
          return failure();
    a.chunk[&op] = c;
    applyOps.push_back(&op);
  }
  // An apply op that reads no accumulation but feeds only one chunk's apply
  // ops (e.g. ZeRO's slice of a parameter before its update) belongs to
  // that chunk: a stage must not read a parameter it does not update.
  for (Operation *op : llvm::reverse(applyOps)) {
    if (a.chunk[op] != kReplicated || a.crossSum.contains(op))
      continue;
    int64_t c = kReplicated;
    bool one = true;
    for (Operation *user : op->getUsers()) {
      auto it = a.chunk.find(user);
      if (it == a.chunk.end() || it->second == kReplicated ||
          (c != kReplicated && it->second != c)) {
        one = false;
        break;
      }
      c = it->second;
    }
    if (one && c != kReplicated)
      a.chunk[op] = c;
  }
  // A parameter's micro-batch uses must all be in one chunk.
  for (BlockArgument arg : a.func.getArguments()) {
    int64_t c = kReplicated;
    for (Operation *user : arg.getUsers()) {
      if (!a.micro.contains(user))
        continue;
      if (c != kReplicated && a.chunk[user] != c) {
        auto name = tsr::getArgName(a.func, arg.getArgNumber());
        auto role = tsr::getArgRole(a.func, arg.getArgNumber());
        // Read-only in every chunk: the data, frozen weights, and optimizer
        // state that micro-batch ops only read (dropout's "rng.step", which
        // the replicated apply ops update identically on every stage).
        if (role &&
            (role.getValue() == "tokens" || role.getValue() == "labels" ||
             role.getValue() == "frozen" || role.getValue() == "opt_state"))
          continue;
        return user->emitOpError("uses '")
               << (name ? name.getValue() : StringRef("?"))
               << "' in pipeline chunk " << a.chunk[user] << " but chunk " << c
               << " uses it too; a parameter shared by several chunks (tied "
                  "weights) is not supported with pipeline parallelism";
      }
      c = a.chunk[user];
    }
  }
  return success();
}

/// Step 3: builds the functions of one pipeline.
struct Splitter {
  StepAnalysis &a;
  OpBuilder &b;
  int64_t numChunks;
  /// Channel of each (value, destination chunk) transfer.
  std::map<std::pair<void *, int64_t>, int64_t> channels;
  /// Per chunk: its activation set, in order.
  std::vector<llvm::SetVector<Value>> saved;
  /// Index of `v` in chunk `c`'s activation set.
  int64_t savedIndex(int64_t c, Value v) {
    return llvm::find(saved[c], v) - saved[c].begin();
  }

  /// Records every transfer; errors when a value would travel against its
  /// phase's direction.
  LogicalResult planTransfers() {
    saved.resize(numChunks);
    int64_t next = 0;
    for (Operation &op : a.func.front()) {
      if (!a.micro.contains(&op))
        continue;
      int64_t to = a.chunk[&op];
      for (Value v : op.getOperands()) {
        Operation *d = v.getDefiningOp();
        if (!d || !a.micro.contains(d))
          continue;
        int64_t from = a.chunk[d];
        bool forward = a.phase[d] == Phase::Forward;
        if (forward && a.phase[&op] == Phase::Backward)
          saved[to].insert(v);
        if (from == to)
          continue;
        if (forward ? from > to : from < to)
          return op.emitOpError("in pipeline chunk ")
                 << to << " reads a " << (forward ? "forward" : "backward")
                 << " value of chunk " << from
                 << ", which runs later in that phase";
        auto key = std::make_pair(v.getAsOpaquePointer(), to);
        if (!channels.count(key))
          channels[key] = next++;
      }
    }
    return success();
  }

  /// Creates an empty function `name` at the end of the module.
  struct Fn {
    Block *block;
    IRMapping map;
    SmallVector<DictionaryAttr> argAttrs;
    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resultAttrs;
  };

  NamedAttribute i64Attr(StringRef name, int64_t v) {
    return b.getNamedAttr(name, b.getI64IntegerAttr(v));
  }

  Value addArg(Fn &fn, Type type, NamedAttribute attr) {
    Value arg = fn.block->addArgument(type, a.func.getLoc());
    fn.argAttrs.push_back(b.getDictionaryAttr({attr}));
    return arg;
  }

  /// The value `v` of @train_step inside `fn` (chunk `c`, `phase`, or the
  /// apply function when `phase` is null): a function argument for step
  /// arguments, activation sets and accumulations, a rematerialised constant,
  /// or a recv.
  Value lookup(Fn &fn, Value v, int64_t c, std::optional<Phase> phase) {
    if (Value m = fn.map.lookupOrNull(v))
      return m;
    Value result;
    OpBuilder::InsertionGuard guard(b);
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      b.setInsertionPointToStart(fn.block);
      result = addArg(fn, v.getType(), i64Attr("tsrt.arg", arg.getArgNumber()));
    } else if (Operation *d = v.getDefiningOp(); a.constant.contains(d)) {
      for (Value operand : d->getOperands())
        (void)lookup(fn, operand, c, phase);
      Operation *clone = b.clone(*d, fn.map);
      clone->removeAttr(tsr::kForwardAttrName);
      clone->removeAttr(tsr::kBackwardAttrName);
      result = clone->getResult(cast<OpResult>(v).getResultNumber());
    } else if (a.accIndex.count(d)) {
      // Only reached from apply functions.
      // A low-precision sum arrives as its f32 accumulator and is narrowed
      // back to its own type before the rest of the reduction, so the
      // collectives over the other axes (dp) and the ops that read the sum
      // see the types they see without pipelining.
      auto ar = cast<shard::AllReduceOp>(d);
      Type type = ar.getInput().getType();
      Value acc =
          addArg(fn, accumulatorType(type), i64Attr("tsrt.acc", a.accIndex[d]));
      SmallVector<int16_t> axes;
      for (int16_t axis : ar.getGridAxes())
        if (axis != a.mbAxis && a.gridShape[axis] > 1)
          axes.push_back(axis);
      result = acc;
      if (acc.getType() != type)
        result = tsr::ConvertOp::create(b, ar.getLoc(), type, acc);
      if (!axes.empty())
        result = shard::AllReduceOp::create(
                     b, ar.getLoc(), ar.getResult().getType(), ar.getGrid(),
                     axes, result, ar.getReduction())
                     .getResult();
    } else if (a.crossSum.contains(d)) {
      // Only reached from apply functions, by an op that is not itself a
      // cross-chunk sum: the whole sum, one scalar all-reduce over pp.
      b.setInsertionPointToEnd(fn.block);
      shard::AllReduceOp acc = a.accs.front();
      result = shard::AllReduceOp::create(
                   b, d->getLoc(), v.getType(), acc.getGrid(),
                   ArrayRef<int16_t>{a.ppAxis}, partials.lookup(v),
                   shard::ReductionKind::Sum)
                   .getResult();
    } else if (phase == Phase::Backward && a.phase[d] == Phase::Forward) {
      result = addArg(fn, v.getType(), i64Attr("tsrt.saved", savedIndex(c, v)));
    } else {
      int64_t from = a.chunk[d];
      int64_t channel = channels.at({v.getAsOpaquePointer(), c});
      result = tsrt::RecvOp::create(b, d->getLoc(), v.getType(), from, channel)
                   .getResult();
    }
    fn.map.map(v, result);
    return result;
  }

  func::FuncOp finish(Fn &fn, StringRef name) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(fn.block);
    func::ReturnOp::create(b, a.func.getLoc(), fn.results);
    b.setInsertionPointToEnd(a.func->getParentOfType<ModuleOp>().getBody());
    SmallVector<Type> results;
    for (Value v : fn.results)
      results.push_back(v.getType());
    auto f = func::FuncOp::create(
        b, a.func.getLoc(), name,
        b.getFunctionType(fn.block->getArgumentTypes(), results));
    f.getBody().push_back(fn.block);
    for (auto [i, attrs] : llvm::enumerate(fn.argAttrs))
      f.setArgAttrs(i, attrs);
    for (auto [i, attrs] : llvm::enumerate(fn.resultAttrs))
      f.setResultAttrs(i, attrs);
    return f;
  }

  func::FuncOp buildMicro(int64_t c, Phase phase) {
    Fn fn{new Block(), {}, {}, {}, {}};
    b.setInsertionPointToEnd(fn.block);
    for (Operation &op : a.func.front()) {
      if (!a.micro.contains(&op) || a.chunk[&op] != c || a.phase[&op] != phase)
        continue;
      for (Value v : op.getOperands())
        (void)lookup(fn, v, c, phase);
      b.setInsertionPointToEnd(fn.block);
      Operation *clone = b.clone(op, fn.map);
      clone->removeAttr(tsr::kForwardAttrName);
      clone->removeAttr(tsr::kBackwardAttrName);
      for (Value r : op.getResults())
        for (int64_t to = 0; to < numChunks; ++to)
          if (auto it = channels.find({r.getAsOpaquePointer(), to});
              it != channels.end())
            tsrt::SendOp::create(b, op.getLoc(), fn.map.lookup(r), to,
                                 it->second);
      // Each contribution to a sum over micro-batches is returned in its
      // accumulator type (a bf16/f16 gradient widened to f32 here, once per
      // micro-batch, so the sum over micro-batches rounds only once).
      for (Value r : op.getResults())
        for (Operation *user : r.getUsers())
          if (a.accIndex.count(user)) {
            Value v = fn.map.lookup(r);
            if (Type type = accumulatorType(v.getType()); type != v.getType())
              v = tsr::ConvertOp::create(b, op.getLoc(), type, v);
            fn.results.push_back(v);
            fn.resultAttrs.push_back(
                b.getDictionaryAttr({i64Attr("tsrt.acc", a.accIndex[user])}));
          }
    }
    if (phase == Phase::Forward) {
      // The activation set goes first.
      SmallVector<Value> results;
      SmallVector<DictionaryAttr> attrs;
      for (auto [k, v] : llvm::enumerate(saved[c])) {
        b.setInsertionPointToEnd(fn.block);
        results.push_back(lookup(fn, v, c, phase));
        attrs.push_back(b.getDictionaryAttr({i64Attr("tsrt.saved", k)}));
      }
      results.append(fn.results);
      attrs.append(fn.resultAttrs);
      fn.results = results;
      fn.resultAttrs = attrs;
    }
    return finish(fn, (phase == Phase::Forward ? "forward_" : "backward_") +
                          std::to_string(c));
  }

  /// Chunk `c`'s partial of the cross-chunk sum `op`: `op` on chunk c's
  /// terms and the partials of the sums it reads, zeros for the terms of
  /// other chunks.
  DenseMap<Value, Value> partials = DenseMap<Value, Value>();
  void buildPartial(Fn &fn, Operation &op, int64_t c) {
    IRMapping map;
    for (Value v : op.getOperands()) {
      Operation *d = v.getDefiningOp();
      Value local;
      if (a.crossSum.contains(d)) {
        local = partials.lookup(v);
      } else if (a.chunk[d] == c) {
        local = lookup(fn, v, c, std::nullopt);
      } else {
        b.setInsertionPointToEnd(fn.block);
        auto type = cast<ShapedType>(v.getType());
        local = tsr::ConstantOp::create(
            b, op.getLoc(), type,
            cast<ElementsAttr>(DenseElementsAttr::get(
                type, b.getZeroAttr(type.getElementType()))));
      }
      map.map(v, local);
    }
    b.setInsertionPointToEnd(fn.block);
    Operation *clone = b.clone(op, map);
    partials[op.getResult(0)] = clone->getResult(0);
  }

  func::FuncOp buildApply(int64_t c, func::ReturnOp ret) {
    partials.clear();
    Fn fn{new Block(), {}, {}, {}, {}};
    b.setInsertionPointToEnd(fn.block);
    for (Operation &op : a.func.front().without_terminator()) {
      if (a.micro.contains(&op) || a.constant.contains(&op) ||
          a.accIndex.count(&op))
        continue;
      if (a.chunk[&op] != c && a.chunk[&op] != kReplicated)
        continue;
      if (a.crossSum.contains(&op)) {
        buildPartial(fn, op, c);
        continue;
      }
      for (Value v : op.getOperands())
        (void)lookup(fn, v, c, std::nullopt);
      b.setInsertionPointToEnd(fn.block);
      Operation *clone = b.clone(op, fn.map);
      clone->removeAttr(tsr::kForwardAttrName);
      clone->removeAttr(tsr::kBackwardAttrName);
    }
    for (auto [r, v] : llvm::enumerate(ret.getOperands())) {
      Operation *d = v.getDefiningOp();
      int64_t owner = d && a.chunk.count(d) ? a.chunk[d] : kReplicated;
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        // Returned unchanged: by the chunk that uses it, else by chunk 0.
        owner = 0;
        for (Operation *user : arg.getUsers())
          if (a.chunk.count(user) && a.chunk[user] != kReplicated)
            owner = a.chunk[user];
      }
      if (owner != c && owner != kReplicated)
        continue;
      b.setInsertionPointToEnd(fn.block);
      fn.results.push_back(lookup(fn, v, c, std::nullopt));
      fn.resultAttrs.push_back(
          b.getDictionaryAttr({i64Attr("tsrt.result", r)}));
    }
    return finish(fn, "apply_" + std::to_string(c));
  }
};

struct PipelineSplitPass
    : public pipeline::impl::PipelineSplitBase<PipelineSplitPass> {
  using PipelineSplitBase::PipelineSplitBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &msg) {
      module.emitError(msg);
      signalPassFailure();
    };
    auto kind = sched::parseKind(schedule);
    if (!kind)
      return fail("unknown schedule '" + schedule +
                  "' (expected gpipe, 1f1b or interleaved)");
    auto grid = module.lookupSymbol<shard::GridOp>("grid");
    auto names = tsr::getGridAxes(module);
    int16_t ppAxis = -1, mbAxis = -1;
    if (names)
      for (auto [i, n] : llvm::enumerate(names)) {
        if (cast<StringAttr>(n).getValue() == "pp")
          ppAxis = i;
        if (cast<StringAttr>(n).getValue() == "mb")
          mbAxis = i;
      }
    if (!grid || ppAxis < 0 || mbAxis < 0)
      return fail("tsr-pipeline-split needs a grid with 'pp' and 'mb' axes "
                  "(tsr-sharding-annotate with pp or micro-batches)");
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal())
      return fail("no @train_step with a body to split");

    StepAnalysis a;
    a.func = func;
    a.mbAxis = mbAxis;
    a.ppAxis = ppAxis;
    a.gridShape.assign(grid.getShape().begin(), grid.getShape().end());
    sched::Shape shape{a.gridShape[ppAxis], virtualStages, a.gridShape[mbAxis]};
    if (llvm::Error err = sched::checkShape(*kind, shape))
      return fail(llvm::toString(std::move(err)));
    int64_t numChunks = shape.numChunks();
    if (failed(classify(a)))
      return signalPassFailure();
    if (a.numUnits < numChunks)
      return fail("--pp " + Twine(shape.stages) + " with " +
                  Twine(shape.virtualStages) + " virtual stage(s) needs " +
                  Twine(numChunks) +
                  " pipeline chunks, but the model has "
                  "only " +
                  Twine(a.numUnits) +
                  " layers (points where a single activation crosses)");
    std::vector<int64_t> first;
    if (!stages.empty()) {
      first.assign(stages.begin(), stages.end());
      if (llvm::Error err =
              pipeline::checkBoundaries(first, numChunks, a.numUnits))
        return fail(llvm::toString(std::move(err)));
    } else {
      first = pipeline::balanceChunks(a.unitCost, numChunks);
    }
    if (failed(assignChunks(a, first)))
      return signalPassFailure();

    OpBuilder b(module.getContext());
    Splitter s{a, b, numChunks, {}, {}};
    if (failed(s.planTransfers()))
      return signalPassFailure();
    auto ret = cast<func::ReturnOp>(func.front().getTerminator());
    SmallVector<Attribute> fwd, bwd, apply;
    for (int64_t c = 0; c < numChunks; ++c) {
      fwd.push_back(SymbolRefAttr::get(s.buildMicro(c, Phase::Forward)));
      bwd.push_back(SymbolRefAttr::get(s.buildMicro(c, Phase::Backward)));
      apply.push_back(SymbolRefAttr::get(s.buildApply(c, ret)));
    }

    // Per-chunk figures for --explain (one micro-batch, local shapes).
    SmallVector<int64_t> flops(numChunks, 0), paramBytes(numChunks, 0);
    for (Operation &op : func.front())
      if (a.micro.contains(&op))
        if (auto cost = dyn_cast<tsr::CostOpInterface>(op))
          flops[a.chunk[&op]] += cost.getFlops();
    for (BlockArgument arg : func.getArguments()) {
      auto role = tsr::getArgRole(func, arg.getArgNumber());
      if (!role || role.getValue() != "param")
        continue;
      for (Operation *user : arg.getUsers())
        if (a.micro.contains(user)) {
          auto type = cast<RankedTensorType>(arg.getType());
          paramBytes[a.chunk[user]] +=
              type.getNumElements() * type.getElementTypeBitWidth() / 8;
          break;
        }
    }

    auto actions = sched::build(*kind, shape);
    if (!actions)
      return fail(llvm::toString(actions.takeError()));
    SmallVector<Attribute> actionText;
    for (const sched::StageActions &list : *actions)
      actionText.push_back(b.getStringAttr(sched::format(list)));
    b.setInsertionPointToEnd(module.getBody());
    NamedAttrList attrs;
    attrs.append("kind", b.getStringAttr(sched::kindName(*kind)));
    attrs.append("stages", b.getI64IntegerAttr(shape.stages));
    attrs.append("virtual_stages", b.getI64IntegerAttr(shape.virtualStages));
    attrs.append("micro_batches", b.getI64IntegerAttr(shape.microBatches));
    attrs.append("forward", b.getArrayAttr(fwd));
    attrs.append("backward", b.getArrayAttr(bwd));
    attrs.append("apply", b.getArrayAttr(apply));
    attrs.append("actions", b.getArrayAttr(actionText));
    attrs.append("flops", b.getDenseI64ArrayAttr(flops));
    attrs.append("param_bytes", b.getDenseI64ArrayAttr(paramBytes));
    attrs.append("first_layer", b.getDenseI64ArrayAttr(first));
    attrs.append("num_layers", b.getI64IntegerAttr(a.numUnits));
    OperationState state(func.getLoc(),
                         tsrt::PipelineScheduleOp::getOperationName());
    state.addAttributes(attrs);
    b.create(state);

    // @train_step keeps only its signature (the manifest's source).
    func.eraseBody();
    func.setPrivate();
  }
};

} // namespace

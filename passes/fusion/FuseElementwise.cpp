//===- FuseElementwise.cpp - tsr-fuse-elementwise -------------------------===//
//
// See Passes.td (FuseElementwise). Two phases per block:
//   1. Grouping, in block order: an op the fused kernel can run
//      (tsr::FusedElementwiseOp::opcodeOf) joins the groups of its operands'
//      producers that have its shape, all of them if the union stays
//      placeable, else the first one that does, else starts a group.
//   2. Rewriting, group by group on the current IR: the group's
//      tsr.broadcast operands whose every user is in the group are taken in
//      (the kernel broadcasts); a group that saves at least one kernel and is
//      still placeable becomes one tsr.fused_elementwise.
// "Placeable": the fused op can sit somewhere after every value it reads
// from outside the group and before every op outside the group that reads
// one of its values, i.e. the latest such producer is before the earliest
// such reader in the block. Checking it on the current IR before each
// rewrite is what keeps two groups from depending on each other.
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

using Members = llvm::SmallSetVector<Operation *, 8>;

/// Where a group would read from and be read by, in `block`.
struct Boundary {
  /// The latest op of the block defining a value the group reads from
  /// outside (null: only block arguments).
  Operation *lastProducer = nullptr;
  /// The earliest op of the block outside the group reading a group value
  /// (null: none).
  Operation *firstReader = nullptr;
  llvm::SetVector<Value> inputs;
  llvm::SetVector<Value> outputs;
};

Operation *inBlock(Block &block, Operation *op) {
  return op ? block.findAncestorOpInBlock(*op) : nullptr;
}

Boundary boundaryOf(Block &block, const Members &members) {
  Boundary b;
  for (Operation *op : members) {
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (def && members.contains(def))
        continue;
      b.inputs.insert(v);
      Operation *at = inBlock(block, def);
      if (at && (!b.lastProducer || b.lastProducer->isBeforeInBlock(at)))
        b.lastProducer = at;
    }
    for (Operation *user : op->getResult(0).getUsers()) {
      Operation *at = inBlock(block, user);
      if (at && members.contains(at))
        continue;
      b.outputs.insert(op->getResult(0));
      if (at && (!b.firstReader || at->isBeforeInBlock(b.firstReader)))
        b.firstReader = at;
    }
  }
  return b;
}

bool placeable(const Boundary &b) {
  return !b.firstReader || !b.lastProducer ||
         b.lastProducer->isBeforeInBlock(b.firstReader);
}

bool withinLimits(const Members &members, const Boundary &b) {
  return members.size() <= size_t(fusion::kMaxFusedInstrs) &&
         b.inputs.size() <= size_t(fusion::kMaxFusedInputs) &&
         b.outputs.size() <= size_t(fusion::kMaxFusedOutputs);
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// A tsr.broadcast feeding the group an operand that it can take in: its
/// every user is a member, and its input is f32 or i1.
tsr::BroadcastOp absorbable(Value v, const Members &members) {
  auto bc = v.getDefiningOp<tsr::BroadcastOp>();
  if (!bc || tsr::getTraceId(bc))
    return nullptr;
  Type e = bc.getInput().getType().getElementType();
  if (!e.isF32() && !e.isInteger(1))
    return nullptr;
  for (Operation *user : bc->getUsers())
    if (!members.contains(user))
      return nullptr;
  return bc;
}

struct FuseElementwisePass
    : fusion::impl::FuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {
    for (Region &region : getOperation()->getRegions())
      for (Block &block : region)
        fuseBlock(block);
  }

  void fuseBlock(Block &block) {
    // Phase 1: grouping.
    SmallVector<Members> groups;
    DenseMap<Operation *, unsigned> groupOf;
    for (Operation &op : block) {
      if (!tsr::FusedElementwiseOp::opcodeOf(&op) || tsr::getTraceId(&op))
        continue;
      ArrayRef<int64_t> shape = shapeOf(op.getResult(0));
      llvm::SmallSetVector<unsigned, 4> candidates;
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        auto it = def ? groupOf.find(def) : groupOf.end();
        if (it != groupOf.end() && shapeOf(def->getResult(0)) == shape)
          candidates.insert(it->second);
      }
      auto tryJoin = [&](ArrayRef<unsigned> gs) -> bool {
        Members merged;
        for (unsigned g : gs)
          merged.insert(groups[g].begin(), groups[g].end());
        merged.insert(&op);
        Boundary b = boundaryOf(block, merged);
        if (!placeable(b) || !withinLimits(merged, b))
          return false;
        unsigned into = gs.front();
        for (unsigned g : gs.drop_front()) {
          for (Operation *m : groups[g])
            groupOf[m] = into;
          groups[g].clear();
        }
        groups[into] = std::move(merged);
        groupOf[&op] = into;
        return true;
      };
      if (!candidates.empty() && tryJoin(candidates.getArrayRef()))
        continue;
      bool joined = false;
      if (candidates.size() > 1)
        for (unsigned g : candidates)
          if ((joined = tryJoin({g})))
            break;
      if (joined)
        continue;
      groupOf[&op] = groups.size();
      groups.push_back(Members());
      groups.back().insert(&op);
    }

    // Phase 2: rewriting, on the IR as the earlier rewrites left it.
    for (Members &members : groups)
      if (!members.empty())
        rewrite(block, members);
  }

  void rewrite(Block &block, Members &members) {
    Boundary b = boundaryOf(block, members);
    if (b.outputs.empty())
      return; // dead: nothing reads the group
    // Broadcast operands the kernel can take in.
    SmallVector<tsr::BroadcastOp> absorbed;
    for (Value v : b.inputs)
      if (tsr::BroadcastOp bc = absorbable(v, members))
        absorbed.push_back(bc);
    if (members.size() + absorbed.size() < 2)
      return; // a single op: nothing to fuse
    if (!placeable(b) || !withinLimits(members, b))
      return;

    // Inputs in first-use order, broadcasts replaced by what they read.
    llvm::SetVector<Value> inputs;
    DenseMap<Value, int64_t> slot;
    auto inputSlot = [&](Value v) -> int64_t {
      if (auto bc = v.getDefiningOp<tsr::BroadcastOp>();
          bc && llvm::is_contained(absorbed, bc))
        v = bc.getInput();
      inputs.insert(v);
      return llvm::find(inputs, v) - inputs.begin();
    };
    // The members in block order (a topological order).
    SmallVector<Operation *> ordered(members.begin(), members.end());
    llvm::sort(ordered, [](Operation *x, Operation *y) {
      return x->isBeforeInBlock(y);
    });
    // First pass: operand slots; instruction slots follow all inputs.
    SmallVector<SmallVector<int64_t, 3>> argSlots;
    for (Operation *op : ordered) {
      SmallVector<int64_t, 3> a;
      for (Value v : op->getOperands())
        a.push_back(members.contains(v.getDefiningOp()) ? -1 : inputSlot(v));
      argSlots.push_back(a);
    }
    int64_t numInputs = inputs.size();
    for (auto [k, op] : llvm::enumerate(ordered))
      slot[op->getResult(0)] = numInputs + k;
    SmallVector<StringRef> ops;
    SmallVector<int64_t> args, outputs;
    for (auto [k, op] : llvm::enumerate(ordered)) {
      fusion::ElemOp code = *tsr::FusedElementwiseOp::opcodeOf(op);
      ops.push_back(StringRef(fusion::elemOpInfo(code).name.data(),
                              fusion::elemOpInfo(code).name.size()));
      for (auto [j, v] : llvm::enumerate(op->getOperands()))
        args.push_back(argSlots[k][j] >= 0 ? argSlots[k][j] : slot.lookup(v));
    }
    SmallVector<Type> resultTypes;
    for (Value v : b.outputs) {
      outputs.push_back(slot.lookup(v));
      resultTypes.push_back(v.getType());
    }

    // Placed just before the first outside reader (after the last outside
    // producer: placeable).
    OpBuilder builder(b.firstReader ? b.firstReader : block.getTerminator());
    auto fused = tsr::FusedElementwiseOp::create(
        builder, ordered.back()->getLoc(), resultTypes, inputs.getArrayRef(),
        builder.getStrArrayAttr(ops), builder.getDenseI64ArrayAttr(args),
        builder.getDenseI64ArrayAttr(outputs));
    for (auto [v, r] : llvm::zip(b.outputs, fused.getResults()))
      Value(v).replaceAllUsesWith(r);
    for (Operation *op : llvm::reverse(ordered))
      op->erase();
    for (tsr::BroadcastOp bc : absorbed)
      bc->erase();
  }
};

} // namespace

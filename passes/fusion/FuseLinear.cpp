//===- FuseLinear.cpp - tsr-fuse-linear ----------------------------------===//
//
// See Passes.td (FuseLinear).
//
//===----------------------------------------------------------------------===//

#include "passes/fusion/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"

namespace tessera::fusion {
#define GEN_PASS_DEF_FUSELINEAR
#include "passes/fusion/Passes.h.inc"
} // namespace tessera::fusion

using namespace mlir;
using namespace tessera;

namespace {

bool isF32(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() && t.getElementType().isF32();
}

/// The [N] bias that `v` broadcasts along the last dimension of a tensor
/// whose last dimension is `n`: `v` is a tsr.broadcast of a value of shape
/// [N] or [1, ..., 1, N] (itself possibly a tsr.reshape of an [N] tensor).
/// Returns the [N] value if there is one, else the [1, ..., 1, N] value
/// (the caller reshapes it), else null.
Value broadcastBias(Value v, int64_t n) {
  auto bc = v.getDefiningOp<tsr::BroadcastOp>();
  if (!bc)
    return {};
  Value in = bc.getInput();
  auto type = cast<RankedTensorType>(in.getType());
  if (type.getRank() < 1 || type.getDimSize(type.getRank() - 1) != n)
    return {};
  for (int64_t d = 0; d + 1 < type.getRank(); ++d)
    if (type.getDimSize(d) != 1)
      return {};
  if (type.getRank() == 1)
    return in;
  if (auto reshape = in.getDefiningOp<tsr::ReshapeOp>())
    if (cast<RankedTensorType>(reshape.getInput().getType()).getRank() == 1)
      return reshape.getInput();
  return in;
}

/// The activation name of tsr.linear for an activation op, or "".
StringRef activationOf(Operation *op) {
  if (auto gelu = dyn_cast<tsr::GeluOp>(op))
    return gelu.getApproximate() == "tanh" ? "gelu_tanh" : "gelu";
  if (isa<tsr::ReluOp>(op))
    return "relu";
  if (isa<tsr::SiluOp>(op))
    return "silu";
  return "";
}

/// The activation name of tsr.bias_activation_grad for an activation
/// gradient op (x, dy) -> dx, or "".
StringRef activationGradOf(Operation *op) {
  if (auto g = dyn_cast<tsr::GeluGradOp>(op))
    return g.getApproximate() == "tanh" ? "gelu_tanh" : "gelu";
  if (isa<tsr::ReluGradOp>(op))
    return "relu";
  if (isa<tsr::SiluGradOp>(op))
    return "silu";
  return "";
}

/// Erases `v`'s defining op and then its operands' defining ops while they
/// have no uses (the broadcast and reshape that fed a fused bias).
void eraseDeadChain(Value v) {
  SmallVector<Operation *> work;
  if (Operation *op = v.getDefiningOp())
    work.push_back(op);
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!op->use_empty() || !isa<tsr::BroadcastOp, tsr::ReshapeOp>(op))
      continue;
    Value in = op->getOperand(0);
    op->erase();
    if (Operation *def = in.getDefiningOp())
      work.push_back(def);
  }
}

/// True when tessera-check traces `op`'s results (`tsr.trace`): its values
/// must stay observable, so it is not fused away.
bool isTraced(Operation *op) { return op && op->hasAttr(tsr::kTraceAttrName); }

/// Keeps `from`'s forward / backward id (`tsr.fwd`, `tsr.bwd`) on the
/// fused op; a `tsr.trace` id is not carried over (the fused op's results
/// are not the traced op's).
void copyPhaseIds(Operation *from, Operation *to) {
  for (StringRef name : {tsr::kForwardAttrName, tsr::kBackwardAttrName})
    if (Attribute attr = from->getAttr(name))
      to->setAttr(name, attr);
}

/// add(matmul, broadcast(bias)) [-> activation] => tsr.linear.
bool fuseForward(tsr::AddOp add) {
  if (!isF32(add.getResult()))
    return false;
  auto type = cast<RankedTensorType>(add.getResult().getType());
  if (type.getRank() < 2)
    return false;
  int64_t n = type.getDimSize(type.getRank() - 1);
  tsr::MatmulOp mm;
  Value biasSrc, broadcast;
  for (int i = 0; i < 2 && !mm; ++i) {
    auto cand = add->getOperand(i).getDefiningOp<tsr::MatmulOp>();
    Value other = add->getOperand(1 - i);
    if (!cand || !cand->hasOneUse())
      continue;
    if (Value b = broadcastBias(other, n)) {
      mm = cand;
      biasSrc = b;
      broadcast = other;
    }
  }
  if (!mm || isTraced(mm) || isTraced(add))
    return false;

  // An activation reading the sum, directly or through one tsr.reshape
  // that keeps the last dimension (HF GPT-2 computes its Conv1D on [B·S,
  // N] rows and applies GELU on [B, S, N]): fuse the first one found. The
  // sum's other readers (the backward's activation gradient) take the
  // preactivation result.
  Operation *act = nullptr;
  tsr::ReshapeOp view;
  auto keepsLastDim = [&](tsr::ReshapeOp r) {
    auto t = cast<RankedTensorType>(r.getResult().getType());
    return t.getRank() >= 1 && t.getDimSize(t.getRank() - 1) == n;
  };
  for (Operation *user : add->getUsers()) {
    if (!activationOf(user).empty() && !isTraced(user)) {
      act = user;
      break;
    }
    auto r = dyn_cast<tsr::ReshapeOp>(user);
    if (!r || !keepsLastDim(r))
      continue;
    for (Operation *u : r->getUsers())
      if (!activationOf(u).empty() && !isTraced(u) && !isTraced(r)) {
        act = u;
        view = r;
        break;
      }
    if (act)
      break;
  }
  auto onlyUser = [](Value v, Operation *op) {
    return llvm::all_of(v.getUsers(), [&](Operation *u) { return u == op; });
  };
  bool needPre = act && (view ? !onlyUser(add.getResult(), view) ||
                                    !onlyUser(view.getResult(), act)
                              : !onlyUser(add.getResult(), act));

  OpBuilder b(add);
  Value bias = biasSrc;
  auto biasType = RankedTensorType::get({n}, type.getElementType());
  if (bias.getType() != biasType)
    bias = tsr::ReshapeOp::create(b, add.getLoc(), biasType, bias);
  SmallVector<Type> results = {type};
  if (needPre)
    results.push_back(type);
  auto linear = tsr::LinearOp::create(
      b, act ? act->getLoc() : add.getLoc(), results, mm.getLhs(), mm.getRhs(),
      bias, mm.getTransposeLhsAttr(), mm.getTransposeRhsAttr(),
      b.getStringAttr(act ? activationOf(act) : "none"));
  copyPhaseIds(mm, linear);
  if (!act) {
    add.getResult().replaceAllUsesWith(linear.getResult());
  } else {
    Value y = linear.getResult();
    if (view) {
      // The activation's shape: a view of the fused result.
      y = tsr::ReshapeOp::create(b, view.getLoc(), act->getResult(0).getType(),
                                 y);
    }
    act->getResult(0).replaceAllUsesWith(y);
    act->erase();
    if (needPre)
      add.getResult().replaceAllUsesWith(linear.getPreactivation());
    if (view && view->use_empty())
      view->erase();
  }
  add.erase();
  mm.erase();
  eraseDeadChain(broadcast);
  return true;
}

/// reduce_sum(activation_grad(x, dy), every axis but the last) =>
/// tsr.bias_activation_grad; the reduce_sum may read the gradient through
/// one tsr.reshape that keeps the last dimension (HF GPT-2's [B·S, N]
/// rows), which then reads the fused input gradient.
bool fuseBackward(tsr::ReduceSumOp sum) {
  if (!isF32(sum.getInput()))
    return false;
  auto type = cast<RankedTensorType>(sum.getInput().getType());
  int64_t rank = type.getRank();
  if (rank < 2 || sum.getKeepdim() ||
      sum.getAxes() !=
          ArrayRef(llvm::to_vector(llvm::seq<int64_t>(0, rank - 1))))
    return false;
  Value gradValue = sum.getInput();
  if (auto r = gradValue.getDefiningOp<tsr::ReshapeOp>()) {
    auto in = cast<RankedTensorType>(r.getInput().getType());
    if (in.getRank() < 1 ||
        in.getDimSize(in.getRank() - 1) != type.getDimSize(rank - 1))
      return false;
    gradValue = r.getInput();
  }
  Operation *grad = gradValue.getDefiningOp();
  if (!grad || activationGradOf(grad).empty() || isTraced(grad) ||
      isTraced(sum))
    return false;
  OpBuilder b(grad);
  auto fused = tsr::BiasActivationGradOp::create(
      b, grad->getLoc(), gradValue.getType(), sum.getResult().getType(),
      grad->getOperand(0), grad->getOperand(1),
      b.getStringAttr(activationGradOf(grad)));
  copyPhaseIds(grad, fused);
  grad->getResult(0).replaceAllUsesWith(fused.getInputGrad());
  sum.getResult().replaceAllUsesWith(fused.getBiasGrad());
  Value summed = sum.getInput();
  sum.erase();
  if (auto r = summed.getDefiningOp<tsr::ReshapeOp>(); r && r->use_empty())
    r->erase();
  grad->erase();
  return true;
}

struct FuseLinearPass : fusion::impl::FuseLinearBase<FuseLinearPass> {
  void runOnOperation() override {
    SmallVector<tsr::AddOp> adds;
    SmallVector<tsr::ReduceSumOp> sums;
    getOperation()->walk([&](Operation *op) {
      if (auto add = dyn_cast<tsr::AddOp>(op))
        adds.push_back(add);
      else if (auto sum = dyn_cast<tsr::ReduceSumOp>(op))
        sums.push_back(sum);
    });
    for (tsr::AddOp add : adds)
      fuseForward(add);
    for (tsr::ReduceSumOp sum : sums)
      fuseBackward(sum);
  }
};

} // namespace

//===- MixedPrecision.cpp - bf16 compute with fp32 master weights ---------===//
//
// See Passes.td (tsr-mixed-precision). The pass rewrites @train_step in
// place, in program order:
//   1. every f32 step argument read by the forward/backward (trainable and
//      frozen params, float inputs) gets one `tsr.convert` to the low type
//      in front of its first such reader; the optimizer updates keep reading
//      the f32 argument (the master weight);
//   2. an op with a low-precision operand is retyped: its other f32 operands
//      are converted (constants once, right after their definition), its f32
//      results become low-precision, except the values the precision policy
//      keeps in f32 (below);
//   3. each optimizer update's low-precision gradient is converted back to
//      f32 right before the update;
//   4. a low-precision value returned by the step is converted back to f32.
// Ops whose operands are all f32 stay f32 (the loss scaling chain, the step
// counter), so the f32 island around the loss needs no special casing.
//
//===----------------------------------------------------------------------===//

#include "passes/training/Passes.h"

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

namespace tessera::training {
#define GEN_PASS_DEF_MIXEDPRECISION
#include "passes/training/Passes.h.inc"
} // namespace tessera::training

using namespace mlir;
using namespace tessera;

namespace {

/// The f32 ranked tensor `type` with element type `element`; other types
/// unchanged.
Type withElement(Type type, Type element) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.getElementType().isF32())
    return type;
  return RankedTensorType::get(ranked.getShape(), element);
}

bool hasElement(Type type, Type element) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  return ranked && ranked.getElementType() == element;
}

bool isOptimizerUpdate(Operation *op) {
  return isa<tsr::SgdUpdateOp, tsr::AdamwUpdateOp>(op);
}

/// Precision policy: the f32 values an op in low precision still takes or
/// produces. The cross-entropy's summed loss is an f32 scalar (its kernel
/// accumulates in f32) and so is the cotangent seed its gradient reads; the
/// loss result must stay f32. Every other float operand and result of a
/// retyped op is low precision (kernels whose numerics need f32 internally,
/// e.g. layer_norm statistics and softmax, compute in f32 and round their
/// results).
bool keepsF32Result(Operation *op, unsigned index) {
  return isa<tsr::CrossEntropyOp>(op) && index == 0;
}
bool keepsF32Operand(Operation *op, unsigned index) {
  return isa<tsr::CrossEntropyGradOp>(op) && index == 2;
}

struct MixedPrecisionPass
    : training::impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (precision == "fp32")
      return;
    if (precision == "fp16") {
      module.emitError("tsr-mixed-precision: precision 'fp16' is not "
                       "supported yet (it needs loss scaling); use bf16");
      return signalPassFailure();
    }
    if (precision != "bf16") {
      module.emitError("tsr-mixed-precision: precision must be fp32 or bf16, "
                       "got '")
          << precision << "'";
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal()) {
      module.emitError("tsr-mixed-precision needs a @train_step with a body "
                       "(run tsr-build-train-step first)");
      return signalPassFailure();
    }
    low = BFloat16Type::get(&getContext());
    bool alreadyLow = false;
    func.walk([&](Operation *op) {
      for (Type t : op->getResultTypes())
        alreadyLow |= hasElement(t, low);
    });
    for (Type t : func.getArgumentTypes())
      alreadyLow |= hasElement(t, low);
    if (alreadyLow) {
      func.emitError("tsr-mixed-precision: @train_step already holds bf16 "
                     "values (the pass runs once, on an f32 step)");
      return signalPassFailure();
    }
    if (failed(rewrite(func)))
      return signalPassFailure();
  }

private:
  /// A low-precision copy of `v` (f32), made once per value: right after its
  /// defining op, or in front of `user` for a block argument.
  Value lowered(Value v, Operation *user) {
    auto it = loweredValues.find(v);
    if (it != loweredValues.end())
      return it->second;
    OpBuilder b(user);
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    Value c =
        tsr::ConvertOp::create(b, v.getLoc(), withElement(v.getType(), low), v);
    loweredValues[v] = c;
    return c;
  }

  LogicalResult rewrite(func::FuncOp func) {
    loweredValues.clear();
    Block &body = func.front();
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);

    // 1. f32 arguments read by compute ops (params, frozen params, float
    // inputs; optimizer state is read only by the updates).
    for (BlockArgument arg : body.getArguments()) {
      if (!hasElement(arg.getType(), Float32Type::get(&getContext())))
        continue;
      auto role =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "tsr.role");
      if (role && role.getValue() == "opt_state")
        continue;
      Operation *first = nullptr;
      for (Operation *op : ops)
        if (!isOptimizerUpdate(op) && !isa<func::ReturnOp>(op) &&
            llvm::is_contained(op->getOperands(), arg)) {
          first = op;
          break;
        }
      if (!first)
        continue;
      Value c = lowered(arg, first);
      arg.replaceUsesWithIf(c, [&](OpOperand &use) {
        Operation *owner = use.getOwner();
        return owner != c.getDefiningOp() && !isOptimizerUpdate(owner) &&
               !isa<func::ReturnOp>(owner);
      });
    }

    // 2-4. Program order: producers are retyped before their users.
    for (Operation *op : ops) {
      if (isa<func::ReturnOp>(op) || isOptimizerUpdate(op)) {
        for (OpOperand &operand : op->getOpOperands()) {
          if (!hasElement(operand.get().getType(), low))
            continue;
          OpBuilder b(op);
          operand.set(tsr::ConvertOp::create(
              b, op->getLoc(),
              RankedTensorType::get(
                  cast<RankedTensorType>(operand.get().getType()).getShape(),
                  Float32Type::get(&getContext())),
              operand.get()));
        }
        continue;
      }
      if (op->hasTrait<OpTrait::ConstantLike>() ||
          !llvm::any_of(op->getOperandTypes(),
                        [&](Type t) { return hasElement(t, low); }))
        continue;
      if (op->getDialect() != getContext().getLoadedDialect<tsr::TsrDialect>())
        return op->emitOpError("tsr-mixed-precision: cannot run a non-tsr op "
                               "in bf16");
      for (OpOperand &operand : op->getOpOperands())
        if (hasElement(operand.get().getType(),
                       Float32Type::get(&getContext())) &&
            !keepsF32Operand(op, operand.getOperandNumber()))
          operand.set(lowered(operand.get(), op));
      for (OpResult result : op->getResults())
        if (!keepsF32Result(op, result.getResultNumber()))
          result.setType(withElement(result.getType(), low));
    }
    return success();
  }

  Type low;
  DenseMap<Value, Value> loweredValues;
};

} // namespace

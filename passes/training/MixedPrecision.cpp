//===- MixedPrecision.cpp - bf16/fp16 compute, fp32 master weights --------===//
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
// fp16 adds static loss scaling (Micikevicius et al., 2018), before 1-4:
// the cross-entropy gradient's f32 seed is multiplied by S, and after 3
// each f32 gradient is multiplied by 1/S (exact: S is a power of two).
//
//===----------------------------------------------------------------------===//

#include "passes/training/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <cmath>

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
  return isa<tsr::OptimizerUpdateOpInterface>(op);
}

/// Precision policy: the f32 values an op in low precision still takes or
/// produces, as the op answers them (tsr::MixedPrecisionOpInterface: the
/// cross-entropy's summed loss and its gradient's seed, attention's
/// log-sum-exp). Every other float operand and result of a retyped op is
/// low precision (kernels whose numerics need f32 internally, e.g.
/// layer_norm and rms_norm statistics, softmax and attention, compute in
/// f32 or wider and round their results; rms_norm's scale is a bf16/f16
/// operand like layer_norm's, as HF LLaMA multiplies its weight in the
/// model's dtype).
bool keepsF32Result(Operation *op, unsigned index) {
  auto policy = dyn_cast<tsr::MixedPrecisionOpInterface>(op);
  return policy && policy.keepsF32Result(index);
}
bool keepsF32Operand(Operation *op, unsigned index) {
  auto policy = dyn_cast<tsr::MixedPrecisionOpInterface>(op);
  return policy && policy.keepsF32Operand(index);
}

struct MixedPrecisionPass
    : training::impl::MixedPrecisionBase<MixedPrecisionPass> {
  using MixedPrecisionBase::MixedPrecisionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (precision != "fp32" && precision != "bf16" && precision != "fp16") {
      module.emitError("tsr-mixed-precision: precision must be fp32, bf16 or "
                       "fp16, got '")
          << precision << "'";
      return signalPassFailure();
    }
    bool fp16 = precision == "fp16";
    // Unset is -1 rather than "no value": a pipeline built from typed options
    // sets every option, and its printed form must replay.
    if (!fp16 && lossScale != kUnsetLossScale) {
      module.emitError("tsr-mixed-precision: loss-scale is only meaningful "
                       "with precision=fp16");
      return signalPassFailure();
    }
    if (fp16 && !isPowerOfTwo(scale())) {
      module.emitError("tsr-mixed-precision: loss-scale must be a power of "
                       "two > 0 (so scaling is exact), got ")
          << lossScale;
      return signalPassFailure();
    }
    if (precision == "fp32")
      return;
    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    if (!func || func.isExternal()) {
      module.emitError("tsr-mixed-precision needs a @train_step with a body "
                       "(run tsr-build-train-step first)");
      return signalPassFailure();
    }
    low = fp16 ? Type(Float16Type::get(&getContext()))
               : Type(BFloat16Type::get(&getContext()));
    bool alreadyLow = false;
    func.walk([&](Operation *op) {
      for (Type t : op->getResultTypes())
        alreadyLow |= hasElement(t, low);
    });
    for (Type t : func.getArgumentTypes())
      alreadyLow |= hasElement(t, low);
    if (alreadyLow) {
      func.emitError("tsr-mixed-precision: @train_step already holds ")
          << lowName() << " values (the pass runs once, on an f32 step)";
      return signalPassFailure();
    }
    if (fp16 && failed(scaleSeeds(func)))
      return signalPassFailure();
    if (failed(rewrite(func, fp16 ? 1.0 / scale() : 1.0)))
      return signalPassFailure();
  }

  /// `loss-scale`'s default: unset (fp16 then scales by 1024).
  static constexpr double kUnsetLossScale = -1.0;
  /// fp16's loss scale S: the option, or 1024 when unset.
  double scale() const {
    return lossScale == kUnsetLossScale ? 1024.0 : double(lossScale);
  }

  /// True for a finite power of two > 0 (2^k, k any integer).
  static bool isPowerOfTwo(double s) {
    int exp;
    return s > 0 && std::isfinite(s) && std::frexp(s, &exp) == 0.5;
  }

private:
  /// "bf16" or "f16", for diagnostics.
  StringRef lowName() const { return isa<Float16Type>(low) ? "f16" : "bf16"; }

  /// A splat f32 constant of `shape` holding `value`, at `b`'s insertion
  /// point.
  Value splatF32(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                 double value) {
    auto type = RankedTensorType::get(shape, Float32Type::get(&getContext()));
    auto attr = DenseElementsAttr::get(type, b.getF32FloatAttr(value));
    return tsr::ConstantOp::create(b, loc, type, cast<ElementsAttr>(attr));
  }

  /// Static loss scaling, forward half: the f32 cotangent seed of the loss
  /// (MixedPrecisionOpInterface::getLossSeedOperand: that of every
  /// `tsr.cross_entropy_grad`, the 1 x 1/N product) becomes seed * S, so
  /// the whole backward computes S times the gradients and small ones stay
  /// above fp16's subnormal range. Error if the step has no such seed.
  LogicalResult scaleSeeds(func::FuncOp func) {
    SmallVector<OpOperand *> seeds;
    func.walk([&](tsr::MixedPrecisionOpInterface op) {
      if (std::optional<unsigned> seed = op.getLossSeedOperand())
        seeds.push_back(&op->getOpOperand(*seed));
    });
    if (seeds.empty())
      return func.emitError("tsr-mixed-precision: precision=fp16 needs a "
                            "tsr.cross_entropy_grad seed to apply the loss "
                            "scale to");
    for (OpOperand *seed : seeds) {
      Operation *op = seed->getOwner();
      auto type = cast<RankedTensorType>(seed->get().getType());
      OpBuilder b(op);
      Value s = splatF32(b, op->getLoc(), type.getShape(), scale());
      seed->set(tsr::MulOp::create(b, op->getLoc(), seed->get(), s));
    }
    return success();
  }

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

  /// Retypes the step (steps 1-4 above); `unscale` != 1 multiplies each
  /// optimizer update's f32 gradient by it, right after its convert.
  LogicalResult rewrite(func::FuncOp func, double unscale) {
    loweredValues.clear();
    unscaleScalar = nullptr;
    Block &body = func.front();
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);

    // 1. f32 arguments read by compute ops (params, frozen params, float
    // inputs; optimizer state is read only by the updates).
    for (BlockArgument arg : body.getArguments()) {
      if (!hasElement(arg.getType(), Float32Type::get(&getContext())))
        continue;
      auto role = tsr::getArgRole(func, arg.getArgNumber());
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
          OpBuilder b(op);
          if (hasElement(operand.get().getType(), low))
            operand.set(tsr::ConvertOp::create(
                b, op->getLoc(),
                RankedTensorType::get(
                    cast<RankedTensorType>(operand.get().getType()).getShape(),
                    Float32Type::get(&getContext())),
                operand.get()));
          // The update's gradient operand: every gradient is S times too
          // large under loss scaling (also one that stayed f32), so each is
          // unscaled by a scalar 1/S (one per step) broadcast to its shape:
          // a transient, not a gradient-sized constant.
          auto update = dyn_cast<tsr::OptimizerUpdateOpInterface>(op);
          if (unscale == 1.0 || !update || &operand != &update.getGradOperand())
            continue;
          if (!unscaleScalar)
            unscaleScalar = splatF32(b, op->getLoc(), {}, unscale);
          Value inv = tsr::BroadcastOp::create(
              b, op->getLoc(), operand.get().getType(), unscaleScalar);
          operand.set(tsr::MulOp::create(b, op->getLoc(), operand.get(), inv));
        }
        continue;
      }
      if (op->hasTrait<OpTrait::ConstantLike>() ||
          !llvm::any_of(op->getOperandTypes(),
                        [&](Type t) { return hasElement(t, low); }))
        continue;
      if (op->getDialect() != getContext().getLoadedDialect<tsr::TsrDialect>())
        return op->emitOpError("tsr-mixed-precision: cannot run a non-tsr op "
                               "in ")
               << lowName();
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
  /// fp16: the f32 scalar constant 1/S the gradients are multiplied by.
  Value unscaleScalar;
};

} // namespace

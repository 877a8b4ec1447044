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
// fp16 adds loss scaling (Micikevicius et al., 2018), before 1-4: the
// cross-entropy gradient's f32 seed is multiplied by S, and after 3 each
// f32 gradient is multiplied by 1/S (exact: S is a power of two). S is a
// constant (static, `loss-scale`) or, by default, dynamic: training state
// (three f32 scalar opt_state arguments) that the step reads and updates,
// with a skipped update when any gradient is not finite (see
// addDynamicLossScale).
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
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/StringMap.h"

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
    if (fp16 && !dynamic() && !isPowerOfTwo(lossScale)) {
      module.emitError("tsr-mixed-precision: loss-scale must be a power of "
                       "two > 0 (so scaling is exact), got ")
          << lossScale;
      return signalPassFailure();
    }
    if (failed(checkDynamicOptions(module, fp16)))
      return signalPassFailure();
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
    if (fp16 && dynamic() && failed(addScaleState(func)))
      return signalPassFailure();
    if (fp16 && failed(scaleSeeds(func)))
      return signalPassFailure();
    if (failed(rewrite(func, fp16)))
      return signalPassFailure();
    if (fp16 && dynamic() && failed(addDynamicLossScale(func)))
      return signalPassFailure();
  }

  /// `loss-scale`'s and `initial-loss-scale`'s default: unset.
  static constexpr double kUnsetLossScale = -1.0;
  static constexpr int64_t kDefaultWindow = 1000;
  static constexpr double kDefaultMinLossScale = 1.0;
  static constexpr double kDefaultInitialLossScale = 1024.0;
  /// fp16 without `loss-scale`: dynamic loss scaling.
  bool dynamic() const { return lossScale == kUnsetLossScale; }
  /// The dynamic scale's first value: the option, or 1024 when unset.
  double initialScale() const {
    return initialLossScale == kUnsetLossScale ? kDefaultInitialLossScale
                                               : double(initialLossScale);
  }

  /// The dynamic-scaling options: only with fp16 and without `loss-scale`;
  /// `initial-loss-scale` and `min-loss-scale` powers of two > 0 with
  /// min <= initial, `loss-scale-window` >= 1.
  LogicalResult checkDynamicOptions(ModuleOp module, bool fp16) {
    bool set = initialLossScale != kUnsetLossScale ||
               lossScaleWindow != kDefaultWindow ||
               minLossScale != kDefaultMinLossScale;
    if (!set && !(fp16 && dynamic()))
      return success();
    if (set && !fp16)
      return module.emitError("tsr-mixed-precision: initial-loss-scale, "
                              "loss-scale-window and min-loss-scale are only "
                              "meaningful with precision=fp16");
    if (set && !dynamic())
      return module.emitError("tsr-mixed-precision: initial-loss-scale, "
                              "loss-scale-window and min-loss-scale set "
                              "dynamic loss scaling; they conflict with the "
                              "static loss-scale");
    if (!isPowerOfTwo(initialScale()))
      return module.emitError("tsr-mixed-precision: initial-loss-scale must "
                              "be a power of two > 0 (so scaling is exact), "
                              "got ")
             << initialScale();
    if (lossScaleWindow < 1)
      return module.emitError("tsr-mixed-precision: loss-scale-window must "
                              "be >= 1, got ")
             << static_cast<int64_t>(lossScaleWindow);
    if (!isPowerOfTwo(minLossScale))
      return module.emitError("tsr-mixed-precision: min-loss-scale must be a "
                              "power of two > 0, got ")
             << minLossScale;
    if (minLossScale > initialScale())
      return module.emitError("tsr-mixed-precision: min-loss-scale (")
             << minLossScale << ") must not exceed initial-loss-scale ("
             << initialScale() << ")";
    return success();
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
      Value s;
      if (dynamic()) {
        s = makeScale(b, op->getLoc());
        if (type.getRank() != 0)
          s = tsr::BroadcastOp::create(b, op->getLoc(), type, s);
      } else {
        s = splatF32(b, op->getLoc(), type.getShape(), lossScale);
      }
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

  /// Retypes the step (steps 1-4 above); with `scaled` (fp16) each
  /// optimizer update's f32 gradient is multiplied by 1/S, right after its
  /// convert (dynamic: and summed into finiteTerms first).
  LogicalResult rewrite(func::FuncOp func, bool scaled) {
    loweredValues.clear();
    unscaleScalar = nullptr;
    finiteTerms.clear();
    updates.clear();
    Block &body = func.front();
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);

    // 1. f32 arguments read by compute ops (params, frozen params, float
    // inputs; optimizer state and the "hyper" learning rate are read only by
    // the updates and stay f32).
    for (BlockArgument arg : body.getArguments()) {
      if (!hasElement(arg.getType(), Float32Type::get(&getContext())))
        continue;
      auto role = tsr::getArgRole(func, arg.getArgNumber());
      if (role &&
          (role.getValue() == "opt_state" || role.getValue() == "hyper"))
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
          Value lowGrad;
          Operation *toF32 = nullptr;
          if (hasElement(operand.get().getType(), low)) {
            lowGrad = operand.get();
            toF32 = tsr::ConvertOp::create(
                b, op->getLoc(),
                RankedTensorType::get(
                    cast<RankedTensorType>(operand.get().getType()).getShape(),
                    Float32Type::get(&getContext())),
                operand.get());
            operand.set(toF32->getResult(0));
          }
          // The update's gradient operand: every gradient is S times too
          // large under loss scaling (also one that stayed f32), so each is
          // unscaled by a scalar 1/S (one per step) broadcast to its shape:
          // a transient, not a gradient-sized constant.
          auto update = dyn_cast<tsr::OptimizerUpdateOpInterface>(op);
          if (!scaled || !update || &operand != &update.getGradOperand())
            continue;
          if (dynamic()) {
            // The f32 sum of every element: finite iff each is (|x| <=
            // 65504 in f16, so the f32 sum cannot overflow; inf - inf is
            // NaN). Its sharding rule makes a split gradient's sum partial,
            // so the partition all-reduces it over the gradient's axes. It
            // reads its own f32 copy: the update's (toF32) moves after the
            // decision (addDynamicLossScale), and must not live until then.
            auto type = cast<RankedTensorType>(operand.get().getType());
            Value summed = operand.get();
            if (lowGrad)
              summed = tsr::ConvertOp::create(b, op->getLoc(), type, lowGrad);
            auto axes = llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
            finiteTerms.push_back(tsr::ReduceSumOp::create(
                b, op->getLoc(),
                RankedTensorType::get({}, type.getElementType()), summed,
                axes));
          }
          if (!unscaleScalar && dynamic()) {
            scaleValue = makeScale(b, op->getLoc());
            unscaleScalar = tsr::DivOp::create(
                b, op->getLoc(), splatF32(b, op->getLoc(), {}, 1.0),
                scaleValue);
          } else if (!unscaleScalar) {
            unscaleScalar = splatF32(b, op->getLoc(), {}, 1.0 / lossScale);
          }
          Value inv = tsr::BroadcastOp::create(
              b, op->getLoc(), operand.get().getType(), unscaleScalar);
          operand.set(tsr::MulOp::create(b, op->getLoc(), operand.get(), inv));
          if (dynamic()) {
            UpdateChain &chain = updates.emplace_back();
            if (toF32)
              chain.ops.push_back(toF32);
            chain.ops.append(
                {inv.getDefiningOp(), operand.get().getDefiningOp(), op});
          }
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

  /// Dynamic loss scaling, first half: appends the three f32 scalar
  /// opt_state arguments (after the last opt_state argument, or after the
  /// params and frozen tensors) and their results. Optimizer state starts
  /// at zeros, so loss_scale == 0 stands for the initial scale (a real
  /// scale is never 0; see makeScale).
  LogicalResult addScaleState(func::FuncOp func) {
    MLIRContext *ctx = &getContext();
    unsigned insertAt = 0;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto role = tsr::getArgRole(func, i);
      StringRef r = role ? role.getValue() : "";
      if (r == "param" || r == "frozen" || r == "opt_state")
        insertAt = i + 1;
    }
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto name = func.getArgAttrOfType<StringAttr>(i, tsr::kNameAttrName);
          name && llvm::is_contained(kStateNames, name.getValue()))
        return func.emitError("tsr-mixed-precision: @train_step already has "
                              "an argument named '")
               << name.getValue() << "'";
    auto scalar = RankedTensorType::get({}, Float32Type::get(ctx));
    Builder b(ctx);
    for (auto [k, name] : llvm::enumerate(kStateNames)) {
      NamedAttrList attrs;
      attrs.set(tsr::kRoleAttrName, b.getStringAttr("opt_state"));
      attrs.set(tsr::kNameAttrName, b.getStringAttr(name));
      if (failed(func.insertArgument(insertAt + k, scalar,
                                     attrs.getDictionary(ctx), func.getLoc())))
        return failure();
      state[k] = func.getArgument(insertAt + k);
      if (failed(func.insertResult(func.getNumResults(), scalar,
                                   attrs.getDictionary(ctx))))
        return failure();
    }
    return success();
  }

  /// The step's scale S at `b`'s insertion point:
  ///   S = loss_scale == 0 ? initial : loss_scale.
  /// Made twice, right before the seeds and right before the first update,
  /// rather than once at the top: a value made at the top and read at the
  /// end would cross every layer boundary of the forward
  /// (training::assignLayers), leaving no cut for Megatron-SP or the
  /// pipeline split.
  Value makeScale(OpBuilder &b, Location loc) {
    Value zero = splatF32(b, loc, {}, 0.0);
    auto scalar = cast<RankedTensorType>(state[0].getType());
    Value unset = tsr::EqualOp::create(b, loc, boolOf(scalar), state[0], zero);
    return tsr::SelectOp::create(
        b, loc, unset, splatF32(b, loc, {}, initialScale()), state[0]);
  }

  /// Dynamic loss scaling, second half, in front of the return: the step is
  /// clean when the sum of the gradients' sums (finiteTerms) is finite:
  ///   ok = (total * 0 == 0)
  /// (inf * 0 and NaN are NaN, and NaN == 0 is false). Every param and
  /// opt_state result becomes select(ok, new, old), so a skipped step
  /// leaves them bit-identical (AdamW's step count included), and the
  /// state advances as Megatron-LM's DynamicGradScaler (hysteresis 1):
  ///   clean:   good' = good + 1; if good' == window: S' = 2S, good' = 0
  ///   skipped: S' = max(S / 2, min), good' = 0, skipped' = skipped + 1.
  LogicalResult addDynamicLossScale(func::FuncOp func) {
    if (finiteTerms.empty())
      return func.emitError("tsr-mixed-precision: dynamic loss scaling needs "
                            "an optimizer update with a gradient");
    auto ret = cast<func::ReturnOp>(func.front().getTerminator());
    OpBuilder b(ret);
    Location loc = ret.getLoc();
    auto scalar = cast<RankedTensorType>(scaleValue.getType());
    Value total = finiteTerms.front();
    for (Value term : ArrayRef(finiteTerms).drop_front())
      total = tsr::AddOp::create(b, loc, total, term);
    Value zero = splatF32(b, loc, {}, 0.0);
    Value ok = tsr::EqualOp::create(
        b, loc, boolOf(scalar), tsr::MulOp::create(b, loc, total, zero), zero);

    // The updates run after the decision, each followed by the selects of
    // its results: carried state keeps its old value on a skipped step, and
    // an update's outputs are transient (with the select written in place of
    // the old value, the step holds one parameter's new state at a time).
    llvm::StringMap<Value> argByName;
    for (BlockArgument arg : func.getArguments())
      if (auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        tsr::kNameAttrName))
        argByName[name.getValue()] = arg;
    SmallVector<Value> results(ret.getOperands());
    DenseMap<Type, Value> okByShape; // ok broadcast to each result shape
    auto keepOnSkip = [&](unsigned r) -> LogicalResult {
      auto role = func.getResultAttrOfType<StringAttr>(r, tsr::kRoleAttrName);
      auto name = func.getResultAttrOfType<StringAttr>(r, tsr::kNameAttrName);
      if (!role || !name ||
          (role.getValue() != "param" && role.getValue() != "opt_state"))
        return success();
      Value old = argByName.lookup(name.getValue());
      if (!old || old == results[r] ||
          llvm::is_contained(kStateNames, name.getValue()))
        return success();
      if (old.getType() != results[r].getType())
        return func.emitError("tsr-mixed-precision: result '")
               << name.getValue() << "' and its argument differ in type";
      auto type = cast<RankedTensorType>(old.getType());
      Value &cond = okByShape[boolOf(type)];
      if (!cond)
        cond = type.getRank() == 0
                   ? ok
                   : tsr::BroadcastOp::create(b, loc, boolOf(type), ok);
      results[r] = tsr::SelectOp::create(b, loc, cond, results[r], old);
      return success();
    };
    DenseSet<unsigned> selected;
    for (UpdateChain &chain : updates) {
      for (Operation *op : chain.ops)
        op->moveBefore(ret);
      for (OpResult result : chain.ops.back()->getResults())
        for (unsigned r = 0; r < results.size(); ++r)
          if (results[r] == result && selected.insert(r).second &&
              failed(keepOnSkip(r)))
            return failure();
    }
    for (unsigned r = 0; r < results.size(); ++r)
      if (!selected.contains(r) && failed(keepOnSkip(r)))
        return failure();

    Value one = splatF32(b, loc, {}, 1.0);
    Value good = tsr::AddOp::create(b, loc, state[1], one);
    Value grow = tsr::EqualOp::create(
        b, loc, boolOf(scalar), good,
        splatF32(b, loc, {}, static_cast<double>(lossScaleWindow)));
    Value grown = tsr::SelectOp::create(
        b, loc, grow,
        tsr::MulOp::create(b, loc, scaleValue, splatF32(b, loc, {}, 2.0)),
        scaleValue);
    Value goodNext = tsr::SelectOp::create(b, loc, grow, zero, good);
    // One op a statement: a call's arguments are built in an unspecified
    // order (GCC: the minimum first, clang: the product), and the IR must
    // not depend on the compiler. GCC's order is kept.
    Value minScale = splatF32(b, loc, {}, minLossScale);
    Value half =
        tsr::MulOp::create(b, loc, scaleValue, splatF32(b, loc, {}, 0.5));
    Value halved = tsr::MaxOp::create(b, loc, half, minScale);
    Value next[3] = {
        tsr::SelectOp::create(b, loc, ok, grown, halved),
        tsr::SelectOp::create(b, loc, ok, goodNext, zero),
        tsr::SelectOp::create(b, loc, ok, state[2],
                              tsr::AddOp::create(b, loc, state[2], one))};
    // addScaleState appended the three results last.
    results.append(std::begin(next), std::end(next));
    ret->setOperands(results);
    return success();
  }

  /// The i1 tensor of `type`'s shape.
  static RankedTensorType boolOf(RankedTensorType type) {
    return RankedTensorType::get(type.getShape(),
                                 IntegerType::get(type.getContext(), 1));
  }

  /// Dynamic loss scaling's opt_state arguments (f32 scalars): the scale (0
  /// before the first step: the initial scale), the clean steps since the
  /// scale last changed, the steps skipped so far. The runtime reports them
  /// by these names (tessera-run's metrics).
  static constexpr StringLiteral kStateNames[3] = {
      "loss_scale", "loss_scale.good_steps", "loss_scale.skipped_steps"};

  Type low;
  DenseMap<Value, Value> loweredValues;
  /// fp16: the f32 scalar 1/S the gradients are multiplied by (a constant,
  /// or 1 / S computed once with dynamic scaling).
  Value unscaleScalar;
  /// Dynamic scaling: the step's scale S (the copy made before the first
  /// update, for the unscale and the state update), the three state
  /// arguments, and
  /// one f32 scalar per gradient, its sum (see rewrite).
  Value scaleValue;
  Value state[3];
  SmallVector<Value> finiteTerms;
  /// Dynamic scaling: each update with the ops that feed it its gradient
  /// (the convert to f32, the broadcast 1/S, the unscale), in program order.
  struct UpdateChain {
    SmallVector<Operation *, 4> ops;
  };
  SmallVector<UpdateChain> updates;
};

} // namespace

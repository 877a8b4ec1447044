//===- BuildTrainStep.cpp - @forward -> @train_step -----------------------===//
//
// Adds the loss (mean cross-entropy over all tokens), the backward pass
// (reverse mode through GradientOpInterface, see Autodiff.h) and one fused
// optimizer update per trainable parameter. See Passes.td for the contract
// of the resulting function's arguments and results.
//
//===----------------------------------------------------------------------===//

#include "passes/training/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"
#include "passes/training/Autodiff.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/CSE.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace tessera::training {
#define GEN_PASS_DEF_BUILDTRAINSTEP
#include "passes/training/Passes.h.inc"
} // namespace tessera::training

using namespace mlir;
using namespace tessera;

namespace {

constexpr StringLiteral kRole = tsr::kRoleAttrName;
constexpr StringLiteral kName = tsr::kNameAttrName;

/// One argument of @train_step: its type, attributes and, for the ones that
/// come from @forward, the forward argument it replaces.
struct NewArg {
  Type type;
  NamedAttrList attrs;
  int forwardIndex = -1;
};

/// The non-zero pieces of `v` along `axis`: the non-zero inputs of a
/// `tsr.concat` along `axis`, or `v` itself unless it is a zero constant.
struct Segment {
  int64_t begin, size;
  Value value;
};
SmallVector<Segment> nonZeroSegments(Value v, int64_t axis) {
  SmallVector<Segment> segments;
  auto size = [&](Value x) {
    return cast<RankedTensorType>(x.getType()).getDimSize(axis);
  };
  if (auto concat = v.getDefiningOp<tsr::ConcatOp>();
      concat && static_cast<int64_t>(concat.getAxis()) == axis) {
    int64_t offset = 0;
    for (Value in : concat.getInputs()) {
      if (!matchPattern(in, m_AnyZeroFloat()))
        segments.push_back({offset, size(in), in});
      offset += size(in);
    }
  } else if (!matchPattern(v, m_AnyZeroFloat())) {
    segments.push_back({0, size(v), v});
  }
  return segments;
}

/// Cotangents of slices of one value are zero-padded concats; their sum is
/// one concat when the non-zero pieces are disjoint:
///   add(concat(0, b), concat(a, 0)) -> concat(a, b).
/// (The typical case: dq, dk, dv of a fused QKV projection.)
struct AddOfDisjointConcats : public OpRewritePattern<tsr::AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tsr::AddOp add,
                                PatternRewriter &rewriter) const override {
    auto concat = add.getLhs().getDefiningOp<tsr::ConcatOp>();
    if (!concat)
      concat = add.getRhs().getDefiningOp<tsr::ConcatOp>();
    if (!concat)
      return failure();
    int64_t axis = concat.getAxis();
    SmallVector<Segment> segments = nonZeroSegments(add.getLhs(), axis);
    llvm::append_range(segments, nonZeroSegments(add.getRhs(), axis));
    llvm::sort(segments, [](const Segment &a, const Segment &b) {
      return a.begin < b.begin;
    });
    for (size_t i = 1; i < segments.size(); ++i)
      if (segments[i].begin < segments[i - 1].begin + segments[i - 1].size)
        return failure(); // overlapping: a real sum
    auto type = add.getType();
    SmallVector<Value> pieces;
    int64_t offset = 0;
    auto zeros = [&](int64_t n) {
      SmallVector<int64_t> shape(type.getShape());
      shape[axis] = n;
      auto t = RankedTensorType::get(shape, type.getElementType());
      auto attr = DenseElementsAttr::get(
          t, rewriter.getFloatAttr(type.getElementType(), 0.0));
      return tsr::ConstantOp::create(rewriter, add.getLoc(), t,
                                     cast<ElementsAttr>(attr))
          .getResult();
    };
    for (const Segment &seg : segments) {
      if (seg.begin > offset)
        pieces.push_back(zeros(seg.begin - offset));
      pieces.push_back(seg.value);
      offset = seg.begin + seg.size;
    }
    if (offset < type.getDimSize(axis))
      pieces.push_back(zeros(type.getDimSize(axis) - offset));
    if (pieces.size() == 1)
      rewriter.replaceOp(add, pieces.front());
    else
      rewriter.replaceOpWithNewOp<tsr::ConcatOp>(add, type, pieces, axis);
    return success();
  }
};

/// What BuildTrainStepPass::run learns about @forward and builds, step by
/// step (each step fills the fields below its own comment).
struct StepState {
  // inspectForward
  func::FuncOp forward;
  func::ReturnOp ret;
  unsigned logitsIndex = 0;
  RankedTensorType logitsType;
  int64_t vocab = 0;
  int64_t numTokens = 0;
  // classifyArguments
  SmallVector<unsigned> params, frozen, inputs;
  /// @forward's "rng_step" argument (training-mode dropout), or -1.
  int rngStep = -1;
  int tokensIndex = -1;
  RankedTensorType labelsType;
  RankedTensorType scalarF32;
  // planSignature
  SmallVector<NewArg> args;
  unsigned optStateBegin = 0, optStateEnd = 0, labelsArg = 0;
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  // createTrainStep, appendLoss
  func::FuncOp trainStep;
  Block *entry = nullptr;
  SmallVector<Operation *> forwardOps;
  Value logits;
  Value loss;
};

/// Argument `i` of @forward's attributes, named "arg<i>" when it has no name.
NamedAttrList forwardAttrs(func::FuncOp forward, unsigned i) {
  Builder b(forward.getContext());
  NamedAttrList attrs(forward.getArgAttrDict(i));
  if (!attrs.get(kName))
    attrs.set(kName, b.getStringAttr("arg" + Twine(i)));
  return attrs;
}

/// A scalar f32 `tsr.constant` of value `v`.
Value splat(OpBuilder &builder, Location loc, double v) {
  auto scalarF32 = RankedTensorType::get({}, builder.getF32Type());
  auto attr = DenseElementsAttr::get(scalarF32, builder.getF32FloatAttr(v));
  return tsr::ConstantOp::create(builder, loc, scalarF32,
                                 cast<ElementsAttr>(attr));
}

struct BuildTrainStepPass
    : public training::impl::BuildTrainStepBase<BuildTrainStepPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run();
  LogicalResult checkOptions(ModuleOp module);
  double effectiveWeightDecay() const {
    return weightDecay >= 0 ? weightDecay : (optimizer == "adamw" ? 0.01 : 0.0);
  }

  // The steps of run(), in order.
  LogicalResult inspectForward(ModuleOp module, StepState &s);
  LogicalResult classifyArguments(StepState &s);
  void planSignature(StepState &s);
  void createTrainStep(OpBuilder &builder, StepState &s);
  void appendLoss(OpBuilder &builder, StepState &s);
  void appendOptimizer(OpBuilder &builder, StepState &s,
                       ArrayRef<Value> paramValues, ArrayRef<Value> grads);
  void cleanup(func::FuncOp trainStep);
};

LogicalResult BuildTrainStepPass::checkOptions(ModuleOp module) {
  if (optimizer != "sgd" && optimizer != "adamw")
    return module.emitError("tsr-build-train-step: unknown optimizer '")
           << optimizer << "'; expected 'sgd' or 'adamw'";
  if (!(lr >= 0))
    return module.emitError("tsr-build-train-step: lr must be >= 0, got ")
           << lr;
  if (optimizer == "adamw") {
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
      return module.emitError(
                 "tsr-build-train-step: betas must be in [0, 1), got ")
             << beta1 << ", " << beta2;
    if (!(eps > 0))
      return module.emitError("tsr-build-train-step: eps must be > 0, got ")
             << eps;
  }
  return success();
}

LogicalResult BuildTrainStepPass::run() {
  ModuleOp module = getOperation();
  if (failed(checkOptions(module)))
    return failure();
  StepState s;
  if (failed(inspectForward(module, s)) || failed(classifyArguments(s)))
    return failure();
  planSignature(s);
  OpBuilder builder(s.forward);
  createTrainStep(builder, s);
  appendLoss(builder, s);

  // Backward.
  SmallVector<Value> paramValues;
  for (unsigned k = 0; k < s.params.size(); ++k)
    paramValues.push_back(s.entry->getArgument(k));
  Value seed = splat(builder, s.ret.getLoc(), 1.0);
  auto grads = training::buildBackward(builder, s.forwardOps, {{s.loss, seed}},
                                       paramValues);
  if (failed(grads)) {
    s.trainStep.erase();
    return failure();
  }

  appendOptimizer(builder, s, paramValues, *grads);
  s.forward.erase();
  cleanup(s.trainStep);
  return success();
}

/// Finds @forward, checks its form and finds its logits result.
LogicalResult BuildTrainStepPass::inspectForward(ModuleOp module,
                                                 StepState &s) {
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward)
    return module.emitError(
        "tsr-build-train-step: no func.func @forward to differentiate");
  if (module.lookupSymbol("train_step"))
    return forward.emitError(
        "tsr-build-train-step: the module already has a @train_step");
  if (forward.isExternal() || !forward.getBody().hasOneBlock())
    return forward.emitError("@forward must have a body of exactly one block");
  auto ret = dyn_cast<func::ReturnOp>(forward.front().getTerminator());
  if (!ret)
    return forward.emitError("@forward must end with func.return");

  // The logits: the result named "logits", else the first result.
  if (forward.getNumResults() == 0)
    return forward.emitError("@forward has no logits result");
  unsigned logitsIndex = 0;
  for (unsigned i = 0; i < forward.getNumResults(); ++i)
    if (auto name = forward.getResultAttrOfType<StringAttr>(i, kName);
        name && name.getValue() == "logits")
      logitsIndex = i;
  auto logitsType =
      dyn_cast<RankedTensorType>(forward.getResultTypes()[logitsIndex]);
  if (!logitsType || !isa<FloatType>(logitsType.getElementType()) ||
      logitsType.getRank() < 2 || !logitsType.hasStaticShape())
    return forward.emitError("@forward's logits result must be a statically "
                             "shaped float tensor [..., V] of rank >= 2, got ")
           << forward.getResultTypes()[logitsIndex];
  s.forward = forward;
  s.ret = ret;
  s.logitsIndex = logitsIndex;
  s.logitsType = logitsType;
  s.vocab = logitsType.getShape().back();
  s.numTokens = logitsType.getNumElements() / std::max<int64_t>(s.vocab, 1);
  return success();
}

/// Sorts @forward's arguments into params, frozen and inputs, finds the
/// token ids and derives the labels' type.
LogicalResult BuildTrainStepPass::classifyArguments(StepState &s) {
  func::FuncOp forward = s.forward;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto role = forward.getArgAttrOfType<StringAttr>(i, kRole);
    StringRef r = role ? role.getValue() : "input";
    Type t = forward.getArgument(i).getType();
    auto tensor = dyn_cast<RankedTensorType>(t);
    if (r == "param") {
      if (!tensor || !isa<FloatType>(tensor.getElementType()))
        return forward.emitError("trainable argument ")
               << i << " must be a floating-point tensor, got " << t;
      s.params.push_back(i);
    } else if (r == "frozen") {
      s.frozen.push_back(i);
    } else if (r == "input") {
      s.inputs.push_back(i);
    } else if (r == "rng_step") {
      // The step counter of training-mode dropout (the importer's): the
      // replicated optimizer state "rng.step", incremented every step.
      if (s.rngStep >= 0 ||
          t !=
              RankedTensorType::get({}, Float32Type::get(forward.getContext())))
        return forward.emitError("argument ")
               << i << ": one 0-D f32 'rng_step' argument expected, got " << t;
      s.rngStep = i;
    } else {
      return forward.emitError("argument ")
             << i << " has unknown tsr.role '" << r
             << "'; expected param, frozen, input or rng_step";
    }
  }
  // The token ids: the first integer input.
  for (unsigned i : s.inputs) {
    auto t = dyn_cast<RankedTensorType>(forward.getArgument(i).getType());
    if (t && isa<IntegerType>(t.getElementType())) {
      s.tokensIndex = i;
      break;
    }
  }
  // The labels have the tokens' shape when it matches the logits' rows.
  SmallVector<int64_t> labelsShape(s.logitsType.getShape().drop_back());
  if (s.tokensIndex >= 0) {
    auto t =
        cast<RankedTensorType>(forward.getArgument(s.tokensIndex).getType());
    if (t.hasStaticShape() && t.getNumElements() == s.numTokens)
      labelsShape.assign(t.getShape().begin(), t.getShape().end());
  }
  Builder b(&getContext());
  s.labelsType = RankedTensorType::get(labelsShape, b.getI64Type());
  s.scalarF32 = RankedTensorType::get({}, b.getF32Type());
  return success();
}

/// @train_step's arguments (params, frozen, optimizer state, inputs (tokens),
/// labels) and results (loss, updated params, updated optimizer state).
void BuildTrainStepPass::planSignature(StepState &s) {
  MLIRContext *ctx = &getContext();
  Builder b(ctx);
  func::FuncOp forward = s.forward;
  bool adamw = optimizer == "adamw";

  // Arguments: params, frozen, optimizer state, inputs (tokens), labels.
  SmallVector<NewArg> &args = s.args;
  for (unsigned i : s.params)
    args.push_back(
        {forward.getArgument(i).getType(), forwardAttrs(forward, i), (int)i});
  for (unsigned i : s.frozen)
    args.push_back(
        {forward.getArgument(i).getType(), forwardAttrs(forward, i), (int)i});
  s.optStateBegin = args.size();
  auto optStateArg = [&](Type type, const Twine &name) {
    NamedAttrList attrs;
    attrs.set(kRole, b.getStringAttr("opt_state"));
    attrs.set(kName, b.getStringAttr(name));
    args.push_back({type, attrs, -1});
  };
  if (adamw) {
    for (unsigned i : s.params) {
      std::string name =
          cast<StringAttr>(forwardAttrs(forward, i).get(kName)).str();
      optStateArg(forward.getArgument(i).getType(), name + ".exp_avg");
      optStateArg(forward.getArgument(i).getType(), name + ".exp_avg_sq");
    }
    optStateArg(s.scalarF32, "step");
  }
  if (s.rngStep >= 0) {
    NamedAttrList attrs;
    attrs.set(kRole, b.getStringAttr("opt_state"));
    attrs.set(kName, b.getStringAttr("rng.step"));
    args.push_back({s.scalarF32, attrs, s.rngStep});
  }
  s.optStateEnd = args.size();
  for (unsigned i : s.inputs) {
    NamedAttrList attrs = forwardAttrs(forward, i);
    if ((int)i == s.tokensIndex)
      attrs.set(kRole, b.getStringAttr("tokens"));
    else
      attrs.set(kRole, b.getStringAttr("input"));
    args.push_back({forward.getArgument(i).getType(), attrs, (int)i});
  }
  {
    NamedAttrList attrs;
    attrs.set(kRole, b.getStringAttr("labels"));
    attrs.set(kName, b.getStringAttr("labels"));
    args.push_back({s.labelsType, attrs, -1});
  }
  s.labelsArg = args.size() - 1;

  // Results: loss, updated params, updated optimizer state.
  s.resultTypes = {s.scalarF32};
  {
    NamedAttrList attrs;
    attrs.set(kRole, b.getStringAttr("loss"));
    attrs.set(kName, b.getStringAttr("loss"));
    s.resultAttrs.push_back(attrs.getDictionary(ctx));
  }
  for (unsigned i : s.params) {
    s.resultTypes.push_back(forward.getArgument(i).getType());
    NamedAttrList attrs;
    attrs.set(kRole, b.getStringAttr("param"));
    attrs.set(kName, forwardAttrs(forward, i).get(kName));
    s.resultAttrs.push_back(attrs.getDictionary(ctx));
  }
  for (unsigned k = s.optStateBegin; k < s.optStateEnd; ++k) {
    s.resultTypes.push_back(args[k].type);
    NamedAttrList attrs;
    attrs.set(kRole, b.getStringAttr("opt_state"));
    attrs.set(kName, args[k].attrs.get(kName));
    s.resultAttrs.push_back(attrs.getDictionary(ctx));
  }
}

/// Creates @train_step with the planned signature, next to @forward, and
/// clones the forward body into it; leaves `builder` at the end of its body.
void BuildTrainStepPass::createTrainStep(OpBuilder &builder, StepState &s) {
  MLIRContext *ctx = &getContext();
  func::FuncOp forward = s.forward;
  SmallVector<Type> argTypes;
  for (const NewArg &a : s.args)
    argTypes.push_back(a.type);
  auto trainStep =
      func::FuncOp::create(builder, forward.getLoc(), "train_step",
                           builder.getFunctionType(argTypes, s.resultTypes));
  trainStep.setVisibility(forward.getVisibility());
  Block *entry = trainStep.addEntryBlock();
  for (auto [k, a] : llvm::enumerate(s.args))
    trainStep.setArgAttrs(k, a.attrs.getDictionary(ctx));
  for (auto [k, attrs] : llvm::enumerate(s.resultAttrs))
    trainStep.setResultAttrs(k, attrs);

  IRMapping mapping;
  for (auto [k, a] : llvm::enumerate(s.args))
    if (a.forwardIndex >= 0)
      mapping.map(forward.getArgument(a.forwardIndex), entry->getArgument(k));
  builder.setInsertionPointToEnd(entry);
  for (Operation &op : forward.front().without_terminator())
    s.forwardOps.push_back(builder.clone(op, mapping));
  s.logits = mapping.lookup(s.ret.getOperand(s.logitsIndex));
  s.trainStep = trainStep;
  s.entry = entry;
}

/// Loss = cross_entropy(logits [N, V], labels [N]) · (1/N): the sum and the
/// 1/N constant stay separate ops (the count is the global token count).
void BuildTrainStepPass::appendLoss(OpBuilder &builder, StepState &s) {
  Location lossLoc = s.ret.getLoc();
  auto rowsType = RankedTensorType::get({s.numTokens, s.vocab},
                                        s.logitsType.getElementType());
  Value logits2d = s.logits;
  if (s.logitsType != rowsType) {
    logits2d = tsr::ReshapeOp::create(builder, lossLoc, rowsType, s.logits);
    s.forwardOps.push_back(logits2d.getDefiningOp());
  }
  Value labels = s.entry->getArgument(s.labelsArg);
  auto labelsRows = RankedTensorType::get({s.numTokens}, builder.getI64Type());
  if (s.labelsType != labelsRows) {
    labels = tsr::ReshapeOp::create(builder, lossLoc, labelsRows, labels);
    s.forwardOps.push_back(labels.getDefiningOp());
  }
  auto sum = tsr::CrossEntropyOp::create(builder, lossLoc, s.scalarF32,
                                         logits2d, labels);
  s.forwardOps.push_back(sum);
  Value invCount = splat(builder, lossLoc, 1.0 / double(s.numTokens));
  s.forwardOps.push_back(invCount.getDefiningOp());
  auto loss = tsr::MulOp::create(builder, lossLoc, sum, invCount);
  s.forwardOps.push_back(loss);
  s.loss = loss.getResult();
}

/// One fused optimizer update per parameter with a gradient, and the return
/// of the loss, the updated parameters and the updated optimizer state.
void BuildTrainStepPass::appendOptimizer(OpBuilder &builder, StepState &s,
                                         ArrayRef<Value> paramValues,
                                         ArrayRef<Value> grads) {
  Location lossLoc = s.ret.getLoc();
  Block *entry = s.entry;
  bool adamw = optimizer == "adamw";
  SmallVector<Value> results = {s.loss};
  SmallVector<Value> newOptState;
  FloatAttr lrAttr = builder.getF32FloatAttr(lr);
  FloatAttr wdAttr = builder.getF32FloatAttr(effectiveWeightDecay());
  Value newStep;
  if (adamw) {
    Value step = entry->getArgument(s.optStateBegin + 2 * s.params.size());
    newStep = tsr::AddOp::create(builder, lossLoc, step,
                                 splat(builder, lossLoc, 1.0));
  }
  for (auto [k, p] : llvm::enumerate(paramValues)) {
    Value g = grads[k];
    Location loc = s.forward.getArgument(s.params[k]).getLoc();
    if (!adamw) {
      results.push_back(g ? tsr::SgdUpdateOp::create(builder, loc, p.getType(),
                                                     p, g, lrAttr, wdAttr)
                                .getResult()
                          : p);
      continue;
    }
    Value m = entry->getArgument(s.optStateBegin + 2 * k);
    Value v = entry->getArgument(s.optStateBegin + 2 * k + 1);
    if (!g) {
      // torch.optim skips a parameter without a gradient.
      results.push_back(p);
      newOptState.append({m, v});
      continue;
    }
    auto update = tsr::AdamwUpdateOp::create(
        builder, loc, p.getType(), p.getType(), p.getType(), p, g, m, v,
        newStep, lrAttr, builder.getF32FloatAttr(beta1),
        builder.getF32FloatAttr(beta2), builder.getF32FloatAttr(eps), wdAttr);
    results.push_back(update.getNewParam());
    newOptState.append({update.getNewExpAvg(), update.getNewExpAvgSq()});
  }
  if (adamw)
    newOptState.push_back(newStep);
  if (s.rngStep >= 0) {
    // Dropout's step counter: the next step draws new masks.
    Value rng = entry->getArgument(s.optStateEnd - 1);
    newOptState.push_back(tsr::AddOp::create(builder, lossLoc, rng,
                                             splat(builder, lossLoc, 1.0)));
  }
  results.append(newOptState);
  func::ReturnOp::create(builder, s.ret.getLoc(), results);
}

/// Cleanup: fold, drop dead forward values, CSE.
void BuildTrainStepPass::cleanup(func::FuncOp trainStep) {
  MLIRContext *ctx = &getContext();
  RewritePatternSet patterns(ctx);
  patterns.add<AddOfDisjointConcats>(ctx);
  for (Dialect *dialect : ctx->getLoadedDialects())
    dialect->getCanonicalizationPatterns(patterns);
  for (RegisteredOperationName op : ctx->getRegisteredOperations())
    op.getCanonicalizationPatterns(patterns, ctx);
  GreedyRewriteConfig config;
  config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
  (void)applyPatternsGreedily(trainStep.getOperation(), std::move(patterns),
                              config);
  IRRewriter rewriter(ctx);
  DominanceInfo dominance(trainStep);
  eliminateCommonSubExpressions(rewriter, dominance, trainStep);
}

} // namespace

//===- BuildEvalStep.cpp - the forward-only evaluation function -----------===//
//
// See Passes.td (tsr-build-eval-step). The pass clones the (partitioned)
// @train_step as @eval_step, returns only its loss, replaces every op with
// the IdentityInInference trait by its operand 0 (dropout is the identity
// in evaluation, as after PyTorch's model.eval()), erases what the loss no
// longer reads
// (the backward, the optimizer, the gradient collectives) and the arguments
// nothing reads. The clone keeps every argument's and op's sharding, so
// the evaluation runs on the training plan's ranks with its state tensors.
//
//===----------------------------------------------------------------------===//

#include "passes/training/Passes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/STLExtras.h"

namespace tessera::training {
#define GEN_PASS_DEF_BUILDEVALSTEP
#include "passes/training/Passes.h.inc"
} // namespace tessera::training

using namespace mlir;
using namespace tessera;

namespace {

struct BuildEvalStepPass
    : training::impl::BuildEvalStepBase<BuildEvalStepPass> {
  using BuildEvalStepBase::BuildEvalStepBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto train = module.lookupSymbol<func::FuncOp>("train_step");
    if (!train || train.isExternal()) {
      module.emitError("tsr-build-eval-step: no func.func @train_step to "
                       "derive the evaluation function from");
      return signalPassFailure();
    }
    if (module.lookupSymbol("eval_step")) {
      module.emitError("tsr-build-eval-step: the module already has a symbol "
                       "@eval_step");
      return signalPassFailure();
    }
    std::optional<unsigned> lossIndex;
    for (unsigned i = 0; i < train.getNumResults(); ++i)
      if (auto role = tsr::getResultRole(train, i);
          role && role.getValue() == "loss")
        lossIndex = i;
    if (!lossIndex) {
      train.emitError("tsr-build-eval-step: @train_step has no result with "
                      "tsr.role = \"loss\"");
      return signalPassFailure();
    }
    if (!train.getBody().hasOneBlock()) {
      train.emitError("tsr-build-eval-step: @train_step must have one block");
      return signalPassFailure();
    }

    OpBuilder builder(module.getContext());
    builder.setInsertionPointAfter(train);
    auto eval = cast<func::FuncOp>(builder.clone(*train));
    eval.setSymName("eval_step");
    Block &body = eval.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Value loss = ret.getOperand(*lossIndex);
    ret->setOperands(ValueRange{loss});
    DictionaryAttr lossAttrs = train.getResultAttrDict(*lossIndex);
    eval.setType(FunctionType::get(module.getContext(), eval.getArgumentTypes(),
                                   {loss.getType()}));
    eval.setAllResultAttrs(ArrayRef<DictionaryAttr>{
        lossAttrs ? lossAttrs : builder.getDictionaryAttr({})});

    // Ops that are the identity on operand 0 in evaluation (dropout), by
    // their trait, whatever they are.
    SmallVector<Operation *> identities;
    eval.walk([&](Operation *op) {
      if (op->hasTrait<tsr::IdentityInInference>())
        identities.push_back(op);
    });
    for (Operation *op : identities) {
      if (op->getNumResults() != 1 || op->getNumOperands() < 1 ||
          op->getOperand(0).getType() != op->getResult(0).getType()) {
        op->emitOpError("is IdentityInInference but does not have one result "
                        "of its operand 0's type");
        return signalPassFailure();
      }
      op->getResult(0).replaceAllUsesWith(op->getOperand(0));
      op->erase();
    }

    // Dead code: the ops run in order, so erasing from the end removes every
    // op whose results only dead ops read.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (isOpTriviallyDead(&op))
        op.erase();

    // Arguments the loss does not read (optimizer state, parameters of
    // tied or unused copies).
    llvm::BitVector unused(eval.getNumArguments());
    for (BlockArgument arg : eval.getArguments())
      if (arg.use_empty())
        unused.set(arg.getArgNumber());
    if (failed(eval.eraseArguments(unused))) {
      eval.emitError("tsr-build-eval-step: cannot erase unused arguments");
      return signalPassFailure();
    }
  }
};

} // namespace

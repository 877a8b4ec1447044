//===- OptimizerOps.cpp - fused optimizer updates -------------------------===//

#include "dialects/tsr/TsrOps.h"

using namespace mlir;
using namespace tessera::tsr;

static LogicalResult verifyFloatParam(Operation *op, Type type) {
  if (!isa<FloatType>(cast<RankedTensorType>(type).getElementType()))
    return op->emitOpError("parameter must be a floating-point tensor, got ")
           << type;
  return success();
}

/// The learning rate is a runtime value (checked by the runtime's LR
/// schedule); the weight decay is a compile-time attribute.
static LogicalResult verifyWeightDecay(Operation *op, float wd) {
  if (!(wd >= 0))
    return op->emitOpError("weight_decay must be >= 0, got ") << wd;
  return success();
}

LogicalResult SgdUpdateOp::verify() {
  if (failed(verifyWeightDecay(*this, getWeightDecay().convertToFloat())))
    return failure();
  return verifyFloatParam(*this, getParam().getType());
}

LogicalResult AdamwUpdateOp::verify() {
  if (failed(verifyWeightDecay(*this, getWeightDecay().convertToFloat())))
    return failure();
  for (float beta : {getBeta1().convertToFloat(), getBeta2().convertToFloat()})
    if (beta < 0 || beta >= 1)
      return emitOpError("betas must be in [0, 1), got ") << beta;
  return verifyFloatParam(*this, getParam().getType());
}

//===----------------------------------------------------------------------===//
// OptimizerUpdateOpInterface
//===----------------------------------------------------------------------===//

OpOperand &SgdUpdateOp::getParamOperand() { return getParamMutable(); }
OpOperand &SgdUpdateOp::getGradOperand() { return getGradMutable(); }
OpOperand &SgdUpdateOp::getLearningRateOperand() { return getLrMutable(); }
SmallVector<Value> SgdUpdateOp::getOptimizerState() { return {}; }

OpOperand &AdamwUpdateOp::getParamOperand() { return getParamMutable(); }
OpOperand &AdamwUpdateOp::getGradOperand() { return getGradMutable(); }
OpOperand &AdamwUpdateOp::getLearningRateOperand() { return getLrMutable(); }
SmallVector<Value> AdamwUpdateOp::getOptimizerState() {
  return {getExpAvg(), getExpAvgSq()};
}

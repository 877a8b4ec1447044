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

LogicalResult SgdUpdateOp::verify() {
  if (getLr().convertToFloat() < 0)
    return emitOpError("learning rate must be >= 0");
  return verifyFloatParam(*this, getParam().getType());
}

LogicalResult AdamwUpdateOp::verify() {
  if (getLr().convertToFloat() < 0)
    return emitOpError("learning rate must be >= 0");
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
SmallVector<Value> SgdUpdateOp::getOptimizerState() { return {}; }

OpOperand &AdamwUpdateOp::getParamOperand() { return getParamMutable(); }
OpOperand &AdamwUpdateOp::getGradOperand() { return getGradMutable(); }
SmallVector<Value> AdamwUpdateOp::getOptimizerState() {
  return {getExpAvg(), getExpAvgSq()};
}

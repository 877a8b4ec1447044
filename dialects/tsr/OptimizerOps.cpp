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

//===----------------------------------------------------------------------===//
// Multi-tensor updates
//===----------------------------------------------------------------------===//

/// `tensors` is `groups` groups of N, `results` `resultGroups` groups of N
/// (N >= 1), and entry i of every group has parameter i's floating-point
/// type.
static LogicalResult verifyMultiTensor(Operation *op, ValueRange tensors,
                                       unsigned groups, unsigned resultGroups) {
  unsigned results = op->getNumResults();
  if (results == 0 || results % resultGroups != 0)
    return op->emitOpError("expects ")
           << resultGroups << " results per parameter and at least one "
           << "parameter, got " << results << " results";
  unsigned n = results / resultGroups;
  if (tensors.size() != groups * n)
    return op->emitOpError("expects ")
           << groups << " tensor operands per parameter (" << groups * n
           << " for " << n << " parameters), got " << tensors.size();
  for (unsigned i = 0; i < n; ++i) {
    Type type = tensors[i].getType();
    if (failed(verifyFloatParam(op, type)))
      return failure();
    for (unsigned k = 1; k < groups; ++k)
      if (tensors[k * n + i].getType() != type)
        return op->emitOpError("tensor operand ")
               << k * n + i << " has type " << tensors[k * n + i].getType()
               << " but parameter " << i << " has " << type;
    for (unsigned k = 0; k < resultGroups; ++k)
      if (op->getResult(k * n + i).getType() != type)
        return op->emitOpError("result ")
               << k * n + i << " has type "
               << op->getResult(k * n + i).getType() << " but parameter " << i
               << " has " << type;
  }
  return success();
}

LogicalResult MultiSgdUpdateOp::verify() {
  if (failed(verifyWeightDecay(*this, getWeightDecay().convertToFloat())))
    return failure();
  return verifyMultiTensor(*this, getTensors(), 2, 1);
}

LogicalResult MultiAdamwUpdateOp::verify() {
  if (failed(verifyWeightDecay(*this, getWeightDecay().convertToFloat())))
    return failure();
  for (float beta : {getBeta1().convertToFloat(), getBeta2().convertToFloat()})
    if (beta < 0 || beta >= 1)
      return emitOpError("betas must be in [0, 1), got ") << beta;
  return verifyMultiTensor(*this, getTensors(), 4, 3);
}

/// N, the number of parameters of a multi-tensor update with `operands`
/// operands: `groups` tensors per parameter and `scalars` trailing scalars.
static FailureOr<unsigned> multiTensorCount(std::optional<Location> loc,
                                            StringRef op, size_t operands,
                                            unsigned groups, unsigned scalars) {
  size_t tensors = operands >= scalars ? operands - scalars : 0;
  if (tensors == 0 || tensors % groups != 0)
    return emitOptionalError(loc, "'tsr.", op, "' op expects ", groups,
                             " tensor operands per parameter and at least "
                             "one parameter, got ",
                             tensors);
  return static_cast<unsigned>(tensors / groups);
}

static LogicalResult inferMultiTensorTypes(std::optional<Location> loc,
                                           StringRef op, ValueRange operands,
                                           unsigned groups, unsigned scalars,
                                           unsigned resultGroups,
                                           SmallVectorImpl<Type> &inferred) {
  FailureOr<unsigned> n =
      multiTensorCount(loc, op, operands.size(), groups, scalars);
  if (failed(n))
    return failure();
  for (unsigned k = 0; k < resultGroups; ++k)
    for (unsigned i = 0; i < *n; ++i)
      inferred.push_back(operands[i].getType());
  return success();
}

LogicalResult
MultiSgdUpdateOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                   ValueRange operands, DictionaryAttr,
                                   OpaqueProperties, RegionRange,
                                   SmallVectorImpl<Type> &inferred) {
  return inferMultiTensorTypes(loc, "multi_sgd_update", operands, 2, 1, 1,
                               inferred);
}

LogicalResult
MultiAdamwUpdateOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                     ValueRange operands, DictionaryAttr,
                                     OpaqueProperties, RegionRange,
                                     SmallVectorImpl<Type> &inferred) {
  return inferMultiTensorTypes(loc, "multi_adamw_update", operands, 4, 2, 3,
                               inferred);
}

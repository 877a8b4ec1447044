//===- TsrtDialect.cpp - Tessera runtime-program dialect ------------------===//

#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace tessera::tsrt;

#include "dialects/tsrt/TsrtDialect.cpp.inc"

void TsrtDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/tsrt/TsrtOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "dialects/tsrt/TsrtOps.cpp.inc"

LogicalResult KernelOp::verify() {
  if (getKernel().empty())
    return emitOpError("kernel name is empty");
  for (Type t : getOperation()->getOperandTypes())
    if (!cast<RankedTensorType>(t).hasStaticShape())
      return emitOpError("operands must be statically shaped");
  return success();
}

/// Shared checks: grid axes distinct and non-negative; dims in range.
static LogicalResult verifyCollective(Operation *op, ArrayRef<int16_t> axes,
                                      ArrayRef<int64_t> dims) {
  if (axes.empty())
    return op->emitOpError("needs at least one grid axis");
  for (auto [i, a] : llvm::enumerate(axes)) {
    if (a < 0)
      return op->emitOpError("grid axis ") << a << " is negative";
    if (llvm::is_contained(axes.take_front(i), a))
      return op->emitOpError("grid axis ") << a << " repeated";
  }
  int64_t rank = cast<RankedTensorType>(op->getOperand(0).getType()).getRank();
  for (int64_t d : dims)
    if (d < 0 || d >= rank)
      return op->emitOpError("dimension ")
             << d << " out of range for rank " << rank;
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (getReduction() != "sum" && getReduction() != "max")
    return emitOpError("reduction must be \"sum\" or \"max\"");
  if (getInput().getType() != getResult().getType())
    return emitOpError("result type must equal input type");
  return verifyCollective(*this, getGridAxes(), {});
}

LogicalResult AllGatherOp::verify() {
  return verifyCollective(*this, getGridAxes(), {getDim()});
}

LogicalResult ReduceScatterOp::verify() {
  return verifyCollective(*this, getGridAxes(), {getDim()});
}

LogicalResult AllToAllOp::verify() {
  return verifyCollective(*this, getGridAxes(),
                          {getSplitDim(), getConcatDim()});
}

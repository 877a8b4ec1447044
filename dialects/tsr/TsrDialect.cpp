//===- TsrDialect.cpp - Tessera tensor dialect ----------------------------===//

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tessera::tsr;

#include "dialects/tsr/TsrDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/tsr/TsrAttrs.cpp.inc"

#include "dialects/tsr/TsrInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/tsr/TsrOps.cpp.inc"

void TsrDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/tsr/TsrOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/tsr/TsrAttrs.cpp.inc"
      >();
}

Operation *TsrDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, type, elements);
}

// ShardingAttr methods and its parser/printer live in ShardingRule.cpp.

int64_t tessera::tsr::getTensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  unsigned bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}

int64_t tessera::tsr::detail::defaultFlops(Operation *op) {
  int64_t flops = 0;
  for (Type t : op->getResultTypes())
    if (auto tensor = dyn_cast<RankedTensorType>(t))
      flops += tensor.getNumElements();
  return flops;
}

int64_t tessera::tsr::detail::defaultTranscendentals(Operation *op) {
  auto elements = [](Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.hasStaticShape() ? t.getNumElements() : 0;
  };
  if (isa<ExpOp, LogOp, TanhOp, ErfOp, PowOp, GeluOp, SoftmaxOp>(op))
    return elements(op->getResult(0));
  if (isa<GeluGradOp>(op))
    return 2 * elements(op->getResult(0));
  if (isa<CrossEntropyOp>(op))
    return elements(op->getOperand(0));
  if (isa<CrossEntropyGradOp>(op))
    return 2 * elements(op->getOperand(0));
  return 0;
}

int64_t tessera::tsr::detail::defaultMeasuredUnits(Operation *op) {
  if (op->getNumOperands() == 0 ||
      !cast<CostOpInterface>(op).getGemmShapes().empty())
    return -1;
  auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  return in && in.hasStaticShape() ? in.getNumElements() : 0;
}

int64_t tessera::tsr::detail::defaultBytesAccessed(Operation *op) {
  int64_t bytes = 0;
  for (Type t : op->getOperandTypes())
    bytes += getTensorBytes(t);
  for (Type t : op->getResultTypes())
    bytes += getTensorBytes(t);
  return bytes;
}

//===- DiscardableAttrs.cpp - tsr.* attribute accessors -------------------===//

#include "dialects/tsr/DiscardableAttrs.h"

using namespace mlir;
using namespace tessera::tsr;

bool tessera::tsr::isTsrAttrName(StringRef name) {
  return name.consume_front(TsrDialect::getDialectNamespace()) &&
         name.starts_with(".");
}

StringAttr tessera::tsr::getArgRole(FunctionOpInterface fn, unsigned i) {
  return fn.getArgAttrOfType<StringAttr>(i, kRoleAttrName);
}
StringAttr tessera::tsr::getResultRole(FunctionOpInterface fn, unsigned i) {
  return fn.getResultAttrOfType<StringAttr>(i, kRoleAttrName);
}
StringAttr tessera::tsr::getArgName(FunctionOpInterface fn, unsigned i) {
  return fn.getArgAttrOfType<StringAttr>(i, kNameAttrName);
}
StringAttr tessera::tsr::getResultName(FunctionOpInterface fn, unsigned i) {
  return fn.getResultAttrOfType<StringAttr>(i, kNameAttrName);
}

ShardingAttr tessera::tsr::getArgSharding(FunctionOpInterface fn, unsigned i) {
  return fn.getArgAttrOfType<ShardingAttr>(i, kShardingAttrName);
}
ShardingAttr tessera::tsr::getResultSharding(FunctionOpInterface fn,
                                             unsigned i) {
  return fn.getResultAttrOfType<ShardingAttr>(i, kShardingAttrName);
}

ArrayAttr tessera::tsr::getGridAxes(Operation *module) {
  return module->getAttrOfType<ArrayAttr>(kGridAxesAttrName);
}
void tessera::tsr::setGridAxes(Operation *module, ArrayAttr axes) {
  module->setAttr(kGridAxesAttrName, axes);
}

IntegerAttr tessera::tsr::getForwardId(Operation *op) {
  return op->getAttrOfType<IntegerAttr>(kForwardAttrName);
}
IntegerAttr tessera::tsr::getBackwardId(Operation *op) {
  return op->getAttrOfType<IntegerAttr>(kBackwardAttrName);
}
bool tessera::tsr::isBackward(Operation *op) {
  return op->hasAttr(kBackwardAttrName);
}

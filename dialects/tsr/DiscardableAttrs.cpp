//===- DiscardableAttrs.cpp - tsr.* attribute accessors -------------------===//

#include "dialects/tsr/DiscardableAttrs.h"

using namespace mlir;
using namespace tessera::tsr;

bool tessera::tsr::isTsrAttrName(StringRef name) {
  return name.consume_front(TsrDialect::getDialectNamespace()) &&
         name.starts_with(".");
}

#define TESSERA_TSR_DEFINE_ARG_RESULT_ACCESSORS(Stem, AttrT, Name)             \
  AttrT tessera::tsr::getArg##Stem(FunctionOpInterface fn, unsigned i) {       \
    return fn.getArgAttrOfType<AttrT>(i, Name);                                \
  }                                                                            \
  AttrT tessera::tsr::getResult##Stem(FunctionOpInterface fn, unsigned i) {    \
    return fn.getResultAttrOfType<AttrT>(i, Name);                             \
  }
TESSERA_TSR_ARG_RESULT_ATTRS(TESSERA_TSR_DEFINE_ARG_RESULT_ACCESSORS)
#undef TESSERA_TSR_DEFINE_ARG_RESULT_ACCESSORS

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

IntegerAttr tessera::tsr::getTraceId(Operation *op) {
  return op->getAttrOfType<IntegerAttr>(kTraceAttrName);
}
void tessera::tsr::setTraceShardings(Operation *op,
                                     ArrayRef<Attribute> shardings) {
  if (!getTraceId(op))
    return;
  op->setAttr(kTraceShardingsAttrName,
              ArrayAttr::get(op->getContext(), shardings));
}
ArrayAttr tessera::tsr::getTraceShardings(Operation *op) {
  return op->getAttrOfType<ArrayAttr>(kTraceShardingsAttrName);
}

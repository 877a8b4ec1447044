//===- CostRules.cpp - CostOpInterface overrides --------------------------===//
//
// Ops not listed here use the interface default: one FLOP per result element
// and every operand and result read or written once.
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/TsrOps.h"

using namespace mlir;
using namespace tessera::tsr;

/// 2·batch·M·N·K: one multiply and one add per term.
int64_t MatmulOp::getFlops() {
  auto lhs = getLhs().getType();
  int64_t k =
      lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  return 2 * getResult().getType().getNumElements() * k;
}

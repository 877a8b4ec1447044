//===- ShardingRule.cpp - factor-based sharding rules ---------------------===//

#include "dialects/tsr/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace tessera::tsr;

bool ShardingRule::isReduction(int64_t f) const {
  if (factors[f].needReplication)
    return false;
  for (const TensorFactors &result : results)
    for (const DimFactors &dim : result)
      if (llvm::is_contained(dim, f))
        return false;
  return true;
}

static LogicalResult verifyTensor(Operation *op, const ShardingRule &rule,
                                  Type type,
                                  const ShardingRule::TensorFactors &dims,
                                  StringRef what, unsigned index) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return op->emitOpError("sharding rule: ") << what << " " << index
                                              << " is not a ranked tensor";
  if (static_cast<int64_t>(dims.size()) != tensor.getRank())
    return op->emitOpError("sharding rule: ")
           << what << " " << index << " has " << dims.size()
           << " factor lists for rank " << tensor.getRank();
  for (auto [d, factors] : llvm::enumerate(dims)) {
    int64_t product = 1;
    for (int64_t f : factors) {
      if (f < 0 || f >= static_cast<int64_t>(rule.factors.size()))
        return op->emitOpError("sharding rule: bad factor index ") << f;
      product *= rule.factors[f].size;
    }
    if (product != tensor.getDimSize(d))
      return op->emitOpError("sharding rule: ")
             << what << " " << index << " dim " << d << " has size "
             << tensor.getDimSize(d) << " but its factors multiply to "
             << product;
  }
  return success();
}

LogicalResult ShardingRule::verify(Operation *op) const {
  if (operands.size() != op->getNumOperands() ||
      results.size() != op->getNumResults())
    return op->emitOpError("sharding rule covers ")
           << operands.size() << " operands and " << results.size()
           << " results";
  for (auto [i, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(verifyTensor(op, *this, type, operands[i], "operand", i)))
      return failure();
  for (auto [i, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(verifyTensor(op, *this, type, results[i], "result", i)))
      return failure();
  return success();
}

ShardingRule ShardingRule::elementwise(Operation *op) {
  ShardingRule rule;
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  TensorFactors dims;
  for (int64_t size : type.getShape())
    dims.push_back({rule.addFactor(size)});
  rule.operands.assign(op->getNumOperands(), dims);
  rule.results.assign(op->getNumResults(), dims);
  return rule;
}

ShardingRule ShardingRule::replicated(Operation *op) {
  ShardingRule rule;
  auto addTensor = [&](Type type) {
    TensorFactors dims;
    for (int64_t size : cast<RankedTensorType>(type).getShape())
      dims.push_back({rule.addFactor(size, /*needReplication=*/true)});
    return dims;
  };
  for (Type t : op->getOperandTypes())
    rule.operands.push_back(addTensor(t));
  for (Type t : op->getResultTypes())
    rule.results.push_back(addTensor(t));
  return rule;
}

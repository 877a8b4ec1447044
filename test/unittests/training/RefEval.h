//===- RefEval.h - double-precision reference interpreter of tsr ops -*- C++
//-*-===//
//
// Test-only: evaluates a `func.func` of tsr ops with plain loops in double
// precision (integer and i1 tensors are held as exact doubles). Used to check
// gradient rules against central finite differences. Not fast, not a kernel
// library: every op is written as directly from its definition as possible.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_UNITTESTS_TRAINING_REFEVAL_H
#define TESSERA_TEST_UNITTESTS_TRAINING_REFEVAL_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::test {

struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  RefTensor() = default;
  explicit RefTensor(std::vector<int64_t> shape, double fill = 0.0);
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape);

/// Evaluates `func` on `args`. On an unsupported op or bad input returns
/// false and sets `error`.
bool evaluate(mlir::func::FuncOp func, const std::vector<RefTensor> &args,
              std::vector<RefTensor> &results, std::string &error);

} // namespace tessera::test

#endif // TESSERA_TEST_UNITTESTS_TRAINING_REFEVAL_H

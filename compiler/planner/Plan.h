//===- Plan.h - the parallel plan -------------------------------*- C++ -*-===//
//
// The Plan (DESIGN.md, "The Plan") is plain data: the grid and its axis
// names, the optimizer and its hyper-parameters. It is filled from flags
// today (the cost-model search comes later), printed by
// `tessera-partition --explain`, and stored in the artifact's manifest.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_PLAN_H
#define TESSERA_COMPILER_PLANNER_PLAN_H

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::planner {

struct OptimizerConfig {
  std::string name = "adamw"; ///< "sgd" or "adamw"
  double lr = 1e-3;
  /// Weight decay; negative means the optimizer's default (AdamW 0.01,
  /// SGD 0), as in torch.optim.
  double weightDecay = -1;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  double effectiveWeightDecay() const {
    return weightDecay >= 0 ? weightDecay : (name == "adamw" ? 0.01 : 0.0);
  }
};

struct Plan {
  /// Data-parallel degree (grid axis 0, "dp") and tensor-parallel degree
  /// (grid axis 1, "tp", Megatron-LM column/row splits).
  int64_t dp = 1, tp = 1;
  OptimizerConfig optimizer;

  std::vector<std::string> gridAxisNames() const { return {"dp", "tp"}; }
  std::vector<int64_t> gridShape() const { return {dp, tp}; }
  int64_t numRanks() const { return dp * tp; }

  /// Checks the degrees and optimizer settings; the error names the flag.
  llvm::Error validate() const;
  llvm::json::Object toJSON() const;
};

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_PLAN_H

//===- Executor.h - runs a plan's training step on one rank -----*- C++ -*-===//
//
// An Executor is one rank's instance of a Plan: its grid coordinates and
// communicators, and its local shard of every argument (parameters and
// frozen tensors sliced from the artifact's global values, optimizer state
// starting at zeros). `step` binds the batch, runs the program and swaps the
// updated parameters and optimizer state in for the next step.
//
// Usage (every rank):
//   auto plan = Plan::load("plan.tsr");                 // no MPI involved
//   auto grid = mpi::Grid::create(world, axes, shape);  // collective
//   auto ex = Executor::create(*plan, *grid);           // collective
//   for (s = 0; s < K; ++s) {
//     auto batch = dataset.batch(s, B, S, 0, 1);         // global batch
//     auto loss = (*ex)->step(batch->inputs, batch->labels);  // collective
//   }
//   auto weights = (*ex)->gatherWeights(0);              // collective
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_EXECUTOR_H
#define TESSERA_RUNTIME_EXECUTOR_EXECUTOR_H

#include "runtime/Tensor.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/executor/Plan.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

class Executor {
public:
  /// Binds `plan` to this rank of `grid`. Collective over grid.parent(): the
  /// program's sub-communicators are created here, in the same order on every
  /// rank. Errors: the grid's shape differs from the plan's, MPI failures.
  /// `plan` and `grid` must outlive the Executor.
  static llvm::Expected<std::unique_ptr<Executor>> create(const Plan &plan,
                                                          mpi::Grid &grid);

  /// Runs one training step on the GLOBAL batch (`tokens` and `labels` i64
  /// [global_batch, seq_len]); each is sliced to this rank by its layout.
  /// Returns the loss (the global mean, the same on every rank). Collective.
  /// On error the state is unchanged, but other ranks may be stuck in a
  /// collective: the caller should abort.
  llvm::Expected<double> step(const Tensor &tokens, const Tensor &labels);

  /// This rank's current value of argument `name` with `role`, or null.
  const Tensor *localValue(llvm::StringRef name, Role role = Role::Param) const;

  /// Assembles the global value of every param and frozen argument (manifest
  /// order, ONNX names, global shapes) on world rank `root` of the grid's
  /// parent communicator; other ranks get an empty list. Collective.
  llvm::Expected<std::vector<std::pair<std::string, Tensor>>>
  gatherWeights(int root = 0) const;

  /// Collective volumes sent by this rank (ring model), per step and total.
  mpi::TrafficCounter &traffic() { return counter; }
  const Plan &plan() const { return planRef; }
  /// This rank's grid coordinates.
  const std::vector<int64_t> &coords() const { return gridRef.coords(); }
  /// Number of steps run so far.
  int64_t stepsRun() const { return steps; }

private:
  Executor(const Plan &plan, mpi::Grid &grid) : planRef(plan), gridRef(grid) {}

  const Plan &planRef;
  mpi::Grid &gridRef;
  ExecContext ctx;
  mpi::TrafficCounter counter;
  std::vector<Tensor> state; ///< one per argument (tokens/labels: null)
  int64_t tokensArg = -1, labelsArg = -1, lossResult = -1;
  int64_t steps = 0;
};

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_EXECUTOR_H

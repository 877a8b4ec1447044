//===- StageBalance.h - cutting a layer sequence into stages ----*- C++ -*-===//
//
// The heuristic behind `tsr-pipeline-split`, as a plain library: given the
// cost of each pipeline unit (a run of forward ops between two points where
// a single activation crosses, e.g. a transformer layer's halves), cut the
// sequence into `chunks` contiguous groups so that the most expensive group
// is as cheap as possible (the classic linear-partition problem, solved
// exactly by dynamic programming in O(chunks · units²)).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_PIPELINE_STAGEBALANCE_H
#define TESSERA_PASSES_PIPELINE_STAGEBALANCE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace tessera::pipeline {

/// The first unit of each of `chunks` groups (first entry 0), minimising the
/// largest group cost; among equal optima, the earliest cuts. Requires
/// 1 <= chunks <= unitCost.size().
std::vector<int64_t> balanceChunks(llvm::ArrayRef<double> unitCost,
                                   int64_t chunks);

/// Checks user-given boundaries (`--pp-stages`): `chunks` entries, the first
/// 0, strictly increasing, each < numUnits. The error names the flag.
llvm::Error checkBoundaries(llvm::ArrayRef<int64_t> boundaries, int64_t chunks,
                            int64_t numUnits);

} // namespace tessera::pipeline

#endif // TESSERA_PASSES_PIPELINE_STAGEBALANCE_H

//===- SearchReport.h - explaining the plan search --------------*- C++ -*-===//
//
// What `tessera-partition --explain` prints about an automatic plan, and
// the same as JSON for `--explain-json`:
//
//  - the model shape and the cluster searched;
//  - the chosen plan, its predicted step time and its parts (compute,
//    exposed communication, pipeline bubble, optimizer), MFU and achieved
//    FLOP/s per device, per-rank memory (parameters, gradients, optimizer
//    state, activations) and every collective (kind, axis, bytes per call,
//    calls per step, seconds, node-local or network);
//  - the runners-up (the next 5 of SearchResult::best) with their step
//    times;
//  - each rejected region with its reason (out of memory by X GB, heads not
//    divisible, not supported by this build, ...) and its size;
//  - how many plans were considered and fitted, and the search's seconds.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_SEARCHREPORT_H
#define TESSERA_COMPILER_PLANNER_SEARCHREPORT_H

#include "compiler/planner/Search.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace tessera::planner {

void explainSearch(const SearchResult &result, const TransformerShape &shape,
                   const Cluster &cluster, const SearchOptions &options,
                   llvm::raw_ostream &os);

llvm::json::Value searchToJSON(const SearchResult &result,
                               const TransformerShape &shape,
                               const Cluster &cluster,
                               const SearchOptions &options);

/// JSON of one candidate's knobs and one prediction (used above).
llvm::json::Object toJSON(const Candidate &c);
llvm::json::Object toJSON(const Prediction &p);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_SEARCHREPORT_H

//===- Grid.h - the device grid of a parallel plan --------------*- C++ -*-===//
//
// The one place the grid (axis names and sizes) is derived from the parallel
// degrees. The Plan (compiler/planner/Plan.h, Plan::grid()) and
// tsr-sharding-annotate (from its pass options) both call gridOf, so the
// axis order the IR's layouts and collectives refer to is stated once:
//
//   dp, tp                 always (axis 0 and 1);
//   sp                     with sequence parallelism over its own axis
//                          (ulysses, ring); megatron uses tp;
//   pp, mb                 when pipelined (pp > 1 or micro-batches > 1),
//                          last: `mb` is a virtual axis over the
//                          micro-batches of one step, not ranks, and the
//                          runtime's manifest requires it to be the last
//                          grid axis (the rank grid is the axes before it).
//
// Header-only and MLIR-free: passes, the planner and tools include it.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_PLAN_GRID_H
#define TESSERA_COMMON_PLAN_GRID_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::planner {

/// A grid: axis names and sizes, in the IR's axis order (axis i of a
/// `#tsr.sharding` is names[i]).
struct GridSpec {
  std::vector<std::string> names;
  std::vector<int64_t> shape;

  /// Index of the axis `name`, or std::nullopt when the grid has none.
  std::optional<size_t> axisIndex(llvm::StringRef name) const {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        return i;
    return std::nullopt;
  }
  /// Size of the axis `name` (1 when the grid has no such axis).
  int64_t axisSize(llvm::StringRef name) const {
    std::optional<size_t> i = axisIndex(name);
    return i ? shape[*i] : 1;
  }
  bool operator==(const GridSpec &o) const {
    return names == o.names && shape == o.shape;
  }
};

/// Whether sequence parallelism `sp` has an axis of its own ("ulysses",
/// "ring"; "megatron" shards over tp, "none" has none).
inline bool spHasOwnAxis(llvm::StringRef sp) {
  return sp == "ulysses" || sp == "ring";
}

/// The grid of the degrees dp, tp, pp, microBatches and of sequence
/// parallelism `sp` ("none", "megatron", "ulysses", "ring") with `spSize`
/// ranks: [dp, tp], then [sp] for ulysses and ring, then [pp, mb] when
/// pp > 1 or microBatches > 1 (the virtual `mb` axis always last). Degrees
/// are not checked (Plan::validate and the pass check them).
inline GridSpec gridOf(int64_t dp, int64_t tp, int64_t pp, int64_t microBatches,
                       llvm::StringRef sp, int64_t spSize) {
  GridSpec grid{{"dp", "tp"}, {dp, tp}};
  if (spHasOwnAxis(sp)) {
    grid.names.push_back("sp");
    grid.shape.push_back(spSize);
  }
  if (pp > 1 || microBatches > 1) {
    grid.names.insert(grid.names.end(), {"pp", "mb"});
    grid.shape.insert(grid.shape.end(), {pp, microBatches});
  }
  return grid;
}

} // namespace tessera::planner

#endif // TESSERA_COMMON_PLAN_GRID_H

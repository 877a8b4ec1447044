//===- LayoutText.h - a tensor's sharding as text ---------------*- C++ -*-===//
//
// The notation of `tessera-partition --explain`, of Plan::shardings and of
// `--sharding FILE.json`, for a tensor of a known shape on a named grid:
//
//   replicated          no dimension split
//   [tp, -]             dim 0 split over the tp axis, dim 1 whole
//   [dp*tp, -]          dim 0 split over dp and tp (dp major: rank (d, t)
//                       holds piece d * |tp| + t)
//   [{3, 64 : tp}, -]   dim 0 (192) viewed as 3 chunks of 64, major first;
//                       each chunk split over tp (a fused QKV projection
//                       split by heads)
//
// Grammar (blanks between tokens are ignored):
//   layout := "replicated" | "[" [dim ("," dim)*] "]"
//   dim    := "-" | axes | "{" factor ("," factor)* "}"
//   factor := SIZE [":" axes]        SIZE a positive integer
//   axes   := NAME ("*" NAME)*       NAME [A-Za-z_][A-Za-z0-9_]*
// A dim's factor sizes multiply to its size; a factor's size is divisible
// by the product of its axes' sizes; an axis splits at most one factor.
//
// The same structure as `#tsr.sharding`'s sub-factors (dialects/tsr) and
// the artifact's layout JSON (compiler/artifact/Artifact.h), with axis names
// instead of indices. MLIR-free, so the planner, the passes and the tools
// share it.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_PLAN_LAYOUTTEXT_H
#define TESSERA_COMMON_PLAN_LAYOUTTEXT_H

#include "common/plan/Grid.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::planner {

/// One factor of a tensor dimension: `size` elements, split over the grid
/// axes `axes` (names, major first; empty: not split).
struct LayoutFactor {
  int64_t size = 1;
  std::vector<std::string> axes;
  bool operator==(const LayoutFactor &o) const {
    return size == o.size && axes == o.axes;
  }
};

/// A tensor's layout: per dimension, its factors major to minor (one
/// factor of the whole dimension when it has no sub-factors).
struct TensorLayout {
  std::vector<std::vector<LayoutFactor>> dims;

  /// True when no factor is split.
  bool replicated() const {
    for (const auto &dim : dims)
      for (const LayoutFactor &f : dim)
        if (!f.axes.empty())
          return false;
    return true;
  }
  /// The replicated layout of a tensor of `shape`.
  static TensorLayout replicatedOf(llvm::ArrayRef<int64_t> shape) {
    TensorLayout layout;
    for (int64_t size : shape)
      layout.dims.push_back({LayoutFactor{size, {}}});
    return layout;
  }
  bool operator==(const TensorLayout &o) const { return dims == o.dims; }
};

/// Parses `text` as the layout of a tensor of `shape`. With `grid`, every
/// axis must be one of its axes and divide its factor's size. Errors (one
/// line, naming the column and what was expected): a syntax error, an
/// unknown or repeated axis, a rank that differs from the shape's, factor
/// sizes that do not multiply to the dim's size, a factor not divisible by
/// its axes.
llvm::Expected<TensorLayout> parseLayoutText(llvm::StringRef text,
                                             llvm::ArrayRef<int64_t> shape,
                                             const GridSpec *grid = nullptr);

/// The canonical text of `layout`: "replicated" when nothing is split;
/// otherwise one entry per dim, "-" for a whole unsplit dim, the axes joined
/// by "*" for a dim of one factor, "{size[ : axes], ...}" for sub-factors.
/// parseLayoutText(printLayoutText(l), shape) == l for every l with one
/// factor per unsplit dim.
std::string printLayoutText(const TensorLayout &layout);

} // namespace tessera::planner

#endif // TESSERA_COMMON_PLAN_LAYOUTTEXT_H

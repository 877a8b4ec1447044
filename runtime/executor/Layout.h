//===- Layout.h - how a global tensor is split over the device grid -*- C++
//-*-//
//
// A layout gives, for every tensor dimension, its factors major to minor; the
// factor sizes multiply to the global dimension size. Each factor is split
// over zero or more grid axes. Several axes split a factor major to minor in
// the listed order: the rank's coordinates on those axes are linearised
// row-major in that order to give its piece index c of n = Π axis sizes, and
// the rank holds elements [c·size/n, (c+1)·size/n) of that factor.
//
// The local tensor is obtained by viewing the global tensor as the tensor of
// all factors (rank Σ factors), slicing every split factor, and flattening
// back: the local dimension is the product of the local factor sizes and the
// local data is row-major over them.
//
// Example: a [3·64] dimension (Megatron's fused QKV columns) with factors
// [{3, []}, {64, [tp]}] holds, on tp rank t of 2, the 3 chunks' columns
// [32t, 32t+32) each, concatenated: local dim 96.
//
// JSON form (plan.tsr manifest): [[{"size": 3, "axes": []},
//                                   {"size": 64, "axes": [1]}], ...].
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_LAYOUT_H
#define TESSERA_RUNTIME_EXECUTOR_LAYOUT_H

#include "runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

/// One factor of a dimension: `size` elements split over `axes` (grid axis
/// indices, major to minor; empty = replicated).
struct LayoutFactor {
  int64_t size = 1;
  std::vector<int64_t> axes;
};

/// Factors of one dimension, major to minor.
using DimLayout = std::vector<LayoutFactor>;

/// Layout of a whole tensor: one DimLayout per dimension (empty for rank 0).
struct Layout {
  std::vector<DimLayout> dims;

  /// The fully replicated layout of `shape` (one unsplit factor per dim).
  static Layout replicated(llvm::ArrayRef<int64_t> shape);

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  /// Global shape: per dim, the product of its factor sizes.
  std::vector<int64_t> globalShape() const;
  /// Local shape on a grid of `gridShape` (the same on every rank).
  std::vector<int64_t> localShape(llvm::ArrayRef<int64_t> gridShape) const;
  /// True when no factor is split.
  bool isReplicated() const;
  /// Grid axes used by any factor, sorted and unique.
  std::vector<int64_t> usedAxes() const;
};

/// Checks `layout` against a grid: axes in range and not repeated within the
/// tensor, factor sizes >= 1 and divisible by their split count. `what`
/// names the tensor in the error.
llvm::Error verifyLayout(const Layout &layout,
                         llvm::ArrayRef<int64_t> gridShape,
                         llvm::StringRef what);

/// Parses the JSON form (see the file comment) and verifies it with
/// verifyLayout. Errors name `what`.
llvm::Expected<Layout> parseLayout(const llvm::json::Value &json,
                                   llvm::ArrayRef<int64_t> gridShape,
                                   llvm::StringRef what);

/// JSON form of `layout`.
llvm::json::Array layoutToJson(const Layout &layout);

/// Coordinates of `rank` on a grid of `gridShape` whose ranks are laid out
/// row-major over the axes in `rankOrder` (axis indices, slowest first;
/// empty: the axis order, last axis fastest). See mpi::rankToCoords.
std::vector<int64_t> gridCoords(int64_t rank, llvm::ArrayRef<int64_t> gridShape,
                                llvm::ArrayRef<int64_t> rankOrder = {});

/// The local piece of `global` held by the rank at `coords`. `global` has the
/// layout's global shape (any dtype); the result is freshly allocated with the
/// local shape. The layout must be verified for `gridShape`.
Tensor sliceToLocal(const Tensor &global, const Layout &layout,
                    llvm::ArrayRef<int64_t> gridShape,
                    llvm::ArrayRef<int64_t> coords);
/// sliceToLocal into `local`, which already has the local shape and the
/// global tensor's dtype (e.g. a buffer kept from the previous step: no
/// allocation).
void sliceToLocalInto(const Tensor &global, const Layout &layout,
                      llvm::ArrayRef<int64_t> gridShape,
                      llvm::ArrayRef<int64_t> coords, Tensor &local);

/// The inverse: writes `local` (the piece of the rank at `coords`) into its
/// place in `global` (preallocated, global shape, same dtype). Ranks whose
/// coordinates differ only on axes the layout does not use write the same
/// elements.
void placeLocal(const Tensor &local, const Layout &layout,
                llvm::ArrayRef<int64_t> gridShape,
                llvm::ArrayRef<int64_t> coords, Tensor &global);

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_LAYOUT_H

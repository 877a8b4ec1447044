//===- Layout.cpp - how a global tensor is split over the device grid -----===//

#include "runtime/executor/Layout.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <set>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
namespace json = llvm::json;

static llvm::Error layoutError(llvm::StringRef what, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "layout of '" + what + "': " + msg);
}

Layout Layout::replicated(llvm::ArrayRef<int64_t> shape) {
  Layout l;
  for (int64_t d : shape)
    l.dims.push_back({LayoutFactor{d, {}}});
  return l;
}

std::vector<int64_t> Layout::globalShape() const {
  std::vector<int64_t> shape;
  for (const DimLayout &dim : dims) {
    int64_t size = 1;
    for (const LayoutFactor &f : dim)
      size *= f.size;
    shape.push_back(size);
  }
  return shape;
}

/// Number of pieces `f` is split into on a grid of `gridShape`.
static int64_t splitWays(const LayoutFactor &f,
                         llvm::ArrayRef<int64_t> gridShape) {
  int64_t n = 1;
  for (int64_t a : f.axes)
    n *= gridShape[a];
  return n;
}

/// Index of the piece of `f` held at `coords` (row-major over f.axes).
static int64_t pieceIndex(const LayoutFactor &f,
                          llvm::ArrayRef<int64_t> gridShape,
                          llvm::ArrayRef<int64_t> coords) {
  int64_t c = 0;
  for (int64_t a : f.axes)
    c = c * gridShape[a] + coords[a];
  return c;
}

std::vector<int64_t>
Layout::localShape(llvm::ArrayRef<int64_t> gridShape) const {
  std::vector<int64_t> shape;
  for (const DimLayout &dim : dims) {
    int64_t size = 1;
    for (const LayoutFactor &f : dim)
      size *= f.size / splitWays(f, gridShape);
    shape.push_back(size);
  }
  return shape;
}

bool Layout::isReplicated() const {
  for (const DimLayout &dim : dims)
    for (const LayoutFactor &f : dim)
      if (!f.axes.empty())
        return false;
  return true;
}

std::vector<int64_t> Layout::usedAxes() const {
  std::set<int64_t> axes;
  for (const DimLayout &dim : dims)
    for (const LayoutFactor &f : dim)
      axes.insert(f.axes.begin(), f.axes.end());
  return {axes.begin(), axes.end()};
}

llvm::Error exec::verifyLayout(const Layout &layout,
                               llvm::ArrayRef<int64_t> gridShape,
                               llvm::StringRef what) {
  std::set<int64_t> seen;
  for (auto [d, dim] : llvm::enumerate(layout.dims)) {
    if (dim.empty())
      return layoutError(what,
                         llvm::formatv("dimension {0} has no factors", d));
    for (const LayoutFactor &f : dim) {
      if (f.size < 1)
        return layoutError(what, llvm::formatv("dimension {0} has a factor of "
                                               "size {1}",
                                               d, f.size));
      for (int64_t a : f.axes) {
        if (a < 0 || a >= static_cast<int64_t>(gridShape.size()))
          return layoutError(
              what, llvm::formatv("dimension {0} is split over grid axis {1} "
                                  "but the grid has {2} axes",
                                  d, a, gridShape.size()));
        if (!seen.insert(a).second)
          return layoutError(what, llvm::formatv("grid axis {0} splits more "
                                                 "than one factor",
                                                 a));
      }
      int64_t n = splitWays(f, gridShape);
      if (f.size % n != 0)
        return layoutError(what, llvm::formatv("dimension {0}: factor of size "
                                               "{1} cannot be split {2} ways",
                                               d, f.size, n));
    }
  }
  return llvm::Error::success();
}

llvm::Expected<Layout> exec::parseLayout(const json::Value &value,
                                         llvm::ArrayRef<int64_t> gridShape,
                                         llvm::StringRef what) {
  const json::Array *dims = value.getAsArray();
  if (!dims)
    return layoutError(what, "expected an array of dimensions");
  Layout layout;
  for (auto [d, dimValue] : llvm::enumerate(*dims)) {
    const json::Array *factors = dimValue.getAsArray();
    if (!factors)
      return layoutError(what, llvm::formatv("dimension {0}: expected an "
                                             "array of factors",
                                             d));
    DimLayout dim;
    for (const json::Value &fv : *factors) {
      const json::Object *fo = fv.getAsObject();
      std::optional<int64_t> size = fo ? fo->getInteger("size") : std::nullopt;
      const json::Array *axes = fo ? fo->getArray("axes") : nullptr;
      if (!size || !axes)
        return layoutError(what, llvm::formatv("dimension {0}: a factor needs "
                                               "integer \"size\" and array "
                                               "\"axes\"",
                                               d));
      LayoutFactor f;
      f.size = *size;
      for (const json::Value &a : *axes) {
        std::optional<int64_t> axis = a.getAsInteger();
        if (!axis)
          return layoutError(what, llvm::formatv("dimension {0}: grid axes "
                                                 "must be integers",
                                                 d));
        f.axes.push_back(*axis);
      }
      dim.push_back(std::move(f));
    }
    layout.dims.push_back(std::move(dim));
  }
  if (llvm::Error err = verifyLayout(layout, gridShape, what))
    return std::move(err);
  return layout;
}

json::Array exec::layoutToJson(const Layout &layout) {
  json::Array dims;
  for (const DimLayout &dim : layout.dims) {
    json::Array factors;
    for (const LayoutFactor &f : dim)
      factors.push_back(
          json::Object{{"size", f.size}, {"axes", json::Array(f.axes)}});
    dims.push_back(std::move(factors));
  }
  return dims;
}

std::vector<int64_t> exec::gridCoords(int64_t rank,
                                      llvm::ArrayRef<int64_t> gridShape,
                                      llvm::ArrayRef<int64_t> rankOrder) {
  return mpi::rankToCoords(rank, gridShape, rankOrder);
}

namespace {
/// The tensor viewed as the rank-(Σ factors) tensor of all its factors, with
/// the piece one rank holds.
struct FactorView {
  std::vector<int64_t> global; ///< global size of each factor
  std::vector<int64_t> local;  ///< local size of each factor
  std::vector<int64_t> offset; ///< first global index held, per factor
};
} // namespace

static FactorView factorView(const Layout &layout,
                             llvm::ArrayRef<int64_t> gridShape,
                             llvm::ArrayRef<int64_t> coords) {
  FactorView v;
  for (const DimLayout &dim : layout.dims)
    for (const LayoutFactor &f : dim) {
      int64_t n = splitWays(f, gridShape);
      int64_t piece = f.size / n;
      v.global.push_back(f.size);
      v.local.push_back(piece);
      v.offset.push_back(pieceIndex(f, gridShape, coords) * piece);
    }
  return v;
}

/// Copies between the local piece and its place in the global tensor:
/// local -> global when `toGlobal`, else global -> local. Moves contiguous
/// runs: the innermost split factor with all the (whole) factors inside it.
static void copyPiece(const FactorView &v, size_t elemSize, char *global,
                      char *local, bool toGlobal) {
  size_t n = v.global.size();
  // Global strides (elements) of the factor view, row-major.
  std::vector<int64_t> gStride(n);
  int64_t acc = 1;
  for (size_t i = n; i-- > 0;) {
    gStride[i] = acc;
    acc *= v.global[i];
  }
  // Innermost factor that is not whole: everything from it inwards is one
  // contiguous run in both tensors.
  int64_t k = static_cast<int64_t>(n) - 1;
  while (k >= 0 && v.local[k] == v.global[k])
    --k;
  if (k < 0) { // nothing split: one run of the whole tensor
    size_t bytes = static_cast<size_t>(acc) * elemSize;
    if (toGlobal)
      std::memcpy(global, local, bytes);
    else
      std::memcpy(local, global, bytes);
    return;
  }
  int64_t run = v.local[k] * gStride[k];
  size_t runBytes = static_cast<size_t>(run) * elemSize;
  int64_t base = v.offset[k] * gStride[k];
  for (int64_t f = 0; f < k; ++f)
    base += v.offset[f] * gStride[f];
  // Odometer over the outer factors [0, k), local index idx[f] < local[f].
  for (int64_t f = 0; f < k; ++f)
    if (v.local[f] == 0)
      return;
  std::vector<int64_t> idx(static_cast<size_t>(k), 0);
  int64_t gPos = base;
  char *lp = local;
  while (true) {
    char *gp = global + static_cast<size_t>(gPos) * elemSize;
    if (toGlobal)
      std::memcpy(gp, lp, runBytes);
    else
      std::memcpy(lp, gp, runBytes);
    lp += runBytes;
    int64_t f = k - 1;
    for (; f >= 0; --f) {
      if (++idx[f] < v.local[f]) {
        gPos += gStride[f];
        break;
      }
      gPos -= (v.local[f] - 1) * gStride[f];
      idx[f] = 0;
    }
    if (f < 0)
      return;
  }
}

Tensor exec::sliceToLocal(const Tensor &global, const Layout &layout,
                          llvm::ArrayRef<int64_t> gridShape,
                          llvm::ArrayRef<int64_t> coords) {
  assert(global.shape() == layout.globalShape() && "global shape mismatch");
  Tensor local = Tensor::empty(global.dtype(), layout.localShape(gridShape));
  sliceToLocalInto(global, layout, gridShape, coords, local);
  return local;
}

void exec::sliceToLocalInto(const Tensor &global, const Layout &layout,
                            llvm::ArrayRef<int64_t> gridShape,
                            llvm::ArrayRef<int64_t> coords, Tensor &local) {
  assert(global.shape() == layout.globalShape() && "global shape mismatch");
  assert(local.dtype() == global.dtype() && "dtype mismatch");
  if (local.numel() == 0)
    return;
  copyPiece(factorView(layout, gridShape, coords), dtypeSize(global.dtype()),
            static_cast<char *>(const_cast<void *>(global.raw())),
            static_cast<char *>(local.raw()), /*toGlobal=*/false);
}

void exec::placeLocal(const Tensor &local, const Layout &layout,
                      llvm::ArrayRef<int64_t> gridShape,
                      llvm::ArrayRef<int64_t> coords, Tensor &global) {
  assert(global.shape() == layout.globalShape() && "global shape mismatch");
  assert(local.shape() == layout.localShape(gridShape) &&
         "local shape mismatch");
  assert(local.dtype() == global.dtype() && "dtype mismatch");
  if (local.numel() == 0)
    return;
  copyPiece(factorView(layout, gridShape, coords), dtypeSize(global.dtype()),
            static_cast<char *>(global.raw()),
            static_cast<char *>(const_cast<void *>(local.raw())),
            /*toGlobal=*/true);
}

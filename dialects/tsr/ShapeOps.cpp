//===- ShapeOps.cpp - reshape, transpose, slice, concat -------------------===//

#include "dialects/tsr/TsrOps.h"

using namespace mlir;
using namespace tessera::tsr;

//===----------------------------------------------------------------------===//
// ShardingConstraintOp
//===----------------------------------------------------------------------===//

LogicalResult ShardingConstraintOp::verify() {
  auto type = getInput().getType();
  ShardingAttr sharding = getSharding();
  if (sharding.getRank() != type.getRank())
    return emitOpError("sharding has ")
           << sharding.getRank() << " dimensions, the tensor "
           << type.getRank();
  if (!sharding.getPartialAxes().empty())
    return emitOpError("sharding must not be partial");
  return success();
}

//===----------------------------------------------------------------------===//
// ReshapeOp
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("cannot reshape ")
           << in.getNumElements() << " elements into " << out.getNumElements();
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(getResult().getType());
  return {};
}

//===----------------------------------------------------------------------===//
// TransposeOp
//===----------------------------------------------------------------------===//

static FailureOr<RankedTensorType>
inferTransposeType(std::optional<Location> loc, Type inputType,
                   ArrayRef<int64_t> perm) {
  auto in = dyn_cast<RankedTensorType>(inputType);
  if (!in)
    return failure();
  SmallVector<bool> seen(in.getRank(), false);
  if (static_cast<int64_t>(perm.size()) != in.getRank()) {
    if (loc)
      emitError(*loc, "permutation has ")
          << perm.size() << " entries for rank " << in.getRank();
    return failure();
  }
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p]) {
      if (loc)
        emitError(*loc, "permutation is not a permutation of [0, ")
            << in.getRank() << ")";
      return failure();
    }
    seen[p] = true;
    shape.push_back(in.getDimSize(p));
  }
  return RankedTensorType::get(shape, in.getElementType());
}

LogicalResult
TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                              ValueRange operands, DictionaryAttr attributes,
                              OpaqueProperties properties, RegionRange regions,
                              SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto type = inferTransposeType(loc, adaptor.getInput().getType(),
                                 adaptor.getPermutation());
  if (failed(type))
    return failure();
  inferred.push_back(*type);
  return success();
}

LogicalResult TransposeOp::verify() {
  auto type =
      inferTransposeType(getLoc(), getInput().getType(), getPermutation());
  if (failed(type))
    return failure();
  if (*type != getResult().getType())
    return emitOpError("result type ")
           << getResult().getType() << " should be " << *type;
  return success();
}

//===----------------------------------------------------------------------===//
// SliceOp
//===----------------------------------------------------------------------===//

static FailureOr<RankedTensorType> inferSliceType(std::optional<Location> loc,
                                                  Type inputType,
                                                  ArrayRef<int64_t> starts,
                                                  ArrayRef<int64_t> limits,
                                                  ArrayRef<int64_t> strides) {
  auto in = dyn_cast<RankedTensorType>(inputType);
  if (!in)
    return failure();
  auto fail = [&](const Twine &msg) -> FailureOr<RankedTensorType> {
    if (loc)
      emitError(*loc, msg);
    return failure();
  };
  int64_t rank = in.getRank();
  if ((int64_t)starts.size() != rank || (int64_t)limits.size() != rank ||
      (int64_t)strides.size() != rank)
    return fail("slice needs one start, limit and stride per dimension");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (strides[d] <= 0)
      return fail("slice stride of dimension " + Twine(d) +
                  " must be positive");
    if (starts[d] < 0 || limits[d] > in.getDimSize(d) || starts[d] > limits[d])
      return fail("slice of dimension " + Twine(d) + " is out of bounds [0, " +
                  Twine(in.getDimSize(d)) + ")");
    shape.push_back((limits[d] - starts[d] + strides[d] - 1) / strides[d]);
  }
  return RankedTensorType::get(shape, in.getElementType());
}

LogicalResult
SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                          ValueRange operands, DictionaryAttr attributes,
                          OpaqueProperties properties, RegionRange regions,
                          SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto type = inferSliceType(loc, adaptor.getInput().getType(),
                             adaptor.getStartIndices(),
                             adaptor.getLimitIndices(), adaptor.getStrides());
  if (failed(type))
    return failure();
  inferred.push_back(*type);
  return success();
}

LogicalResult SliceOp::verify() {
  auto type = inferSliceType(getLoc(), getInput().getType(), getStartIndices(),
                             getLimitIndices(), getStrides());
  if (failed(type))
    return failure();
  if (*type != getResult().getType())
    return emitOpError("result type ")
           << getResult().getType() << " should be " << *type;
  return success();
}

//===----------------------------------------------------------------------===//
// ConcatOp
//===----------------------------------------------------------------------===//

static FailureOr<RankedTensorType>
inferConcatType(std::optional<Location> loc, TypeRange inputs, int64_t axis) {
  auto fail = [&](const Twine &msg) -> FailureOr<RankedTensorType> {
    if (loc)
      emitError(*loc, msg);
    return failure();
  };
  if (inputs.empty())
    return fail("concat needs at least one input");
  auto first = dyn_cast<RankedTensorType>(inputs.front());
  if (!first)
    return failure();
  if (axis < 0 || axis >= first.getRank())
    return fail("concat axis " + Twine(axis) + " out of range");
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Type t : inputs) {
    auto in = cast<RankedTensorType>(t);
    if (in.getRank() != first.getRank() ||
        in.getElementType() != first.getElementType())
      return fail("concat inputs differ in rank or element type");
    for (int64_t d = 0; d < in.getRank(); ++d)
      if (d != axis && in.getDimSize(d) != first.getDimSize(d))
        return fail("concat inputs differ in dimension " + Twine(d));
    shape[axis] += in.getDimSize(axis);
  }
  return RankedTensorType::get(shape, first.getElementType());
}

LogicalResult
ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                           ValueRange operands, DictionaryAttr attributes,
                           OpaqueProperties properties, RegionRange regions,
                           SmallVectorImpl<Type> &inferred) {
  Adaptor adaptor(operands, attributes, properties, regions);
  auto type =
      inferConcatType(loc, adaptor.getInputs().getTypes(), adaptor.getAxis());
  if (failed(type))
    return failure();
  inferred.push_back(*type);
  return success();
}

LogicalResult ConcatOp::verify() {
  auto type = inferConcatType(getLoc(), getInputs().getTypes(), getAxis());
  if (failed(type))
    return failure();
  if (*type != getResult().getType())
    return emitOpError("result type ")
           << getResult().getType() << " should be " << *type;
  return success();
}

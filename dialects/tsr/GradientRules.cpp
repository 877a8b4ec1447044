// TEMPORARY scaffolding: replaced by the autodiff work. Every rule fails.
#include "dialects/tsr/TsrOps.h"
using namespace mlir;
using namespace tessera::tsr;
LogicalResult ConstantOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult AddOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult SubOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult MulOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult DivOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult PowOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult MaxOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult EqualOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult SelectOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult NegOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ExpOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult LogOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult SqrtOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult RsqrtOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult TanhOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ErfOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ReluOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult GeluOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ConvertOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult BroadcastOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ReduceSumOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ReduceMeanOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ReduceMaxOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult MatmulOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ReshapeOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult TransposeOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult SliceOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ConcatOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult GatherOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult GatherGradOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult LayerNormOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult LayerNormGradOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult SoftmaxOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult SoftmaxGradOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult ReluGradOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult GeluGradOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult CrossEntropyOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult CrossEntropyGradOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult SgdUpdateOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }
LogicalResult AdamwUpdateOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &) { return emitOpError("no gradient rule yet"); }

//===- ModelShape.h - the transformer shape of an imported model -*- C++ -*-=//
//
// Reads, from the imported @forward (shapes only: weights may be absent),
// what the analytic model needs (TransformerCost.h): the batch and
// sequence of the integer `tokens` input, the layers that hold a
// tsr.attention (their count; the heads and head size of its Q operand,
// [B·H, S, d] or [B, H, S, d]), the vocabulary (last dimension of the
// [B, S, V] logits, else the embedding table's rows), the FFN width (the
// widest weight dimension of the first attention layer other than h and
// 3h), and exact parameter counts: those read by the first attention
// layer's ops, and the rest. Layers are training::assignLayers' cuts.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_MODELSHAPE_H
#define TESSERA_COMPILER_PLANNER_MODELSHAPE_H

#include "compiler/planner/TransformerCost.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace tessera::planner {

/// The shape of the model in `module` (after import: func @forward).
/// Errors: no @forward, no integer [B, S] input, no tsr.attention, an
/// attention operand that is not [B·H, S, d] or [B, H, S, d], layers whose
/// shapes differ.
llvm::Expected<TransformerShape> transformerShapeOf(mlir::ModuleOp module);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_MODELSHAPE_H

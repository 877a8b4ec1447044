//===- ModelShape.h - the transformer shape of an imported model -*- C++ -*-=//
//
// Reads, from the imported @forward (shapes only: weights may be absent),
// what the analytic model needs (TransformerCost.h): the batch and
// sequence of the integer `tokens` input, the layers that hold a
// tsr.attention (their count; the heads and head size of its Q operand,
// [B·H, S, d] or [B, H, S, d], and the key/value heads of its K operand
// under grouped-query attention), the vocabulary (last dimension of the
// [B, S, V] logits, else the embedding table's rows), the FFN width (the
// widest weight dimension of the first block other than h and 3h), and
// exact parameter counts: those read by the blocks' ops (averaged per
// block), and the rest. A block runs from one attention's layer (the cuts
// of training::assignLayers, which also separate the attention half of a
// block from its MLP half) to the next; the last block spans as many cut
// layers as the first.
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

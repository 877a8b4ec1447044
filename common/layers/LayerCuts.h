//===- LayerCuts.h - layers of a forward pass -------------------*- C++ -*-===//
//
// A *layer* of a forward pass, for pipeline stages and for activation
// recomputation, is a maximal run of consecutive forward ops between two
// points where exactly one activation crosses (a transformer's residual
// stream between blocks). The cut points come from the IR's data flow, not
// from op names, so any model the importer reads has them.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_LAYERS_LAYERCUTS_H
#define TESSERA_COMMON_LAYERS_LAYERCUTS_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace tessera::training {

/// `forwardOps` in program order (constants and step arguments left out: a
/// value made outside `forwardOps` never counts as crossing). Sets
/// `layerOf[i]` to the layer of `forwardOps[i]` (0-based, non-decreasing)
/// and returns the number of layers: a new layer starts after op i when
/// exactly one value made by ops 0..i is read by an op after i. Empty input:
/// 0 layers.
int64_t assignLayers(llvm::ArrayRef<mlir::Operation *> forwardOps,
                     llvm::SmallVectorImpl<int64_t> &layerOf);

/// The activation crossing each layer boundary of `forwardOps` laid out by
/// assignLayers: entry l is the value made in layers 0..l and read by a
/// forward op of a later layer (the residual stream after layer l), for
/// 0 <= l < number of layers - 1.
llvm::SmallVector<mlir::Value>
layerBoundaryValues(llvm::ArrayRef<mlir::Operation *> forwardOps,
                    llvm::ArrayRef<int64_t> layerOf);

/// A training step's body split three ways: constants (all operands made by
/// constants), backward ops (tagged `tsr.bwd` by autodiff, or reading a
/// backward value) and, in program order, the forward ops (the rest).
struct StepOps {
  llvm::DenseSet<mlir::Operation *> constant, backward;
  llvm::SmallVector<mlir::Operation *> forward;
};
StepOps classifyStepOps(mlir::Block &body);

/// classifyStepOps(body).forward.
llvm::SmallVector<mlir::Operation *> forwardOpsOf(mlir::Block &body);

} // namespace tessera::training

#endif // TESSERA_COMMON_LAYERS_LAYERCUTS_H

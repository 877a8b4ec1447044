//===- Autodiff.h - reverse-mode differentiation of tsr ops ------*- C++
//-*-===//
//
// The reverse-mode core of `tsr-build-train-step`, usable on its own (the
// unit tests differentiate small functions with it). It never switches on op
// names: every op's cotangents come from `tsr::GradientOpInterface`.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_TRAINING_AUTODIFF_H
#define TESSERA_PASSES_TRAINING_AUTODIFF_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"

namespace tessera::training {

/// Emits the backward pass of `ops` (forward ops of one block, in program
/// order) at `builder`'s insertion point, which must be after all of them.
/// `seeds` give the cotangents of some outputs (e.g. the loss and 1.0).
/// Only values that depend on one of `wrt` are differentiated; cotangents of
/// a value used several times are summed with `tsr.add`. Returns one
/// cotangent per `wrt` value, null when the seeded outputs do not depend on
/// it. Forward op i of `ops`, when differentiated, is tagged `tsr.fwd = i` and
/// every op the backward emits for it `tsr.bwd = i` (used by pipeline
/// parallelism to place backward ops with their forward op). Fails, after a
/// diagnostic at the op, when an op has no gradient rule or its rule fails.
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
buildBackward(mlir::OpBuilder &builder, llvm::ArrayRef<mlir::Operation *> ops,
              llvm::ArrayRef<std::pair<mlir::Value, mlir::Value>> seeds,
              llvm::ArrayRef<mlir::Value> wrt);

} // namespace tessera::training

#endif // TESSERA_PASSES_TRAINING_AUTODIFF_H

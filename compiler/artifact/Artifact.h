//===- Artifact.h - the plan.tsr artifact -----------------------*- C++ -*-===//
//
// plan.tsr is one safetensors file (readable by the safetensors package):
//   - one F32 tensor per parameter / frozen initializer, global shape,
//     named by its ONNX name (the initial weights);
//   - "__program__": U8 bytes, the `tsrt` runtime program as MLIR bytecode,
//     with the module attribute tsrt.compiled_for = {optimizer = "adamw",
//     precision = "fp32"} (the plan it was lowered for; the runtime checks
//     the manifest's "optimizer" "name" and "precision", and the grid
//     against tsrt.grid_axes / tsrt.grid_shape);
//   - metadata "tessera.digests": the XXH3-64 digest of every other section
//     (the manifest, the program, each weight tensor), JSON {"metadata":
//     {"tessera.manifest": "xxh3:<16 hex>"}, "tensors": {NAME: "xxh3:..."}}
//     (runtime/checkpoint/SafeTensors.h). tessera-run checks each section
//     against it before parsing it and refuses an artifact without it;
//   - metadata "tessera.manifest": JSON with the plan (grid, optimizer), the
//     global batch and sequence length, and for every program argument and
//     result its name, role, dtype, global and local shape and layout; for
//     plans without pipeline parallelism, "eval": {"function": "eval_step",
//     "arguments": [...], "result": 0}, the forward-only evaluation function
//     of the same program (tsr-build-eval-step): its arguments as indices
//     into "arguments" (the training function's), its loss result's index.
//     The runtime validates the manifest against its schema (every field's
//     type and range; unknown fields are errors; runtime/executor/Plan.h).
//
// A layout gives, per tensor dimension, its factors major to minor, each with
// the grid axes splitting it: [[{"size": 3, "axes": []}, {"size": 64,
// "axes": [1]}]] is a [192] dimension of 3 chunks each split over axis 1.
// Rank r holds the r-th piece of each split factor; local data is row-major
// over the local factor sizes.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_ARTIFACT_ARTIFACT_H
#define TESSERA_COMPILER_ARTIFACT_ARTIFACT_H

#include "compiler/planner/Plan.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

namespace tessera::artifact {

/// The model's vocabulary V of an imported module (before
/// tsr-build-train-step): the last dimension of @forward's logits (the
/// result named "logits", else the first, as tsr-build-train-step picks
/// it), the class count of the loss, so every token id and label lies in
/// [0, V). 0 when @forward or a ranked logits result is missing.
int64_t vocabularyOf(mlir::ModuleOp imported);

/// Builds the manifest from the partitioned module (func @train_step with
/// `tsr.role`, `tsr.name`, `tsr.sharding` argument attributes). Emits a
/// diagnostic and returns failure on an argument it cannot describe.
/// `vocabSize` > 0 (vocabularyOf the imported model) is recorded as
/// "vocab_size", which tessera-run checks the token data against.
mlir::FailureOr<llvm::json::Object> buildManifest(mlir::ModuleOp partitioned,
                                                  const planner::Plan &plan,
                                                  int64_t vocabSize = 0);

/// Prints the plan for people (`tessera-partition --explain`): grid,
/// optimizer, every parameter's global and local shape and layout, per-rank
/// parameter bytes, and the collectives of one step by kind and grid axes.
void explain(const llvm::json::Object &manifest, mlir::ModuleOp partitioned,
             llvm::raw_ostream &os);

/// Lowers a clone of `partitioned` to the runtime program and writes the
/// artifact to `path` (via a temporary file and rename, so a failure never
/// leaves a half-written file). `dumpDir`, if set, receives the runtime
/// program as NN-lower-to-runtime.mlir.
mlir::LogicalResult
writeArtifact(mlir::ModuleOp partitioned, const planner::Plan &plan,
              llvm::StringRef path, llvm::StringRef dumpDir = "",
              unsigned dumpIndex = 0, int64_t vocabSize = 0);

/// Layout JSON (see above) of a tensor with local type `localType` and
/// sharding `sharding` (a #tsr.sharding, or null for replicated).
/// `globalShape` receives the global shape.
mlir::FailureOr<llvm::json::Array>
layoutOf(mlir::Attribute sharding, mlir::RankedTensorType localType,
         llvm::ArrayRef<int64_t> gridShape,
         llvm::SmallVectorImpl<int64_t> &globalShape);

} // namespace tessera::artifact

#endif // TESSERA_COMPILER_ARTIFACT_ARTIFACT_H

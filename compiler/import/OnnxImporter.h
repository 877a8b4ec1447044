//===- OnnxImporter.h - ONNX → tsr dialect importer -------------*- C++ -*-===//
//
// Reads an ONNX model with libonnx and builds a module holding one
// `func.func @forward` in the `tsr` dialect:
//
//   func.func @forward(%p0 {tsr.name, tsr.role = "param"|"frozen",
//                           tsr.init = dense_resource<...>}, ...,
//                      %tokens {tsr.name, tsr.role = "input"})
//       -> (tensor<...> {tsr.name = "logits"})
//
// One argument per floating-point initializer (ONNX initializer order), then
// the parameters given as graph inputs (below), then the data inputs. Shape
// subgraphs are constant-folded at import time; only values that depend on a
// graph input or a parameter become tsr ops. Common decomposed patterns
// (LayerNorm, erf-GELU, `x * 1.0`, attention) are raised afterwards by
// RaisePatterns.h.
//
// Weight-free models. Planning needs only shapes, so a model may come
// without its weights:
//   - a float initializer without data (dims but no raw_data or typed data,
//     or external data, which Tessera does not read);
//   - a float graph input without initializer in a model that also has an
//     integer graph input (the tokens): torch.onnx.export(...,
//     export_params=False) writes parameters so. Tessera feeds a model only
//     token ids, so such an input cannot be data. (In a model without
//     integer inputs, e.g. an op-level test, float inputs stay "input".)
// Such a parameter is an argument like any other (`tsr.role = "param"` or
// "frozen", `tsr.name`) but has no `tsr.init`, and the module carries
// `tsr.weights = "absent"`. Nothing the importer, the training step, the
// planner or the sharding passes do reads parameter values, so all of them
// work on such a module; only the artifact (plan.tsr), which stores the
// initial weights, cannot be written (weightsMissing() names the first
// parameter without data). Parameter memory is never allocated for it: the
// IR holds types only.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_ONNXIMPORTER_H
#define TESSERA_COMPILER_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace tessera::import {

struct ImportOptions {
  /// Initializers whose name matches this (POSIX extended, unanchored search)
  /// regex are frozen: `tsr.role = "frozen"` instead of "param". Empty: none.
  std::string freezeRegex;
  /// Apply the raising patterns (layer_norm, gelu, ...) after import.
  bool raise = true;
};

/// Reads an ONNX file with libonnx and returns a module with one
/// `func.func @forward`. On any problem emits an error diagnostic naming the
/// file, node (name + op_type) or tensor and returns nullptr. Never crashes,
/// asserts or aborts on bad input.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxFile(llvm::StringRef path,
                                                 mlir::MLIRContext &ctx,
                                                 const ImportOptions &opts);

/// Same, from serialized ModelProto bytes; `displayName` names the model in
/// diagnostics.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxBytes(llvm::StringRef bytes,
                                                  llvm::StringRef displayName,
                                                  mlir::MLIRContext &ctx,
                                                  const ImportOptions &opts);

/// Module attribute marking a weight-free import: `tsr.weights = "absent"`
/// when some parameter (`tsr.role` "param" or "frozen") of @forward has no
/// `tsr.init`. Absent when every parameter has its initial value.
inline constexpr llvm::StringLiteral kWeightsAttr = "tsr.weights";
inline constexpr llvm::StringLiteral kWeightsAbsent = "absent";

/// The name of the first parameter or frozen argument (in argument order)
/// without a `tsr.init` initial value, of @forward or, once the training step
/// is built, of @train_step; std::nullopt when the module has all its
/// weights. For the artifact writer's callers to refuse a weight-free model
/// before planning.
std::optional<std::string> weightsMissing(mlir::ModuleOp module);

/// Loads the dialects the importer's output uses (tsr, func).
void loadImportDialects(mlir::MLIRContext &ctx);

} // namespace tessera::import

#endif // TESSERA_COMPILER_IMPORT_ONNXIMPORTER_H

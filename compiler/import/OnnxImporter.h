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
// the graph inputs. Shape subgraphs are constant-folded at import time; only
// values that depend on a graph input or a parameter become tsr ops. Common
// decomposed patterns (LayerNorm, erf-GELU, `x * 1.0`) are raised afterwards
// by RaisePatterns.h.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_ONNXIMPORTER_H
#define TESSERA_COMPILER_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

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

/// Loads the dialects the importer's output uses (tsr, func).
void loadImportDialects(mlir::MLIRContext &ctx);

} // namespace tessera::import

#endif // TESSERA_COMPILER_IMPORT_ONNXIMPORTER_H

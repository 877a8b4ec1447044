//===- OnnxImportFuzzer.cpp - the ONNX importer on one input --------------===//
//
// Shared by tessera-onnx-import-fuzzer (byte mutations) and
// tessera-onnx-proto-fuzzer (ModelProto mutations).
//
//===----------------------------------------------------------------------===//

#include "test/fuzz/OnnxImportFuzzer.h"

#include "compiler/import/OnnxImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

void tessera::fuzz::importOnnxInput(const uint8_t *data, size_t size) {
  if (size > kMaxOnnxInput)
    return;
  // A fresh context per input: attributes and types are uniqued in the
  // context for its lifetime, so a shared one would grow without bound.
  mlir::MLIRContext ctx(mlir::MLIRContext::Threading::DISABLED);
  mlir::ScopedDiagnosticHandler drop(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  import::ImportOptions opts;
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  // No model directory: a model naming external data is an error, never a
  // read of some file the input names.
  (void)import::importOnnxBytes(bytes, "fuzz.onnx", ctx, opts,
                                /*modelDir=*/"");
}

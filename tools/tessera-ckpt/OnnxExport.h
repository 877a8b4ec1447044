//===- OnnxExport.h - a checkpoint's weights into an ONNX model -*- C++ -*-===//
//
// tessera-ckpt export: the input ONNX model with the checkpoint's trained
// weights (roles "param" and "frozen") as its initializers, so the result
// runs in onnxruntime with the trained weights. Which initializer holds
// which parameter is decided by the importer's own classification
// (compiler/import/Initializers.h, run on IN), so the names and shapes are
// those tessera-partition gave the parameters:
//   - a parameter named as its initializer replaces it (a parameter
//     trained as one slice is broadcast back to the initializer's shape);
//   - an untied copy "NAME#k" becomes a new initializer, and the node input
//     that reads it is renamed to it;
//   - an alias parameter (the output of Identity(I)) becomes an initializer
//     of that name and the Identity node is removed;
//   - a tied initializer (the transpose of a parameter) gets the transpose
//     of the trained parameter;
//   - other checkpoint tensors (--trainable constants, float graph inputs
//     of export_params=False models) go by name.
// Other initializers, nodes, inputs and outputs are kept as they are.
//
// External data (onnx docs/ExternalData.md): when the input keeps any
// initializer in external files, or with `externalData`, the output writes
// the replaced tensors and the input's external ones into OUT + ".data"
// (location = its file name, 16-byte aligned offsets); other initializers
// stay inline. Otherwise every initializer is inline (raw_data; a protobuf
// over 2 GiB is an error suggesting --external-data).
//
// Errors (one line each, naming the file and the initializer):
//   - OUT is IN (or the same file through a link), or OUT's data file is a
//     file IN reads external data from: refused, nothing is written;
//   - an initializer whose data type is not FLOAT, a parameter whose shape
//     in the model differs from the checkpoint's global shape, a parameter
//     of the model that the checkpoint lacks;
//   - a trained tensor of the checkpoint that is not an initializer (or
//     float graph input) of IN;
//   - unreadable or invalid IN, external data errors (ExternalData.h),
//     checkpoint read errors, write errors.
// OUT (and its data file) are written to a temporary name and renamed.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TOOLS_TESSERA_CKPT_ONNXEXPORT_H
#define TESSERA_TOOLS_TESSERA_CKPT_ONNXEXPORT_H

#include "runtime/checkpoint/DistCheckpoint.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace tessera::ckpttool {

struct ExportOptions {
  /// Write the replaced initializers to OUT.data even when IN is inline.
  bool externalData = false;
};

/// Result summary for the tool's message.
struct ExportStats {
  int64_t replaced = 0; ///< initializers set from the checkpoint
  int64_t kept = 0;     ///< other initializers
  bool external = false;
  std::string dataFile; ///< OUT.data when external
};

llvm::Expected<ExportStats>
exportOnnx(const runtime::ckpt::CheckpointReader &checkpoint,
           llvm::StringRef inPath, llvm::StringRef outPath,
           const ExportOptions &options);

} // namespace tessera::ckpttool

#endif // TESSERA_TOOLS_TESSERA_CKPT_ONNXEXPORT_H

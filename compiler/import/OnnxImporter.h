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
// One argument per trained parameter, then the parameters given as graph
// inputs (below), then the data inputs. Which floating-point initializers
// are trained parameters, which are constants (masks, rotary tables,
// scalars that the exporter folded) and which are tied or de-duplicated
// copies of others is decided by Initializers.h; `--freeze REGEX` and
// `--trainable REGEX` override it by name. Everything that does not depend
// on a graph input or a parameter is evaluated at import by one evaluator
// (ConstEval.h); only the rest becomes tsr ops. Common decomposed patterns
// (LayerNorm, erf-GELU, `x * 1.0`, attention) are raised afterwards by
// RaisePatterns.h.
//
// Tensor data may be inline or external (ExternalData.h: read from files
// next to the model, memory-mapped).
//
// Errors, each a diagnostic naming the file and the node, tensor or op: a
// model that is not ONNX, an op Tessera does not convert (one error listing
// every unsupported op type with its count and first node), a bad
// attribute or shape, a missing, short or escaping external data file.
//
// Weight-free models. Planning needs only shapes, so a model may come
// without its weights:
//   - a float initializer without data (dims but no raw_data or typed data);
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

#include "dialects/tsr/DiscardableAttrs.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace tessera::import {

/// What the importer made of each floating-point initializer (for
/// --explain): "trained", "frozen", "constant" or "tied", with the reason.
struct ImportReport {
  struct Entry {
    std::string name;
    std::string kind;
    llvm::SmallVector<int64_t, 4> shape; ///< the trained shape for parameters
    std::string reason;
  };
  std::vector<Entry> entries;
  /// Trained parameters and their elements (frozen ones not counted).
  int64_t trainedCount() const;
  int64_t trainedElements() const;
  /// Prints `trained: N parameters, E elements` and one line per entry.
  void print(llvm::raw_ostream &os) const;
};

struct ImportOptions {
  /// Parameters whose name matches this (POSIX extended, unanchored search)
  /// regex are frozen: `tsr.role = "frozen"` instead of "param". Empty: none.
  std::string freezeRegex;
  /// Initializers that Initializers.h classifies as constants and whose name
  /// matches this regex are trained parameters instead. Empty: none.
  std::string trainableRegex;
  /// Apply the raising patterns (layer_norm, gelu, ...) after import.
  bool raise = true;
  /// When set, filled with the decision for every initializer.
  ImportReport *report = nullptr;
  /// The run's seed (tessera-partition --seed, Megatron's name): the
  /// `seed` of every training-mode Dropout's `tsr.dropout`, the key of its
  /// Philox-4x32-10 mask.
  uint64_t seed = 1234;
};

/// An ONNX op type (default domain) the importer converts, and whether it
/// lowers to tsr ops when its data input depends on the model's inputs
/// (`runtime`) or is evaluated only at compile time.
struct SupportedOp {
  std::string opType;
  bool runtime;
};
/// Every supported op, sorted by name.
std::vector<SupportedOp> supportedOps();

/// Reads an ONNX file with libonnx and returns a module with one
/// `func.func @forward`. On any problem emits an error diagnostic naming the
/// file, node (name + op_type) or tensor and returns nullptr. Never crashes,
/// asserts or aborts on bad input.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxFile(llvm::StringRef path,
                                                 mlir::MLIRContext &ctx,
                                                 const ImportOptions &opts);

/// Same, from serialized ModelProto bytes; `displayName` names the model in
/// diagnostics, and external data is looked up in `modelDir` (empty: the
/// model may not use external data).
mlir::OwningOpRef<mlir::ModuleOp>
importOnnxBytes(llvm::StringRef bytes, llvm::StringRef displayName,
                mlir::MLIRContext &ctx, const ImportOptions &opts,
                llvm::StringRef modelDir = "");

/// Module attribute marking a weight-free import: `tsr.weights = "absent"`
/// when some parameter (`tsr.role` "param" or "frozen") of @forward has no
/// `tsr.init`. Absent when every parameter has its initial value.
inline constexpr llvm::StringLiteral kWeightsAttr = tsr::kWeightsAttrName;
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

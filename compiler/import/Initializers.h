//===- Initializers.h - which ONNX initializers are parameters --*- C++ -*-===//
//
// An ONNX file does not say which of its initializers are trainable
// parameters. PyTorch's exporters write parameters, buffers and values they
// folded at export alike as initializers, and both rewrite the parameters:
//   - torch.onnx (TorchScript) de-duplicates initializers of equal value:
//     the second parameter becomes `Identity(first)`, named as the
//     parameter was;
//   - the dynamo exporter (onnxscript's optimizer) merges equal initializers
//     into one that every former user reads, and folds whatever does not
//     depend on the inputs into new initializers: causal masks, rotary
//     cos/sin tables, scalars (eps, 0.5, the attention scale), a position
//     embedding's lookup of the first S rows, a token-type embedding
//     broadcast to [B, S, D];
//   - both fold `Transpose(W)` of a Linear weight into a pre-transposed
//     initializer with a generated name (`onnx::MatMul_123`, `val_123`),
//     and when W is shared (tied embeddings) the transposed copy becomes a
//     second initializer with the same values.
//
// classifyInitializers decides, for every floating-point initializer, in
// this order (the first rule that applies wins; the reason is kept for
// `tessera-partition --explain`):
//   1. Alias: `Identity(I)` of an initializer I is a parameter of its own,
//      named by the Identity's output, starting from I's values.
//   2. Tie: a 2-D initializer equal to the transpose of an earlier 2-D
//      initializer (whose values are not all equal) is that parameter,
//      transposed: the two share one parameter and its gradient.
//   3. Scalar: at most one element -> constant.
//   4. Input-independent: following the value through layout ops (Identity,
//      Cast, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Slice,
//      Split) and arithmetic with scalar constants, it never meets a value
//      that depends on the model's inputs, and is not the table of a Gather
//      or the scale/bias of a LayerNormalization -> constant (a buffer such
//      as rotary `inv_freq`, folded at import).
//   5. Attention mask: every use that meets the inputs adds or subtracts
//      it, it has two or more dims of size > 1, and every value is 0 or at
//      most -1e4 -> constant.
//   6. Position table: every such use multiplies or divides by it and it
//      has two or more dims of size > 1 (rotary cos/sin) -> constant.
//   7. Otherwise a trained parameter. If every use is elementwise and it
//      repeats along some leading dims (every slice equal), it is trained
//      as one slice broadcast along them (the exporter broadcast a smaller
//      parameter before folding it).
//   8. Untie: a trained parameter whose values are all equal (e.g. the
//      ones of fresh norms) read directly by k > 1 nodes is k parameters,
//      one per node, with the same initial values: equal initial values are
//      what the exporters' de-duplication merges, and a genuinely shared
//      weight (tied embeddings) is never constant.
// Initializers without data (a weight-free model) are parameters, except
// scalars and the structural rules (3, 4, 6).
//
// The user overrides the result by name with --freeze (trained -> frozen)
// and --trainable (constant -> trained), applied by the importer.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_IMPORT_INITIALIZERS_H
#define TESSERA_COMPILER_IMPORT_INITIALIZERS_H

#include "compiler/import/ConstTensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <string>
#include <vector>

namespace onnx {
class GraphProto;
} // namespace onnx

namespace tessera::import {

/// A floating-point initializer as the classifier sees it.
struct InitView {
  std::string name;
  int32_t dtype = kFloat;
  Shape dims;
  /// Little-endian element bytes, or empty when the file holds no values.
  llvm::ArrayRef<char> data;
  bool hasData = false;
};

/// One trained parameter (a function argument of @forward).
struct ParamPlan {
  std::string name;   ///< argument name (tsr.name)
  std::string source; ///< the initializer whose values it starts from
  Shape shape;        ///< the argument's shape
  /// Leading dims the initializer repeats along: the argument is the first
  /// slice (size 1 there) and is broadcast back to the initializer's shape.
  llvm::SmallVector<int64_t> repeatDims;
  std::string reason;
};

/// What the importer does with the initializers of a graph.
struct InitializerPlan {
  std::vector<ParamPlan> params;
  /// Initializers and aliases folded as constants, with the reason.
  llvm::StringMap<std::string> constants;
  /// Tied copies: name -> the parameter it is the transpose of.
  llvm::StringMap<std::string> transposedTies;
  /// Node inputs that read an untied copy: (node index, input slot) -> the
  /// copy's parameter name.
  std::map<std::pair<int, int>, std::string> renamedInputs;
  /// Identity nodes whose output is an alias parameter (not converted).
  llvm::DenseSet<int> aliasNodes;
};

/// Classifies `inits` (the graph's floating-point initializers, in file
/// order) of `graph` per the rules above. `dataInputs` are the graph inputs
/// that carry data (the tokens), from which input dependence flows.
InitializerPlan classifyInitializers(const onnx::GraphProto &graph,
                                     llvm::ArrayRef<InitView> inits,
                                     const llvm::StringSet<> &dataInputs);

} // namespace tessera::import

#endif // TESSERA_COMPILER_IMPORT_INITIALIZERS_H

//===- OnnxImporter.cpp - ONNX → tsr dialect importer ---------------------===//
//
// Walks the ONNX graph in (checked) topological order, keeping for every value
// name either a compile-time constant (ConstTensor) or an MLIR Value. Nodes
// whose inputs are all constants are evaluated here (shape subgraphs); the
// rest become tsr ops with explicit broadcasts. libonnx/protobuf may throw:
// this file is built with exceptions and catches everything at its boundary.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/OnnxImporter.h"
#include "common/io/FileSafety.h"
#include "compiler/import/ConstEval.h"
#include "compiler/import/ConstTensor.h"
#include "compiler/import/ExternalData.h"
#include "compiler/import/Initializers.h"
#include "compiler/import/RaisePatterns.h"
#include "compiler/import/TensorProtoBytes.h"

#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>

using namespace mlir;
namespace tsr = tessera::tsr;

namespace tessera::import {
namespace {

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

/// Normalises an axis in [-rank, rank) to [0, rank); nullopt when out of range.
std::optional<int64_t> normAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

/// A value in the environment: a compile-time constant, an MLIR value, or
/// both (a constant already materialised as tsr.constant).
struct Slot {
  Value value;
  std::shared_ptr<const ConstTensor> cst;
};

using eval::Bin;
using eval::Un;

//===----------------------------------------------------------------------===//
// Importer
//===----------------------------------------------------------------------===//

class Importer {
public:
  Importer(MLIRContext &ctx, StringRef file, const ImportOptions &opts,
           StringRef modelDir)
      : ctx(ctx), file(file.str()), opts(opts),
        fileLoc(FileLineColLoc::get(&ctx, file, 0, 0)), b(&ctx),
        external(modelDir.str()) {}

  OwningOpRef<ModuleOp> run(const onnx::ModelProto &model);

private:
  // Diagnostics ------------------------------------------------------------
  InFlightDiagnostic error() { return emitError(fileLoc); }
  std::string nodeLabel(const onnx::NodeProto &n) {
    std::string name = n.name();
    if (name.empty() && n.output_size() > 0)
      name = "<output " + n.output(0) + ">";
    return "node '" + name + "' (" + n.op_type() + ")";
  }
  InFlightDiagnostic nodeError(const onnx::NodeProto &n) {
    return emitError(fileLoc) << nodeLabel(n) << ": ";
  }
  Location nodeLoc(const onnx::NodeProto &n) {
    std::string name = n.name().empty() ? n.op_type() : n.name();
    return NameLoc::get(StringAttr::get(&ctx, name), fileLoc);
  }

  // Attributes ---------------------------------------------------------------
  const onnx::AttributeProto *attr(const onnx::NodeProto &n, StringRef name) {
    for (const auto &a : n.attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  FailureOr<int64_t> attrInt(const onnx::NodeProto &n, StringRef name,
                             int64_t dflt) {
    const auto *a = attr(n, name);
    if (!a)
      return dflt;
    if (a->type() != onnx::AttributeProto::INT)
      return nodeError(n) << "attribute '" << name << "' must be an int";
    return a->i();
  }
  FailureOr<float> attrFloat(const onnx::NodeProto &n, StringRef name,
                             float dflt) {
    const auto *a = attr(n, name);
    if (!a)
      return dflt;
    if (a->type() != onnx::AttributeProto::FLOAT)
      return nodeError(n) << "attribute '" << name << "' must be a float";
    return a->f();
  }
  FailureOr<std::optional<Shape>> attrInts(const onnx::NodeProto &n,
                                           StringRef name) {
    const auto *a = attr(n, name);
    if (!a)
      return std::optional<Shape>();
    if (a->type() != onnx::AttributeProto::INTS)
      return nodeError(n) << "attribute '" << name << "' must be ints";
    return std::optional<Shape>(Shape(a->ints().begin(), a->ints().end()));
  }
  FailureOr<std::string> attrString(const onnx::NodeProto &n, StringRef name,
                                    StringRef dflt) {
    const auto *a = attr(n, name);
    if (!a)
      return dflt.str();
    if (a->type() != onnx::AttributeProto::STRING)
      return nodeError(n) << "attribute '" << name << "' must be a string";
    return a->s();
  }

  // Tensors ------------------------------------------------------------------
  /// The bytes of `t` (little-endian, one element after another): inline
  /// raw_data, external data, or the typed fields re-encoded into `scratch`.
  FailureOr<TensorBytes> tensorBytes(const onnx::TensorProto &t,
                                     const std::string &what,
                                     std::vector<char> &scratch);
  FailureOr<ConstTensor> readTensor(const onnx::TensorProto &t,
                                    const std::string &what);
  FailureOr<DenseResourceElementsAttr>
  readInitializerBlob(const onnx::TensorProto &t, RankedTensorType type);
  /// A resource attribute holding `raw` (zero-copy for mapped external
  /// data whose address suits the element type).
  DenseResourceElementsAttr blobAttr(StringRef name, RankedTensorType type,
                                     const TensorBytes &raw);

  // Environment --------------------------------------------------------------
  bool hasInput(const onnx::NodeProto &n, int idx) {
    return idx < n.input_size() && !n.input(idx).empty();
  }
  FailureOr<Slot *> slot(const onnx::NodeProto &n, int idx);
  /// The input as an MLIR value (materialising constants).
  FailureOr<Value> value(const onnx::NodeProto &n, int idx);
  /// The input as a compile-time constant; error if it is not one.
  FailureOr<const ConstTensor *> constInput(const onnx::NodeProto &n, int idx,
                                            StringRef what);
  /// The input as a list of int64 (a constant 0-D or 1-D tensor).
  FailureOr<Shape> constInts(const onnx::NodeProto &n, int idx, StringRef what);
  Shape shapeOf(const Slot &s) {
    if (s.cst)
      return s.cst->shape;
    return Shape(tensorType(s.value).getShape());
  }
  int32_t dtypeOf(const Slot &s) {
    if (s.cst)
      return s.cst->dtype;
    return typeToDType(tensorType(s.value).getElementType());
  }
  Value materialize(const ConstTensor &c, Location loc);
  LogicalResult bind(const onnx::NodeProto &n, int idx, Slot s);
  LogicalResult define(const onnx::NodeProto &n, int idx, Value v);
  LogicalResult defineConst(const onnx::NodeProto &n, int idx, ConstTensor c);
  /// defineConst of an evaluator result, or the evaluator's error.
  LogicalResult defineEval(const onnx::NodeProto &n, int idx,
                           llvm::Expected<ConstTensor> c);
  /// Whether every present input of `n` is a compile-time constant.
  bool allConstant(const onnx::NodeProto &n);
  /// The error for an op that Tessera evaluates only at compile time (it has
  /// no tsr op) but whose input depends on the model's inputs.
  LogicalResult constantOnly(const onnx::NodeProto &n);

  // Building -------------------------------------------------------------
  RankedTensorType withShape(Value v, ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, tensorType(v).getElementType());
  }
  Value reshape(Value v, ArrayRef<int64_t> shape, Location loc);
  FailureOr<Value> broadcastTo(const onnx::NodeProto &n, Value v,
                               ArrayRef<int64_t> shape, Location loc);
  Value splatLike(double v, Type elem, ArrayRef<int64_t> shape, Location loc);

  // Node conversion ------------------------------------------------------
  LogicalResult convertNode(const onnx::NodeProto &n);
  LogicalResult convertConstant(const onnx::NodeProto &n);
  LogicalResult convertBinary(const onnx::NodeProto &n, Bin kind);
  LogicalResult convertUnary(const onnx::NodeProto &n, Un kind);
  LogicalResult convertVariadic(const onnx::NodeProto &n, Bin kind);
  LogicalResult convertWhere(const onnx::NodeProto &n);
  LogicalResult convertCast(const onnx::NodeProto &n);
  LogicalResult convertShape(const onnx::NodeProto &n);
  LogicalResult convertSize(const onnx::NodeProto &n);
  LogicalResult convertReshapeLike(const onnx::NodeProto &n);
  LogicalResult convertTranspose(const onnx::NodeProto &n);
  LogicalResult convertSlice(const onnx::NodeProto &n);
  LogicalResult convertSplit(const onnx::NodeProto &n);
  LogicalResult convertConcat(const onnx::NodeProto &n);
  LogicalResult convertGather(const onnx::NodeProto &n);
  LogicalResult convertExpand(const onnx::NodeProto &n);
  LogicalResult convertRange(const onnx::NodeProto &n);
  LogicalResult convertConstantOfShape(const onnx::NodeProto &n);
  LogicalResult convertMatMul(const onnx::NodeProto &n);
  LogicalResult convertGemm(const onnx::NodeProto &n);
  LogicalResult convertSoftmax(const onnx::NodeProto &n);
  LogicalResult convertLayerNorm(const onnx::NodeProto &n);
  LogicalResult convertReduce(const onnx::NodeProto &n);
  LogicalResult convertDropout(const onnx::NodeProto &n);
  /// @forward's "rng_step" argument (0-D f32, name "rng.step"), added at the
  /// end of the arguments by the first training-mode Dropout.
  Value rngStep();
  LogicalResult convertGelu(const onnx::NodeProto &n);
  LogicalResult convertTrilu(const onnx::NodeProto &n);
  LogicalResult convertCumSum(const onnx::NodeProto &n);
  LogicalResult convertIsInf(const onnx::NodeProto &n);
  LogicalResult convertPad(const onnx::NodeProto &n);

public:
  /// How the importer handles one ONNX op type (default domain).
  struct OpHandler {
    std::function<LogicalResult(Importer &, const onnx::NodeProto &)> convert;
    /// The op lowers to tsr ops when its data input depends on the model's
    /// inputs; otherwise it is evaluated only at compile time (ConstEval.h).
    bool runtime;
  };
  /// Every ONNX op type the importer converts.
  static const llvm::StringMap<OpHandler> &handlers();

private:
  // Graph (run's steps) -------------------------------------------------
  /// A graph input: a data input, or a float input that stands for a
  /// parameter (export_params=False).
  struct GraphArg {
    std::string name;
    RankedTensorType type;
    bool isParam;
  };
  /// What run's steps read and write, in the order run fills it.
  struct GraphState {
    std::optional<llvm::Regex> freeze, trainable;
    llvm::StringSet<> initNames;
    std::vector<std::pair<std::string, ConstTensor>> constInits;
    std::vector<InitView> views;
    llvm::StringMap<TensorBytes> floatBytes;
    std::deque<std::vector<char>> scratch; ///< owns re-encoded typed data
    SmallVector<GraphArg> graphArgs;
    llvm::StringSet<> dataInputs;
    InitializerPlan plan;
    llvm::StringMap<const InitView *> viewByName;
    SmallVector<Type> argTypes;
    SmallVector<NamedAttrList> argAttrs;
    SmallVector<std::string> argNames;
    bool weightsAbsent = false;
    ImportReport localReport; ///< the report when opts.report is null
  };
  LogicalResult readOpset(const onnx::ModelProto &model);
  LogicalResult compileRegex(const std::string &re, StringRef flag,
                             std::optional<llvm::Regex> &out);
  /// Every op the model uses that Tessera does not convert, in one error.
  LogicalResult checkSupported(const onnx::GraphProto &g);
  LogicalResult readInitializers(const onnx::GraphProto &g, GraphState &st);
  LogicalResult readGraphInputs(const onnx::GraphProto &g, GraphState &st);
  /// Classifies the initializers and applies --trainable.
  void planInitializers(const onnx::GraphProto &g, GraphState &st);
  /// The bytes of the first slice of `v` along `p.repeatDims`, in `slice`.
  TensorBytes firstSlice(const ParamPlan &p, const InitView &v, TensorBytes raw,
                         std::vector<char> &slice);
  /// @forward's argument types and attributes, and the import report.
  void buildArguments(GraphState &st);
  /// Binds the arguments, constants and tied copies in the environment.
  LogicalResult bindArguments(const onnx::GraphProto &g, func::FuncOp func,
                              GraphState &st);
  LogicalResult convertNodes(const onnx::GraphProto &g,
                             const InitializerPlan &plan);
  /// The return of @forward, checked against the declared graph outputs.
  LogicalResult buildResults(const onnx::GraphProto &g, func::FuncOp func,
                             ArrayRef<Type> argTypes);

  FailureOr<Value> buildMatmul(const onnx::NodeProto &n, Value a, Value bv,
                               Location loc);
  FailureOr<Value> buildSlice(Value v, ArrayRef<int64_t> start,
                              ArrayRef<int64_t> limit,
                              ArrayRef<int64_t> strides, Location loc);

  MLIRContext &ctx;
  std::string file;
  const ImportOptions &opts;
  Location fileLoc;
  OpBuilder b;
  int64_t opset = 0;
  llvm::StringMap<Slot> env;
  llvm::StringSet<> used;   ///< names read by some node or graph output
  func::FuncOp forwardFunc; ///< @forward, while converting
  SmallVector<Type> *forwardArgTypes = nullptr; ///< its argument types
  Value rngStepArg;          ///< rngStep()'s argument, once added
  int64_t nextDropoutId = 0; ///< op_id of the next training-mode Dropout
  ExternalDataReader external;
};

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

/// Whether a float initializer of `n` elements has values: inline (raw_data
/// or typed data) or in an external file. One with dims but neither (e.g. a
/// shapes-only export) has unknown values. A tensor with some but not all of
/// its data is not "without data": reading it reports the size mismatch.
bool initializerHasData(const onnx::TensorProto &t, int64_t n) {
  if (ExternalDataReader::isExternal(t) || n == 0)
    return true;
  return !t.raw_data().empty() || t.float_data_size() > 0 ||
         t.double_data_size() > 0 || t.int32_data_size() > 0 ||
         t.int64_data_size() > 0 || t.uint64_data_size() > 0;
}

FailureOr<TensorBytes> Importer::tensorBytes(const onnx::TensorProto &t,
                                             const std::string &what,
                                             std::vector<char> &scratch) {
  int32_t dt = t.data_type();
  int64_t bytes = dtypeBytes(dt);
  if (!bytes || !dtypeToType(dt, &ctx))
    return error() << what << " '" << t.name() << "' has unsupported type "
                   << dtypeName(dt);
  Shape dims(t.dims().begin(), t.dims().end());
  int64_t n = numElements(dims);
  if (n < 0 || n > (int64_t(1) << 40) / bytes)
    return error() << what << " '" << t.name() << "' has invalid dims "
                   << shapeStr(dims);
  if (ExternalDataReader::isExternal(t)) {
    auto r = external.read(t, n * bytes);
    if (!r)
      return error() << llvm::toString(r.takeError());
    return *r;
  }
  auto raw = inlineTensorBytes(t, what, n, scratch);
  if (!raw)
    return error() << llvm::toString(raw.takeError());
  return TensorBytes{*raw, nullptr};
}

FailureOr<ConstTensor> Importer::readTensor(const onnx::TensorProto &t,
                                            const std::string &what) {
  int32_t dt = t.data_type();
  if (!dtypeToType(dt, &ctx))
    return error() << what << " '" << t.name() << "' has unsupported type "
                   << dtypeName(dt);
  Shape dims(t.dims().begin(), t.dims().end());
  int64_t n = numElements(dims);
  if (n < 0)
    return error() << what << " '" << t.name() << "' has invalid dims "
                   << shapeStr(dims);
  if (n > kMaxFoldElements * 4)
    return error() << what << " '" << t.name() << "' is too large (" << n
                   << " elements) for a constant";
  std::vector<char> scratch;
  auto raw = tensorBytes(t, what, scratch);
  if (failed(raw))
    return failure();
  return decodeTensor(dt, dims, raw->bytes);
}

FailureOr<DenseResourceElementsAttr>
Importer::readInitializerBlob(const onnx::TensorProto &t,
                              RankedTensorType type) {
  std::vector<char> scratch;
  auto raw = tensorBytes(t, "initializer", scratch);
  if (failed(raw))
    return failure();
  return blobAttr(t.name(), type, *raw);
}

DenseResourceElementsAttr Importer::blobAttr(StringRef name,
                                             RankedTensorType type,
                                             const TensorBytes &raw) {
  size_t align =
      static_cast<size_t>(dtypeBytes(typeToDType(type.getElementType())));
  if (align == 0)
    align = 1;
  AsmResourceBlob blob;
  if (raw.owner && reinterpret_cast<uintptr_t>(raw.bytes.data()) % align == 0) {
    // External data: a view of the mapped file, kept alive by the blob.
    std::shared_ptr<const llvm::MemoryBuffer> owner = raw.owner;
    blob = AsmResourceBlob(
        raw.bytes, align,
        [owner](void *, size_t, size_t) mutable { owner.reset(); },
        /*dataIsMutable=*/false);
  } else {
    blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(raw.bytes, align);
  }
  // Resource keys must be printable as bare identifiers.
  std::string key;
  for (char ch : name)
    key +=
        (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.')
            ? ch
            : '_';
  if (key.empty() || !std::isalpha(static_cast<unsigned char>(key[0])))
    key = "p_" + key;
  return DenseResourceElementsAttr::get(type, key, std::move(blob));
}

//===----------------------------------------------------------------------===//
// Environment
//===----------------------------------------------------------------------===//

FailureOr<Slot *> Importer::slot(const onnx::NodeProto &n, int idx) {
  if (!hasInput(n, idx))
    return nodeError(n) << "required input #" << idx << " is missing";
  auto it = env.find(n.input(idx));
  if (it == env.end())
    return nodeError(n) << "input '" << n.input(idx)
                        << "' is not defined (or comes from an unsupported "
                           "optional output)";
  return &it->second;
}

Value Importer::materialize(const ConstTensor &c, Location loc) {
  DenseElementsAttr attr = c.toAttr(&ctx);
  if (!attr)
    return {};
  return tsr::ConstantOp::create(b, loc, attr.getType(), attr);
}

FailureOr<Value> Importer::value(const onnx::NodeProto &n, int idx) {
  auto s = slot(n, idx);
  if (failed(s))
    return failure();
  Slot &sl = **s;
  if (!sl.value) {
    sl.value = materialize(*sl.cst, nodeLoc(n));
    if (!sl.value)
      return nodeError(n) << "cannot materialise constant '" << n.input(idx)
                          << "' of type " << dtypeName(sl.cst->dtype);
  }
  return sl.value;
}

FailureOr<const ConstTensor *> Importer::constInput(const onnx::NodeProto &n,
                                                    int idx, StringRef what) {
  auto s = slot(n, idx);
  if (failed(s))
    return failure();
  if (!(*s)->cst)
    return nodeError(n) << what << " (input '" << n.input(idx)
                        << "') must be a compile-time constant; it depends "
                           "on a graph input or parameter";
  return (*s)->cst.get();
}

FailureOr<Shape> Importer::constInts(const onnx::NodeProto &n, int idx,
                                     StringRef what) {
  auto c = constInput(n, idx, what);
  if (failed(c))
    return failure();
  if ((*c)->shape.size() > 1 || (*c)->isFloat())
    return nodeError(n) << what << " must be a 0-D or 1-D integer tensor";
  Shape out;
  for (int64_t k = 0; k < (*c)->size(); ++k)
    out.push_back((*c)->getI(k));
  return out;
}

/// Whether a tensor of shape `s` is too large to describe: the product of
/// its non-zero dimensions exceeds numElements' limit (2^40). Every value the
/// importer binds, and every graph input, is bounded by it, so products of
/// any of a value's dimensions (strides, flattened sizes) cannot overflow
/// int64 in the converters (fuzzer findings in Concat, Flatten, Softmax).
static bool tooManyElements(llvm::ArrayRef<int64_t> s) {
  Shape nonzero;
  for (int64_t d : s)
    if (d != 0)
      nonzero.push_back(d);
  return numElements(nonzero) < 0;
}

LogicalResult Importer::bind(const onnx::NodeProto &n, int idx, Slot s) {
  if (idx >= n.output_size() || n.output(idx).empty())
    return success();
  if (Shape shape = shapeOf(s); tooManyElements(shape))
    return nodeError(n) << "output '" << n.output(idx) << "' of shape "
                        << shapeStr(shape) << " has too many elements";
  if (!env.try_emplace(n.output(idx), std::move(s)).second)
    return nodeError(n) << "output '" << n.output(idx)
                        << "' is already defined";
  return success();
}

LogicalResult Importer::define(const onnx::NodeProto &n, int idx, Value v) {
  return bind(n, idx, Slot{v, nullptr});
}

LogicalResult Importer::defineConst(const onnx::NodeProto &n, int idx,
                                    ConstTensor c) {
  if (idx >= n.output_size() || n.output(idx).empty())
    return success();
  if (numElements(c.shape) != c.size())
    return nodeError(n) << "internal error: folded constant has " << c.size()
                        << " elements for shape " << shapeStr(c.shape);
  return bind(n, idx,
              Slot{Value(), std::make_shared<const ConstTensor>(std::move(c))});
}

LogicalResult Importer::defineEval(const onnx::NodeProto &n, int idx,
                                   llvm::Expected<ConstTensor> c) {
  if (!c)
    return nodeError(n) << llvm::toString(c.takeError());
  return defineConst(n, idx, std::move(*c));
}

bool Importer::allConstant(const onnx::NodeProto &n) {
  for (int k = 0; k < n.input_size(); ++k) {
    if (n.input(k).empty())
      continue;
    auto it = env.find(n.input(k));
    if (it == env.end() || !it->second.cst)
      return false;
  }
  return true;
}

LogicalResult Importer::constantOnly(const onnx::NodeProto &n) {
  std::string dep;
  for (int k = 0; k < n.input_size() && dep.empty(); ++k) {
    auto it = env.find(n.input(k));
    if (!n.input(k).empty() && it != env.end() && !it->second.cst)
      dep = n.input(k);
  }
  return nodeError(n) << "Tessera evaluates " << n.op_type()
                      << " only at compile time (it has no tsr op), but its "
                         "input '"
                      << dep << "' depends on the model's inputs or parameters";
}

//===----------------------------------------------------------------------===//
// Building helpers
//===----------------------------------------------------------------------===//

Value Importer::reshape(Value v, ArrayRef<int64_t> shape, Location loc) {
  if (tensorType(v).getShape() == shape)
    return v;
  return tsr::ReshapeOp::create(b, loc, withShape(v, shape), v);
}

Value Importer::splatLike(double v, Type elem, ArrayRef<int64_t> shape,
                          Location loc) {
  auto type = RankedTensorType::get(shape, elem);
  Attribute scalar;
  if (isa<FloatType>(elem))
    scalar = FloatAttr::get(elem, v);
  else
    scalar = IntegerAttr::get(elem, static_cast<int64_t>(v));
  return tsr::ConstantOp::create(b, loc, type,
                                 DenseElementsAttr::get(type, scalar));
}

FailureOr<Value> Importer::broadcastTo(const onnx::NodeProto &n, Value v,
                                       ArrayRef<int64_t> shape, Location loc) {
  auto type = tensorType(v);
  if (type.getShape() == shape)
    return v;
  if (type.getRank() > static_cast<int64_t>(shape.size()))
    return nodeError(n) << "cannot broadcast " << shapeStr(type.getShape())
                        << " to " << shapeStr(shape);
  size_t offset = shape.size() - type.getRank();
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.getDimSize(d) != 1 && type.getDimSize(d) != shape[d + offset])
      return nodeError(n) << "cannot broadcast " << shapeStr(type.getShape())
                          << " to " << shapeStr(shape);
  auto target = withShape(v, shape);
  // A splat constant is cheaper re-created at the target shape.
  if (auto cst = v.getDefiningOp<tsr::ConstantOp>())
    if (auto dense = dyn_cast<DenseElementsAttr>(cst.getValue()))
      if (dense.isSplat())
        return Value(tsr::ConstantOp::create(
            b, loc, target,
            DenseElementsAttr::get(target, dense.getSplatValue<Attribute>())));
  if (offset > 0) {
    Shape padded(offset, 1);
    llvm::append_range(padded, type.getShape());
    v = reshape(v, padded, loc);
    if (ArrayRef<int64_t>(padded) == shape)
      return v;
  }
  return Value(tsr::BroadcastOp::create(b, loc, target, v));
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult Importer::convertBinary(const onnx::NodeProto &n, Bin kind) {
  auto sa = slot(n, 0), sb = slot(n, 1);
  if (failed(sa) || failed(sb))
    return failure();
  Shape shA = shapeOf(**sa), shB = shapeOf(**sb);
  auto out = broadcastShapes(shA, shB);
  if (!out)
    return nodeError(n) << "operand shapes " << shapeStr(shA) << " and "
                        << shapeStr(shB) << " do not broadcast";
  int32_t dtA = dtypeOf(**sa), dtB = dtypeOf(**sb);
  if (dtA != dtB && kind != Bin::Pow)
    return nodeError(n) << "operand types differ: " << dtypeName(dtA) << " vs "
                        << dtypeName(dtB);

  // Both constant: evaluate.
  if ((*sa)->cst && (*sb)->cst)
    return defineEval(n, 0, eval::binary(kind, *(*sa)->cst, *(*sb)->cst, *out));

  Location loc = nodeLoc(n);
  auto va = value(n, 0), vb = value(n, 1);
  if (failed(va) || failed(vb))
    return failure();
  Value lhs = *va, rhs = *vb;
  if (dtA != dtB) { // Pow with a differently typed exponent
    rhs = tsr::ConvertOp::create(b, loc,
                                 withShape(rhs, tensorType(rhs).getShape())
                                     .clone(tensorType(lhs).getElementType()),
                                 rhs);
  }
  auto bl = broadcastTo(n, lhs, *out, loc);
  auto br = broadcastTo(n, rhs, *out, loc);
  if (failed(bl) || failed(br))
    return failure();
  auto type = withShape(lhs, *out);
  Value r;
  switch (kind) {
  case Bin::Add:
    r = tsr::AddOp::create(b, loc, type, *bl, *br);
    break;
  case Bin::Sub:
    r = tsr::SubOp::create(b, loc, type, *bl, *br);
    break;
  case Bin::Mul:
    r = tsr::MulOp::create(b, loc, type, *bl, *br);
    break;
  case Bin::Div:
    r = tsr::DivOp::create(b, loc, type, *bl, *br);
    break;
  case Bin::Pow:
    r = tsr::PowOp::create(b, loc, type, *bl, *br);
    break;
  case Bin::Max:
    r = tsr::MaxOp::create(b, loc, type, *bl, *br);
    break;
  case Bin::Min: // min(a, b) = -max(-a, -b)
    r = tsr::NegOp::create(
        b, loc, type,
        tsr::MaxOp::create(b, loc, type, tsr::NegOp::create(b, loc, type, *bl),
                           tsr::NegOp::create(b, loc, type, *br)));
    break;
  case Bin::Equal:
    r = tsr::EqualOp::create(
        b, loc, RankedTensorType::get(*out, IntegerType::get(&ctx, 1)), *bl,
        *br);
    break;
  default:
    return constantOnly(n);
  }
  return define(n, 0, r);
}

/// Max/Min/Sum/Mean with any number of inputs, as a chain of binary ops.
LogicalResult Importer::convertVariadic(const onnx::NodeProto &n, Bin kind) {
  if (n.input_size() == 2)
    return convertBinary(n, kind);
  // Rewrite as a chain of synthetic two-input nodes.
  if (n.input_size() < 1)
    return nodeError(n) << "needs at least one input";
  std::string acc = n.input(0);
  for (int k = 1; k < n.input_size(); ++k) {
    onnx::NodeProto step = n;
    step.clear_input();
    step.add_input(acc);
    step.add_input(n.input(k));
    step.clear_output();
    acc = k + 1 == n.input_size() ? n.output(0)
                                  : n.output(0) + "#" + std::to_string(k);
    step.add_output(acc);
    if (failed(convertBinary(step, kind)))
      return failure();
  }
  if (n.input_size() == 1) {
    auto s = slot(n, 0);
    if (failed(s))
      return failure();
    return bind(n, 0, **s);
  }
  return success();
}

LogicalResult Importer::convertUnary(const onnx::NodeProto &n, Un kind) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  if ((*s)->cst)
    return defineConst(n, 0, eval::unary(kind, *(*s)->cst));
  Location loc = nodeLoc(n);
  Value x = (*s)->value;
  auto type = tensorType(x);
  Value r;
  switch (kind) {
  case Un::Neg:
    r = tsr::NegOp::create(b, loc, type, x);
    break;
  case Un::Sqrt:
    r = tsr::SqrtOp::create(b, loc, type, x);
    break;
  case Un::Exp:
    r = tsr::ExpOp::create(b, loc, type, x);
    break;
  case Un::Log:
    r = tsr::LogOp::create(b, loc, type, x);
    break;
  case Un::Relu:
    r = tsr::ReluOp::create(b, loc, type, x);
    break;
  case Un::Tanh:
    r = tsr::TanhOp::create(b, loc, type, x);
    break;
  case Un::Erf:
    r = tsr::ErfOp::create(b, loc, type, x);
    break;
  case Un::Reciprocal:
    r = tsr::DivOp::create(
        b, loc, type,
        splatLike(1.0, type.getElementType(), type.getShape(), loc), x);
    break;
  case Un::Sigmoid:
    r = tsr::SigmoidOp::create(b, loc, type, x);
    break;
  default:
    return constantOnly(n);
  }
  return define(n, 0, r);
}

LogicalResult Importer::convertWhere(const onnx::NodeProto &n) {
  auto sc = slot(n, 0), sx = slot(n, 1), sy = slot(n, 2);
  if (failed(sc) || failed(sx) || failed(sy))
    return failure();
  Shape shC = shapeOf(**sc), shX = shapeOf(**sx), shY = shapeOf(**sy);
  auto s1 = broadcastShapes(shC, shX);
  std::optional<Shape> out = s1 ? broadcastShapes(*s1, shY) : std::nullopt;
  if (!out)
    return nodeError(n) << "operand shapes " << shapeStr(shC) << ", "
                        << shapeStr(shX) << ", " << shapeStr(shY)
                        << " do not broadcast";
  if (dtypeOf(**sc) != kBool)
    return nodeError(n) << "condition must be bool";
  if (dtypeOf(**sx) != dtypeOf(**sy))
    return nodeError(n) << "X and Y types differ";
  if ((*sc)->cst && (*sx)->cst && (*sy)->cst) {
    if (auto err = eval::checkFoldSize(*out))
      return nodeError(n) << llvm::toString(std::move(err));
    return defineConst(
        n, 0, eval::where(*(*sc)->cst, *(*sx)->cst, *(*sy)->cst, *out));
  }
  Location loc = nodeLoc(n);
  auto vc = value(n, 0), vx = value(n, 1), vy = value(n, 2);
  if (failed(vc) || failed(vx) || failed(vy))
    return failure();
  auto bc = broadcastTo(n, *vc, *out, loc);
  auto bx = broadcastTo(n, *vx, *out, loc);
  auto by = broadcastTo(n, *vy, *out, loc);
  if (failed(bc) || failed(bx) || failed(by))
    return failure();
  return define(
      n, 0, tsr::SelectOp::create(b, loc, withShape(*vx, *out), *bc, *bx, *by));
}

LogicalResult Importer::convertCast(const onnx::NodeProto &n) {
  auto to = attrInt(n, "to", kUndefined);
  auto s = slot(n, 0);
  if (failed(to) || failed(s))
    return failure();
  int32_t dt = static_cast<int32_t>(*to);
  Type elem = dtypeToType(dt, &ctx);
  if (!elem)
    return nodeError(n) << "cast to unsupported type " << dtypeName(dt);
  if ((*s)->cst)
    return defineConst(n, 0, eval::cast(*(*s)->cst, dt));
  Value x = (*s)->value;
  if (tensorType(x).getElementType() == elem)
    return define(n, 0, x);
  return define(
      n, 0,
      tsr::ConvertOp::create(b, nodeLoc(n), tensorType(x).clone(elem), x));
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult Importer::convertShape(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  Shape shape = shapeOf(**s);
  int64_t rank = shape.size();
  auto start = attrInt(n, "start", 0), end = attrInt(n, "end", rank);
  if (failed(start) || failed(end))
    return failure();
  int64_t lo =
      std::clamp<int64_t>(*start < 0 ? *start + rank : *start, 0, rank);
  int64_t hi = std::clamp<int64_t>(*end < 0 ? *end + rank : *end, 0, rank);
  Shape dims;
  for (int64_t d = lo; d < hi; ++d)
    dims.push_back(shape[d]);
  int64_t len = dims.size();
  return defineConst(n, 0, ConstTensor::ints(dims, Shape{len}));
}

LogicalResult Importer::convertSize(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  return defineConst(n, 0, ConstTensor::ints({numElements(shapeOf(**s))}, {}));
}

/// Reshape, Flatten, Squeeze, Unsqueeze, Identity: a new shape, same data.
LogicalResult Importer::convertReshapeLike(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  Shape in = shapeOf(**s);
  int64_t rank = in.size();
  int64_t count = numElements(in);
  if (count < 0 && llvm::all_of(in, [](int64_t d) { return d >= 0; }))
    return nodeError(n) << "input shape " << shapeStr(in)
                        << " has more elements than supported";
  Shape out;
  const std::string &op = n.op_type();
  if (op == "Identity") {
    out = in;
  } else if (op == "Reshape") {
    auto target = constInts(n, 1, "the target shape");
    auto allowZero = attrInt(n, "allowzero", 0);
    if (failed(target) || failed(allowZero))
      return failure();
    int64_t inferIdx = -1, known = 1;
    for (size_t d = 0; d < target->size(); ++d) {
      int64_t v = (*target)[d];
      if (v == 0 && !*allowZero) {
        if (static_cast<int64_t>(d) >= rank)
          return nodeError(n) << "shape entry " << d
                              << " is 0 (copy) but the input has rank " << rank;
        v = in[d];
      } else if (v == -1) {
        if (inferIdx >= 0)
          return nodeError(n)
                 << "shape " << shapeStr(*target) << " has more than one -1";
        inferIdx = d;
        out.push_back(-1);
        continue;
      } else if (v < 0) {
        return nodeError(n) << "invalid shape " << shapeStr(*target);
      }
      out.push_back(v);
      if (v != 0 && known > (int64_t(1) << 50) / v)
        return nodeError(n) << "shape " << shapeStr(*target) << " overflows";
      known *= v;
    }
    if (inferIdx >= 0) {
      if (known == 0 || count % known != 0)
        return nodeError(n) << "cannot reshape " << shapeStr(in) << " to "
                            << shapeStr(*target);
      out[inferIdx] = count / known;
    }
  } else if (op == "Flatten") {
    auto axisAttr = attrInt(n, "axis", 1);
    if (failed(axisAttr))
      return failure();
    int64_t axis = *axisAttr < 0 ? *axisAttr + rank : *axisAttr;
    if (axis < 0 || axis > rank)
      return nodeError(n) << "axis " << *axisAttr << " out of range";
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d)
      if (llvm::MulOverflow(outer, in[d], outer)) // a 0 dim later: count 0
        return nodeError(n) << "the dimensions of " << shapeStr(in)
                            << " before axis " << axis << " overflow int64";
    out = {outer, outer == 0 ? 0 : count / outer};
  } else { // Squeeze / Unsqueeze
    std::optional<Shape> axes;
    if (opset >= 13 || hasInput(n, 1)) {
      if (hasInput(n, 1)) {
        auto a = constInts(n, 1, "axes");
        if (failed(a))
          return failure();
        axes = *a;
      }
    } else {
      auto a = attrInts(n, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (op == "Squeeze") {
      SmallVector<bool> drop(rank, false);
      if (!axes) {
        for (int64_t d = 0; d < rank; ++d)
          drop[d] = in[d] == 1;
      } else {
        for (int64_t a : *axes) {
          auto na = normAxis(a, rank);
          if (!na || in[*na] != 1)
            return nodeError(n) << "cannot squeeze axis " << a << " of shape "
                                << shapeStr(in);
          drop[*na] = true;
        }
      }
      for (int64_t d = 0; d < rank; ++d)
        if (!drop[d])
          out.push_back(in[d]);
    } else {
      if (!axes)
        return nodeError(n) << "axes are required";
      int64_t outRank = rank + axes->size();
      SmallVector<bool> inserted(outRank, false);
      for (int64_t a : *axes) {
        auto na = normAxis(a, outRank);
        if (!na || inserted[*na])
          return nodeError(n) << "invalid axes " << shapeStr(*axes);
        inserted[*na] = true;
      }
      int64_t k = 0;
      for (int64_t d = 0; d < outRank; ++d)
        out.push_back(inserted[d] ? 1 : in[k++]);
    }
  }
  if (numElements(out) != count)
    return nodeError(n) << "cannot reshape " << shapeStr(in) << " to "
                        << shapeStr(out);
  if ((*s)->cst)
    return defineConst(n, 0, eval::reshape(*(*s)->cst, out));
  return define(n, 0, reshape((*s)->value, out, nodeLoc(n)));
}

LogicalResult Importer::convertTranspose(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto permAttr = attrInts(n, "perm");
  if (failed(s) || failed(permAttr))
    return failure();
  Shape in = shapeOf(**s);
  int64_t rank = in.size();
  Shape perm;
  if (*permAttr)
    perm = **permAttr;
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != rank)
    return nodeError(n) << "perm has " << perm.size() << " entries for rank "
                        << rank;
  SmallVector<bool> seen(rank, false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return nodeError(n) << "perm " << shapeStr(perm)
                          << " is not a permutation";
    seen[p] = true;
    out.push_back(in[p]);
  }
  if ((*s)->cst)
    return defineConst(n, 0, eval::transpose(*(*s)->cst, perm));
  bool identity = true;
  for (int64_t d = 0; d < rank; ++d)
    identity &= perm[d] == d;
  if (identity)
    return define(n, 0, (*s)->value);
  return define(
      n, 0,
      tsr::TransposeOp::create(b, nodeLoc(n), withShape((*s)->value, out),
                               (*s)->value, b.getDenseI64ArrayAttr(perm)));
}

FailureOr<Value> Importer::buildSlice(Value v, ArrayRef<int64_t> start,
                                      ArrayRef<int64_t> limit,
                                      ArrayRef<int64_t> strides, Location loc) {
  auto type = tensorType(v);
  Shape out;
  bool whole = true;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    int64_t len =
        limit[d] > start[d] ? 1 + (limit[d] - start[d] - 1) / strides[d] : 0;
    out.push_back(len);
    whole &= len == type.getDimSize(d);
  }
  if (whole)
    return v;
  return Value(tsr::SliceOp::create(
      b, loc, withShape(v, out), v, b.getDenseI64ArrayAttr(start),
      b.getDenseI64ArrayAttr(limit), b.getDenseI64ArrayAttr(strides)));
}

LogicalResult Importer::convertSlice(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  Shape in = shapeOf(**s);
  int64_t rank = in.size();
  Shape starts, ends, axes, steps;
  if (opset < 10 && !hasInput(n, 1)) {
    auto a = attrInts(n, "starts"), e = attrInts(n, "ends"),
         x = attrInts(n, "axes");
    if (failed(a) || failed(e) || failed(x) || !*a || !*e)
      return nodeError(n) << "needs 'starts' and 'ends'";
    starts = **a;
    ends = **e;
    if (*x)
      axes = **x;
  } else {
    auto a = constInts(n, 1, "starts"), e = constInts(n, 2, "ends");
    if (failed(a) || failed(e))
      return failure();
    starts = *a;
    ends = *e;
    if (hasInput(n, 3)) {
      auto x = constInts(n, 3, "axes");
      if (failed(x))
        return failure();
      axes = *x;
    }
    if (hasInput(n, 4)) {
      auto st = constInts(n, 4, "steps");
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(k);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return nodeError(n) << "starts/ends/axes/steps lengths differ";
  Shape lo(rank, 0), step(rank, 1), out(in.begin(), in.end());
  SmallVector<bool> seen(rank, false);
  for (size_t k = 0; k < starts.size(); ++k) {
    auto ax = normAxis(axes[k], rank);
    if (!ax || seen[*ax])
      return nodeError(n) << "invalid axis " << axes[k];
    seen[*ax] = true;
    int64_t dim = in[*ax], st = steps[k];
    if (st == 0)
      return nodeError(n) << "step 0 on axis " << axes[k];
    if (st == INT64_MIN)
      st = -INT64_MAX; // same slice, and -st does not overflow
    int64_t s0 = starts[k], e0 = ends[k];
    if (s0 < 0)
      s0 = s0 < -dim ? 0 : s0 + dim; // avoid overflow on INT64_MIN
    if (e0 < 0)
      e0 = e0 < -dim ? -1 : e0 + dim;
    int64_t len;
    if (st > 0) {
      s0 = std::clamp<int64_t>(s0, 0, dim);
      e0 = std::clamp<int64_t>(e0, 0, dim);
      len = e0 > s0 ? 1 + (e0 - s0 - 1) / st : 0;
    } else {
      s0 = std::clamp<int64_t>(s0, 0, dim - 1);
      e0 = std::clamp<int64_t>(e0, -1, dim - 1);
      len = s0 > e0 ? 1 + (s0 - e0 - 1) / (-st) : 0;
    }
    lo[*ax] = s0;
    step[*ax] = st;
    out[*ax] = len;
  }
  if ((*s)->cst)
    return defineConst(n, 0, eval::slice(*(*s)->cst, lo, step, out));
  Shape limit(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (step[d] < 0)
      return nodeError(n) << "negative step on axis " << d
                          << " of a non-constant tensor is unsupported";
    limit[d] = out[d] == 0 ? lo[d] : lo[d] + (out[d] - 1) * step[d] + 1;
  }
  auto r = buildSlice((*s)->value, lo, limit, step, nodeLoc(n));
  if (failed(r))
    return failure();
  return define(n, 0, *r);
}

LogicalResult Importer::convertSplit(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto axisAttr = attrInt(n, "axis", 0);
  if (failed(s) || failed(axisAttr))
    return failure();
  Shape in = shapeOf(**s);
  auto axis = normAxis(*axisAttr, in.size());
  if (!axis)
    return nodeError(n) << "axis " << *axisAttr << " out of range";
  int64_t outs = n.output_size();
  Shape sizes;
  if (hasInput(n, 1)) {
    auto sp = constInts(n, 1, "split");
    if (failed(sp))
      return failure();
    sizes = *sp;
  } else if (auto sp = attrInts(n, "split"); failed(sp)) {
    return failure();
  } else if (*sp) {
    sizes = **sp;
  } else {
    auto num = attrInt(n, "num_outputs", outs);
    if (failed(num))
      return failure();
    // num_outputs must be the node's output count (the ONNX Split spec);
    // checked before the chunk arithmetic, which a huge value overflows.
    if (*num <= 0 || *num != outs)
      return nodeError(n) << "num_outputs " << *num << " is not the node's "
                          << outs << " outputs";
    int64_t chunk = in[*axis] / *num + (in[*axis] % *num != 0);
    for (int64_t k = 0, left = in [*axis]; k < *num; ++k) {
      sizes.push_back(std::min(chunk, left));
      left -= sizes.back();
    }
  }
  // The sizes' sum, stopping at the first overflow (sizes near INT64_MAX
  // must not wrap around to the axis length).
  bool covers = static_cast<int64_t>(sizes.size()) == outs &&
                llvm::none_of(sizes, [](int64_t v) { return v < 0; });
  int64_t total = 0;
  for (int64_t v : sizes)
    if (covers && llvm::AddOverflow(total, v, total))
      covers = false;
  if (!covers || total != in[*axis])
    return nodeError(n) << "split sizes " << shapeStr(sizes)
                        << " do not cover axis " << *axis << " of "
                        << shapeStr(in);
  int64_t offset = 0;
  for (int64_t k = 0; k < outs; ++k) {
    Shape lo(in.size(), 0), limit(in.begin(), in.end()), step(in.size(), 1),
        out(in.begin(), in.end());
    lo[*axis] = offset;
    limit[*axis] = offset + sizes[k];
    out[*axis] = sizes[k];
    offset += sizes[k];
    if ((*s)->cst) {
      if (failed(defineConst(n, k, eval::slice(*(*s)->cst, lo, step, out))))
        return failure();
      continue;
    }
    auto r = buildSlice((*s)->value, lo, limit, step, nodeLoc(n));
    if (failed(r) || failed(define(n, k, *r)))
      return failure();
  }
  return success();
}

LogicalResult Importer::convertConcat(const onnx::NodeProto &n) {
  auto axisAttr = attrInt(n, "axis", 0);
  if (failed(axisAttr))
    return failure();
  if (n.input_size() == 0)
    return nodeError(n) << "needs at least one input";
  SmallVector<Slot *> ins;
  bool allConst = true;
  for (int k = 0; k < n.input_size(); ++k) {
    auto s = slot(n, k);
    if (failed(s))
      return failure();
    ins.push_back(*s);
    allConst &= static_cast<bool>((*s)->cst);
  }
  Shape first = shapeOf(*ins[0]);
  int64_t rank = first.size();
  auto axis = normAxis(*axisAttr, rank);
  if (!axis)
    return nodeError(n) << "axis " << *axisAttr << " out of range for rank "
                        << rank;
  Shape out = first;
  out[*axis] = 0;
  int32_t dt = dtypeOf(*ins[0]);
  for (Slot *s : ins) {
    Shape sh = shapeOf(*s);
    if (static_cast<int64_t>(sh.size()) != rank || dtypeOf(*s) != dt)
      return nodeError(n) << "inputs differ in rank or type";
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis && sh[d] != first[d])
        return nodeError(n) << "input shapes " << shapeStr(first) << " and "
                            << shapeStr(sh) << " differ off the axis";
    if (llvm::AddOverflow(out[*axis], sh[*axis], out[*axis]))
      return nodeError(n) << "the sizes along axis " << *axis
                          << " overflow int64";
  }
  if (allConst) {
    SmallVector<const ConstTensor *> xs;
    for (Slot *sl : ins)
      xs.push_back(sl->cst.get());
    return defineConst(n, 0, eval::concat(xs, *axis, out));
  }
  SmallVector<Value> values;
  for (int k = 0; k < n.input_size(); ++k) {
    auto v = value(n, k);
    if (failed(v))
      return failure();
    if (tensorType(*v).getNumElements() > 0)
      values.push_back(*v);
  }
  // Every input empty (a zero dim): the result is empty too (fuzzer
  // finding: this indexed values[0] of an empty list).
  if (values.empty())
    return nodeError(n) << "every input is empty (result " << shapeStr(out)
                        << "); an empty Concat is not supported";
  if (values.size() == 1)
    return define(n, 0, values[0]);
  return define(n, 0,
                tsr::ConcatOp::create(b, nodeLoc(n), withShape(values[0], out),
                                      values, b.getI64IntegerAttr(*axis)));
}

LogicalResult Importer::convertGather(const onnx::NodeProto &n) {
  auto sd = slot(n, 0), si = slot(n, 1);
  auto axisAttr = attrInt(n, "axis", 0);
  if (failed(sd) || failed(si) || failed(axisAttr))
    return failure();
  Shape data = shapeOf(**sd), idxShape = shapeOf(**si);
  int64_t rank = data.size();
  auto axis = normAxis(*axisAttr, rank);
  if (!axis)
    return nodeError(n) << "axis " << *axisAttr << " out of range for rank "
                        << rank;
  if (isFloatDType(dtypeOf(**si)))
    return nodeError(n) << "indices must be integers";
  int64_t dim = data[*axis];
  Shape out(data.begin(), data.begin() + *axis);
  llvm::append_range(out, idxShape);
  out.append(data.begin() + *axis + 1, data.end());

  // Constant indices: normalise negatives and check bounds here.
  std::shared_ptr<const ConstTensor> idx = (*si)->cst;
  if (idx) {
    ConstTensor norm = ConstTensor::ints({}, idx->shape);
    for (int64_t e = 0; e < idx->size(); ++e) {
      int64_t v = idx->getI(e);
      if (v < -dim || v >= dim)
        return nodeError(n) << "index " << v << " out of range for axis of "
                            << "size " << dim;
      norm.pushInt(v < 0 ? v + dim : v);
    }
    idx = std::make_shared<const ConstTensor>(std::move(norm));
  }
  if ((*sd)->cst && idx) {
    if (auto err = eval::checkFoldSize(out))
      return nodeError(n) << llvm::toString(std::move(err));
    return defineConst(n, 0, eval::gather(*(*sd)->cst, *axis, *idx, out));
  }
  Location loc = nodeLoc(n);
  auto table = value(n, 0);
  if (failed(table))
    return failure();
  Value indices;
  if (idx) {
    indices = materialize(*idx, loc);
  } else {
    indices = (*si)->value;
    auto it = tensorType(indices);
    if (!it.getElementType().isInteger(64))
      indices = tsr::ConvertOp::create(
          b, loc, it.clone(IntegerType::get(&ctx, 64)), indices);
  }
  if (rank == 0)
    return nodeError(n) << "cannot gather from a scalar";
  // tsr.gather indexes axis 0; other axes go through transposes.
  Value t = *table;
  Shape tableShape = data;
  Shape perm;
  if (*axis != 0) {
    perm.push_back(*axis);
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis)
        perm.push_back(d);
    Shape tshape;
    for (int64_t p : perm)
      tshape.push_back(data[p]);
    t = tsr::TransposeOp::create(b, loc, withShape(t, tshape), t,
                                 b.getDenseI64ArrayAttr(perm));
    tableShape = tshape;
  }
  Shape gshape(idxShape);
  gshape.append(tableShape.begin() + 1, tableShape.end());
  Value g = tsr::GatherOp::create(b, loc, withShape(t, gshape), t, indices);
  if (*axis != 0) {
    // g is [I..., D0..Da-1, Da+1...]; want [D0..Da-1, I..., Da+1...].
    int64_t ni = idxShape.size(), a = *axis;
    Shape back;
    for (int64_t d = 0; d < a; ++d)
      back.push_back(ni + d);
    for (int64_t d = 0; d < ni; ++d)
      back.push_back(d);
    for (int64_t d = ni + a; d < static_cast<int64_t>(gshape.size()); ++d)
      back.push_back(d);
    bool identity = true;
    for (size_t d = 0; d < back.size(); ++d)
      identity &= back[d] == static_cast<int64_t>(d);
    if (!identity)
      g = tsr::TransposeOp::create(b, loc, withShape(g, out), g,
                                   b.getDenseI64ArrayAttr(back));
  }
  return define(n, 0, g);
}

LogicalResult Importer::convertExpand(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto target = constInts(n, 1, "the target shape");
  if (failed(s) || failed(target))
    return failure();
  Shape in = shapeOf(**s);
  auto out = broadcastShapes(in, *target);
  if (!out)
    return nodeError(n) << "cannot expand " << shapeStr(in) << " to "
                        << shapeStr(*target);
  if ((*s)->cst) {
    if (auto err = eval::checkFoldSize(*out))
      return nodeError(n) << llvm::toString(std::move(err));
    return defineConst(n, 0, eval::expand(*(*s)->cst, *out));
  }
  auto r = broadcastTo(n, (*s)->value, *out, nodeLoc(n));
  if (failed(r))
    return failure();
  return define(n, 0, *r);
}

LogicalResult Importer::convertRange(const onnx::NodeProto &n) {
  auto start = constInput(n, 0, "start"), limit = constInput(n, 1, "limit"),
       delta = constInput(n, 2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  if ((*start)->size() != 1 || (*limit)->size() != 1 || (*delta)->size() != 1)
    return nodeError(n) << "start, limit and delta must be scalars";
  return defineEval(n, 0, eval::range(**start, **limit, **delta));
}

LogicalResult Importer::convertConstantOfShape(const onnx::NodeProto &n) {
  auto shape = constInts(n, 0, "the shape");
  if (failed(shape))
    return failure();
  int64_t count = numElements(*shape);
  if (count < 0 || count > kMaxFoldElements)
    return nodeError(n) << "invalid or too large shape " << shapeStr(*shape);
  ConstTensor fill = ConstTensor::scalarF(0.0);
  if (const auto *a = attr(n, "value")) {
    if (a->type() != onnx::AttributeProto::TENSOR)
      return nodeError(n) << "attribute 'value' must be a tensor";
    auto t = readTensor(a->t(), "attribute 'value' of " + nodeLabel(n));
    if (failed(t))
      return failure();
    if (t->size() != 1)
      return nodeError(n) << "attribute 'value' must hold one element";
    fill = std::move(*t);
  }
  ConstTensor r;
  r.dtype = fill.dtype;
  r.shape = *shape;
  r.resize(count);
  for (int64_t e = 0; e < count; ++e)
    r.copyFrom(fill, 0, e);
  return defineConst(n, 0, std::move(r));
}

//===----------------------------------------------------------------------===//
// Linear algebra and NN ops
//===----------------------------------------------------------------------===//

FailureOr<Value> Importer::buildMatmul(const onnx::NodeProto &n, Value a,
                                       Value bv, Location loc) {
  auto ta = tensorType(a), tb = tensorType(bv);
  if (ta.getRank() == 0 || tb.getRank() == 0)
    return nodeError(n) << "MatMul operands must not be scalars";
  if (ta.getElementType() != tb.getElementType())
    return nodeError(n) << "operand element types differ";
  bool vecA = ta.getRank() == 1, vecB = tb.getRank() == 1;
  if (vecA)
    a = reshape(a, {1, ta.getDimSize(0)}, loc);
  if (vecB)
    bv = reshape(bv, {tb.getDimSize(0), 1}, loc);
  ta = tensorType(a);
  tb = tensorType(bv);
  int64_t ra = ta.getRank(), rb = tb.getRank();
  int64_t m = ta.getDimSize(ra - 2), k = ta.getDimSize(ra - 1),
          k2 = tb.getDimSize(rb - 2), nn = tb.getDimSize(rb - 1);
  if (k != k2)
    return nodeError(n) << "contracting dimensions differ: "
                        << shapeStr(ta.getShape()) << " x "
                        << shapeStr(tb.getShape());
  Shape batch;
  if (rb == 2) {
    batch.assign(ta.getShape().begin(), ta.getShape().end() - 2);
  } else {
    auto bs =
        broadcastShapes(ta.getShape().drop_back(2), tb.getShape().drop_back(2));
    if (!bs)
      return nodeError(n) << "batch dimensions of " << shapeStr(ta.getShape())
                          << " and " << shapeStr(tb.getShape())
                          << " do not broadcast";
    batch = *bs;
    Shape sa = batch, sb = batch;
    sa.append({m, k});
    sb.append({k, nn});
    auto ba = broadcastTo(n, a, sa, loc), bb = broadcastTo(n, bv, sb, loc);
    if (failed(ba) || failed(bb))
      return failure();
    a = *ba;
    bv = *bb;
  }
  Shape out = batch;
  out.append({m, nn});
  Value r = tsr::MatmulOp::create(b, loc, withShape(a, out), a, bv,
                                  b.getBoolAttr(false), b.getBoolAttr(false));
  if (vecA || vecB) {
    Shape squeezed(batch);
    if (!vecA)
      squeezed.push_back(m);
    if (!vecB)
      squeezed.push_back(nn);
    r = reshape(r, squeezed, loc);
  }
  return r;
}

LogicalResult Importer::convertMatMul(const onnx::NodeProto &n) {
  if (allConstant(n)) {
    auto a = constInput(n, 0, "A"), bm = constInput(n, 1, "B");
    if (failed(a) || failed(bm))
      return failure();
    return defineEval(n, 0, eval::matmul(**a, **bm));
  }
  auto a = value(n, 0), bv = value(n, 1);
  if (failed(a) || failed(bv))
    return failure();
  auto r = buildMatmul(n, *a, *bv, nodeLoc(n));
  if (failed(r))
    return failure();
  return define(n, 0, *r);
}

LogicalResult Importer::convertGemm(const onnx::NodeProto &n) {
  auto transA = attrInt(n, "transA", 0), transB = attrInt(n, "transB", 0);
  auto alpha = attrFloat(n, "alpha", 1.0f), beta = attrFloat(n, "beta", 1.0f);
  if (failed(transA) || failed(transB) || failed(alpha) || failed(beta))
    return failure();
  if (allConstant(n)) {
    // alpha * op(A) op(B) + beta * C, through the evaluator.
    auto ca = constInput(n, 0, "A"), cb = constInput(n, 1, "B");
    if (failed(ca) || failed(cb))
      return failure();
    if ((*ca)->shape.size() != 2 || (*cb)->shape.size() != 2)
      return nodeError(n) << "A and B must be 2-D";
    ConstTensor A = *transA ? eval::transpose(**ca, {1, 0}) : **ca;
    ConstTensor B = *transB ? eval::transpose(**cb, {1, 0}) : **cb;
    auto ab = eval::matmul(A, B);
    if (!ab)
      return defineEval(n, 0, std::move(ab));
    ConstTensor alphaT = ConstTensor::scalarF(*alpha, ab->dtype);
    auto r = eval::binary(Bin::Mul, *ab, alphaT, ab->shape);
    if (r && hasInput(n, 2) && *beta != 0.0f) {
      auto cc = constInput(n, 2, "C");
      if (failed(cc))
        return failure();
      auto out = broadcastShapes(r->shape, (*cc)->shape);
      if (!out || *out != r->shape)
        return nodeError(n) << "C " << shapeStr((*cc)->shape)
                            << " does not broadcast to " << shapeStr(r->shape);
      ConstTensor betaT = ConstTensor::scalarF(*beta, ab->dtype);
      auto bc = eval::binary(Bin::Mul, **cc, betaT, (*cc)->shape);
      if (!bc)
        return defineEval(n, 0, std::move(bc));
      r = eval::binary(Bin::Add, *r, *bc, r->shape);
    }
    return defineEval(n, 0, std::move(r));
  }
  auto a = value(n, 0), bv = value(n, 1);
  if (failed(a) || failed(bv))
    return failure();
  auto ta = tensorType(*a), tb = tensorType(*bv);
  if (ta.getRank() != 2 || tb.getRank() != 2)
    return nodeError(n) << "A and B must be 2-D";
  if (ta.getElementType() != tb.getElementType())
    return nodeError(n) << "operand element types differ";
  int64_t m = ta.getDimSize(*transA ? 1 : 0),
          k = ta.getDimSize(*transA ? 0 : 1);
  int64_t k2 = tb.getDimSize(*transB ? 1 : 0),
          nn = tb.getDimSize(*transB ? 0 : 1);
  if (k != k2)
    return nodeError(n) << "contracting dimensions differ: "
                        << shapeStr(ta.getShape()) << " x "
                        << shapeStr(tb.getShape());
  Location loc = nodeLoc(n);
  Shape out{m, nn};
  auto type = withShape(*a, out);
  Type elem = ta.getElementType();
  Value r =
      tsr::MatmulOp::create(b, loc, type, *a, *bv, b.getBoolAttr(*transA != 0),
                            b.getBoolAttr(*transB != 0));
  if (*alpha != 1.0f)
    r = tsr::MulOp::create(b, loc, type, r, splatLike(*alpha, elem, out, loc));
  if (hasInput(n, 2) && *beta != 0.0f) {
    auto c = value(n, 2);
    if (failed(c))
      return failure();
    if (tensorType(*c).getElementType() != elem)
      return nodeError(n) << "C has a different element type";
    Value cv = *c;
    if (*beta != 1.0f)
      cv = tsr::MulOp::create(
          b, loc, tensorType(cv), cv,
          splatLike(*beta, elem, tensorType(cv).getShape(), loc));
    auto cb = broadcastTo(n, cv, out, loc);
    if (failed(cb))
      return failure();
    r = tsr::AddOp::create(b, loc, type, r, *cb);
  }
  return define(n, 0, r);
}

LogicalResult Importer::convertSoftmax(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto axisAttr = attrInt(n, "axis", opset >= 13 ? -1 : 1);
  if (failed(s) || failed(axisAttr))
    return failure();
  Shape shape = shapeOf(**s);
  int64_t rank = shape.size();
  auto axis = normAxis(*axisAttr, rank);
  if (!axis)
    return nodeError(n) << "axis " << *axisAttr << " out of range for rank "
                        << rank;
  if ((*s)->cst) {
    if (!(*s)->cst->isFloat())
      return nodeError(n) << "input must be floating point";
    if (opset >= 13 || *axis == rank - 1)
      return defineConst(n, 0, eval::softmax(*(*s)->cst, *axis));
    // Opset < 13: softmax over the flattened [axis, rank) dims.
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < *axis ? outer : inner) *= shape[d];
    ConstTensor flat = eval::reshape(*(*s)->cst, {outer, inner});
    return defineConst(n, 0, eval::reshape(eval::softmax(flat, 1), shape));
  }
  Value x = (*s)->value;
  auto type = tensorType(x);
  Location loc = nodeLoc(n);
  if (opset >= 13 || *axis == rank - 1)
    return define(
        n, 0,
        tsr::SoftmaxOp::create(b, loc, type, x, b.getI64IntegerAttr(*axis)));
  // Opset < 13: softmax over the flattened [axis, rank) dims.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < *axis ? outer : inner) *= type.getDimSize(d);
  Value flat = reshape(x, {outer, inner}, loc);
  Value sm = tsr::SoftmaxOp::create(b, loc, tensorType(flat), flat,
                                    b.getI64IntegerAttr(1));
  return define(n, 0, reshape(sm, type.getShape(), loc));
}

LogicalResult Importer::convertLayerNorm(const onnx::NodeProto &n) {
  for (int k = 1; k < n.output_size() && k < 3; ++k)
    if (!n.output(k).empty() && used.contains(n.output(k)))
      return nodeError(n) << "the Mean/InvStdDev outputs are not supported";
  auto axisAttr = attrInt(n, "axis", -1);
  auto eps = attrFloat(n, "epsilon", 1e-5f);
  if (failed(axisAttr) || failed(eps))
    return failure();
  if (allConstant(n)) {
    auto cx = constInput(n, 0, "X");
    if (failed(cx))
      return failure();
    const ConstTensor &X = **cx;
    auto axis = normAxis(*axisAttr, X.shape.size());
    if (!axis || !X.isFloat())
      return nodeError(n) << "needs a floating-point X and an axis in range";
    ArrayRef<int64_t> norm = ArrayRef<int64_t>(X.shape).drop_front(*axis);
    ConstTensor one = ConstTensor::scalarF(1.0, X.dtype);
    const ConstTensor *scale = &one, *bias = nullptr;
    for (int k = 1; k < 3; ++k) {
      if (!hasInput(n, k))
        continue;
      auto c = constInput(n, k, k == 1 ? "Scale" : "B");
      if (failed(c))
        return failure();
      auto bs = broadcastShapes((*c)->shape, norm);
      if (!bs || *bs != Shape(norm))
        return nodeError(n) << "scale/bias " << shapeStr((*c)->shape)
                            << " does not broadcast to " << shapeStr(norm);
      (k == 1 ? scale : bias) = *c;
    }
    return defineConst(n, 0, eval::layerNorm(X, *scale, bias, *axis, *eps));
  }
  auto x = value(n, 0);
  if (failed(x))
    return failure();
  auto type = tensorType(*x);
  if (!isa<FloatType>(type.getElementType()))
    return nodeError(n) << "X must be floating point";
  auto axis = normAxis(*axisAttr, type.getRank());
  if (!axis)
    return nodeError(n) << "axis " << *axisAttr << " out of range";
  Location loc = nodeLoc(n);
  Shape norm(type.getShape().drop_front(*axis));
  auto coerce = [&](int idx, double dflt) -> FailureOr<Value> {
    if (!hasInput(n, idx))
      return splatLike(dflt, type.getElementType(), norm, loc);
    auto v = value(n, idx);
    if (failed(v))
      return failure();
    auto vt = tensorType(*v);
    if (vt.getElementType() != type.getElementType())
      return nodeError(n) << "scale/bias element type differs from X";
    if (vt.getShape() == ArrayRef<int64_t>(norm))
      return *v;
    if (vt.getNumElements() == numElements(norm)) {
      // Same data with extra unit dims: reshape.
      ArrayRef<int64_t> sh = vt.getShape();
      while (!sh.empty() && sh.front() == 1 && sh.size() > norm.size())
        sh = sh.drop_front();
      if (sh == ArrayRef<int64_t>(norm))
        return reshape(*v, norm, loc);
    }
    return broadcastTo(n, *v, norm, loc);
  };
  auto scale = coerce(1, 1.0), bias = coerce(2, 0.0);
  if (failed(scale) || failed(bias))
    return failure();
  return define(n, 0,
                tsr::LayerNormOp::create(b, loc, type, *x, *scale, *bias,
                                         b.getI64IntegerAttr(*axis),
                                         b.getF32FloatAttr(*eps)));
}

LogicalResult Importer::convertReduce(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  auto sx = slot(n, 0);
  auto keep = attrInt(n, "keepdims", 1);
  auto noop = attrInt(n, "noop_with_empty_axes", 0);
  if (failed(sx) || failed(keep) || failed(noop))
    return failure();
  Shape in = shapeOf(**sx);
  int64_t rank = in.size();
  std::optional<Shape> axes;
  if (hasInput(n, 1)) {
    auto a = constInts(n, 1, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    auto a = attrInts(n, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  }
  if (!axes || axes->empty()) {
    if (*noop)
      return bind(n, 0, **sx);
    axes = Shape();
    for (int64_t d = 0; d < rank; ++d)
      axes->push_back(d);
  }
  Shape sorted;
  for (int64_t a : *axes) {
    auto na = normAxis(a, rank);
    if (!na)
      return nodeError(n) << "axis " << a << " out of range for rank " << rank;
    sorted.push_back(*na);
  }
  llvm::sort(sorted);
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return nodeError(n) << "repeated axes";
  static const llvm::StringMap<eval::Reduce> kinds = {
      {"ReduceSum", eval::Reduce::Sum},
      {"ReduceMean", eval::Reduce::Mean},
      {"ReduceMax", eval::Reduce::Max},
      {"ReduceMin", eval::Reduce::Min},
      {"ReduceProd", eval::Reduce::Prod}};
  eval::Reduce kind = kinds.lookup(op);
  if ((*sx)->cst)
    return defineConst(n, 0,
                       eval::reduce(kind, *(*sx)->cst, sorted, *keep != 0));
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(sorted, d)) {
      if (*keep)
        out.push_back(1);
    } else {
      out.push_back(in[d]);
    }
  }
  Value x = (*sx)->value;
  Location loc = nodeLoc(n);
  auto rtype = withShape(x, out);
  auto axesAttr = b.getDenseI64ArrayAttr(sorted);
  auto keepAttr = b.getBoolAttr(*keep != 0);
  Value r;
  switch (kind) {
  case eval::Reduce::Mean:
    r = tsr::ReduceMeanOp::create(b, loc, rtype, x, axesAttr, keepAttr);
    break;
  case eval::Reduce::Sum:
    r = tsr::ReduceSumOp::create(b, loc, rtype, x, axesAttr, keepAttr);
    break;
  case eval::Reduce::Max:
    r = tsr::ReduceMaxOp::create(b, loc, rtype, x, axesAttr, keepAttr);
    break;
  case eval::Reduce::Min: { // min(x) = -max(-x)
    Value neg = tsr::NegOp::create(b, loc, tensorType(x), x);
    r = tsr::NegOp::create(
        b, loc, rtype,
        tsr::ReduceMaxOp::create(b, loc, rtype, neg, axesAttr, keepAttr));
    break;
  }
  case eval::Reduce::Prod:
    return constantOnly(n);
  }
  return define(n, 0, r);
}

LogicalResult Importer::convertDropout(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  bool training = false;
  if (hasInput(n, 2)) {
    auto mode = constInput(n, 2, "training_mode");
    if (failed(mode))
      return failure();
    if ((*mode)->size() != 1)
      return nodeError(n) << "training_mode must be a scalar";
    training = (*mode)->getF(0) != 0;
  }
  double ratio = 0.5; // ONNX's default
  if (training && hasInput(n, 1)) {
    auto r = constInput(n, 1, "ratio");
    if (failed(r))
      return failure();
    if ((*r)->size() != 1)
      return nodeError(n) << "ratio must be a scalar";
    ratio = (*r)->getF(0);
  }
  if (training && !(ratio >= 0.0 && ratio < 1.0))
    return nodeError(n) << "ratio " << ratio << " is outside [0, 1)";
  bool maskUsed =
      n.output_size() > 1 && !n.output(1).empty() && used.contains(n.output(1));
  if (training && ratio > 0.0) {
    // Training mode: a counter-based (Philox) mask, keyed by --seed, the
    // step ("rng.step"), this node's number and the element's global index.
    if (maskUsed)
      return nodeError(n) << "the mask output of a training-mode Dropout is "
                             "not supported (only its data output)";
    if ((*s)->cst)
      return nodeError(n) << "training-mode Dropout of a constant";
    Value x = (*s)->value;
    if (!isa<FloatType>(tensorType(x).getElementType()))
      return nodeError(n) << "training-mode Dropout of a non-float tensor";
    Location loc = nodeLoc(n);
    Value step = rngStep();
    if (!step)
      return nodeError(n) << "cannot add the rng.step argument";
    auto op = tsr::DropoutOp::create(
        b, loc, tensorType(x), x, step, b.getF32FloatAttr(ratio),
        b.getI64IntegerAttr(static_cast<int64_t>(opts.seed)),
        b.getI64IntegerAttr(nextDropoutId++), DenseI64ArrayAttr());
    return define(n, 0, op.getResult());
  }
  // Inference mode, or training with ratio 0: the identity, mask all true.
  if (failed(bind(n, 0, **s)))
    return failure();
  if (n.output_size() > 1 && !n.output(1).empty()) {
    Shape shape = shapeOf(**s);
    // The all-true mask is a folded constant: bounded like every other (a
    // huge input dim made this allocate hundreds of GiB; fuzzer finding).
    if (auto err = eval::checkFoldSize(shape))
      return nodeError(n) << "mask output: " << llvm::toString(std::move(err));
    ConstTensor mask;
    mask.dtype = kBool;
    mask.shape = shape;
    mask.i.assign(numElements(shape), 1);
    return defineConst(n, 1, std::move(mask));
  }
  return success();
}

Value Importer::rngStep() {
  if (rngStepArg)
    return rngStepArg;
  // @forward's "rng_step" argument: tsr-build-train-step makes it the
  // replicated optimizer state "rng.step" that each step increments.
  auto type = RankedTensorType::get({}, b.getF32Type());
  NamedAttrList attrs;
  attrs.set(tsr::kNameAttrName, b.getStringAttr("rng.step"));
  attrs.set(tsr::kRoleAttrName, b.getStringAttr("rng_step"));
  unsigned index = forwardFunc.getNumArguments();
  if (failed(forwardFunc.insertArgument(index, type, attrs.getDictionary(&ctx),
                                        forwardFunc.getLoc())))
    return Value();
  forwardArgTypes->push_back(type);
  rngStepArg = forwardFunc.getArgument(index);
  return rngStepArg;
}

LogicalResult Importer::convertGelu(const onnx::NodeProto &n) {
  auto approx = attrString(n, "approximate", "none");
  if (failed(approx))
    return failure();
  if (*approx != "none" && *approx != "tanh")
    return nodeError(n) << "unsupported approximate '" << *approx << "'";
  if (allConstant(n)) {
    auto c = constInput(n, 0, "X");
    if (failed(c))
      return failure();
    return defineConst(n, 0, eval::gelu(**c, *approx == "tanh"));
  }
  auto x = value(n, 0);
  if (failed(x))
    return failure();
  return define(n, 0,
                tsr::GeluOp::create(b, nodeLoc(n), tensorType(*x), *x,
                                    b.getStringAttr(*approx)));
}

LogicalResult Importer::convertConstant(const onnx::NodeProto &n) {
  if (n.attribute_size() != 1)
    return nodeError(n) << "needs exactly one value attribute";
  const auto &a = n.attribute(0);
  ConstTensor c;
  if (a.name() == "value") {
    auto t = readTensor(a.t(), "constant of " + nodeLabel(n));
    if (failed(t))
      return failure();
    c = std::move(*t);
  } else if (a.name() == "value_float") {
    c = ConstTensor::scalarF(a.f());
  } else if (a.name() == "value_floats") {
    c.dtype = kFloat;
    for (float v : a.floats())
      c.push(v);
    c.shape = {static_cast<int64_t>(a.floats_size())};
  } else if (a.name() == "value_int") {
    c = ConstTensor::ints({a.i()}, {});
  } else if (a.name() == "value_ints") {
    c = ConstTensor::ints(
        SmallVector<int64_t>(a.ints().begin(), a.ints().end()),
        {static_cast<int64_t>(a.ints_size())});
  } else {
    return nodeError(n) << "unsupported constant attribute '" << a.name()
                        << "'";
  }
  return defineConst(n, 0, std::move(c));
}

LogicalResult Importer::convertTrilu(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto upper = attrInt(n, "upper", 1);
  if (failed(s) || failed(upper))
    return failure();
  Shape shape = shapeOf(**s);
  if (shape.size() < 2)
    return nodeError(n) << "input must have rank >= 2, got " << shapeStr(shape);
  int64_t k = 0;
  if (hasInput(n, 1)) {
    auto kv = constInts(n, 1, "k");
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return nodeError(n) << "k must hold one value";
    k = (*kv)[0];
  }
  if ((*s)->cst)
    return defineConst(n, 0, eval::trilu(*(*s)->cst, k, *upper != 0));
  // select(keep, x, 0) with the [rows, cols] keep-mask broadcast.
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  // The mask is a constant of rows x cols elements: bounded like every
  // folded constant (a huge input dim made this loop run for hours).
  if (rows < 0 || cols < 0 || (rows > 0 && cols > kMaxFoldElements / rows))
    return nodeError(n) << "the [" << rows << ", " << cols
                        << "] matrices are too large for a mask (more than "
                        << kMaxFoldElements << " elements)";
  ConstTensor keep = ConstTensor::ints({}, {rows, cols}, kBool);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      keep.pushInt(*upper ? j - i >= k : j - i <= k);
  Location loc = nodeLoc(n);
  Value x = (*s)->value;
  auto mask = broadcastTo(n, materialize(keep, loc), shape, loc);
  if (failed(mask))
    return failure();
  auto type = tensorType(x);
  Value zero = splatLike(0.0, type.getElementType(), shape, loc);
  return define(n, 0, tsr::SelectOp::create(b, loc, type, *mask, x, zero));
}

LogicalResult Importer::convertCumSum(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto axisIn = constInts(n, 1, "axis");
  auto exclusive = attrInt(n, "exclusive", 0),
       reverse = attrInt(n, "reverse", 0);
  if (failed(s) || failed(axisIn) || failed(exclusive) || failed(reverse))
    return failure();
  Shape shape = shapeOf(**s);
  if (axisIn->size() != 1)
    return nodeError(n) << "axis must hold one value";
  auto axis = normAxis((*axisIn)[0], shape.size());
  if (!axis)
    return nodeError(n) << "axis " << (*axisIn)[0] << " out of range for rank "
                        << shape.size();
  if (!(*s)->cst)
    return constantOnly(n);
  return defineConst(
      n, 0, eval::cumsum(*(*s)->cst, *axis, *exclusive != 0, *reverse != 0));
}

LogicalResult Importer::convertIsInf(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto pos = attrInt(n, "detect_positive", 1),
       neg = attrInt(n, "detect_negative", 1);
  if (failed(s) || failed(pos) || failed(neg))
    return failure();
  if (!(*s)->cst)
    return constantOnly(n);
  return defineConst(n, 0, eval::isInf(*(*s)->cst, *pos != 0, *neg != 0));
}

LogicalResult Importer::convertPad(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  auto modeAttr = attrString(n, "mode", "constant");
  if (failed(s) || failed(modeAttr))
    return failure();
  Shape shape = shapeOf(**s);
  int64_t rank = shape.size();
  eval::PadMode mode;
  if (*modeAttr == "constant")
    mode = eval::PadMode::Constant;
  else if (*modeAttr == "edge")
    mode = eval::PadMode::Edge;
  else if (*modeAttr == "reflect")
    mode = eval::PadMode::Reflect;
  else
    return nodeError(n) << "unsupported mode '" << *modeAttr << "'";
  // pads: an input from opset 11 on (an attribute before); opset 18 adds
  // `axes`, naming the dims that the pads cover.
  Shape given;
  double value = 0;
  if (opset < 11) {
    auto p = attrInts(n, "pads");
    auto v = attrFloat(n, "value", 0.0f);
    if (failed(p) || failed(v))
      return failure();
    if (!*p)
      return nodeError(n) << "needs 'pads'";
    given = **p;
    value = *v;
  } else {
    auto p = constInts(n, 1, "pads");
    if (failed(p))
      return failure();
    given = *p;
    if (hasInput(n, 2)) {
      auto c = constInput(n, 2, "constant_value");
      if (failed(c))
        return failure();
      if ((*c)->size() != 1)
        return nodeError(n) << "constant_value must hold one value";
      value = (*c)->getF(0);
    }
  }
  Shape axes;
  if (hasInput(n, 3)) {
    auto a = constInts(n, 3, "axes");
    if (failed(a))
      return failure();
    for (int64_t ax : *a) {
      auto na = normAxis(ax, rank);
      if (!na || llvm::is_contained(axes, *na))
        return nodeError(n) << "invalid axes " << shapeStr(*a);
      axes.push_back(*na);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  int64_t na = axes.size();
  if (static_cast<int64_t>(given.size()) != 2 * na)
    return nodeError(n) << "pads " << shapeStr(given) << " must have " << 2 * na
                        << " entries";
  Shape pads(2 * rank, 0);
  for (int64_t k = 0; k < na; ++k) {
    pads[axes[k]] = given[k];
    pads[axes[k] + rank] = given[k + na];
  }
  if ((*s)->cst)
    return defineEval(n, 0, eval::pad(*(*s)->cst, pads, mode, value));
  if (mode != eval::PadMode::Constant)
    return nodeError(n) << "mode '" << *modeAttr
                        << "' is supported only on compile-time constants";
  // Constant padding of a tensor: per dim, crop (negative pads) with a slice,
  // then concatenate splat blocks before and after.
  Location loc = nodeLoc(n);
  Value x = (*s)->value;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t lo = pads[d], hi = pads[d + rank];
    Shape cur(tensorType(x).getShape());
    if (cur[d] + lo + hi < 0)
      return nodeError(n) << "pads " << shapeStr(given) << " crop dimension "
                          << d << " below zero";
    if (lo < 0 || hi < 0) {
      Shape start(rank, 0), limit(cur), step(rank, 1);
      start[d] = std::max<int64_t>(0, -lo);
      limit[d] = cur[d] - std::max<int64_t>(0, -hi);
      auto sl = buildSlice(x, start, limit, step, loc);
      if (failed(sl))
        return failure();
      x = *sl;
      cur = Shape(tensorType(x).getShape());
    }
    SmallVector<Value> parts;
    Type elem = tensorType(x).getElementType();
    if (lo > 0) {
      Shape ps(cur);
      ps[d] = lo;
      parts.push_back(splatLike(value, elem, ps, loc));
    }
    parts.push_back(x);
    if (hi > 0) {
      Shape ps(cur);
      ps[d] = hi;
      parts.push_back(splatLike(value, elem, ps, loc));
    }
    if (parts.size() > 1) {
      Shape out(cur);
      out[d] += std::max<int64_t>(0, lo) + std::max<int64_t>(0, hi);
      x = tsr::ConcatOp::create(b, loc, withShape(x, out), parts,
                                b.getI64IntegerAttr(d));
    }
  }
  return define(n, 0, x);
}

const llvm::StringMap<Importer::OpHandler> &Importer::handlers() {
  static const llvm::StringMap<OpHandler> table = [] {
    llvm::StringMap<OpHandler> t;
    auto add =
        [&](StringRef op, bool runtime,
            std::function<LogicalResult(Importer &, const onnx::NodeProto &)>
                f) {
          t[op] = OpHandler{std::move(f), runtime};
        };
    auto binary = [&](StringRef op, Bin k, bool runtime) {
      add(op, runtime, [k](Importer &im, const onnx::NodeProto &n) {
        return im.convertBinary(n, k);
      });
    };
    binary("Add", Bin::Add, true);
    binary("Sub", Bin::Sub, true);
    binary("Mul", Bin::Mul, true);
    binary("Div", Bin::Div, true);
    binary("Pow", Bin::Pow, true);
    binary("Equal", Bin::Equal, true);
    binary("Less", Bin::Less, false);
    binary("Greater", Bin::Greater, false);
    binary("LessOrEqual", Bin::LessEq, false);
    binary("GreaterOrEqual", Bin::GreaterEq, false);
    binary("And", Bin::And, false);
    binary("Or", Bin::Or, false);
    binary("Xor", Bin::Xor, false);
    add("Mod", false, [](Importer &im, const onnx::NodeProto &n) {
      auto fmod = im.attrInt(n, "fmod", 0);
      if (failed(fmod))
        return failure();
      return im.convertBinary(n, *fmod ? Bin::FMod : Bin::Mod);
    });
    auto variadic = [&](StringRef op, Bin k) {
      add(op, true, [k](Importer &im, const onnx::NodeProto &n) {
        return im.convertVariadic(n, k);
      });
    };
    variadic("Max", Bin::Max);
    variadic("Min", Bin::Min);
    variadic("Sum", Bin::Add);
    auto unary = [&](StringRef op, Un k, bool runtime) {
      add(op, runtime, [k](Importer &im, const onnx::NodeProto &n) {
        return im.convertUnary(n, k);
      });
    };
    unary("Neg", Un::Neg, true);
    unary("Sqrt", Un::Sqrt, true);
    unary("Exp", Un::Exp, true);
    unary("Log", Un::Log, true);
    unary("Relu", Un::Relu, true);
    unary("Tanh", Un::Tanh, true);
    unary("Erf", Un::Erf, true);
    unary("Reciprocal", Un::Reciprocal, true);
    unary("Sigmoid", Un::Sigmoid, true);
    unary("Abs", Un::Abs, false);
    unary("Floor", Un::Floor, false);
    unary("Ceil", Un::Ceil, false);
    unary("Round", Un::Round, false);
    unary("Sign", Un::Sign, false);
    unary("Not", Un::Not, false);
    unary("Sin", Un::Sin, false);
    unary("Cos", Un::Cos, false);
    unary("IsNaN", Un::IsNaN, false);
    auto member = [&](StringRef op, bool runtime,
                      LogicalResult (Importer::*f)(const onnx::NodeProto &)) {
      add(op, runtime,
          [f](Importer &im, const onnx::NodeProto &n) { return (im.*f)(n); });
    };
    member("Constant", false, &Importer::convertConstant);
    member("Where", true, &Importer::convertWhere);
    member("Cast", true, &Importer::convertCast);
    member("Shape", true, &Importer::convertShape);
    member("Size", true, &Importer::convertSize);
    for (StringRef op :
         {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
      member(op, true, &Importer::convertReshapeLike);
    member("Transpose", true, &Importer::convertTranspose);
    member("Slice", true, &Importer::convertSlice);
    member("Split", true, &Importer::convertSplit);
    member("Concat", true, &Importer::convertConcat);
    member("Gather", true, &Importer::convertGather);
    member("Expand", true, &Importer::convertExpand);
    member("Range", false, &Importer::convertRange);
    member("ConstantOfShape", false, &Importer::convertConstantOfShape);
    member("MatMul", true, &Importer::convertMatMul);
    member("Gemm", true, &Importer::convertGemm);
    member("Softmax", true, &Importer::convertSoftmax);
    member("LayerNormalization", true, &Importer::convertLayerNorm);
    for (StringRef op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"})
      member(op, true, &Importer::convertReduce);
    member("ReduceProd", false, &Importer::convertReduce);
    member("Dropout", true, &Importer::convertDropout);
    member("Gelu", true, &Importer::convertGelu);
    member("Trilu", true, &Importer::convertTrilu);
    member("CumSum", false, &Importer::convertCumSum);
    member("IsInf", false, &Importer::convertIsInf);
    member("Pad", true, &Importer::convertPad);
    return t;
  }();
  return table;
}

LogicalResult Importer::convertNode(const onnx::NodeProto &n) {
  const auto &table = handlers();
  auto it = table.find(n.op_type());
  if ((!n.domain().empty() && n.domain() != "ai.onnx") || it == table.end())
    return nodeError(n) << "unsupported ONNX op";
  if (n.output_size() == 0 || n.output(0).empty())
    return nodeError(n) << "has no output";
  return it->second.convert(*this, n);
}

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

OwningOpRef<ModuleOp> Importer::run(const onnx::ModelProto &model) {
  if (failed(readOpset(model)))
    return nullptr;
  const onnx::GraphProto &g = model.graph();

  GraphState st;
  if (failed(compileRegex(opts.freezeRegex, "--freeze", st.freeze)) ||
      failed(compileRegex(opts.trainableRegex, "--trainable", st.trainable)))
    return nullptr;
  if (failed(checkSupported(g)))
    return nullptr;

  for (const auto &node : g.node())
    for (const auto &in : node.input())
      used.insert(in);
  for (const auto &out : g.output())
    used.insert(out.name());

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());

  if (failed(readInitializers(g, st)) || failed(readGraphInputs(g, st)))
    return nullptr;
  planInitializers(g, st);
  buildArguments(st);
  if (st.weightsAbsent)
    (*module)->setAttr(kWeightsAttr, b.getStringAttr(kWeightsAbsent));

  auto func = func::FuncOp::create(b, fileLoc, "forward",
                                   b.getFunctionType(st.argTypes, {}));
  forwardFunc = func;
  forwardArgTypes = &st.argTypes;
  if (failed(bindArguments(g, func, st)) || failed(convertNodes(g, st.plan)) ||
      failed(buildResults(g, func, st.argTypes)))
    return nullptr;

  if (failed(verify(*module))) {
    error() << "internal error: the imported module does not verify";
    return nullptr;
  }
  if (opts.raise) {
    if (failed(raiseTsrPatterns(*module)) || failed(verify(*module))) {
      error() << "internal error: raising patterns failed";
      return nullptr;
    }
  }
  return module;
}

LogicalResult Importer::readOpset(const onnx::ModelProto &model) {
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset == 0)
    return error() << "model imports no default-domain opset";
  return success();
}

LogicalResult Importer::compileRegex(const std::string &re, StringRef flag,
                                     std::optional<llvm::Regex> &out) {
  if (re.empty())
    return success();
  out.emplace(re);
  std::string why;
  if (!out->isValid(why))
    return error() << "invalid " << flag << " regex '" << re << "': " << why;
  return success();
}

LogicalResult Importer::checkSupported(const onnx::GraphProto &g) {
  // Every op the model uses that Tessera does not convert, in one error.
  std::vector<std::string> order;
  llvm::StringMap<std::pair<int, std::string>> unsupported;
  const auto &table = handlers();
  for (const auto &node : g.node()) {
    bool known = (node.domain().empty() || node.domain() == "ai.onnx") &&
                 table.count(node.op_type());
    if (known)
      continue;
    std::string key = node.op_type();
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      key = node.domain() + "::" + key;
    auto &entry = unsupported[key];
    if (entry.first++ == 0) {
      entry.second =
          node.name().empty()
              ? "<output " +
                    (node.output_size() ? node.output(0) : std::string()) + ">"
              : node.name();
      order.push_back(key);
    }
  }
  if (unsupported.empty())
    return success();
  auto diag = error() << "unsupported ONNX op" << (order.size() > 1 ? "s" : "")
                      << " (" << order.size() << " kind"
                      << (order.size() > 1 ? "s" : "") << "): ";
  for (size_t k = 0; k < order.size(); ++k) {
    const auto &entry = unsupported[order[k]];
    diag << (k ? "; " : "") << "'" << order[k] << "' in " << entry.first
         << " node" << (entry.first > 1 ? "s" : "") << " (first: '"
         << entry.second << "')";
  }
  return failure();
}

LogicalResult Importer::readInitializers(const onnx::GraphProto &g,
                                         GraphState &st) {
  // Initializers: integer ones are constants; the floating-point ones are
  // classified (Initializers.h) into trained parameters, constants and
  // tied copies.
  for (const auto &t : g.initializer()) {
    if (!st.initNames.insert(t.name()).second)
      return error() << "initializer '" << t.name() << "' is defined twice";
    if (!isFloatDType(t.data_type())) {
      auto c = readTensor(t, "initializer");
      if (failed(c))
        return failure();
      st.constInits.emplace_back(t.name(), std::move(*c));
      continue;
    }
    InitView v;
    v.name = t.name();
    v.dtype = t.data_type();
    v.dims.assign(t.dims().begin(), t.dims().end());
    if (numElements(v.dims) < 0)
      return error() << "initializer '" << t.name() << "' has invalid dims "
                     << shapeStr(v.dims);
    if (!dtypeToType(v.dtype, &ctx))
      return error() << "initializer '" << t.name() << "' has unsupported type "
                     << dtypeName(v.dtype);
    if (initializerHasData(t, numElements(v.dims))) {
      auto raw = tensorBytes(t, "initializer", st.scratch.emplace_back());
      if (failed(raw))
        return failure();
      v.data = raw->bytes;
      v.hasData = true;
      st.floatBytes[t.name()] = *raw;
    }
    st.views.push_back(std::move(v));
  }
  return success();
}

LogicalResult Importer::readGraphInputs(const onnx::GraphProto &g,
                                        GraphState &st) {
  // A float graph input of a model that also takes integer inputs (the
  // token ids) is a parameter without values: that is how
  // torch.onnx.export(..., export_params=False) writes parameters. Tessera
  // feeds a model only token ids, so such an input could not be data. In a
  // model without integer inputs (an op-level test model) float inputs stay
  // data inputs.
  bool hasIntegerInput = false;
  for (const auto &in : g.input())
    if (!st.initNames.contains(in.name()) && in.type().has_tensor_type()) {
      int32_t dt = in.type().tensor_type().elem_type();
      hasIntegerInput |= dt != kUndefined && !isFloatDType(dt) && dt != kBool;
    }
  for (const auto &in : g.input()) {
    if (st.initNames.contains(in.name()))
      continue; // IR < 4 lists initializers as inputs too
    if (!in.type().has_tensor_type())
      return error() << "graph input '" << in.name() << "' is not a tensor";
    const auto &tt = in.type().tensor_type();
    Type elem = dtypeToType(tt.elem_type(), &ctx);
    if (!elem)
      return error() << "graph input '" << in.name()
                     << "' has unsupported type " << dtypeName(tt.elem_type());
    bool isParam = hasIntegerInput && isFloatDType(tt.elem_type());
    if (!tt.has_shape())
      return error() << "graph input '" << in.name()
                     << "' has no shape; Tessera needs static shapes";
    Shape dims;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto &dim = tt.shape().dim(d);
      if (!dim.has_dim_value() || dim.dim_value() < 0) {
        auto diag = error() << "graph input '" << in.name() << "' has a "
                            << "dynamic dimension " << d;
        if (dim.has_dim_param())
          diag << " ('" << dim.dim_param() << "')";
        diag << "; Tessera needs static shapes (export with fixed sizes)";
        if (isParam)
          diag << " (a float input of a model with integer inputs is a "
                  "parameter, whose shape must be static)";
        return failure();
      }
      dims.push_back(dim.dim_value());
    }
    if (tooManyElements(dims))
      return error() << "graph input '" << in.name() << "' of shape "
                     << shapeStr(dims) << " has too many elements";
    st.graphArgs.push_back(
        {in.name(), RankedTensorType::get(dims, elem), isParam});
    if (!isParam)
      st.dataInputs.insert(in.name());
  }
  return success();
}

void Importer::planInitializers(const onnx::GraphProto &g, GraphState &st) {
  st.plan = classifyInitializers(g, st.views, st.dataInputs);
  for (const InitView &v : st.views)
    st.viewByName[v.name] = &v;

  // --trainable turns constants into trained parameters (by name).
  std::vector<std::pair<std::string, std::string>> promoted;
  for (const InitView &v : st.views) {
    auto it = st.plan.constants.find(v.name);
    if (it != st.plan.constants.end() && st.trainable &&
        st.trainable->match(v.name)) {
      promoted.emplace_back(v.name, it->second);
      st.plan.constants.erase(it);
    }
  }
  for (auto &[name, why] : promoted)
    st.plan.params.push_back(
        ParamPlan{name,
                  name,
                  st.viewByName[name]->dims,
                  {},
                  "--trainable matched (otherwise: " + why + ")"});
}

TensorBytes Importer::firstSlice(const ParamPlan &p, const InitView &v,
                                 TensorBytes raw, std::vector<char> &slice) {
  // The first slice along the repeated dims.
  ConstTensor whole = decodeTensor(v.dtype, v.dims, raw.bytes);
  Shape zeros(v.dims.size(), 0), ones(v.dims.size(), 1);
  ConstTensor first = eval::slice(whole, zeros, ones, p.shape);
  for (int64_t e = 0; e < first.size(); ++e) {
    double x = first.getF(e);
    switch (v.dtype) {
    case kFloat:
      appendLE(slice, static_cast<float>(x));
      break;
    case kDouble:
      appendLE(slice, x);
      break;
    default: {
      llvm::APFloat f(x);
      bool lost = false;
      f.convert(v.dtype == kBFloat16 ? llvm::APFloat::BFloat()
                                     : llvm::APFloat::IEEEhalf(),
                llvm::APFloat::rmNearestTiesToEven, &lost);
      appendLE(slice, static_cast<uint16_t>(f.bitcastToAPInt().getZExtValue()));
    }
    }
  }
  return TensorBytes{ArrayRef<char>(slice.data(), slice.size()), nullptr};
}

void Importer::buildArguments(GraphState &st) {
  // Arguments: the parameters (classifier order, then the float graph inputs
  // that stand for parameters), then the data inputs. A parameter whose
  // values the file does not hold gets no `tsr.init`, and the module is
  // marked `tsr.weights = "absent"` (OnnxImporter.h).
  ImportReport &report = opts.report ? *opts.report : st.localReport;
  report.entries.clear();
  auto paramAttrs = [&](StringRef name, bool frozen) {
    NamedAttrList attrs;
    attrs.set(tsr::kNameAttrName, b.getStringAttr(name));
    attrs.set(tsr::kRoleAttrName, b.getStringAttr(frozen ? "frozen" : "param"));
    return attrs;
  };
  auto addArg = [&](Type type, NamedAttrList attrs, const std::string &name) {
    st.argTypes.push_back(type);
    st.argAttrs.push_back(attrs);
    st.argNames.push_back(name);
  };
  const InitializerPlan &plan = st.plan;
  for (const ParamPlan &p : plan.params) {
    const InitView &v = *st.viewByName[p.source];
    auto type = RankedTensorType::get(p.shape, dtypeToType(v.dtype, &ctx));
    bool frozen = st.freeze && st.freeze->match(p.name);
    NamedAttrList attrs = paramAttrs(p.name, frozen);
    if (v.hasData) {
      TensorBytes raw = st.floatBytes[p.source];
      std::vector<char> &slice = st.scratch.emplace_back();
      if (!p.repeatDims.empty())
        raw = firstSlice(p, v, raw, slice);
      attrs.set(tsr::kInitAttrName, blobAttr(p.name, type, raw));
    } else {
      st.weightsAbsent = true;
    }
    addArg(type, attrs, p.name);
    report.entries.push_back({p.name, frozen ? "frozen" : "trained",
                              Shape(p.shape),
                              (frozen ? "--freeze matched; " : "") + p.reason});
  }
  for (const GraphArg &a : st.graphArgs)
    if (a.isParam) {
      st.weightsAbsent = true;
      bool frozen = st.freeze && st.freeze->match(a.name);
      addArg(a.type, paramAttrs(a.name, frozen), a.name);
      report.entries.push_back({a.name, frozen ? "frozen" : "trained",
                                Shape(a.type.getShape()),
                                "a float graph input of a model with integer "
                                "inputs (export_params=False)"});
    }
  for (const GraphArg &a : st.graphArgs)
    if (!a.isParam) {
      NamedAttrList attrs;
      attrs.set(tsr::kNameAttrName, b.getStringAttr(a.name));
      attrs.set(tsr::kRoleAttrName, b.getStringAttr("input"));
      addArg(a.type, attrs, a.name);
    }
  for (const InitView &v : st.views) {
    if (auto it = plan.constants.find(v.name); it != plan.constants.end())
      report.entries.push_back({v.name, "constant", v.dims, it->second});
    if (auto it = plan.transposedTies.find(v.name);
        it != plan.transposedTies.end())
      report.entries.push_back(
          {v.name, "tied", v.dims,
           "tied to '" + it->second +
               "': equal to its transpose (an exporter-folded Transpose of "
               "a weight shared with it)"});
  }
  for (auto &[name, why] : plan.constants)
    if (!st.viewByName.count(name)) // an alias folded as a constant
      report.entries.push_back({name.str(), "constant", Shape(), why});
}

LogicalResult Importer::bindArguments(const onnx::GraphProto &g,
                                      func::FuncOp func, GraphState &st) {
  const InitializerPlan &plan = st.plan;
  Block *body = func.addEntryBlock();
  b.setInsertionPointToEnd(body);
  for (size_t k = 0; k < st.argTypes.size(); ++k) {
    func.setArgAttrs(k, st.argAttrs[k].getDictionary(&ctx));
    if (!env.try_emplace(st.argNames[k], Slot{body->getArgument(k), nullptr})
             .second)
      return error() << "graph input '" << st.argNames[k]
                     << "' is defined twice";
  }
  // Parameters trained as one slice: broadcast back to the initializer's
  // shape where the graph reads them.
  for (const ParamPlan &p : plan.params) {
    if (p.repeatDims.empty())
      continue;
    Value arg = env[p.name].value;
    auto full = broadcastTo(onnx::NodeProto(), arg,
                            st.viewByName[p.source]->dims, fileLoc);
    if (failed(full))
      return failure();
    env[p.name].value = *full;
  }
  for (auto &[name, c] : st.constInits)
    env[name] = Slot{Value(), std::make_shared<const ConstTensor>(c)};
  for (auto &[name, why] : plan.constants) {
    auto vit = st.viewByName.find(name);
    // An alias folded as a constant reads its source's values.
    const InitView *v = nullptr;
    if (vit != st.viewByName.end()) {
      v = vit->second;
    } else {
      for (int i : plan.aliasNodes)
        if (g.node(i).output(0) == name.str())
          v = st.viewByName[g.node(i).input(0)];
    }
    if (!v || !v->hasData)
      continue; // weight-free: Initializers.h keeps these as parameters
    if (numElements(v->dims) > kMaxFoldElements * 4)
      return error() << "initializer '" << name.str() << "' ("
                     << shapeStr(v->dims) << ") is classified as a constant ("
                     << why
                     << ") but is too large to fold; pass --trainable to "
                        "train it";
    env[name] = Slot{Value(), std::make_shared<const ConstTensor>(
                                  decodeTensor(v->dtype, v->dims, v->data))};
  }
  for (auto &[tied, primary] : plan.transposedTies) {
    Value p = env[primary].value;
    auto pt = tensorType(p);
    SmallVector<int64_t> shape = {pt.getDimSize(1), pt.getDimSize(0)};
    env[tied] =
        Slot{tsr::TransposeOp::create(b, fileLoc, withShape(p, shape), p,
                                      b.getDenseI64ArrayAttr({1, 0})),
             nullptr};
  }
  return success();
}

LogicalResult Importer::convertNodes(const onnx::GraphProto &g,
                                     const InitializerPlan &plan) {
  for (int i = 0; i < g.node_size(); ++i) {
    if (plan.aliasNodes.contains(i))
      continue;
    const onnx::NodeProto *node = &g.node(i);
    onnx::NodeProto renamed;
    for (int k = 0; k < node->input_size(); ++k) {
      auto it = plan.renamedInputs.find({i, k});
      if (it == plan.renamedInputs.end())
        continue;
      if (node != &renamed) {
        renamed = *node;
        node = &renamed;
      }
      renamed.set_input(k, it->second);
    }
    if (failed(convertNode(*node)))
      return failure();
  }
  return success();
}

LogicalResult Importer::buildResults(const onnx::GraphProto &g,
                                     func::FuncOp func,
                                     ArrayRef<Type> argTypes) {
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const auto &out : g.output()) {
    auto it = env.find(out.name());
    if (it == env.end())
      return error() << "graph output '" << out.name() << "' is never produced";
    if (!it->second.value) {
      it->second.value = materialize(*it->second.cst, fileLoc);
      if (!it->second.value)
        return error() << "graph output '" << out.name()
                       << "' has unsupported type";
    }
    Value v = it->second.value;
    auto vt = tensorType(v);
    if (out.type().has_tensor_type()) {
      const auto &tt = out.type().tensor_type();
      Type elem = dtypeToType(tt.elem_type(), &ctx);
      if (elem && elem != vt.getElementType())
        return error() << "graph output '" << out.name() << "' is declared "
                       << dtypeName(tt.elem_type()) << " but computes " << vt;
      if (tt.has_shape()) {
        bool mismatch = tt.shape().dim_size() != vt.getRank();
        for (int d = 0; !mismatch && d < tt.shape().dim_size(); ++d)
          mismatch = tt.shape().dim(d).has_dim_value() &&
                     tt.shape().dim(d).dim_value() != vt.getDimSize(d);
        if (mismatch)
          return error() << "graph output '" << out.name()
                         << "' has a declared shape that differs from the "
                            "computed "
                         << shapeStr(vt.getShape());
      }
    }
    results.push_back(v);
    resultTypes.push_back(vt);
  }
  func::ReturnOp::create(b, fileLoc, results);
  func.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  for (int k = 0; k < g.output_size(); ++k)
    func.setResultAttr(k, tsr::kNameAttrName,
                       b.getStringAttr(g.output(k).name()));
  return success();
}

/// Whether the ONNX checker cannot see `t`'s values: they are in an external
/// file (which the importer reads and checks itself: ExternalData.h), or a
/// float initializer has none (a weight-free model, initializerHasData).
bool checkerCannotRead(const onnx::TensorProto &t) {
  if (ExternalDataReader::isExternal(t))
    return true;
  if (!isFloatDType(t.data_type()))
    return false;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return false; // invalid dims: reported by the importer
    n = d == 0 || n <= INT64_MAX / d ? n * d : INT64_MAX;
  }
  return !initializerHasData(t, n);
}

/// Runs the ONNX checker. The checker rejects a tensor without values, and
/// external data it cannot find (it has no model path), so when some
/// initializers are external or lack data it checks a copy in which those
/// are graph inputs of the same type and shape instead; the copy holds only
/// the inline initializers.
void checkModel(const onnx::ModelProto &model) {
  const auto &inits = model.graph().initializer();
  if (llvm::none_of(inits, checkerCannotRead)) {
    onnx::checker::check_model(model);
    return;
  }
  onnx::ModelProto copy;
  {
    // Copy everything but the initializers (swapped out and back).
    auto &graph = const_cast<onnx::ModelProto &>(model);
    google::protobuf::RepeatedPtrField<onnx::TensorProto> saved;
    saved.Swap(graph.mutable_graph()->mutable_initializer());
    copy = model;
    saved.Swap(graph.mutable_graph()->mutable_initializer());
  }
  llvm::StringSet<> inputs;
  for (const auto &in : model.graph().input())
    inputs.insert(in.name());
  onnx::GraphProto *g = copy.mutable_graph();
  for (const auto &t : inits) {
    if (!checkerCannotRead(t)) {
      *g->add_initializer() = t;
      continue;
    }
    if (inputs.contains(t.name()))
      continue; // IR < 4 lists initializers as inputs too
    onnx::ValueInfoProto *in = g->add_input();
    in->set_name(t.name());
    auto *tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto *shape = tt->mutable_shape();
    for (int64_t d : t.dims())
      shape->add_dim()->set_dim_value(d);
  }
  onnx::checker::check_model(copy);
}

/// `text` on one line: libonnx's checker messages span several ("...\n\n==>
/// Context: Bad node spec for node. Name: ..."); every run of whitespace
/// holding a line break becomes one space, and the ends are trimmed.
std::string oneLine(llvm::StringRef text) {
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n');
  std::string out;
  for (llvm::StringRef line : lines) {
    line = line.trim();
    if (line.empty())
      continue;
    if (!out.empty())
      out += ' ';
    out += line.str();
  }
  return out;
}

/// The newest default-domain opset the importer is checked against: the
/// node tests of PyPI onnx 1.23.2 (onnx-node.pypi, docs/OpCoverage.md).
/// libonnx (Debian's 1.12) knows older opsets only; models between the two
/// (the dynamo exporter writes opset 18 and later) are imported without the
/// ONNX checker. A newer opset may change an op's meaning, so it is refused.
constexpr int64_t kNewestImportedOpset = 28;

OwningOpRef<ModuleOp> importModel(llvm::StringRef bytes,
                                  llvm::StringRef displayName, MLIRContext &ctx,
                                  const ImportOptions &opts,
                                  llvm::StringRef modelDir) {
  loadImportDialects(ctx);
  Location loc = FileLineColLoc::get(&ctx, displayName, 0, 0);
  try {
    onnx::ModelProto model;
    if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
      emitError(loc) << "model is larger than 2 GiB; external data is not "
                        "supported";
      return nullptr;
    }
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      emitError(loc) << "cannot parse as an ONNX ModelProto (truncated or "
                        "not an ONNX file)";
      return nullptr;
    }
    if (!model.has_graph()) {
      emitError(loc) << "ONNX model has no graph";
      return nullptr;
    }
    // libonnx validates nodes against the schemas it knows; a model of a
    // newer default-domain opset than this libonnx knows is imported without
    // the checker (the importer validates what it uses itself).
    int64_t modelOpset = 0, knownOpset = 0;
    for (const auto &imp : model.opset_import())
      if (imp.domain().empty() || imp.domain() == "ai.onnx")
        modelOpset = imp.version();
    const auto &ranges =
        onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    if (auto it = ranges.find(""); it != ranges.end())
      knownOpset = it->second.second;
    if (modelOpset > kNewestImportedOpset) {
      emitError(loc) << "model opset " << modelOpset
                     << " is newer than the newest this importer knows ("
                     << kNewestImportedOpset << ")";
      return nullptr;
    }
    if (knownOpset && modelOpset > knownOpset) {
      emitWarning(loc) << "model opset " << modelOpset
                       << " is newer than this libonnx knows (" << knownOpset
                       << "); skipping the ONNX checker";
    } else {
      try {
        checkModel(model);
      } catch (const std::exception &e) {
        emitError(loc) << "invalid ONNX model: " << oneLine(e.what());
        return nullptr;
      }
    }
    Importer importer(ctx, displayName, opts, modelDir);
    return importer.run(model);
  } catch (const std::exception &e) {
    emitError(loc) << "ONNX import failed: " << oneLine(e.what());
  } catch (...) {
    emitError(loc) << "ONNX import failed with an unknown exception";
  }
  return nullptr;
}

} // namespace

std::optional<std::string> weightsMissing(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto role = tsr::getArgRole(func, i);
      if (!role || (role.getValue() != "param" && role.getValue() != "frozen"))
        continue;
      if (func.getArgAttr(i, tsr::kInitAttrName))
        continue;
      auto name = tsr::getArgName(func, i);
      return name ? name.str() : ("argument #" + Twine(i)).str();
    }
  }
  return std::nullopt;
}

std::vector<SupportedOp> supportedOps() {
  std::vector<SupportedOp> ops;
  for (const auto &entry : Importer::handlers())
    ops.push_back({entry.getKey().str(), entry.getValue().runtime});
  llvm::sort(ops, [](const SupportedOp &a, const SupportedOp &b) {
    return a.opType < b.opType;
  });
  return ops;
}

int64_t ImportReport::trainedCount() const {
  return llvm::count_if(entries,
                        [](const Entry &e) { return e.kind == "trained"; });
}

int64_t ImportReport::trainedElements() const {
  int64_t n = 0;
  for (const Entry &e : entries)
    if (e.kind == "trained")
      n += numElements(e.shape);
  return n;
}

void ImportReport::print(llvm::raw_ostream &os) const {
  auto count = [&](StringRef kind) {
    return llvm::count_if(entries,
                          [&](const Entry &e) { return e.kind == kind; });
  };
  os << "trained: " << trainedCount() << " parameters, " << trainedElements()
     << " elements; frozen: " << count("frozen")
     << "; constants: " << count("constant") << "; tied: " << count("tied")
     << "\n";
  for (const Entry &e : entries)
    os << "  " << llvm::left_justify(e.kind, 8) << " " << e.name << " "
       << shapeStr(e.shape) << ": " << e.reason << "\n";
}

void loadImportDialects(MLIRContext &ctx) {
  ctx.loadDialect<tsr::TsrDialect, func::FuncDialect>();
}

OwningOpRef<ModuleOp> importOnnxBytes(llvm::StringRef bytes,
                                      llvm::StringRef displayName,
                                      MLIRContext &ctx,
                                      const ImportOptions &opts,
                                      llvm::StringRef modelDir) {
  return importModel(bytes, displayName, ctx, opts, modelDir);
}

OwningOpRef<ModuleOp> importOnnxFile(llvm::StringRef path, MLIRContext &ctx,
                                     const ImportOptions &opts) {
  loadImportDialects(ctx);
  // A FIFO would block the read and /dev/zero never end: only regular files
  // (common/io/FileSafety.h).
  if (llvm::sys::fs::exists(path)) {
    std::string kind = io::describeNonRegular(path);
    if (!kind.empty()) {
      emitError(FileLineColLoc::get(&ctx, path, 0, 0))
          << "cannot open ONNX file: it is " << kind << ", not a regular file";
      return nullptr;
    }
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(&ctx, path, 0, 0))
        << "cannot open ONNX file: " << buffer.getError().message();
    return nullptr;
  }
  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  return importModel((*buffer)->getBuffer(), path, ctx, opts, dir);
}

} // namespace tessera::import

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
#include "compiler/import/ConstTensor.h"
#include "compiler/import/RaisePatterns.h"

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
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
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

enum class Bin {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  Mod,
  Equal,
  Less,
  Greater,
  LessEq,
  GreaterEq,
  And,
  Or,
  Xor
};
enum class Un {
  Neg,
  Abs,
  Sqrt,
  Exp,
  Log,
  Floor,
  Ceil,
  Relu,
  Tanh,
  Erf,
  Reciprocal,
  Sign,
  Not,
  Sigmoid
};

bool isCompare(Bin k) {
  return k == Bin::Equal || k == Bin::Less || k == Bin::Greater ||
         k == Bin::LessEq || k == Bin::GreaterEq;
}
bool isLogical(Bin k) { return k == Bin::And || k == Bin::Or || k == Bin::Xor; }

//===----------------------------------------------------------------------===//
// Importer
//===----------------------------------------------------------------------===//

class Importer {
public:
  Importer(MLIRContext &ctx, StringRef file, const ImportOptions &opts)
      : ctx(ctx), file(file.str()), opts(opts),
        fileLoc(FileLineColLoc::get(&ctx, file, 0, 0)), b(&ctx) {}

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
  FailureOr<ConstTensor> readTensor(const onnx::TensorProto &t,
                                    const std::string &what);
  FailureOr<DenseResourceElementsAttr>
  readInitializerBlob(const onnx::TensorProto &t, RankedTensorType type);

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
  LogicalResult convertGelu(const onnx::NodeProto &n);

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
  llvm::StringSet<> used; ///< names read by some node or graph output
};

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

template <typename T> T readLE(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

int64_t dtypeBytes(int32_t dt) {
  switch (dt) {
  case kBool:
  case kInt8:
  case kUInt8:
    return 1;
  case kInt16:
  case kUInt16:
  case kFloat16:
  case kBFloat16:
    return 2;
  case kInt32:
  case kUInt32:
  case kFloat:
    return 4;
  case kInt64:
  case kUInt64:
  case kDouble:
    return 8;
  default:
    return 0;
  }
}

double halfBitsToDouble(uint16_t bits, int32_t dt) {
  llvm::APInt ap(16, bits);
  llvm::APFloat f(dt == kBFloat16 ? llvm::APFloat::BFloat()
                                  : llvm::APFloat::IEEEhalf(),
                  ap);
  bool lost = false;
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &lost);
  return f.convertToDouble();
}

/// Whether a float initializer of `n` elements holds its values in the file.
/// It does not when its data is external (Tessera never reads external data
/// files) or when it has dims but neither raw_data bytes nor typed data
/// (e.g. a shapes-only export); such a parameter's values are unknown. A
/// tensor with some but not all of its data is not "without data": reading
/// it reports the size mismatch.
bool initializerHasData(const onnx::TensorProto &t, int64_t n) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL ||
      t.external_data_size() > 0)
    return false;
  if (n == 0)
    return true;
  return !t.raw_data().empty() || t.float_data_size() > 0 ||
         t.double_data_size() > 0 || t.int32_data_size() > 0;
}

FailureOr<ConstTensor> Importer::readTensor(const onnx::TensorProto &t,
                                            const std::string &what) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL ||
      t.external_data_size() > 0)
    return error() << what << " '" << t.name()
                   << "' uses external data, which Tessera does not support "
                      "(save the model with all tensors inline)";
  ConstTensor c;
  c.dtype = t.data_type();
  if (!dtypeToType(c.dtype, &ctx))
    return error() << what << " '" << t.name() << "' has unsupported type "
                   << dtypeName(c.dtype);
  c.shape.assign(t.dims().begin(), t.dims().end());
  int64_t n = numElements(c.shape);
  if (n < 0)
    return error() << what << " '" << t.name() << "' has invalid dims "
                   << shapeStr(c.shape);
  if (n > kMaxFoldElements * 4)
    return error() << what << " '" << t.name() << "' is too large (" << n
                   << " elements) for a constant";
  int64_t bytes = dtypeBytes(c.dtype);
  if (t.has_raw_data()) {
    const std::string &raw = t.raw_data();
    if (static_cast<int64_t>(raw.size()) != n * bytes)
      return error() << what << " '" << t.name() << "' has " << raw.size()
                     << " bytes of raw_data, expected " << n * bytes;
    const char *p = raw.data();
    for (int64_t k = 0; k < n; ++k, p += bytes) {
      switch (c.dtype) {
      case kFloat:
        c.push(readLE<float>(p));
        break;
      case kDouble:
        c.push(readLE<double>(p));
        break;
      case kFloat16:
      case kBFloat16:
        c.push(halfBitsToDouble(readLE<uint16_t>(p), c.dtype));
        break;
      case kBool:
      case kUInt8:
        c.pushInt(readLE<uint8_t>(p));
        break;
      case kInt8:
        c.pushInt(readLE<int8_t>(p));
        break;
      case kInt16:
        c.pushInt(readLE<int16_t>(p));
        break;
      case kUInt16:
        c.pushInt(readLE<uint16_t>(p));
        break;
      case kInt32:
        c.pushInt(readLE<int32_t>(p));
        break;
      case kUInt32:
        c.pushInt(readLE<uint32_t>(p));
        break;
      default:
        c.pushInt(readLE<int64_t>(p));
        break;
      }
    }
    return c;
  }
  auto expect = [&](int64_t have) -> LogicalResult {
    if (have != n)
      return error() << what << " '" << t.name() << "' has " << have
                     << " data elements, expected " << n;
    return success();
  };
  switch (c.dtype) {
  case kFloat:
    if (failed(expect(t.float_data_size())))
      return failure();
    for (float v : t.float_data())
      c.push(v);
    break;
  case kDouble:
    if (failed(expect(t.double_data_size())))
      return failure();
    for (double v : t.double_data())
      c.push(v);
    break;
  case kInt64:
    if (failed(expect(t.int64_data_size())))
      return failure();
    for (int64_t v : t.int64_data())
      c.pushInt(v);
    break;
  case kUInt32:
  case kUInt64:
    if (failed(expect(t.uint64_data_size())))
      return failure();
    for (uint64_t v : t.uint64_data())
      c.pushInt(static_cast<int64_t>(v));
    break;
  case kFloat16:
  case kBFloat16:
    if (failed(expect(t.int32_data_size())))
      return failure();
    for (int32_t v : t.int32_data())
      c.push(halfBitsToDouble(static_cast<uint16_t>(v), c.dtype));
    break;
  default:
    if (failed(expect(t.int32_data_size())))
      return failure();
    for (int32_t v : t.int32_data())
      c.pushInt(v);
    break;
  }
  return c;
}

FailureOr<DenseResourceElementsAttr>
Importer::readInitializerBlob(const onnx::TensorProto &t,
                              RankedTensorType type) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL ||
      t.external_data_size() > 0)
    return error() << "initializer '" << t.name()
                   << "' uses external data, which Tessera does not support "
                      "(save the model with all tensors inline)";
  int32_t dt = t.data_type();
  int64_t n = type.getNumElements();
  int64_t bytes = dtypeBytes(dt);
  size_t align = static_cast<size_t>(bytes);
  AsmResourceBlob blob;
  if (t.has_raw_data()) {
    const std::string &raw = t.raw_data();
    if (static_cast<int64_t>(raw.size()) != n * bytes)
      return error() << "initializer '" << t.name() << "' has " << raw.size()
                     << " bytes of raw_data, expected " << n * bytes;
    blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(
        ArrayRef<char>(raw.data(), raw.size()), align);
  } else {
    int64_t have = dt == kFloat    ? t.float_data_size()
                   : dt == kDouble ? t.double_data_size()
                                   : t.int32_data_size();
    if (have != n)
      return error() << "initializer '" << t.name() << "' has " << have
                     << " data elements, expected " << n;
    if (dt == kFloat) {
      blob = HeapAsmResourceBlob::allocateAndCopyInferAlign(
          ArrayRef<float>(t.float_data().data(), n));
    } else if (dt == kDouble) {
      blob = HeapAsmResourceBlob::allocateAndCopyInferAlign(
          ArrayRef<double>(t.double_data().data(), n));
    } else {
      std::vector<uint16_t> bits;
      bits.reserve(n);
      for (int32_t v : t.int32_data())
        bits.push_back(static_cast<uint16_t>(v));
      blob = HeapAsmResourceBlob::allocateAndCopyInferAlign(
          ArrayRef<uint16_t>(bits));
    }
  }
  // Resource keys must be printable as bare identifiers.
  std::string key;
  for (char ch : t.name())
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

LogicalResult Importer::bind(const onnx::NodeProto &n, int idx, Slot s) {
  if (idx >= n.output_size() || n.output(idx).empty())
    return success();
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

double applyBin(Bin k, double a, double x, bool isInt) {
  switch (k) {
  case Bin::Add:
    return a + x;
  case Bin::Sub:
    return a - x;
  case Bin::Mul:
    return a * x;
  case Bin::Div:
    return a / x;
  case Bin::Pow:
    return std::pow(a, x);
  case Bin::Max:
    return std::max(a, x);
  case Bin::Min:
    return std::min(a, x);
  case Bin::Mod:
    return isInt ? a - x * std::floor(a / x) : std::fmod(a, x);
  case Bin::Equal:
    return a == x;
  case Bin::Less:
    return a < x;
  case Bin::Greater:
    return a > x;
  case Bin::LessEq:
    return a <= x;
  case Bin::GreaterEq:
    return a >= x;
  case Bin::And:
    return (a != 0) && (x != 0);
  case Bin::Or:
    return (a != 0) || (x != 0);
  case Bin::Xor:
    return (a != 0) != (x != 0);
  }
  return 0;
}

std::optional<int64_t> applyBinInt(Bin k, int64_t a, int64_t x) {
  switch (k) {
  case Bin::Add:
    return static_cast<int64_t>(static_cast<uint64_t>(a) +
                                static_cast<uint64_t>(x));
  case Bin::Sub:
    return static_cast<int64_t>(static_cast<uint64_t>(a) -
                                static_cast<uint64_t>(x));
  case Bin::Mul:
    return static_cast<int64_t>(static_cast<uint64_t>(a) *
                                static_cast<uint64_t>(x));
  case Bin::Div:
    if (x == 0 || (a == INT64_MIN && x == -1))
      return std::nullopt;
    return a / x;
  case Bin::Mod: {
    if (x == 0 || (a == INT64_MIN && x == -1))
      return std::nullopt;
    int64_t r = a % x; // ONNX Mod (fmod=0): sign of the divisor
    if (r != 0 && ((r < 0) != (x < 0)))
      r += x;
    return r;
  }
  case Bin::Pow: {
    if (x < 0)
      return a == 1 ? 1 : 0;
    uint64_t r = 1;
    for (int64_t e = 0; e < x && e < 64; ++e)
      r *= static_cast<uint64_t>(a);
    return static_cast<int64_t>(r);
  }
  case Bin::Max:
    return std::max(a, x);
  case Bin::Min:
    return std::min(a, x);
  default:
    return static_cast<int64_t>(
        applyBin(k, static_cast<double>(a), static_cast<double>(x), true));
  }
}

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
  if ((*sa)->cst && (*sb)->cst) {
    int64_t count = numElements(*out);
    if (count < 0 || count > kMaxFoldElements)
      return nodeError(n) << "constant result too large to fold";
    const ConstTensor &A = *(*sa)->cst, &B = *(*sb)->cst;
    ConstTensor r;
    r.dtype = (isCompare(kind) || isLogical(kind)) ? kBool : dtA;
    r.shape = *out;
    auto ia = broadcastIndices(A.shape, *out);
    auto ib = broadcastIndices(B.shape, *out);
    bool intMath = !A.isFloat() && !B.isFloat();
    for (int64_t e = 0; e < count; ++e) {
      if (intMath && !isCompare(kind) && !isLogical(kind)) {
        auto v = applyBinInt(kind, A.getI(ia[e]), B.getI(ib[e]));
        if (!v)
          return nodeError(n) << "integer division by zero while folding";
        r.pushInt(*v);
      } else {
        r.push(applyBin(kind, A.getF(ia[e]), B.getF(ib[e]), intMath));
      }
    }
    return defineConst(n, 0, std::move(r));
  }

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
  case Bin::Equal:
    r = tsr::EqualOp::create(
        b, loc, RankedTensorType::get(*out, IntegerType::get(&ctx, 1)), *bl,
        *br);
    break;
  default:
    return nodeError(n) << "is only supported on compile-time constants "
                           "(no tsr op for it)";
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
  if ((*s)->cst) {
    const ConstTensor &X = *(*s)->cst;
    ConstTensor r;
    r.dtype = kind == Un::Not ? kBool : X.dtype;
    r.shape = X.shape;
    for (int64_t e = 0; e < X.size(); ++e) {
      double x = X.getF(e);
      double y = 0;
      switch (kind) {
      case Un::Neg:
        y = -x;
        break;
      case Un::Abs:
        y = std::fabs(x);
        break;
      case Un::Sqrt:
        y = std::sqrt(x);
        break;
      case Un::Exp:
        y = std::exp(x);
        break;
      case Un::Log:
        y = std::log(x);
        break;
      case Un::Floor:
        y = std::floor(x);
        break;
      case Un::Ceil:
        y = std::ceil(x);
        break;
      case Un::Relu:
        y = x > 0 ? x : 0;
        break;
      case Un::Tanh:
        y = std::tanh(x);
        break;
      case Un::Erf:
        y = std::erf(x);
        break;
      case Un::Reciprocal:
        y = 1.0 / x;
        break;
      case Un::Sign:
        y = (x > 0) - (x < 0);
        break;
      case Un::Not:
        y = x == 0;
        break;
      case Un::Sigmoid:
        y = 1.0 / (1.0 + std::exp(-x));
        break;
      }
      if (!X.isFloat() && kind != Un::Not)
        r.pushInt(kind == Un::Neg   ? -X.getI(e)
                  : kind == Un::Abs ? std::abs(X.getI(e))
                                    : static_cast<int64_t>(y));
      else
        r.push(y);
    }
    return defineConst(n, 0, std::move(r));
  }
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
  case Un::Sigmoid: {
    Value e =
        tsr::ExpOp::create(b, loc, type, tsr::NegOp::create(b, loc, type, x));
    Value one = splatLike(1.0, type.getElementType(), type.getShape(), loc);
    r = tsr::DivOp::create(b, loc, type, one,
                           tsr::AddOp::create(b, loc, type, one, e));
    break;
  }
  default:
    return nodeError(n) << "is only supported on compile-time constants "
                           "(no tsr op for it)";
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
    int64_t count = numElements(*out);
    if (count < 0 || count > kMaxFoldElements)
      return nodeError(n) << "constant result too large to fold";
    const ConstTensor &C = *(*sc)->cst, &X = *(*sx)->cst, &Y = *(*sy)->cst;
    auto ic = broadcastIndices(C.shape, *out);
    auto ix = broadcastIndices(X.shape, *out);
    auto iy = broadcastIndices(Y.shape, *out);
    ConstTensor r;
    r.dtype = X.dtype;
    r.shape = *out;
    r.resize(count);
    for (int64_t e = 0; e < count; ++e) {
      if (C.getI(ic[e]))
        r.copyFrom(X, ix[e], e);
      else
        r.copyFrom(Y, iy[e], e);
    }
    return defineConst(n, 0, std::move(r));
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
  if ((*s)->cst) {
    const ConstTensor &X = *(*s)->cst;
    ConstTensor r;
    r.dtype = dt;
    r.shape = X.shape;
    for (int64_t e = 0; e < X.size(); ++e) {
      if (X.isFloat())
        r.push(X.f[e]);
      else
        r.pushInt(X.i[e]);
    }
    return defineConst(n, 0, std::move(r));
  }
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

/// Reshape, Flatten, Squeeze, Unsqueeze, Identity: a new shape, same data.
LogicalResult Importer::convertReshapeLike(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  Shape in = shapeOf(**s);
  int64_t rank = in.size();
  int64_t count = numElements(in);
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
      outer *= in[d];
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
  if ((*s)->cst) {
    ConstTensor r = *(*s)->cst;
    r.shape = out;
    return defineConst(n, 0, std::move(r));
  }
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
  if ((*s)->cst) {
    const ConstTensor &X = *(*s)->cst;
    ConstTensor r;
    r.dtype = X.dtype;
    r.shape = out;
    r.resize(X.size());
    Shape inStrides = stridesOf(in);
    Shape idx(rank, 0);
    for (int64_t e = 0; e < X.size(); ++e) {
      int64_t src = 0;
      for (int64_t d = 0; d < rank; ++d)
        src += idx[d] * inStrides[perm[d]];
      r.copyFrom(X, src, e);
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < out[d])
          break;
        idx[d] = 0;
      }
    }
    return defineConst(n, 0, std::move(r));
  }
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

/// Strided gather of a constant: out[idx] = in[start + idx * step] per dim.
ConstTensor sliceConst(const ConstTensor &X, ArrayRef<int64_t> start,
                       ArrayRef<int64_t> step, ArrayRef<int64_t> out) {
  ConstTensor r;
  r.dtype = X.dtype;
  r.shape = Shape(out);
  int64_t count = numElements(out);
  r.resize(count);
  Shape strides = stridesOf(X.shape);
  int64_t rank = out.size();
  Shape idx(rank, 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d)
      src += (start[d] + idx[d] * step[d]) * strides[d];
    r.copyFrom(X, src, e);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[d] < out[d])
        break;
      idx[d] = 0;
    }
  }
  return r;
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
    return defineConst(n, 0, sliceConst(*(*s)->cst, lo, step, out));
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
    if (failed(num) || *num <= 0)
      return nodeError(n) << "invalid num_outputs";
    int64_t chunk = (in[*axis] + *num - 1) / *num;
    for (int64_t k = 0, left = in [*axis]; k < *num; ++k) {
      sizes.push_back(std::min(chunk, left));
      left -= sizes.back();
    }
  }
  if (static_cast<int64_t>(sizes.size()) != outs ||
      std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != in[*axis] ||
      llvm::any_of(sizes, [](int64_t v) { return v < 0; }))
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
      if (failed(defineConst(n, k, sliceConst(*(*s)->cst, lo, step, out))))
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
    out[*axis] += sh[*axis];
  }
  if (allConst) {
    ConstTensor r;
    r.dtype = dt;
    r.shape = out;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < *axis; ++d)
      outer *= out[d];
    for (int64_t d = *axis + 1; d < rank; ++d)
      inner *= out[d];
    for (int64_t o = 0; o < outer; ++o)
      for (Slot *s : ins) {
        const ConstTensor &X = *s->cst;
        int64_t chunk = X.shape[*axis] * inner;
        for (int64_t e = 0; e < chunk; ++e) {
          if (X.isFloat())
            r.push(X.f[o * chunk + e]);
          else
            r.pushInt(X.i[o * chunk + e]);
        }
      }
    return defineConst(n, 0, std::move(r));
  }
  SmallVector<Value> values;
  for (int k = 0; k < n.input_size(); ++k) {
    auto v = value(n, k);
    if (failed(v))
      return failure();
    if (tensorType(*v).getNumElements() > 0)
      values.push_back(*v);
  }
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
    const ConstTensor &X = *(*sd)->cst;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < *axis; ++d)
      outer *= data[d];
    for (int64_t d = *axis + 1; d < rank; ++d)
      inner *= data[d];
    ConstTensor r;
    r.dtype = X.dtype;
    r.shape = out;
    r.resize(numElements(out));
    int64_t e = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < idx->size(); ++k)
        for (int64_t in = 0; in < inner; ++in)
          r.copyFrom(X, (o * dim + idx->i[k]) * inner + in, e++);
    return defineConst(n, 0, std::move(r));
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
    int64_t count = numElements(*out);
    if (count < 0 || count > kMaxFoldElements)
      return nodeError(n) << "constant result too large to fold";
    const ConstTensor &X = *(*s)->cst;
    auto src = broadcastIndices(in, *out);
    ConstTensor r;
    r.dtype = X.dtype;
    r.shape = *out;
    r.resize(count);
    for (int64_t e = 0; e < count; ++e)
      r.copyFrom(X, src[e], e);
    return defineConst(n, 0, std::move(r));
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
  ConstTensor r;
  r.dtype = (*start)->dtype;
  double s0 = (*start)->getF(0), l0 = (*limit)->getF(0), d0 = (*delta)->getF(0);
  if (d0 == 0 || std::isnan(s0) || std::isnan(l0) || std::isnan(d0))
    return nodeError(n) << "invalid range";
  double count = std::max(0.0, std::ceil((l0 - s0) / d0));
  if (count > kMaxFoldElements)
    return nodeError(n) << "range too large";
  for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
    if (r.isFloat())
      r.push(s0 + k * d0);
    else
      r.pushInt((*start)->getI(0) + k * (*delta)->getI(0));
  }
  r.shape = {static_cast<int64_t>(count)};
  return defineConst(n, 0, std::move(r));
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
  auto a = value(n, 0), bv = value(n, 1);
  if (failed(a) || failed(bv))
    return failure();
  auto r = buildMatmul(n, *a, *bv, nodeLoc(n));
  if (failed(r))
    return failure();
  return define(n, 0, *r);
}

LogicalResult Importer::convertGemm(const onnx::NodeProto &n) {
  auto a = value(n, 0), bv = value(n, 1);
  auto transA = attrInt(n, "transA", 0), transB = attrInt(n, "transB", 0);
  auto alpha = attrFloat(n, "alpha", 1.0f), beta = attrFloat(n, "beta", 1.0f);
  if (failed(a) || failed(bv) || failed(transA) || failed(transB) ||
      failed(alpha) || failed(beta))
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
  auto x = value(n, 0);
  auto axisAttr = attrInt(n, "axis", opset >= 13 ? -1 : 1);
  if (failed(x) || failed(axisAttr))
    return failure();
  auto type = tensorType(*x);
  int64_t rank = type.getRank();
  auto axis = normAxis(*axisAttr, rank);
  if (!axis)
    return nodeError(n) << "axis " << *axisAttr << " out of range for rank "
                        << rank;
  Location loc = nodeLoc(n);
  if (opset >= 13 || *axis == rank - 1)
    return define(
        n, 0,
        tsr::SoftmaxOp::create(b, loc, type, *x, b.getI64IntegerAttr(*axis)));
  // Opset < 13: softmax over the flattened [axis, rank) dims.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < *axis ? outer : inner) *= type.getDimSize(d);
  Value flat = reshape(*x, {outer, inner}, loc);
  Value sm = tsr::SoftmaxOp::create(b, loc, tensorType(flat), flat,
                                    b.getI64IntegerAttr(1));
  return define(n, 0, reshape(sm, type.getShape(), loc));
}

LogicalResult Importer::convertLayerNorm(const onnx::NodeProto &n) {
  for (int k = 1; k < n.output_size() && k < 3; ++k)
    if (!n.output(k).empty() && used.contains(n.output(k)))
      return nodeError(n) << "the Mean/InvStdDev outputs are not supported";
  auto x = value(n, 0);
  auto axisAttr = attrInt(n, "axis", -1);
  auto eps = attrFloat(n, "epsilon", 1e-5f);
  if (failed(x) || failed(axisAttr) || failed(eps))
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
  auto x = value(n, 0);
  auto keep = attrInt(n, "keepdims", 1);
  auto noop = attrInt(n, "noop_with_empty_axes", 0);
  if (failed(x) || failed(keep) || failed(noop))
    return failure();
  auto type = tensorType(*x);
  int64_t rank = type.getRank();
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
      return define(n, 0, *x);
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
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(sorted, d)) {
      if (*keep)
        out.push_back(1);
    } else {
      out.push_back(type.getDimSize(d));
    }
  }
  Location loc = nodeLoc(n);
  auto rtype = withShape(*x, out);
  auto axesAttr = b.getDenseI64ArrayAttr(sorted);
  auto keepAttr = b.getBoolAttr(*keep != 0);
  Value r;
  if (op == "ReduceMean")
    r = tsr::ReduceMeanOp::create(b, loc, rtype, *x, axesAttr, keepAttr);
  else if (op == "ReduceSum")
    r = tsr::ReduceSumOp::create(b, loc, rtype, *x, axesAttr, keepAttr);
  else
    r = tsr::ReduceMaxOp::create(b, loc, rtype, *x, axesAttr, keepAttr);
  return define(n, 0, r);
}

LogicalResult Importer::convertDropout(const onnx::NodeProto &n) {
  auto s = slot(n, 0);
  if (failed(s))
    return failure();
  if (hasInput(n, 2)) {
    auto mode = constInput(n, 2, "training_mode");
    if (failed(mode))
      return failure();
    if ((*mode)->size() != 1)
      return nodeError(n) << "training_mode must be a scalar";
    if ((*mode)->getF(0) != 0)
      return nodeError(n) << "training_mode is true; Tessera imports the "
                             "inference graph (export with dropout off)";
  }
  if (failed(bind(n, 0, **s)))
    return failure();
  if (n.output_size() > 1 && !n.output(1).empty()) {
    Shape shape = shapeOf(**s);
    ConstTensor mask;
    mask.dtype = kBool;
    mask.shape = shape;
    mask.i.assign(numElements(shape), 1);
    return defineConst(n, 1, std::move(mask));
  }
  return success();
}

LogicalResult Importer::convertGelu(const onnx::NodeProto &n) {
  auto x = value(n, 0);
  auto approx = attrString(n, "approximate", "none");
  if (failed(x) || failed(approx))
    return failure();
  if (*approx != "none" && *approx != "tanh")
    return nodeError(n) << "unsupported approximate '" << *approx << "'";
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

LogicalResult Importer::convertNode(const onnx::NodeProto &n) {
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return error() << "unsupported ONNX op '" << n.op_type() << "' (domain '"
                   << n.domain() << "') in node '" << n.name() << "'";
  const std::string &op = n.op_type();
  if (n.output_size() == 0 || n.output(0).empty())
    return nodeError(n) << "has no output";
  static const llvm::StringMap<Bin> binaries = {
      {"Add", Bin::Add},
      {"Sub", Bin::Sub},
      {"Mul", Bin::Mul},
      {"Div", Bin::Div},
      {"Pow", Bin::Pow},
      {"Mod", Bin::Mod},
      {"Equal", Bin::Equal},
      {"Less", Bin::Less},
      {"Greater", Bin::Greater},
      {"LessOrEqual", Bin::LessEq},
      {"GreaterOrEqual", Bin::GreaterEq},
      {"And", Bin::And},
      {"Or", Bin::Or},
      {"Xor", Bin::Xor}};
  static const llvm::StringMap<Un> unaries = {{"Neg", Un::Neg},
                                              {"Abs", Un::Abs},
                                              {"Sqrt", Un::Sqrt},
                                              {"Exp", Un::Exp},
                                              {"Log", Un::Log},
                                              {"Floor", Un::Floor},
                                              {"Ceil", Un::Ceil},
                                              {"Relu", Un::Relu},
                                              {"Tanh", Un::Tanh},
                                              {"Erf", Un::Erf},
                                              {"Reciprocal", Un::Reciprocal},
                                              {"Sign", Un::Sign},
                                              {"Not", Un::Not},
                                              {"Sigmoid", Un::Sigmoid}};
  if (auto it = binaries.find(op); it != binaries.end())
    return convertBinary(n, it->second);
  if (auto it = unaries.find(op); it != unaries.end())
    return convertUnary(n, it->second);
  if (op == "Max")
    return convertVariadic(n, Bin::Max);
  if (op == "Min")
    return convertVariadic(n, Bin::Min);
  if (op == "Sum")
    return convertVariadic(n, Bin::Add);
  if (op == "Constant")
    return convertConstant(n);
  if (op == "Where")
    return convertWhere(n);
  if (op == "Cast")
    return convertCast(n);
  if (op == "Shape")
    return convertShape(n);
  if (op == "Size") {
    auto s = slot(n, 0);
    if (failed(s))
      return failure();
    return defineConst(n, 0,
                       ConstTensor::ints({numElements(shapeOf(**s))}, {}));
  }
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" ||
      op == "Unsqueeze" || op == "Identity")
    return convertReshapeLike(n);
  if (op == "Transpose")
    return convertTranspose(n);
  if (op == "Slice")
    return convertSlice(n);
  if (op == "Split")
    return convertSplit(n);
  if (op == "Concat")
    return convertConcat(n);
  if (op == "Gather")
    return convertGather(n);
  if (op == "Expand")
    return convertExpand(n);
  if (op == "Range")
    return convertRange(n);
  if (op == "ConstantOfShape")
    return convertConstantOfShape(n);
  if (op == "MatMul")
    return convertMatMul(n);
  if (op == "Gemm")
    return convertGemm(n);
  if (op == "Softmax")
    return convertSoftmax(n);
  if (op == "LayerNormalization")
    return convertLayerNorm(n);
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax")
    return convertReduce(n);
  if (op == "Dropout")
    return convertDropout(n);
  if (op == "Gelu")
    return convertGelu(n);
  return error() << "unsupported ONNX op '" << op << "' in node '" << n.name()
                 << "'";
}

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

OwningOpRef<ModuleOp> Importer::run(const onnx::ModelProto &model) {
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset == 0) {
    error() << "model imports no default-domain opset";
    return nullptr;
  }
  const onnx::GraphProto &g = model.graph();

  std::optional<llvm::Regex> freeze;
  if (!opts.freezeRegex.empty()) {
    freeze.emplace(opts.freezeRegex);
    std::string why;
    if (!freeze->isValid(why)) {
      error() << "invalid --freeze regex '" << opts.freezeRegex << "': " << why;
      return nullptr;
    }
  }

  for (const auto &node : g.node())
    for (const auto &in : node.input())
      used.insert(in);
  for (const auto &out : g.output())
    used.insert(out.name());

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());

  // Arguments: the parameters (float initializers in ONNX order, then the
  // float graph inputs that stand for parameters, see below), then the data
  // inputs. A parameter whose values the file does not hold (an initializer
  // without data, or a graph input) gets no `tsr.init`, and the module is
  // marked `tsr.weights = "absent"` (OnnxImporter.h).
  SmallVector<Type> argTypes;
  SmallVector<NamedAttrList> argAttrs;
  SmallVector<std::string> argNames;
  llvm::StringSet<> initNames;
  std::vector<std::pair<std::string, ConstTensor>> constInits;
  bool weightsAbsent = false;
  auto paramAttrs = [&](StringRef name) {
    bool frozen = freeze && freeze->match(name);
    NamedAttrList attrs;
    attrs.set("tsr.name", b.getStringAttr(name));
    attrs.set("tsr.role", b.getStringAttr(frozen ? "frozen" : "param"));
    return attrs;
  };
  for (const auto &t : g.initializer()) {
    if (!initNames.insert(t.name()).second) {
      error() << "initializer '" << t.name() << "' is defined twice";
      return nullptr;
    }
    if (!isFloatDType(t.data_type())) {
      auto c = readTensor(t, "initializer");
      if (failed(c))
        return nullptr;
      constInits.emplace_back(t.name(), std::move(*c));
      continue;
    }
    Shape dims(t.dims().begin(), t.dims().end());
    if (numElements(dims) < 0) {
      error() << "initializer '" << t.name() << "' has invalid dims "
              << shapeStr(dims);
      return nullptr;
    }
    auto type = RankedTensorType::get(dims, dtypeToType(t.data_type(), &ctx));
    NamedAttrList attrs = paramAttrs(t.name());
    if (initializerHasData(t, type.getNumElements())) {
      auto init = readInitializerBlob(t, type);
      if (failed(init))
        return nullptr;
      attrs.set("tsr.init", *init);
    } else {
      weightsAbsent = true;
    }
    argTypes.push_back(type);
    argAttrs.push_back(attrs);
    argNames.push_back(t.name());
  }
  // A float graph input of a model that also takes integer inputs (the
  // token ids) is a parameter without values: that is how
  // torch.onnx.export(..., export_params=False) writes parameters. Tessera
  // feeds a model only token ids, so such an input could not be data. In a
  // model without integer inputs (an op-level test model) float inputs stay
  // data inputs.
  bool hasIntegerInput = false;
  for (const auto &in : g.input())
    if (!initNames.contains(in.name()) && in.type().has_tensor_type()) {
      int32_t dt = in.type().tensor_type().elem_type();
      hasIntegerInput |= dt != kUndefined && !isFloatDType(dt) && dt != kBool;
    }
  SmallVector<Type> dataTypes;
  SmallVector<NamedAttrList> dataAttrs;
  SmallVector<std::string> dataNames;
  for (const auto &in : g.input()) {
    if (initNames.contains(in.name()))
      continue; // IR < 4 lists initializers as inputs too
    if (!in.type().has_tensor_type()) {
      error() << "graph input '" << in.name() << "' is not a tensor";
      return nullptr;
    }
    const auto &tt = in.type().tensor_type();
    Type elem = dtypeToType(tt.elem_type(), &ctx);
    if (!elem) {
      error() << "graph input '" << in.name() << "' has unsupported type "
              << dtypeName(tt.elem_type());
      return nullptr;
    }
    bool isParam = hasIntegerInput && isFloatDType(tt.elem_type());
    if (!tt.has_shape()) {
      error() << "graph input '" << in.name()
              << "' has no shape; Tessera needs static shapes";
      return nullptr;
    }
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
        return nullptr;
      }
      dims.push_back(dim.dim_value());
    }
    if (isParam) {
      weightsAbsent = true;
      argTypes.push_back(RankedTensorType::get(dims, elem));
      argAttrs.push_back(paramAttrs(in.name()));
      argNames.push_back(in.name());
      continue;
    }
    NamedAttrList attrs;
    attrs.set("tsr.name", b.getStringAttr(in.name()));
    attrs.set("tsr.role", b.getStringAttr("input"));
    dataTypes.push_back(RankedTensorType::get(dims, elem));
    dataAttrs.push_back(attrs);
    dataNames.push_back(in.name());
  }
  argTypes.append(dataTypes);
  argAttrs.append(dataAttrs);
  argNames.append(dataNames);
  if (weightsAbsent)
    (*module)->setAttr(kWeightsAttr, b.getStringAttr(kWeightsAbsent));

  auto func = func::FuncOp::create(b, fileLoc, "forward",
                                   b.getFunctionType(argTypes, {}));
  Block *body = func.addEntryBlock();
  for (size_t k = 0; k < argTypes.size(); ++k) {
    func.setArgAttrs(k, argAttrs[k].getDictionary(&ctx));
    if (!env.try_emplace(argNames[k], Slot{body->getArgument(k), nullptr})
             .second) {
      error() << "graph input '" << argNames[k] << "' is defined twice";
      return nullptr;
    }
  }
  for (auto &[name, c] : constInits)
    env[name] = Slot{Value(), std::make_shared<const ConstTensor>(c)};
  b.setInsertionPointToEnd(body);

  for (const auto &node : g.node())
    if (failed(convertNode(node)))
      return nullptr;

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const auto &out : g.output()) {
    auto it = env.find(out.name());
    if (it == env.end()) {
      error() << "graph output '" << out.name() << "' is never produced";
      return nullptr;
    }
    if (!it->second.value) {
      it->second.value = materialize(*it->second.cst, fileLoc);
      if (!it->second.value) {
        error() << "graph output '" << out.name() << "' has unsupported type";
        return nullptr;
      }
    }
    Value v = it->second.value;
    auto vt = tensorType(v);
    if (out.type().has_tensor_type()) {
      const auto &tt = out.type().tensor_type();
      Type elem = dtypeToType(tt.elem_type(), &ctx);
      if (elem && elem != vt.getElementType()) {
        error() << "graph output '" << out.name() << "' is declared "
                << dtypeName(tt.elem_type()) << " but computes " << vt;
        return nullptr;
      }
      if (tt.has_shape()) {
        bool mismatch = tt.shape().dim_size() != vt.getRank();
        for (int d = 0; !mismatch && d < tt.shape().dim_size(); ++d)
          mismatch = tt.shape().dim(d).has_dim_value() &&
                     tt.shape().dim(d).dim_value() != vt.getDimSize(d);
        if (mismatch) {
          error() << "graph output '" << out.name()
                  << "' has a declared shape that differs from the computed "
                  << shapeStr(vt.getShape());
          return nullptr;
        }
      }
    }
    results.push_back(v);
    resultTypes.push_back(vt);
  }
  func::ReturnOp::create(b, fileLoc, results);
  func.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  for (int k = 0; k < g.output_size(); ++k)
    func.setResultAttr(k, "tsr.name", b.getStringAttr(g.output(k).name()));

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

/// Whether `t` is a float initializer without data (initializerHasData).
bool isDatalessParam(const onnx::TensorProto &t) {
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

/// Runs the ONNX checker. The checker rejects a tensor without values (and
/// external data it cannot find), so when float initializers lack data
/// (a weight-free model) it checks a copy in which those are graph inputs of
/// the same type and shape instead; the copy shares no weight data (it holds
/// only the initializers that have data, i.e. none in a weight-free model).
void checkModel(const onnx::ModelProto &model) {
  const auto &inits = model.graph().initializer();
  if (llvm::none_of(inits, isDatalessParam)) {
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
    if (!isDatalessParam(t)) {
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

OwningOpRef<ModuleOp> importModel(llvm::StringRef bytes,
                                  llvm::StringRef displayName, MLIRContext &ctx,
                                  const ImportOptions &opts) {
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
    if (knownOpset && modelOpset > knownOpset) {
      emitWarning(loc) << "model opset " << modelOpset
                       << " is newer than this libonnx knows (" << knownOpset
                       << "); skipping the ONNX checker";
    } else {
      try {
        checkModel(model);
      } catch (const std::exception &e) {
        std::string msg = e.what();
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
          msg.pop_back();
        emitError(loc) << "invalid ONNX model: " << msg;
        return nullptr;
      }
    }
    Importer importer(ctx, displayName, opts);
    return importer.run(model);
  } catch (const std::exception &e) {
    emitError(loc) << "ONNX import failed: " << e.what();
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
      auto role = func.getArgAttrOfType<StringAttr>(i, "tsr.role");
      if (!role || (role.getValue() != "param" && role.getValue() != "frozen"))
        continue;
      if (func.getArgAttr(i, "tsr.init"))
        continue;
      auto name = func.getArgAttrOfType<StringAttr>(i, "tsr.name");
      return name ? name.str() : ("argument #" + Twine(i)).str();
    }
  }
  return std::nullopt;
}

void loadImportDialects(MLIRContext &ctx) {
  ctx.loadDialect<tsr::TsrDialect, func::FuncDialect>();
}

OwningOpRef<ModuleOp> importOnnxBytes(llvm::StringRef bytes,
                                      llvm::StringRef displayName,
                                      MLIRContext &ctx,
                                      const ImportOptions &opts) {
  return importModel(bytes, displayName, ctx, opts);
}

OwningOpRef<ModuleOp> importOnnxFile(llvm::StringRef path, MLIRContext &ctx,
                                     const ImportOptions &opts) {
  loadImportDialects(ctx);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(&ctx, path, 0, 0))
        << "cannot open ONNX file: " << buffer.getError().message();
    return nullptr;
  }
  return importModel((*buffer)->getBuffer(), path, ctx, opts);
}

} // namespace tessera::import

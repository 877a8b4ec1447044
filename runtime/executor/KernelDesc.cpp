//===- KernelDesc.cpp - a tsrt.kernel decoded once, typed -----------------===//
//
// One decoder per kernel family (KernelKinds.def names each kind's family).
// Each checks operand/result counts, dtypes and shapes (inferring the result
// types and comparing them with the declared ones) and decodes the
// attributes into the family's struct. The messages are the runtime's load
// errors (test/Run and the executor unit tests check them word for word).
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/KernelDesc.h"

#include "runtime/executor/Backend.h"

#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <iterator>
#include <tuple>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
using llvm::ArrayRef;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// Kinds
//===----------------------------------------------------------------------===//

StringRef exec::kernelName(KernelKind kind) {
  static constexpr llvm::StringLiteral names[] = {
#define TESSERA_KERNEL(Kind, Name, Family) Name,
#include "runtime/executor/KernelKinds.def"
  };
  return names[kernelIndex(kind)];
}

std::optional<KernelKind> exec::kernelKindOf(StringRef name) {
  // Built once: the only place a kernel name becomes a kind.
  static const llvm::StringMap<KernelKind> kinds = [] {
    llvm::StringMap<KernelKind> m;
    for (size_t i = 0; i < kNumKernelKinds; ++i)
      m[kernelName(static_cast<KernelKind>(i))] = static_cast<KernelKind>(i);
    return m;
  }();
  auto it = kinds.find(name);
  if (it == kinds.end())
    return std::nullopt;
  return it->second;
}

bool exec::isDataMovement(KernelKind kind) {
  static const std::vector<bool> dataMovement = [] {
    std::vector<bool> v(kNumKernelKinds);
    for (size_t i = 0; i < kNumKernelKinds; ++i)
      v[i] = tessera::tsrt::isDataMovementKernel(
          kernelName(static_cast<KernelKind>(i)));
    return v;
  }();
  return dataMovement[kernelIndex(kind)];
}

bool KernelDesc::hasFloat16() const {
  auto is16 = [](const TensorType &t) { return isFloat16Bit(t.dtype); };
  return llvm::any_of(operands, is16) || llvm::any_of(results, is16);
}

namespace {

using In = ArrayRef<const Tensor *>;
using Out = llvm::MutableArrayRef<Tensor>;

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string typeStr(const TensorType &t) { return t.str(); }

/// Reads attributes, remembering the first problem. Absent attributes take
/// the given default, or are an error when there is none.
class AttrReader {
public:
  explicit AttrReader(mlir::DictionaryAttr dict) : dict(dict) {}

  bool boolean(StringRef name, std::optional<bool> dflt) {
    mlir::Attribute a = get(name, dflt.has_value());
    if (!a)
      return dflt.value_or(false);
    if (auto b = llvm::dyn_cast<mlir::BoolAttr>(a))
      return b.getValue();
    if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(a);
        i && i.getType().isInteger(1))
      return i.getValue().getBoolValue();
    return bad(name, "a bool"), false;
  }

  int64_t integer(StringRef name) {
    mlir::Attribute a = get(name, false);
    if (!a)
      return 0;
    if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(a);
        i && !i.getType().isInteger(1) && i.getType().isSignlessInteger())
      return i.getValue().getSExtValue();
    if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(a);
        i && i.getType().isIndex())
      return i.getValue().getSExtValue();
    return bad(name, "an integer"), 0;
  }

  double floating(StringRef name) {
    mlir::Attribute a = get(name, false);
    if (!a)
      return 0;
    if (auto f = llvm::dyn_cast<mlir::FloatAttr>(a))
      return f.getValueAsDouble();
    return bad(name, "a float"), 0;
  }

  std::vector<int64_t> intArray(StringRef name) {
    mlir::Attribute a = get(name, false);
    if (!a)
      return {};
    if (auto d = llvm::dyn_cast<mlir::DenseI64ArrayAttr>(a))
      return std::vector<int64_t>(d.asArrayRef().begin(), d.asArrayRef().end());
    if (auto arr = llvm::dyn_cast<mlir::ArrayAttr>(a)) {
      std::vector<int64_t> v;
      for (mlir::Attribute e : arr) {
        auto i = llvm::dyn_cast<mlir::IntegerAttr>(e);
        if (!i)
          return bad(name, "an array of integers"), std::vector<int64_t>{};
        v.push_back(i.getValue().getSExtValue());
      }
      return v;
    }
    return bad(name, "an array<i64: ...>"), std::vector<int64_t>{};
  }

  std::vector<std::string> stringArray(StringRef name) {
    mlir::Attribute a = get(name, false);
    std::vector<std::string> v;
    if (!a)
      return v;
    auto arr = llvm::dyn_cast<mlir::ArrayAttr>(a);
    if (!arr)
      return bad(name, "an array of strings"), v;
    for (mlir::Attribute e : arr) {
      auto str = llvm::dyn_cast<mlir::StringAttr>(e);
      if (!str)
        return bad(name, "an array of strings"), std::vector<std::string>{};
      v.push_back(str.getValue().str());
    }
    return v;
  }

  /// True when the attribute is present.
  bool has(StringRef name) const { return dict && dict.get(name); }

  std::string string(StringRef name, std::optional<StringRef> dflt) {
    mlir::Attribute a = get(name, dflt.has_value());
    if (!a)
      return dflt.value_or("").str();
    if (auto s = llvm::dyn_cast<mlir::StringAttr>(a))
      return s.getValue().str();
    return bad(name, "a string"), std::string();
  }

  /// The first problem, or success.
  llvm::Error takeError() {
    if (problem.empty())
      return llvm::Error::success();
    return fail(problem);
  }

private:
  mlir::Attribute get(StringRef name, bool optional) {
    mlir::Attribute a = dict ? dict.get(name) : mlir::Attribute();
    if (!a && !optional && problem.empty())
      problem = ("missing attribute '" + name + "'").str();
    return a;
  }
  void bad(StringRef name, StringRef what) {
    if (problem.empty())
      problem = ("attribute '" + name + "' must be " + what).str();
  }

  mlir::DictionaryAttr dict;
  std::string problem;
};

llvm::Error expectCounts(ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                         size_t nIn, size_t nOut) {
  if (ins.size() != nIn || outs.size() != nOut)
    return fail(llvm::formatv("expects {0} operand(s) and {1} result(s), got "
                              "{2} and {3}",
                              nIn, nOut, ins.size(), outs.size()));
  return llvm::Error::success();
}

llvm::Error expectResult(ArrayRef<TensorType> outs, size_t i,
                         const TensorType &expected) {
  if (outs[i] != expected)
    return fail(llvm::formatv("result #{0} has type {1}, expected {2}", i,
                              typeStr(outs[i]), typeStr(expected)));
  return llvm::Error::success();
}

llvm::Error expectDType(const TensorType &t, std::initializer_list<DType> ok,
                        StringRef what) {
  for (DType d : ok)
    if (t.dtype == d)
      return llvm::Error::success();
  return fail(llvm::formatv("{0} has unsupported type {1}", what, typeStr(t)));
}

llvm::Error expectSame(ArrayRef<TensorType> ins) {
  for (size_t i = 1; i < ins.size(); ++i)
    if (ins[i] != ins[0])
      return fail(llvm::formatv("operand #{0} has type {1} but operand #0 has "
                                "{2}; they must match",
                                i, typeStr(ins[i]), typeStr(ins[0])));
  return llvm::Error::success();
}

/// Normalises a possibly negative `axis` into [0, rank).
llvm::Error normaliseAxis(int64_t &axis, int64_t rank, StringRef name) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return fail(llvm::formatv("attribute '{0}' = {1} is out of range for "
                              "rank {2}",
                              name, axis, rank));
  axis = a;
  return llvm::Error::success();
}

int64_t rankOf(const TensorType &t) {
  return static_cast<int64_t>(t.shape.size());
}
int64_t numelOf(const TensorType &t) { return shapeNumel(t.shape); }

#define RETURN_IF_ERROR(expr)                                                  \
  do {                                                                         \
    if (llvm::Error e__ = (expr))                                              \
      return e__;                                                              \
  } while (false)

//===----------------------------------------------------------------------===//
// Families
//===----------------------------------------------------------------------===//

using Types = ArrayRef<TensorType>;

llvm::Error decodeBinary(KernelDesc &d, Types ins, Types outs, AttrReader &,
                         const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  if (d.kind == KernelKind::Pow)
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  else
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32, DType::I64}, "operand"));
  RETURN_IF_ERROR(expectSame(ins));
  return expectResult(outs, 0, ins[0]);
}

llvm::Error decodeUnary(KernelDesc &d, Types ins, Types outs, AttrReader &,
                        const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  if (d.kind == KernelKind::Neg)
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32, DType::I64}, "operand"));
  else
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  return expectResult(outs, 0, ins[0]);
}

llvm::Error geluApproximate(AttrReader &attrs, GeluApproximate &out) {
  std::string s = attrs.string("approximate", StringRef("none"));
  if (s == "none")
    out = GeluApproximate::None;
  else if (s == "tanh")
    out = GeluApproximate::Tanh;
  else
    return fail("attribute 'approximate' must be \"none\" or \"tanh\", got \"" +
                s + "\"");
  return llvm::Error::success();
}

llvm::Error decodeGelu(KernelDesc &d, Types ins, Types outs, AttrReader &attrs,
                       const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  GeluAttrs a;
  RETURN_IF_ERROR(geluApproximate(attrs, a.approximate));
  RETURN_IF_ERROR(attrs.takeError());
  d.attrs = a;
  return llvm::Error::success();
}

llvm::Error decodeDropout(KernelDesc &d, Types ins, Types outs,
                          AttrReader &attrs, const CompileOptions &options) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  if (ins[1] != TensorType{DType::F32, {}})
    return fail("step has type " + typeStr(ins[1]) + ", expected f32 0-D");
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  DropoutAttrs a;
  double ratio = attrs.floating("ratio");
  int64_t seed = attrs.integer("seed");
  int64_t opId = attrs.integer("op_id");
  std::vector<int64_t> enc;
  if (attrs.has("layout"))
    enc = attrs.intArray("layout");
  RETURN_IF_ERROR(attrs.takeError());
  if (!(ratio >= 0 && ratio < 1))
    return fail(
        llvm::formatv("attribute 'ratio' = {0} is outside [0, 1)", ratio));
  if (opId < 0 || opId > int64_t(UINT32_MAX))
    return fail(
        llvm::formatv("attribute 'op_id' = {0} is outside [0, 2^32)", opId));
  a.ratio = static_cast<float>(ratio);
  a.scale = static_cast<float>(1.0 / (1.0 - ratio));
  a.threshold = tessera::random::dropoutThreshold(ratio);
  a.seed = static_cast<uint64_t>(seed);
  a.opId = static_cast<uint32_t>(opId);
  // Grid axes: the rank axes, then a pipelined program's micro-batch axis.
  std::vector<int64_t> axisSizes = options.gridShape;
  if (options.pipelineStages > 0)
    axisSizes.push_back(std::max<int64_t>(options.microBatches, 1));
  const std::vector<int64_t> &local = ins[0].shape;
  size_t at = 0;
  auto take = [&](int64_t &out) {
    if (at >= enc.size())
      return false;
    out = enc[at++];
    return true;
  };
  for (size_t dim = 0; dim < local.size(); ++dim) {
    if (enc.empty()) {
      DropoutAttrs::Factor f;
      f.globalSize = f.localSize = local[dim];
      a.factors.push_back(f);
      continue;
    }
    int64_t n = 0, localDim = 1;
    if (!take(n) || n < 1)
      return fail(llvm::formatv("attribute 'layout': dimension {0} needs a "
                                "sub-factor count >= 1",
                                dim));
    for (int64_t k = 0; k < n; ++k) {
      DropoutAttrs::Factor f;
      int64_t count = 0;
      if (!take(f.globalSize) || !take(count) || f.globalSize < 1 || count < 0)
        return fail(llvm::formatv("attribute 'layout' is malformed at "
                                  "dimension {0}",
                                  dim));
      int64_t ways = 1;
      for (int64_t j = 0; j < count; ++j) {
        int64_t axis = -1;
        if (!take(axis) || axis < 0 ||
            axis >= static_cast<int64_t>(axisSizes.size()))
          return fail(llvm::formatv("attribute 'layout': dimension {0} names "
                                    "a grid axis outside the {1} axes",
                                    dim, axisSizes.size()));
        f.axes.push_back(axis);
        f.axisSizes.push_back(axisSizes[axis]);
        ways *= axisSizes[axis];
      }
      if (f.globalSize % ways != 0)
        return fail(llvm::formatv("attribute 'layout': a sub-factor of size "
                                  "{0} of dimension {1} is not divisible by "
                                  "its {2} pieces",
                                  f.globalSize, dim, ways));
      f.localSize = f.globalSize / ways;
      localDim *= f.localSize;
      a.factors.push_back(std::move(f));
    }
    if (localDim != local[dim])
      return fail(llvm::formatv("attribute 'layout' gives dimension {0} a "
                                "local size of {1}, but the operand has {2}",
                                dim, localDim, local[dim]));
  }
  if (at != enc.size())
    return fail("attribute 'layout' has entries past the last dimension");
  int64_t stride = 1;
  for (auto it = a.factors.rbegin(); it != a.factors.rend(); ++it) {
    it->globalStride = stride;
    stride *= it->globalSize;
  }
  d.attrs = std::move(a);
  return llvm::Error::success();
}

llvm::Error decodeEqual(KernelDesc &, Types ins, Types outs, AttrReader &,
                        const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  RETURN_IF_ERROR(expectSame(ins));
  return expectResult(outs, 0, TensorType{DType::I1, ins[0].shape});
}

llvm::Error decodeSelect(KernelDesc &, Types ins, Types outs, AttrReader &,
                         const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 3, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::I1}, "condition"));
  RETURN_IF_ERROR(expectSame(ins.drop_front()));
  if (ins[0].shape != ins[1].shape)
    return fail("condition " + typeStr(ins[0]) + " and values " +
                typeStr(ins[1]) + " differ in shape");
  return expectResult(outs, 0, ins[1]);
}

/// One operand and one result such that `fits(operand, result)`, else
/// "cannot <verb> <operand> to <result>".
template <typename Fits>
llvm::Error expectOneToOne(Types ins, Types outs, StringRef verb, Fits fits) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  if (!fits(ins[0], outs[0]))
    return fail("cannot " + verb + " " + typeStr(ins[0]) + " to " +
                typeStr(outs[0]));
  return llvm::Error::success();
}

llvm::Error decodeConvert(KernelDesc &, Types ins, Types outs, AttrReader &,
                          const CompileOptions &) {
  return expectOneToOne(ins, outs, "convert",
                        [](const TensorType &in, const TensorType &out) {
                          return out.shape == in.shape;
                        });
}

/// reduce_sum / reduce_mean / reduce_max.
llvm::Error decodeReduce(KernelDesc &d, Types ins, Types outs,
                         AttrReader &attrs, const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  ReduceAttrs a;
  a.axes = attrs.intArray("axes");
  a.keepDim = attrs.boolean("keepdim", false);
  RETURN_IF_ERROR(attrs.takeError());
  int64_t rank = rankOf(ins[0]);
  for (int64_t &axis : a.axes)
    RETURN_IF_ERROR(normaliseAxis(axis, rank, "axes"));
  std::sort(a.axes.begin(), a.axes.end());
  if (std::adjacent_find(a.axes.begin(), a.axes.end()) != a.axes.end())
    return fail("attribute 'axes' repeats an axis");
  TensorType expected{DType::F32, {}};
  for (int64_t dim = 0; dim < rank; ++dim) {
    bool reduced = std::binary_search(a.axes.begin(), a.axes.end(), dim);
    if (!reduced)
      expected.shape.push_back(ins[0].shape[dim]);
    else if (a.keepDim)
      expected.shape.push_back(1);
  }
  RETURN_IF_ERROR(expectResult(outs, 0, expected));
  d.attrs = std::move(a);
  return llvm::Error::success();
}

/// sum_squares: one f32 operand of any shape -> f32 scalar.
llvm::Error decodeSumSquares(KernelDesc &, Types ins, Types outs,
                             AttrReader &attrs, const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  RETURN_IF_ERROR(attrs.takeError());
  return expectResult(outs, 0, TensorType{DType::F32, {}});
}

/// The result type of matmul(a, b) with the transposes (the tsr.matmul
/// rules), or the load error.
llvm::Expected<TensorType> matmulResultType(const TensorType &lhs,
                                            const TensorType &rhs, bool ta,
                                            bool tb) {
  const auto &a = lhs.shape, &b = rhs.shape;
  size_t ra = a.size(), rb = b.size();
  if (ra < 2 || rb < 2)
    return fail("operands must have rank >= 2, got " + typeStr(lhs) + " and " +
                typeStr(rhs));
  int64_t m = ta ? a[ra - 1] : a[ra - 2], ka = ta ? a[ra - 2] : a[ra - 1];
  int64_t kb = tb ? b[rb - 1] : b[rb - 2], n = tb ? b[rb - 2] : b[rb - 1];
  if (ka != kb)
    return fail(llvm::formatv("contracting sizes differ: {0} vs {1} ({2}, {3})",
                              ka, kb, typeStr(lhs), typeStr(rhs)));
  std::vector<int64_t> batchA(a.begin(), a.end() - 2),
      batchB(b.begin(), b.end() - 2), batch;
  if (ra == rb) {
    if (batchA != batchB)
      return fail("batch dimensions differ: " + typeStr(lhs) + " and " +
                  typeStr(rhs));
    batch = batchA;
  } else if (rb == 2) {
    batch = batchA;
  } else if (ra == 2) {
    batch = batchB;
  } else {
    return fail("batch ranks differ: " + typeStr(lhs) + " and " + typeStr(rhs));
  }
  batch.push_back(m);
  batch.push_back(n);
  return TensorType{DType::F32, batch};
}

llvm::Error decodeMatmul(KernelDesc &d, Types ins, Types outs,
                         AttrReader &attrs, const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "lhs"));
  RETURN_IF_ERROR(expectDType(ins[1], {DType::F32}, "rhs"));
  bool ta = attrs.boolean("transpose_lhs", false);
  bool tb = attrs.boolean("transpose_rhs", false);
  RETURN_IF_ERROR(attrs.takeError());
  llvm::Expected<TensorType> result = matmulResultType(ins[0], ins[1], ta, tb);
  if (!result)
    return result.takeError();
  RETURN_IF_ERROR(expectResult(outs, 0, *result));
  d.attrs = MatmulAttrs{ta, tb};
  return llvm::Error::success();
}

/// tsr.linear's / tsr.bias_activation_grad's `activation`; `allowNone`
/// for linear.
llvm::Error decodeActivation(AttrReader &attrs, bool allowNone,
                             Activation &out) {
  std::string s =
      attrs.string("activation",
                   allowNone ? std::optional<StringRef>("none") : std::nullopt);
  RETURN_IF_ERROR(attrs.takeError());
  if (s == "none" && allowNone)
    out = Activation::None;
  else if (s == "gelu")
    out = Activation::Gelu;
  else if (s == "gelu_tanh")
    out = Activation::GeluTanh;
  else if (s == "relu")
    out = Activation::Relu;
  else if (s == "silu")
    out = Activation::Silu;
  else
    return fail(llvm::formatv("attribute 'activation' must be {0}\"gelu\", "
                              "\"gelu_tanh\", \"relu\" or \"silu\", got "
                              "\"{1}\"",
                              allowNone ? "\"none\", " : "", s));
  return llvm::Error::success();
}

/// linear (lhs, rhs, bias [N]) -> result [, preactivation], f32.
llvm::Error decodeLinear(KernelDesc &d, Types ins, Types outs,
                         AttrReader &attrs, const CompileOptions &) {
  if (ins.size() != 3 || (outs.size() != 1 && outs.size() != 2))
    return fail(llvm::formatv("expects 3 operand(s) and 1 or 2 result(s), "
                              "got {0} and {1}",
                              ins.size(), outs.size()));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "lhs"));
  RETURN_IF_ERROR(expectDType(ins[1], {DType::F32}, "rhs"));
  RETURN_IF_ERROR(expectDType(ins[2], {DType::F32}, "bias"));
  LinearAttrs a;
  a.transposeLhs = attrs.boolean("transpose_lhs", false);
  a.transposeRhs = attrs.boolean("transpose_rhs", false);
  RETURN_IF_ERROR(decodeActivation(attrs, /*allowNone=*/true, a.activation));
  RETURN_IF_ERROR(attrs.takeError());
  llvm::Expected<TensorType> result =
      matmulResultType(ins[0], ins[1], a.transposeLhs, a.transposeRhs);
  if (!result)
    return result.takeError();
  if (ins[2] != TensorType{DType::F32, {result->shape.back()}})
    return fail("bias has type " + typeStr(ins[2]) + ", expected " +
                typeStr(TensorType{DType::F32, {result->shape.back()}}));
  for (size_t i = 0; i < outs.size(); ++i)
    RETURN_IF_ERROR(expectResult(outs, i, *result));
  a.preactivation = outs.size() == 2;
  if (a.preactivation && a.activation == Activation::None)
    return fail("a preactivation result needs an activation");
  d.attrs = a;
  return llvm::Error::success();
}

/// bias_activation_grad (x, dy) -> (dx, dbias [N]), f32.
llvm::Error decodeBiasActivationGrad(KernelDesc &d, Types ins, Types outs,
                                     AttrReader &attrs,
                                     const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 2));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  RETURN_IF_ERROR(expectSame(ins));
  if (ins[0].shape.empty())
    return fail("expects an operand of rank >= 1, got " + typeStr(ins[0]));
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  RETURN_IF_ERROR(
      expectResult(outs, 1, TensorType{DType::F32, {ins[0].shape.back()}}));
  LinearAttrs a;
  RETURN_IF_ERROR(decodeActivation(attrs, /*allowNone=*/false, a.activation));
  d.attrs = a;
  return llvm::Error::success();
}

/// A view of the operand with the result's shape (no kernel).
llvm::Error decodeReshape(KernelDesc &, Types ins, Types outs, AttrReader &,
                          const CompileOptions &) {
  return expectOneToOne(
      ins, outs, "reshape", [](const TensorType &in, const TensorType &out) {
        return out.dtype == in.dtype && numelOf(out) == numelOf(in);
      });
}

llvm::Error decodeTranspose(KernelDesc &d, Types ins, Types outs,
                            AttrReader &attrs, const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  std::vector<int64_t> perm = attrs.intArray("permutation");
  RETURN_IF_ERROR(attrs.takeError());
  int64_t rank = rankOf(ins[0]);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = static_cast<int64_t>(perm.size()) == rank;
  for (int64_t i = 0; ok && i < rank; ++i)
    ok = sorted[i] == i;
  if (!ok)
    return fail("attribute 'permutation' is not a permutation of the " +
                std::to_string(rank) + " dimensions");
  TensorType expected{ins[0].dtype, {}};
  for (int64_t p : perm)
    expected.shape.push_back(ins[0].shape[p]);
  RETURN_IF_ERROR(expectResult(outs, 0, expected));
  d.attrs = TransposeAttrs{std::move(perm)};
  return llvm::Error::success();
}

llvm::Error decodeSlice(KernelDesc &d, Types ins, Types outs, AttrReader &attrs,
                        const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  SliceAttrs a;
  a.starts = attrs.intArray("start_indices");
  a.limits = attrs.intArray("limit_indices");
  a.strides = attrs.intArray("strides");
  RETURN_IF_ERROR(attrs.takeError());
  size_t rank = ins[0].shape.size();
  if (a.starts.size() != rank || a.limits.size() != rank ||
      a.strides.size() != rank)
    return fail("start_indices, limit_indices and strides need " +
                std::to_string(rank) + " entries");
  TensorType expected{ins[0].dtype, {}};
  for (size_t dim = 0; dim < rank; ++dim) {
    int64_t start = a.starts[dim], limit = a.limits[dim],
            stride = a.strides[dim];
    if (start < 0 || start > limit || limit > ins[0].shape[dim] || stride < 1)
      return fail(llvm::formatv("bad slice [{0}:{1}:{2}] of dimension {3} "
                                "(size {4})",
                                start, limit, stride, dim, ins[0].shape[dim]));
    expected.shape.push_back((limit - start + stride - 1) / stride);
  }
  RETURN_IF_ERROR(expectResult(outs, 0, expected));
  d.attrs = std::move(a);
  return llvm::Error::success();
}

llvm::Error decodeConcat(KernelDesc &d, Types ins, Types outs,
                         AttrReader &attrs, const CompileOptions &) {
  if (ins.empty() || outs.size() != 1)
    return fail("expects at least one operand and one result");
  int64_t axis = attrs.integer("axis");
  RETURN_IF_ERROR(attrs.takeError());
  int64_t rank = rankOf(ins[0]);
  RETURN_IF_ERROR(normaliseAxis(axis, rank, "axis"));
  TensorType expected = ins[0];
  expected.shape[axis] = 0;
  for (const TensorType &t : ins) {
    bool ok = t.dtype == ins[0].dtype && rankOf(t) == rank;
    for (int64_t dim = 0; ok && dim < rank; ++dim)
      ok = dim == axis || t.shape[dim] == ins[0].shape[dim];
    if (!ok)
      return fail("operand types " + typeStr(ins[0]) + " and " + typeStr(t) +
                  " cannot be concatenated along dimension " +
                  std::to_string(axis));
    expected.shape[axis] += t.shape[axis];
  }
  RETURN_IF_ERROR(expectResult(outs, 0, expected));
  d.attrs = AxisAttrs{axis};
  return llvm::Error::success();
}

llvm::Error decodeBroadcast(KernelDesc &, Types ins, Types outs, AttrReader &,
                            const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  const auto &from = ins[0].shape, &to = outs[0].shape;
  bool ok = outs[0].dtype == ins[0].dtype && from.size() <= to.size();
  for (size_t i = 0; ok && i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    ok = f == 1 || f == t;
  }
  if (!ok)
    return fail("cannot broadcast " + typeStr(ins[0]) + " to " +
                typeStr(outs[0]));
  return llvm::Error::success();
}

/// gather (table, ids) -> rows; with grid_axes the table holds this rank's
/// rows of a vocab-parallel table.
llvm::Error decodeGather(KernelDesc &, Types ins, Types outs, AttrReader &,
                         const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  RETURN_IF_ERROR(expectDType(ins[1], {DType::I64}, "indices"));
  if (ins[0].shape.empty())
    return fail("table must have rank >= 1");
  TensorType expected{ins[0].dtype, ins[1].shape};
  expected.shape.insert(expected.shape.end(), ins[0].shape.begin() + 1,
                        ins[0].shape.end());
  return expectResult(outs, 0, expected);
}

/// gather_grad (ids, dy) -> d(table).
llvm::Error decodeGatherGrad(KernelDesc &, Types ins, Types outs, AttrReader &,
                             const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::I64}, "indices"));
  RETURN_IF_ERROR(expectDType(ins[1], {DType::F32}, "grad"));
  RETURN_IF_ERROR(expectDType(outs[0], {DType::F32}, "result"));
  if (outs[0].shape.empty())
    return fail("result must have rank >= 1");
  std::vector<int64_t> dy = ins[0].shape;
  dy.insert(dy.end(), outs[0].shape.begin() + 1, outs[0].shape.end());
  if (dy != ins[1].shape)
    return fail("grad " + typeStr(ins[1]) + " does not match indices " +
                typeStr(ins[0]) + " and result " + typeStr(outs[0]));
  return llvm::Error::success();
}

/// The layer_norm and rms_norm families: `nIn` operands (x, scale[, third])
/// and `nOut` results (y[, dx, dscale[, dbias]]), all f32. scale has the
/// shape of x's dimensions from `axis` on; a third operand is dy (x's type)
/// for a grad, else a bias shaped like scale. Results: dx has x's type, the
/// others scale's.
llvm::Error decodeNormFamily(KernelDesc &d, Types ins, Types outs,
                             AttrReader &attrs, bool grad, size_t nIn,
                             size_t nOut) {
  RETURN_IF_ERROR(expectCounts(ins, outs, nIn, nOut));
  for (const TensorType &t : ins)
    RETURN_IF_ERROR(expectDType(t, {DType::F32}, "operand"));
  int64_t axis = attrs.integer("axis");
  double eps = attrs.floating("epsilon");
  RETURN_IF_ERROR(attrs.takeError());
  RETURN_IF_ERROR(normaliseAxis(axis, rankOf(ins[0]), "axis"));
  std::vector<int64_t> normShape(ins[0].shape.begin() + axis,
                                 ins[0].shape.end());
  bool third = ins.size() > 2;
  bool thirdOk =
      !third || (grad ? ins[2] == ins[0] : ins[2].shape == normShape);
  if (ins[1].shape != normShape || !thirdOk)
    return fail("operand types " + typeStr(ins[0]) + ", " + typeStr(ins[1]) +
                (third ? ", " + typeStr(ins[2]) : std::string()) +
                " do not match axis " + std::to_string(axis));
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  for (size_t i = 1; i < outs.size(); ++i)
    RETURN_IF_ERROR(expectResult(outs, i, ins[1]));
  bool rms = d.kind == KernelKind::RmsNorm || d.kind == KernelKind::RmsNormGrad;
  d.attrs = NormAttrs{axis, static_cast<float>(eps), rms, grad};
  return llvm::Error::success();
}

/// layer_norm (x, scale, bias) -> y; layer_norm_grad (x, scale, dy) ->
/// (dx, dscale, dbias).
llvm::Error decodeLayerNorm(KernelDesc &d, Types ins, Types outs,
                            AttrReader &attrs, const CompileOptions &) {
  bool grad = d.kind == KernelKind::LayerNormGrad;
  return decodeNormFamily(d, ins, outs, attrs, grad, 3, grad ? 3 : 1);
}

/// rms_norm (x, scale) -> y; rms_norm_grad (x, scale, dy) -> (dx, dscale).
llvm::Error decodeRmsNorm(KernelDesc &d, Types ins, Types outs,
                          AttrReader &attrs, const CompileOptions &) {
  bool grad = d.kind == KernelKind::RmsNormGrad;
  return decodeNormFamily(d, ins, outs, attrs, grad, grad ? 3 : 2,
                          grad ? 2 : 1);
}

/// add_layer_norm (x, r, scale, bias) and add_rms_norm (x, r, scale) ->
/// (x + r, y): r has x's type, the rest as the norm's.
llvm::Error decodeAddNorm(KernelDesc &d, Types ins, Types outs,
                          AttrReader &attrs, const CompileOptions &) {
  bool rms = d.kind == KernelKind::AddRmsNorm;
  RETURN_IF_ERROR(expectCounts(ins, outs, rms ? 3 : 4, 2));
  if (ins[1] != ins[0])
    return fail("residual " + typeStr(ins[1]) + " does not match input " +
                typeStr(ins[0]));
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  RETURN_IF_ERROR(expectResult(outs, 1, ins[0]));
  std::vector<TensorType> normIns(ins.begin(), ins.end());
  normIns.erase(normIns.begin() + 1);
  RETURN_IF_ERROR(decodeNormFamily(d, normIns, outs.take_back(), attrs,
                                   /*grad=*/false, normIns.size(), 1));
  d.attrs = NormAttrs{d.get<NormAttrs>().axis, d.get<NormAttrs>().epsilon, rms,
                      false};
  return llvm::Error::success();
}

/// layer_norm_grad_add (x, scale, dy, addend) -> (dx + addend, dscale,
/// dbias); rms_norm_grad_add (x, scale, dy, addend) -> (dx + addend,
/// dscale): addend has x's type, the rest as the norm's gradient.
llvm::Error decodeNormGradAdd(KernelDesc &d, Types ins, Types outs,
                              AttrReader &attrs, const CompileOptions &) {
  bool rms = d.kind == KernelKind::RmsNormGradAdd;
  RETURN_IF_ERROR(expectCounts(ins, outs, 4, rms ? 2 : 3));
  if (ins[3] != ins[0])
    return fail("addend " + typeStr(ins[3]) + " does not match input " +
                typeStr(ins[0]));
  RETURN_IF_ERROR(decodeNormFamily(d, ins.take_front(3), outs, attrs,
                                   /*grad=*/true, 3, outs.size()));
  d.attrs =
      NormAttrs{d.get<NormAttrs>().axis, d.get<NormAttrs>().epsilon, rms, true};
  return llvm::Error::success();
}

/// tsr.attention (q, k, v [, mask]) -> (o, lse) and tsr.attention_grad
/// (q, k, v, o, lse, do [, mask]) -> (dq, dk, dv), all f32 (bf16/f16 are
/// widened; lse is f32 by contract). The shapes of
/// runtime/backends/cpu/Attention.h; grouped-query attention: with rank >=
/// 4, K and V may have Hkv heads (dim rank-3) where Q has H, Hkv dividing
/// H. Ring attention (grid_axes): `ring_size` must equal the
/// communicator's ranks; no mask, Sq == Sk.
llvm::Error decodeAttention(KernelDesc &d, Types ins, Types outs,
                            AttrReader &attrs, const CompileOptions &) {
  bool grad = d.kind == KernelKind::AttentionGrad;
  size_t nIn = grad ? 6 : 3, nOut = grad ? 3 : 2;
  if (ins.size() != nIn && ins.size() != nIn + 1)
    RETURN_IF_ERROR(expectCounts(ins, outs, nIn, nOut));
  RETURN_IF_ERROR(expectCounts(ins.take_front(nIn), outs, nIn, nOut));
  AttentionAttrs a;
  a.hasMask = ins.size() == nIn + 1;
  for (const TensorType &t : ins)
    RETURN_IF_ERROR(expectDType(t, {DType::F32}, "operand"));
  double scaleAttr = attrs.floating("scale");
  a.causal = attrs.boolean("causal", false);
  a.ringSize = attrs.has("ring_size") ? attrs.integer("ring_size") : 1;
  RETURN_IF_ERROR(attrs.takeError());
  if (a.ringSize < 1)
    return fail(llvm::formatv("ring_size must be >= 1, got {0}", a.ringSize));
  bool ring = d.hasGridAxes();
  if (ring) {
    if (a.ringSize < 2)
      return fail("grid_axes (ring attention) needs ring_size > 1");
    if (d.commSize > 0 && d.commSize != a.ringSize)
      return fail(llvm::formatv("ring_size {0} does not match the {1} ranks "
                                "of its grid_axes",
                                a.ringSize, d.commSize));
    if (a.hasMask)
      return fail("ring attention takes no mask operand");
  }
  const TensorType &q = ins[0], &k = ins[1], &v = ins[2];
  int64_t r = rankOf(q);
  auto badShapes = [&] {
    return fail("operand types " + typeStr(q) + ", " + typeStr(k) + ", " +
                typeStr(v) + " are not Q [b..., Sq, Dh], K [b..., Sk, Dh], " +
                "V [b..., Sk, Dv] (or, with rank >= 4, K/V with Hkv heads " +
                "dividing Q's H at dim rank-3)");
  };
  if (r < 3 || rankOf(k) != r || rankOf(v) != r)
    return badShapes();
  std::vector<int64_t> lead(q.shape.begin(), q.shape.end() - 2);
  std::vector<int64_t> kvLead(k.shape.begin(), k.shape.end() - 2);
  a.group = 1;
  if (kvLead != lead) {
    // GQA: only the head dim may differ, and Hkv must divide H.
    if (r < 4 || !std::equal(lead.begin(), lead.end() - 1, kvLead.begin()) ||
        kvLead.back() <= 0 || lead.back() % kvLead.back() != 0)
      return badShapes();
    a.group = lead.back() / kvLead.back();
  }
  if (!std::equal(kvLead.begin(), kvLead.end(), v.shape.begin()) ||
      k.shape[r - 1] != q.shape[r - 1] || v.shape[r - 2] != k.shape[r - 2])
    return badShapes();
  a.batch = shapeNumel(lead);
  a.sq = q.shape[r - 2];
  a.sk = k.shape[r - 2];
  a.dh = q.shape[r - 1];
  a.dv = v.shape[r - 1];
  if (a.causal && a.sq != a.sk)
    return fail("causal attention needs Sq == Sk");
  if (ring && a.sq != a.sk)
    return fail("ring attention needs Sq == Sk");
  if (a.hasMask && ins.back() != TensorType{DType::F32, {a.sq, a.sk}})
    return fail("mask " + typeStr(ins.back()) + " is not [Sq, Sk]");
  TensorType oType{DType::F32, lead}, lseType{DType::F32, lead};
  oType.shape.insert(oType.shape.end(), {a.sq, a.dv});
  lseType.shape.push_back(a.sq);
  a.scale = static_cast<float>(scaleAttr);
  if (!grad) {
    RETURN_IF_ERROR(expectResult(outs, 0, oType));
    RETURN_IF_ERROR(expectResult(outs, 1, lseType));
    d.attrs = a;
    return llvm::Error::success();
  }
  if (ins[3] != oType || ins[4] != lseType || ins[5] != oType)
    return fail("output, lse and grad " + typeStr(ins[3]) + ", " +
                typeStr(ins[4]) + ", " + typeStr(ins[5]) + " should be " +
                typeStr(oType) + ", " + typeStr(lseType) + ", " +
                typeStr(oType));
  RETURN_IF_ERROR(expectResult(outs, 0, q));
  RETURN_IF_ERROR(expectResult(outs, 1, k));
  RETURN_IF_ERROR(expectResult(outs, 2, v));
  d.attrs = a;
  return llvm::Error::success();
}

llvm::Error decodeSoftmax(KernelDesc &d, Types ins, Types outs,
                          AttrReader &attrs, const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  int64_t axis = attrs.integer("axis");
  RETURN_IF_ERROR(attrs.takeError());
  RETURN_IF_ERROR(normaliseAxis(axis, rankOf(ins[0]), "axis"));
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  d.attrs = AxisAttrs{axis};
  return llvm::Error::success();
}

/// softmax_grad (y, dy) with `axis`, relu_grad / silu_grad (x, dy), and
/// gelu_grad (x, dy) with `approximate`.
llvm::Error decodeActivationGrad(KernelDesc &d, Types ins, Types outs,
                                 AttrReader &attrs, const CompileOptions &) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  RETURN_IF_ERROR(expectSame(ins));
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  if (d.kind == KernelKind::SoftmaxGrad) {
    int64_t axis = attrs.integer("axis");
    RETURN_IF_ERROR(attrs.takeError());
    RETURN_IF_ERROR(normaliseAxis(axis, rankOf(ins[0]), "axis"));
    d.attrs = AxisAttrs{axis};
  } else if (d.kind == KernelKind::GeluGrad) {
    GeluAttrs a;
    RETURN_IF_ERROR(geluApproximate(attrs, a.approximate));
    RETURN_IF_ERROR(attrs.takeError());
    d.attrs = a;
  }
  return llvm::Error::success();
}

/// cross_entropy (logits [N, V], labels [N]) -> mean loss; and
/// cross_entropy_grad (logits, labels, dloss) -> dlogits. With grid_axes
/// (Megatron-LM's vocab-parallel cross-entropy) the logits hold this rank's
/// columns.
llvm::Error decodeCrossEntropy(KernelDesc &d, Types ins, Types outs,
                               AttrReader &, const CompileOptions &) {
  bool grad = d.kind == KernelKind::CrossEntropyGrad;
  RETURN_IF_ERROR(expectCounts(ins, outs, grad ? 3 : 2, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "logits"));
  RETURN_IF_ERROR(expectDType(ins[1], {DType::I64}, "labels"));
  if (rankOf(ins[0]) != 2 || rankOf(ins[1]) != 1 ||
      ins[1].shape[0] != ins[0].shape[0])
    return fail("expects logits [N, V] and labels [N], got " + typeStr(ins[0]) +
                " and " + typeStr(ins[1]));
  if (grad) {
    RETURN_IF_ERROR(expectDType(ins[2], {DType::F32}, "grad"));
    if (numelOf(ins[2]) != 1)
      return fail("grad must have one element, got " + typeStr(ins[2]));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  } else {
    RETURN_IF_ERROR(expectResult(outs, 0, TensorType{DType::F32, {}}));
  }
  CrossEntropyAttrs a;
  if (d.hasGridAxes())
    a.scratchPerRow = tessera::tsrt::vocabParallelScratchPerRow(d.name());
  d.attrs = a;
  return llvm::Error::success();
}

/// An optimizer's runtime scalar (AdamW's step, the learning rate): f32,
/// one element.
llvm::Error expectScalarF32(const TensorType &t, llvm::StringRef what) {
  RETURN_IF_ERROR(expectDType(t, {DType::F32}, what));
  if (numelOf(t) != 1)
    return fail(what + " must have one element, got " + typeStr(t));
  return llvm::Error::success();
}

llvm::Error decodeSgdUpdate(KernelDesc &d, Types ins, Types outs,
                            AttrReader &attrs, const CompileOptions &options) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 3, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "param"));
  RETURN_IF_ERROR(expectSame(ins.take_front(2)));
  RETURN_IF_ERROR(expectScalarF32(ins[2], "lr"));
  RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
  SgdAttrs a;
  a.weightDecay =
      hyperParameter(options, "weight_decay", attrs.floating("weight_decay"));
  RETURN_IF_ERROR(attrs.takeError());
  d.attrs = a;
  return llvm::Error::success();
}

llvm::Error decodeAdamwUpdate(KernelDesc &d, Types ins, Types outs,
                              AttrReader &attrs,
                              const CompileOptions &options) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 6, 3));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "param"));
  RETURN_IF_ERROR(expectSame(ins.take_front(4)));
  RETURN_IF_ERROR(expectScalarF32(ins[4], "step"));
  RETURN_IF_ERROR(expectScalarF32(ins[5], "lr"));
  for (size_t i = 0; i < 3; ++i)
    RETURN_IF_ERROR(expectResult(outs, i, ins[0]));
  AdamwAttrs a;
  a.beta1 = hyperParameter(options, "beta1", attrs.floating("beta1"));
  a.beta2 = hyperParameter(options, "beta2", attrs.floating("beta2"));
  a.eps = hyperParameter(options, "eps", attrs.floating("eps"));
  a.weightDecay =
      hyperParameter(options, "weight_decay", attrs.floating("weight_decay"));
  RETURN_IF_ERROR(attrs.takeError());
  d.attrs = a;
  return llvm::Error::success();
}

/// fused_elementwise (inputs...) -> (results...): f32 or i1 operands, f32
/// results of one shape, and a program (`ops`, `args`, `outputs`) that
/// fusion::buildElementwiseProgram accepts.
llvm::Error decodeFusedElementwise(KernelDesc &d, Types ins, Types outs,
                                   AttrReader &attrs, const CompileOptions &) {
  std::vector<std::string> names = attrs.stringArray("ops");
  std::vector<int64_t> args = attrs.intArray("args");
  std::vector<int64_t> outputs = attrs.intArray("outputs");
  RETURN_IF_ERROR(attrs.takeError());
  if (outs.size() != outputs.size())
    return fail(llvm::formatv("has {0} result(s) but {1} outputs", outs.size(),
                              outputs.size()));
  if (outs.empty())
    return fail("has no results");
  for (size_t i = 0; i < outs.size(); ++i)
    RETURN_IF_ERROR(
        expectResult(outs, i, TensorType{DType::F32, outs[0].shape}));
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> mask;
  for (size_t i = 0; i < ins.size(); ++i) {
    RETURN_IF_ERROR(expectDType(ins[i], {DType::F32, DType::I1},
                                "operand #" + std::to_string(i)));
    shapes.push_back(ins[i].shape);
    mask.push_back(ins[i].dtype == DType::I1);
  }
  std::vector<std::string_view> ops(names.begin(), names.end());
  FusedElementwiseAttrs program;
  std::string problem = tessera::fusion::buildElementwiseProgram(
      ops, args, outputs, shapes, mask, outs[0].shape, program);
  if (!problem.empty())
    return fail(problem);
  d.attrs = std::move(program);
  return llvm::Error::success();
}

/// The tensor operands of a multi-tensor update: `groups` groups of N f32
/// tensors (N = outs / resultGroups >= 1), entry i of each group and of
/// each result group of parameter i's type; then `scalars` f32 scalars.
llvm::Error expectMultiTensor(Types ins, Types outs, size_t groups,
                              size_t resultGroups,
                              ArrayRef<StringRef> scalars) {
  size_t n = outs.size() / resultGroups;
  if (n == 0 || outs.size() % resultGroups != 0 ||
      ins.size() != groups * n + scalars.size())
    return fail(llvm::formatv("expects {0}*N + {1} operand(s) and {2}*N "
                              "result(s) for N >= 1 parameters, got {3} and "
                              "{4}",
                              groups, scalars.size(), resultGroups, ins.size(),
                              outs.size()));
  for (size_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(expectDType(ins[i], {DType::F32}, "param"));
    for (size_t k = 1; k < groups; ++k)
      if (ins[k * n + i] != ins[i])
        return fail(llvm::formatv("operand #{0} has type {1} but parameter "
                                  "#{2} has {3}; they must match",
                                  k * n + i, typeStr(ins[k * n + i]), i,
                                  typeStr(ins[i])));
    for (size_t k = 0; k < resultGroups; ++k)
      RETURN_IF_ERROR(expectResult(outs, k * n + i, ins[i]));
  }
  for (auto [j, what] : llvm::enumerate(scalars))
    RETURN_IF_ERROR(expectScalarF32(ins[groups * n + j], what));
  return llvm::Error::success();
}

/// multi_sgd_update (params..., grads..., lr) -> params': sgd_update's
/// attributes.
llvm::Error decodeMultiSgdUpdate(KernelDesc &d, Types ins, Types outs,
                                 AttrReader &attrs,
                                 const CompileOptions &options) {
  RETURN_IF_ERROR(expectMultiTensor(ins, outs, 2, 1, {"lr"}));
  SgdAttrs a;
  a.weightDecay =
      hyperParameter(options, "weight_decay", attrs.floating("weight_decay"));
  RETURN_IF_ERROR(attrs.takeError());
  d.attrs = a;
  return llvm::Error::success();
}

/// multi_adamw_update (params..., grads..., exp_avgs..., exp_avg_sqs...,
/// step, lr) -> (params'..., exp_avgs'..., exp_avg_sqs'...): adamw_update's
/// attributes.
llvm::Error decodeMultiAdamwUpdate(KernelDesc &d, Types ins, Types outs,
                                   AttrReader &attrs,
                                   const CompileOptions &options) {
  RETURN_IF_ERROR(expectMultiTensor(ins, outs, 4, 3, {"step", "lr"}));
  AdamwAttrs a;
  a.beta1 = hyperParameter(options, "beta1", attrs.floating("beta1"));
  a.beta2 = hyperParameter(options, "beta2", attrs.floating("beta2"));
  a.eps = hyperParameter(options, "eps", attrs.floating("eps"));
  a.weightDecay =
      hyperParameter(options, "weight_decay", attrs.floating("weight_decay"));
  RETURN_IF_ERROR(attrs.takeError());
  d.attrs = a;
  return llvm::Error::success();
}

/// Each kind's decoder (its family's), in KernelKind order.
using DecodeFn = llvm::Error (*)(KernelDesc &, Types, Types, AttrReader &,
                                 const CompileOptions &);
constexpr DecodeFn decoders[] = {
#define TESSERA_KERNEL(Kind, Name, Family) &decode##Family,
#include "runtime/executor/KernelKinds.def"
};
static_assert(std::size(decoders) == kNumKernelKinds);

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

WidenedTypes exec::widenFloat16(ArrayRef<TensorType> ins,
                                ArrayRef<TensorType> outs) {
  WidenedTypes w;
  for (auto [from, to, narrow] : {std::tuple{ins, &w.ins, &w.narrowIn},
                                  std::tuple{outs, &w.outs, &w.narrowOut}})
    for (TensorType t : from) {
      narrow->push_back(isFloat16Bit(t.dtype));
      if (isFloat16Bit(t.dtype))
        t.dtype = DType::F32;
      to->push_back(t);
    }
  return w;
}

KernelDesc exec::withWidenedTypes(const KernelDesc &desc,
                                  const WidenedTypes &w) {
  KernelDesc wide = desc;
  wide.operands = w.ins;
  wide.results = w.outs;
  return wide;
}

double exec::hyperParameter(const CompileOptions &options, StringRef key,
                            double attrValue) {
  if (!options.optimizer)
    return attrValue;
  if (std::optional<double> d = options.optimizer->getNumber(key))
    if (static_cast<float>(*d) == static_cast<float>(attrValue))
      return *d;
  return attrValue;
}

std::string TensorType::str() const {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + dtypeName(dtype) + ">";
}

llvm::Expected<KernelDesc> exec::decodeKernel(StringRef name,
                                              mlir::DictionaryAttr dict,
                                              ArrayRef<TensorType> ins,
                                              ArrayRef<TensorType> outs,
                                              const CompileOptions &options,
                                              int commIndex, int64_t commSize) {
  std::optional<KernelKind> kind = kernelKindOf(name);
  if (!kind)
    return fail("unknown kernel");
  KernelDesc d;
  d.kind = *kind;
  d.operands.assign(ins.begin(), ins.end());
  d.results.assign(outs.begin(), outs.end());
  d.commIndex = commIndex;
  d.commSize = commSize;
  // A 16-bit kernel that computes is checked as its f32 form (see the
  // header); data movement takes the 16-bit types as they are.
  d.widened = d.hasFloat16() && !isDataMovement(d.kind);
  WidenedTypes w;
  if (d.widened)
    w = widenFloat16(ins, outs);
  AttrReader attrs(dict);
  if (llvm::Error e = decoders[kernelIndex(d.kind)](
          d, d.widened ? ArrayRef<TensorType>(w.ins) : ins,
          d.widened ? ArrayRef<TensorType>(w.outs) : outs, attrs, options))
    return std::move(e);
  return d;
}

llvm::Error exec::checkCollective(CollectiveSpec &spec,
                                  const TensorType &operand,
                                  const TensorType &result) {
  TensorType outs[] = {result};
  int64_t n = spec.ranks;
  int64_t rank = rankOf(operand);
  // The operand's block of dimension `dim` (normalised) split over the n
  // ranks.
  auto blockPerRank = [&]() -> llvm::Expected<TensorType> {
    if (operand.shape[spec.dim] % n != 0)
      return fail(llvm::formatv("dimension {0} of {1} is not divisible by {2} "
                                "ranks",
                                spec.dim, typeStr(operand), n));
    TensorType expected = operand;
    expected.shape[spec.dim] /= n;
    return expected;
  };
  // reduce_scatter and all_slice: the result is that block.
  auto expectOneBlockPerRank = [&]() -> llvm::Error {
    RETURN_IF_ERROR(normaliseAxis(spec.dim, rank, "dim"));
    llvm::Expected<TensorType> expected = blockPerRank();
    if (!expected)
      return expected.takeError();
    return expectResult(outs, 0, *expected);
  };
  switch (spec.op) {
  case CollectiveOp::AllReduce:
    RETURN_IF_ERROR(expectDType(
        operand, {DType::F32, DType::BF16, DType::F16, DType::I64}, "operand"));
    return expectResult(outs, 0, operand);
  case CollectiveOp::AllGather: {
    RETURN_IF_ERROR(normaliseAxis(spec.dim, rank, "dim"));
    TensorType expected = operand;
    expected.shape[spec.dim] *= n;
    return expectResult(outs, 0, expected);
  }
  case CollectiveOp::ReduceScatter:
    RETURN_IF_ERROR(expectDType(
        operand, {DType::F32, DType::BF16, DType::F16, DType::I64}, "operand"));
    return expectOneBlockPerRank();
  case CollectiveOp::AllSlice:
    return expectOneBlockPerRank();
  case CollectiveOp::AllToAll: {
    RETURN_IF_ERROR(normaliseAxis(spec.dim, rank, "split_dim"));
    RETURN_IF_ERROR(normaliseAxis(spec.dim2, rank, "concat_dim"));
    llvm::Expected<TensorType> expected = blockPerRank();
    if (!expected)
      return expected.takeError();
    expected->shape[spec.dim2] *= n;
    return expectResult(outs, 0, *expected);
  }
  }
  return fail("unknown collective");
}

std::vector<tessera::random::DropoutFactor>
exec::dropoutFactors(const DropoutAttrs &attrs, ArrayRef<int64_t> coords,
                     int64_t microBatch) {
  std::vector<tessera::random::DropoutFactor> out;
  out.reserve(attrs.factors.size());
  for (const DropoutAttrs::Factor &f : attrs.factors) {
    // The piece index: the coordinates on the factor's axes, row-major.
    int64_t piece = 0;
    for (size_t i = 0; i < f.axes.size(); ++i) {
      int64_t axis = f.axes[i];
      int64_t c = axis < static_cast<int64_t>(coords.size())    ? coords[axis]
                  : axis == static_cast<int64_t>(coords.size()) ? microBatch
                                                                : 0;
      piece = piece * f.axisSizes[i] + c;
    }
    out.push_back({f.localSize, piece * f.localSize, f.globalStride});
  }
  return out;
}

//===- Kernels.cpp - resolving tsrt kernel and collective ops -------------===//
//
// One resolver per kernel family. Each checks operand/result counts, dtypes
// and shapes (inferring the result shape and comparing it with the declared
// result type), decodes the attributes once, and returns a closure that
// only calls the CPU kernel.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Kernels.h"

#include "runtime/collectives/mpi/Watchdog.h"

#include "dialects/tsrt/AttentionWorkspace.h"

#include "dialects/tsrt/TsrtDialect.h"

#include "runtime/backends/cpu/Attention.h"
#include "runtime/backends/cpu/CpuKernels.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
using llvm::ArrayRef;
using llvm::StringRef;

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

/// A kernel with `grid_axes` needs the executor's communicator for them.
llvm::Error checkComm(const ExecContext &ctx, int comm) {
  if (comm < 0 || comm >= static_cast<int>(ctx.comms.size()))
    return fail(llvm::formatv("needs communicator #{0} for its grid_axes but "
                              "the executor provides {1}",
                              comm, ctx.comms.size()));
  return llvm::Error::success();
}

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

/// Value used for an optimizer hyper-parameter: the manifest's double when it
/// rounds to the attribute's f32 (see CompileOptions::optimizer).

//===----------------------------------------------------------------------===//
// Families
//===----------------------------------------------------------------------===//

using BinaryFn = void (*)(const Tensor &, const Tensor &, Tensor &);
using UnaryFn = void (*)(const Tensor &, Tensor &);

std::optional<BinaryFn> binaryKernel(StringRef name) {
  return llvm::StringSwitch<std::optional<BinaryFn>>(name)
      .Case("add", &cpu::add)
      .Case("sub", &cpu::sub)
      .Case("mul", &cpu::mul)
      .Case("div", &cpu::div)
      .Case("pow", &cpu::pow)
      .Case("max", &cpu::max)
      .Default(std::nullopt);
}

std::optional<UnaryFn> unaryKernel(StringRef name) {
  return llvm::StringSwitch<std::optional<UnaryFn>>(name)
      .Case("neg", &cpu::neg)
      .Case("exp", &cpu::exp)
      .Case("log", &cpu::log)
      .Case("sqrt", &cpu::sqrt)
      .Case("rsqrt", &cpu::rsqrt)
      .Case("tanh", &cpu::tanh)
      .Case("erf", &cpu::erf)
      .Case("relu", &cpu::relu)
      .Case("sigmoid", &cpu::sigmoid)
      .Case("silu", &cpu::silu)
      .Default(std::nullopt);
}

llvm::Error geluApproximate(AttrReader &attrs, cpu::GeluApproximate &out) {
  std::string s = attrs.string("approximate", StringRef("none"));
  if (s == "none")
    out = cpu::GeluApproximate::None;
  else if (s == "tanh")
    out = cpu::GeluApproximate::Tanh;
  else
    return fail("attribute 'approximate' must be \"none\" or \"tanh\", got \"" +
                s + "\"");
  return llvm::Error::success();
}

/// reduce_sum / reduce_mean / reduce_max.
llvm::Error resolveReduce(StringRef name, AttrReader &attrs,
                          ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                          Instruction &inst) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
  std::vector<int64_t> axes = attrs.intArray("axes");
  bool keep = attrs.boolean("keepdim", false);
  RETURN_IF_ERROR(attrs.takeError());
  int64_t rank = rankOf(ins[0]);
  for (int64_t &a : axes)
    RETURN_IF_ERROR(normaliseAxis(a, rank, "axes"));
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return fail("attribute 'axes' repeats an axis");
  TensorType expected{DType::F32, {}};
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced)
      expected.shape.push_back(ins[0].shape[d]);
    else if (keep)
      expected.shape.push_back(1);
  }
  RETURN_IF_ERROR(expectResult(outs, 0, expected));
  using ReduceFn = void (*)(const Tensor &, ArrayRef<int64_t>, bool, Tensor &);
  ReduceFn fn = name == "reduce_sum"    ? &cpu::reduceSum
                : name == "reduce_mean" ? &cpu::reduceMean
                                        : &cpu::reduceMax;
  inst.fn = [fn, axes, keep](const ExecContext &, In in, Out out) {
    fn(*in[0], axes, keep, out[0]);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error resolveMatmul(AttrReader &attrs, ArrayRef<TensorType> ins,
                          ArrayRef<TensorType> outs, Instruction &inst) {
  RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
  RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "lhs"));
  RETURN_IF_ERROR(expectDType(ins[1], {DType::F32}, "rhs"));
  bool ta = attrs.boolean("transpose_lhs", false);
  bool tb = attrs.boolean("transpose_rhs", false);
  RETURN_IF_ERROR(attrs.takeError());
  const auto &a = ins[0].shape, &b = ins[1].shape;
  size_t ra = a.size(), rb = b.size();
  if (ra < 2 || rb < 2)
    return fail("operands must have rank >= 2, got " + typeStr(ins[0]) +
                " and " + typeStr(ins[1]));
  int64_t m = ta ? a[ra - 1] : a[ra - 2], ka = ta ? a[ra - 2] : a[ra - 1];
  int64_t kb = tb ? b[rb - 1] : b[rb - 2], n = tb ? b[rb - 2] : b[rb - 1];
  if (ka != kb)
    return fail(llvm::formatv("contracting sizes differ: {0} vs {1} ({2}, {3})",
                              ka, kb, typeStr(ins[0]), typeStr(ins[1])));
  std::vector<int64_t> batchA(a.begin(), a.end() - 2),
      batchB(b.begin(), b.end() - 2), batch;
  if (ra == rb) {
    if (batchA != batchB)
      return fail("batch dimensions differ: " + typeStr(ins[0]) + " and " +
                  typeStr(ins[1]));
    batch = batchA;
  } else if (rb == 2) {
    batch = batchA;
  } else if (ra == 2) {
    batch = batchB;
  } else {
    return fail("batch ranks differ: " + typeStr(ins[0]) + " and " +
                typeStr(ins[1]));
  }
  batch.push_back(m);
  batch.push_back(n);
  RETURN_IF_ERROR(expectResult(outs, 0, TensorType{DType::F32, batch}));
  inst.fn = [ta, tb](const ExecContext &, In in, Out out) {
    cpu::matmul(*in[0], *in[1], ta, tb, out[0]);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error resolveShapeOp(StringRef name, AttrReader &attrs,
                           ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                           Instruction &inst) {
  if (name == "reshape") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
    if (outs[0].dtype != ins[0].dtype || numelOf(outs[0]) != numelOf(ins[0]))
      return fail("cannot reshape " + typeStr(ins[0]) + " to " +
                  typeStr(outs[0]));
    std::vector<int64_t> shape = outs[0].shape;
    // A view: shares the operand's storage (kernels never write operands).
    inst.allocateResults = false;
    inst.fn = [shape](const ExecContext &, In in, Out out) {
      out[0] = in[0]->reshape(shape);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "transpose") {
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
    inst.fn = [perm](const ExecContext &, In in, Out out) {
      cpu::transpose(*in[0], perm, out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "slice") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
    std::vector<int64_t> starts = attrs.intArray("start_indices");
    std::vector<int64_t> limits = attrs.intArray("limit_indices");
    std::vector<int64_t> strides = attrs.intArray("strides");
    RETURN_IF_ERROR(attrs.takeError());
    size_t rank = ins[0].shape.size();
    if (starts.size() != rank || limits.size() != rank ||
        strides.size() != rank)
      return fail("start_indices, limit_indices and strides need " +
                  std::to_string(rank) + " entries");
    TensorType expected{ins[0].dtype, {}};
    for (size_t d = 0; d < rank; ++d) {
      if (starts[d] < 0 || starts[d] > limits[d] ||
          limits[d] > ins[0].shape[d] || strides[d] < 1)
        return fail(llvm::formatv("bad slice [{0}:{1}:{2}] of dimension {3} "
                                  "(size {4})",
                                  starts[d], limits[d], strides[d], d,
                                  ins[0].shape[d]));
      expected.shape.push_back((limits[d] - starts[d] + strides[d] - 1) /
                               strides[d]);
    }
    RETURN_IF_ERROR(expectResult(outs, 0, expected));
    inst.fn = [starts, limits, strides](const ExecContext &, In in, Out out) {
      cpu::slice(*in[0], starts, limits, strides, out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "concat") {
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
      for (int64_t d = 0; ok && d < rank; ++d)
        ok = d == axis || t.shape[d] == ins[0].shape[d];
      if (!ok)
        return fail("operand types " + typeStr(ins[0]) + " and " + typeStr(t) +
                    " cannot be concatenated along dimension " +
                    std::to_string(axis));
      expected.shape[axis] += t.shape[axis];
    }
    RETURN_IF_ERROR(expectResult(outs, 0, expected));
    inst.fn = [axis](const ExecContext &, In in, Out out) {
      cpu::concat(in, axis, out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  // broadcast
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
  inst.fn = [](const ExecContext &, In in, Out out) {
    cpu::broadcast(*in[0], out[0]);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

/// MPI tag of ring attention's K/V rotations (on the ring's own
/// communicator, so it cannot match any other message).
constexpr int kRingAttentionTag = 7100;

/// ring attention's `rotate`: sends buf[0, n) to the next rank of the ring
/// and overwrites it with the previous rank's (MPI_Sendrecv_replace), and
/// records the n·4 bytes sent as Send traffic. The first MPI error is kept
/// in `err` (later rotations are skipped) and named after `kernel`.
std::function<void(float *, int64_t)> ringRotate(const ExecContext &ctx,
                                                 const mpi::Communicator &c,
                                                 StringRef kernel,
                                                 std::string &err) {
  int size = c.size(), rank = c.rank();
  int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
  return [&ctx, &c, kernel, &err, next, prev](float *buf, int64_t n) {
    if (!err.empty())
      return;
    if (n > std::numeric_limits<int>::max()) {
      err = llvm::formatv("kernel \"{0}\": ring block of {1} floats exceeds "
                          "MPI's int count",
                          kernel, n)
                .str();
      return;
    }
    mpi::watchdog::Guard guard("sendrecv of ring attention", c.size());
    int rc = MPI_Sendrecv_replace(buf, static_cast<int>(n), MPI_FLOAT, next,
                                  kRingAttentionTag, prev, kRingAttentionTag,
                                  c.handle(), MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      err = llvm::formatv("kernel \"{0}\": MPI_Sendrecv_replace of the ring "
                          "block failed: {1}",
                          kernel, StringRef(msg, len))
                .str();
      return;
    }
    if (ctx.traffic)
      ctx.traffic->record(mpi::CollectiveKind::Send, static_cast<double>(n) * 4,
                          c.size());
  };
}

/// tsr.attention (q, k, v [, mask]) -> (o, lse) and tsr.attention_grad
/// (q, k, v, o, lse, do [, mask]) -> (dq, dk, dv), all f32 (the 16-bit
/// adapter widens bf16/f16; lse is f32 by contract). Checks the shapes of
/// runtime/backends/cpu/Attention.h. The kernel's scratch is a Tensor
/// allocated per call, so the heap accounting sees it; tsr-plan-memory
/// predicts it as the instruction's workspace (MemoryPlan.cpp, both from
/// tsrt::attentionWorkspaceElems).
///
/// Ring attention: with `grid_axes` (a communicator, `inst.commIndex`) the
/// operands are this rank's stripe of a striped sequence and the kernel is
/// ringAttentionForward/Backward over the communicator, whose size must be
/// `ring_size`; it takes no mask and needs Sq == Sk.
///
/// Grouped-query attention: with rank >= 4, K and V may have Hkv heads (dim
/// rank-3) where Q has H, Hkv dividing H (AttentionDims::group = H / Hkv).
llvm::Error resolveAttention(StringRef name, AttrReader &attrs,
                             ArrayRef<TensorType> ins,
                             ArrayRef<TensorType> outs, Instruction &inst) {
  bool grad = name == "attention_grad";
  size_t nIn = grad ? 6 : 3, nOut = grad ? 3 : 2;
  if (ins.size() != nIn && ins.size() != nIn + 1)
    RETURN_IF_ERROR(expectCounts(ins, outs, nIn, nOut));
  RETURN_IF_ERROR(expectCounts(ins.take_front(nIn), outs, nIn, nOut));
  bool hasMask = ins.size() == nIn + 1;
  for (const TensorType &t : ins)
    RETURN_IF_ERROR(expectDType(t, {DType::F32}, "operand"));
  double scaleAttr = attrs.floating("scale");
  bool causal = attrs.boolean("causal", false);
  int64_t ringSize = attrs.has("ring_size") ? attrs.integer("ring_size") : 1;
  RETURN_IF_ERROR(attrs.takeError());
  if (ringSize < 1)
    return fail(llvm::formatv("ring_size must be >= 1, got {0}", ringSize));
  int comm = inst.commIndex;
  bool ring = comm >= 0;
  if (ring) {
    if (ringSize < 2)
      return fail("grid_axes (ring attention) needs ring_size > 1");
    if (inst.commSize > 0 && inst.commSize != ringSize)
      return fail(llvm::formatv("ring_size {0} does not match the {1} ranks "
                                "of its grid_axes",
                                ringSize, inst.commSize));
    if (hasMask)
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
  int64_t group = 1;
  if (kvLead != lead) {
    // GQA: only the head dim may differ, and Hkv must divide H.
    if (r < 4 || !std::equal(lead.begin(), lead.end() - 1, kvLead.begin()) ||
        kvLead.back() <= 0 || lead.back() % kvLead.back() != 0)
      return badShapes();
    group = lead.back() / kvLead.back();
  }
  if (!std::equal(kvLead.begin(), kvLead.end(), v.shape.begin()) ||
      k.shape[r - 1] != q.shape[r - 1] || v.shape[r - 2] != k.shape[r - 2])
    return badShapes();
  cpu::AttentionDims d{shapeNumel(lead), q.shape[r - 2], k.shape[r - 2],
                       q.shape[r - 1],   v.shape[r - 1], group};
  if (causal && d.sq != d.sk)
    return fail("causal attention needs Sq == Sk");
  if (ring && d.sq != d.sk)
    return fail("ring attention needs Sq == Sk");
  if (hasMask && ins.back() != TensorType{DType::F32, {d.sq, d.sk}})
    return fail("mask " + typeStr(ins.back()) + " is not [Sq, Sk]");
  TensorType oType{DType::F32, lead}, lseType{DType::F32, lead};
  oType.shape.insert(oType.shape.end(), {d.sq, d.dv});
  lseType.shape.push_back(d.sq);
  float scale = static_cast<float>(scaleAttr);
  int64_t wsElems = ring ? cpu::ringAttentionWorkspaceElems(d, grad)
                         : cpu::attentionWorkspaceElems(d, grad);
  // The score-block part of the workspace, reported to ctx.stats.
  int64_t scoresBytes =
      tessera::tsrt::attentionBlockWorkspaceElems(d.sq, d.sk, grad) * 4;
  auto workspace = [wsElems] {
    return wsElems > 0 ? Tensor::empty(DType::F32, {wsElems}) : Tensor();
  };
  auto record = [scoresBytes](const ExecContext &ctx) {
    if (ctx.stats)
      ctx.stats->attentionScoresBytes =
          std::max(ctx.stats->attentionScoresBytes, scoresBytes);
  };
  auto wsData = [](Tensor &t) {
    return t.isNull() ? nullptr : t.data<float>();
  };
  // Ring attention: an instruction that checks its communicator against
  // ring_size, records the score block and runs `kernel(rank, rotate, in,
  // out, workspace)`; a failed K/V rotation becomes its error.
  std::string kernelName = name.str();
  using Rotate = std::function<void(float *, int64_t)>;
  auto ringInstruction = [=](auto kernel) {
    return [=](const ExecContext &ctx, In in, Out out) -> llvm::Error {
      RETURN_IF_ERROR(checkComm(ctx, comm));
      const mpi::Communicator &c = ctx.comms[comm];
      if (c.size() != ringSize)
        return fail(llvm::formatv("ring_size {0} does not match the {1} ranks "
                                  "of its communicator",
                                  ringSize, c.size()));
      record(ctx);
      Tensor ws = workspace();
      std::string err;
      Rotate rotate = ringRotate(ctx, c, kernelName, err);
      kernel(c.rank(), rotate, in, out, wsData(ws));
      return err.empty() ? llvm::Error::success() : fail(err);
    };
  };
  if (!grad) {
    RETURN_IF_ERROR(expectResult(outs, 0, oType));
    RETURN_IF_ERROR(expectResult(outs, 1, lseType));
    if (ring) {
      inst.fn = ringInstruction([=](int rank, const Rotate &rotate, In in,
                                    Out out, float *ws) {
        cpu::ringAttentionForward(d, rank, ringSize, in[0]->data<float>(),
                                  in[1]->data<float>(), in[2]->data<float>(),
                                  scale, causal, rotate, out[0].data<float>(),
                                  out[1].data<float>(), ws);
      });
      return llvm::Error::success();
    }
    inst.fn = [=](const ExecContext &ctx, In in, Out out) {
      record(ctx);
      Tensor ws = workspace();
      cpu::attentionForward(
          d, in[0]->data<float>(), in[1]->data<float>(), in[2]->data<float>(),
          hasMask ? in[3]->data<float>() : nullptr, scale, causal,
          out[0].data<float>(), out[1].data<float>(), wsData(ws));
      return llvm::Error::success();
    };
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
  if (ring) {
    inst.fn = ringInstruction(
        [=](int rank, const Rotate &rotate, In in, Out out, float *ws) {
          cpu::ringAttentionBackward(
              d, rank, ringSize, in[0]->data<float>(), in[1]->data<float>(),
              in[2]->data<float>(), in[3]->data<float>(), in[4]->data<float>(),
              in[5]->data<float>(), scale, causal, rotate, out[0].data<float>(),
              out[1].data<float>(), out[2].data<float>(), ws);
        });
    return llvm::Error::success();
  }
  inst.fn = [=](const ExecContext &ctx, In in, Out out) {
    record(ctx);
    Tensor ws = workspace();
    cpu::attentionBackward(d, in[0]->data<float>(), in[1]->data<float>(),
                           in[2]->data<float>(), in[3]->data<float>(),
                           in[4]->data<float>(), in[5]->data<float>(),
                           hasMask ? in[6]->data<float>() : nullptr, scale,
                           causal, out[0].data<float>(), out[1].data<float>(),
                           out[2].data<float>(), wsData(ws));
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error resolveNN(StringRef name, AttrReader &attrs,
                      ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                      const CompileOptions &options, Instruction &inst) {
  if (name == "gather") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
    RETURN_IF_ERROR(expectDType(ins[1], {DType::I64}, "indices"));
    if (ins[0].shape.empty())
      return fail("table must have rank >= 1");
    TensorType expected{ins[0].dtype, ins[1].shape};
    expected.shape.insert(expected.shape.end(), ins[0].shape.begin() + 1,
                          ins[0].shape.end());
    RETURN_IF_ERROR(expectResult(outs, 0, expected));
    if (int comm = inst.commIndex; comm >= 0) {
      // Vocab-parallel: this rank's rows start at comm rank · V_local.
      inst.fn = [comm](const ExecContext &ctx, In in, Out out) -> llvm::Error {
        RETURN_IF_ERROR(checkComm(ctx, comm));
        const mpi::Communicator &c = ctx.comms[comm];
        int64_t local = in[0]->dim(0);
        return cpu::gatherMasked(*in[0], *in[1], c.rank() * local,
                                 c.size() * local, out[0]);
      };
      return llvm::Error::success();
    }
    inst.fn = [](const ExecContext &, In in, Out out) {
      return cpu::gather(*in[0], *in[1], out[0]);
    };
    return llvm::Error::success();
  }
  if (name == "gather_grad") {
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
    if (int comm = inst.commIndex; comm >= 0) {
      inst.fn = [comm](const ExecContext &ctx, In in, Out out) -> llvm::Error {
        RETURN_IF_ERROR(checkComm(ctx, comm));
        const mpi::Communicator &c = ctx.comms[comm];
        int64_t local = out[0].dim(0);
        return cpu::gatherGradMasked(*in[0], *in[1], c.rank() * local,
                                     c.size() * local, out[0]);
      };
      return llvm::Error::success();
    }
    inst.fn = [](const ExecContext &, In in, Out out) {
      return cpu::gatherGrad(*in[0], *in[1], out[0]);
    };
    return llvm::Error::success();
  }
  if (name == "layer_norm" || name == "layer_norm_grad") {
    bool grad = name == "layer_norm_grad";
    RETURN_IF_ERROR(expectCounts(ins, outs, 3, grad ? 3 : 1));
    for (const TensorType &t : ins)
      RETURN_IF_ERROR(expectDType(t, {DType::F32}, "operand"));
    int64_t axis = attrs.integer("axis");
    double eps = attrs.floating("epsilon");
    RETURN_IF_ERROR(attrs.takeError());
    RETURN_IF_ERROR(normaliseAxis(axis, rankOf(ins[0]), "axis"));
    std::vector<int64_t> normShape(ins[0].shape.begin() + axis,
                                   ins[0].shape.end());
    // layer_norm: (x, scale, bias); layer_norm_grad: (x, scale, dy).
    bool thirdOk = grad ? ins[2] == ins[0] : ins[2].shape == normShape;
    if (ins[1].shape != normShape || !thirdOk)
      return fail("operand types " + typeStr(ins[0]) + ", " + typeStr(ins[1]) +
                  ", " + typeStr(ins[2]) + " do not match axis " +
                  std::to_string(axis));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    float epsilon = static_cast<float>(eps);
    if (!grad) {
      inst.fn = [axis, epsilon](const ExecContext &, In in, Out out) {
        cpu::layerNorm(*in[0], *in[1], *in[2], axis, epsilon, out[0]);
        return llvm::Error::success();
      };
      return llvm::Error::success();
    }
    RETURN_IF_ERROR(expectResult(outs, 1, ins[1]));
    RETURN_IF_ERROR(expectResult(outs, 2, ins[1]));
    inst.fn = [axis, epsilon](const ExecContext &, In in, Out out) {
      cpu::layerNormGrad(*in[0], *in[1], *in[2], axis, epsilon, out[0], out[1],
                         out[2]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "rms_norm" || name == "rms_norm_grad") {
    bool grad = name == "rms_norm_grad";
    RETURN_IF_ERROR(expectCounts(ins, outs, grad ? 3 : 2, grad ? 2 : 1));
    for (const TensorType &t : ins)
      RETURN_IF_ERROR(expectDType(t, {DType::F32}, "operand"));
    int64_t axis = attrs.integer("axis");
    double eps = attrs.floating("epsilon");
    RETURN_IF_ERROR(attrs.takeError());
    RETURN_IF_ERROR(normaliseAxis(axis, rankOf(ins[0]), "axis"));
    std::vector<int64_t> normShape(ins[0].shape.begin() + axis,
                                   ins[0].shape.end());
    // rms_norm: (x, scale); rms_norm_grad: (x, scale, dy).
    if (ins[1].shape != normShape || (grad && ins[2] != ins[0]))
      return fail("operand types " + typeStr(ins[0]) + ", " + typeStr(ins[1]) +
                  (grad ? ", " + typeStr(ins[2]) : std::string()) +
                  " do not match axis " + std::to_string(axis));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    float epsilon = static_cast<float>(eps);
    if (!grad) {
      inst.fn = [axis, epsilon](const ExecContext &, In in, Out out) {
        cpu::rmsNorm(*in[0], *in[1], axis, epsilon, out[0]);
        return llvm::Error::success();
      };
      return llvm::Error::success();
    }
    RETURN_IF_ERROR(expectResult(outs, 1, ins[1]));
    inst.fn = [axis, epsilon](const ExecContext &, In in, Out out) {
      cpu::rmsNormGrad(*in[0], *in[1], *in[2], axis, epsilon, out[0], out[1]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "attention" || name == "attention_grad")
    return resolveAttention(name, attrs, ins, outs, inst);
  if (name == "softmax") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
    int64_t axis = attrs.integer("axis");
    RETURN_IF_ERROR(attrs.takeError());
    RETURN_IF_ERROR(normaliseAxis(axis, rankOf(ins[0]), "axis"));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    inst.fn = [axis](const ExecContext &, In in, Out out) {
      cpu::softmax(*in[0], axis, out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "softmax_grad" || name == "relu_grad" || name == "gelu_grad" ||
      name == "silu_grad") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
    RETURN_IF_ERROR(expectSame(ins));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    if (name == "softmax_grad") {
      int64_t axis = attrs.integer("axis");
      RETURN_IF_ERROR(attrs.takeError());
      RETURN_IF_ERROR(normaliseAxis(axis, rankOf(ins[0]), "axis"));
      inst.fn = [axis](const ExecContext &, In in, Out out) {
        cpu::softmaxGrad(*in[0], *in[1], axis, out[0]);
        return llvm::Error::success();
      };
    } else if (name == "relu_grad") {
      inst.fn = [](const ExecContext &, In in, Out out) {
        cpu::reluGrad(*in[0], *in[1], out[0]);
        return llvm::Error::success();
      };
    } else if (name == "silu_grad") {
      inst.fn = [](const ExecContext &, In in, Out out) {
        cpu::siluGrad(*in[0], *in[1], out[0]);
        return llvm::Error::success();
      };
    } else {
      cpu::GeluApproximate approx;
      RETURN_IF_ERROR(geluApproximate(attrs, approx));
      RETURN_IF_ERROR(attrs.takeError());
      inst.fn = [approx](const ExecContext &, In in, Out out) {
        cpu::geluGrad(*in[0], *in[1], approx, out[0]);
        return llvm::Error::success();
      };
    }
    return llvm::Error::success();
  }
  if (name == "cross_entropy" || name == "cross_entropy_grad") {
    bool grad = name == "cross_entropy_grad";
    RETURN_IF_ERROR(expectCounts(ins, outs, grad ? 3 : 2, 1));
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "logits"));
    RETURN_IF_ERROR(expectDType(ins[1], {DType::I64}, "labels"));
    if (rankOf(ins[0]) != 2 || rankOf(ins[1]) != 1 ||
        ins[1].shape[0] != ins[0].shape[0])
      return fail("expects logits [N, V] and labels [N], got " +
                  typeStr(ins[0]) + " and " + typeStr(ins[1]));
    if (int comm = inst.commIndex; comm >= 0) {
      // Megatron-LM's vocab-parallel cross-entropy: logits hold columns
      // [rank · V_local, (rank + 1) · V_local); the row max is all-reduced
      // (MAX), then the sums of exponentials and target logits (SUM), in a
      // scratch tensor of N · k doubles (tsrt::vocabParallelScratchPerRow,
      // counted as workspace by the memory plan).
      if (grad) {
        RETURN_IF_ERROR(expectDType(ins[2], {DType::F32}, "grad"));
        if (numelOf(ins[2]) != 1)
          return fail("grad must have one element, got " + typeStr(ins[2]));
        RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
      } else {
        RETURN_IF_ERROR(expectResult(outs, 0, TensorType{DType::F32, {}}));
      }
      int64_t k = tessera::tsrt::vocabParallelScratchPerRow(name);
      inst.fn = [comm, grad, k](const ExecContext &ctx, In in,
                                Out out) -> llvm::Error {
        RETURN_IF_ERROR(checkComm(ctx, comm));
        const mpi::Communicator &c = ctx.comms[comm];
        const Tensor &logits = *in[0];
        int64_t n = logits.dim(0), local = logits.dim(1);
        Tensor scratch = Tensor::empty(DType::I64, {k * n}); // f64 storage
        double *rowMax = static_cast<double *>(scratch.raw());
        double *sumExp = rowMax + n, *target = grad ? nullptr : rowMax + 2 * n;
        cpu::crossEntropyRowMax(logits, rowMax);
        RETURN_IF_ERROR(
            mpi::allReduceF64(rowMax, n, mpi::ReduceOp::Max, c, ctx.traffic));
        RETURN_IF_ERROR(
            cpu::crossEntropyRowSums(logits, *in[1], c.rank() * local,
                                     c.size() * local, rowMax, sumExp, target));
        RETURN_IF_ERROR(mpi::allReduceF64(sumExp, grad ? n : 2 * n,
                                          mpi::ReduceOp::Sum, c, ctx.traffic));
        if (grad)
          cpu::crossEntropyGradFromStats(logits, *in[1], c.rank() * local,
                                         rowMax, sumExp, *in[2], out[0]);
        else
          cpu::crossEntropyFromStats(n, rowMax, sumExp, target, out[0]);
        return llvm::Error::success();
      };
      return llvm::Error::success();
    }
    if (!grad) {
      RETURN_IF_ERROR(expectResult(outs, 0, TensorType{DType::F32, {}}));
      inst.fn = [](const ExecContext &, In in, Out out) {
        return cpu::crossEntropy(*in[0], *in[1], out[0]);
      };
      return llvm::Error::success();
    }
    RETURN_IF_ERROR(expectDType(ins[2], {DType::F32}, "grad"));
    if (numelOf(ins[2]) != 1)
      return fail("grad must have one element, got " + typeStr(ins[2]));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    inst.fn = [](const ExecContext &, In in, Out out) {
      return cpu::crossEntropyGrad(*in[0], *in[1], *in[2], out[0]);
    };
    return llvm::Error::success();
  }
  if (name == "sgd_update") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "param"));
    RETURN_IF_ERROR(expectSame(ins));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    double lr = hyperParameter(options, "lr", attrs.floating("lr"));
    double wd =
        hyperParameter(options, "weight_decay", attrs.floating("weight_decay"));
    RETURN_IF_ERROR(attrs.takeError());
    inst.fn = [lr, wd](const ExecContext &, In in, Out out) {
      cpu::sgdUpdate(*in[0], *in[1], lr, wd, out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "adamw_update") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 5, 3));
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "param"));
    RETURN_IF_ERROR(expectSame(ins.take_front(4)));
    RETURN_IF_ERROR(expectDType(ins[4], {DType::F32}, "step"));
    if (numelOf(ins[4]) != 1)
      return fail("step must have one element, got " + typeStr(ins[4]));
    for (size_t i = 0; i < 3; ++i)
      RETURN_IF_ERROR(expectResult(outs, i, ins[0]));
    double lr = hyperParameter(options, "lr", attrs.floating("lr"));
    double b1 = hyperParameter(options, "beta1", attrs.floating("beta1"));
    double b2 = hyperParameter(options, "beta2", attrs.floating("beta2"));
    double eps = hyperParameter(options, "eps", attrs.floating("eps"));
    double wd =
        hyperParameter(options, "weight_decay", attrs.floating("weight_decay"));
    RETURN_IF_ERROR(attrs.takeError());
    inst.fn = [=](const ExecContext &, In in, Out out) {
      cpu::adamwUpdate(*in[0], *in[1], *in[2], *in[3], *in[4], lr, b1, b2, eps,
                       wd, out[0], out[1], out[2]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  return fail("unknown kernel");
}

/// True if an operand or result is a 16-bit float (bf16 or f16).
bool hasFloat16Bit(ArrayRef<TensorType> ins, ArrayRef<TensorType> outs) {
  auto is16 = [](const TensorType &t) { return isFloat16Bit(t.dtype); };
  return llvm::any_of(ins, is16) || llvm::any_of(outs, is16);
}

/// The 16-bit float adapter (bf16 and f16 alike): resolves the f32 kernel
/// `name` on the operand and result types with bf16/f16 widened to f32, and
/// wraps it: each bf16/f16 operand
/// is converted to a temporary f32 tensor (exact), the f32 kernel runs
/// (so every kernel accumulates in f32: matmul, reductions, layer-norm
/// statistics, softmax, cross-entropy), and each bf16/f16 result is rounded
/// from a temporary f32 tensor to nearest even (f16 overflows to inf).
/// f32/i64/i1 operands and results pass through unchanged (cross_entropy's f32
/// loss).
///
/// Memory: the temporaries are heap tensors that live only during the
/// instruction, so the extra peak over the memory plan is at most the
/// largest, over adapted instructions, of the f32 bytes of its bf16/f16
/// operands and results; a static memory plan can reserve
/// that as one per-program workspace.
llvm::Error resolveWidened(StringRef name, mlir::DictionaryAttr dict,
                           ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                           const CompileOptions &options, Instruction &inst) {
  WidenedTypes w = widenFloat16(ins, outs);
  std::vector<bool> narrowIn = w.narrowIn, narrowOut = w.narrowOut;
  Instruction inner;
  inner.commIndex = inst.commIndex; // kernels that communicate themselves
  inner.commSize = inst.commSize;
  RETURN_IF_ERROR(
      exec::resolveKernel(name, dict, w.ins, w.outs, options, inner));
  if (!inner.allocateResults)
    return fail("kernel has no bf16/f16 form");
  KernelFn fn = std::move(inner.fn);
  inst.allocateResults = true;
  inst.fn = [fn, narrowIn, narrowOut](const ExecContext &ctx, In in,
                                      Out out) -> llvm::Error {
    std::vector<Tensor> wideIn(in.size());
    std::vector<const Tensor *> inPtrs(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      inPtrs[i] = in[i];
      if (!narrowIn[i])
        continue;
      wideIn[i] = Tensor::empty(DType::F32, in[i]->shape());
      cpu::convert(*in[i], wideIn[i]);
      inPtrs[i] = &wideIn[i];
    }
    std::vector<Tensor> wideOut(out.size());
    for (size_t i = 0; i < out.size(); ++i)
      wideOut[i] =
          narrowOut[i] ? Tensor::empty(DType::F32, out[i].shape()) : out[i];
    RETURN_IF_ERROR(fn(ctx, inPtrs, wideOut));
    for (size_t i = 0; i < out.size(); ++i)
      if (narrowOut[i])
        cpu::convert(wideOut[i], out[i]);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

} // namespace

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

llvm::Error exec::resolveKernel(StringRef name, mlir::DictionaryAttr dict,
                                ArrayRef<TensorType> ins,
                                ArrayRef<TensorType> outs,
                                const CompileOptions &options,
                                Instruction &inst) {
  inst.allocateResults = true;
  if (hasFloat16Bit(ins, outs) && !tessera::tsrt::isDataMovementKernel(name))
    return resolveWidened(name, dict, ins, outs, options, inst);
  AttrReader attrs(dict);

  if (std::optional<BinaryFn> fn = binaryKernel(name)) {
    RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
    if (name == "pow")
      RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
    else
      RETURN_IF_ERROR(expectDType(ins[0], {DType::F32, DType::I64}, "operand"));
    RETURN_IF_ERROR(expectSame(ins));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    BinaryFn f = *fn;
    inst.fn = [f](const ExecContext &, In in, Out out) {
      f(*in[0], *in[1], out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (std::optional<UnaryFn> fn = unaryKernel(name)) {
    RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
    if (name == "neg")
      RETURN_IF_ERROR(expectDType(ins[0], {DType::F32, DType::I64}, "operand"));
    else
      RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    UnaryFn f = *fn;
    inst.fn = [f](const ExecContext &, In in, Out out) {
      f(*in[0], out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "gelu") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
    RETURN_IF_ERROR(expectDType(ins[0], {DType::F32}, "operand"));
    RETURN_IF_ERROR(expectResult(outs, 0, ins[0]));
    cpu::GeluApproximate approx;
    RETURN_IF_ERROR(geluApproximate(attrs, approx));
    RETURN_IF_ERROR(attrs.takeError());
    inst.fn = [approx](const ExecContext &, In in, Out out) {
      cpu::gelu(*in[0], approx, out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "equal") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 2, 1));
    RETURN_IF_ERROR(expectSame(ins));
    RETURN_IF_ERROR(expectResult(outs, 0, TensorType{DType::I1, ins[0].shape}));
    inst.fn = [](const ExecContext &, In in, Out out) {
      cpu::equal(*in[0], *in[1], out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "select") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 3, 1));
    RETURN_IF_ERROR(expectDType(ins[0], {DType::I1}, "condition"));
    RETURN_IF_ERROR(expectSame(ins.drop_front()));
    if (ins[0].shape != ins[1].shape)
      return fail("condition " + typeStr(ins[0]) + " and values " +
                  typeStr(ins[1]) + " differ in shape");
    RETURN_IF_ERROR(expectResult(outs, 0, ins[1]));
    inst.fn = [](const ExecContext &, In in, Out out) {
      cpu::select(*in[0], *in[1], *in[2], out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "convert") {
    RETURN_IF_ERROR(expectCounts(ins, outs, 1, 1));
    if (outs[0].shape != ins[0].shape)
      return fail("cannot convert " + typeStr(ins[0]) + " to " +
                  typeStr(outs[0]));
    inst.fn = [](const ExecContext &, In in, Out out) {
      cpu::convert(*in[0], out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "reduce_sum" || name == "reduce_mean" || name == "reduce_max")
    return resolveReduce(name, attrs, ins, outs, inst);
  if (name == "matmul")
    return resolveMatmul(attrs, ins, outs, inst);
  if (name == "reshape" || name == "transpose" || name == "slice" ||
      name == "concat" || name == "broadcast")
    return resolveShapeOp(name, attrs, ins, outs, inst);
  return resolveNN(name, attrs, ins, outs, options, inst);
}

llvm::Error exec::resolveCollective(CollectiveOp op, int commIndex, int64_t n,
                                    int64_t dim, int64_t dim2, bool max,
                                    const TensorType &operand,
                                    const TensorType &result,
                                    Instruction &inst) {
  TensorType ins[] = {operand}, outs[] = {result};
  inst.allocateResults = true;
  int64_t rank = rankOf(operand);
  // reduce_scatter and all_slice: the result is the operand's block of
  // dimension `dim` split over the n ranks.
  auto expectOneBlockPerRank = [&]() -> llvm::Error {
    RETURN_IF_ERROR(normaliseAxis(dim, rank, "dim"));
    if (operand.shape[dim] % n != 0)
      return fail(llvm::formatv("dimension {0} of {1} is not divisible by {2} "
                                "ranks",
                                dim, typeStr(operand), n));
    TensorType expected = operand;
    expected.shape[dim] /= n;
    return expectResult(outs, 0, expected);
  };
  switch (op) {
  case CollectiveOp::AllReduce: {
    RETURN_IF_ERROR(expectDType(
        operand, {DType::F32, DType::BF16, DType::F16, DType::I64}, "operand"));
    RETURN_IF_ERROR(expectResult(outs, 0, operand));
    mpi::ReduceOp rop = max ? mpi::ReduceOp::Max : mpi::ReduceOp::Sum;
    inst.fn = [commIndex, rop](const ExecContext &ctx, In in, Out out) {
      std::memcpy(out[0].raw(), in[0]->raw(), in[0]->bytes());
      return mpi::allReduce(out[0], rop, ctx.comms[commIndex], ctx.traffic);
    };
    return llvm::Error::success();
  }
  case CollectiveOp::AllGather: {
    RETURN_IF_ERROR(normaliseAxis(dim, rank, "dim"));
    TensorType expected = operand;
    expected.shape[dim] *= n;
    RETURN_IF_ERROR(expectResult(outs, 0, expected));
    inst.fn = [commIndex, dim](const ExecContext &ctx, In in, Out out) {
      return mpi::allGather(*in[0], dim, ctx.comms[commIndex], out[0],
                            ctx.traffic);
    };
    return llvm::Error::success();
  }
  case CollectiveOp::ReduceScatter: {
    RETURN_IF_ERROR(expectDType(
        operand, {DType::F32, DType::BF16, DType::F16, DType::I64}, "operand"));
    RETURN_IF_ERROR(expectOneBlockPerRank());
    inst.fn = [commIndex, dim](const ExecContext &ctx, In in, Out out) {
      return mpi::reduceScatter(*in[0], dim, ctx.comms[commIndex], out[0],
                                ctx.traffic);
    };
    return llvm::Error::success();
  }
  case CollectiveOp::AllSlice: {
    RETURN_IF_ERROR(expectOneBlockPerRank());
    inst.fn = [commIndex, dim](const ExecContext &ctx, In in, Out out) {
      const Tensor &src = *in[0];
      const std::vector<int64_t> &shape = src.shape();
      int64_t outer = 1, inner = src.numel() ? src.bytes() / src.numel() : 0;
      for (int64_t d = 0; d < dim; ++d)
        outer *= shape[d];
      for (size_t d = dim + 1; d < shape.size(); ++d)
        inner *= shape[d];
      int64_t block = out[0].shape()[dim] * inner;
      int64_t offset = ctx.comms[commIndex].rank() * block;
      const char *from = static_cast<const char *>(src.raw());
      char *to = static_cast<char *>(out[0].raw());
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(to + o * block, from + o * shape[dim] * inner + offset,
                    block);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  case CollectiveOp::AllToAll: {
    RETURN_IF_ERROR(normaliseAxis(dim, rank, "split_dim"));
    RETURN_IF_ERROR(normaliseAxis(dim2, rank, "concat_dim"));
    if (operand.shape[dim] % n != 0)
      return fail(llvm::formatv("dimension {0} of {1} is not divisible by {2} "
                                "ranks",
                                dim, typeStr(operand), n));
    TensorType expected = operand;
    expected.shape[dim] /= n;
    expected.shape[dim2] *= n;
    RETURN_IF_ERROR(expectResult(outs, 0, expected));
    inst.fn = [commIndex, dim, dim2](const ExecContext &ctx, In in, Out out) {
      return mpi::allToAll(*in[0], dim, dim2, ctx.comms[commIndex], out[0],
                           ctx.traffic);
    };
    return llvm::Error::success();
  }
  }
  (void)ins;
  return fail("unknown collective");
}

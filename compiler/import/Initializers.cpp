//===- Initializers.cpp - which ONNX initializers are parameters ----------===//

#include "compiler/import/Initializers.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <deque>

namespace tessera::import {
namespace {

/// Element `k` of `v` as a double.
double elementAt(const InitView &v, int64_t k) {
  const char *p = v.data.data();
  switch (v.dtype) {
  case kFloat: {
    float f;
    std::memcpy(&f, p + 4 * k, 4);
    return f;
  }
  case kDouble: {
    double d;
    std::memcpy(&d, p + 8 * k, 8);
    return d;
  }
  case kFloat16:
  case kBFloat16: {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * k, 2);
    llvm::APFloat f(v.dtype == kBFloat16 ? llvm::APFloat::BFloat()
                                         : llvm::APFloat::IEEEhalf(),
                    llvm::APInt(16, bits));
    bool lost = false;
    f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    return f.convertToDouble();
  }
  default:
    return 0;
  }
}

int64_t elementsOf(const InitView &v) { return numElements(v.dims); }

/// Bitwise-equal elements (so that -0 and 0, or two NaNs, are told apart
/// the way the exporters' de-duplication compares bytes).
bool sameBytes(const InitView &v, int64_t a, int64_t b) {
  int64_t w = v.dtype == kDouble ? 8 : v.dtype == kFloat ? 4 : 2;
  return std::memcmp(v.data.data() + a * w, v.data.data() + b * w, w) == 0;
}

bool isSplat(const InitView &v) {
  int64_t n = elementsOf(v);
  for (int64_t k = 1; k < n; ++k)
    if (!sameBytes(v, 0, k))
      return false;
  return true;
}

int nonUnitDims(llvm::ArrayRef<int64_t> dims) {
  return llvm::count_if(dims, [](int64_t d) { return d > 1; });
}

/// Whether `v` repeats along dim `d`: every slice along d equals slice 0.
bool repeatsAlong(const InitView &v, int64_t d) {
  Shape strides = stridesOf(v.dims);
  int64_t n = elementsOf(v);
  for (int64_t e = 0; e < n; ++e) {
    int64_t i = (e / strides[d]) % v.dims[d];
    if (i != 0 && !sameBytes(v, e, e - i * strides[d]))
      return false;
  }
  return true;
}

/// `t` ([a, b]) is the transpose of `e` ([b, a]), element for element.
bool isTransposeOf(const InitView &t, const InitView &e) {
  if (t.dims.size() != 2 || e.dims.size() != 2 || t.dtype != e.dtype ||
      t.dims[0] != e.dims[1] || t.dims[1] != e.dims[0])
    return false;
  int64_t rows = t.dims[0], cols = t.dims[1];
  int64_t w = t.dtype == kDouble ? 8 : t.dtype == kFloat ? 4 : 2;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (std::memcmp(t.data.data() + (i * cols + j) * w,
                      e.data.data() + (j * rows + i) * w, w) != 0)
        return false;
  return true;
}

std::string nodeLabel(const onnx::NodeProto &n) {
  if (!n.name().empty())
    return n.name();
  return n.output_size() ? "<output " + n.output(0) + ">" : "<unnamed>";
}

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

/// Ops through which a parameter is still the parameter (a view or a
/// re-layout of it), when it is their operand `slot`.
bool isLayoutOp(llvm::StringRef op, int slot) {
  return slot == 0 && llvm::StringSwitch<bool>(op)
                          .Cases("Identity", "Cast", "Reshape", "Flatten", true)
                          .Cases("Squeeze", "Unsqueeze", "Transpose", true)
                          .Cases("Expand", "Slice", "Split", true)
                          .Default(false);
}

bool isElementwiseArith(llvm::StringRef op) {
  return op == "Add" || op == "Sub" || op == "Mul" || op == "Div" ||
         op == "Pow";
}

/// The graph facts the rules need.
struct GraphFacts {
  const onnx::GraphProto &g;
  /// value -> (node index, input slot) of every reader.
  llvm::StringMap<std::vector<std::pair<int, int>>> consumers;
  /// values that depend on a data input.
  llvm::StringSet<> dependent;
  /// values known to hold at most one element (scalar Constant nodes and
  /// initializers).
  llvm::StringSet<> scalars;

  GraphFacts(const onnx::GraphProto &g, const llvm::StringSet<> &dataInputs)
      : g(g) {
    for (const auto &t : g.initializer()) {
      int64_t n = 1;
      for (int64_t d : t.dims())
        n *= d < 0 ? 0 : d;
      if (n <= 1)
        scalars.insert(t.name());
    }
    for (const auto &in : dataInputs)
      dependent.insert(in.getKey());
    for (int i = 0; i < g.node_size(); ++i) {
      const onnx::NodeProto &n = g.node(i);
      bool dep = false;
      for (int k = 0; k < n.input_size(); ++k) {
        if (n.input(k).empty())
          continue;
        consumers[n.input(k)].push_back({i, k});
        dep |= dependent.contains(n.input(k));
      }
      for (const auto &out : n.output())
        if (dep && !out.empty())
          dependent.insert(out);
      if (n.op_type() == "Constant" && n.output_size() == 1) {
        bool scalar = false;
        for (const auto &a : n.attribute()) {
          if (a.name() == "value_float" || a.name() == "value_int")
            scalar = true;
          else if (a.name() == "value") {
            // At most one element (no dim > 1, or a 0 dim); no product,
            // which overflowed on huge dims (fuzzer finding).
            bool empty = false, single = true;
            for (int64_t d : a.t().dims()) {
              empty |= d <= 0;
              single &= d == 1;
            }
            scalar = empty || single;
          }
        }
        if (scalar)
          scalars.insert(n.output(0));
      }
    }
  }

  /// Whether every operand of node `i` but `slot` is a scalar constant.
  bool othersScalar(int i, int slot) const {
    const onnx::NodeProto &n = g.node(i);
    for (int k = 0; k < n.input_size(); ++k)
      if (k != slot && !n.input(k).empty() && !scalars.contains(n.input(k)))
        return false;
    return true;
  }

  bool meetsInputs(int i, int slot) const {
    const onnx::NodeProto &n = g.node(i);
    for (int k = 0; k < n.input_size(); ++k)
      if (k != slot && dependent.contains(n.input(k)))
        return true;
    return false;
  }
};

/// One place where a value's data is used (after layout ops).
struct Use {
  int node;
  int slot;
  bool meetsInputs; ///< combined with input-dependent data (or structural)
};

/// Follows `name` through layout ops and scalar arithmetic to its uses
/// (not into `skip`: Identity nodes that define alias parameters).
std::vector<Use> usesOf(const GraphFacts &f, const std::string &name,
                        const llvm::DenseSet<int> &skip) {
  std::vector<Use> uses;
  std::deque<std::string> work{name};
  llvm::StringSet<> seen{name};
  while (!work.empty()) {
    std::string v = work.front();
    work.pop_front();
    auto it = f.consumers.find(v);
    if (it == f.consumers.end())
      continue;
    for (auto [i, slot] : it->second) {
      if (skip.contains(i))
        continue;
      const onnx::NodeProto &n = f.g.node(i);
      llvm::StringRef op = n.op_type();
      bool passThrough = isLayoutOp(op, slot) ||
                         (isElementwiseArith(op) && f.othersScalar(i, slot));
      if (passThrough) {
        for (const auto &out : n.output())
          if (!out.empty() && seen.insert(out).second)
            work.push_back(out);
        continue;
      }
      bool structural = (op == "Gather" && slot == 0) ||
                        (op == "LayerNormalization" && slot > 0);
      uses.push_back({i, slot, structural || f.meetsInputs(i, slot)});
    }
  }
  return uses;
}

std::string useReason(const GraphFacts &f, const Use &u) {
  const onnx::NodeProto &n = f.g.node(u.node);
  llvm::StringRef op = n.op_type();
  std::string where = " '" + nodeLabel(n) + "'";
  if (op == "MatMul" || op == "Gemm")
    return "weight of " + op.str() + where;
  if (op == "Gather")
    return "embedding table of Gather" + where;
  if (op == "LayerNormalization")
    return std::string(u.slot == 1 ? "scale" : "bias") +
           " of LayerNormalization" + where;
  return "operand of " + op.str() + where + " with the model's activations";
}

/// What rules 3-7 make of one candidate.
struct Verdict {
  bool trained = false;
  std::string reason;
  llvm::SmallVector<int64_t> repeatDims;
  std::vector<Use> uses;
};

Verdict classify(const GraphFacts &f, const std::string &name,
                 const InitView &v, const llvm::DenseSet<int> &aliasNodes) {
  Verdict out;
  if (elementsOf(v) <= 1) {
    out.reason = "scalar (an exporter-folded constant such as eps or a "
                 "scale)";
    return out;
  }
  out.uses = usesOf(f, name, aliasNodes);
  std::vector<Use> data;
  for (const Use &u : out.uses)
    if (u.meetsInputs)
      data.push_back(u);
  if (data.empty()) {
    out.reason = "never meets the model's inputs except through computation "
                 "that does not depend on them (a buffer such as rotary "
                 "inv_freq): folded at import";
    return out;
  }
  auto allOps = [&](std::initializer_list<llvm::StringRef> ops) {
    return llvm::all_of(data, [&](const Use &u) {
      return llvm::is_contained(ops, f.g.node(u.node).op_type());
    });
  };
  bool table = nonUnitDims(v.dims) >= 2;
  if (table && v.hasData && allOps({"Add", "Sub"})) {
    bool mask = true;
    int64_t n = elementsOf(v);
    for (int64_t k = 0; k < n && mask; ++k) {
      double x = elementAt(v, k);
      mask = x == 0 || x <= -1e4;
    }
    if (mask) {
      out.reason = "attention mask: added to the activations, every value 0 "
                   "or <= -1e4";
      return out;
    }
  }
  if (table && allOps({"Mul", "Div"})) {
    out.reason = "position table: multiplies the activations and varies "
                 "along two or more dims (e.g. rotary cos/sin)";
    return out;
  }
  out.trained = true;
  out.reason = useReason(f, data.front());
  if (v.hasData && v.dims.size() >= 2 && !isSplat(v) &&
      allOps({"Add", "Sub", "Mul", "Div"})) {
    for (int64_t d = 0; d + 1 < static_cast<int64_t>(v.dims.size()); ++d)
      if (v.dims[d] > 1 && repeatsAlong(v, d))
        out.repeatDims.push_back(d);
  }
  return out;
}

} // namespace

InitializerPlan classifyInitializers(const onnx::GraphProto &graph,
                                     llvm::ArrayRef<InitView> inits,
                                     const llvm::StringSet<> &dataInputs) {
  GraphFacts f(graph, dataInputs);
  InitializerPlan plan;
  llvm::StringMap<const InitView *> byName;
  for (const InitView &v : inits)
    byName[v.name] = &v;

  // Rule 1: aliases (Identity of an initializer).
  struct Candidate {
    std::string name;
    const InitView *view;
    std::string prefix; ///< reason prefix for aliases
  };
  std::vector<Candidate> candidates;
  for (const InitView &v : inits)
    candidates.push_back({v.name, &v, ""});
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto &n = graph.node(i);
    if (n.op_type() != "Identity" || n.input_size() != 1 ||
        n.output_size() != 1 || n.output(0).empty())
      continue;
    auto it = byName.find(n.input(0));
    if (it == byName.end())
      continue;
    plan.aliasNodes.insert(i);
    candidates.push_back({n.output(0), it->second,
                          "its own parameter, initialised from '" + n.input(0) +
                              "' (torch.onnx de-duplicated equal "
                              "initializers into Identity); "});
  }

  // Rule 2: transposed copies (checked against the verdicts below).
  llvm::StringMap<std::string> tieTo;
  for (size_t t = 0; t < inits.size(); ++t) {
    const InitView &tv = inits[t];
    if (!tv.hasData || tv.dims.size() != 2 || isSplat(tv))
      continue;
    for (size_t e = 0; e < t; ++e)
      if (inits[e].hasData && isTransposeOf(tv, inits[e])) {
        tieTo[tv.name] = inits[e].name;
        break;
      }
  }

  // Rules 3-7.
  std::vector<Verdict> verdicts;
  llvm::StringMap<size_t> index;
  for (const Candidate &c : candidates) {
    index[c.name] = verdicts.size();
    verdicts.push_back(classify(f, c.name, *c.view, plan.aliasNodes));
  }
  for (size_t k = 0; k < candidates.size(); ++k) {
    const Candidate &c = candidates[k];
    Verdict &v = verdicts[k];
    if (auto it = tieTo.find(c.name);
        it != tieTo.end() && verdicts[index[it->second]].trained) {
      plan.transposedTies[c.name] = it->second;
      continue;
    }
    if (!v.trained) {
      plan.constants[c.name] = c.prefix + v.reason;
      continue;
    }
    ParamPlan p;
    p.name = c.name;
    p.source = c.view->name;
    p.shape = c.view->dims;
    p.repeatDims = v.repeatDims;
    p.reason = c.prefix + v.reason;
    if (!p.repeatDims.empty()) {
      Shape slice = p.shape;
      for (int64_t d : p.repeatDims)
        slice[d] = 1;
      p.reason += "; repeats along dims " + shapeStr(p.repeatDims) +
                  ": trained as one " + shapeStr(slice) + " slice, broadcast";
      p.shape = slice;
    }
    // Rule 8: untie a constant-valued parameter read by several nodes.
    llvm::SmallVector<int> readers;
    if (auto it = f.consumers.find(c.name); it != f.consumers.end())
      for (auto [node, slot] : it->second)
        if (!plan.aliasNodes.contains(node) &&
            !llvm::is_contained(readers, node))
          readers.push_back(node);
    if (c.view->hasData && readers.size() > 1 && isSplat(*c.view)) {
      for (size_t r = 0; r < readers.size(); ++r) {
        ParamPlan copy = p;
        if (r > 0)
          copy.name = c.name + "#" + std::to_string(r);
        std::string why = p.reason;
        for (const Use &u : v.uses)
          if (u.node == readers[r] && u.meetsInputs)
            why = useReason(f, u);
        copy.reason = "untied copy " + std::to_string(r) + " of '" + c.name +
                      "' for node '" + nodeLabel(graph.node(readers[r])) +
                      "' (equal initial values, which exporters merge into "
                      "one initializer); " +
                      why;
        if (r > 0)
          for (auto [node, slot] : f.consumers.find(c.name)->second)
            if (node == readers[r])
              plan.renamedInputs[{node, slot}] = copy.name;
        plan.params.push_back(std::move(copy));
      }
      continue;
    }
    plan.params.push_back(std::move(p));
  }
  return plan;
}

} // namespace tessera::import

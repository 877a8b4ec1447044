//===- Plan.cpp - loading a plan.tsr artifact -----------------------------===//

#include "runtime/executor/Plan.h"

#include "runtime/executor/Backend.h"

#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <set>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
namespace json = llvm::json;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const char *exec::roleName(Role role) {
  switch (role) {
  case Role::Param:
    return "param";
  case Role::Frozen:
    return "frozen";
  case Role::OptState:
    return "opt_state";
  case Role::Hyper:
    return "hyper";
  case Role::Tokens:
    return "tokens";
  case Role::Labels:
    return "labels";
  case Role::Loss:
    return "loss";
  case Role::GradNorm:
    return "grad_norm";
  }
  return "?";
}

static std::optional<Role> parseRole(llvm::StringRef s) {
  for (Role r : {Role::Param, Role::Frozen, Role::OptState, Role::Hyper,
                 Role::Tokens, Role::Labels, Role::Loss, Role::GradNorm})
    if (s == roleName(r))
      return r;
  return std::nullopt;
}

static std::optional<DType> parseDType(llvm::StringRef s) {
  for (DType d : {DType::F32, DType::I64, DType::I1})
    if (s == dtypeName(d))
      return d;
  return std::nullopt;
}

/// Reads an array of integers; nullopt if `v` is not one.
static std::optional<std::vector<int64_t>> intList(const json::Value *v) {
  const json::Array *a = v ? v->getAsArray() : nullptr;
  if (!a)
    return std::nullopt;
  std::vector<int64_t> out;
  for (const json::Value &e : *a) {
    std::optional<int64_t> i = e.getAsInteger();
    if (!i)
      return std::nullopt;
    out.push_back(*i);
  }
  return out;
}

std::vector<std::string> Manifest::rankAxes() const {
  std::vector<std::string> axes = gridAxes;
  if (isPipeline())
    axes.erase(axes.begin() + mbAxis);
  return axes;
}

std::vector<int64_t> Manifest::rankShape() const {
  std::vector<int64_t> shape = gridShape;
  if (isPipeline())
    shape.erase(shape.begin() + mbAxis);
  return shape;
}

int64_t Manifest::predictedPeakBytesOfRank(int64_t rank) const {
  if (predictedPeakBytesPerStage.empty() || ppAxis < 0)
    return predictedPeakBytes;
  // World ranks are row-major over the rank axes in rankOrder.
  std::vector<std::string> axes = rankAxes();
  std::vector<int64_t> shape = rankShape();
  std::vector<int64_t> order = rankOrderIndices();
  std::string pp = gridAxes[ppAxis];
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    int64_t size = shape[*it];
    if (axes[*it] == pp) {
      int64_t stage = rank % size;
      return stage < int64_t(predictedPeakBytesPerStage.size())
                 ? predictedPeakBytesPerStage[stage]
                 : predictedPeakBytes;
    }
    rank /= size;
  }
  return predictedPeakBytes;
}

std::vector<int64_t> Manifest::rankOrderIndices() const {
  std::vector<std::string> axes = rankAxes();
  std::vector<int64_t> order;
  for (const std::string &name : rankOrder)
    order.push_back(llvm::find(axes, name) - axes.begin());
  return order;
}

int64_t Manifest::numRanks() const {
  int64_t n = 1;
  for (int64_t s : rankShape())
    n *= s;
  return n;
}

std::string Manifest::gridDescription() const {
  std::vector<std::string> axes = rankAxes();
  std::vector<int64_t> shape = rankShape();
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i)
    s += (i ? " x " : "") + axes[i] + "=" + std::to_string(shape[i]);
  return s;
}

int64_t Manifest::findArgument(llvm::StringRef name, Role role) const {
  for (const ArgumentSpec &a : arguments)
    if (a.role == role && a.name == name)
      return a.index;
  return -1;
}

/// The largest dimension and element count a manifest shape may have (2^40
/// elements: far above any one tensor a rank holds, far below int64 overflow
/// in byte counts).
static constexpr int64_t kMaxElements = int64_t(1) << 40;

/// Checks the manifest's plan fields (those of planner::Plan::toJSON) and
/// rejects unknown top-level fields: a manifest is only ever written by
/// tessera-partition, so an unknown field is a corrupt or hand-edited file,
/// and ignoring it would run something else than what it says. Returns the
/// error text ("" when fine), naming the field.
static std::string checkManifestSchema(const json::Object &root) {
  static const char *const known[] = {"format",         "version",
                                      "grid",           "program",
                                      "function",       "global_batch",
                                      "seq_len",        "vocab_size",
                                      "optimizer",      "precision",
                                      "recompute",      "fusion",
                                      "bucket_mb",      "clip_grad",
                                      "loss_scale",     "dynamic_loss_scale",
                                      "vocab_parallel", "sequence_parallel",
                                      "zero",           "pipeline",
                                      "shardings",      "memory",
                                      "eval",           "arguments",
                                      "results"};
  for (const auto &kv : root)
    if (!llvm::is_contained(known, kv.first.str()))
      return "unknown field \"" + kv.first.str() + "\"";
  auto finite = [](std::optional<double> v) { return v && std::isfinite(*v); };
  auto str = [](const json::Value *v) {
    return v ? v->getAsString() : std::nullopt;
  };
  auto oneOf =
      [&](llvm::StringRef key,
          std::initializer_list<llvm::StringRef> allowed) -> std::string {
    const json::Value *v = root.get(key);
    if (!v)
      return "";
    std::optional<llvm::StringRef> s = str(v);
    std::string list;
    for (llvm::StringRef a : allowed)
      list += (list.empty() ? "" : ", ") + a.str();
    if (!s || !llvm::is_contained(allowed, *s)) {
      std::string got;
      llvm::raw_string_ostream os(got);
      os << *v;
      return "field \"" + key.str() + "\" must be one of " + list + ", got " +
             got;
    }
    return "";
  };
  if (std::string e = oneOf("precision", {"fp32", "bf16", "fp16"}); !e.empty())
    return e;
  if (std::string e = oneOf("recompute", {"none", "selective", "full"});
      !e.empty())
    return e;
  if (root.get("fusion") && !root.getString("fusion"))
    return "field \"fusion\" must be a string";

  // The optimizer.
  const json::Object *opt = root.getObject("optimizer");
  if (!opt)
    return "field \"optimizer\" must be an object";
  std::optional<llvm::StringRef> name = opt->getString("name");
  if (!name || (*name != "sgd" && *name != "adamw"))
    return "field \"optimizer\".\"name\" must be \"sgd\" or \"adamw\"";
  for (const auto &kv : *opt) {
    llvm::StringRef key = kv.first;
    std::string field = "field \"optimizer\".\"" + key.str() + "\"";
    std::optional<double> v = kv.second.getAsNumber();
    if (key == "name")
      continue;
    if (key == "weight_decay_exclude") {
      if (!kv.second.getAsBoolean())
        return field + " must be a boolean";
    } else if (key == "lr" || key == "weight_decay") {
      if (!finite(v) || *v < 0)
        return field + " must be a finite number >= 0";
    } else if (*name == "adamw" && (key == "beta1" || key == "beta2")) {
      if (!finite(v) || *v < 0 || *v >= 1)
        return field + " must be a number in [0, 1)";
    } else if (*name == "adamw" && key == "eps") {
      if (!finite(v) || *v <= 0)
        return field + " must be a finite number > 0";
    } else {
      return "unknown field \"optimizer\".\"" + key.str() + "\" for \"" +
             name->str() + "\"";
    }
  }

  // Scalars of the plan.
  auto positive = [&](llvm::StringRef key, bool allowZero) -> std::string {
    const json::Value *v = root.get(key);
    if (!v)
      return "";
    std::optional<double> d = v->getAsNumber();
    if (!finite(d) || *d < 0 || (!allowZero && *d == 0))
      return "field \"" + key.str() + "\" must be a finite number " +
             (allowZero ? ">= 0" : "> 0");
    return "";
  };
  for (auto [key, zero] : {std::pair<const char *, bool>{"bucket_mb", true},
                           {"clip_grad", false},
                           {"loss_scale", false}})
    if (std::string e = positive(key, zero); !e.empty())
      return e;
  if (const json::Value *v = root.get("dynamic_loss_scale")) {
    const json::Object *o = v->getAsObject();
    std::optional<double> initial = o ? o->getNumber("initial") : std::nullopt;
    std::optional<int64_t> window = o ? o->getInteger("window") : std::nullopt;
    std::optional<double> min = o ? o->getNumber("min") : std::nullopt;
    if (!finite(initial) || *initial <= 0 || !window || *window < 1 ||
        !finite(min) || *min <= 0)
      return "field \"dynamic_loss_scale\" must be {\"initial\": > 0, "
             "\"window\": integer >= 1, \"min\": > 0}";
  }
  if (const json::Value *v = root.get("vocab_parallel")) {
    const json::Object *o = v->getAsObject();
    if (!o || !o->getBoolean("enabled"))
      return "field \"vocab_parallel\" must be an object with a boolean "
             "\"enabled\"";
  }
  if (const json::Value *v = root.get("sequence_parallel")) {
    const json::Object *o = v->getAsObject();
    std::optional<llvm::StringRef> kind =
        o ? o->getString("kind") : std::nullopt;
    std::optional<int64_t> size = o ? o->getInteger("size") : std::nullopt;
    if (!kind ||
        (*kind != "megatron" && *kind != "ulysses" && *kind != "ring") ||
        !size || *size < 1)
      return "field \"sequence_parallel\" must be {\"kind\": megatron, "
             "ulysses or ring, \"size\": integer >= 1}";
  }
  if (const json::Value *v = root.get("zero")) {
    const json::Object *o = v->getAsObject();
    std::optional<int64_t> stage = o ? o->getInteger("stage") : std::nullopt;
    if (!stage || *stage < 0 || *stage > 3)
      return "field \"zero\" must be an object with \"stage\" 0, 1, 2 or 3";
  }
  if (const json::Value *v = root.get("shardings")) {
    const json::Object *o = v->getAsObject();
    if (!o)
      return "field \"shardings\" must be an object of layout strings";
    for (const auto &kv : *o)
      if (!kv.second.getAsString())
        return "field \"shardings\".\"" + kv.first.str() +
               "\" must be a layout string";
  }
  for (const char *key : {"program", "function"})
    if (root.get(key) && (!root.getString(key) || root.getString(key)->empty()))
      return "field \"" + std::string(key) + "\" must be a non-empty string";
  return "";
}

llvm::Expected<Manifest> Manifest::parse(llvm::StringRef text,
                                         llvm::StringRef source) {
  auto err = [&](const llvm::Twine &msg) {
    return fail(source + ": manifest: " + msg);
  };
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return err("invalid JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return err("expected a JSON object");
  if (root->getString("format") !=
      std::optional<llvm::StringRef>("tessera-plan"))
    return err("\"format\" is not \"tessera-plan\"");
  if (root->getInteger("version") != std::optional<int64_t>(1))
    return err("unsupported \"version\" (this runtime reads version 1)");
  if (std::string e = checkManifestSchema(*root); !e.empty())
    return err(e);

  Manifest m;
  const json::Object *grid = root->getObject("grid");
  if (grid)
    for (const auto &kv : *grid)
      if (!llvm::is_contained({"axes", "shape", "rank_order", "ranks_per_node"},
                              kv.first.str()))
        return err("unknown field \"grid\".\"" + kv.first.str() + "\"");
  const json::Array *axes = grid ? grid->getArray("axes") : nullptr;
  auto shape = intList(grid ? grid->get("shape") : nullptr);
  if (!axes || !shape || axes->size() != shape->size() || shape->empty())
    return err("\"grid\" needs \"axes\" (names) and \"shape\" (sizes) of the "
               "same non-zero length");
  for (const json::Value &a : *axes) {
    std::optional<llvm::StringRef> s = a.getAsString();
    if (!s || s->empty())
      return err("grid axis names must be non-empty strings");
    m.gridAxes.push_back(s->str());
  }
  int64_t gridSize = 1;
  for (int64_t s : *shape) {
    if (s < 1 || s > (int64_t(1) << 20))
      return err("field \"grid\".\"shape\": sizes must be in [1, 2^20]");
    gridSize *= s;
    if (gridSize > (int64_t(1) << 20))
      return err("field \"grid\".\"shape\": more than 2^20 grid points");
  }
  m.gridShape = *shape;
  if (const json::Value *pipeline = root->get("pipeline")) {
    const json::Object *p = pipeline->getAsObject();
    std::optional<int64_t> pp = p ? p->getInteger("pp_axis") : std::nullopt;
    std::optional<int64_t> mb = p ? p->getInteger("mb_axis") : std::nullopt;
    int64_t last = static_cast<int64_t>(m.gridShape.size()) - 1;
    if (!pp || !mb)
      return err("\"pipeline\" must be an object with integer \"pp_axis\" "
                 "and \"mb_axis\" (grid axis indices)");
    if (*mb != last)
      return err(llvm::formatv("\"pipeline\": \"mb_axis\" ({0}) must be the "
                               "last grid axis ({1}): the micro-batch axis is "
                               "virtual, not a rank axis",
                               *mb, last));
    if (*pp < 0 || *pp >= last)
      return err(llvm::formatv("\"pipeline\": \"pp_axis\" ({0}) must be a "
                               "grid axis before \"mb_axis\" ({1})",
                               *pp, *mb));
    m.ppAxis = *pp;
    m.mbAxis = *mb;
  }
  // The rank order: every rank axis once, slowest first.
  std::vector<std::string> rankAxes = m.rankAxes();
  if (const json::Value *order = grid->get("rank_order")) {
    const json::Array *names = order->getAsArray();
    std::set<std::string> seen;
    bool ok = names && names->size() == rankAxes.size();
    for (size_t i = 0; ok && i < names->size(); ++i) {
      std::optional<llvm::StringRef> name = (*names)[i].getAsString();
      ok = name && llvm::is_contained(rankAxes, *name) &&
           seen.insert(name->str()).second;
      if (ok)
        m.rankOrder.push_back(name->str());
    }
    if (!ok) {
      std::string expected;
      for (const std::string &a : rankAxes)
        expected += (expected.empty() ? "" : ", ") + a;
      std::string got;
      llvm::raw_string_ostream os(got);
      os << *order;
      return err("\"grid\": \"rank_order\" must list every rank axis (" +
                 expected + ") exactly once, slowest first; got " + got);
    }
  } else {
    m.rankOrder = rankAxes;
  }
  // The node mapping the plan promises (compiled with --cluster).
  if (const json::Value *perNode = grid->get("ranks_per_node")) {
    std::optional<int64_t> v = perNode->getAsInteger();
    if (!v || *v < 0 || *v > (int64_t(1) << 20))
      return err("field \"grid\".\"ranks_per_node\" must be an integer in "
                 "[0, 2^20]");
    m.ranksPerNode = *v;
  }
  if (auto p = root->getString("program"))
    m.program = p->str();
  if (auto f = root->getString("function"))
    m.function = f->str();
  m.globalBatch = root->getInteger("global_batch").value_or(0);
  m.seqLen = root->getInteger("seq_len").value_or(0);
  if (m.globalBatch < 1 || m.seqLen < 1 || m.globalBatch > kMaxElements ||
      m.seqLen > kMaxElements || m.globalBatch > kMaxElements / m.seqLen)
    return err("\"global_batch\" and \"seq_len\" must be positive integers "
               "(at most 2^40 tokens)");
  if (const llvm::json::Value *vocab = root->get("vocab_size")) {
    std::optional<int64_t> v = vocab->getAsInteger();
    if (!v || *v < 1)
      return err("\"vocab_size\" must be a positive integer");
    m.vocabSize = *v;
  }
  if (const json::Object *opt = root->getObject("optimizer"))
    m.optimizer = *opt;
  if (std::optional<llvm::StringRef> p = root->getString("precision"))
    m.precision = p->str();
  if (const json::Object *memory = root->getObject("memory")) {
    std::optional<int64_t> peak = memory->getInteger("peak_bytes_per_rank");
    if (memory->getBoolean("planned").value_or(false) && (!peak || *peak < 0))
      return err("\"memory\": a planned prediction needs a non-negative "
                 "integer \"peak_bytes_per_rank\"");
    if (memory->getBoolean("planned").value_or(false))
      m.predictedPeakBytes = *peak;
    if (const json::Array *stages = memory->getArray("stages"))
      for (const json::Value &v : *stages) {
        const json::Object *stage = v.getAsObject();
        std::optional<int64_t> index =
            stage ? stage->getInteger("stage") : std::nullopt;
        std::optional<int64_t> bytes =
            stage ? stage->getInteger("peak_bytes") : std::nullopt;
        if (!index || !bytes ||
            *index != int64_t(m.predictedPeakBytesPerStage.size()) ||
            *bytes < 0)
          return err("\"memory\": \"stages\" must list {\"stage\": s, "
                     "\"peak_bytes\": N >= 0} for s = 0, 1, ... in order");
        m.predictedPeakBytesPerStage.push_back(*bytes);
      }
  }

  const json::Array *args = root->getArray("arguments");
  const json::Array *results = root->getArray("results");
  if (!args || !results)
    return err("needs \"arguments\" and \"results\" arrays");
  m.arguments.resize(args->size());
  std::vector<bool> seen(args->size(), false);
  for (const json::Value &v : *args) {
    const json::Object *a = v.getAsObject();
    std::optional<int64_t> index = a ? a->getInteger("index") : std::nullopt;
    if (!index || *index < 0 || *index >= static_cast<int64_t>(args->size()) ||
        seen[*index])
      return err("every argument needs a unique \"index\" in [0, " +
                 llvm::Twine(args->size()) + ")");
    seen[*index] = true;
    ArgumentSpec &spec = m.arguments[*index];
    spec.index = *index;
    std::optional<llvm::StringRef> name = a->getString("name");
    if (!name || name->empty())
      return err(llvm::formatv("argument {0} has no \"name\"", *index));
    spec.name = name->str();
    auto what = [&](const llvm::Twine &msg) {
      return err("argument '" + spec.name + "': " + msg);
    };
    std::optional<Role> role = parseRole(a->getString("role").value_or(""));
    if (!role || *role == Role::Loss || *role == Role::GradNorm)
      return what("unknown \"role\" (expected param, frozen, opt_state, "
                  "hyper, tokens or labels)");
    spec.role = *role;
    std::optional<DType> dtype = parseDType(a->getString("dtype").value_or(""));
    if (!dtype)
      return what("unsupported \"dtype\" (expected f32, i64 or i1)");
    spec.dtype = *dtype;
    auto gshape = intList(a->get("shape"));
    auto lshape = intList(a->get("local_shape"));
    const json::Value *layout = a->get("layout");
    if (!gshape || !lshape || !layout)
      return what("needs \"shape\", \"local_shape\" and \"layout\"");
    for (const std::vector<int64_t> *dims : {&*gshape, &*lshape}) {
      const char *field = dims == &*gshape ? "shape" : "local_shape";
      int64_t numel = 1;
      for (int64_t d : *dims) {
        if (d < 0)
          return what(llvm::formatv("negative dimension in \"{0}\"", field));
        if (d > kMaxElements || (d > 0 && numel > kMaxElements / d))
          return what(
              llvm::formatv("\"{0}\" has more than 2^40 elements", field));
        numel *= d;
      }
    }
    spec.shape = *gshape;
    spec.localShape = *lshape;
    auto parsedLayout = parseLayout(*layout, m.gridShape, spec.name);
    if (!parsedLayout)
      return err(llvm::toString(parsedLayout.takeError()));
    spec.layout = std::move(*parsedLayout);
    if (spec.layout.globalShape() != spec.shape)
      return what("layout describes global shape " +
                  shapeToString(spec.layout.globalShape()) +
                  " but \"shape\" is " + shapeToString(spec.shape));
    if (spec.layout.localShape(m.gridShape) != spec.localShape)
      return what("layout gives local shape " +
                  shapeToString(spec.layout.localShape(m.gridShape)) +
                  " on this grid but \"local_shape\" is " +
                  shapeToString(spec.localShape));
    if (spec.role == Role::Hyper &&
        (spec.dtype != DType::F32 || !spec.shape.empty() ||
         !spec.layout.usedAxes().empty()))
      return what("a \"hyper\" argument must be a replicated f32 scalar "
                  "(shape [])");
    if (spec.role == Role::Hyper && !m.optimizer.getNumber(spec.name))
      return what(
          "a \"hyper\" argument needs its initial value, \"optimizer\": "
          "{\"" +
          spec.name + "\": <number>}");
    if ((spec.role == Role::Param || spec.role == Role::Frozen ||
         spec.role == Role::OptState || spec.role == Role::Hyper) &&
        m.findArgument(spec.name, spec.role) >= 0 &&
        m.findArgument(spec.name, spec.role) != spec.index)
      return what("name repeated");
    if (m.isPipeline()) {
      std::vector<int64_t> used = spec.layout.usedAxes();
      bool usesPp = llvm::is_contained(used, m.ppAxis);
      bool usesMb = llvm::is_contained(used, m.mbAxis);
      bool batch = spec.role == Role::Tokens || spec.role == Role::Labels;
      if (usesPp || (usesMb && !batch))
        return what(llvm::formatv(
            "the layout splits over the {0} axis '{1}', which only "
            "{2}",
            usesPp ? "pipeline" : "micro-batch",
            m.gridAxes[usesPp ? m.ppAxis : m.mbAxis],
            usesPp ? "selects the stage (no argument may be split over it)"
                   : "tokens and labels may be split over"));
      if (batch && !usesMb && m.gridShape[m.mbAxis] > 1)
        return what(llvm::formatv("{0} must be split over the micro-batch "
                                  "axis '{1}' (each micro-batch is a slice)",
                                  roleName(spec.role), m.gridAxes[m.mbAxis]));
    }
    if (spec.role == Role::Tokens || spec.role == Role::Labels) {
      if (spec.dtype != DType::I64 ||
          spec.shape != std::vector<int64_t>{m.globalBatch, m.seqLen})
        return what(llvm::formatv("{0} must be i64 of global shape [{1}, {2}] "
                                  "(global_batch, seq_len)",
                                  roleName(spec.role), m.globalBatch,
                                  m.seqLen));
    }
  }
  for (Role r : {Role::Tokens, Role::Labels}) {
    int count = 0;
    for (const ArgumentSpec &a : m.arguments)
      count += a.role == r;
    if (count != 1)
      return err(llvm::formatv("needs exactly one \"{0}\" argument, found {1}",
                               roleName(r), count));
  }

  m.results.resize(results->size());
  std::vector<bool> seenResult(results->size(), false);
  int losses = 0, gradNorms = 0;
  for (const json::Value &v : *results) {
    const json::Object *r = v.getAsObject();
    std::optional<int64_t> index = r ? r->getInteger("index") : std::nullopt;
    if (!index || *index < 0 ||
        *index >= static_cast<int64_t>(results->size()) || seenResult[*index])
      return err("every result needs a unique \"index\" in [0, " +
                 llvm::Twine(results->size()) + ")");
    seenResult[*index] = true;
    ResultSpec &spec = m.results[*index];
    spec.index = *index;
    spec.name = r->getString("name").value_or("").str();
    std::optional<Role> role = parseRole(r->getString("role").value_or(""));
    if (!role || (*role != Role::Loss && *role != Role::Param &&
                  *role != Role::OptState && *role != Role::GradNorm))
      return err(llvm::formatv("result {0}: \"role\" must be loss, param, "
                               "opt_state or grad_norm",
                               *index));
    spec.role = *role;
    if (spec.role == Role::Loss) {
      ++losses;
      continue;
    }
    if (spec.role == Role::GradNorm) {
      if (++gradNorms > 1)
        return err("more than one \"grad_norm\" result");
      continue;
    }
    spec.argument = m.findArgument(spec.name, spec.role);
    if (spec.argument < 0)
      return err(llvm::formatv("result {0} ('{1}', {2}) has no argument of "
                               "that name and role",
                               *index, spec.name, roleName(spec.role)));
  }
  if (losses != 1)
    return err(
        llvm::formatv("needs exactly one \"loss\" result, found {0}", losses));

  if (const json::Value *evalValue = root->get("eval")) {
    const json::Object *e = evalValue->getAsObject();
    std::optional<llvm::StringRef> function =
        e ? e->getString("function") : std::nullopt;
    auto indices = intList(e ? e->get("arguments") : nullptr);
    std::optional<int64_t> result = e ? e->getInteger("result") : std::nullopt;
    if (!function || function->empty() || !indices || !result || *result < 0)
      return err("\"eval\" must be an object with a \"function\" name, "
                 "\"arguments\" (argument indices) and a \"result\" index");
    if (m.isPipeline())
      return err("\"eval\" is not supported for pipeline plans");
    EvalSpec spec;
    spec.function = function->str();
    spec.result = *result;
    std::vector<bool> used(m.arguments.size(), false);
    for (int64_t i : *indices) {
      if (i < 0 || i >= static_cast<int64_t>(m.arguments.size()) || used[i])
        return err(llvm::formatv("\"eval\": argument index {0} is out of "
                                 "range or repeated",
                                 i));
      used[i] = true;
      spec.arguments.push_back(i);
    }
    for (const ArgumentSpec &a : m.arguments)
      if ((a.role == Role::Tokens || a.role == Role::Labels) && !used[a.index])
        return err(llvm::formatv("\"eval\": the function must read the {0}",
                                 roleName(a.role)));
    m.eval = std::move(spec);
  }
  return m;
}

const Tensor *Plan::initialValue(llvm::StringRef name) const {
  auto it = weights.find(name);
  return it == weights.end() ? nullptr : &it->second;
}

llvm::Expected<std::unique_ptr<Plan>> Plan::load(llvm::StringRef path,
                                                 Backend *backend) {
  llvm::Expected<SafeTensorsFile> file = readSafeTensors(path);
  if (!file)
    return file.takeError(); // names the path
  return fromSafeTensors(std::move(*file), path, backend);
}

llvm::Expected<std::unique_ptr<Plan>> Plan::fromBuffer(llvm::StringRef bytes,
                                                       llvm::StringRef source,
                                                       Backend *backend) {
  llvm::Expected<SafeTensorsFile> file = parseSafeTensors(bytes, source);
  if (!file)
    return file.takeError();
  return fromSafeTensors(std::move(*file), source, backend);
}

/// "file.mlir:3:5" for file locations, else the printed location.
static std::string locationText(mlir::Location loc) {
  if (auto file = mlir::dyn_cast<mlir::FileLineColLoc>(loc))
    return llvm::formatv("{0}:{1}:{2}", file.getFilename().getValue(),
                         file.getLine(), file.getColumn())
        .str();
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

namespace {
/// Compiles the functions of a `tsrt.pipeline_schedule` and checks their
/// bindings against the manifest.
class PipelineCompiler {
public:
  PipelineCompiler(mlir::ModuleOp module, const Manifest &m,
                   llvm::StringRef source, Backend *backend)
      : module(module), m(m), source(source) {
    options.backend = backend;
  }

  llvm::Expected<Pipeline> compile();

private:
  enum class Phase { Forward, Backward, Apply };
  static const char *phaseName(Phase phase) {
    return phase == Phase::Forward    ? "forward"
           : phase == Phase::Backward ? "backward"
                                      : "apply";
  }
  llvm::Error compileFunction(mlir::Attribute symbol, int64_t chunk,
                              Phase phase, PipelineFunction &out);
  llvm::Error checkBindings(Pipeline &p);

  mlir::ModuleOp module;
  const Manifest &m;
  llvm::StringRef source;
  CompileOptions options;
};
} // namespace

/// The binding attribute of one argument or result: exactly one of the
/// `tsrt.*` binding keys, with a non-negative integer value.
static llvm::Expected<Binding>
parseBinding(mlir::DictionaryAttr attrs, llvm::ArrayRef<Binding::Kind> allowed,
             const llvm::Twine &what) {
  static const std::pair<const char *, Binding::Kind> keys[] = {
      {"tsrt.arg", Binding::Kind::Arg},
      {"tsrt.saved", Binding::Kind::Saved},
      {"tsrt.acc", Binding::Kind::Acc},
      {"tsrt.result", Binding::Kind::Result}};
  std::string allowedText;
  for (auto [i, k] : llvm::enumerate(allowed))
    for (auto &[key, kind] : keys)
      if (kind == k)
        allowedText += (i ? (i + 1 == allowed.size() ? " or " : ", ") : "") +
                       std::string(key);
  std::optional<Binding> found;
  for (auto &[key, kind] : keys) {
    mlir::Attribute a = attrs ? attrs.get(key) : mlir::Attribute();
    if (!a)
      continue;
    if (!llvm::is_contained(allowed, kind))
      return fail(what + " carries " + key + ", expected " + allowedText);
    if (found)
      return fail(what + " carries more than one of " + allowedText);
    auto i = mlir::dyn_cast<mlir::IntegerAttr>(a);
    if (!i || !i.getType().isSignlessInteger() ||
        i.getValue().getSignificantBits() > 64 || i.getInt() < 0)
      return fail(what + ": " + key + " must be a non-negative integer");
    found = Binding{kind, i.getInt()};
  }
  if (!found)
    return fail(what + " has no " + allowedText + " attribute");
  return *found;
}

llvm::Error PipelineCompiler::compileFunction(mlir::Attribute symbol,
                                              int64_t chunk, Phase phase,
                                              PipelineFunction &out) {
  auto ref = mlir::dyn_cast<mlir::FlatSymbolRefAttr>(symbol);
  auto func = ref ? module.lookupSymbol<mlir::func::FuncOp>(ref.getAttr())
                  : mlir::func::FuncOp();
  if (!func)
    return fail(llvm::formatv("{0}: the {1} function of chunk {2} is not a "
                              "func.func of the module",
                              source, phaseName(phase), chunk));
  out.name = func.getSymName().str();
  llvm::Expected<Program> program =
      Program::compile(module, out.name, options, source);
  if (!program)
    return program.takeError();
  out.program = std::move(*program);

  using K = Binding::Kind;
  std::vector<K> argKinds, resultKinds;
  switch (phase) {
  case Phase::Forward:
    argKinds = {K::Arg};
    resultKinds = {K::Saved, K::Acc};
    break;
  case Phase::Backward:
    argKinds = {K::Arg, K::Saved};
    resultKinds = {K::Acc};
    break;
  case Phase::Apply:
    argKinds = {K::Arg, K::Acc};
    resultKinds = {K::Result};
    break;
  }
  out.description = llvm::formatv("@{0} ({1} of chunk {2})", out.name,
                                  phaseName(phase), chunk)
                        .str();
  std::string fn = (source + ": " + out.description).str();
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto b = parseBinding(func.getArgAttrDict(i), argKinds,
                          fn + ": argument #" + llvm::Twine(i));
    if (!b)
      return b.takeError();
    out.args.push_back(*b);
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto b = parseBinding(func.getResultAttrDict(i), resultKinds,
                          fn + ": result #" + llvm::Twine(i));
    if (!b)
      return b.takeError();
    out.results.push_back(*b);
  }
  return llvm::Error::success();
}

llvm::Expected<Pipeline> PipelineCompiler::compile() {
  namespace schedule = tessera::tsrt::schedule;
  auto ops =
      llvm::to_vector(module.getOps<tessera::tsrt::PipelineScheduleOp>());
  if (ops.size() != 1)
    return fail(llvm::formatv("{0}: a pipeline plan's program needs exactly "
                              "one module-level tsrt.pipeline_schedule, found "
                              "{1}",
                              source, ops.size()));
  tessera::tsrt::PipelineScheduleOp op = ops[0];
  Pipeline p;
  std::optional<schedule::Kind> kind = schedule::parseKind(op.getKind());
  if (!kind)
    return fail(source + ": unknown pipeline schedule kind '" + op.getKind() +
                "'");
  p.kind = *kind;
  p.shape.stages = static_cast<int64_t>(op.getStages());
  p.shape.virtualStages = static_cast<int64_t>(op.getVirtualStages());
  p.shape.microBatches = static_cast<int64_t>(op.getMicroBatches());
  if (p.shape.stages != m.gridShape[m.ppAxis] ||
      p.shape.microBatches != m.gridShape[m.mbAxis])
    return fail(llvm::formatv(
        "{0}: the pipeline schedule has {1} stages and {2} micro-batches but "
        "the manifest's grid has {3}={4} and {5}={6}",
        source, p.shape.stages, p.shape.microBatches, m.gridAxes[m.ppAxis],
        m.gridShape[m.ppAxis], m.gridAxes[m.mbAxis], m.gridShape[m.mbAxis]));
  for (auto [s, text] : llvm::enumerate(op.getActions())) {
    auto parsed =
        schedule::parse(mlir::cast<mlir::StringAttr>(text).getValue());
    if (!parsed)
      return fail(llvm::formatv("{0}: pipeline stage {1}: {2}", source, s,
                                llvm::toString(parsed.takeError())));
    p.actions.push_back(std::move(*parsed));
  }
  int64_t chunks = p.shape.numChunks();
  if (static_cast<int64_t>(p.actions.size()) != p.shape.stages ||
      static_cast<int64_t>(op.getForward().size()) != chunks ||
      static_cast<int64_t>(op.getBackward().size()) != chunks ||
      static_cast<int64_t>(op.getApply().size()) != chunks)
    return fail(source + ": malformed tsrt.pipeline_schedule");
  for (const schedule::StageActions &stage : p.actions)
    for (const schedule::Action &a : stage)
      if (a.chunk < 0 || a.chunk >= chunks || a.microBatch < 0 ||
          a.microBatch >= p.shape.microBatches)
        return fail(llvm::formatv("{0}: pipeline action of chunk {1}, "
                                  "micro-batch {2} is out of range",
                                  source, a.chunk, a.microBatch));

  options.gridShape = m.rankShape();
  options.optimizer = &m.optimizer;
  options.pipelineStages = p.shape.stages;
  options.microBatches = p.shape.microBatches;
  p.chunks.resize(chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    PipelineChunk &chunk = p.chunks[c];
    chunk.stage = p.shape.stageOfChunk(c);
    if (llvm::Error e = compileFunction(op.getForward()[c], c, Phase::Forward,
                                        chunk.forward))
      return std::move(e);
    if (llvm::Error e = compileFunction(op.getBackward()[c], c, Phase::Backward,
                                        chunk.backward))
      return std::move(e);
    if (llvm::Error e =
            compileFunction(op.getApply()[c], c, Phase::Apply, chunk.apply))
      return std::move(e);
  }
  if (llvm::Error e = checkBindings(p))
    return std::move(e);

  int64_t maxChannel = -1;
  for (const PipelineChunk &chunk : p.chunks)
    for (const PipelineFunction *f : {&chunk.forward, &chunk.backward})
      maxChannel = std::max(maxChannel, f->program.maxChannel());
  if (maxChannel >= 0)
    p.maxTag = maxChannel * p.shape.microBatches + p.shape.microBatches - 1;
  return p;
}

/// Checks every binding against the manifest and the other functions.
llvm::Error PipelineCompiler::checkBindings(Pipeline &p) {
  using K = Binding::Kind;
  int64_t stages = p.shape.stages;
  int64_t numArgs = static_cast<int64_t>(m.arguments.size());
  int64_t numResults = static_cast<int64_t>(m.results.size());
  p.stageArguments.assign(stages, std::vector<bool>(numArgs, false));
  // Accumulator j: its type and the stages that produce it.
  std::map<int64_t, TensorType> accType;
  std::map<int64_t, std::string> accFirst; // where its type was first seen
  std::map<int64_t, std::set<int64_t>> accStages;
  // Result r: the stages whose apply produces it.
  std::vector<std::set<int64_t>> resultStages(numResults);

  auto fnName = [&](const PipelineFunction &f) {
    return (source + ": " + f.description).str();
  };
  auto checkAcc = [&](const PipelineFunction &f, int64_t j, const TensorType &t,
                      const std::string &what) -> llvm::Error {
    if (t.dtype != DType::F32)
      return fail(fnName(f) + ": " + what + " (tsrt.acc = " + llvm::Twine(j) +
                  ") is " + t.str() + "; accumulators must be f32");
    auto [it, inserted] = accType.emplace(j, t);
    if (inserted) {
      accFirst[j] = "@" + f.name + " " + what;
    } else if (it->second != t) {
      return fail(fnName(f) + ": " + what + " (tsrt.acc = " + llvm::Twine(j) +
                  ") is " + t.str() + " but " + accFirst[j] + " has " +
                  it->second.str());
    }
    return llvm::Error::success();
  };

  // Arguments of every function; saved/acc results of forward and backward.
  for (auto [c, chunk] : llvm::enumerate(p.chunks)) {
    int64_t stage = chunk.stage;
    std::map<int64_t, TensorType> saved;
    for (auto [i, b] : llvm::enumerate(chunk.forward.results)) {
      const TensorType &t = chunk.forward.program.resultTypes()[i];
      std::string what = "result #" + std::to_string(i);
      if (b.kind == K::Saved) {
        if (!saved.emplace(b.index, t).second)
          return fail(fnName(chunk.forward) + ": " + what +
                      ": tsrt.saved = " + llvm::Twine(b.index) + " repeated");
        chunk.numSaved = std::max(chunk.numSaved, b.index + 1);
      } else if (llvm::Error e = checkAcc(chunk.forward, b.index, t, what)) {
        return e;
      } else {
        accStages[b.index].insert(stage);
      }
    }
    for (auto [i, b] : llvm::enumerate(chunk.backward.results)) {
      if (llvm::Error e = checkAcc(chunk.backward, b.index,
                                   chunk.backward.program.resultTypes()[i],
                                   "result #" + std::to_string(i)))
        return e;
      accStages[b.index].insert(stage);
    }
    for (const PipelineFunction *f :
         {&chunk.forward, &chunk.backward, &chunk.apply}) {
      for (auto [i, b] : llvm::enumerate(f->args)) {
        const TensorType &t = f->program.argTypes()[i];
        std::string what = "argument #" + std::to_string(i);
        if (b.kind == K::Arg) {
          if (b.index >= numArgs)
            return fail(fnName(*f) + ": " + what + ": tsrt.arg = " +
                        llvm::Twine(b.index) + " but the manifest has " +
                        llvm::Twine(numArgs) + " arguments");
          const ArgumentSpec &a = m.arguments[b.index];
          if (f == &chunk.apply &&
              (a.role == Role::Tokens || a.role == Role::Labels))
            return fail(fnName(*f) + ": " + what + " (tsrt.arg = " +
                        llvm::Twine(b.index) + ") is the " + roleName(a.role) +
                        ", which only forward and backward functions (one "
                        "micro-batch) may read");
          TensorType expected{a.dtype, a.localShape};
          if (t != expected)
            return fail(fnName(*f) + ": " + what +
                        " (tsrt.arg = " + llvm::Twine(b.index) + ", '" +
                        a.name + "') is " + t.str() +
                        " but the manifest's local type is " + expected.str());
          p.stageArguments[stage][b.index] = true;
        } else if (b.kind == K::Saved) {
          auto it = saved.find(b.index);
          if (it == saved.end())
            return fail(fnName(*f) + ": " + what +
                        ": tsrt.saved = " + llvm::Twine(b.index) +
                        " is not a result of @" + chunk.forward.name);
          if (it->second != t)
            return fail(fnName(*f) + ": " + what + " (tsrt.saved = " +
                        llvm::Twine(b.index) + ") is " + t.str() + " but @" +
                        chunk.forward.name + " saves " + it->second.str());
        }
      }
    }
  }
  // Apply: accumulator arguments need a producer on the same stage; results.
  for (const PipelineChunk &chunk : p.chunks) {
    const PipelineFunction &f = chunk.apply;
    for (auto [i, b] : llvm::enumerate(f.args)) {
      if (b.kind != K::Acc)
        continue;
      std::string what = "argument #" + std::to_string(i);
      if (!accStages[b.index].count(chunk.stage))
        return fail(fnName(f) + ": " + what + ": accumulator " +
                    llvm::Twine(b.index) +
                    " gets no contribution from a forward or backward "
                    "function of stage " +
                    llvm::Twine(chunk.stage));
      if (llvm::Error e = checkAcc(f, b.index, f.program.argTypes()[i], what))
        return e;
    }
    for (auto [i, b] : llvm::enumerate(f.results)) {
      const TensorType &t = f.program.resultTypes()[i];
      std::string what = "result #" + std::to_string(i);
      if (b.index >= numResults)
        return fail(fnName(f) + ": " + what + ": tsrt.result = " +
                    llvm::Twine(b.index) + " but the manifest has " +
                    llvm::Twine(numResults) + " results");
      const ResultSpec &r = m.results[b.index];
      if (r.role == Role::Loss || r.role == Role::GradNorm) {
        if (t.dtype != DType::F32 || shapeNumel(t.shape) != 1)
          return fail(fnName(f) + ": " + what + " is the " + roleName(r.role) +
                      " but is " + t.str() + ", expected an f32 scalar");
      } else {
        const ArgumentSpec &a = m.arguments[r.argument];
        TensorType expected{a.dtype, a.localShape};
        if (t != expected)
          return fail(fnName(f) + ": " + what + " ('" + r.name + "') is " +
                      t.str() + " but its argument is " + expected.str());
      }
      resultStages[b.index].insert(chunk.stage);
    }
  }
  auto stageList = [](const std::set<int64_t> &stages) {
    std::string s = "{";
    for (int64_t x : stages)
      s += (s.size() > 1 ? ", " : "") + std::to_string(x);
    return s + "}";
  };
  for (const ResultSpec &r : m.results) {
    const std::set<int64_t> &producers = resultStages[r.index];
    if (producers.empty())
      return fail(llvm::formatv("{0}: result {1} ('{2}') is produced by no "
                                "apply function",
                                source, r.index, r.name));
    if (r.role == Role::Loss) {
      if (producers != std::set<int64_t>{stages - 1})
        return fail(llvm::formatv("{0}: the loss (result {1}) must be "
                                  "produced on the last stage ({2}) only, but "
                                  "is produced on stages {3}",
                                  source, r.index, stages - 1,
                                  stageList(producers)));
      continue;
    }
    if (r.role == Role::GradNorm) {
      // Replicated over pp: every stage computes the same norm.
      if (producers.size() != static_cast<size_t>(stages))
        return fail(llvm::formatv("{0}: the grad_norm (result {1}) must be "
                                  "produced on every stage, but is produced "
                                  "on stages {2}",
                                  source, r.index, stageList(producers)));
      continue;
    }
    std::set<int64_t> holders;
    for (int64_t s = 0; s < stages; ++s)
      if (p.stageArguments[s][r.argument])
        holders.insert(s);
    if (holders != producers)
      return fail(llvm::formatv(
          "{0}: {1} '{2}' is used on stages {3} but updated (result {4}) on "
          "stages {5}: every stage that holds it must update it",
          source, roleName(r.role), r.name, stageList(holders), r.index,
          stageList(producers)));
  }
  int64_t numAcc = accType.empty() ? 0 : accType.rbegin()->first + 1;
  p.accumulatorTypes.assign(numAcc, TensorType{DType::F32, {}});
  p.accumulatorUsed.assign(numAcc, false);
  for (auto &[j, t] : accType) {
    p.accumulatorTypes[j] = t;
    p.accumulatorUsed[j] = true;
  }
  return llvm::Error::success();
}

/// The manifest against what the program was compiled for: the grid
/// (module attributes `tsrt.grid_axes`, `tsrt.grid_shape`, set by
/// tsr-lower-to-runtime) and the optimizer and precision (`tsrt.compiled_for`
/// = {optimizer = "adamw", precision = "fp32"}, set by the artifact writer).
/// Programs without these attributes (hand-written ones) are not checked.
static llvm::Error checkCompiledFor(mlir::ModuleOp module, const Manifest &m,
                                    llvm::StringRef source) {
  auto axes = module->getAttrOfType<mlir::ArrayAttr>("tsrt.grid_axes");
  auto shape =
      module->getAttrOfType<mlir::DenseI64ArrayAttr>("tsrt.grid_shape");
  if (axes && shape) {
    std::vector<std::string> names;
    for (mlir::Attribute a : axes)
      if (auto s = mlir::dyn_cast<mlir::StringAttr>(a))
        names.push_back(s.getValue().str());
    std::vector<int64_t> sizes(shape.asArrayRef().begin(),
                               shape.asArrayRef().end());
    if (names != m.gridAxes || sizes != m.gridShape) {
      std::string got;
      for (size_t i = 0; i < names.size() && i < sizes.size(); ++i)
        got += (i ? " x " : "") + names[i] + "=" + std::to_string(sizes[i]);
      std::string want;
      for (size_t i = 0; i < m.gridAxes.size(); ++i)
        want += (i ? " x " : "") + m.gridAxes[i] + "=" +
                std::to_string(m.gridShape[i]);
      return fail(source + ": manifest field \"grid\" (" + want +
                  ") does not match the grid the program was compiled for (" +
                  got + ")");
    }
  }
  auto compiled =
      module->getAttrOfType<mlir::DictionaryAttr>("tsrt.compiled_for");
  if (!compiled)
    return llvm::Error::success();
  auto optimizer = compiled.getAs<mlir::StringAttr>("optimizer");
  std::optional<llvm::StringRef> name = m.optimizer.getString("name");
  if (optimizer && name != optimizer.getValue())
    return fail(source + ": manifest field \"optimizer\".\"name\" ('" +
                name.value_or("") +
                "') does not match the optimizer the "
                "program was compiled for ('" +
                optimizer.getValue() + "')");
  auto precision = compiled.getAs<mlir::StringAttr>("precision");
  if (precision && m.precision != precision.getValue())
    return fail(source + ": manifest field \"precision\" ('" + m.precision +
                "') does not match the precision the program was compiled "
                "for ('" +
                precision.getValue() + "')");
  return llvm::Error::success();
}

/// Parses the program bytes (MLIR bytecode or text), verifies the module and
/// compiles it: the manifest's function, or the pipeline's functions.
static llvm::Error loadProgram(const Tensor &bytes, const Manifest &m,
                               llvm::StringRef source, Backend *backend,
                               Program &prog, std::optional<Program> &evalProg,
                               std::optional<Pipeline> &pipe) {
  // MLIR bytecode starts with "ML\xefR". A writer that stores the bytes as
  // BOOL normalises them to 0/1 (runtime::writeSafeTensors does for I1
  // tensors), which destroys the program: say so rather than "parse error".
  const auto *head = static_cast<const unsigned char *>(bytes.raw());
  if (bytes.bytes() >= 4 && head[0] == 1 && head[1] == 1 && head[2] == 1 &&
      head[3] == 1)
    return fail(source + ": the program tensor '" + m.program +
                "' holds 0/1 bytes: it was stored as BOOL (normalised) "
                "instead of raw U8 MLIR bytecode");

  mlir::DialectRegistry registry;
  registry.insert<tessera::tsrt::TsrtDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.loadAllAvailableDialects();
  // Ops and attributes of other dialects (e.g. a `tsr` op the lowering left
  // behind) still parse, so the compile step can name them precisely.
  ctx.allowUnregisteredDialects();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error &&
        diagnostics.empty())
      diagnostics = d.str();
    return mlir::success();
  });

  std::string bufferName = (source + ":" + m.program).str();
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(
          llvm::StringRef(static_cast<const char *>(bytes.raw()),
                          bytes.bytes()),
          bufferName, /*RequiresNullTerminator=*/false),
      llvm::SMLoc());
  mlir::ParserConfig config(&ctx, /*verifyAfterParse=*/false);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, config);
  if (!module)
    return fail(
        source + ": cannot parse the program '" + m.program + "': " +
        (diagnostics.empty() ? std::string("invalid MLIR") : diagnostics));

  // The verifier, with the location of the first error (for a
  // tsrt.pipeline_schedule, this includes the schedule checks).
  std::string where;
  {
    mlir::ScopedDiagnosticHandler locate(&ctx, [&](mlir::Diagnostic &d) {
      if (d.getSeverity() == mlir::DiagnosticSeverity::Error && where.empty()) {
        where = locationText(d.getLocation());
        diagnostics = d.str();
      }
      return mlir::success();
    });
    if (mlir::failed(mlir::verify(*module)))
      return fail(source + ": the program '" + m.program +
                  "' is invalid: " + where + ": " +
                  (diagnostics.empty() ? std::string("verification failed")
                                       : diagnostics));
  }

  if (llvm::Error err = checkCompiledFor(*module, m, source))
    return err;

  if (m.isPipeline()) {
    // A backend that cannot run the sends and receives refuses them when
    // they are compiled (naming the op).
    llvm::Expected<Pipeline> p =
        PipelineCompiler(*module, m, source, backend).compile();
    if (!p)
      return p.takeError();
    pipe = std::move(*p);
    return llvm::Error::success();
  }
  CompileOptions options;
  options.gridShape = m.gridShape;
  options.optimizer = &m.optimizer;
  options.backend = backend;
  llvm::Expected<Program> p =
      Program::compile(*module, m.function, options, source);
  if (!p)
    return p.takeError();
  prog = std::move(*p);
  if (m.eval) {
    llvm::Expected<Program> e =
        Program::compile(*module, m.eval->function, options, source);
    if (!e)
      return e.takeError();
    evalProg = std::move(*e);
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<Plan>>
Plan::fromSafeTensors(SafeTensorsFile file, llvm::StringRef source,
                      Backend *backend) {
  auto it = file.metadata.find("tessera.manifest");
  if (it == file.metadata.end())
    return fail(source + ": not a Tessera plan (no \"tessera.manifest\" "
                         "metadata)");
  // Artifacts are only ever read by the Tessera that wrote them, so one
  // without section digests is an older artifact: refuse it rather than
  // parse sections nobody can vouch for.
  if (!file.hasDigests)
    return fail(source + ": no section digests (\"" + kDigestsKey +
                "\"): the artifact was written by an older Tessera; "
                "recompile it with tessera-partition");
  llvm::Expected<Manifest> manifest = Manifest::parse(it->second, source);
  if (!manifest)
    return manifest.takeError();

  std::unique_ptr<Plan> plan(new Plan());
  plan->src = source.str();
  plan->device = backend ? backend : &cpuBackend();
  plan->man = std::move(*manifest);
  const Manifest &m = plan->man;

  const Tensor *programBytes = file.find(m.program);
  if (!programBytes || programBytes->dtype() != DType::I1 ||
      programBytes->rank() != 1)
    return fail(source + ": no program tensor '" + m.program +
                "' (U8 bytes of MLIR bytecode)");
  if (llvm::Error err = loadProgram(*programBytes, m, source, backend,
                                    plan->prog, plan->evalProg, plan->pipe))
    return std::move(err);
  // The evaluation function reads training arguments: same local types.
  if (const Program *e = plan->evalProgram()) {
    const EvalSpec &spec = *m.eval;
    if (e->argTypes().size() != spec.arguments.size() ||
        spec.result >= static_cast<int64_t>(e->resultTypes().size()))
      return fail(llvm::formatv("{0}: @{1} has {2} arguments and {3} results "
                                "but the manifest's \"eval\" lists {4} "
                                "arguments and result {5}",
                                source, spec.function, e->argTypes().size(),
                                e->resultTypes().size(), spec.arguments.size(),
                                spec.result));
    for (size_t k = 0; k < spec.arguments.size(); ++k) {
      const ArgumentSpec &a = m.arguments[spec.arguments[k]];
      TensorType expected{a.dtype, a.localShape};
      if (e->argTypes()[k] != expected)
        return fail(llvm::formatv("{0}: @{1} argument {2} ('{3}') is {4} but "
                                  "the training argument it reads is {5}",
                                  source, spec.function, k, a.name,
                                  e->argTypes()[k].str(), expected.str()));
    }
    const TensorType &t = e->resultTypes()[spec.result];
    if (t.dtype != DType::F32 || shapeNumel(t.shape) != 1)
      return fail(llvm::formatv("{0}: the loss result of @{1} is {2}, "
                                "expected an f32 scalar",
                                source, spec.function, t.str()));
  }
  const Program &p = plan->prog;

  // Manifest against program signature (pipeline plans: checked per
  // function, against the bindings, while compiling).
  if (!plan->pipe && (p.argTypes().size() != m.arguments.size() ||
                      p.resultTypes().size() != m.results.size()))
    return fail(llvm::formatv("{0}: @{1} has {2} arguments and {3} results but "
                              "the manifest lists {4} and {5}",
                              source, m.function, p.argTypes().size(),
                              p.resultTypes().size(), m.arguments.size(),
                              m.results.size()));
  for (const ArgumentSpec &a : m.arguments) {
    if (plan->pipe)
      break;
    TensorType expected{a.dtype, a.localShape};
    if (p.argTypes()[a.index] != expected)
      return fail(llvm::formatv("{0}: argument '{1}': the program takes {2} "
                                "but the manifest says {3}",
                                source, a.name, p.argTypes()[a.index].str(),
                                expected.str()));
  }
  for (const ResultSpec &r : m.results) {
    if (plan->pipe)
      break;
    const TensorType &t = p.resultTypes()[r.index];
    if (r.role == Role::Loss || r.role == Role::GradNorm) {
      if (t.dtype != DType::F32 || shapeNumel(t.shape) != 1)
        return fail(llvm::formatv("{0}: the {1} result is {2}, expected an "
                                  "f32 scalar",
                                  source, roleName(r.role), t.str()));
    } else if (t != p.argTypes()[r.argument]) {
      return fail(llvm::formatv("{0}: result {1} ('{2}') is {3} but its "
                                "argument is {4}",
                                source, r.index, r.name, t.str(),
                                p.argTypes()[r.argument].str()));
    }
  }

  // Initial weights.
  for (const ArgumentSpec &a : m.arguments) {
    if (a.role != Role::Param && a.role != Role::Frozen)
      continue;
    if (a.dtype != DType::F32)
      return fail(source + ": " + roleName(a.role) + " '" + a.name +
                  "' must be f32");
    const Tensor *t = file.find(a.name);
    if (!t)
      return fail(source + ": no initial value for " + roleName(a.role) + " '" +
                  a.name + "'");
    if (t->dtype() != DType::F32 || t->shape() != a.shape)
      return fail(source + ": initial value of '" + a.name + "' is " +
                  dtypeName(t->dtype()) + " " + shapeToString(t->shape()) +
                  ", expected f32 " + shapeToString(a.shape));
    plan->weights[a.name] = *t;
  }
  return plan;
}

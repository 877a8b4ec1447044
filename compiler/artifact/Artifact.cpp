//===- Artifact.cpp - the plan.tsr artifact -------------------------------===//

#include "compiler/artifact/Artifact.h"
#include "compiler/artifact/Memory.h"

#include "common/cluster/Placement.h"
#include "common/plan/LayoutText.h"
#include "common/schedule/PipelineSchedule.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrOps.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/lowering/Passes.h"
#include "runtime/Tensor.h"
#include "runtime/checkpoint/SafeTensors.h"

#include "compiler/pipeline/Pipeline.h"
#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstring>
#include <map>

using namespace mlir;
using namespace tessera;
namespace json = llvm::json;

static constexpr llvm::StringLiteral kProgramTensor = "__program__";

FailureOr<json::Array>
artifact::layoutOf(Attribute sharding, RankedTensorType localType,
                   ArrayRef<int64_t> gridShape,
                   SmallVectorImpl<int64_t> &globalShape) {
  globalShape.clear();
  json::Array layout;
  auto attr = dyn_cast_or_null<tsr::ShardingAttr>(sharding);
  if (attr && !attr.getPartialAxes().empty())
    return failure(); // a program argument is never a partial sum
  for (int64_t d = 0; d < localType.getRank(); ++d) {
    int64_t ways = 1;
    if (attr) {
      for (int16_t a : attr.getDimAxes(d)) {
        if (a < 0 || a >= static_cast<int64_t>(gridShape.size()))
          return failure();
        ways *= gridShape[a];
      }
    }
    int64_t global = localType.getDimSize(d) * ways;
    globalShape.push_back(global);
    tsr::ShardingAttr::DimFactors factors;
    if (attr)
      factors = attr.getDimFactors(d, global);
    else
      factors.push_back({global, {}});
    json::Array factorsJson;
    int64_t product = 1;
    for (const auto &f : factors) {
      json::Array axes;
      for (int16_t a : f.axes)
        axes.push_back(static_cast<int64_t>(a));
      factorsJson.push_back(
          json::Object{{"size", f.size}, {"axes", std::move(axes)}});
      product *= f.size;
    }
    if (product != global)
      return failure();
    layout.push_back(std::move(factorsJson));
  }
  return layout;
}

static StringRef dtypeName(Type elementType) {
  if (elementType.isF32())
    return "f32";
  if (elementType.isInteger(64))
    return "i64";
  if (elementType.isInteger(1))
    return "i1";
  return "";
}

static func::FuncOp findTrainStep(ModuleOp module) {
  return module.lookupSymbol<func::FuncOp>("train_step");
}

int64_t artifact::vocabularyOf(ModuleOp imported) {
  auto forward = imported.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.getNumResults() == 0)
    return 0;
  unsigned logits = 0;
  for (unsigned i = 0; i < forward.getNumResults(); ++i)
    if (auto name = tsr::getResultName(forward, i);
        name && name.getValue() == "logits")
      logits = i;
  auto type = dyn_cast<RankedTensorType>(forward.getResultTypes()[logits]);
  if (!type || type.getRank() < 2 || type.isDynamicDim(type.getRank() - 1))
    return 0;
  return type.getShape().back();
}

FailureOr<json::Object> artifact::buildManifest(ModuleOp partitioned,
                                                const planner::Plan &plan,
                                                int64_t vocabSize) {
  func::FuncOp func = findTrainStep(partitioned);
  if (!func)
    return partitioned.emitError("no func.func @train_step to package");
  std::vector<int64_t> gridShape = plan.grid().shape;

  json::Array args, results;
  int64_t globalBatch = 0, seqLen = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[i]);
    auto role = tsr::getArgRole(func, i);
    auto name = tsr::getArgName(func, i);
    if (!type || !role || !name)
      return func.emitError("argument ")
             << i << " lacks a tensor type, tsr.role or tsr.name";
    StringRef dtype = dtypeName(type.getElementType());
    if (dtype.empty())
      return func.emitError("argument '")
             << name.getValue() << "' has unsupported element type "
             << type.getElementType();
    SmallVector<int64_t> globalShape;
    auto layout = layoutOf(func.getArgAttr(i, tsr::kShardingAttrName), type,
                           gridShape, globalShape);
    if (failed(layout))
      return func.emitError("argument '")
             << name.getValue()
             << "' has a sharding the runtime cannot lay out";
    if (role.getValue() == "tokens" && globalShape.size() == 2) {
      globalBatch = globalShape[0];
      seqLen = globalShape[1];
    }
    args.push_back(json::Object{{"index", static_cast<int64_t>(i)},
                                {"name", name.getValue()},
                                {"role", role.getValue()},
                                {"dtype", dtype},
                                {"shape", json::Array(globalShape)},
                                {"local_shape", json::Array(type.getShape())},
                                {"layout", std::move(*layout)}});
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto role = tsr::getResultRole(func, i);
    auto name = tsr::getResultName(func, i);
    if (!role)
      return func.emitError("result ") << i << " lacks tsr.role";
    results.push_back(
        json::Object{{"index", static_cast<int64_t>(i)},
                     {"role", role.getValue()},
                     {"name", name ? name.getValue() : role.getValue()}});
  }
  // The plan's keys (Plan::toJSON), then the program's and what the passes
  // found.
  json::Object manifest = plan.toJSON();
  manifest["format"] = "tessera-plan";
  manifest["version"] = 1;
  manifest["program"] = kProgramTensor;
  manifest["function"] = "train_step";
  manifest["global_batch"] = globalBatch;
  manifest["seq_len"] = seqLen;
  if (vocabSize > 0)
    manifest["vocab_size"] = vocabSize;
  manifest["arguments"] = std::move(args);
  manifest["results"] = std::move(results);
  if (json::Object *vocab = manifest.getObject("vocab_parallel")) {
    json::Array split;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (func.getArgAttr(i, tsr::kVocabParallelAttrName))
        if (auto name = tsr::getArgName(func, i))
          split.push_back(name.getValue());
    (*vocab)["params"] = std::move(split);
  }
  if (json::Object *zero = manifest.getObject("zero")) {
    json::Array replicated;
    if (auto names =
            func->getAttrOfType<ArrayAttr>(tsr::kZeroReplicatedAttrName))
      for (auto name : names.getAsValueRange<StringAttr>())
        replicated.push_back(name);
    (*zero)["replicated"] = std::move(replicated);
  }
  return manifest;
}

/// The text of a layout (common/plan/LayoutText.h: "[{3, 64 : tp}, -]",
/// "replicated"), with axis names.
static std::string layoutText(const json::Array &layout,
                              const json::Array &axisNames) {
  planner::TensorLayout typed;
  for (const json::Value &dim : layout) {
    std::vector<planner::LayoutFactor> factors;
    for (const json::Value &f : *dim.getAsArray()) {
      const json::Object &o = *f.getAsObject();
      planner::LayoutFactor factor{*o.getInteger("size"), {}};
      for (const json::Value &a : *o.getArray("axes"))
        factor.axes.push_back(
            axisNames[*a.getAsInteger()].getAsString()->str());
      factors.push_back(std::move(factor));
    }
    typed.dims.push_back(std::move(factors));
  }
  return planner::printLayoutText(typed);
}

/// What the sharding search (compiler/planner/ShardingSearch.h) predicted:
/// the tp collectives of one step, layer by layer (tsr.sharding_search).
static void explainShardingSearch(ModuleOp module, llvm::raw_ostream &os) {
  auto search =
      module->getAttrOfType<DictionaryAttr>(tsr::kShardingSearchAttrName);
  if (!search)
    return;
  auto integer = [&](StringRef key) {
    auto a = search.getAs<IntegerAttr>(key);
    return a ? a.getInt() : 0;
  };
  auto real = [&](StringRef key) {
    auto a = search.getAs<FloatAttr>(key);
    return a ? a.getValueAsDouble() : 0.0;
  };
  os << llvm::formatv("sharding search: {0} layers ({1} distinct, each "
                      "solved once); predicted tp traffic {2} bytes per rank "
                      "per step ({3:F1} us at the search's alpha-beta)\n",
                      integer("layers"), integer("distinct_layers"),
                      integer("bytes"), real("predicted_seconds") * 1e6);
  auto list = search.getAs<ArrayAttr>("collectives");
  if (!list)
    return;
  std::map<int64_t, std::vector<DictionaryAttr>> byLayer;
  // Entries lacking a field (hand-edited IR) are skipped.
  for (Attribute a : list)
    if (auto d = dyn_cast<DictionaryAttr>(a))
      if (d.getAs<IntegerAttr>("layer") && d.getAs<BoolAttr>("backward") &&
          d.getAs<StringAttr>("kind") && d.getAs<IntegerAttr>("bytes") &&
          d.getAs<StringAttr>("tensor"))
        byLayer[d.getAs<IntegerAttr>("layer").getInt()].push_back(d);
  for (auto &[layer, items] : byLayer)
    for (DictionaryAttr d : items)
      os << llvm::formatv("  layer {0,-3} {1} {2,-14} {3,10} B  {4}\n", layer,
                          d.getAs<BoolAttr>("backward").getValue() ? "bwd"
                                                                   : "fwd",
                          d.getAs<StringAttr>("kind").getValue(),
                          d.getAs<IntegerAttr>("bytes").getInt(),
                          d.getAs<StringAttr>("tensor").getValue());
}

/// The stages of a pipelined plan and the predicted bubble.
/// `stateBytes` is the parameter + optimizer-state bytes of one rank before
/// the split; each stage holds the share of it that its chunks' parameters
/// have.
static void explainPipeline(tsrt::PipelineScheduleOp schedule,
                            int64_t stateBytes, llvm::raw_ostream &os) {
  namespace sched = tsrt::schedule;
  sched::Shape shape{static_cast<int64_t>(schedule.getStages()),
                     static_cast<int64_t>(schedule.getVirtualStages()),
                     static_cast<int64_t>(schedule.getMicroBatches())};
  int64_t chunks = shape.numChunks();
  os << llvm::formatv("pipeline: {0} schedule, {1} stages x {2} virtual = {3} "
                      "chunks, {4} micro-batches per step, {5} layers "
                      "(points where a single activation crosses)\n",
                      schedule.getKind(), shape.stages, shape.virtualStages,
                      chunks, shape.microBatches,
                      schedule.getNumLayers().value_or(0));
  ArrayRef<int64_t> first, flops, bytes;
  if (auto a = schedule.getFirstLayerAttr())
    first = a.asArrayRef();
  if (auto a = schedule.getFlopsAttr())
    flops = a.asArrayRef();
  if (auto a = schedule.getParamBytesAttr())
    bytes = a.asArrayRef();
  os << "  chunk  stage  layers     param bytes/rank   FLOP/micro-batch/rank "
        "(fwd+bwd)\n";
  for (int64_t c = 0; c < chunks; ++c) {
    std::string layers = "?";
    if (!first.empty())
      layers = c + 1 < chunks
                   ? llvm::formatv("{0}-{1}", first[c], first[c + 1] - 1).str()
                   : llvm::formatv("{0}-{1}", first[c],
                                   schedule.getNumLayers().value_or(0) - 1)
                         .str();
    os << llvm::formatv(
        "  {0,5}  {1,5}  {2,-9}  {3,16}   {4,21}\n", c, shape.stageOfChunk(c),
        layers, bytes.empty() ? 0 : bytes[c], flops.empty() ? 0 : flops[c]);
  }
  if (!bytes.empty()) {
    int64_t total = 0;
    SmallVector<int64_t> perStage(shape.stages, 0);
    for (int64_t c = 0; c < chunks; ++c) {
      total += bytes[c];
      perStage[shape.stageOfChunk(c)] += bytes[c];
    }
    os << "  parameter + optimizer-state bytes per rank, by stage:";
    for (int64_t b : perStage)
      os << " " << (total ? stateBytes * b / total : 0);
    os << "\n";
  }
  int64_t sends = 0;
  schedule->getParentOp()->walk([&](tsrt::SendOp) { ++sends; });
  os << llvm::formatv("  point-to-point per micro-batch: {0} x tsrt.send + "
                      "tsrt.recv (activations forward, gradients backward)\n",
                      sends);
  for (auto [s, text] : llvm::enumerate(schedule.getActions()))
    os << "  stage " << s << ": " << cast<StringAttr>(text).getValue() << "\n";
  os << llvm::formatv("  predicted bubble fraction: (P - 1) / (V*M + P - 1) = "
                      "{0} / {1} = {2:F3}\n",
                      shape.stages - 1,
                      shape.virtualStages * shape.microBatches + shape.stages -
                          1,
                      sched::bubbleFraction(shape));
  if (FailureOr<double> simulated = tsrt::simulatedBubble(schedule);
      succeeded(simulated))
    os << llvm::formatv("  simulated bubble fraction (the FLOPs above, "
                        "backward = 2 x forward): {0:F3}\n",
                        *simulated);
}

/// ZeRO's model states per rank: fp32 parameters, reduced gradients and
/// optimizer state, against the paper's (2 + 2 + K)·Ψ / N_d accounting with
/// 4-byte parameters and gradients (Ψ = trainable elements per rank before
/// ZeRO, N_d = dp, K = 8 for AdamW's two moments, 0 for SGD).
static void explainZero(const json::Object &manifest, const json::Object &zero,
                        llvm::raw_ostream &os) {
  const json::Object &grid = *manifest.getObject("grid");
  const json::Array &axes = *grid.getArray("axes");
  const json::Array &shape = *grid.getArray("shape");
  int64_t stage = zero.getInteger("stage").value_or(0), dp = 1;
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].getAsString() == StringRef("dp"))
      dp = *shape[i].getAsInteger();
  llvm::StringSet<> replicated;
  if (const json::Array *names = zero.getArray("replicated"))
    for (const json::Value &n : *names)
      replicated.insert(*n.getAsString());
  auto numel = [](const json::Array &dims) {
    int64_t n = 1;
    for (const json::Value &d : dims)
      n *= *d.getAsInteger();
    return n;
  };
  // Elements per rank: parameters as stored, trainable ones before ZeRO
  // (psi), gradients after reduction, optimizer state as stored.
  int64_t params = 0, psi = 0, grads = 0, state = 0;
  for (const json::Value &v : *manifest.getArray("arguments")) {
    const json::Object &a = *v.getAsObject();
    StringRef role = *a.getString("role");
    int64_t local = numel(*a.getArray("local_shape"));
    if (role == "opt_state")
      state += local;
    if (role != "param" && role != "frozen")
      continue;
    params += local;
    if (role == "frozen")
      continue;
    bool sharded = dp > 1 && !replicated.contains(*a.getString("name"));
    int64_t full = sharded && stage == 3 ? local * dp : local;
    psi += full;
    grads += sharded && stage >= 2 ? full / dp : full;
  }
  if (dp == 1) {
    os << "ZeRO stage " << stage << ": no-op with dp = 1\n";
    return;
  }
  bool adamw = false;
  if (const json::Object *opt = manifest.getObject("optimizer"))
    adamw = opt->getString("name") == StringRef("adamw");
  int64_t k = adamw ? 8 : 0;
  double n = static_cast<double>(dp);
  double formula = stage >= 3   ? (4 + 4 + k) * psi / n
                   : stage == 2 ? 4 * psi + (4 + k) * psi / n
                   : stage == 1 ? (4 + 4) * psi + k * psi / n
                                : (4 + 4 + k) * psi;
  os << llvm::formatv("ZeRO stage {0} over dp={1}: per rank, parameters {2} + "
                      "gradients {3} + optimizer state {4} = {5} bytes\n",
                      stage, dp, 4 * params, 4 * grads, 4 * state,
                      4 * (params + grads + state));
  os << llvm::formatv("  (2+2+K)*Psi/N_d with 4-byte parameters and "
                      "gradients, K = {0}, Psi = {1}, N_d = {2}: {3:F0} bytes "
                      "(stage 0: {4})\n",
                      k, psi, dp, formula, (4 + 4 + k) * psi);
  if (!replicated.empty()) {
    os << "  kept dp-replicated (no dimension or sub-factor divisible by dp):";
    for (const json::Value &name : *zero.getArray("replicated"))
      os << " " << *name.getAsString();
    os << "\n";
  }
}

void artifact::explain(const json::Object &manifest, ModuleOp partitioned,
                       llvm::raw_ostream &os) {
  const json::Object &grid = *manifest.getObject("grid");
  const json::Array &axes = *grid.getArray("axes");
  const json::Array &shape = *grid.getArray("shape");
  int64_t ranks = 1;
  os << "grid:";
  for (size_t i = 0; i < axes.size(); ++i) {
    os << (i ? " x " : " ") << *axes[i].getAsString() << "="
       << *shape[i].getAsInteger();
    if (*axes[i].getAsString() != "mb") // micro-batches are not ranks
      ranks *= *shape[i].getAsInteger();
  }
  os << " (" << ranks << " ranks"
     << (manifest.getObject("pipeline") ? "; mb = micro-batches per step" : "")
     << ")\n";
  // The rank order, slowest first, with each axis's stride in world ranks
  // (consecutive ranks share a node, so stride-1 groups stay inside one).
  if (const json::Array *order = grid.getArray("rank_order")) {
    std::vector<int64_t> sizes;
    for (const json::Value &name : *order)
      for (size_t i = 0; i < axes.size(); ++i)
        if (axes[i].getAsString() == name.getAsString())
          sizes.push_back(*shape[i].getAsInteger());
    os << "rank order (slowest first):";
    int64_t stride = ranks;
    for (size_t i = 0; i < order->size() && i < sizes.size(); ++i) {
      stride /= sizes[i];
      os << (i ? ", " : " ") << *(*order)[i].getAsString() << " stride "
         << stride;
    }
    os << "\n";
    // The node mapping the plan promises (--cluster), or that it makes none.
    planner::RankOrderAxes layout;
    for (size_t i = 0; i < order->size() && i < sizes.size(); ++i) {
      layout.names.push_back((*order)[i].getAsString().value_or("").str());
      layout.sizes.push_back(sizes[i]);
    }
    os << "placement: "
       << planner::describeNodeMapping(
              layout, grid.getInteger("ranks_per_node").value_or(0))
       << "\n";
  }
  os << "batch: global " << *manifest.getInteger("global_batch")
     << " sequences x " << *manifest.getInteger("seq_len") << " tokens\n";
  os << "optimizer: " << json::Value(*manifest.get("optimizer")) << "\n";
  if (std::optional<StringRef> recompute = manifest.getString("recompute"))
    os << "activation recomputation: " << *recompute << "\n";
  if (std::optional<double> bucket = manifest.getNumber("bucket_mb"))
    os << llvm::formatv("gradient all-reduces: buckets of {0} MiB, started "
                        "non-blocking during backward\n",
                        *bucket);
  if (std::optional<double> clip = manifest.getNumber("clip_grad")) {
    char c[32];
    std::snprintf(c, sizeof(c), "%g", *clip);
    os << "gradient clipping: global L2 norm, coefficient min(1, " << c
       << " / (norm + 1e-6)); the norm is the \"grad_norm\" result\n";
  }
  if (std::optional<StringRef> precision = manifest.getString("precision"))
    os << "precision: " << *precision
       << (*precision == "fp32" ? ""
                                : " forward/backward and gradient all-reduce; "
                                  "fp32 master weights and optimizer state")
       << "\n";
  if (std::optional<double> scale = manifest.getNumber("loss_scale")) {
    char s[32];
    std::snprintf(s, sizeof(s), "%g", *scale);
    os << llvm::formatv("loss scale: {0} (static: the backward seed times "
                        "{0}, each gradient times 1/{0} in fp32 before its "
                        "update; an fp16 overflow is not skipped)\n",
                        s);
  }
  if (const json::Object *dyn = manifest.getObject("dynamic_loss_scale")) {
    char s[32], m[32];
    std::snprintf(s, sizeof(s), "%g", dyn->getNumber("initial").value_or(0));
    std::snprintf(m, sizeof(m), "%g", dyn->getNumber("min").value_or(0));
    os << llvm::formatv("loss scale: dynamic, initial {0}, x2 after {1} "
                        "clean steps, /2 (min {2}) and the step skipped when "
                        "a gradient is not finite on any rank\n",
                        s, dyn->getInteger("window").value_or(0), m);
  }
  if (const json::Object *sp = manifest.getObject("sequence_parallel")) {
    StringRef kind = sp->getString("kind").value_or("");
    int64_t size = sp->getInteger("size").value_or(1);
    if (kind == "megatron")
      os << llvm::formatv(
          "sequence parallelism: megatron over tp ({0}): LayerNorm, dropout "
          "and the residual stream hold S/{0} positions; TP's all-reduces "
          "are reduce-scatter + all-gather (Korthikanti et al. 2022)\n",
          size);
    else if (kind == "ulysses")
      os << llvm::formatv(
          "sequence parallelism: ulysses over sp ({0}): S/{0} positions per "
          "rank, all-to-all to heads/{0} around attention (DeepSpeed-Ulysses)"
          "\n",
          size);
    else if (kind == "ring")
      os << llvm::formatv(
          "sequence parallelism: ring attention over sp ({0}): S/{0} "
          "positions per rank, striped (position i*{0} + rank); K/V blocks "
          "rotate {0} - 1 times forward, softmax online, no S x S scores\n",
          size);
  }
  if (const json::Object *vocab = manifest.getObject("vocab_parallel")) {
    if (!vocab->getBoolean("enabled").value_or(false)) {
      os << "vocab parallelism: off (embedding and LM head replicated over "
            "tp: every tp rank computes the full logits)\n";
    } else {
      os << "vocab parallelism: on (split over tp along the vocabulary:";
      const json::Array *params = vocab->getArray("params");
      if (!params || params->empty())
        os << " none found";
      else
        for (const json::Value &n : *params)
          os << " " << *n.getAsString();
      os << "; masked lookup + all-reduce, cross-entropy all-reduces the row "
            "max and sum-exp, logits never gathered)\n";
    }
  }
  os << "parameters (global shape -> local shape, sharding per dim):\n";
  int64_t localBytes = 0, globalBytes = 0;
  for (const json::Value &v : *manifest.getArray("arguments")) {
    const json::Object &a = *v.getAsObject();
    StringRef role = *a.getString("role");
    auto numel = [](const json::Array &dims) {
      int64_t n = 1;
      for (const json::Value &d : dims)
        n *= *d.getAsInteger();
      return n;
    };
    if (role == "param" || role == "frozen" || role == "opt_state") {
      localBytes += 4 * numel(*a.getArray("local_shape"));
      globalBytes += 4 * numel(*a.getArray("shape"));
    }
    if (role == "opt_state")
      continue;
    os << llvm::formatv(
        "  {0,-48} {1,-8} {2} -> {3}  {4}\n", *a.getString("name"), role,
        json::Value(*a.get("shape")), json::Value(*a.get("local_shape")),
        layoutText(*a.getArray("layout"), axes));
  }
  bool pipelined = manifest.getObject("pipeline") != nullptr;
  os << llvm::formatv("parameter + optimizer-state bytes per rank{0}: {1} "
                      "(unsharded: {2})\n",
                      pipelined ? " before the pipeline split" : "", localBytes,
                      globalBytes);
  if (const json::Object *zero = manifest.getObject("zero")) {
    explainZero(manifest, *zero, os);
  } else if (!pipelined) {
    // Without ZeRO, the same accounting (stage 0) when there is a dp axis.
    bool dataParallel = false;
    for (size_t i = 0; i < axes.size(); ++i)
      dataParallel |= axes[i].getAsString() == StringRef("dp") &&
                      *shape[i].getAsInteger() > 1;
    if (dataParallel)
      explainZero(manifest, json::Object{{"stage", 0}}, os);
  }
  // Collectives of one step, by kind and grid axes.
  std::map<std::string, int64_t> counts;
  partitioned.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "shard" &&
        !isa<shard::GridOp>(op)) {
      std::string key = op->getName().getStringRef().str();
      if (auto attr = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes")) {
        key += " over ";
        for (auto [i, a] : llvm::enumerate(attr.asArrayRef()))
          key += (i ? "*" : "") + axes[a].getAsString()->str();
      }
      ++counts[key];
    }
  });
  os << "collectives per step:" << (counts.empty() ? " none" : "") << "\n";
  for (const auto &[key, n] : counts)
    os << "  " << n << " x " << key << "\n";
  explainShardingSearch(partitioned, os);
  for (auto schedule : partitioned.getOps<tsrt::PipelineScheduleOp>())
    explainPipeline(schedule, localBytes, os);
}

/// Copies an initial value (`tsr.init`) into a global-shape f32 tensor.
static FailureOr<runtime::Tensor> initTensor(func::FuncOp func, unsigned i,
                                             ArrayRef<int64_t> globalShape) {
  auto name = tsr::getArgName(func, i);
  Attribute init = func.getArgAttr(i, tsr::kInitAttrName);
  auto elements = dyn_cast_or_null<ElementsAttr>(init);
  if (!elements || !elements.getElementType().isF32())
    return func.emitError("parameter '")
           << name.getValue() << "' has no f32 tsr.init initial value";
  if (SmallVector<int64_t>(elements.getShapedType().getShape()) !=
      SmallVector<int64_t>(globalShape))
    return func.emitError("parameter '")
           << name.getValue() << "' initial value has shape "
           << elements.getShapedType() << " but the program expects "
           << globalShape.size() << "-d global shape";
  runtime::Tensor t = runtime::Tensor::empty(
      runtime::DType::F32,
      std::vector<int64_t>(globalShape.begin(), globalShape.end()));
  float *out = t.data<float>();
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(elements)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob || blob->getData().size() != static_cast<size_t>(t.numel()) * 4)
      return func.emitError("parameter '")
             << name.getValue() << "' initial value blob is missing or short";
    std::memcpy(out, blob->getData().data(), t.numel() * 4);
  } else {
    int64_t k = 0;
    for (float v : elements.getValues<float>())
      out[k++] = v;
  }
  return t;
}

/// The manifest's "eval" entry for the runtime program's @eval_step
/// (tsr-build-eval-step): {"function": "eval_step", "arguments": [the
/// @train_step argument index of each of its arguments, matched by tsrt.role
/// and tsrt.name], "result": the index of its loss result}. Null when the
/// program has no @eval_step (pipeline plans).
static FailureOr<json::Value> evalEntry(ModuleOp program,
                                        const json::Array &arguments) {
  auto eval = program.lookupSymbol<func::FuncOp>("eval_step");
  if (!eval)
    return json::Value(nullptr);
  json::Array indices;
  for (unsigned i = 0; i < eval.getNumArguments(); ++i) {
    auto role = eval.getArgAttrOfType<StringAttr>(i, "tsrt.role");
    auto name = eval.getArgAttrOfType<StringAttr>(i, "tsrt.name");
    std::optional<int64_t> index;
    for (const json::Value &arg : arguments) {
      const json::Object &a = *arg.getAsObject();
      if (role && name && a.getString("role") == role.getValue() &&
          a.getString("name") == name.getValue())
        index = a.getInteger("index");
    }
    if (!index)
      return eval.emitError("argument ")
             << i << " of @eval_step matches no argument of @train_step";
    indices.push_back(*index);
  }
  if (eval.getNumResults() != 1)
    return eval.emitError("@eval_step must return only the loss");
  return json::Value(json::Object{{"function", "eval_step"},
                                  {"arguments", std::move(indices)},
                                  {"result", 0}});
}

LogicalResult artifact::writeArtifact(ModuleOp partitioned,
                                      const planner::Plan &plan, StringRef path,
                                      StringRef dumpDir, unsigned dumpIndex,
                                      int64_t vocabSize) {
  auto manifest = buildManifest(partitioned, plan, vocabSize);
  if (failed(manifest))
    return failure();

  // Initial weights, global shape, in argument order.
  func::FuncOp func = findTrainStep(partitioned);
  std::vector<std::string> names;
  std::vector<runtime::Tensor> tensors;
  for (const json::Value &arg : *manifest->getArray("arguments")) {
    const json::Object &a = *arg.getAsObject();
    StringRef role = *a.getString("role");
    if (role != "param" && role != "frozen")
      continue;
    SmallVector<int64_t> shape;
    for (const json::Value &d : *a.getArray("shape"))
      shape.push_back(*d.getAsInteger());
    auto t = initTensor(func, *a.getInteger("index"), shape);
    if (failed(t))
      return failure();
    names.push_back(a.getString("name")->str());
    tensors.push_back(std::move(*t));
  }

  // The runtime program.
  FailureOr<OwningOpRef<ModuleOp>> lowered =
      lowerToRuntimeProgram(partitioned, plan, /*withEval=*/true);
  if (failed(lowered))
    return failure();
  OwningOpRef<ModuleOp> program = std::move(*lowered);
  (*manifest)["memory"] = memoryReport(*program);
  FailureOr<json::Value> eval =
      evalEntry(*program, *manifest->getArray("arguments"));
  if (failed(eval))
    return failure();
  if (eval->getAsObject())
    (*manifest)["eval"] = std::move(*eval);
  if (!dumpDir.empty()) {
    pipeline::Stage lower =
        pipeline::lowerToRuntimeStage(plan, /*withEval=*/true);
    pipeline::recordStage(dumpDir, dumpIndex, lower);
    if (failed(pipeline::dumpModule(*program, dumpDir, dumpIndex, lower.name)))
      return failure();
  }
  // What the program was compiled for, which the runtime checks the
  // manifest against (runtime/executor/Plan.h).
  OpBuilder b(program->getContext());
  (*program)->setAttr(
      "tsrt.compiled_for",
      b.getDictionaryAttr(
          {b.getNamedAttr("optimizer", b.getStringAttr(plan.optimizer.name)),
           b.getNamedAttr("precision", b.getStringAttr(plan.precision))}));
  std::string bytecode;
  llvm::raw_string_ostream os(bytecode);
  if (failed(writeBytecodeToFile(*program, os)))
    return partitioned.emitError("cannot serialise the runtime program");
  runtime::Tensor programBytes = runtime::Tensor::empty(
      runtime::DType::I1, {static_cast<int64_t>(bytecode.size())});
  std::memcpy(programBytes.raw(), bytecode.data(), bytecode.size());

  std::vector<runtime::NamedTensor> named;
  for (size_t i = 0; i < names.size(); ++i)
    named.emplace_back(names[i], &tensors[i]);
  named.emplace_back(kProgramTensor.str(), &programBytes);
  std::string manifestText;
  llvm::raw_string_ostream ms(manifestText);
  ms << json::Value(std::move(*manifest));
  std::map<std::string, std::string> metadata{
      {"tessera.manifest", manifestText}};
  if (llvm::Error err = runtime::writeSafeTensors(path, named, metadata,
                                                  {kProgramTensor.str()}))
    return partitioned.emitError("cannot write '")
           << path << "': " << llvm::toString(std::move(err));
  return success();
}

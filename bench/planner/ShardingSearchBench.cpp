//===- ShardingSearchBench.cpp - speed of the tp sharding search ----------===//
//
// tessera-sharding-search-bench MODEL.onnx [--tp 8] [--vocab V] [--limit 1]
//
// Imports MODEL (weights not needed), builds its training step
// (tsr-build-train-step, the pipeline's first stage), builds the sharding
// search's graph of @train_step (sharding::buildSearchGraph, timed) and
// times planner::searchShardings at --tp (best of --repeat runs). With
// --vocab V, the parameters with a dimension of V (the token embedding's
// rows, the LM head's vocabulary) are pinned split along it, as
// tsr-sharding-annotate's vocabulary parallelism pins them.
//
// Prints: layers, distinct layers, graph-building seconds, search seconds,
// the predicted tp all-reduces of one block (the layers from the second
// tsr.attention to the third; forward + backward) and of the whole step.
// Exit status 1 when the search takes --limit seconds or more (issue 22:
// under 1 s for GPT-3 175B at tp 8), 2 on a usage or import error.
//
//===----------------------------------------------------------------------===//

#include "compiler/import/OnnxImporter.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/planner/ShardingSearch.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/sharding/SearchGraph.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>

using namespace mlir;
using namespace tessera;
namespace cl = llvm::cl;

static cl::opt<std::string> inputPath(cl::Positional, cl::desc("MODEL.onnx"),
                                      cl::Required);
static cl::opt<int64_t> tp("tp", cl::desc("tensor-parallel degree"),
                           cl::init(8));
static cl::opt<int64_t>
    vocab("vocab",
          cl::desc("pin the parameters with a dimension of this size split "
                   "along it (vocabulary parallelism); 0: pin nothing"),
          cl::init(0));
static cl::opt<double> limit("limit",
                             cl::desc("seconds the search must stay under"),
                             cl::init(1.0));
static cl::opt<int> repeat("repeat", cl::desc("searches timed (best kept)"),
                           cl::init(3));

static cl::opt<bool> prune(
    "prune",
    cl::desc("drop the ops that read no parameter, token or activation (the "
             "optimizer's step counter increment) before searching: a "
             "workaround for the chain breaking on them"),
    cl::init(false));

/// Drops the ops of `g` whose operands are all constants (or results of
/// dropped ops); their results become constants nobody reads.
static int pruneDisconnected(planner::SearchGraph &g) {
  using Kind = planner::SearchGraph::Kind;
  std::vector<planner::SearchGraph::Op> kept;
  std::vector<int> newIndex(g.ops.size(), -1);
  for (auto [i, op] : llvm::enumerate(g.ops)) {
    bool connected = llvm::any_of(op.operands, [&](int t) {
      return g.tensors[t].kind != Kind::Constant;
    });
    if (!connected) {
      for (int t : op.results) {
        g.tensors[t].kind = Kind::Constant;
        g.tensors[t].producer = -1;
        g.tensors[t].differentiable = false;
      }
      continue;
    }
    newIndex[i] = static_cast<int>(kept.size());
    kept.push_back(op);
  }
  int dropped = static_cast<int>(g.ops.size() - kept.size());
  for (planner::SearchGraph::Tensor &t : g.tensors)
    if (t.producer >= 0)
      t.producer = newIndex[t.producer];
  g.ops = std::move(kept);
  return dropped;
}

static double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// Why the layers of `g` would not form a chain for the search's dynamic
/// program (ShardingSearch.cpp's chainOf rules: one activation crossing
/// each cut, read only by the next layer; a parameter read by one layer):
/// prints the first few tensors that break it.
static void chainReport(const planner::SearchGraph &g) {
  std::vector<int> layerOf(g.ops.size(), 0);
  for (size_t i = 1; i < g.ops.size(); ++i)
    layerOf[i] = layerOf[i - 1] + (g.ops[i].layer != g.ops[i - 1].layer);
  int layers = g.ops.empty() ? 0 : layerOf.back() + 1;
  std::vector<std::vector<std::pair<int, unsigned>>> uses(g.tensors.size());
  for (auto [i, op] : llvm::enumerate(g.ops))
    for (int t : op.operands)
      uses[t].push_back({static_cast<int>(i), 0});
  std::vector<int> boundary(std::max(0, layers - 1), -1);
  int reported = 0;
  auto report = [&](const llvm::Twine &msg) {
    if (reported++ < 5)
      llvm::outs() << "  chain broken: " << msg << "\n";
  };
  for (auto [t, tensor] : llvm::enumerate(g.tensors)) {
    if (uses[t].empty())
      continue;
    if (tensor.kind == planner::SearchGraph::Kind::Activation) {
      int from = layerOf[tensor.producer];
      for (auto [op, k] : uses[t]) {
        int to = layerOf[op];
        if (to == from)
          continue;
        if (to != from + 1) {
          report(llvm::formatv("'{0}' ({1}) made in layer {2} is read in "
                               "layer {3} by {4}",
                               tensor.name, g.ops[tensor.producer].name, from,
                               to, g.ops[op].name));
          break;
        }
        if (boundary[from] >= 0 && boundary[from] != static_cast<int>(t)) {
          report(llvm::formatv("'{0}' and '{1}' both cross cut {2}",
                               g.tensors[boundary[from]].name, tensor.name,
                               from));
          break;
        }
        boundary[from] = static_cast<int>(t);
      }
    } else if (tensor.kind == planner::SearchGraph::Kind::Parameter &&
               !tensor.pinned) {
      for (auto [op, k] : uses[t])
        if (layerOf[op] != layerOf[uses[t][0].first]) {
          report(llvm::formatv("parameter '{0}' is read in layers {1} and {2}",
                               tensor.name, layerOf[uses[t][0].first],
                               layerOf[op]));
          break;
        }
    }
  }
  for (auto [c, t] : llvm::enumerate(boundary))
    if (t < 0) {
      std::string first, last;
      for (auto [i, op] : llvm::enumerate(g.ops)) {
        if (layerOf[i] == static_cast<int>(c))
          last = op.name + " at " + op.where;
        if (first.empty() && layerOf[i] == static_cast<int>(c) + 1)
          first = op.name + " at " + op.where;
      }
      report(llvm::formatv("no activation crosses cut {0} (after {1}, "
                           "before {2})",
                           c, last, first));
    }
  llvm::outs() << "  forward layers (training::assignLayers): " << layers
               << "\n";
  if (reported > 5)
    llvm::outs() << "  chain broken: ... " << reported - 5 << " more\n";
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "speed of the tp sharding search (issue 22)\n");
  auto fail = [](const llvm::Twine &msg) {
    llvm::errs() << "tessera-sharding-search-bench: error: " << msg << "\n";
    return 2;
  };

  MLIRContext context;
  context.loadDialect<tsr::TsrDialect, tsrt::TsrtDialect, func::FuncDialect,
                      shard::ShardDialect>();
  auto start = std::chrono::steady_clock::now();
  import::ImportOptions importOptions;
  OwningOpRef<ModuleOp> module =
      import::importOnnxFile(inputPath, context, importOptions);
  if (!module)
    return 2;
  double importSeconds = since(start);

  start = std::chrono::steady_clock::now();
  std::vector<pipeline::Stage> stages =
      pipeline::partitionStages(planner::Plan());
  stages.resize(1); // tsr-build-train-step
  if (failed(pipeline::runStages(*module, stages, "")))
    return fail("building the training step of '" + inputPath + "' failed");
  double trainSeconds = since(start);
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return fail("no @train_step after tsr-build-train-step");

  start = std::chrono::steady_clock::now();
  sharding::ExtractedGraph eg = sharding::buildSearchGraph(step);
  double graphSeconds = since(start);
  planner::SearchGraph &g = eg.graph;
  int pinned = 0;
  if (vocab > 0)
    for (planner::SearchGraph::Tensor &t : g.tensors) {
      if (t.kind != planner::SearchGraph::Kind::Parameter)
        continue;
      auto at = llvm::find(t.shape, vocab.getValue());
      if (at == t.shape.end())
        continue;
      t.pinned =
          planner::TpLayout{static_cast<int>(at - t.shape.begin()), 1, false};
      ++pinned;
    }
  if (prune)
    llvm::outs() << "  --prune: dropped " << pruneDisconnected(g)
                 << " ops that read only constants\n";
  chainReport(g);
  llvm::outs().flush();
  int mustSplit = 0;
  for (const planner::SearchGraph::Tensor &t : g.tensors)
    mustSplit += t.mustSplit;

  planner::ShardingSearchOptions options;
  options.tp = tp;
  std::optional<planner::ShardingSearchResult> result;
  double best = 1e30;
  for (int i = 0; i < std::max(1, repeat.getValue()); ++i) {
    start = std::chrono::steady_clock::now();
    auto r = planner::searchShardings(g, options);
    double seconds = since(start);
    if (!r)
      return fail(llvm::toString(r.takeError()));
    best = std::min(best, seconds);
    result = std::move(*r);
  }

  // Chain layer of each op (PredictedCollective::layer counts layer changes
  // in program order), and the layers of one block: from the second
  // attention's layer to the third's.
  std::vector<int> chainLayer(g.ops.size(), 0);
  for (size_t i = 1; i < g.ops.size(); ++i)
    chainLayer[i] =
        chainLayer[i - 1] + (g.ops[i].layer != g.ops[i - 1].layer ? 1 : 0);
  std::vector<int> attentionLayers;
  for (auto [i, op] : llvm::enumerate(g.ops))
    if (op.name == tsr::AttentionOp::getOperationName() &&
        !llvm::is_contained(attentionLayers, chainLayer[i]))
      attentionLayers.push_back(chainLayer[i]);
  int blockFwd = 0, blockBwd = 0, allFwd = 0, allBwd = 0, others = 0;
  double blockBytes = 0;
  bool haveBlock = attentionLayers.size() >= 3;
  for (const planner::PredictedCollective &c : result->collectives) {
    if (c.kind != "all_reduce") {
      ++others;
      continue;
    }
    (c.backward ? allBwd : allFwd)++;
    if (haveBlock && c.layer >= attentionLayers[1] &&
        c.layer < attentionLayers[2]) {
      (c.backward ? blockBwd : blockFwd)++;
      blockBytes += c.bytes;
    }
  }

  llvm::outs() << llvm::formatv(
      "{0}: {1} ops, {2} tensors, {3} must-split weights, {4} pinned; "
      "{5} attentions\n",
      inputPath, g.ops.size(), g.tensors.size(), mustSplit, pinned,
      attentionLayers.size());
  llvm::outs() << llvm::formatv(
      "  import {0:F2} s, build train step {1:F2} s, build search graph "
      "{2:F3} s\n",
      importSeconds, trainSeconds, graphSeconds);
  llvm::outs() << llvm::formatv(
      "  tp {0}: {1} layers, {2} distinct; search {3:F3} s (best of {4}; "
      "limit {5:F1} s)\n",
      tp.getValue(), result->layers, result->distinctLayers, best,
      repeat.getValue(), limit.getValue());
  if (haveBlock)
    llvm::outs() << llvm::formatv(
        "  per block: {0} tp all-reduces ({1} forward, {2} backward), "
        "{3} bytes per rank\n",
        blockFwd + blockBwd, blockFwd, blockBwd,
        static_cast<int64_t>(blockBytes));
  else
    llvm::outs() << "  per block: fewer than 3 attentions, not counted\n";
  llvm::outs() << llvm::formatv(
      "  step: {0} all-reduces ({1} forward, {2} backward), {3} other "
      "collectives, {4} bytes per rank, predicted {5:F3} s; {6} must-split "
      "left whole ({7} exempt, {8} unsplittable)\n",
      allFwd + allBwd, allFwd, allBwd, others,
      static_cast<int64_t>(result->bytes), result->seconds,
      result->exempt.size() + result->unsplittable.size(),
      result->exempt.size(), result->unsplittable.size());
  bool ok = best < limit;
  llvm::outs() << (ok ? "  ok\n" : "  FAIL: the search is over the limit\n");
  return ok ? 0 : 1;
}

//===- SearchReport.cpp - explaining the plan search ----------------------===//

#include "compiler/planner/SearchReport.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Format.h"

#include <algorithm>

using namespace tessera::planner;
using llvm::format;

static std::string ms(double seconds) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (seconds >= 1)
    os << format("%.3f s", seconds);
  else
    os << format("%.3f ms", seconds * 1e3);
  return out;
}

static std::string formatParams(double n) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (n >= 1e9)
    os << format("%.1fB", n / 1e9);
  else if (n >= 1e6)
    os << format("%.1fM", n / 1e6);
  else
    os << format("%.0f", n);
  return out;
}

void tessera::planner::explainSearch(const SearchResult &result,
                                     const TransformerShape &shape,
                                     const Cluster &cluster,
                                     const SearchOptions &options,
                                     llvm::raw_ostream &os) {
  os << "plan search: " << shape.layers << " layers, hidden " << shape.hidden
     << ", " << shape.heads << " heads, FFN " << shape.ffn << ", sequence "
     << shape.seq << ", vocabulary " << shape.vocab << ", global batch "
     << shape.globalBatch << " (" << formatParams(shape.params())
     << " parameters), " << options.cost.precision << ", "
     << options.cost.optimizer << "\n";
  os << "  on " << options.devices << " of " << cluster.devices()
     << " devices of " << cluster.name << " (" << cluster.devicesPerNode
     << " per node, "
     << formatGB(options.memoryBytes > 0 ? options.memoryBytes
                                         : cluster.memoryBytes)
     << " each); rank order";
  for (const std::string &axis : options.cost.rankOrder)
    os << " " << axis;
  os << " (last fastest, inside a node first)\n";
  os << "  " << result.considered << " plans considered, " << result.feasible
     << " fit, searched in " << format("%.3f", result.seconds) << " s\n";
  if (result.best.empty()) {
    os << "no plan fits; rejected:\n";
  } else {
    const ScoredPlan &best = result.best.front();
    const Prediction &p = best.prediction;
    os << "chosen plan: " << best.candidate.str();
    if (!best.unsupported.empty())
      os << "  [not runnable: " << best.unsupported << "]";
    os << "\n";
    os << "  predicted step " << ms(p.stepSeconds) << " = compute "
       << ms(p.computeSeconds) << " + exposed communication "
       << ms(p.communicationSeconds) << " + pipeline bubble "
       << ms(p.bubbleSeconds) << " + optimizer " << ms(p.optimizerSeconds)
       << "\n";
    os << "  MFU " << format("%.1f", p.mfu * 100) << "%, achieved "
       << format("%.1f", p.achievedFlopsPerDevice / 1e12)
       << " TFLOP/s per device (recomputation counted)\n";
    os << "  memory per rank " << formatGB(p.memory.total()) << ": parameters "
       << formatGB(p.memory.parameters) << ", gradients "
       << formatGB(p.memory.gradients) << ", optimizer state "
       << formatGB(p.memory.optimizerState) << ", activations "
       << formatGB(p.memory.activations) << "\n";
    if (!p.collectives.empty()) {
      os << "  collectives per step (nccl-tests sizes):\n";
      os << format("    %-15s %-4s %14s %10s %12s %12s  %s\n", "kind", "axis",
                   "bytes/call", "calls", "total", "exposed", "link");
      for (const CollectiveUse &u : p.collectives)
        os << format("    %-15s %-4s %14.0f %10.0f %12s %12s  %s\n",
                     collectiveName(u.kind).str().c_str(), u.axis.c_str(),
                     u.bytes, u.count, ms(u.seconds).c_str(),
                     ms(u.exposedSeconds).c_str(),
                     u.withinNode ? "node-local" : "network");
    }
    if (result.best.size() > 1) {
      os << "runners-up:\n";
      for (size_t i = 1; i < std::min<size_t>(result.best.size(), 6); ++i) {
        const ScoredPlan &alt = result.best[i];
        os << format("  %zu. ", i) << alt.candidate.str() << ": step "
           << ms(alt.prediction.stepSeconds) << " ("
           << format("%+.1f%%",
                     100 * (alt.prediction.stepSeconds / p.stepSeconds - 1))
           << "), memory " << formatGB(alt.prediction.memory.total());
        if (!alt.unsupported.empty())
          os << "  [not runnable: " << alt.unsupported << "]";
        os << "\n";
      }
    }
    if (!result.rejected.empty())
      os << "rejected:\n";
  }
  size_t shown = 0;
  for (const RejectedRegion &r : result.rejected) {
    if (++shown > 12) {
      os << "  ... " << result.rejected.size() - 12 << " more regions\n";
      break;
    }
    os << "  [" << r.kind << "] ";
    const char *plans = r.count == 1 ? " plan" : " plans";
    if (r.kind == "memory")
      os << r.region << " (" << r.count << plans << "): " << r.reason << "\n";
    else
      os << r.reason << " (" << r.count << plans << ")\n";
  }
}

llvm::json::Object tessera::planner::toJSON(const Candidate &c) {
  return llvm::json::Object{
      {"dp", c.dp},
      {"tp", c.tp},
      {"pp", c.pp},
      {"virtual_stages", c.virtualStages},
      {"schedule", c.virtualStages > 1 ? "interleaved" : c.schedule},
      {"micro_batch_size", c.microBatchSize},
      {"sp", c.sp},
      {"sp_size", c.seqRanks()},
      {"zero", c.zero},
      {"recompute", c.recompute},
      {"ranks", c.ranks()},
      {"flags", c.str()}};
}

llvm::json::Object tessera::planner::toJSON(const Prediction &p) {
  llvm::json::Array collectives;
  for (const CollectiveUse &u : p.collectives)
    collectives.push_back(
        llvm::json::Object{{"kind", collectiveName(u.kind)},
                           {"axis", u.axis},
                           {"bytes_per_call", u.bytes},
                           {"calls", u.count},
                           {"bytes", u.bytes * u.count},
                           {"seconds", u.seconds},
                           {"exposed_seconds", u.exposedSeconds},
                           {"link", u.withinNode ? "node-local" : "network"}});
  return llvm::json::Object{
      {"step_seconds", p.stepSeconds},
      {"compute_seconds", p.computeSeconds},
      {"communication_seconds", p.communicationSeconds},
      {"bubble_seconds", p.bubbleSeconds},
      {"optimizer_seconds", p.optimizerSeconds},
      {"model_flops", p.modelFlops},
      {"hardware_flops", p.hardwareFlops},
      {"mfu", p.mfu},
      {"achieved_flops_per_device", p.achievedFlopsPerDevice},
      {"memory_bytes",
       llvm::json::Object{{"parameters", p.memory.parameters},
                          {"gradients", p.memory.gradients},
                          {"optimizer_state", p.memory.optimizerState},
                          {"activations", p.memory.activations},
                          {"total", p.memory.total()}}},
      {"collectives", std::move(collectives)}};
}

llvm::json::Value tessera::planner::searchToJSON(const SearchResult &result,
                                                 const TransformerShape &shape,
                                                 const Cluster &cluster,
                                                 const SearchOptions &options) {
  llvm::json::Array plans;
  for (const ScoredPlan &sp : llvm::ArrayRef(result.best).take_front(6)) {
    llvm::json::Object o = toJSON(sp.candidate);
    o["prediction"] = toJSON(sp.prediction);
    o["runnable"] = sp.unsupported.empty();
    if (!sp.unsupported.empty())
      o["not_runnable"] = sp.unsupported;
    plans.push_back(std::move(o));
  }
  llvm::json::Array rejected;
  for (const RejectedRegion &r : result.rejected)
    rejected.push_back(llvm::json::Object{{"kind", r.kind},
                                          {"region", r.region},
                                          {"reason", r.reason},
                                          {"plans", r.count},
                                          {"excess_bytes", r.excessBytes}});
  llvm::json::Array order;
  for (const std::string &axis : options.cost.rankOrder)
    order.push_back(axis);
  return llvm::json::Object{
      {"model", llvm::json::Object{{"layers", shape.layers},
                                   {"hidden", shape.hidden},
                                   {"heads", shape.heads},
                                   {"ffn", shape.ffn},
                                   {"seq", shape.seq},
                                   {"vocab", shape.vocab},
                                   {"global_batch", shape.globalBatch},
                                   {"params", shape.params()}}},
      {"cluster", cluster.name},
      {"devices", options.devices},
      {"precision", options.cost.precision},
      {"rank_order", std::move(order)},
      {"considered", result.considered},
      {"feasible", result.feasible},
      {"search_seconds", result.seconds},
      {"chosen", result.best.empty() ? llvm::json::Value(nullptr)
                                     : llvm::json::Value(plans.front())},
      {"plans", std::move(plans)},
      {"rejected", std::move(rejected)}};
}

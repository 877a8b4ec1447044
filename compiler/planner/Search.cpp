//===- Search.cpp - the parallel-plan search ------------------------------===//

#include "compiler/planner/Search.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

using namespace tessera::planner;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string tessera::planner::formatGB(double bytes) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (bytes >= 1e9 || bytes == 0)
    os << llvm::format("%.1f GB", bytes / 1e9);
  else if (bytes >= 1e6)
    os << llvm::format("%.1f MB", bytes / 1e6);
  else if (bytes >= 1e3)
    os << llvm::format("%.1f kB", bytes / 1e3);
  else
    os << llvm::format("%.0f B", bytes);
  return out;
}

/// Divisors of n in increasing order.
static std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      out.push_back(i);
      if (i != n / i)
        out.push_back(n / i);
    }
  llvm::sort(out);
  return out;
}

/// `all` restricted to the pinned value (which must be in it, else empty).
static std::vector<int64_t> pinned(std::vector<int64_t> all,
                                   const std::optional<int64_t> &pin) {
  if (!pin)
    return all;
  return llvm::is_contained(all, *pin) ? std::vector<int64_t>{*pin}
                                       : std::vector<int64_t>{};
}

namespace {
struct Collector {
  std::map<std::string, RejectedRegion> regions;
  /// Memory regions where some plan fits: not rejected as a whole.
  std::set<std::string> fitting;

  void add(llvm::StringRef kind, const std::string &region,
           const std::string &reason, double excess = 0,
           int64_t modelParallel = 0) {
    std::string key = (kind + "|" + region).str();
    auto [it, inserted] = regions.try_emplace(key);
    RejectedRegion &r = it->second;
    if (inserted) {
      r.kind = kind.str();
      r.region = region;
      r.reason = reason;
      r.excessBytes = excess;
      r.modelParallel = modelParallel;
    } else if (kind == "memory" && excess < r.excessBytes) {
      r.reason = reason;
      r.excessBytes = excess;
    }
    ++r.count;
  }
};
} // namespace

llvm::Expected<SearchResult>
tessera::planner::searchPlans(const TransformerShape &shape,
                              const Cluster &cluster,
                              const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  if (llvm::Error err = shape.validate())
    return std::move(err);
  int64_t n = options.devices;
  if (n < 1)
    return fail("--devices must be >= 1, got " + llvm::Twine(n));
  if (n > cluster.devices())
    return fail("--devices " + llvm::Twine(n) + " is more than cluster '" +
                cluster.name + "' has (" + llvm::Twine(cluster.devices()) +
                ")");
  if (!cluster.peakFlops.count(options.cost.precision))
    return fail("cluster '" + cluster.name + "' has no peak FLOP/s for " +
                options.cost.precision);
  const Pins &pin = options.pins;
  for (auto [name, v] :
       {std::pair{"dp", pin.dp}, std::pair{"tp", pin.tp},
        std::pair{"pp", pin.pp}, std::pair{"sp-size", pin.spSize},
        std::pair{"micro-batch size", pin.microBatchSize},
        std::pair{"micro-batches", pin.microBatches},
        std::pair{"virtual stages", pin.virtualStages}})
    if (v && *v < 1)
      return fail(llvm::Twine("pinned ") + name + " must be >= 1, got " +
                  llvm::Twine(*v));
  if (pin.zero && (*pin.zero < 0 || *pin.zero > 3))
    return fail("pinned ZeRO stage must be 0..3, got " +
                llvm::Twine(*pin.zero));
  if (pin.sp &&
      !llvm::is_contained({"none", "megatron", "ulysses", "ring"}, *pin.sp))
    return fail("pinned sp must be none, megatron, ulysses or ring, got '" +
                *pin.sp + "'");
  if (pin.recompute &&
      !llvm::is_contained({"none", "selective", "full"}, *pin.recompute))
    return fail("pinned recompute must be none, selective or full, got '" +
                *pin.recompute + "'");
  if (pin.schedule && !llvm::is_contained({"gpipe", "1f1b"}, *pin.schedule))
    return fail("pinned schedule must be gpipe or 1f1b, got '" + *pin.schedule +
                "'");
  double memoryLimit =
      options.memoryBytes > 0 ? options.memoryBytes : cluster.memoryBytes;

  std::vector<std::string> spKinds = {"none", "megatron", "ulysses", "ring"};
  if (pin.sp)
    spKinds = {*pin.sp};
  std::vector<std::string> recomputes = {"none", "selective", "full"};
  if (pin.recompute)
    recomputes = {*pin.recompute};
  std::vector<int64_t> zeros = pinned({0, 1, 2, 3}, pin.zero);

  SearchResult result;
  Collector rejected;
  std::vector<ScoredPlan> feasible;
  auto consider = [&](Candidate c) {
    ++result.considered;
    if (std::string why = divisibilityProblem(shape, c); !why.empty()) {
      rejected.add("divisibility", why, why);
      return;
    }
    std::string unsupported;
    if (options.unsupported)
      if (std::string why = options.unsupported(c); !why.empty()) {
        if (!options.scoreUnsupported) {
          rejected.add("unsupported", why, why);
          return;
        }
        unsupported = std::move(why);
      }
    double need = predictMemory(shape, c, options.cost).total();
    std::string region;
    llvm::raw_string_ostream os(region);
    os << "tp=" << c.tp << " pp=" << c.pp;
    if (c.sp != "none")
      os << " sp=" << c.sp;
    if (c.seqRanks() > 1)
      os << " sp-size=" << c.spSize;
    os << " zero=" << c.zero;
    if (need <= memoryLimit)
      rejected.fitting.insert(region);
    if (need > memoryLimit) {
      std::string reason = "out of memory by " + formatGB(need - memoryLimit) +
                           ": needs " + formatGB(need) + " of " +
                           formatGB(memoryLimit) + " (best: " + c.str() + ")";
      rejected.add("memory", region, reason, need - memoryLimit,
                   c.tp * c.pp * c.seqRanks() * 4 + c.zero);
      return;
    }
    llvm::Expected<Prediction> pred = predict(shape, c, cluster, options.cost);
    if (!pred) {
      std::string why = llvm::toString(pred.takeError());
      rejected.add("unsupported", why, why);
      return;
    }
    ++result.feasible;
    feasible.push_back(
        {std::move(c), std::move(*pred), std::move(unsupported)});
  };

  // Whole subtrees that cannot divide the shapes are rejected once, as one
  // region, where their first knob is chosen.
  auto reject = [&](const std::string &why) {
    rejected.add("divisibility", why, why);
  };
  for (int64_t tp : pinned(divisors(n), pin.tp)) {
    if (shape.heads % tp != 0) {
      reject("tp=" + std::to_string(tp) + " does not divide the " +
             std::to_string(shape.heads) + " heads");
      continue;
    }
    if (shape.keyValueHeads() % tp != 0) {
      reject("tp=" + std::to_string(tp) + " does not divide the " +
             std::to_string(shape.keyValueHeads()) +
             " key/value heads (grouped-query attention)");
      continue;
    }
    if (shape.ffn % tp != 0) {
      reject("tp=" + std::to_string(tp) + " does not divide the FFN width " +
             std::to_string(shape.ffn));
      continue;
    }
    for (int64_t pp : pinned(divisors(n / tp), pin.pp)) {
      if (shape.layers % pp != 0) {
        reject("pp=" + std::to_string(pp) + " does not divide the " +
               std::to_string(shape.layers) + " layers");
        continue;
      }
      for (const std::string &sp : spKinds) {
        if (sp == "megatron" && tp < 2)
          continue;
        if (sp == "megatron" && shape.seq % tp != 0) {
          reject("sp=megatron: tp=" + std::to_string(tp) +
                 " does not divide the sequence length " +
                 std::to_string(shape.seq));
          continue;
        }
        std::vector<int64_t> spSizes = {1};
        if (sp == "ulysses" || sp == "ring") {
          spSizes.clear();
          for (int64_t k : divisors(n / (tp * pp)))
            if (k > 1)
              spSizes.push_back(k);
        }
        for (int64_t k : pinned(spSizes, pin.spSize)) {
          if (shape.seq % k != 0) {
            reject("sp-size=" + std::to_string(k) +
                   " does not divide the sequence length " +
                   std::to_string(shape.seq));
            continue;
          }
          if (sp == "ulysses" && shape.keyValueHeads() % (tp * k) != 0) {
            reject("sp=ulysses: tp x sp-size = " + std::to_string(tp * k) +
                   " does not divide the " +
                   std::to_string(shape.keyValueHeads()) +
                   (shape.keyValueHeads() == shape.heads
                        ? " heads"
                        : " key/value heads (grouped-query attention)"));
            continue;
          }
          int64_t dp = n / (tp * pp * k);
          if (pin.dp && *pin.dp != dp)
            continue;
          if (shape.globalBatch % dp != 0) {
            reject("dp=" + std::to_string(dp) +
                   " does not divide the global batch " +
                   std::to_string(shape.globalBatch));
            continue;
          }
          std::vector<int64_t> vs = {1};
          if (pp > 1)
            vs = divisors(shape.layers / pp);
          for (int64_t mbs :
               pinned(divisors(shape.globalBatch / dp), pin.microBatchSize))
            for (int64_t v : pinned(vs, pin.virtualStages)) {
              int64_t m = shape.globalBatch / (dp * mbs);
              if (pin.microBatches && m != *pin.microBatches)
                continue;
              // Megatron-LM's interleaved schedule needs M a multiple of pp.
              if (v > 1 && m % pp != 0)
                continue;
              for (int64_t zero : zeros)
                for (const std::string &rc : recomputes) {
                  if (zero > 0 && dp == 1 && !pin.zero)
                    continue; // ZeRO without dp is plain dp
                  Candidate c;
                  c.dp = dp;
                  c.tp = tp;
                  c.pp = pp;
                  c.sp = sp;
                  c.spSize = k;
                  c.zero = zero;
                  c.microBatchSize = mbs;
                  c.virtualStages = v;
                  c.recompute = rc;
                  c.schedule = pin.schedule.value_or("1f1b");
                  c.overlapGradients = options.overlapGradients;
                  consider(std::move(c));
                }
            }
        }
      }
    }
  }

  // Fastest first. Step times within 0.1% of each other are a tie (below
  // the model's resolution), broken by fewer moving parts, then memory.
  auto bucket = [](const ScoredPlan &p) {
    return int64_t(
        std::floor(std::log(p.prediction.stepSeconds) / std::log(1.001)));
  };
  auto moving = [](const Candidate &c) {
    return (c.recompute == "none"        ? 0
            : c.recompute == "selective" ? 1
                                         : 2) +
           (c.sp != "none") + c.zero + (c.pp > 1) + (c.virtualStages > 1);
  };
  llvm::stable_sort(feasible, [&](const ScoredPlan &a, const ScoredPlan &b) {
    return std::tuple(bucket(a), moving(a.candidate),
                      a.prediction.memory.total()) <
           std::tuple(bucket(b), moving(b.candidate),
                      b.prediction.memory.total());
  });
  if (feasible.size() > options.keep)
    feasible.resize(options.keep);
  result.best = std::move(feasible);
  for (auto &[key, region] : rejected.regions)
    if (region.kind != "memory" || !rejected.fitting.count(region.region))
      result.rejected.push_back(region);
  // Memory regions first, the simplest (least model parallelism, lowest
  // ZeRO stage) first: they answer "why not plain data parallelism?". Then
  // the rest, largest first.
  llvm::stable_sort(result.rejected,
                    [](const RejectedRegion &a, const RejectedRegion &b) {
                      if ((a.kind == "memory") != (b.kind == "memory"))
                        return a.kind == "memory";
                      if (a.kind == "memory")
                        return std::pair(a.modelParallel, a.excessBytes) <
                               std::pair(b.modelParallel, b.excessBytes);
                      return a.count > b.count;
                    });
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

Plan tessera::planner::planOf(const Candidate &c, const TransformerShape &shape,
                              Plan base) {
  base.dp = c.dp;
  base.tp = c.tp;
  base.pp = c.pp;
  base.microBatches = c.microBatches(shape);
  base.virtualStages = c.virtualStages;
  base.schedule = c.virtualStages > 1 ? "interleaved" : c.schedule;
  base.sp = c.sp;
  base.spSize = c.seqRanks() > 1 ? c.spSize : 1;
  base.zero = c.zero;
  base.recompute = c.recompute;
  return base;
}

Pins tessera::planner::pinsOf(const Plan &plan,
                              llvm::function_ref<bool(llvm::StringRef)> given) {
  Pins pins;
  auto pin = [&](llvm::StringRef flag, auto &field, const auto &value) {
    if (given(flag))
      field = value;
  };
  pin("dp", pins.dp, plan.dp);
  pin("tp", pins.tp, plan.tp);
  pin("pp", pins.pp, plan.pp);
  pin("micro-batches", pins.microBatches, plan.microBatches);
  pin("virtual-stages", pins.virtualStages, plan.virtualStages);
  if (plan.schedule != "interleaved")
    pin("schedule", pins.schedule, plan.schedule);
  pin("sp", pins.sp, plan.sp);
  pin("sp-size", pins.spSize, plan.spSize);
  pin("zero", pins.zero, plan.zero);
  pin("recompute", pins.recompute, plan.recompute);
  return pins;
}

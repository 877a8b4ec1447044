//===- SearchTest.cpp - the plan search -----------------------------------===//

#include "compiler/planner/Search.h"
#include "compiler/planner/SearchReport.h"

#include <gtest/gtest.h>

using namespace tessera::planner;

namespace {

/// The 18.4B GPT of Narayanan et al. 2021 (40 layers, h = 6144, 48 heads),
/// batch 512.
TransformerShape gpt18b() {
  return TransformerShape::gpt(40, 6144, 48, 2048, 51200, 512);
}

SearchResult search(const TransformerShape &shape, const Cluster &cluster,
                    SearchOptions o) {
  llvm::Expected<SearchResult> r = searchPlans(shape, cluster, o);
  EXPECT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  return r ? std::move(*r) : SearchResult();
}

TEST(Search, TopologyKeepsTensorParallelInsideANode) {
  // Issue 6, "Topology": on dgx-h100:4 the chosen plan's tp fits a node
  // and its tp collectives run over NVLink; forcing tp across nodes is
  // predicted slower.
  // Without pipelining or ZeRO the 18B model needs tensor parallelism to
  // fit, so the search must choose a tp and place it.
  Cluster cluster = *clusterPreset("dgx-h100:4");
  SearchOptions o;
  o.devices = 32;
  o.pins.pp = 1;
  o.pins.zero = 0;
  SearchResult free = search(gpt18b(), cluster, o);
  ASSERT_FALSE(free.best.empty());
  const ScoredPlan &best = free.best.front();
  EXPECT_GT(best.candidate.tp, 1) << best.candidate.str();
  EXPECT_LE(best.candidate.tp * best.candidate.seqRanks(), 8)
      << best.candidate.str();
  for (const CollectiveUse &u : best.prediction.collectives)
    if (u.axis == "tp" || u.axis == "sp")
      EXPECT_TRUE(u.withinNode) << collectiveName(u.kind).str() << " on "
                                << u.axis << " in " << best.candidate.str();

  // Forced across nodes: tp = 16 spans two 8-GPU nodes.
  SearchOptions across = o;
  across.pins.tp = 16;
  SearchResult forced = search(gpt18b(), cluster, across);
  ASSERT_FALSE(forced.best.empty());
  EXPECT_GT(forced.best.front().prediction.stepSeconds,
            best.prediction.stepSeconds);
  bool networkTp = false;
  for (const CollectiveUse &u : forced.best.front().prediction.collectives)
    networkTp |= u.axis == "tp" && !u.withinNode;
  EXPECT_TRUE(networkTp);

  // The same tp = 8 with a rank order that makes tp the slowest axis puts
  // its groups across nodes: slower than the chosen plan, pin for pin.
  SearchOptions pinned = o;
  pinned.pins.tp = best.candidate.tp;
  pinned.pins.pp = best.candidate.pp;
  pinned.pins.sp = best.candidate.sp;
  pinned.pins.zero = best.candidate.zero;
  pinned.pins.microBatchSize = best.candidate.microBatchSize;
  pinned.pins.recompute = best.candidate.recompute;
  pinned.pins.virtualStages = best.candidate.virtualStages;
  if (best.candidate.seqRanks() > 1)
    pinned.pins.spSize = best.candidate.spSize;
  pinned.cost.rankOrder = {"tp", "sp", "pp", "dp"};
  SearchResult outer = search(gpt18b(), cluster, pinned);
  ASSERT_FALSE(outer.best.empty());
  EXPECT_EQ(outer.best.front().candidate.str(), best.candidate.str());
  EXPECT_GT(outer.best.front().prediction.stepSeconds,
            best.prediction.stepSeconds);
}

TEST(Search, PinsAreKept) {
  Cluster cluster = *clusterPreset("dgx-a100:4");
  SearchOptions o;
  o.devices = 32;
  o.pins.tp = 4;
  o.pins.pp = 2;
  o.pins.recompute = "full";
  o.pins.zero = 0;
  SearchResult r = search(gpt18b(), cluster, o);
  ASSERT_FALSE(r.best.empty());
  for (const ScoredPlan &p : r.best) {
    EXPECT_EQ(p.candidate.tp, 4);
    EXPECT_EQ(p.candidate.pp, 2);
    EXPECT_EQ(p.candidate.dp, 4);
    EXPECT_EQ(p.candidate.recompute, "full");
    EXPECT_EQ(p.candidate.zero, 0);
  }
  // Ranked fastest first (times within 0.1% are a tie, broken by fewer
  // moving parts).
  for (size_t i = 1; i < r.best.size(); ++i)
    EXPECT_LE(r.best[i - 1].prediction.stepSeconds,
              r.best[i].prediction.stepSeconds * 1.001);
}

TEST(Search, RejectedRegionsSayWhy) {
  // GPT-3 175B on one 8-GPU node: nothing fits, and plain data parallelism
  // is out of memory by terabytes.
  TransformerShape gpt3 =
      TransformerShape::gpt(96, 12288, 96, 2048, 51200, 1536);
  Cluster cluster = *clusterPreset("dgx-a100:1");
  SearchOptions o;
  o.devices = 8;
  SearchResult r = search(gpt3, cluster, o);
  EXPECT_TRUE(r.best.empty());
  ASSERT_FALSE(r.rejected.empty());
  const RejectedRegion &first = r.rejected.front();
  EXPECT_EQ(first.kind, "memory");
  EXPECT_EQ(first.region, "tp=1 pp=1 zero=0");
  EXPECT_NE(first.reason.find("out of memory by"), std::string::npos)
      << first.reason;
  EXPECT_GT(first.excessBytes, 1e12);
  bool heads = false;
  for (const RejectedRegion &reg : r.rejected)
    heads |=
        reg.reason == "sp=ulysses: tp x sp-size = 64 does not divide "
                      "the 96 heads" ||
        reg.reason.find("does not divide the 96 heads") != std::string::npos;
  // 8 divides 96: no head region on 8 GPUs; layers and batch divide too.
  EXPECT_FALSE(heads);

  // A head count that 8 does not divide is named.
  TransformerShape odd = TransformerShape::gpt(4, 768, 12, 512, 1000, 16);
  o.devices = 8;
  SearchResult r2 = search(odd, cluster, o);
  bool named = false;
  for (const RejectedRegion &reg : r2.rejected)
    named |= reg.reason == "tp=8 does not divide the 12 heads";
  EXPECT_TRUE(named);
  EXPECT_FALSE(r2.best.empty());

  // The report and the JSON carry the same facts.
  std::string text;
  llvm::raw_string_ostream os(text);
  explainSearch(r, gpt3, cluster, o, os);
  EXPECT_NE(text.find("no plan fits"), std::string::npos);
  EXPECT_NE(text.find("[memory] tp=1 pp=1 zero=0"), std::string::npos);
  llvm::json::Value json = searchToJSON(r, gpt3, cluster, o);
  EXPECT_EQ(*json.getAsObject()->get("chosen"), llvm::json::Value(nullptr));
  EXPECT_EQ(json.getAsObject()->getArray("rejected")->size(),
            r.rejected.size());
}

TEST(Search, UnsupportedFilterAndErrors) {
  Cluster cluster = *clusterPreset("dgx-a100:1");
  TransformerShape small = TransformerShape::gpt(4, 768, 12, 512, 1000, 16);
  SearchOptions o;
  o.devices = 8;
  o.unsupported = [](const Candidate &c) -> std::string {
    return c.pp > 1 ? "no pipelines here" : "";
  };
  SearchResult r = search(small, cluster, o);
  ASSERT_FALSE(r.best.empty());
  for (const ScoredPlan &p : r.best)
    EXPECT_EQ(p.candidate.pp, 1);
  bool listed = false;
  for (const RejectedRegion &reg : r.rejected)
    listed |= reg.kind == "unsupported" && reg.reason == "no pipelines here";
  EXPECT_TRUE(listed);
  for (const ScoredPlan &p : r.best)
    EXPECT_TRUE(p.unsupported.empty());

  // scoreUnsupported (--plan-space all): the same candidates scored and
  // marked, none rejected as unsupported; the report and JSON say so.
  SearchOptions all = o;
  all.scoreUnsupported = true;
  all.keep = 1000;
  SearchResult scored = search(small, cluster, all);
  bool marked = false;
  for (const ScoredPlan &p : scored.best) {
    EXPECT_EQ(p.unsupported.empty(), p.candidate.pp == 1);
    marked |= !p.unsupported.empty();
  }
  EXPECT_TRUE(marked);
  for (const RejectedRegion &reg : scored.rejected)
    EXPECT_NE(reg.kind, "unsupported");
  EXPECT_GT(scored.feasible, r.feasible);
  // A report whose chosen plan is a pipeline: marked on its line.
  SearchOptions pipe = all;
  pipe.pins.pp = 2;
  SearchResult piped = search(small, cluster, pipe);
  ASSERT_FALSE(piped.best.empty());
  std::string text;
  llvm::raw_string_ostream os(text);
  explainSearch(piped, small, cluster, pipe, os);
  EXPECT_NE(text.find("[not runnable: no pipelines here]"), std::string::npos)
      << text;
  llvm::json::Value json = searchToJSON(piped, small, cluster, pipe);
  const llvm::json::Object *chosen = json.getAsObject()->getObject("chosen");
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->getBoolean("runnable"), false);
  EXPECT_EQ(chosen->getString("not_runnable"), "no pipelines here");

  auto error = [&](SearchOptions bad) {
    llvm::Expected<SearchResult> e = searchPlans(small, cluster, bad);
    EXPECT_FALSE(static_cast<bool>(e));
    return e ? std::string() : llvm::toString(e.takeError());
  };
  SearchOptions bad = o;
  bad.devices = 16;
  EXPECT_NE(error(bad).find("is more than cluster 'dgx-a100:1' has (8)"),
            std::string::npos);
  bad = o;
  bad.pins.zero = 4;
  EXPECT_NE(error(bad).find("ZeRO stage must be 0..3"), std::string::npos);
  bad = o;
  bad.pins.sp = "context";
  EXPECT_NE(error(bad).find("sp must be none, megatron, ulysses or ring"),
            std::string::npos);
  bad = o;
  bad.pins.tp = 0;
  EXPECT_NE(error(bad).find("pinned tp must be >= 1, got 0"),
            std::string::npos);
  bad = o;
  bad.pins.recompute = "some";
  EXPECT_NE(error(bad).find("pinned recompute must be none, selective or "
                            "full, got 'some'"),
            std::string::npos);
  bad = o;
  bad.pins.schedule = "interleaved";
  EXPECT_NE(error(bad).find("pinned schedule must be gpipe or 1f1b"),
            std::string::npos);
  bad = o;
  bad.devices = 0;
  EXPECT_NE(error(bad).find("--devices must be >= 1, got 0"),
            std::string::npos);
  TransformerShape broken = small;
  broken.heads = 5;
  llvm::Expected<SearchResult> shapeError = searchPlans(broken, cluster, o);
  ASSERT_FALSE(static_cast<bool>(shapeError));
  EXPECT_NE(llvm::toString(shapeError.takeError()).find("5 heads"),
            std::string::npos);
  bad = o;
  bad.cost.precision = "fp8";
  EXPECT_NE(error(bad).find("no peak FLOP/s for fp8"), std::string::npos);
}

TEST(Search, PlanOfMapsTheKnobs) {
  TransformerShape s = TransformerShape::gpt(8, 1024, 16, 512, 32000, 64);
  Candidate c;
  c.dp = 2;
  c.tp = 2;
  c.pp = 2;
  c.virtualStages = 2;
  c.microBatchSize = 4;
  c.recompute = "selective";
  Plan base;
  base.precision = "bf16";
  Plan p = planOf(c, s, base);
  EXPECT_EQ(p.dp, 2);
  EXPECT_EQ(p.tp, 2);
  EXPECT_EQ(p.pp, 2);
  EXPECT_EQ(p.microBatches, 8); // 64 / (2 · 4)
  EXPECT_EQ(p.schedule, "interleaved");
  EXPECT_EQ(p.virtualStages, 2);
  EXPECT_EQ(p.recompute, "selective");
  EXPECT_EQ(p.precision, "bf16");
  c = Candidate();
  c.sp = "ulysses";
  c.spSize = 4;
  c.microBatchSize = 64;
  p = planOf(c, s, Plan());
  EXPECT_EQ(p.sp, "ulysses");
  EXPECT_EQ(p.spSize, 4);
  EXPECT_EQ(p.numRanks(), 4);
  EXPECT_FALSE(p.pipelined());
}

} // namespace

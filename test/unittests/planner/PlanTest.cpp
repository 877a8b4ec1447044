//===- PlanTest.cpp - the Plan: grid, JSON round trip, pins ---------------===//

#include "compiler/planner/Plan.h"
#include "compiler/planner/Search.h"
#include "compiler/planner/ShardingFile.h"

#include "llvm/ADT/StringSet.h"

#include <gtest/gtest.h>

using namespace tessera::planner;

namespace {

/// toJSON -> fromJSON -> toJSON is the identity on the JSON, and the plan
/// read back has the same fields as `p` (up to effective defaults).
Plan roundTrip(const Plan &p) {
  llvm::json::Object json = p.toJSON();
  llvm::Expected<Plan> back = Plan::fromJSON(json);
  EXPECT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  if (!back)
    return Plan();
  EXPECT_EQ(llvm::json::Value(back->toJSON()), llvm::json::Value(p.toJSON()));
  return *back;
}

TEST(Plan, GridIsGridOfItsDegrees) {
  Plan p;
  p.dp = 2;
  p.tp = 4;
  EXPECT_EQ(p.grid(), (GridSpec{{"dp", "tp"}, {2, 4}}));
  p.pp = 2;
  p.microBatches = 4;
  EXPECT_EQ(p.grid(), gridOf(2, 4, 2, 4, "none", 1));
  EXPECT_EQ(p.gridAxisNames(), p.grid().names);
  EXPECT_EQ(p.gridShape(), p.grid().shape);
  EXPECT_EQ(p.rankAxisSize("pp"), 2);
  EXPECT_EQ(p.rankAxisSize("sp"), 1);
}

TEST(Plan, JSONRoundTripOfADefaultPlan) {
  Plan back = roundTrip(Plan());
  EXPECT_EQ(back.dp, 1);
  EXPECT_EQ(back.optimizer.name, "adamw");
  EXPECT_TRUE(back.shardings.empty());
  EXPECT_TRUE(back.rankOrder.empty());
}

TEST(Plan, JSONRoundTripOfEveryField) {
  Plan p;
  p.dp = 2;
  p.tp = 2;
  p.zero = 2;
  p.recompute = "selective";
  p.bucketMb = 4;
  p.precision = "bf16";
  p.vocabParallel = false;
  p.rankOrder = {"tp", "dp"};
  p.optimizer.name = "adamw";
  p.optimizer.lr = 3e-4;
  p.optimizer.weightDecay = 0.1;
  p.optimizer.beta1 = 0.8;
  p.optimizer.beta2 = 0.95;
  p.optimizer.eps = 1e-6;
  p.optimizer.weightDecayExclude = true;
  p.shardings = {{"h.0.attn.c_attn.weight", "[-, {3, 64 : tp}]"},
                 {"wpe.weight", "replicated"}};
  Plan back = roundTrip(p);
  EXPECT_EQ(back.dp, 2);
  EXPECT_EQ(back.tp, 2);
  EXPECT_EQ(back.zero, 2);
  EXPECT_EQ(back.recompute, "selective");
  EXPECT_EQ(back.bucketMb, 4);
  EXPECT_EQ(back.precision, "bf16");
  EXPECT_FALSE(back.vocabParallel);
  EXPECT_EQ(back.rankOrder, p.rankOrder);
  EXPECT_EQ(back.optimizer.lr, 3e-4);
  EXPECT_EQ(back.optimizer.weightDecay, 0.1);
  EXPECT_EQ(back.optimizer.beta1, 0.8);
  EXPECT_EQ(back.optimizer.beta2, 0.95);
  EXPECT_EQ(back.optimizer.eps, 1e-6);
  EXPECT_TRUE(back.optimizer.weightDecayExclude);
  EXPECT_EQ(back.shardings, p.shardings);
  llvm::Error valid = back.validate();
  EXPECT_FALSE(static_cast<bool>(valid)) << llvm::toString(std::move(valid));
}

TEST(Plan, JSONRoundTripOfPipelineRingAndFp16) {
  Plan p;
  p.pp = 2;
  p.microBatches = 4;
  p.virtualStages = 2;
  p.schedule = "interleaved";
  p.ppStages = {0, 1, 2, 3};
  Plan back = roundTrip(p);
  EXPECT_EQ(back.pp, 2);
  EXPECT_EQ(back.microBatches, 4);
  EXPECT_EQ(back.virtualStages, 2);
  EXPECT_EQ(back.schedule, "interleaved");
  EXPECT_EQ(back.ppStages, p.ppStages);

  Plan ring;
  ring.dp = 2;
  ring.sp = "ring";
  ring.spSize = 4;
  ring.precision = "fp16";
  ring.lossScale = 256;
  ring.optimizer.name = "sgd";
  back = roundTrip(ring);
  EXPECT_EQ(back.sp, "ring");
  EXPECT_EQ(back.spSize, 4);
  EXPECT_EQ(back.grid(), ring.grid());
  EXPECT_EQ(back.effectiveLossScale(), 256);
  EXPECT_EQ(back.optimizer.name, "sgd");
  EXPECT_FALSE(back.dynamicLossScale());

  // fp16 without --loss-scale: dynamic loss scaling, its settings kept.
  Plan dynamic;
  dynamic.dp = 2;
  dynamic.precision = "fp16";
  dynamic.initialLossScale = 1024;
  dynamic.lossScaleWindow = 7;
  dynamic.minLossScale = 0.25;
  back = roundTrip(dynamic);
  EXPECT_TRUE(back.dynamicLossScale());
  EXPECT_EQ(back.effectiveInitialLossScale(), 1024);
  EXPECT_EQ(back.lossScaleWindow, 7);
  EXPECT_EQ(back.minLossScale, 0.25);

  // Megatron-SP's size is tp in the JSON, unset (1) in the plan.
  Plan megatron;
  megatron.tp = 2;
  megatron.sp = "megatron";
  back = roundTrip(megatron);
  EXPECT_EQ(back.sp, "megatron");
  EXPECT_EQ(back.spSize, 1);
  EXPECT_EQ(back.grid(), megatron.grid());
}

TEST(Plan, SequenceParallelPipelineKeepsTheMicroBatchAxisLast) {
  // Ring (or Ulysses) sp x pp validates, and the manifest's mb_axis is the
  // last grid axis with pp_axis right before it: the runtime loads only
  // such grids (runtime/executor/Plan.h).
  Plan p;
  p.pp = 2;
  p.microBatches = 4;
  p.sp = "ring";
  p.spSize = 2;
  llvm::Error valid = p.validate();
  EXPECT_FALSE(static_cast<bool>(valid)) << llvm::toString(std::move(valid));
  llvm::json::Object json = p.toJSON();
  const llvm::json::Object *pipeline = json.getObject("pipeline");
  ASSERT_TRUE(pipeline);
  EXPECT_EQ(pipeline->getInteger("mb_axis"), 4);
  EXPECT_EQ(pipeline->getInteger("pp_axis"), 3);
  EXPECT_EQ(p.rankAxisNames(),
            (std::vector<std::string>{"dp", "tp", "sp", "pp"}));
  EXPECT_EQ(p.numRanks(), 4);
  Plan back = roundTrip(p);
  EXPECT_EQ(back.grid(), p.grid());
  EXPECT_EQ(back.sp, "ring");
}

TEST(Plan, FromJSONReadsAnArtifactManifest) {
  // The manifest tessera-partition wrote for postnorm_relu_op13.onnx --dp 2
  // --tp 2 --zero 1 --precision bf16 --bucket-mb 2 --rank-order tp,dp
  // --sharding {pos_emb, encoder.layers.0.linear1.weight} (arguments and
  // results cut to one each).
  const char *text = R"({"arguments": [{"dtype": "f32", "index": 0,
    "layout": [[{"axes": [], "size": 16}], [{"axes": [], "size": 32}]],
    "local_shape": [16, 32], "name": "pos_emb", "role": "param",
    "shape": [16, 32]}], "bucket_mb": 2, "format": "tessera-plan",
    "function": "train_step", "global_batch": 4,
    "grid": {"axes": ["dp", "tp"], "rank_order": ["tp", "dp"],
             "shape": [2, 2]},
    "memory": {"planned": true},
    "optimizer": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-08, "lr": 0.001,
                  "name": "adamw", "weight_decay": 0.01},
    "precision": "bf16", "program": "__program__", "recompute": "none",
    "results": [{"index": 0, "name": "loss", "role": "loss"}],
    "seq_len": 16,
    "shardings": {"encoder.layers.0.linear1.weight": "[tp, -]",
                  "pos_emb": "[-, tp]"},
    "version": 1,
    "vocab_parallel": {"enabled": true,
                       "params": ["tok_emb.weight", "head.weight"]},
    "zero": {"replicated": [], "stage": 1}})";
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  ASSERT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
  llvm::Expected<Plan> plan = Plan::fromJSON(*json->getAsObject());
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(plan->zero, 1);
  EXPECT_EQ(plan->precision, "bf16");
  EXPECT_EQ(plan->bucketMb, 2);
  EXPECT_EQ(plan->rankOrder, (std::vector<std::string>{"tp", "dp"}));
  EXPECT_TRUE(plan->vocabParallel);
  EXPECT_EQ(plan->shardings, (std::map<std::string, std::string>{
                                 {"encoder.layers.0.linear1.weight", "[tp, -]"},
                                 {"pos_emb", "[-, tp]"}}));
  // Written again, the plan's keys are the manifest's.
  llvm::json::Object again = plan->toJSON();
  const llvm::json::Object &manifest = *json->getAsObject();
  for (const auto &[key, value] : again) {
    if (key == "vocab_parallel" || key == "zero") // + what the passes found
      continue;
    EXPECT_EQ(value, *manifest.get(key)) << key.str();
  }
}

TEST(Plan, RanksPerNodeRoundTripsAndMakesTheNodeMapping) {
  Plan p;
  p.dp = 2;
  p.tp = 2;
  // No --cluster: no promise, and no key in the manifest.
  EXPECT_FALSE(p.toJSON().getObject("grid")->get("ranks_per_node"));
  EXPECT_EQ(roundTrip(p).ranksPerNode, 0);
  p.ranksPerNode = 2;
  EXPECT_EQ(p.toJSON().getObject("grid")->getInteger("ranks_per_node"),
            std::optional<int64_t>(2));
  EXPECT_EQ(roundTrip(p).ranksPerNode, 2);
  // The rank axes in rank order, with their sizes: tp fastest by default,
  // as --rank-order puts them otherwise.
  RankOrderAxes axes = p.rankOrderAxes();
  EXPECT_EQ(axes.names, (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(axes.sizes, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(nodeMapping(axes, p.ranksPerNode).insideNode,
            std::vector<std::string>{"tp"});
  p.rankOrder = {"tp", "dp"};
  EXPECT_EQ(nodeMapping(p.rankOrderAxes(), p.ranksPerNode).insideNode,
            std::vector<std::string>{"dp"});
}

std::string fromJSONError(llvm::StringRef text) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json)
    return "bad test JSON: " + llvm::toString(json.takeError());
  llvm::Expected<Plan> plan = Plan::fromJSON(*json->getAsObject());
  return plan ? "" : llvm::toString(plan.takeError());
}

TEST(Plan, FromJSONErrorsNameTheKey) {
  const char *opt = R"("optimizer": {"name": "sgd", "lr": 0.1})";
  EXPECT_EQ(fromJSONError(std::string("{") + opt + "}"),
            "plan: \"grid\" must be an object with arrays \"axes\" and "
            "\"shape\" of the same length");
  EXPECT_EQ(
      fromJSONError(R"({"grid": {"axes": ["dp", "xx"], "shape": [1, 2]}, )" +
                    std::string(opt) + "}"),
      "plan: \"grid\": unknown axis 'xx'");
  for (const char *bad : {"-1", "\"2\"", "1.5"})
    EXPECT_EQ(fromJSONError(R"({"grid": {"axes": ["dp"], "shape": [1], )"
                            R"("ranks_per_node": )" +
                            std::string(bad) + "}, " + opt + "}"),
              "plan: \"grid\": \"ranks_per_node\" must be an integer >= 0")
        << bad;
  EXPECT_EQ(fromJSONError(R"({"grid": {"axes": ["dp"], "shape": [1]}})"),
            "plan: \"optimizer\" must be an object");
  EXPECT_EQ(fromJSONError(R"({"grid": {"axes": ["dp"], "shape": [1]},
                              "optimizer": {"lr": "fast"}})"),
            "plan: \"lr\" must be a number");
  EXPECT_EQ(fromJSONError(R"({"grid": {"axes": ["dp"], "shape": [1]},
                              "optimizer": {"weight_decay_exclude": 1}})"),
            "plan: \"weight_decay_exclude\" must be a boolean");
  EXPECT_EQ(fromJSONError(R"({"grid": {"axes": ["dp"], "shape": [1]}, )" +
                          std::string(opt) + R"(, "shardings": {"w": 3}})"),
            "plan: \"shardings\": \"w\" must be a layout string");
  EXPECT_EQ(fromJSONError(R"({"grid": {"axes": ["dp"], "shape": [1]}, )" +
                          std::string(opt) + R"(, "zero": 2})"),
            "plan: \"zero\" must be an object with an integer \"stage\"");
}

TEST(Plan, PinsAreTheGivenFlagsOfThePlan) {
  Plan p;
  p.dp = 2;
  p.tp = 4;
  p.zero = 1;
  p.schedule = "gpipe";
  llvm::StringSet<> flags = {"tp", "zero", "schedule"};
  Pins pins = pinsOf(p, [&](llvm::StringRef f) { return flags.contains(f); });
  EXPECT_EQ(pins.tp, std::optional<int64_t>(4));
  EXPECT_EQ(pins.zero, std::optional<int64_t>(1));
  EXPECT_EQ(pins.schedule, std::optional<std::string>("gpipe"));
  EXPECT_EQ(pins.dp, std::nullopt);
  EXPECT_EQ(pins.recompute, std::nullopt);
  // An interleaved schedule is the search's virtual stages, not a pin.
  p.schedule = "interleaved";
  pins = pinsOf(p, [&](llvm::StringRef f) { return flags.contains(f); });
  EXPECT_EQ(pins.schedule, std::nullopt);
}

TEST(ShardingFile, PinsInCanonicalText) {
  ParameterShapes params = {{"qkv.weight", {192, 32}}, {"pos", {16, 32}}};
  GridSpec grid = gridOf(1, 2, 1, 1, "none", 1);
  auto pins = parseShardingFile(
      "f.json", R"({"qkv.weight": "[ {3,64:tp},- ]", "pos": "[-, -]"})", params,
      grid);
  ASSERT_TRUE(static_cast<bool>(pins)) << llvm::toString(pins.takeError());
  EXPECT_EQ(*pins,
            (std::map<std::string, std::string>{
                {"qkv.weight", "[{3, 64 : tp}, -]"}, {"pos", "replicated"}}));
}

TEST(ShardingFile, ErrorsNameTheFileAndTheKey) {
  ParameterShapes params = {{"h.0.mlp.weight", {64, 32}},
                            {"h.1.mlp.weight", {64, 32}},
                            {"h.0.mlp.bias", {64}},
                            {"wte", {256, 32}}};
  GridSpec grid = gridOf(1, 2, 1, 1, "none", 1);
  auto error = [&](llvm::StringRef text) {
    auto pins = parseShardingFile("f.json", text, params, grid);
    return pins ? "" : llvm::toString(pins.takeError());
  };
  EXPECT_EQ(error("{"), "f.json: not JSON: [1:1, byte=1]: Expected object "
                        "key");
  EXPECT_EQ(error("[]"), "f.json: expected a JSON object {\"parameter "
                         "name\": \"layout\", ...}");
  EXPECT_EQ(error(R"({"wte": ["tp", "-"]})"),
            "f.json: \"wte\": the layout must be a string such as \"[tp, "
            "-]\" or \"replicated\", got [\"tp\",\"-\"]");
  EXPECT_EQ(error(R"({"h.2.mlp.weight": "[tp, -]"})"),
            "f.json: \"h.2.mlp.weight\" is not a parameter of the model; the "
            "closest: h.0.mlp.weight, h.1.mlp.weight, h.0.mlp.bias");
  EXPECT_EQ(error(R"({"wte": "[tp]"})"),
            "f.json: \"wte\": \"[tp]\": the layout has rank 1 but the tensor "
            "has rank 2 (shape [256, 32])");
  EXPECT_EQ(error(R"({"wte": "[tp, -"})"),
            "f.json: \"wte\": \"[tp, -\": column 7: expected ',' or ']'");
  EXPECT_EQ(error(R"({"wte": "[pp, -]"})"),
            "f.json: \"wte\": \"[pp, -]\": column 2: unknown grid axis 'pp' "
            "(the grid's axes: dp, tp)");
  EXPECT_EQ(error(R"({"h.0.mlp.bias": "[{2, 32 : tp}]", "wte": "[-, x]"})"),
            "f.json: \"wte\": \"[-, x]\": column 5: unknown grid axis 'x' "
            "(the grid's axes: dp, tp)");
  // The error stays on one line.
  EXPECT_EQ(error("{\"wte\": \"[tp,\\n-]x\"}"),
            "f.json: \"wte\": \"[tp,\\n-]x\": column 8: unexpected 'x' after "
            "the layout");
  EXPECT_EQ(closestNames("x", {}), std::vector<std::string>());
}

} // namespace

//===- Plan.cpp - the parallel plan ---------------------------------------===//

#include "compiler/planner/Plan.h"

#include "common/schedule/PipelineSchedule.h"

#include <cmath>
#include <cstdio>

using namespace tessera::planner;

/// `v` as printf's %g ("1000", "0.5", "inf").
static std::string shortDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

bool Plan::fuses(llvm::StringRef kind) const {
  if (fusion == "all" || fusion == "none")
    return fusion == "all";
  llvm::SmallVector<llvm::StringRef> kinds;
  llvm::StringRef(fusion).split(kinds, ',');
  return llvm::any_of(kinds,
                      [&](llvm::StringRef k) { return k.trim() == kind; });
}

llvm::Error Plan::validate() const {
  auto fail = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  if (dp < 1)
    return fail("--dp must be >= 1, got " + llvm::Twine(dp));
  if (tp < 1)
    return fail("--tp must be >= 1, got " + llvm::Twine(tp));
  if (pp < 1)
    return fail("--pp must be >= 1, got " + llvm::Twine(pp));
  if (microBatches < 1)
    return fail("--micro-batches must be >= 1, got " +
                llvm::Twine(microBatches));
  auto kind = tsrt::schedule::parseKind(schedule);
  if (!kind)
    return fail("--schedule must be gpipe, 1f1b or interleaved, got '" +
                schedule + "'");
  if (llvm::Error err =
          tsrt::schedule::checkShape(*kind, {pp, virtualStages, microBatches}))
    return err;
  if (recompute != "none" && recompute != "selective" && recompute != "full")
    return fail("--recompute must be none, selective or full, got '" +
                recompute + "'");
  if (fusion != "all" && fusion != "none") {
    llvm::SmallVector<llvm::StringRef> kinds;
    llvm::StringRef(fusion).split(kinds, ',');
    for (llvm::StringRef kind : kinds)
      if (!llvm::is_contained(kFusionKinds, kind.trim()))
        return fail("--fusion must be all, none or a comma-separated list of "
                    "linear, norm, elementwise, optimizer; got '" +
                    fusion + "'");
  }
  if (precision != "fp32" && precision != "bf16" && precision != "fp16")
    return fail("--precision must be fp32, bf16 or fp16, got '" + precision +
                "'");
  if (lossScale && precision != "fp16")
    return fail("--loss-scale is only meaningful with --precision fp16");
  auto isPowerOfTwo = [](double s) {
    int exp;
    return s > 0 && std::isfinite(s) && std::frexp(s, &exp) == 0.5;
  };
  if (lossScale && !isPowerOfTwo(*lossScale))
    return fail("--loss-scale must be a power of two > 0 (so scaling is "
                "exact), got " +
                shortDouble(*lossScale));
  bool dynamicFlags =
      initialLossScale || lossScaleWindow != 1000 || minLossScale != 1;
  if (dynamicFlags && precision != "fp16")
    return fail("--initial-loss-scale, --loss-scale-window and "
                "--min-loss-scale are only meaningful with --precision fp16");
  if (dynamicFlags && lossScale)
    return fail("--initial-loss-scale, --loss-scale-window and "
                "--min-loss-scale set dynamic loss scaling; they conflict "
                "with the static --loss-scale");
  if (initialLossScale && !isPowerOfTwo(*initialLossScale))
    return fail("--initial-loss-scale must be a power of two > 0 (so "
                "scaling is exact), got " +
                shortDouble(*initialLossScale));
  if (lossScaleWindow < 1)
    return fail("--loss-scale-window must be >= 1, got " +
                llvm::Twine(lossScaleWindow));
  if (!isPowerOfTwo(minLossScale))
    return fail("--min-loss-scale must be a power of two > 0, got " +
                shortDouble(minLossScale));
  if (dynamicFlags && (zero > 0 || (pipelined() && virtualStages > 1)))
    return fail("fp16 dynamic loss scaling (--initial-loss-scale, "
                "--loss-scale-window, --min-loss-scale) is not supported with "
                "--zero or the interleaved schedule yet; those plans use a "
                "static --loss-scale (default 1024)");
  if (dynamicLossScale() && minLossScale > effectiveInitialLossScale())
    return fail("--min-loss-scale (" + shortDouble(minLossScale) +
                ") must not exceed --initial-loss-scale (" +
                shortDouble(effectiveInitialLossScale()) + ")");
  if (zero < 0 || zero > 3)
    return fail("--zero must be 0, 1, 2 or 3, got " + llvm::Twine(zero));
  if (sp != "none" && sp != "megatron" && sp != "ulysses" && sp != "ring")
    return fail("--sp must be none, megatron, ulysses or ring, got '" + sp +
                "'");
  if (sp == "megatron" && tp < 2)
    return fail("--sp megatron shards the sequence over the tensor-parallel "
                "axis and needs --tp > 1");
  if (sp == "megatron" && spSize != 1 && spSize != tp)
    return fail("--sp megatron uses the tp axis: --sp-size must be unset or "
                "equal to --tp");
  if (hasSpAxis() && spSize < 2)
    return fail("--sp " + sp + " needs --sp-size >= 2, got " +
                llvm::Twine(spSize));
  if (sp == "none" && spSize != 1)
    return fail("--sp-size needs --sp ulysses or ring");
  if (!rankOrder.empty()) {
    std::vector<std::string> axes = rankAxisNames();
    std::string list;
    for (const std::string &a : axes)
      list += (list.empty() ? "" : ",") + a;
    for (size_t i = 0; i < rankOrder.size(); ++i) {
      const std::string &a = rankOrder[i];
      if (!llvm::is_contained(axes, a))
        return fail(
            "--rank-order: '" + a +
            "' is not a rank axis of this plan (its rank axes: " + list + ")");
      if (llvm::is_contained(llvm::ArrayRef(rankOrder).take_front(i), a))
        return fail("--rank-order: axis '" + a + "' is listed twice");
    }
    for (const std::string &a : axes)
      if (!llvm::is_contained(rankOrder, a) && rankAxisSize(a) > 1)
        return fail("--rank-order must list every rank axis of this plan (" +
                    list +
                    "; those of size 1 may be left out) once, slowest "
                    "first; '" +
                    a + "' is missing");
  }
  if (!ppStages.empty() && !pipelined())
    return fail("--pp-stages needs --pp > 1");
  if (optimizer.name != "sgd" && optimizer.name != "adamw")
    return fail("--optimizer must be sgd or adamw, got '" + optimizer.name +
                "'");
  if (optimizer.lr < 0)
    return fail("--lr must be >= 0");
  if (optimizer.beta1 < 0 || optimizer.beta1 >= 1 || optimizer.beta2 < 0 ||
      optimizer.beta2 >= 1)
    return fail("--beta1 and --beta2 must be in [0, 1)");
  if (optimizer.eps <= 0)
    return fail("--eps must be > 0");
  if (!(clipGrad >= 0) || !std::isfinite(clipGrad))
    return fail("--clip-grad must be a finite number >= 0 (0: no clipping), "
                "got " +
                shortDouble(clipGrad));
  if (clipGrad > 0 && pipelined() && virtualStages > 1)
    return fail("--clip-grad is not supported with the interleaved schedule "
                "yet (a stage's chunks would have to sum their norm terms "
                "before the pp all-reduce); use gpipe or 1f1b");
  return llvm::Error::success();
}

llvm::json::Object Plan::toJSON() const {
  GridSpec g = grid();
  llvm::json::Array axes(g.names), shape(g.shape), order(effectiveRankOrder());
  llvm::json::Object opt{{"name", optimizer.name},
                         {"lr", optimizer.lr},
                         {"weight_decay", optimizer.effectiveWeightDecay()}};
  if (optimizer.weightDecayExclude)
    opt["weight_decay_exclude"] = true;
  if (optimizer.name == "adamw") {
    opt["beta1"] = optimizer.beta1;
    opt["beta2"] = optimizer.beta2;
    opt["eps"] = optimizer.eps;
  }
  llvm::json::Object gridJson{{"axes", std::move(axes)},
                              {"shape", std::move(shape)},
                              {"rank_order", std::move(order)}};
  if (ranksPerNode > 0)
    gridJson["ranks_per_node"] = ranksPerNode;
  llvm::json::Object out{{"grid", std::move(gridJson)},
                         {"recompute", recompute},
                         {"precision", precision},
                         {"optimizer", std::move(opt)}};
  if (bucketMb >= 0)
    out["bucket_mb"] = bucketMb;
  if (tp > 1)
    out["vocab_parallel"] = llvm::json::Object{{"enabled", vocabParallel}};
  if (sp != "none")
    out["sequence_parallel"] = llvm::json::Object{
        {"kind", sp}, {"size", sp == "megatron" ? tp : spSize}};
  if (precision == "fp16" && !dynamicLossScale())
    out["loss_scale"] = effectiveLossScale();
  if (dynamicLossScale())
    out["dynamic_loss_scale"] =
        llvm::json::Object{{"initial", effectiveInitialLossScale()},
                           {"window", lossScaleWindow},
                           {"min", minLossScale}};
  if (zero > 0)
    out["zero"] = llvm::json::Object{{"stage", zero}};
  if (clipGrad > 0)
    out["clip_grad"] = clipGrad;
  if (fusion != "all")
    out["fusion"] = fusion;
  if (pipelined()) {
    llvm::json::Object pipeline{
        {"pp_axis", static_cast<int64_t>(*g.axisIndex("pp"))},
        {"mb_axis", static_cast<int64_t>(*g.axisIndex("mb"))},
        {"stages", pp},
        {"virtual_stages", virtualStages},
        {"micro_batches", microBatches},
        {"schedule", schedule}};
    if (!ppStages.empty())
      pipeline["pp_stages"] = llvm::json::Array(ppStages);
    out["pipeline"] = std::move(pipeline);
  }
  if (!shardings.empty()) {
    llvm::json::Object layouts;
    for (const auto &[name, text] : shardings)
      layouts[name] = text;
    out["shardings"] = std::move(layouts);
  }
  return out;
}

llvm::Expected<Plan> Plan::fromJSON(const llvm::json::Object &json) {
  auto fail = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "plan: " + msg);
  };
  Plan plan;
  // The grid: every axis's size into its degree.
  const llvm::json::Object *grid = json.getObject("grid");
  const llvm::json::Array *axes = grid ? grid->getArray("axes") : nullptr;
  const llvm::json::Array *shape = grid ? grid->getArray("shape") : nullptr;
  if (!axes || !shape || axes->size() != shape->size())
    return fail("\"grid\" must be an object with arrays \"axes\" and "
                "\"shape\" of the same length");
  std::optional<int64_t> spAxisSize;
  for (size_t i = 0; i < axes->size(); ++i) {
    std::optional<llvm::StringRef> name = (*axes)[i].getAsString();
    std::optional<int64_t> size = (*shape)[i].getAsInteger();
    if (!name || !size)
      return fail("\"grid\": axis " + llvm::Twine(i) +
                  " must be a name with an integer size");
    if (*name == "dp")
      plan.dp = *size;
    else if (*name == "tp")
      plan.tp = *size;
    else if (*name == "pp")
      plan.pp = *size;
    else if (*name == "mb")
      plan.microBatches = *size;
    else if (*name == "sp")
      spAxisSize = *size;
    else
      return fail("\"grid\": unknown axis '" + *name + "'");
  }
  if (const llvm::json::Array *order = grid->getArray("rank_order")) {
    for (const llvm::json::Value &a : *order) {
      std::optional<llvm::StringRef> name = a.getAsString();
      if (!name)
        return fail("\"grid\": \"rank_order\" must be an array of axis names");
      plan.rankOrder.push_back(name->str());
    }
    // toJSON writes the effective order: keep "default" as the empty list.
    if (plan.rankOrder == plan.defaultRankOrder())
      plan.rankOrder.clear();
  }
  if (const llvm::json::Value *perNode = grid->get("ranks_per_node")) {
    std::optional<int64_t> v = perNode->getAsInteger();
    if (!v || *v < 0)
      return fail("\"grid\": \"ranks_per_node\" must be an integer >= 0");
    plan.ranksPerNode = *v;
  }

  auto getString = [&](const llvm::json::Object &o, llvm::StringRef key,
                       std::string &out) -> llvm::Error {
    if (!o.get(key))
      return llvm::Error::success();
    std::optional<llvm::StringRef> v = o.getString(key);
    if (!v)
      return fail("\"" + key + "\" must be a string");
    out = v->str();
    return llvm::Error::success();
  };
  auto getNumber = [&](const llvm::json::Object &o, llvm::StringRef key,
                       double &out) -> llvm::Error {
    if (!o.get(key))
      return llvm::Error::success();
    std::optional<double> v = o.getNumber(key);
    if (!v)
      return fail("\"" + key + "\" must be a number");
    out = *v;
    return llvm::Error::success();
  };
  auto getInteger = [&](const llvm::json::Object &o, llvm::StringRef key,
                        int64_t &out) -> llvm::Error {
    if (!o.get(key))
      return llvm::Error::success();
    std::optional<int64_t> v = o.getInteger(key);
    if (!v)
      return fail("\"" + key + "\" must be an integer");
    out = *v;
    return llvm::Error::success();
  };

  const llvm::json::Object *opt = json.getObject("optimizer");
  if (!opt)
    return fail("\"optimizer\" must be an object");
  if (llvm::Error err = getString(*opt, "name", plan.optimizer.name))
    return std::move(err);
  for (auto [key, field] :
       {std::pair<const char *, double *>{"lr", &plan.optimizer.lr},
        {"weight_decay", &plan.optimizer.weightDecay},
        {"beta1", &plan.optimizer.beta1},
        {"beta2", &plan.optimizer.beta2},
        {"eps", &plan.optimizer.eps}})
    if (llvm::Error err = getNumber(*opt, key, *field))
      return std::move(err);
  if (const llvm::json::Value *v = opt->get("weight_decay_exclude")) {
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return fail("\"weight_decay_exclude\" must be a boolean");
    plan.optimizer.weightDecayExclude = *b;
  }
  if (llvm::Error err = getString(json, "recompute", plan.recompute))
    return std::move(err);
  if (llvm::Error err = getString(json, "fusion", plan.fusion))
    return std::move(err);
  if (llvm::Error err = getString(json, "precision", plan.precision))
    return std::move(err);
  if (llvm::Error err = getNumber(json, "bucket_mb", plan.bucketMb))
    return std::move(err);
  if (llvm::Error err = getNumber(json, "clip_grad", plan.clipGrad))
    return std::move(err);
  if (json.get("loss_scale")) {
    double scale = 0;
    if (llvm::Error err = getNumber(json, "loss_scale", scale))
      return std::move(err);
    plan.lossScale = scale;
  }
  if (const llvm::json::Value *v = json.get("dynamic_loss_scale")) {
    const llvm::json::Object *o = v->getAsObject();
    std::optional<double> initial = o ? o->getNumber("initial") : std::nullopt;
    std::optional<int64_t> window = o ? o->getInteger("window") : std::nullopt;
    std::optional<double> min = o ? o->getNumber("min") : std::nullopt;
    if (!initial || !window || !min)
      return fail("\"dynamic_loss_scale\" must be an object with numbers "
                  "\"initial\", \"window\" and \"min\"");
    plan.initialLossScale = *initial;
    plan.lossScaleWindow = *window;
    plan.minLossScale = *min;
  }
  if (const llvm::json::Value *v = json.get("vocab_parallel")) {
    const llvm::json::Object *o = v->getAsObject();
    std::optional<bool> enabled = o ? o->getBoolean("enabled") : std::nullopt;
    if (!enabled)
      return fail("\"vocab_parallel\" must be an object with a boolean "
                  "\"enabled\"");
    plan.vocabParallel = *enabled;
  }
  if (const llvm::json::Value *v = json.get("sequence_parallel")) {
    const llvm::json::Object *o = v->getAsObject();
    if (!o)
      return fail("\"sequence_parallel\" must be an object");
    if (llvm::Error err = getString(*o, "kind", plan.sp))
      return std::move(err);
    if (llvm::Error err = getInteger(*o, "size", plan.spSize))
      return std::move(err);
    if (plan.sp == "megatron")
      plan.spSize = 1; // toJSON writes tp; the plan keeps the flag's 1
  }
  if (spAxisSize && !plan.hasSpAxis())
    return fail("\"grid\" has an 'sp' axis but \"sequence_parallel\" is not "
                "ulysses or ring");
  if (plan.hasSpAxis() && spAxisSize)
    plan.spSize = *spAxisSize;
  if (const llvm::json::Value *v = json.get("zero")) {
    const llvm::json::Object *o = v->getAsObject();
    std::optional<int64_t> stage = o ? o->getInteger("stage") : std::nullopt;
    if (!stage)
      return fail("\"zero\" must be an object with an integer \"stage\"");
    plan.zero = *stage;
  }
  if (const llvm::json::Value *v = json.get("pipeline")) {
    const llvm::json::Object *o = v->getAsObject();
    if (!o)
      return fail("\"pipeline\" must be an object");
    if (llvm::Error err = getInteger(*o, "stages", plan.pp))
      return std::move(err);
    if (llvm::Error err = getInteger(*o, "virtual_stages", plan.virtualStages))
      return std::move(err);
    if (llvm::Error err = getInteger(*o, "micro_batches", plan.microBatches))
      return std::move(err);
    if (llvm::Error err = getString(*o, "schedule", plan.schedule))
      return std::move(err);
    if (const llvm::json::Value *stages = o->get("pp_stages")) {
      const llvm::json::Array *a = stages->getAsArray();
      if (!a)
        return fail("\"pipeline\": \"pp_stages\" must be an array");
      for (const llvm::json::Value &s : *a) {
        std::optional<int64_t> first = s.getAsInteger();
        if (!first)
          return fail("\"pipeline\": \"pp_stages\" must hold integers");
        plan.ppStages.push_back(*first);
      }
    }
  }
  if (const llvm::json::Value *v = json.get("shardings")) {
    const llvm::json::Object *o = v->getAsObject();
    if (!o)
      return fail("\"shardings\" must be an object");
    for (const auto &[name, layout] : *o) {
      std::optional<llvm::StringRef> text = layout.getAsString();
      if (!text)
        return fail("\"shardings\": \"" + name.str() +
                    "\" must be a layout string");
      plan.shardings[name.str()] = text->str();
    }
  }
  return plan;
}

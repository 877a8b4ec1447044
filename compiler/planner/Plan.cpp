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
  if (precision != "fp32" && precision != "bf16" && precision != "fp16")
    return fail("--precision must be fp32, bf16 or fp16, got '" + precision +
                "'");
  if (lossScale && precision != "fp16")
    return fail("--loss-scale is only meaningful with --precision fp16");
  if (lossScale) {
    int exp;
    double s = *lossScale;
    if (!(s > 0) || !std::isfinite(s) || std::frexp(s, &exp) != 0.5)
      return fail("--loss-scale must be a power of two > 0 (so scaling is "
                  "exact), got " +
                  shortDouble(s));
  }
  if (precision == "fp16" && zero > 0)
    return fail("--precision fp16 with --zero is not supported yet (the "
                "loss-scale unscale sits between the gradient reduction and "
                "the update)");
  if (precision != "fp32" && pipelined())
    return fail("--precision " + precision +
                " with pipeline parallelism (--pp or --micro-batches) is not "
                "supported yet (the micro-batch gradient accumulators are "
                "f32)");
  if (zero < 0 || zero > 3)
    return fail("--zero must be 0, 1, 2 or 3, got " + llvm::Twine(zero));
  if (zero > 0 && pipelined())
    return fail("--zero with pipeline parallelism (--pp or --micro-batches) "
                "is not supported yet");
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
  if (sp != "none" && zero > 0)
    return fail("--zero with --sp is not supported yet (tsr-zero-sharding "
                "needs every gradient as one all-reduce over dp; a "
                "sequence-sharded parameter's gradient, e.g. the position "
                "embedding's, is all-gathered over the sequence axis)");
  if (sp != "none" && pipelined())
    return fail("--sp with pipeline parallelism (--pp or --micro-batches) is "
                "not supported yet");
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
  return llvm::Error::success();
}

llvm::json::Object Plan::toJSON() const {
  llvm::json::Array axes, shape;
  for (const std::string &name : gridAxisNames())
    axes.push_back(name);
  for (int64_t size : gridShape())
    shape.push_back(size);
  llvm::json::Array order;
  for (const std::string &name : effectiveRankOrder())
    order.push_back(name);
  llvm::json::Object opt{{"name", optimizer.name},
                         {"lr", optimizer.lr},
                         {"weight_decay", optimizer.effectiveWeightDecay()}};
  if (optimizer.name == "adamw") {
    opt["beta1"] = optimizer.beta1;
    opt["beta2"] = optimizer.beta2;
    opt["eps"] = optimizer.eps;
  }
  llvm::json::Object out{
      {"grid", llvm::json::Object{{"axes", std::move(axes)},
                                  {"shape", std::move(shape)},
                                  {"rank_order", std::move(order)}}},
      {"ranks", numRanks()},
      {"recompute", recompute},
      {"bucket_mb", bucketMb},
      {"precision", precision},
      {"zero", zero},
      {"optimizer", std::move(opt)}};
  if (tp > 1)
    out["vocab_parallel"] = vocabParallel;
  if (sp != "none")
    out["sequence_parallel"] = llvm::json::Object{
        {"kind", sp}, {"size", sp == "megatron" ? tp : spSize}};
  if (precision == "fp16")
    out["loss_scale"] = effectiveLossScale();
  if (pipelined()) {
    out["pipeline"] = llvm::json::Object{{"pp_axis", 2},
                                         {"mb_axis", 3},
                                         {"stages", pp},
                                         {"virtual_stages", virtualStages},
                                         {"micro_batches", microBatches},
                                         {"schedule", schedule}};
  }
  return out;
}

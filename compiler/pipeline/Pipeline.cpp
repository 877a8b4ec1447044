//===- Pipeline.cpp - tessera-partition's pass pipeline -------------------===//

#include "compiler/pipeline/Pipeline.h"

#include "passes/lowering/Passes.h"
#include "passes/pipeline/Passes.h"
#include "passes/sharding/Passes.h"
#include "passes/training/Passes.h"
#include "passes/zero/Passes.h"

#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

using namespace mlir;
using namespace tessera;

void pipeline::registerAllTesseraPasses() {
  static bool registered = false;
  if (registered)
    return;
  registered = true;
  training::registerTrainingPasses();
  sharding::registerShardingPasses();
  zero::registerZeroPasses();
  pipeline::registerPipelinePasses();
  lowering::registerLoweringPasses();
}

/// Shortest text that parses back to the same double (pass options are
/// parsed from text).
static std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::vector<pipeline::Stage>
pipeline::partitionStages(const planner::Plan &plan) {
  const planner::OptimizerConfig &opt = plan.optimizer;
  std::string train = llvm::formatv(
      "tsr-build-train-step{{optimizer={0} lr={1} weight-decay={2} "
      "beta1={3} beta2={4} eps={5}}",
      opt.name, exact(opt.lr), exact(opt.effectiveWeightDecay()),
      exact(opt.beta1), exact(opt.beta2), exact(opt.eps));
  std::string annotate =
      llvm::formatv("tsr-sharding-annotate{{dp={0} tp={1}", plan.dp, plan.tp);
  if (plan.pipelined())
    annotate +=
        llvm::formatv(" pp={0} micro-batches={1}", plan.pp, plan.microBatches);
  if (!plan.vocabParallel)
    annotate += " vocab-parallel=false";
  if (plan.sp != "none")
    annotate += llvm::formatv(" sp={0} sp-size={1}", plan.sp, plan.spSize);
  annotate += "}";
  std::vector<Stage> stages = {{"build-train-step", train}};
  if (plan.precision != "fp32") {
    std::string mp = "tsr-mixed-precision{precision=" + plan.precision;
    if (plan.precision == "fp16")
      mp += " loss-scale=" + exact(plan.effectiveLossScale());
    stages.push_back({"mixed-precision", mp + "}"});
  }
  if (plan.recompute != "none")
    stages.push_back(
        {"recompute", "tsr-recompute{mode=" + plan.recompute + "}"});
  stages.insert(stages.end(),
                {{"sharding-annotate", annotate},
                 {"sharding-propagate", "func.func(tsr-sharding-propagate)"},
                 {"sharding-partition", "func.func(tsr-sharding-partition)"}});
  if (plan.zero > 0)
    stages.push_back(
        {"zero-sharding",
         llvm::formatv("func.func(tsr-zero-sharding{{stage={0}})", plan.zero)});
  if (plan.pipelined()) {
    std::string split =
        llvm::formatv("tsr-pipeline-split{{schedule={0} virtual-stages={1}",
                      plan.schedule, plan.virtualStages);
    if (!plan.ppStages.empty()) {
      split += " stages=";
      for (auto [i, s] : llvm::enumerate(plan.ppStages))
        split += (i ? "," : "") + std::to_string(s);
    }
    split += "}";
    stages.push_back({"pipeline-split", split});
  }
  return stages;
}

LogicalResult pipeline::dumpModule(ModuleOp module, StringRef dir,
                                   unsigned index, StringRef name,
                                   bool generic) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return module.emitError("cannot create dump directory '")
           << dir << "': " << ec.message();
  SmallString<256> path(dir);
  std::string file = (index < 10 ? "0" : "") + std::to_string(index) + "-" +
                     name.str() + ".mlir";
  llvm::sys::path::append(path, file);
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return module.emitError("cannot write '") << path << "': " << ec.message();
  OpPrintingFlags flags;
  flags.elideLargeResourceString(64);
  if (generic)
    flags.printGenericOpForm().assumeVerified();
  module.print(os, flags);
  return success();
}

LogicalResult pipeline::runStages(ModuleOp module, ArrayRef<Stage> stages,
                                  StringRef dumpDir, unsigned firstIndex) {
  registerAllTesseraPasses();
  unsigned index = firstIndex;
  for (const Stage &stage : stages) {
    PassManager pm(module.getContext());
    pm.enableVerifier(true);
    std::string errors;
    llvm::raw_string_ostream errs(errors);
    if (failed(parsePassPipeline(stage.pipeline, pm, errs)))
      return module.emitError("bad pass pipeline '")
             << stage.pipeline << "': " << errors;
    if (failed(pm.run(module))) {
      // The IR that failed is what one needs to debug the pass: dump it in the
      // generic form, which prints even when the verifier rejects it.
      if (!dumpDir.empty())
        (void)dumpModule(module, dumpDir, index, stage.name + ".failed",
                         /*generic=*/true);
      return failure();
    }
    if (!dumpDir.empty() &&
        failed(dumpModule(module, dumpDir, index, stage.name)))
      return failure();
    ++index;
  }
  return success();
}

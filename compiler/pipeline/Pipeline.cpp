//===- Pipeline.cpp - tessera-partition's pass pipeline -------------------===//

#include "compiler/pipeline/Pipeline.h"

#include "passes/fusion/Passes.h"
#include "passes/lowering/Passes.h"
#include "passes/pipeline/Passes.h"
#include "passes/sharding/Passes.h"
#include "passes/training/Passes.h"
#include "passes/zero/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

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
  fusion::registerFusionPasses();
  pipeline::registerPipelinePasses();
  lowering::registerLoweringPasses();
}

std::string pipeline::Stage::pipelineText() const {
  OpPassManager pm(ModuleOp::getOperationName());
  build(pm);
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  return text;
}

/// "NAME=LAYOUT" for each of the plan's shardings (tsr-sharding-annotate's
/// `shardings`).
static SmallVector<std::string>
shardingOptions(const std::map<std::string, std::string> &shardings) {
  SmallVector<std::string> out;
  for (const auto &[name, layout] : shardings)
    out.push_back(name + "=" + layout);
  return out;
}

std::vector<pipeline::Stage>
pipeline::partitionStages(const planner::Plan &plan) {
  std::vector<Stage> stages;
  const planner::OptimizerConfig &opt = plan.optimizer;
  training::BuildTrainStepOptions train;
  train.optimizer = opt.name;
  train.lr = opt.lr;
  train.weightDecay = opt.effectiveWeightDecay();
  train.excludeWeightDecay = opt.weightDecayExclude;
  train.beta1 = opt.beta1;
  train.beta2 = opt.beta2;
  train.eps = opt.eps;
  stages.push_back({"build-train-step", [train](OpPassManager &pm) {
                      pm.addPass(training::createBuildTrainStep(train));
                    }});
  if (plan.precision != "fp32") {
    training::MixedPrecisionOptions mp;
    mp.precision = plan.precision;
    // fp16's static scale; -1 leaves it unset, as the pass requires for
    // bf16, and selects dynamic scaling for fp16.
    mp.lossScale = plan.precision == "fp16" && !plan.dynamicLossScale()
                       ? plan.effectiveLossScale()
                       : -1.0;
    if (plan.dynamicLossScale()) {
      mp.initialLossScale = plan.effectiveInitialLossScale();
      mp.lossScaleWindow = plan.lossScaleWindow;
      mp.minLossScale = plan.minLossScale;
    }
    stages.push_back({"mixed-precision", [mp](OpPassManager &pm) {
                        pm.addPass(training::createMixedPrecision(mp));
                      }});
  }
  if (plan.clipGrad > 0) {
    training::ClipGradOptions clip;
    clip.maxNorm = plan.clipGrad;
    stages.push_back({"clip-grad", [clip](OpPassManager &pm) {
                        pm.addPass(training::createClipGrad(clip));
                      }});
  }
  if (plan.recompute != "none") {
    training::RecomputeOptions recompute;
    recompute.mode = plan.recompute;
    stages.push_back({"recompute", [recompute](OpPassManager &pm) {
                        pm.addPass(training::createRecompute(recompute));
                      }});
  }
  sharding::ShardingAnnotateOptions annotate;
  annotate.dp = plan.dp;
  annotate.tp = plan.tp;
  annotate.pp = plan.pp;
  annotate.microBatches = plan.microBatches;
  annotate.vocabParallel = plan.vocabParallel;
  annotate.sp = plan.sp;
  annotate.spSize = plan.spSize;
  annotate.shardings = shardingOptions(plan.shardings);
  stages.push_back({"sharding-annotate", [annotate](OpPassManager &pm) {
                      pm.addPass(sharding::createShardingAnnotate(annotate));
                    }});
  stages.push_back({"sharding-propagate", [](OpPassManager &pm) {
                      pm.addNestedPass<func::FuncOp>(
                          sharding::createShardingPropagate());
                    }});
  stages.push_back({"sharding-partition", [](OpPassManager &pm) {
                      pm.addNestedPass<func::FuncOp>(
                          sharding::createShardingPartition());
                    }});
  if (plan.zero > 0) {
    zero::ZeroShardingOptions zeroOptions;
    zeroOptions.stage = plan.zero;
    stages.push_back({"zero-sharding", [zeroOptions](OpPassManager &pm) {
                        pm.addNestedPass<func::FuncOp>(
                            zero::createZeroSharding(zeroOptions));
                      }});
  }
  if (plan.pipelined()) {
    pipeline::PipelineSplitOptions split;
    split.schedule = plan.schedule;
    split.virtualStages = plan.virtualStages;
    split.stages.assign(plan.ppStages.begin(), plan.ppStages.end());
    stages.push_back({"pipeline-split", [split](OpPassManager &pm) {
                        pm.addPass(pipeline::createPipelineSplit(split));
                      }});
  }
  // Fusions run on the partitioned step (local shapes, collectives placed),
  // so the IR-level step model prices the fused kernels.
  if (plan.fusion != "none") {
    bool linear = plan.fuses("linear"), norm = plan.fuses("norm"),
         elementwise = plan.fuses("elementwise"),
         optimizer = plan.fuses("optimizer");
    stages.push_back({"fusion", [=](OpPassManager &pm) {
                        OpPassManager &fn = pm.nest<func::FuncOp>();
                        if (linear)
                          fn.addPass(fusion::createFuseLinear());
                        if (norm)
                          fn.addPass(fusion::createFuseNorm());
                        if (elementwise)
                          fn.addPass(fusion::createFuseElementwise());
                        if (optimizer)
                          fn.addPass(fusion::createFuseOptimizer());
                      }});
  }
  return stages;
}

pipeline::Stage pipeline::lowerToRuntimeStage(const planner::Plan &plan,
                                              bool withEval) {
  bool eval = withEval && !plan.pipelined();
  std::optional<lowering::OverlapGradientCollectivesOptions> overlap;
  if (plan.bucketMb >= 0) {
    overlap.emplace();
    overlap->bucketMb = plan.bucketMb;
  }
  return {"lower-to-runtime", [overlap, eval](OpPassManager &pm) {
            if (eval)
              pm.addPass(training::createBuildEvalStep());
            pm.addPass(lowering::createLowerToRuntime());
            // Both run per function, nested under the module.
            if (overlap)
              pm.addNestedPass<func::FuncOp>(
                  lowering::createOverlapGradientCollectives(*overlap));
            pm.addNestedPass<func::FuncOp>(lowering::createPlanMemory());
          }};
}

void pipeline::recordStage(StringRef dir, unsigned index, const Stage &stage) {
  SmallString<256> path(dir);
  llvm::sys::path::append(path, "pipeline.txt");
  std::error_code ec = llvm::sys::fs::create_directories(dir);
  // The first stage of a run starts the file afresh.
  llvm::raw_fd_ostream os(
      path, ec, index <= 1 ? llvm::sys::fs::OF_Text : llvm::sys::fs::OF_Append);
  if (ec)
    return; // a missing replay note is not worth failing the compilation
  os << (index < 10 ? "0" : "") << index << "-" << stage.name << ": "
     << stage.pipelineText() << "\n";
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

/// The path of dump `index` in `dir` (the stage's output, not a
/// ".failed" one), or "DIR/NN-*.mlir" when there is none.
static std::string dumpOf(StringRef dir, unsigned index) {
  std::string prefix = (index < 10 ? "0" : "") + std::to_string(index) + "-";
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    StringRef file = llvm::sys::path::filename(it->path());
    if (file.starts_with(prefix) && file.ends_with(".mlir") &&
        !file.ends_with(".failed.mlir"))
      return it->path();
  }
  return (dir + "/" + prefix + "*.mlir").str();
}

LogicalResult pipeline::runStages(ModuleOp module, ArrayRef<Stage> stages,
                                  StringRef dumpDir, unsigned firstIndex) {
  registerAllTesseraPasses();
  unsigned index = firstIndex;
  for (const Stage &stage : stages) {
    PassManager pm(module.getContext());
    pm.enableVerifier(true);
    stage.build(pm);
    if (!dumpDir.empty())
      recordStage(dumpDir, index, stage);
    if (failed(pm.run(module))) {
      // The IR that failed is what one needs to debug the pass: dump it in the
      // generic form, which prints even when the verifier rejects it, and say
      // how to replay the stage on the IR before it.
      if (!dumpDir.empty() &&
          succeeded(dumpModule(module, dumpDir, index, stage.name + ".failed",
                               /*generic=*/true)))
        llvm::errs() << "note: stage " << stage.name
                     << " failed; replay it with: tessera-opt "
                        "--pass-pipeline='"
                     << stage.pipelineText() << "' "
                     << dumpOf(dumpDir, index - 1) << "\n";
      return failure();
    }
    if (!dumpDir.empty() &&
        failed(dumpModule(module, dumpDir, index, stage.name)))
      return failure();
    ++index;
  }
  return success();
}

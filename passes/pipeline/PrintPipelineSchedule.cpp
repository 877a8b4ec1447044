//===- PrintPipelineSchedule.cpp - per-rank pipeline schedule -------------===//
//
// Prints what every rank runs under the module's tsrt.pipeline_schedule: its
// grid coordinates, its stage's actions and the peak number of activation
// sets it holds against the schedule's bound. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/DiscardableAttrs.h"
#include "passes/pipeline/Passes.h"

#include "common/schedule/PipelineSchedule.h"
#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace tessera::pipeline {
#define GEN_PASS_DEF_PRINTPIPELINESCHEDULE
#include "passes/pipeline/Passes.h.inc"
} // namespace tessera::pipeline

using namespace mlir;
using namespace tessera;
namespace sched = tessera::tsrt::schedule;

namespace {
struct PrintPipelineSchedulePass
    : tessera::pipeline::impl::PrintPipelineScheduleBase<
          PrintPipelineSchedulePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto ops = module.getOps<tsrt::PipelineScheduleOp>();
    if (ops.empty()) {
      module.emitError("no tsrt.pipeline_schedule to print (run "
                       "tsr-pipeline-split first)");
      return signalPassFailure();
    }
    tsrt::PipelineScheduleOp op = *ops.begin();
    auto grid = module.lookupSymbol<shard::GridOp>("grid");
    auto names = tsr::getGridAxes(module);
    if (!grid || !names || names.size() != grid.getShape().size()) {
      op.emitError("the module has no shard.grid @grid with named axes "
                   "(tsr.grid_axes)");
      return signalPassFailure();
    }
    // Rank axes: every grid axis but mb, the last varying fastest.
    SmallVector<StringRef> axisNames;
    SmallVector<int64_t> axisSizes;
    int64_t ppIndex = -1;
    for (auto [name, size] : llvm::zip(names, grid.getShape())) {
      StringRef n = cast<StringAttr>(name).getValue();
      if (n == "mb")
        continue;
      if (n == "pp")
        ppIndex = axisNames.size();
      axisNames.push_back(n);
      axisSizes.push_back(size);
    }
    if (ppIndex < 0) {
      op.emitError("the schedule's grid has no 'pp' axis");
      return signalPassFailure();
    }

    sched::Kind kind = *sched::parseKind(op.getKind());
    sched::Shape shape{static_cast<int64_t>(op.getStages()),
                       static_cast<int64_t>(op.getVirtualStages()),
                       static_cast<int64_t>(op.getMicroBatches())};
    std::vector<sched::StageActions> actions;
    for (Attribute text : op.getActions()) {
      auto parsed = sched::parse(cast<StringAttr>(text).getValue());
      if (!parsed) {
        op.emitError(llvm::toString(parsed.takeError()));
        return signalPassFailure();
      }
      actions.push_back(std::move(*parsed));
    }
    std::vector<int64_t> peak = sched::peakInFlight(actions);

    llvm::raw_ostream &os = llvm::outs();
    os << llvm::formatv("pipeline schedule: {0}, {1} stages x {2} virtual = "
                        "{3} chunks, {4} micro-batches\n",
                        op.getKind(), shape.stages, shape.virtualStages,
                        shape.numChunks(), shape.microBatches);
    os << llvm::formatv("predicted bubble fraction: (P - 1) / (V*M + P - 1) "
                        "= {0} / {1} = {2:F3}\n",
                        shape.stages - 1,
                        shape.virtualStages * shape.microBatches +
                            shape.stages - 1,
                        sched::bubbleFraction(shape));
    if (FailureOr<double> simulated = tsrt::simulatedBubble(op);
        succeeded(simulated))
      os << llvm::formatv("simulated bubble fraction (chunk FLOPs, backward "
                          "= 2 x forward): {0:F3}\n",
                          *simulated);
    int64_t ranks = 1;
    for (int64_t s : axisSizes)
      ranks *= s;
    SmallVector<int64_t> coord(axisSizes.size(), 0);
    for (int64_t rank = 0; rank < ranks; ++rank) {
      int64_t rest = rank;
      for (int64_t i = axisSizes.size() - 1; i >= 0; --i) {
        coord[i] = rest % axisSizes[i];
        rest /= axisSizes[i];
      }
      int64_t stage = coord[ppIndex];
      os << "rank " << rank << " (";
      for (auto [i, n] : llvm::enumerate(axisNames))
        os << (i ? " " : "") << n << "=" << coord[i];
      os << ") stage " << stage << ": " << sched::format(actions[stage])
         << "\n";
      os << llvm::formatv("  peak activation sets {0} (bound {1})\n",
                          peak[stage],
                          sched::inFlightBound(kind, shape, stage));
    }
  }
};
} // namespace

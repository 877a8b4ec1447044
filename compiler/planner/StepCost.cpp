//===- StepCost.cpp - predicted step time of a partitioned plan -----------===//

#include "compiler/planner/StepCost.h"
#include "compiler/planner/CostModel.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tessera;
using namespace tessera::planner;

static llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "step cost: " + msg);
}

/// Bytes of a statically shaped tensor, or -1.
static double tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return -1;
  Type element = tensor.getElementType();
  if (!element.isIntOrFloat())
    return -1;
  unsigned bits = element.getIntOrFloatBitWidth();
  return static_cast<double>(tensor.getNumElements()) * bits / 8.0;
}

llvm::Expected<StepCost> planner::predictStepCost(ModuleOp module,
                                                  const Cluster &cluster,
                                                  llvm::StringRef dtype,
                                                  double gemmEfficiency) {
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16")
    return error("unknown dtype '" + dtype + "' (expected fp32, bf16 or fp16)");
  auto peakIt = cluster.peakFlops.find(dtype.str());
  if (peakIt == cluster.peakFlops.end() || !(peakIt->second > 0))
    return error("cluster '" + cluster.name + "' has no peak FLOP/s for " +
                 dtype);
  double peak = peakIt->second;
  if (!(gemmEfficiency > 0 && gemmEfficiency <= 1))
    return error("GEMM efficiency must be in (0, 1], got " +
                 llvm::Twine(std::to_string(gemmEfficiency)));

  func::FuncOp step;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.getName() == "train_step")
      step = fn;
    else
      return error("function @" + fn.getName() +
                   " besides @train_step: pipeline plans are not costed yet");
  }
  if (!step)
    return error("the module has no @train_step");

  StepCost cost;
  // The grid: its shape from `shard.grid`, one rank without one.
  SmallVector<shard::GridOp> grids(module.getOps<shard::GridOp>());
  if (grids.size() > 1)
    return error("the module has more than one shard.grid");
  if (!grids.empty())
    cost.gridShape.assign(grids[0].getShape().begin(),
                          grids[0].getShape().end());
  if (auto names = module->getAttrOfType<ArrayAttr>("tsr.grid_axes")) {
    for (Attribute name : names)
      if (auto str = dyn_cast<StringAttr>(name))
        cost.axisNames.push_back(str.str());
    if (cost.axisNames.size() != cost.gridShape.size())
      return error("tsr.grid_axes names " + llvm::Twine(names.size()) +
                   " axes but the grid has " +
                   llvm::Twine(cost.gridShape.size()));
  }
  for (int64_t size : cost.gridShape) {
    if (size <= 0)
      return error("the grid has a dynamic or empty axis");
    cost.ranks *= size;
  }
  if (cost.ranks > cluster.devices())
    return error("the plan needs " + llvm::Twine(cost.ranks) +
                 " ranks but cluster '" + cluster.name + "' has " +
                 llvm::Twine(cluster.devices()) + " devices");

  llvm::Error err = llvm::Error::success();
  auto addCollective = [&](Operation *op, Collective kind,
                           ArrayRef<int16_t> axes, Type sized) {
    double bytes = tensorBytes(sized);
    if (bytes < 0) {
      err = error(op->getName().getStringRef() +
                  " on a tensor without a static shape");
      return;
    }
    CollectiveCost c;
    c.kind = collectiveName(kind).str();
    c.axes.assign(axes.begin(), axes.end());
    c.bytes = bytes;
    int64_t n = 1;
    for (int16_t axis : axes) {
      if (axis < 0 || static_cast<size_t>(axis) >= cost.gridShape.size()) {
        err = error(op->getName().getStringRef() + " on grid axis " +
                    llvm::Twine(axis) + " outside the grid");
        return;
      }
      n *= cost.gridShape[axis];
      // A group over several axes is connected by single-axis steps, so it
      // stays in one node iff every one of its axes does.
      c.withinNode &= axisWithinNode(cluster, cost.gridShape, axis);
    }
    c.seconds = collectiveSeconds(
        kind, bytes, n, c.withinNode ? cluster.intraNode : cluster.interNode);
    cost.communicationSeconds += c.seconds;
    cost.collectives.push_back(std::move(c));
  };

  step.walk([&](Operation *op) -> WalkResult {
    if (auto costOp = dyn_cast<tsr::CostOpInterface>(op)) {
      cost.flopsPerRank += static_cast<double>(costOp.getFlops());
      return WalkResult::advance();
    }
    llvm::TypeSwitch<Operation *>(op)
        .Case([&](shard::AllReduceOp o) {
          addCollective(op, Collective::AllReduce, o.getGridAxes(),
                        o.getInput().getType());
        })
        .Case([&](shard::AllGatherOp o) {
          addCollective(op, Collective::AllGather, o.getGridAxes(),
                        o.getResult().getType());
        })
        .Case([&](shard::ReduceScatterOp o) {
          addCollective(op, Collective::ReduceScatter, o.getGridAxes(),
                        o.getInput().getType());
        })
        .Case([&](shard::AllToAllOp o) {
          addCollective(op, Collective::AllToAll, o.getGridAxes(),
                        o.getInput().getType());
        })
        .Default([](Operation *) {});
    return err ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (err)
    return std::move(err);

  cost.computeSeconds = cost.flopsPerRank / (peak * gemmEfficiency);
  cost.stepSeconds = cost.computeSeconds + cost.communicationSeconds;
  cost.mfu =
      cost.stepSeconds > 0 ? cost.flopsPerRank / (cost.stepSeconds * peak) : 0;
  return cost;
}

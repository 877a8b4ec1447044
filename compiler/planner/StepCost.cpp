//===- StepCost.cpp - predicted step time of a partitioned plan -----------===//

#include "compiler/planner/StepCost.h"
#include "common/cluster/CostModel.h"
#include "common/schedule/PipelineSchedule.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"
#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

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

double planner::gemmSeconds(const Cluster &cluster, llvm::StringRef dtype,
                            double peak, int64_t batch, int64_t m, int64_t n,
                            int64_t k, std::optional<double> gemmEfficiency) {
  double flops = 2.0 * static_cast<double>(batch) * m * n * k;
  if (flops <= 0)
    return 0;
  if (gemmEfficiency)
    return flops / (peak * *gemmEfficiency);
  double bytes = static_cast<double>(batch) * double(dtypeBytes(dtype)) *
                 (static_cast<double>(m) * k + static_cast<double>(k) * n +
                  static_cast<double>(m) * n);
  return gemmWorkSeconds(cluster, dtype, peak, double(m), double(n), double(k),
                         flops, bytes);
}

namespace {

/// Checks the dtype and the GEMM efficiency; returns the cluster's peak
/// FLOP/s for the dtype.
llvm::Expected<double> peakFor(const Cluster &cluster, llvm::StringRef dtype,
                               std::optional<double> gemmEfficiency) {
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16")
    return error("unknown dtype '" + dtype + "' (expected fp32, bf16 or fp16)");
  auto peakIt = cluster.peakFlops.find(dtype.str());
  if (peakIt == cluster.peakFlops.end() || !(peakIt->second > 0))
    return error("cluster '" + cluster.name + "' has no peak FLOP/s for " +
                 dtype);
  if (gemmEfficiency && !(*gemmEfficiency > 0 && *gemmEfficiency <= 1))
    return error("GEMM efficiency must be in (0, 1], got " +
                 llvm::Twine(std::to_string(*gemmEfficiency)));
  return peakIt->second;
}

/// The functions to cost: one @train_step, or a pipeline: a
/// tsrt.pipeline_schedule and its chunks' forward / backward / apply
/// functions.
struct StepFunctions {
  func::FuncOp step;
  tsrt::PipelineScheduleOp schedule;
};

llvm::Expected<StepFunctions> findStepFunctions(ModuleOp module) {
  StepFunctions found;
  SmallVector<tsrt::PipelineScheduleOp> schedules(
      module.getOps<tsrt::PipelineScheduleOp>());
  if (schedules.size() > 1)
    return error("the module has more than one tsrt.pipeline_schedule");
  found.schedule = schedules.empty() ? nullptr : schedules.front();
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal() || fn.isPrivate())
      continue;
    if (fn.getName() == "train_step")
      found.step = fn;
    else if (!found.schedule)
      return error("function @" + fn.getName() +
                   " besides @train_step and no tsrt.pipeline_schedule");
  }
  if (!found.step && !found.schedule)
    return error("the module has no @train_step");
  return found;
}

/// Where the grid's axes put ranks: the rank axes (not mb) in the order
/// ranks are laid out, slowest first, and each grid axis's position in it,
/// for node placement.
struct RankLayout {
  std::vector<int64_t> gridShape;
  std::vector<int64_t> rankShape;
  /// Per grid axis: its index in rankShape, -1 for the mb axis.
  std::vector<int64_t> rankPosition;
  /// The pp axis, or -1.
  int64_t ppAxis = -1;

  /// Ranks between neighbours along grid axis `axis` (a rank axis): the
  /// product of the axes laid out faster.
  int64_t rankStride(int64_t axis) const {
    int64_t stride = 1;
    for (size_t p = size_t(rankPosition[axis]) + 1; p < rankShape.size(); ++p)
      stride *= rankShape[p];
    return stride;
  }

  /// The rank stride of a group over `axes` when its ranks are evenly
  /// spaced ({b, b + s, ...}: the axes, ordered by stride, nest without
  /// gaps), else 0.
  int64_t groupStride(ArrayRef<int16_t> axes) const {
    std::vector<std::pair<int64_t, int64_t>> strideSize;
    for (int16_t axis : axes) {
      if (axis < 0 || static_cast<size_t>(axis) >= rankPosition.size() ||
          rankPosition[axis] < 0)
        return 0;
      int64_t stride = rankStride(axis);
      if (gridShape[axis] > 1)
        strideSize.push_back({stride, gridShape[axis]});
    }
    if (strideSize.empty())
      return 0;
    llvm::sort(strideSize);
    for (size_t i = 1; i < strideSize.size(); ++i)
      if (strideSize[i].first !=
          strideSize[i - 1].first * strideSize[i - 1].second)
        return 0;
    return strideSize.front().first;
  }
};

/// Reads the grid (its shape from `shard.grid`, one rank without one, its
/// axis names from `tsr.grid_axes`) into `cost` and lays its rank axes out
/// in `rankOrder`.
llvm::Expected<RankLayout> readGrid(ModuleOp module, const Cluster &cluster,
                                    ArrayRef<std::string> rankOrder,
                                    StepCost &cost) {
  SmallVector<shard::GridOp> grids(module.getOps<shard::GridOp>());
  if (grids.size() > 1)
    return error("the module has more than one shard.grid");
  if (!grids.empty())
    cost.gridShape.assign(grids[0].getShape().begin(),
                          grids[0].getShape().end());
  if (auto names = tsr::getGridAxes(module)) {
    for (Attribute name : names)
      if (auto str = dyn_cast<StringAttr>(name))
        cost.axisNames.push_back(str.str());
    if (cost.axisNames.size() != cost.gridShape.size())
      return error("tsr.grid_axes names " + llvm::Twine(names.size()) +
                   " axes but the grid has " +
                   llvm::Twine(cost.gridShape.size()));
  }
  for (auto [i, size] : llvm::enumerate(cost.gridShape)) {
    if (size <= 0)
      return error("the grid has a dynamic or empty axis");
    // The micro-batch axis of a pipeline is not ranks.
    if (i < cost.axisNames.size() && cost.axisNames[i] == "mb")
      continue;
    cost.ranks *= size;
  }
  RankLayout layout;
  layout.gridShape = cost.gridShape;
  layout.rankPosition.assign(cost.gridShape.size(), -1);
  std::vector<int64_t> order;
  auto indexOf = [&](llvm::StringRef name) -> int64_t {
    for (auto [i, n] : llvm::enumerate(cost.axisNames))
      if (n == name)
        return int64_t(i);
    return -1;
  };
  for (const std::string &name : rankOrder) {
    int64_t i = indexOf(name);
    if (i < 0)
      return error("rank order names axis '" + name +
                   "', which the grid does not have");
    order.push_back(i);
  }
  // Axes the order leaves out (or all, without one) in grid order: slowest
  // first when an order is given, as Plan::effectiveRankOrder puts them.
  std::vector<int64_t> rest;
  for (size_t i = 0; i < cost.gridShape.size(); ++i)
    if (!llvm::is_contained(order, int64_t(i)) &&
        !(i < cost.axisNames.size() && cost.axisNames[i] == "mb"))
      rest.push_back(int64_t(i));
  order.insert(order.begin(), rest.begin(), rest.end());
  for (int64_t i : order) {
    layout.rankPosition[i] = int64_t(layout.rankShape.size());
    layout.rankShape.push_back(cost.gridShape[i]);
  }
  for (auto [i, name] : llvm::enumerate(cost.axisNames))
    if (name == "pp")
      layout.ppAxis = int64_t(i);
  if (cost.ranks > cluster.devices())
    return error("the plan needs " + llvm::Twine(cost.ranks) +
                 " ranks but cluster '" + cluster.name + "' has " +
                 llvm::Twine(cluster.devices()) + " devices");
  return layout;
}

/// Walks functions and adds their kernels and collectives to a StepCost
/// (see StepCost.h for the formulas).
class FunctionCoster {
public:
  FunctionCoster(const Cluster &cluster, llvm::StringRef dtype, double peak,
                 std::optional<double> gemmEfficiency, const RankLayout &layout,
                 bool pipeline, StepCost &cost)
      : cluster(cluster), dtype(dtype), peak(peak),
        gemmEfficiency(gemmEfficiency), layout(layout), pipeline(pipeline),
        cost(cost) {}

  /// Adds the kernels and collectives of `fn` to the cost.
  llvm::Error walk(func::FuncOp fn) {
    sinceCollective = 0;
    afterCollective = false;
    fn.walk([&](Operation *op) -> WalkResult {
      // A pipeline send: one message to the next (or previous) stage over pp
      // (its recv is the peer's send and costs nothing more).
      if (auto send = dyn_cast<tsrt::SendOp>(op)) {
        if (layout.ppAxis >= 0)
          addCollective(op, Collective::SendRecv,
                        {static_cast<int16_t>(layout.ppAxis)},
                        send.getInput().getType(), /*syncPoint=*/false);
      } else if (auto costOp = dyn_cast<tsr::CostOpInterface>(op)) {
        addKernel(costOp);
      } else {
        addShardCollective(op);
      }
      return failure ? WalkResult::interrupt() : WalkResult::advance();
    });
    endSegment();
    if (failure)
      return error(*failure);
    return llvm::Error::success();
  }

private:
  /// Ends a stretch of compute after a collective: its sync lag (not in a
  /// pipeline: its ranks that share a core are in different stages, pp
  /// being the slowest rank axis, not in one collective, and the schedule
  /// simulation gives them their turns: ComputeSharing).
  void endSegment() {
    if (afterCollective && !pipeline) {
      double window = std::min(sinceCollective, cluster.syncLagWindow);
      cost.syncLagComputeSeconds += window;
      cost.syncLagSeconds += cluster.syncLagFraction * window;
    }
    sinceCollective = 0;
  }

  /// `syncPoint`: the collective counts for the sync lag (a pipeline's sends
  /// do not: the schedule simulation times their stages' waits).
  /// `inKernel`: a kernel's own message (ring attention's rotations, the
  /// vocab-parallel cross-entropy's statistics), which its compute separates
  /// from the previous one, so never back to back.
  void addCollectiveBytes(Operation *op, Collective kind,
                          ArrayRef<int16_t> axes, double bytes,
                          bool syncPoint = true, bool inKernel = false) {
    // Right after another collective, no kernel time between: the ranks
    // arrive together (Cluster::Link::measuredBackToBack).
    bool backToBack =
        syncPoint && !inKernel && afterCollective && sinceCollective == 0;
    if (syncPoint) {
      endSegment();
      afterCollective = true;
    }
    CollectiveCost c;
    c.kind = collectiveName(kind).str();
    c.axes.assign(axes.begin(), axes.end());
    c.bytes = bytes;
    int64_t n = 1;
    for (int16_t axis : axes) {
      if (axis < 0 || static_cast<size_t>(axis) >= cost.gridShape.size()) {
        failure = (op->getName().getStringRef() + " on grid axis " +
                   llvm::Twine(axis) + " outside the grid")
                      .str();
        return;
      }
      n *= cost.gridShape[axis];
      // A group over several axes is connected by single-axis steps, so it
      // stays in one node iff every one of its axes does.
      if (layout.rankPosition[axis] >= 0)
        c.withinNode &= axisWithinNode(cluster, layout.rankShape,
                                       size_t(layout.rankPosition[axis]));
    }
    c.groupStride = layout.groupStride(axes);
    c.seconds = collectiveSeconds(
        kind, bytes, n,
        cluster.link(collectiveName(kind), c.withinNode, n, c.groupStride),
        backToBack);
    c.backToBack = backToBack;
    cost.communicationSeconds += c.seconds;
    cost.collectives.push_back(std::move(c));
  }

  void addCollective(Operation *op, Collective kind, ArrayRef<int16_t> axes,
                     Type sized, bool syncPoint = true) {
    double bytes = tensorBytes(sized);
    if (bytes < 0) {
      failure =
          (op->getName().getStringRef() + " on a tensor without a static shape")
              .str();
      return;
    }
    addCollectiveBytes(op, kind, axes, bytes, syncPoint);
  }

  /// When `op` is an OpT, adds it as a `kind` collective sized by its input
  /// (`byResult`: by its result) and returns true.
  template <typename OpT>
  bool addShardCollectiveOf(Operation *op, Collective kind,
                            bool byResult = false) {
    auto o = dyn_cast<OpT>(op);
    if (o)
      addCollective(op, kind, o.getGridAxes(),
                    byResult ? Type(o.getResult().getType())
                             : Type(o.getInput().getType()));
    return bool(o);
  }

  /// A `shard` collective (all_slice and other ops cost nothing).
  void addShardCollective(Operation *op) {
    (void)(addShardCollectiveOf<shard::AllReduceOp>(op,
                                                    Collective::AllReduce) ||
           addShardCollectiveOf<shard::AllGatherOp>(op, Collective::AllGather,
                                                    /*byResult=*/true) ||
           addShardCollectiveOf<shard::ReduceScatterOp>(
               op, Collective::ReduceScatter) ||
           addShardCollectiveOf<shard::AllToAllOp>(op, Collective::AllToAll));
  }

  /// One kernel: its time (GEMM-like or other), overhead and own messages.
  void addKernel(tsr::CostOpInterface costOp) {
    Operation *op = costOp;
    // A constant is materialised once, when the plan is loaded.
    if (op->hasTrait<OpTrait::ConstantLike>())
      return;
    double flops = static_cast<double>(costOp.getFlops());
    double bytes = static_cast<double>(costOp.getBytesAccessed());
    double transcendentals =
        cluster.transcendentalRate > 0
            ? static_cast<double>(costOp.getTranscendentals()) /
                  cluster.transcendentalRate
            : 0;
    cost.flopsPerRank += flops;
    ++cost.kernels;
    SmallVector<tsr::GemmShape> gemms = costOp.getGemmShapes();
    auto measured = cluster.kernelSecondsPerElement.find(
        op->getName().stripDialect().str());
    // The count the calibration measured the kernel in (elements of
    // operand 0; the fused attention kernels: scores formed), or -1.
    int64_t units = measured != cluster.kernelSecondsPerElement.end()
                        ? costOp.getMeasuredUnits()
                        : -1;
    // This op's kernel time: GEMM-like (gemmSeconds) or other.
    double opGemm = 0, opOther = 0;
    if (units >= 0) {
      // The backend's own kernel, measured per unit.
      (gemms.empty() ? opOther : opGemm) =
          static_cast<double>(units) * measured->second;
    } else if (!gemms.empty()) {
      double gemmFlops = 0, seconds = 0;
      for (const tsr::GemmShape &g : gemms) {
        gemmFlops += static_cast<double>(g.flops());
        seconds += gemmSeconds(cluster, dtype, peak, g.batch, g.m, g.n, g.k,
                               gemmEfficiency);
      }
      opGemm =
          seconds + std::max(0.0, flops - gemmFlops) / peak + transcendentals;
    } else {
      opOther = flops / peak + transcendentals;
      if (cluster.memoryBandwidth > 0)
        opOther = std::max(opOther, bytes / cluster.memoryBandwidth);
    }
    opGemm *= cluster.computeScale;
    opOther *= cluster.computeScale;
    cost.gemmSeconds += opGemm;
    cost.otherSeconds += opOther;
    sinceCollective += opGemm + opOther;
    OpKindCost &kind = cost.opKinds[op->getName().stripDialect().str()];
    ++kind.calls;
    kind.seconds += opGemm + opOther + cluster.opOverhead;
    // The kernel's own messages (ring attention's K/V rotations, the
    // vocab-parallel cross-entropy's row statistics), which its compute
    // separates from the previous collective.
    for (const tsr::KernelMessage &m : costOp.getKernelMessages()) {
      addCollectiveBytes(op,
                         m.kind == tsr::KernelMessage::Kind::SendRecv
                             ? Collective::SendRecv
                             : Collective::AllReduce,
                         m.gridAxes, static_cast<double>(m.bytes), true,
                         /*inKernel=*/true);
      if (failure)
        break;
    }
  }

  const Cluster &cluster;
  llvm::StringRef dtype;
  double peak;
  std::optional<double> gemmEfficiency;
  const RankLayout &layout;
  bool pipeline;
  StepCost &cost;
  /// The sync lag (Cluster::syncLagFraction): compute since the function's
  /// last collective (ops' kernel time, overhead left out), and whether it
  /// had one.
  double sinceCollective = 0;
  bool afterCollective = false;
  /// The first error met, without the "step cost: " prefix.
  std::optional<std::string> failure;
};

/// What one pipeline function (a chunk's forward, backward or apply) costs.
struct Parts {
  double gemm = 0, other = 0, comm = 0, flops = 0;
  int64_t kernels = 0;
  /// The function's collectives: cost.collectives[begin, end).
  size_t collectivesBegin = 0, collectivesEnd = 0;
  /// The function's kernels by op kind.
  std::map<std::string, OpKindCost> opKinds;
  double seconds(double overhead) const {
    return gemm + other + comm + double(kernels) * overhead;
  }
};

/// Costs the pipeline function `ref` names into `parts`: what it adds to
/// `cost`'s running totals (its collectives are appended to
/// cost.collectives, its op kinds kept apart).
llvm::Error costPipelineFunction(tsrt::PipelineScheduleOp schedule,
                                 SymbolTableCollection &symbols, Attribute ref,
                                 FunctionCoster &coster, StepCost &cost,
                                 Parts &parts) {
  auto fn = symbols.lookupNearestSymbolFrom<func::FuncOp>(
      schedule, cast<SymbolRefAttr>(ref));
  if (!fn)
    return error("tsrt.pipeline_schedule names a missing function");
  Parts before;
  before.gemm = cost.gemmSeconds;
  before.other = cost.otherSeconds;
  before.comm = cost.communicationSeconds;
  before.flops = cost.flopsPerRank;
  before.kernels = cost.kernels;
  before.collectivesBegin = cost.collectives.size();
  std::map<std::string, OpKindCost> kindsBefore;
  std::swap(kindsBefore, cost.opKinds);
  llvm::Error err = coster.walk(fn);
  std::swap(parts.opKinds, cost.opKinds);
  cost.opKinds = std::move(kindsBefore);
  if (err)
    return err;
  parts.gemm = cost.gemmSeconds - before.gemm;
  parts.other = cost.otherSeconds - before.other;
  parts.comm = cost.communicationSeconds - before.comm;
  parts.flops = cost.flopsPerRank - before.flops;
  parts.kernels = cost.kernels - before.kernels;
  parts.collectivesBegin = before.collectivesBegin;
  parts.collectivesEnd = cost.collectives.size();
  return llvm::Error::success();
}

/// Ranks sharing fewer processors than there are ranks (the CPU backend
/// oversubscribed): a stage waiting in its bubble frees its core. Ranks are
/// bound round-robin, as mpirun --map-by core --bind-to core places them:
/// world rank r on core (r mod devices per node) mod cores of its node. A
/// stage's ranks are those of its pp coordinate in the rank layout. Returns
/// std::nullopt when the ranks do not share cores.
std::optional<tsrt::schedule::ComputeSharing>
computeSharing(const Cluster &cluster, const StepCost &cost,
               const RankLayout &layout, int64_t stages) {
  tsrt::schedule::ComputeSharing sharing;
  sharing.processes = cost.ranks;
  sharing.processesPerStage = std::max<int64_t>(1, cost.ranks / stages);
  sharing.cores = cluster.coresPerNode * double(cluster.nodes);
  sharing.waitingShare = cluster.waitingRankShare;
  bool shared = sharing.cores > 0 && sharing.cores < double(cost.ranks) &&
                sharing.waitingShare < 1;
  if (!shared)
    return std::nullopt;
  int64_t coresPerNode = int64_t(std::floor(cluster.coresPerNode));
  int64_t ppAxis = layout.ppAxis;
  if (coresPerNode >= 1 && ppAxis >= 0 && layout.rankPosition[ppAxis] >= 0) {
    int64_t ppStride = layout.rankStride(ppAxis);
    sharing.stageCores.assign(size_t(stages), {});
    for (int64_t r = 0; r < cost.ranks; ++r) {
      int64_t stage = (r / ppStride) % cost.gridShape[ppAxis];
      int64_t node = r / cluster.devicesPerNode;
      int64_t core =
          node * coresPerNode + (r % cluster.devicesPerNode) % coresPerNode;
      if (stage < stages)
        sharing.stageCores[size_t(stage)].push_back(core);
    }
  }
  return sharing;
}

/// A pipeline: each chunk's forward, backward and apply function costed
/// once; the schedule simulated with those times (tsrt::schedule::simulate:
/// a stage runs its actions in order, an action waits for the one it
/// receives from); the step is the makespan plus the slowest stage's apply
/// (its data-parallel all-reduces and optimizer). The per-rank figures are
/// the busiest stage's: its chunks' forward and backward M times, and its
/// apply once.
llvm::Error costPipeline(tsrt::PipelineScheduleOp schedule,
                         FunctionCoster &coster, const Cluster &cluster,
                         const RankLayout &layout, double peak,
                         StepCost &cost) {
  SymbolTableCollection symbols;
  int64_t chunks = int64_t(schedule.getForward().size());
  tsrt::schedule::Shape shape;
  shape.stages = schedule.getStages();
  shape.virtualStages = schedule.getVirtualStages();
  shape.microBatches = schedule.getMicroBatches();
  std::vector<Parts> fwd(chunks), bwd(chunks), apply(chunks);
  std::vector<double> fwdSeconds(chunks), bwdSeconds(chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    if (llvm::Error e = costPipelineFunction(
            schedule, symbols, schedule.getForward()[c], coster, cost, fwd[c]))
      return e;
    if (llvm::Error e = costPipelineFunction(
            schedule, symbols, schedule.getBackward()[c], coster, cost, bwd[c]))
      return e;
    if (llvm::Error e = costPipelineFunction(
            schedule, symbols, schedule.getApply()[c], coster, cost, apply[c]))
      return e;
    fwdSeconds[c] = fwd[c].seconds(cluster.opOverhead);
    bwdSeconds[c] = bwd[c].seconds(cluster.opOverhead);
  }
  std::vector<tsrt::schedule::StageActions> actions;
  for (Attribute a : schedule.getActions()) {
    llvm::Expected<tsrt::schedule::StageActions> parsed =
        tsrt::schedule::parse(cast<StringAttr>(a).getValue());
    if (!parsed)
      return parsed.takeError();
    actions.push_back(std::move(*parsed));
  }
  FailureOr<std::vector<tsrt::schedule::ChunkComms>> comms =
      tsrt::collectChunkComms(schedule, symbols);
  if (failed(comms))
    return error("tsrt.pipeline_schedule: its sends and recvs do not match");
  std::optional<tsrt::schedule::ComputeSharing> sharing =
      computeSharing(cluster, cost, layout, shape.stages);
  tsrt::schedule::Timeline timeline =
      tsrt::schedule::simulate(actions, *comms, shape, fwdSeconds, bwdSeconds,
                               sharing ? &*sharing : nullptr);

  // The busiest stage (most forward + backward + apply time).
  double m = double(shape.microBatches);
  int64_t busiest = 0;
  double busiestSeconds = -1, applyMax = 0;
  for (int64_t s = 0; s < shape.stages; ++s) {
    double busy = 0, applySeconds = 0;
    for (int64_t c = s; c < chunks; c += shape.stages) {
      busy += m * (fwdSeconds[c] + bwdSeconds[c]);
      applySeconds += apply[c].seconds(cluster.opOverhead);
    }
    applyMax = std::max(applyMax, applySeconds);
    if (busy + applySeconds > busiestSeconds) {
      busiestSeconds = busy + applySeconds;
      busiest = s;
    }
  }
  StepCost total = cost;
  total.gemmSeconds = total.otherSeconds = total.communicationSeconds = 0;
  total.flopsPerRank = 0;
  total.kernels = 0;
  total.collectives.clear();
  total.opKinds.clear();
  auto add = [&](const Parts &p, double times) {
    for (const auto &[name, kind] : p.opKinds) {
      OpKindCost &sum = total.opKinds[name];
      sum.calls += int64_t(times) * kind.calls;
      sum.seconds += times * kind.seconds;
    }
    total.gemmSeconds += times * p.gemm;
    total.otherSeconds += times * p.other;
    total.communicationSeconds += times * p.comm;
    total.flopsPerRank += times * p.flops;
    total.kernels += int64_t(times) * p.kernels;
    for (int64_t k = 0; k < int64_t(times); ++k)
      total.collectives.insert(total.collectives.end(),
                               cost.collectives.begin() + p.collectivesBegin,
                               cost.collectives.begin() + p.collectivesEnd);
  };
  for (int64_t c = busiest; c < chunks; c += shape.stages) {
    add(fwd[c], m);
    add(bwd[c], m);
    add(apply[c], 1);
  }
  cost = std::move(total);
  cost.overheadSeconds = static_cast<double>(cost.kernels) * cluster.opOverhead;
  cost.computeSeconds =
      cost.gemmSeconds + cost.otherSeconds + cost.overheadSeconds;
  cost.stepSeconds = timeline.makespan + applyMax;
  cost.bubbleSeconds = std::max(0.0, cost.stepSeconds - cost.computeSeconds -
                                         cost.communicationSeconds);
  cost.mfu =
      cost.stepSeconds > 0 ? cost.flopsPerRank / (cost.stepSeconds * peak) : 0;
  return llvm::Error::success();
}

} // namespace

llvm::Expected<StepCost> planner::predictStepCost(
    ModuleOp module, const Cluster &cluster, llvm::StringRef dtype,
    std::optional<double> gemmEfficiency, ArrayRef<std::string> rankOrder) {
  llvm::Expected<double> peak = peakFor(cluster, dtype, gemmEfficiency);
  if (!peak)
    return peak.takeError();
  llvm::Expected<StepFunctions> functions = findStepFunctions(module);
  if (!functions)
    return functions.takeError();
  StepCost cost;
  llvm::Expected<RankLayout> layout =
      readGrid(module, cluster, rankOrder, cost);
  if (!layout)
    return layout.takeError();
  FunctionCoster coster(cluster, dtype, *peak, gemmEfficiency, *layout,
                        /*pipeline=*/bool(functions->schedule), cost);
  if (functions->schedule) {
    if (llvm::Error e = costPipeline(functions->schedule, coster, cluster,
                                     *layout, *peak, cost))
      return std::move(e);
    return cost;
  }
  if (llvm::Error e = coster.walk(functions->step))
    return std::move(e);
  cost.overheadSeconds = static_cast<double>(cost.kernels) * cluster.opOverhead;
  cost.computeSeconds =
      cost.gemmSeconds + cost.otherSeconds + cost.overheadSeconds;
  cost.stepSeconds =
      cost.computeSeconds + cost.communicationSeconds + cost.syncLagSeconds;
  cost.mfu =
      cost.stepSeconds > 0 ? cost.flopsPerRank / (cost.stepSeconds * *peak) : 0;
  return cost;
}

llvm::json::Value planner::toJSON(const StepCost &cost,
                                  const Cluster &cluster) {
  llvm::json::Array collectives;
  for (const CollectiveCost &c : cost.collectives) {
    llvm::json::Array axes;
    for (int16_t axis : c.axes)
      axes.push_back(static_cast<size_t>(axis) < cost.axisNames.size()
                         ? llvm::json::Value(cost.axisNames[axis])
                         : llvm::json::Value(static_cast<int64_t>(axis)));
    collectives.push_back(llvm::json::Object{{"kind", c.kind},
                                             {"axes", std::move(axes)},
                                             {"bytes", c.bytes},
                                             {"seconds", c.seconds},
                                             {"within_node", c.withinNode},
                                             {"back_to_back", c.backToBack}});
  }
  std::vector<std::pair<std::string, OpKindCost>> kinds(cost.opKinds.begin(),
                                                        cost.opKinds.end());
  llvm::stable_sort(kinds, [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  llvm::json::Array ops;
  for (const auto &[name, kind] : kinds)
    ops.push_back(llvm::json::Object{
        {"kind", name}, {"calls", kind.calls}, {"seconds", kind.seconds}});
  return llvm::json::Object{{"cluster", cluster.name},
                            {"ranks", cost.ranks},
                            {"step_s", cost.stepSeconds},
                            {"compute_s", cost.computeSeconds},
                            {"gemm_s", cost.gemmSeconds},
                            {"other_s", cost.otherSeconds},
                            {"overhead_s", cost.overheadSeconds},
                            {"bubble_s", cost.bubbleSeconds},
                            {"kernels", cost.kernels},
                            {"communication_s", cost.communicationSeconds},
                            {"sync_lag_s", cost.syncLagSeconds},
                            {"sync_lag_compute_s", cost.syncLagComputeSeconds},
                            {"flops_per_rank", cost.flopsPerRank},
                            {"mfu", cost.mfu},
                            {"collectives", std::move(collectives)},
                            {"ops", std::move(ops)}};
}

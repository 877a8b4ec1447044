//===- TsrtDialect.cpp - Tessera runtime-program dialect ------------------===//

#include "dialects/tsrt/TsrtDialect.h"
#include "common/schedule/PipelineSchedule.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

#include <map>

using namespace mlir;
using namespace tessera::tsrt;

#include "dialects/tsrt/TsrtDialect.cpp.inc"

void TsrtDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/tsrt/TsrtOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "dialects/tsrt/TsrtOps.cpp.inc"

LogicalResult KernelOp::verify() {
  if (getKernel().empty())
    return emitOpError("kernel name is empty");
  for (Type t : getOperation()->getOperandTypes())
    if (!cast<RankedTensorType>(t).hasStaticShape())
      return emitOpError("operands must be statically shaped");
  if (Attribute a = getAttrs().get("grid_axes")) {
    auto axes = dyn_cast<DenseI16ArrayAttr>(a);
    if (!axes || axes.empty())
      return emitOpError("grid_axes must be a non-empty array<i16>");
    for (auto [i, axis] : llvm::enumerate(axes.asArrayRef()))
      if (axis < 0 || llvm::is_contained(axes.asArrayRef().take_front(i), axis))
        return emitOpError("grid_axes has a negative or repeated axis ")
               << axis;
  }
  return success();
}

/// Shared checks: grid axes distinct and non-negative; dims in range.
static LogicalResult verifyCollective(Operation *op, ArrayRef<int16_t> axes,
                                      ArrayRef<int64_t> dims) {
  if (axes.empty())
    return op->emitOpError("needs at least one grid axis");
  for (auto [i, a] : llvm::enumerate(axes)) {
    if (a < 0)
      return op->emitOpError("grid axis ") << a << " is negative";
    if (llvm::is_contained(axes.take_front(i), a))
      return op->emitOpError("grid axis ") << a << " repeated";
  }
  int64_t rank = cast<RankedTensorType>(op->getOperand(0).getType()).getRank();
  for (int64_t d : dims)
    if (d < 0 || d >= rank)
      return op->emitOpError("dimension ")
             << d << " out of range for rank " << rank;
  return success();
}

/// tsrt.all_reduce and tsrt.all_reduce_start: a known reduction, the
/// input's type kept, valid grid axes.
template <typename OpTy> static LogicalResult verifyAllReduce(OpTy op) {
  if (op.getReduction() != "sum" && op.getReduction() != "max")
    return op.emitOpError("reduction must be \"sum\" or \"max\"");
  if (op.getInput().getType() != op.getResult().getType())
    return op.emitOpError("result type must equal input type");
  return verifyCollective(op, op.getGridAxes(), {});
}

LogicalResult AllReduceOp::verify() { return verifyAllReduce(*this); }

LogicalResult AllReduceStartOp::verify() { return verifyAllReduce(*this); }

LogicalResult WaitOp::verify() {
  auto start = getPending().getDefiningOp<AllReduceStartOp>();
  if (!start)
    return emitOpError("pending value must be made by tsrt.all_reduce_start");
  if (start.getInput() != getInput())
    return emitOpError("input must be the input of the tsrt.all_reduce_start "
                       "being waited for");
  if (getResult().getType() != getPending().getType())
    return emitOpError("result type must equal the pending value's type");
  return success();
}

LogicalResult AllGatherOp::verify() {
  return verifyCollective(*this, getGridAxes(),
                          {static_cast<int64_t>(getDim())});
}

LogicalResult ReduceScatterOp::verify() {
  return verifyCollective(*this, getGridAxes(),
                          {static_cast<int64_t>(getDim())});
}

LogicalResult AllSliceOp::verify() {
  return verifyCollective(*this, getGridAxes(),
                          {static_cast<int64_t>(getDim())});
}

LogicalResult AllToAllOp::verify() {
  return verifyCollective(*this, getGridAxes(),
                          {static_cast<int64_t>(getSplitDim()),
                           static_cast<int64_t>(getConcatDim())});
}

//===----------------------------------------------------------------------===//
// Pipeline parallelism
//===----------------------------------------------------------------------===//

LogicalResult SendOp::verify() {
  if (static_cast<int64_t>(getChunk()) < 0 ||
      static_cast<int64_t>(getChannel()) < 0)
    return emitOpError("chunk and channel must be non-negative");
  return success();
}

LogicalResult RecvOp::verify() {
  if (static_cast<int64_t>(getChunk()) < 0 ||
      static_cast<int64_t>(getChannel()) < 0)
    return emitOpError("chunk and channel must be non-negative");
  return success();
}

LogicalResult PipelineScheduleOp::verify() {
  if (!schedule::parseKind(getKind()))
    return emitOpError("unknown schedule kind '")
           << getKind() << "' (expected gpipe, 1f1b or interleaved)";
  if (static_cast<int64_t>(getStages()) < 1 ||
      static_cast<int64_t>(getVirtualStages()) < 1 ||
      static_cast<int64_t>(getMicroBatches()) < 1)
    return emitOpError("stages, virtual_stages and micro_batches must be >= 1");
  int64_t chunks = static_cast<int64_t>(getStages() * getVirtualStages());
  if (static_cast<int64_t>(getForward().size()) != chunks ||
      static_cast<int64_t>(getBackward().size()) != chunks ||
      static_cast<int64_t>(getApply().size()) != chunks)
    return emitOpError("needs ")
           << chunks
           << " forward, backward and apply functions (one per chunk)";
  if (static_cast<int64_t>(getActions().size()) !=
      static_cast<int64_t>(getStages()))
    return emitOpError("needs one action list per stage (")
           << getStages() << ")";
  for (auto figures :
       {getFlopsAttr(), getParamBytesAttr(), getFirstLayerAttr()})
    if (figures && static_cast<int64_t>(figures.size()) != chunks)
      return emitOpError("per-chunk figures must have one entry per chunk");
  return success();
}

namespace {
/// Where each channel's send and recv were found.
struct Endpoint {
  Operation *op = nullptr;
  int64_t chunk = -1; ///< the chunk whose program holds the op
  schedule::Phase phase = schedule::Phase::Forward;
  int64_t peer = -1;
  Type type;
};
} // namespace

/// Walks every chunk's forward and backward function for its sends and
/// recvs (see collectChunkComms) and records where each channel's endpoints
/// are.
static LogicalResult collect(PipelineScheduleOp schedOp,
                             SymbolTableCollection &symbolTable,
                             std::vector<schedule::ChunkComms> &comms,
                             std::map<int64_t, Endpoint> &sends,
                             std::map<int64_t, Endpoint> &recvs) {
  int64_t chunks =
      static_cast<int64_t>(schedOp.getStages() * schedOp.getVirtualStages());
  comms.assign(chunks, {});
  auto lookup = [&](Attribute ref, StringRef role,
                    int64_t c) -> FailureOr<Operation *> {
    auto sym = cast<SymbolRefAttr>(ref);
    Operation *fn = symbolTable.lookupNearestSymbolFrom(schedOp, sym);
    if (!fn || fn->getNumRegions() != 1 || fn->getRegion(0).empty())
      return schedOp.emitOpError("the ")
             << role << " function of chunk " << c << " (" << sym
             << ") is not a function with a body in this module";
    return fn;
  };
  for (int64_t c = 0; c < chunks; ++c) {
    if (failed(lookup(schedOp.getApply()[c], "apply", c)))
      return failure();
    for (schedule::Phase phase :
         {schedule::Phase::Forward, schedule::Phase::Backward}) {
      bool fwd = phase == schedule::Phase::Forward;
      FailureOr<Operation *> fn =
          lookup(fwd ? schedOp.getForward()[c] : schedOp.getBackward()[c],
                 fwd ? "forward" : "backward", c);
      if (failed(fn))
        return failure();
      std::vector<schedule::CommEvent> &events =
          fwd ? comms[c].forward : comms[c].backward;
      WalkResult walk = (*fn)->walk([&](Operation *op) -> WalkResult {
        auto send = dyn_cast<SendOp>(op);
        auto recv = dyn_cast<RecvOp>(op);
        if (!send && !recv)
          return WalkResult::advance();
        int64_t peer =
            static_cast<int64_t>(send ? send.getChunk() : recv.getChunk());
        int64_t channel =
            static_cast<int64_t>(send ? send.getChannel() : recv.getChannel());
        if (peer >= chunks || peer == c) {
          op->emitOpError("in chunk ")
              << c << " names chunk " << peer << ", which is "
              << (peer == c ? "its own" : "out of range");
          return WalkResult::interrupt();
        }
        auto &table = send ? sends : recvs;
        Endpoint e{op, c, phase, peer,
                   send ? send.getInput().getType() : recv.getType()};
        if (!table.emplace(channel, e).second) {
          op->emitOpError("channel ")
              << channel << " has more than one " << (send ? "send" : "recv");
          return WalkResult::interrupt();
        }
        events.push_back({static_cast<bool>(send), peer, channel});
        return WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return failure();
    }
  }
  return success();
}

FailureOr<std::vector<schedule::ChunkComms>>
tessera::tsrt::collectChunkComms(PipelineScheduleOp op,
                                 SymbolTableCollection &symbolTable) {
  std::vector<schedule::ChunkComms> comms;
  std::map<int64_t, Endpoint> sends, recvs;
  if (failed(collect(op, symbolTable, comms, sends, recvs)))
    return failure();
  return comms;
}

LogicalResult
PipelineScheduleOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  schedule::Kind kind = *schedule::parseKind(getKind());
  schedule::Shape shape{static_cast<int64_t>(getStages()),
                        static_cast<int64_t>(getVirtualStages()),
                        static_cast<int64_t>(getMicroBatches())};
  std::vector<schedule::ChunkComms> comms;
  std::map<int64_t, Endpoint> sends, recvs;
  if (failed(collect(*this, symbolTable, comms, sends, recvs)))
    return failure();

  // Static matching: one send and one recv per channel, pointing at each
  // other, of the same type and phase.
  for (auto &[channel, s] : sends) {
    auto it = recvs.find(channel);
    if (it == recvs.end())
      return s.op->emitOpError("channel ")
             << channel << " (chunk " << s.chunk << " to chunk " << s.peer
             << ") has no matching recv";
    const Endpoint &r = it->second;
    if (r.chunk != s.peer || r.peer != s.chunk)
      return r.op->emitOpError("channel ")
             << channel << " is sent from chunk " << s.chunk << " to chunk "
             << s.peer << " but received in chunk " << r.chunk << " from chunk "
             << r.peer;
    if (r.type != s.type)
      return r.op->emitOpError("channel ") << channel << " receives " << r.type
                                           << " but " << s.type << " is sent";
    if (r.phase != s.phase)
      return r.op->emitOpError("channel ")
             << channel << " is sent and received in different phases";
  }
  for (auto &[channel, r] : recvs)
    if (!sends.count(channel))
      return r.op->emitOpError("channel ")
             << channel << " (chunk " << r.peer << " to chunk " << r.chunk
             << ") has no matching send";

  std::vector<schedule::StageActions> actions;
  for (auto [s, text] : llvm::enumerate(getActions())) {
    auto parsed = schedule::parse(cast<StringAttr>(text).getValue());
    if (!parsed)
      return emitOpError("stage ")
             << s << ": " << llvm::toString(parsed.takeError());
    actions.push_back(std::move(*parsed));
  }
  if (llvm::Error err = schedule::verify(kind, shape, actions, comms))
    return emitOpError(llvm::toString(std::move(err)));
  return success();
}

FailureOr<double> tessera::tsrt::simulatedBubble(PipelineScheduleOp op) {
  DenseI64ArrayAttr flops = op.getFlopsAttr();
  if (!flops)
    return failure();
  SymbolTableCollection symbolTable;
  FailureOr<std::vector<schedule::ChunkComms>> comms =
      collectChunkComms(op, symbolTable);
  if (failed(comms))
    return failure();
  std::vector<schedule::StageActions> actions;
  for (Attribute text : op.getActions()) {
    auto parsed = schedule::parse(cast<StringAttr>(text).getValue());
    if (!parsed) {
      llvm::consumeError(parsed.takeError());
      return failure();
    }
    actions.push_back(std::move(*parsed));
  }
  std::vector<double> fwd, bwd;
  for (int64_t f : flops.asArrayRef()) {
    fwd.push_back(static_cast<double>(f) / 3);
    bwd.push_back(2 * static_cast<double>(f) / 3);
  }
  schedule::Shape shape{static_cast<int64_t>(op.getStages()),
                        static_cast<int64_t>(op.getVirtualStages()),
                        static_cast<int64_t>(op.getMicroBatches())};
  return schedule::simulate(actions, *comms, shape, fwd, bwd).bubble();
}

bool tessera::tsrt::isDataMovementKernel(StringRef kernel) {
  return llvm::is_contained({"reshape", "transpose", "slice", "concat",
                             "broadcast", "select", "gather", "convert"},
                            kernel);
}

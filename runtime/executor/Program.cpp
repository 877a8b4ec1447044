//===- Program.cpp - a tsrt runtime program resolved to instructions ------===//

#include "runtime/executor/Program.h"

#include "runtime/FaultInject.h"
#include "runtime/collectives/mpi/Watchdog.h"

#include "runtime/executor/Backend.h"

#include "runtime/executor/KernelDesc.h"

#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
using namespace mlir;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// "file.mlir:3:5" for file locations, the name for name locations, else the
/// printed location.
static std::string locationString(Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return llvm::formatv("{0}:{1}:{2}", file.getFilename().getValue(),
                         file.getLine(), file.getColumn())
        .str();
  if (auto name = dyn_cast<NameLoc>(loc))
    return ("'" + name.getName().getValue() + "'").str();
  if (isa<UnknownLoc>(loc))
    return "unknown location";
  std::string s;
  llvm::raw_string_ostream os(s);
  loc.print(os);
  return s;
}

/// The runtime type of an MLIR type, or an error.
static llvm::Expected<exec::TensorType> tensorTypeOf(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape()) {
    std::string s;
    llvm::raw_string_ostream os(s);
    type.print(os);
    return fail("type " + s + " is not a statically shaped tensor");
  }
  exec::TensorType t;
  Type e = ranked.getElementType();
  if (e.isF32())
    t.dtype = DType::F32;
  else if (e.isInteger(64))
    t.dtype = DType::I64;
  else if (e.isInteger(1))
    t.dtype = DType::I1;
  else if (e.isBF16())
    t.dtype = DType::BF16;
  else if (e.isF16())
    t.dtype = DType::F16;
  else {
    std::string s;
    llvm::raw_string_ostream os(s);
    type.print(os);
    return fail("unsupported element type in " + s +
                " (the runtime supports f32, bf16, f16, i64 and i1)");
  }
  t.shape.assign(ranked.getShape().begin(), ranked.getShape().end());
  return t;
}

/// Materialises a constant's value as a Tensor of `type`.
static llvm::Expected<Tensor> materialise(Attribute value,
                                          const exec::TensorType &type) {
  Tensor t = Tensor::empty(type.dtype, type.shape);
  if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    int64_t i = 0;
    switch (type.dtype) {
    case DType::F32:
      if (!dense.getElementType().isF32())
        break;
      for (float v : dense.getValues<float>())
        t.data<float>()[i++] = v;
      return t;
    case DType::I64:
      if (!dense.getElementType().isInteger(64))
        break;
      for (int64_t v : dense.getValues<int64_t>())
        t.data<int64_t>()[i++] = v;
      return t;
    case DType::I1:
      if (!dense.getElementType().isInteger(1))
        break;
      for (bool v : dense.getValues<bool>())
        t.data<uint8_t>()[i++] = v ? 1 : 0;
      return t;
    case DType::BF16:
      if (!dense.getElementType().isBF16())
        break;
      for (const llvm::APFloat &v : dense.getValues<llvm::APFloat>())
        t.data<BFloat16>()[i++] = toBFloat16(v.convertToFloat());
      return t;
    case DType::F16:
      if (!dense.getElementType().isF16())
        break;
      for (const llvm::APFloat &v : dense.getValues<llvm::APFloat>())
        t.data<Float16>()[i++] = toFloat16(v.convertToFloat());
      return t;
    }
    return fail("constant value's element type differs from its result");
  }
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(value)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return fail("constant refers to a missing resource blob");
    ArrayRef<char> data = blob->getData();
    if (data.size() != t.bytes())
      return fail(llvm::formatv("constant resource blob has {0} bytes, "
                                "expected {1}",
                                data.size(), t.bytes()));
    if (t.bytes())
      std::memcpy(t.raw(), data.data(), t.bytes());
    if (type.dtype == DType::I1)
      for (int64_t i = 0; i < t.numel(); ++i)
        t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
    return t;
  }
  return fail("unsupported constant attribute (expected dense<...> or "
              "dense_resource<...>)");
}

int64_t Program::constantBytes() const {
  int64_t total = 0;
  for (const auto &c : constants)
    total += std::max<int64_t>(
        (static_cast<int64_t>(c.second.bytes()) + 63) / 64 * 64, 64);
  return total;
}

//===----------------------------------------------------------------------===//
// Point-to-point transport
//===----------------------------------------------------------------------===//

/// Buffers of sends still in flight when their PointToPoint was destroyed
/// (after an error): never freed, never destroyed.
static std::vector<Tensor> &abandonedSendBuffers() {
  static auto *buffers = new std::vector<Tensor>();
  return *buffers;
}

PointToPoint::~PointToPoint() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  for (PendingSend &p : pending) {
    if (p.request == MPI_REQUEST_NULL)
      continue;
    if (init && !fin)
      MPI_Request_free(&p.request);
    // MPI may still read the buffer: keep it alive for the process lifetime,
    // reachable from a process-wide list (not a lost pointer, which LSan
    // reports as a leak).
    abandonedSendBuffers().push_back(std::move(p.data));
  }
}

/// MPI_Waitall on the sends of `pending` that `due` selects; removes them
/// (releasing their buffers) when all completed.
static llvm::Error
waitSends(std::vector<PointToPoint::PendingSend> &pending,
          llvm::function_ref<bool(const PointToPoint::PendingSend &)> due) {
  std::vector<size_t> chosen;
  for (size_t i = 0; i < pending.size(); ++i)
    if (due(pending[i]))
      chosen.push_back(i);
  if (chosen.empty())
    return llvm::Error::success();
  std::vector<MPI_Request> requests;
  for (size_t i : chosen)
    requests.push_back(pending[i].request);
  std::vector<MPI_Status> statuses(requests.size());
  mpi::watchdog::Guard guard("wait for sends", 0);
  int rc = MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                       statuses.data());
  for (size_t n = 0; n < chosen.size(); ++n)
    pending[chosen[n]].request = requests[n];
  if (rc != MPI_SUCCESS) {
    for (size_t n = 0; n < chosen.size(); ++n)
      if (rc == MPI_ERR_IN_STATUS && statuses[n].MPI_ERROR != MPI_SUCCESS &&
          statuses[n].MPI_ERROR != MPI_ERR_PENDING)
        return mpi::failure(statuses[n].MPI_ERROR, pending[chosen[n]].what);
    return mpi::failure(rc, "MPI_Waitall on " + llvm::Twine(chosen.size()) +
                                " sends (first: " + pending[chosen[0]].what +
                                ")");
  }
  llvm::erase_if(pending, [&](const PointToPoint::PendingSend &p) {
    return p.request == MPI_REQUEST_NULL && due(p);
  });
  return llvm::Error::success();
}

llvm::Error PointToPoint::waitAll() {
  return waitSends(pending, [](const PendingSend &) { return true; });
}

llvm::Error PointToPoint::waitReleasedAfter(int64_t action) {
  return waitSends(
      pending, [&](const PendingSend &p) { return p.releaseAfter == action; });
}

//===----------------------------------------------------------------------===//
// Compilation
//===----------------------------------------------------------------------===//

namespace tessera::runtime::exec {

/// Program::compile in named steps: the function's header (arena and
/// arguments), one instruction per op (each kind of op in its own step),
/// then liveness. Errors of an op's step carry no location; compileBody
/// prefixes "<source>: op #N (...) at <loc>: ".
class ProgramCompiler {
public:
  ProgramCompiler(Program &p, func::FuncOp func, const CompileOptions &options,
                  llvm::StringRef source, llvm::StringRef function)
      : p(p), func(func), options(options), source(source), function(function) {
  }

  /// tsrt.arena_bytes and the argument types (one slot each).
  llvm::Error readHeader();
  /// Every op of the body, in order, to instructions; the return.
  llvm::Error compileBody();
  /// Releases each slot after its last reader (or right after its
  /// definition if nothing reads it); constants and results stay.
  void computeLiveness();

private:
  /// One op (not the return) to an instruction, or a constant.
  llvm::Error compileOp(Operation &op, const std::string &where);
  llvm::Error compileReturn(func::ReturnOp ret);
  llvm::Error compileConstant(tessera::tsrt::ConstantOp cst,
                              const exec::TensorType &type);
  llvm::Error compilePointToPoint(Operation &op, Instruction &inst,
                                  llvm::ArrayRef<exec::TensorType> inTypes,
                                  llvm::ArrayRef<exec::TensorType> outTypes,
                                  const std::string &where);
  llvm::Error compileWait(tessera::tsrt::WaitOp wait, Instruction &inst,
                          llvm::ArrayRef<exec::TensorType> inTypes,
                          llvm::ArrayRef<exec::TensorType> outTypes);
  llvm::Error compileKernel(tessera::tsrt::KernelOp k, Instruction &inst,
                            llvm::ArrayRef<exec::TensorType> inTypes,
                            llvm::ArrayRef<exec::TensorType> outTypes);
  llvm::Error compileCollective(Operation &op, Instruction &inst,
                                llvm::ArrayRef<exec::TensorType> inTypes,
                                llvm::ArrayRef<exec::TensorType> outTypes);
  /// The static memory plan of one instruction: `tsrt.offsets`, one per
  /// result, each -1 (heap) or a 64-byte aligned offset of an allocated
  /// result that fits in the arena; and `tsrt.in_place`.
  llvm::Error readMemoryPlan(Operation &op, Instruction &inst,
                             llvm::ArrayRef<exec::TensorType> outTypes);
  /// Reads the op's memory plan and adds the resolved instruction, with a
  /// slot for each result.
  llvm::Error append(Operation &op, Instruction &inst,
                     llvm::ArrayRef<exec::TensorType> outTypes,
                     const std::string &where);
  /// The communicator over `grid_axes`: its index in p.axesSets (added on
  /// first use) and its number of ranks.
  llvm::Error commOf(DenseI16ArrayAttr axesAttr, int &commIndex, int64_t &n);
  int newSlot(Value v) {
    slotOf[v] = p.slots;
    return p.slots++;
  }
  /// Appends the slot and type of `v`, defined earlier, to `slots` and
  /// `types`; `undefined` is the error when it is not.
  llvm::Error readValue(Value v, const char *undefined, std::vector<int> &slots,
                        std::vector<exec::TensorType> &types);

  Program &p;
  func::FuncOp func;
  const CompileOptions &options;
  llvm::StringRef source, function;
  llvm::DenseMap<Operation *, int> asyncOf; // all_reduce_start -> request
  llvm::DenseMap<Value, int> slotOf;
  bool returned = false;
};

} // namespace tessera::runtime::exec

llvm::Expected<Program> Program::compile(ModuleOp module,
                                         llvm::StringRef function,
                                         const CompileOptions &options,
                                         llvm::StringRef source) {
  auto func = module.lookupSymbol<func::FuncOp>(function);
  if (!func)
    return fail(source + ": the program has no function @" + function);
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return fail(source + ": @" + function +
                " must have a body of one straight-line block");
  Program p;
  p.device = options.backend ? options.backend : &cpuBackend();
  ProgramCompiler compiler(p, func, options, source, function);
  if (llvm::Error e = compiler.readHeader())
    return std::move(e);
  if (llvm::Error e = compiler.compileBody())
    return std::move(e);
  compiler.computeLiveness();
  return p;
}

llvm::Error ProgramCompiler::readHeader() {
  if (Attribute a = func->getAttr("tsrt.arena_bytes")) {
    auto bytes = dyn_cast<IntegerAttr>(a);
    if (!bytes || bytes.getValue().getSExtValue() < 0)
      return fail(source + ": @" + function +
                  ": tsrt.arena_bytes must be a non-negative integer");
    p.arena = bytes.getValue().getSExtValue();
  }
  for (BlockArgument arg : func.getArguments()) {
    auto t = tensorTypeOf(arg.getType());
    if (!t)
      return fail(source + ": argument #" + llvm::Twine(arg.getArgNumber()) +
                  " of @" + function + ": " + llvm::toString(t.takeError()));
    p.argTys.push_back(*t);
    newSlot(arg);
  }
  return llvm::Error::success();
}

llvm::Error ProgramCompiler::compileBody() {
  unsigned opIndex = 0;
  for (Operation &op : func.getBody().front()) {
    std::string kernel = op.getName().getStringRef().str();
    if (auto k = dyn_cast<tessera::tsrt::KernelOp>(op))
      kernel = ("kernel \"" + k.getKernel() + "\"").str();
    std::string where = llvm::formatv("op #{0} ({1}) at {2}", opIndex++, kernel,
                                      locationString(op.getLoc()));
    llvm::Error err = llvm::Error::success();
    if (returned)
      err = fail("operation after the function's return");
    else if (auto ret = dyn_cast<func::ReturnOp>(op))
      err = compileReturn(ret);
    else
      err = compileOp(op, where);
    if (err)
      return fail(source + ": " + where + ": " +
                  llvm::toString(std::move(err)));
  }
  if (!returned)
    return fail(source + ": @" + function + " has no return");
  if (p.resultTys.size() != func.getNumResults())
    return fail(source + ": @" + function +
                " returns a different number of values than its type says");
  return llvm::Error::success();
}

llvm::Error ProgramCompiler::readValue(Value v, const char *undefined,
                                       std::vector<int> &slots,
                                       std::vector<exec::TensorType> &types) {
  auto it = slotOf.find(v);
  if (it == slotOf.end())
    return fail(undefined);
  slots.push_back(it->second);
  auto t = tensorTypeOf(v.getType());
  if (!t)
    return t.takeError();
  types.push_back(*t);
  return llvm::Error::success();
}

llvm::Error ProgramCompiler::compileReturn(func::ReturnOp ret) {
  for (Value v : ret.getOperands())
    if (llvm::Error e =
            readValue(v, "returns a value not defined in the function",
                      p.resultSlots, p.resultTys))
      return e;
  returned = true;
  return llvm::Error::success();
}

llvm::Error ProgramCompiler::compileOp(Operation &op,
                                       const std::string &where) {
  if (op.getNumRegions() != 0)
    return fail("operations with regions are not supported");
  // Operand and result types.
  std::vector<exec::TensorType> inTypes, outTypes;
  Instruction inst;
  for (Value v : op.getOperands())
    if (llvm::Error e =
            readValue(v, "uses a value not defined earlier in the function",
                      inst.operands, inTypes))
      return e;
  for (Value v : op.getResults()) {
    auto t = tensorTypeOf(v.getType());
    if (!t)
      return t.takeError();
    outTypes.push_back(*t);
  }

  if (auto cst = dyn_cast<tessera::tsrt::ConstantOp>(op))
    return compileConstant(cst, outTypes[0]);
  if (isa<tessera::tsrt::SendOp, tessera::tsrt::RecvOp>(op))
    return compilePointToPoint(op, inst, inTypes, outTypes, where);
  llvm::Error err = llvm::Error::success();
  if (auto wait = dyn_cast<tessera::tsrt::WaitOp>(op)) {
    err = compileWait(wait, inst, inTypes, outTypes);
  } else if (auto k = dyn_cast<tessera::tsrt::KernelOp>(op)) {
    inst.where = where;
    err = compileKernel(k, inst, inTypes, outTypes);
  } else if (isa<tessera::tsrt::AllReduceOp, tessera::tsrt::AllGatherOp,
                 tessera::tsrt::ReduceScatterOp, tessera::tsrt::AllToAllOp,
                 tessera::tsrt::AllSliceOp, tessera::tsrt::AllReduceStartOp>(
                 op)) {
    inst.where = where;
    err = compileCollective(op, inst, inTypes, outTypes);
  } else {
    return fail("unsupported operation in a runtime program");
  }
  if (err)
    return err;
  // --profile's bytes: what the instruction reads and writes, its operands
  // and results once each; a view (a call whose kernel sets its results
  // itself, e.g. the CPU reshape) and a wait move none.
  if (inst.allocateResults || inst.kind == Instruction::Kind::Send) {
    for (const exec::TensorType &t : inTypes)
      inst.bytes +=
          static_cast<int64_t>(shapeNumel(t.shape) * dtypeSize(t.dtype));
    for (const exec::TensorType &t : outTypes)
      inst.bytes +=
          static_cast<int64_t>(shapeNumel(t.shape) * dtypeSize(t.dtype));
  }
  return append(op, inst, outTypes, where);
}

llvm::Error ProgramCompiler::compileConstant(tessera::tsrt::ConstantOp cst,
                                             const exec::TensorType &type) {
  auto value = materialise(cst.getValue(), type);
  if (!value)
    return value.takeError();
  llvm::Expected<Tensor> placed = p.device->upload(*value);
  if (!placed)
    return placed.takeError();
  int slot = newSlot(cst.getResult());
  p.constants.emplace_back(slot, std::move(*placed));
  return llvm::Error::success();
}

llvm::Error ProgramCompiler::compilePointToPoint(
    Operation &op, Instruction &inst, llvm::ArrayRef<exec::TensorType> inTypes,
    llvm::ArrayRef<exec::TensorType> outTypes, const std::string &where) {
  auto send = dyn_cast<tessera::tsrt::SendOp>(op);
  auto recv = dyn_cast<tessera::tsrt::RecvOp>(op);
  inst.kernel = op.getName().stripDialect().str();
  inst.kind = send ? Instruction::Kind::Send : Instruction::Kind::Recv;
  if (llvm::Error e = p.device->supportsCommunication("tsrt." + inst.kernel))
    return e;
  inst.peerChunk =
      static_cast<int64_t>(send ? send.getChunk() : recv.getChunk());
  inst.channel =
      static_cast<int64_t>(send ? send.getChannel() : recv.getChannel());
  if (options.pipelineStages < 1)
    return fail("tsrt.send and tsrt.recv are only valid in pipeline "
                "plans (a manifest with a \"pipeline\" object)");
  if (inst.peerChunk < 0 || inst.channel < 0)
    return fail("chunk and channel must be non-negative");
  int64_t m = std::max<int64_t>(options.microBatches, 1);
  if (inst.channel > (INT_MAX - (m - 1)) / m)
    return fail(llvm::formatv("channel {0} with {1} micro-batches "
                              "gives MPI tags beyond INT_MAX",
                              inst.channel, m));
  const exec::TensorType &t = send ? inTypes[0] : outTypes[0];
  if (shapeNumel(t.shape) > INT_MAX)
    return fail(llvm::formatv("{0} is too large for one MPI message", t.str()));
  p.maxChan = std::max(p.maxChan, inst.channel);
  if (recv) {
    inst.recvIndex = static_cast<int>(p.recvInsts.size());
    p.recvInsts.push_back(static_cast<int>(p.insts.size()));
  }
  inst.allocateResults = false;
  return append(op, inst, outTypes, where);
}

llvm::Error
ProgramCompiler::compileWait(tessera::tsrt::WaitOp wait, Instruction &inst,
                             llvm::ArrayRef<exec::TensorType> inTypes,
                             llvm::ArrayRef<exec::TensorType> outTypes) {
  auto start =
      wait.getPending().getDefiningOp<tessera::tsrt::AllReduceStartOp>();
  auto it = start ? asyncOf.find(start.getOperation()) : asyncOf.end();
  if (it == asyncOf.end())
    return fail("waits for a value not made by tsrt.all_reduce_start");
  inst.kernel = "wait";
  inst.kind = Instruction::Kind::Wait;
  inst.asyncIndex = it->second;
  inst.allocateResults = false;
  if (inTypes[0] != outTypes[0])
    return fail("result type must equal the pending value's type");
  return llvm::Error::success();
}

llvm::Error ProgramCompiler::commOf(DenseI16ArrayAttr axesAttr, int &commIndex,
                                    int64_t &n) {
  std::vector<int64_t> axes;
  n = 1;
  for (int16_t a : axesAttr.asArrayRef()) {
    if (a < 0 || a >= static_cast<int64_t>(options.gridShape.size()))
      return fail(llvm::formatv("grid axis {0} is out of range for a "
                                "{1}-axis grid",
                                a, options.gridShape.size()));
    if (llvm::is_contained(axes, a))
      return fail(llvm::formatv("grid axis {0} repeated", a));
    axes.push_back(a);
    n *= options.gridShape[a];
  }
  auto found = llvm::find(p.axesSets, axes);
  commIndex = static_cast<int>(found - p.axesSets.begin());
  if (found == p.axesSets.end())
    p.axesSets.push_back(axes);
  return llvm::Error::success();
}

/// A tsrt.kernel: decoded and validated once (KernelDesc.h), then bound by
/// the backend from the descriptor.
llvm::Error
ProgramCompiler::compileKernel(tessera::tsrt::KernelOp k, Instruction &inst,
                               llvm::ArrayRef<exec::TensorType> inTypes,
                               llvm::ArrayRef<exec::TensorType> outTypes) {
  inst.kernel = k.getKernel().str();
  if (auto trace = k->getAttrOfType<IntegerAttr>("tsrt.trace"))
    inst.trace = trace.getInt();
  // A kernel that communicates itself (vocab-parallel gather and
  // cross-entropy, ring attention) names its grid axes; its closure reads
  // ctx.comms[inst.commIndex].
  if (mlir::Attribute a = k.getAttrs().get("grid_axes")) {
    auto axesAttr = dyn_cast<DenseI16ArrayAttr>(a);
    if (!axesAttr)
      return fail("grid_axes must be an array<i16>");
    int64_t n = 1;
    if (llvm::Error e = commOf(axesAttr, inst.commIndex, n))
      return e;
    inst.commSize = n;
  }
  llvm::Expected<KernelDesc> desc =
      decodeKernel(k.getKernel(), k.getAttrs(), inTypes, outTypes, options,
                   inst.commIndex, inst.commSize);
  if (!desc)
    return desc.takeError();
  if (inst.commIndex >= 0)
    if (llvm::Error e = p.device->supportsCommunication(
            "tsrt.kernel \"" + inst.kernel + "\" with grid_axes"))
      return e;
  return p.device->bindKernel(*desc, inst);
}

/// The CollectiveOp of a tsrt collective (not all_reduce_start).
static CollectiveOp collectiveOf(Operation &op) {
  if (isa<tessera::tsrt::AllReduceOp>(op))
    return CollectiveOp::AllReduce;
  if (isa<tessera::tsrt::AllGatherOp>(op))
    return CollectiveOp::AllGather;
  if (isa<tessera::tsrt::ReduceScatterOp>(op))
    return CollectiveOp::ReduceScatter;
  if (isa<tessera::tsrt::AllSliceOp>(op))
    return CollectiveOp::AllSlice;
  return CollectiveOp::AllToAll;
}

/// tsrt.all_reduce_start becomes an AllReduceStart instruction; every other
/// collective is checked (checkCollective) and bound by the backend.
llvm::Error
ProgramCompiler::compileCollective(Operation &op, Instruction &inst,
                                   llvm::ArrayRef<exec::TensorType> inTypes,
                                   llvm::ArrayRef<exec::TensorType> outTypes) {
  inst.kernel = op.getName().stripDialect().str();
  if (llvm::Error e = p.device->supportsCommunication("tsrt." + inst.kernel))
    return e;
  auto axesAttr = op.getAttrOfType<DenseI16ArrayAttr>("grid_axes");
  if (!axesAttr || op.getNumOperands() != 1 || op.getNumResults() != 1)
    return fail("malformed collective");
  int commIndex = -1;
  int64_t n = 1;
  if (llvm::Error e = commOf(axesAttr, commIndex, n))
    return e;
  auto i64 = [&](llvm::StringRef name) -> int64_t {
    auto a = op.getAttrOfType<IntegerAttr>(name);
    return a ? a.getValue().getSExtValue() : 0;
  };
  if (auto start = dyn_cast<tessera::tsrt::AllReduceStartOp>(op)) {
    if (start.getReduction() != "sum" && start.getReduction() != "max")
      return fail("reduction must be \"sum\" or \"max\"");
    if (inTypes[0] != outTypes[0] || inTypes[0].dtype == DType::I1)
      return fail("result type must equal the input type (not i1)");
    inst.kind = Instruction::Kind::AllReduceStart;
    inst.commIndex = commIndex;
    inst.reduceMax = start.getReduction() == "max";
    inst.asyncIndex = p.numAsync++;
    asyncOf[&op] = inst.asyncIndex;
    return llvm::Error::success();
  }
  CollectiveSpec spec{collectiveOf(op), commIndex, n, 0, 0, false};
  if (auto ar = dyn_cast<tessera::tsrt::AllReduceOp>(op)) {
    if (ar.getReduction() != "sum" && ar.getReduction() != "max")
      return fail("reduction must be \"sum\" or \"max\"");
    spec.max = ar.getReduction() == "max";
  } else if (isa<tessera::tsrt::AllToAllOp>(op)) {
    spec.dim = i64("split_dim"), spec.dim2 = i64("concat_dim");
  } else {
    spec.dim = i64("dim");
  }
  if (llvm::Error e = checkCollective(spec, inTypes[0], outTypes[0]))
    return e;
  return p.device->bindCollective(spec, inTypes[0], outTypes[0], inst);
}

llvm::Error
ProgramCompiler::readMemoryPlan(Operation &op, Instruction &inst,
                                llvm::ArrayRef<exec::TensorType> outTypes) {
  Attribute a = op.getAttr("tsrt.offsets");
  if (!a)
    return llvm::Error::success();
  auto offsets = dyn_cast<DenseI64ArrayAttr>(a);
  if (!offsets || offsets.size() != static_cast<int64_t>(outTypes.size()))
    return fail("tsrt.offsets must be an array<i64> with one entry per "
                "result");
  for (auto [i, offset] : llvm::enumerate(offsets.asArrayRef())) {
    if (offset < 0) {
      if (offset != -1)
        return fail(llvm::formatv("tsrt.offsets[{0}] is {1} (expected -1 "
                                  "or an offset)",
                                  i, offset));
      continue;
    }
    if ((inst.kind != Instruction::Kind::Call &&
         inst.kind != Instruction::Kind::AllReduceStart) ||
        !inst.allocateResults)
      return fail(llvm::formatv("result #{0} has an arena offset but the "
                                "runtime does not allocate it (a view or "
                                "a received value)",
                                i));
    int64_t bytes = static_cast<int64_t>(shapeNumel(outTypes[i].shape) *
                                         dtypeSize(outTypes[i].dtype));
    if (offset % 64 != 0 || offset > p.arena || bytes > p.arena - offset)
      return fail(llvm::formatv("result #{0} ({1} bytes) at arena offset "
                                "{2} is unaligned or beyond "
                                "tsrt.arena_bytes = {3}",
                                i, bytes, offset, p.arena));
  }
  inst.resultOffsets.assign(offsets.asArrayRef().begin(),
                            offsets.asArrayRef().end());
  // `tsrt.in_place`: per result, -1 or the argument it overwrites.
  auto inPlace = op.getAttrOfType<DenseI64ArrayAttr>("tsrt.in_place");
  if (!inPlace) {
    if (op.hasAttr("tsrt.in_place"))
      return fail("tsrt.in_place must be an array<i64>");
    return llvm::Error::success();
  }
  if (inPlace.size() != static_cast<int64_t>(outTypes.size()))
    return fail("tsrt.in_place must have one entry per result");
  for (auto [i, arg] : llvm::enumerate(inPlace.asArrayRef())) {
    if (arg == -1)
      continue;
    if (arg < 0 || arg >= static_cast<int64_t>(p.argTys.size()))
      return fail(llvm::formatv("tsrt.in_place[{0}] is {1}, not -1 or an "
                                "argument of the function",
                                i, arg));
    if (inst.kind != Instruction::Kind::Call || !inst.allocateResults ||
        offsets.asArrayRef()[i] != -1)
      return fail(llvm::formatv("result #{0} is written in place but the "
                                "runtime does not allocate it or it also "
                                "has an arena offset",
                                i));
    if (p.argTys[arg] != outTypes[i])
      return fail(llvm::formatv("result #{0} ({1}) is written into argument "
                                "#{2} of type {3}",
                                i, outTypes[i].str(), arg,
                                p.argTys[arg].str()));
    if (llvm::is_contained(p.inPlaceArgs, static_cast<int>(arg)))
      return fail(llvm::formatv("argument #{0} is overwritten by more than "
                                "one result",
                                arg));
    p.inPlaceArgs.push_back(static_cast<int>(arg));
  }
  inst.resultInPlace.assign(inPlace.asArrayRef().begin(),
                            inPlace.asArrayRef().end());
  return llvm::Error::success();
}

llvm::Error ProgramCompiler::append(Operation &op, Instruction &inst,
                                    llvm::ArrayRef<exec::TensorType> outTypes,
                                    const std::string &where) {
  if (llvm::Error err = readMemoryPlan(op, inst, outTypes))
    return err;
  inst.where = where;
  inst.resultTypes = outTypes;
  for (Value v : op.getResults())
    inst.results.push_back(newSlot(v));
  p.maxOperands = std::max(p.maxOperands, inst.operands.size());
  p.maxResults = std::max(p.maxResults, inst.results.size());
  inst.profileKind = profileKindId(inst.kernel);
  p.insts.push_back(std::move(inst));
  return llvm::Error::success();
}

void ProgramCompiler::computeLiveness() {
  std::vector<bool> pinned(p.slots, false);
  for (auto &c : p.constants)
    pinned[c.first] = true;
  for (int s : p.resultSlots)
    pinned[s] = true;
  std::vector<int> lastUse(p.slots, -1), defined(p.slots, -1);
  for (auto [i, inst] : llvm::enumerate(p.insts)) {
    for (int s : inst.operands)
      lastUse[s] = static_cast<int>(i);
    for (int s : inst.results)
      defined[s] = static_cast<int>(i);
  }
  for (int s = 0; s < p.slots; ++s) {
    if (pinned[s])
      continue;
    int at = lastUse[s] >= 0 ? lastUse[s] : defined[s];
    if (at >= 0)
      p.insts[at].release.push_back(s);
    else if (s < static_cast<int>(p.argTys.size()))
      p.releaseArgsEarly.push_back(s);
  }
}

namespace {
/// The interned profile kinds (profileKindId): names by id and ids by name.
struct ProfileKinds {
  std::mutex lock;
  std::deque<std::string> names; ///< stable addresses for the StringRefs
  llvm::StringMap<int> ids;
};
ProfileKinds &profileKinds() {
  static ProfileKinds kinds;
  return kinds;
}
} // namespace

int exec::profileKindId(llvm::StringRef kind) {
  ProfileKinds &k = profileKinds();
  std::lock_guard<std::mutex> guard(k.lock);
  auto [it, added] = k.ids.try_emplace(kind, static_cast<int>(k.names.size()));
  if (added)
    k.names.emplace_back(kind.str());
  return it->second;
}

llvm::StringRef exec::profileKindName(int id) {
  ProfileKinds &k = profileKinds();
  std::lock_guard<std::mutex> guard(k.lock);
  return id >= 0 && static_cast<size_t>(id) < k.names.size()
             ? llvm::StringRef(k.names[id])
             : llvm::StringRef("?");
}

double OpTimer::scopeOverhead() {
  static const double overhead = [] {
    ExecContext::KernelStats stats;
    stats.profile = true;
    int id = profileKindId("profiler.calibration");
    // The fastest of several batches: a batch during which the thread was
    // descheduled (cores shared by ranks or other jobs) measures the wait,
    // not the clock reads.
    constexpr int kBatches = 20, kScopes = 100;
    double best = 1e30;
    for (int b = 0; b < kBatches; ++b) {
      double start = now();
      for (int i = 0; i < kScopes; ++i)
        OpTimer timer(&stats, id);
      best = std::min(best, (now() - start) / kScopes);
    }
    return best;
  }();
  return overhead;
}

double OpTimer::now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double OpTimer::cpuNow() {
  timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 0;
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

namespace tessera::runtime::exec {

/// One execution of a Program (Program::run), in steps: check the
/// arguments, post the pipeline receives, fill the slots, then run each
/// instruction by kind. Owns the in-flight MPI requests: receives not yet
/// completed are cancelled, and non-blocking all-reduces (which cannot be
/// cancelled) are waited for, when the run ends early, before their
/// buffers go.
class ProgramRun {
public:
  ProgramRun(const Program &p, const ExecContext &ctx)
      : p(p), ctx(ctx), posted(p.recvInsts.size()),
        requests(p.numAsync, MPI_REQUEST_NULL),
        devicePointToPoint(ctx.communication &&
                           ctx.communication->pointToPoint()) {}
  ProgramRun(const ProgramRun &) = delete;
  ProgramRun &operator=(const ProgramRun &) = delete;

  ~ProgramRun() {
    for (MPI_Request &r : requests)
      if (r != MPI_REQUEST_NULL) {
        mpi::watchdog::Guard guard("wait for all_reduce", 0);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
    for (PostedRecv &r : posted)
      if (r.request != MPI_REQUEST_NULL) {
        MPI_Cancel(&r.request);
        mpi::watchdog::Guard guard("wait for a cancelled recv", 0);
        MPI_Wait(&r.request, MPI_STATUS_IGNORE);
      }
  }

  llvm::Expected<std::vector<Tensor>> run(std::vector<Tensor> args) {
    if (llvm::Error err = checkArguments(args))
      return std::move(err);
    if (llvm::Error err = checkContext())
      return std::move(err);
    if (llvm::Error err = postReceives())
      return std::move(err);
    if (p.arena > 0 && (!ctx.arena || ctx.arena->bytes < p.arena))
      return fail(llvm::formatv("the program's memory plan needs an arena of "
                                "{0} bytes, the executor provides {1}",
                                p.arena, ctx.arena ? ctx.arena->bytes : 0));
    fillSlots(std::move(args));
    in.reserve(p.maxOperands);
    // Test hook (runtime/FaultInject.h): the `backward` moment fires after
    // the instruction that computes the loss; -1 (no hook) almost always.
    size_t backwardAfter = SIZE_MAX;
    if (LLVM_UNLIKELY(ctx.lossResult >= 0 &&
                      fault::pending(fault::Moment::Backward)))
      backwardAfter = lossWriter(ctx.lossResult);
    for (size_t instIndex = 0; instIndex < p.insts.size(); ++instIndex) {
      const Instruction &inst = p.insts[instIndex];
      OpTimer timer(ctx.stats, inst.profileKind, inst.bytes);
      llvm::Error err = llvm::Error::success();
      switch (inst.kind) {
      case Instruction::Kind::Send:
        err = runSend(inst);
        break;
      case Instruction::Kind::Wait:
        err = runWait(inst);
        break;
      case Instruction::Kind::Recv:
        err = devicePointToPoint ? runDeviceRecv(inst) : runMpiRecv(inst);
        break;
      default:
        err = runCall(inst);
        break;
      }
      if (err)
        return std::move(err);
      for (int s : inst.release)
        slot[s] = Tensor();
      if (LLVM_UNLIKELY(instIndex == backwardAfter))
        fault::at(fault::Moment::Backward);
    }
    std::vector<Tensor> results;
    results.reserve(p.resultSlots.size());
    for (int s : p.resultSlots)
      results.push_back(slot[s]);
    return results;
  }

private:
  /// The index of the last instruction that writes result `r`'s slot, or
  /// SIZE_MAX.
  size_t lossWriter(int r) const {
    if (r < 0 || static_cast<size_t>(r) >= p.resultSlots.size())
      return SIZE_MAX;
    int target = p.resultSlots[r];
    size_t at = SIZE_MAX;
    for (size_t i = 0; i < p.insts.size(); ++i)
      if (llvm::is_contained(p.insts[i].results, target))
        at = i;
    return at;
  }

  /// An MPI receive posted before the first instruction and its buffer.
  struct PostedRecv {
    MPI_Request request = MPI_REQUEST_NULL;
    Tensor data;
  };

  llvm::Error checkArguments(const std::vector<Tensor> &args) const {
    if (args.size() != p.argTys.size())
      return fail(llvm::formatv("program expects {0} arguments, got {1}",
                                p.argTys.size(), args.size()));
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].isNull() || args[i].dtype() != p.argTys[i].dtype ||
          args[i].shape() != p.argTys[i].shape)
        return fail(
            llvm::formatv("argument #{0} must be {1}", i, p.argTys[i].str()));
    return llvm::Error::success();
  }

  /// A program with sends/receives needs a pipeline executor, and the
  /// micro-batch it runs must be one of the schedule's.
  llvm::Error checkContext() const {
    if (p.maxChan >= 0 && !ctx.p2p)
      for (const Instruction &inst : p.insts)
        if (inst.kind != Instruction::Kind::Call)
          return fail(inst.where + ": tsrt." + inst.kernel +
                      " needs a pipeline executor (no pp communicator)");
    if (ctx.p2p &&
        (ctx.microBatch < 0 || ctx.microBatch >= ctx.p2p->microBatches))
      return fail(llvm::formatv("micro-batch {0} is out of range [0, {1})",
                                ctx.microBatch, ctx.p2p->microBatches));
    return llvm::Error::success();
  }

  std::string peerText(const Instruction &inst) const {
    int64_t stages = ctx.p2p ? ctx.p2p->stages : 1;
    return llvm::formatv("chunk {0} (pp rank {1}), channel {2}, micro-batch "
                         "{3}",
                         inst.peerChunk, inst.peerChunk % stages, inst.channel,
                         ctx.microBatch)
        .str();
  }
  int tagOf(const Instruction &inst) const {
    return static_cast<int>(inst.channel * ctx.p2p->microBatches +
                            ctx.microBatch);
  }
  int peerRank(const Instruction &inst) const {
    return static_cast<int>(inst.peerChunk % ctx.p2p->stages);
  }

  /// Posts every receive now, so that the schedule (the order in which the
  /// peers' actions run), not the transport, decides when data moves. NCCL
  /// point-to-point (a device backend's communication) receives at the
  /// instruction instead.
  llvm::Error postReceives() {
    for (size_t i = 0; i < p.recvInsts.size() && !devicePointToPoint; ++i) {
      const Instruction &inst = p.insts[p.recvInsts[i]];
      const TensorType &t = inst.resultTypes[0];
      posted[i].data = Tensor::empty(t.dtype, t.shape);
      int rc = MPI_Irecv(posted[i].data.raw(),
                         static_cast<int>(posted[i].data.numel()),
                         mpi::dataType(t.dtype), peerRank(inst), tagOf(inst),
                         ctx.p2p->comm.handle(), &posted[i].request);
      if (rc != MPI_SUCCESS) {
        posted[i].request = MPI_REQUEST_NULL;
        return mpi::failure(rc, inst.where + ": MPI_Irecv of " + t.str() +
                                    " from " + peerText(inst));
      }
    }
    return llvm::Error::success();
  }

  /// Arguments, constants (shared, never written) and the buffers of the
  /// arguments that results overwrite, which stay reachable after the
  /// argument's slot is released.
  void fillSlots(std::vector<Tensor> args) {
    overwritten.resize(args.size());
    for (int a : p.inPlaceArgs)
      overwritten[a] = args[a];
    slot.resize(p.slots);
    for (size_t i = 0; i < args.size(); ++i)
      slot[i] = std::move(args[i]);
    for (const auto &c : p.constants)
      slot[c.first] = c.second;
    for (int s : p.releaseArgsEarly)
      slot[s] = Tensor();
  }

  llvm::Error runSend(const Instruction &inst) {
    fault::at(fault::Moment::Send); // test hook
    Tensor data = slot[inst.operands[0]];
    if (devicePointToPoint) {
      if (llvm::Error err = ctx.communication->send(
              data, peerRank(inst), inst.where + ": send to " + peerText(inst)))
        return fail(llvm::toString(std::move(err)));
    } else {
      if (!p.device->hostMemory()) {
        // Host staging: MPI sends the host copy.
        llvm::Expected<Tensor> host = p.device->download(data);
        if (!host)
          return fail(inst.where + ": " + llvm::toString(host.takeError()));
        data = std::move(*host);
      }
      std::string what = inst.where + ": MPI_Isend of " +
                         TensorType{data.dtype(), data.shape()}.str() + " to " +
                         peerText(inst);
      PointToPoint::PendingSend send;
      send.data = data; // keeps the buffer alive until the send completes
      send.what = what;
      int rc = MPI_Isend(data.raw(), static_cast<int>(data.numel()),
                         mpi::dataType(data.dtype()), peerRank(inst),
                         tagOf(inst), ctx.p2p->comm.handle(), &send.request);
      if (rc != MPI_SUCCESS)
        return mpi::failure(rc, what);
      ctx.p2p->pending.push_back(std::move(send));
    }
    if (ctx.traffic)
      ctx.traffic->record(mpi::CollectiveKind::Send,
                          static_cast<double>(data.bytes()), 2);
    return llvm::Error::success();
  }

  llvm::Error runWait(const Instruction &inst) {
    if (llvm::Error err =
            ctx.communication
                ? ctx.communication->waitAllReduce(inst.asyncIndex, inst.where)
                : mpi::wait(&requests[inst.asyncIndex]))
      return fail(inst.where + ": " + llvm::toString(std::move(err)));
    slot[inst.results[0]] = slot[inst.operands[0]];
    return llvm::Error::success();
  }

  llvm::Error runDeviceRecv(const Instruction &inst) {
    const TensorType &t = inst.resultTypes[0];
    llvm::Expected<Tensor> data = p.device->allocate(t.dtype, t.shape);
    if (!data)
      return fail(inst.where + ": " + llvm::toString(data.takeError()));
    if (llvm::Error err = ctx.communication->recv(
            *data, peerRank(inst),
            inst.where + ": receive of " + t.str() + " from " + peerText(inst)))
      return fail(llvm::toString(std::move(err)));
    slot[inst.results[0]] = std::move(*data);
    return llvm::Error::success();
  }

  llvm::Error runMpiRecv(const Instruction &inst) {
    PostedRecv &r = posted[inst.recvIndex];
    MPI_Status status;
    double waitStart = MPI_Wtime();
    mpi::watchdog::Guard guard("wait for recv", 0);
    int rc = MPI_Wait(&r.request, &status);
    ctx.p2p->recvWaitSeconds += MPI_Wtime() - waitStart;
    if (rc != MPI_SUCCESS)
      return mpi::failure(rc, inst.where + ": MPI_Wait for the receive of " +
                                  inst.resultTypes[0].str() + " from " +
                                  peerText(inst));
    int count = 0;
    MPI_Get_count(&status, mpi::dataType(r.data.dtype()), &count);
    if (count != r.data.numel())
      return fail(llvm::formatv("{0}: received {1} elements from {2}, "
                                "expected {3} ({4})",
                                inst.where, count, peerText(inst),
                                r.data.numel(), inst.resultTypes[0].str()));
    if (p.device->hostMemory()) {
      slot[inst.results[0]] = std::move(r.data);
    } else {
      llvm::Expected<Tensor> placed = p.device->upload(r.data);
      if (!placed)
        return fail(inst.where + ": " + llvm::toString(placed.takeError()));
      slot[inst.results[0]] = std::move(*placed);
      r.data = Tensor();
    }
    return llvm::Error::success();
  }

  /// The results' buffers: the overwritten argument's (in place), a view
  /// into the arena at its planned offset, or a fresh backend tensor.
  llvm::Error allocateResults(const Instruction &inst) {
    for (size_t i = 0; i < out.size(); ++i) {
      const TensorType &t = inst.resultTypes[i];
      int64_t offset = inst.resultOffsets.empty() ? -1 : inst.resultOffsets[i];
      if (!inst.resultInPlace.empty() && inst.resultInPlace[i] >= 0) {
        out[i] = overwritten[inst.resultInPlace[i]];
        continue;
      }
      if (offset < 0) {
        llvm::Expected<Tensor> fresh = p.device->allocate(t.dtype, t.shape);
        if (!fresh)
          return fail(inst.where + ": " + llvm::toString(fresh.takeError()));
        out[i] = std::move(*fresh);
        continue;
      }
      out[i] =
          Tensor::view(static_cast<char *>(ctx.arena->memory.get()) + offset,
                       t.dtype, t.shape, ctx.arena->memory);
      int64_t used = (static_cast<int64_t>(out[i].bytes()) + 63) / 64 * 64;
      ctx.arena->highWater =
          std::max(ctx.arena->highWater, offset + std::max<int64_t>(used, 64));
    }
    return llvm::Error::success();
  }

  /// A kernel or collective call, or the start of a non-blocking
  /// all-reduce.
  llvm::Error runCall(const Instruction &inst) {
    in.clear();
    for (int s : inst.operands)
      in.push_back(&slot[s]);
    out.clear();
    out.resize(inst.results.size());
    if (inst.allocateResults)
      if (llvm::Error err = allocateResults(inst))
        return err;
    if (inst.kind == Instruction::Kind::AllReduceStart) {
      mpi::ReduceOp op =
          inst.reduceMax ? mpi::ReduceOp::Max : mpi::ReduceOp::Sum;
      if (llvm::Error err =
              ctx.communication
                  ? ctx.communication->startAllReduce(
                        *in[0], out[0], op, ctx.comms[inst.commIndex],
                        inst.asyncIndex, ctx, inst.where)
                  : mpi::startAllReduce(
                        *in[0], out[0], op, ctx.comms[inst.commIndex],
                        &requests[inst.asyncIndex], ctx.traffic))
        return fail(inst.where + ": " + llvm::toString(std::move(err)));
    } else if (llvm::Error err = inst.fn(ctx, in, out))
      return fail(inst.where + ": " + llvm::toString(std::move(err)));
    for (size_t i = 0; i < out.size(); ++i)
      slot[inst.results[i]] = std::move(out[i]);
    if (inst.trace >= 0 && ctx.traced)
      for (size_t i = 0; i < inst.results.size(); ++i)
        if (llvm::Error err = ctx.traced(inst.trace, static_cast<unsigned>(i),
                                         slot[inst.results[i]]))
          return fail(inst.where + ": " + llvm::toString(std::move(err)));
    return llvm::Error::success();
  }

  const Program &p;
  const ExecContext &ctx;
  std::vector<PostedRecv> posted;
  std::vector<MPI_Request> requests;
  bool devicePointToPoint;
  std::vector<Tensor> slot, overwritten;
  llvm::SmallVector<const Tensor *, 8> in;
  llvm::SmallVector<Tensor, 4> out;
};

} // namespace tessera::runtime::exec

llvm::Expected<std::vector<Tensor>>
Program::run(const ExecContext &ctx, std::vector<Tensor> args) const {
  return ProgramRun(*this, ctx).run(std::move(args));
}

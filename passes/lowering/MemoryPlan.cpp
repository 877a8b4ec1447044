//===- MemoryPlan.cpp - static arena offsets and peak-memory prediction ---===//
//
// Implements `tsr-plan-memory` (see Passes.td). The liveness below mirrors
// runtime/executor/Program.cpp exactly: instructions are the body's ops
// other than tsrt.constant and func.return, a value is released right after
// its last reader (or right after its definition if nothing reads it; unread
// arguments before the first instruction), and constants and returned values
// are never released. A buffer (the storage of a value and of every
// `reshape` view of it) is free once all of them are released; updated
// params/optimizer state live in the arena to the end of the program (the
// executor copies them out, runtime/executor/Executor.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/lowering/OffsetAllocator.h"
#include "passes/lowering/Passes.h"

#include "dialects/tsrt/AttentionWorkspace.h"
#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

namespace tessera::lowering {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/lowering/Passes.h.inc"
} // namespace tessera::lowering

using namespace mlir;
using namespace tessera;

namespace {

constexpr int64_t kAlignment = 64;

/// Bytes the runtime allocates for a value of `type` (Tensor::empty: element
/// bytes rounded up to 64, at least 64), or failure for a type the runtime
/// cannot hold.
FailureOr<int64_t> allocBytes(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape())
    return failure();
  Type e = ranked.getElementType();
  int64_t elementBytes = 0;
  if (e.isF32())
    elementBytes = 4;
  else if (e.isInteger(64))
    elementBytes = 8;
  else if (e.isInteger(1))
    elementBytes = 1;
  else if (e.isBF16() || e.isF16())
    elementBytes = 2;
  else
    return failure();
  return lowering::alignedBufferBytes(ranked.getNumElements() * elementBytes,
                                      kAlignment);
}

/// True for ops whose result shares its operand's storage at run time
/// (the backends bind them with `allocateResults = false`, e.g.
/// runtime/backends/cpu/CpuBackend.cpp).
bool isView(Operation *op) {
  if (isa<tsrt::WaitOp>(op)) // the completed all_reduce_start's buffer
    return true;
  auto kernel = dyn_cast<tsrt::KernelOp>(op);
  return kernel && kernel.getKernel() == "reshape";
}

/// For an optimizer-update kernel, the operand whose buffer result `result`
/// may overwrite: the kernels (runtime/backends/cpu CpuKernels.h) read every
/// input element before writing the outputs' element at the same index, so
/// the new param / moment can take the old one's place. -1 for other ops.
int64_t inPlaceOperand(Operation *op, unsigned result) {
  auto kernel = dyn_cast<tsrt::KernelOp>(op);
  if (!kernel)
    return -1;
  if (kernel.getKernel() == "sgd_update" && result == 0)
    return 0; // (param, grad) -> param'
  if (kernel.getKernel() == "adamw_update" && result < 3)
    return result == 0 ? 0 : result + 1; // (p, g, m, v, step) -> p', m', v'
  // The multi-tensor forms: tensor i's outputs read only tensor i's inputs
  // (runtime/backends/cpu CpuKernels.h sgdUpdateMulti, adamwUpdateMulti).
  if (kernel.getKernel() == "multi_sgd_update")
    return result; // (p_0.., g_0.., lr) -> p'_0..
  if (kernel.getKernel() == "multi_adamw_update") {
    // (p_0.., g_0.., m_0.., v_0.., step, lr) -> p'_0.., m'_0.., v'_0..
    unsigned n = op->getNumResults() / 3, group = result / n, i = result % n;
    return group == 0 ? i : (group + 1) * n + i;
  }
  // Elementwise (cond, a, b) -> r reads element i of each before writing
  // r[i]: dynamic loss scaling's select(ok, new, old) may take old's place.
  if (kernel.getKernel() == "select" && result == 0)
    return 2;
  return -1;
}

/// Heap bytes the runtime's 16-bit float adapter
/// (runtime/backends/cpu/CpuBackend.cpp, bindWidened) holds while `op` runs: an
/// f32 copy of every bf16/f16 operand and result of a kernel that computes
/// (every kernel but those that only move bytes, which take bf16/f16
/// natively). 0 for other ops.
int64_t widenedWorkspaceBytes(Operation *op) {
  auto kernel = dyn_cast<tsrt::KernelOp>(op);
  if (!kernel || tsrt::isDataMovementKernel(kernel.getKernel()))
    return 0;
  int64_t bytes = 0;
  auto add = [&](Type t) {
    auto ranked = dyn_cast<RankedTensorType>(t);
    if (ranked &&
        (ranked.getElementType().isBF16() || ranked.getElementType().isF16()) &&
        ranked.hasStaticShape())
      bytes +=
          lowering::alignedBufferBytes(ranked.getNumElements() * 4, kAlignment);
  };
  for (Type t : op->getOperandTypes())
    add(t);
  for (Type t : op->getResultTypes())
    add(t);
  return bytes;
}

/// Heap bytes of the scratch the CPU attention kernels allocate per call:
/// tsrt::attentionWorkspaceElems floats (dialects/tsrt/AttentionWorkspace.h,
/// the formula the runtime allocates by), in its ring form for a ring
/// attention kernel (`grid_axes` and `ring_size` > 1). 0 for other ops.
/// Kept in step with the runtime by Run/memory-plan.test (predicted ==
/// measured peak).
int64_t attentionWorkspaceBytes(Operation *op) {
  auto kernel = dyn_cast<tsrt::KernelOp>(op);
  if (!kernel ||
      (kernel.getKernel() != "attention" &&
       kernel.getKernel() != "attention_grad") ||
      op->getNumOperands() < 3)
    return 0;
  bool backward = kernel.getKernel() == "attention_grad";
  auto q = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto k = dyn_cast<RankedTensorType>(op->getOperand(1).getType());
  auto v = dyn_cast<RankedTensorType>(op->getOperand(2).getType());
  if (!q || !k || !v || !q.hasStaticShape() || !k.hasStaticShape() ||
      !v.hasStaticShape() || q.getRank() < 3 || k.getRank() < 3 ||
      v.getRank() < 3)
    return 0;
  int64_t sq = q.getDimSize(q.getRank() - 2),
          dh = q.getDimSize(q.getRank() - 1),
          sk = k.getDimSize(k.getRank() - 2),
          dv = v.getDimSize(v.getRank() - 1);
  if (sq == 0 || dh == 0 || sk == 0)
    return 0;
  int64_t batch = q.getNumElements() / (sq * dh);
  // Grouped-query attention: K/V hold fewer heads than Q (the ring's
  // rotating block is K/V-sized).
  int64_t kvBatch = k.getNumElements() / (sk * dh);
  if (batch == 0 || kvBatch == 0)
    return 0;
  bool ring = false;
  if (kernel.getAttrs().get("grid_axes"))
    if (auto r = kernel.getAttrs().getAs<IntegerAttr>("ring_size"))
      ring = r.getInt() > 1;
  int64_t elems = tsrt::attentionWorkspaceElems(batch, kvBatch, sq, sk, dh, dv,
                                                backward, ring);
  return lowering::alignedBufferBytes(elems * 4, kAlignment);
}

/// Heap bytes of the scratch a vocab-parallel cross-entropy kernel (one with
/// `grid_axes`) allocates while it runs (runtime/backends/cpu/CpuBackend.cpp):
/// N · tsrt::vocabParallelScratchPerRow doubles for logits [N, V_local]. Held
/// together with the 16-bit adapter's copies. 0 for other ops.
int64_t vocabScratchBytes(Operation *op) {
  auto kernel = dyn_cast<tsrt::KernelOp>(op);
  if (!kernel || !kernel.getAttrs().get("grid_axes") ||
      op->getNumOperands() == 0)
    return 0;
  int64_t perRow = tsrt::vocabParallelScratchPerRow(kernel.getKernel());
  auto logits = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  if (!perRow || !logits || logits.getRank() != 2 || !logits.hasStaticShape())
    return 0;
  return lowering::alignedBufferBytes(logits.getDimSize(0) * perRow * 8,
                                      kAlignment);
}

/// The prediction for one function, in bytes.
struct Prediction {
  int64_t parameters = 0, optimizerState = 0, otherArguments = 0;
  int64_t constants = 0, arena = 0;
  int64_t batchAtPeak = 0, resultsAtPeak = 0, workspaceAtPeak = 0;
  int64_t peak() const {
    return parameters + optimizerState + otherArguments + constants + arena +
           batchAtPeak + resultsAtPeak + workspaceAtPeak;
  }
};

/// Which value owns a storage class.
enum class Owner { Argument, Constant, Result };

/// A storage class: a value and every `reshape` view of it.
struct Storage {
  Owner owner = Owner::Result;
  int64_t bytes = 0;
  int64_t def = -1;     ///< defining instruction (-1: before the first)
  int64_t release = -1; ///< last instruction holding it (see below)
  bool pinned = false;  ///< outlives the program (constant or returned)
  /// Returned as a param/opt_state result: copied by the executor into the
  /// argument it replaces right after the program, so it may live in the
  /// arena until the end of the program.
  bool carried = false;
  /// Carried result written straight into the buffer of this argument
  /// (its old value is dead by then): no arena space, no copy.
  int64_t inPlaceArg = -1;
  bool batch = false; ///< argument with role tokens/labels
  StringRef role;     ///< arguments: tsrt.role
  int buffer = -1;    ///< index into the arena buffers
};

/// Plans one function's arena and predicts its peak memory, in steps (see
/// run()).
class FunctionMemoryPlanner {
public:
  /// `heapOnly`: a function of a pipeline plan (see runHeapOnly).
  FunctionMemoryPlanner(FunctionOpInterface func, bool heapOnly)
      : func(func), b(func.getContext()), heapOnly(heapOnly) {}

  LogicalResult run() {
    if (func.isExternal() || !func.getFunctionBody().hasOneBlock())
      return func.emitOpError(
          "tsr-plan-memory needs a function with one block");
    if (failed(collectArguments()) || failed(collectInstructions()))
      return failure();
    if (!ret)
      return func.emitOpError("has no func.return");
    end = static_cast<int64_t>(insts.size());
    if (heapOnly)
      return runHeapOnly();
    markReturned();
    computeReleases();
    placeCarriedInPlace();
    std::vector<lowering::BufferLifetime> buffers = assignArena();
    predictHeap();
    writePrediction(buffers);
    return success();
  }

private:
  /// A function of a pipeline plan: the runtime keeps its values on the heap
  /// (no arena: a value sent with MPI_Isend must outlive the run, and the
  /// executor keeps results across runs in the activation stash and the
  /// accumulators). Writes the function's heap profile, which
  /// compiler/artifact/Memory.cpp composes along each stage's schedule:
  ///   tsrt.heap_profile = {peak, sent, constants}: `peak`, the most bytes
  ///     the run itself allocates at one instruction (results from their
  ///     definition to their release, returned ones to the end; receive
  ///     buffers from the start of the run, as the MPI path posts every
  ///     receive first; sent values to the end, as the pending MPI_Isend
  ///     holds them; the kernels' workspaces); `sent`, the bytes only the
  ///     pending sends hold after the run; `constants`, the constants'
  ///     bytes;
  ///   tsrt.result_bytes = array<i64: ...>, one per result: the bytes of the
  ///     storage the run allocated for it (0 for an argument, a constant, or
  ///     a storage an earlier result already counts).
  LogicalResult runHeapOnly() {
    computeReleases();
    llvm::DenseSet<Value> returnedRoots;
    for (Value v : ret.getOperands())
      returnedRoots.insert(root.lookup(v));
    llvm::DenseSet<Value> sentRoots;
    for (Operation *op : insts)
      if (isa<tsrt::SendOp>(op))
        for (Value v : op->getOperands())
          sentRoots.insert(root.lookup(v));
    SmallVector<int64_t> heapAt(end + 1, 0);
    int64_t constants = 0, sent = 0;
    for (auto &[v, s] : storage) {
      if (s.owner == Owner::Constant) {
        constants += s.bytes;
        continue;
      }
      if (s.owner != Owner::Result)
        continue;
      int64_t from = isa<tsrt::RecvOp>(insts[s.def]) ? 0 : s.def;
      bool returned = returnedRoots.contains(v);
      bool isSent = sentRoots.contains(v);
      int64_t to = returned || isSent ? end : s.release;
      for (int64_t i = from; i <= to; ++i)
        heapAt[i] += s.bytes;
      if (isSent && !returned)
        sent += s.bytes;
    }
    for (auto [i, op] : llvm::enumerate(insts))
      heapAt[i] += widenedWorkspaceBytes(op) + attentionWorkspaceBytes(op) +
                   vocabScratchBytes(op);
    int64_t peak = 0;
    for (int64_t bytes : heapAt)
      peak = std::max(peak, bytes);

    SmallVector<int64_t> resultBytes;
    llvm::DenseSet<Value> counted;
    for (Value v : ret.getOperands()) {
      Value r = root.lookup(v);
      const Storage &s = storage[r];
      bool fresh = s.owner == Owner::Result && counted.insert(r).second;
      resultBytes.push_back(fresh ? s.bytes : 0);
    }
    NamedAttribute entries[] = {
        b.getNamedAttr("constants", b.getI64IntegerAttr(constants)),
        b.getNamedAttr("peak", b.getI64IntegerAttr(peak)),
        b.getNamedAttr("sent", b.getI64IntegerAttr(sent)),
    };
    func->setAttr("tsrt.heap_profile", b.getDictionaryAttr(entries));
    func->setAttr("tsrt.result_bytes", b.getDenseI64ArrayAttr(resultBytes));
    return success();
  }

  /// Storage classes of the arguments (and their roles).
  LogicalResult collectArguments() {
    for (BlockArgument arg : func.getArguments()) {
      FailureOr<int64_t> bytes = allocBytes(arg.getType());
      if (failed(bytes))
        return func.emitOpError("argument #")
               << arg.getArgNumber() << " has type " << arg.getType()
               << ", which the runtime cannot hold (static f32/bf16/f16/i64/i1 "
                  "tensors)";
      root[arg] = arg;
      Storage s;
      s.owner = Owner::Argument;
      s.bytes = *bytes;
      if (auto role = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        "tsrt.role"))
        s.role = role.getValue();
      s.batch = s.role == "tokens" || s.role == "labels";
      storage[arg] = s;
    }
    return success();
  }

  /// Instructions, definitions and uses; the storage classes of constants
  /// and results; the return.
  LogicalResult collectInstructions() {
    for (Operation &op : func.getFunctionBody().front()) {
      if (auto r = dyn_cast<func::ReturnOp>(op)) {
        ret = r;
        continue;
      }
      if (!isa<tsrt::TsrtDialect>(op.getDialect()) || op.getNumRegions() != 0 ||
          isa<tsrt::PipelineScheduleOp>(op))
        return op.emitOpError(
            "is not a tsrt runtime instruction; "
            "tsr-plan-memory runs after tsr-lower-to-runtime");
      for (Value v : op.getResults())
        if (failed(allocBytes(v.getType())))
          return op.emitOpError("result type ")
                 << v.getType()
                 << " is not one the runtime can hold (static "
                    "f32/bf16/f16/i64/i1 "
                    "tensors)";
      if (auto cst = dyn_cast<tsrt::ConstantOp>(op)) {
        Storage s;
        s.owner = Owner::Constant;
        s.bytes = *allocBytes(cst.getType());
        s.pinned = true;
        root[cst.getResult()] = cst.getResult();
        storage[cst.getResult()] = s;
        continue;
      }
      int64_t index = static_cast<int64_t>(insts.size());
      insts.push_back(&op);
      for (Value v : op.getOperands())
        lastUse[v] = index;
      for (Value v : op.getResults()) {
        defined[v] = index;
        if (isView(&op)) {
          root[v] = root.lookup(op.getOperand(0));
          continue;
        }
        root[v] = v;
        Storage s;
        s.bytes = *allocBytes(v.getType());
        s.def = index;
        storage[v] = s;
      }
    }
    return success();
  }

  /// Returned values: carried (param/opt_state results) or pinned.
  void markReturned() {
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      auto role = func.getResultAttrOfType<StringAttr>(i, "tsrt.role");
      Storage &s = storage[root.lookup(v)];
      if (role &&
          (role.getValue() == "param" || role.getValue() == "opt_state"))
        s.carried = true;
      else
        s.pinned = true;
    }
  }

  /// Release point of every value, folded into its storage class: the class
  /// holds its bytes until its last member is released.
  void computeReleases() {
    auto fold = [&](Value v) {
      int64_t at = -1;
      if (auto it = lastUse.find(v); it != lastUse.end())
        at = it->second;
      else if (auto d = defined.find(v); d != defined.end())
        at = d->second;
      Storage &s = storage[root.lookup(v)];
      s.release = std::max(s.release, at);
    };
    for (BlockArgument arg : func.getArguments())
      fold(arg);
    for (Operation *op : insts)
      for (Value v : op->getResults())
        fold(v);
  }

  /// In place: a carried result that owns its storage takes the buffer of
  /// the argument it replaces (same tsrt.name and role, as the executor
  /// matches them) when nothing reads that argument (or a view of it) after
  /// the result's instruction starts, or when that instruction is an
  /// optimizer update reading the argument as the operand it overwrites
  /// element by element. Such results need no arena space and no copy.
  void placeCarriedInPlace() {
    llvm::StringMap<int64_t> argumentOf;
    for (BlockArgument arg : func.getArguments()) {
      auto name =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "tsrt.name");
      auto role =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "tsrt.role");
      if (name && role &&
          (role.getValue() == "param" || role.getValue() == "opt_state"))
        argumentOf[(role.getValue() + "/" + name.getValue()).str()] =
            arg.getArgNumber();
    }
    llvm::DenseSet<int64_t> donated;
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      auto name = func.getResultAttrOfType<StringAttr>(i, "tsrt.name");
      auto role = func.getResultAttrOfType<StringAttr>(i, "tsrt.role");
      if (!name || !role || root.lookup(v) != v || !defined.count(v))
        continue;
      auto it =
          argumentOf.find((role.getValue() + "/" + name.getValue()).str());
      if (it == argumentOf.end() || donated.contains(it->second))
        continue;
      BlockArgument arg = func.getArgument(it->second);
      Storage &s = storage[v];
      const Storage &old = storage[arg];
      if (!s.carried || arg.getType() != v.getType() ||
          llvm::count(ret.getOperands(), v) != 1)
        continue;
      Operation *def = insts[s.def];
      bool dead = old.release < s.def;
      bool overwrite = false;
      if (old.release == s.def) {
        int64_t operand =
            inPlaceOperand(def, cast<OpResult>(v).getResultNumber());
        overwrite = operand >= 0 && def->getOperand(operand) == arg &&
                    llvm::count(def->getOperands(), arg) == 1;
      }
      if (!dead && !overwrite)
        continue;
      s.inPlaceArg = it->second;
      donated.insert(it->second);
    }
  }

  /// Arena buffers: results that own storage and do not outlive the program
  /// (carried results live to its end); their offsets go on the
  /// instructions as `tsrt.offsets` (and `tsrt.in_place`). Returns the
  /// buffers' lifetimes.
  std::vector<lowering::BufferLifetime> assignArena() {
    std::vector<lowering::BufferLifetime> buffers;
    for (Operation *op : insts)
      for (Value v : op->getResults()) {
        if (root.lookup(v) != v)
          continue;
        Storage &s = storage[v];
        if (s.pinned || s.inPlaceArg >= 0)
          continue;
        s.buffer = static_cast<int>(buffers.size());
        buffers.push_back({s.bytes, s.def, s.carried ? end : s.release});
      }
    lowering::OffsetAssignment assignment =
        lowering::assignOffsets(buffers, kAlignment);
    pred.arena = assignment.arenaBytes;

    for (Operation *op : insts) {
      if (op->getNumResults() == 0)
        continue;
      SmallVector<int64_t> offsets, inPlace;
      for (Value v : op->getResults()) {
        int64_t offset = -1, arg = -1;
        if (root.lookup(v) == v) {
          const Storage &s = storage[v];
          if (s.buffer >= 0)
            offset = assignment.offsets[s.buffer];
          arg = s.inPlaceArg;
        }
        offsets.push_back(offset);
        inPlace.push_back(arg);
      }
      op->setAttr("tsrt.offsets", b.getDenseI64ArrayAttr(offsets));
      if (llvm::any_of(inPlace, [](int64_t a) { return a >= 0; }))
        op->setAttr("tsrt.in_place", b.getDenseI64ArrayAttr(inPlace));
    }
    return buffers;
  }

  /// Persistent bytes, and the heap of one step over time: batch arguments
  /// from the step's start to their release, returned results from their
  /// definition to the end, and the kernels' workspaces while they run.
  void predictHeap() {
    SmallVector<int64_t> batchAt(end + 1, 0), resultsAt(end + 1, 0);
    for (auto &[v, s] : storage) {
      switch (s.owner) {
      case Owner::Constant:
        pred.constants += s.bytes;
        break;
      case Owner::Argument:
        if (s.batch) {
          // Allocated before the step; released after instruction `release`
          // (-1: before the first instruction, but held while slicing).
          for (int64_t i = 0; i <= std::max<int64_t>(s.release, 0); ++i)
            batchAt[i] += s.bytes;
        } else if (s.role == "param" || s.role == "frozen") {
          pred.parameters += s.bytes;
        } else if (s.role == "opt_state") {
          pred.optimizerState += s.bytes;
        } else {
          pred.otherArguments += s.bytes;
        }
        break;
      case Owner::Result:
        if (s.pinned)
          for (int64_t i = s.def; i <= end; ++i)
            resultsAt[i] += s.bytes;
        break;
      }
    }
    SmallVector<int64_t> workspaceAt(end + 1, 0);
    for (auto [i, op] : llvm::enumerate(insts))
      workspaceAt[i] = widenedWorkspaceBytes(op) + attentionWorkspaceBytes(op) +
                       vocabScratchBytes(op);
    for (int64_t i = 0; i <= end; ++i)
      if (batchAt[i] + resultsAt[i] + workspaceAt[i] >
          pred.batchAtPeak + pred.resultsAtPeak + pred.workspaceAtPeak) {
        pred.batchAtPeak = batchAt[i];
        pred.resultsAtPeak = resultsAt[i];
        pred.workspaceAtPeak = workspaceAt[i];
      }
  }

  /// The function's `tsrt.arena_bytes`, `tsrt.arena_live_bytes` and
  /// `tsrt.peak_bytes`.
  void writePrediction(ArrayRef<lowering::BufferLifetime> buffers) {
    func->setAttr("tsrt.arena_bytes", b.getI64IntegerAttr(pred.arena));
    func->setAttr("tsrt.arena_live_bytes",
                  b.getI64IntegerAttr(lowering::peakLiveBytes(buffers)));
    NamedAttribute entries[] = {
        b.getNamedAttr("arena", b.getI64IntegerAttr(pred.arena)),
        b.getNamedAttr("batch", b.getI64IntegerAttr(pred.batchAtPeak)),
        b.getNamedAttr("constants", b.getI64IntegerAttr(pred.constants)),
        b.getNamedAttr("optimizer_state",
                       b.getI64IntegerAttr(pred.optimizerState)),
        b.getNamedAttr("other_arguments",
                       b.getI64IntegerAttr(pred.otherArguments)),
        b.getNamedAttr("parameters", b.getI64IntegerAttr(pred.parameters)),
        b.getNamedAttr("peak", b.getI64IntegerAttr(pred.peak())),
        b.getNamedAttr("updated_state",
                       b.getI64IntegerAttr(pred.resultsAtPeak)),
        b.getNamedAttr("workspace", b.getI64IntegerAttr(pred.workspaceAtPeak)),
    };
    func->setAttr("tsrt.peak_bytes", b.getDictionaryAttr(entries));
  }

  FunctionOpInterface func;
  Builder b;
  /// Every value maps to the value that owns its storage.
  llvm::DenseMap<Value, Value> root;
  llvm::DenseMap<Value, Storage> storage; // keyed by root
  llvm::DenseMap<Value, int64_t> lastUse, defined;
  SmallVector<Operation *> insts;
  func::ReturnOp ret;
  /// "After the step": the number of instructions.
  int64_t end = 0;
  Prediction pred;
  bool heapOnly = false;
};

struct PlanMemoryPass : public lowering::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    FunctionOpInterface func = getOperation();
    // Pipeline plans keep the heap path and get a heap profile per function
    // (see Passes.td). Whether the program is one is a fact of the enclosing
    // module (its tsrt.pipeline_schedule, which no function pass creates or
    // changes).
    auto module = func->getParentOfType<ModuleOp>();
    bool pipeline =
        module && !module.getOps<tsrt::PipelineScheduleOp>().empty();
    if (pipeline && func.isExternal())
      return; // a declaration the schedule does not run
    if (failed(FunctionMemoryPlanner(func, pipeline).run()))
      return signalPassFailure();
  }
};

} // namespace

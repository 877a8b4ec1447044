//===- tessera-check.cpp - the equivalence gate ---------------------------===//
//
// tessera-check MODEL.onnx --steps K [--dp N] [--tp M] [--sp KIND]
//     [--sp-size S] [--zero Z] [--optimizer sgd|adamw] [--lr X]
//     [--weight-decay X] [--beta1 X] [--beta2 X] [--eps X]
//     [--vocab-parallel on|off] [--recompute none|selective|full]
//     [--precision fp32|bf16|fp16] [--rank-order AXES] [--bucket-mb MB]
//     [--freeze REGEX]
//     [--trainable REGEX] [--rtol 1e-5] [--atol 1e-7] [--data TOKENS.u16]
//     [--sharded-ir FILE.mlir] [--emit-sharded-ir OUT.mlir]
//     [--np-launcher mpirun] [--work-dir DIR]
//
// Compiles MODEL twice, serially and with the partition flags, with every op
// of @train_step stamped by tsr-trace-values right after
// tsr-build-train-step; runs both with `tessera-run --dump-tensors` (the
// serial plan on one rank, the partitioned plan on its ranks, both under
// the launcher) on the same batches; gathers every traced value of every
// rank (forward activations, gradients, updated parameters and optimizer
// state) back to its global tensor through the layout its op recorded
// (`tsr.trace_shardings`: split dimensions reassembled from the ranks' grid
// coordinates, partial axes summed); and compares them with the serial
// run's in program order, step by step. docs/Check.md has the details.
//
// Exit status: 0 equivalent, 1 a tensor diverges, 2 an error (bad flag,
// missing file, a compile or a rank that fails), with one line on stderr.
//
//===----------------------------------------------------------------------===//

#include "common/io/CommandLine.h"
#include "common/io/FileSafety.h"
#include "compiler/artifact/Artifact.h"
#include "compiler/import/OnnxImporter.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/planner/Plan.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/trace/Passes.h"
#include "runtime/Tensor.h"
#include "runtime/executor/Layout.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

using namespace mlir;
using namespace tessera;
namespace cl = llvm::cl;
namespace json = llvm::json;
namespace exec = tessera::runtime::exec;
using tessera::runtime::DType;
using tessera::runtime::Tensor;

static cl::OptionCategory category("tessera-check options");
static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"),
                                      cl::cat(category));
static cl::opt<int64_t>
    steps("steps",
          cl::desc("Training steps to run and compare (>= 1); every traced "
                   "tensor of every step is compared"),
          cl::init(1), cl::cat(category));
static cl::opt<int64_t> dp("dp", cl::desc("Data-parallel degree"), cl::init(1),
                           cl::cat(category));
static cl::opt<int64_t> tp("tp", cl::desc("Tensor-parallel degree"),
                           cl::init(1), cl::cat(category));
static cl::opt<int64_t> pp("pp",
                           cl::desc("Pipeline stages: not supported (only 1)"),
                           cl::init(1), cl::cat(category));
static cl::opt<int64_t>
    microBatches("micro-batches",
                 cl::desc("Micro-batches: not supported (only 1)"), cl::init(1),
                 cl::cat(category));
static cl::opt<std::string>
    sequenceParallel("sp",
                     cl::desc("none|megatron|ulysses|ring (as "
                              "tessera-partition)"),
                     cl::init("none"), cl::cat(category));
static cl::opt<int64_t> spSize("sp-size",
                               cl::desc("Ranks of the sp axis (ulysses, ring)"),
                               cl::init(1), cl::cat(category));
static cl::opt<int64_t> zero("zero", cl::desc("ZeRO stage 0-3 over dp"),
                             cl::init(0), cl::cat(category));
static cl::opt<std::string> vocabParallel("vocab-parallel",
                                          cl::desc("on|off (default on)"),
                                          cl::init("on"), cl::cat(category));
static cl::opt<std::string>
    recompute("recompute",
              cl::desc("none|selective|full (both runs recompute alike)"),
              cl::init("none"), cl::cat(category));
static cl::opt<std::string>
    precision("precision",
              cl::desc("fp32|bf16|fp16 (both runs use it; widen --rtol)"),
              cl::init("fp32"), cl::cat(category));
static cl::opt<double> bucketMb(
    "bucket-mb",
    cl::desc("Gradient all-reduce buckets of about this many MiB, overlapped "
             "with backward (as tessera-partition; default off)"),
    cl::init(-1), cl::value_desc("MiB"), cl::cat(category));
static cl::list<std::string> rankOrder("rank-order",
                                       cl::desc("Rank axes, slowest first"),
                                       cl::CommaSeparated, cl::cat(category));
static cl::opt<std::string> optimizer("optimizer",
                                      cl::desc("sgd or adamw (torch.optim)"),
                                      cl::init("adamw"), cl::cat(category));
static cl::opt<double> lr("lr", cl::desc("Learning rate"), cl::init(1e-3),
                          cl::cat(category));
static cl::opt<double>
    weightDecay("weight-decay",
                cl::desc("Weight decay (default: 0.01 for adamw, 0 for sgd)"),
                cl::init(-1), cl::cat(category));
static cl::opt<double> beta1("beta1", cl::desc("AdamW beta1"), cl::init(0.9),
                             cl::cat(category));
static cl::opt<double> beta2("beta2", cl::desc("AdamW beta2"), cl::init(0.999),
                             cl::cat(category));
static cl::opt<double> eps("eps", cl::desc("AdamW epsilon"), cl::init(1e-8),
                           cl::cat(category));
static cl::opt<std::string> freeze("freeze",
                                   cl::desc("Frozen parameters (regex)"),
                                   cl::init(""), cl::cat(category));
static cl::opt<std::string>
    trainable("trainable", cl::desc("Constants to train instead (regex)"),
              cl::init(""), cl::cat(category));
static cl::opt<double>
    rtol("rtol",
         cl::desc("Largest relative error ||a - b||_2 / max(||b||_2, atol * "
                  "sqrt(n)) of a tensor (a: partitioned, b: serial, n "
                  "elements) that counts as equal (default 1e-5)"),
         cl::init(1e-5), cl::cat(category));
static cl::opt<double> absoluteFloor(
    "atol",
    cl::desc("Absolute floor of the relative error's denominator, as a "
             "root-mean-square value per element: a tensor whose serial "
             "values are all near zero is compared absolutely (default "
             "1e-7)"),
    cl::init(1e-7), cl::cat(category));
static cl::opt<std::string>
    dataPath("data",
             cl::desc("Token file (as tessera-run --data). Default: a "
                      "deterministic pseudo-random token stream over the "
                      "model's vocabulary, written to the work directory"),
             cl::value_desc("tokens.u16"), cl::init(""), cl::cat(category));
static cl::opt<std::string> shardedIr(
    "sharded-ir",
    cl::desc("Run this partitioned IR (tessera-check --emit-sharded-ir's "
             "output, possibly edited: it must carry the tsr.trace ids and "
             "tsr.trace_shardings) instead of compiling the partitioned "
             "plan; the partition flags must be the ones it was made with"),
    cl::value_desc("FILE.mlir"), cl::init(""), cl::cat(category));
static cl::opt<std::string> emitShardedIr(
    "emit-sharded-ir",
    cl::desc("Write the traced partitioned IR (after sharding-partition and "
             "ZeRO) to this file and exit without running anything"),
    cl::value_desc("OUT.mlir"), cl::init(""), cl::cat(category));
static cl::opt<std::string>
    launcher("np-launcher",
             cl::desc("MPI launcher run as `LAUNCHER -np N tessera-run ...` "
                      "for both runs; words separated by spaces (default "
                      "mpirun)"),
             cl::init("mpirun"), cl::cat(category));
static cl::opt<std::string>
    workDir("work-dir",
            cl::desc("Keep the plans, the runs' logs and tensor dumps here "
                     "(default: a temporary directory, removed at exit)"),
            cl::value_desc("DIR"), cl::init(""), cl::cat(category));

static const char *kOverview =
    "tessera-check: the equivalence gate. Runs the serial and the "
    "partitioned\n"
    "training step of MODEL on the same batches and compares every forward\n"
    "activation, gradient and updated parameter (and optimizer state), "
    "gathered\n"
    "back to global tensors through their shardings, in program order.\n"
    "\n"
    "  tessera-check MODEL.onnx --steps K --dp 2 --tp 2 [--rtol 1e-5]\n"
    "\n"
    "Prints 'equivalent: K steps, N tensors, worst relative error E (TENSOR,\n"
    "step S)'\n"
    "and exits 0, or names the first tensor (step-major, then program order)\n"
    "whose relative error exceeds --rtol:\n"
    "  'diverges: step S, tensor tID produced by OP (LOC) : relative error E "
    "> RTOL'\n"
    "and exits 1. Relative error: ||a - b||_2 / max(||b||_2, atol * sqrt(n)).\n"
    "Collectives carry no id and are not compared: a missing or wrong one\n"
    "shows as the first tensor computed from its result. Errors (bad flags,\n"
    "missing files, a failing compile or rank) exit 2 with one line.\n"
    "Pipeline plans (--pp, --micro-batches) are not supported.\n";

namespace {

/// The temporary work directory, removed on every exit.
std::string temporaryDir;

void removeTemporaryDir() {
  if (!temporaryDir.empty())
    (void)llvm::sys::fs::remove_directories(temporaryDir);
  temporaryDir.clear();
}

/// An error for the user: one line on stderr, exit status 2.
[[noreturn]] void fail(const llvm::Twine &message) {
  std::string line = message.str();
  std::replace(line.begin(), line.end(), '\n', ' ');
  llvm::outs().flush();
  llvm::errs() << "tessera-check: error: " << line << "\n";
  llvm::errs().flush();
  removeTemporaryDir();
  std::exit(2);
}

/// One-line text of a location: the ONNX node name, or file:line:col.
std::string locText(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return ("\"" + name.getName().getValue() + "\"").str();
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return llvm::formatv("{0}:{1}:{2}", file.getFilename().getValue(),
                         file.getLine(), file.getColumn())
        .str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      return locText(fused.getLocations().front());
  if (auto callsite = dyn_cast<CallSiteLoc>(loc))
    return locText(callsite.getCallee());
  return "unknown location";
}

std::string shapeText(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") + std::to_string(d);
  return s + "]";
}

/// What the serial program says about one traced op.
struct TracedOp {
  std::string op;    ///< "tsr.matmul"
  std::string loc;   ///< locText
  std::string phase; ///< "forward", "backward", "update" or "loss/other"
  /// Per result, a readable name where one is known ("updated head.weight",
  /// "gradient of head.weight"), else empty.
  std::vector<std::string> names;
  /// An optimizer update: the traced tensor (trace id, result) that is its
  /// gradient operand, when there is one.
  std::optional<std::pair<int64_t, int64_t>> gradient;
};

/// What the partitioned program says about one traced op.
struct ShardedOp {
  std::vector<Attribute> shardings; ///< per result (#tsr.sharding or null)
  std::vector<RankedTensorType> localTypes;
};

/// The trace id of a tensor: "t57", "t12#1" for result 1.
std::string tensorName(int64_t trace, unsigned result) {
  return "t" + std::to_string(trace) +
         (result ? "#" + std::to_string(result) : "");
}

func::FuncOp trainStep(ModuleOp module, StringRef what) {
  auto fn = module.lookupSymbol<func::FuncOp>("train_step");
  if (!fn || fn.isExternal())
    fail(what + " has no func.func @train_step");
  return fn;
}

std::map<int64_t, TracedOp> describeSerial(ModuleOp module) {
  func::FuncOp fn = trainStep(module, "the serial program");
  std::map<int64_t, TracedOp> ops;
  // Gradients by the update that consumes them.
  llvm::DenseMap<Value, std::string> gradOf;
  fn.walk([&](tsr::OptimizerUpdateOpInterface update) {
    if (auto arg = dyn_cast<BlockArgument>(update.getParamOperand().get()))
      if (auto name = tsr::getArgName(fn, arg.getArgNumber()))
        gradOf[update.getGradOperand().get()] = name.getValue().str();
  });
  fn.walk([&](Operation *op) {
    IntegerAttr id = tsr::getTraceId(op);
    if (!id)
      return;
    TracedOp t;
    t.op = op->getName().getStringRef().str();
    t.loc = locText(op->getLoc());
    t.names.resize(op->getNumResults());
    if (auto update = dyn_cast<tsr::OptimizerUpdateOpInterface>(op)) {
      t.phase = "update";
      if (auto arg = dyn_cast<BlockArgument>(update.getParamOperand().get()))
        if (auto name = tsr::getArgName(fn, arg.getArgNumber()))
          t.names[0] = ("updated " + name.getValue()).str();
      Value grad = update.getGradOperand().get();
      if (Operation *def = grad.getDefiningOp())
        if (IntegerAttr gradId = tsr::getTraceId(def))
          t.gradient = {gradId.getInt(),
                        cast<OpResult>(grad).getResultNumber()};
      SmallVector<Value> state = update.getOptimizerState();
      for (auto [i, s] : llvm::enumerate(state))
        if (auto arg = dyn_cast<BlockArgument>(s))
          if (auto name = tsr::getArgName(fn, arg.getArgNumber()))
            if (i + 1 < t.names.size())
              t.names[i + 1] = ("updated " + name.getValue()).str();
    } else if (tsr::isBackward(op)) {
      t.phase = "backward";
    } else if (tsr::getForwardId(op)) {
      t.phase = "forward";
    } else {
      t.phase = "loss/optimizer";
    }
    for (auto [r, v] : llvm::enumerate(op->getResults()))
      if (auto it = gradOf.find(v); it != gradOf.end())
        t.names[r] = "gradient of " + it->second;
    ops[id.getInt()] = std::move(t);
  });
  return ops;
}

std::map<int64_t, ShardedOp> describeSharded(ModuleOp module,
                                             SmallVectorImpl<int64_t> &grid) {
  func::FuncOp fn = trainStep(module, "the partitioned program");
  SmallVector<shard::GridOp> grids(module.getOps<shard::GridOp>());
  grid.assign({1});
  if (grids.size() > 1)
    fail("the partitioned program has more than one shard.grid");
  if (!grids.empty())
    grid.assign(grids[0].getShape().begin(), grids[0].getShape().end());
  std::map<int64_t, ShardedOp> ops;
  bool traced = false;
  fn.walk([&](Operation *op) {
    IntegerAttr id = tsr::getTraceId(op);
    if (!id)
      return;
    traced = true;
    ArrayAttr shardings = tsr::getTraceShardings(op);
    if (!shardings || shardings.size() != op->getNumResults())
      fail("traced op " + tensorName(id.getInt(), 0) + " (" +
           op->getName().getStringRef() + " at " + locText(op->getLoc()) +
           ") of the partitioned program has no tsr.trace_shardings for its " +
           llvm::Twine(op->getNumResults()) +
           " results (was it partitioned by tsr-sharding-partition?)");
    ShardedOp s;
    s.shardings.assign(shardings.begin(), shardings.end());
    for (Value v : op->getResults()) {
      auto type = dyn_cast<RankedTensorType>(v.getType());
      if (!type)
        fail("traced op " + tensorName(id.getInt(), 0) +
             " has a result that is not a ranked tensor");
      s.localTypes.push_back(type);
    }
    ops[id.getInt()] = std::move(s);
  });
  if (!traced)
    fail("the partitioned program has no tsr.trace ids (make it with "
         "tessera-check --emit-sharded-ir)");
  return ops;
}

/// The plan of the partition flags (`serial`: the same optimizer, precision
/// and recomputation on one rank).
planner::Plan planOf(bool serial) {
  planner::Plan plan;
  if (!serial) {
    plan.dp = dp;
    plan.tp = tp;
    plan.zero = zero;
    plan.sp = sequenceParallel;
    plan.spSize = spSize;
    plan.rankOrder.assign(rankOrder.begin(), rankOrder.end());
    plan.bucketMb = bucketMb;
    if (vocabParallel != "on" && vocabParallel != "off")
      fail("--vocab-parallel must be on or off, got '" + vocabParallel + "'");
    plan.vocabParallel = vocabParallel == "on";
  }
  plan.recompute = recompute;
  plan.precision = precision;
  plan.optimizer.name = optimizer;
  plan.optimizer.lr = lr;
  plan.optimizer.weightDecay = weightDecay;
  plan.optimizer.beta1 = beta1;
  plan.optimizer.beta2 = beta2;
  plan.optimizer.eps = eps;
  if (llvm::Error err = plan.validate())
    fail(llvm::toString(std::move(err)));
  return plan;
}

/// Runs the partition pipeline of `plan` on `module` with tsr-trace-values
/// right after tsr-build-train-step.
void compileTraced(ModuleOp module, const planner::Plan &plan, StringRef what) {
  std::vector<pipeline::Stage> stages = pipeline::partitionStages(plan);
  auto train = llvm::find_if(stages, [](const pipeline::Stage &s) {
    return s.name == "build-train-step";
  });
  if (train == stages.end())
    fail("the partition pipeline has no build-train-step stage");
  stages.insert(train + 1,
                pipeline::Stage{"trace-values", [](OpPassManager &pm) {
                                  pm.addPass(trace::createTraceValues());
                                }});
  if (failed(pipeline::runStages(module, stages, "")))
    fail("compiling the " + what + " program failed");
}

/// The vocabulary: the logits' last dimension (tsr.cross_entropy's first
/// operand) of the serial program.
int64_t vocabularyOf(ModuleOp module) {
  int64_t vocab = 0;
  module.walk([&](tsr::CrossEntropyOp op) {
    auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    if (type && type.getRank() > 0)
      vocab = type.getShape().back();
  });
  if (vocab <= 0)
    fail("cannot find the vocabulary (no tsr.cross_entropy): give --data");
  return vocab;
}

/// Writes a deterministic token stream (a 64-bit LCG, tokens < vocab) long
/// enough for `stepsToRun` steps of the batch without wrapping.
std::string writeTokens(StringRef dir, int64_t vocab, int64_t batch,
                        int64_t seq, int64_t stepsToRun) {
  if (vocab > 65536)
    fail("vocabulary " + llvm::Twine(vocab) +
         " does not fit uint16 tokens: give --data");
  SmallString<256> path(dir);
  llvm::sys::path::append(path, "tokens.u16");
  int64_t count = batch * seq * (stepsToRun + 1) + seq + 2;
  std::vector<uint16_t> tokens(count);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint16_t &t : tokens) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<uint16_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    fail("cannot write '" + path + "': " + ec.message());
  os.write(reinterpret_cast<const char *>(tokens.data()), count * 2);
  return std::string(path);
}

/// The tessera-run next to this executable (build/tools/tessera-run or the
/// same folder).
std::string findTesseraRun(const char *argv0) {
  std::string self = llvm::sys::fs::getMainExecutable(
      argv0, reinterpret_cast<void *>(&findTesseraRun));
  StringRef dir = llvm::sys::path::parent_path(self);
  for (StringRef rel : {"tessera-run", "../tessera-run/tessera-run"}) {
    SmallString<256> p(dir);
    llvm::sys::path::append(p, rel);
    if (llvm::sys::fs::can_execute(p))
      return std::string(p);
  }
  fail("cannot find tessera-run next to " + self);
}

/// Runs `launcher -np ranks tessera-run plan ...`; fails with the last line
/// of the run's stderr.
void runPlan(const std::string &tesseraRun, StringRef plan, StringRef data,
             StringRef dumpDir, int64_t ranks, StringRef logDir,
             StringRef what) {
  SmallVector<StringRef> words;
  StringRef(launcher).split(words, ' ', -1, /*KeepEmpty=*/false);
  if (words.empty())
    fail("--np-launcher is empty");
  llvm::ErrorOr<std::string> program = llvm::sys::findProgramByName(words[0]);
  if (!program)
    fail("--np-launcher: cannot find '" + words[0] + "'");
  std::vector<std::string> args(words.begin(), words.end());
  args[0] = *program;
  std::string stepsText = std::to_string(steps.getValue());
  args.insert(args.end(),
              {"-np", std::to_string(ranks), tesseraRun, plan.str(), "--data",
               data.str(), "--steps", stepsText, "--log-every", "0",
               "--dump-tensors", dumpDir.str()});
  std::vector<StringRef> argRefs(args.begin(), args.end());
  SmallString<256> out(logDir), err(logDir);
  llvm::sys::path::append(out, what + ".stdout");
  llvm::sys::path::append(err, what + ".stderr");
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(out),
                                          StringRef(err)};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(*program, argRefs, std::nullopt, redirects,
                                     0, 0, &message);
  if (rc == 0)
    return;
  std::string last;
  if (auto buf = llvm::MemoryBuffer::getFile(err)) {
    SmallVector<StringRef> lines;
    (*buf)->getBuffer().split(lines, '\n', -1, false);
    for (StringRef l : llvm::reverse(lines))
      if (l.contains("error")) {
        last = l.trim().str();
        break;
      }
    if (last.empty() && !lines.empty())
      last = lines.back().trim().str();
  }
  fail("the " + what + " run (" + llvm::Twine(ranks) + " rank" +
       (ranks == 1 ? "" : "s") + ") failed with status " + llvm::Twine(rc) +
       (message.empty() ? "" : " (" + message + ")") +
       (last.empty() ? "" : ": " + last) +
       (temporaryDir.empty() ? " [log: " + err + "]"
                             : std::string(" (--work-dir DIR keeps its log)")));
}

/// One rank's dump (tessera-run --dump-tensors).
struct RankDump {
  std::vector<int64_t> coords;
  std::unique_ptr<llvm::MemoryBuffer> data;
  struct Entry {
    int64_t step, trace, result, occurrence;
    DType dtype;
    std::vector<int64_t> shape;
    int64_t offset, bytes;
  };
  std::vector<Entry> entries; ///< in the rank's order
  /// (step, trace, result, occurrence) -> index into entries.
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, size_t> byKey;

  Tensor tensor(const Entry &e) const {
    Tensor t = Tensor::empty(e.dtype, e.shape);
    std::memcpy(t.raw(), data->getBufferStart() + e.offset, e.bytes);
    return t;
  }
};

std::optional<DType> parseDType(StringRef name) {
  for (DType d : {DType::F32, DType::I64, DType::I1, DType::BF16, DType::F16})
    if (name == runtime::dtypeName(d))
      return d;
  return std::nullopt;
}

RankDump loadDump(StringRef dir, int rank) {
  SmallString<256> jsonPath(dir), binPath(dir);
  llvm::sys::path::append(jsonPath, "rank" + std::to_string(rank) + ".json");
  llvm::sys::path::append(binPath, "rank" + std::to_string(rank) + ".bin");
  auto text = llvm::MemoryBuffer::getFile(jsonPath);
  if (!text)
    fail("cannot read '" + jsonPath + "': " + text.getError().message());
  RankDump d;
  auto bin = llvm::MemoryBuffer::getFile(binPath);
  if (!bin)
    fail("cannot read '" + binPath + "': " + bin.getError().message());
  d.data = std::move(*bin);
  llvm::Expected<json::Value> v = json::parse((*text)->getBuffer());
  if (!v)
    fail("'" + jsonPath + "': " + llvm::toString(v.takeError()));
  const json::Object *o = v->getAsObject();
  const json::Array *coords = o ? o->getArray("coords") : nullptr;
  const json::Array *tensors = o ? o->getArray("tensors") : nullptr;
  if (!coords || !tensors)
    fail("'" + jsonPath + "' is not a tessera-run --dump-tensors index");
  for (const json::Value &c : *coords)
    d.coords.push_back(c.getAsInteger().value_or(-1));
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> seen;
  for (const json::Value &t : *tensors) {
    const json::Object *e = t.getAsObject();
    RankDump::Entry entry;
    std::optional<DType> dtype;
    const json::Array *shape = e ? e->getArray("shape") : nullptr;
    if (e)
      if (auto name = e->getString("dtype"))
        dtype = parseDType(*name);
    if (!e || !shape || !dtype || !e->getInteger("step") ||
        !e->getInteger("trace") || !e->getInteger("result") ||
        !e->getInteger("offset") || !e->getInteger("bytes"))
      fail("'" + jsonPath + "': malformed tensor entry");
    entry.step = *e->getInteger("step");
    entry.trace = *e->getInteger("trace");
    entry.result = *e->getInteger("result");
    entry.offset = *e->getInteger("offset");
    entry.bytes = *e->getInteger("bytes");
    entry.dtype = *dtype;
    int64_t numel = 1;
    for (const json::Value &s : *shape) {
      entry.shape.push_back(s.getAsInteger().value_or(-1));
      numel *= entry.shape.back();
    }
    if (entry.offset < 0 || entry.bytes < 0 ||
        entry.bytes !=
            numel * static_cast<int64_t>(runtime::dtypeSize(entry.dtype)) ||
        static_cast<uint64_t>(entry.offset + entry.bytes) >
            d.data->getBufferSize())
      fail("'" + jsonPath + "': tensor " + tensorName(entry.trace, 0) +
           " lies outside '" + binPath + "'");
    entry.occurrence = seen[{entry.step, entry.trace, entry.result}]++;
    d.byKey[{entry.step, entry.trace, entry.result, entry.occurrence}] =
        d.entries.size();
    d.entries.push_back(std::move(entry));
  }
  return d;
}

/// The elements of `t` as doubles.
std::vector<double> valuesOf(const Tensor &t) {
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
    case DType::F32:
      out[i] = t.data<float>()[i];
      break;
    case DType::I64:
      out[i] = static_cast<double>(t.data<int64_t>()[i]);
      break;
    case DType::I1:
      out[i] = static_cast<const uint8_t *>(t.raw())[i];
      break;
    case DType::BF16:
      out[i] =
          runtime::toFloat(static_cast<const runtime::BFloat16 *>(t.raw())[i]);
      break;
    case DType::F16:
      out[i] =
          runtime::toFloat(static_cast<const runtime::Float16 *>(t.raw())[i]);
      break;
    }
  }
  return out;
}

/// The global value of one traced tensor from every rank's local piece:
/// pieces are placed by the layout of `sharding`, and the ranks that differ
/// in the coordinates of its partial axes are summed.
std::vector<double> gather(const std::vector<RankDump> &ranks,
                           std::tuple<int64_t, int64_t, int64_t, int64_t> key,
                           Attribute sharding, RankedTensorType localType,
                           ArrayRef<int64_t> grid,
                           std::vector<int64_t> &globalShape) {
  auto attr = dyn_cast_or_null<tsr::ShardingAttr>(sharding);
  SmallVector<int16_t> partial;
  if (attr) {
    partial.assign(attr.getPartialAxes().begin(), attr.getPartialAxes().end());
    attr = tsr::ShardingAttr::get(attr.getContext(), attr.getGrid(),
                                  attr.getSplitAxes(), {}, attr.getFactors());
  }
  std::string what = tensorName(std::get<1>(key), std::get<2>(key));
  SmallVector<int64_t> global;
  FailureOr<json::Array> layoutJson =
      artifact::layoutOf(attr, localType, grid, global);
  if (failed(layoutJson))
    fail("tensor " + what + ": its sharding cannot be laid out on the grid");
  llvm::Expected<exec::Layout> layout =
      exec::parseLayout(json::Value(std::move(*layoutJson)), grid, what);
  if (!layout)
    fail(llvm::toString(layout.takeError()));
  globalShape.assign(global.begin(), global.end());
  std::vector<int64_t> localShape = layout->localShape(grid);
  int64_t n = 1;
  for (int64_t d : globalShape)
    n *= d;
  std::vector<double> sum(n, 0.0);
  // One global tensor per combination of partial-axis coordinates.
  std::map<std::vector<int64_t>, Tensor> groups;
  for (auto [r, dump] : llvm::enumerate(ranks)) {
    auto it = dump.byKey.find(key);
    if (it == dump.byKey.end())
      fail("rank " + llvm::Twine(r) + " dumped no tensor " + what +
           " in step " + llvm::Twine(std::get<0>(key)));
    const RankDump::Entry &e = dump.entries[it->second];
    if (e.shape != localShape)
      fail("rank " + llvm::Twine(r) + " dumped tensor " + what + " as " +
           shapeText(e.shape) + " but its layout gives local shape " +
           shapeText(localShape));
    if (dump.coords.size() != grid.size())
      fail("rank " + llvm::Twine(r) +
           "'s grid coordinates do not match the "
           "program's grid");
    std::vector<int64_t> group;
    for (int16_t a : partial)
      group.push_back(dump.coords[a]);
    auto [g, inserted] = groups.try_emplace(group);
    if (inserted)
      g->second = Tensor::zeros(e.dtype, globalShape);
    exec::placeLocal(dump.tensor(e), *layout, grid, dump.coords, g->second);
  }
  for (auto &[group, t] : groups) {
    std::vector<double> v = valuesOf(t);
    for (int64_t i = 0; i < n; ++i)
      sum[i] += v[i];
  }
  return sum;
}

/// ||a - b||_2 / max(||b||_2, atol * sqrt(n)); infinity when either holds a
/// NaN or an infinity where the other does not hold the same.
double relativeError(const std::vector<double> &a,
                     const std::vector<double> &b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      if (!same)
        return INFINITY;
      continue;
    }
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  double floor = absoluteFloor * std::sqrt(static_cast<double>(a.size()));
  double denom = std::max(std::sqrt(norm), floor);
  if (denom == 0)
    return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff) / denom;
}

std::string formatError(double e) { return llvm::formatv("{0:e2}", e).str(); }

/// The shortest text of `v` ("1e-05").
std::string formatTolerance(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

struct Context {
  MLIRContext mlir;
  std::string firstError;
  Context() {
    mlir.loadDialect<tsr::TsrDialect, tsrt::TsrtDialect, func::FuncDialect,
                     shard::ShardDialect>();
    mlir.getDiagEngine().registerHandler([this](Diagnostic &diag) {
      if (diag.getSeverity() == DiagnosticSeverity::Error &&
          firstError.empty()) {
        std::string loc = locText(diag.getLocation());
        firstError = diag.str();
        if (loc != "unknown location")
          firstError = loc + ": " + firstError;
      }
      return success();
    });
  }
  [[noreturn]] void failWith(const llvm::Twine &what) {
    fail(what + (firstError.empty() ? "" : ": " + firstError));
  }
};

int run(const char *argv0) {
  if (steps < 1)
    fail("--steps must be >= 1, got " + llvm::Twine(steps));
  if (pp != 1 || microBatches != 1)
    fail("pipeline plans (--pp, --micro-batches) are not supported by "
         "tessera-check yet");
  if (!(rtol >= 0) || !(absoluteFloor >= 0))
    fail("--rtol and --atol must be >= 0");
  if (!llvm::sys::fs::exists(modelPath))
    fail("model '" + modelPath + "' does not exist");
  if (!shardedIr.empty() && !llvm::sys::fs::exists(shardedIr))
    fail("--sharded-ir '" + shardedIr + "' does not exist");
  if (!dataPath.empty() && !llvm::sys::fs::exists(dataPath))
    fail("--data '" + dataPath + "' does not exist");
  if (!shardedIr.empty() && !emitShardedIr.empty())
    fail("--sharded-ir and --emit-sharded-ir exclude each other");
  // Never overwrite an input: --emit-sharded-ir is a regular file that is
  // no input; --work-dir (plans, data, dumps) holds none of them
  // (common/io/FileSafety.h).
  if (llvm::Error err = tessera::io::checkOutputs(
          {{"the model", modelPath},
           {"--sharded-ir", shardedIr},
           {"--data", dataPath}},
          {{"--emit-sharded-ir", emitShardedIr},
           {"--work-dir", workDir, /*directory=*/true}}))
    fail(llvm::toString(std::move(err)));
  planner::Plan serialPlan = planOf(/*serial=*/true);
  planner::Plan plan = planOf(/*serial=*/false);

  trace::registerTracePasses();
  Context ctx;
  import::ImportOptions importOptions;
  importOptions.freezeRegex = freeze;
  importOptions.trainableRegex = trainable;
  OwningOpRef<ModuleOp> imported =
      import::importOnnxFile(modelPath, ctx.mlir, importOptions);
  if (!imported)
    ctx.failWith("cannot import '" + modelPath + "'");
  if (import::weightsMissing(*imported))
    fail("'" + modelPath + "' is weight-free; tessera-check needs weights");

  // The partitioned program.
  OwningOpRef<ModuleOp> sharded;
  if (!shardedIr.empty()) {
    sharded = parseSourceFile<ModuleOp>(shardedIr.getValue(), &ctx.mlir);
    if (!sharded)
      ctx.failWith("cannot parse --sharded-ir '" + shardedIr + "'");
  } else {
    sharded = cast<ModuleOp>((*imported)->clone());
    compileTraced(*sharded, plan, "partitioned");
    if (!emitShardedIr.empty()) {
      if (llvm::Error err = tessera::io::writeFileAtomically(
              "--emit-sharded-ir", emitShardedIr, [&](llvm::raw_ostream &os) {
                sharded->print(os);
                return llvm::Error::success();
              }))
        fail(llvm::toString(std::move(err)));
      return 0;
    }
  }
  SmallVector<int64_t> grid;
  std::map<int64_t, ShardedOp> shardedOps = describeSharded(*sharded, grid);
  std::vector<int64_t> planGrid = plan.gridShape();
  if (SmallVector<int64_t>(planGrid.begin(), planGrid.end()) != grid)
    fail("the partitioned program's grid " + shapeText(grid) +
         " is not the flags' " + shapeText(planGrid) +
         " (give the partition flags it was made with)");

  // The serial program.
  OwningOpRef<ModuleOp> serial = cast<ModuleOp>((*imported)->clone());
  compileTraced(*serial, serialPlan, "serial");
  std::map<int64_t, TracedOp> serialOps = describeSerial(*serial);

  // The work directory, plans and data.
  SmallString<256> dir;
  bool temporary = workDir.empty();
  if (temporary) {
    if (std::error_code ec =
            llvm::sys::fs::createUniqueDirectory("tessera-check", dir))
      fail("cannot create a temporary directory: " + ec.message());
  } else {
    dir = workDir;
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      fail("cannot create --work-dir '" + dir + "': " + ec.message());
  }
  if (temporary)
    temporaryDir = std::string(dir);
  auto inDir = [&](StringRef name) {
    SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };
  std::string serialPlanPath = inDir("serial.tsr");
  std::string shardedPlanPath = inDir("partitioned.tsr");
  if (failed(artifact::writeArtifact(*serial, serialPlan, serialPlanPath)))
    ctx.failWith("cannot write the serial plan");
  if (failed(artifact::writeArtifact(*sharded, plan, shardedPlanPath)))
    ctx.failWith("cannot write the partitioned plan");
  std::string data = dataPath;
  if (data.empty()) {
    int64_t batch = 0, seq = 0;
    func::FuncOp fn = trainStep(*serial, "the serial program");
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (auto role = tsr::getArgRole(fn, i); role && role == "tokens")
        if (auto type = dyn_cast<RankedTensorType>(fn.getArgumentTypes()[i]);
            type && type.getRank() == 2) {
          batch = type.getDimSize(0);
          seq = type.getDimSize(1);
        }
    if (batch <= 0 || seq <= 0)
      fail("cannot find the [batch, seq] tokens argument: give --data");
    data = writeTokens(dir, vocabularyOf(*serial), batch, seq, steps);
  }

  // The runs.
  std::string tesseraRun = findTesseraRun(argv0);
  runPlan(tesseraRun, serialPlanPath, data, inDir("serial"), 1, dir, "serial");
  runPlan(tesseraRun, shardedPlanPath, data, inDir("partitioned"),
          plan.numRanks(), dir, "partitioned");
  RankDump serialDump = loadDump(inDir("serial"), 0);
  std::vector<RankDump> rankDumps;
  for (int64_t r = 0; r < plan.numRanks(); ++r)
    rankDumps.push_back(loadDump(inDir("partitioned"), r));

  // The comparison: the serial run's tensors in its order (step-major,
  // program order within a step).
  int64_t compared = 0;
  double worst = -1;
  /// (step, trace, result) -> the error of its first occurrence.
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> errors;
  std::string worstName;
  for (const RankDump::Entry &e : serialDump.entries) {
    auto sh = shardedOps.find(e.trace);
    if (sh == shardedOps.end())
      continue; // the partitioned program has no such op: nothing to compare
    auto info = serialOps.find(e.trace);
    std::tuple<int64_t, int64_t, int64_t, int64_t> key{e.step, e.trace,
                                                       e.result, e.occurrence};
    if (static_cast<size_t>(e.result) >= sh->second.shardings.size())
      fail("tensor " + tensorName(e.trace, e.result) +
           " has no result of that number in the partitioned program");
    std::vector<int64_t> globalShape;
    std::vector<double> got =
        gather(rankDumps, key, sh->second.shardings[e.result],
               sh->second.localTypes[e.result], grid, globalShape);
    std::vector<double> want = valuesOf(serialDump.tensor(e));
    std::string name = tensorName(e.trace, e.result);
    std::string producer =
        info == serialOps.end()
            ? std::string("an unknown op")
            : info->second.op + " (" + info->second.loc + ")";
    std::string label;
    if (info != serialOps.end() &&
        static_cast<size_t>(e.result) < info->second.names.size() &&
        !info->second.names[e.result].empty())
      label = info->second.names[e.result];
    double err = globalShape == e.shape ? relativeError(got, want) : INFINITY;
    ++compared;
    errors.try_emplace({e.step, e.trace, e.result}, err);
    if (!(err <= rtol)) {
      llvm::outs() << "diverges: step " << e.step << ", tensor " << name
                   << " produced by " << producer << " : ";
      if (globalShape != e.shape)
        llvm::outs() << "global shape " << shapeText(globalShape)
                     << " != serial " << shapeText(e.shape) << "\n";
      else
        llvm::outs() << "relative error " << formatError(err) << " > "
                     << formatTolerance(rtol) << "\n";
      llvm::outs()
          << "  " << name << ": "
          << (info != serialOps.end() ? info->second.phase : "?")
          << (label.empty() ? "" : ", " + label) << ", shape "
          << shapeText(e.shape) << ", sharding "
          << (sh->second.shardings[e.result]
                  ? llvm::formatv("{0}", sh->second.shardings[e.result]).str()
                  : std::string("replicated"))
          << "\n";
      // An update whose gradient matched: the optimizer amplified the
      // gradient's rounding (docs/Check.md, "Tolerance").
      if (info != serialOps.end() && info->second.gradient) {
        auto [gid, gres] = *info->second.gradient;
        auto g = errors.find({e.step, gid, gres});
        if (g != errors.end() && g->second <= rtol)
          llvm::outs() << "  note: its gradient " << tensorName(gid, gres)
                       << " matched (relative error " << formatError(g->second)
                       << "): the update amplifies rounding where the "
                          "gradient is near zero (AdamW divides by sqrt(v) "
                          "+ eps; e.g. an attention key bias, whose exact "
                          "gradient is 0); see docs/Check.md\n";
      }
      llvm::outs().flush();
      return 1;
    }
    if (err > worst) {
      worst = err;
      worstName = name + ", step " + std::to_string(e.step);
    }
  }
  if (compared == 0)
    fail("no traced tensor was compared");
  llvm::outs() << "equivalent: " << steps << " step" << (steps == 1 ? "" : "s")
               << ", " << compared << " tensors, worst relative error "
               << formatError(worst) << " (" << worstName << ")\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  // Usage errors: "tessera-check: error: ..." and status 2.
  tessera::io::parseCommandLine(argc, argv, kOverview, /*exitCode=*/2);
  int status = run(argv[0]);
  removeTemporaryDir();
  return status;
}

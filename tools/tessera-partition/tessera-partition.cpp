//===- tessera-partition.cpp - ONNX model -> partitioned plan.tsr ---------===//
//
// tessera-partition MODEL.onnx -o PLAN.tsr [--dp N] [--tp M] [--pp P]
//     [--micro-batches M] [--schedule gpipe|1f1b|interleaved]
//     [--virtual-stages V] [--pp-stages 0,3,6] [--recompute
//     none|selective|full] [--zero 0|1|2|3] [--precision fp32|bf16|fp16]
//     [--loss-scale S | --initial-loss-scale S --loss-scale-window N
//      --min-loss-scale M] [--vocab-parallel on|off]
//     [--sp none|megatron|ulysses|ring] [--sp-size K] [--rank-order pp,dp,tp]
//     [--sharding FILE.json]
//     [--optimizer sgd|adamw] [--lr X] [--weight-decay X]
//     [--weight-decay-exclude] [--beta1 X]
//     [--beta2 X] [--eps X] [--freeze REGEX] [--no-raise]
//     [--emit plan|import|train|sharded]
//     [--dump-ir-after-each DIR] [--explain] [--memory-per-device SIZE]
//     [--cluster SPEC] [--gemm-efficiency X] [--predict-json FILE]
//     [--devices N] [--explain-json FILE] [--plan-space runnable|all]
//     [--plan-only] [--kernel-counts-json FILE]
//
// With --devices N, or --cluster and no parallel degree flag, the plan is
// chosen by the planner's search (compiler/planner/Search.h); any of --dp,
// --tp, --pp, --micro-batches, --virtual-stages, --schedule, --sp,
// --sp-size, --zero and --recompute given pins that part of it.
//
// Imports the ONNX model into the tsr dialect, builds the training step
// (mean cross-entropy over next tokens, reverse-mode autodiff, SGD/AdamW with
// torch.optim semantics), shards it over a (dp, tp) grid (Megatron-LM tensor
// parallelism; data parallelism over the batch), splits it into pipeline
// stages run over micro-batches when --pp or --micro-batches is given, and
// writes one artifact that `tessera-run` executes on dp*tp*pp MPI ranks. Errors
// name the node, tensor or flag at fault and exit with status 1.
//
//===----------------------------------------------------------------------===//

#include "common/cluster/Cluster.h"
#include "common/io/CommandLine.h"
#include "common/io/FileSafety.h"
#include "compiler/artifact/Artifact.h"
#include "compiler/artifact/Memory.h"
#include "compiler/import/OnnxImporter.h"
#include "compiler/pipeline/Pipeline.h"
#include "compiler/planner/KernelCounts.h"
#include "compiler/planner/ModelShape.h"
#include "compiler/planner/Plan.h"
#include "compiler/planner/Search.h"
#include "compiler/planner/SearchReport.h"
#include "compiler/planner/ShardingFile.h"
#include "compiler/planner/StepCost.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsrt/TsrtDialect.h"

#include "runtime/metrics/ByteSize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace tessera;
namespace cl = llvm::cl;

static cl::OptionCategory category("tessera-partition options");
static cl::opt<std::string> inputPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"),
                                      cl::cat(category));
static cl::opt<std::string>
    outputPath("o",
               cl::desc("Output: plan artifact (.tsr), or .mlir with "
                        "--emit other than plan; '-' for stdout"),
               cl::value_desc("path"), cl::init("plan.tsr"), cl::cat(category));
static cl::opt<int64_t> dp("dp",
                           cl::desc("Data-parallel degree (grid axis "
                                    "'dp'); must divide the batch"),
                           cl::init(1), cl::cat(category));
static cl::opt<std::string> vocabParallel(
    "vocab-parallel",
    cl::desc("on|off (default on): with --tp > 1, split the token embedding "
             "over its vocabulary rows (masked lookup, then an all-reduce) "
             "and the LM head and cross-entropy over the vocabulary "
             "(Megatron-LM's vocab-parallel cross-entropy: the row max and "
             "sum-exp are all-reduced, the logits are never gathered); tp "
             "must divide the vocabulary. off: both are replicated"),
    cl::init("on"), cl::cat(category));
static cl::opt<std::string> sequenceParallel(
    "sp",
    cl::desc("Sequence parallelism: none (default); megatron: LayerNorm, "
             "dropout and the residual stream sharded along the sequence "
             "over the tp axis, TP's all-reduces become reduce-scatter + "
             "all-gather (Korthikanti et al. 2022; needs --tp > 1 dividing "
             "the sequence); ulysses: the sequence split over a new 'sp' "
             "axis of --sp-size ranks, one all-to-all into and one out of "
             "head shards around each attention (DeepSpeed-Ulysses, Jacobs "
             "et al. 2023; tp x sp-size must divide the heads); ring: the "
             "sequence striped over 'sp', K/V blocks rotate around the ring "
             "with send/recv and softmax is online, so no rank holds S x S "
             "scores (ring attention, Liu et al. 2023; striped for causal "
             "balance, Brandon et al. 2023). Grid axes (dp, tp, sp); ranks "
             "laid out dp, sp, tp by default (--rank-order); not with --pp "
             "yet"),
    cl::init("none"), cl::cat(category));
static cl::opt<int64_t>
    spSize("sp-size",
           cl::desc("Ranks of the 'sp' axis for --sp ulysses|ring (>= 2, "
                    "must divide the sequence length); ranks = dp x tp x "
                    "sp-size"),
           cl::init(1), cl::cat(category));
static cl::opt<int64_t>
    tp("tp",
       cl::desc("Tensor-parallel degree (grid axis 'tp', Megatron-LM "
                "column/row splits); must divide the heads and hidden sizes"),
       cl::init(1), cl::cat(category));
static cl::opt<int64_t>
    pp("pp",
       cl::desc("Pipeline stages (grid axis 'pp'; GPipe / 1F1B pipeline "
                "parallelism, Huang et al. 2019, Narayanan et al. 2021). The "
                "forward is cut into stages of consecutive layers balanced by "
                "FLOPs and parameter bytes. Must not exceed the layer count"),
       cl::init(1), cl::cat(category));
static cl::opt<int64_t> microBatches(
    "micro-batches",
    cl::desc("Micro-batches per step (gradient accumulation; the batch of "
             "each data-parallel rank is split into M micro-batches, which "
             "must divide it). The DP all-reduce and the optimizer run once "
             "per step"),
    cl::init(1), cl::cat(category));
static cl::opt<std::string> scheduleKind(
    "schedule",
    cl::desc("Pipeline schedule: gpipe (all forwards, then all backwards), "
             "1f1b (PipeDream-Flush: at most P - stage micro-batches in "
             "flight) or interleaved (Megatron-LM interleaved 1F1B over "
             "--virtual-stages chunks per stage; M must be a multiple of P)"),
    cl::init("1f1b"), cl::cat(category));
static cl::opt<int64_t>
    virtualStages("virtual-stages",
                  cl::desc("Model chunks per pipeline stage (interleaved "
                           "schedule only)"),
                  cl::init(1), cl::cat(category));
static cl::list<int64_t> ppStages(
    "pp-stages",
    cl::desc("First layer of every pipeline chunk, e.g. 0,3,6 (default: "
             "balanced by cost). Layers are the points where one "
             "activation crosses; --explain lists them"),
    cl::CommaSeparated, cl::cat(category));
static cl::list<std::string> rankOrder(
    "rank-order",
    cl::desc("How MPI ranks are laid out over the grid: the rank axes "
             "(dp, tp, pp, sp), slowest first, e.g. pp,dp,sp,tp; the last "
             "varies fastest, so its groups stay inside a node (mpirun "
             "places consecutive ranks together); axes of size 1 may be left "
             "out. Default: Megatron-LM's pp, dp, sp, tp restricted to the "
             "plan's axes. --explain prints it with each axis's stride"),
    cl::CommaSeparated, cl::cat(category));
static cl::opt<std::string> shardingFile(
    "sharding",
    cl::desc("Pin parameter shardings: FILE is a JSON object from parameter "
             "name (the ONNX initializer's name, as --explain lists it) to "
             "its layout in --explain's notation, one entry per tensor "
             "dimension: '-' whole, an axis name (dp, tp, and pp, mb, sp when "
             "the grid has them) or axes joined by '*' to split it, "
             "'{3, 64 : tp}' to split each of its sub-factors; or "
             "'replicated'. Example: {\"h.0.mlp.c_fc.weight\": \"[-, tp]\", "
             "\"wpe.weight\": \"replicated\"}. The parameters not named "
             "are chosen by the sharding search. Errors (exit 1, naming FILE "
             "and the key): an unreadable file, bad JSON, a value that is "
             "not a string, a name that is not a parameter (the closest are "
             "listed), a layout that does not parse, has another rank than "
             "the parameter, names an axis the grid lacks or is not divisible "
             "by its axes"),
    cl::value_desc("FILE.json"), cl::init(""), cl::cat(category));
static cl::opt<std::string> recompute(
    "recompute",
    cl::desc("Activation recomputation per layer: none, selective (each "
             "fused attention, whose output and log-sum-exp are remade from "
             "the saved Q, K, V; Korthikanti et al. 2022) or full (every layer "
             "but the last "
             "recomputes its forward in backward from its input; Chen et al. "
             "2016). Training results are bit-identical"),
    cl::init("none"), cl::cat(category));
static cl::opt<std::string> fusion(
    "fusion",
    cl::desc("Compiler fusions of the partitioned step (passes/fusion, "
             "docs/Performance.md): all (default), none, or a "
             "comma-separated list of linear (bias + activation in the "
             "GEMM's epilogue, transposes as GEMM flags), norm (residual add "
             "+ LayerNorm/RMSNorm), elementwise (chains of elementwise ops "
             "as one kernel) and optimizer (all SGD/AdamW updates as one "
             "multi-tensor kernel, NVIDIA apex's multi_tensor_apply). Errors: "
             "an unknown kind"),
    cl::value_desc("all|none|KIND,..."), cl::init("all"), cl::cat(category));
static cl::opt<std::string> precision(
    "precision",
    cl::desc("Compute type of the forward and backward: fp32, bf16 or fp16 "
             "(mixed precision, Micikevicius et al. 2018: bf16/fp16 "
             "activations and gradients, the data-parallel gradient "
             "all-reduce in bf16/fp16, fp32 master weights and optimizer "
             "state; the loss stays fp32). fp16 uses dynamic loss scaling "
             "(--initial-loss-scale, --loss-scale-window, --min-loss-scale) "
             "unless a static --loss-scale is given"),
    cl::init("fp32"), cl::cat(category));
static cl::opt<double> lossScale(
    "loss-scale",
    cl::desc("fp16 only: static loss scale S, a power of two > 0 (default "
             "1024): the backward's seed is multiplied by S and each "
             "gradient by 1/S in fp32 before its optimizer update. Static: "
             "a gradient above 65504/S overflows fp16 to inf and the step "
             "is NOT skipped; lower S then. Without it fp16 uses dynamic "
             "loss scaling"),
    cl::init(1024), cl::cat(category));
static cl::opt<double> initialLossScale(
    "initial-loss-scale",
    cl::desc("fp16 dynamic loss scaling (the default without --loss-scale; "
             "Micikevicius et al. 2018, Megatron-LM's flag): the first "
             "step's scale S, a power of two > 0 (default 1024, as the "
             "static --loss-scale's: Megatron-LM's 2^32 or torch.cuda.amp's "
             "2^16 skip a small model's first steps). A step whose gradients "
             "hold an inf or NaN "
             "on any rank is skipped (parameters and optimizer state "
             "unchanged) and halves S, down to --min-loss-scale; "
             "--loss-scale-window clean steps in a row double it"),
    cl::init(1024), cl::cat(category));
static cl::opt<int64_t> lossScaleWindow(
    "loss-scale-window",
    cl::desc("fp16 dynamic loss scaling: clean (not skipped) steps in a row "
             "after which the scale doubles, >= 1"),
    cl::init(1000), cl::cat(category));
static cl::opt<double> minLossScale(
    "min-loss-scale",
    cl::desc("fp16 dynamic loss scaling: the scale never halves below this "
             "power of two > 0 (at most --initial-loss-scale)"),
    cl::init(1), cl::cat(category));
static cl::opt<double> clipGrad(
    "clip-grad",
    cl::desc("Gradient clipping by the global L2 norm C (Megatron-LM's flag; "
             "torch.nn.utils.clip_grad_norm_): every gradient is scaled by "
             "min(1, C / (norm + 1e-6)), norm = sqrt of the sum of every "
             "gradient element's square over all parameters, each "
             "replicated parameter counted once, under any dp/tp/pp/sp/ZeRO "
             "plan (fp16: on the unscaled gradients). The norm before "
             "clipping is the step's \"grad_norm\" result (tessera-run's "
             "metrics). 0 (the default): off; not with --schedule "
             "interleaved yet"),
    cl::init(0), cl::cat(category));
static cl::opt<int64_t> zero(
    "zero",
    cl::desc("ZeRO stage over the dp axis (Rajbhandari et al. 2020): 0 off, "
             "1 optimizer state sharded (gradient all-reduce -> "
             "reduce-scatter, update on the shard, all-gather), 2 also "
             "gradients (each reduce-scatter right after its gradient), 3 "
             "also parameters (FSDP: all-gather before forward and before "
             "backward uses). A parameter with no dimension (or sub-factor) "
             "divisible by dp stays replicated (--explain lists it). No-op "
             "with --dp 1; not "
             "supported with --pp / --micro-batches yet"),
    cl::init(0), cl::cat(category));
static cl::opt<double> bucketMb(
    "bucket-mb",
    cl::desc("Overlap data-parallel gradient all-reduces with backward: fuse "
             "them into buckets of about this many MiB, each started "
             "non-blocking (MPI_Iallreduce) as soon as its last gradient is "
             "ready and waited for just before the first use (PyTorch DDP, "
             "Li et al. 2020; 0: one per gradient). Default: off "
             "(synchronous all-reduces)"),
    cl::init(-1), cl::value_desc("MiB"), cl::cat(category));
static cl::opt<std::string> optimizer("optimizer",
                                      cl::desc("sgd or adamw (torch.optim)"),
                                      cl::init("adamw"), cl::cat(category));
static cl::opt<double> lr("lr", cl::desc("Learning rate"), cl::init(1e-3),
                          cl::cat(category));
static cl::opt<uint64_t> seed(
    "seed",
    cl::desc("Seed of training-mode Dropout (Megatron-LM's name): the key of "
             "every tsr.dropout's Philox-4x32-10 mask, with the step, the "
             "op and the element's global index, so every plan draws the "
             "serial run's mask"),
    cl::init(1234), cl::cat(category));
static cl::opt<double>
    weightDecay("weight-decay",
                cl::desc("Weight decay (default: 0.01 for adamw, 0 for sgd)"),
                cl::init(-1), cl::cat(category));
static cl::opt<bool> weightDecayExclude(
    "weight-decay-exclude",
    cl::desc("No weight decay for biases (names ending in .bias) and 1-D "
             "parameters such as LayerNorm weights, as Megatron-LM's default "
             "parameter groups (default: decay every parameter, as "
             "torch.optim)"),
    cl::init(false), cl::cat(category));
static cl::opt<double> beta1("beta1", cl::desc("AdamW beta1"), cl::init(0.9),
                             cl::cat(category));
static cl::opt<double> beta2("beta2", cl::desc("AdamW beta2"), cl::init(0.999),
                             cl::cat(category));
static cl::opt<double> eps("eps", cl::desc("AdamW epsilon"), cl::init(1e-8),
                           cl::cat(category));
static cl::opt<std::string>
    freeze("freeze",
           cl::desc("Parameters whose name matches this regex (POSIX "
                    "extended, unanchored) are frozen: kept at their initial "
                    "values, not trained"),
           cl::value_desc("regex"), cl::init(""), cl::cat(category));
static cl::opt<std::string> trainable(
    "trainable",
    cl::desc("Initializers that the importer classifies as constants (masks, "
             "rotary tables, scalars, buffers: docs/Initializers.md) and whose "
             "name matches this regex are trained instead. --explain lists "
             "every initializer with its class and the reason"),
    cl::value_desc("regex"), cl::init(""), cl::cat(category));
static cl::opt<bool>
    noRaise("no-raise",
            cl::desc("Import without raising the exporter's decompositions "
                     "to composite ops (layer_norm, rms_norm, gelu, silu, "
                     "attention, ...): for checking that raising keeps the "
                     "numerics; the plan is slower and larger"),
            cl::cat(category));
enum class Emit { Plan, Import, Train, Sharded };
static cl::opt<Emit>
    emit("emit", cl::desc("What to write"), cl::init(Emit::Plan),
         cl::values(clEnumValN(Emit::Plan, "plan", "the plan.tsr artifact"),
                    clEnumValN(Emit::Import, "import", "MLIR after import"),
                    clEnumValN(Emit::Train, "train", "MLIR of @train_step"),
                    clEnumValN(Emit::Sharded, "sharded",
                               "MLIR after sharding-partition (and ZeRO "
                               "with --zero, the pipeline split with --pp / "
                               "--micro-batches)")),
         cl::cat(category));
static cl::opt<std::string>
    dumpDir("dump-ir-after-each",
            cl::desc("Write the IR after every pass to DIR/NN-<pass>.mlir"),
            cl::value_desc("DIR"), cl::init(""), cl::cat(category));
static cl::opt<bool> explain("explain",
                             cl::desc("Print the plan: grid, rank order, "
                                      "node mapping ('placement: ...', "
                                      "with --cluster), every parameter's "
                                      "sharding, bytes per rank and the "
                                      "collectives of one step"),
                             cl::init(false), cl::cat(category));

static cl::opt<std::string> memoryPerDevice(
    "memory-per-device",
    cl::desc("Fail (exit 1, nothing written) when the predicted peak bytes "
             "per rank (the static memory plan, tsr-plan-memory) exceed SIZE, "
             "e.g. 80GB, 512MiB, 1.5GB (kB/MB/GB/TB = powers of 1000, "
             "KiB/MiB/GiB/TiB = powers of 1024); the error lists which "
             "alternatives (more ZeRO, TP, PP, recomputation) would fit. "
             "Pipeline plans are checked per stage (the stage that needs "
             "most is named)"),
    cl::value_desc("SIZE"), cl::init(""), cl::cat(category));

static cl::opt<std::string> clusterSpec(
    "cluster",
    cl::desc("The machine to predict the step on: a preset dgx-a100:N, "
             "dgx-h100:N or grand-teton-h100:N (N nodes of 8 GPUs; the last "
             "is torchtitan's Llama 3.1 benchmark machine, H100 96 GB at "
             "500 W, docs/Planner.md), cpu:N (N MPI ranks on this "
             "machine, as measured by `mpirun -np N tessera-run "
             "--calibrate`) or a cluster JSON file "
             "(common/cluster/Cluster.h). Fails when the plan needs more "
             "ranks than the cluster has devices. With --explain, prints the "
             "predicted step time (compute + communication, no overlap) and "
             "MFU, and the collectives with their link. The plan records the "
             "cluster's devices_per_node as its ranks per node (manifest "
             "\"grid\": {\"ranks_per_node\"}; world rank r on node r / "
             "devices_per_node, as mpirun and srun place ranks): --explain "
             "prints that node mapping and which axes stay inside a node, "
             "and tessera-run warns when the job's hosts contradict it"),
    cl::value_desc("SPEC"), cl::init(""), cl::cat(category));
static cl::opt<double> gemmEfficiency(
    "gemm-efficiency",
    cl::desc("Time every GEMM of the --cluster prediction at this fraction "
             "of peak FLOP/s, in (0, 1], instead of the cluster's measured "
             "GEMM table (or, without one, its roofline)"),
    cl::init(1.0), cl::cat(category));
static cl::opt<std::string> predictJson(
    "predict-json",
    cl::desc("With --cluster: also write the predicted step as JSON to FILE "
             "(compiler/planner/StepCost.h toJSON: step_s, compute_s, "
             "gemm_s, other_s, overhead_s, communication_s, collectives, "
             "...)"),
    cl::value_desc("FILE"), cl::init(""), cl::cat(category));

static cl::opt<int64_t> devices(
    "devices",
    cl::desc("Choose the plan automatically for N ranks (every one used): "
             "searches dp, tp, pp, virtual stages, micro-batches, sequence "
             "parallelism and its size, ZeRO stage and recomputation with the "
             "analytic cost model on --cluster (default cpu:N, the "
             "calibration of this machine), pruning plans that do not divide "
             "the shapes or fit in memory (Korthikanti et al. 2022 and ZeRO "
             "formulas; compiler/planner/Search.h, docs/Planner.md). Parallel "
             "flags given pin their part. On a calibrated cluster (one with "
             "a GEMM table) the best 8 plans are re-ranked by the IR-level "
             "step model and checked against the memory plan. Without "
             "--devices, --cluster alone (no --dp/--tp/--pp/--sp/--sp-size/"
             "--micro-batches) also searches, over all the cluster's devices. "
             "Fails, naming the rejected regions, when no plan fits"),
    cl::value_desc("N"), cl::init(0), cl::cat(category));
static cl::opt<std::string> explainJson(
    "explain-json",
    cl::desc("Write the plan search's report (chosen plan, prediction, "
             "runners-up, rejected regions) as JSON to FILE ('-': stdout)"),
    cl::value_desc("FILE"), cl::init(""), cl::cat(category));
static cl::opt<std::string> kernelCountsJson(
    "kernel-counts-json",
    cl::desc("Write the step's machine-independent kernel counts as JSON to "
             "FILE ('-': stdout): kernels per step, GEMM kernels, operand + "
             "result bytes of the non-GEMM kernels per step and per kernel "
             "name (compiler/planner/KernelCounts.h; after the fusion stage, "
             "local shapes). --explain prints the same"),
    cl::value_desc("FILE"), cl::init(""), cl::cat(category));
static cl::opt<std::string> planSpace(
    "plan-space",
    cl::desc("Debugging only. runnable (default): the search considers the "
             "plans this build can compile and run (Plan::validate), which "
             "is every plan the cost model scores once each parallelism "
             "composes with the others; a combination Plan::validate still "
             "refuses is listed as an [unsupported] rejected region. all: "
             "score those too, marked '[not runnable: ...]' in the report "
             "and \"runnable\": false in --explain-json; needs --plan-only"),
    cl::value_desc("runnable|all"), cl::init("runnable"), cl::cat(category));
static cl::opt<bool> planOnly(
    "plan-only",
    cl::desc("Stop after the plan search and its report: build no training "
             "step and write no artifact (for weight-free or very large "
             "models)"),
    cl::init(false), cl::cat(category));

static int fail(const llvm::Twine &msg) {
  llvm::errs() << "tessera-partition: error: " << msg << "\n";
  return 1;
}

static LogicalResult printModule(ModuleOp module) {
  if (llvm::Error err =
          io::writeFileAtomically("-o", outputPath, [&](llvm::raw_ostream &os) {
            module.print(os, OpPrintingFlags().elideLargeResourceString(64));
            return llvm::Error::success();
          })) {
    fail(llvm::toString(std::move(err)));
    return failure();
  }
  return success();
}

/// The --explain lines of the --cluster prediction.
static void explainStepCost(const planner::StepCost &cost,
                            const planner::Cluster &cluster,
                            const planner::Plan &plan, llvm::raw_ostream &os) {
  os << "predicted step on " << cluster.name << " (" << cluster.devices()
     << " devices, the plan uses " << cost.ranks << ", " << plan.precision
     << ", GEMMs "
     << (gemmEfficiency.getNumOccurrences()
             ? llvm::formatv("at {0:F2} of peak", gemmEfficiency.getValue())
                   .str()
             : std::string(cluster.gemm.empty() ? "by roofline"
                                                : "from the measured table"))
     << "): compute " << llvm::format("%.4g", cost.computeSeconds * 1e3)
     << " ms + communication "
     << llvm::format("%.4g", cost.communicationSeconds * 1e3) << " ms"
     << (cost.syncLagSeconds > 0
             ? llvm::formatv(" + sync lag {0:F3} ms", cost.syncLagSeconds * 1e3)
                   .str()
             : std::string())
     << (cost.bubbleSeconds > 0 ? llvm::formatv(" + pipeline bubble {0:F3} ms",
                                                cost.bubbleSeconds * 1e3)
                                      .str()
                                : std::string())
     << " = " << llvm::format("%.4g", cost.stepSeconds * 1e3) << " ms, MFU "
     << llvm::format("%.3g", cost.mfu * 100) << "%\n";
  os << "  (compute = GEMMs " << llvm::format("%.4g", cost.gemmSeconds * 1e3)
     << " ms + other kernels " << llvm::format("%.4g", cost.otherSeconds * 1e3)
     << " ms + " << cost.kernels << " kernels x overhead "
     << llvm::format("%.4g", cost.overheadSeconds * 1e3)
     << " ms; compute and communication added, no overlap; "
     << llvm::format("%.4g", cost.flopsPerRank) << " FLOP per rank)\n";
  if (cost.collectives.empty())
    return;
  // One row per (kind, axes, link): count, total bytes, total ms.
  struct Row {
    std::string kind, axes;
    bool withinNode;
    int64_t count = 0;
    double bytes = 0, seconds = 0;
  };
  std::vector<Row> rows;
  for (const planner::CollectiveCost &c : cost.collectives) {
    std::string axes;
    for (int16_t axis : c.axes) {
      if (!axes.empty())
        axes += ",";
      axes += static_cast<size_t>(axis) < cost.axisNames.size()
                  ? cost.axisNames[axis]
                  : std::to_string(axis);
    }
    auto it = llvm::find_if(rows, [&](const Row &r) {
      return r.kind == c.kind && r.axes == axes && r.withinNode == c.withinNode;
    });
    if (it == rows.end()) {
      rows.push_back({c.kind, axes, c.withinNode});
      it = std::prev(rows.end());
    }
    ++it->count;
    it->bytes += c.bytes;
    it->seconds += c.seconds;
  }
  os << "predicted collectives per step (nccl-tests sizes, ring alpha-beta; "
        "bytes and ms summed):\n";
  os << llvm::format("  %-15s %-10s %6s %14s %12s  %s\n", "kind", "axes",
                     "count", "bytes", "ms", "link");
  for (const Row &r : rows)
    os << llvm::format(
        "  %-15s %-10s %6lld %14.0f %12.4g  %s\n", r.kind.c_str(),
        r.axes.c_str(), static_cast<long long>(r.count), r.bytes,
        r.seconds * 1e3, r.withinNode ? "node-local" : "network");
}

/// What a tool step decides: std::nullopt to go on, or main's exit code.
using ExitCode = std::optional<int>;

/// The plan the degree and training flags give (before any search).
static ExitCode planFromFlags(planner::Plan &plan) {
  plan.dp = dp;
  plan.tp = tp;
  plan.pp = pp;
  plan.microBatches = microBatches;
  plan.schedule = scheduleKind;
  plan.virtualStages = virtualStages;
  plan.ppStages.assign(ppStages.begin(), ppStages.end());
  plan.rankOrder.assign(rankOrder.begin(), rankOrder.end());
  plan.recompute = recompute;
  plan.fusion = fusion;
  plan.bucketMb = bucketMb;
  plan.precision = precision;
  if (lossScale.getNumOccurrences())
    plan.lossScale = lossScale;
  if (initialLossScale.getNumOccurrences())
    plan.initialLossScale = initialLossScale;
  plan.lossScaleWindow = lossScaleWindow;
  plan.minLossScale = minLossScale;
  plan.zero = zero;
  plan.clipGrad = clipGrad;
  if (vocabParallel != "on" && vocabParallel != "off")
    return fail("--vocab-parallel must be on or off, got '" + vocabParallel +
                "'");
  plan.vocabParallel = vocabParallel == "on";
  plan.sp = sequenceParallel;
  plan.spSize = spSize;
  plan.optimizer.name = optimizer;
  plan.optimizer.lr = lr;
  plan.optimizer.weightDecay = weightDecay;
  plan.optimizer.weightDecayExclude = weightDecayExclude;
  plan.optimizer.beta1 = beta1;
  plan.optimizer.beta2 = beta2;
  plan.optimizer.eps = eps;
  if (llvm::Error err = plan.validate())
    return fail(llvm::toString(std::move(err)));
  return std::nullopt;
}

/// Checks the memory, cluster and output flags; reads --memory-per-device
/// and --cluster.
static ExitCode checkOptions(std::optional<int64_t> &memoryLimit,
                             std::optional<planner::Cluster> &cluster) {
  if (memoryPerDevice.getNumOccurrences()) {
    llvm::Expected<int64_t> limit = runtime::parseByteSize(memoryPerDevice);
    if (!limit)
      return fail("--memory-per-device: " + llvm::toString(limit.takeError()));
    memoryLimit = *limit;
  }
  if (!clusterSpec.empty()) {
    llvm::Expected<planner::Cluster> loaded = planner::loadCluster(clusterSpec);
    if (!loaded)
      return fail("--cluster: " + llvm::toString(loaded.takeError()));
    cluster = std::move(*loaded);
  }
  if (!predictJson.empty() && clusterSpec.empty())
    return fail("--predict-json needs --cluster");
  if (!(gemmEfficiency > 0 && gemmEfficiency <= 1))
    return fail("--gemm-efficiency must be in (0, 1], got " +
                llvm::Twine(std::to_string(gemmEfficiency.getValue())));
  // Never overwrite an input or write the same file twice; only regular
  // files (common/io/FileSafety.h). Before anything is read.
  std::vector<io::NamedPath> inputs{{"the model", inputPath},
                                    {"--sharding", shardingFile}};
  if (!clusterSpec.empty() && llvm::sys::fs::exists(clusterSpec))
    inputs.push_back({"--cluster", clusterSpec});
  if (llvm::Error err = io::checkOutputs(
          inputs, {{"-o", outputPath},
                   {"--explain-json", explainJson},
                   {"--predict-json", predictJson},
                   {"--kernel-counts-json", kernelCountsJson},
                   {"--dump-ir-after-each", dumpDir, /*directory=*/true}}))
    return fail(llvm::toString(std::move(err)));
  return std::nullopt;
}

/// The search's options: the devices, the cost model's settings, and the
/// degrees the flags pin.
static planner::SearchOptions
searchOptions(const planner::Plan &plan, const planner::Cluster &cluster,
              std::optional<int64_t> memoryLimit) {
  planner::SearchOptions search;
  search.devices =
      devices.getNumOccurrences() ? devices.getValue() : cluster.devices();
  search.cost.precision = plan.precision;
  search.cost.optimizer = plan.optimizer.name;
  // What the runtime will do: bucketed, overlapped gradient collectives
  // only with --bucket-mb.
  search.overlapGradients = plan.bucketMb >= 0;
  if (!plan.rankOrder.empty())
    search.cost.rankOrder = plan.rankOrder;
  if (memoryLimit)
    search.memoryBytes = double(*memoryLimit);
  // A flag given on the command line pins its part of the plan.
  search.pins = planner::pinsOf(plan, [](StringRef flag) {
    auto it = cl::getRegisteredOptions().find(flag);
    return it != cl::getRegisteredOptions().end() &&
           it->second->getNumOccurrences() > 0;
  });
  return search;
}

/// One of the analytic model's best plans, as the IR-level step model and
/// the memory plan see it.
struct Reranked {
  std::string flags;
  double seconds;
  int64_t peak; // bytes per rank, -1 when not memory-planned
  bool fits;
  std::string failure; // why the plan could not be partitioned
};

/// Re-rank: the analytic model's best plans are partitioned, costed op by
/// op (pipelines chunk by chunk, their schedule simulated) and
/// memory-planned (tsr-plan-memory's per-rank peak, against
/// --memory-per-device or the cluster's memory); the fastest that fits is
/// chosen and moved to the front.
static ExitCode
rerankPlans(ModuleOp module, MLIRContext &context, const planner::Plan &plan,
            const planner::TransformerShape &shape,
            const planner::Cluster &cluster, std::optional<int64_t> memoryLimit,
            planner::SearchResult &result, std::vector<Reranked> &reranked) {
  std::optional<size_t> chosen;
  double best = INFINITY;
  double limit = memoryLimit ? double(*memoryLimit) : cluster.memoryBytes;
  for (auto [i, scored] : llvm::enumerate(result.best)) {
    planner::Plan p = planner::planOf(scored.candidate, shape, plan);
    if (reranked.size() == planner::kRefinedPlans)
      break;
    OwningOpRef<ModuleOp> trial = cast<ModuleOp>(module->clone());
    // A candidate the passes cannot build (a composition they do not
    // support yet) is skipped with its first error, not fatal: the
    // next-best plan is tried.
    std::string failure;
    {
      ScopedDiagnosticHandler capture(&context, [&](Diagnostic &d) {
        if (failure.empty() && d.getSeverity() == DiagnosticSeverity::Error)
          failure = d.str();
        return success();
      });
      if (failed(
              pipeline::runStages(*trial, pipeline::partitionStages(p), "")) &&
          failure.empty())
        failure = "the pass pipeline failed";
    }
    if (!failure.empty()) {
      reranked.push_back(
          {scored.candidate.str(), NAN, -1, false, std::move(failure)});
      continue;
    }
    llvm::Expected<planner::StepCost> cost = planner::predictStepCost(
        *trial, cluster, p.precision, std::nullopt, p.effectiveRankOrder());
    if (!cost)
      return fail(llvm::toString(cost.takeError()));
    FailureOr<llvm::json::Object> memory = artifact::predictMemory(*trial, p);
    if (failed(memory))
      return fail("memory-planning the candidate plan " +
                  scored.candidate.str() + " failed");
    std::optional<int64_t> peak = artifact::predictedPeak(*memory);
    bool fits = !peak || double(*peak) <= limit;
    reranked.push_back({scored.candidate.str(), cost->stepSeconds,
                        peak.value_or(-1), fits, ""});
    if (fits && cost->stepSeconds < best) {
      best = cost->stepSeconds;
      chosen = i;
    }
  }
  if (chosen)
    std::rotate(result.best.begin(), result.best.begin() + *chosen,
                result.best.begin() + *chosen + 1);
  else if (!reranked.empty() && llvm::all_of(reranked, [](const Reranked &r) {
             return !r.failure.empty();
           }))
    return fail("none of the search's best " + llvm::Twine(reranked.size()) +
                " plans can be partitioned; the first: " +
                reranked.front().flags + ": " + reranked.front().failure);
  else if (!reranked.empty())
    return fail("none of the search's best " + llvm::Twine(reranked.size()) +
                " plans fits by the memory plan (" +
                runtime::formatByteSize(int64_t(limit)) +
                " per device); the smallest needs " +
                runtime::formatByteSize(
                    llvm::min_element(reranked, [](const Reranked &a,
                                                   const Reranked &b) {
                      return a.peak < b.peak;
                    })->peak));
  return std::nullopt;
}

/// The --explain lines of the search and of its re-ranking.
static void explainSearchResult(const planner::SearchResult &result,
                                const planner::TransformerShape &shape,
                                const planner::Cluster &cluster,
                                const planner::SearchOptions &search,
                                ArrayRef<Reranked> reranked) {
  planner::explainSearch(result, shape, cluster, search, llvm::outs());
  if (reranked.empty())
    return;
  llvm::outs() << "chosen by the IR-level step model (StepCost, op by "
                  "op on "
               << cluster.name << ") and the memory plan among the "
               << "analytic model's best " << reranked.size() << " plans:\n";
  for (const Reranked &r : reranked) {
    if (!r.failure.empty()) {
      llvm::outs() << "  " << llvm::left_justify(r.flags, 60)
                   << " cannot be partitioned: " << r.failure << "\n";
      continue;
    }
    llvm::outs() << llvm::format(
        "  %-60s %10.3f ms %14s%s\n", r.flags.c_str(), r.seconds * 1e3,
        r.peak < 0 ? "-" : runtime::formatByteSize(r.peak).c_str(),
        r.fits ? "" : "  (does not fit)");
  }
}

/// Writes --explain-json: the search and its re-ranking, and the chosen
/// plan's node mapping ("placement", Placement.h nodeMappingToJSON;
/// "ranks_per_node" 0 without --cluster). `base` is the plan of the flags.
static ExitCode writeExplainJson(const planner::SearchResult &result,
                                 const planner::TransformerShape &shape,
                                 const planner::Cluster &cluster,
                                 const planner::SearchOptions &search,
                                 ArrayRef<Reranked> reranked,
                                 const planner::Plan &base) {
  llvm::json::Value report =
      planner::searchToJSON(result, shape, cluster, search);
  llvm::json::Array ranks;
  for (const Reranked &r : reranked)
    if (!r.failure.empty())
      ranks.push_back(llvm::json::Object{{"flags", r.flags},
                                         {"partition_error", r.failure}});
    else
      ranks.push_back(llvm::json::Object{{"flags", r.flags},
                                         {"ir_step_seconds", r.seconds},
                                         {"peak_bytes", r.peak},
                                         {"fits", r.fits}});
  (*report.getAsObject())["reranked"] = std::move(ranks);
  // The chosen plan's node mapping (--explain's "placement:" line).
  if (!result.best.empty()) {
    planner::Plan chosen =
        planner::planOf(result.best.front().candidate, shape, base);
    (*report.getAsObject())["placement"] = planner::nodeMappingToJSON(
        chosen.rankOrderAxes(),
        clusterSpec.empty() ? 0 : cluster.devicesPerNode);
  }
  if (llvm::Error err = io::writeFileAtomically(
          "--explain-json", explainJson, [&](llvm::raw_ostream &os) {
            os << llvm::formatv("{0:2}\n", report);
            return llvm::Error::success();
          }))
    return fail(llvm::toString(std::move(err)));
  return std::nullopt;
}

/// The automatic plan (--devices, or --cluster with no degree flag):
/// searches, explains, and replaces `plan` with the chosen one.
static ExitCode searchPlan(ModuleOp module, MLIRContext &context,
                           planner::Plan &plan,
                           std::optional<planner::Cluster> &cluster,
                           std::optional<int64_t> memoryLimit) {
  if (devices.getNumOccurrences() && devices < 1)
    return fail("--devices must be >= 1, got " + llvm::Twine(devices));
  if (planSpace != "runnable" && planSpace != "all")
    return fail("--plan-space must be runnable or all, got '" + planSpace +
                "'");
  if (planSpace == "all" && !planOnly)
    return fail("--plan-space all needs --plan-only: it may choose a plan "
                "this build cannot run");
  if (!cluster) {
    llvm::Expected<planner::Cluster> local =
        planner::loadCluster("cpu:" + std::to_string(devices.getValue()));
    if (!local)
      return fail("--devices " + llvm::Twine(devices) +
                  " without --cluster plans for this machine: " +
                  llvm::toString(local.takeError()));
    cluster = std::move(*local);
  }
  llvm::Expected<planner::TransformerShape> shape =
      planner::transformerShapeOf(module);
  if (!shape)
    return fail(llvm::toString(shape.takeError()));
  planner::SearchOptions search = searchOptions(plan, *cluster, memoryLimit);
  const planner::TransformerShape &modelShape = *shape;
  search.unsupported = [&](const planner::Candidate &c) -> std::string {
    planner::Plan p = planner::planOf(c, modelShape, plan);
    if (llvm::Error err = p.validate())
      return "not supported by this build: " + llvm::toString(std::move(err));
    return "";
  };
  search.scoreUnsupported = planSpace == "all";
  // On a measured machine (a calibrated GEMM table) the IR-level step
  // model, which knows the backend's kernels, has the last word (below).
  bool refine = !cluster->gemm.empty() && planSpace == "runnable";
  if (refine)
    search.keep = 64;
  llvm::Expected<planner::SearchResult> result =
      planner::searchPlans(*shape, *cluster, search);
  if (!result)
    return fail(llvm::toString(result.takeError()));
  std::vector<Reranked> reranked;
  if (refine)
    if (ExitCode exit = rerankPlans(module, context, plan, *shape, *cluster,
                                    memoryLimit, *result, reranked))
      return exit;
  if (explain || planOnly)
    explainSearchResult(*result, *shape, *cluster, search, reranked);
  if (!explainJson.empty())
    if (ExitCode exit =
            writeExplainJson(*result, *shape, *cluster, search, reranked, plan))
      return exit;
  if (result->best.empty())
    return fail("no plan for " + llvm::Twine(search.devices) +
                " devices fits (see the rejected regions" +
                (explain || planOnly ? "" : "; --explain lists them") + ")");
  if (planOnly)
    return 0;
  plan = planner::planOf(result->best.front().candidate, *shape, plan);
  // The search kept only plans Plan::validate accepts (--plan-space all
  // needs --plan-only), so this holds; checked all the same.
  if (llvm::Error err = plan.validate())
    return fail("the chosen plan is not runnable: " +
                llvm::toString(std::move(err)));
  return std::nullopt;
}

/// Every parameter of the imported model (@forward's arguments with role
/// param or frozen) by name, with its global shape.
static planner::ParameterShapes parameterShapes(ModuleOp module) {
  planner::ParameterShapes params;
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward)
    return params;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto role = tsr::getArgRole(forward, i);
    auto name = tsr::getArgName(forward, i);
    auto type = dyn_cast<RankedTensorType>(forward.getArgumentTypes()[i]);
    if (role && name && type &&
        (role.getValue() == "param" || role.getValue() == "frozen"))
      params[name.getValue().str()] =
          std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
  }
  return params;
}

/// --sharding: the pinned parameter shardings into plan.shardings, checked
/// against the model's parameters and the plan's grid.
static ExitCode pinShardings(ModuleOp module, planner::Plan &plan) {
  llvm::Expected<std::map<std::string, std::string>> pins =
      planner::readShardingFile(shardingFile, parameterShapes(module),
                                plan.grid());
  if (!pins)
    return fail("--sharding " + llvm::toString(pins.takeError()));
  for (auto &[name, layout] : *pins)
    plan.shardings[name] = std::move(layout);
  return std::nullopt;
}

/// The --cluster step prediction of the partitioned tsr module (local
/// shapes, ops answering CostOpInterface), before lowering to tsrt; writes
/// --predict-json.
static ExitCode predictStep(ModuleOp module, const planner::Plan &plan,
                            const planner::Cluster &cluster,
                            std::optional<planner::StepCost> &stepCost) {
  std::optional<double> efficiency;
  if (gemmEfficiency.getNumOccurrences())
    efficiency = gemmEfficiency.getValue();
  llvm::Expected<planner::StepCost> predicted = planner::predictStepCost(
      module, cluster, plan.precision, efficiency, plan.effectiveRankOrder());
  if (!predicted)
    return fail("--cluster " + clusterSpec + ": " +
                llvm::toString(predicted.takeError()));
  stepCost = std::move(*predicted);
  if (!predictJson.empty()) {
    if (llvm::Error err = io::writeFileAtomically(
            "--predict-json", predictJson, [&](llvm::raw_ostream &os) {
              os << llvm::formatv("{0:2}", planner::toJSON(*stepCost, cluster))
                 << "\n";
              return llvm::Error::success();
            }))
      return fail(llvm::toString(std::move(err)));
  }
  return std::nullopt;
}

/// --kernel-counts-json of the partitioned module.
static ExitCode writeKernelCounts(ModuleOp module) {
  if (llvm::Error err = io::writeFileAtomically(
          "--kernel-counts-json", kernelCountsJson, [&](llvm::raw_ostream &os) {
            os << llvm::formatv("{0:2}", llvm::json::Value(planner::toJSON(
                                             planner::countKernels(module))))
               << "\n";
            return llvm::Error::success();
          }))
    return fail(llvm::toString(std::move(err)));
  return std::nullopt;
}

/// The error when the memory plan's peak exceeds --memory-per-device: the
/// plan's memory and the alternatives' peaks.
static int failOverMemory(const llvm::json::Object &memory, int64_t peak,
                          int64_t memoryLimit, ModuleOp imported,
                          const planner::Plan &plan) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << "the predicted peak memory per rank is "
     << runtime::formatByteSize(peak);
  if (std::optional<int64_t> stage = memory.getInteger("peak_stage"))
    os << " (on pipeline stage " << *stage << ", i.e. pp rank " << *stage
       << ")";
  os << ", " << runtime::formatByteSize(peak - memoryLimit)
     << " more than --memory-per-device " << memoryPerDevice << " = "
     << runtime::formatByteSize(memoryLimit) << "; nothing was written\n";
  artifact::explainMemory(memory, os);
  os << "alternatives (predicted peak per rank):";
  for (const artifact::MemoryAlternative &alt :
       artifact::memoryAlternatives(imported, plan)) {
    os << "\n  " << alt.flags << " (" << alt.plan.numRanks()
       << (alt.plan.numRanks() == 1 ? " rank): " : " ranks): ");
    if (!alt.peak)
      os << alt.note;
    else if (*alt.peak <= memoryLimit)
      os << runtime::formatByteSize(*alt.peak) << ", fits";
    else
      os << runtime::formatByteSize(*alt.peak) << ", does not fit ("
         << runtime::formatByteSize(*alt.peak - memoryLimit) << " over)";
  }
  llvm::outs().flush();
  return fail(msg);
}

/// --explain of the lowered module, and the --memory-per-device check.
static ExitCode
explainAndCheckMemory(ModuleOp module, const planner::Plan &plan,
                      std::optional<int64_t> memoryLimit, ModuleOp imported,
                      const std::optional<planner::StepCost> &stepCost,
                      const std::optional<planner::Cluster> &cluster) {
  if (explain) {
    auto manifest = artifact::buildManifest(module, plan);
    if (failed(manifest))
      return 1;
    artifact::explain(*manifest, module, llvm::outs());
  }
  if (!(explain || memoryLimit))
    return std::nullopt;
  FailureOr<llvm::json::Object> memory = artifact::predictMemory(module, plan);
  if (failed(memory))
    return 1;
  if (explain) {
    artifact::explainMemory(*memory, llvm::outs());
    planner::explainKernelCounts(planner::countKernels(module), llvm::outs());
  }
  if (explain && stepCost)
    explainStepCost(*stepCost, *cluster, plan, llvm::outs());
  std::optional<int64_t> peak = artifact::predictedPeak(*memory);
  if (memoryLimit && peak && *peak > *memoryLimit)
    return failOverMemory(*memory, *peak, *memoryLimit, imported, plan);
  return std::nullopt;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  tessera::io::parseCommandLine(
      argc, argv,
      "Tessera: compile an ONNX transformer into a partitioned training "
      "step\n");

  planner::Plan plan;
  if (ExitCode exit = planFromFlags(plan))
    return *exit;
  std::optional<int64_t> memoryLimit;
  std::optional<planner::Cluster> cluster;
  if (ExitCode exit = checkOptions(memoryLimit, cluster))
    return *exit;

  MLIRContext context;
  context.loadDialect<tsr::TsrDialect, tsrt::TsrtDialect, func::FuncDialect,
                      shard::ShardDialect>();
  import::ImportOptions importOptions;
  importOptions.freezeRegex = freeze;
  importOptions.trainableRegex = trainable;
  import::ImportReport importReport;
  importOptions.report = &importReport;
  importOptions.raise = !noRaise;
  importOptions.seed = seed;
  OwningOpRef<ModuleOp> module =
      import::importOnnxFile(inputPath, context, importOptions);
  if (!module)
    return 1;
  if (explain || planOnly) {
    llvm::outs() << "initializers: ";
    importReport.print(llvm::outs());
  }
  if (!dumpDir.empty() &&
      failed(pipeline::dumpModule(*module, dumpDir, 0, "import")))
    return 1;
  if (emit == Emit::Import)
    return failed(printModule(*module));
  // A weight-free model (OnnxImporter.h) is planned, explained and emitted
  // as IR like any other, but plan.tsr holds the initial weights: refuse
  // before planning when one would be written, and write none after
  // --explain / --memory-per-device unless -o asks for it.
  std::optional<std::string> missingWeight = import::weightsMissing(*module);
  if (missingWeight && emit == Emit::Plan &&
      (outputPath.getNumOccurrences() ||
       !(explain || memoryLimit || planOnly || !explainJson.empty() ||
         !kernelCountsJson.empty() || clusterSpec.getNumOccurrences())))
    return fail("cannot write the plan artifact '" + outputPath +
                "': the model is weight-free (parameter '" + *missingWeight +
                "' has no data) and plan.tsr stores the initial weights; "
                "nothing was written. Use --explain without -o, or --emit "
                "import|train|sharded, or export the model with its weights");

  // The automatic plan: --devices, or --cluster with no degree flag.
  bool degreeGiven =
      dp.getNumOccurrences() || tp.getNumOccurrences() ||
      pp.getNumOccurrences() || microBatches.getNumOccurrences() ||
      sequenceParallel.getNumOccurrences() || spSize.getNumOccurrences();
  bool searched = devices.getNumOccurrences() || (cluster && !degreeGiven);
  if (searched) {
    if (ExitCode exit =
            searchPlan(*module, context, plan, cluster, memoryLimit))
      return *exit;
  } else if (planOnly) {
    return fail("--plan-only needs a plan search (--devices N or --cluster)");
  }

  // The node mapping the plan promises: --cluster's devices per node
  // (not the cpu:N machine --devices alone plans for).
  if (cluster && !clusterSpec.empty())
    plan.ranksPerNode = cluster->devicesPerNode;

  if (!shardingFile.empty())
    if (ExitCode exit = pinShardings(*module, plan))
      return *exit;

  // The imported model, for re-predicting variations of the plan.
  OwningOpRef<ModuleOp> imported;
  if (memoryLimit && emit == Emit::Plan)
    imported = cast<ModuleOp>((*module)->clone());

  // The vocabulary the manifest records (tessera-run checks the data).
  int64_t vocabSize = artifact::vocabularyOf(*module);

  std::vector<pipeline::Stage> stages = pipeline::partitionStages(plan);
  if (emit == Emit::Train)
    stages.resize(1);
  if (failed(pipeline::runStages(*module, stages, dumpDir)))
    return 1;
  if (emit == Emit::Train || emit == Emit::Sharded)
    return failed(printModule(*module));

  std::optional<planner::StepCost> stepCost;
  // (The search already predicted a chosen pipeline plan analytically.)
  if (cluster && !(searched && plan.pipelined()))
    if (ExitCode exit = predictStep(*module, plan, *cluster, stepCost))
      return *exit;
  if (!kernelCountsJson.empty())
    if (ExitCode exit = writeKernelCounts(*module))
      return *exit;
  if (ExitCode exit = explainAndCheckMemory(*module, plan, memoryLimit,
                                            imported ? *imported : ModuleOp(),
                                            stepCost, cluster))
    return *exit;
  if (missingWeight) {
    llvm::errs() << "tessera-partition: note: the model is weight-free; no "
                    "plan artifact written\n";
    return 0;
  }
  if (failed(artifact::writeArtifact(*module, plan, outputPath, dumpDir,
                                     stages.size() + 1, vocabSize)))
    return 1;
  return 0;
}

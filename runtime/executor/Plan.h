//===- Plan.h - loading a plan.tsr artifact ---------------------*- C++ -*-===//
//
// plan.tsr is one safetensors file written by the compiler
// (compiler/artifact/Artifact.h):
//   - one F32 tensor per parameter / frozen initializer, GLOBAL shape, named
//     by its ONNX name (the initial weights);
//   - a U8 tensor (manifest "program", normally "__program__") holding the
//     `tsrt` runtime module as MLIR bytecode (textual MLIR is accepted too);
//   - metadata "tessera.digests": the XXH3-64 digest of every other section
//     (the manifest, the program, each tensor), checked before the section
//     is parsed (runtime/checkpoint/SafeTensors.h); required;
//   - metadata "tessera.manifest": JSON
//       {"format": "tessera-plan", "version": 1,
//        "grid": {"axes": ["dp", "tp"], "shape": [2, 2],
//                 "rank_order": ["dp", "tp"], "ranks_per_node": 2},
//        "program": "__program__", "function": "train_step",
//        "global_batch": 8, "seq_len": 64, "optimizer": {...},
//        "arguments": [{"index", "name", "role", "dtype", "shape",
//                       "local_shape", "layout"}, ...],
//        "results": [{"index", "role", "name"}, ...],
//        "memory": {"planned": true, "peak_bytes_per_rank": N, ...},
//        "eval": {"function": "eval_step", "arguments": [0, 1, 5, 6],
//                 "result": 0}}
//     ("memory", optional: the compiler's prediction, see
//     compiler/artifact/Memory.h; "eval", optional, plans without pipeline
//     parallelism only: the forward-only evaluation function of the same
//     program (tsr-build-eval-step), each of its arguments given as the
//     index of the training argument it reads (so it runs on the training
//     state, with the same local shapes), and the index of its loss result;
//     "rank_order", optional: the rank axes,
//     slowest first, in the order world ranks are laid out over them, the
//     last fastest; default, for older artifacts, the axis order;
//     "ranks_per_node", optional: the node mapping the plan promises, world
//     rank r on node r / ranks_per_node, 0 or absent: none; other "grid"
//     fields are errors)
//     Argument roles: "param" (trainable, initial value = the tensor of that
//     name), "frozen" (likewise, never updated), "opt_state" (starts at
//     zeros), "hyper" (an f32 0-D replicated scalar the runtime sets before
//     every step, Executor::setHyper; names: "lr", this step's learning
//     rate, initially the manifest's "optimizer" "lr"; not checkpointed),
//     "tokens", "labels" (global [B, S] i64). Result roles: "loss"
//     (f32 scalar, the global mean), "param" / "opt_state" (replace the
//     argument of the same name for the next step).
//
// Pipeline plans (pipeline parallelism with micro-batches) add
//       "pipeline": {"pp_axis": 2, "mb_axis": 3}
// with a grid such as {"axes": ["dp", "tp", "pp", "mb"], "shape": [D, T, P,
// M]}. `mb_axis` must be the last axis: it is VIRTUAL (the M micro-batches of
// a step), not a rank axis. The ranks form the grid of the axes before it
// (laid out over them in "rank_order"), see Manifest::rankShape. Layouts are
// checked against the full grid: tokens/labels are split over dp and mb on dim
// 0, so their "local_shape" is one rank's micro-batch; params, frozen tensors
// and optimizer state may not use the pp or mb axes. "function" is ignored: the
// program holds one module-level `tsrt.pipeline_schedule` op (see TsrtOps.td)
// whose forward/backward/apply functions bind their arguments and results
// with the attributes
//   arguments: tsrt.arg = i    (manifest argument i; tokens/labels: the
//                               micro-batch's slice)
//              tsrt.saved = k  (backward only: result k of the chunk's
//                               activation set, from its forward)
//              tsrt.acc = j    (apply only: accumulator j, the sum over
//                               micro-batches)
//   results:   tsrt.saved = k  (forward only)
//              tsrt.acc = j    (forward/backward: added into accumulator j)
//              tsrt.result = r (apply only: manifest result r)
// (all integer attributes, exactly one per argument/result).
// Accumulator numbers are module-wide: accumulator j of a rank sums the
// contributions of every chunk of its stage.
//
// Loading parses and verifies the program with the MLIR verifier (for
// pipeline plans this includes the schedule checks of
// `tsrt.pipeline_schedule`: a schedule that could deadlock or whose sends and
// recvs do not match is a load error) and checks everything once (manifest
// against program,
// layouts against the grid, initial weights against shapes), compiles the
// program into instructions and then drops the MLIR module: a Plan holds no
// MLIR objects. Every error names the file and the offending entry.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_PLAN_H
#define TESSERA_RUNTIME_EXECUTOR_PLAN_H

#include "runtime/Tensor.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/executor/Layout.h"
#include "runtime/executor/Program.h"

#include "common/schedule/PipelineSchedule.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

/// Roles of program arguments and results.
/// GradNorm: the result "grad_norm" (tsr-clip-grad), the step's global L2
/// norm of the gradients before clipping, an f32 scalar equal on every rank.
enum class Role {
  Param,
  Frozen,
  OptState,
  Hyper,
  Tokens,
  Labels,
  Loss,
  GradNorm
};
/// "param", "frozen", ...
const char *roleName(Role role);

/// One program argument as described by the manifest.
struct ArgumentSpec {
  int64_t index = 0;
  std::string name;
  Role role = Role::Param;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;      ///< global
  std::vector<int64_t> localShape; ///< per rank
  Layout layout;
};

/// One program result as described by the manifest.
struct ResultSpec {
  int64_t index = 0;
  Role role = Role::Loss;
  std::string name;
  /// For param/opt_state results: the argument it replaces; else -1.
  int64_t argument = -1;
};

/// The manifest's "eval": the forward-only evaluation function.
struct EvalSpec {
  std::string function = "eval_step";
  /// arguments[k]: the index (into Manifest::arguments) of the training
  /// argument that the function's argument k reads.
  std::vector<int64_t> arguments;
  /// The index of its loss result (an f32 scalar, the global mean).
  int64_t result = 0;
};

/// The parsed "tessera.manifest".
struct Manifest {
  /// Every grid axis, including the virtual micro-batch axis of pipeline
  /// plans (layouts refer to these indices).
  std::vector<std::string> gridAxes;
  std::vector<int64_t> gridShape;
  /// The rank axes (rankAxes(), by name), slowest first: world ranks are
  /// laid out row-major over them in this order ("grid": {"rank_order"};
  /// default rankAxes()).
  std::vector<std::string> rankOrder;
  /// The node mapping the plan promises: world rank r on node r /
  /// ranksPerNode ("grid": {"ranks_per_node"}, the --cluster's
  /// devices_per_node, in [0, 2^20]); 0 (absent) promises none. tessera-run
  /// checks the job's hosts against it (common/cluster/Placement.h).
  int64_t ranksPerNode = 0;
  /// Pipeline plans: indices of the pp and (last, virtual) mb axes in
  /// gridAxes; -1 for other plans.
  int64_t ppAxis = -1, mbAxis = -1;
  std::string program = "__program__";
  std::string function = "train_step";
  int64_t globalBatch = 0;
  int64_t seqLen = 0;
  /// The model's vocabulary V ("vocab_size": the loss's class count):
  /// token ids and labels must lie in [0, V); 0 when the artifact does not
  /// record it (older artifacts).
  int64_t vocabSize = 0;
  /// "optimizer": {"name": "sgd"|"adamw", "lr", "weight_decay", "beta1",
  /// "beta2", "eps", "weight_decay_exclude"} (checked: known keys, finite
  /// values in the ranges tessera-partition accepts).
  llvm::json::Object optimizer;
  /// "precision": "fp32" (default), "bf16" or "fp16".
  std::string precision = "fp32";
  /// The compiler's predicted peak bytes per rank ("memory":
  /// {"planned": true, "peak_bytes_per_rank": N, ...}; pipeline plans: of
  /// the stage that needs most), or -1 when the plan has no prediction
  /// (older artifacts).
  int64_t predictedPeakBytes = -1;
  /// Pipeline plans: the prediction of each stage ("memory": {"stages":
  /// [{"stage": s, "peak_bytes": N}, ...]}); empty otherwise.
  std::vector<int64_t> predictedPeakBytesPerStage;
  std::vector<ArgumentSpec> arguments; ///< arguments[i].index == i
  std::vector<ResultSpec> results;     ///< results[i].index == i
  /// The evaluation function, when the artifact has one ("eval").
  std::optional<EvalSpec> eval;

  /// True when the manifest has a "pipeline" object.
  bool isPipeline() const { return mbAxis >= 0; }
  /// Names and sizes of the rank axes: the grid without the virtual mb axis
  /// (the whole grid for non-pipeline plans). mpi::Grid is made of these.
  std::vector<std::string> rankAxes() const;
  std::vector<int64_t> rankShape() const;
  /// The predicted peak bytes of world rank `rank`: its stage's for a
  /// pipeline plan, else predictedPeakBytes (-1: none).
  int64_t predictedPeakBytesOfRank(int64_t rank) const;
  /// rankOrder as indices into rankAxes() (what mpi::Grid::create takes).
  std::vector<int64_t> rankOrderIndices() const;
  /// M for pipeline plans, else 1.
  int64_t microBatches() const { return isPipeline() ? gridShape[mbAxis] : 1; }
  /// Product of rankShape(): the number of MPI ranks the plan needs.
  int64_t numRanks() const;
  /// The rank axes, "dp=2 x tp=2" (pipeline plans: "dp=1 x tp=2 x pp=2").
  std::string gridDescription() const;
  /// Index of the argument named `name` with role `role`, or -1.
  int64_t findArgument(llvm::StringRef name, Role role) const;

  /// Parses and checks the JSON against its schema: every field's type and
  /// range (checkManifestSchema in Plan.cpp: unknown fields are errors, as
  /// are an unknown optimizer or precision and non-finite or out-of-range
  /// hyper-parameters), names unique per role, layouts valid for the grid
  /// and matching shape/local_shape, shapes bounded, results referring to
  /// arguments. Errors are one line, "SOURCE: manifest: ...", naming the
  /// field.

  static llvm::Expected<Manifest> parse(llvm::StringRef json,
                                        llvm::StringRef source);
};

/// How one argument or result of a pipeline function binds to the step (see
/// the file comment).
struct Binding {
  enum class Kind { Arg, Saved, Acc, Result };
  Kind kind = Kind::Arg;
  int64_t index = 0; ///< i, k, j or r
};

/// One compiled function of a pipeline chunk.
struct PipelineFunction {
  std::string name; ///< the symbol, e.g. "forward_0"
  /// For diagnostics: "@forward_0 (forward of chunk 0)".
  std::string description;
  Program program;
  std::vector<Binding> args;    ///< one per program argument
  std::vector<Binding> results; ///< one per program result
};

/// The functions of chunk c (which runs on stage c mod P).
struct PipelineChunk {
  int64_t stage = 0;
  PipelineFunction forward, backward, apply;
  /// Number of activation-set entries (1 + the largest tsrt.saved index of
  /// forward's results; 0 if none).
  int64_t numSaved = 0;
};

/// The `tsrt.pipeline_schedule` of a pipeline plan, with its functions
/// compiled and their bindings checked against the manifest.
struct Pipeline {
  tessera::tsrt::schedule::Kind kind = tessera::tsrt::schedule::Kind::GPipe;
  tessera::tsrt::schedule::Shape shape;
  /// actions[s]: stage s's actions in order.
  std::vector<tessera::tsrt::schedule::StageActions> actions;
  std::vector<PipelineChunk> chunks; ///< index = chunk
  /// Type of accumulator j (always f32); unused numbers have an empty shape
  /// and `used` false.
  std::vector<TensorType> accumulatorTypes;
  std::vector<bool> accumulatorUsed;
  /// stageArguments[s][i]: some function of a chunk on stage s reads manifest
  /// argument i (then ranks of stage s hold its state).
  std::vector<std::vector<bool>> stageArguments;
  /// Largest MPI tag a send/recv uses (channel · M + M − 1), or -1.
  int64_t maxTag = -1;
};

/// A loaded, checked artifact.
class Plan {
public:
  /// Reads and checks `path`, compiling its program for `backend` (null:
  /// the CPU backend; it must outlive the Plan). Errors: anything wrong
  /// with the file, and a program the backend cannot run (naming the op).
  static llvm::Expected<std::unique_ptr<Plan>> load(llvm::StringRef path,
                                                    Backend *backend = nullptr);
  /// Same, from a parsed safetensors file; `source` names it in errors.
  /// The file must carry section digests (SafeTensors.h; parseSafeTensors
  /// checked every section against them before handing it out): a file
  /// without them was written by an older Tessera and is refused, "recompile
  /// it".
  static llvm::Expected<std::unique_ptr<Plan>>
  fromSafeTensors(SafeTensorsFile file, llvm::StringRef source,
                  Backend *backend = nullptr);
  /// Same, from the bytes of a plan.tsr in memory (what load reads; the
  /// entry point of the artifact loader's fuzz target). Never crashes on
  /// corrupt bytes: every section's digest is checked before it is parsed.
  static llvm::Expected<std::unique_ptr<Plan>>
  fromBuffer(llvm::StringRef bytes, llvm::StringRef source,
             Backend *backend = nullptr);

  const Manifest &manifest() const { return man; }
  /// The compiled "function" (non-pipeline plans; empty for pipeline plans).
  const Program &program() const { return prog; }
  /// The compiled evaluation function (Manifest::eval), or null when the
  /// artifact has none (pipeline plans, older artifacts).
  const Program *evalProgram() const { return evalProg ? &*evalProg : nullptr; }
  /// The pipeline (pipeline plans), or null.
  const Pipeline *pipeline() const { return pipe ? &*pipe : nullptr; }
  /// Global initial value of a param/frozen argument, or null.
  const Tensor *initialValue(llvm::StringRef name) const;
  /// Where the plan came from (path or buffer name).
  const std::string &source() const { return src; }
  /// The backend its programs were compiled for (the CPU backend when
  /// loaded with none).
  Backend &backend() const { return *device; }

private:
  Plan() = default;
  std::string src;
  Backend *device = nullptr;
  Manifest man;
  Program prog;
  std::optional<Program> evalProg;
  std::optional<Pipeline> pipe;
  std::map<std::string, Tensor, std::less<>> weights;
};

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_PLAN_H

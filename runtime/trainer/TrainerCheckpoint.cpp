//===- TrainerCheckpoint.cpp - --save / --load of the Trainer -------------===//
//
// Distributed checkpoints of a training run (format: DistCheckpoint.h,
// docs/Checkpoint.md), with Megatron-LM's flags:
//
//   --save DIR --save-interval N --keep-last K
//       After every N-th step (global step numbers) and after the last step,
//       every rank writes its shards of the params, frozen tensors and
//       optimizer state (AdamW's exp_avg / exp_avg_sq / step, fp16 loss
//       scaling's state; fp32 masters under bf16/fp16 plans) into
//       DIR/iter_NNNNNNN.tmp.<pid of rank 0>/rank_RRRRR.safetensors; after a
//       barrier rank 0 writes index.json, renames the folder to
//       DIR/iter_NNNNNNN and then replaces DIR/latest, and keeps the K
//       newest checkpoints. A rank killed during a save leaves the previous
//       checkpoint and `latest` untouched (the .tmp folder is never read).
//   --load DIR
//       Before the first step: DIR's `latest` (or DIR itself, an iter_*
//       folder). Every tensor the model holds must be in the checkpoint with
//       the model's global shape and dtype (error naming the tensor,
//       before any step; so must the checkpoint's params and frozen tensors
//       be in the model); each rank reads only the shards that overlap its
//       own piece under the NEW plan's layouts (resharding at load). The run
//       continues at the checkpoint's step: the step counter, and with it
//       the data position (batch s is the global samples s*B .. s*B+B-1),
//       and --steps stays the total (Megatron's --train-iters). fp16 loss
//       scaling's state ("loss_scale*") missing from a checkpoint saved
//       without loss scaling starts fresh (the initial scale).
//   --no-load-optim
//       Loads the params and frozen tensors only: the optimizer state starts
//       at zeros (AdamW's step count too, so its bias correction restarts)
//       but the step counter and data position continue from the
//       checkpoint, as Megatron-LM's --no-load-optim (which resets the
//       iteration only with --finetune, which Tessera does not have).
//
// A save's ranks wait for the slowest writer in a collective under the
// watchdog: --collective-timeout-s must exceed a save's duration.
//
// Test hook: TESSERA_TEST_KILL_IN_SAVE=R[:S] makes world rank R SIGKILL
// itself in the save of step S (any save without :S) after writing its own
// file, before the barrier that lets rank 0 finalize.
//
//===----------------------------------------------------------------------===//

#include "runtime/trainer/Trainer.h"

#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/collectives/mpi/Watchdog.h"
#include "runtime/executor/Layout.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <cstdlib>
#include <map>
#include <unistd.h>

using namespace tessera::runtime;

namespace {

std::string take(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

bool isState(exec::Role role) {
  return role == exec::Role::Param || role == exec::Role::Frozen ||
         role == exec::Role::OptState;
}

/// Whether some rank of `plan` holds argument `index` (pipeline plans: a
/// stage reads it; an argument no stage reads keeps its initial value).
bool heldByAnyRank(const exec::Plan &plan, int64_t index) {
  const exec::Pipeline *pipe = plan.pipeline();
  if (!pipe)
    return true;
  for (const std::vector<bool> &stage : pipe->stageArguments)
    if (stage[index])
      return true;
  return false;
}

/// fp16 dynamic loss scaling's state (tsr-mixed-precision's names).
bool isLossScaleState(llvm::StringRef name) {
  return name == "loss_scale" || name.starts_with("loss_scale.");
}

/// The plan recorded in the index: the artifact's manifest without its
/// per-argument, per-result and memory entries (grid, rank order, batch,
/// optimizer, precision, pipeline, ...), plus its path.
llvm::json::Object planSummary(const std::string &planPath) {
  llvm::json::Object out;
  llvm::Expected<SafeTensorsHeader> header = readSafeTensorsHeader(planPath);
  if (!header) {
    llvm::consumeError(header.takeError());
  } else if (auto it = header->metadata.find("tessera.manifest");
             it != header->metadata.end()) {
    llvm::Expected<llvm::json::Value> json = llvm::json::parse(it->second);
    if (!json)
      llvm::consumeError(json.takeError());
    else if (llvm::json::Object *o = json->getAsObject())
      for (auto &[key, value] : *o)
        if (key != "arguments" && key != "results" && key != "memory")
          out[key] = value;
  }
  out["source"] = planPath;
  return out;
}

/// TESSERA_TEST_KILL_IN_SAVE=R[:S]: whether `rank` dies in the save of
/// `step`.
bool killInSave(int rank, int64_t step) {
  const char *env = std::getenv("TESSERA_TEST_KILL_IN_SAVE");
  if (!env || !*env)
    return false;
  auto [r, s] = llvm::StringRef(env).split(':');
  int64_t wantRank = -1, wantStep = -1;
  if (r.getAsInteger(10, wantRank) ||
      (!s.empty() && s.getAsInteger(10, wantStep)))
    return false;
  return wantRank == rank && (s.empty() || wantStep == step);
}

} // namespace

/// The --save / --load option errors a rank sees alone; "" if none.
std::string Trainer::checkCheckpointOptions() const {
  if (opts.saveInterval < 0)
    return "--save-interval must be >= 0";
  if (opts.keepLast < 0)
    return "--keep-last must be >= 0";
  if (opts.saveDir.empty() && (opts.saveInterval > 0 || opts.keepLast > 0))
    return std::string(opts.saveInterval > 0 ? "--save-interval"
                                             : "--keep-last") +
           " needs --save DIR";
  if (opts.noLoadOptim && opts.loadDir.empty())
    return "--no-load-optim needs --load DIR";
  return "";
}

/// --save: computes who writes which shard (every rank alike, from the
/// manifest: each rank's coordinates and, for pipeline plans, its stage's
/// tensors) and creates DIR on rank 0. No collective.
std::string Trainer::prepareCheckpoints() {
  if (opts.saveDir.empty())
    return "";
  const exec::Manifest &m = plan->manifest();
  const exec::Pipeline *pipe = plan->pipeline();
  std::vector<ckpt::TensorSpec> specs;
  std::vector<int64_t> argOfSpec;
  for (const exec::ArgumentSpec &a : m.arguments) {
    if (!isState(a.role))
      continue;
    // An argument no stage reads is held by no rank: nothing to save.
    if (!heldByAnyRank(*plan, a.index))
      continue;
    specs.push_back({a.name, exec::roleName(a.role), a.dtype, a.layout});
    argOfSpec.push_back(a.index);
  }
  std::vector<int64_t> rankShape = m.rankShape();
  std::vector<int64_t> order = m.rankOrderIndices();
  std::vector<ckpt::RankHoldings> holdings;
  for (int64_t r = 0; r < m.numRanks(); ++r) {
    ckpt::RankHoldings h;
    h.rank = r;
    h.coords = exec::gridCoords(r, rankShape, order);
    int64_t stage = m.isPipeline() ? h.coords[m.ppAxis] : 0;
    if (m.isPipeline())
      h.coords.push_back(0); // the virtual mb axis
    for (size_t i = 0; i < specs.size(); ++i)
      if (!pipe || pipe->stageArguments[stage][argOfSpec[i]])
        h.tensors.push_back(i);
    holdings.push_back(std::move(h));
  }
  llvm::Expected<ckpt::ShardPlan> planned =
      ckpt::planShards(std::move(specs), m.gridShape, holdings);
  if (!planned)
    return "--save: " + llvm::toString(planned.takeError());
  shardPlan = std::move(*planned);
  if (world->rank() == 0)
    if (std::error_code ec = llvm::sys::fs::create_directories(opts.saveDir))
      return "--save: cannot create '" + opts.saveDir + "': " + ec.message();
  return "";
}

/// --load: checks the checkpoint against the model (every rank checks every
/// tensor, so all report the same first error) and replaces this rank's
/// state by its piece of the checkpoint's. No collective.
std::string Trainer::loadCheckpoint() {
  llvm::Expected<std::unique_ptr<ckpt::CheckpointReader>> opened =
      ckpt::CheckpointReader::open(opts.loadDir);
  if (!opened)
    return "--load: " + llvm::toString(opened.takeError());
  const ckpt::CheckpointReader &reader = **opened;
  const exec::Manifest &m = plan->manifest();
  const std::string where = "checkpoint '" + reader.directory() + "'";

  // What the model needs and the checkpoint has.
  std::vector<const exec::ArgumentSpec *> toLoad;
  for (const exec::ArgumentSpec &a : m.arguments) {
    if (!isState(a.role))
      continue;
    if ((a.role == exec::Role::OptState && opts.noLoadOptim) ||
        !heldByAnyRank(*plan, a.index))
      continue;
    if (!reader.find(a.name)) {
      // Loss scaling's state from a run without it: the initial state.
      if (a.role == exec::Role::OptState && isLossScaleState(a.name))
        continue;
      return where + " has no tensor '" + a.name + "' (the model's " +
             exec::roleName(a.role) + " " + shapeToString(a.shape) + ")";
    }
    if (llvm::Error err = reader.checkTensor(a.name, a.dtype, a.shape))
      return llvm::toString(std::move(err));
    toLoad.push_back(&a);
  }
  // What the checkpoint has and the model lacks (a different model).
  for (const ckpt::TensorInfo &t : reader.tensors())
    if ((t.role == "param" || t.role == "frozen") &&
        m.findArgument(t.name, exec::Role::Param) < 0 &&
        m.findArgument(t.name, exec::Role::Frozen) < 0)
      return where + " has " + t.role + " '" + t.name + "' " +
             shapeToString(t.shape) + ", which the model does not have";

  // This rank's pieces under this plan's layouts.
  std::vector<int64_t> coords = executor->layoutCoords();
  for (const exec::ArgumentSpec *a : toLoad) {
    if (!executor->localValue(a->name, a->role))
      continue; // another pipeline stage's
    llvm::Expected<Tensor> piece =
        reader.loadLocal(a->name, a->layout, m.gridShape, coords);
    if (!piece)
      return "--load: " + llvm::toString(piece.takeError());
    if (llvm::Error err = executor->setLocalValue(a->name, a->role, *piece))
      return "--load: " + llvm::toString(std::move(err));
  }
  startStep = reader.step();
  executor->setStepsRun(startStep);
  if (world->rank() == 0) {
    if (reader.consumedSamples() != startStep * m.globalBatch)
      llvm::errs() << "tessera-run: warning: " << where << " consumed "
                   << reader.consumedSamples() << " samples in " << startStep
                   << " steps; this plan's batch of " << m.globalBatch
                   << " continues at sample " << startStep * m.globalBatch
                   << "\n";
    if (opts.logEvery > 0) {
      llvm::outs() << "loaded " << where << " at step " << startStep
                   << (opts.noLoadOptim ? " (weights only)" : "") << "\n";
      llvm::outs().flush();
    }
  }
  return "";
}

/// After `stepsDone` steps: a checkpoint every --save-interval steps.
void Trainer::maybeCheckpoint(int64_t stepsDone) {
  if (!opts.saveDir.empty() && opts.saveInterval > 0 &&
      stepsDone % opts.saveInterval == 0)
    saveCheckpoint(stepsDone);
}

void Trainer::saveCheckpoint(int64_t stepsDone) {
  int rank = world->rank();
  // The tmp folder's name: rank 0's pid, the same on every rank.
  uint64_t token = rank == 0 ? static_cast<uint64_t>(::getpid()) : 0;
  {
    mpi::watchdog::Guard guard("broadcast of the checkpoint folder",
                               world->size());
    if (MPI_Bcast(&token, 1, MPI_UINT64_T, 0, world->handle()) != MPI_SUCCESS)
      abortAll(*world, "--save: MPI_Bcast failed");
  }
  std::string tmp = ckpt::tmpDirPath(opts.saveDir, stepsDone, token);

  // This rank's shards, on the host.
  std::string error;
  std::map<std::string, Tensor> host;
  if (auto mine = shardPlan->writes.find(rank); mine != shardPlan->writes.end())
    for (const auto &[tensor, shard] : mine->second) {
      (void)shard;
      const ckpt::TensorSpec &spec = shardPlan->tensors[tensor];
      if (host.count(spec.name))
        continue;
      int64_t arg = -1;
      for (exec::Role role :
           {exec::Role::Param, exec::Role::Frozen, exec::Role::OptState})
        if (spec.role == exec::roleName(role))
          arg = plan->manifest().findArgument(spec.name, role);
      const Tensor *t =
          arg < 0 ? nullptr
                  : executor->localValue(spec.name,
                                         plan->manifest().arguments[arg].role);
      if (!t) {
        error = "--save: this rank holds no '" + spec.name + "'";
        break;
      }
      llvm::Expected<Tensor> down = backend->download(*t);
      if (!down) {
        error = "--save: '" + spec.name + "': " + take(down.takeError());
        break;
      }
      host.emplace(spec.name, std::move(*down));
    }
  if (error.empty())
    error = take(ckpt::writeRankShards(
        tmp, *shardPlan, rank,
        [&](const ckpt::TensorSpec &spec) -> const Tensor * {
          auto it = host.find(spec.name);
          return it == host.end() ? nullptr : &it->second;
        }));
  if (killInSave(rank, stepsDone)) {
    llvm::errs() << "tessera-run: TESSERA_TEST_KILL_IN_SAVE: rank " << rank
                 << " kills itself in the save of step " << stepsDone << "\n";
    llvm::errs().flush();
    std::raise(SIGKILL);
  }
  // Every rank's file is written (or some rank failed): rank 0 finalizes.
  if (!allRanksOk(*world, error)) {
    failed = true;
    return;
  }
  if (rank == 0) {
    const exec::Manifest &m = plan->manifest();
    ckpt::CheckpointInfo info;
    info.step = stepsDone;
    info.consumedSamples = stepsDone * m.globalBatch;
    info.plan = planSummary(opts.planPath);
    if (std::optional<double> scale = readLossScale().scale)
      info.lossScale = *scale;
    error = take(ckpt::finalizeCheckpoint(opts.saveDir, tmp, *shardPlan, info,
                                          opts.keepLast));
  }
  if (!allRanksOk(*world, error)) {
    failed = true;
    return;
  }
  lastSaved = stepsDone;
  if (rank == 0 && opts.logEvery > 0) {
    llvm::outs() << "saved checkpoint '" << opts.saveDir << "/"
                 << ckpt::iterationDirName(stepsDone) << "' ("
                 << shardPlan->totalBytes() << " bytes)\n";
    llvm::outs().flush();
  }
}

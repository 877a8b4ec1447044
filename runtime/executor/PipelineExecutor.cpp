//===- PipelineExecutor.cpp - the pipeline-parallel step of an Executor ---===//
//
// The parts of Executor that only pipeline plans use (see Executor.h): the pp
// communicator and per-function contexts, the micro-batch schedule of one
// step, and gathering weights that live on one stage only.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Executor.h"

#include "runtime/FaultInject.h"
#include "runtime/collectives/mpi/Watchdog.h"
#include "runtime/executor/Backend.h"

#include "llvm/Support/FormatVariadic.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
namespace schedule = tessera::tsrt::schedule;

/// The pipeline executor's own profile kinds (KernelStats::opTimes).
static const int kindAccumulate = profileKindId("pipeline.accumulate");
static const int kindCompleteSends = profileKindId("pipeline.complete_sends");
static const int kindLossBroadcast = profileKindId("pipeline.loss_broadcast");

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Every chunk's sends and receives in program order, forward and backward
/// apart.
static std::vector<schedule::ChunkComms> chunkComms(const Pipeline &p) {
  std::vector<schedule::ChunkComms> comms(p.chunks.size());
  for (auto [c, chunk] : llvm::enumerate(p.chunks))
    for (auto [prog, events] :
         {std::pair{&chunk.forward.program, &comms[c].forward},
          std::pair{&chunk.backward.program, &comms[c].backward}})
      for (const Instruction &inst : prog->instructions())
        if (inst.kind == Instruction::Kind::Send ||
            inst.kind == Instruction::Kind::Recv)
          events->push_back({inst.kind == Instruction::Kind::Send,
                             inst.peerChunk, inst.channel});
  return comms;
}

/// checkPipelineMessageOrder over the sends and receives every stage
/// issues: its actions in schedule order, each program's in instruction
/// order.
static llvm::Error checkTaglessOrder(const Pipeline &p) {
  std::vector<std::vector<PipelineMessage>> sends(p.shape.stages),
      recvs(p.shape.stages);
  for (int64_t st = 0; st < p.shape.stages; ++st)
    for (const schedule::Action &a : p.actions[st]) {
      const PipelineChunk &chunk = p.chunks[a.chunk];
      const Program &prog = a.phase == schedule::Phase::Forward
                                ? chunk.forward.program
                                : chunk.backward.program;
      for (const Instruction &inst : prog.instructions()) {
        int64_t peer = inst.peerChunk % p.shape.stages;
        if (inst.kind == Instruction::Kind::Send)
          sends[st].push_back({st, peer, inst.channel, a.microBatch});
        else if (inst.kind == Instruction::Kind::Recv)
          recvs[st].push_back({peer, st, inst.channel, a.microBatch});
      }
    }
  return checkPipelineMessageOrder(sends, recvs);
}

llvm::Error Executor::initPipeline() {
  const Manifest &m = planRef.manifest();
  const Pipeline &p = *planRef.pipeline();
  myStage = gridRef.coords()[m.ppAxis];

  // Every rank of the job sees the same MPI_TAG_UB, so all fail alike.
  if (p.maxTag >= 0) {
    int *tagUb = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
    if (flag && tagUb && p.maxTag > *tagUb)
      return fail(llvm::formatv(
          "{0}: the pipeline's largest MPI tag ({1} = channel x {2} "
          "micro-batches + micro-batch) exceeds this MPI's MPI_TAG_UB ({3}); "
          "use fewer micro-batches or fewer channels",
          planRef.source(), p.maxTag, p.shape.microBatches, *tagUb));
  }

  llvm::Expected<mpi::Communicator> pp = gridRef.subComm({m.ppAxis});
  if (!pp)
    return pp.takeError();
  p2p = std::make_unique<PointToPoint>();
  p2p->comm = *pp;
  p2p->stages = p.shape.stages;
  p2p->microBatches = p.shape.microBatches;
  sendRelease = schedule::sendReleases(p.actions, chunkComms(p))[myStage];
  if (Communication *c = backend->communication(); c && c->pointToPoint()) {
    // NCCL matches transfers by order (no tags): the schedule must issue
    // them in the same order on both ends of every stage pair.
    if (llvm::Error err = checkTaglessOrder(p))
      return fail(planRef.source() + ": " + llvm::toString(std::move(err)));
    if (llvm::Error err = c->connectPointToPoint(*pp))
      return err;
  }

  // Sub-communicators of every chunk's functions, in chunk order, on every
  // rank (MPI_Comm_split is collective over the whole grid).
  fnCtx.resize(3 * p.chunks.size());
  for (auto [c, chunk] : llvm::enumerate(p.chunks)) {
    const PipelineFunction *fns[3] = {&chunk.forward, &chunk.backward,
                                      &chunk.apply};
    for (int phase = 0; phase < 3; ++phase) {
      ExecContext &fc = fnCtx[3 * c + phase];
      for (const std::vector<int64_t> &axes : fns[phase]->program.commAxes()) {
        llvm::Expected<mpi::Communicator> comm = gridRef.subComm(axes);
        if (!comm)
          return comm.takeError();
        if (llvm::Error err = backend->connect(*comm))
          return err;
        fc.comms.push_back(*comm);
      }
      fc.coords = gridRef.coords();
      fc.traffic = &counter;
      fc.stats = &stats;
      fc.p2p = p2p.get();
      fc.communication = backend->communication();
    }
    if (chunk.stage == myStage)
      myChunks.push_back(static_cast<int64_t>(c));
  }
  return llvm::Error::success();
}

llvm::Expected<double> Executor::stepPipeline(const Tensor &tokens,
                                              const Tensor &labels) {
  const Manifest &m = planRef.manifest();
  const Pipeline &p = *planRef.pipeline();
  const int64_t M = p.shape.microBatches;
  double stepStart = tracing ? now() : 0;
  auto stepError = [&](const llvm::Twine &where, llvm::Error err) {
    return fail(planRef.source() + ": step " + llvm::Twine(steps) + ": stage " +
                llvm::Twine(myStage) + ", " + where + ": " +
                llvm::toString(std::move(err)));
  };

  // This rank's slice of every micro-batch (coordinates + [m]).
  std::vector<Tensor> tokenSlices(M), labelSlices(M);
  const std::vector<bool> &held = p.stageArguments[myStage];
  std::vector<int64_t> coords = gridRef.coords();
  coords.push_back(0);
  for (int64_t mb = 0; mb < M; ++mb) {
    coords.back() = mb;
    for (auto [arg, global, slices] :
         {std::tuple{tokensArg, &tokens, &tokenSlices},
          std::tuple{labelsArg, &labels, &labelSlices}}) {
      if (!held[arg])
        continue;
      llvm::Expected<Tensor> local = backend->upload(
          sliceToLocal(*global, m.arguments[arg].layout, m.gridShape, coords));
      if (!local)
        return stepError("the batch", local.takeError());
      (*slices)[mb] = std::move(*local);
    }
  }

  counter.beginStep();
  std::vector<Tensor> acc(p.accumulatorTypes.size());
  std::map<std::pair<int64_t, int64_t>, std::vector<Tensor>> stash;
  int64_t liveSets = 0, liveBytes = 0, peakSets = 0, peakBytes = 0;
  auto setBytes = [](const std::vector<Tensor> &set) {
    int64_t b = 0;
    for (const Tensor &t : set)
      b += t.isNull() ? 0 : static_cast<int64_t>(t.bytes());
    return b;
  };

  // Arguments of a function: state, the micro-batch's tokens/labels, an
  // activation set entry or an accumulator.
  auto bind = [&](const PipelineFunction &f, int64_t mb,
                  const std::vector<Tensor> *saved,
                  std::vector<Tensor> &args) -> llvm::Error {
    args.clear();
    for (auto [i, b] : llvm::enumerate(f.args)) {
      Tensor t;
      switch (b.kind) {
      case Binding::Kind::Arg:
        t = b.index == tokensArg   ? tokenSlices[mb]
            : b.index == labelsArg ? labelSlices[mb]
                                   : state[b.index];
        break;
      case Binding::Kind::Saved:
        t = (*saved)[b.index];
        break;
      case Binding::Kind::Acc:
        t = acc[b.index];
        break;
      case Binding::Kind::Result:
        break;
      }
      if (t.isNull())
        return fail(llvm::formatv("{0}: argument #{1} has no value on this "
                                  "rank",
                                  f.description, i));
      args.push_back(std::move(t));
    }
    return llvm::Error::success();
  };

  std::vector<Tensor> args;
  for (auto [k, a] : llvm::enumerate(p.actions[myStage])) {
    bool forward = a.phase == schedule::Phase::Forward;
    fault::at(forward ? fault::Moment::Forward
                      : fault::Moment::Backward); // test hook
    std::string name =
        llvm::formatv("{0}{1}.{2}", forward ? "F" : "B", a.chunk, a.microBatch)
            .str();
    double start = tracing ? now() : 0;
    double waitBefore = p2p->recvWaitSeconds;
    const PipelineChunk &chunk = p.chunks[a.chunk];
    const PipelineFunction &f = forward ? chunk.forward : chunk.backward;
    auto key = std::make_pair(a.chunk, a.microBatch);
    const std::vector<Tensor> *saved = nullptr;
    if (!forward) {
      auto it = stash.find(key);
      if (it == stash.end()) // the verifier orders F before B
        return fail(planRef.source() + ": step " + llvm::Twine(steps) +
                    ": stage " + llvm::Twine(myStage) + ", " + name +
                    ": no activation set (its forward has not run)");
      saved = &it->second;
    }
    name += " (@" + f.name + ")";
    if (llvm::Error err = bind(f, a.microBatch, saved, args))
      return stepError(name, std::move(err));
    ExecContext &fc = fnCtx[3 * a.chunk + (forward ? 0 : 1)];
    fc.microBatch = a.microBatch;
    size_t sendsBefore = p2p->pending.size();
    llvm::Expected<std::vector<Tensor>> results =
        f.program.run(fc, std::move(args));
    args = {};
    if (!results)
      return stepError(name, results.takeError());
    // The sends it posted (MPI path; device transports post none) are held
    // until their fixed release point.
    const std::vector<int64_t> &due = sendRelease[k];
    size_t posted = p2p->pending.size() - sendsBefore;
    if (posted && posted != due.size())
      return stepError(
          name, fail(llvm::formatv("posted {0} sends, its program has {1}",
                                   posted, due.size())));
    for (size_t i = 0; i < posted; ++i)
      p2p->pending[sendsBefore + i].releaseAfter = due[i];

    if (forward) {
      std::vector<Tensor> set(chunk.numSaved);
      for (auto [i, b] : llvm::enumerate(f.results))
        if (b.kind == Binding::Kind::Saved)
          set[b.index] = (*results)[i];
      liveBytes += setBytes(set);
      ++liveSets;
      peakSets = std::max(peakSets, liveSets);
      peakBytes = std::max(peakBytes, liveBytes);
      stash[key] = std::move(set);
    } else {
      auto it = stash.find(key);
      liveBytes -= setBytes(it->second);
      --liveSets;
      stash.erase(it);
    }
    {
      OpTimer timer(&stats, kindAccumulate);
      for (auto [i, b] : llvm::enumerate(f.results))
        if (b.kind == Binding::Kind::Acc)
          if (llvm::Error err =
                  backend->accumulate(acc[b.index], (*results)[i]))
            return stepError(name, std::move(err));
    }
    results->clear();
    // Wait for the sends due after this action and free their buffers
    // (never earlier, so the peak does not depend on the receiver's timing;
    // their receives are posted by now: schedule::sendReleases).
    llvm::Error released = [&] {
      OpTimer timer(&stats, kindCompleteSends);
      return p2p->waitReleasedAfter(static_cast<int64_t>(k));
    }();
    if (released)
      return stepError(name, std::move(released));
    record(forward ? TraceEvent::Kind::Forward : TraceEvent::Kind::Backward,
           a.chunk, a.microBatch, start, p2p->recvWaitSeconds - waitBefore);
  }
  llvm::Error sent = [&] {
    OpTimer timer(&stats, kindCompleteSends);
    return p2p->waitAll();
  }();
  if (sent)
    return stepError("completing the sends", std::move(sent));

  // Apply, in ascending chunk order; every apply reads the step's initial
  // state, and the new state is swapped in once all have run.
  std::vector<Tensor> next = state;
  float loss = NAN;
  for (int64_t c : myChunks) {
    double start = tracing ? now() : 0;
    const PipelineFunction &f = p.chunks[c].apply;
    std::string name = "apply of chunk " + std::to_string(c);
    if (llvm::Error err = bind(f, 0, nullptr, args))
      return stepError(name, std::move(err));
    llvm::Expected<std::vector<Tensor>> results =
        f.program.run(fnCtx[3 * c + 2], std::move(args));
    args = {};
    if (!results)
      return stepError(name, results.takeError());
    for (auto [i, b] : llvm::enumerate(f.results)) {
      const ResultSpec &r = m.results[b.index];
      if (r.role == Role::Loss) {
        llvm::Expected<Tensor> host = backend->download((*results)[i]);
        if (!host)
          return stepError(name, host.takeError());
        loss = host->data<float>()[0];
      } else if (r.role == Role::GradNorm) {
        // Replicated: every chunk's apply returns the same value.
        llvm::Expected<Tensor> host = backend->download((*results)[i]);
        if (!host)
          return stepError(name, host.takeError());
        gradNorm = static_cast<double>(host->data<float>()[0]);
      } else
        next[r.argument] = (*results)[i];
    }
    record(TraceEvent::Kind::Apply, c, -1, start);
  }

  if (llvm::Error err = backend->finishStep())
    return stepError("finishing the step", std::move(err));

  // The loss lives on the last stage.
  double value = loss;
  mpi::watchdog::Guard bcastGuard("broadcast", p2p->comm.size());
  int rc = [&] {
    OpTimer timer(&stats, kindLossBroadcast);
    return MPI_Bcast(&value, 1, MPI_DOUBLE,
                     static_cast<int>(p.shape.stages - 1), p2p->comm.handle());
  }();
  if (rc != MPI_SUCCESS)
    return stepError("loss",
                     mpi::failure(rc, "MPI_Bcast from pp rank " +
                                          llvm::Twine(p.shape.stages - 1)));
  state = std::move(next);
  lastPeakSets = peakSets;
  lastPeakBytes = peakBytes;
  record(TraceEvent::Kind::Step, -1, -1, stepStart);
  ++steps;
  return value;
}

llvm::Expected<std::vector<std::pair<std::string, Tensor>>>
Executor::gatherWeightsPipeline(int root) const {
  const Manifest &m = planRef.manifest();
  const Pipeline &p = *planRef.pipeline();
  const mpi::Communicator &world = gridRef.parent();
  bool isRoot = world.rank() == root;
  int n = world.size();
  std::vector<int64_t> stageOf(n);
  for (int r = 0; r < n; ++r)
    stageOf[r] = gridRef.coordsOf(r)[m.ppAxis];

  std::vector<std::pair<std::string, Tensor>> out;
  for (const ArgumentSpec &a : m.arguments) {
    if (a.role != Role::Param && a.role != Role::Frozen)
      continue;
    int64_t holder = -1;
    for (int64_t s = 0; s < p.shape.stages && holder < 0; ++s)
      if (p.stageArguments[s][a.index])
        holder = s;
    if (holder < 0) {
      // No stage reads it: it keeps its initial value.
      if (isRoot)
        out.emplace_back(a.name, planRef.initialValue(a.name)->clone());
      continue;
    }
    int64_t count = shapeNumel(a.localShape);
    if (count > INT_MAX)
      return fail("gatherWeights: shard of '" + a.name +
                  "' is too large for one MPI message");
    // The holder stage's ranks send (one of them if replicated).
    std::vector<int> counts(n, 0), displs(n, 0);
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
      if (stageOf[r] != holder || (a.layout.isReplicated() && total > 0))
        continue;
      counts[r] = static_cast<int>(count);
      displs[r] = static_cast<int>(total);
      total += count;
      if (total > INT_MAX)
        return fail("gatherWeights: '" + a.name +
                    "' is too large for one MPI message");
    }
    int mine = counts[world.rank()];
    Tensor gathered;
    if (isRoot)
      gathered = Tensor::empty(DType::F32, {total});
    Tensor local;
    if (mine) {
      llvm::Expected<Tensor> host = backend->download(state[a.index]);
      if (!host)
        return fail("gatherWeights: '" + a.name +
                    "': " + llvm::toString(host.takeError()));
      local = std::move(*host);
    }
    mpi::watchdog::Guard guard("gather", world.size());
    int rc = MPI_Gatherv(mine ? local.raw() : nullptr, mine, MPI_FLOAT,
                         isRoot ? gathered.raw() : nullptr, counts.data(),
                         displs.data(), MPI_FLOAT, root, world.handle());
    if (rc != MPI_SUCCESS)
      return mpi::failure(rc,
                          llvm::formatv("gatherWeights: MPI_Gatherv of '{0}' "
                                        "on world rank {1}",
                                        a.name, world.rank()));
    if (!isRoot)
      continue;
    Tensor global = Tensor::empty(a.dtype, a.shape);
    for (int r = 0; r < n; ++r) {
      if (!counts[r])
        continue;
      Tensor piece = Tensor::view(gathered.data<float>() + displs[r], a.dtype,
                                  a.localShape);
      std::vector<int64_t> coords = gridRef.coordsOf(r);
      coords.push_back(0); // the micro-batch axis
      placeLocal(piece, a.layout, m.gridShape, coords, global);
    }
    out.emplace_back(a.name, std::move(global));
  }
  return out;
}

//===- Executor.cpp - runs a plan's training step on one rank -------------===//

#include "runtime/executor/Executor.h"

#include "runtime/FaultInject.h"
#include "runtime/collectives/mpi/Watchdog.h"

#include "runtime/executor/Backend.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <tuple>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const char *TraceEvent::kindName(Kind kind) {
  switch (kind) {
  case Kind::Forward:
    return "forward";
  case Kind::Backward:
    return "backward";
  case Kind::Apply:
    return "apply";
  case Kind::Step:
    return "step";
  }
  return "?";
}

std::string TraceEvent::name() const {
  switch (kind) {
  case Kind::Forward:
  case Kind::Backward:
    return llvm::formatv("{0}{1}.{2}", kind == Kind::Forward ? "F" : "B", chunk,
                         microBatch)
        .str();
  default:
    return kindName(kind);
  }
}

void Executor::setTracedSink(
    std::function<llvm::Error(int64_t, unsigned, const Tensor &)> sink) {
  ctx.traced = sink;
  for (ExecContext &fc : fnCtx)
    fc.traced = sink;
}

llvm::Error Executor::enableTrace() {
  if (llvm::Error err = mpi::barrier(gridRef.parent()))
    return err;
  traceOrigin = MPI_Wtime();
  tracing = true;
  backend->traceDevice(true);
  return llvm::Error::success();
}

std::vector<DeviceTraceEvent> Executor::deviceTrace() const {
  std::vector<DeviceTraceEvent> events = backend->deviceTrace();
  for (DeviceTraceEvent &e : events) {
    e.start -= traceOrigin;
    e.end -= traceOrigin;
  }
  return events;
}

double Executor::now() const { return MPI_Wtime() - traceOrigin; }

void Executor::record(TraceEvent::Kind kind, int64_t chunk, int64_t microBatch,
                      double start, double recvWait) {
  if (!tracing)
    return;
  TraceEvent e;
  e.kind = kind;
  e.chunk = chunk;
  e.microBatch = microBatch;
  e.stage = myStage;
  e.step = steps;
  e.start = start;
  e.end = now();
  e.recvWait = recvWait;
  trace.push_back(e);
}

llvm::Expected<std::unique_ptr<Executor>> Executor::create(const Plan &plan,
                                                           mpi::Grid &grid) {
  const Manifest &m = plan.manifest();
  if (grid.axisSizes() != m.rankShape())
    return fail(plan.source() + ": the plan needs a grid " +
                m.gridDescription() + " but the executor was given " +
                shapeToString(grid.axisSizes()));
  if (std::vector<int64_t> order = m.rankOrderIndices();
      !order.empty() && grid.rankOrder() != order)
    return fail(plan.source() + ": the plan lays ranks out in the order " +
                shapeToString(order) +
                " (rank axis indices, slowest first) but the executor's grid "
                "uses " +
                shapeToString(grid.rankOrder()));
  std::unique_ptr<Executor> ex(new Executor(plan, grid));
  Backend &backend = plan.backend();
  ex->backend = &backend;
  ex->ctx.coords = ex->gridRef.coords();
  ex->ctx.traffic = &ex->counter;
  ex->ctx.stats = &ex->stats;
  ex->ctx.communication = backend.communication();

  if (plan.pipeline()) {
    // The pp communicator and every chunk's sub-communicators.
    if (llvm::Error err = ex->initPipeline())
      return std::move(err);
  } else {
    // Sub-communicators, in program order (the same on every rank).
    for (const std::vector<int64_t> &axes : plan.program().commAxes()) {
      llvm::Expected<mpi::Communicator> comm = grid.subComm(axes);
      if (!comm)
        return comm.takeError();
      if (llvm::Error err = backend.connect(*comm))
        return std::move(err);
      ex->ctx.comms.push_back(*comm);
    }
    // The evaluation function's sub-communicators, after the step's.
    ex->evalCtx.communication = backend.communication();
    if (const Program *eval = plan.evalProgram())
      for (const std::vector<int64_t> &axes : eval->commAxes()) {
        llvm::Expected<mpi::Communicator> comm = grid.subComm(axes);
        if (!comm)
          return comm.takeError();
        if (llvm::Error err = backend.connect(*comm))
          return std::move(err);
        ex->evalCtx.comms.push_back(*comm);
      }
    // The static memory plan's arena, once for all steps (and shared with
    // the evaluation function, which never runs during a step).
    int64_t bytes = plan.program().arenaBytes();
    if (const Program *eval = plan.evalProgram())
      bytes = std::max(bytes, eval->arenaBytes());
    if (bytes > 0) {
      llvm::Expected<Arena> arena = backend.allocateArena(bytes);
      if (!arena)
        return fail(plan.source() + ": " + llvm::toString(arena.takeError()));
      ex->arena = std::move(*arena);
      ex->ctx.arena = &ex->arena;
      ex->evalCtx.arena = &ex->arena;
    }
  }

  // Initial local state (pipeline plans: only what this stage reads; the
  // shards of the micro-batch coordinate 0, as no such layout uses it).
  std::vector<int64_t> coords = grid.coords();
  if (m.isPipeline())
    coords.push_back(0);
  ex->state.resize(m.arguments.size());
  for (const ArgumentSpec &a : m.arguments) {
    bool held = !plan.pipeline() ||
                plan.pipeline()->stageArguments[ex->myStage][a.index];
    switch (a.role) {
    case Role::Param:
    case Role::Frozen: {
      if (!held)
        break;
      const Tensor *global = plan.initialValue(a.name);
      if (!global)
        return fail(plan.source() + ": no initial value for '" + a.name + "'");
      llvm::Expected<Tensor> local =
          backend.upload(sliceToLocal(*global, a.layout, m.gridShape, coords));
      if (!local)
        return fail(plan.source() + ": '" + a.name +
                    "': " + llvm::toString(local.takeError()));
      ex->state[a.index] = std::move(*local);
      break;
    }
    case Role::OptState:
      if (held) {
        llvm::Expected<Tensor> zeros =
            backend.upload(Tensor::zeros(a.dtype, a.localShape));
        if (!zeros)
          return fail(plan.source() + ": optimizer state '" + a.name +
                      "': " + llvm::toString(zeros.takeError()));
        ex->state[a.index] = std::move(*zeros);
      }
      break;
    case Role::Hyper:
      if (held) {
        // The manifest's value until setHyper (Manifest::parse checked it).
        Tensor host = Tensor::zeros(DType::F32, {});
        host.data<float>()[0] =
            static_cast<float>(*m.optimizer.getNumber(a.name));
        llvm::Expected<Tensor> value = backend.upload(host);
        if (!value)
          return fail(plan.source() + ": '" + a.name +
                      "': " + llvm::toString(value.takeError()));
        ex->state[a.index] = std::move(*value);
      }
      break;
    case Role::Tokens:
      ex->tokensArg = a.index;
      break;
    case Role::Labels:
      ex->labelsArg = a.index;
      break;
    case Role::Loss:
    case Role::GradNorm:
      break;
    }
  }
  for (const ResultSpec &r : m.results) {
    if (r.role == Role::Loss)
      ex->lossResult = r.index;
    if (r.role == Role::GradNorm)
      ex->gradNormResult = r.index;
  }
  return ex;
}

llvm::Expected<double> Executor::step(const Tensor &tokens,
                                      const Tensor &labels) {
  if (!stats.profile)
    return runStep(tokens, labels);
  // --profile: the step's own wall and processor time (KernelStats::steps).
  double start = OpTimer::now(), cpuStart = OpTimer::cpuNow();
  llvm::Expected<double> loss = runStep(tokens, labels);
  stats.steps.seconds += OpTimer::now() - start;
  stats.steps.cpuSeconds += OpTimer::cpuNow() - cpuStart;
  ++stats.steps.calls;
  return loss;
}

llvm::Expected<double> Executor::runStep(const Tensor &tokens,
                                         const Tensor &labels) {
  const Manifest &m = planRef.manifest();
  const ArgumentSpec &tokSpec = m.arguments[tokensArg];
  const ArgumentSpec &labSpec = m.arguments[labelsArg];
  if (tokens.dtype() != DType::I64 || tokens.shape() != tokSpec.shape ||
      labels.dtype() != DType::I64 || labels.shape() != labSpec.shape)
    return fail(llvm::formatv("step: tokens and labels must be i64 {0}, got "
                              "{1} and {2}",
                              shapeToString(tokSpec.shape),
                              shapeToString(tokens.shape()),
                              shapeToString(labels.shape())));
  // Memory measurement (see MemoryUse): what is held when the step starts,
  // then the heap's and the arena's high-water marks during it.
  MemoryUse use;
  {
    std::vector<const void *> &seen = seenBuffers; // reused: no allocation
    seen.clear();
    for (const Tensor &t : state)
      if (!t.isNull() && !llvm::is_contained(seen, t.raw())) {
        seen.push_back(t.raw());
        use.persistent += std::max<int64_t>(
            (static_cast<int64_t>(t.bytes()) + 63) / 64 * 64, 64);
      }
    if (const Pipeline *pipe = planRef.pipeline()) {
      for (int64_t c : myChunks)
        for (const PipelineFunction *f :
             {&pipe->chunks[c].forward, &pipe->chunks[c].backward,
              &pipe->chunks[c].apply})
          use.constants += f->program.constantBytes();
    } else {
      use.constants = planRef.program().constantBytes();
    }
  }
  arena.highWater = 0;
  int64_t heapAtStart = heapBytesLive();
  resetHeapBytesPeak();
  auto measured = [&] {
    use.arena = arena.highWater;
    use.stepHeap = heapBytesPeak() - heapAtStart;
    lastMemory = use;
  };
  if (planRef.pipeline()) {
    llvm::Expected<double> loss = stepPipeline(tokens, labels);
    if (loss)
      measured();
    return loss;
  }
  if (captureSteps) {
    llvm::Expected<double> loss = stepCaptured(tokens, labels);
    if (loss)
      measured();
    return loss;
  }
  double start = tracing ? now() : 0;
  const std::vector<int64_t> &coords = gridRef.coords();
  std::vector<Tensor> args = state;
  auto stepError = [&](llvm::Error err) {
    return fail(planRef.source() + ": step " + llvm::Twine(steps) + ": " +
                llvm::toString(std::move(err)));
  };
  // The local batch: the only tensor storage a memory-planned CPU step
  // allocates (two slices; the memory plan counts them as step heap).
  for (auto [arg, global, spec] : {std::tuple{tokensArg, &tokens, &tokSpec},
                                   std::tuple{labelsArg, &labels, &labSpec}}) {
    llvm::Expected<Tensor> local = backend->upload(
        sliceToLocal(*global, spec->layout, m.gridShape, coords));
    if (!local)
      return stepError(local.takeError());
    args[arg] = std::move(*local);
  }

  counter.beginStep();
  fault::at(fault::Moment::Forward);             // test hook
  ctx.lossResult = static_cast<int>(lossResult); // for the `backward` hook
  llvm::Expected<std::vector<Tensor>> results =
      planRef.program().run(ctx, std::move(args));
  ctx.lossResult = -1;
  if (!results)
    return stepError(results.takeError());
  if (llvm::Error err = backend->finishStep())
    return stepError(std::move(err));
  measured();

  // Updated params and optimizer state replace their arguments. Those the
  // memory plan put in the arena (valid only until the next step) are copied
  // into the argument's own buffer, which nothing reads any more.
  const char *arenaBegin = static_cast<const char *>(arena.memory.get());
  auto inArena = [&](const Tensor &t) {
    const char *at = static_cast<const char *>(t.raw());
    return arenaBegin && at >= arenaBegin && at < arenaBegin + arena.bytes;
  };
  for (const ResultSpec &r : m.results) {
    // A result that replaces no argument (loss, metrics) has argument -1:
    // state[-1] must not even be formed (UBSan: pointer overflow).
    if (r.argument < 0)
      continue;
    const Tensor &value = (*results)[r.index];
    const Tensor &target = state[r.argument];
    if (inArena(value) && (target.isNull() || target.dtype() != value.dtype() ||
                           target.shape() != value.shape()))
      return fail(planRef.source() + ": step " + llvm::Twine(steps) +
                  ": result #" + llvm::Twine(r.index) + " ('" + r.name +
                  "') does not match the argument it replaces");
  }
  for (const ResultSpec &r : m.results) {
    if (r.argument < 0)
      continue;
    const Tensor &value = (*results)[r.index];
    if (!inArena(value)) {
      state[r.argument] = value;
      continue;
    }
    if (llvm::Error err = backend->copy(value, state[r.argument]))
      return stepError(std::move(err));
  }
  llvm::Expected<Tensor> loss = backend->download((*results)[lossResult]);
  if (!loss)
    return stepError(loss.takeError());
  if (gradNormResult >= 0) {
    llvm::Expected<Tensor> norm = backend->download((*results)[gradNormResult]);
    if (!norm)
      return stepError(norm.takeError());
    gradNorm = static_cast<double>(norm->data<float>()[0]);
  }
  record(TraceEvent::Kind::Step, -1, -1, start);
  ++steps;
  return static_cast<double>(loss->data<float>()[0]);
}

llvm::Expected<double> Executor::evaluate(const Tensor &tokens,
                                          const Tensor &labels) {
  const Manifest &m = planRef.manifest();
  const Program *program = planRef.evalProgram();
  if (!program)
    return fail(planRef.source() + ": the plan has no evaluation function" +
                (planRef.pipeline()
                     ? " (pipeline plans are not evaluated yet)"
                     : " (recompile it with this tessera-partition)"));
  const ArgumentSpec &tokSpec = m.arguments[tokensArg];
  const ArgumentSpec &labSpec = m.arguments[labelsArg];
  if (tokens.dtype() != DType::I64 || tokens.shape() != tokSpec.shape ||
      labels.dtype() != DType::I64 || labels.shape() != labSpec.shape)
    return fail(llvm::formatv("evaluate: tokens and labels must be i64 {0}, "
                              "got {1} and {2}",
                              shapeToString(tokSpec.shape),
                              shapeToString(tokens.shape()),
                              shapeToString(labels.shape())));
  auto evalError = [&](llvm::Error err) {
    return fail(planRef.source() + ": evaluation after step " +
                llvm::Twine(steps) + ": " + llvm::toString(std::move(err)));
  };
  const std::vector<int64_t> &coords = gridRef.coords();
  std::vector<Tensor> args;
  for (int64_t i : m.eval->arguments) {
    if (i != tokensArg && i != labelsArg) {
      args.push_back(state[i]);
      continue;
    }
    const Tensor &global = i == tokensArg ? tokens : labels;
    llvm::Expected<Tensor> local = backend->upload(
        sliceToLocal(global, m.arguments[i].layout, m.gridShape, coords));
    if (!local)
      return evalError(local.takeError());
    args.push_back(std::move(*local));
  }
  llvm::Expected<std::vector<Tensor>> results =
      program->run(evalCtx, std::move(args));
  if (!results)
    return evalError(results.takeError());
  if (llvm::Error err = backend->finishStep())
    return evalError(std::move(err));
  llvm::Expected<Tensor> loss = backend->download((*results)[m.eval->result]);
  if (!loss)
    return evalError(loss.takeError());
  return static_cast<double>(loss->data<float>()[0]);
}

llvm::Error Executor::enableStepCapture() {
  if (planRef.pipeline() || !backend->canCaptureSteps())
    return fail(planRef.source() + ": --cuda-graph: " +
                (planRef.pipeline()
                     ? std::string("pipeline plans are not captured")
                     : "the " + backend->name().str() +
                           " backend cannot capture steps (--cuda-graph needs "
                           "--backend cuda)"));
  captureSteps = true;
  return llvm::Error::success();
}

llvm::Expected<double> Executor::stepCaptured(const Tensor &tokens,
                                              const Tensor &labels) {
  const Manifest &m = planRef.manifest();
  double start = tracing ? now() : 0;
  auto stepError = [&](llvm::Error err) {
    return fail(planRef.source() + ": step " + llvm::Twine(steps) +
                " (--cuda-graph): " + llvm::toString(std::move(err)));
  };
  // The batch goes into fixed device buffers, which the graph reads.
  const std::vector<int64_t> &coords = gridRef.coords();
  for (auto [arg, global, buffer] :
       {std::tuple{tokensArg, &tokens, &tokensBuffer},
        std::tuple{labelsArg, &labels, &labelsBuffer}}) {
    const ArgumentSpec &spec = m.arguments[arg];
    Tensor local = sliceToLocal(*global, spec.layout, m.gridShape, coords);
    if (buffer->isNull()) {
      llvm::Expected<Tensor> b =
          backend->allocate(local.dtype(), local.shape());
      if (!b)
        return stepError(b.takeError());
      *buffer = std::move(*b);
    }
    if (llvm::Error err = backend->copyFromHost(local, *buffer))
      return stepError(std::move(err));
  }
  // Runs the program once, copying every updated value into its argument's
  // own buffer and the loss into lossBuffer (queued, or recorded).
  auto runOnce = [&]() -> llvm::Error {
    std::vector<Tensor> args = state;
    args[tokensArg] = tokensBuffer;
    args[labelsArg] = labelsBuffer;
    llvm::Expected<std::vector<Tensor>> results =
        planRef.program().run(ctx, std::move(args));
    if (!results)
      return results.takeError();
    for (const ResultSpec &r : m.results) {
      const Tensor &value = (*results)[r.index];
      Tensor *target = r.argument >= 0 ? &state[r.argument] : nullptr;
      if (r.index == lossResult || r.index == gradNormResult) {
        Tensor &buffer = r.index == lossResult ? lossBuffer : gradNormBuffer;
        if (buffer.isNull()) {
          llvm::Expected<Tensor> b =
              backend->allocate(value.dtype(), value.shape());
          if (!b)
            return b.takeError();
          buffer = std::move(*b);
        }
        target = &buffer;
      }
      if (!target || target->raw() == value.raw())
        continue;
      if (target->isNull() || target->dtype() != value.dtype() ||
          target->shape() != value.shape())
        return fail("result #" + llvm::Twine(r.index) + " ('" + r.name +
                    "') does not match the buffer it is copied into");
      if (llvm::Error err = backend->copy(value, *target))
        return err;
    }
    return llvm::Error::success(); // the results are freed here (recorded)
  };
  counter.beginStep();
  if (!warmedUp) {
    // Warm-up, eagerly: cuBLASLt plans, scratch and status slots are made
    // here, outside any capture (the first step this executor runs; a
    // resumed run's counter does not start at 0).
    if (llvm::Error err = runOnce())
      return stepError(std::move(err));
    warmedUp = true;
  } else {
    if (!captured) {
      if (llvm::Error err = backend->beginCapture())
        return stepError(std::move(err));
      llvm::Error ran = runOnce();
      llvm::Error ended = backend->endCapture();
      if (ran) {
        llvm::consumeError(std::move(ended));
        return stepError(std::move(ran));
      }
      if (ended)
        return stepError(std::move(ended));
      captured = true;
    }
    if (llvm::Error err = backend->replayCaptured())
      return stepError(std::move(err));
  }
  if (llvm::Error err = backend->finishStep())
    return stepError(std::move(err));
  llvm::Expected<Tensor> loss = backend->download(lossBuffer);
  if (!loss)
    return stepError(loss.takeError());
  if (gradNormResult >= 0) {
    llvm::Expected<Tensor> norm = backend->download(gradNormBuffer);
    if (!norm)
      return stepError(norm.takeError());
    gradNorm = static_cast<double>(norm->data<float>()[0]);
  }
  record(TraceEvent::Kind::Step, -1, -1, start);
  ++steps;
  return static_cast<double>(loss->data<float>()[0]);
}

llvm::Expected<int64_t> Executor::hyperSlot(llvm::StringRef name) const {
  int64_t i = planRef.manifest().findArgument(name, Role::Hyper);
  if (i < 0)
    return fail(planRef.source() +
                ": setHyper: the plan has no \"hyper\" "
                "argument '" +
                name + "'");
  return i;
}

llvm::Error Executor::setHyper(llvm::StringRef name, double value) {
  llvm::Expected<int64_t> slot = hyperSlot(name);
  if (!slot)
    return slot.takeError();
  return setHyper(*slot, value);
}

llvm::Error Executor::setHyper(int64_t slot, double value) {
  const Manifest &m = planRef.manifest();
  if (slot < 0 || slot >= static_cast<int64_t>(m.arguments.size()) ||
      m.arguments[slot].role != Role::Hyper)
    return fail(llvm::formatv("setHyper: {0} is not a \"hyper\" argument's "
                              "slot",
                              slot));
  if (!std::isfinite(value))
    return fail(llvm::formatv("setHyper: '{0}' = {1} is not finite",
                              m.arguments[slot].name, value));
  Tensor &target = state[slot];
  if (target.isNull()) // another pipeline stage's
    return llvm::Error::success();
  // In place: captured CUDA graphs keep the buffer's address. Host memory
  // is written directly; a device scalar through one host staging scalar
  // made on first use (no allocation per step).
  if (backend->hostMemory()) {
    target.data<float>()[0] = static_cast<float>(value);
    return llvm::Error::success();
  }
  if (hyperStaging.isNull())
    hyperStaging = Tensor::zeros(DType::F32, {});
  hyperStaging.data<float>()[0] = static_cast<float>(value);
  if (llvm::Error err = backend->copyFromHost(hyperStaging, target))
    return fail("setHyper: '" + m.arguments[slot].name +
                "': " + llvm::toString(std::move(err)));
  return llvm::Error::success();
}

const Tensor *Executor::localValue(llvm::StringRef name, Role role) const {
  int64_t i = planRef.manifest().findArgument(name, role);
  if (i < 0 || state[i].isNull())
    return nullptr;
  return &state[i];
}

llvm::Error Executor::setLocalValue(llvm::StringRef name, Role role,
                                    const Tensor &value) {
  const Manifest &m = planRef.manifest();
  int64_t i = m.findArgument(name, role);
  if (i < 0)
    return fail(planRef.source() + ": no " + roleName(role) + " argument '" +
                name + "'");
  const ArgumentSpec &a = m.arguments[i];
  if (state[i].isNull())
    return fail(planRef.source() + ": '" + name +
                "' is not held by this rank (another pipeline stage's)");
  if (value.dtype() != a.dtype || value.shape() != a.localShape)
    return fail(llvm::formatv(
        "{0}: '{1}': expected {2} {3}, got {4} {5}", planRef.source(), name,
        dtypeName(a.dtype), shapeToString(a.localShape),
        dtypeName(value.dtype()), shapeToString(value.shape())));
  llvm::Expected<Tensor> uploaded = backend->upload(value);
  if (!uploaded)
    return fail(planRef.source() + ": '" + name +
                "': " + llvm::toString(uploaded.takeError()));
  state[i] = std::move(*uploaded);
  return llvm::Error::success();
}

std::vector<int64_t> Executor::layoutCoords() const {
  std::vector<int64_t> coords = gridRef.coords();
  if (planRef.manifest().isPipeline())
    coords.push_back(0);
  return coords;
}

llvm::Expected<std::vector<std::pair<std::string, Tensor>>>
Executor::gatherWeights(int root) const {
  if (planRef.pipeline())
    return gatherWeightsPipeline(root);
  const Manifest &m = planRef.manifest();
  const mpi::Communicator &world = gridRef.parent();
  bool isRoot = world.rank() == root;
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ArgumentSpec &a : m.arguments) {
    if (a.role != Role::Param && a.role != Role::Frozen)
      continue;
    llvm::Expected<Tensor> downloaded = backend->download(state[a.index]);
    if (!downloaded)
      return fail("gatherWeights: '" + a.name +
                  "': " + llvm::toString(downloaded.takeError()));
    const Tensor &local = *downloaded;
    if (a.layout.isReplicated()) {
      // Every rank holds the whole tensor (and the same values).
      if (isRoot)
        out.emplace_back(a.name, local.clone());
      continue;
    }
    size_t bytes = local.bytes();
    if (bytes > static_cast<size_t>(INT_MAX))
      return fail("gatherWeights: shard of '" + a.name +
                  "' is too large for one MPI message");
    int n = world.size();
    Tensor gathered;
    if (isRoot)
      gathered = Tensor::empty(DType::I1, {static_cast<int64_t>(bytes) * n});
    mpi::watchdog::Guard guard("gather", n);
    int rc =
        MPI_Gather(local.raw(), static_cast<int>(bytes), MPI_BYTE,
                   isRoot ? gathered.raw() : nullptr, static_cast<int>(bytes),
                   MPI_BYTE, root, world.handle());
    if (rc != MPI_SUCCESS)
      return fail(llvm::formatv("gatherWeights: MPI_Gather of '{0}' failed "
                                "(error {1}) on world rank {2}",
                                a.name, rc, world.rank()));
    if (!isRoot)
      continue;
    Tensor global = Tensor::empty(a.dtype, a.shape);
    for (int r = 0; r < n; ++r) {
      Tensor piece =
          Tensor::view(static_cast<char *>(gathered.raw()) + r * bytes, a.dtype,
                       a.localShape);
      placeLocal(piece, a.layout, m.gridShape, gridRef.coordsOf(r), global);
    }
    out.emplace_back(a.name, std::move(global));
  }
  return out;
}

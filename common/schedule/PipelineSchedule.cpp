//===- PipelineSchedule.cpp - pipeline schedules and their checks ---------===//

#include "common/schedule/PipelineSchedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

using namespace tessera::tsrt::schedule;
using llvm::ArrayRef;
using llvm::StringRef;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// "F1.0".
std::string str(const Action &a) {
  return llvm::formatv("{0}{1}.{2}", a.phase == Phase::Forward ? 'F' : 'B',
                       a.chunk, a.microBatch)
      .str();
}

/// "F1.0 (chunk 1, micro-batch 0)", for error messages.
std::string describe(const Action &a) {
  return llvm::formatv("{0} (chunk {1}, micro-batch {2})", str(a), a.chunk,
                       a.microBatch)
      .str();
}

/// The comm events an action runs: its chunk's forward or backward program.
const std::vector<CommEvent> &eventsOf(const Action &a,
                                       ArrayRef<ChunkComms> comms) {
  return a.phase == Phase::Forward ? comms[a.chunk].forward
                                   : comms[a.chunk].backward;
}

/// One point-to-point message of a step: a value sent from chunk `src` to
/// chunk `dst` on `channel` for one micro-batch.
struct Message {
  int64_t src, dst, channel, microBatch;
  bool operator<(const Message &o) const {
    return std::tie(src, dst, channel, microBatch) <
           std::tie(o.src, o.dst, o.channel, o.microBatch);
  }
  bool operator==(const Message &o) const {
    return std::tie(src, dst, channel, microBatch) ==
           std::tie(o.src, o.dst, o.channel, o.microBatch);
  }
  /// The message that event `e` of action `a` sends or receives.
  static Message of(const Action &a, const CommEvent &e) {
    if (e.isSend)
      return {a.chunk, e.peer, e.channel, a.microBatch};
    return {e.peer, a.chunk, e.channel, a.microBatch};
  }
  std::string str() const {
    return llvm::formatv("channel {0} from chunk {1} to chunk {2}, "
                         "micro-batch {3}",
                         channel, src, dst, microBatch)
        .str();
  }
};

/// Where a message was posted.
struct Origin {
  int64_t stage;
  Action action;
};

/// Check 1: stage `s` runs exactly F and B of its own chunks for every
/// micro-batch, each once, F(c, m) before B(c, m).
llvm::Error checkCoverage(const Shape &shape, int64_t s,
                          const StageActions &actions) {
  int64_t chunks = shape.numChunks(), mbs = shape.microBatches;
  // seen[phase][chunk * M + m].
  std::vector<bool> seen[2] = {std::vector<bool>(chunks * mbs),
                               std::vector<bool>(chunks * mbs)};
  for (const Action &a : actions) {
    if (a.chunk < 0 || a.chunk >= chunks)
      return error(llvm::formatv("stage {0} runs {1}, but there are only {2} "
                                 "chunks (P·V = {3}·{4})",
                                 s, describe(a), chunks, shape.stages,
                                 shape.virtualStages));
    if (a.microBatch < 0 || a.microBatch >= mbs)
      return error(llvm::formatv("stage {0} runs {1}, but there are only {2} "
                                 "micro-batches",
                                 s, describe(a), mbs));
    if (shape.stageOfChunk(a.chunk) != s)
      return error(llvm::formatv("stage {0} runs {1}, but chunk {2} runs on "
                                 "stage {3}",
                                 s, describe(a), a.chunk,
                                 shape.stageOfChunk(a.chunk)));
    int64_t index = a.chunk * mbs + a.microBatch;
    bool fwd = a.phase == Phase::Forward;
    if (seen[fwd ? 0 : 1][index])
      return error(
          llvm::formatv("stage {0} runs {1} more than once", s, describe(a)));
    if (!fwd && !seen[0][index])
      return error(llvm::formatv("stage {0} runs {1} before F{2}.{3}", s,
                                 describe(a), a.chunk, a.microBatch));
    seen[fwd ? 0 : 1][index] = true;
  }
  for (int64_t c = s; c < chunks; c += shape.stages)
    for (int64_t m = 0; m < mbs; ++m)
      for (Phase phase : {Phase::Forward, Phase::Backward})
        if (!seen[phase == Phase::Forward ? 0 : 1][c * mbs + m])
          return error(llvm::formatv("stage {0} never runs {1}", s,
                                     describe(Action{phase, c, m})));
  return llvm::Error::success();
}

/// Checks 2 and 3: runs every stage's comm events together, with sends that
/// never block and recvs that block until their message has been posted.
class CommSimulation {
public:
  CommSimulation(const Shape &shape, ArrayRef<StageActions> actions,
                 ArrayRef<ChunkComms> comms)
      : shape(shape), actions(actions), comms(comms), cursors(actions.size()) {}

  llvm::Error run() {
    while (true) {
      bool progress = false, allDone = true;
      for (int64_t s = 0, e = actions.size(); s < e; ++s) {
        llvm::Expected<bool> moved = advance(s);
        if (!moved)
          return moved.takeError();
        progress |= *moved;
        allDone &= done(s);
      }
      if (allDone)
        break;
      if (!progress)
        return deadlock();
    }
    if (!pending.empty()) {
      const Message &msg = *pending.begin();
      const Origin &from = posted.at(msg);
      return error(llvm::formatv("the send of {0} (stage {1} at {2}) has no "
                                 "matching recv",
                                 msg.str(), from.stage, describe(from.action)));
    }
    return llvm::Error::success();
  }

private:
  /// Position of a stage: the next action and the next event within it.
  struct Cursor {
    size_t action = 0, event = 0;
  };

  bool done(int64_t s) const { return cursors[s].action >= actions[s].size(); }

  bool validChunk(int64_t c) const { return c >= 0 && c < shape.numChunks(); }

  /// Runs stage `s` as far as it can go; true if it moved.
  llvm::Expected<bool> advance(int64_t s) {
    Cursor &cur = cursors[s];
    bool moved = false;
    while (!done(s)) {
      const Action &a = actions[s][cur.action];
      const std::vector<CommEvent> &events = eventsOf(a, comms);
      if (cur.event >= events.size()) {
        ++cur.action;
        cur.event = 0;
        moved = true;
        continue;
      }
      const CommEvent &e = events[cur.event];
      if (!validChunk(e.peer))
        return error(llvm::formatv(
            "stage {0} at {1} {2} chunk {3} on channel {4}, but there is no "
            "chunk {3} (chunks are 0..{5})",
            s, describe(a), e.isSend ? "sends to" : "receives from", e.peer,
            e.channel, shape.numChunks() - 1));
      Message msg = Message::of(a, e);
      if (e.isSend) {
        auto [it, inserted] = posted.try_emplace(msg, Origin{s, a});
        if (!inserted)
          return error(llvm::formatv(
              "stage {0} at {1} sends {2}, which stage {3} already sent at {4}",
              s, describe(a), msg.str(), it->second.stage,
              str(it->second.action)));
        pending.insert(msg);
      } else if (!pending.erase(msg)) {
        break; // Blocked until the message is posted.
      }
      ++cur.event;
      moved = true;
    }
    return moved;
  }

  /// The message stage `s` is blocked on.
  Message awaited(int64_t s) const {
    const Action &a = actions[s][cursors[s].action];
    return Message::of(a, eventsOf(a, comms)[cursors[s].event]);
  }

  /// The action at which some stage will later send `msg`, if any.
  std::optional<std::pair<int64_t, Action>> laterSender(const Message &msg) {
    for (int64_t s = 0, e = actions.size(); s < e; ++s) {
      if (done(s))
        continue;
      const Cursor &cur = cursors[s];
      for (size_t i = cur.action; i < actions[s].size(); ++i) {
        const Action &a = actions[s][i];
        const std::vector<CommEvent> &events = eventsOf(a, comms);
        for (size_t j = i == cur.action ? cur.event : 0; j < events.size(); ++j)
          if (events[j].isSend && Message::of(a, events[j]) == msg)
            return std::make_pair(s, a);
      }
    }
    return std::nullopt;
  }

  /// No stage can move: reports a blocked stage, preferring one whose
  /// message is never sent (the root cause) over one caught in a cycle.
  llvm::Error deadlock() {
    std::optional<int64_t> chosen;
    for (int64_t s = 0, e = actions.size(); s < e; ++s) {
      if (done(s))
        continue;
      if (!chosen)
        chosen = s;
      if (!laterSender(awaited(s))) {
        chosen = s;
        break;
      }
    }
    int64_t s = *chosen;
    const Action &a = actions[s][cursors[s].action];
    Message msg = awaited(s);
    std::string why;
    if (auto sender = laterSender(msg)) {
      auto [other, at] = *sender;
      why = llvm::formatv("which stage {0} sends only later, at {1}", other,
                          str(at))
                .str();
      if (!done(other) && other != s)
        why += llvm::formatv(" (stage {0} is itself blocked at {1})", other,
                             str(actions[other][cursors[other].action]))
                   .str();
    } else if (auto it = posted.find(msg); it != posted.end()) {
      why = llvm::formatv("which stage {0} sends only once, at {1}, and an "
                          "earlier recv already received",
                          it->second.stage, str(it->second.action))
                .str();
    } else {
      why = "which is never sent";
    }
    return error(llvm::formatv("stage {0} (chunk {1}) deadlocks at {2}: it "
                               "waits for channel {3} from chunk {4}, "
                               "micro-batch {5}, {6}",
                               s, a.chunk, describe(a), msg.channel, msg.src,
                               msg.microBatch, why));
  }

  const Shape &shape;
  ArrayRef<StageActions> actions;
  ArrayRef<ChunkComms> comms;
  std::vector<Cursor> cursors;
  /// Every message ever sent, and where.
  std::map<Message, Origin> posted;
  /// Sent messages not received yet.
  std::set<Message> pending;
};

} // namespace

std::optional<Kind> tessera::tsrt::schedule::parseKind(StringRef name) {
  return llvm::StringSwitch<std::optional<Kind>>(name)
      .Case("gpipe", Kind::GPipe)
      .Case("1f1b", Kind::OneFOneB)
      .Case("interleaved", Kind::Interleaved)
      .Default(std::nullopt);
}

const char *tessera::tsrt::schedule::kindName(Kind kind) {
  switch (kind) {
  case Kind::GPipe:
    return "gpipe";
  case Kind::OneFOneB:
    return "1f1b";
  case Kind::Interleaved:
    return "interleaved";
  }
  llvm_unreachable("unknown schedule kind");
}

llvm::Error tessera::tsrt::schedule::checkShape(Kind kind, const Shape &shape) {
  int64_t p = shape.stages, v = shape.virtualStages, m = shape.microBatches;
  if (p < 1)
    return error(llvm::formatv("--pp must be >= 1 (got {0})", p));
  if (v < 1)
    return error(llvm::formatv("--virtual-stages must be >= 1 (got {0})", v));
  if (m < 1)
    return error(llvm::formatv("--micro-batches must be >= 1 (got {0})", m));
  if (kind != Kind::Interleaved) {
    if (v != 1)
      return error(llvm::formatv("--virtual-stages {0} needs --schedule "
                                 "interleaved (--schedule {1} runs one chunk "
                                 "per stage)",
                                 v, kindName(kind)));
    return llvm::Error::success();
  }
  if (v < 2)
    return error(llvm::formatv("--schedule interleaved needs "
                               "--virtual-stages >= 2 (got {0})",
                               v));
  if (m % p != 0)
    return error(llvm::formatv("--schedule interleaved needs --micro-batches "
                               "(M) to be a multiple of --pp (P): M = {0}, "
                               "P = {1}",
                               m, p));
  return llvm::Error::success();
}

llvm::Expected<std::vector<StageActions>>
tessera::tsrt::schedule::build(Kind kind, const Shape &shape) {
  if (llvm::Error err = checkShape(kind, shape))
    return err;
  int64_t p = shape.stages, v = shape.virtualStages, m = shape.microBatches;
  std::vector<StageActions> stages(p);
  for (int64_t r = 0; r < p; ++r) {
    StageActions &out = stages[r];
    auto fwd = [&](int64_t c, int64_t mb) {
      out.push_back({Phase::Forward, c, mb});
    };
    auto bwd = [&](int64_t c, int64_t mb) {
      out.push_back({Phase::Backward, c, mb});
    };
    switch (kind) {
    case Kind::GPipe:
      for (int64_t mb = 0; mb < m; ++mb)
        fwd(r, mb);
      for (int64_t mb = 0; mb < m; ++mb)
        bwd(r, mb);
      break;
    case Kind::OneFOneB: {
      int64_t warmup = std::min(p - r - 1, m);
      for (int64_t mb = 0; mb < warmup; ++mb)
        fwd(r, mb);
      for (int64_t i = 0; i < m - warmup; ++i) {
        fwd(r, warmup + i);
        bwd(r, i);
      }
      for (int64_t mb = m - warmup; mb < m; ++mb)
        bwd(r, mb);
      break;
    }
    case Kind::Interleaved: {
      // Megatron-LM's forward_backward_pipelining_with_interleaving: virtual
      // micro-batch k (0 <= k < V·M) walks micro-batches in groups of P; in
      // each group of P·V, forwards take the chunks in ascending order and
      // backwards in descending order.
      int64_t total = v * m, group = p * v;
      auto chunkOf = [&](int64_t k, bool forward) {
        int64_t local = (k % group) / p;
        return (forward ? local : v - local - 1) * p + r;
      };
      auto microBatchOf = [&](int64_t k) { return (k / group) * p + k % p; };
      int64_t warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
      for (int64_t k = 0; k < warmup; ++k)
        fwd(chunkOf(k, true), microBatchOf(k));
      for (int64_t k = 0; k < total - warmup; ++k) {
        fwd(chunkOf(k + warmup, true), microBatchOf(k + warmup));
        bwd(chunkOf(k, false), microBatchOf(k));
      }
      for (int64_t k = total - warmup; k < total; ++k)
        bwd(chunkOf(k, false), microBatchOf(k));
      break;
    }
    }
  }
  return stages;
}

std::string tessera::tsrt::schedule::format(const StageActions &actions) {
  std::string out;
  for (const Action &a : actions) {
    if (!out.empty())
      out += ' ';
    out += str(a);
  }
  return out;
}

llvm::Expected<StageActions> tessera::tsrt::schedule::parse(StringRef text) {
  StageActions actions;
  if (text.empty())
    return actions;
  llvm::SmallVector<StringRef> tokens;
  text.split(tokens, ' ');
  for (StringRef token : tokens) {
    auto bad = [&] {
      return error(llvm::formatv("bad action '{0}' (expected "
                                 "<F|B><chunk>.<micro-batch>, e.g. F0.1, "
                                 "separated by single spaces)",
                                 token));
    };
    // A non-empty run of decimal digits that fits in int64_t.
    auto number = [](StringRef digits, int64_t &value) {
      return !digits.empty() && llvm::all_of(digits, llvm::isDigit) &&
             !digits.getAsInteger(10, value);
    };
    Action a;
    if (token.starts_with("F"))
      a.phase = Phase::Forward;
    else if (token.starts_with("B"))
      a.phase = Phase::Backward;
    else
      return bad();
    auto [chunk, microBatch] = token.drop_front().split('.');
    if (!token.drop_front().contains('.') || !number(chunk, a.chunk) ||
        !number(microBatch, a.microBatch))
      return bad();
    actions.push_back(a);
  }
  return actions;
}

int64_t tessera::tsrt::schedule::inFlightBound(Kind kind, const Shape &shape,
                                               int64_t stage) {
  int64_t p = shape.stages, v = shape.virtualStages, m = shape.microBatches;
  switch (kind) {
  case Kind::GPipe:
    return v * m;
  case Kind::OneFOneB:
    return std::min(p - stage, m);
  case Kind::Interleaved:
    return std::min((p - stage - 1) * 2 + (v - 1) * p + 1, v * m);
  }
  llvm_unreachable("unknown schedule kind");
}

std::vector<int64_t>
tessera::tsrt::schedule::peakInFlight(ArrayRef<StageActions> actions) {
  std::vector<int64_t> peaks;
  for (const StageActions &stage : actions) {
    int64_t live = 0, peak = 0;
    for (const Action &a : stage) {
      live += a.phase == Phase::Forward ? 1 : -1;
      peak = std::max(peak, live);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

std::vector<std::vector<std::vector<int64_t>>>
tessera::tsrt::schedule::sendReleases(ArrayRef<StageActions> actions,
                                      ArrayRef<ChunkComms> comms) {
  auto eventsOf = [&](const Action &a) -> ArrayRef<CommEvent> {
    if (a.chunk < 0 || a.chunk >= static_cast<int64_t>(comms.size()))
      return {};
    return a.phase == Phase::Forward ? comms[a.chunk].forward
                                     : comms[a.chunk].backward;
  };
  // Where each message is sent and received: (micro-batch, channel) ->
  // (stage, action index).
  using Where = std::pair<int64_t, int64_t>;
  std::map<std::pair<int64_t, int64_t>, Where> sentAt, receivedAt;
  for (auto [s, stage] : llvm::enumerate(actions))
    for (auto [k, a] : llvm::enumerate(stage))
      for (const CommEvent &e : eventsOf(a))
        (e.isSend ? sentAt : receivedAt)[{a.microBatch, e.channel}] = {
            static_cast<int64_t>(s), static_cast<int64_t>(k)};

  std::vector<std::vector<std::vector<int64_t>>> out(actions.size());
  for (auto [s, stage] : llvm::enumerate(actions)) {
    int64_t n = static_cast<int64_t>(stage.size());
    out[s].resize(stage.size());
    for (auto [k, a] : llvm::enumerate(stage))
      for (const CommEvent &e : eventsOf(a)) {
        if (!e.isSend)
          continue;
        int64_t release = n;
        auto recv = receivedAt.find({a.microBatch, e.channel});
        if (recv != receivedAt.end()) {
          auto [q, j] = recv->second;
          for (int64_t later = static_cast<int64_t>(k) + 1;
               later < n && release == n; ++later)
            for (const CommEvent &r : eventsOf(stage[later])) {
              if (r.isSend)
                continue;
              auto from = sentAt.find({stage[later].microBatch, r.channel});
              if (from != sentAt.end() && from->second.first == q &&
                  from->second.second >= j) {
                release = later;
                break;
              }
            }
        }
        out[s][k].push_back(release);
      }
  }
  return out;
}

double tessera::tsrt::schedule::bubbleFraction(const Shape &shape) {
  double p = shape.stages, vm = shape.virtualStages * shape.microBatches;
  return (p - 1) / (vm + p - 1);
}

llvm::Error tessera::tsrt::schedule::verify(Kind kind, const Shape &shape,
                                            ArrayRef<StageActions> actions,
                                            ArrayRef<ChunkComms> comms) {
  if (llvm::Error err = checkShape(kind, shape))
    return err;
  if (static_cast<int64_t>(actions.size()) != shape.stages)
    return error(llvm::formatv("expected one action list per stage ({0}), "
                               "got {1}",
                               shape.stages, actions.size()));
  if (static_cast<int64_t>(comms.size()) != shape.numChunks())
    return error(llvm::formatv("expected the comms of every chunk ({0}), "
                               "got {1}",
                               shape.numChunks(), comms.size()));

  // 1. Every stage runs exactly its own actions.
  for (auto [s, stage] : llvm::enumerate(actions))
    if (llvm::Error err = checkCoverage(shape, s, stage))
      return err;

  // 4. Activation sets in flight stay within the schedule's bound; reports
  // the action at which a stage first goes over.
  for (auto [s, stage] : llvm::enumerate(actions)) {
    int64_t bound = inFlightBound(kind, shape, s), live = 0;
    for (const Action &a : stage) {
      live += a.phase == Phase::Forward ? 1 : -1;
      if (live > bound)
        return error(llvm::formatv("stage {0} holds {1} activation sets after "
                                   "{2}, but {3} allows at most {4} on that "
                                   "stage",
                                   s, live, describe(a), kindName(kind),
                                   bound));
    }
  }

  // 2 and 3. Sends and recvs match and the stages cannot deadlock.
  return CommSimulation(shape, actions, comms).run();
}

double Timeline::bubble() const {
  if (busy.empty() || makespan <= 0)
    return 0;
  double idle = 0;
  for (double b : busy)
    idle += 1 - b / makespan;
  return idle / busy.size();
}

Timeline tessera::tsrt::schedule::simulate(ArrayRef<StageActions> actions,
                                           ArrayRef<ChunkComms> comms,
                                           const Shape &shape,
                                           ArrayRef<double> fwd,
                                           ArrayRef<double> bwd,
                                           const ComputeSharing *sharing) {
  assert(static_cast<int64_t>(fwd.size()) >= shape.numChunks() &&
         static_cast<int64_t>(bwd.size()) >= shape.numChunks() &&
         "simulate needs a forward and a backward cost per chunk");
  (void)shape;
  size_t numStages = actions.size();
  Timeline timeline;
  timeline.busy.assign(numStages, 0);
  // Speed of a running stage when `running` stages run, relative to the
  // speed the costs were measured at (every rank busy).
  auto speed = [&](size_t running) {
    if (!sharing || running == 0)
      return 1.0;
    double calibrated =
        std::min(1.0, sharing->cores / double(sharing->processes));
    double active = double(running * sharing->processesPerStage);
    double waiting = std::max(0.0, double(sharing->processes) - active);
    double now = std::min(1.0, sharing->cores /
                                   (active + sharing->waitingShare * waiting));
    return now / calibrated;
  };
  std::vector<size_t> next(numStages, 0);
  // The running action of each stage: its start and its work left (in
  // calibrated seconds); a stage not running has left < 0.
  std::vector<double> started(numStages, 0), left(numStages, -1);
  // Ranks bound to cores: each running stage at its slowest rank's speed,
  // from the running and waiting ranks of that rank's core.
  bool bound = sharing && sharing->stageCores.size() == numStages;
  std::map<int64_t, int64_t> hosted; // ranks per core
  if (bound)
    for (const std::vector<int64_t> &cores : sharing->stageCores)
      for (int64_t core : cores)
        ++hosted[core];
  auto boundSpeeds = [&](std::vector<double> &v) {
    std::map<int64_t, int64_t> running; // running ranks per core
    for (size_t s = 0; s < numStages; ++s)
      if (left[s] >= 0)
        for (int64_t core : sharing->stageCores[s])
          ++running[core];
    for (size_t s = 0; s < numStages; ++s) {
      if (left[s] < 0)
        continue;
      v[s] = INFINITY;
      for (int64_t core : sharing->stageCores[s]) {
        int64_t h = hosted[core], active = running[core];
        double waiting = double(h - active);
        double now = std::min(
            1.0, 1.0 / (double(active) + sharing->waitingShare * waiting));
        v[s] = std::min(v[s], now / std::min(1.0, 1.0 / double(h)));
      }
      if (!std::isfinite(v[s]))
        v[s] = 1.0; // a stage without ranks listed
    }
  };
  // When each sent message becomes available: the end of its sending action.
  std::map<Message, double> sentAt;

  // Event-driven: at time `now`, every idle stage whose next action has all
  // its messages starts it; then time advances to the first end, at the
  // speed the number of running stages gives (1 without sharing), and the
  // actions ending then send their messages. A schedule that passes verify
  // always has a running stage until every action has run.
  double now = 0;
  while (true) {
    for (size_t s = 0; s < numStages; ++s) {
      if (left[s] >= 0 || next[s] >= actions[s].size())
        continue;
      const Action &a = actions[s][next[s]];
      bool ready = llvm::all_of(eventsOf(a, comms), [&](const CommEvent &e) {
        return e.isSend || sentAt.count(Message::of(a, e));
      });
      if (!ready)
        continue;
      started[s] = now;
      left[s] = a.phase == Phase::Forward ? fwd[a.chunk] : bwd[a.chunk];
    }
    size_t running = llvm::count_if(left, [](double l) { return l >= 0; });
    if (running == 0)
      break;
    std::vector<double> v(numStages, speed(running));
    if (bound)
      boundSpeeds(v);
    double step = INFINITY;
    for (size_t s = 0; s < numStages; ++s)
      if (left[s] >= 0)
        step = std::min(step, left[s] / v[s]);
    now += step;
    for (size_t s = 0; s < numStages; ++s) {
      if (left[s] < 0)
        continue;
      left[s] -= step * v[s];
      if (left[s] > 1e-12 * (1 + now))
        continue;
      const Action &a = actions[s][next[s]];
      for (const CommEvent &e : eventsOf(a, comms))
        if (e.isSend)
          sentAt[Message::of(a, e)] = now;
      timeline.busy[s] += now - started[s];
      timeline.makespan = std::max(timeline.makespan, now);
      left[s] = -1;
      ++next[s];
    }
  }
  return timeline;
}

double tessera::tsrt::schedule::fitWaitingShare(
    ArrayRef<StageActions> actions, ArrayRef<ChunkComms> comms,
    const Shape &shape, ArrayRef<double> fwd, ArrayRef<double> bwd,
    ComputeSharing sharing, double makespan) {
  auto at = [&](double share) {
    sharing.waitingShare = share;
    return simulate(actions, comms, shape, fwd, bwd, &sharing).makespan;
  };
  if (makespan <= at(0.0))
    return 0.0;
  if (makespan >= at(1.0))
    return 1.0;
  double lo = 0.0, hi = 1.0;
  while (hi - lo > 1e-4) {
    double mid = (lo + hi) / 2;
    (at(mid) < makespan ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

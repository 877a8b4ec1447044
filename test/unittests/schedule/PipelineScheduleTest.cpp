//===- PipelineScheduleTest.cpp - pipeline schedules and their checks -----===//

#include "common/schedule/PipelineSchedule.h"

#include "llvm/ADT/STLExtras.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <tuple>

using namespace tessera::tsrt::schedule;

namespace {

/// The comms of a straight pipeline over `numChunks` chunks: chunk c's
/// forward receives its input from c − 1 (channel 2c) and sends its output to
/// c + 1 (channel 2c + 2); its backward receives the output gradient from
/// c + 1 (channel 2c + 3) and sends the input gradient to c − 1 (channel
/// 2c + 1).
std::vector<ChunkComms> linearComms(int64_t numChunks) {
  std::vector<ChunkComms> comms(numChunks);
  for (int64_t c = 0; c < numChunks; ++c) {
    bool first = c == 0, last = c == numChunks - 1;
    if (!first)
      comms[c].forward.push_back({/*isSend=*/false, c - 1, 2 * c});
    if (!last)
      comms[c].forward.push_back({/*isSend=*/true, c + 1, 2 * c + 2});
    if (!last)
      comms[c].backward.push_back({/*isSend=*/false, c + 1, 2 * c + 3});
    if (!first)
      comms[c].backward.push_back({/*isSend=*/true, c - 1, 2 * c + 1});
  }
  return comms;
}

std::vector<StageActions> mustBuild(Kind kind, const Shape &shape) {
  auto built = build(kind, shape);
  if (!built) {
    ADD_FAILURE() << "build(" << kindName(kind) << ", P = " << shape.stages
                  << ", V = " << shape.virtualStages
                  << ", M = " << shape.microBatches
                  << "): " << llvm::toString(built.takeError());
    return {};
  }
  return std::move(*built);
}

/// One stage's actions per string, in the textual form.
std::vector<StageActions> parseAll(std::initializer_list<const char *> texts) {
  std::vector<StageActions> stages;
  for (const char *text : texts) {
    auto parsed = parse(text);
    if (!parsed) {
      ADD_FAILURE() << llvm::toString(parsed.takeError());
      return {};
    }
    stages.push_back(std::move(*parsed));
  }
  return stages;
}

/// verify's error message, or "" when the schedule is accepted.
std::string verifyError(Kind kind, const Shape &shape,
                        llvm::ArrayRef<StageActions> actions,
                        llvm::ArrayRef<ChunkComms> comms) {
  if (llvm::Error err = verify(kind, shape, actions, comms))
    return llvm::toString(std::move(err));
  return "";
}

std::string shapeError(Kind kind, const Shape &shape) {
  if (llvm::Error err = checkShape(kind, shape))
    return llvm::toString(std::move(err));
  return "";
}

/// The timeline with forward cost `fwd` and backward cost `bwd` per chunk.
Timeline simulateEqual(llvm::ArrayRef<StageActions> actions, const Shape &shape,
                       double fwd, double bwd) {
  std::vector<double> fwds(shape.numChunks(), fwd),
      bwds(shape.numChunks(), bwd);
  return simulate(actions, linearComms(shape.numChunks()), shape, fwds, bwds);
}

TEST(PipelineSchedule, KindNamesRoundTrip) {
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB, Kind::Interleaved})
    EXPECT_EQ(parseKind(kindName(kind)), kind);
  EXPECT_EQ(kindName(Kind::OneFOneB), std::string("1f1b"));
  EXPECT_EQ(parseKind("pipedream"), std::nullopt);
  EXPECT_EQ(parseKind(""), std::nullopt);
}

TEST(PipelineSchedule, CheckShapeNamesTheFlags) {
  EXPECT_EQ(shapeError(Kind::OneFOneB, {4, 1, 8}), "");
  EXPECT_EQ(shapeError(Kind::Interleaved, {2, 2, 4}), "");
  EXPECT_NE(shapeError(Kind::GPipe, {0, 1, 8}).find("--pp must be >= 1"),
            std::string::npos);
  EXPECT_NE(shapeError(Kind::GPipe, {2, 1, 0}).find("--micro-batches"),
            std::string::npos);
  EXPECT_NE(shapeError(Kind::OneFOneB, {2, 2, 4})
                .find("--virtual-stages 2 needs --schedule interleaved"),
            std::string::npos);
  EXPECT_NE(shapeError(Kind::Interleaved, {2, 1, 4})
                .find("interleaved needs --virtual-stages >= 2"),
            std::string::npos);
  std::string notMultiple = shapeError(Kind::Interleaved, {2, 2, 3});
  EXPECT_NE(notMultiple.find("--micro-batches"), std::string::npos);
  EXPECT_NE(notMultiple.find("--pp"), std::string::npos);
  EXPECT_NE(notMultiple.find("M = 3, P = 2"), std::string::npos);
  // build reports the same errors.
  auto built = build(Kind::Interleaved, {2, 2, 3});
  ASSERT_FALSE(built);
  EXPECT_NE(llvm::toString(built.takeError()).find("M = 3, P = 2"),
            std::string::npos);
}

TEST(PipelineSchedule, BuildsTheKnownOrders) {
  auto gpipe = mustBuild(Kind::GPipe, {2, 1, 3});
  ASSERT_EQ(gpipe.size(), 2u);
  EXPECT_EQ(format(gpipe[0]), "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2");
  EXPECT_EQ(format(gpipe[1]), "F1.0 F1.1 F1.2 B1.0 B1.1 B1.2");

  auto oneFOneB = mustBuild(Kind::OneFOneB, {4, 1, 8});
  ASSERT_EQ(oneFOneB.size(), 4u);
  EXPECT_EQ(format(oneFOneB[0]), "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 "
                                 "B0.2 F0.6 B0.3 F0.7 B0.4 B0.5 B0.6 B0.7");
  EXPECT_EQ(format(oneFOneB[3]), "F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 "
                                 "F3.4 B3.4 F3.5 B3.5 F3.6 B3.6 F3.7 B3.7");
  // Fewer micro-batches than stages: warm-up is capped at M.
  auto short1F1B = mustBuild(Kind::OneFOneB, {4, 1, 2});
  EXPECT_EQ(format(short1F1B[0]), "F0.0 F0.1 B0.0 B0.1");

  // Megatron-LM's interleaved order for P = 2, V = 2, M = 4: groups of P
  // micro-batches, chunks ascending for forwards and descending for
  // backwards; stage 0 warms up with (P − 1)·2 + (V − 1)·P = 4 forwards,
  // stage 1 with 2.
  auto interleaved = mustBuild(Kind::Interleaved, {2, 2, 4});
  ASSERT_EQ(interleaved.size(), 2u);
  EXPECT_EQ(format(interleaved[0]), "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 "
                                    "F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 B0.2 B0.3");
  EXPECT_EQ(format(interleaved[1]), "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 "
                                    "F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 B1.2 B1.3");
}

TEST(PipelineSchedule, GPipeAnd1F1BVerifyForAllSmallShapes) {
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB})
    for (int64_t p = 1; p <= 4; ++p)
      for (int64_t m = 1; m <= 8; ++m) {
        Shape shape{p, 1, m};
        auto actions = mustBuild(kind, shape);
        EXPECT_EQ(verifyError(kind, shape, actions, linearComms(p)), "")
            << kindName(kind) << " P = " << p << " M = " << m;
      }
}

TEST(PipelineSchedule, InterleavedVerifiesForAllSmallShapes) {
  for (int64_t p = 2; p <= 4; ++p)
    for (int64_t v = 2; v <= 3; ++v)
      for (int64_t m = p; m <= 8; m += p) {
        Shape shape{p, v, m};
        auto actions = mustBuild(Kind::Interleaved, shape);
        EXPECT_EQ(verifyError(Kind::Interleaved, shape, actions,
                              linearComms(shape.numChunks())),
                  "")
            << "P = " << p << " V = " << v << " M = " << m;
        std::vector<int64_t> peaks = peakInFlight(actions);
        for (int64_t r = 0; r < p; ++r)
          EXPECT_EQ(peaks[r], inFlightBound(Kind::Interleaved, shape, r))
              << "P = " << p << " V = " << v << " M = " << m << " stage " << r;
      }
}

// Send releases (sendReleases): the end of the first later action of the
// sender that receives a message the receiver sent once it had started the
// action receiving ours. GPipe, P = 2, M = 2 (linearComms): F0.0's and
// F0.1's activations are freed after B0.0, whose gradient stage 1 sent in
// B1.0 (after F1.0 and F1.1 received them); stage 1's gradients are never
// answered, so they wait until before the applies (index 4).
TEST(PipelineSchedule, SendReleasesGPipeAnd1F1B) {
  using Releases = std::vector<std::vector<std::vector<int64_t>>>;
  Shape shape{2, 1, 2};
  EXPECT_EQ(sendReleases(mustBuild(Kind::GPipe, shape), linearComms(2)),
            (Releases{{{2}, {2}, {}, {}}, {{}, {}, {4}, {4}}}));
  // 1F1B: stage 0 runs F0.0 F0.1 B0.0 B0.1 and stage 1 F1.0 B1.0 F1.1 B1.1;
  // F0.1's activation is received in F1.1, after B1.0 sent B0.0's gradient,
  // so it is freed only after B0.1.
  EXPECT_EQ(sendReleases(mustBuild(Kind::OneFOneB, shape), linearComms(2)),
            (Releases{{{2}, {3}, {}, {}}, {{}, {4}, {}, {4}}}));
}

// The release rule cannot deadlock with rendezvous sends: all stages run
// together, a recv blocks until its message is sent, and at the end of
// action k a stage blocks until the receiver of every send due there has
// posted its receive (started the receiving action); all remaining sends
// likewise before the applies. Every schedule finishes.
TEST(PipelineSchedule, SendReleasesCannotDeadlock) {
  auto runs = [](const std::vector<StageActions> &actions,
                 const std::vector<ChunkComms> &comms) {
    auto releases = sendReleases(actions, comms);
    size_t stages = actions.size();
    std::set<std::pair<int64_t, int64_t>> sent, posted;
    // Per stage: next action, next event in it, sends not yet released
    // (release point, micro-batch, channel).
    std::vector<size_t> pc(stages, 0), event(stages, 0);
    std::vector<std::vector<std::tuple<int64_t, int64_t, int64_t>>> pending(
        stages);
    auto events = [&](const Action &a) -> const std::vector<CommEvent> & {
      return a.phase == Phase::Forward ? comms[a.chunk].forward
                                       : comms[a.chunk].backward;
    };
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t s = 0; s < stages; ++s) {
        while (pc[s] <= actions[s].size()) {
          int64_t k = static_cast<int64_t>(pc[s]);
          bool done = pc[s] == actions[s].size();
          if (!done && event[s] == 0)
            for (const CommEvent &e : events(actions[s][k]))
              if (!e.isSend)
                posted.insert({actions[s][k].microBatch, e.channel});
          const std::vector<CommEvent> &evs =
              done ? std::vector<CommEvent>{} : events(actions[s][k]);
          bool blocked = false;
          for (; event[s] < evs.size(); ++event[s]) {
            const CommEvent &e = evs[event[s]];
            std::pair<int64_t, int64_t> msg{actions[s][k].microBatch,
                                            e.channel};
            if (e.isSend) {
              int64_t i = 0;
              for (size_t j = 0; j < event[s]; ++j)
                i += evs[j].isSend;
              sent.insert(msg);
              pending[s].push_back({releases[s][k][i], msg.first, e.channel});
            } else if (!sent.count(msg)) {
              blocked = true;
              break;
            }
          }
          if (blocked)
            break;
          bool waiting = false;
          for (auto &[at, mb, ch] : pending[s])
            if ((at == k || done) && !posted.count({mb, ch}))
              waiting = true;
          if (waiting)
            break;
          llvm::erase_if(pending[s], [&](const auto &p) {
            return std::get<0>(p) == k || done;
          });
          ++pc[s];
          event[s] = 0;
          progress = true;
        }
      }
    }
    for (size_t s = 0; s < stages; ++s)
      if (pc[s] <= actions[s].size())
        return false;
    return true;
  };
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB})
    for (int64_t p = 1; p <= 4; ++p)
      for (int64_t m = 1; m <= 8; ++m)
        EXPECT_TRUE(runs(mustBuild(kind, {p, 1, m}), linearComms(p)))
            << kindName(kind) << " P = " << p << " M = " << m;
  for (int64_t p = 2; p <= 4; ++p)
    for (int64_t v = 2; v <= 3; ++v)
      for (int64_t m = p; m <= 8; m += p)
        EXPECT_TRUE(
            runs(mustBuild(Kind::Interleaved, {p, v, m}), linearComms(p * v)))
            << "interleaved P = " << p << " V = " << v << " M = " << m;
}

// The point of 1F1B: stage r never keeps more than min(P − r, M) activation
// sets alive, where GPipe keeps all M.
TEST(PipelineSchedule, OneFOneBHoldsAtMostPMinusRankActivationSets) {
  Shape shape{4, 1, 8};
  EXPECT_EQ(peakInFlight(mustBuild(Kind::OneFOneB, shape)),
            (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(peakInFlight(mustBuild(Kind::GPipe, shape)),
            (std::vector<int64_t>{8, 8, 8, 8}));
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(inFlightBound(Kind::OneFOneB, shape, r), 4 - r);
    EXPECT_EQ(inFlightBound(Kind::GPipe, shape, r), 8);
  }
  // With fewer micro-batches than stages the bound is M.
  Shape few{4, 1, 2};
  EXPECT_EQ(peakInFlight(mustBuild(Kind::OneFOneB, few)),
            (std::vector<int64_t>{2, 2, 2, 1}));
}

TEST(PipelineSchedule, VerifyRejectsAMissingRecv) {
  Shape shape{2, 1, 2};
  auto actions = mustBuild(Kind::OneFOneB, shape);
  auto comms = linearComms(2);
  // Chunk 1's forward no longer receives chunk 0's output.
  comms[1].forward.erase(comms[1].forward.begin());
  std::string err = verifyError(Kind::OneFOneB, shape, actions, comms);
  EXPECT_NE(err.find("has no matching recv"), std::string::npos) << err;
  EXPECT_NE(err.find("channel 2 from chunk 0 to chunk 1, micro-batch 0"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("stage 0"), std::string::npos) << err;
}

TEST(PipelineSchedule, VerifyRejectsARecvThatIsNeverSent) {
  Shape shape{2, 1, 2};
  auto actions = mustBuild(Kind::OneFOneB, shape);
  auto comms = linearComms(2);
  // Chunk 0's forward no longer sends its output.
  comms[0].forward.clear();
  std::string err = verifyError(Kind::OneFOneB, shape, actions, comms);
  EXPECT_EQ(err, "stage 1 (chunk 1) deadlocks at F1.0 (chunk 1, micro-batch "
                 "0): it waits for channel 2 from chunk 0, micro-batch 0, "
                 "which is never sent");
}

TEST(PipelineSchedule, VerifyRejectsASendOrRecvRepeated) {
  Shape shape{2, 1, 2};
  auto actions = mustBuild(Kind::OneFOneB, shape);
  // Chunk 0's forward sends its output twice.
  auto comms = linearComms(2);
  comms[0].forward.push_back(comms[0].forward.back());
  EXPECT_EQ(verifyError(Kind::OneFOneB, shape, actions, comms),
            "stage 0 at F0.0 (chunk 0, micro-batch 0) sends channel 2 from "
            "chunk 0 to chunk 1, micro-batch 0, which stage 0 already sent "
            "at F0.0");
  // Chunk 1's forward receives its input twice.
  comms = linearComms(2);
  comms[1].forward.insert(comms[1].forward.begin(), comms[1].forward.front());
  EXPECT_EQ(verifyError(Kind::OneFOneB, shape, actions, comms),
            "stage 1 (chunk 1) deadlocks at F1.0 (chunk 1, micro-batch 0): it "
            "waits for channel 2 from chunk 0, micro-batch 0, which stage 0 "
            "sends only once, at F0.0, and an earlier recv already received");
}

TEST(PipelineSchedule, VerifyRejectsARecvFromNoChunk) {
  Shape shape{2, 1, 1};
  auto actions = mustBuild(Kind::GPipe, shape);
  auto comms = linearComms(2);
  comms[1].forward[0].peer = 7;
  std::string err = verifyError(Kind::GPipe, shape, actions, comms);
  EXPECT_NE(err.find("stage 1"), std::string::npos) << err;
  EXPECT_NE(err.find("micro-batch 0"), std::string::npos) << err;
  EXPECT_NE(err.find("no chunk 7"), std::string::npos) << err;
}

TEST(PipelineSchedule, VerifyRejectsACrossedOrder) {
  // Stage 0 runs B0.0 before sending micro-batch 1 forward; stage 1 runs
  // F1.1 before B1.0, whose gradient B0.0 waits for: a cycle. (GPipe's bound
  // allows both stages' activation sets, so only the deadlock is wrong.)
  Shape shape{2, 1, 2};
  auto actions = parseAll({"F0.0 B0.0 F0.1 B0.1", "F1.0 F1.1 B1.0 B1.1"});
  std::string err = verifyError(Kind::GPipe, shape, actions, linearComms(2));
  EXPECT_EQ(err, "stage 0 (chunk 0) deadlocks at B0.0 (chunk 0, micro-batch "
                 "0): it waits for channel 3 from chunk 1, micro-batch 0, "
                 "which stage 1 sends only later, at B1.0 (stage 1 is itself "
                 "blocked at F1.1)");

  // Under 1F1B: swapping F0.1 and B0.0 in the built schedule makes stage 0
  // wait for B1.0's gradient before it sends micro-batch 1, while stage 1,
  // running its micro-batches in the other order, needs micro-batch 1 first.
  actions = mustBuild(Kind::OneFOneB, shape);
  ASSERT_EQ(format(actions[0]), "F0.0 F0.1 B0.0 B0.1");
  std::swap(actions[0][1], actions[0][2]);
  actions[1] = parseAll({"F1.1 B1.1 F1.0 B1.0"})[0];
  err = verifyError(Kind::OneFOneB, shape, actions, linearComms(2));
  EXPECT_NE(err.find("stage 0 (chunk 0) deadlocks at B0.0"), std::string::npos)
      << err;
  EXPECT_NE(err.find("micro-batch 0"), std::string::npos) << err;
  EXPECT_NE(err.find("stage 1 sends only later, at B1.0"), std::string::npos)
      << err;
  EXPECT_NE(err.find("blocked at F1.1"), std::string::npos) << err;
}

TEST(PipelineSchedule, VerifyRejectsADuplicatedAction) {
  Shape shape{2, 1, 2};
  auto actions = mustBuild(Kind::OneFOneB, shape);
  actions[0].insert(actions[0].begin() + 1, actions[0][1]);
  std::string err = verifyError(Kind::OneFOneB, shape, actions, linearComms(2));
  EXPECT_EQ(err, "stage 0 runs F0.1 (chunk 0, micro-batch 1) more than once");
}

TEST(PipelineSchedule, VerifyRejectsAMissingAction) {
  Shape shape{2, 1, 2};
  auto actions = mustBuild(Kind::GPipe, shape);
  actions[1].pop_back();
  std::string err = verifyError(Kind::GPipe, shape, actions, linearComms(2));
  EXPECT_EQ(err, "stage 1 never runs B1.1 (chunk 1, micro-batch 1)");
}

TEST(PipelineSchedule, VerifyRejectsAChunkOnTheWrongStage) {
  Shape shape{2, 1, 2};
  auto actions = parseAll({"F0.0 F1.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"});
  std::string err = verifyError(Kind::GPipe, shape, actions, linearComms(2));
  EXPECT_EQ(err, "stage 0 runs F1.1 (chunk 1, micro-batch 1), but chunk 1 "
                 "runs on stage 1");
  // A chunk that does not exist at all.
  actions = parseAll({"F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F3.1 B1.1"});
  err = verifyError(Kind::GPipe, shape, actions, linearComms(2));
  EXPECT_NE(err.find("stage 1 runs F3.1"), std::string::npos) << err;
  EXPECT_NE(err.find("micro-batch 1"), std::string::npos) << err;
}

TEST(PipelineSchedule, VerifyRejectsBackwardBeforeForward) {
  Shape shape{2, 1, 2};
  auto actions = parseAll({"F0.0 B0.1 F0.1 B0.0", "F1.0 B1.0 F1.1 B1.1"});
  std::string err = verifyError(Kind::GPipe, shape, actions, linearComms(2));
  EXPECT_EQ(err, "stage 0 runs B0.1 (chunk 0, micro-batch 1) before F0.1");
}

TEST(PipelineSchedule, VerifyRejectsExceedingTheInFlightBound) {
  // A schedule that calls itself 1F1B but runs GPipe's order: it cannot
  // deadlock, but stage 0 holds 5 activation sets after F0.4 where 1F1B
  // allows 4.
  Shape shape{4, 1, 8};
  auto actions = mustBuild(Kind::GPipe, shape);
  auto comms = linearComms(4);
  EXPECT_EQ(verifyError(Kind::GPipe, shape, actions, comms), "");
  std::string err = verifyError(Kind::OneFOneB, shape, actions, comms);
  EXPECT_EQ(err, "stage 0 holds 5 activation sets after F0.4 (chunk 0, "
                 "micro-batch 4), but 1f1b allows at most 4 on that stage");
}

TEST(PipelineSchedule, VerifyRejectsWrongSizes) {
  Shape shape{2, 1, 2};
  auto actions = mustBuild(Kind::OneFOneB, shape);
  EXPECT_NE(verifyError(Kind::OneFOneB, shape, {actions[0]}, linearComms(2))
                .find("one action list per stage (2)"),
            std::string::npos);
  EXPECT_NE(verifyError(Kind::OneFOneB, shape, actions, linearComms(3))
                .find("comms of every chunk (2)"),
            std::string::npos);
  EXPECT_NE(verifyError(Kind::OneFOneB, {2, 2, 2}, actions, linearComms(2))
                .find("--virtual-stages 2 needs --schedule interleaved"),
            std::string::npos);
}

TEST(PipelineSchedule, FormatAndParseRoundTrip) {
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB}) {
    for (const StageActions &stage : mustBuild(kind, {3, 1, 5})) {
      auto parsed = parse(format(stage));
      ASSERT_TRUE(static_cast<bool>(parsed))
          << llvm::toString(parsed.takeError());
      EXPECT_EQ(*parsed, stage);
    }
  }
  auto interleaved = mustBuild(Kind::Interleaved, {2, 3, 4});
  for (const StageActions &stage : interleaved) {
    auto parsed = parse(format(stage));
    ASSERT_TRUE(static_cast<bool>(parsed))
        << llvm::toString(parsed.takeError());
    EXPECT_EQ(*parsed, stage);
  }
  auto parsed = parse("F12.3 B0.10");
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0], (Action{Phase::Forward, 12, 3}));
  EXPECT_EQ((*parsed)[1], (Action{Phase::Backward, 0, 10}));
  EXPECT_EQ(format(*parsed), "F12.3 B0.10");
  // The empty list.
  parsed = parse("");
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_TRUE(parsed->empty());
  EXPECT_EQ(format({}), "");
}

TEST(PipelineSchedule, ParseNamesTheBadToken) {
  for (const char *bad : {"F0", "X1.2", "F1.-1", "F.1", "F1.", "F1.2x", "B+1.2",
                          "F99999999999999999999.0"}) {
    auto parsed = parse(std::string("F0.0 ") + bad + " B0.0");
    ASSERT_FALSE(static_cast<bool>(parsed)) << bad;
    std::string err = llvm::toString(parsed.takeError());
    EXPECT_NE(err.find(std::string("'") + bad + "'"), std::string::npos) << err;
  }
  // Single spaces only.
  auto parsed = parse("F0.0  F0.1");
  ASSERT_FALSE(static_cast<bool>(parsed));
  llvm::consumeError(parsed.takeError());
  parsed = parse("F0.0 ");
  ASSERT_FALSE(static_cast<bool>(parsed));
  llvm::consumeError(parsed.takeError());
}

TEST(PipelineSchedule, BubbleFraction) {
  EXPECT_DOUBLE_EQ(bubbleFraction({4, 1, 8}), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubbleFraction({1, 1, 8}), 0.0);
  EXPECT_DOUBLE_EQ(bubbleFraction({4, 2, 8}), 3.0 / 19.0);
}

TEST(PipelineSchedule, SimulatedBubbleMatchesTheFormula) {
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB})
    for (int64_t p = 1; p <= 4; ++p)
      for (int64_t m = 1; m <= 8; ++m) {
        Shape shape{p, 1, m};
        Timeline t = simulateEqual(mustBuild(kind, shape), shape, 1, 2);
        ASSERT_EQ(t.busy.size(), static_cast<size_t>(p));
        for (double busy : t.busy)
          EXPECT_DOUBLE_EQ(busy, 3.0 * m);
        EXPECT_NEAR(t.makespan, 3.0 * (m + p - 1), 1e-9)
            << kindName(kind) << " P = " << p << " M = " << m;
        EXPECT_NEAR(t.bubble(), bubbleFraction(shape), 1e-9)
            << kindName(kind) << " P = " << p << " M = " << m;
      }
}

TEST(PipelineSchedule, InterleavedSimulatesWithASmallerBubble) {
  for (int64_t p = 2; p <= 4; ++p)
    for (int64_t m = p; m <= 8; m += p)
      for (int64_t v = 2; v <= 3; ++v) {
        // The same model cut into V times as many chunks, each 1/V the cost.
        Shape shape{p, v, m};
        Timeline interleaved = simulateEqual(
            mustBuild(Kind::Interleaved, shape), shape, 1.0 / v, 2.0 / v);
        Shape plain{p, 1, m};
        Timeline oneFOneB =
            simulateEqual(mustBuild(Kind::OneFOneB, plain), plain, 1, 2);
        for (double busy : interleaved.busy)
          EXPECT_NEAR(busy, 3.0 * m, 1e-9);
        EXPECT_LT(interleaved.bubble(), oneFOneB.bubble())
            << "P = " << p << " V = " << v << " M = " << m;
        EXPECT_LT(interleaved.makespan, oneFOneB.makespan);
      }
}

// Oversubscribed ranks (CPU backend): a stage waiting for a message gives
// its core away, so the others run faster than their calibrated (all busy)
// speed.
TEST(PipelineSchedule, SharedCoresMakeBubblesCheaper) {
  Shape shape{2, 1, 1};
  std::vector<StageActions> actions = mustBuild(Kind::GPipe, shape);
  std::vector<double> fwd(2, 1.0), bwd(2, 2.0);
  std::vector<ChunkComms> comms = linearComms(2);
  // 2 ranks on 1 core, a waiting rank yielding its core entirely: one
  // stage at a time runs at twice its calibrated speed, so F0 F1 B1 B0 take
  // (1 + 1 + 2 + 2) / 2.
  ComputeSharing oneCore{2, 1, 1.0, 0.0};
  Timeline shared = simulate(actions, comms, shape, fwd, bwd, &oneCore);
  EXPECT_NEAR(shared.makespan, 3.0, 1e-9);
  EXPECT_NEAR(shared.busy[0], 1.5, 1e-9);
  Timeline alone = simulate(actions, comms, shape, fwd, bwd);
  EXPECT_NEAR(alone.makespan, 6.0, 1e-9);
  // A waiting rank that keeps spinning (share 1) gives nothing away; one
  // that keeps half its share leaves the runner 2 / 1.5 of its speed.
  ComputeSharing spinning{2, 1, 1.0, 1.0}, half{2, 1, 1.0, 0.5};
  EXPECT_NEAR(simulate(actions, comms, shape, fwd, bwd, &spinning).makespan,
              6.0, 1e-9);
  EXPECT_NEAR(simulate(actions, comms, shape, fwd, bwd, &half).makespan,
              6.0 * 1.5 / 2.0, 1e-9);

  // As many cores as ranks: no change.
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB})
    for (int64_t p = 1; p <= 4; ++p)
      for (int64_t m = 1; m <= 8; ++m) {
        Shape sh{p, 1, m};
        std::vector<StageActions> acts = mustBuild(kind, sh);
        std::vector<double> f(p, 1.0), b(p, 2.0);
        ComputeSharing enough{p, 1, double(p), 0.0};
        EXPECT_NEAR(simulate(acts, linearComms(p), sh, f, b, &enough).makespan,
                    simulate(acts, linearComms(p), sh, f, b).makespan, 1e-9);
      }

  // 1F1B, 4 stages of 1 rank on 2 cores, 8 micro-batches: the bubble is
  // partly absorbed. The step still needs the total work (4 x 8 x 3
  // calibrated seconds at speed 1/2 = 48 core-seconds) on 2 cores.
  Shape four{4, 1, 8};
  std::vector<double> f4(4, 1.0), b4(4, 2.0);
  ComputeSharing twoCores{4, 1, 2.0, 0.0};
  Timeline t = simulate(mustBuild(Kind::OneFOneB, four), linearComms(4), four,
                        f4, b4, &twoCores);
  EXPECT_GE(t.makespan, 24.0 - 1e-9);
  EXPECT_LT(t.makespan, 3.0 * (8 + 4 - 1));
}

// Ranks bound to cores (mpirun --map-by core --bind-to core): a running
// stage can only use its own core, however idle the others are.
TEST(PipelineSchedule, BoundRanksCannotBorrowAnIdleCore) {
  // pp=2 x dp=2 on 2 cores, rank r on core r mod 2: each core hosts one
  // rank of each stage, so per-core sharing is the pooled sharing.
  for (int64_t m : {1, 4, 8})
    for (double share : {0.0, 0.3, 1.0}) {
      Shape shape{2, 1, m};
      std::vector<StageActions> actions = mustBuild(Kind::OneFOneB, shape);
      std::vector<double> fwd{1.0, 1.5}, bwd{2.0, 3.5};
      ComputeSharing pooled{4, 2, 2.0, share};
      ComputeSharing bound = pooled;
      bound.stageCores = {{0, 1}, {0, 1}};
      EXPECT_NEAR(
          simulate(actions, linearComms(2), shape, fwd, bwd, &bound).makespan,
          simulate(actions, linearComms(2), shape, fwd, bwd, &pooled).makespan,
          1e-9)
          << "M = " << m << " share " << share;
    }

  // pp=4 on 2 cores: stages 0 and 2 on core 0, 1 and 3 on core 1, the last
  // stage three times as heavy. Core 1 must run 8 x (1 + 2) of stage 1 and
  // 8 x (3 + 6) of stage 3, calibrated at half a core: 48 seconds at
  // least. Pooled, stage 3 borrows core 0 while stages 0 and 2 wait and
  // finishes sooner; bound, it cannot.
  Shape four{4, 1, 8};
  std::vector<StageActions> actions = mustBuild(Kind::OneFOneB, four);
  std::vector<double> fwd{1, 1, 1, 3}, bwd{2, 2, 2, 6};
  ComputeSharing pooled{4, 1, 2.0, 0.0};
  ComputeSharing bound = pooled;
  bound.stageCores = {{0}, {1}, {0}, {1}};
  double pooledSpan =
      simulate(actions, linearComms(4), four, fwd, bwd, &pooled).makespan;
  double boundSpan =
      simulate(actions, linearComms(4), four, fwd, bwd, &bound).makespan;
  EXPECT_GE(boundSpan, 48.0 - 1e-9);
  EXPECT_LT(pooledSpan, 48.0);
  // Without sharing (every stage on its own core at calibrated speed) the
  // step is longer still: the last stage's 72 seconds.
  EXPECT_GE(simulate(actions, linearComms(4), four, fwd, bwd).makespan, 72.0);
  EXPECT_LT(boundSpan, 72.0);
}

TEST(PipelineSchedule, FitWaitingShareInvertsSimulate) {
  // 2 stages on 1 core, 1F1B, 4 micro-batches: the makespan simulated for a
  // share is fitted back to that share; outside the share-0..1 range the
  // fit clamps.
  Shape shape{2, 1, 4};
  std::vector<StageActions> actions = mustBuild(Kind::OneFOneB, shape);
  std::vector<ChunkComms> comms = linearComms(2);
  std::vector<double> fwd{1.0, 1.0}, bwd{2.0, 2.0};
  ComputeSharing sharing{2, 1, 1.0, 0.0};
  for (double share : {0.1, 0.37, 0.5, 0.9}) {
    sharing.waitingShare = share;
    double makespan =
        simulate(actions, comms, shape, fwd, bwd, &sharing).makespan;
    EXPECT_NEAR(
        fitWaitingShare(actions, comms, shape, fwd, bwd, sharing, makespan),
        share, 1e-3)
        << "share " << share;
  }
  sharing.waitingShare = 0.0;
  double free = simulate(actions, comms, shape, fwd, bwd, &sharing).makespan;
  sharing.waitingShare = 1.0;
  double spinning =
      simulate(actions, comms, shape, fwd, bwd, &sharing).makespan;
  ASSERT_LT(free, spinning);
  EXPECT_EQ(
      fitWaitingShare(actions, comms, shape, fwd, bwd, sharing, 0.5 * free),
      0.0);
  EXPECT_EQ(
      fitWaitingShare(actions, comms, shape, fwd, bwd, sharing, 2 * spinning),
      1.0);
}

TEST(PipelineSchedule, TimelineBubbleAveragesStages) {
  Timeline t;
  EXPECT_EQ(t.bubble(), 0.0);
  t.busy = {10, 5};
  t.makespan = 10;
  EXPECT_DOUBLE_EQ(t.bubble(), 0.25);
}

} // namespace

//===- WatchdogTest.cpp - the collective watchdog's tracker and decision --===//
//
// Serial: the in-flight tracker, the decision function and the message,
// and the /proc liveness check on real child processes (no MPI_Init).
//
//===----------------------------------------------------------------------===//

#include "runtime/collectives/mpi/Watchdog.h"

#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace tessera::runtime::mpi::watchdog;

namespace {

constexpr int64_t kSecond = 1000000000;

TEST(WatchdogTracker, NumbersOperationsAndClearsThem) {
  EXPECT_EQ(inFlight().seq, 0u);
  uint64_t before = lastSequence();
  {
    Guard g("all_reduce", 4);
    Operation op = inFlight();
    EXPECT_EQ(op.seq, before + 1);
    EXPECT_STREQ(op.name, "all_reduce");
    EXPECT_EQ(op.ranks, 4);
    EXPECT_EQ(op.peer, -1);
    EXPECT_LE(op.startNs, nowNs());
    {
      // Nested: only the outermost counts.
      Guard inner("barrier", 2);
      EXPECT_EQ(inFlight().seq, before + 1);
      EXPECT_STREQ(inFlight().name, "all_reduce");
    }
    EXPECT_EQ(inFlight().seq, before + 1);
  }
  EXPECT_EQ(inFlight().seq, 0u);
  {
    Guard g("recv", 2, 1);
    EXPECT_EQ(inFlight().seq, before + 2);
    EXPECT_EQ(inFlight().peer, 1);
  }
  EXPECT_EQ(lastSequence(), before + 2);
}

TEST(WatchdogTracker, Describes) {
  Operation op;
  op.name = "all_reduce";
  op.ranks = 4;
  EXPECT_EQ(describe(op), "all_reduce over 4 ranks");
  op.name = "send";
  op.peer = 3;
  EXPECT_EQ(describe(op), "send to rank 3 of 4");
  op.name = "recv";
  EXPECT_EQ(describe(op), "recv from rank 3 of 4");
  op.name = "wait for recv";
  op.ranks = 0;
  op.peer = -1;
  EXPECT_EQ(describe(op), "wait for recv");
}

Operation running(uint64_t seq, int64_t start) {
  Operation op;
  op.seq = seq;
  op.name = "all_reduce";
  op.ranks = 4;
  op.startNs = start;
  return op;
}

TEST(WatchdogDecide, NothingInFlightDecidesNothing) {
  // Even with a dead peer and a start time far in the past.
  Decision d = decide(Operation(), 100 * kSecond, 2.0, {true, false});
  EXPECT_EQ(d.verdict, Verdict::Continue);
}

TEST(WatchdogDecide, TimesOutAtTheTimeout) {
  Operation op = running(7, 10 * kSecond);
  EXPECT_EQ(decide(op, 11 * kSecond, 2.0, {true}).verdict, Verdict::Continue);
  EXPECT_EQ(decide(op, 12 * kSecond - 1, 2.0, {true}).verdict,
            Verdict::Continue);
  EXPECT_EQ(decide(op, 12 * kSecond, 2.0, {true}).verdict, Verdict::TimedOut);
  // No timeout: never.
  EXPECT_EQ(decide(op, 1000 * kSecond, 0.0, {true}).verdict, Verdict::Continue);
}

TEST(WatchdogDecide, LostPeerComesFirstAndIsTheFirstLost) {
  Operation op = running(7, 10 * kSecond);
  Decision d = decide(op, 10 * kSecond, 2.0, {true, false, false});
  EXPECT_EQ(d.verdict, Verdict::PeerLost);
  EXPECT_EQ(d.lost, 1);
  // Also past the timeout: the lost peer is the better message.
  d = decide(op, 100 * kSecond, 2.0, {false, true});
  EXPECT_EQ(d.verdict, Verdict::PeerLost);
  EXPECT_EQ(d.lost, 0);
}

TEST(WatchdogMessage, NamesTheLostRankAndTheSequenceNumber) {
  Operation op = running(57, 10 * kSecond);
  Peer p;
  p.rank = 1;
  p.pid = 4242;
  p.host = "node7";
  Decision d;
  d.verdict = Verdict::PeerLost;
  d.lost = 0;
  EXPECT_EQ(
      formatFailure("tessera-run", 2, d, op, 10 * kSecond + 400000000, 2.0, &p),
      "tessera-run: error: rank 2: lost rank 1 (pid 4242 on node7) "
      "during collective #57 (all_reduce over 4 ranks, running 0.4 s); "
      "aborting");
  d.verdict = Verdict::TimedOut;
  EXPECT_EQ(
      formatFailure("tessera-run", 2, d, op, 12 * kSecond, 2.0, nullptr),
      "tessera-run: error: rank 2: collective #57 (all_reduce over 4 ranks) "
      "timed out after 2.0 s (--collective-timeout-s 2); a peer is lost or "
      "stuck; aborting");
}

TEST(WatchdogMessage, ATimeoutNamesTheStoppedPeers) {
  Operation op = running(12, 10 * kSecond);
  Decision d;
  d.verdict = Verdict::TimedOut;
  Peer p;
  p.rank = 1;
  p.pid = 4242;
  p.host = "node7";
  Peer q = p;
  q.rank = 3;
  q.pid = 4343;
  EXPECT_EQ(formatFailure("tessera-run", 0, d, op, 11 * kSecond, 1.0, nullptr,
                          {p, q}),
            "tessera-run: error: rank 0: collective #12 (all_reduce over 4 "
            "ranks) timed out after 1.0 s (--collective-timeout-s 1); rank 1 "
            "(pid 4242 on node7) is stopped; rank 3 (pid 4343 on node7) is "
            "stopped; aborting");
}

TEST(WatchdogMessage, ATimeoutNamesThePeersOnOtherHostsByHost) {
  // A host that died or was cut off: its ranks cannot be checked through
  // /proc from here, so the timeout names them, grouped by host.
  Operation op = running(670, 10 * kSecond);
  Decision d;
  d.verdict = Verdict::TimedOut;
  Peer a, b, c;
  a.rank = 2;
  a.host = "tmn-h2";
  b.rank = 3;
  b.host = "tmn-h2";
  c.rank = 4;
  c.host = "tmn-h3";
  EXPECT_EQ(formatFailure("tessera-run", 0, d, op, 12 * kSecond, 2.0, nullptr,
                          {}, {a, b, c}),
            "tessera-run: error: rank 0: collective #670 (all_reduce over 4 "
            "ranks) timed out after 2.0 s (--collective-timeout-s 2); ranks 2, "
            "3 on host tmn-h2; rank 4 on host tmn-h3 (another host: lost, "
            "stuck or cut off; not checkable from here); aborting");
  // A stopped peer on this host is the better clue: it is named instead.
  Peer s;
  s.rank = 1;
  s.pid = 4242;
  s.host = "tmn-h1";
  EXPECT_EQ(formatFailure("tessera-run", 0, d, op, 12 * kSecond, 2.0, nullptr,
                          {s}, {a}),
            "tessera-run: error: rank 0: collective #670 (all_reduce over 4 "
            "ranks) timed out after 2.0 s (--collective-timeout-s 2); rank 1 "
            "(pid 4242 on tmn-h1) is stopped; aborting");
}

TEST(WatchdogStartup, LauncherRankFromTheFirstVariableSet) {
  auto env = [](std::map<std::string, std::string> vars) {
    return [vars](const char *name) -> const char * {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  EXPECT_EQ(launcherRank(env({})), -1);
  EXPECT_EQ(launcherRank(env({{"OMPI_COMM_WORLD_RANK", "3"}})), 3);
  EXPECT_EQ(launcherRank(env({{"PMIX_RANK", "5"}, {"SLURM_PROCID", "7"}})), 5);
  EXPECT_EQ(launcherRank(env({{"PMI_RANK", "2"}})), 2);
  EXPECT_EQ(launcherRank(env({{"SLURM_PROCID", "7"}})), 7);
  // Not a number, or negative: the next one.
  EXPECT_EQ(
      launcherRank(env({{"OMPI_COMM_WORLD_RANK", "x"}, {"SLURM_PROCID", "1"}})),
      1);
  EXPECT_EQ(launcherRank(env({{"OMPI_COMM_WORLD_RANK", "-1"}})), -1);
  EXPECT_EQ(launcherRank(env({{"OMPI_COMM_WORLD_RANK", ""}})), -1);
}

TEST(WatchdogStartup, TimesOutAtTheTimeoutOnlyInAPhase) {
  EXPECT_FALSE(startupTimedOut(0, 100 * kSecond, 1.0)); // no phase
  EXPECT_FALSE(startupTimedOut(10 * kSecond, 10 * kSecond + 999999999, 1.0));
  EXPECT_TRUE(startupTimedOut(10 * kSecond, 11 * kSecond, 1.0));
  EXPECT_FALSE(startupTimedOut(10 * kSecond, 100 * kSecond, 0.0)); // off
}

TEST(WatchdogStartup, TheMessageNamesTheStoppedExitedAndMissingRanks) {
  LocalRank stopped{1, 4242, 'T'}, exited{2, 4343, 'Z'}, missing{3, 0, 0},
      running{4, 4444, 'S'};
  EXPECT_EQ(formatStartupFailure("tessera-run", 0,
                                 "MPI initialisation (MPI_Init)", 10 * kSecond,
                                 11 * kSecond + 200000000, 1.0,
                                 {stopped, exited, missing, running}),
            "tessera-run: error: rank 0: start-up did not finish within 1 s "
            "(--collective-timeout-s 1): MPI initialisation (MPI_Init) "
            "blocked for 1.2 s; rank 1 (pid 4242) is stopped; rank 2 (pid "
            "4343) has exited; rank 3 is not running; aborting");
  // Nobody to name (a peer on another host, or one merely slow).
  EXPECT_EQ(formatStartupFailure("tessera-run", 1,
                                 "collective #1 (all_gather over 2 ranks)",
                                 10 * kSecond, 12 * kSecond, 2.0, {running}),
            "tessera-run: error: rank 1: start-up did not finish within 2 s "
            "(--collective-timeout-s 2): collective #1 (all_gather over 2 "
            "ranks) blocked for 2.0 s; a peer is lost or stuck; aborting");
}

TEST(WatchdogStartup, ProcessStateSeesAStoppedChild) {
  EXPECT_EQ(processState(getpid()), 'R');
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  char st = 0;
  for (int i = 0; i < 200 && st != 'T'; ++i) {
    usleep(10000);
    st = processState(child);
  }
  EXPECT_EQ(st, 'T');
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(processState(child), 0);
  EXPECT_EQ(processState(0), 0);
}

TEST(WatchdogLiveness, SeesAKilledChildAsLostEvenAsAZombie) {
  EXPECT_TRUE(processAlive(getpid(), processStartTime(getpid())));
  EXPECT_NE(processStartTime(getpid()), 0u);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  uint64_t start = processStartTime(child);
  EXPECT_NE(start, 0u);
  EXPECT_TRUE(processAlive(child, start));
  // A different start time: the pid was reused by another process.
  EXPECT_FALSE(processAlive(child, start + 1));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // Not reaped yet: a zombie, which must count as lost.
  for (int i = 0; i < 200 && processAlive(child, start); ++i)
    usleep(10000);
  EXPECT_FALSE(processAlive(child, start));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(processAlive(child, start));
  EXPECT_FALSE(processAlive(0, 0));
  EXPECT_FALSE(processAlive(-5, 0));
}

} // namespace

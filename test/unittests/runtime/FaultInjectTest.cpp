//===- FaultInjectTest.cpp - the fault-injection hook's syntax ------------===//
//
// TESSERA_FAULT_INJECT's parser: every part of the exact syntax, and the
// malformed values that must be errors (a test asking for a fault must not
// run without it). The hook itself is exercised by test/e2e/fault_matrix.py.
//
//===----------------------------------------------------------------------===//

#include "runtime/FaultInject.h"

#include <gtest/gtest.h>

#include <csignal>

using namespace tessera::runtime::fault;

namespace {

TEST(FaultInject, ParsesEveryMomentAndSignal) {
  const char *moments[] = {"startup",    "forward", "backward",
                           "collective", "send",    "checkpoint"};
  for (int i = 0; i < kNumMoments; ++i) {
    EXPECT_STREQ(momentName(static_cast<Moment>(i)), moments[i]);
    llvm::Expected<Spec> s = parse(std::string("1:") + moments[i] + ":KILL");
    ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
    EXPECT_EQ(s->rank, 1);
    EXPECT_EQ(s->moment, static_cast<Moment>(i));
    EXPECT_EQ(s->signal, SIGKILL);
    EXPECT_EQ(s->count, 1);
  }
  llvm::Expected<Spec> s = parse("12:collective:STOP:37");
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->rank, 12);
  EXPECT_EQ(s->moment, Moment::Collective);
  EXPECT_EQ(s->signal, SIGSTOP);
  EXPECT_EQ(s->count, 37);
  s = parse("0:startup:STOP:2");
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->count, 2);
}

TEST(FaultInject, MalformedValuesAreErrors) {
  for (const char *bad :
       {"", "1", "1:forward", "1:forward:KILL:2:3", "x:forward:KILL",
        "-1:forward:KILL", " 1:forward:KILL", "1:Forward:KILL",
        "1:forward:kill", "1:forward:TERM", "1:forward:SIGKILL",
        "1:forward:KILL:0", "1:forward:KILL:", "1:forward:KILL:+2", "1::KILL",
        "1:forward:KILL ", "99999999999:forward:KILL", "1:startup:KILL:3"}) {
    llvm::Expected<Spec> s = parse(bad);
    ASSERT_FALSE(bool(s)) << "accepted '" << bad << "'";
    std::string msg = llvm::toString(s.takeError());
    EXPECT_NE(msg.find(std::string("TESSERA_FAULT_INJECT=") + bad + ":"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("expected RANK:MOMENT:SIGNAL[:COUNT]"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(toString(parse("1:sideways:KILL").takeError()),
            "TESSERA_FAULT_INJECT=1:sideways:KILL: unknown moment 'sideways' "
            "(expected RANK:MOMENT:SIGNAL[:COUNT], MOMENT one of startup, "
            "forward, backward, collective, send, checkpoint, SIGNAL KILL or "
            "STOP, COUNT >= 1)");
}

TEST(FaultInject, UnarmedHooksDoNothing) {
  // No TESSERA_FAULT_INJECT in the test's environment: nothing is armed and
  // the hooks return.
  unsetenv("TESSERA_FAULT_INJECT");
  ASSERT_FALSE(bool(initFromEnvironment(0)));
  EXPECT_FALSE(pending(Moment::Forward));
  at(Moment::Forward);
  at(Moment::Checkpoint);
}

} // namespace

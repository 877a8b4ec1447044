//===- FaultInject.cpp - test hook: a rank signals itself at a moment -----===//

#include "runtime/FaultInject.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <unistd.h>

using namespace tessera::runtime;

namespace {
constexpr const char *kSyntax =
    "expected RANK:MOMENT:SIGNAL[:COUNT], MOMENT one of startup, forward, "
    "backward, collective, send, checkpoint, SIGNAL KILL or STOP, COUNT >= 1";

fault::Spec spec;
bool initialised = false;
std::atomic<bool> training{false};
std::atomic<bool> fired{false};
std::atomic<int64_t> arrivals{0};

llvm::Error bad(llvm::StringRef value, const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "TESSERA_FAULT_INJECT=" + value + ": " + why +
                                     " (" + kSyntax + ")");
}

/// A decimal number without sign or spaces, < 2^31.
std::optional<int64_t> decimal(llvm::StringRef s) {
  if (s.empty() || s.size() > 9 || !llvm::all_of(s, llvm::isDigit))
    return std::nullopt;
  int64_t v = 0;
  for (char c : s)
    v = v * 10 + (c - '0');
  return v;
}
} // namespace

bool fault::detail::armed = false;

const char *fault::momentName(Moment m) {
  switch (m) {
  case Moment::Startup:
    return "startup";
  case Moment::Forward:
    return "forward";
  case Moment::Backward:
    return "backward";
  case Moment::Collective:
    return "collective";
  case Moment::Send:
    return "send";
  case Moment::Checkpoint:
    return "checkpoint";
  }
  return "?";
}

llvm::Expected<fault::Spec> fault::parse(llvm::StringRef value) {
  llvm::SmallVector<llvm::StringRef, 4> parts;
  value.split(parts, ':', /*MaxSplit=*/-1, /*KeepEmpty=*/true);
  if (parts.size() != 3 && parts.size() != 4)
    return bad(value, llvm::Twine(parts.size()) + " field(s)");
  Spec s;
  std::optional<int64_t> rank = decimal(parts[0]);
  if (!rank)
    return bad(value, "rank '" + parts[0] + "' is not a decimal number");
  s.rank = static_cast<int>(*rank);
  bool known = false;
  for (int i = 0; i < kNumMoments; ++i)
    if (parts[1] == momentName(static_cast<Moment>(i))) {
      s.moment = static_cast<Moment>(i);
      known = true;
    }
  if (!known)
    return bad(value, "unknown moment '" + parts[1] + "'");
  if (parts[2] == "KILL")
    s.signal = SIGKILL;
  else if (parts[2] == "STOP")
    s.signal = SIGSTOP;
  else
    return bad(value, "unknown signal '" + parts[2] + "'");
  if (parts.size() == 4) {
    std::optional<int64_t> count = decimal(parts[3]);
    if (!count || *count < 1)
      return bad(value, "count '" + parts[3] + "' is not a number >= 1");
    s.count = *count;
  }
  if (s.moment == Moment::Startup && s.count > 2)
    return bad(value, "startup has 2 moments (1: before MPI_Init, 2: after)");
  return s;
}

llvm::Error fault::initFromEnvironment(int rank) {
  if (initialised)
    return llvm::Error::success();
  initialised = true;
  const char *value = std::getenv("TESSERA_FAULT_INJECT");
  if (!value || !*value)
    return llvm::Error::success();
  llvm::Expected<Spec> parsed = parse(value);
  if (!parsed)
    return parsed.takeError();
  spec = *parsed;
  detail::armed = spec.rank == rank;
  return llvm::Error::success();
}

void fault::trainingStarted() { training.store(true); }

bool fault::pending(Moment m) {
  return detail::armed && spec.moment == m && !fired.load();
}

void fault::detail::reached(Moment m) {
  if (m != spec.moment || fired.load())
    return;
  if ((m == Moment::Collective || m == Moment::Send) && !training.load())
    return;
  if (arrivals.fetch_add(1) + 1 != spec.count)
    return;
  fired.store(true);
  // One line first, with the wall-clock time, so that a test can measure
  // how long the other ranks take to end from here.
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char line[160];
  int n = std::snprintf(
      line, sizeof(line),
      "tessera-run: fault injection: rank %d raises SIG%s at %s #%lld (time "
      "%lld.%06ld)\n",
      spec.rank, spec.signal == SIGKILL ? "KILL" : "STOP", momentName(m),
      static_cast<long long>(spec.count), static_cast<long long>(ts.tv_sec),
      ts.tv_nsec / 1000);
  if (n > 0) {
    ssize_t ignored = ::write(2, line, std::min<size_t>(n, sizeof(line) - 1));
    (void)ignored;
  }
  ::kill(::getpid(), spec.signal);
}

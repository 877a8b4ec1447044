//===- Watchdog.cpp - collective timeouts and lost-peer detection ---------===//

#include "runtime/collectives/mpi/Watchdog.h"
#include "runtime/FaultInject.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <mutex>
#include <signal.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace tessera::runtime::mpi;
using namespace tessera::runtime::mpi::watchdog;

namespace {

// The operation in flight, written by the MPI thread only. `active` holds its
// sequence number while it runs (0 otherwise) and is written last on start
// and first on end, so a reader that sees the same non-zero `active` before
// and after reading the other fields has read one operation (seqlock).
std::atomic<uint64_t> active{0};
std::atomic<uint64_t> lastSeq{0};
std::atomic<const char *> opName{""};
std::atomic<int> opRanks{0};
std::atomic<int> opPeer{-1};
std::atomic<int64_t> opStart{0};
thread_local int depth = 0;

} // namespace

int64_t watchdog::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string watchdog::describe(const Operation &op) {
  if (op.peer >= 0)
    return llvm::formatv("{0} {1} rank {2} of {3}", op.name,
                         std::strcmp(op.name, "send") == 0 ? "to" : "from",
                         op.peer, op.ranks)
        .str();
  if (op.ranks <= 0)
    return op.name;
  return llvm::formatv("{0} over {1} ranks", op.name, op.ranks).str();
}

Guard::Guard(const char *name, int ranks, int peer) : outer(depth++ == 0) {
  if (!outer)
    return;
  uint64_t seq = lastSeq.load(std::memory_order_relaxed) + 1;
  lastSeq.store(seq, std::memory_order_relaxed);
  // Orders the previous operation's `active = 0` before these stores: a
  // reader that sees any of them then sees `active` changed (seqlock).
  std::atomic_thread_fence(std::memory_order_release);
  opName.store(name, std::memory_order_relaxed);
  opRanks.store(ranks, std::memory_order_relaxed);
  opPeer.store(peer, std::memory_order_relaxed);
  opStart.store(nowNs(), std::memory_order_relaxed);
  active.store(seq, std::memory_order_release);
  if (peer < 0)
    fault::at(fault::Moment::Collective); // test hook
}

Guard::~Guard() {
  --depth;
  if (outer)
    active.store(0, std::memory_order_release);
}

Operation watchdog::inFlight() {
  Operation op;
  uint64_t before = active.load(std::memory_order_acquire);
  if (!before)
    return op;
  op.name = opName.load(std::memory_order_relaxed);
  op.ranks = opRanks.load(std::memory_order_relaxed);
  op.peer = opPeer.load(std::memory_order_relaxed);
  op.startNs = opStart.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (active.load(std::memory_order_relaxed) != before)
    return Operation();
  op.seq = before;
  return op;
}

uint64_t watchdog::lastSequence() {
  return lastSeq.load(std::memory_order_relaxed);
}

Decision watchdog::decide(const Operation &op, int64_t now, double timeoutS,
                          llvm::ArrayRef<bool> alive) {
  Decision d;
  if (op.seq == 0)
    return d;
  for (size_t i = 0; i < alive.size(); ++i)
    if (!alive[i]) {
      d.verdict = Verdict::PeerLost;
      d.lost = static_cast<int>(i);
      return d;
    }
  if (timeoutS > 0 && static_cast<double>(now - op.startNs) >= timeoutS * 1e9)
    d.verdict = Verdict::TimedOut;
  return d;
}

std::string watchdog::formatFailure(llvm::StringRef tool, int myRank,
                                    const Decision &d, const Operation &op,
                                    int64_t now, double timeoutS,
                                    const Peer *lost,
                                    llvm::ArrayRef<Peer> stopped,
                                    llvm::ArrayRef<Peer> remote) {
  double running = static_cast<double>(now - op.startNs) / 1e9;
  std::string head = llvm::formatv("{0}: error: rank {1}: ", tool, myRank);
  if (d.verdict == Verdict::PeerLost && lost)
    return head + llvm::formatv("lost rank {0} (pid {1} on {2}) during "
                                "collective #{3} ({4}, running {5:F1} s); "
                                "aborting",
                                lost->rank, lost->pid, lost->host, op.seq,
                                describe(op), running)
                      .str();
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g", timeoutS);
  std::string why;
  for (const Peer &p : stopped)
    why += llvm::formatv("; rank {0} (pid {1} on {2}) is stopped", p.rank,
                         p.pid, p.host)
               .str();
  if (why.empty()) {
    // Peers on other hosts cannot be checked through /proc: name them, by
    // host, as the ones that may be lost (a host down or cut off).
    std::vector<std::string> hosts;
    for (const Peer &p : remote)
      if (!llvm::is_contained(hosts, p.host))
        hosts.push_back(p.host);
    for (const std::string &host : hosts) {
      std::vector<std::string> ranks;
      for (const Peer &p : remote)
        if (p.host == host)
          ranks.push_back(std::to_string(p.rank));
      why += llvm::formatv("; {0} {1} on host {2}",
                           ranks.size() == 1 ? "rank" : "ranks",
                           llvm::join(ranks, ", "), host)
                 .str();
    }
    if (why.empty())
      why = "; a peer is lost or stuck";
    else
      why += " (another host: lost, stuck or cut off; not checkable from "
             "here)";
  }
  return head + llvm::formatv("collective #{0} ({1}) timed out after {2:F1} s "
                              "(--collective-timeout-s {3}){4}; aborting",
                              op.seq, describe(op), running, limit, why)
                    .str();
}

char watchdog::processState(int pid) {
  if (pid <= 0)
    return 0;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = std::fopen(path, "r");
  if (!f)
    return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char *p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ')
    return 0;
  return p[2];
}

uint64_t watchdog::processStartTime(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = std::fopen(path, "r");
  if (!f)
    return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // The command name (field 2) is in parentheses and may hold anything:
  // fields 3.. follow the last ')'.
  const char *p = std::strrchr(buf, ')');
  if (!p)
    return 0;
  // Field 3 is the state; starttime is field 22, 19 fields later.
  int field = 2;
  for (++p; *p; ++p)
    if (*p == ' ' && ++field == 22)
      return std::strtoull(p + 1, nullptr, 10);
  return 0;
}

bool watchdog::processAlive(int pid, uint64_t startTime) {
  if (pid <= 0)
    return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH)
    return false;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = std::fopen(path, "r");
  if (!f)
    return errno != ENOENT; // no /proc (or not readable): cannot tell
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char *p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ')
    return true;
  char state = p[2];
  // A SIGKILLed rank stays a zombie until its launcher reaps it.
  if (state == 'Z' || state == 'X' || state == 'x')
    return false;
  if (startTime) {
    int field = 2;
    for (++p; *p; ++p)
      if (*p == ' ' && ++field == 22)
        return std::strtoull(p + 1, nullptr, 10) == startTime;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// The thread
//===----------------------------------------------------------------------===//

namespace {

/// This host's identity: host name, boot id and pid namespace, so that two
/// containers with one host name are not taken for one host.
std::string hostIdentity(std::string &hostName) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostName = host;
  std::string id = hostName;
  if (FILE *f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {0};
    if (std::fgets(boot, sizeof(boot), f))
      id += std::string("|") + boot;
    std::fclose(f);
  }
  char ns[128] = {0};
  if (readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1) > 0)
    id += std::string("|") + ns;
  return id;
}

struct State {
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  double timeoutS = 0;
  std::string tool;
  int myRank = 0;
  std::vector<Peer> peers;  // local peers only, not this rank
  std::vector<Peer> remote; // peers on other hosts
};

State *state = nullptr;

/// How long a rank that found a lost peer waits before it exits: several
/// check periods, so that its own exit is not taken for the first loss.
constexpr std::chrono::milliseconds kExitGrace(500);

/// Writes `line` and a newline to stderr, then ends the process with
/// _exit(1) after kExitGrace.
[[noreturn]] void writeLineAndExit(std::string line) {
  line += "\n";
  // One write(2), so that ranks' lines do not interleave.
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
  // Stay alive a little (the main thread is blocked in MPI) so that the
  // other ranks on this host see the rank that died first, not this one,
  // as the lost rank, and those blocked in the same operation time out
  // themselves.
  std::this_thread::sleep_for(kExitGrace);
  ::_exit(1);
}

constexpr int kHostBytes = 64;
constexpr int kIdBytes = 192;
struct Record {
  char host[kHostBytes];
  char id[kIdBytes];
  int64_t pid;
  uint64_t startTime;
};

void run(State *s) {
  llvm::SmallVector<bool, 8> alive(s->peers.size(), true);
  std::unique_lock<std::mutex> lock(s->mu);
  while (!s->cv.wait_for(lock, std::chrono::milliseconds(100),
                         [s] { return s->stopping; })) {
    Operation op = inFlight();
    if (op.seq == 0)
      continue;
    for (size_t i = 0; i < s->peers.size(); ++i)
      alive[i] = processAlive(s->peers[i].pid, s->peers[i].startTime);
    // An operation that ended while the peers were checked is not in the way.
    int64_t now = nowNs();
    Decision d = decide(op, now, s->timeoutS, alive);
    if (d.verdict == Verdict::Continue || inFlight().seq != op.seq)
      continue;
    std::vector<Peer> stopped;
    if (d.verdict == Verdict::TimedOut)
      for (const Peer &p : s->peers) {
        char st = processState(p.pid);
        if (st == 'T' || st == 't')
          stopped.push_back(p);
      }
    writeLineAndExit(formatFailure(
        s->tool, s->myRank, d, op, now, s->timeoutS,
        d.verdict == Verdict::PeerLost ? &s->peers[d.lost] : nullptr, stopped,
        s->remote));
  }
}

} // namespace

llvm::Error watchdog::start(double timeoutS, llvm::StringRef tool) {
  if (state)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the collective watchdog is already running");
  if (!(timeoutS > 0))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the collective timeout must be > 0");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  Record mine;
  std::memset(&mine, 0, sizeof(mine));
  std::string hostName;
  std::string id = hostIdentity(hostName);
  std::strncpy(mine.host, hostName.c_str(), kHostBytes - 1);
  std::strncpy(mine.id, id.c_str(), kIdBytes - 1);
  mine.pid = static_cast<int64_t>(::getpid());
  mine.startTime = processStartTime(::getpid());
  std::vector<Record> all(size);
  int rc;
  {
    Guard guard("all_gather", size);
    rc = MPI_Allgather(&mine, sizeof(Record), MPI_BYTE, all.data(),
                       sizeof(Record), MPI_BYTE, MPI_COMM_WORLD);
  }
  if (rc != MPI_SUCCESS)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "collective watchdog: MPI_Allgather of host names failed on rank %d",
        rank);

  auto *s = new State;
  s->timeoutS = timeoutS;
  s->tool = tool.str();
  s->myRank = rank;
  for (int r = 0; r < size; ++r) {
    if (r == rank)
      continue;
    Peer p;
    p.rank = r;
    p.pid = static_cast<int>(all[r].pid);
    p.host = std::string(all[r].host, strnlen(all[r].host, kHostBytes));
    p.local = std::strncmp(all[r].id, mine.id, kIdBytes) == 0;
    p.startTime = all[r].startTime;
    (p.local ? s->peers : s->remote).push_back(p);
  }
  state = s;
  s->thread = std::thread(run, s);
  // The watchdog covers every operation from here on.
  disarmStartup();
  return llvm::Error::success();
}

void watchdog::stop() {
  if (!state)
    return;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->stopping = true;
  }
  state->cv.notify_all();
  state->thread.join();
  delete state;
  state = nullptr;
}

//===----------------------------------------------------------------------===//
// Start-up
//===----------------------------------------------------------------------===//

int watchdog::launcherRank(
    llvm::function_ref<const char *(const char *)> getenv) {
  for (const char *name :
       {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char *v = getenv(name);
    int rank = 0;
    if (v && *v && !llvm::StringRef(v).getAsInteger(10, rank) && rank >= 0)
      return rank;
  }
  return -1;
}

bool watchdog::startupTimedOut(int64_t startNs, int64_t now, double timeoutS) {
  return startNs != 0 && timeoutS > 0 &&
         static_cast<double>(now - startNs) >= timeoutS * 1e9;
}

std::string watchdog::formatStartupFailure(llvm::StringRef tool, int myRank,
                                           llvm::StringRef what,
                                           int64_t startNs, int64_t now,
                                           double timeoutS,
                                           llvm::ArrayRef<LocalRank> suspects) {
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g", timeoutS);
  std::string line =
      llvm::formatv("{0}: error: rank {1}: start-up did not finish within {2} "
                    "s (--collective-timeout-s {2}): {3} blocked for {4:F1} s",
                    tool, myRank, limit, what,
                    static_cast<double>(now - startNs) / 1e9)
          .str();
  bool named = false;
  for (const LocalRank &r : suspects) {
    const char *how = nullptr;
    if (r.state == 'T' || r.state == 't')
      how = "is stopped";
    else if (r.state == 'Z' || r.state == 'X' || r.state == 'x')
      how = "has exited";
    else if (r.state == 0)
      how = "is not running";
    if (!how)
      continue;
    named = true;
    if (r.pid > 0)
      line += llvm::formatv("; rank {0} (pid {1}) {2}", r.rank, r.pid, how);
    else
      line += llvm::formatv("; rank {0} {1}", r.rank, how);
  }
  if (!named)
    line += "; a peer is lost or stuck";
  return line + "; aborting";
}

namespace {

/// The environment of process `pid` (empty if unreadable).
std::vector<std::string> processEnvironment(int pid) {
  std::vector<std::string> out;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/environ", pid);
  FILE *f = std::fopen(path, "r");
  if (!f)
    return out;
  std::string all;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && all.size() < (1 << 20))
    all.append(buf, n);
  std::fclose(f);
  llvm::SmallVector<llvm::StringRef, 64> items;
  llvm::StringRef(all).split(items, '\0', -1, false);
  for (llvm::StringRef item : items)
    out.push_back(item.str());
  return out;
}

std::string readExe(int pid) {
  char path[64], target[4096];
  std::snprintf(path, sizeof(path), "/proc/%d/exe", pid);
  ssize_t n = readlink(path, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, n) : std::string();
}

/// This process's launcher job: "VAR=value" of the first job variable set.
std::string jobKey(llvm::function_ref<const char *(const char *)> getenv) {
  for (const char *name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    const char *v = getenv(name);
    if (v && *v)
      return std::string(name) + "=" + v;
  }
  const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
  if (job && *job)
    return std::string("SLURM_JOB_ID=") + job + "." + (step ? step : "");
  return "";
}

} // namespace

std::vector<LocalRank> watchdog::findJobRanks() {
  std::vector<LocalRank> out;
  auto self = [](const char *name) { return std::getenv(name); };
  std::string key = jobKey(self);
  int me = launcherRank();
  std::string exe = readExe(::getpid());
  if (key.empty() || exe.empty())
    return out;
  std::vector<int> found;
  if (DIR *d = ::opendir("/proc")) {
    while (dirent *e = ::readdir(d)) {
      int pid = 0;
      if (llvm::StringRef(e->d_name).getAsInteger(10, pid) ||
          pid == ::getpid() || readExe(pid) != exe)
        continue;
      std::vector<std::string> env = processEnvironment(pid);
      auto get = [&](const char *name) -> const char * {
        std::string prefix = std::string(name) + "=";
        for (const std::string &item : env)
          if (llvm::StringRef(item).starts_with(prefix))
            return item.c_str() + prefix.size();
        return nullptr;
      };
      if (jobKey(get) != key)
        continue;
      LocalRank r;
      r.rank = launcherRank(get);
      r.pid = pid;
      r.state = processState(pid);
      if (r.rank < 0 || r.rank == me || !r.state)
        continue;
      found.push_back(r.rank);
      out.push_back(r);
    }
    ::closedir(d);
  }
  // The whole job on this host (Open MPI says so): the ranks not found.
  const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int worldSize = 0;
  if (size && local && llvm::StringRef(size) == local &&
      !llvm::StringRef(size).getAsInteger(10, worldSize))
    for (int r = 0; r < worldSize && r < 4096; ++r)
      if (r != me && !llvm::is_contained(found, r)) {
        LocalRank missing;
        missing.rank = r;
        out.push_back(missing);
      }
  llvm::sort(out, [](const LocalRank &a, const LocalRank &b) {
    return a.rank < b.rank;
  });
  return out;
}

namespace {

struct Startup {
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  double timeoutS = 0;
  std::string tool;
  int myRank = 0;
};
Startup *startup = nullptr;
std::atomic<const char *> phaseName{nullptr};
std::atomic<int64_t> phaseStart{0};

void runStartup(Startup *s) {
  std::unique_lock<std::mutex> lock(s->mu);
  while (!s->cv.wait_for(lock, std::chrono::milliseconds(100),
                         [s] { return s->stopping; })) {
    std::string what;
    int64_t start = phaseStart.load();
    if (const char *name = phaseName.load()) {
      what = name;
    } else {
      Operation op = inFlight();
      if (op.seq == 0)
        continue;
      what = llvm::formatv("collective #{0} ({1})", op.seq, describe(op));
      start = op.startNs;
    }
    int64_t now = nowNs();
    if (!startupTimedOut(start, now, s->timeoutS))
      continue;
    writeLineAndExit(formatStartupFailure(s->tool, s->myRank, what, start, now,
                                          s->timeoutS, findJobRanks()));
  }
}

} // namespace

void watchdog::armStartup(double timeoutS, llvm::StringRef tool) {
  if (startup || !(timeoutS > 0) || !std::isfinite(timeoutS))
    return;
  auto *s = new Startup;
  s->timeoutS = timeoutS;
  s->tool = tool.str();
  s->myRank = std::max(launcherRank(), 0);
  startup = s;
  s->thread = std::thread(runStartup, s);
}

StartupPhase::StartupPhase(const char *name) {
  phaseStart.store(nowNs());
  phaseName.store(name);
}

StartupPhase::~StartupPhase() {
  phaseName.store(nullptr);
  phaseStart.store(0);
}

void watchdog::disarmStartup() {
  if (!startup)
    return;
  {
    std::lock_guard<std::mutex> lock(startup->mu);
    startup->stopping = true;
  }
  startup->cv.notify_all();
  startup->thread.join();
  delete startup;
  startup = nullptr;
}

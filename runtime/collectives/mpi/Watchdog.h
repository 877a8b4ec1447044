//===- Watchdog.h - collective timeouts and lost-peer detection -*- C++ -*-===//
//
// A process-wide record of the blocking MPI operation in flight, and a
// watchdog thread that ends the process when that operation cannot finish:
//
//   * every blocking MPI call of the runtime (collectives, send/recv, waits)
//     runs inside a `watchdog::Guard`, which numbers it (1, 2, ... per
//     process, in call order, so SPMD ranks of one stage give the same
//     collective the same number) and records its name, its communicator's
//     size and its start time in lock-free atomics (a few relaxed stores and
//     one clock read per call);
//   * `watchdog::start` (collective over MPI_COMM_WORLD: it gathers every
//     rank's host identity, pid and process start time) starts a thread
//     that, every 100 ms while an operation is in flight, checks that every
//     peer on the same host is still alive (/proc/<pid>/stat: gone, a
//     zombie, or a different process under a reused pid all count as lost)
//     and that the operation has not been running longer than the timeout.
//     Peers on other hosts are caught by the timeout only; its message
//     then names them by host (test/multinode: a host killed or cut off).
//   * On a lost peer or a timeout it writes one line to stderr, e.g.
//       tessera-run: error: rank 2: lost rank 1 (pid 4242 on node7) during
//       collective #57 (all_reduce over 4 ranks, running 0.4 s); aborting
//     and ends the process with _exit(1) 0.5 s later (so that the other
//     ranks on the host see the rank that died first as the lost one, or
//     time out themselves, rather than take this rank for the lost one).
//     It does not call MPI_Abort: MPI is
//     initialised with MPI_THREAD_SINGLE, and an MPI call from a second
//     thread while the main thread is blocked inside MPI is undefined
//     behaviour (it may deadlock on the library's own locks). A non-zero
//     exit is enough for every launcher: mpirun then ends the job itself;
//     launchers that leave the others running find them ending by their own
//     watchdog.
//
// A timeout names the peers on this host that are stopped (SIGSTOP, or
// stopped under a debugger: state T or t in /proc/<pid>/stat), e.g.
//   tessera-run: error: rank 0: collective #12 (all_reduce over 2 ranks)
//   timed out after 1.0 s (--collective-timeout-s 1); rank 1 (pid 4242 on
//   node7) is stopped; aborting
//
// Start-up. The watchdog thread needs MPI (it learns its peers by an
// all_gather), so it cannot cover MPI_Init or its own all_gather. A start-up
// timer does: `armStartup` (before MPI_Init; the rank is the launcher's,
// `launcherRank`) starts a thread that, every 100 ms, checks the start-up
// phase in flight, i.e. MPI initialisation (`StartupPhase`, set by
// mpi::initialize) or any guarded MPI operation (the watchdog's own
// all_gather), and when one runs longer than the timeout writes
//   tessera-run: error: rank 0: start-up did not finish within 1 s
//   (--collective-timeout-s 1): MPI initialisation (MPI_Init) blocked for
//   1.0 s; rank 1 (pid 4242) is stopped; aborting
// and ends the process with _exit(1) 0.5 s later. The ranks it names are
// the processes of the same launcher job and executable on this host
// (found by their environment in /proc at that moment): stopped, exited
// (a zombie) or, when the whole job runs on this host, not running at all.
// `start` disarms it once the watchdog thread runs (`disarmStartup`).
//
// The decisions and the messages are pure functions (`decide`,
// `formatFailure`, `startupTimedOut`, `formatStartupFailure`) so that they
// are unit-tested without MPI.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_COLLECTIVES_MPI_WATCHDOG_H
#define TESSERA_RUNTIME_COLLECTIVES_MPI_WATCHDOG_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace tessera {
namespace runtime {
namespace mpi {
namespace watchdog {

/// Monotonic clock in nanoseconds (std::chrono::steady_clock).
int64_t nowNs();

/// A blocking MPI operation. `seq` 0 means none.
struct Operation {
  uint64_t seq = 0;
  /// Static string, e.g. "all_reduce".
  const char *name = "";
  /// Size of the communicator (0: unknown).
  int ranks = 0;
  /// Communicator rank of the peer of a point-to-point operation, or -1.
  int peer = -1;
  int64_t startNs = 0;
};

/// "all_reduce over 4 ranks" or "recv from rank 3 of 4".
std::string describe(const Operation &op);

/// Marks a blocking MPI operation in flight on this process for its
/// lifetime. `name` must be a string literal (it is kept by pointer). Only
/// the outermost of nested guards counts. Guards belong to the thread that
/// makes MPI calls (MPI_THREAD_SINGLE).
class Guard {
public:
  Guard(const char *name, int ranks, int peer = -1);
  ~Guard();
  Guard(const Guard &) = delete;
  Guard &operator=(const Guard &) = delete;

private:
  bool outer;
};

/// The operation in flight now (seq 0 if none, or if one was starting or
/// ending while it was read).
Operation inFlight();
/// Number of the last operation started (0 if none).
uint64_t lastSequence();

/// A peer process, by world rank.
struct Peer {
  int rank = -1;
  int pid = 0;
  std::string host;
  /// On this host (same host name, boot and pid namespace): its liveness can
  /// be checked through /proc.
  bool local = false;
  /// Field 22 of /proc/<pid>/stat when the watchdog started (0 if unknown):
  /// a different value later means the pid was reused.
  uint64_t startTime = 0;
};

enum class Verdict { Continue, PeerLost, TimedOut };

struct Decision {
  Verdict verdict = Verdict::Continue;
  /// Index into the `alive` array given to decide (PeerLost only).
  int lost = -1;
};

/// What the watchdog does at time `now` (ns) with `op` in flight (seq 0:
/// none), a timeout of `timeoutS` seconds (<= 0: none) and `alive[i]` for
/// every peer i it can check. Nothing is decided while no operation is in
/// flight (a peer that is gone then is noticed at the next operation). A lost
/// peer is reported before a timeout, naming the first lost one.
Decision decide(const Operation &op, int64_t now, double timeoutS,
                llvm::ArrayRef<bool> alive);

/// The one-line message (no trailing newline) for `d`, e.g.
///   "tessera-run: error: rank 2: lost rank 1 (pid 4242 on node7) during
///   collective #57 (all_reduce over 4 ranks, running 0.4 s); aborting".
/// `lost` is the peer of a PeerLost decision; `stopped`, for a timeout, the
/// peers found stopped ("; rank 1 (pid 4242 on node7) is stopped"). With
/// none stopped, a timeout names `remote`, the peers on other hosts, by
/// host ("; ranks 2, 3 on host node8 (another host: lost, stuck or cut off;
/// not checkable from here)"): their liveness cannot be read from this
/// host, so a host that died or was cut off shows as the ranks it held.
/// With neither: "; a peer is lost or stuck".
std::string formatFailure(llvm::StringRef tool, int myRank, const Decision &d,
                          const Operation &op, int64_t now, double timeoutS,
                          const Peer *lost, llvm::ArrayRef<Peer> stopped = {},
                          llvm::ArrayRef<Peer> remote = {});

/// The state letter of /proc/<pid>/stat (R, S, D, T, t, Z, ...), or 0 if
/// there is no such process.
char processState(int pid);

/// Whether process `pid` is alive and is the process that had `startTime`
/// (0: not checked): false if it does not exist, is a zombie or dead, or has
/// another start time.
bool processAlive(int pid, uint64_t startTime);
/// Field 22 (starttime) of /proc/<pid>/stat, or 0.
uint64_t processStartTime(int pid);

/// Starts the watchdog thread with a timeout of `timeoutS` seconds (> 0).
/// Collective over MPI_COMM_WORLD (MPI must be initialised); messages start
/// with `tool` (e.g. "tessera-run"). Error if already started or on an MPI
/// failure.
llvm::Error start(double timeoutS, llvm::StringRef tool);
/// Stops and joins the thread (no-op if not started). mpi::finalize() calls
/// it before MPI_Finalize.
void stop();

//===----------------------------------------------------------------------===//
// Start-up (before the watchdog thread runs)
//===----------------------------------------------------------------------===//

/// The world rank the launcher gave this process, known before MPI_Init: the
/// first of OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID that is
/// a decimal number; -1 if none (a singleton run). `getenv` is for tests.
int launcherRank(llvm::function_ref<const char *(const char *)> getenv =
                     [](const char *name) { return std::getenv(name); });

/// A process of this launcher job on this host, as the start-up timer finds
/// it when it fires.
struct LocalRank {
  int rank = -1;
  int pid = 0;
  /// /proc state letter: 'T' or 't' stopped, 'Z' or 'X' exited; 0: no
  /// process of that rank runs on this host (the whole job being here).
  char state = 0;
};

/// Whether a start-up phase that began at `startNs` has run out its
/// `timeoutS` seconds at `now` (ns). A phase with `startNs` 0 is none.
bool startupTimedOut(int64_t startNs, int64_t now, double timeoutS);

/// The one-line message (no trailing newline) of a start-up timeout: `what`
/// was in flight (e.g. "MPI initialisation (MPI_Init)") since `startNs`;
/// `suspects` are the job's stopped, exited or missing ranks (only those
/// are named), e.g. "tessera-run: error: rank 0: start-up did not finish
/// within 1 s (--collective-timeout-s 1): MPI initialisation (MPI_Init)
/// blocked for 1.0 s; rank 1 (pid 4242) is stopped; aborting".
std::string formatStartupFailure(llvm::StringRef tool, int myRank,
                                 llvm::StringRef what, int64_t startNs,
                                 int64_t now, double timeoutS,
                                 llvm::ArrayRef<LocalRank> suspects);

/// The processes of this launcher job (same PMIX_NAMESPACE,
/// OMPI_MCA_ess_base_jobid or SLURM_JOB_ID.SLURM_STEP_ID, and the same
/// executable) on this host other than this one, each with its rank and
/// state, plus (state 0) the ranks not found when the launcher says the
/// whole job runs on this host. Empty when this process has no job.
std::vector<LocalRank> findJobRanks();

/// Starts the start-up timer (no-op when `timeoutS` is not > 0 or it runs
/// already): a thread that ends the process as described above when a
/// start-up phase or guarded MPI operation runs `timeoutS` seconds. Call it
/// before MPI_Init; it makes no MPI call.
void armStartup(double timeoutS, llvm::StringRef tool);
/// Marks a start-up phase in flight (`name` a string literal, e.g.
/// "MPI initialisation (MPI_Init)") for its lifetime.
class StartupPhase {
public:
  explicit StartupPhase(const char *name);
  ~StartupPhase();
  StartupPhase(const StartupPhase &) = delete;
  StartupPhase &operator=(const StartupPhase &) = delete;
};
/// Stops the start-up timer (no-op if not armed). `start` calls it once the
/// watchdog thread runs; tessera-run calls it before work that does not
/// start the watchdog (--calibrate, --bench-collectives).
void disarmStartup();

} // namespace watchdog
} // namespace mpi
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_COLLECTIVES_MPI_WATCHDOG_H

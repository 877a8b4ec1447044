//===- FaultInject.h - test hook: a rank signals itself at a moment -*- C++
//-*-===//
//
// TEST HOOK, not a feature: it exists so that the fault matrix
// (test/e2e/fault_matrix.py, docs/FaultMatrix.md) can stop or kill one rank
// at a precise moment of a run and check what the other ranks do. It is
// driven by one environment variable, read once at start-up (tessera-run's
// main, before MPI initialisation):
//
//   TESSERA_FAULT_INJECT=RANK:MOMENT:SIGNAL[:COUNT]
//
//   RANK    world rank that faults (as the launcher numbers it:
//           OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID);
//           the other ranks ignore the variable
//   MOMENT  where the rank raises SIGNAL on itself, the COUNT-th time it
//           gets there (COUNT from 1, default 1):
//             startup     count 1: just before MPI_Init; count 2: just after
//                         MPI_Init, before the watchdog's start-up all_gather
//             forward     a training step starts (the first instruction of
//                         the step's program; pipeline: each F(c, m))
//             backward    a step's loss has been computed, before the rest
//                         of the program (the backward) runs; pipeline: each
//                         B(c, m)
//             collective  inside the watchdog guard of a collective (not a
//                         send or receive), counted from the first step
//             send        inside a pipeline send (Instruction::Kind::Send),
//                         before MPI_Isend, counted from the first step
//             checkpoint  while writing this rank's checkpoint shard: after
//                         its safetensors header is written and flushed,
//                         before its tensor data
//   SIGNAL  KILL or STOP (SIGKILL, SIGSTOP)
//
// Just before the signal the rank writes one line to stderr,
//   tessera-run: fault injection: rank 1 raises SIGSTOP at forward #3 (time
//   1795756308.123456)
// (the time is CLOCK_REALTIME in seconds, for the test's timings).
//
// The syntax is exact (no spaces, upper-case signal, lower-case moment, a
// decimal rank and count): any other value is an error, so tessera-run exits
// with "tessera-run: error: TESSERA_FAULT_INJECT=...: ..." rather than run
// without the fault a test asked for. Unset or empty: no effect, and each
// hook costs one predictable branch on a global flag.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_FAULTINJECT_H
#define TESSERA_RUNTIME_FAULTINJECT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Compiler.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace tessera {
namespace runtime {
namespace fault {

enum class Moment { Startup, Forward, Backward, Collective, Send, Checkpoint };
constexpr int kNumMoments = 6;

/// "startup", "forward", ... (the variable's spelling).
const char *momentName(Moment m);

/// A parsed TESSERA_FAULT_INJECT value.
struct Spec {
  int rank = 0;
  Moment moment = Moment::Startup;
  /// SIGKILL or SIGSTOP.
  int signal = 0;
  int64_t count = 1;
};

/// Parses RANK:MOMENT:SIGNAL[:COUNT] (see above). Errors name the part that
/// is wrong and give the syntax.
llvm::Expected<Spec> parse(llvm::StringRef value);

/// Reads TESSERA_FAULT_INJECT once (later calls do nothing) for the process
/// of world rank `rank`: arms the hook when the value names this rank. Error
/// on a malformed value (every rank reports it).
llvm::Error initFromEnvironment(int rank);

/// Called by the trainer just before the first step: `collective` and
/// `send` count from here.
void trainingStarted();

namespace detail {
extern bool armed;
void reached(Moment m);
} // namespace detail

/// The hook: raises the signal when this is the armed rank's COUNT-th arrival
/// at `m`. One branch when unarmed.
inline void at(Moment m) {
  if (LLVM_UNLIKELY(detail::armed))
    detail::reached(m);
}

/// Whether a later at(m) may fire (the armed rank's moment is `m` and it has
/// not fired yet): lets a caller take a slower path only then.
bool pending(Moment m);

} // namespace fault
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_FAULTINJECT_H

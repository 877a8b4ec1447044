//===- NodeLocal.h - a rank's node-local rank -------------------*- C++ -*-===//
//
// Which rank of its node a process is (it picks the rank's GPU: local rank
// modulo the device count, exec::chooseDevice). Issue 28: it comes from the
// launcher's environment, else from an MPI shared-memory split, never from
// a guess. In order:
//
//   OMPI_COMM_WORLD_LOCAL_RANK   Open MPI's mpirun (and its srun support)
//   SLURM_LOCALID                Slurm's srun (the task's id on its node)
//   MPI_LOCALRANKID              MPICH's Hydra launcher
//   MPI_COMM_TYPE_SHARED         none set: the rank's index among the ranks
//                                of MPI_Comm_split_type(world,
//                                MPI_COMM_TYPE_SHARED) (key: world rank)
//
// The first variable set is used and parsed strictly: a value that is not a
// non-negative decimal integer is an error naming the variable and value (a
// broken launcher environment is not silently replaced by another source).
//
// The split is always taken too (it is collective, so every rank takes part
// whatever its environment), and its result is returned beside the
// launcher's. When the two disagree the launcher's value is used: it is
// the launcher's statement of where it started the process, whereas which
// ranks MPI deems to share memory depends on its transport's view of the
// node (e.g. containers or network namespaces sharing one kernel). The
// disagreement is not an error here: tessera-run reports it once, on rank 0,
// as a warning naming the rank and both values
// (localRankMismatchWarning).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_COLLECTIVES_MPI_NODELOCAL_H
#define TESSERA_RUNTIME_COLLECTIVES_MPI_NODELOCAL_H

#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdlib>
#include <optional>
#include <string>

namespace tessera::runtime::mpi {

/// The node-local rank the launcher set: its value and the variable.
struct LauncherLocalRank {
  int rank = 0;
  std::string variable;
};

/// The launcher's node-local rank from `getenv` (the file comment's order):
/// nothing when none of the variables is set (or set empty); an error
/// "VARIABLE='VALUE' is not a node-local rank (a non-negative integer)"
/// when the first one set does not parse. Pure (tests pass a fake getenv).
llvm::Expected<std::optional<LauncherLocalRank>>
launcherLocalRank(llvm::function_ref<const char *(const char *)> getenv =
                      [](const char *name) { return std::getenv(name); });

/// A rank's node-local rank and where it came from.
struct NodeLocalRank {
  /// The rank to use: the launcher's, else sharedRank.
  int rank = 0;
  /// The launcher's variable, or "MPI_COMM_TYPE_SHARED".
  std::string source = "MPI_COMM_TYPE_SHARED";
  /// The shared-memory split: this rank's index in its group, the group's
  /// size, and its lowest world rank (which identifies MPI's node).
  int sharedRank = 0, sharedSize = 1, sharedLeader = 0;
  /// True when the launcher's value differs from sharedRank.
  bool contradicts() const {
    return source != "MPI_COMM_TYPE_SHARED" && rank != sharedRank;
  }
};

/// Collective over `world` (every rank must call it; the split runs under a
/// watchdog Guard): this rank's node-local rank. Errors: MPI failure, a
/// malformed launcher variable (launcherLocalRank), or a launcher value
/// not below world.size() ("SLURM_LOCALID=3 is not a node-local rank: the
/// job has 1 rank"; no node holds more ranks than the job).
llvm::Expected<NodeLocalRank> nodeLocalRank(
    const Communicator &world,
    llvm::function_ref<const char *(const char *)> getenv =
        [](const char *name) { return std::getenv(name); });

/// The warning for world rank `rank` whose launcher and split disagree:
/// "TOOL: warning: rank R: node-local rank L from VARIABLE, but S from
/// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); using VARIABLE's (it picks
/// the rank's device)". `others` more ranks that disagree add " (and N
/// more ranks)".
std::string localRankMismatchWarning(llvm::StringRef tool, int rank,
                                     const NodeLocalRank &local, int others);

} // namespace tessera::runtime::mpi

#endif // TESSERA_RUNTIME_COLLECTIVES_MPI_NODELOCAL_H

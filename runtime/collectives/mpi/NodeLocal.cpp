//===- NodeLocal.cpp - a rank's node-local rank ---------------------------===//

#include "runtime/collectives/mpi/NodeLocal.h"
#include "runtime/collectives/mpi/Watchdog.h"

#include "llvm/Support/FormatVariadic.h"

#include <cctype>

using namespace tessera::runtime;

llvm::Expected<std::optional<mpi::LauncherLocalRank>>
mpi::launcherLocalRank(llvm::function_ref<const char *(const char *)> getenv) {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const char *v = getenv(name);
    if (!v || !*v)
      continue;
    int rank = 0;
    // getAsInteger takes the whole string: "1x", " 1", "-1" all fail.
    if (llvm::StringRef(v).getAsInteger(10, rank) || rank < 0 ||
        !std::isdigit(static_cast<unsigned char>(v[0])))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("{0}='{1}' is not a node-local rank (a non-negative "
                        "integer)",
                        name, v));
    return LauncherLocalRank{rank, name};
  }
  return std::nullopt;
}

llvm::Expected<mpi::NodeLocalRank>
mpi::nodeLocalRank(const Communicator &world,
                   llvm::function_ref<const char *(const char *)> getenv) {
  MPI_Comm node = MPI_COMM_NULL;
  int rc;
  {
    watchdog::Guard guard("communicator split (ranks of this node)",
                          world.size());
    rc = MPI_Comm_split_type(world.handle(), MPI_COMM_TYPE_SHARED, world.rank(),
                             MPI_INFO_NULL, &node);
  }
  if (rc != MPI_SUCCESS)
    return failure(rc, "MPI_Comm_split_type (ranks of this node)");
  NodeLocalRank out;
  MPI_Comm_rank(node, &out.sharedRank);
  MPI_Comm_size(node, &out.sharedSize);
  // The group's lowest world rank: its rank 0 (the split's key is the world
  // rank), translated without communication.
  MPI_Group nodeGroup, worldGroup;
  MPI_Comm_group(node, &nodeGroup);
  MPI_Comm_group(world.handle(), &worldGroup);
  int zero = 0;
  MPI_Group_translate_ranks(nodeGroup, 1, &zero, worldGroup, &out.sharedLeader);
  MPI_Group_free(&nodeGroup);
  MPI_Group_free(&worldGroup);
  MPI_Comm_free(&node);
  out.rank = out.sharedRank;

  llvm::Expected<std::optional<LauncherLocalRank>> launcher =
      launcherLocalRank(getenv);
  if (!launcher)
    return launcher.takeError();
  if (*launcher) {
    if ((*launcher)->rank >= world.size())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("{0}={1} is not a node-local rank: the job has {2} "
                        "rank{3}",
                        (*launcher)->variable, (*launcher)->rank, world.size(),
                        world.size() == 1 ? "" : "s"));
    out.rank = (*launcher)->rank;
    out.source = (*launcher)->variable;
  }
  return out;
}

std::string mpi::localRankMismatchWarning(llvm::StringRef tool, int rank,
                                          const NodeLocalRank &local,
                                          int others) {
  std::string s =
      llvm::formatv("{0}: warning: rank {1}: node-local rank {2} from {3}, but "
                    "{4} from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); using "
                    "{3}'s (it picks the rank's device)",
                    tool, rank, local.rank, local.source, local.sharedRank)
          .str();
  if (others > 0)
    s +=
        llvm::formatv(" (and {0} more rank{1})", others, others == 1 ? "" : "s")
            .str();
  return s;
}

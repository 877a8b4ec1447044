//===- NodeLocalTest.cpp - the launcher's node-local rank -----------------===//
//
// The pure part of mpi::nodeLocalRank: which variable wins, strict parsing,
// and the warning for a launcher that contradicts the shared-memory split
// (serial: no MPI_Init).
//
//===----------------------------------------------------------------------===//

#include "runtime/collectives/mpi/NodeLocal.h"

#include <gtest/gtest.h>

#include <map>

using namespace tessera::runtime::mpi;

namespace {

auto env(std::map<std::string, std::string> vars) {
  return [vars](const char *name) -> const char * {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

/// launcherLocalRank as "VARIABLE=RANK", "none" or "error: MESSAGE".
std::string read(std::map<std::string, std::string> vars) {
  llvm::Expected<std::optional<LauncherLocalRank>> r =
      launcherLocalRank(env(std::move(vars)));
  if (!r)
    return "error: " + llvm::toString(r.takeError());
  if (!*r)
    return "none";
  return (*r)->variable + "=" + std::to_string((*r)->rank);
}

TEST(NodeLocal, TheFirstVariableSetWins) {
  EXPECT_EQ(read({}), "none");
  EXPECT_EQ(read({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}}),
            "OMPI_COMM_WORLD_LOCAL_RANK=3");
  EXPECT_EQ(read({{"SLURM_LOCALID", "1"}}), "SLURM_LOCALID=1");
  EXPECT_EQ(read({{"MPI_LOCALRANKID", "0"}}), "MPI_LOCALRANKID=0");
  EXPECT_EQ(read({{"SLURM_LOCALID", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                  {"MPI_LOCALRANKID", "5"}}),
            "OMPI_COMM_WORLD_LOCAL_RANK=2");
  EXPECT_EQ(read({{"SLURM_LOCALID", "1"}, {"MPI_LOCALRANKID", "5"}}),
            "SLURM_LOCALID=1");
  // Set but empty counts as not set.
  EXPECT_EQ(read({{"OMPI_COMM_WORLD_LOCAL_RANK", ""}, {"SLURM_LOCALID", "4"}}),
            "SLURM_LOCALID=4");
  // The world rank variables are not node-local ranks.
  EXPECT_EQ(read({{"OMPI_COMM_WORLD_RANK", "3"}, {"SLURM_PROCID", "3"}}),
            "none");
}

TEST(NodeLocal, AMalformedValueIsAnErrorNotTheNextVariable) {
  for (const char *bad : {"x", "-1", "1x", " 1", "+1", "1.0", "99999999999"})
    EXPECT_EQ(
        read({{"OMPI_COMM_WORLD_LOCAL_RANK", bad}, {"SLURM_LOCALID", "1"}}),
        std::string("error: OMPI_COMM_WORLD_LOCAL_RANK='") + bad +
            "' is not a node-local rank (a non-negative integer)")
        << bad;
  EXPECT_EQ(read({{"SLURM_LOCALID", "one"}}),
            "error: SLURM_LOCALID='one' is not a node-local rank (a "
            "non-negative integer)");
}

TEST(NodeLocal, ContradictionAndItsWarning) {
  NodeLocalRank split;
  split.rank = split.sharedRank = 2;
  EXPECT_FALSE(split.contradicts()); // the split is its own source
  NodeLocalRank agree = split;
  agree.source = "SLURM_LOCALID";
  EXPECT_FALSE(agree.contradicts());
  NodeLocalRank launcher;
  launcher.rank = 0;
  launcher.source = "OMPI_COMM_WORLD_LOCAL_RANK";
  launcher.sharedRank = 2;
  EXPECT_TRUE(launcher.contradicts());
  EXPECT_EQ(localRankMismatchWarning("tessera-run", 2, launcher, 0),
            "tessera-run: warning: rank 2: node-local rank 0 from "
            "OMPI_COMM_WORLD_LOCAL_RANK, but 2 from "
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); using "
            "OMPI_COMM_WORLD_LOCAL_RANK's (it picks the rank's device)");
  EXPECT_NE(localRankMismatchWarning("t", 2, launcher, 1)
                .find("device) (and 1 more rank)"),
            std::string::npos);
  EXPECT_NE(localRankMismatchWarning("t", 2, launcher, 3)
                .find("device) (and 3 more ranks)"),
            std::string::npos);
}

} // namespace

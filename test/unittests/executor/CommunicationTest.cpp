//===- CommunicationTest.cpp - host logic of device communication ---------===//
//
// What can be checked without a GPU of `--backend cuda --collectives
// nccl|mpi` (runtime/executor/Communication.h): option parsing, the device
// each rank takes, the "two ranks on one device" refusal, the keep-alive
// bookkeeping of tensors used by communication in flight, and the order
// check NCCL's tagless point-to-point needs. Runs under mpirun -np 1, 2, 4
// (the node table is collective).
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Communication.h"
#include "runtime/collectives/mpi/NodeLocal.h"
#include "runtime/executor/Backend.h"

#include "gtest/gtest.h"

#include <string>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

namespace {

std::string errorText(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : std::string();
}

TEST(Communication, TransportNames) {
  llvm::Expected<Transport> nccl = parseTransport("nccl", "cuda");
  ASSERT_TRUE(static_cast<bool>(nccl)) << llvm::toString(nccl.takeError());
  EXPECT_EQ(*nccl, Transport::Nccl);
  llvm::Expected<Transport> staged = parseTransport("mpi", "cuda");
  ASSERT_TRUE(static_cast<bool>(staged));
  EXPECT_EQ(*staged, Transport::Mpi);
  llvm::Expected<Transport> cpu = parseTransport("mpi", "cpu");
  ASSERT_TRUE(static_cast<bool>(cpu));
  EXPECT_EQ(*cpu, Transport::Mpi);
  EXPECT_STREQ(transportName(Transport::Nccl), "nccl");
  EXPECT_STREQ(transportName(Transport::Mpi), "mpi");
}

TEST(Communication, NcclWithTheCpuBackendIsAnError) {
  llvm::Expected<Transport> t = parseTransport("nccl", "cpu");
  ASSERT_FALSE(static_cast<bool>(t));
  std::string msg = llvm::toString(t.takeError());
  EXPECT_NE(msg.find("--collectives nccl needs --backend cuda"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("only --collectives mpi"), std::string::npos) << msg;
  // createBackend refuses it too.
  BackendOptions options;
  options.collectives = Transport::Nccl;
  llvm::Expected<std::unique_ptr<Backend>> b = createBackend("cpu", options);
  ASSERT_FALSE(static_cast<bool>(b));
  msg = llvm::toString(b.takeError());
  EXPECT_NE(msg.find("--collectives nccl needs --backend cuda"),
            std::string::npos)
      << msg;
}

TEST(Communication, UnknownTransportIsAnError) {
  llvm::Expected<Transport> t = parseTransport("bogus", "cuda");
  ASSERT_FALSE(static_cast<bool>(t));
  std::string msg = llvm::toString(t.takeError());
  EXPECT_NE(msg.find("unknown transport 'bogus'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nccl or mpi"), std::string::npos) << msg;
}

TEST(Communication, DeviceIsTheNodeLocalRankModuloTheDeviceCount) {
  EXPECT_EQ(chooseDevice(0, 8), 0);
  EXPECT_EQ(chooseDevice(7, 8), 7);
  EXPECT_EQ(chooseDevice(8, 8), 0);
  EXPECT_EQ(chooseDevice(3, 2), 1);
  EXPECT_EQ(chooseDevice(5, 1), 0);
  EXPECT_EQ(chooseDevice(0, 0), -1); // no device
  EXPECT_EQ(chooseDevice(-1, 4), -1);
}

TEST(Communication, SharedDeviceDetection) {
  // One rank per device: nothing.
  EXPECT_FALSE(findSharedDevice({0, 1, 2, 3}, {0, 1, 2, 3}).has_value());
  // Ranks without a device are ignored.
  EXPECT_FALSE(findSharedDevice({0, 1}, {-1, -1}).has_value());
  // Four ranks on two devices (local rank % 2): 0 and 2 share device 0.
  std::optional<SharedDevice> s =
      findSharedDevice({0, 1, 2, 3}, {chooseDevice(0, 2), chooseDevice(1, 2),
                                      chooseDevice(2, 2), chooseDevice(3, 2)});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->firstRank, 0);
  EXPECT_EQ(s->secondRank, 2);
  EXPECT_EQ(s->device, 0);
  // World ranks need not be in order (a node's ranks of a larger job).
  s = findSharedDevice({9, 4, 6}, {1, 0, 1});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->firstRank, 6);
  EXPECT_EQ(s->secondRank, 9);
  EXPECT_EQ(s->device, 1);
  std::string msg = sharedDeviceMessage(*s);
  EXPECT_NE(msg.find("ranks 6 and 9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA device 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--collectives mpi"), std::string::npos) << msg;
}

// Collective: every rank of this (single-node) job sees every rank, and
// the node-local ranks are distinct.
TEST(Communication, NodeDeviceTable) {
  mpi::Communicator world = mpi::Communicator::world();
  int local = -1;
  std::vector<int> ranks, devices;
  int mine = chooseDevice(world.rank(), 1);
  ASSERT_EQ(errorText(nodeDeviceTable(world, mine, local, ranks, devices)), "");
  ASSERT_EQ(static_cast<int>(ranks.size()), world.size());
  EXPECT_EQ(local, world.rank());
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(ranks[r], r);
    EXPECT_EQ(devices[r], 0);
  }
  // On one device, NCCL would refuse any job of more than one rank.
  std::optional<SharedDevice> s = findSharedDevice(ranks, devices);
  EXPECT_EQ(s.has_value(), world.size() > 1);
  llvm::Expected<mpi::NodeLocalRank> again = mpi::nodeLocalRank(world);
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_EQ(again->rank, local);
}

// Collective: mpi::nodeLocalRank takes the launcher's variable (here a fake
// environment) over the shared-memory split, reports both and the split's
// group, and rejects a malformed or impossible value on every rank alike.
TEST(Communication, NodeLocalRankFromLauncherOrSplit) {
  mpi::Communicator world = mpi::Communicator::world();
  auto none = [](const char *) -> const char * { return nullptr; };
  llvm::Expected<mpi::NodeLocalRank> split = mpi::nodeLocalRank(world, none);
  ASSERT_TRUE(static_cast<bool>(split)) << llvm::toString(split.takeError());
  // One host: the split is the world, in world-rank order.
  EXPECT_EQ(split->source, "MPI_COMM_TYPE_SHARED");
  EXPECT_EQ(split->rank, world.rank());
  EXPECT_EQ(split->sharedRank, world.rank());
  EXPECT_EQ(split->sharedSize, world.size());
  EXPECT_EQ(split->sharedLeader, 0);
  EXPECT_FALSE(split->contradicts());

  // Every rank claims local rank 0: the launcher wins, and contradicts the
  // split on every rank but 0.
  auto zero = [](const char *name) -> const char * {
    return llvm::StringRef(name) == "SLURM_LOCALID" ? "0" : nullptr;
  };
  llvm::Expected<mpi::NodeLocalRank> slurm = mpi::nodeLocalRank(world, zero);
  ASSERT_TRUE(static_cast<bool>(slurm)) << llvm::toString(slurm.takeError());
  EXPECT_EQ(slurm->rank, 0);
  EXPECT_EQ(slurm->source, "SLURM_LOCALID");
  EXPECT_EQ(slurm->sharedRank, world.rank());
  EXPECT_EQ(slurm->contradicts(), world.rank() != 0);

  auto bad = [](const char *name) -> const char * {
    return llvm::StringRef(name) == "OMPI_COMM_WORLD_LOCAL_RANK" ? "two"
                                                                 : nullptr;
  };
  EXPECT_EQ(errorText(mpi::nodeLocalRank(world, bad).takeError()),
            "OMPI_COMM_WORLD_LOCAL_RANK='two' is not a node-local rank (a "
            "non-negative integer)");
  auto big = [](const char *name) -> const char * {
    return llvm::StringRef(name) == "MPI_LOCALRANKID" ? "64" : nullptr;
  };
  std::string msg = errorText(mpi::nodeLocalRank(world, big).takeError());
  EXPECT_NE(msg.find("MPI_LOCALRANKID=64 is not a node-local rank: the job "
                     "has "),
            std::string::npos)
      << msg;
}

// A tensor held for in-flight communication outlives every other owner
// until its ticket is released.
TEST(Communication, InFlightBuffersKeepTensorsAlive) {
  InFlightBuffers buffers;
  int64_t before = heapBytesLive();
  {
    Tensor a = Tensor::zeros(DType::F32, {256});
    Tensor b = Tensor::zeros(DType::F32, {128});
    buffers.hold(3, a);
    buffers.hold(3, b);
    buffers.hold(5, Tensor::zeros(DType::F32, {64}));
  }
  EXPECT_EQ(buffers.size(), 3u);
  EXPECT_TRUE(buffers.holds(3));
  EXPECT_GE(heapBytesLive() - before, (256 + 128 + 64) * 4);
  std::vector<Tensor> released = buffers.release(3);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].numel(), 256);
  EXPECT_FALSE(buffers.holds(3));
  EXPECT_EQ(buffers.size(), 1u);
  released.clear();
  EXPECT_TRUE(buffers.release(3).empty()); // released once
  buffers.releaseAll();
  EXPECT_EQ(buffers.size(), 0u);
  EXPECT_EQ(heapBytesLive(), before);
}

// 1F1B with 2 stages and 2 micro-batches: stage 0 sends activations on
// channel 0 in micro-batch order and receives gradients on channel 1;
// stage 1 the other way round. The orders agree.
TEST(Communication, PipelineMessageOrderAgrees) {
  std::vector<std::vector<PipelineMessage>> sends(2), recvs(2);
  sends[0] = {{0, 1, 0, 0}, {0, 1, 0, 1}};
  recvs[0] = {{1, 0, 1, 0}, {1, 0, 1, 1}};
  recvs[1] = {{0, 1, 0, 0}, {0, 1, 0, 1}};
  sends[1] = {{1, 0, 1, 0}, {1, 0, 1, 1}};
  EXPECT_EQ(errorText(checkPipelineMessageOrder(sends, recvs)), "");
  // Interleaving with other peers does not matter, only the pair's order.
  sends[0].insert(sends[0].begin() + 1, PipelineMessage{0, 2, 4, 0});
  recvs.resize(3);
  recvs[2] = {{0, 2, 4, 0}};
  EXPECT_EQ(errorText(checkPipelineMessageOrder(sends, recvs)), "");
}

TEST(Communication, PipelineMessageOrderMismatchIsNamed) {
  std::vector<std::vector<PipelineMessage>> sends(2), recvs(2);
  sends[0] = {{0, 1, 0, 0}, {0, 1, 2, 0}};
  recvs[1] = {{0, 1, 2, 0}, {0, 1, 0, 0}};
  std::string msg = errorText(checkPipelineMessageOrder(sends, recvs));
  EXPECT_NE(msg.find("stage 0's transfer #0 to stage 1 is channel 0, "
                     "micro-batch 0 but stage 1 receives channel 2, "
                     "micro-batch 0"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--collectives mpi"), std::string::npos) << msg;
  // A send nobody receives.
  recvs[1] = {{0, 1, 0, 0}};
  msg = errorText(checkPipelineMessageOrder(sends, recvs));
  EXPECT_NE(msg.find("receives nothing"), std::string::npos) << msg;
}

} // namespace

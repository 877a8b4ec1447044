//===- Communication.cpp - host logic of device communication -------------===//

#include "runtime/executor/Communication.h"

#include "runtime/collectives/mpi/Watchdog.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/KernelDesc.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstring>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const char *exec::transportName(Transport t) {
  return t == Transport::Nccl ? "nccl" : "mpi";
}

llvm::Expected<Transport> exec::parseTransport(llvm::StringRef name,
                                               llvm::StringRef backend) {
  if (name != "nccl" && name != "mpi")
    return fail("--collectives: unknown transport '" + name +
                "' (expected nccl or mpi)");
  if (name == "nccl" && backend != "cuda")
    return fail("--collectives nccl needs --backend cuda (the " + backend +
                " backend's collectives are MPI on host memory: only "
                "--collectives mpi is valid with it)");
  return name == "nccl" ? Transport::Nccl : Transport::Mpi;
}

int exec::chooseDevice(int localRank, int deviceCount) {
  if (deviceCount <= 0 || localRank < 0)
    return -1;
  return localRank % deviceCount;
}

std::optional<SharedDevice>
exec::findSharedDevice(llvm::ArrayRef<int> worldRanks,
                       llvm::ArrayRef<int> devices) {
  std::optional<SharedDevice> best;
  std::map<int, int> firstOf; // device -> lowest world rank on it
  for (size_t i = 0; i < worldRanks.size() && i < devices.size(); ++i) {
    if (devices[i] < 0)
      continue;
    auto [it, inserted] = firstOf.emplace(devices[i], worldRanks[i]);
    if (!inserted)
      it->second = std::min(it->second, worldRanks[i]);
  }
  for (size_t i = 0; i < worldRanks.size() && i < devices.size(); ++i) {
    if (devices[i] < 0)
      continue;
    int first = firstOf[devices[i]];
    if (first == worldRanks[i])
      continue;
    if (!best || worldRanks[i] < best->secondRank)
      best = SharedDevice{first, worldRanks[i], devices[i]};
  }
  return best;
}

std::string exec::sharedDeviceMessage(const SharedDevice &s) {
  return llvm::formatv("--collectives nccl: ranks {0} and {1} both use CUDA "
                       "device {2} of their node (more ranks than GPUs); "
                       "NCCL refuses two ranks of one communicator on one "
                       "device. Start one rank per GPU, or use --collectives "
                       "mpi (host-staged MPI collectives, slow)",
                       s.firstRank, s.secondRank, s.device)
      .str();
}

llvm::Error exec::nodeDeviceTable(const mpi::Communicator &world, int myDevice,
                                  int &localRank, std::vector<int> &nodeRanks,
                                  std::vector<int> &nodeDevices) {
  MPI_Comm node = MPI_COMM_NULL;
  int rc;
  {
    mpi::watchdog::Guard guard("communicator split (ranks of this node)",
                               world.size());
    rc = MPI_Comm_split_type(world.handle(), MPI_COMM_TYPE_SHARED, world.rank(),
                             MPI_INFO_NULL, &node);
  }
  if (rc != MPI_SUCCESS)
    return mpi::failure(rc, "MPI_Comm_split_type (ranks of this node)");
  int size = 1;
  MPI_Comm_rank(node, &localRank);
  MPI_Comm_size(node, &size);
  int mine[2] = {world.rank(), myDevice};
  std::vector<int> all(2 * size);
  {
    mpi::watchdog::Guard guard("allgather of the node's devices", size);
    rc = MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, node);
  }
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS)
    return mpi::failure(rc, "MPI_Allgather of the node's CUDA devices");
  nodeRanks.resize(size);
  nodeDevices.resize(size);
  for (int i = 0; i < size; ++i) {
    nodeRanks[i] = all[2 * i];
    nodeDevices[i] = all[2 * i + 1];
  }
  return llvm::Error::success();
}

void InFlightBuffers::hold(int64_t ticket, Tensor t) {
  held[ticket].push_back(std::move(t));
}

std::vector<Tensor> InFlightBuffers::release(int64_t ticket) {
  auto it = held.find(ticket);
  if (it == held.end())
    return {};
  std::vector<Tensor> out = std::move(it->second);
  held.erase(it);
  return out;
}

size_t InFlightBuffers::size() const {
  size_t n = 0;
  for (const auto &[ticket, ts] : held)
    n += ts.size();
  return n;
}

llvm::Error exec::checkPipelineMessageOrder(
    llvm::ArrayRef<std::vector<PipelineMessage>> sends,
    llvm::ArrayRef<std::vector<PipelineMessage>> recvs) {
  int64_t stages = static_cast<int64_t>(std::max(sends.size(), recvs.size()));
  for (int64_t a = 0; a < stages; ++a)
    for (int64_t b = 0; b < stages; ++b) {
      std::vector<PipelineMessage> out, in;
      if (a < static_cast<int64_t>(sends.size()))
        for (const PipelineMessage &m : sends[a])
          if (m.to == b)
            out.push_back(m);
      if (b < static_cast<int64_t>(recvs.size()))
        for (const PipelineMessage &m : recvs[b])
          if (m.from == a)
            in.push_back(m);
      size_t n = std::max(out.size(), in.size());
      for (size_t k = 0; k < n; ++k) {
        if (k < out.size() && k < in.size() && out[k] == in[k])
          continue;
        auto text = [](const std::vector<PipelineMessage> &v, size_t k) {
          if (k >= v.size())
            return std::string("nothing");
          return llvm::formatv("channel {0}, micro-batch {1}", v[k].channel,
                               v[k].microBatch)
              .str();
        };
        return fail(llvm::formatv(
            "--collectives nccl: stage {0}'s transfer #{1} to stage {2} is "
            "{3} but stage {2} receives {4} there; NCCL matches sends and "
            "receives by order (no tags), so this schedule needs "
            "--collectives mpi",
            a, k, b, text(out, k), text(in, k)));
      }
    }
  return llvm::Error::success();
}

llvm::Error exec::runHostCollective(const CollectiveSpec &spec,
                                    const Tensor &in, Tensor &out,
                                    const mpi::Communicator &comm,
                                    mpi::TrafficCounter *traffic) {
  switch (spec.op) {
  case CollectiveOp::AllReduce:
    std::memcpy(out.raw(), in.raw(), in.bytes());
    return mpi::allReduce(
        out, spec.max ? mpi::ReduceOp::Max : mpi::ReduceOp::Sum, comm, traffic);
  case CollectiveOp::AllGather:
    return mpi::allGather(in, spec.dim, comm, out, traffic);
  case CollectiveOp::ReduceScatter:
    return mpi::reduceScatter(in, spec.dim, comm, out, traffic);
  case CollectiveOp::AllToAll:
    return mpi::allToAll(in, spec.dim, spec.dim2, comm, out, traffic);
  case CollectiveOp::AllSlice:
    break;
  }
  return fail("all_slice needs no communication");
}

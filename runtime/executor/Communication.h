//===- Communication.h - host logic of device communication -----*- C++ -*-===//
//
// The parts of a device backend's communication (Backend.h, Communication)
// that need no GPU, kept apart so that they are unit-tested on the host:
//  - the transport names of `tessera-run --collectives` and their checks;
//  - which CUDA device a rank takes (its node-local rank modulo the
//    device count) and the detection of two ranks of one node on one
//    device, which NCCL refuses;
//  - InFlightBuffers: the tensors read or written by communication-stream
//    work that is still in flight, kept alive until the compute stream has
//    waited for that work (so the stream-ordered pool cannot hand their
//    memory to a compute kernel while NCCL still uses it).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_COMMUNICATION_H
#define TESSERA_RUNTIME_EXECUTOR_COMMUNICATION_H

#include "runtime/Tensor.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

/// How a device backend's collectives move data (tessera-run
/// --collectives):
///   Nccl: NCCL on the device, on a communication stream (one rank per GPU);
///   Mpi:  host staging: device -> host copy, the MPI collective of
///         runtime/collectives/mpi, host -> device copy (several ranks may
///         share a GPU; slow).
enum class Transport { Nccl, Mpi };

/// "nccl" or "mpi".
const char *transportName(Transport t);

/// The transport called `name` for backend `backend` ("cpu" or "cuda").
/// Errors: an unknown name; "nccl" with the cpu backend (whose collectives
/// are MPI on host memory: only "mpi" is valid there).
llvm::Expected<Transport> parseTransport(llvm::StringRef name,
                                         llvm::StringRef backend);

/// The CUDA device of a rank with node-local rank `localRank` (>= 0; from
/// mpi::nodeLocalRank, NodeLocal.h) on a
/// node with `deviceCount` (> 0) devices: localRank % deviceCount.
int chooseDevice(int localRank, int deviceCount);

/// Two ranks of one node that chose the same device: the lowest world rank
/// sharing a device with an earlier one, as (first rank, second rank,
/// device), or nothing. `worldRanks[i]` chose `devices[i]` (same length;
/// devices < 0 are ignored: no device).
struct SharedDevice {
  int firstRank = -1, secondRank = -1, device = -1;
};
std::optional<SharedDevice> findSharedDevice(llvm::ArrayRef<int> worldRanks,
                                             llvm::ArrayRef<int> devices);

/// The error for a SharedDevice under NCCL: names both ranks and the
/// device, and suggests --collectives mpi.
std::string sharedDeviceMessage(const SharedDevice &s);

/// Collective over `world`: this rank's node-local rank (MPI_Comm_split_type
/// MPI_COMM_TYPE_SHARED) and, in `nodeRanks` / `nodeDevices`, the world
/// rank and `myDevice` of every rank on this node (MPI_Allgather). Error:
/// MPI failure.
llvm::Error nodeDeviceTable(const mpi::Communicator &world, int myDevice,
                            int &localRank, std::vector<int> &nodeRanks,
                            std::vector<int> &nodeDevices);

/// One pipeline transfer as a stage issues it (a tsrt.send or tsrt.recv
/// of the program of one schedule action): from stage, to stage, the tsrt
/// channel and the micro-batch.
struct PipelineMessage {
  int64_t from = 0, to = 0, channel = 0, microBatch = 0;
  bool operator==(const PipelineMessage &o) const {
    return from == o.from && to == o.to && channel == o.channel &&
           microBatch == o.microBatch;
  }
};

/// NCCL point-to-point has no tags: the k-th send from stage a to stage b
/// matches the k-th receive of b from a. `sends[s]` / `recvs[s]` are the
/// transfers stage s issues, in the order it issues them (its schedule's
/// actions in order, each program's instructions in order). Error, naming
/// the stages and the first differing transfer (channel, micro-batch),
/// when for some pair (a, b) the order of a's sends to b differs from the
/// order of b's receives from a (MPI matches by tag and does not care).
llvm::Error
checkPipelineMessageOrder(llvm::ArrayRef<std::vector<PipelineMessage>> sends,
                          llvm::ArrayRef<std::vector<PipelineMessage>> recvs);

struct CollectiveSpec; // Backend.h

/// The MPI collective `spec` (all_reduce, all_gather, reduce_scatter,
/// all_to_all) of host tensor `in` into the preallocated host tensor `out`
/// over `comm`, with the CPU backend's semantics (runtime/collectives/mpi);
/// what --collectives mpi runs between its device copies. Errors: MPI
/// failures, and all_slice (no communication).
llvm::Error runHostCollective(const CollectiveSpec &spec, const Tensor &in,
                              Tensor &out, const mpi::Communicator &comm,
                              mpi::TrafficCounter *traffic);

/// Tensors held for communication work in flight, by ticket (an
/// all_reduce_start's request index, or a per-step sequence number for
/// synchronous work). `hold` adds tensors under a ticket; `release` drops
/// (and returns) them once the compute stream has waited for that ticket's
/// work; `releaseAll` drops everything (after a full synchronisation).
class InFlightBuffers {
public:
  void hold(int64_t ticket, Tensor t);
  /// The tensors held under `ticket` (empty if none); they are no longer
  /// held.
  std::vector<Tensor> release(int64_t ticket);
  /// Drops every held tensor.
  void releaseAll() { held.clear(); }
  /// Number of tensors held.
  size_t size() const;
  /// Whether anything is held under `ticket`.
  bool holds(int64_t ticket) const { return held.count(ticket) != 0; }

private:
  std::map<int64_t, std::vector<Tensor>> held;
};

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_COMMUNICATION_H

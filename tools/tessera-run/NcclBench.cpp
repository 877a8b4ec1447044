//===- NcclBench.cpp - NCCL collectives for --bench-collectives -----------===//

#include "NcclBench.h"

#include "runtime/backends/cuda/CudaRuntime.h"
#include "runtime/collectives/mpi/NodeLocal.h"
#include "runtime/collectives/nccl/NcclCollectives.h"

#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime_api.h>

#include <memory>

using namespace tessera::runtime;
using namespace tessera::runtime::calibrate;
using tessera::planner::Collective;

namespace {

/// What the timed calls share: the communicator, the stream and the
/// device buffers of the size being measured (replaced for each size).
struct NcclBenchState {
  std::unique_ptr<nccl::NcclCommunicator> comm;
  cudaStream_t stream = nullptr;
  Tensor full, part, out;
  ~NcclBenchState() {
    if (stream)
      cudaStreamDestroy(stream);
  }
};

} // namespace

llvm::Expected<BenchOps>
calibrate::ncclBenchOps(const mpi::Communicator &world) {
  if (llvm::Error err = cuda::deviceAvailable())
    return std::move(err);
  int devices = 0;
  if (llvm::Error err =
          cuda::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"))
    return std::move(err);
  llvm::Expected<mpi::NodeLocalRank> local = mpi::nodeLocalRank(world);
  if (!local)
    return local.takeError();
  if (local->rank >= devices)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("rank {0} is node-local rank {1} but this node has {2} "
                      "CUDA device(s): NCCL needs one device per rank",
                      world.rank(), local->rank, devices));
  auto state = std::make_shared<NcclBenchState>();
  nccl::NcclCommunicator::Options options;
  options.device = local->rank;
  options.name = "tessera-bench";
  llvm::Expected<std::unique_ptr<nccl::NcclCommunicator>> comm =
      nccl::NcclCommunicator::create(world, options);
  if (!comm)
    return comm.takeError();
  state->comm = std::move(*comm);
  if (llvm::Error err =
          cuda::check(cudaStreamCreate(&state->stream), "cudaStreamCreate"))
    return std::move(err);

  const int64_t n = world.size();
  BenchOps ops;
  ops.name = "NCCL on device " + std::to_string(local->rank);
  ops.make = [state,
              n](Collective kind,
                 int64_t elems) -> llvm::Expected<std::function<bool()>> {
    if (kind == Collective::SendRecv)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "send_recv is not benchmarked on NCCL");
    for (auto [t, count] :
         {std::pair{&state->full, elems}, std::pair{&state->part, elems / n},
          std::pair{&state->out, elems}}) {
      llvm::Expected<Tensor> buffer = cuda::emptyDevice(DType::F32, {count});
      if (!buffer)
        return buffer.takeError();
      *t = std::move(*buffer);
    }
    NcclBenchState *s = state.get();
    // Enqueues the collective and waits for it.
    auto run = [s](llvm::Error err) {
      bool ok = !err;
      llvm::consumeError(std::move(err));
      return ok && cudaStreamSynchronize(s->stream) == cudaSuccess;
    };
    switch (kind) {
    case Collective::AllReduce:
      return std::function<bool()>([s, run] {
        return run(
            nccl::allReduce(s->full, nccl::ReduceOp::Sum, *s->comm, s->stream));
      });
    case Collective::AllGather:
      return std::function<bool()>([s, run] {
        return run(nccl::allGather(s->part, 0, *s->comm, s->out, nullptr, 0,
                                   s->stream));
      });
    case Collective::ReduceScatter:
      return std::function<bool()>([s, run] {
        return run(nccl::reduceScatter(s->full, 0, *s->comm, s->part, nullptr,
                                       0, s->stream));
      });
    case Collective::AllToAll:
      return std::function<bool()>([s, run] {
        return run(nccl::allToAll(s->full, 0, 0, *s->comm, s->out, nullptr, 0,
                                  s->stream));
      });
    case Collective::SendRecv:
      break;
    }
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "unknown collective");
  };
  return ops;
}

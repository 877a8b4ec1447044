//===- NcclBench.h - NCCL collectives for --bench-collectives ---*- C++ -*-===//
//
// `mpirun -np N tessera-run --bench-collectives --backend cuda` (issue 8):
// the same nccl-tests table as the CPU run (Calibrate.h, benchCollectives),
// measured on the GPU with the collectives of runtime/collectives/nccl. Each
// rank uses device nodeLocalRank mod cudaGetDeviceCount (as the cuda
// backend does); one NCCL communicator spans `world`. A timed call enqueues
// the collective on one stream and waits for it (cudaStreamSynchronize), so
// the table's time is the completed collective, as nccl-tests' out-of-place
// figures with a synchronisation per iteration.
//
// Built only with NCCL (TESSERA_HAVE_NCCL); not run here without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TOOLS_TESSERA_RUN_NCCLBENCH_H
#define TESSERA_TOOLS_TESSERA_RUN_NCCLBENCH_H

#include "Calibrate.h"

#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/Support/Error.h"

namespace tessera::runtime::calibrate {

/// The collectives of an NCCL benchmark over `world` (all_reduce,
/// all_gather, reduce_scatter, all_to_all; send_recv is left out). Collective
/// over `world`. Errors: no usable CUDA device (the driver's reason), NCCL
/// initialisation failed (names the rank), two ranks of one node on one
/// device (NCCL refuses it).
llvm::Expected<BenchOps> ncclBenchOps(const mpi::Communicator &world);

} // namespace tessera::runtime::calibrate

#endif // TESSERA_TOOLS_TESSERA_RUN_NCCLBENCH_H

//===- Calibrate.h - measure this machine for the planner -------*- C++ -*-===//
//
// `mpirun -np N tessera-run --calibrate [OUT.json]` (issue 6, "cpu:N
// calibration"): measures, with all N ranks working at once as they do in a
// training step, the figures the planner's step-time model uses, and
// returns them as a planner::Cluster (compiler/planner/Cluster.h) of one
// node with N devices:
//
//  - `gemm`: achieved fp32 FLOP/s of cpu::matmul (the OpenBLAS sgemm the CPU
//    backend runs) for every (m, n, k) of a table; `peak_flops.fp32` is the
//    best of them and `gemm_peak_fraction` 1.
//  - `memory_bandwidth`: bytes/s of an elementwise kernel (cpu::add, 12
//    bytes per element) fitted over sizes from cache-resident to
//    DRAM-bound; `op_overhead`: the time of the same kernel on a few
//    elements; `transcendental_rate`: evaluations per second of cpu::exp
//    and cpu::erf (libm), the mean of their per-element times.
//  - `kernel_seconds_per_element`: seconds per element of the first operand
//    of the backend's non-GEMM kernels that run far below the roofline
//    (layer_norm, layer_norm_grad, adamw_update, sgd_update, gelu,
//    gelu_grad, cross_entropy, cross_entropy_grad), each on [2048, 128]
//    ([256, 128] quick), keyed by the tsr op name; and "attention" /
//    "attention_grad": seconds per score of cpu::attentionForward /
//    attentionBackward (causal, 128 x 128, head size 16).
//  - `collectives.<kind>.intra_node` for all_reduce, all_gather,
//    reduce_scatter, all_to_all (runtime/collectives/mpi over
//    MPI_COMM_WORLD) and send_recv (a ring exchange with
//    MPI_Sendrecv_replace, as the ring-attention kernel does): α and β by a
//    least-squares fit of t = α·ringSteps + busBandwidthFactor·S/β
//    (compiler/planner/CostModel.h, S as nccl-tests counts it) over several
//    message sizes, weighted by 1/t² (relative error) so that small and
//    large messages count alike. Each timed collective follows a fixed
//    compute burst (four 128^3 GEMMs) whose time alone is subtracted, so the
//    collective is timed as a step meets it: ranks arriving from compute
//    (oversubscribed: from their turn on a shared core), not from the
//    previous collective. inter_node is the same (one node), and the plain
//    intra_node / inter_node links are all_reduce's.
//
// Every timing is taken between MPI_Barriers; a trial's time is the slowest
// rank's, and each figure is the median of several trials.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TOOLS_TESSERA_RUN_CALIBRATE_H
#define TESSERA_TOOLS_TESSERA_RUN_CALIBRATE_H

#include "compiler/planner/Cluster.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace tessera::runtime::calibrate {

struct Options {
  /// A small table, few sizes and short trials: seconds instead of about a
  /// minute (for tests; the figures are rougher).
  bool quick = false;
  /// Progress lines (rank 0 only; null: silent).
  llvm::raw_ostream *log = nullptr;
};

/// Collective over `world`: every rank must call it. Returns the measured
/// cluster on every rank (all ranks agree on it: the times are reduced over
/// the ranks).
llvm::Expected<planner::Cluster> measure(const mpi::Communicator &world,
                                         const Options &options);

} // namespace tessera::runtime::calibrate

#endif // TESSERA_TOOLS_TESSERA_RUN_CALIBRATE_H

//===- Calibrate.h - measure this machine for the planner -------*- C++ -*-===//
//
// `mpirun -np N tessera-run --calibrate [OUT.json]` (issue 6, "cpu:N
// calibration"): measures, with all N ranks working at once as they do in a
// training step, the figures the planner's step-time model uses, and
// returns them as a planner::Cluster (common/cluster/Cluster.h) of one
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
//    (layer_norm, layer_norm_grad, rms_norm, rms_norm_grad, adamw_update,
//    sgd_update, gelu, gelu_grad, silu, silu_grad, cross_entropy,
//    cross_entropy_grad), each on [2048, 128]
//    ([256, 128] quick), keyed by the tsr op name; and "attention" /
//    "attention_grad": seconds per score of cpu::attentionForward /
//    attentionBackward (causal, 128 x 128, head size 16).
//  - `cores_per_node` (the CPUs the ranks may run on) and, when the ranks
//    outnumber them, `waiting_rank_share`: ranks r and r + N/2 (bound with
//    --map-by core, a pair shares a core) run a two-stage 1F1B step of 4
//    micro-batches (a forward is one LayerSegment, a backward two, 16 KiB
//    messages over MPI_Isend/MPI_Recv, MPI_Testsome after every action as
//    the pipeline executor does), timed back to back with the all-busy
//    LayerSegment in every trial (the host's speed drifts over seconds;
//    the ratio does not). tsrt::schedule::fitWaitingShare finds the share
//    of its core a waiting rank keeps (0: it yields its core entirely, 1:
//    it keeps spinning) for which the pipeline simulation StepCost uses
//    predicts that step.
//  - `collectives.<kind>.intra_node` for all_reduce, all_gather,
//    reduce_scatter, all_to_all (runtime/collectives/mpi over
//    MPI_COMM_WORLD) and send_recv (a ring exchange with
//    MPI_Sendrecv_replace, as the ring-attention kernel does): α and β by a
//    least-squares fit of t = α·ringSteps + busBandwidthFactor·S/β
//    (common/cluster/CostModel.h, S as nccl-tests counts it) over several
//    message sizes, weighted by 1/t² (relative error) so that small and
//    large messages count alike. Each timed collective follows a
//    LayerSegment (an MLP block on 32 tokens of width 128: layer norm, two
//    GEMMs, GeLU; about 0.6 MB touched), and the segment alone is timed
//    right before it in every trial (15 paired trials, the median of the
//    differences), so the collective is timed as a step meets it: ranks
//    arriving from a layer's compute with its tensors in cache
//    (oversubscribed: from their turn on a shared core), not from the
//    previous collective. `collectives.<kind>.groups` repeats the
//    measurement for every group shape a grid axis can take on N ranks
//    (size g >= 2, ranks s apart, g·s dividing N; MPI_Comm_split, all
//    groups at once) and the world (N, 1): the library picks its algorithm
//    by group size, and bound round-robin the stride decides whether a
//    group's ranks share a core. Each group also keeps its times per size
//    ("measured": [[S, seconds], ...], made non-decreasing in S by
//    planner::nonDecreasingTimes), which the planner interpolates instead of
//    the α-β line (planner::collectiveSeconds): one line fits the protocol and
//    algorithm switches between 256 B and 4 MiB badly, most of all at the
//    1-64 KiB a small model's collectives have. StepCost uses the group of
//    each collective's size and stride. The same trials also time the
//    collective back to back, without the segment ("measured_back_to_back",
//    the median, made non-decreasing the same way): StepCost times a
//    collective that directly follows another one from it. inter_node is the
//    same (one node), and the plain intra_node / inter_node links are
//    all_reduce's α-β.
//
// Every timing is taken between MPI_Barriers; a trial's time is the slowest
// rank's, and each figure is the median of several trials.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TOOLS_TESSERA_RUN_CALIBRATE_H
#define TESSERA_TOOLS_TESSERA_RUN_CALIBRATE_H

#include "common/cluster/Cluster.h"
#include "common/cluster/CostModel.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

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

/// What `tessera-run --bench-collectives` measures.
struct BenchOptions {
  /// Message sizes S (bytes, as nccl-tests counts them): minBytes,
  /// minBytes·stepFactor, ... up to maxBytes.
  int64_t minBytes = 1 << 10, maxBytes = 1 << 24, stepFactor = 4;
  /// Trials per size (the median is printed) and the length of one trial.
  int trials = 5;
  double secondsPerTrial = 0.05;
  /// Where rank 0 prints the table (null: nowhere).
  llvm::raw_ostream *out = nullptr;
};

/// How a benchmark runs one collective: `make(kind, elems)` returns a call
/// of `kind` on buffers of `elems` floats (S = 4·elems bytes as nccl-tests
/// counts it; elems a multiple of the ranks) that returns false on
/// failure, or an error when the kind cannot be benchmarked (it is then
/// left out of the table). `name` heads the table ("MPI (the CPU backend's
/// collectives)", "NCCL").
struct BenchOps {
  std::string name;
  std::function<llvm::Expected<std::function<bool()>>(planner::Collective,
                                                      int64_t elems)>
      make;
};

/// nccl-tests for the CPU backend (issue 8): for all_reduce, all_gather,
/// reduce_scatter, all_to_all over `world` and a send/recv ring exchange,
/// at each size, the median time of back-to-back calls (slowest rank),
/// algbw = S / time and busbw = algbw · busBandwidthFactor (nccl-tests'
/// definitions, common/cluster/CostModel.h), one row per size, printed by
/// rank 0. Collective over `world`. Error: an MPI failure (names the
/// collective and size). `ops` (default: the CPU backend's MPI
/// collectives) runs them on another transport (NcclBench.h).
llvm::Error benchCollectives(const mpi::Communicator &world,
                             const BenchOptions &options,
                             const BenchOps *ops = nullptr);

} // namespace tessera::runtime::calibrate

#endif // TESSERA_TOOLS_TESSERA_RUN_CALIBRATE_H

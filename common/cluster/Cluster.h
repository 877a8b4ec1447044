//===- Cluster.h - the machine the planner plans for ------------*- C++ -*-===//
//
// A cluster description (issue 6, `--cluster`): how many nodes, devices per
// node, each device's peak FLOP/s per dtype and memory, and the α-β figures
// of the links inside a node and across nodes. It is read from a JSON file
// (the format `tessera-run --calibrate` writes) or built from a preset
// (`dgx-a100:N`, `dgx-h100:N`, `grand-teton-h100:N`: datasheet figures, every
// one naming its source; `cpu:N`: the calibration of N MPI ranks on this
// machine, read from calibrationPath(N), which `mpirun -np N tessera-run
// --calibrate` writes).
//
// JSON format (all numbers in SI units: FLOP/s, bytes, bytes/s, seconds):
//
//   {
//     "name": "dgx-h100:2",
//     "nodes": 2,
//     "devices_per_node": 8,
//     "peak_flops": {"bf16": 9.89e14, "fp16": 9.89e14, "fp32": 6.69e13},
//     "memory_bytes": 8.0e10,
//     "intra_node": {"bandwidth": 4.5e11, "latency": 3e-6},
//     "inter_node": {"bandwidth": 5.0e10, "latency": 8e-6},
//     "source": "free text: where the figures come from"
//   }
//
// `name` and `source` are optional; so are these, which calibration
// (`tessera-run --calibrate`) measures and presets partly give:
//
//     "memory_bandwidth": 2.0e12,      // device memory, bytes/s (streaming)
//     "op_overhead": 5e-6,             // seconds of fixed cost per kernel
//     "transcendental_rate": 2e8,      // exp/erf/... evaluations per second
//     "cores_per_node": 2,             // processors the node's devices share
//     "waiting_rank_share": 0.6,       // core share a waiting rank keeps
//     "sync_lag_fraction": 0.15,       // compute after a collective, extra
//     "sync_lag_window": 2e-3,         // ... counted up to this, seconds
//     "compute_scale": 0.9,            // factor on every kernel's time
//     "gemm_peak_fraction": 0.8,       // best fraction of peak a GEMM reaches
//     "gemm": [                        // measured GEMMs C[m,n] = A[m,k]·B[k,n]
//       {"dtype": "fp32", "m": 512, "n": 512, "k": 512, "flops": 4.1e10}, ...
//     ],
//     "collectives": {                 // per-kind α-β, overriding the links
//       "all_reduce": {"intra_node": {"bandwidth": 3e9, "latency": 2e-5},
//                      "groups": [      // inside a node, by group shape
//                        {"size": 2, "stride": 1, "bandwidth": 2e9,
//                         "latency": 4e-5,
//                         "measured": [[256, 9e-6], [1024, 1.2e-5], ...]},
//                        ...]},               // optional: S bytes, seconds
//       ...                            // also all_gather, reduce_scatter,
//     }                                // all_to_all, send_recv; inter_node
//
// Absent, memory_bandwidth, op_overhead, transcendental_rate and
// cores_per_node are 0 (not modelled),
// gemm_peak_fraction is 1, gemm is empty and every collective uses the
// `intra_node` / `inter_node` link.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_CLUSTER_CLUSTER_H
#define TESSERA_COMMON_CLUSTER_CLUSTER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::planner {

struct Cluster {
  std::string name;
  int64_t nodes = 1, devicesPerNode = 1;
  /// Peak FLOP/s of one device per compute dtype ("fp32", "bf16", "fp16"),
  /// dense (no structured sparsity).
  std::map<std::string, double> peakFlops;
  /// Memory of one device, bytes.
  double memoryBytes = 0;
  /// One link class for the α-β model: `bandwidth` is bytes/s that ONE
  /// device can send (and, at the same time, receive) in one direction;
  /// `latency` is the per-message start-up time α in seconds.
  struct Link {
    double bandwidth = 0;
    double latency = 0;
    /// Measured times of one collective on this link, {S bytes (as
    /// nccl-tests counts them), seconds}, S strictly ascending (JSON
    /// "measured": [[S, seconds], ...], in a "groups" element only;
    /// calibration writes it). When
    /// present, collectiveSeconds interpolates it linearly in S instead of
    /// taking the α-β line: below the first size it takes the first time,
    /// beyond the last it adds the α-β bandwidth term for the excess. A
    /// library switches protocol and algorithm with the message size (Open
    /// MPI: eager below 4 KiB, then rendezvous; ring, recursive doubling or
    /// Rabenseifner by size), so one line fits small and large messages
    /// badly; Alpa's collective profiling database interpolates measured
    /// sizes the same way (Zheng et al., OSDI 2022).
    std::vector<std::pair<double, double>> measured;
    /// The group size `measured` was taken on; collectiveSeconds uses it
    /// for groups of this many ranks only (JSON: the group's "size").
    int64_t measuredRanks = 0;
    /// Measured times of the same collective right after another one (no
    /// compute between: the ranks arrive together), {S bytes, seconds}, S
    /// strictly ascending (JSON "measured_back_to_back", in a "groups"
    /// element only; calibration writes it). `measured` is taken after a
    /// layer-like compute segment, whose end the ranks reach apart; a
    /// collective that directly follows another one in a step (ZeRO's
    /// reduce-scatters and all-gathers after the backward, gradient
    /// all-reduces in a row) is timed from this table instead
    /// (collectiveSeconds with backToBack). Empty: `measured` serves both.
    std::vector<std::pair<double, double>> measuredBackToBack;
  };
  /// Device to device inside a node (NVLink/NVSwitch on DGX) and device to
  /// device across nodes (the network adapter(s) serving one device).
  Link intraNode, interNode;
  /// Where the figures come from (datasheets, papers, or calibration).
  std::string source;

  /// Streaming bandwidth of device memory, bytes/s; 0 = not modelled.
  double memoryBandwidth = 0;
  /// Fixed cost of one kernel (launch, dispatch), seconds; 0 = none.
  double opOverhead = 0;
  /// Transcendental evaluations (exp, erf, ... as elementwise kernels run
  /// them) per second; 0 = not modelled (counted as FLOPs only).
  double transcendentalRate = 0;
  /// Processors shared by the devices of one node, when they are not
  /// devices of their own: CPU cores for ranks of the CPU backend (4 ranks
  /// on 2 cores share them; a rank waiting for a message gives its core to
  /// the others). 0 = every device computes on its own (GPUs). The pipeline
  /// simulation speeds up the running stages while others wait
  /// (tsrt::schedule::ComputeSharing).
  double coresPerNode = 0;
  /// With coresPerNode < devicesPerNode: the fraction of its core share a
  /// rank still takes while it waits for a message (1: it keeps spinning,
  /// 0: it yields its core entirely), measured by calibration (JSON
  /// "waiting_rank_share"; default 1, i.e. no speed-up).
  double waitingRankShare = 1.0;
  /// With coresPerNode < devicesPerNode: how much longer the compute right
  /// after a collective takes, as a fraction of it (JSON
  /// "sync_lag_fraction", >= 0; default 0, i.e. none). Ranks that share a
  /// core leave a collective apart: the first resumes computing while its
  /// core-mate still waits for its last message, which the scheduler
  /// delivers only when the first one's time slice ends, and the ranks on
  /// the other core that need the late one idle meanwhile. So each
  /// collective followed by compute w costs syncLagFraction · min(w,
  /// syncLagWindow) more (StepCost.h). bench/fit_waiting_share.py fits it
  /// to real steps of a reference model; it is 0 for the presets (a GPU
  /// does not share its processor).
  double syncLagFraction = 0;
  /// A factor on every kernel's time (JSON "compute_scale", > 0; default 1).
  /// The calibration times each kernel by the slowest of its ranks, all
  /// computing at once on shared cores; in a step a rank's long stretches
  /// of kernels even out over a time slice and run faster than that.
  /// bench/fit_waiting_share.py fits it, with syncLagFraction, to real steps
  /// of a reference model; the presets leave it at 1.
  double computeScale = 1.0;
  /// The most compute after one collective that syncLagFraction applies to,
  /// seconds (JSON "sync_lag_window", > 0; default 2e-3, the order of a
  /// Linux scheduler time slice with two runnable tasks on a core).
  double syncLagWindow = 2e-3;
  /// The largest fraction of peakFlops a GEMM reaches (cuBLAS on large
  /// shapes); the GEMM model's ceiling when `gemm` has no measurement.
  double gemmPeakFraction = 1.0;
  /// Measured seconds per element of non-GEMM kernels, by tsr op name
  /// ("layer_norm", "layer_norm_grad", "adamw_update", ...), an element
  /// being one of the op's first operand (JSON "kernel_seconds_per_element";
  /// calibration measures the backend's own kernels). An op listed here is
  /// timed as elements x this (plus op_overhead) instead of by roofline:
  /// row reductions and optimizer updates run far below both the FLOP and
  /// the bandwidth roofline on a CPU.
  std::map<std::string, double> kernelSecondsPerElement;
  /// One measured GEMM C[m, n] = A[m, k] · B[k, n]: achieved FLOP/s.
  struct GemmPoint {
    std::string dtype;
    int64_t m = 0, n = 0, k = 0;
    double flops = 0;
  };
  std::vector<GemmPoint> gemm;
  /// Per-collective links ("all_reduce", "all_gather", "reduce_scatter",
  /// "all_to_all", "send_recv"), measured by calibration with nccl-tests'
  /// bus-bandwidth definitions; a kind not listed uses intraNode/interNode.
  /// α-β of one collective kind measured on groups of `size` ranks that
  /// are `stride` ranks apart ({b, b + stride, ..., b + (size-1)·stride}),
  /// every group of that shape running at once, inside one node. What a
  /// group costs depends on its shape, not only on the link: the library
  /// picks its algorithm by group size (Open MPI's tuned all-reduce takes a
  /// segmented ring for 2 ranks and Rabenseifner's for 4, at 64 KiB), and
  /// on an oversubscribed CPU a stride decides whether the group's ranks
  /// share a core.
  struct GroupLink {
    int64_t size = 0, stride = 0;
    Link link;
  };
  struct LinkPair {
    std::optional<Link> intraNode, interNode;
    /// Inside a node, by group shape (JSON "groups": [{"size", "stride",
    /// "bandwidth", "latency", optional "measured"}, ...]).
    std::vector<GroupLink> groups;
  };
  std::map<std::string, LinkPair> collectiveLinks;

  /// The link collectives of `kind` use inside a node (`withinNode`) or
  /// across nodes. Inside a node, for a group of `groupSize` ranks `stride`
  /// apart (0: not known), a measured group of that size and stride is
  /// preferred, then one of that size (the smallest stride), then the
  /// kind's own link, then the cluster's.
  const Link &link(llvm::StringRef kind, bool withinNode, int64_t groupSize = 0,
                   int64_t stride = 0) const {
    auto it = collectiveLinks.find(kind.str());
    if (it != collectiveLinks.end()) {
      if (withinNode && groupSize > 0) {
        const GroupLink *sameSize = nullptr;
        for (const GroupLink &g : it->second.groups) {
          if (g.size != groupSize)
            continue;
          if (stride > 0 && g.stride == stride)
            return g.link;
          if (!sameSize || g.stride < sameSize->stride)
            sameSize = &g;
        }
        if (sameSize)
          return sameSize->link;
      }
      const std::optional<Link> &l =
          withinNode ? it->second.intraNode : it->second.interNode;
      if (l)
        return *l;
    }
    return withinNode ? intraNode : interNode;
  }

  int64_t devices() const { return nodes * devicesPerNode; }
};

/// Reads the JSON format above. Errors name the missing or bad field, e.g.
/// "cluster: missing field 'intra_node.bandwidth'".
llvm::Expected<Cluster> parseCluster(const llvm::json::Value &value);

/// Writes the JSON format above; parseCluster(toJSON(c)) == c.
llvm::json::Value toJSON(const Cluster &cluster);

/// Where `tessera-run --calibrate` (no path) writes, and the `cpu:N` preset
/// reads, the calibration of `ranks` MPI ranks on this machine:
/// `$TESSERA_CALIBRATION_DIR/cpu-<ranks>.json`, the directory defaulting to
/// `$HOME/.cache/tessera`.
std::string calibrationPath(int64_t ranks);

/// A preset `dgx-a100:N`, `dgx-h100:N` or `grand-teton-h100:N` (N nodes of
/// 8 GPUs), or `cpu:N`
/// (N MPI ranks on this machine: the file at calibrationPath(N), which must
/// describe N devices; missing, the error says to run `mpirun -np N
/// tessera-run --calibrate`). Errors name the preset.
llvm::Expected<Cluster> clusterPreset(llvm::StringRef spec);

/// `--cluster` argument: a preset (see clusterPreset) or the path of a JSON
/// file in the format above.
llvm::Expected<Cluster> loadCluster(llvm::StringRef specOrPath);

} // namespace tessera::planner

#endif // TESSERA_COMMON_CLUSTER_CLUSTER_H

//===- PipelineSchedule.h - pipeline schedules and their checks -*- C++ -*-===//
//
// Plain C++ (no MLIR objects) shared by the compiler, which builds and checks
// schedules, and the runtime, which re-checks and runs them.
//
// Terms (Megatron-LM's):
//   - P pipeline stages = the ranks along the `pp` grid axis;
//   - V virtual stages per rank (model chunks, interleaved 1F1B); the model is
//     cut into P·V chunks and chunk c lives on stage c mod P;
//   - M micro-batches per step; an action runs one chunk's forward (F) or
//     backward (B) program on one micro-batch;
//   - an activation set is what a chunk's forward keeps for its backward; it
//     is live (in flight) from F(c, m) until B(c, m).
//
// Schedules:
//   - gpipe (Huang et al., 2019): all forwards, then all backwards;
//   - 1f1b (PipeDream-Flush, Narayanan et al., 2021): stage r runs
//     min(P − r − 1, M) warm-up forwards, then alternates one forward and one
//     backward, then drains; at most min(P − r, M) activation sets in flight;
//   - interleaved (Narayanan et al., 2021, "Efficient Large-Scale Language
//     Model Training on GPU Clusters"): 1F1B over V chunks per stage, taking
//     micro-batches in groups of P; needs M to be a multiple of P.
//
// Textual form of one stage's actions: "F0.0 F0.1 B0.0 B0.1", i.e.
// <F|B><chunk>.<micro-batch>, separated by single spaces.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_SCHEDULE_PIPELINESCHEDULE_H
#define TESSERA_COMMON_SCHEDULE_PIPELINESCHEDULE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::tsrt::schedule {

enum class Kind { GPipe, OneFOneB, Interleaved };
/// "gpipe", "1f1b", "interleaved" -> Kind; nullopt otherwise.
std::optional<Kind> parseKind(llvm::StringRef name);
const char *kindName(Kind kind);

/// Sizes of a pipeline.
struct Shape {
  int64_t stages = 1;        ///< P
  int64_t virtualStages = 1; ///< V (1 unless interleaved)
  int64_t microBatches = 1;  ///< M
  int64_t numChunks() const { return stages * virtualStages; }
  /// The stage (pp rank) that runs chunk `c`.
  int64_t stageOfChunk(int64_t c) const { return c % stages; }
};

/// Checks P, V, M >= 1 and the kind's own rules (V == 1 unless interleaved;
/// interleaved needs V >= 2 and M a multiple of P). Errors name the flag
/// (`--pp`, `--virtual-stages`, `--micro-batches`).
llvm::Error checkShape(Kind kind, const Shape &shape);

enum class Phase { Forward, Backward };
struct Action {
  Phase phase = Phase::Forward;
  int64_t chunk = 0;
  int64_t microBatch = 0;
  bool operator==(const Action &o) const {
    return phase == o.phase && chunk == o.chunk && microBatch == o.microBatch;
  }
};
/// One stage's actions in execution order.
using StageActions = std::vector<Action>;

/// The schedule of `kind`: one action list per stage (index = pp rank).
/// Errors as checkShape.
llvm::Expected<std::vector<StageActions>> build(Kind kind, const Shape &shape);

/// "F0.0 F0.1 B0.0".
std::string format(const StageActions &actions);
/// Inverse of format. Errors name the bad token.
llvm::Expected<StageActions> parse(llvm::StringRef text);

/// Most activation sets stage `stage` may hold under `kind`:
///   gpipe: V·M; 1f1b: min(P − stage, M);
///   interleaved: min((P − stage − 1)·2 + (V − 1)·P + 1, V·M).
int64_t inFlightBound(Kind kind, const Shape &shape, int64_t stage);

/// Peak number of activation sets live at once on each stage when it runs
/// `actions` (F adds one, B removes one).
std::vector<int64_t> peakInFlight(llvm::ArrayRef<StageActions> actions);

/// Predicted idle fraction of a step with equal-cost chunks and backward =
/// 2 × forward: (P − 1) / (V·M + P − 1) (GPipe and 1F1B: V = 1).
double bubbleFraction(const Shape &shape);

/// One point-to-point transfer in a chunk's forward or backward program, in
/// program order: a send to (or recv from) chunk `peer` on `channel`.
/// Channel ids are unique per transferred value; the micro-batch comes from
/// the action at run time.
struct CommEvent {
  bool isSend = true;
  int64_t peer = 0;
  int64_t channel = 0;
};
struct ChunkComms {
  std::vector<CommEvent> forward, backward;
};

/// When each send's buffer is released: for the i-th send (program order) of
/// stage s's action k, releases[s][k][i] is the index of the action of stage
/// s at whose end the sender waits for that send (MPI_Wait) and frees its
/// buffer, or actions[s].size() for "before the applies" (all remaining
/// sends are completed then). The point is the end of the first later action
/// of s that receives a message the receiving stage q sent at or after the
/// action j in which q receives ours. q posts every receive of an action
/// before running it, so by then the matching receive is posted and the
/// wait cannot deadlock; and it is the latest the sender could see the send
/// complete by itself (docs/PipelineMemory.md). Every send's release is thus
/// a fixed point of the sender's own action list, the same in every run, and
/// the memory plan predicts it exactly. Requires a schedule that passes
/// verify; a message without a receiver is released before the applies.
std::vector<std::vector<std::vector<int64_t>>>
sendReleases(llvm::ArrayRef<StageActions> actions,
             llvm::ArrayRef<ChunkComms> comms);

/// Proves that the schedule can run (the checks of `tsrt.pipeline_schedule`):
///   1. each stage runs F and B of exactly its chunks for every micro-batch,
///      each once, F(c, m) before B(c, m), and only its own chunks;
///   2. each send has exactly one matching recv (same channel and
///      micro-batch, from the right chunk to the right chunk) and vice versa;
///   3. it cannot deadlock: all stages are simulated together with sends
///      that never block (buffered, as MPI_Isend) and recvs that block until
///      the matching send has happened;
///   4. no stage holds more activation sets than inFlightBound.
/// `comms` has one entry per chunk. The first violation is returned as an
/// error naming the stage, the chunk and the micro-batch, e.g.
/// "stage 1 (chunk 1) deadlocks at B1.0: it waits for channel 4 from chunk 2,
/// micro-batch 0, which is never sent".
llvm::Error verify(Kind kind, const Shape &shape,
                   llvm::ArrayRef<StageActions> actions,
                   llvm::ArrayRef<ChunkComms> comms);

/// Simulated timeline of one step with forward cost `fwd[c]` and backward
/// cost `bwd[c]` per chunk (any unit) and free communication: per stage, the
/// busy time and the step's makespan. bubble = 1 − busy / makespan, averaged
/// over stages. Requires a schedule that passes verify.
struct Timeline {
  std::vector<double> busy;
  double makespan = 0;
  double bubble() const;
};
///
/// Oversubscribed processors (`sharing`, optional): `processes` ranks share
/// `cores` processors (e.g. 4 MPI ranks on 2 CPU cores), `processesPerStage`
/// of them per stage. The costs are those measured with every rank busy,
/// i.e. at a speed of min(1, cores / processes) of a dedicated core. A rank
/// waiting for a message gives its core away (OpenMPI yields when
/// oversubscribed) but for `waitingShare` of it (the fraction of its share
/// a waiting rank keeps: 1 when it spins, 0 when it yields entirely), so
/// while `a` ranks run and `w` wait, each running one goes at
/// min(1, cores / (a + waitingShare·w)) / min(1, cores / processes) times
/// its calibrated speed (processor sharing): bubbles cost less than their
/// calibrated length. Without `sharing`, with cores >= processes or with
/// waitingShare = 1, the speed is always 1.
///
/// With `stageCores` (the core of each rank of each stage, as mpirun
/// --map-by core --bind-to core pins them: world rank r on core r mod C),
/// the sharing is per core instead: a rank runs at
/// min(1, 1 / (a + waitingShare·w)) / min(1, 1 / h) of its calibrated speed,
/// where its core hosts h ranks, a of them running and w = h − a waiting,
/// and a stage at the speed of its slowest rank. A bound rank cannot use
/// another core that its stage's bubble left idle: with 4 stages on 2 cores
/// (stages 0 and 2 on one, 1 and 3 on the other) the pooled model lets the
/// two busy stages of one core borrow the other core, which they cannot.
/// When every core hosts one rank of every stage, both models agree.
struct ComputeSharing {
  int64_t processes = 1, processesPerStage = 1;
  double cores = 1;
  double waitingShare = 1;
  std::vector<std::vector<int64_t>> stageCores;
};
Timeline simulate(llvm::ArrayRef<StageActions> actions,
                  llvm::ArrayRef<ChunkComms> comms, const Shape &shape,
                  llvm::ArrayRef<double> fwd, llvm::ArrayRef<double> bwd,
                  const ComputeSharing *sharing = nullptr);

/// The inverse of simulate in `sharing.waitingShare`: the share in [0, 1]
/// for which simulate(actions, comms, shape, fwd, bwd, &sharing) has
/// `makespan` (same unit as fwd and bwd), by bisection to 1e-4 (the
/// makespan does not decrease as the share grows). A makespan at or below
/// the share-0 one gives 0, at or above the share-1 one gives 1. This is how
/// `tessera-run --calibrate` turns a measured pipeline step into the
/// cluster's `waiting_rank_share`.
double fitWaitingShare(llvm::ArrayRef<StageActions> actions,
                       llvm::ArrayRef<ChunkComms> comms, const Shape &shape,
                       llvm::ArrayRef<double> fwd, llvm::ArrayRef<double> bwd,
                       ComputeSharing sharing, double makespan);

} // namespace tessera::tsrt::schedule

#endif // TESSERA_COMMON_SCHEDULE_PIPELINESCHEDULE_H

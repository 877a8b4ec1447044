//===- MpiCollectives.h - MPI communicators, grids, collectives -*- C++ -*-===//
//
// CPU collectives over MPI on runtime Tensors, a device `Grid` mirroring the
// upstream MLIR `shard.grid` linearisation, and a byte counter using the
// standard ring volumes (what the planner's cost model predicts).
//
// Every communicator made here has MPI_ERRORS_RETURN set; MPI failures come
// back as llvm::Error naming the collective and the world rank.
//
// Collective calls are collective: every rank of the communicator must make
// the same calls in the same order with matching shapes.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_COLLECTIVES_MPI_MPICOLLECTIVES_H
#define TESSERA_RUNTIME_COLLECTIVES_MPI_MPICOLLECTIVES_H

#include "runtime/Tensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <mpi.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tessera {
namespace runtime {
namespace mpi {

/// MPI_Init (if not yet initialised) and MPI_ERRORS_RETURN on
/// MPI_COMM_WORLD. Safe to call more than once.
llvm::Error initialize(int *argc, char ***argv);
/// MPI_Finalize if initialised and not yet finalised. Free every Grid first.
void finalize();
/// This process's rank in MPI_COMM_WORLD, or -1 when MPI is not (or no
/// longer) initialised. For error messages.
int worldRank();

/// A non-owning handle on an MPI communicator with its rank and size cached.
/// Cheap to copy. The MPI_Comm is owned by whoever created it (the world, or
/// the Grid that split it).
class Communicator {
public:
  Communicator() = default;
  /// Wraps `comm` (queries rank/size and sets MPI_ERRORS_RETURN).
  explicit Communicator(MPI_Comm comm);
  /// MPI_COMM_WORLD (MPI must be initialised).
  static Communicator world();

  MPI_Comm handle() const { return comm; }
  int rank() const { return myRank; }
  int size() const { return mySize; }

private:
  MPI_Comm comm = MPI_COMM_NULL;
  int myRank = 0;
  int mySize = 1;
};

/// Rank order: how ranks are laid out over a grid of `sizes`. `order` lists
/// every axis index once, slowest first; the rank is the row-major
/// linearisation of the coordinates taken in that order (the last axis of
/// `order` varies fastest). An empty `order` is the axis order 0, 1, ...,
/// n-1 (the last axis fastest, as upstream `shard.grid`). mpirun and srun
/// place consecutive ranks on the same node, so the fastest axes' groups
/// stay inside a node.
///
/// The coordinates of `rank` (0 <= rank < product of sizes), indexed by
/// axis. `order` must be empty or a permutation of the axis indices.
std::vector<int64_t> rankToCoords(int64_t rank, llvm::ArrayRef<int64_t> sizes,
                                  llvm::ArrayRef<int64_t> order = {});
/// The inverse: the rank at `coords` (indexed by axis).
int64_t coordsToRank(llvm::ArrayRef<int64_t> coords,
                     llvm::ArrayRef<int64_t> sizes,
                     llvm::ArrayRef<int64_t> order = {});
/// Stride in ranks of each axis (indexed by axis) under `order`: the product
/// of the sizes of the axes after it in `order`.
std::vector<int64_t> rankStrides(llvm::ArrayRef<int64_t> sizes,
                                 llvm::ArrayRef<int64_t> order = {});

/// A logical device grid over the ranks of a communicator, e.g. axes
/// {"dp", "tp"} with sizes {2, 2}. The parent rank is linearised over the
/// axes in `rankOrder` (see rankToCoords); by default row-major in axis
/// order, the LAST axis fastest, as in upstream `shard.grid`.
class Grid {
public:
  /// `rankOrder`: axis indices, slowest first (empty: 0, 1, ..., n-1).
  /// Error if names are empty/duplicated, a size is < 1, the product of
  /// sizes differs from parent.size(), or rankOrder is not empty and not a
  /// permutation of the axis indices.
  static llvm::Expected<std::unique_ptr<Grid>>
  create(Communicator parent, std::vector<std::string> axisNames,
         std::vector<int64_t> axisSizes, std::vector<int64_t> rankOrder = {});
  ~Grid();
  Grid(const Grid &) = delete;
  Grid &operator=(const Grid &) = delete;

  const std::vector<std::string> &axisNames() const { return names; }
  const std::vector<int64_t> &axisSizes() const { return sizes; }
  /// This rank's coordinate on every axis.
  const std::vector<int64_t> &coords() const { return myCoords; }
  /// Axis indices, slowest first (never empty once created).
  const std::vector<int64_t> &rankOrder() const { return order; }
  /// Coordinates of parent rank `rank` (rankToCoords under rankOrder()).
  std::vector<int64_t> coordsOf(int64_t rank) const {
    return rankToCoords(rank, sizes, order);
  }
  /// Parent rank at `coords`.
  int64_t rankOf(llvm::ArrayRef<int64_t> coords) const {
    return coordsToRank(coords, sizes, order);
  }
  /// Index of `axis` in axisNames(), or -1.
  int64_t axisIndex(llvm::StringRef axis) const;
  const Communicator &parent() const { return parentComm; }

  /// Communicator over the ranks that share this rank's coordinates on every
  /// axis NOT in `axes`. Rank order inside it is the row-major linearisation
  /// of the coordinates on `axes` in the order given (as for the grid_axes of
  /// upstream shard collectives), whatever the grid's rank order. `axes`
  /// empty gives a size-1 communicator; all axes in rankOrder() gives the
  /// parent's order. Created with
  /// MPI_Comm_split on first use (collective over the parent!) and cached.
  /// Error on an unknown or repeated axis index, or an MPI failure.
  llvm::Expected<Communicator> subComm(llvm::ArrayRef<int64_t> axes);
  /// Same, by axis name.
  llvm::Expected<Communicator> subComm(llvm::ArrayRef<std::string> axes);

private:
  Grid() = default;
  Communicator parentComm;
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  std::vector<int64_t> myCoords;
  std::vector<int64_t> order;
  std::map<std::vector<int64_t>, MPI_Comm> cache;
};

/// Collective kinds counted by TrafficCounter.
enum class CollectiveKind {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  Send
};
constexpr int kNumCollectiveKinds = 5;
const char *collectiveKindName(CollectiveKind kind);

/// Bytes sent per rank, by the standard ring model:
///   all-reduce      2 (n-1)/n * bytes
///   all-gather      (n-1)/n * bytes of the FULL (gathered) tensor
///   reduce-scatter  (n-1)/n * bytes of the FULL (input) tensor
///   all-to-all      (n-1)/n * bytes
///   send            bytes
/// (recv counts nothing: it is the peer's send.)
class TrafficCounter {
public:
  /// Volume in bytes for one collective of `bytes` over `n` ranks.
  static double ringBytes(CollectiveKind kind, double bytes, int n);
  /// Adds ringBytes(kind, bytes, n) to the current step and the total.
  void record(CollectiveKind kind, double bytes, int n);
  /// Starts a new step: clears the per-step numbers (totals are kept).
  void beginStep();
  /// Bytes of `kind` in the current step.
  double stepBytes(CollectiveKind kind) const {
    return step[static_cast<int>(kind)];
  }
  /// Bytes of all kinds in the current step.
  double stepBytes() const;
  /// Bytes of `kind` since construction.
  double totalBytes(CollectiveKind kind) const {
    return total[static_cast<int>(kind)];
  }
  double totalBytes() const;

private:
  std::array<double, kNumCollectiveKinds> step{};
  std::array<double, kNumCollectiveKinds> total{};
};

enum class ReduceOp { Sum, Max };

/// In-place all-reduce of `t` (f32, bf16, f16 or i64) over `comm`. bf16
/// and f16 sum in f32 per combining step and round (see reduceOp); bytes
/// are counted with the 2-byte element size.
llvm::Error allReduce(Tensor &t, ReduceOp op, const Communicator &comm,
                      TrafficCounter *counter = nullptr);

/// In-place all-reduce of `count` doubles at `data` over `comm`, for
/// kernels that reduce over a split dimension themselves (the row max and
/// sums of exponentials of Megatron-LM's vocab-parallel cross-entropy).
/// Counted as an all-reduce of count · 8 bytes.
llvm::Error allReduceF64(double *data, int64_t count, ReduceOp op,
                         const Communicator &comm,
                         TrafficCounter *counter = nullptr);

/// Concatenates every rank's `in` along `dim` in comm-rank order:
/// out.shape = in.shape with shape[dim] * comm.size(). Any dtype.
llvm::Error allGather(const Tensor &in, int64_t dim, const Communicator &comm,
                      Tensor &out, TrafficCounter *counter = nullptr);

/// Sums `in` over the ranks and gives rank i the i-th of comm.size() equal
/// chunks along `dim`: out.shape = in.shape with shape[dim] / comm.size().
/// f32, bf16, f16 or i64; in.shape[dim] must be divisible (error
/// otherwise).
llvm::Error reduceScatter(const Tensor &in, int64_t dim,
                          const Communicator &comm, Tensor &out,
                          TrafficCounter *counter = nullptr,
                          ReduceOp op = ReduceOp::Sum);

/// Splits `in` into comm.size() equal chunks along `splitDim`, sends chunk i
/// to rank i, and concatenates the received chunks along `concatDim` in rank
/// order: out.shape = in.shape with shape[splitDim] / n, then
/// shape[concatDim] * n. Any dtype. Error if not divisible.
llvm::Error allToAll(const Tensor &in, int64_t splitDim, int64_t concatDim,
                     const Communicator &comm, Tensor &out,
                     TrafficCounter *counter = nullptr);

/// Blocking point-to-point send of all of `t` to comm rank `dest`.
llvm::Error send(const Tensor &t, int dest, const Communicator &comm,
                 int tag = 0, TrafficCounter *counter = nullptr);
/// Blocking receive into the preallocated `t` from comm rank `src`; error if
/// the message size differs from t.bytes().
llvm::Error recv(Tensor &t, int src, const Communicator &comm, int tag = 0);

/// Barrier over comm.
llvm::Error barrier(const Communicator &comm);

/// Posts a non-blocking all-reduce of `in` into `out` (same dtype and
/// shape, not `in`; MPI_Iallreduce) and sets `*request`; `in` must not
/// change and `out` must not be read until wait(). Counted like allReduce.
/// With one rank, copies `in` to `out` and sets MPI_REQUEST_NULL.
llvm::Error startAllReduce(const Tensor &in, Tensor &out, ReduceOp op,
                           const Communicator &comm, MPI_Request *request,
                           TrafficCounter *counter = nullptr);
/// Completes a request of startAllReduce (no-op for MPI_REQUEST_NULL).
llvm::Error wait(MPI_Request *request);

/// The MPI datatype of one element of `dtype` (F32 -> MPI_FLOAT, I64 ->
/// MPI_INT64_T, I1 -> MPI_UINT8_T, BF16 and F16 -> MPI_UINT16_T).
MPI_Datatype dataType(DType dtype);

/// The MPI reduction for `op` on elements of `dtype`: MPI_SUM / MPI_MAX for
/// f32 and i64; for bf16 and f16 (which MPI does not know) a user-defined,
/// commutative MPI_Op over MPI_UINT16_T per type and op that widens both
/// operands to f32, combines them and rounds to nearest even (bf16Combine,
/// f16Combine), created on first use (after MPI_Init) and kept for the
/// process.
MPI_Op reduceOp(DType dtype, ReduceOp op);

/// The bf16 reduction itself: inout[i] = bf16(f32(in[i]) op f32(inout[i]))
/// for i < n (max propagates NaN).
void bf16Combine(const BFloat16 *in, BFloat16 *inout, int64_t n, ReduceOp op);
/// The f16 reduction: inout[i] = f16(f32(in[i]) op f32(inout[i])) for
/// i < n, rounded to nearest even; a sum beyond 65504 becomes inf (fp16
/// mixed precision's static loss scale must leave headroom); max propagates
/// NaN.
void f16Combine(const Float16 *in, Float16 *inout, int64_t n, ReduceOp op);
/// "<what> failed on rank R: <MPI's message for code>", for MPI calls made
/// outside this library (e.g. the executor's non-blocking sends).
llvm::Error failure(int code, const llvm::Twine &what);

} // namespace mpi
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_COLLECTIVES_MPI_MPICOLLECTIVES_H

//===- NcclCollectives.h - NCCL communicators and collectives --*- C++ -*-===//
//
// GPU collectives over NCCL on device Tensors, with exactly the semantics of
// the CPU collectives of runtime/collectives/mpi/MpiCollectives.h (same
// `dim` handling, same dtypes, same TrafficCounter volumes), and a watchdog
// that aborts hung or failed communicators.
//
// Design
//  - An NcclCommunicator spans the ranks of one mpi::Communicator (e.g. a
//    Grid::subComm of a grid axis), in the same rank order: rank 0 of that
//    group calls ncclGetUniqueId, the id is broadcast with MPI_Bcast over the
//    group, and every rank calls ncclCommInitRankConfig. `split` is the
//    alternative path: ncclCommSplit(parent, color, key) makes the children
//    of an existing NCCL communicator without any new unique id ("Creating
//    more communicators", NCCL User Guide, usage/communicators.html, and
//    api/comms.html#ncclcommsplit).
//  - Every communicator is NON-BLOCKING (ncclConfig_t::blocking = 0; NCCL
//    User Guide, usage/communicators.html#creating-a-communicator-with-
//    options, and "Fault Tolerance"): no NCCL call blocks the host, init,
//    finalize and every collective may return ncclInProgress, and this
//    library then polls ncclCommGetAsyncError until the state leaves
//    ncclInProgress or `Options::pollTimeoutSeconds` passes. So a rank whose
//    peers never arrive gets an llvm::Error instead of hanging, and another
//    thread (NcclWatchdog) can always abort it.
//  - Teardown: the destructor is the happy path, ncclCommFinalize (polled to
//    completion) then ncclCommDestroy. `abort()` is the failure path:
//    ncclCommAbort, which also stops kernels still running on the device
//    (api/comms.html#ncclcommabort); never a blocking destroy. A call that
//    fails (an NCCL error, or a poll timeout) aborts the communicator
//    itself, as the NCCL docs advise, and the communicator then refuses
//    every later call with an error.
//  - Thread safety: each communicator holds a mutex around every NCCL call
//    on its handle (short: the calls do not block), released between polls,
//    so the watchdog thread can query and abort it while the owner thread
//    is polling or waiting on a stream.
//  - Collectives are asynchronous on the given cudaStream_t: a call returns
//    once NCCL has enqueued the work (and the layout kernels after it), not
//    when the data has arrived. Layout changes (an all-gather along an inner
//    dim, ...) use cuda::transpose (ElementwiseKernels.h) through
//    caller-provided device scratch, so a step can be captured in a CUDA
//    graph; `...ScratchBytes` say how much.
//  - Argument errors (dtype, shape, dim, scratch size, aliasing) are found
//    on the host before any NCCL or CUDA call and returned as llvm::Error
//    naming the collective, the world rank and the shapes.
//
// Device placement: NCCL binds a communicator to the CUDA device current
// when it is created (Options::device selects it first). NCCL refuses two
// ranks of one communicator on the same device.
//
// Collective calls are collective: every rank of the communicator must make
// the same calls in the same order with matching shapes, on streams of the
// communicator's device.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_COLLECTIVES_NCCL_NCCLCOLLECTIVES_H
#define TESSERA_RUNTIME_COLLECTIVES_NCCL_NCCLCOLLECTIVES_H

#include "runtime/Tensor.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera {
namespace runtime {
namespace nccl {

using mpi::ReduceOp;
using mpi::TrafficCounter;

/// `result` as an llvm::Error: success for ncclSuccess, otherwise
/// "<what> failed on rank R: <ncclGetErrorString>[: <ncclGetLastError>]"
/// (R: the MPI world rank, -1 before MPI_Init; ncclGetLastError is NCCL's
/// process-wide last message and may belong to an earlier failure).
llvm::Error check(ncclResult_t result, const llvm::Twine &what);

/// An NCCL communicator (non-blocking, see the file comment). Owns its
/// ncclComm_t. Not copyable; create with `create` or `split`.
class NcclCommunicator {
public:
  struct Options {
    /// CUDA device to make current before creating the communicator; -1
    /// keeps the current device.
    int device = -1;
    /// Seconds init, finalize or one call may stay ncclInProgress before
    /// the communicator is aborted and an error returned (<= 0: no limit).
    double pollTimeoutSeconds = 300;
    /// Name reported by NCCL's logs (ncclConfig_t::commName) and by errors.
    std::string name = "tessera";
  };

  /// Collective over `comm`: a communicator over the same ranks in the same
  /// order (rank() == comm.rank(), size() == comm.size()). Errors: MPI
  /// failure of the id broadcast, cudaSetDevice, ncclGetUniqueId on rank 0
  /// (reported on every rank), ncclCommInitRankConfig, or init still in
  /// progress after pollTimeoutSeconds (the communicator is then aborted).
  static llvm::Expected<std::unique_ptr<NcclCommunicator>>
  create(const mpi::Communicator &comm, Options options);
  static llvm::Expected<std::unique_ptr<NcclCommunicator>>
  create(const mpi::Communicator &comm) {
    return create(comm, Options());
  }

  /// ncclCommSplit: collective over ALL ranks of `parent`. Ranks passing
  /// the same `color` (>= 0) form one child, ordered by `key` (give
  /// distinct keys; NCCL does not document the order of ties); a negative
  /// `color` (NCCL_SPLIT_NOCOLOR) joins no child and gets a null pointer
  /// (success). The child is non-blocking and on the parent's device;
  /// options.device is ignored. Errors: the parent was aborted or not
  /// connected, NCCL failure, timeout.
  static llvm::Expected<std::unique_ptr<NcclCommunicator>>
  split(NcclCommunicator &parent, int color, int key, Options options);

  /// A communicator with no NCCL handle that claims `rank` of `size`: every
  /// collective validates its arguments against that size and then fails
  /// with "not connected". For argument-validation tests and dry runs.
  static std::unique_ptr<NcclCommunicator> detached(int rank, int size);

  /// Happy path: ncclCommFinalize, polled until the communicator is
  /// quiescent (at most pollTimeoutSeconds; past it, or on an error,
  /// ncclCommAbort), then ncclCommDestroy. Nothing if already aborted. Work
  /// enqueued on streams must have been issued (not necessarily finished).
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int rank() const { return myRank; }
  int size() const { return mySize; }
  const std::string &name() const;
  /// True while the NCCL handle is alive (not detached, not aborted).
  bool connected() const;
  /// True once abort() ran (by anyone: the owner, a failed call, the
  /// watchdog).
  bool aborted() const;

  /// ncclCommGetAsyncError: success while the communicator is healthy (its
  /// state ncclSuccess or ncclInProgress); otherwise an error naming the
  /// communicator and NCCL's message (the communicator is NOT aborted: the
  /// caller decides). Error too if aborted or detached.
  llvm::Error checkAsync();

  /// Failure path: ncclCommAbort (stops device kernels of this
  /// communicator, never blocks on peers). Idempotent, thread-safe. Every
  /// later call on this communicator returns an error.
  void abort();

  /// Runs `fn(handle)` under the communicator's lock (for calls this
  /// library does not wrap); error if not connected. `fn` must not block.
  llvm::Error withHandle(const llvm::Twine &what,
                         const std::function<ncclResult_t(ncclComm_t)> &fn);

  /// Shared state (the handle and its lock), also held by NcclWatchdog so
  /// that a watched communicator may be destroyed at any time.
  struct State;
  const std::shared_ptr<State> &state() const { return shared; }

private:
  NcclCommunicator() = default;
  std::shared_ptr<State> shared;
  int myRank = 0;
  int mySize = 1;
};

//===----------------------------------------------------------------------===//
// Scratch sizes (bytes of device scratch a collective needs; 0: none; -1:
// the arguments are invalid). Scratch must be device memory on the
// communicator's device, aligned at least to the element size (cudaMalloc
// and the executor's arena give 256 bytes; sub-buffers are 256-byte aligned
// relative to it), and not overlap the collective's tensors.
//===----------------------------------------------------------------------===//

/// all-gather of `inShape` along `dim` over `n` ranks: 0 when every dim
/// before `dim` is 1 (or n == 1), else the gathered tensor's bytes (NCCL
/// gathers rank-major into scratch, then a transpose puts it in place).
int64_t allGatherScratchBytes(DType dtype, llvm::ArrayRef<int64_t> inShape,
                              int64_t dim, int n);
/// reduce-scatter of `inShape` along `dim`: 0 when every dim before `dim` is
/// 1 (or n == 1), else the input's bytes (made rank-major by a transpose).
int64_t reduceScatterScratchBytes(DType dtype, llvm::ArrayRef<int64_t> inShape,
                                  int64_t dim, int n);
/// all-to-all: a send staging buffer unless every dim before `splitDim` is
/// 1, plus a receive staging buffer unless every dim before `concatDim` (of
/// a chunk) is 1; each the input's bytes, aligned to 256; 0 for n == 1.
int64_t allToAllScratchBytes(DType dtype, llvm::ArrayRef<int64_t> inShape,
                             int64_t splitDim, int64_t concatDim, int n);

//===----------------------------------------------------------------------===//
// Argument validation (host only; never touches the data). The collectives
// call these first; exposed for tests and for the executor's plan checks.
// Errors have the MPI versions' form: "<collective> on rank R: ...".
//===----------------------------------------------------------------------===//

llvm::Error validateAllReduce(const Tensor &t);
llvm::Error validateAllGather(const Tensor &in, int64_t dim, int n,
                              const Tensor &out);
llvm::Error validateReduceScatter(const Tensor &in, int64_t dim, int n,
                                  const Tensor &out);
llvm::Error validateAllToAll(const Tensor &in, int64_t splitDim,
                             int64_t concatDim, int n, const Tensor &out);

//===----------------------------------------------------------------------===//
// Collectives. Tensors are DEVICE tensors (raw() on the communicator's
// device); outputs are preallocated; outputs must not overlap inputs or
// scratch unless stated. Everything is enqueued on `stream`; nothing
// synchronises. `counter` (optional) records the MPI versions' ring
// volumes (TrafficCounter), also for n == 1 (where they are 0).
//===----------------------------------------------------------------------===//

/// In-place all-reduce of `t` (f32, bf16, f16 or i64; ncclFloat32,
/// ncclBfloat16, ncclFloat16, ncclInt64 with ncclSum / ncclMax). bf16 /
/// f16 are reduced by NCCL (per-hop rounding; the order differs from MPI,
/// so results agree to rounding, not bitwise, for more than 2 ranks).
llvm::Error allReduce(Tensor &t, ReduceOp op, NcclCommunicator &comm,
                      cudaStream_t stream, TrafficCounter *counter = nullptr);

/// In-place all-reduce of `count` doubles at DEVICE pointer `data`
/// (ncclFloat64); counted as count · 8 bytes.
llvm::Error allReduceF64(double *data, int64_t count, ReduceOp op,
                         NcclCommunicator &comm, cudaStream_t stream,
                         TrafficCounter *counter = nullptr);

/// Concatenates every rank's `in` along `dim` in comm-rank order:
/// out.shape = in.shape with shape[dim] * n. Any dtype (moved as bytes).
/// `scratch`: allGatherScratchBytes bytes (may be null when 0).
llvm::Error allGather(const Tensor &in, int64_t dim, NcclCommunicator &comm,
                      Tensor &out, void *scratch, int64_t scratchBytes,
                      cudaStream_t stream, TrafficCounter *counter = nullptr);

/// Sums (or maxes) `in` over the ranks and gives rank i the i-th of n equal
/// chunks along `dim`: out.shape = in.shape with shape[dim] / n. f32, bf16,
/// f16 or i64; in.shape[dim] must be divisible by n. `scratch`:
/// reduceScatterScratchBytes bytes.
llvm::Error reduceScatter(const Tensor &in, int64_t dim, NcclCommunicator &comm,
                          Tensor &out, void *scratch, int64_t scratchBytes,
                          cudaStream_t stream,
                          TrafficCounter *counter = nullptr,
                          ReduceOp op = ReduceOp::Sum);

/// Splits `in` into n equal chunks along `splitDim`, sends chunk i to rank
/// i, and concatenates the received chunks along `concatDim` in rank order
/// (grouped ncclSend / ncclRecv): out.shape = in.shape with shape[splitDim]
/// / n, then shape[concatDim] * n. Any dtype. `scratch`:
/// allToAllScratchBytes bytes.
llvm::Error allToAll(const Tensor &in, int64_t splitDim, int64_t concatDim,
                     NcclCommunicator &comm, Tensor &out, void *scratch,
                     int64_t scratchBytes, cudaStream_t stream,
                     TrafficCounter *counter = nullptr);

/// Point-to-point send of all of `t` to comm rank `dest` (ncclSend, bytes;
/// dest != rank(): a lone send to self would never complete).
/// The peer must post a recv of the same byte size (NCCL cannot check it:
/// a mismatch is undefined, typically a hang the watchdog catches). No
/// tags: sends to one peer match receives in order.
llvm::Error send(const Tensor &t, int dest, NcclCommunicator &comm,
                 cudaStream_t stream, TrafficCounter *counter = nullptr);
/// Receive into the preallocated `t` from comm rank `src` (ncclRecv).
llvm::Error recv(Tensor &t, int src, NcclCommunicator &comm,
                 cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Watchdog
//===----------------------------------------------------------------------===//

/// What the watchdog saw at one poll.
struct WatchdogVerdict {
  enum Kind {
    Healthy,    ///< nothing to do
    AsyncError, ///< communicator `commIndex` reported `ncclCode`
    Timeout     ///< the operation in flight ran past the timeout
  };
  Kind kind = Healthy;
  int commIndex = -1; ///< AsyncError: index into the results polled
  int ncclCode = 0;   ///< AsyncError: its ncclResult_t
  double elapsed = 0; ///< Timeout: seconds the operation has run
};

/// The operation the owner told the watchdog about (begin / end).
struct WatchdogOp {
  bool active = false;
  uint64_t seq = 0; ///< the collective's sequence number
  std::string name; ///< e.g. "all_reduce grad.w1"
  double startSeconds = 0;
};

/// The watchdog's decision, pure: `asyncResults` are the ncclResult_t
/// values of ncclCommGetAsyncError of the watched communicators (ncclSuccess
/// and ncclInProgress are healthy; the first other value is an AsyncError,
/// which wins over a timeout); an active `op` whose nowSeconds -
/// startSeconds exceeds `timeoutSeconds` (> 0; <= 0 disables the check) is
/// a Timeout. Times in seconds on one steady clock.
WatchdogVerdict watchdogDecide(double nowSeconds, double timeoutSeconds,
                               const WatchdogOp &op,
                               llvm::ArrayRef<int> asyncResults);

/// The one-line report of a verdict that is not Healthy, e.g.
/// "tessera nccl watchdog: rank 3: collective #42 'all_reduce' timed out
/// after 31.2 s (limit 30 s); aborted 2 communicators".
std::string watchdogMessage(int worldRank, const WatchdogVerdict &verdict,
                            const WatchdogOp &op, double timeoutSeconds,
                            int numComms, llvm::StringRef commName = "");

/// A thread that polls the watched communicators every `period` and, on an
/// async error or an operation running past `timeoutSeconds`, aborts EVERY
/// watched communicator (ncclCommAbort, which unblocks kernels stuck on a
/// dead peer) and calls `onFailure(message)` once, from the watchdog
/// thread. The default onFailure prints the message (world rank, sequence
/// number and name of the collective) on stderr and calls _exit(1), so that
/// mpirun tears the job down instead of every rank hanging. Fires at most
/// once; stops polling after.
class NcclWatchdog {
public:
  using Callback = std::function<void(const std::string &message)>;
  explicit NcclWatchdog(
      double timeoutSeconds, Callback onFailure = nullptr,
      std::chrono::milliseconds period = std::chrono::milliseconds(100));
  /// Stops and joins the thread (does not abort anything).
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog &) = delete;
  NcclWatchdog &operator=(const NcclWatchdog &) = delete;

  /// Watches `comm` (keeps its shared state; the communicator may be
  /// destroyed before the watchdog, it is then skipped).
  void watch(const NcclCommunicator &comm);
  /// Marks the start of collective `seq` called `name` (replaces any
  /// operation in flight) / its completion. Cheap (a mutex).
  void begin(uint64_t seq, llvm::StringRef name);
  void end();
  /// True once the watchdog has fired.
  bool fired() const { return hasFired.load(); }

private:
  void run();
  double timeout;
  Callback callback;
  std::chrono::milliseconds pollPeriod;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::atomic<bool> hasFired{false};
  WatchdogOp op;
  std::vector<std::weak_ptr<NcclCommunicator::State>> comms;
  std::thread thread;
};

} // namespace nccl
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_COLLECTIVES_NCCL_NCCLCOLLECTIVES_H

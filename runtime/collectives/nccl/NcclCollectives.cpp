//===- NcclCollectives.cpp - NCCL communicators and collectives ----------===//

#include "runtime/collectives/nccl/NcclCollectives.h"

#include "runtime/backends/cuda/CudaRuntime.h"
#include "runtime/backends/cuda/ElementwiseKernels.h"
#include "runtime/collectives/mpi/Watchdog.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <unistd.h>

using namespace tessera::runtime;
using namespace tessera::runtime::nccl;
using llvm::ArrayRef;

namespace {

using mpi::worldRank;

llvm::Error plainError(const llvm::Twine &what, const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 what + " on rank " + llvm::Twine(worldRank()) +
                                     ": " + msg);
}

double steadySeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t product(ArrayRef<int64_t> shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i)
    p *= shape[i];
  return p;
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  return shapeToString(std::vector<int64_t>(shape.begin(), shape.end()));
}

/// True when the byte ranges of a and b intersect (empty ranges never do).
bool overlaps(const Tensor &a, const Tensor &b) {
  if (a.bytes() == 0 || b.bytes() == 0)
    return false;
  auto pa = reinterpret_cast<uintptr_t>(a.raw());
  auto pb = reinterpret_cast<uintptr_t>(b.raw());
  return pa < pb + b.bytes() && pb < pa + a.bytes();
}

/// NCCL element type of a reducible dtype (f32, bf16, f16, i64).
ncclDataType_t reduceType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ncclFloat32;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I64:
    return ncclInt64;
  case DType::I1:
    break;
  }
  return ncclUint8;
}

ncclRedOp_t redOp(ReduceOp op) {
  return op == ReduceOp::Max ? ncclMax : ncclSum;
}

int64_t alignScratch(int64_t bytes) { return (bytes + 255) / 256 * 256; }

} // namespace

//===----------------------------------------------------------------------===//
// Communicator state and polling
//===----------------------------------------------------------------------===//

struct NcclCommunicator::State {
  std::mutex mu;
  ncclComm_t comm = nullptr; ///< null: detached or aborted / destroyed
  bool wasAborted = false;
  std::string name;
  double pollTimeout = 300;
};

namespace {

using State = NcclCommunicator::State;

/// ncclCommAbort with s.mu held. Idempotent.
void abortLocked(State &s) {
  if (s.comm)
    ncclCommAbort(s.comm);
  s.comm = nullptr;
  s.wasAborted = true;
}

/// The error for a call on a communicator without a handle (s.mu held).
llvm::Error unusable(const State &s, const llvm::Twine &what) {
  return plainError(what,
                    "communicator '" + s.name + "' " +
                        (s.wasAborted ? "was aborted" : "is not connected"));
}

/// Polls ncclCommGetAsyncError until the state leaves ncclInProgress.
/// Aborts the communicator on an error or a timeout.
llvm::Error waitReady(State &s, const llvm::Twine &what) {
  double start = steadySeconds();
  for (int spins = 0;; ++spins) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (!s.comm)
        return unusable(s, what);
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(s.comm, &state);
      if (r == ncclSuccess)
        r = state;
      if (r == ncclSuccess)
        return llvm::Error::success();
      if (r != ncclInProgress) {
        llvm::Error e = check(r, what + " (communicator '" + s.name + "')");
        abortLocked(s);
        return e;
      }
      double elapsed = steadySeconds() - start;
      if (s.pollTimeout > 0 && elapsed > s.pollTimeout) {
        abortLocked(s);
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.1f", elapsed);
        return plainError(what, "communicator '" + s.name +
                                    "' still in progress after " + buf +
                                    " s; aborted");
      }
    }
    if (spins < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// Runs `fn` on the handle under the lock; polls if it is in progress.
llvm::Error issue(State &s, const llvm::Twine &what,
                  const std::function<ncclResult_t(ncclComm_t)> &fn) {
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.comm)
      return unusable(s, what);
    ncclResult_t r = fn(s.comm);
    if (r == ncclSuccess)
      return llvm::Error::success();
    if (r != ncclInProgress) {
      llvm::Error e = check(r, what + " (communicator '" + s.name + "')");
      abortLocked(s);
      return e;
    }
  }
  return waitReady(s, what);
}

/// Error unless the communicator has a handle (checked before counting).
llvm::Error requireConnected(NcclCommunicator &comm, const char *what) {
  State &s = *comm.state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.comm)
    return unusable(s, what);
  return llvm::Error::success();
}

llvm::Error scratchCheck(const char *what, int64_t need, const void *scratch,
                         int64_t have, DType dtype) {
  if (need <= 0)
    return llvm::Error::success();
  if (scratch == nullptr || have < need)
    return plainError(what, "scratch of " + std::to_string(have) + " bytes" +
                                (scratch ? "" : " (null)") + ", needs " +
                                std::to_string(need));
  if (reinterpret_cast<uintptr_t>(scratch) % dtypeSize(dtype) != 0)
    return plainError(what, "scratch is not aligned to the " +
                                std::to_string(dtypeSize(dtype)) +
                                "-byte element size");
  return llvm::Error::success();
}

/// out[b][a][inner] = in[a][b][inner] (device, any dtype) on `stream`.
llvm::Error swapBlocksDevice(const void *in, void *out, DType dtype, int64_t a,
                             int64_t b, int64_t inner, cudaStream_t stream,
                             const char *what) {
  Tensor src = Tensor::view(const_cast<void *>(in), dtype, {a, b, inner});
  Tensor dst = Tensor::view(out, dtype, {b, a, inner});
  return cuda::check(cuda::transpose(src, {1, 0, 2}, dst, stream),
                     llvm::Twine(what) + ": layout transpose");
}

} // namespace

llvm::Error nccl::check(ncclResult_t result, const llvm::Twine &what) {
  if (result == ncclSuccess)
    return llvm::Error::success();
  std::string msg = ncclGetErrorString(result);
  const char *last = ncclGetLastError(nullptr);
  if (last && *last)
    msg += std::string(": ") + last;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 what + " failed on rank " +
                                     llvm::Twine(worldRank()) + ": " + msg);
}

//===----------------------------------------------------------------------===//
// NcclCommunicator
//===----------------------------------------------------------------------===//

llvm::Expected<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(const mpi::Communicator &comm, Options options) {
  if (comm.handle() == MPI_COMM_NULL)
    return plainError("nccl communicator init", "null MPI communicator");
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->shared = std::make_shared<State>();
  c->shared->name = options.name;
  c->shared->pollTimeout = options.pollTimeoutSeconds;
  c->myRank = comm.rank();
  c->mySize = comm.size();

  // Local preparation; its outcome is agreed on below so that no rank is
  // left waiting in MPI or in NCCL init for a rank that gave up.
  std::string localFailure;
  if (options.device >= 0) {
    if (llvm::Error e =
            cuda::check(cudaSetDevice(options.device),
                        "cudaSetDevice(" + llvm::Twine(options.device) + ")"))
      localFailure = llvm::toString(std::move(e));
  }
  struct {
    int32_t code;
    int32_t pad;
    ncclUniqueId id;
  } msg;
  std::memset(&msg, 0, sizeof(msg));
  if (comm.rank() == 0)
    msg.code = static_cast<int32_t>(ncclGetUniqueId(&msg.id));
  int rc;
  {
    mpi::watchdog::Guard guard("broadcast of the nccl id", comm.size());
    rc = MPI_Bcast(&msg, static_cast<int>(sizeof(msg)), MPI_BYTE, 0,
                   comm.handle());
  }
  if (rc != MPI_SUCCESS)
    return mpi::failure(rc, "nccl communicator init: MPI_Bcast of the id");
  if (msg.code != ncclSuccess && localFailure.empty())
    localFailure =
        "ncclGetUniqueId on the group's rank 0 failed: " +
        std::string(ncclGetErrorString(static_cast<ncclResult_t>(msg.code)));
  int ok = localFailure.empty() ? 1 : 0, allOk = 0;
  {
    mpi::watchdog::Guard guard("all_reduce of the nccl init check",
                               comm.size());
    rc = MPI_Allreduce(&ok, &allOk, 1, MPI_INT, MPI_MIN, comm.handle());
  }
  if (rc != MPI_SUCCESS)
    return mpi::failure(rc, "nccl communicator init: MPI_Allreduce");
  if (!ok)
    return plainError("nccl communicator '" + options.name + "' init",
                      localFailure);
  if (!allOk)
    return plainError("nccl communicator '" + options.name + "' init",
                      "another rank of the group failed to prepare");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = c->shared->name.c_str();
  ncclComm_t handle = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&handle, comm.size(), msg.id,
                                          comm.rank(), &config);
  State &s = *c->shared;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.comm = handle;
    if (r != ncclSuccess && r != ncclInProgress) {
      llvm::Error e =
          check(r, "ncclCommInitRankConfig (communicator '" + s.name + "')");
      abortLocked(s);
      return std::move(e);
    }
    if (!handle)
      return plainError("ncclCommInitRankConfig", "returned no communicator");
  }
  if (llvm::Error e = waitReady(s, "ncclCommInitRankConfig"))
    return std::move(e);
  return std::move(c);
}

llvm::Expected<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::split(NcclCommunicator &parent, int color, int key,
                        Options options) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->shared = std::make_shared<State>();
  c->shared->name = options.name;
  c->shared->pollTimeout = options.pollTimeoutSeconds;
  State &ps = *parent.shared;
  // The parent must be idle (not in progress) before a split.
  if (llvm::Error e = waitReady(ps, "ncclCommSplit (parent ready)"))
    return std::move(e);
  // With a non-blocking parent, NCCL writes *newcomm only when the
  // asynchronous split completes (src/init.cc: "*newcomm should be
  // NCCL_COMM_NULL until comm split fully complete"), and the job may read
  // the name later: both live in a heap slot that is leaked, not freed, when
  // this call gives up before the job is done.
  struct Slot {
    ncclComm_t child = nullptr;
    std::string name;
  };
  auto slot = std::make_unique<Slot>();
  slot->name = options.name;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = slot->name.c_str();
  Slot *raw = slot.get();
  if (llvm::Error e = issue(ps, "ncclCommSplit", [&](ncclComm_t p) {
        return ncclCommSplit(p, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                             &raw->child, &config);
      })) {
    (void)slot.release(); // the aborted job may still write to it
    return std::move(e);
  }
  // ncclCommSplit may return ncclSuccess while the split still runs (seen on
  // an H100 with NCCL 2.2x: its group end's ncclInProgress passes through
  // NCCLCHECK and the call returns its own ncclSuccess). The parent reports
  // ncclInProgress until the job has written *newcomm and ncclSuccess once
  // it has (ncclCommGetAsyncError also joins the job), so wait for the
  // parent before reading the child.
  if (llvm::Error e = waitReady(ps, "ncclCommSplit")) {
    (void)slot.release();
    return std::move(e);
  }
  ncclComm_t child = __atomic_load_n(&slot->child, __ATOMIC_ACQUIRE);
  if (color < 0 || !child) {
    if (color >= 0)
      return plainError("ncclCommSplit", "returned no communicator for color " +
                                             std::to_string(color));
    return std::unique_ptr<NcclCommunicator>();
  }
  State &s = *c->shared;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.comm = child;
  }
  if (llvm::Error e = waitReady(s, "ncclCommSplit (child init)"))
    return std::move(e);
  int rank = 0, size = 0;
  if (llvm::Error e = issue(s, "ncclCommUserRank", [&](ncclComm_t h) {
        return ncclCommUserRank(h, &rank);
      }))
    return std::move(e);
  if (llvm::Error e = issue(s, "ncclCommCount", [&](ncclComm_t h) {
        return ncclCommCount(h, &size);
      }))
    return std::move(e);
  c->myRank = rank;
  c->mySize = size;
  return std::move(c);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::detached(int rank,
                                                             int size) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->shared = std::make_shared<State>();
  c->shared->name = "detached";
  c->myRank = rank;
  c->mySize = size;
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (!shared)
    return;
  State &s = *shared;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.comm)
      return;
  }
  llvm::Error e = issue(s, "ncclCommFinalize",
                        [](ncclComm_t h) { return ncclCommFinalize(h); });
  if (e) {
    // issue / waitReady aborted the communicator already.
    llvm::errs() << "warning: " << llvm::toString(std::move(e)) << "\n";
    return;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.comm) {
    ncclResult_t r = ncclCommDestroy(s.comm);
    s.comm = nullptr;
    if (r != ncclSuccess)
      llvm::errs() << "warning: " << llvm::toString(check(r, "ncclCommDestroy"))
                   << "\n";
  }
}

const std::string &NcclCommunicator::name() const { return shared->name; }

bool NcclCommunicator::connected() const {
  std::lock_guard<std::mutex> lock(shared->mu);
  return shared->comm != nullptr;
}

bool NcclCommunicator::aborted() const {
  std::lock_guard<std::mutex> lock(shared->mu);
  return shared->wasAborted;
}

llvm::Error NcclCommunicator::checkAsync() {
  State &s = *shared;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.comm)
    return unusable(s, "ncclCommGetAsyncError");
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(s.comm, &state);
  if (r != ncclSuccess)
    return check(r, "ncclCommGetAsyncError (communicator '" + s.name + "')");
  if (state == ncclSuccess || state == ncclInProgress)
    return llvm::Error::success();
  return check(state, "communicator '" + s.name + "' (async error)");
}

void NcclCommunicator::abort() {
  std::lock_guard<std::mutex> lock(shared->mu);
  abortLocked(*shared);
}

llvm::Error NcclCommunicator::withHandle(
    const llvm::Twine &what,
    const std::function<ncclResult_t(ncclComm_t)> &fn) {
  return issue(*shared, what, fn);
}

//===----------------------------------------------------------------------===//
// Scratch sizes and validation
//===----------------------------------------------------------------------===//

int64_t nccl::allGatherScratchBytes(DType dtype, ArrayRef<int64_t> inShape,
                                    int64_t dim, int n) {
  if (n < 1 || dim < 0 || dim >= static_cast<int64_t>(inShape.size()))
    return -1;
  for (int64_t d : inShape)
    if (d < 0)
      return -1;
  if (n == 1 || product(inShape, 0, dim) == 1)
    return 0;
  return product(inShape, 0, inShape.size()) * n *
         static_cast<int64_t>(dtypeSize(dtype));
}

int64_t nccl::reduceScatterScratchBytes(DType dtype, ArrayRef<int64_t> inShape,
                                        int64_t dim, int n) {
  if (n < 1 || dim < 0 || dim >= static_cast<int64_t>(inShape.size()) ||
      inShape[dim] % n != 0)
    return -1;
  for (int64_t d : inShape)
    if (d < 0)
      return -1;
  if (n == 1 || product(inShape, 0, dim) == 1)
    return 0;
  return product(inShape, 0, inShape.size()) *
         static_cast<int64_t>(dtypeSize(dtype));
}

int64_t nccl::allToAllScratchBytes(DType dtype, ArrayRef<int64_t> inShape,
                                   int64_t splitDim, int64_t concatDim, int n) {
  int64_t rank = static_cast<int64_t>(inShape.size());
  if (n < 1 || splitDim < 0 || splitDim >= rank || concatDim < 0 ||
      concatDim >= rank || inShape[splitDim] % n != 0)
    return -1;
  for (int64_t d : inShape)
    if (d < 0)
      return -1;
  if (n == 1)
    return 0;
  std::vector<int64_t> chunk(inShape.begin(), inShape.end());
  chunk[splitDim] /= n;
  int64_t bytes =
      product(inShape, 0, rank) * static_cast<int64_t>(dtypeSize(dtype));
  int64_t send = product(inShape, 0, splitDim) == 1 ? 0 : alignScratch(bytes);
  int64_t recv = product(chunk, 0, concatDim) == 1 ? 0 : bytes;
  return send + recv;
}

llvm::Error nccl::validateAllReduce(const Tensor &t) {
  if (t.dtype() == DType::I1)
    return plainError("all_reduce", "i1 tensors are not supported");
  if (t.isNull() && t.numel() != 0)
    return plainError("all_reduce", "null tensor");
  return llvm::Error::success();
}

llvm::Error nccl::validateAllGather(const Tensor &in, int64_t dim, int n,
                                    const Tensor &out) {
  bool ok = n >= 1 && dim >= 0 && dim < in.rank() && out.dtype() == in.dtype();
  if (ok) {
    std::vector<int64_t> expect = in.shape();
    expect[dim] *= n;
    ok = expect == out.shape();
  }
  if (!ok)
    return plainError("all_gather",
                      "bad shapes for " + std::to_string(n) +
                          " ranks along dim " + std::to_string(dim) + ": in " +
                          shapeStr(in.shape()) + " " + dtypeName(in.dtype()) +
                          ", out " + shapeStr(out.shape()) + " " +
                          dtypeName(out.dtype()));
  if (overlaps(in, out))
    return plainError("all_gather", "the output overlaps the input");
  return llvm::Error::success();
}

llvm::Error nccl::validateReduceScatter(const Tensor &in, int64_t dim, int n,
                                        const Tensor &out) {
  if (in.dtype() == DType::I1)
    return plainError("reduce_scatter", "i1 tensors are not supported");
  bool ok = n >= 1 && dim >= 0 && dim < in.rank() && in.shape()[dim] % n == 0 &&
            out.dtype() == in.dtype();
  if (ok) {
    std::vector<int64_t> expect = in.shape();
    expect[dim] /= n;
    ok = expect == out.shape();
  }
  if (!ok)
    return plainError("reduce_scatter",
                      "bad shapes for " + std::to_string(n) +
                          " ranks along dim " + std::to_string(dim) + ": in " +
                          shapeStr(in.shape()) + " " + dtypeName(in.dtype()) +
                          ", out " + shapeStr(out.shape()) + " " +
                          dtypeName(out.dtype()));
  if (overlaps(in, out))
    return plainError("reduce_scatter", "the output overlaps the input");
  return llvm::Error::success();
}

llvm::Error nccl::validateAllToAll(const Tensor &in, int64_t splitDim,
                                   int64_t concatDim, int n,
                                   const Tensor &out) {
  bool ok = n >= 1 && splitDim >= 0 && splitDim < in.rank() && concatDim >= 0 &&
            concatDim < in.rank() && in.shape()[splitDim] % n == 0 &&
            out.dtype() == in.dtype();
  if (ok) {
    std::vector<int64_t> expect = in.shape();
    expect[splitDim] /= n;
    expect[concatDim] *= n;
    ok = expect == out.shape();
  }
  if (!ok)
    return plainError("all_to_all",
                      "bad shapes for " + std::to_string(n) +
                          " ranks (split dim " + std::to_string(splitDim) +
                          ", concat dim " + std::to_string(concatDim) +
                          "): in " + shapeStr(in.shape()) + " " +
                          dtypeName(in.dtype()) + ", out " +
                          shapeStr(out.shape()) + " " + dtypeName(out.dtype()));
  if (overlaps(in, out))
    return plainError("all_to_all", "the output overlaps the input");
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

llvm::Error nccl::allReduce(Tensor &t, ReduceOp op, NcclCommunicator &comm,
                            cudaStream_t stream, TrafficCounter *counter) {
  if (llvm::Error e = validateAllReduce(t))
    return e;
  if (llvm::Error e = requireConnected(comm, "all_reduce"))
    return e;
  int n = comm.size();
  if (counter)
    counter->record(mpi::CollectiveKind::AllReduce, (double)t.bytes(), n);
  if (n == 1 || t.numel() == 0)
    return llvm::Error::success();
  void *p = t.raw();
  size_t count = static_cast<size_t>(t.numel());
  ncclDataType_t type = reduceType(t.dtype());
  return issue(*comm.state(), "all_reduce", [&](ncclComm_t h) {
    return ncclAllReduce(p, p, count, type, redOp(op), h, stream);
  });
}

llvm::Error nccl::allReduceF64(double *data, int64_t count, ReduceOp op,
                               NcclCommunicator &comm, cudaStream_t stream,
                               TrafficCounter *counter) {
  if (count < 0 || (count > 0 && data == nullptr))
    return plainError("all_reduce",
                      "bad f64 buffer (count " + std::to_string(count) + ")");
  if (llvm::Error e = requireConnected(comm, "all_reduce"))
    return e;
  int n = comm.size();
  if (counter)
    counter->record(mpi::CollectiveKind::AllReduce,
                    static_cast<double>(count) * sizeof(double), n);
  if (n == 1 || count == 0)
    return llvm::Error::success();
  return issue(*comm.state(), "all_reduce", [&](ncclComm_t h) {
    return ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat64,
                         redOp(op), h, stream);
  });
}

llvm::Error nccl::allGather(const Tensor &in, int64_t dim,
                            NcclCommunicator &comm, Tensor &out, void *scratch,
                            int64_t scratchBytes, cudaStream_t stream,
                            TrafficCounter *counter) {
  int n = comm.size();
  if (llvm::Error e = validateAllGather(in, dim, n, out))
    return e;
  int64_t need = allGatherScratchBytes(in.dtype(), in.shape(), dim, n);
  if (llvm::Error e =
          scratchCheck("all_gather", need, scratch, scratchBytes, in.dtype()))
    return e;
  if (llvm::Error e = requireConnected(comm, "all_gather"))
    return e;
  if (counter)
    counter->record(mpi::CollectiveKind::AllGather, (double)out.bytes(), n);
  if (in.numel() == 0)
    return llvm::Error::success();
  if (n == 1)
    return cuda::copyAsync(out.raw(), in.raw(), in.bytes(), stream,
                           "all_gather (1 rank)");
  int64_t outer = product(in.shape(), 0, dim);
  const void *src = in.raw();
  void *dst = outer == 1 ? out.raw() : scratch;
  size_t bytes = in.bytes();
  if (llvm::Error e = issue(*comm.state(), "all_gather", [&](ncclComm_t h) {
        return ncclAllGather(src, dst, bytes, ncclUint8, h, stream);
      }))
    return e;
  if (outer == 1)
    return llvm::Error::success();
  // scratch is [n][outer][inner]; out is [outer][n][inner].
  return swapBlocksDevice(scratch, out.raw(), in.dtype(), n, outer,
                          in.numel() / outer, stream, "all_gather");
}

llvm::Error nccl::reduceScatter(const Tensor &in, int64_t dim,
                                NcclCommunicator &comm, Tensor &out,
                                void *scratch, int64_t scratchBytes,
                                cudaStream_t stream, TrafficCounter *counter,
                                ReduceOp op) {
  int n = comm.size();
  if (llvm::Error e = validateReduceScatter(in, dim, n, out))
    return e;
  int64_t need = reduceScatterScratchBytes(in.dtype(), in.shape(), dim, n);
  if (llvm::Error e = scratchCheck("reduce_scatter", need, scratch,
                                   scratchBytes, in.dtype()))
    return e;
  if (llvm::Error e = requireConnected(comm, "reduce_scatter"))
    return e;
  if (counter)
    counter->record(mpi::CollectiveKind::ReduceScatter, (double)in.bytes(), n);
  if (out.numel() == 0)
    return llvm::Error::success();
  if (n == 1)
    return cuda::copyAsync(out.raw(), in.raw(), in.bytes(), stream,
                           "reduce_scatter (1 rank)");
  int64_t outer = product(in.shape(), 0, dim);
  const void *src = in.raw();
  if (outer != 1) {
    // in is [outer][n][chunk]; NCCL wants [n][outer][chunk].
    if (llvm::Error e =
            swapBlocksDevice(in.raw(), scratch, in.dtype(), outer, n,
                             out.numel() / outer, stream, "reduce_scatter"))
      return e;
    src = scratch;
  }
  void *dst = out.raw();
  size_t count = static_cast<size_t>(out.numel());
  ncclDataType_t type = reduceType(in.dtype());
  return issue(*comm.state(), "reduce_scatter", [&](ncclComm_t h) {
    return ncclReduceScatter(src, dst, count, type, redOp(op), h, stream);
  });
}

llvm::Error nccl::allToAll(const Tensor &in, int64_t splitDim,
                           int64_t concatDim, NcclCommunicator &comm,
                           Tensor &out, void *scratch, int64_t scratchBytes,
                           cudaStream_t stream, TrafficCounter *counter) {
  int n = comm.size();
  if (llvm::Error e = validateAllToAll(in, splitDim, concatDim, n, out))
    return e;
  int64_t need =
      allToAllScratchBytes(in.dtype(), in.shape(), splitDim, concatDim, n);
  if (llvm::Error e =
          scratchCheck("all_to_all", need, scratch, scratchBytes, in.dtype()))
    return e;
  if (llvm::Error e = requireConnected(comm, "all_to_all"))
    return e;
  if (counter)
    counter->record(mpi::CollectiveKind::AllToAll, (double)in.bytes(), n);
  if (in.numel() == 0)
    return llvm::Error::success();
  if (n == 1)
    return cuda::copyAsync(out.raw(), in.raw(), in.bytes(), stream,
                           "all_to_all (1 rank)");
  int64_t chunkN = in.numel() / n;
  size_t chunkBytes = static_cast<size_t>(chunkN) * dtypeSize(in.dtype());
  std::vector<int64_t> chunkShape = in.shape();
  chunkShape[splitDim] /= n;
  int64_t outerS = product(in.shape(), 0, splitDim);
  int64_t outerC = product(chunkShape, 0, concatDim);
  int64_t sendPart = outerS == 1 ? 0 : alignScratch((int64_t)in.bytes());
  const char *sendBuf = static_cast<const char *>(in.raw());
  char *recvBuf = static_cast<char *>(out.raw());
  if (outerS != 1) {
    // Pack: in is [outerS][n][innerS] -> send [n][outerS][innerS].
    if (llvm::Error e =
            swapBlocksDevice(in.raw(), scratch, in.dtype(), outerS, n,
                             chunkN / outerS, stream, "all_to_all"))
      return e;
    sendBuf = static_cast<const char *>(scratch);
  }
  if (outerC != 1)
    recvBuf = static_cast<char *>(scratch) + sendPart;
  if (llvm::Error e = issue(*comm.state(), "all_to_all", [&](ncclComm_t h) {
        ncclResult_t first = ncclGroupStart();
        if (first != ncclSuccess)
          return first;
        for (int p = 0; p < n && first == ncclSuccess; ++p) {
          ncclResult_t r = ncclSend(sendBuf + p * chunkBytes, chunkBytes,
                                    ncclUint8, p, h, stream);
          if (r == ncclSuccess)
            r = ncclRecv(recvBuf + p * chunkBytes, chunkBytes, ncclUint8, p, h,
                         stream);
          if (r != ncclSuccess && r != ncclInProgress)
            first = r;
        }
        ncclResult_t end = ncclGroupEnd();
        return first != ncclSuccess ? first : end;
      }))
    return e;
  if (outerC == 1)
    return llvm::Error::success();
  // Unpack: recv is [n][outerC][innerC] -> out [outerC][n][innerC].
  return swapBlocksDevice(recvBuf, out.raw(), in.dtype(), n, outerC,
                          chunkN / outerC, stream, "all_to_all");
}

llvm::Error nccl::send(const Tensor &t, int dest, NcclCommunicator &comm,
                       cudaStream_t stream, TrafficCounter *counter) {
  if (dest < 0 || dest >= comm.size() || dest == comm.rank())
    return plainError("send", "bad destination rank " + std::to_string(dest) +
                                  " (this is rank " +
                                  std::to_string(comm.rank()) + " of " +
                                  std::to_string(comm.size()) + ")");
  if (llvm::Error e = requireConnected(comm, "send"))
    return e;
  if (counter)
    counter->record(mpi::CollectiveKind::Send, (double)t.bytes(), comm.size());
  if (t.bytes() == 0)
    return llvm::Error::success();
  const void *p = t.raw();
  size_t bytes = t.bytes();
  return issue(*comm.state(), "send", [&](ncclComm_t h) {
    return ncclSend(p, bytes, ncclUint8, dest, h, stream);
  });
}

llvm::Error nccl::recv(Tensor &t, int src, NcclCommunicator &comm,
                       cudaStream_t stream) {
  if (src < 0 || src >= comm.size() || src == comm.rank())
    return plainError("recv", "bad source rank " + std::to_string(src) +
                                  " (this is rank " +
                                  std::to_string(comm.rank()) + " of " +
                                  std::to_string(comm.size()) + ")");
  if (llvm::Error e = requireConnected(comm, "recv"))
    return e;
  if (t.bytes() == 0)
    return llvm::Error::success();
  void *p = t.raw();
  size_t bytes = t.bytes();
  return issue(*comm.state(), "recv", [&](ncclComm_t h) {
    return ncclRecv(p, bytes, ncclUint8, src, h, stream);
  });
}

//===----------------------------------------------------------------------===//
// Watchdog
//===----------------------------------------------------------------------===//

WatchdogVerdict nccl::watchdogDecide(double nowSeconds, double timeoutSeconds,
                                     const WatchdogOp &op,
                                     ArrayRef<int> asyncResults) {
  WatchdogVerdict v;
  for (size_t i = 0; i < asyncResults.size(); ++i) {
    int r = asyncResults[i];
    if (r != ncclSuccess && r != ncclInProgress) {
      v.kind = WatchdogVerdict::AsyncError;
      v.commIndex = static_cast<int>(i);
      v.ncclCode = r;
      return v;
    }
  }
  if (timeoutSeconds > 0 && op.active &&
      nowSeconds - op.startSeconds > timeoutSeconds) {
    v.kind = WatchdogVerdict::Timeout;
    v.elapsed = nowSeconds - op.startSeconds;
  }
  return v;
}

std::string nccl::watchdogMessage(int worldRank, const WatchdogVerdict &verdict,
                                  const WatchdogOp &op, double timeoutSeconds,
                                  int numComms, llvm::StringRef commName) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "tessera nccl watchdog: rank " << worldRank << ": ";
  std::string opText =
      op.active ? "collective #" + std::to_string(op.seq) + " '" + op.name + "'"
                : std::string("no collective in flight");
  switch (verdict.kind) {
  case WatchdogVerdict::Healthy:
    os << "healthy";
    return os.str();
  case WatchdogVerdict::AsyncError:
    os << "communicator '" << commName << "' reported "
       << ncclGetErrorString(static_cast<ncclResult_t>(verdict.ncclCode))
       << " (" << verdict.ncclCode << ") during " << opText;
    break;
  case WatchdogVerdict::Timeout:
    os << opText << " timed out after " << llvm::format("%.1f", verdict.elapsed)
       << " s (limit " << llvm::format("%g", timeoutSeconds) << " s)";
    break;
  }
  os << "; aborted " << numComms << " communicator"
     << (numComms == 1 ? "" : "s");
  return os.str();
}

NcclWatchdog::NcclWatchdog(double timeoutSeconds, Callback onFailure,
                           std::chrono::milliseconds period)
    : timeout(timeoutSeconds), callback(std::move(onFailure)),
      pollPeriod(period) {
  if (!callback)
    callback = [](const std::string &message) {
      std::fprintf(stderr, "%s\n", message.c_str());
      std::fflush(stderr);
      _exit(1);
    };
  thread = std::thread([this] { run(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cv.notify_all();
  if (thread.joinable())
    thread.join();
}

void NcclWatchdog::watch(const NcclCommunicator &comm) {
  std::lock_guard<std::mutex> lock(mu);
  comms.erase(
      std::remove_if(comms.begin(), comms.end(),
                     [](const std::weak_ptr<NcclCommunicator::State> &w) {
                       return w.expired();
                     }),
      comms.end());
  comms.push_back(comm.state());
}

void NcclWatchdog::begin(uint64_t seq, llvm::StringRef name) {
  std::lock_guard<std::mutex> lock(mu);
  op.active = true;
  op.seq = seq;
  op.name = name.str();
  op.startSeconds = steadySeconds();
}

void NcclWatchdog::end() {
  std::lock_guard<std::mutex> lock(mu);
  op.active = false;
}

void NcclWatchdog::run() {
  std::unique_lock<std::mutex> lk(mu);
  while (!stopping) {
    cv.wait_for(lk, pollPeriod, [this] { return stopping; });
    if (stopping)
      return;
    WatchdogOp snapshot = op;
    std::vector<std::weak_ptr<NcclCommunicator::State>> watched = comms;
    lk.unlock();

    std::vector<std::shared_ptr<NcclCommunicator::State>> polled;
    std::vector<int> results;
    for (auto &w : watched) {
      std::shared_ptr<NcclCommunicator::State> s = w.lock();
      if (!s)
        continue;
      std::lock_guard<std::mutex> lock(s->mu);
      if (!s->comm)
        continue;
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(s->comm, &state);
      results.push_back(static_cast<int>(r != ncclSuccess ? r : state));
      polled.push_back(s);
    }
    WatchdogVerdict v =
        watchdogDecide(steadySeconds(), timeout, snapshot, results);
    if (v.kind != WatchdogVerdict::Healthy) {
      std::string commName;
      if (v.kind == WatchdogVerdict::AsyncError)
        commName = polled[static_cast<size_t>(v.commIndex)]->name;
      int aborted = 0;
      for (auto &w : watched) {
        std::shared_ptr<NcclCommunicator::State> s = w.lock();
        if (!s)
          continue;
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->comm)
          ++aborted;
        abortLocked(*s);
      }
      hasFired.store(true);
      callback(watchdogMessage(worldRank(), v, snapshot, timeout, aborted,
                               commName));
      return;
    }
    lk.lock();
  }
}

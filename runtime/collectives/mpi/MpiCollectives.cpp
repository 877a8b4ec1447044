//===- MpiCollectives.cpp - MPI communicators, grids, collectives ---------===//

#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/FaultInject.h"
#include "runtime/collectives/mpi/Watchdog.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define TESSERA_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_LSAN 1
#endif
#ifdef TESSERA_LSAN
#include <sanitizer/lsan_interface.h>
#endif

using namespace tessera::runtime;
using namespace tessera::runtime::mpi;
using llvm::ArrayRef;

int mpi::worldRank() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin)
    return -1;
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

namespace {

llvm::Error mpiError(int code, const char *what) {
  char msg[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
    std::snprintf(msg, sizeof(msg), "MPI error code %d", code);
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "%s failed on rank %d: %s", what, worldRank(),
                                 msg);
}

llvm::Error plainError(const char *what, const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "%s on rank %d: %s", what, worldRank(),
                                 msg.c_str());
}

#define MPI_CHECK(CALL, WHAT)                                                  \
  do {                                                                         \
    int rc_ = (CALL);                                                          \
    if (rc_ != MPI_SUCCESS)                                                    \
      return mpiError(rc_, WHAT);                                              \
  } while (0)

MPI_Datatype mpiType(DType dtype) { return mpi::dataType(dtype); }

void bf16SumFn(void *in, void *inout, int *len, MPI_Datatype *) {
  mpi::bf16Combine(static_cast<const BFloat16 *>(in),
                   static_cast<BFloat16 *>(inout), *len, mpi::ReduceOp::Sum);
}
void bf16MaxFn(void *in, void *inout, int *len, MPI_Datatype *) {
  mpi::bf16Combine(static_cast<const BFloat16 *>(in),
                   static_cast<BFloat16 *>(inout), *len, mpi::ReduceOp::Max);
}
void f16SumFn(void *in, void *inout, int *len, MPI_Datatype *) {
  mpi::f16Combine(static_cast<const Float16 *>(in),
                  static_cast<Float16 *>(inout), *len, mpi::ReduceOp::Sum);
}
void f16MaxFn(void *in, void *inout, int *len, MPI_Datatype *) {
  mpi::f16Combine(static_cast<const Float16 *>(in),
                  static_cast<Float16 *>(inout), *len, mpi::ReduceOp::Max);
}

/// inout[i] = T(f32(in[i]) op f32(inout[i])), rounded by `narrow`.
template <typename T, typename Narrow>
void combine16(const T *in, T *inout, int64_t n, mpi::ReduceOp op,
               Narrow narrow) {
  for (int64_t i = 0; i < n; ++i) {
    float a = toFloat(in[i]), b = toFloat(inout[i]);
    float r;
    if (op == mpi::ReduceOp::Sum)
      r = a + b;
    else if (std::isnan(a) || std::isnan(b))
      r = std::numeric_limits<float>::quiet_NaN();
    else
      r = a > b ? a : b;
    inout[i] = narrow(r);
  }
}

int64_t product(const std::vector<int64_t> &s, size_t b, size_t e) {
  int64_t n = 1;
  for (size_t i = b; i < e; ++i)
    n *= s[i];
  return n;
}

llvm::Error checkCount(int64_t count, const char *what) {
  if (count > INT_MAX)
    return plainError(what, "message of " + std::to_string(count) +
                                " elements exceeds INT_MAX");
  return llvm::Error::success();
}

/// Blocked copy: dst[b][a][inner] = src[a][b][inner] for a < na, b < nb
/// (elements of `esize` bytes).
void swapBlocks(const char *src, char *dst, int64_t na, int64_t nb,
                int64_t innerElems, size_t esize) {
  size_t row = innerElems * esize;
  if (!row)
    return;
  for (int64_t a = 0; a < na; ++a)
    for (int64_t b = 0; b < nb; ++b)
      std::memcpy(dst + (b * na + a) * row, src + (a * nb + b) * row, row);
}

/// Under LeakSanitizer (`make sanitize`, docs/Sanitizers.md): Open MPI's
/// start-up and shut-down allocate tables it never frees (its own, hwloc's,
/// libevent's and those of the MCA components it loads). Open MPI is built
/// without frame pointers, so the stacks LSan records for them end at the
/// first Open MPI frame, often in a component it has unloaded again, and a
/// suppression file cannot name them. Allocations this thread makes inside
/// MPI_Init and MPI_Finalize are therefore not leak-checked; everything else
/// (all of Tessera's) is. Nothing in a build without LSan.
struct PauseLeakChecks {
#ifdef TESSERA_LSAN
  __lsan::ScopedDisabler disabler;
#endif
};

} // namespace

llvm::Error mpi::initialize(int *argc, char ***argv) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    fault::at(fault::Moment::Startup); // test hook: before MPI_Init
    int rc;
    {
      // Under the start-up timer (watchdog::armStartup), if armed.
      watchdog::StartupPhase phase("MPI initialisation (MPI_Init)");
      PauseLeakChecks paused;
      rc = MPI_Init(argc, argv);
    }
    if (rc != MPI_SUCCESS)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "MPI_Init failed (code %d)", rc);
    fault::at(fault::Moment::Startup); // test hook: after MPI_Init
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return llvm::Error::success();
}

void mpi::finalize() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  // The watchdog would take peers that finalised and exited for lost ones.
  watchdog::stop();
  watchdog::disarmStartup();
  if (init && !fin) {
#ifdef TESSERA_LSAN
    // The leak check now, while Open MPI is alive: what its progress
    // threads allocated is still reachable from its globals (those threads
    // are not covered by PauseLeakChecks), Tessera's own unreachable blocks
    // are reported. LSan does not check again at exit.
    __lsan_do_leak_check();
#endif
    PauseLeakChecks paused;
    MPI_Finalize();
  }
}

Communicator::Communicator(MPI_Comm c) : comm(c) {
  if (comm == MPI_COMM_NULL)
    return;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &myRank);
  MPI_Comm_size(comm, &mySize);
}

Communicator Communicator::world() { return Communicator(MPI_COMM_WORLD); }

//===----------------------------------------------------------------------===//
// Grid
//===----------------------------------------------------------------------===//

/// `order`, or 0..n-1 when empty.
static std::vector<int64_t> fullOrder(ArrayRef<int64_t> order, size_t n) {
  if (!order.empty())
    return std::vector<int64_t>(order.begin(), order.end());
  std::vector<int64_t> all(n);
  for (size_t i = 0; i < n; ++i)
    all[i] = static_cast<int64_t>(i);
  return all;
}

std::vector<int64_t> mpi::rankStrides(ArrayRef<int64_t> sizes,
                                      ArrayRef<int64_t> order) {
  std::vector<int64_t> strides(sizes.size(), 1);
  int64_t stride = 1;
  std::vector<int64_t> o = fullOrder(order, sizes.size());
  for (size_t i = o.size(); i-- > 0;) {
    strides[o[i]] = stride;
    stride *= sizes[o[i]];
  }
  return strides;
}

std::vector<int64_t> mpi::rankToCoords(int64_t rank, ArrayRef<int64_t> sizes,
                                       ArrayRef<int64_t> order) {
  std::vector<int64_t> coords(sizes.size(), 0);
  std::vector<int64_t> o = fullOrder(order, sizes.size());
  for (size_t i = o.size(); i-- > 0;) {
    coords[o[i]] = rank % sizes[o[i]];
    rank /= sizes[o[i]];
  }
  return coords;
}

int64_t mpi::coordsToRank(ArrayRef<int64_t> coords, ArrayRef<int64_t> sizes,
                          ArrayRef<int64_t> order) {
  int64_t rank = 0;
  for (int64_t a : fullOrder(order, sizes.size()))
    rank = rank * sizes[a] + coords[a];
  return rank;
}

llvm::Expected<std::unique_ptr<Grid>>
Grid::create(Communicator parent, std::vector<std::string> axisNames,
             std::vector<int64_t> axisSizes, std::vector<int64_t> rankOrder) {
  if (axisNames.size() != axisSizes.size())
    return plainError("grid", "axis names and sizes differ in length");
  std::set<std::string> seen;
  int64_t total = 1;
  for (size_t i = 0; i < axisNames.size(); ++i) {
    if (axisNames[i].empty() || !seen.insert(axisNames[i]).second)
      return plainError("grid",
                        "empty or duplicate axis name '" + axisNames[i] + "'");
    if (axisSizes[i] < 1)
      return plainError("grid", "axis '" + axisNames[i] + "' has size " +
                                    std::to_string(axisSizes[i]));
    total *= axisSizes[i];
  }
  if (total != parent.size())
    return plainError("grid", "grid of " + std::to_string(total) +
                                  " devices does not match " +
                                  std::to_string(parent.size()) + " ranks");
  if (!rankOrder.empty()) {
    std::vector<bool> used(axisSizes.size(), false);
    bool ok = rankOrder.size() == axisSizes.size();
    for (int64_t a : rankOrder) {
      ok = ok && a >= 0 && a < static_cast<int64_t>(axisSizes.size()) &&
           !used[a];
      if (ok)
        used[a] = true;
    }
    if (!ok)
      return plainError("grid", "the rank order is not a permutation of the " +
                                    std::to_string(axisSizes.size()) +
                                    " axis indices");
  }
  std::unique_ptr<Grid> g(new Grid());
  g->parentComm = parent;
  g->names = std::move(axisNames);
  g->sizes = std::move(axisSizes);
  g->order = fullOrder(rankOrder, g->sizes.size());
  g->myCoords = rankToCoords(parent.rank(), g->sizes, g->order);
  return std::move(g);
}

Grid::~Grid() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin)
    return;
  for (auto &kv : cache)
    if (kv.second != MPI_COMM_NULL)
      MPI_Comm_free(&kv.second);
}

int64_t Grid::axisIndex(llvm::StringRef axis) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == axis)
      return static_cast<int64_t>(i);
  return -1;
}

llvm::Expected<Communicator> Grid::subComm(ArrayRef<int64_t> axes) {
  std::vector<int64_t> key(axes.begin(), axes.end());
  auto it = cache.find(key);
  if (it != cache.end())
    return Communicator(it->second);
  std::vector<bool> in(sizes.size(), false);
  for (int64_t a : axes) {
    if (a < 0 || a >= (int64_t)sizes.size() || in[a])
      return plainError("grid subcommunicator",
                        "unknown or repeated axis " + std::to_string(a));
    in[a] = true;
  }
  int64_t color = 0, keyRank = 0;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (!in[i])
      color = color * sizes[i] + myCoords[i];
  for (int64_t a : axes)
    keyRank = keyRank * sizes[a] + myCoords[a];
  MPI_Comm c = MPI_COMM_NULL;
  // Collective over the parent: under the watchdog like any other.
  watchdog::Guard guard("communicator split", parentComm.size());
  MPI_CHECK(MPI_Comm_split(parentComm.handle(), static_cast<int>(color),
                           static_cast<int>(keyRank), &c),
            "MPI_Comm_split");
  cache[key] = c;
  return Communicator(c);
}

llvm::Expected<Communicator> Grid::subComm(ArrayRef<std::string> axes) {
  std::vector<int64_t> idx;
  for (const std::string &a : axes) {
    int64_t i = axisIndex(a);
    if (i < 0)
      return plainError("grid subcommunicator", "unknown axis '" + a + "'");
    idx.push_back(i);
  }
  return subComm(ArrayRef<int64_t>(idx));
}

//===----------------------------------------------------------------------===//
// Traffic
//===----------------------------------------------------------------------===//

const char *mpi::collectiveKindName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  case CollectiveKind::Send:
    return "send";
  }
  return "?";
}

double TrafficCounter::ringBytes(CollectiveKind kind, double bytes, int n) {
  if (kind == CollectiveKind::Send)
    return bytes;
  if (n <= 1)
    return 0.0;
  double frac = double(n - 1) / double(n);
  if (kind == CollectiveKind::AllReduce)
    return 2.0 * frac * bytes;
  return frac * bytes;
}

void TrafficCounter::record(CollectiveKind kind, double bytes, int n) {
  double b = ringBytes(kind, bytes, n);
  step[static_cast<int>(kind)] += b;
  total[static_cast<int>(kind)] += b;
}

void TrafficCounter::beginStep() { step.fill(0.0); }

double TrafficCounter::stepBytes() const {
  double s = 0;
  for (double b : step)
    s += b;
  return s;
}

double TrafficCounter::totalBytes() const {
  double s = 0;
  for (double b : total)
    s += b;
  return s;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

llvm::Error mpi::allReduce(Tensor &t, ReduceOp op, const Communicator &comm,
                           TrafficCounter *counter) {
  if (t.dtype() == DType::I1)
    return plainError("all_reduce", "i1 tensors are not supported");
  if (auto e = checkCount(t.numel(), "all_reduce"))
    return e;
  if (counter)
    counter->record(CollectiveKind::AllReduce, (double)t.bytes(), comm.size());
  if (comm.size() == 1 || t.numel() == 0)
    return llvm::Error::success();
  watchdog::Guard guard("all_reduce", comm.size());
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.raw(), (int)t.numel(),
                          mpiType(t.dtype()), reduceOp(t.dtype(), op),
                          comm.handle()),
            "all_reduce");
  return llvm::Error::success();
}

llvm::Error mpi::allReduceF64(double *data, int64_t count, ReduceOp op,
                              const Communicator &comm,
                              TrafficCounter *counter) {
  if (auto e = checkCount(count, "all_reduce"))
    return e;
  if (counter)
    counter->record(CollectiveKind::AllReduce,
                    static_cast<double>(count) * sizeof(double), comm.size());
  if (comm.size() == 1 || count == 0)
    return llvm::Error::success();
  watchdog::Guard guard("all_reduce", comm.size());
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_DOUBLE,
                          op == ReduceOp::Max ? MPI_MAX : MPI_SUM,
                          comm.handle()),
            "all_reduce");
  return llvm::Error::success();
}

llvm::Error mpi::startAllReduce(const Tensor &in, Tensor &out, ReduceOp op,
                                const Communicator &comm, MPI_Request *request,
                                TrafficCounter *counter) {
  *request = MPI_REQUEST_NULL;
  if (in.dtype() == DType::I1)
    return plainError("all_reduce_start", "i1 tensors are not supported");
  if (out.dtype() != in.dtype() || out.shape() != in.shape() ||
      out.raw() == in.raw())
    return plainError("all_reduce_start",
                      "the result must be a distinct buffer of the input's "
                      "type");
  if (auto e = checkCount(in.numel(), "all_reduce_start"))
    return e;
  if (counter)
    counter->record(CollectiveKind::AllReduce, (double)in.bytes(), comm.size());
  if (comm.size() == 1 || in.numel() == 0) {
    std::memcpy(out.raw(), in.raw(), in.bytes());
    return llvm::Error::success();
  }
  MPI_CHECK(MPI_Iallreduce(in.raw(), out.raw(), (int)in.numel(),
                           mpiType(in.dtype()), reduceOp(in.dtype(), op),
                           comm.handle(), request),
            "all_reduce_start");
  return llvm::Error::success();
}

llvm::Error mpi::wait(MPI_Request *request) {
  if (*request == MPI_REQUEST_NULL)
    return llvm::Error::success();
  // The request does not tell its communicator's size.
  watchdog::Guard guard("wait for all_reduce", 0);
  MPI_CHECK(MPI_Wait(request, MPI_STATUS_IGNORE), "wait");
  return llvm::Error::success();
}

llvm::Error mpi::allGather(const Tensor &in, int64_t dim,
                           const Communicator &comm, Tensor &out,
                           TrafficCounter *counter) {
  int n = comm.size();
  if (dim < 0 || dim >= in.rank() || out.rank() != in.rank() ||
      out.dtype() != in.dtype() || out.numel() != in.numel() * n)
    return plainError("all_gather", "bad shapes: in " +
                                        shapeToString(in.shape()) + ", out " +
                                        shapeToString(out.shape()));
  if (auto e = checkCount(in.numel(), "all_gather"))
    return e;
  if (counter)
    counter->record(CollectiveKind::AllGather, (double)out.bytes(), n);
  int64_t outer = product(in.shape(), 0, dim);
  size_t esize = dtypeSize(in.dtype());
  int count = (int)in.numel();
  MPI_Datatype type = mpiType(in.dtype());
  if (outer == 1 || n == 1) {
    watchdog::Guard guard("all_gather", n);
    MPI_CHECK(MPI_Allgather(in.raw(), count, type, out.raw(), count, type,
                            comm.handle()),
              "all_gather");
    return llvm::Error::success();
  }
  std::vector<char> tmp(out.bytes());
  watchdog::Guard guard("all_gather", n);
  MPI_CHECK(MPI_Allgather(in.raw(), count, type, tmp.data(), count, type,
                          comm.handle()),
            "all_gather");
  // tmp is [n][outer][inner]; out is [outer][n][inner].
  swapBlocks(tmp.data(), static_cast<char *>(out.raw()), n, outer,
             in.numel() / outer, esize);
  return llvm::Error::success();
}

llvm::Error mpi::reduceScatter(const Tensor &in, int64_t dim,
                               const Communicator &comm, Tensor &out,
                               TrafficCounter *counter, ReduceOp op) {
  int n = comm.size();
  if (dim < 0 || dim >= in.rank() || in.shape()[dim] % n != 0 ||
      out.dtype() != in.dtype() || out.numel() * n != in.numel())
    return plainError("reduce_scatter",
                      "bad shapes for " + std::to_string(n) + " ranks: in " +
                          shapeToString(in.shape()) + ", out " +
                          shapeToString(out.shape()));
  if (in.dtype() == DType::I1)
    return plainError("reduce_scatter", "i1 tensors are not supported");
  if (auto e = checkCount(out.numel(), "reduce_scatter"))
    return e;
  if (counter)
    counter->record(CollectiveKind::ReduceScatter, (double)in.bytes(), n);
  int64_t outer = product(in.shape(), 0, dim);
  size_t esize = dtypeSize(in.dtype());
  const void *src = in.raw();
  std::vector<char> tmp;
  if (outer != 1 && n != 1) {
    // in is [outer][n][chunk]; MPI wants [n][outer][chunk].
    tmp.resize(in.bytes());
    swapBlocks(static_cast<const char *>(in.raw()), tmp.data(), outer, n,
               out.numel() / outer, esize);
    src = tmp.data();
  }
  watchdog::Guard guard("reduce_scatter", n);
  MPI_CHECK(MPI_Reduce_scatter_block(src, out.raw(), (int)out.numel(),
                                     mpiType(in.dtype()),
                                     reduceOp(in.dtype(), op), comm.handle()),
            "reduce_scatter");
  return llvm::Error::success();
}

llvm::Error mpi::allToAll(const Tensor &in, int64_t splitDim, int64_t concatDim,
                          const Communicator &comm, Tensor &out,
                          TrafficCounter *counter) {
  int n = comm.size();
  std::vector<int64_t> chunkShape = in.shape();
  bool ok = splitDim >= 0 && splitDim < in.rank() && concatDim >= 0 &&
            concatDim < in.rank() && in.shape()[splitDim] % n == 0 &&
            out.dtype() == in.dtype();
  if (ok) {
    chunkShape[splitDim] /= n;
    std::vector<int64_t> expect = chunkShape;
    expect[concatDim] *= n;
    ok = expect == out.shape();
  }
  if (!ok)
    return plainError("all_to_all", "bad shapes for " + std::to_string(n) +
                                        " ranks: in " +
                                        shapeToString(in.shape()) + ", out " +
                                        shapeToString(out.shape()));
  int64_t chunkN = in.numel() / n;
  if (auto e = checkCount(chunkN, "all_to_all"))
    return e;
  if (counter)
    counter->record(CollectiveKind::AllToAll, (double)in.bytes(), n);
  size_t esize = dtypeSize(in.dtype());
  // Pack: in is [outerS][n][innerS] -> send [n][outerS][innerS].
  int64_t outerS = product(in.shape(), 0, splitDim);
  std::vector<char> sendBuf(in.bytes()), recvBuf(in.bytes());
  if (chunkN)
    swapBlocks(static_cast<const char *>(in.raw()), sendBuf.data(), outerS, n,
               chunkN / outerS, esize);
  MPI_Datatype type = mpiType(in.dtype());
  watchdog::Guard guard("all_to_all", n);
  MPI_CHECK(MPI_Alltoall(sendBuf.data(), (int)chunkN, type, recvBuf.data(),
                         (int)chunkN, type, comm.handle()),
            "all_to_all");
  // Unpack: recv is [n][outerC][innerC] -> out [outerC][n][innerC].
  int64_t outerC = product(chunkShape, 0, concatDim);
  if (chunkN)
    swapBlocks(recvBuf.data(), static_cast<char *>(out.raw()), n, outerC,
               chunkN / outerC, esize);
  return llvm::Error::success();
}

llvm::Error mpi::send(const Tensor &t, int dest, const Communicator &comm,
                      int tag, TrafficCounter *counter) {
  if (auto e = checkCount(t.numel(), "send"))
    return e;
  if (counter)
    counter->record(CollectiveKind::Send, (double)t.bytes(), comm.size());
  watchdog::Guard guard("send", comm.size(), dest);
  MPI_CHECK(MPI_Send(t.raw(), (int)t.numel(), mpiType(t.dtype()), dest, tag,
                     comm.handle()),
            "send");
  return llvm::Error::success();
}

llvm::Error mpi::recv(Tensor &t, int src, const Communicator &comm, int tag) {
  if (auto e = checkCount(t.numel(), "recv"))
    return e;
  MPI_Status status;
  watchdog::Guard guard("recv", comm.size(), src);
  MPI_CHECK(MPI_Recv(t.raw(), (int)t.numel(), mpiType(t.dtype()), src, tag,
                     comm.handle(), &status),
            "recv");
  int got = 0;
  MPI_Get_count(&status, mpiType(t.dtype()), &got);
  if (got != t.numel())
    return plainError("recv", "expected " + std::to_string(t.numel()) +
                                  " elements from rank " + std::to_string(src) +
                                  ", got " + std::to_string(got));
  return llvm::Error::success();
}

llvm::Error mpi::barrier(const Communicator &comm) {
  watchdog::Guard guard("barrier", comm.size());
  MPI_CHECK(MPI_Barrier(comm.handle()), "barrier");
  return llvm::Error::success();
}

MPI_Datatype mpi::dataType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::I64:
    return MPI_INT64_T;
  case DType::I1:
    return MPI_UINT8_T;
  case DType::BF16:
  case DType::F16:
    return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

void mpi::bf16Combine(const BFloat16 *in, BFloat16 *inout, int64_t n,
                      ReduceOp op) {
  combine16(in, inout, n, op, [](float r) { return toBFloat16(r); });
}

void mpi::f16Combine(const Float16 *in, Float16 *inout, int64_t n,
                     ReduceOp op) {
  combine16(in, inout, n, op, [](float r) { return toFloat16(r); });
}

MPI_Op mpi::reduceOp(DType dtype, ReduceOp op) {
  if (!isFloat16Bit(dtype))
    return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
  static MPI_Op bf16Sum = MPI_OP_NULL, bf16Max = MPI_OP_NULL,
                f16Sum = MPI_OP_NULL, f16Max = MPI_OP_NULL;
  bool bf16 = dtype == DType::BF16, sum = op == ReduceOp::Sum;
  MPI_Op &o = bf16 ? (sum ? bf16Sum : bf16Max) : (sum ? f16Sum : f16Max);
  MPI_User_function *fn =
      bf16 ? (sum ? &bf16SumFn : &bf16MaxFn) : (sum ? &f16SumFn : &f16MaxFn);
  if (o == MPI_OP_NULL)
    MPI_Op_create(fn, /*commute=*/1, &o);
  return o;
}

llvm::Error mpi::failure(int code, const llvm::Twine &what) {
  return mpiError(code, what.str().c_str());
}

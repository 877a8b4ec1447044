//===- NcclCollectivesTest.cpp - NCCL communicators and collectives -------===//
//
// Run under mpirun (-np 1 and -np 2; see CMakeLists.txt). Host tests (the
// watchdog's decision and report, scratch sizes, argument validation) run
// everywhere. Device tests compare every NCCL collective with the mpi::
// collective of runtime/collectives/mpi on the same data; they skip, on
// every rank alike, without a usable GPU, and the multi-rank ones also when
// a node has fewer GPUs than ranks (NCCL refuses two ranks of one
// communicator on one device).
//
//===----------------------------------------------------------------------===//

#include "runtime/collectives/nccl/NcclCollectives.h"

#include "runtime/backends/cuda/CudaRuntime.h"

#include "CudaTestUtil.h"

#include "gtest/gtest.h"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

using namespace tessera::runtime;
using namespace tessera::runtime::nccl;
using tessera::runtime::test::maxRelativeError;

namespace {

std::string errText(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : std::string();
}

/// Fails (and returns from) the test with the error's message.
#define ASSERT_OK(E)                                                           \
  do {                                                                         \
    std::string msg_ = errText(E);                                             \
    ASSERT_TRUE(msg_.empty()) << msg_;                                         \
  } while (0)

//===----------------------------------------------------------------------===//
// Host tests
//===----------------------------------------------------------------------===//

WatchdogOp activeOp(uint64_t seq, const char *name, double start) {
  WatchdogOp op;
  op.active = true;
  op.seq = seq;
  op.name = name;
  op.startSeconds = start;
  return op;
}

TEST(NcclWatchdogDecide, HealthyWhileInProgressOrIdle) {
  WatchdogOp idle;
  EXPECT_EQ(watchdogDecide(100, 30, idle, {}).kind, WatchdogVerdict::Healthy);
  int results[] = {ncclSuccess, ncclInProgress, ncclSuccess};
  EXPECT_EQ(watchdogDecide(100, 30, idle, results).kind,
            WatchdogVerdict::Healthy);
  // An op that has run exactly the limit is not yet late.
  EXPECT_EQ(watchdogDecide(130, 30, activeOp(1, "x", 100), results).kind,
            WatchdogVerdict::Healthy);
  // An inactive op never times out, however old.
  WatchdogOp ended = activeOp(1, "x", 0);
  ended.active = false;
  EXPECT_EQ(watchdogDecide(1e6, 30, ended, results).kind,
            WatchdogVerdict::Healthy);
}

TEST(NcclWatchdogDecide, Timeout) {
  WatchdogVerdict v = watchdogDecide(131.5, 30, activeOp(7, "ag", 100), {});
  EXPECT_EQ(v.kind, WatchdogVerdict::Timeout);
  EXPECT_DOUBLE_EQ(v.elapsed, 31.5);
  // timeout <= 0 disables the check.
  EXPECT_EQ(watchdogDecide(1e6, 0, activeOp(7, "ag", 0), {}).kind,
            WatchdogVerdict::Healthy);
  EXPECT_EQ(watchdogDecide(1e6, -1, activeOp(7, "ag", 0), {}).kind,
            WatchdogVerdict::Healthy);
}

TEST(NcclWatchdogDecide, AsyncErrorWinsAndNamesTheFirst) {
  int results[] = {ncclSuccess, ncclInProgress, ncclRemoteError,
                   ncclSystemError};
  WatchdogVerdict v = watchdogDecide(1000, 30, activeOp(3, "rs", 0), results);
  EXPECT_EQ(v.kind, WatchdogVerdict::AsyncError);
  EXPECT_EQ(v.commIndex, 2);
  EXPECT_EQ(v.ncclCode, ncclRemoteError);
}

TEST(NcclWatchdogDecide, Messages) {
  WatchdogOp op = activeOp(42, "all_reduce grad.w1", 0);
  WatchdogVerdict t;
  t.kind = WatchdogVerdict::Timeout;
  t.elapsed = 31.24;
  std::string m = watchdogMessage(3, t, op, 30, 2);
  EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
  EXPECT_NE(m.find("#42"), std::string::npos) << m;
  EXPECT_NE(m.find("'all_reduce grad.w1'"), std::string::npos) << m;
  EXPECT_NE(m.find("31.2 s"), std::string::npos) << m;
  EXPECT_NE(m.find("limit 30 s"), std::string::npos) << m;
  EXPECT_NE(m.find("aborted 2 communicators"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  WatchdogVerdict a;
  a.kind = WatchdogVerdict::AsyncError;
  a.commIndex = 0;
  a.ncclCode = ncclRemoteError;
  WatchdogOp idle;
  m = watchdogMessage(0, a, idle, 30, 1, "tp");
  EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  EXPECT_NE(m.find("'tp'"), std::string::npos) << m;
  EXPECT_NE(m.find("no collective in flight"), std::string::npos) << m;
  EXPECT_NE(m.find("aborted 1 communicator"), std::string::npos) << m;
}

/// The watchdog thread itself, with no communicator: a timed-out operation
/// fires the callback once; an operation ended in time does not.
TEST(NcclWatchdogThread, FiresOnTimeoutOnly) {
  std::atomic<int> calls{0};
  std::string message;
  std::mutex mu;
  {
    NcclWatchdog dog(
        0.3,
        [&](const std::string &m) {
          std::lock_guard<std::mutex> lock(mu);
          message = m;
          ++calls;
        },
        std::chrono::milliseconds(20));
    dog.begin(5, "fast");
    dog.end();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(calls.load(), 0);
    EXPECT_FALSE(dog.fired());
    dog.begin(6, "stuck all_gather");
    for (int i = 0; i < 300 && !dog.fired(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(dog.fired());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(calls.load(), 1);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(message.find("#6 'stuck all_gather' timed out"), std::string::npos)
      << message;
}

TEST(NcclScratch, Sizes) {
  // all-gather: dims before `dim` all 1 (or one rank): none.
  EXPECT_EQ(allGatherScratchBytes(DType::F32, {4, 6}, 0, 4), 0);
  EXPECT_EQ(allGatherScratchBytes(DType::F32, {1, 1, 6}, 2, 4), 0);
  EXPECT_EQ(allGatherScratchBytes(DType::F32, {4, 6}, 1, 1), 0);
  EXPECT_EQ(allGatherScratchBytes(DType::F32, {4, 6}, 1, 4), 4 * 6 * 4 * 4);
  EXPECT_EQ(allGatherScratchBytes(DType::BF16, {2, 3, 5}, 2, 2),
            2 * 3 * 5 * 2 * 2);
  EXPECT_EQ(allGatherScratchBytes(DType::F32, {4, 6}, 2, 4), -1);
  EXPECT_EQ(allGatherScratchBytes(DType::F32, {4, 6}, -1, 4), -1);
  EXPECT_EQ(allGatherScratchBytes(DType::F32, {4, 6}, 0, 0), -1);
  // reduce-scatter: the input's bytes when transposed.
  EXPECT_EQ(reduceScatterScratchBytes(DType::F32, {8, 6}, 0, 4), 0);
  EXPECT_EQ(reduceScatterScratchBytes(DType::F32, {6, 8}, 1, 4), 6 * 8 * 4);
  EXPECT_EQ(reduceScatterScratchBytes(DType::F16, {1, 8}, 1, 4), 0);
  EXPECT_EQ(reduceScatterScratchBytes(DType::F32, {6, 7}, 1, 4), -1);
  // all-to-all: send staging (aligned to 256) + receive staging.
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {8, 6}, 0, 0, 2), 0);
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {8, 6}, 0, 1, 2), 8 * 6 * 4);
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {6, 8}, 1, 0, 2), 256);
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {6, 8}, 1, 1, 2), 256 + 6 * 8 * 4);
  // The chunk's leading dim decides the receive side: [2, 6] split on 0
  // over 2 ranks gives chunks [1, 6], so concat on 1 needs no staging.
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {2, 6}, 0, 1, 2), 0);
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {6, 8}, 1, 1, 1), 0);
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {6, 7}, 1, 0, 2), -1);
  EXPECT_EQ(allToAllScratchBytes(DType::F32, {6, 8}, 1, 2, 2), -1);
}

/// Argument errors come back before any NCCL or CUDA call: a detached
/// communicator (no NCCL handle) reports bad arguments as such, and good
/// ones as "not connected". The tensors are host tensors: nothing reads
/// their data.
TEST(NcclValidation, ErrorsBeforeNccl) {
  std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::detached(0, 2);
  EXPECT_FALSE(comm->connected());
  EXPECT_FALSE(comm->aborted());
  EXPECT_NE(errText(comm->checkAsync()).find("not connected"),
            std::string::npos);
  cudaStream_t s = nullptr;
  auto expectErr = [](llvm::Error e, const char *what) {
    std::string m = errText(std::move(e));
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };

  Tensor i1 = Tensor::empty(DType::I1, {4});
  expectErr(allReduce(i1, ReduceOp::Sum, *comm, s), "i1 tensors");
  Tensor f = Tensor::empty(DType::F32, {4, 6});
  expectErr(allReduce(f, ReduceOp::Sum, *comm, s), "not connected");
  expectErr(allReduceF64(nullptr, 3, ReduceOp::Sum, *comm, s), "bad f64");

  Tensor gOut = Tensor::empty(DType::F32, {4, 12});
  Tensor gBad = Tensor::empty(DType::F32, {8, 12});
  Tensor gType = Tensor::empty(DType::BF16, {4, 12});
  expectErr(allGather(f, 1, *comm, gBad, nullptr, 0, s), "bad shapes");
  expectErr(allGather(f, 1, *comm, gType, nullptr, 0, s), "bad shapes");
  expectErr(allGather(f, 2, *comm, gOut, nullptr, 0, s), "bad shapes");
  expectErr(allGather(f, 1, *comm, gOut, nullptr, 0, s), "scratch");
  Tensor scratch = Tensor::empty(DType::I1, {1024});
  expectErr(allGather(f, 1, *comm, gOut, scratch.raw(), 100, s), "needs 192");
  expectErr(allGather(f, 1, *comm, gOut, scratch.raw(), scratch.numel(), s),
            "not connected");
  expectErr(allGather(f, 1, *comm, gOut, static_cast<char *>(scratch.raw()) + 2,
                      1000, s),
            "not aligned");
  Tensor big = Tensor::empty(DType::F32, {8, 6});
  Tensor aliased = big.reshape({4, 12});
  Tensor half = Tensor::view(big.raw(), DType::F32, {2, 6});
  Tensor whole = Tensor::view(big.raw(), DType::F32, {4, 6});
  expectErr(allGather(half, 0, *comm, whole, nullptr, 0, s), "overlaps");

  Tensor rsOut = Tensor::empty(DType::F32, {4, 3});
  expectErr(
      reduceScatter(f, 1, *comm, rsOut, scratch.raw(), scratch.numel(), s),
      "not connected");
  Tensor odd = Tensor::empty(DType::F32, {4, 5});
  expectErr(reduceScatter(odd, 1, *comm, rsOut, nullptr, 0, s), "bad shapes");
  Tensor i1b = Tensor::empty(DType::I1, {4, 6});
  Tensor i1o = Tensor::empty(DType::I1, {4, 3});
  expectErr(reduceScatter(i1b, 1, *comm, i1o, nullptr, 0, s), "i1 tensors");
  expectErr(reduceScatter(f, 1, *comm, rsOut, nullptr, 0, s), "scratch");

  Tensor a2aOut = Tensor::empty(DType::F32, {8, 3});
  expectErr(allToAll(f, 1, 0, *comm, a2aOut, scratch.raw(), scratch.numel(), s),
            "not connected");
  expectErr(allToAll(f, 1, 1, *comm, a2aOut, nullptr, 0, s), "bad shapes");
  expectErr(allToAll(odd, 1, 0, *comm, a2aOut, nullptr, 0, s), "bad shapes");
  expectErr(allToAll(f, 1, 0, *comm, a2aOut, nullptr, 0, s), "scratch");
  (void)aliased;

  expectErr(send(f, 0, *comm, s), "bad destination");
  expectErr(send(f, 2, *comm, s), "bad destination");
  expectErr(send(f, 1, *comm, s), "not connected");
  expectErr(recv(f, -1, *comm, s), "bad source");
  expectErr(recv(f, 1, *comm, s), "not connected");

  // The error names the rank (-1 outside MPI, else the world rank).
  std::string m = errText(allReduce(i1, ReduceOp::Sum, *comm, s));
  EXPECT_NE(m.find("all_reduce on rank "), std::string::npos) << m;

  comm->abort();
  EXPECT_TRUE(comm->aborted());
  expectErr(allReduce(f, ReduceOp::Sum, *comm, s), "was aborted");
}

//===----------------------------------------------------------------------===//
// Device tests
//===----------------------------------------------------------------------===//

/// Random host tensor of any dtype, deterministic per seed.
Tensor randomOf(DType dtype, std::vector<int64_t> shape, unsigned seed) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dtype) {
    case DType::F32:
      t.data<float>()[i] = dist(gen);
      break;
    case DType::BF16:
      t.data<BFloat16>()[i] = toBFloat16(dist(gen));
      break;
    case DType::F16:
      t.data<Float16>()[i] = toFloat16(dist(gen));
      break;
    case DType::I64:
      t.data<int64_t>()[i] = static_cast<int64_t>(gen() % 2001) - 1000;
      break;
    case DType::I1:
      t.data<uint8_t>()[i] = gen() & 1;
      break;
    }
  }
  return t;
}

bool sameBytes(const Tensor &a, const Tensor &b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

/// Skips, on every rank alike, unless each rank has a usable GPU and (for
/// `needRanks` > 1) the world has that many ranks and every node at least
/// as many GPUs as ranks on it. Sets this rank's device.
class NcclDeviceTest : public ::testing::Test {
protected:
  void requireDevices(int needRanks) {
    mpi::Communicator world = mpi::Communicator::world();
    std::string why;
    int count = 0;
    if (llvm::Error e = cuda::deviceAvailable())
      why = llvm::toString(std::move(e));
    else if (cudaGetDeviceCount(&count) != cudaSuccess)
      why = "cudaGetDeviceCount failed";
    MPI_Comm local;
    MPI_Comm_split_type(world.handle(), MPI_COMM_TYPE_SHARED, world.rank(),
                        MPI_INFO_NULL, &local);
    int localRank = 0, localSize = 1;
    MPI_Comm_rank(local, &localRank);
    MPI_Comm_size(local, &localSize);
    MPI_Comm_free(&local);
    if (why.empty() && count < 1)
      why = "no CUDA device";
    if (why.empty() && needRanks > 1 && count < localSize)
      why = std::to_string(localSize) + " ranks on a node with " +
            std::to_string(count) + " GPUs";
    if (why.empty() && world.size() < needRanks)
      why = "needs " + std::to_string(needRanks) + " MPI ranks";
    int ok = why.empty() ? 1 : 0, allOk = 0;
    MPI_Allreduce(&ok, &allOk, 1, MPI_INT, MPI_MIN, world.handle());
    if (!allOk) {
      skip = true;
      reason = why.empty() ? "another rank cannot run it" : why;
      return;
    }
    device = localRank % count;
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    if (stream)
      cudaStreamDestroy(stream);
  }

  Tensor dev(const Tensor &host) {
    llvm::Expected<Tensor> t = cuda::toDevice(host);
    if (!t) {
      ADD_FAILURE() << llvm::toString(t.takeError());
      return Tensor();
    }
    return *t;
  }
  Tensor devEmpty(DType dtype, std::vector<int64_t> shape) {
    llvm::Expected<Tensor> t = cuda::emptyDevice(dtype, std::move(shape));
    if (!t) {
      ADD_FAILURE() << llvm::toString(t.takeError());
      return Tensor();
    }
    return *t;
  }
  Tensor host(const Tensor &device) {
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    llvm::Expected<Tensor> t = cuda::toHost(device);
    if (!t) {
      ADD_FAILURE() << llvm::toString(t.takeError());
      return Tensor();
    }
    return *t;
  }
  /// Device scratch of at least `bytes` (1 when 0).
  Tensor scratchFor(int64_t bytes) {
    EXPECT_GE(bytes, 0);
    return devEmpty(DType::I1, {std::max<int64_t>(bytes, 1)});
  }
  std::unique_ptr<NcclCommunicator> make(const mpi::Communicator &c,
                                         double timeout = 120) {
    NcclCommunicator::Options o;
    o.device = device;
    o.pollTimeoutSeconds = timeout;
    o.name = "test";
    llvm::Expected<std::unique_ptr<NcclCommunicator>> comm =
        NcclCommunicator::create(c, o);
    if (!comm) {
      ADD_FAILURE() << llvm::toString(comm.takeError());
      return nullptr;
    }
    return std::move(*comm);
  }

  bool skip = false;
  std::string reason;
  int device = 0;
  cudaStream_t stream = nullptr;
};

#define REQUIRE_DEVICES(N)                                                     \
  do {                                                                         \
    requireDevices(N);                                                         \
    if (skip)                                                                  \
      GTEST_SKIP() << reason;                                                  \
  } while (0)

/// The NCCL result must match the MPI one: bitwise for moves and i64;
/// within rounding for floating-point reductions over > 2 ranks.
void expectMatches(const Tensor &got, const Tensor &want, bool reduction,
                   const std::string &what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (!reduction || want.dtype() == DType::I64 || want.dtype() == DType::I1) {
    EXPECT_TRUE(sameBytes(got, want)) << what;
    return;
  }
  double tol = want.dtype() == DType::F32 ? 1e-5 : 1e-2;
  EXPECT_LE(maxRelativeError(got, want), tol) << what;
}

TEST_F(NcclDeviceTest, SingleRankIdentities) {
  REQUIRE_DEVICES(1);
  mpi::Communicator self(MPI_COMM_SELF);
  std::unique_ptr<NcclCommunicator> comm = make(self);
  ASSERT_TRUE(comm);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_TRUE(comm->connected());
  EXPECT_FALSE(errText(comm->checkAsync()).size()) << "healthy";

  Tensor x = randomOf(DType::F32, {3, 4, 2}, 11);
  Tensor d = dev(x);
  ASSERT_OK(allReduce(d, ReduceOp::Sum, *comm, stream));
  EXPECT_TRUE(sameBytes(host(d), x));
  for (int64_t dim = 0; dim < 3; ++dim) {
    Tensor out = devEmpty(DType::F32, {3, 4, 2});
    ASSERT_OK(allGather(d, dim, *comm, out, nullptr, 0, stream));
    EXPECT_TRUE(sameBytes(host(out), x)) << "all_gather dim " << dim;
    Tensor rs = devEmpty(DType::F32, {3, 4, 2});
    ASSERT_OK(reduceScatter(d, dim, *comm, rs, nullptr, 0, stream));
    EXPECT_TRUE(sameBytes(host(rs), x)) << "reduce_scatter dim " << dim;
    Tensor a2a = devEmpty(DType::F32, {3, 4, 2});
    ASSERT_OK(allToAll(d, dim, 2 - dim, *comm, a2a, nullptr, 0, stream));
    EXPECT_TRUE(sameBytes(host(a2a), x)) << "all_to_all dim " << dim;
  }
  // The raw NCCL path on one rank (withHandle): all-reduce out of place.
  Tensor y = devEmpty(DType::F32, {3, 4, 2});
  ASSERT_OK(comm->withHandle("ncclAllReduce", [&](ncclComm_t h) {
    return ncclAllReduce(d.raw(), y.raw(), d.numel(), ncclFloat32, ncclSum, h,
                         stream);
  }));
  EXPECT_TRUE(sameBytes(host(y), x));

  // Split into itself; then abort: every later call fails.
  NcclCommunicator::Options o;
  o.name = "child";
  llvm::Expected<std::unique_ptr<NcclCommunicator>> child =
      NcclCommunicator::split(*comm, 0, 0, o);
  ASSERT_TRUE(bool(child)) << llvm::toString(child.takeError());
  ASSERT_TRUE(*child);
  EXPECT_EQ((*child)->size(), 1);
  llvm::Expected<std::unique_ptr<NcclCommunicator>> none =
      NcclCommunicator::split(*comm, -1, 0, o);
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_FALSE(*none);
  comm->abort();
  EXPECT_TRUE(comm->aborted());
  EXPECT_NE(
      errText(allReduce(d, ReduceOp::Sum, *comm, stream)).find("was aborted"),
      std::string::npos);
}

TEST_F(NcclDeviceTest, MatchesMpi) {
  REQUIRE_DEVICES(2);
  mpi::Communicator world = mpi::Communicator::world();
  std::unique_ptr<NcclCommunicator> comm = make(world);
  ASSERT_TRUE(comm);
  int n = comm->size(), r = comm->rank();
  ASSERT_EQ(n, world.size());
  ASSERT_EQ(r, world.rank());
  unsigned seed = 1000 + 17 * r;

  // all-reduce, every reducible dtype and op, with traffic.
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I64})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      Tensor x = randomOf(dt, {5, 7}, seed++);
      Tensor want = x.clone();
      TrafficCounter tm, tn;
      ASSERT_OK(mpi::allReduce(want, op, world, &tm));
      Tensor d = dev(x);
      ASSERT_OK(allReduce(d, op, *comm, stream, &tn));
      expectMatches(host(d), want, true,
                    std::string("all_reduce ") + dtypeName(dt));
      EXPECT_EQ(tn.totalBytes(), tm.totalBytes());
    }
  {
    std::vector<double> v = {1.5 * (r + 1), -2.0 * r, 3.25};
    double *dv = nullptr;
    ASSERT_EQ(cudaMalloc(&dv, v.size() * sizeof(double)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dv, v.data(), v.size() * sizeof(double),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_OK(allReduceF64(dv, 3, ReduceOp::Sum, *comm, stream));
    ASSERT_OK(mpi::allReduceF64(v.data(), 3, ReduceOp::Sum, world));
    std::vector<double> got(3);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(
        cudaMemcpy(got.data(), dv, 3 * sizeof(double), cudaMemcpyDeviceToHost),
        cudaSuccess);
    cudaFree(dv);
    for (int i = 0; i < 3; ++i)
      EXPECT_DOUBLE_EQ(got[i], v[i]);
  }

  // all-gather along every dim, moves of several element sizes.
  for (DType dt : {DType::F32, DType::BF16, DType::I64, DType::I1})
    for (int64_t dim = 0; dim < 3; ++dim) {
      std::vector<int64_t> shape = {3, 2, 5};
      Tensor x = randomOf(dt, shape, seed++);
      shape[dim] *= n;
      Tensor want = Tensor::empty(dt, shape);
      TrafficCounter tm, tn;
      ASSERT_OK(mpi::allGather(x, dim, world, want, &tm));
      Tensor out = devEmpty(dt, shape);
      Tensor scratch = scratchFor(allGatherScratchBytes(dt, x.shape(), dim, n));
      Tensor dx = dev(x);
      ASSERT_OK(allGather(dx, dim, *comm, out, scratch.raw(), scratch.numel(),
                          stream, &tn));
      expectMatches(host(out), want, false,
                    "all_gather dim " + std::to_string(dim));
      EXPECT_EQ(tn.totalBytes(), tm.totalBytes());
    }

  // reduce-scatter along every dim.
  for (DType dt : {DType::F32, DType::BF16, DType::I64})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
      for (int64_t dim = 0; dim < 3; ++dim) {
        std::vector<int64_t> shape = {2, 3, 2};
        shape[dim] *= n;
        Tensor x = randomOf(dt, shape, seed++);
        std::vector<int64_t> oshape = shape;
        oshape[dim] /= n;
        Tensor want = Tensor::empty(dt, oshape);
        TrafficCounter tm, tn;
        ASSERT_OK(mpi::reduceScatter(x, dim, world, want, &tm, op));
        Tensor out = devEmpty(dt, oshape);
        Tensor scratch =
            scratchFor(reduceScatterScratchBytes(dt, shape, dim, n));
        Tensor dx = dev(x);
        ASSERT_OK(reduceScatter(dx, dim, *comm, out, scratch.raw(),
                                scratch.numel(), stream, &tn, op));
        expectMatches(host(out), want, true,
                      "reduce_scatter dim " + std::to_string(dim));
        EXPECT_EQ(tn.totalBytes(), tm.totalBytes());
      }

  // all-to-all over every (split, concat) pair.
  for (DType dt : {DType::F32, DType::F16})
    for (int64_t sd = 0; sd < 3; ++sd)
      for (int64_t cd = 0; cd < 3; ++cd) {
        std::vector<int64_t> shape = {2, 3, 2};
        shape[sd] *= n;
        Tensor x = randomOf(dt, shape, seed++);
        std::vector<int64_t> oshape = shape;
        oshape[sd] /= n;
        oshape[cd] *= n;
        Tensor want = Tensor::empty(dt, oshape);
        TrafficCounter tm, tn;
        ASSERT_OK(mpi::allToAll(x, sd, cd, world, want, &tm));
        Tensor out = devEmpty(dt, oshape);
        Tensor scratch = scratchFor(allToAllScratchBytes(dt, shape, sd, cd, n));
        Tensor dx = dev(x);
        ASSERT_OK(allToAll(dx, sd, cd, *comm, out, scratch.raw(),
                           scratch.numel(), stream, &tn));
        expectMatches(host(out), want, false,
                      "all_to_all " + std::to_string(sd) + "->" +
                          std::to_string(cd));
        EXPECT_EQ(tn.totalBytes(), tm.totalBytes());
      }
  EXPECT_FALSE(errText(comm->checkAsync()).size());
}

TEST_F(NcclDeviceTest, SendRecvPairs) {
  REQUIRE_DEVICES(2);
  mpi::Communicator world = mpi::Communicator::world();
  std::unique_ptr<NcclCommunicator> comm = make(world);
  ASSERT_TRUE(comm);
  int n = comm->size(), r = comm->rank();
  // Pairs (0,1), (2,3), ...: the even rank sends first, the odd receives
  // first (one stream each: the reverse order would deadlock on the GPU).
  int peer = r ^ 1;
  if (peer >= n)
    return;
  Tensor mine = randomOf(DType::BF16, {4, 9}, 77 + r);
  Tensor theirs = randomOf(DType::BF16, {4, 9}, 77 + peer);
  Tensor d = dev(mine);
  Tensor got = devEmpty(DType::BF16, {4, 9});
  TrafficCounter tc;
  if (r % 2 == 0) {
    ASSERT_OK(send(d, peer, *comm, stream, &tc));
    ASSERT_OK(recv(got, peer, *comm, stream));
  } else {
    ASSERT_OK(recv(got, peer, *comm, stream));
    ASSERT_OK(send(d, peer, *comm, stream, &tc));
  }
  EXPECT_TRUE(sameBytes(host(got), theirs));
  EXPECT_EQ(tc.totalBytes(mpi::CollectiveKind::Send), (double)mine.bytes());
}

TEST_F(NcclDeviceTest, SplitReversedOrder) {
  REQUIRE_DEVICES(2);
  mpi::Communicator world = mpi::Communicator::world();
  std::unique_ptr<NcclCommunicator> parent = make(world);
  ASSERT_TRUE(parent);
  int n = parent->size(), r = parent->rank();
  NcclCommunicator::Options o;
  o.name = "reversed";
  llvm::Expected<std::unique_ptr<NcclCommunicator>> child =
      NcclCommunicator::split(*parent, /*color=*/0, /*key=*/n - 1 - r, o);
  ASSERT_TRUE(bool(child)) << llvm::toString(child.takeError());
  ASSERT_TRUE(*child);
  EXPECT_EQ((*child)->size(), n);
  EXPECT_EQ((*child)->rank(), n - 1 - r);
  // Gathering the world ranks along dim 0 lists them in the child's order.
  Tensor x = Tensor::fromVector<int64_t>({1}, {int64_t(r)});
  Tensor out = devEmpty(DType::I64, {n});
  Tensor dx = dev(x);
  ASSERT_OK(allGather(dx, 0, **child, out, nullptr, 0, stream));
  Tensor h = host(out);
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(h.data<int64_t>()[i], n - 1 - i);
}

/// A receive whose sender never sends: the watchdog times it out, aborts
/// the communicator (which releases the stuck kernel) and reports.
TEST_F(NcclDeviceTest, WatchdogAbortsAStuckRecv) {
  REQUIRE_DEVICES(2);
  mpi::Communicator world = mpi::Communicator::world();
  std::unique_ptr<NcclCommunicator> comm = make(world, /*timeout=*/10);
  ASSERT_TRUE(comm);
  if (comm->rank() == 1) {
    std::atomic<bool> reported{false};
    std::string message;
    NcclWatchdog dog(
        1.0,
        [&](const std::string &m) {
          message = m;
          reported = true;
        },
        std::chrono::milliseconds(50));
    dog.watch(*comm);
    Tensor got = devEmpty(DType::F32, {16});
    dog.begin(9, "recv stuck");
    ASSERT_OK(recv(got, 0, *comm, stream));
    for (int i = 0; i < 200 && !reported; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(reported.load());
    EXPECT_TRUE(comm->aborted());
    EXPECT_NE(message.find("#9 'recv stuck'"), std::string::npos) << message;
    // The aborted kernel lets the stream drain (with or without an error).
    (void)cudaStreamSynchronize(stream);
    (void)cudaGetLastError();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Rank 0's destructor finalizes a communicator whose peer is gone: it may
  // time out (10 s) and abort instead, with a warning.
}

} // namespace

int main(int argc, char **argv) {
  if (llvm::Error e = mpi::initialize(&argc, &argv)) {
    fprintf(stderr, "%s\n", llvm::toString(std::move(e)).c_str());
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  int rank = mpi::Communicator::world().rank();
  if (rank != 0) {
    auto &listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0;
  if (rank != 0 && failed)
    fprintf(stderr, "rank %d: NCCL tests failed\n", rank);
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  mpi::finalize();
  return anyFailed;
}

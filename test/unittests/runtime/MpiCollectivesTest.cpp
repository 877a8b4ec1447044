//===- MpiCollectivesTest.cpp - MPI collectives (run with mpirun -np 4) ---===//
//
// Every rank runs the same tests in the same order. A 2x2 grid {dp, tp}
// exercises every collective on each axis (and both axes together); the
// 4-rank world communicator exercises them again. Inputs are a known function
// of (comm rank, flat index), so each rank can compute the expected result.
//
//===----------------------------------------------------------------------===//

#include "runtime/collectives/mpi/MpiCollectives.h"

#include "TestUtil.h"

#include <cmath>

using namespace tessera::runtime;
using namespace tessera::runtime::mpi;
using namespace tessera::runtime::test;

namespace {

float val(int commRank, int64_t flat) { return commRank * 1000.0f + flat; }

Tensor input(int commRank, const std::vector<int64_t> &shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = val(commRank, i);
  return t;
}

std::unique_ptr<Grid> makeGrid(std::vector<std::string> names,
                               std::vector<int64_t> sizes) {
  auto g = Grid::create(Communicator::world(), names, sizes);
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}

void checkAllReduce(const Communicator &c) {
  int n = c.size();
  Tensor t = input(c.rank(), {3, 5});
  ASSERT_NO_ERR(allReduce(t, ReduceOp::Sum, c));
  for (int64_t i = 0; i < t.numel(); ++i) {
    double s = 0;
    for (int r = 0; r < n; ++r)
      s += val(r, i);
    ASSERT_EQ(t.data<float>()[i], (float)s);
  }
  Tensor m = input(c.rank(), {4});
  ASSERT_NO_ERR(allReduce(m, ReduceOp::Max, c));
  for (int64_t i = 0; i < 4; ++i)
    ASSERT_EQ(m.data<float>()[i], val(n - 1, i));
  Tensor li = Tensor::fromVector<int64_t>({2}, {c.rank() + 1, 1ll << 40});
  ASSERT_NO_ERR(allReduce(li, ReduceOp::Sum, c));
  EXPECT_EQ(li.data<int64_t>()[0], n * (n + 1) / 2);
  EXPECT_EQ(li.data<int64_t>()[1], n * (1ll << 40));
}

void checkAllGather(const Communicator &c, std::vector<int64_t> shape,
                    int64_t dim) {
  SCOPED_TRACE(testing::Message() << "all_gather dim " << dim);
  int n = c.size();
  Tensor in = input(c.rank(), shape);
  std::vector<int64_t> os = shape;
  os[dim] *= n;
  Tensor out = Tensor::empty(DType::F32, os);
  ASSERT_NO_ERR(allGather(in, dim, c, out));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, os);
    int r = (int)(idx[dim] / shape[dim]);
    idx[dim] %= shape[dim];
    ASSERT_EQ(out.data<float>()[i], val(r, ravel(idx, shape))) << i;
  }
}

void checkReduceScatter(const Communicator &c, std::vector<int64_t> shape,
                        int64_t dim) {
  SCOPED_TRACE(testing::Message() << "reduce_scatter dim " << dim);
  int n = c.size();
  Tensor in = input(c.rank(), shape);
  std::vector<int64_t> os = shape;
  os[dim] /= n;
  Tensor out = Tensor::empty(DType::F32, os);
  ASSERT_NO_ERR(reduceScatter(in, dim, c, out));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, os);
    idx[dim] += c.rank() * os[dim];
    double s = 0;
    for (int r = 0; r < n; ++r)
      s += val(r, ravel(idx, shape));
    ASSERT_EQ(out.data<float>()[i], (float)s) << i;
  }
}

void checkAllToAll(const Communicator &c, std::vector<int64_t> shape,
                   int64_t split, int64_t concat) {
  SCOPED_TRACE(testing::Message()
               << "all_to_all split " << split << " concat " << concat);
  int n = c.size();
  Tensor in = input(c.rank(), shape);
  std::vector<int64_t> chunk = shape;
  chunk[split] /= n;
  std::vector<int64_t> os = chunk;
  os[concat] *= n;
  Tensor out = Tensor::empty(DType::F32, os);
  ASSERT_NO_ERR(allToAll(in, split, concat, c, out));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, os);
    int r = (int)(idx[concat] / chunk[concat]);
    idx[concat] %= chunk[concat];
    idx[split] += c.rank() * chunk[split];
    ASSERT_EQ(out.data<float>()[i], val(r, ravel(idx, shape))) << i;
  }
}

void checkAllCollectives(const Communicator &c) {
  checkAllReduce(c);
  int n = c.size();
  for (int64_t dim : {0, 1, 2})
    checkAllGather(c, {2, 3, 2}, dim);
  for (int64_t dim : {0, 1, 2}) {
    std::vector<int64_t> s = {3, 2, 5};
    s[dim] = 2 * n;
    checkReduceScatter(c, s, dim);
  }
  for (int64_t split : {0, 1, 2})
    for (int64_t concat : {0, 1, 2}) {
      std::vector<int64_t> s = {2, 3, 2};
      s[split] = 2 * n;
      checkAllToAll(c, s, split, concat);
    }
}

} // namespace

TEST(MpiGrid, CoordinatesAndSubComms) {
  Communicator world = Communicator::world();
  ASSERT_EQ(world.size(), 4) << "run with mpirun -np 4";
  auto g = makeGrid({"dp", "tp"}, {2, 2});
  ASSERT_TRUE(g);
  int r = world.rank();
  EXPECT_EQ(g->coords(), (std::vector<int64_t>{r / 2, r % 2}));
  EXPECT_EQ(g->axisIndex("tp"), 1);
  EXPECT_EQ(g->axisIndex("pp"), -1);

  auto tp = g->subComm(std::vector<std::string>{"tp"});
  ASSERT_TRUE(bool(tp));
  EXPECT_EQ(tp->size(), 2);
  EXPECT_EQ(tp->rank(), r % 2);
  auto dp = g->subComm(std::vector<std::string>{"dp"});
  ASSERT_TRUE(bool(dp));
  EXPECT_EQ(dp->size(), 2);
  EXPECT_EQ(dp->rank(), r / 2);
  auto both = g->subComm(std::vector<std::string>{"dp", "tp"});
  ASSERT_TRUE(bool(both));
  EXPECT_EQ(both->rank(), r);
  auto swapped = g->subComm(std::vector<std::string>{"tp", "dp"});
  ASSERT_TRUE(bool(swapped));
  EXPECT_EQ(swapped->rank(), (r % 2) * 2 + r / 2);
  auto none = g->subComm(llvm::ArrayRef<int64_t>{});
  ASSERT_TRUE(bool(none));
  EXPECT_EQ(none->size(), 1);
  // Cached: the same MPI_Comm comes back.
  auto tp2 = g->subComm(std::vector<std::string>{"tp"});
  ASSERT_TRUE(bool(tp2));
  EXPECT_EQ(tp2->handle(), tp->handle());

  // Same-dp ranks share a tp communicator: all-reduce of the world rank.
  Tensor t = Tensor::fromVector<int64_t>({1}, {r});
  ASSERT_NO_ERR(allReduce(t, ReduceOp::Sum, *tp));
  EXPECT_EQ(t.data<int64_t>()[0], (r / 2) * 4 + 1);

  auto bad = g->subComm(std::vector<std::string>{"pp"});
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("pp"), std::string::npos);
  auto badGrid = Grid::create(world, {"x"}, {3});
  ASSERT_FALSE(bool(badGrid));
  EXPECT_NE(llvm::toString(badGrid.takeError()).find("4 ranks"),
            std::string::npos);
  auto dup = Grid::create(world, {"x", "x"}, {2, 2});
  ASSERT_FALSE(bool(dup));
  llvm::consumeError(dup.takeError());
}

// Ranks laid out tp slowest (rank order {tp, dp}): world rank r sits at
// dp = r % 2, tp = r / 2; sub-communicators still order their ranks by the
// coordinates of the axes given.
TEST(MpiGrid, RankOrder) {
  Communicator world = Communicator::world();
  ASSERT_EQ(world.size(), 4);
  int r = world.rank();
  auto made = Grid::create(world, {"dp", "tp"}, {2, 2}, {1, 0});
  ASSERT_TRUE(bool(made)) << llvm::toString(made.takeError());
  std::unique_ptr<Grid> g = std::move(*made);
  EXPECT_EQ(g->rankOrder(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(g->coords(), (std::vector<int64_t>{r % 2, r / 2}));
  for (int64_t q = 0; q < 4; ++q) {
    EXPECT_EQ(g->coordsOf(q), (std::vector<int64_t>{q % 2, q / 2}));
    EXPECT_EQ(g->rankOf(g->coordsOf(q)), q);
  }
  auto tp = g->subComm(std::vector<std::string>{"tp"});
  ASSERT_TRUE(bool(tp));
  EXPECT_EQ(tp->size(), 2);
  EXPECT_EQ(tp->rank(), r / 2);
  // The tp group of world rank r is {r % 2, r % 2 + 2}.
  Tensor t = Tensor::fromVector<int64_t>({1}, {r});
  ASSERT_NO_ERR(allReduce(t, ReduceOp::Sum, *tp));
  EXPECT_EQ(t.data<int64_t>()[0], 2 * (r % 2) + 2);
  auto dp = g->subComm(std::vector<std::string>{"dp"});
  ASSERT_TRUE(bool(dp));
  EXPECT_EQ(dp->rank(), r % 2);
  auto both = g->subComm(std::vector<std::string>{"dp", "tp"});
  ASSERT_TRUE(bool(both));
  EXPECT_EQ(both->rank(), (r % 2) * 2 + r / 2);
  auto inOrder = g->subComm(std::vector<std::string>{"tp", "dp"});
  ASSERT_TRUE(bool(inOrder));
  EXPECT_EQ(inOrder->rank(), r); // all axes in rank order: the parent's

  for (std::vector<int64_t> bad :
       {std::vector<int64_t>{0, 0}, std::vector<int64_t>{0},
        std::vector<int64_t>{0, 2}, std::vector<int64_t>{-1, 0}}) {
    auto e = Grid::create(world, {"dp", "tp"}, {2, 2}, bad);
    ASSERT_FALSE(bool(e));
    EXPECT_NE(llvm::toString(e.takeError()).find("rank order"),
              std::string::npos);
  }
}

TEST(MpiCollectives, Grid2x2EachAxis) {
  auto g = makeGrid({"dp", "tp"}, {2, 2});
  ASSERT_TRUE(g);
  for (const char *axis : {"dp", "tp"}) {
    SCOPED_TRACE(axis);
    auto c = g->subComm(std::vector<std::string>{axis});
    ASSERT_TRUE(bool(c));
    checkAllCollectives(*c);
  }
  auto c = g->subComm(std::vector<std::string>{"tp", "dp"});
  ASSERT_TRUE(bool(c));
  SCOPED_TRACE("tp,dp");
  checkAllCollectives(*c);
}

TEST(MpiCollectives, World4) { checkAllCollectives(Communicator::world()); }

TEST(MpiCollectives, SendRecvRing) {
  Communicator w = Communicator::world();
  int r = w.rank(), n = w.size();
  Tensor out = input(r, {3, 4});
  Tensor in = Tensor::empty(DType::F32, {3, 4});
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  TrafficCounter tc;
  if (r % 2 == 0) {
    ASSERT_NO_ERR(send(out, next, w, 7, &tc));
    ASSERT_NO_ERR(recv(in, prev, w, 7));
  } else {
    ASSERT_NO_ERR(recv(in, prev, w, 7));
    ASSERT_NO_ERR(send(out, next, w, 7, &tc));
  }
  expectEqualBytes(in, input(prev, {3, 4}));
  EXPECT_EQ(tc.stepBytes(CollectiveKind::Send), 48.0);

  // Size mismatch is an error on the receiver.
  Tensor small = Tensor::empty(DType::F32, {2});
  Tensor big = Tensor::empty(DType::F32, {1});
  if (r == 0) {
    ASSERT_NO_ERR(send(big, 1, w, 9));
  } else if (r == 1) {
    std::string msg = errorMessage(recv(small, 0, w, 9));
    EXPECT_NE(msg.find("recv"), std::string::npos) << msg;
  }
  ASSERT_NO_ERR(barrier(w));
}

TEST(MpiCollectives, Errors) {
  Communicator w = Communicator::world();
  // MPI error codes become llvm::Error naming the collective and the rank.
  Tensor t = Tensor::empty(DType::F32, {1});
  std::string msg = errorMessage(send(t, 99, w));
  EXPECT_NE(msg.find("send failed on rank " + std::to_string(w.rank())),
            std::string::npos)
      << msg;
  Tensor b = Tensor::empty(DType::I1, {2});
  msg = errorMessage(allReduce(b, ReduceOp::Sum, w));
  EXPECT_NE(msg.find("all_reduce"), std::string::npos) << msg;
  Tensor in = Tensor::empty(DType::F32, {3});
  Tensor out = Tensor::empty(DType::F32, {1});
  msg = errorMessage(reduceScatter(in, 0, w, out));
  EXPECT_NE(msg.find("reduce_scatter"), std::string::npos) << msg;
  msg = errorMessage(allToAll(in, 0, 0, w, out));
  EXPECT_NE(msg.find("all_to_all"), std::string::npos) << msg;
  msg = errorMessage(allGather(in, 1, w, out));
  EXPECT_NE(msg.find("all_gather"), std::string::npos) << msg;
}

TEST(MpiCollectives, TrafficCounter) {
  auto g = makeGrid({"dp", "tp"}, {2, 2});
  ASSERT_TRUE(g);
  auto tp = g->subComm(std::vector<std::string>{"tp"});
  ASSERT_TRUE(bool(tp));
  Communicator w = Communicator::world();
  TrafficCounter tc;
  Tensor t = Tensor::zeros(DType::F32, {100}); // 400 bytes
  ASSERT_NO_ERR(allReduce(t, ReduceOp::Sum, w, &tc));
  EXPECT_EQ(tc.stepBytes(CollectiveKind::AllReduce), 600.0); // 2*3/4*400
  ASSERT_NO_ERR(allReduce(t, ReduceOp::Sum, *tp, &tc));
  EXPECT_EQ(tc.stepBytes(CollectiveKind::AllReduce), 1000.0); // + 2*1/2*400
  Tensor full = Tensor::empty(DType::F32, {400});             // 1600 bytes
  ASSERT_NO_ERR(allGather(t, 0, w, full, &tc));
  EXPECT_EQ(tc.stepBytes(CollectiveKind::AllGather), 1200.0); // 3/4*1600
  ASSERT_NO_ERR(reduceScatter(full, 0, w, t, &tc));
  EXPECT_EQ(tc.stepBytes(CollectiveKind::ReduceScatter), 1200.0);
  Tensor a2a = Tensor::empty(DType::F32, {100});
  ASSERT_NO_ERR(allToAll(t, 0, 0, w, a2a, &tc));
  EXPECT_EQ(tc.stepBytes(CollectiveKind::AllToAll), 300.0); // 3/4*400
  EXPECT_EQ(tc.stepBytes(), 1000.0 + 1200 + 1200 + 300);
  tc.beginStep();
  EXPECT_EQ(tc.stepBytes(), 0.0);
  EXPECT_EQ(tc.totalBytes(), 3700.0);
  EXPECT_EQ(tc.totalBytes(CollectiveKind::AllGather), 1200.0);
  EXPECT_EQ(TrafficCounter::ringBytes(CollectiveKind::AllReduce, 400, 1), 0.0);
  EXPECT_EQ(TrafficCounter::ringBytes(CollectiveKind::Send, 400, 1), 400.0);
  EXPECT_STREQ(collectiveKindName(CollectiveKind::ReduceScatter),
               "reduce_scatter");
}

// bf16 (MPI has no bf16): MPI_UINT16_T with a user-defined op that sums in
// f32 and rounds to nearest even; bytes are counted at 2 per element.
TEST(MpiCollectives, BF16Combine) {
  std::vector<BFloat16> in = {toBFloat16(1.0f), toBFloat16(1.0f),
                              toBFloat16(-2.0f), toBFloat16(3.0f)};
  std::vector<BFloat16> io = {toBFloat16(0.00390625f), // 2^-8: a tie
                              toBFloat16(0.01171875f), // 3 * 2^-8
                              toBFloat16(0.5f), toBFloat16(-7.0f)};
  bf16Combine(in.data(), io.data(), 4, ReduceOp::Sum);
  EXPECT_EQ(toFloat(io[0]), 1.0f);       // 1 + 2^-8 ties to even: 1
  EXPECT_EQ(toFloat(io[1]), 1.0156250f); // 1 + 3 * 2^-8 rounds to 1 + 2^-6
  EXPECT_EQ(toFloat(io[2]), -1.5f);
  EXPECT_EQ(toFloat(io[3]), -4.0f);
  bf16Combine(in.data(), io.data(), 4, ReduceOp::Max);
  EXPECT_EQ(toFloat(io[2]), -1.5f);
  EXPECT_EQ(toFloat(io[3]), 3.0f);
}

// f16 (MPI has no f16 either): its own user-defined op on MPI_UINT16_T,
// summing in f32 and rounding to nearest even; overflow gives inf.
TEST(MpiCollectives, F16Combine) {
  std::vector<Float16> in = {toFloat16(1.0f), toFloat16(1.0f), toFloat16(-2.0f),
                             toFloat16(40000.0f)};
  std::vector<Float16> io = {toFloat16(0x1p-11f),     // a tie
                             toFloat16(3 * 0x1p-11f), // a tie, up
                             toFloat16(0.5f), toFloat16(40000.0f)};
  f16Combine(in.data(), io.data(), 4, ReduceOp::Sum);
  EXPECT_EQ(toFloat(io[0]), 1.0f);           // 1 + 2^-11 ties to even
  EXPECT_EQ(toFloat(io[1]), 1.0f + 0x1p-9f); // 1 + 3 * 2^-11 rounds up
  EXPECT_EQ(toFloat(io[2]), -1.5f);
  EXPECT_TRUE(std::isinf(toFloat(io[3]))); // 80000 > 65504
  f16Combine(in.data(), io.data(), 4, ReduceOp::Max);
  EXPECT_EQ(toFloat(io[2]), -1.5f);
  EXPECT_TRUE(std::isinf(toFloat(io[3])));
}

TEST(MpiCollectives, AllReduceF16) {
  Communicator w = Communicator::world();
  int n = w.size(), r = w.rank();
  // Small integers and fractions (exact in f16 and so are their partial
  // sums), plus one element whose sum is not an f16 (2048 + 1 + 1 + 1).
  const int64_t len = 1000;
  Tensor t = Tensor::empty(DType::F16, {len});
  for (int64_t i = 0; i < len - 1; ++i)
    t.data<Float16>()[i] = toFloat16(float((r + 1) * (i % 16)) * 0.125f);
  t.data<Float16>()[len - 1] = toFloat16(r == 0 ? 2048.0f : 1.0f);
  TrafficCounter tc;
  ASSERT_NO_ERR(allReduce(t, ReduceOp::Sum, w, &tc));
  float ranks = n * (n + 1) / 2.0f;
  for (int64_t i = 0; i < len - 1; ++i)
    ASSERT_EQ(toFloat(t.data<Float16>()[i]), ranks * float(i % 16) * 0.125f)
        << i;
  // f16 has 11 significant bits: between 2048 and 4096 only even values,
  // so each combine rounds (2049 ties to 2048, 2051 to 2052).
  float last = toFloat(t.data<Float16>()[len - 1]);
  if (n == 1)
    EXPECT_EQ(last, 2048.0f);
  else
    EXPECT_TRUE(last == 2048.0f || last == 2050.0f || last == 2052.0f) << last;
  // 2 bytes per element, as bf16: 2 (n-1)/n * 2000.
  EXPECT_EQ(tc.stepBytes(CollectiveKind::AllReduce),
            2.0 * (n - 1) / n * 2.0 * len);
  // Every rank holds the same bits.
  std::vector<uint16_t> mine(len), first(len);
  for (int64_t i = 0; i < len; ++i)
    mine[i] = first[i] = t.data<Float16>()[i].bits;
  MPI_Bcast(first.data(), len, MPI_UINT16_T, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, first);

  // The f16 op is not the bf16 one: 1 + 2^-9 per rank (and every partial
  // sum of up to 4) is exact in f16, while bf16 would round it to 1.
  // Overflow of the sum gives inf.
  Tensor f = Tensor::empty(DType::F16, {2});
  f.data<Float16>()[0] = toFloat16(1.0f + 0x1p-9f);
  f.data<Float16>()[1] = toFloat16(60000.0f);
  ASSERT_NO_ERR(allReduce(f, ReduceOp::Sum, w));
  EXPECT_EQ(toFloat(f.data<Float16>()[0]), n * (1.0f + 0x1p-9f));
  if (n > 1)
    EXPECT_TRUE(std::isinf(toFloat(f.data<Float16>()[1])));

  Tensor m = Tensor::empty(DType::F16, {4});
  for (int64_t i = 0; i < 4; ++i)
    m.data<Float16>()[i] = toFloat16(float(r * 10 + i));
  ASSERT_NO_ERR(allReduce(m, ReduceOp::Max, w));
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(toFloat(m.data<Float16>()[i]), float((n - 1) * 10 + i));

  // Reduce-scatter over the same op.
  Tensor in = Tensor::empty(DType::F16, {int64_t(n) * 8});
  for (int64_t i = 0; i < in.numel(); ++i)
    in.data<Float16>()[i] = toFloat16(float(i));
  Tensor out = Tensor::empty(DType::F16, {8});
  ASSERT_NO_ERR(reduceScatter(in, 0, w, out, &tc));
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(toFloat(out.data<Float16>()[i]), float(n * (r * 8 + i)));
}

TEST(MpiCollectives, AllReduceBF16) {
  Communicator w = Communicator::world();
  int n = w.size(), r = w.rank();
  // Integers <= 256 (exact in bf16, and so are their partial sums), plus one
  // element whose sum is not a bf16 (256 + 1 + 1 + 1).
  const int64_t len = 1000;
  Tensor t = Tensor::empty(DType::BF16, {len});
  for (int64_t i = 0; i < len - 1; ++i)
    t.data<BFloat16>()[i] = toBFloat16(float((r + 1) * (i % 16)));
  t.data<BFloat16>()[len - 1] = toBFloat16(r == 0 ? 256.0f : 1.0f);
  TrafficCounter tc;
  ASSERT_NO_ERR(allReduce(t, ReduceOp::Sum, w, &tc));
  float ranks = n * (n + 1) / 2.0f;
  for (int64_t i = 0; i < len - 1; ++i)
    ASSERT_EQ(toFloat(t.data<BFloat16>()[i]), ranks * float(i % 16)) << i;
  // bf16 has 8 significant bits, so between 256 and 512 only even values
  // exist: each combine rounds (257 ties to 256, 259 to 260), and the
  // result depends on MPI's combining order (256, 258 or 260), never the
  // f32 sum 259.
  float last = toFloat(t.data<BFloat16>()[len - 1]);
  EXPECT_TRUE(last == 256.0f || last == 258.0f || last == 260.0f) << last;
  // 2 bytes per element: 2 (n-1)/n * 2000.
  EXPECT_EQ(tc.stepBytes(CollectiveKind::AllReduce),
            2.0 * (n - 1) / n * 2.0 * len);
  // Every rank holds the same bits.
  std::vector<uint16_t> mine(len), first(len);
  for (int64_t i = 0; i < len; ++i)
    mine[i] = first[i] = t.data<BFloat16>()[i].bits;
  MPI_Bcast(first.data(), len, MPI_UINT16_T, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, first);

  Tensor m = Tensor::empty(DType::BF16, {4});
  for (int64_t i = 0; i < 4; ++i)
    m.data<BFloat16>()[i] = toBFloat16(float(r * 10 + i));
  ASSERT_NO_ERR(allReduce(m, ReduceOp::Max, w));
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(toFloat(m.data<BFloat16>()[i]), float((n - 1) * 10 + i));

  // Reduce-scatter over the same op.
  Tensor in = Tensor::empty(DType::BF16, {int64_t(n) * 8});
  for (int64_t i = 0; i < in.numel(); ++i)
    in.data<BFloat16>()[i] = toBFloat16(float(i));
  Tensor out = Tensor::empty(DType::BF16, {8});
  ASSERT_NO_ERR(reduceScatter(in, 0, w, out, &tc));
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(toFloat(out.data<BFloat16>()[i]), float(n * (r * 8 + i)));
  EXPECT_EQ(tc.stepBytes(CollectiveKind::ReduceScatter),
            double(n - 1) / n * 2.0 * in.numel());
}

int main(int argc, char **argv) {
  if (llvm::Error e = initialize(&argc, &argv)) {
    fprintf(stderr, "%s\n", llvm::toString(std::move(e)).c_str());
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  int rank = Communicator::world().rank();
  if (rank != 0) {
    // Only rank 0 prints progress; failures on any rank are still reported.
    auto &listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0;
  if (rank != 0 && failed)
    fprintf(stderr, "rank %d: MPI tests failed\n", rank);
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  finalize();
  return anyFailed;
}

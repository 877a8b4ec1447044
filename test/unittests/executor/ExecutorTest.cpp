//===- ExecutorTest.cpp - plan loading and training steps -----------------===//
//
// Run serially and under `mpirun -np 2|4`. Programs are written here as tsrt
// text, packed into plan.tsr artifacts (MLIR bytecode + manifest) and run
// through Plan/Executor; the results are compared with the same math done
// directly with the CPU kernels.
//
// The two-layer model (embedding -> linear -> relu -> linear -> cross
// entropy, hand-written backward pass and SGD) is generated for any (dp, tp)
// grid with Megatron-style column/row splits and every collective kind; the
// end-to-end test runs it on every grid whose size is the world size. The
// other tests use a 1-rank grid on MPI_COMM_SELF, so they run on every rank.
//
//===----------------------------------------------------------------------===//

#include "PackPlan.h"
#include "StagedHostBackend.h"

#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/Executor.h"
#include "runtime/executor/Plan.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <tuple>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
namespace json = llvm::json;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

std::string subst(std::string text,
                  const std::vector<std::pair<std::string, std::string>> &map) {
  for (const auto &[key, value] : map)
    for (size_t pos = text.find(key); pos != std::string::npos;
         pos = text.find(key, pos + value.size()))
      text.replace(pos, key.size(), value);
  return text;
}

json::Object factor(int64_t size, std::vector<int64_t> axes = {}) {
  return json::Object{{"size", size}, {"axes", json::Array(axes)}};
}

/// A manifest argument with a layout of one factor per dim.
json::Object arg(int64_t index, llvm::StringRef name, llvm::StringRef role,
                 llvm::StringRef dtype, std::vector<int64_t> shape,
                 std::vector<std::vector<int64_t>> splitAxes,
                 const std::vector<int64_t> &grid) {
  json::Array layout;
  std::vector<int64_t> local;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t> axes =
        d < splitAxes.size() ? splitAxes[d] : std::vector<int64_t>{};
    int64_t n = 1;
    for (int64_t a : axes)
      n *= grid[a];
    local.push_back(shape[d] / n);
    layout.push_back(json::Array{factor(shape[d], axes)});
  }
  return json::Object{{"index", index},
                      {"name", name},
                      {"role", role},
                      {"dtype", dtype},
                      {"shape", json::Array(shape)},
                      {"local_shape", json::Array(local)},
                      {"layout", std::move(layout)}};
}

json::Object result(int64_t index, llvm::StringRef role, llvm::StringRef name) {
  return json::Object{{"index", index}, {"role", role}, {"name", name}};
}

json::Object manifest(std::vector<int64_t> grid, int64_t batch, int64_t seq,
                      json::Array args, json::Array results,
                      json::Object optimizer = json::Object{{"name", "sgd"}}) {
  json::Array axes;
  for (size_t i = 0; i < grid.size(); ++i)
    axes.push_back(i == 0 ? "dp" : "tp");
  return json::Object{{"format", "tessera-plan"},
                      {"version", 1},
                      {"grid", json::Object{{"axes", std::move(axes)},
                                            {"shape", json::Array(grid)}}},
                      {"program", "__program__"},
                      {"function", "train_step"},
                      {"global_batch", batch},
                      {"seq_len", seq},
                      {"optimizer", std::move(optimizer)},
                      {"arguments", std::move(args)},
                      {"results", std::move(results)}};
}

/// Packs and loads a plan from memory (for `backend`; null: the CPU).
llvm::Expected<std::unique_ptr<Plan>>
loadPlan(llvm::StringRef program, const json::Object &m,
         const std::map<std::string, Tensor> &weights = {},
         Backend *backend = nullptr) {
  llvm::Expected<std::string> bytes = test::packPlan(program, m, weights);
  if (!bytes)
    return bytes.takeError();
  llvm::Expected<SafeTensorsFile> file = parseSafeTensors(*bytes, "test.tsr");
  if (!file)
    return file.takeError();
  return Plan::fromSafeTensors(std::move(*file), "test.tsr", backend);
}

/// The error message of loading, or "" if it loaded.
std::string loadError(llvm::StringRef program, const json::Object &m,
                      Backend *backend = nullptr) {
  auto plan = loadPlan(program, m, {}, backend);
  if (plan)
    return "";
  return llvm::toString(plan.takeError());
}

std::unique_ptr<mpi::Grid> makeGrid(mpi::Communicator comm,
                                    std::vector<int64_t> shape,
                                    std::vector<int64_t> rankOrder = {}) {
  std::vector<std::string> names = {"dp", "tp"};
  names.resize(shape.size());
  auto g = mpi::Grid::create(comm, names, shape, rankOrder);
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}

mpi::Communicator self() { return mpi::Communicator(MPI_COMM_SELF); }

Tensor randomTokens(std::vector<int64_t> shape, unsigned seed, int64_t vocab) {
  Tensor t = Tensor::empty(DType::I64, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = dist(gen);
  return t;
}

void expectClose(const Tensor &actual, const Tensor &expected, double rtol,
                 const std::string &what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  double num = 0, den = 0, worst = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.data<float>()[i], e = expected.data<float>()[i];
    num += (a - e) * (a - e);
    den += e * e;
    worst = std::max(worst, std::abs(a - e));
  }
  EXPECT_LE(std::sqrt(num), rtol * std::sqrt(den) + 1e-12)
      << what << ": worst abs diff " << worst;
}

//===----------------------------------------------------------------------===//
// The two-layer model
//===----------------------------------------------------------------------===//

constexpr int64_t kV = 16, kD = 8, kH = 12, kB = 4, kS = 8, kN = kB * kS;
constexpr double kLr = 0.5, kWd = 0.01;

// W2 is updated ZeRO-1 style: its gradient is reduce-scattered over dp, each
// dp rank updates its tsrt.all_slice of W2, and the shards are all-gathered.
const char *kTwoLayerTemplate = R"mlir(
module attributes {tsrt.grid_axes = ["dp", "tp"], tsrt.grid_shape = array<i64: @DP@, @TP@>} {
  func.func @train_step(%E: tensor<16x8xf32>, %W1: tensor<8x@HL@xf32>,
                        %W2: tensor<@HL@x16xf32>, %tok: tensor<@BL@x8xi64>,
                        %lab: tensor<@BL@x8xi64>, %hlr: tensor<f32>)
      -> (tensor<f32>, tensor<16x8xf32>, tensor<8x@HL@xf32>, tensor<@HL@x16xf32>) {
    %x = tsrt.kernel "gather"(%E, %tok) {attrs = {}} : (tensor<16x8xf32>, tensor<@BL@x8xi64>) -> tensor<@BL@x8x8xf32>
    %h = tsrt.kernel "reshape"(%x) {attrs = {}} : (tensor<@BL@x8x8xf32>) -> tensor<@NL@x8xf32>
    %z = tsrt.kernel "matmul"(%h, %W1) {attrs = {}} : (tensor<@NL@x8xf32>, tensor<8x@HL@xf32>) -> tensor<@NL@x@HL@xf32>
    %a = tsrt.kernel "relu"(%z) {attrs = {}} : (tensor<@NL@x@HL@xf32>) -> tensor<@NL@x@HL@xf32>
    %lp = tsrt.kernel "matmul"(%a, %W2) {attrs = {transpose_lhs = false, transpose_rhs = false}} : (tensor<@NL@x@HL@xf32>, tensor<@HL@x16xf32>) -> tensor<@NL@x16xf32>
    %lg = tsrt.all_reduce %lp {grid_axes = array<i16: 1>, reduction = "sum"} : tensor<@NL@x16xf32> -> tensor<@NL@x16xf32>
    %t1 = tsrt.all_to_all %lg {grid_axes = array<i16: 0>, split_dim = 0 : i64, concat_dim = 1 : i64} : tensor<@NL@x16xf32> -> tensor<@NLD@x@W16@xf32>
    %logits = tsrt.all_to_all %t1 {grid_axes = array<i16: 0>, split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<@NLD@x@W16@xf32> -> tensor<@NL@x16xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<@BL@x8xi64>) -> tensor<@NL@xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {}} : (tensor<@NL@x16xf32>, tensor<@NL@xi64>) -> tensor<f32>
    %cesum = tsrt.all_reduce %ce {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<f32> -> tensor<f32>
    %inv = tsrt.constant dense<3.125000e-02> : tensor<f32>
    %loss = tsrt.kernel "mul"(%cesum, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %dlogits = tsrt.kernel "cross_entropy_grad"(%logits, %l, %inv) {attrs = {}} : (tensor<@NL@x16xf32>, tensor<@NL@xi64>, tensor<f32>) -> tensor<@NL@x16xf32>
    %dW2p = tsrt.kernel "matmul"(%a, %dlogits) {attrs = {transpose_lhs = true}} : (tensor<@NL@x@HL@xf32>, tensor<@NL@x16xf32>) -> tensor<@HL@x16xf32>
    %dW2s = tsrt.reduce_scatter %dW2p {grid_axes = array<i16: 0>, dim = 0 : i64} : tensor<@HL@x16xf32> -> tensor<@HLD@x16xf32>
    %da = tsrt.kernel "matmul"(%dlogits, %W2) {attrs = {transpose_rhs = true}} : (tensor<@NL@x16xf32>, tensor<@HL@x16xf32>) -> tensor<@NL@x@HL@xf32>
    %dz = tsrt.kernel "relu_grad"(%z, %da) {attrs = {}} : (tensor<@NL@x@HL@xf32>, tensor<@NL@x@HL@xf32>) -> tensor<@NL@x@HL@xf32>
    %dW1p = tsrt.kernel "matmul"(%h, %dz) {attrs = {transpose_lhs = true}} : (tensor<@NL@x8xf32>, tensor<@NL@x@HL@xf32>) -> tensor<8x@HL@xf32>
    %dW1 = tsrt.all_reduce %dW1p {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<8x@HL@xf32> -> tensor<8x@HL@xf32>
    %dhp = tsrt.kernel "matmul"(%dz, %W1) {attrs = {transpose_rhs = true}} : (tensor<@NL@x@HL@xf32>, tensor<8x@HL@xf32>) -> tensor<@NL@x8xf32>
    %dh = tsrt.all_reduce %dhp {grid_axes = array<i16: 1>, reduction = "sum"} : tensor<@NL@x8xf32> -> tensor<@NL@x8xf32>
    %dx = tsrt.kernel "reshape"(%dh) {attrs = {}} : (tensor<@NL@x8xf32>) -> tensor<@BL@x8x8xf32>
    %dEp = tsrt.kernel "gather_grad"(%tok, %dx) {attrs = {}} : (tensor<@BL@x8xi64>, tensor<@BL@x8x8xf32>) -> tensor<16x8xf32>
    %dE = tsrt.all_reduce %dEp {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<16x8xf32> -> tensor<16x8xf32>
    %E1 = tsrt.kernel "sgd_update"(%E, %dE, %hlr) {attrs = {weight_decay = 0.00999999977 : f32}} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>) -> tensor<16x8xf32>
    %W11 = tsrt.kernel "sgd_update"(%W1, %dW1, %hlr) {attrs = {weight_decay = 0.00999999977 : f32}} : (tensor<8x@HL@xf32>, tensor<8x@HL@xf32>, tensor<f32>) -> tensor<8x@HL@xf32>
    %W2s = tsrt.all_slice %W2 {grid_axes = array<i16: 0>, dim = 0 : i64} : tensor<@HL@x16xf32> -> tensor<@HLD@x16xf32>
    %W21s = tsrt.kernel "sgd_update"(%W2s, %dW2s, %hlr) {attrs = {weight_decay = 0.00999999977 : f32}} : (tensor<@HLD@x16xf32>, tensor<@HLD@x16xf32>, tensor<f32>) -> tensor<@HLD@x16xf32>
    %W21 = tsrt.all_gather %W21s {grid_axes = array<i16: 0>, dim = 0 : i64} : tensor<@HLD@x16xf32> -> tensor<@HL@x16xf32>
    %lossm = tsrt.all_reduce %loss {grid_axes = array<i16: 0, 1>, reduction = "max"} : tensor<f32> -> tensor<f32>
    return %lossm, %E1, %W11, %W21 : tensor<f32>, tensor<16x8xf32>, tensor<8x@HL@xf32>, tensor<@HL@x16xf32>
  }
}
)mlir";

std::string twoLayerProgram(int64_t dp, int64_t tp) {
  int64_t bl = kB / dp, nl = bl * kS, hl = kH / tp;
  auto s = [](int64_t v) { return std::to_string(v); };
  return subst(kTwoLayerTemplate, {{"@DP@", s(dp)},
                                   {"@TP@", s(tp)},
                                   {"@BL@", s(bl)},
                                   {"@NLD@", s(nl / dp)},
                                   {"@NL@", s(nl)},
                                   {"@HLD@", s(hl / dp)},
                                   {"@HL@", s(hl)},
                                   {"@W16@", s(16 * dp)}});
}

json::Object twoLayerManifest(int64_t dp, int64_t tp) {
  std::vector<int64_t> g = {dp, tp};
  json::Array args;
  args.push_back(arg(0, "E", "param", "f32", {kV, kD}, {}, g));
  args.push_back(arg(1, "W1", "param", "f32", {kD, kH}, {{}, {1}}, g));
  args.push_back(arg(2, "W2", "param", "f32", {kH, kV}, {{1}, {}}, g));
  args.push_back(arg(3, "tokens", "tokens", "i64", {kB, kS}, {{0}}, g));
  args.push_back(arg(4, "labels", "labels", "i64", {kB, kS}, {{0}}, g));
  args.push_back(arg(5, "lr", "hyper", "f32", {}, {}, g));
  json::Array results;
  results.push_back(result(0, "loss", "loss"));
  results.push_back(result(1, "param", "E"));
  results.push_back(result(2, "param", "W1"));
  results.push_back(result(3, "param", "W2"));
  return manifest(
      g, kB, kS, std::move(args), std::move(results),
      json::Object{{"name", "sgd"}, {"lr", kLr}, {"weight_decay", kWd}});
}

/// The same step computed directly with the CPU kernels (global shapes).
struct TwoLayerReference {
  Tensor E, W1, W2;

  double step(const Tensor &tok, const Tensor &lab) {
    Tensor x = Tensor::empty(DType::F32, {kB, kS, kD});
    EXPECT_FALSE(static_cast<bool>(cpu::gather(E, tok, x)));
    Tensor h = x.reshape({kN, kD});
    Tensor z = Tensor::empty(DType::F32, {kN, kH});
    cpu::matmul(h, W1, false, false, z);
    Tensor a = Tensor::empty(DType::F32, {kN, kH});
    cpu::relu(z, a);
    Tensor logits = Tensor::empty(DType::F32, {kN, kV});
    cpu::matmul(a, W2, false, false, logits);
    Tensor l = lab.reshape({kN});
    Tensor ce = Tensor::empty(DType::F32, {});
    EXPECT_FALSE(static_cast<bool>(cpu::crossEntropy(logits, l, ce)));
    Tensor inv = Tensor::scalar(0.03125f);
    Tensor loss = Tensor::empty(DType::F32, {});
    cpu::mul(ce, inv, loss);
    Tensor dlogits = Tensor::empty(DType::F32, {kN, kV});
    EXPECT_FALSE(
        static_cast<bool>(cpu::crossEntropyGrad(logits, l, inv, dlogits)));
    Tensor dW2 = Tensor::empty(DType::F32, {kH, kV});
    cpu::matmul(a, dlogits, true, false, dW2);
    Tensor da = Tensor::empty(DType::F32, {kN, kH});
    cpu::matmul(dlogits, W2, false, true, da);
    Tensor dz = Tensor::empty(DType::F32, {kN, kH});
    cpu::reluGrad(z, da, dz);
    Tensor dW1 = Tensor::empty(DType::F32, {kD, kH});
    cpu::matmul(h, dz, true, false, dW1);
    Tensor dh = Tensor::empty(DType::F32, {kN, kD});
    cpu::matmul(dz, W1, false, true, dh);
    Tensor dE = Tensor::empty(DType::F32, {kV, kD});
    EXPECT_FALSE(
        static_cast<bool>(cpu::gatherGrad(tok, dh.reshape({kB, kS, kD}), dE)));
    auto update = [](Tensor &p, const Tensor &g) {
      Tensor out = Tensor::empty(DType::F32, p.shape());
      cpu::sgdUpdate(p, g, kLr, kWd, out);
      p = out;
    };
    update(E, dE);
    update(W1, dW1);
    update(W2, dW2);
    return loss.data<float>()[0];
  }
};

/// Runs 2 steps of the two-layer model on a (dp, tp) grid over `comm` and
/// checks losses, local shards and gathered weights against the reference.
/// `tpSlowest`: ranks laid out with tp slowest ("rank_order": ["tp", "dp"]).
/// `backend`: the plan's backend (null: the CPU).
void runTwoLayer(
    mpi::Communicator comm, int64_t dp, int64_t tp, bool tpSlowest = false,
    Backend *backend = nullptr,
    const std::function<std::string(std::string)> &edit = nullptr) {
  SCOPED_TRACE("grid dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp) +
               (tpSlowest ? ", rank order tp, dp" : ""));
  json::Object man = twoLayerManifest(dp, tp);
  if (tpSlowest)
    (*man.getObject("grid"))["rank_order"] = json::Array{"tp", "dp"};
  std::string program = twoLayerProgram(dp, tp);
  if (edit)
    program = edit(program);
  auto plan = loadPlan(program, man, {}, backend);
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ((*plan)->manifest().rankOrderIndices(),
            tpSlowest ? (std::vector<int64_t>{1, 0})
                      : (std::vector<int64_t>{0, 1}));
  std::unique_ptr<mpi::Grid> grid =
      makeGrid(comm, {dp, tp}, (*plan)->manifest().rankOrderIndices());
  ASSERT_TRUE(grid);
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());

  TwoLayerReference ref{(*plan)->initialValue("E")->clone(),
                        (*plan)->initialValue("W1")->clone(),
                        (*plan)->initialValue("W2")->clone()};
  for (int s = 0; s < 2; ++s) {
    Tensor tok = randomTokens({kB, kS}, 100 + s, kV);
    Tensor lab = randomTokens({kB, kS}, 200 + s, kV);
    llvm::Expected<double> loss = (*ex)->step(tok, lab);
    ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
    double expected = ref.step(tok, lab);
    EXPECT_NEAR(*loss, expected, 1e-5 * std::abs(expected)) << "step " << s;
  }
  // Collectives were counted (unless every collective is over one rank).
  if (comm.size() > 1)
    EXPECT_GT((*ex)->traffic().totalBytes(), 0.0);
  EXPECT_EQ((*ex)->stepsRun(), 2);

  const Manifest &m = (*plan)->manifest();
  std::map<std::string, Tensor *> expected = {
      {"E", &ref.E}, {"W1", &ref.W1}, {"W2", &ref.W2}};
  for (const auto &[name, value] : expected) {
    const ArgumentSpec &spec = m.arguments[m.findArgument(name, Role::Param)];
    const Tensor *local = (*ex)->localValue(name);
    ASSERT_NE(local, nullptr);
    expectClose(*local,
                sliceToLocal(*value, spec.layout, m.gridShape, grid->coords()),
                1e-5, "local " + name);
  }
  auto weights = (*ex)->gatherWeights(0);
  ASSERT_TRUE(static_cast<bool>(weights))
      << llvm::toString(weights.takeError());
  if (comm.rank() != 0) {
    EXPECT_TRUE(weights->empty());
    return;
  }
  ASSERT_EQ(weights->size(), 3u);
  for (auto &[name, tensor] : *weights)
    expectClose(tensor, *expected.at(name), 1e-5, "gathered " + name);
}

TEST(Executor, TwoLayerSerial) { runTwoLayer(self(), 1, 1); }

TEST(Executor, TwoLayerOnEveryGridOfTheWorld) {
  mpi::Communicator world = mpi::Communicator::world();
  int n = world.size();
  for (int64_t dp = 1; dp <= n; ++dp) {
    if (n % dp || kB % dp || kH % (n / dp))
      continue;
    runTwoLayer(world, dp, n / dp);
  }
}

// The same with the ranks laid out tp slowest: each rank's shards and the
// gathered weights follow its coordinates, not its world rank.
TEST(Executor, TwoLayerWithTensorAxisSlowest) {
  mpi::Communicator world = mpi::Communicator::world();
  int n = world.size();
  for (int64_t dp = 1; dp <= n; ++dp) {
    if (n % dp || kB % dp || kH % (n / dp))
      continue;
    runTwoLayer(world, dp, n / dp, /*tpSlowest=*/true);
  }
}

//===----------------------------------------------------------------------===//
// AdamW, optimizer state and more kernels
//===----------------------------------------------------------------------===//

const char *kAdamProgram = R"mlir(
module {
  func.func @train_step(%p: tensor<4x3xf32>, %m: tensor<4x3xf32>, %v: tensor<4x3xf32>,
                        %step: tensor<f32>, %tok: tensor<2x3xi64>, %lab: tensor<2x3xi64>, %hlr: tensor<f32>)
      -> (tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) {
    %one = tsrt.constant dense<1.0> : tensor<f32>
    %t = tsrt.kernel "add"(%step, %one) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %tf = tsrt.kernel "convert"(%tok) {attrs = {}} : (tensor<2x3xi64>) -> tensor<2x3xf32>
    %pr = tsrt.kernel "slice"(%p) {attrs = {start_indices = array<i64: 0, 0>, limit_indices = array<i64: 2, 3>, strides = array<i64: 1, 1>}} : (tensor<4x3xf32>) -> tensor<2x3xf32>
    %g0 = tsrt.kernel "mul"(%pr, %tf) {attrs = {}} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %zero = tsrt.constant dense<0.0> : tensor<2x3xf32>
    %g = tsrt.kernel "concat"(%g0, %zero) {attrs = {axis = 0 : i64}} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %loss = tsrt.kernel "reduce_sum"(%g0) {attrs = {axes = array<i64: 0, 1>}} : (tensor<2x3xf32>) -> tensor<f32>
    %p1, %m1, %v1 = tsrt.kernel "adamw_update"(%p, %g, %m, %v, %t, %hlr) {attrs = {beta1 = 0.899999976 : f32, beta2 = 0.999000012 : f32, eps = 9.99999993e-09 : f32, weight_decay = 0.00999999977 : f32}} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
    return %loss, %p1, %m1, %v1, %t : tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>
  }
}
)mlir";

json::Object adamManifest() {
  std::vector<int64_t> g = {1};
  json::Array args;
  args.push_back(arg(0, "p", "param", "f32", {4, 3}, {}, g));
  args.push_back(arg(1, "p.exp_avg", "opt_state", "f32", {4, 3}, {}, g));
  args.push_back(arg(2, "p.exp_avg_sq", "opt_state", "f32", {4, 3}, {}, g));
  args.push_back(arg(3, "step", "opt_state", "f32", {}, {}, g));
  args.push_back(arg(4, "tokens", "tokens", "i64", {2, 3}, {}, g));
  args.push_back(arg(5, "labels", "labels", "i64", {2, 3}, {}, g));
  args.push_back(arg(6, "lr", "hyper", "f32", {}, {}, g));
  json::Array results;
  results.push_back(result(0, "loss", "loss"));
  results.push_back(result(1, "param", "p"));
  results.push_back(result(2, "opt_state", "p.exp_avg"));
  results.push_back(result(3, "opt_state", "p.exp_avg_sq"));
  results.push_back(result(4, "opt_state", "step"));
  return manifest(g, 2, 3, std::move(args), std::move(results),
                  json::Object{{"name", "adamw"},
                               {"lr", 0.1},
                               {"beta1", 0.9},
                               {"beta2", 0.999},
                               {"eps", 1e-8},
                               {"weight_decay", 0.01}});
}

TEST(Executor, AdamWStateIsCarriedBetweenSteps) {
  auto plan = loadPlan(kAdamProgram, adamManifest());
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid = makeGrid(self(), {1});
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());

  Tensor p = (*plan)->initialValue("p")->clone();
  Tensor m = Tensor::zeros(DType::F32, {4, 3});
  Tensor v = Tensor::zeros(DType::F32, {4, 3});
  // Steps 0 and 1 use the manifest's lr (0.1), step 2 the one setHyper
  // gives (the kernel reads the "hyper" argument at every step).
  double lr = double(0.1f);
  for (int s = 0; s < 3; ++s) {
    if (s == 2) {
      ASSERT_FALSE(static_cast<bool>((*ex)->setHyper("lr", 0.03)));
      lr = double(0.03f);
    }
    Tensor tok = randomTokens({2, 3}, 7 + s, 5);
    llvm::Expected<double> loss = (*ex)->step(tok, tok);
    ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
    // Reference.
    Tensor g = Tensor::zeros(DType::F32, {4, 3});
    double expectedLoss = 0;
    for (int64_t i = 0; i < 6; ++i) {
      float gi =
          p.data<float>()[i] * static_cast<float>(tok.data<int64_t>()[i]);
      g.data<float>()[i] = gi;
      expectedLoss += gi;
    }
    Tensor p1 = Tensor::empty(DType::F32, {4, 3}),
           m1 = Tensor::empty(DType::F32, {4, 3}),
           v1 = Tensor::empty(DType::F32, {4, 3});
    cpu::adamwUpdate(p, g, m, v, Tensor::scalar(static_cast<float>(s + 1)), lr,
                     0.9, 0.999, 1e-8, 0.01, p1, m1, v1);
    p = p1;
    m = m1;
    v = v1;
    EXPECT_NEAR(*loss, expectedLoss, 1e-5 * (1 + std::abs(expectedLoss)));
  }
  expectClose(*(*ex)->localValue("p"), p, 1e-7, "p");
  expectClose(*(*ex)->localValue("p.exp_avg", Role::OptState), m, 1e-7, "m");
  expectClose(*(*ex)->localValue("p.exp_avg_sq", Role::OptState), v, 1e-7, "v");
  EXPECT_EQ((*ex)->localValue("step", Role::OptState)->data<float>()[0], 3.0f);
}

// The kAdamProgram step with a static memory plan, as tsr-plan-memory
// writes it (tsrt.arena_bytes, tsrt.offsets, tsrt.in_place) and two
// parameters updated by one multi_adamw_update (tsr-fuse-optimizer) in
// place of their state.
const char *kPlannedAdamProgram = R"mlir(
module {
  func.func @train_step(%p: tensor<4x3xf32>, %q: tensor<3xf32>,
                        %pm: tensor<4x3xf32>, %qm: tensor<3xf32>,
                        %pv: tensor<4x3xf32>, %qv: tensor<3xf32>,
                        %step: tensor<f32>, %tok: tensor<2x3xi64>, %lab: tensor<2x3xi64>, %hlr: tensor<f32>)
      -> (tensor<f32>, tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<f32>)
      attributes {tsrt.arena_bytes = 448 : i64} {
    %one = tsrt.constant dense<1.0> : tensor<f32>
    %t = tsrt.kernel "add"(%step, %one) {attrs = {}, tsrt.offsets = array<i64: 0>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %tf = tsrt.kernel "convert"(%tok) {attrs = {}, tsrt.offsets = array<i64: 64>} : (tensor<2x3xi64>) -> tensor<2x3xf32>
    %pr = tsrt.kernel "slice"(%p) {attrs = {start_indices = array<i64: 0, 0>, limit_indices = array<i64: 2, 3>, strides = array<i64: 1, 1>}, tsrt.offsets = array<i64: 128>} : (tensor<4x3xf32>) -> tensor<2x3xf32>
    %g0 = tsrt.kernel "mul"(%pr, %tf) {attrs = {}, tsrt.offsets = array<i64: 192>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %zero = tsrt.constant dense<0.0> : tensor<2x3xf32>
    %gp = tsrt.kernel "concat"(%g0, %zero) {attrs = {axis = 0 : i64}, tsrt.offsets = array<i64: 256>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %gq = tsrt.kernel "reduce_sum"(%g0) {attrs = {axes = array<i64: 0>}, tsrt.offsets = array<i64: 320>} : (tensor<2x3xf32>) -> tensor<3xf32>
    %loss = tsrt.kernel "reduce_sum"(%g0) {attrs = {axes = array<i64: 0, 1>}, tsrt.offsets = array<i64: 384>} : (tensor<2x3xf32>) -> tensor<f32>
    %r:6 = tsrt.kernel "multi_adamw_update"(%p, %q, %gp, %gq, %pm, %qm, %pv, %qv, %t, %hlr) {attrs = {beta1 = 0.899999976 : f32, beta2 = 0.999000012 : f32, eps = 9.99999993e-09 : f32, weight_decay = 0.00999999977 : f32}, tsrt.offsets = array<i64: -1, -1, -1, -1, -1, -1>, tsrt.in_place = array<i64: 0, 1, 2, 3, 4, 5>} : (tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>)
    return %loss, %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %t : tensor<f32>, tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<f32>
  }
}
)mlir";

json::Object plannedAdamManifest() {
  std::vector<int64_t> g = {1};
  json::Array args;
  args.push_back(arg(0, "p", "param", "f32", {4, 3}, {}, g));
  args.push_back(arg(1, "q", "param", "f32", {3}, {}, g));
  args.push_back(arg(2, "p.exp_avg", "opt_state", "f32", {4, 3}, {}, g));
  args.push_back(arg(3, "q.exp_avg", "opt_state", "f32", {3}, {}, g));
  args.push_back(arg(4, "p.exp_avg_sq", "opt_state", "f32", {4, 3}, {}, g));
  args.push_back(arg(5, "q.exp_avg_sq", "opt_state", "f32", {3}, {}, g));
  args.push_back(arg(6, "step", "opt_state", "f32", {}, {}, g));
  args.push_back(arg(7, "tokens", "tokens", "i64", {2, 3}, {}, g));
  args.push_back(arg(8, "labels", "labels", "i64", {2, 3}, {}, g));
  args.push_back(arg(9, "lr", "hyper", "f32", {}, {}, g));
  json::Array results;
  results.push_back(result(0, "loss", "loss"));
  results.push_back(result(1, "param", "p"));
  results.push_back(result(2, "param", "q"));
  results.push_back(result(3, "opt_state", "p.exp_avg"));
  results.push_back(result(4, "opt_state", "q.exp_avg"));
  results.push_back(result(5, "opt_state", "p.exp_avg_sq"));
  results.push_back(result(6, "opt_state", "q.exp_avg_sq"));
  results.push_back(result(7, "opt_state", "step"));
  return manifest(g, 2, 3, std::move(args), std::move(results),
                  json::Object{{"name", "adamw"},
                               {"lr", 0.1},
                               {"beta1", 0.9},
                               {"beta2", 0.999},
                               {"eps", 1e-8},
                               {"weight_decay", 0.01}});
}

// A lean executor: once warmed up, a step of a memory-planned program on
// the CPU allocates no tensor storage but the local batch's two slices
// (every value in the arena or in place; the learning rate set by slot),
// and profiling it allocates none either. The multi-tensor AdamW update
// writes both parameters and their state in place and matches the
// per-tensor kernel bit for bit.
TEST(Executor, SteadyStateStepAllocatesOnlyTheBatch) {
  auto plan = loadPlan(kPlannedAdamProgram, plannedAdamManifest(),
                       {{"q", Tensor::fromVector<float>({3}, {0.5f, -1, 2})}});
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid = makeGrid(self(), {1});
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  llvm::Expected<int64_t> lrSlot = (*ex)->hyperSlot("lr");
  ASSERT_TRUE(static_cast<bool>(lrSlot)) << llvm::toString(lrSlot.takeError());

  Tensor p = (*plan)->initialValue("p")->clone();
  Tensor q = (*plan)->initialValue("q")->clone();
  Tensor pm = Tensor::zeros(DType::F32, {4, 3}),
         qm = Tensor::zeros(DType::F32, {3});
  Tensor pv = Tensor::zeros(DType::F32, {4, 3}),
         qv = Tensor::zeros(DType::F32, {3});
  const void *pBuffer = (*ex)->localValue("p")->raw();
  std::vector<Tensor> toks;
  for (int s = 0; s < 6; ++s)
    toks.push_back(randomTokens({2, 3}, 7 + s, 5));
  for (int s = 0; s < 6; ++s) {
    double lr = 0.1 / (s + 1);
    (*ex)->setProfiling(s == 5);
    int64_t before = heapAllocations();
    ASSERT_FALSE(static_cast<bool>((*ex)->setHyper(*lrSlot, lr)));
    llvm::Expected<double> loss = (*ex)->step(toks[s], toks[s]);
    int64_t allocated = heapAllocations() - before;
    ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
    // Once warm, only the two local batch slices (tokens, labels) are
    // allocated: every value is in the arena or in place, the learning rate
    // is set by slot, profiling allocates nothing.
    if (s >= 1)
      EXPECT_EQ(allocated, 2) << "step " << s;
    // In place: the state keeps its buffer.
    EXPECT_EQ((*ex)->localValue("p")->raw(), pBuffer);
    // Reference: the per-tensor kernel on each parameter.
    Tensor gp = Tensor::zeros(DType::F32, {4, 3}),
           gq = Tensor::zeros(DType::F32, {3});
    for (int64_t i = 0; i < 6; ++i) {
      float gi =
          p.data<float>()[i] * static_cast<float>(toks[s].data<int64_t>()[i]);
      gp.data<float>()[i] = gi;
      gq.data<float>()[i % 3] += gi;
    }
    Tensor t = Tensor::scalar(static_cast<float>(s + 1));
    double lrF = static_cast<double>(static_cast<float>(lr));
    cpu::adamwUpdate(p, gp, pm, pv, t, lrF, 0.9, 0.999, 1e-8, 0.01, p, pm, pv);
    cpu::adamwUpdate(q, gq, qm, qv, t, lrF, 0.9, 0.999, 1e-8, 0.01, q, qm, qv);
  }
  for (auto [name, role, want] :
       {std::tuple{"p", Role::Param, &p}, std::tuple{"q", Role::Param, &q},
        std::tuple{"p.exp_avg", Role::OptState, &pm},
        std::tuple{"q.exp_avg_sq", Role::OptState, &qv}}) {
    const Tensor *got = (*ex)->localValue(name, role);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(std::memcmp(got->raw(), want->raw(), want->bytes()), 0) << name;
  }
  // The profiled step recorded its own time and every instruction's.
  const ExecContext::KernelStats &stats = (*ex)->kernelStats();
  EXPECT_EQ(stats.steps.calls, 1);
  int64_t calls = 0;
  stats.forEachOp(
      [&](llvm::StringRef, const ExecContext::KernelStats::OpTime &t) {
        calls += t.calls;
      });
  EXPECT_EQ(calls, 8); // the kernels (constants are materialised at load)
  EXPECT_EQ(stats.timedScopes, 8);
}

TEST(Executor, SetHyperErrors) {
  auto plan = loadPlan(kAdamProgram, adamManifest());
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid = makeGrid(self(), {1});
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  // The manifest's value until set.
  EXPECT_EQ((*ex)->localValue("lr", Role::Hyper)->data<float>()[0], 0.1f);
  ASSERT_FALSE(static_cast<bool>((*ex)->setHyper("lr", 0.25)));
  EXPECT_EQ((*ex)->localValue("lr", Role::Hyper)->data<float>()[0], 0.25f);
  std::string unknown = llvm::toString((*ex)->setHyper("momentum", 0.9));
  EXPECT_NE(unknown.find("no \"hyper\" argument 'momentum'"), std::string::npos)
      << unknown;
  std::string nan = llvm::toString((*ex)->setHyper("lr", std::nan("")));
  EXPECT_NE(nan.find("is not finite"), std::string::npos) << nan;
}

TEST(Executor, HyperArgumentsAreCheckedAtLoad) {
  json::Object m = adamManifest();
  // Without the initial value in "optimizer".
  m["optimizer"] = json::Object{{"name", "adamw"}};
  auto plan = loadPlan(kAdamProgram, m);
  ASSERT_FALSE(static_cast<bool>(plan));
  std::string msg = llvm::toString(plan.takeError());
  EXPECT_NE(msg.find("argument 'lr': a \"hyper\" argument needs its initial "
                     "value"),
            std::string::npos)
      << msg;
}

// Executor::setLocalValue (tessera-run --load): a replaced value is the
// one the next step reads; a wrong name, role, dtype or shape is an error
// naming the argument, and leaves the state unchanged.
TEST(Executor, SetLocalValueReplacesStateAndChecksIt) {
  auto plan = loadPlan(kAdamProgram, adamManifest());
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid = makeGrid(self(), {1});
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  EXPECT_EQ((*ex)->layoutCoords(), std::vector<int64_t>{0});

  Tensor m = Tensor::zeros(DType::F32, {4, 3});
  for (int64_t i = 0; i < 12; ++i)
    m.data<float>()[i] = 0.25f * static_cast<float>(i);
  ASSERT_FALSE(
      static_cast<bool>((*ex)->setLocalValue("p.exp_avg", Role::OptState, m)));
  ASSERT_FALSE(static_cast<bool>(
      (*ex)->setLocalValue("step", Role::OptState, Tensor::scalar(5.0f))));
  expectClose(*(*ex)->localValue("p.exp_avg", Role::OptState), m, 0, "m");
  // AdamW's next step uses the replaced step count and first moment.
  Tensor p = (*plan)->initialValue("p")->clone();
  Tensor tok = randomTokens({2, 3}, 11, 5);
  ASSERT_TRUE(static_cast<bool>((*ex)->step(tok, tok)));
  Tensor g = Tensor::zeros(DType::F32, {4, 3});
  for (int64_t i = 0; i < 6; ++i)
    g.data<float>()[i] =
        p.data<float>()[i] * static_cast<float>(tok.data<int64_t>()[i]);
  Tensor p1 = Tensor::empty(DType::F32, {4, 3}),
         m1 = Tensor::empty(DType::F32, {4, 3}),
         v1 = Tensor::empty(DType::F32, {4, 3});
  cpu::adamwUpdate(p, g, m, Tensor::zeros(DType::F32, {4, 3}),
                   Tensor::scalar(6.0f), 0.1, 0.9, 0.999, 1e-8, 0.01, p1, m1,
                   v1);
  expectClose(*(*ex)->localValue("p"), p1, 1e-7, "p");
  EXPECT_EQ((*ex)->localValue("step", Role::OptState)->data<float>()[0], 6.0f);

  auto error = [&](llvm::StringRef name, Role role, const Tensor &value) {
    llvm::Error err = (*ex)->setLocalValue(name, role, value);
    return err ? llvm::toString(std::move(err)) : std::string();
  };
  EXPECT_NE(error("nope", Role::Param, m).find("no param argument 'nope'"),
            std::string::npos);
  EXPECT_NE(error("p", Role::OptState, m).find("no opt_state argument 'p'"),
            std::string::npos);
  EXPECT_NE(error("p", Role::Param, Tensor::zeros(DType::F32, {3, 4}))
                .find("'p': expected f32 [4, 3], got f32 [3, 4]"),
            std::string::npos);
  EXPECT_NE(error("p", Role::Param, Tensor::zeros(DType::I64, {4, 3}))
                .find("'p': expected f32 [4, 3], got i64 [4, 3]"),
            std::string::npos);
  expectClose(*(*ex)->localValue("p"), p1, 1e-7, "p unchanged");
}

TEST(Executor, PlanFileRoundTrip) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(
      llvm::sys::fs::createTemporaryFile("executor-test", "tsr", path));
  auto bytes = test::packPlan(twoLayerProgram(1, 1), twoLayerManifest(1, 1));
  ASSERT_TRUE(static_cast<bool>(bytes)) << llvm::toString(bytes.takeError());
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << *bytes;
  }
  auto plan = Plan::load(path);
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  const Manifest &m = (*plan)->manifest();
  EXPECT_EQ(m.gridDescription(), "dp=1 x tp=1");
  EXPECT_EQ(m.numRanks(), 1);
  EXPECT_EQ(m.arguments.size(), 6u); // E, W1, W2, tokens, labels, lr
  EXPECT_EQ(m.arguments[5].role, Role::Hyper);
  EXPECT_EQ(m.results[2].argument, 1); // W1
  // Constants and every kernel were resolved once; the collectives use three
  // distinct axis sets: {1}, {0}, {0, 1}.
  EXPECT_EQ((*plan)->program().commAxes().size(), 3u);
  EXPECT_EQ((*plan)->source(), std::string(path));
  llvm::sys::fs::remove(path);

  auto missing = Plan::load(std::string(path) + ".missing");
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find(".missing"),
            std::string::npos);
}

TEST(Executor, SlotsAreReleasedAfterLastUse) {
  auto plan = loadPlan(twoLayerProgram(1, 1), twoLayerManifest(1, 1));
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  const Program &p = (*plan)->program();
  // Every non-returned, non-constant slot is released exactly once.
  std::vector<int> released(p.numSlots(), 0);
  for (const Instruction &inst : p.instructions())
    for (int s : inst.release)
      ++released[s];
  int total = 0;
  for (int r : released) {
    EXPECT_LE(r, 1);
    total += r;
  }
  // 5 args + 1 constant + 30 op results; 4 returned (one arg-derived slot
  // count differs per program, so just bound it).
  EXPECT_GT(total, 20);
  // %x (gather result) is dead right after the reshape that views it.
  EXPECT_EQ(p.instructions()[0].kernel, "gather");
  EXPECT_EQ(p.instructions()[1].kernel, "reshape");
  EXPECT_TRUE(llvm::is_contained(p.instructions()[1].release,
                                 p.instructions()[0].results[0]));
}

TEST(Executor, GridMismatchIsAnError) {
  auto plan = loadPlan(twoLayerProgram(1, 1), twoLayerManifest(1, 1));
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid = makeGrid(self(), {1});
  auto ex = Executor::create(**plan, *grid);
  ASSERT_FALSE(static_cast<bool>(ex));
  EXPECT_NE(llvm::toString(ex.takeError()).find("dp=1 x tp=1"),
            std::string::npos);
}

TEST(Executor, RankOrderMismatchIsAnError) {
  json::Object man = twoLayerManifest(1, 1);
  (*man.getObject("grid"))["rank_order"] = json::Array{"tp", "dp"};
  auto plan = loadPlan(twoLayerProgram(1, 1), man);
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid = makeGrid(self(), {1, 1});
  auto ex = Executor::create(**plan, *grid);
  ASSERT_FALSE(static_cast<bool>(ex));
  EXPECT_NE(llvm::toString(ex.takeError()).find("lays ranks out"),
            std::string::npos);
}

TEST(Executor, DataDependentKernelErrorNamesTheOp) {
  auto plan = loadPlan(twoLayerProgram(1, 1), twoLayerManifest(1, 1));
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid = makeGrid(self(), {1, 1});
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  Tensor tok = randomTokens({kB, kS}, 1, kV);
  tok.data<int64_t>()[5] = 99; // out of the vocabulary
  llvm::Expected<double> loss = (*ex)->step(tok, tok);
  ASSERT_FALSE(static_cast<bool>(loss));
  std::string msg = llvm::toString(loss.takeError());
  EXPECT_NE(msg.find("kernel \"gather\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("program.mlir:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step 0"), std::string::npos) << msg;
  // The state is unchanged: a good step still works.
  Tensor good = randomTokens({kB, kS}, 1, kV);
  EXPECT_TRUE(static_cast<bool>((*ex)->step(good, good)));
}

//===----------------------------------------------------------------------===//
// Load errors
//===----------------------------------------------------------------------===//

/// A one-kernel program `body` over arguments x: tensor<4x8xf32> (param)
/// and tokens/labels tensor<2x3xi64>; returns (loss, x).
std::string oneOp(llvm::StringRef body,
                  llvm::StringRef xType = "tensor<4x8xf32>") {
  return subst(R"mlir(
module {
  func.func @train_step(%x: XTYPE, %tok: tensor<2x3xi64>, %lab: tensor<2x3xi64>)
      -> (tensor<f32>, XTYPE) {
    %loss = tsrt.constant dense<0.0> : tensor<f32>
BODY
    return %loss, %x : tensor<f32>, XTYPE
  }
}
)mlir",
               {{"BODY", body.str()}, {"XTYPE", xType.str()}});
}

json::Object oneOpManifest(std::vector<int64_t> grid = {1}) {
  json::Array args;
  args.push_back(arg(0, "x", "param", "f32", {4, 8}, {}, grid));
  args.push_back(arg(1, "tokens", "tokens", "i64", {2, 3}, {}, grid));
  args.push_back(arg(2, "labels", "labels", "i64", {2, 3}, {}, grid));
  json::Array results;
  results.push_back(result(0, "loss", "loss"));
  results.push_back(result(1, "param", "x"));
  return manifest(grid, 2, 3, std::move(args), std::move(results));
}

TEST(PlanErrors, ValidOneOpProgramLoads) {
  EXPECT_EQ(
      loadError(
          oneOp(
              R"(    %y = tsrt.kernel "softmax"(%x) {attrs = {axis = 1 : i64}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
          oneOpManifest()),
      "");
}

TEST(PlanErrors, UnknownKernelNamesLocationAndKernel) {
  std::string msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "frobnicate"(%x) {attrs = {}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("test.tsr: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("kernel \"frobnicate\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("program.mlir:6:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown kernel"), std::string::npos) << msg;
}

TEST(PlanErrors, BadAttributes) {
  std::string msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "matmul"(%x, %x) {attrs = {transpose_rhs = 1 : i64}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("attribute 'transpose_rhs' must be a bool"),
            std::string::npos)
      << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "softmax"(%x) {attrs = {}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("missing attribute 'axis'"), std::string::npos) << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "softmax"(%x) {attrs = {axis = 2 : i64}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "gelu"(%x) {attrs = {approximate = "fast"}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("\"none\" or \"tanh\""), std::string::npos) << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "transpose"(%x) {attrs = {permutation = array<i64: 0, 0>}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("not a permutation"), std::string::npos) << msg;
}

TEST(PlanErrors, ShapesAndDtypesAreChecked) {
  std::string msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "matmul"(%x, %x) {attrs = {transpose_rhs = true}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x5xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("result #0 has type tensor<4x5xf32>, expected "
                     "tensor<4x4xf32>"),
            std::string::npos)
      << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "exp"(%tok) {attrs = {}} : (tensor<2x3xi64>) -> tensor<2x3xi64>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("unsupported type tensor<2x3xi64>"), std::string::npos)
      << msg;
  msg = loadError(oneOp(R"(    %h = tsrt.constant dense<1.0> : tensor<2xf64>)"),
                  oneOpManifest());
  EXPECT_NE(msg.find("unsupported element type"), std::string::npos) << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "add"(%x) {attrs = {}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("expects 2 operand(s)"), std::string::npos) << msg;
}

TEST(PlanErrors, OpsOfOtherDialectsAreNamed) {
  std::string msg = loadError(
      oneOp(
          R"(    %y = "tsr.add"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("op #1 (tsr.add) at program.mlir:6:"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unsupported operation"), std::string::npos) << msg;
}

TEST(PlanErrors, CollectiveAxesAreChecked) {
  std::string msg = loadError(
      oneOp(
          R"(    %y = tsrt.all_reduce %x {grid_axes = array<i16: 3>} : tensor<4x8xf32> -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("grid axis 3 is out of range"), std::string::npos) << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.all_gather %x {grid_axes = array<i16: 0>, dim = 0 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>)"),
      oneOpManifest({2}));
  // (The manifest's x layout is replicated, so only the gather is wrong.)
  EXPECT_NE(msg.find("expected tensor<8x8xf32>"), std::string::npos) << msg;
}

TEST(PlanErrors, KernelGridAxesAreChecked) {
  // A kernel that communicates itself (vocab-parallel cross-entropy) names
  // its grid axes; they are checked like a collective's.
  std::string msg = loadError(
      oneOp(
          R"(    %l = tsrt.kernel "reshape"(%tok) {attrs = {}} : (tensor<2x3xi64>) -> tensor<6xi64>
    %y = tsrt.kernel "cross_entropy"(%x, %l) {attrs = {grid_axes = array<i16: 3>}} : (tensor<4x8xf32>, tensor<6xi64>) -> tensor<f32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("kernel \"cross_entropy\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("grid axis 3 is out of range"), std::string::npos) << msg;
  msg = loadError(
      oneOp(
          R"(    %y = tsrt.kernel "softmax"(%x) {attrs = {axis = 1 : i64, grid_axes = [1]}} : (tensor<4x8xf32>) -> tensor<4x8xf32>)"),
      oneOpManifest());
  EXPECT_NE(msg.find("grid_axes must be"), std::string::npos) << msg;
}

TEST(PlanErrors, ManifestMustMatchTheProgram) {
  json::Object m = oneOpManifest();
  (*m.getArray("arguments"))[0].getAsObject()->operator[]("local_shape") =
      json::Array{4, 4};
  std::string msg = loadError(oneOp(""), m);
  EXPECT_NE(msg.find("argument 'x'"), std::string::npos) << msg;

  m = oneOpManifest();
  (*m.getArray("results"))[1].getAsObject()->operator[]("name") = "nope";
  msg = loadError(oneOp(""), m);
  EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;

  m = oneOpManifest();
  m["grid"] =
      json::Object{{"axes", json::Array{"dp"}}, {"shape", json::Array{0}}};
  msg = loadError(oneOp(""), m);
  EXPECT_NE(msg.find("field \"grid\".\"shape\": sizes must be in [1, 2^20]"),
            std::string::npos)
      << msg;

  // "rank_order": every rank axis once; absent means the axis order.
  m = oneOpManifest({1, 1});
  (*m.getObject("grid"))["rank_order"] = json::Array{"tp", "dp"};
  EXPECT_EQ(loadError(oneOp(""), m), "");
  for (json::Value order :
       {json::Value(json::Array{"dp", "dp"}),
        json::Value(json::Array{"dp", "xx"}), json::Value(json::Array{"tp"}),
        json::Value("dp,tp"), json::Value(json::Array{1, 0})}) {
    std::string text;
    llvm::raw_string_ostream(text) << order;
    m = oneOpManifest({1, 1});
    (*m.getObject("grid"))["rank_order"] = std::move(order);
    msg = loadError(oneOp(""), m);
    EXPECT_NE(msg.find("\"rank_order\" must list every rank axis (dp, tp)"),
              std::string::npos)
        << text << ": " << msg;
  }

  // "ranks_per_node": the plan's node mapping, an integer in [0, 2^20];
  // other grid fields are errors.
  m = oneOpManifest({1, 1});
  (*m.getObject("grid"))["ranks_per_node"] = 8;
  EXPECT_EQ(loadError(oneOp(""), m), "");
  for (json::Value bad : {json::Value(-1), json::Value(int64_t(1) << 21),
                          json::Value("2"), json::Value(1.5)}) {
    std::string text;
    llvm::raw_string_ostream(text) << bad;
    m = oneOpManifest({1, 1});
    (*m.getObject("grid"))["ranks_per_node"] = std::move(bad);
    msg = loadError(oneOp(""), m);
    EXPECT_NE(msg.find("manifest: field \"grid\".\"ranks_per_node\" must be "
                       "an integer in [0, 2^20]"),
              std::string::npos)
        << text << ": " << msg;
  }
  m = oneOpManifest({1, 1});
  (*m.getObject("grid"))["nodes"] = 2;
  msg = loadError(oneOp(""), m);
  EXPECT_NE(msg.find("manifest: unknown field \"grid\".\"nodes\""),
            std::string::npos)
      << msg;

  m = oneOpManifest();
  m["function"] = "other";
  msg = loadError(oneOp(""), m);
  EXPECT_NE(msg.find("no function @other"), std::string::npos) << msg;
}

TEST(PlanErrors, CorruptArtifacts) {
  // No manifest.
  Tensor bytes = Tensor::zeros(DType::I1, {16});
  auto blob = serializeSafeTensors({{"__program__", &bytes}}, {});
  ASSERT_TRUE(static_cast<bool>(blob));
  auto file = parseSafeTensors(*blob, "x.tsr");
  ASSERT_TRUE(static_cast<bool>(file));
  auto plan = Plan::fromSafeTensors(std::move(*file), "x.tsr");
  ASSERT_FALSE(static_cast<bool>(plan));
  EXPECT_NE(llvm::toString(plan.takeError()).find("not a Tessera plan"),
            std::string::npos);

  // Garbage program bytes.
  std::string text;
  llvm::raw_string_ostream os(text);
  os << json::Value(oneOpManifest());
  os.flush();
  Tensor x = Tensor::zeros(DType::F32, {4, 8});
  blob = serializeSafeTensors({{"x", &x}, {"__program__", &bytes}},
                              {{"tessera.manifest", text}});
  ASSERT_TRUE(static_cast<bool>(blob));
  file = parseSafeTensors(*blob, "x.tsr");
  ASSERT_TRUE(static_cast<bool>(file));
  plan = Plan::fromSafeTensors(std::move(*file), "x.tsr");
  ASSERT_FALSE(static_cast<bool>(plan));
  std::string msg = llvm::toString(plan.takeError());
  EXPECT_NE(msg.find("x.tsr: the program has no function @train_step"),
            std::string::npos)
      << msg;

  // Not MLIR at all (raw U8 bytes, with their digest).
  std::string junk = "%%% not mlir %%%";
  Tensor junkBytes = Tensor::empty(DType::I1, {16});
  std::memcpy(junkBytes.raw(), junk.data(), 16);
  std::string junkBlob;
  {
    llvm::raw_string_ostream js(junkBlob);
    ASSERT_FALSE(static_cast<bool>(
        writeSafeTensors(js, {{"x", &x}, {"__program__", &junkBytes}},
                         {{"tessera.manifest", text}}, {"__program__"})));
  }
  plan = Plan::fromBuffer(junkBlob, "x.tsr");
  ASSERT_FALSE(static_cast<bool>(plan));
  msg = llvm::toString(plan.takeError());
  EXPECT_NE(msg.find("cannot parse the program '__program__'"),
            std::string::npos)
      << msg;

  // The same bytes patched into the file (its digest left as it was): the
  // digest check refuses the section before the bytecode reader sees it.
  std::string withJunk = *blob;
  size_t at = withJunk.rfind(std::string(16, '\0'));
  ASSERT_NE(at, std::string::npos);
  withJunk.replace(at, 16, junk);
  plan = Plan::fromBuffer(withJunk, "x.tsr");
  ASSERT_FALSE(static_cast<bool>(plan));
  msg = llvm::toString(plan.takeError());
  EXPECT_NE(msg.find("x.tsr: section \"__program__\" is corrupt (digest "
                     "xxh3:"),
            std::string::npos)
      << msg;

  // Bytecode stored as BOOL (normalised to 0/1).
  Tensor ones = Tensor::fromVector<uint8_t>({6}, {1, 1, 1, 1, 0, 1});
  blob = serializeSafeTensors({{"x", &x}, {"__program__", &ones}},
                              {{"tessera.manifest", text}});
  ASSERT_TRUE(static_cast<bool>(blob));
  file = parseSafeTensors(*blob, "x.tsr");
  ASSERT_TRUE(static_cast<bool>(file));
  plan = Plan::fromSafeTensors(std::move(*file), "x.tsr");
  ASSERT_FALSE(static_cast<bool>(plan));
  msg = llvm::toString(plan.takeError());
  EXPECT_NE(msg.find("stored as BOOL"), std::string::npos) << msg;

  // Missing initial weight / wrong shape.
  auto packed = test::packPlan(oneOp(""), oneOpManifest(),
                               {{"x", Tensor::zeros(DType::F32, {4, 7})}});
  ASSERT_TRUE(static_cast<bool>(packed));
  file = parseSafeTensors(*packed, "x.tsr");
  ASSERT_TRUE(static_cast<bool>(file));
  plan = Plan::fromSafeTensors(std::move(*file), "x.tsr");
  ASSERT_FALSE(static_cast<bool>(plan));
  EXPECT_NE(llvm::toString(plan.takeError()).find("initial value of 'x'"),
            std::string::npos);
}

/// What the CUDA backend looks like to the loader, without a GPU: device
/// (not host) memory and no collectives; the kernels are the CPU's.
class NoCommunicationBackend final : public Backend {
public:
  llvm::StringRef name() const override { return "nocomm"; }
  bool hostMemory() const override { return false; }
  llvm::Expected<Tensor> allocate(DType dtype,
                                  std::vector<int64_t> shape) override {
    return cpuBackend().allocate(dtype, std::move(shape));
  }
  llvm::Expected<Arena> allocateArena(int64_t bytes) override {
    return cpuBackend().allocateArena(bytes);
  }
  llvm::Expected<Tensor> upload(const Tensor &host) override {
    return host.clone();
  }
  llvm::Expected<Tensor> download(const Tensor &t) override {
    return t.clone();
  }
  llvm::Error copy(const Tensor &src, Tensor &dst) override {
    return cpuBackend().copy(src, dst);
  }
  llvm::Error bindKernel(const exec::KernelDesc &kernel,
                         Instruction &inst) override {
    return cpuBackend().bindKernel(kernel, inst);
  }
  llvm::Error supportsCommunication(llvm::StringRef what) const override {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + " needs a collective");
  }
  llvm::Error finishStep() override { return llvm::Error::success(); }
};

// A backend without collectives refuses a program that has one when it is
// loaded, naming the op, never mid-step.
TEST(ExecutorBackend, DeviceBackendRefusesCollectivesAtLoad) {
  NoCommunicationBackend backend;
  std::string err =
      loadError(twoLayerProgram(2, 1), twoLayerManifest(2, 1), &backend);
  EXPECT_NE(err.find("test.tsr: op #"), std::string::npos) << err;
  EXPECT_NE(err.find("needs a collective"), std::string::npos) << err;
  EXPECT_NE(err.find("tsrt.all_"), std::string::npos) << err;
  // The CPU backend loads the same plan.
  EXPECT_EQ(loadError(twoLayerProgram(2, 1), twoLayerManifest(2, 1)), "");
}

// A device-like backend (host tensors behind uploads and downloads, its
// collectives through a Communication as --collectives mpi runs them) gives
// the same losses, shards and weights as the CPU backend on every grid: the
// device path of the executor (bindCollective with the right dims, connect
// in program order, ExecContext::communication) is wired like the CPU's.
TEST(ExecutorBackend, StagedDeviceBackendOnEveryGridOfTheWorld) {
  mpi::Communicator world = mpi::Communicator::world();
  int n = world.size();
  for (int64_t dp = 1; dp <= n; ++dp) {
    if (n % dp || kB % dp || kH % (n / dp))
      continue;
    test::StagedHostBackend backend;
    runTwoLayer(world, dp, n / dp, false, &backend);
    // Three communicators (tp, dp, dp x tp), 2 steps; every collective but
    // the all_slice went through the communication.
    EXPECT_EQ(backend.comm.connects, 3);
    EXPECT_EQ(backend.comm.steps, 2);
    EXPECT_EQ(backend.comm.collectives, 2 * 10);
    EXPECT_GT(backend.downloads, 0);
  }
}

// tsrt.all_reduce_start / tsrt.wait go through the communication: the
// embedding gradient's all-reduce made asynchronous.
TEST(ExecutorBackend, AsyncAllReduceGoesThroughTheCommunication) {
  mpi::Communicator world = mpi::Communicator::world();
  int n = world.size();
  if (kB % n)
    GTEST_SKIP() << "needs a world size dividing the batch";
  test::StagedHostBackend backend;
  runTwoLayer(world, n, 1, false, &backend, [](std::string program) {
    std::string sync =
        "%dE = tsrt.all_reduce %dEp {grid_axes = array<i16: 0>, reduction = "
        "\"sum\"} : tensor<16x8xf32> -> tensor<16x8xf32>";
    size_t at = program.find(sync);
    EXPECT_NE(at, std::string::npos);
    return program.replace(
        at, sync.size(),
        "%dEs = tsrt.all_reduce_start %dEp {grid_axes = array<i16: 0>} : "
        "tensor<16x8xf32> -> tensor<16x8xf32>\n    %dE = tsrt.wait %dEs, %dEp "
        ": tensor<16x8xf32>, tensor<16x8xf32> -> tensor<16x8xf32>");
  });
  EXPECT_EQ(backend.comm.starts, 2);
  EXPECT_EQ(backend.comm.waits, 2);
}

} // namespace

int main(int argc, char **argv) {
  if (llvm::Error e = mpi::initialize(&argc, &argv)) {
    fprintf(stderr, "%s\n", llvm::toString(std::move(e)).c_str());
    return 1;
  }
  cpu::setBlasThreads(1);
  testing::InitGoogleTest(&argc, argv);
  int rank = mpi::Communicator::world().rank();
  if (rank != 0) {
    // Only rank 0 prints progress; failures on any rank are still reported.
    auto &listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0;
  if (rank != 0 && failed)
    fprintf(stderr, "rank %d: executor tests failed\n", rank);
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  mpi::finalize();
  return anyFailed;
}

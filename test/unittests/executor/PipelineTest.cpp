//===- PipelineTest.cpp - pipeline plans: loading and micro-batched steps -===//
//
// A two-chunk model written by hand as a `tsrt.pipeline_schedule` program:
//   chunk 0: x = embed(E, tokens); h = x·W0; send h to chunk 1
//   chunk 1: recv h; logits = h·W1; loss += CE(logits, labels) / (B·S)
//   backward: chunk 1 sends dh back; chunk 0 accumulates dW0 and dE
//   apply:    dp all-reduce of the accumulated gradients, SGD, and a shared
//             opt_state counter "step" that every stage updates
// with M = 2 micro-batches, compared with the same step done serially on the
// whole batch with the CPU kernels. Grids: pp=2 (1F1B and GPipe) over the
// world when it has 2 or 4 ranks (dp = world / 2), and pp=1 with two
// interleaved chunks on MPI_COMM_SELF (sends to itself) on every rank.
//
//===----------------------------------------------------------------------===//

#include "PackPlan.h"
#include "StagedHostBackend.h"

#include "common/schedule/PipelineSchedule.h"
#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/collectives/mpi/MpiCollectives.h"
#include "runtime/executor/Executor.h"
#include "runtime/executor/Plan.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "gtest/gtest.h"

#include <climits>
#include <cmath>
#include <random>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
namespace json = llvm::json;
namespace schedule = tessera::tsrt::schedule;

namespace {

constexpr int64_t kV = 8, kD = 4, kH = 6, kB = 4, kS = 3, kM = 2;
constexpr double kLr = 0.5, kWd = 0.01;

std::string subst(std::string text,
                  const std::vector<std::pair<std::string, std::string>> &map) {
  for (const auto &[key, value] : map)
    for (size_t pos = text.find(key); pos != std::string::npos;
         pos = text.find(key, pos + value.size()))
      text.replace(pos, key.size(), value);
  return text;
}

/// The program. @BL@: rows of one rank's micro-batch; @N@ = @BL@·S.
const char *kPipelineTemplate = R"mlir(
module {
  tsrt.pipeline_schedule {kind = "@KIND@", stages = @P@ : i64,
      virtual_stages = @VS@ : i64, micro_batches = 2 : i64,
      forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1],
      apply = [@apply_0, @apply_1], actions = [@ACTIONS@]}

  func.func @forward_0(%E: tensor<8x4xf32> {tsrt.arg = 0 : i64},
                       %W0: tensor<4x6xf32> {tsrt.arg = 1 : i64},
                       %tok: tensor<@BL@x3xi64> {tsrt.arg = 4 : i64})
      -> (tensor<@N@x4xf32> {tsrt.saved = 0 : i64}) {
    %x3 = tsrt.kernel "gather"(%E, %tok) {attrs = {}} : (tensor<8x4xf32>, tensor<@BL@x3xi64>) -> tensor<@BL@x3x4xf32>
    %x = tsrt.kernel "reshape"(%x3) {attrs = {}} : (tensor<@BL@x3x4xf32>) -> tensor<@N@x4xf32>
    %h = tsrt.kernel "matmul"(%x, %W0) {attrs = {}} : (tensor<@N@x4xf32>, tensor<4x6xf32>) -> tensor<@N@x6xf32>
    tsrt.send %h to chunk 1 channel 0 : tensor<@N@x6xf32>
    return %x : tensor<@N@x4xf32>
  }

  func.func @forward_1(%W1: tensor<6x8xf32> {tsrt.arg = 2 : i64},
                       %lab: tensor<@BL@x3xi64> {tsrt.arg = 5 : i64})
      -> (tensor<@N@x6xf32> {tsrt.saved = 0 : i64},
          tensor<@N@x8xf32> {tsrt.saved = 1 : i64},
          tensor<f32> {tsrt.acc = 0 : i64}) {
@RECV_H@
    %logits = tsrt.kernel "matmul"(%h, %W1) {attrs = {}} : (tensor<@N@x6xf32>, tensor<6x8xf32>) -> tensor<@N@x8xf32>
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<@BL@x3xi64>) -> tensor<@N@xi64>
    %ce = tsrt.kernel "cross_entropy"(%logits, %l) {attrs = {}} : (tensor<@N@x8xf32>, tensor<@N@xi64>) -> tensor<f32>
    %inv = tsrt.constant dense<0.0833333358> : tensor<f32>
    %loss = tsrt.kernel "mul"(%ce, %inv) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %h, %logits, %loss : tensor<@N@x6xf32>, tensor<@N@x8xf32>, tensor<f32>
  }

  func.func @backward_1(%h: tensor<@N@x6xf32> {tsrt.saved = 0 : i64},
                        %logits: tensor<@N@x8xf32> {tsrt.saved = 1 : i64},
                        %W1: tensor<6x8xf32> {tsrt.arg = 2 : i64},
                        %lab: tensor<@BL@x3xi64> {tsrt.arg = 5 : i64})
      -> (tensor<6x8xf32> {tsrt.acc = 1 : i64}) {
    %l = tsrt.kernel "reshape"(%lab) {attrs = {}} : (tensor<@BL@x3xi64>) -> tensor<@N@xi64>
    %inv = tsrt.constant dense<0.0833333358> : tensor<f32>
    %dlogits = tsrt.kernel "cross_entropy_grad"(%logits, %l, %inv) {attrs = {}} : (tensor<@N@x8xf32>, tensor<@N@xi64>, tensor<f32>) -> tensor<@N@x8xf32>
    %dW1 = tsrt.kernel "matmul"(%h, %dlogits) {attrs = {transpose_lhs = true}} : (tensor<@N@x6xf32>, tensor<@N@x8xf32>) -> tensor<6x8xf32>
    %dh = tsrt.kernel "matmul"(%dlogits, %W1) {attrs = {transpose_rhs = true}} : (tensor<@N@x8xf32>, tensor<6x8xf32>) -> tensor<@N@x6xf32>
    tsrt.send %dh to chunk 0 channel 1 : tensor<@N@x6xf32>
    return %dW1 : tensor<6x8xf32>
  }

  func.func @backward_0(%x: tensor<@N@x4xf32> {tsrt.saved = 0 : i64},
                        %W0: tensor<4x6xf32> {tsrt.arg = 1 : i64},
                        %tok: tensor<@BL@x3xi64> {tsrt.arg = 4 : i64})
      -> (tensor<4x6xf32> {tsrt.acc = 2 : i64},
          tensor<8x4xf32> {tsrt.acc = 3 : i64}) {
    %dh = tsrt.recv from chunk 1 channel 1 : tensor<@N@x6xf32>
    %dW0 = tsrt.kernel "matmul"(%x, %dh) {attrs = {transpose_lhs = true}} : (tensor<@N@x4xf32>, tensor<@N@x6xf32>) -> tensor<4x6xf32>
    %dx = tsrt.kernel "matmul"(%dh, %W0) {attrs = {transpose_rhs = true}} : (tensor<@N@x6xf32>, tensor<4x6xf32>) -> tensor<@N@x4xf32>
    %dx3 = tsrt.kernel "reshape"(%dx) {attrs = {}} : (tensor<@N@x4xf32>) -> tensor<@BL@x3x4xf32>
    %dE = tsrt.kernel "gather_grad"(%tok, %dx3) {attrs = {}} : (tensor<@BL@x3xi64>, tensor<@BL@x3x4xf32>) -> tensor<8x4xf32>
    return %dW0, %dE : tensor<4x6xf32>, tensor<8x4xf32>
  }

  func.func @apply_0(%E: tensor<8x4xf32> {tsrt.arg = 0 : i64},
                     %W0: tensor<4x6xf32> {tsrt.arg = 1 : i64},
                     %step: tensor<f32> {tsrt.arg = 3 : i64},
                     %dW0: tensor<4x6xf32> {tsrt.acc = 2 : i64},
                     %dE: tensor<8x4xf32> {tsrt.acc = 3 : i64}, %hlr: tensor<f32> {tsrt.arg = 6 : i64})
      -> (tensor<8x4xf32> {tsrt.result = 1 : i64},
          tensor<4x6xf32> {tsrt.result = 2 : i64},
          tensor<f32> {tsrt.result = 4 : i64}) {
    %gW0 = tsrt.all_reduce %dW0 {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<4x6xf32> -> tensor<4x6xf32>
    %gE = tsrt.all_reduce %dE {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<8x4xf32> -> tensor<8x4xf32>
    %E1 = tsrt.kernel "sgd_update"(%E, %gE, %hlr) {attrs = {weight_decay = 0.00999999977 : f32}} : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>) -> tensor<8x4xf32>
    %W01 = tsrt.kernel "sgd_update"(%W0, %gW0, %hlr) {attrs = {weight_decay = 0.00999999977 : f32}} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
    %one = tsrt.constant dense<1.0> : tensor<f32>
    %t = tsrt.kernel "add"(%step, %one) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %E1, %W01, %t : tensor<8x4xf32>, tensor<4x6xf32>, tensor<f32>
  }

  func.func @apply_1(%W1: tensor<6x8xf32> {tsrt.arg = 2 : i64},
                     %step: tensor<f32> {tsrt.arg = 3 : i64},
                     %dW1: tensor<6x8xf32> {tsrt.acc = 1 : i64},
                     %lossp: tensor<f32> {tsrt.acc = 0 : i64}, %hlr: tensor<f32> {tsrt.arg = 6 : i64})
      -> (tensor<f32> {tsrt.result = 0 : i64},
          tensor<6x8xf32> {tsrt.result = 3 : i64},
          tensor<f32> {tsrt.result = 4 : i64}) {
    %gW1 = tsrt.all_reduce %dW1 {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<6x8xf32> -> tensor<6x8xf32>
    %loss = tsrt.all_reduce %lossp {grid_axes = array<i16: 0>, reduction = "sum"} : tensor<f32> -> tensor<f32>
    %W11 = tsrt.kernel "sgd_update"(%W1, %gW1, %hlr) {attrs = {weight_decay = 0.00999999977 : f32}} : (tensor<6x8xf32>, tensor<6x8xf32>, tensor<f32>) -> tensor<6x8xf32>
    %one = tsrt.constant dense<1.0> : tensor<f32>
    %t = tsrt.kernel "add"(%step, %one) {attrs = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    return %loss, %W11, %t : tensor<f32>, tensor<6x8xf32>, tensor<f32>
  }
}
)mlir";

const char *kRecvH =
    "    %h = tsrt.recv from chunk 0 channel 0 : tensor<@N@x6xf32>";

/// What to build: P stages, V chunks per stage (P·V = 2), dp data-parallel
/// ranks, schedule `kind` with `actions` (one string per stage; empty: the
/// library's schedule of that kind).
struct Config {
  int64_t dp = 1, stages = 2, virtualStages = 1;
  schedule::Kind kind = schedule::Kind::OneFOneB;
  std::vector<std::string> actions;
  std::string recvH = kRecvH;
};

std::vector<std::string> actionsOf(const Config &c) {
  if (!c.actions.empty())
    return c.actions;
  auto built = schedule::build(c.kind, {c.stages, c.virtualStages, kM});
  if (!built) {
    ADD_FAILURE() << llvm::toString(built.takeError());
    return {};
  }
  std::vector<std::string> out;
  for (const schedule::StageActions &a : *built)
    out.push_back(schedule::format(a));
  return out;
}

std::string pipelineProgram(const Config &c) {
  int64_t bl = kB / (c.dp * kM);
  std::string actions;
  for (const std::string &a : actionsOf(c))
    actions += (actions.empty() ? "\"" : ", \"") + a + "\"";
  auto s = [](int64_t v) { return std::to_string(v); };
  std::string text = subst(kPipelineTemplate, {{"@RECV_H@", c.recvH}});
  return subst(text, {{"@KIND@", schedule::kindName(c.kind)},
                      {"@P@", s(c.stages)},
                      {"@VS@", s(c.virtualStages)},
                      {"@ACTIONS@", actions},
                      {"@BL@", s(bl)},
                      {"@N@", s(bl * kS)}});
}

json::Object layout1(int64_t size, std::vector<int64_t> axes = {}) {
  return json::Object{{"size", size}, {"axes", json::Array(axes)}};
}

json::Object arg(int64_t index, llvm::StringRef name, llvm::StringRef role,
                 llvm::StringRef dtype, std::vector<int64_t> shape,
                 std::vector<int64_t> local, std::vector<int64_t> dim0Axes) {
  json::Array layout;
  for (size_t d = 0; d < shape.size(); ++d)
    layout.push_back(json::Array{
        layout1(shape[d], d == 0 ? dim0Axes : std::vector<int64_t>{})});
  return json::Object{{"index", index},
                      {"name", name},
                      {"role", role},
                      {"dtype", dtype},
                      {"shape", json::Array(shape)},
                      {"local_shape", json::Array(local)},
                      {"layout", std::move(layout)}};
}

json::Object pipelineManifest(const Config &c) {
  int64_t bl = kB / (c.dp * kM);
  json::Array args;
  args.push_back(arg(0, "E", "param", "f32", {kV, kD}, {kV, kD}, {}));
  args.push_back(arg(1, "W0", "param", "f32", {kD, kH}, {kD, kH}, {}));
  args.push_back(arg(2, "W1", "param", "f32", {kH, kV}, {kH, kV}, {}));
  args.push_back(arg(3, "step", "opt_state", "f32", {}, {}, {}));
  // Tokens and labels: dim 0 split over dp (axis 0) and mb (axis 3).
  args.push_back(arg(4, "tokens", "tokens", "i64", {kB, kS}, {bl, kS}, {0, 3}));
  args.push_back(arg(5, "labels", "labels", "i64", {kB, kS}, {bl, kS}, {0, 3}));
  args.push_back(arg(6, "lr", "hyper", "f32", {}, {}, {}));
  json::Array results;
  auto result = [](int64_t i, llvm::StringRef role, llvm::StringRef name) {
    return json::Object{{"index", i}, {"role", role}, {"name", name}};
  };
  results.push_back(result(0, "loss", "loss"));
  results.push_back(result(1, "param", "E"));
  results.push_back(result(2, "param", "W0"));
  results.push_back(result(3, "param", "W1"));
  results.push_back(result(4, "opt_state", "step"));
  return json::Object{
      {"format", "tessera-plan"},
      {"version", 1},
      {"grid", json::Object{{"axes", json::Array{"dp", "tp", "pp", "mb"}},
                            {"shape", json::Array{c.dp, 1, c.stages, kM}}}},
      {"pipeline", json::Object{{"pp_axis", 2}, {"mb_axis", 3}}},
      {"program", "__program__"},
      {"function", "ignored"},
      {"global_batch", kB},
      {"seq_len", kS},
      {"optimizer",
       json::Object{{"name", "sgd"}, {"lr", kLr}, {"weight_decay", kWd}}},
      {"arguments", std::move(args)},
      {"results", std::move(results)}};
}

llvm::Expected<std::unique_ptr<Plan>> loadPlan(llvm::StringRef program,
                                               const json::Object &m,
                                               bool verifyWhenPacking = true,
                                               Backend *backend = nullptr) {
  llvm::Expected<std::string> bytes =
      test::packPlan(program, m, {}, "pipeline.mlir", verifyWhenPacking);
  if (!bytes)
    return bytes.takeError();
  llvm::Expected<SafeTensorsFile> file = parseSafeTensors(*bytes, "pp.tsr");
  if (!file)
    return file.takeError();
  return Plan::fromSafeTensors(std::move(*file), "pp.tsr", backend);
}

/// The load error of `program` + `m` (packed unverified), or "".
std::string loadError(llvm::StringRef program, const json::Object &m) {
  auto plan = loadPlan(program, m, /*verifyWhenPacking=*/false);
  return plan ? "" : llvm::toString(plan.takeError());
}

Tensor randomTokens(unsigned seed) {
  Tensor t = Tensor::empty(DType::I64, {kB, kS});
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(0, kV - 1);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = dist(gen);
  return t;
}

void expectClose(const Tensor &actual, const Tensor &expected, double rtol,
                 const std::string &what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  double num = 0, den = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.data<float>()[i], e = expected.data<float>()[i];
    num += (a - e) * (a - e);
    den += e * e;
  }
  EXPECT_LE(std::sqrt(num), rtol * std::sqrt(den) + 1e-12) << what;
}

/// The whole batch at once, serially.
struct Reference {
  Tensor E, W0, W1;

  double step(const Tensor &tok, const Tensor &lab) {
    const int64_t n = kB * kS;
    Tensor x = Tensor::empty(DType::F32, {kB, kS, kD});
    EXPECT_FALSE(static_cast<bool>(cpu::gather(E, tok, x)));
    Tensor x2 = x.reshape({n, kD});
    Tensor h = Tensor::empty(DType::F32, {n, kH});
    cpu::matmul(x2, W0, false, false, h);
    Tensor logits = Tensor::empty(DType::F32, {n, kV});
    cpu::matmul(h, W1, false, false, logits);
    Tensor l = lab.reshape({n});
    Tensor ce = Tensor::empty(DType::F32, {});
    EXPECT_FALSE(static_cast<bool>(cpu::crossEntropy(logits, l, ce)));
    Tensor inv = Tensor::scalar(1.0f / static_cast<float>(n));
    Tensor dlogits = Tensor::empty(DType::F32, {n, kV});
    EXPECT_FALSE(
        static_cast<bool>(cpu::crossEntropyGrad(logits, l, inv, dlogits)));
    Tensor dW1 = Tensor::empty(DType::F32, {kH, kV});
    cpu::matmul(h, dlogits, true, false, dW1);
    Tensor dh = Tensor::empty(DType::F32, {n, kH});
    cpu::matmul(dlogits, W1, false, true, dh);
    Tensor dW0 = Tensor::empty(DType::F32, {kD, kH});
    cpu::matmul(x2, dh, true, false, dW0);
    Tensor dx = Tensor::empty(DType::F32, {n, kD});
    cpu::matmul(dh, W0, false, true, dx);
    Tensor dE = Tensor::empty(DType::F32, {kV, kD});
    EXPECT_FALSE(
        static_cast<bool>(cpu::gatherGrad(tok, dx.reshape({kB, kS, kD}), dE)));
    auto update = [](Tensor &p, const Tensor &g) {
      Tensor out = Tensor::empty(DType::F32, p.shape());
      cpu::sgdUpdate(p, g, kLr, kWd, out);
      p = out;
    };
    update(E, dE);
    update(W0, dW0);
    update(W1, dW1);
    return ce.data<float>()[0] / static_cast<double>(n);
  }
};

std::unique_ptr<mpi::Grid> makeGrid(mpi::Communicator comm, const Manifest &m) {
  auto g = mpi::Grid::create(comm, m.rankAxes(), m.rankShape());
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  return std::move(*g);
}

/// Runs 2 steps of `c` over `comm` and checks everything against the
/// serial reference. `expectedPeak[s]`: peak activation sets of stage s.
void runPipeline(mpi::Communicator comm, const Config &c,
                 std::vector<int64_t> expectedPeak,
                 Backend *backend = nullptr) {
  SCOPED_TRACE(llvm::formatv("dp={0} pp={1} V={2} {3}", c.dp, c.stages,
                             c.virtualStages, schedule::kindName(c.kind))
                   .str());
  auto plan = loadPlan(pipelineProgram(c), pipelineManifest(c), true, backend);
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  const Manifest &m = (*plan)->manifest();
  ASSERT_TRUE(m.isPipeline());
  EXPECT_EQ(m.numRanks(), c.dp * c.stages);
  EXPECT_EQ(m.gridDescription(),
            llvm::formatv("dp={0} x tp=1 x pp={1}", c.dp, c.stages).str());
  ASSERT_NE((*plan)->pipeline(), nullptr);
  std::unique_ptr<mpi::Grid> grid = makeGrid(comm, m);
  ASSERT_TRUE(grid);
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  ASSERT_FALSE(static_cast<bool>((*ex)->enableTrace()));
  int64_t stage = (*ex)->stage();
  EXPECT_EQ(stage, grid->coords()[2]);

  // Only this stage's parameters are held.
  bool holdsChunk0 = stage == 0, holdsChunk1 = stage == 1 % c.stages;
  EXPECT_EQ((*ex)->localValue("E") != nullptr, holdsChunk0);
  EXPECT_EQ((*ex)->localValue("W0") != nullptr, holdsChunk0);
  EXPECT_EQ((*ex)->localValue("W1") != nullptr, holdsChunk1);

  Reference ref{(*plan)->initialValue("E")->clone(),
                (*plan)->initialValue("W0")->clone(),
                (*plan)->initialValue("W1")->clone()};
  for (int s = 0; s < 2; ++s) {
    Tensor tok = randomTokens(10 + s), lab = randomTokens(20 + s);
    llvm::Expected<double> loss = (*ex)->step(tok, lab);
    ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
    double expected = ref.step(tok, lab);
    EXPECT_NEAR(*loss, expected, 1e-5 * std::abs(expected)) << "step " << s;
  }

  // Activation sets: peak count, and bytes (chunk 0 saves x [N, D]; chunk 1
  // saves h [N, H] and logits [N, V]).
  int64_t n = kB / (c.dp * kM) * kS;
  EXPECT_EQ((*ex)->peakActivationSets(), expectedPeak[stage]);
  if (c.virtualStages == 1)
    EXPECT_EQ((*ex)->peakActivationBytes(),
              expectedPeak[stage] * n * (stage == 0 ? kD : kH + kV) * 4);
  // Sends of the last step: M micro-batches of h (or dh), N x H f32 each,
  // per chunk of this stage that sends.
  EXPECT_EQ((*ex)->traffic().stepBytes(mpi::CollectiveKind::Send),
            static_cast<double>(kM * n * kH * 4 * c.virtualStages));

  // The trace: this stage's actions in order, then its applies, per step.
  std::vector<std::string> names;
  for (const TraceEvent &e : (*ex)->traceEvents()) {
    EXPECT_EQ(e.stage, stage);
    EXPECT_LE(e.start, e.end);
    if (e.step == 1)
      names.push_back(e.name());
  }
  std::string expectedNames = actionsOf(c)[stage];
  for (int64_t chunk = stage; chunk < 2; chunk += c.stages)
    expectedNames += " apply";
  expectedNames += " step";
  EXPECT_EQ(llvm::join(names, " "), expectedNames);

  // State: the shared counter on every rank, the parameters where held.
  const Tensor *step = (*ex)->localValue("step", Role::OptState);
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->data<float>()[0], 2.0f);
  std::map<std::string, Tensor *> expected = {
      {"E", &ref.E}, {"W0", &ref.W0}, {"W1", &ref.W1}};
  for (const auto &[name, value] : expected)
    if (const Tensor *local = (*ex)->localValue(name))
      expectClose(*local, *value, 1e-5, "local " + name);

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

TEST(Pipeline, OneFOneBOnTwoStages) {
  mpi::Communicator world = mpi::Communicator::world();
  if (world.size() != 2 && world.size() != 4)
    GTEST_SKIP() << "needs 2 or 4 ranks";
  Config c;
  c.dp = world.size() / 2;
  c.actions = {"F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"};
  // 1F1B: min(P - stage, M) sets in flight.
  runPipeline(world, c, {2, 1});
}

// The same through a device-like backend (host tensors behind uploads and
// downloads; StagedHostBackend.h): sends download, receives upload,
// accumulators and the loss go through the backend, as under --backend
// cuda --collectives mpi.
TEST(Pipeline, OneFOneBThroughAStagedDeviceBackend) {
  mpi::Communicator world = mpi::Communicator::world();
  if (world.size() != 2 && world.size() != 4)
    GTEST_SKIP() << "needs 2 or 4 ranks";
  Config c;
  c.dp = world.size() / 2;
  c.actions = {"F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"};
  test::StagedHostBackend backend;
  runPipeline(world, c, {2, 1}, &backend);
  EXPECT_EQ(backend.comm.steps, 2);
  EXPECT_GT(backend.uploads, 0);
  EXPECT_GT(backend.downloads, 0);
}

// Sends and receives matched by order only, as NCCL matches them (no
// tags): the executor's order check accepts 1F1B and GPipe, and the step
// computes what the MPI (tagged) transport computes.
TEST(Pipeline, TaglessPointToPointAsUnderNccl) {
  mpi::Communicator world = mpi::Communicator::world();
  if (world.size() != 2 && world.size() != 4)
    GTEST_SKIP() << "needs 2 or 4 ranks";
  for (schedule::Kind kind :
       {schedule::Kind::OneFOneB, schedule::Kind::GPipe}) {
    Config c;
    c.dp = world.size() / 2;
    c.kind = kind;
    if (kind == schedule::Kind::OneFOneB)
      c.actions = {"F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"};
    test::StagedHostBackend backend;
    backend.comm.tagless = true;
    runPipeline(world, c,
                kind == schedule::Kind::GPipe ? std::vector<int64_t>{2, 2}
                                              : std::vector<int64_t>{2, 1},
                &backend);
    EXPECT_EQ(backend.comm.ppConnects, 1);
    // 2 steps x 2 micro-batches: one send and one receive each way.
    EXPECT_EQ(backend.comm.sends, 4);
    EXPECT_EQ(backend.comm.recvs, 4);
  }
}

TEST(Pipeline, GPipeOnTwoStages) {
  mpi::Communicator world = mpi::Communicator::world();
  if (world.size() != 2 && world.size() != 4)
    GTEST_SKIP() << "needs 2 or 4 ranks";
  Config c;
  c.dp = world.size() / 2;
  c.kind = schedule::Kind::GPipe;
  runPipeline(world, c, {2, 2});
}

TEST(Pipeline, InterleavedChunksOnOneRankSendToThemselves) {
  Config c;
  c.stages = 1;
  c.virtualStages = 2;
  c.kind = schedule::Kind::Interleaved;
  std::vector<schedule::StageActions> parsed;
  for (const std::string &a : actionsOf(c))
    parsed.push_back(*schedule::parse(a));
  runPipeline(mpi::Communicator(MPI_COMM_SELF), c,
              schedule::peakInFlight(parsed));
}

TEST(Pipeline, DataDependentErrorNamesStageActionAndOp) {
  // One rank (pp=1, two interleaved chunks), so no peer waits forever.
  Config c;
  c.stages = 1;
  c.virtualStages = 2;
  c.kind = schedule::Kind::Interleaved;
  auto plan = loadPlan(pipelineProgram(c), pipelineManifest(c));
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid =
      makeGrid(mpi::Communicator(MPI_COMM_SELF), (*plan)->manifest());
  ASSERT_TRUE(grid);
  auto ex = Executor::create(**plan, *grid);
  ASSERT_TRUE(static_cast<bool>(ex)) << llvm::toString(ex.takeError());
  Tensor tok = randomTokens(1), lab = randomTokens(2);
  lab.data<int64_t>()[0] = 99; // outside the vocabulary: micro-batch 0
  llvm::Expected<double> loss = (*ex)->step(tok, lab);
  ASSERT_FALSE(static_cast<bool>(loss));
  std::string msg = llvm::toString(loss.takeError());
  EXPECT_NE(msg.find("pp.tsr: step 0: stage 0, F1.0 (@forward_1): op #"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("kernel \"cross_entropy\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("pipeline.mlir:"), std::string::npos) << msg;
  // The state is unchanged. (Sends of the failed step may still be queued,
  // so the executor is not used again: callers abort.)
  EXPECT_EQ((*ex)->localValue("step", Role::OptState)->data<float>()[0], 0.0f);
  EXPECT_EQ((*ex)->stepsRun(), 0);
}

//===----------------------------------------------------------------------===//
// Load errors
//===----------------------------------------------------------------------===//

Config twoStages() {
  Config c;
  c.actions = {"F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"};
  return c;
}

TEST(PipelineErrors, ValidPlanLoads) {
  EXPECT_EQ(
      loadError(pipelineProgram(twoStages()), pipelineManifest(twoStages())),
      "");
}

TEST(PipelineErrors, MissingRecvNamesTheChannel) {
  Config c = twoStages();
  c.recvH = "    %h = tsrt.constant dense<0.0> : tensor<@N@x6xf32>";
  std::string msg = loadError(pipelineProgram(c), pipelineManifest(c));
  EXPECT_NE(msg.find("pp.tsr: the program '__program__' is invalid: "
                     "pipeline.mlir:"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("channel 0 (chunk 0 to chunk 1) has no matching recv"),
            std::string::npos)
      << msg;
}

TEST(PipelineErrors, DeadlockingScheduleNamesTheStage) {
  // Stage 0 waits in B0.0 for dh of micro-batch 0 while stage 1 waits in
  // F1.1 for h of micro-batch 1, which stage 0 sends only after B0.0.
  Config c;
  c.kind = schedule::Kind::GPipe;
  c.actions = {"F0.0 B0.0 F0.1 B0.1", "F1.0 F1.1 B1.0 B1.1"};
  std::string msg = loadError(pipelineProgram(c), pipelineManifest(c));
  EXPECT_NE(msg.find("is invalid"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stage"), std::string::npos) << msg;
}

TEST(PipelineErrors, BindingAttributesAreChecked) {
  Config c = twoStages();
  std::string program = pipelineProgram(c);
  auto replaced = [&](llvm::StringRef fromText, llvm::StringRef toText) {
    std::string s = program;
    std::vector<std::pair<std::string, std::string>> sizes = {
        {"@BL@", std::to_string(kB / kM)},
        {"@N@", std::to_string(kB / kM * kS)}};
    std::string from = subst(fromText.str(), sizes);
    std::string to = subst(toText.str(), sizes);
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
      s.replace(at, from.size(), to);
    return s;
  };
  // Missing attribute.
  std::string msg =
      loadError(replaced("%W0: tensor<4x6xf32> {tsrt.arg = 1 : i64},\n"
                         "                       %tok",
                         "%W0: tensor<4x6xf32>,\n                       %tok"),
                pipelineManifest(c));
  EXPECT_NE(msg.find("pp.tsr: @forward_0 (forward of chunk 0): argument #1 "
                     "has no tsrt.arg attribute"),
            std::string::npos)
      << msg;
  // Wrong kind for the phase.
  msg = loadError(replaced("%x: tensor<@N@x4xf32> {tsrt.saved = 0 : i64}",
                           "%x: tensor<@N@x4xf32> {tsrt.result = 0 : i64}"),
                  pipelineManifest(c));
  EXPECT_NE(msg.find("@backward_0 (backward of chunk 0): argument #0 carries "
                     "tsrt.result, expected tsrt.arg or tsrt.saved"),
            std::string::npos)
      << msg;
  // Ill-formed value.
  msg = loadError(replaced("{tsrt.acc = 3 : i64}", "{tsrt.acc = \"three\"}"),
                  pipelineManifest(c));
  EXPECT_NE(msg.find("@backward_0 (backward of chunk 0): result #1: tsrt.acc "
                     "must be a non-negative integer"),
            std::string::npos)
      << msg;
  // Out-of-range manifest argument and a type that is not the manifest's.
  msg =
      loadError(replaced("{tsrt.arg = 5 : i64})\n      -> (tensor<@N@x6xf32>",
                         "{tsrt.arg = 9 : i64})\n      -> (tensor<@N@x6xf32>"),
                pipelineManifest(c));
  EXPECT_NE(msg.find("@forward_1 (forward of chunk 1): argument #1: tsrt.arg "
                     "= 9 but the manifest has 7 arguments"),
            std::string::npos)
      << msg;
  msg = loadError(replaced("%W1: tensor<6x8xf32> {tsrt.arg = 2 : i64},\n"
                           "                       %lab",
                           "%W1: tensor<6x8xf32> {tsrt.arg = 1 : i64},\n"
                           "                       %lab"),
                  pipelineManifest(c));
  EXPECT_NE(msg.find("argument #0 (tsrt.arg = 1, 'W0') is tensor<6x8xf32> but "
                     "the manifest's local type is tensor<4x6xf32>"),
            std::string::npos)
      << msg;
  // A saved value the forward does not produce.
  msg = loadError(replaced("%logits: tensor<@N@x8xf32> {tsrt.saved = 1 : i64}",
                           "%logits: tensor<@N@x8xf32> {tsrt.saved = 7 : i64}"),
                  pipelineManifest(c));
  EXPECT_NE(msg.find("@backward_1 (backward of chunk 1): argument #1: "
                     "tsrt.saved = 7 is not a result of @forward_1"),
            std::string::npos)
      << msg;
}

TEST(PipelineErrors, ManifestAndScheduleMustAgree) {
  Config c = twoStages();
  json::Object m = pipelineManifest(c);
  m["pipeline"] = json::Object{{"pp_axis", 2}, {"mb_axis", 1}};
  std::string msg = loadError(pipelineProgram(c), m);
  EXPECT_NE(msg.find("\"mb_axis\" (1) must be the last grid axis (3)"),
            std::string::npos)
      << msg;

  m = pipelineManifest(c);
  (*m.getObject("grid"))["shape"] = json::Array{1, 1, 2, 4};
  (*(*m.getArray("arguments"))[4].getAsObject())["local_shape"] =
      json::Array{1, kS};
  (*(*m.getArray("arguments"))[5].getAsObject())["local_shape"] =
      json::Array{1, kS};
  msg = loadError(pipelineProgram(c), m);
  EXPECT_NE(msg.find("2 stages and 2 micro-batches but the manifest's grid "
                     "has pp=2 and mb=4"),
            std::string::npos)
      << msg;

  // Parameters may not be split over the pipeline axis.
  m = pipelineManifest(c);
  (*(*m.getArray("arguments"))[1].getAsObject())["layout"] =
      json::Array{json::Array{layout1(kD, {2})}, json::Array{layout1(kH)}};
  (*(*m.getArray("arguments"))[1].getAsObject())["local_shape"] =
      json::Array{kD / 2, kH};
  msg = loadError(pipelineProgram(c), m);
  EXPECT_NE(msg.find("argument 'W0': the layout splits over the pipeline axis "
                     "'pp'"),
            std::string::npos)
      << msg;

  // Tokens not split over mb would give every micro-batch the same rows.
  m = pipelineManifest(c);
  (*(*m.getArray("arguments"))[4].getAsObject())["layout"] =
      json::Array{json::Array{layout1(kB, {0})}, json::Array{layout1(kS)}};
  (*(*m.getArray("arguments"))[4].getAsObject())["local_shape"] =
      json::Array{kB, kS};
  msg = loadError(pipelineProgram(c), m);
  EXPECT_NE(msg.find("argument 'tokens': tokens must be split over the "
                     "micro-batch axis 'mb'"),
            std::string::npos)
      << msg;

  // Without the "pipeline" object the program has no @train_step.
  m = pipelineManifest(c);
  m.erase("pipeline");
  m["grid"] = json::Object{{"axes", json::Array{"dp", "tp", "pp", "mb"}},
                           {"shape", json::Array{1, 1, 2, 2}}};
  msg = loadError(pipelineProgram(c), m);
  EXPECT_NE(msg.find("no function @ignored"), std::string::npos) << msg;
}

TEST(PipelineErrors, ResultsMustComeFromTheRightStages) {
  Config c = twoStages();
  auto replaced = [&](llvm::StringRef from, llvm::StringRef to) {
    std::string s = pipelineProgram(c);
    size_t at = s.find(from.str());
    EXPECT_NE(at, std::string::npos) << from.str();
    if (at != std::string::npos)
      s.replace(at, from.size(), to.str());
    return s;
  };
  // apply_1 stops updating the shared counter: stage 1 would keep a stale
  // copy of it.
  std::string msg =
      loadError(replaced("tensor<6x8xf32> {tsrt.result = 3 : i64},\n"
                         "          tensor<f32> {tsrt.result = 4 : i64})",
                         "tensor<6x8xf32> {tsrt.result = 3 : i64},\n"
                         "          tensor<f32> {tsrt.result = 0 : i64})"),
                pipelineManifest(c));
  EXPECT_NE(msg.find("opt_state 'step' is used on stages {0, 1} but updated "
                     "(result 4) on stages {0}"),
            std::string::npos)
      << msg;
  // The loss must come from the last stage (it is broadcast from there).
  msg = loadError(replaced("tensor<4x6xf32> {tsrt.result = 2 : i64},\n"
                           "          tensor<f32> {tsrt.result = 4 : i64})",
                           "tensor<4x6xf32> {tsrt.result = 2 : i64},\n"
                           "          tensor<f32> {tsrt.result = 0 : i64})"),
                  pipelineManifest(c));
  EXPECT_NE(msg.find("the loss (result 0) must be produced on the last stage "
                     "(1) only, but is produced on stages {0, 1}"),
            std::string::npos)
      << msg;
}

TEST(PipelineErrors, MpiTagsMustFit) {
  // Tag = channel · M + micro-batch must fit an int (load error) and
  // MPI_TAG_UB (executor error). One stage with two chunks, so the executor
  // runs on MPI_COMM_SELF.
  Config c;
  c.stages = 1;
  c.virtualStages = 2;
  c.kind = schedule::Kind::Interleaved;
  auto withChannel = [&](int64_t channel) {
    std::string program = pipelineProgram(c);
    std::string to = " channel " + std::to_string(channel) + " ";
    for (size_t at = program.find(" channel 1 "); at != std::string::npos;
         at = program.find(" channel 1 ", at + to.size()))
      program.replace(at, 11, to);
    return program;
  };
  std::string msg =
      loadError(withChannel(int64_t(1) << 30), pipelineManifest(c));
  EXPECT_NE(msg.find("channel 1073741824 with 2 micro-batches gives MPI tags "
                     "beyond INT_MAX"),
            std::string::npos)
      << msg;

  int *tagUb = nullptr, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
  ASSERT_TRUE(flag && tagUb);
  if (*tagUb >= INT_MAX - 2)
    GTEST_SKIP() << "MPI_TAG_UB is " << *tagUb << ": every int tag fits";
  // The largest tag is channel · 2 + 1 > MPI_TAG_UB.
  int64_t channel = *tagUb / 2 + 1;
  auto plan = loadPlan(withChannel(channel), pipelineManifest(c));
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  std::unique_ptr<mpi::Grid> grid =
      makeGrid(mpi::Communicator(MPI_COMM_SELF), (*plan)->manifest());
  ASSERT_TRUE(grid);
  auto ex = Executor::create(**plan, *grid);
  ASSERT_FALSE(static_cast<bool>(ex));
  msg = llvm::toString(ex.takeError());
  EXPECT_NE(msg.find("exceeds this MPI's MPI_TAG_UB"), std::string::npos)
      << msg;
}

TEST(PipelineErrors, GridMismatchNamesTheRankGrid) {
  auto plan =
      loadPlan(pipelineProgram(twoStages()), pipelineManifest(twoStages()));
  ASSERT_TRUE(static_cast<bool>(plan)) << llvm::toString(plan.takeError());
  auto grid = mpi::Grid::create(mpi::Communicator(MPI_COMM_SELF),
                                {"dp", "tp", "pp"}, {1, 1, 1});
  ASSERT_TRUE(static_cast<bool>(grid)) << llvm::toString(grid.takeError());
  auto ex = Executor::create(**plan, **grid);
  ASSERT_FALSE(static_cast<bool>(ex));
  std::string msg = llvm::toString(ex.takeError());
  EXPECT_NE(msg.find("needs a grid dp=1 x tp=1 x pp=2"), std::string::npos)
      << msg;
}

} // namespace

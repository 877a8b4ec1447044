//===- Calibrate.cpp - measure this machine for the planner ---------------===//

#include "Calibrate.h"

#include "common/cluster/CostModel.h"
#include "common/schedule/PipelineSchedule.h"
#include "dialects/tsrt/AttentionWorkspace.h"
#include "runtime/backends/cpu/Attention.h"
#include "runtime/backends/cpu/CpuKernels.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <ctime>
#include <functional>
#include <memory>
#include <sched.h>
#include <unistd.h>
#include <vector>

using namespace tessera;
using namespace tessera::runtime;
using planner::Collective;

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--calibrate: " + msg);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The buffers of one timed collective of `elems` floats (a multiple of
/// n): `full` (all-reduce, the reduce-scatter input, the all-to-all send
/// buffer, the send/recv message), `part` (one rank's block) and `out`.
struct CollectiveBuffers {
  Tensor full, part, out;
  int64_t elems;
  CollectiveBuffers(int64_t elems, int64_t n)
      : full(Tensor::empty(DType::F32, {elems})),
        part(Tensor::empty(DType::F32, {elems / n})),
        out(Tensor::empty(DType::F32, {elems})), elems(elems) {
    std::fill_n(full.data<float>(), elems, 1.0f);
    std::fill_n(part.data<float>(), elems / n, 1.0f);
  }
};

/// One call of collective `kind` over `world` on `b`, through the CPU
/// backend's collectives (send/recv: a ring exchange with
/// MPI_Sendrecv_replace, as the ring-attention kernel rotates K/V blocks).
/// Returns false when MPI reports an error.
std::function<bool()> collectiveOp(planner::Collective kind,
                                   const mpi::Communicator &world,
                                   CollectiveBuffers &b) {
  using planner::Collective;
  int n = world.size();
  int next = (world.rank() + 1) % n, prev = (world.rank() + n - 1) % n;
  switch (kind) {
  case Collective::AllReduce:
    return [&world, &b] {
      return !llvm::errorToBool(
          mpi::allReduce(b.full, mpi::ReduceOp::Sum, world));
    };
  case Collective::AllGather:
    return [&world, &b] {
      return !llvm::errorToBool(mpi::allGather(b.part, 0, world, b.out));
    };
  case Collective::ReduceScatter:
    return [&world, &b] {
      return !llvm::errorToBool(mpi::reduceScatter(b.full, 0, world, b.part));
    };
  case Collective::AllToAll:
    return [&world, &b] {
      return !llvm::errorToBool(mpi::allToAll(b.full, 0, 0, world, b.out));
    };
  case Collective::SendRecv:
    return [&world, &b, next, prev] {
      return MPI_Sendrecv_replace(b.full.raw(), static_cast<int>(b.elems),
                                  MPI_FLOAT, next, 7, prev, 7, world.handle(),
                                  MPI_STATUS_IGNORE) == MPI_SUCCESS;
    };
  }
  return [] { return false; };
}

/// The processors the ranks share: the union of the CPUs the ranks may run
/// on (their affinity masks, OR-ed over `world`; ranks bound to one core
/// each still count every core the job has).
double cpusAvailable(const mpi::Communicator &world) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0)
    return static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t all;
  MPI_Allreduce(&cpus, &all, static_cast<int>(sizeof(cpus)), MPI_BYTE, MPI_BOR,
                world.handle());
  return CPU_COUNT(&all);
}

double timeConcurrent(const mpi::Communicator &world,
                      const std::function<bool()> &op, int64_t reps,
                      int trials) {
  std::vector<double> times;
  for (int t = 0; t < trials; ++t) {
    MPI_Barrier(world.handle());
    double start = MPI_Wtime();
    int ok = 1;
    for (int64_t r = 0; r < reps; ++r)
      ok &= op() ? 1 : 0;
    MPI_Barrier(world.handle());
    double mine[2] = {MPI_Wtime() - start, ok ? 0.0 : 1.0}, slowest[2];
    MPI_Allreduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, world.handle());
    if (slowest[1] != 0)
      return -1;
    times.push_back(slowest[0] / static_cast<double>(reps));
  }
  return median(times);
}

/// Calls per trial so that one trial lasts about `target` seconds, from one
/// timed warm-up call (agreed over the ranks).
int64_t repsFor(const mpi::Communicator &world, const std::function<bool()> &op,
                double target) {
  double once = timeConcurrent(world, op, 1, 1);
  if (once <= 0)
    return 1;
  return std::clamp<int64_t>(static_cast<int64_t>(target / once), 1, 100000);
}

/// A step's compute between two collectives, in miniature: one transformer
/// MLP block on `rows` tokens of width 128 (layer norm, [rows, 128] x
/// [128, 512], GeLU, [rows, 512] x [512, 128]) through the CPU backend's
/// kernels. Its kernel mix and working set (about 0.6 MB) are a layer's, so a
/// collective timed right after it meets the caches, the memory traffic and
/// (oversubscribed) the scheduling a collective meets inside a step; about
/// half a millisecond per rank with 4 ranks on 2 cores at 32 rows.
class LayerSegment {
public:
  explicit LayerSegment(int64_t rows)
      : x(filled({rows, kWidth}, 0.5f)), normed(filled({rows, kWidth}, 0)),
        gamma(filled({kWidth}, 1)), beta(filled({kWidth}, 0)),
        w1(filled({kWidth, 4 * kWidth}, 0.01f)),
        h(filled({rows, 4 * kWidth}, 0)), a(filled({rows, 4 * kWidth}, 0)),
        w2(filled({4 * kWidth, kWidth}, 0.01f)), y(filled({rows, kWidth}, 0)) {
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data<float>()[i] = static_cast<float>(i % 89) / 89.0f - 0.5f;
  }
  bool operator()() {
    cpu::layerNorm(x, gamma, beta, 1, 1e-5f, normed);
    cpu::matmul(normed, w1, false, false, h);
    cpu::gelu(h, cpu::GeluApproximate::None, a);
    cpu::matmul(a, w2, false, false, y);
    return true;
  }

private:
  static constexpr int64_t kWidth = 128;
  static Tensor filled(std::initializer_list<int64_t> shape, float value) {
    Tensor t = Tensor::empty(DType::F32, std::vector<int64_t>(shape));
    std::fill_n(t.data<float>(), t.numel(), value);
    return t;
  }
  Tensor x, normed, gamma, beta, w1, h, a, w2, y;
};

/// Weighted least squares of t = a·x + b·y (x, y >= 0) with weights 1/t²,
/// a and b clamped to >= 0 (refitting the other alone). Returns {a, b}.
std::pair<double, double> fitTwo(const std::vector<double> &x,
                                 const std::vector<double> &y,
                                 const std::vector<double> &t) {
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    double w = 1.0 / (t[i] * t[i]);
    sxx += w * x[i] * x[i];
    sxy += w * x[i] * y[i];
    syy += w * y[i] * y[i];
    sxt += w * x[i] * t[i];
    syt += w * y[i] * t[i];
  }
  double det = sxx * syy - sxy * sxy;
  double a = det > 0 ? (sxt * syy - syt * sxy) / det : -1;
  double b = det > 0 ? (syt * sxx - sxt * sxy) / det : -1;
  if (a < 0 || b < 0) {
    // One term alone: keep the one that fits better.
    double aOnly = sxx > 0 ? sxt / sxx : 0, bOnly = syy > 0 ? syt / syy : 0;
    double errA = 0, errB = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      errA += std::pow((aOnly * x[i] - t[i]) / t[i], 2);
      errB += std::pow((bOnly * y[i] - t[i]) / t[i], 2);
    }
    if (a < 0 && b >= 0) {
      a = 0;
      b = bOnly;
    } else if (b < 0 && a >= 0) {
      a = aOnly;
      b = 0;
    } else if (errA <= errB) {
      a = aOnly;
      b = 0;
    } else {
      a = 0;
      b = bOnly;
    }
  }
  return {a, b};
}

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0)
    return "unknown host";
  return buf;
}

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// What every step of the calibration shares: the ranks, where rank 0 logs,
/// and the trial counts and lengths of the mode (--calibrate-quick or not).
struct Session {
  Session(const mpi::Communicator &world, const calibrate::Options &options)
      : world(world), quick(options.quick),
        log(world.rank() == 0 ? options.log : nullptr),
        collectiveTrials(options.quick ? 3 : 15),
        collectiveTarget(options.quick ? 2e-3 : 10e-3),
        computeTarget(options.quick ? 2e-3 : 100e-3) {}

  /// Seconds per call of `op` (all ranks at once): computeTrials trials of
  /// about computeTarget seconds each, the median.
  double timeCompute(const std::function<bool()> &op) const {
    return timeConcurrent(world, op, repsFor(world, op, computeTarget),
                          computeTrials);
  }

  const mpi::Communicator &world;
  const bool quick;
  /// Rank 0's progress lines (null on the other ranks or when silent).
  llvm::raw_ostream *const log;
  // Compute trials are long: with ranks sharing cores, each barrier costs
  // up to a scheduler time slice (milliseconds), which must stay small
  // against the work timed between two of them.
  const int computeTrials = 3;
  // A collective's cost in a step is a difference of two noisy times
  // (segment + collective, segment alone): many shorter paired trials.
  const int collectiveTrials;
  const double collectiveTarget, computeTarget;
};

/// GEMMs: fp32 through cpu::matmul (OpenBLAS sgemm, as the CPU backend), a
/// table over m, n, k and the best rate as the peak.
llvm::Error measureGemms(const Session &s, planner::Cluster &c) {
  std::vector<int64_t> dims = s.quick ? std::vector<int64_t>{16, 128}
                                      : std::vector<int64_t>{16, 64, 256, 1024};
  double best = 0;
  for (int64_t m : dims)
    for (int64_t nn : dims)
      for (int64_t k : dims) {
        Tensor a = Tensor::empty(DType::F32, {m, k});
        Tensor b = Tensor::empty(DType::F32, {k, nn});
        Tensor out = Tensor::empty(DType::F32, {m, nn});
        std::fill_n(a.data<float>(), a.numel(), 0.5f);
        std::fill_n(b.data<float>(), b.numel(), 0.25f);
        auto op = [&] {
          cpu::matmul(a, b, false, false, out);
          return true;
        };
        double t = s.timeCompute(op);
        double flops = 2.0 * m * nn * k / t;
        c.gemm.push_back({"fp32", m, nn, k, flops});
        best = std::max(best, flops);
      }
  if (!(best > 0))
    return fail("no GEMM could be timed");
  c.peakFlops["fp32"] = best;
  c.gemmPeakFraction = 1.0;
  if (s.log)
    *s.log << llvm::formatv("calibrate: {0} GEMM shapes, best {1:F2} GFLOP/s "
                            "per rank\n",
                            c.gemm.size(), best * 1e-9);
  return llvm::Error::success();
}

/// Elementwise: the per-kernel overhead and the memory bandwidth from
/// cpu::add (reads two floats and writes one per element), and the rate of
/// transcendentals (exp and erf).
llvm::Error measureElementwise(const Session &s, planner::Cluster &c) {
  auto timeAdd = [&](int64_t elems) {
    Tensor a = Tensor::empty(DType::F32, {elems});
    Tensor b = Tensor::empty(DType::F32, {elems});
    Tensor out = Tensor::empty(DType::F32, {elems});
    std::fill_n(a.data<float>(), elems, 1.0f);
    std::fill_n(b.data<float>(), elems, 2.0f);
    return s.timeCompute([&] {
      cpu::add(a, b, out);
      return true;
    });
  };
  c.opOverhead = timeAdd(16);
  std::vector<int64_t> sizes =
      s.quick ? std::vector<int64_t>{1 << 12, 1 << 16, 1 << 20}
              : std::vector<int64_t>{1 << 12, 1 << 14, 1 << 16,
                                     1 << 18, 1 << 20, 1 << 22};
  // t - overhead = bytes / bw, fitted through the origin with weights
  // 1/t² (relative error).
  std::vector<double> ones, bytes, times;
  for (int64_t e : sizes) {
    double t = timeAdd(e);
    ones.push_back(1.0);
    bytes.push_back(12.0 * static_cast<double>(e));
    times.push_back(std::max(t - c.opOverhead, 1e-12));
  }
  std::vector<double> zeros(sizes.size(), 0.0);
  double slope = fitTwo(zeros, bytes, times).second;
  if (!(slope > 0))
    return fail("the elementwise kernel's time does not grow with its size");
  c.memoryBandwidth = 1.0 / slope;
  // Transcendentals: the mean per-element time of exp and erf (libm).
  const int64_t elems = s.quick ? 1 << 12 : 1 << 16;
  Tensor in = Tensor::empty(DType::F32, {elems});
  Tensor out = Tensor::empty(DType::F32, {elems});
  for (int64_t i = 0; i < elems; ++i)
    in.data<float>()[i] = -4.0f + 8.0f * static_cast<float>(i) / elems;
  double perElement = 0;
  for (bool useErf : {false, true}) {
    auto op = [&] {
      if (useErf)
        cpu::erf(in, out);
      else
        cpu::exp(in, out);
      return true;
    };
    perElement += 0.5 * s.timeCompute(op) / static_cast<double>(elems);
  }
  c.transcendentalRate = 1.0 / perElement;
  if (s.log)
    *s.log << llvm::formatv("calibrate: elementwise {0:F2} GB/s per rank, "
                            "{1:F3} us per kernel, {2:F1} M exp/erf per s\n",
                            c.memoryBandwidth * 1e-9, c.opOverhead * 1e6,
                            c.transcendentalRate * 1e-6);
  return llvm::Error::success();
}

Tensor filledTensor(std::initializer_list<int64_t> shape, float value) {
  Tensor t = Tensor::empty(DType::F32, std::vector<int64_t>(shape));
  std::fill_n(t.data<float>(), t.numel(), value);
  return t;
}

/// The backend's non-GEMM kernels that run far below the roofline (row
/// reductions, the optimizer updates, GeLU, the loss): seconds per element
/// of their first operand, by tsr op name (StepCost times them so).
llvm::Error measureRowKernels(const Session &s, planner::Cluster &c) {
  const int64_t rows = s.quick ? 256 : 2048, cols = 128;
  const int64_t elems = rows * cols;
  Tensor x = filledTensor({rows, cols}, 0.5f),
         dy = filledTensor({rows, cols}, 0.25f);
  for (int64_t i = 0; i < elems; ++i)
    x.data<float>()[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  Tensor out = filledTensor({rows, cols}, 0),
         out2 = filledTensor({rows, cols}, 0),
         out3 = filledTensor({rows, cols}, 0);
  Tensor gamma = filledTensor({cols}, 1), beta = filledTensor({cols}, 0),
         dgamma = filledTensor({cols}, 0), dbeta = filledTensor({cols}, 0);
  Tensor step = Tensor::empty(DType::F32, {});
  step.data<float>()[0] = 3;
  Tensor labels = Tensor::empty(DType::I64, {rows});
  for (int64_t i = 0; i < rows; ++i)
    labels.data<int64_t>()[i] = i % cols;
  Tensor loss = Tensor::empty(DType::F32, {});
  Tensor dloss = Tensor::empty(DType::F32, {});
  dloss.data<float>()[0] = 1;
  llvm::Error kernelError = llvm::Error::success();
  auto check = [&](llvm::Error e) {
    if (e && !kernelError)
      kernelError = std::move(e);
    else
      llvm::consumeError(std::move(e));
    return true;
  };
  std::vector<std::pair<const char *, std::function<bool()>>> kernels = {
      {"layer_norm",
       [&] {
         cpu::layerNorm(x, gamma, beta, 1, 1e-5f, out);
         return true;
       }},
      {"layer_norm_grad",
       [&] {
         cpu::layerNormGrad(x, gamma, dy, 1, 1e-5f, out, dgamma, dbeta);
         return true;
       }},
      {"rms_norm",
       [&] {
         cpu::rmsNorm(x, gamma, 1, 1e-5f, out);
         return true;
       }},
      {"rms_norm_grad",
       [&] {
         cpu::rmsNormGrad(x, gamma, dy, 1, 1e-5f, out, dgamma);
         return true;
       }},
      {"adamw_update",
       [&] {
         cpu::adamwUpdate(x, dy, out2, out3, step, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                          out, out2, out3);
         return true;
       }},
      {"sgd_update",
       [&] {
         cpu::sgdUpdate(x, dy, 1e-3, 0.0, out);
         return true;
       }},
      {"gelu",
       [&] {
         cpu::gelu(x, cpu::GeluApproximate::None, out);
         return true;
       }},
      {"gelu_grad",
       [&] {
         cpu::geluGrad(x, dy, cpu::GeluApproximate::None, out);
         return true;
       }},
      {"silu",
       [&] {
         cpu::silu(x, out);
         return true;
       }},
      {"silu_grad",
       [&] {
         cpu::siluGrad(x, dy, out);
         return true;
       }},
      {"cross_entropy",
       [&] { return check(cpu::crossEntropy(x, labels, loss)); }},
      {"cross_entropy_grad",
       [&] { return check(cpu::crossEntropyGrad(x, labels, dloss, out)); }},
  };
  for (auto &[name, op] : kernels)
    c.kernelSecondsPerElement[name] =
        s.timeCompute(op) / static_cast<double>(elems);
  // The multi-tensor updates (tsr-fuse-optimizer) run the same loop over
  // every parameter's elements (cpu::adamwUpdateMulti, sgdUpdateMulti).
  c.kernelSecondsPerElement["multi_adamw_update"] =
      c.kernelSecondsPerElement["adamw_update"];
  c.kernelSecondsPerElement["multi_sgd_update"] =
      c.kernelSecondsPerElement["sgd_update"];
  return kernelError;
}

/// The fused attention kernel, per score it forms (causal, blocks of
/// kAttentionBlockRows query rows: the count of CostRules.cpp), forward and
/// backward.
void measureAttention(const Session &s, planner::Cluster &c) {
  cpu::AttentionDims d{s.quick ? 8 : 32, 128, 128, 16, 16};
  const int64_t qkv = d.batch * d.sq * d.dh;
  std::vector<float> q(qkv, 0.1f), k(qkv, 0.2f), v(qkv, 0.3f), o(qkv),
      dout(qkv, 0.01f), dq(qkv), dk(qkv), dv(qkv), lse(d.batch * d.sq);
  for (int64_t i = 0; i < qkv; ++i)
    q[i] = static_cast<float>(i % 13) / 13.0f - 0.5f;
  std::vector<float> work(std::max(cpu::attentionWorkspaceElems(d, false),
                                   cpu::attentionWorkspaceElems(d, true)));
  double scores = 0;
  for (int64_t i0 = 0; i0 < d.sq; i0 += tsrt::kAttentionBlockRows) {
    int64_t rows = std::min(tsrt::kAttentionBlockRows, d.sq - i0);
    scores +=
        double(d.batch) * double(rows) * double(std::min(d.sk, i0 + rows));
  }
  std::function<bool()> fwd = [&] {
    cpu::attentionForward(d, q.data(), k.data(), v.data(), nullptr, 0.25f,
                          /*causal=*/true, o.data(), lse.data(), work.data());
    return true;
  };
  fwd();
  std::function<bool()> bwd = [&] {
    cpu::attentionBackward(d, q.data(), k.data(), v.data(), o.data(),
                           lse.data(), dout.data(), nullptr, 0.25f,
                           /*causal=*/true, dq.data(), dk.data(), dv.data(),
                           work.data());
    return true;
  };
  c.kernelSecondsPerElement["attention"] = s.timeCompute(fwd) / scores;
  c.kernelSecondsPerElement["attention_grad"] = s.timeCompute(bwd) / scores;
}

/// The kernels of measureRowKernels and measureAttention, and the log line.
llvm::Error measureKernels(const Session &s, planner::Cluster &c) {
  if (llvm::Error e = measureRowKernels(s, c)) {
    // The attention kernels are still timed before the error is returned,
    // so every rank makes the same collective calls.
    measureAttention(s, c);
    return e;
  }
  measureAttention(s, c);
  if (s.log)
    *s.log << llvm::formatv(
        "calibrate: layer_norm {0:F2} ns, layer_norm_grad {1:F2} ns, "
        "adamw_update {2:F2} ns per element\n",
        c.kernelSecondsPerElement["layer_norm"] * 1e9,
        c.kernelSecondsPerElement["layer_norm_grad"] * 1e9,
        c.kernelSecondsPerElement["adamw_update"] * 1e9);
  return llvm::Error::success();
}

/// Oversubscription (more ranks than cores): how much of a core a rank
/// waiting for a message still takes (Cluster::waitingRankShare), measured
/// the way a pipeline meets it. Ranks r < n/2 and r + n/2 form a two-stage
/// pipeline (bound round-robin, rank r on core r mod C, they share a core,
/// as the stages of the benchmark's pipelines do) and run a 1F1B step of
/// kPipelineMicroBatches micro-batches: a forward is one LayerSegment, a
/// backward two, and each boundary a 16 KiB message (MPI_Isend, MPI_Recv,
/// as the pipeline executor transfers). The share is the one for which
/// tsrt::schedule::simulate, with the chunks at the all-busy speed of one
/// LayerSegment, predicts the measured step: the same simulation StepCost
/// runs for pipeline plans, so the figure means what the planner uses it
/// for (0: bubbles are free, the running stage gets the whole core; 1: a
/// waiting rank keeps its share). Sets c.coresPerNode; measures only when
/// the ranks outnumber the cores.
llvm::Error measureWaitingShare(const Session &s, planner::Cluster &c) {
  const mpi::Communicator &world = s.world;
  const int n = world.size();
  c.coresPerNode = cpusAvailable(world);
  if (n < 2 || c.coresPerNode >= n)
    return llvm::Error::success();
  using namespace tsrt::schedule;
  constexpr int64_t kPipelineMicroBatches = 4;
  Shape shape;
  shape.stages = 2;
  shape.microBatches = kPipelineMicroBatches;
  auto built = build(Kind::OneFOneB, shape);
  if (!built)
    return built.takeError();
  std::vector<StageActions> schedule = std::move(*built);
  LayerSegment segment(32);
  std::function<bool()> chunkWork = [&] { return segment(); };
  // Sent (read only, possibly by several sends in flight) and received.
  std::vector<float> message(4096, 1.0f), received(4096);
  int64_t reps = repsFor(world, chunkWork, s.computeTarget);

  int rank = world.rank();
  int half = n / 2;
  // With n odd the last rank has no partner and runs stage 0's work alone.
  bool paired = rank < 2 * half;
  int stage = paired && rank >= half ? 1 : 0;
  int partner = stage == 0 ? rank + half : rank - half;
  auto tagOf = [](const Action &a) {
    return 7200 + 2 * static_cast<int>(a.microBatch) +
           (a.phase == Phase::Backward ? 1 : 0);
  };
  std::function<bool()> pipelineStep = [&] {
    std::vector<MPI_Request> sends;
    for (const Action &a : schedule[stage]) {
      bool forward = a.phase == Phase::Forward;
      // Stage 1 receives activations before its forward; stage 0 the
      // gradient before its backward.
      if (paired && (stage == 1) == forward)
        MPI_Recv(received.data(), static_cast<int>(received.size()), MPI_FLOAT,
                 partner, tagOf(a), world.handle(), MPI_STATUS_IGNORE);
      for (int i = 0; i < (forward ? 1 : 2); ++i)
        segment();
      if (paired && (stage == 0) == forward) {
        sends.emplace_back();
        MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_FLOAT,
                  partner, tagOf(a), world.handle(), &sends.back());
      }
      // The executor completes finished sends after every action
      // (runtime/executor Pipeline: MPI_Testsome).
      if (!sends.empty()) {
        int done = 0;
        std::vector<int> indices(sends.size());
        MPI_Testsome(static_cast<int>(sends.size()), sends.data(), &done,
                     indices.data(), MPI_STATUSES_IGNORE);
      }
    }
    MPI_Waitall(static_cast<int>(sends.size()), sends.data(),
                MPI_STATUSES_IGNORE);
    return true;
  };
  // The host's speed drifts over seconds, so each trial times the
  // all-busy segment and the pipeline step back to back, and their ratio
  // (the step in units of one all-busy chunk) is taken over trials.
  const int64_t stepReps = std::max<int64_t>(1, reps / 12);
  std::vector<double> ratios, busyTimes;
  for (int t = 0; t < 2 * s.computeTrials + 1; ++t) {
    double busy = timeConcurrent(world, chunkWork, reps, 1);
    double step = timeConcurrent(world, pipelineStep, stepReps, 1);
    if (busy > 0 && step > 0) {
      ratios.push_back(step / busy);
      busyTimes.push_back(busy);
    }
  }
  double allBusy = ratios.empty() ? 0 : median(busyTimes);
  double measured = ratios.empty() ? 0 : median(ratios) * allBusy;

  // The simulated step for a share, in seconds.
  std::vector<ChunkComms> comms(2);
  comms[0].forward.push_back({/*isSend=*/true, /*peer=*/1, /*channel=*/0});
  comms[0].backward.push_back({false, 1, 1});
  comms[1].forward.push_back({false, 0, 0});
  comms[1].backward.push_back({true, 0, 1});
  const double fwd[] = {allBusy, allBusy}, bwd[] = {2 * allBusy, 2 * allBusy};
  ComputeSharing sharing;
  sharing.processes = n;
  sharing.processesPerStage = std::max(1, n / 2);
  sharing.cores = c.coresPerNode;
  auto simulated = [&](double share) {
    sharing.waitingShare = share;
    return simulate(schedule, comms, shape, fwd, bwd, &sharing).makespan;
  };
  c.waitingRankShare =
      fitWaitingShare(schedule, comms, shape, fwd, bwd, sharing, measured);
  if (s.log)
    *s.log << llvm::formatv(
        "calibrate: {0} ranks on {1} cores; a two-stage 1F1B step of {2} "
        "micro-batches took {3:F3} ms (simulated: {4:F3} ms with free "
        "bubbles, {5:F3} ms with none): a waiting rank takes {6:F2} of its "
        "core share\n",
        n, c.coresPerNode, kPipelineMicroBatches, measured * 1e3,
        simulated(0) * 1e3, simulated(1) * 1e3, c.waitingRankShare);
  return llvm::Error::success();
}

/// α-β of collective `kind` over `comm` (every rank of the world in one
/// such group, all groups at once, timed by the slowest rank) at the message
/// sizes `sizes` (S, as nccl-tests counts them). A step meets its
/// collectives between kernels, each rank arriving from its own compute
/// (and, oversubscribed, from its turn on a shared core), with its caches
/// full of the layer's tensors, not from the previous collective. So every
/// timed collective follows `burst`, a layer-like compute segment, and the
/// segment's time alone, measured with the same repetitions right before,
/// is subtracted.
llvm::Expected<planner::Cluster::Link>
measureLink(const Session &s, Collective kind, const mpi::Communicator &comm,
            llvm::ArrayRef<int64_t> sizes, const std::function<bool()> &burst) {
  const mpi::Communicator &world = s.world;
  int g = comm.size();
  // One buffer set, timed operation and repetition count per size.
  struct PerSize {
    std::unique_ptr<CollectiveBuffers> buffers;
    std::function<bool()> op, inStep;
    int64_t reps = 1;
    std::vector<double> diffs, backToBack;
  };
  std::vector<PerSize> perSize(sizes.size());
  std::vector<double> steps, volume, times, sizesS;
  for (auto [i, bytesS] : llvm::enumerate(sizes)) {
    // Floats of S, rounded up to a multiple of the group size.
    int64_t elems = std::max<int64_t>(bytesS / 4, g);
    elems = (elems + g - 1) / g * g;
    PerSize &p = perSize[i];
    p.buffers = std::make_unique<CollectiveBuffers>(elems, g);
    p.op = collectiveOp(kind, comm, *p.buffers);
    p.inStep = [&p, &burst] { return burst() && p.op(); };
    p.reps = repsFor(world, p.inStep, s.collectiveTarget);
    double bytes = 4.0 * static_cast<double>(elems);
    sizesS.push_back(bytes);
    steps.push_back(static_cast<double>(planner::ringSteps(kind, g)));
    volume.push_back(planner::busBandwidthFactor(kind, g) * bytes);
  }
  // Paired: the segment alone and the segment + collective back to back
  // in every trial, the median of the differences (the host's speed
  // drifts over seconds, which unpaired medians would take for cost).
  // The trials sweep the sizes in several passes, so that a burst of
  // other work (seconds long) spoils a few trials of several sizes, which
  // the median drops, rather than every trial of one size.
  const int passes = std::min(3, s.collectiveTrials);
  for (int pass = 0; pass < passes; ++pass)
    for (PerSize &p : perSize)
      for (int k = pass; k < s.collectiveTrials; k += passes) {
        double alone = timeConcurrent(world, burst, p.reps, 1);
        double with = timeConcurrent(world, p.inStep, p.reps, 1);
        // The collective back to back: its ranks arrive together.
        double chained = timeConcurrent(world, p.op, p.reps, 1);
        if (with < 0 || chained < 0)
          return fail(llvm::Twine(planner::collectiveName(kind)) +
                      " failed while timing it");
        p.diffs.push_back(with - alone);
        p.backToBack.push_back(chained);
      }
  std::vector<double> chainedTimes;
  for (PerSize &p : perSize) {
    // At least the collective back to back (noise can make the
    // difference smaller than that).
    double chained = std::max(median(p.backToBack), 1e-12);
    chainedTimes.push_back(chained);
    times.push_back(std::max(median(p.diffs), chained));
  }
  auto [alpha, invBeta] = fitTwo(steps, volume, times);
  planner::Cluster::Link link;
  link.latency = alpha;
  // A vanishing slope (all latency): a very fast link rather than 0.
  link.bandwidth = invBeta > 0 ? 1.0 / invBeta : 1e15;
  // The times themselves, made non-decreasing in S (a larger message
  // never costs less; the trials' noise can say so).
  std::vector<double> monotone = planner::nonDecreasingTimes(times);
  std::vector<double> chainedMonotone =
      planner::nonDecreasingTimes(chainedTimes);
  for (size_t i = 0; i < sizesS.size(); ++i) {
    link.measured.push_back({sizesS[i], monotone[i]});
    link.measuredBackToBack.push_back({sizesS[i], chainedMonotone[i]});
  }
  link.measuredRanks = g;
  return link;
}

/// Every collective kind over all n ranks and over every group shape a
/// grid axis (or several nested ones) can have on n ranks; then the
/// intra- and inter-node links (all_reduce's, or with one rank send_recv's
/// self-exchange).
llvm::Error measureCollectives(const Session &s, planner::Cluster &c) {
  const mpi::Communicator &world = s.world;
  const int n = world.size();
  // Sizes as nccl-tests counts them.
  std::vector<int64_t> sizes =
      s.quick ? std::vector<int64_t>{1 << 10, 1 << 14, 1 << 18}
              : std::vector<int64_t>{1 << 8,  1 << 10, 1 << 12, 1 << 14,
                                     1 << 16, 1 << 18, 1 << 20, 1 << 22};
  const Collective kinds[] = {Collective::AllReduce, Collective::AllGather,
                              Collective::ReduceScatter, Collective::AllToAll,
                              Collective::SendRecv};
  // The compute segment before each timed collective: an MLP block on 32
  // tokens (measureLink).
  LayerSegment segment(32);
  std::function<bool()> burst = [&] { return segment(); };
  // The group shapes besides the world: size g >= 2 with stride s, g·s
  // dividing n.
  std::vector<std::pair<int, int>> shapes;
  for (int g = 2; g < n; ++g)
    for (int stride = 1; g * stride <= n; ++stride)
      if (n % (g * stride) == 0)
        shapes.push_back({g, stride});
  for (Collective kind : kinds) {
    if (n < 2 && kind != Collective::SendRecv)
      continue;
    llvm::StringRef name = planner::collectiveName(kind);
    auto link = measureLink(s, kind, world, sizes, burst);
    if (!link)
      return link.takeError();
    // The plain links are the α-β fit alone: they stand in for groups of
    // any size.
    planner::Cluster::Link line{link->bandwidth, link->latency, {}, 0};
    planner::Cluster::LinkPair pair{line, line, {}};
    if (s.log)
      *s.log << llvm::formatv("calibrate: {0,-14} alpha {1:F2} us, beta "
                              "{2:F3} GB/s\n",
                              name, link->latency * 1e6,
                              link->bandwidth * 1e-9);
    if (n >= 2)
      pair.groups.push_back({n, 1, *link});
    for (auto [g, stride] : shapes) {
      // Groups {b, b + stride, ..., b + (g-1)·stride}.
      int rank = world.rank();
      MPI_Comm sub = MPI_COMM_NULL;
      if (MPI_Comm_split(world.handle(),
                         (rank / (g * stride)) * stride + rank % stride, rank,
                         &sub) != MPI_SUCCESS)
        return fail("MPI_Comm_split for groups of " + llvm::Twine(g));
      mpi::Communicator group(sub);
      auto groupLink = measureLink(s, kind, group, sizes, burst);
      MPI_Comm_free(&sub);
      if (!groupLink)
        return groupLink.takeError();
      pair.groups.push_back({g, stride, *groupLink});
      if (s.log)
        *s.log << llvm::formatv("calibrate: {0,-14} alpha {1:F2} us, beta "
                                "{2:F3} GB/s on groups of {3} ranks {4} "
                                "apart\n",
                                name, groupLink->latency * 1e6,
                                groupLink->bandwidth * 1e-9, g, stride);
    }
    c.collectiveLinks[name.str()] = std::move(pair);
  }
  auto ar = c.collectiveLinks.find("all_reduce");
  if (ar != c.collectiveLinks.end()) {
    c.intraNode = c.interNode = *ar->second.intraNode;
  } else {
    // One rank: nothing to measure; send_recv's self-exchange stands in.
    c.intraNode = c.interNode = *c.collectiveLinks["send_recv"].intraNode;
  }
  return llvm::Error::success();
}

/// The memory per rank and where the figures come from.
void describeMachine(const Session &s, planner::Cluster &c) {
  const int n = s.world.size();
  double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
               static_cast<double>(sysconf(_SC_PAGE_SIZE));
  c.memoryBytes = ram > 0 ? ram / n : 1;
  c.source = "measured by tessera-run --calibrate" +
             std::string(s.quick ? " --calibrate-quick" : "") + " on " +
             hostName() + " at " + utcNow() + " with " + std::to_string(n) +
             " MPI ranks at once (OpenBLAS sgemm, cpu::add, "
             "runtime/collectives/mpi; medians of barrier-separated trials)";
}

} // namespace

llvm::Expected<planner::Cluster>
calibrate::measure(const mpi::Communicator &world, const Options &options) {
  const Session session(world, options);
  const int n = world.size();
  planner::Cluster c;
  c.name = "cpu:" + std::to_string(n);
  c.nodes = 1;
  c.devicesPerNode = n;
  // The steps run in this order on every rank (each is collective).
  for (auto step : {measureGemms, measureElementwise, measureKernels,
                    measureWaitingShare, measureCollectives})
    if (llvm::Error e = step(session, c))
      return std::move(e);
  describeMachine(session, c);
  return c;
}

llvm::Error calibrate::benchCollectives(const mpi::Communicator &world,
                                        const BenchOptions &options,
                                        const BenchOps *ops) {
  int n = world.size();
  bool root = world.rank() == 0;
  llvm::raw_ostream *out = root ? options.out : nullptr;
  // The CPU backend's MPI collectives on host buffers.
  std::unique_ptr<CollectiveBuffers> hostBuffers;
  BenchOps mpiOps{"MPI (the CPU backend's collectives)",
                  [&](Collective kind,
                      int64_t elems) -> llvm::Expected<std::function<bool()>> {
                    hostBuffers = std::make_unique<CollectiveBuffers>(elems, n);
                    return collectiveOp(kind, world, *hostBuffers);
                  }};
  if (!ops)
    ops = &mpiOps;
  if (out)
    *out << llvm::formatv(
        "# tessera-run --bench-collectives: {0} ranks, {8}, float32, sum\n"
        "# time: median over {1} trials of back-to-back calls, the slowest "
        "rank's; S as nccl-tests counts it\n"
        "# algbw = S / time; busbw = algbw * factor (nccl-tests): all_reduce "
        "2(n-1)/n, all_gather, reduce_scatter and all_to_all (n-1)/n, "
        "send_recv 1\n"
        "# {2,-15} {3,12} {4,10} {5,12} {6,12} {7,12}\n",
        n, options.trials, "collective", "size(B)", "count", "time(us)",
        "algbw(GB/s)", "busbw(GB/s)", ops->name);
  for (Collective kind :
       {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
        Collective::AllToAll, Collective::SendRecv}) {
    if (n < 2 && kind != Collective::SendRecv)
      continue;
    for (int64_t bytes = options.minBytes; bytes <= options.maxBytes;
         bytes *= options.stepFactor) {
      int64_t elems = std::max<int64_t>(bytes / 4, n);
      elems = (elems + n - 1) / n * n;
      llvm::Expected<std::function<bool()>> made = ops->make(kind, elems);
      if (!made) {
        // This transport cannot run `kind`: left out of the table.
        llvm::consumeError(made.takeError());
        break;
      }
      std::function<bool()> op = std::move(*made);
      int64_t reps = repsFor(world, op, options.secondsPerTrial);
      double t = timeConcurrent(world, op, reps, options.trials);
      if (t < 0)
        return fail(llvm::Twine(planner::collectiveName(kind)) + " of " +
                    llvm::Twine(elems * 4) + " bytes failed");
      double size = static_cast<double>(elems) * 4;
      double algbw = size / t;
      double busbw = algbw * planner::busBandwidthFactor(kind, n);
      if (out)
        *out << llvm::formatv("  {0,-15} {1,12} {2,10} {3,12:F2} {4,12:F3} "
                              "{5,12:F3}\n",
                              planner::collectiveName(kind),
                              static_cast<int64_t>(size), elems, t * 1e6,
                              algbw * 1e-9, busbw * 1e-9);
      if (options.stepFactor < 2)
        break;
    }
  }
  return llvm::Error::success();
}

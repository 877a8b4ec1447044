//===- CpuBackend.cpp - the "cpu" backend of the executor -----------------===//
//
// One binder per kernel family, each turning a validated KernelDesc into a
// closure that only calls the CPU kernel (the checks and the attribute
// decoding happened once, in exec::decodeKernel). The binders sit in a
// table indexed by KernelKind, built once; the kinds with a binder are what
// the registry lists for "cpu".
//
//===----------------------------------------------------------------------===//

#include "runtime/backends/cpu/CpuBackend.h"

#include "runtime/backends/cpu/Attention.h"
#include "runtime/backends/cpu/CpuKernels.h"
#include "runtime/collectives/mpi/Watchdog.h"

#include "dialects/tsrt/AttentionWorkspace.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;
using llvm::ArrayRef;
using llvm::StringRef;

namespace {

using In = ArrayRef<const Tensor *>;
using Out = llvm::MutableArrayRef<Tensor>;

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

#define RETURN_IF_ERROR(expr)                                                  \
  do {                                                                         \
    if (llvm::Error e__ = (expr))                                              \
      return e__;                                                              \
  } while (false)

/// A kernel with `grid_axes` needs the executor's communicator for them.
llvm::Error checkComm(const ExecContext &ctx, int comm) {
  if (comm < 0 || comm >= static_cast<int>(ctx.comms.size()))
    return fail(llvm::formatv("needs communicator #{0} for its grid_axes but "
                              "the executor provides {1}",
                              comm, ctx.comms.size()));
  return llvm::Error::success();
}

cpu::GeluApproximate geluOf(const KernelDesc &d) {
  return d.get<GeluAttrs>().approximate == GeluApproximate::Tanh
             ? cpu::GeluApproximate::Tanh
             : cpu::GeluApproximate::None;
}

/// A closure calling `f(in..., out[0])` for a kernel that cannot fail.
template <typename F> KernelFn noFail(F f) {
  return [f](const ExecContext &, In in, Out out) {
    f(in, out);
    return llvm::Error::success();
  };
}

/// Binds `inst` to `f(in, out)`, a kernel that cannot fail.
template <typename F> llvm::Error bindNoFail(Instruction &inst, F f) {
  inst.fn = noFail(std::move(f));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Binders
//===----------------------------------------------------------------------===//

using BinaryFn = void (*)(const Tensor &, const Tensor &, Tensor &);
using UnaryFn = void (*)(const Tensor &, Tensor &);

llvm::Error bindBinary(const KernelDesc &d, Instruction &inst) {
  static const std::pair<KernelKind, BinaryFn> kernels[] = {
      {KernelKind::Add, &cpu::add}, {KernelKind::Sub, &cpu::sub},
      {KernelKind::Mul, &cpu::mul}, {KernelKind::Div, &cpu::div},
      {KernelKind::Pow, &cpu::pow}, {KernelKind::Max, &cpu::max}};
  std::optional<BinaryFn> f = lookupKind(kernels, d.kind);
  if (!f)
    return fail("unknown kernel");
  return bindNoFail(inst,
                    [f = *f](In in, Out out) { f(*in[0], *in[1], out[0]); });
}

llvm::Error bindUnary(const KernelDesc &d, Instruction &inst) {
  static const std::pair<KernelKind, UnaryFn> kernels[] = {
      {KernelKind::Neg, &cpu::neg},         {KernelKind::Exp, &cpu::exp},
      {KernelKind::Log, &cpu::log},         {KernelKind::Sqrt, &cpu::sqrt},
      {KernelKind::Rsqrt, &cpu::rsqrt},     {KernelKind::Tanh, &cpu::tanh},
      {KernelKind::Erf, &cpu::erf},         {KernelKind::Relu, &cpu::relu},
      {KernelKind::Sigmoid, &cpu::sigmoid}, {KernelKind::Silu, &cpu::silu}};
  std::optional<UnaryFn> f = lookupKind(kernels, d.kind);
  if (!f)
    return fail("unknown kernel");
  return bindNoFail(inst, [f = *f](In in, Out out) { f(*in[0], out[0]); });
}

llvm::Error bindGelu(const KernelDesc &d, Instruction &inst) {
  cpu::GeluApproximate approx = geluOf(d);
  return bindNoFail(
      inst, [approx](In in, Out out) { cpu::gelu(*in[0], approx, out[0]); });
}

/// dropout: the step is read from operand 1 at run time (an integer-valued
/// f32 scalar); the layout walk from this rank's coordinates and the
/// running micro-batch.
llvm::Error bindDropout(const KernelDesc &d, Instruction &inst) {
  DropoutAttrs a = d.get<DropoutAttrs>();
  inst.fn = [a](const ExecContext &ctx, In in, Out out) -> llvm::Error {
    float step = in[1]->data<float>()[0];
    if (!(step >= 0 && step < 16777216.0f) || step != std::floor(step))
      return fail(
          llvm::formatv("step {0} is not an integer in [0, 2^24)", step));
    tessera::random::DropoutKey key{a.seed, static_cast<uint32_t>(step),
                                    a.opId};
    std::vector<tessera::random::DropoutFactor> factors =
        dropoutFactors(a, ctx.coords, ctx.microBatch);
    cpu::dropout(*in[0], key, a.threshold, a.scale, factors, out[0]);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error bindEqual(const KernelDesc &, Instruction &inst) {
  return bindNoFail(inst,
                    [](In in, Out out) { cpu::equal(*in[0], *in[1], out[0]); });
}

llvm::Error bindSelect(const KernelDesc &, Instruction &inst) {
  return bindNoFail(inst, [](In in, Out out) {
    cpu::select(*in[0], *in[1], *in[2], out[0]);
  });
}

llvm::Error bindConvert(const KernelDesc &, Instruction &inst) {
  return bindNoFail(inst, [](In in, Out out) { cpu::convert(*in[0], out[0]); });
}

llvm::Error bindReduce(const KernelDesc &d, Instruction &inst) {
  using ReduceFn = void (*)(const Tensor &, ArrayRef<int64_t>, bool, Tensor &);
  ReduceFn fn = d.kind == KernelKind::ReduceSum    ? &cpu::reduceSum
                : d.kind == KernelKind::ReduceMean ? &cpu::reduceMean
                                                   : &cpu::reduceMax;
  const ReduceAttrs &a = d.get<ReduceAttrs>();
  return bindNoFail(inst,
                    [fn, axes = a.axes, keep = a.keepDim](In in, Out out) {
                      fn(*in[0], axes, keep, out[0]);
                    });
}

llvm::Error bindSumSquares(const KernelDesc &, Instruction &inst) {
  return bindNoFail(inst,
                    [](In in, Out out) { cpu::sumSquares(*in[0], out[0]); });
}

llvm::Error bindMatmul(const KernelDesc &d, Instruction &inst) {
  const MatmulAttrs &a = d.get<MatmulAttrs>();
  return bindNoFail(inst,
                    [ta = a.transposeLhs, tb = a.transposeRhs](In in, Out out) {
                      cpu::matmul(*in[0], *in[1], ta, tb, out[0]);
                    });
}

llvm::Error bindReshape(const KernelDesc &d, Instruction &inst) {
  std::vector<int64_t> shape = d.results[0].shape;
  // A view: shares the operand's storage (kernels never write operands).
  inst.allocateResults = false;
  return bindNoFail(
      inst, [shape](In in, Out out) { out[0] = in[0]->reshape(shape); });
}

llvm::Error bindTranspose(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(
      inst, [perm = d.get<TransposeAttrs>().permutation](In in, Out out) {
        cpu::transpose(*in[0], perm, out[0]);
      });
}

llvm::Error bindSlice(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [a = d.get<SliceAttrs>()](In in, Out out) {
    cpu::slice(*in[0], a.starts, a.limits, a.strides, out[0]);
  });
}

llvm::Error bindConcat(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [axis = d.get<AxisAttrs>().axis](In in, Out out) {
    cpu::concat(in, axis, out[0]);
  });
}

llvm::Error bindBroadcast(const KernelDesc &, Instruction &inst) {
  return bindNoFail(inst,
                    [](In in, Out out) { cpu::broadcast(*in[0], out[0]); });
}

/// gather (table, ids) and gather_grad (ids, dy). Vocab-parallel (a
/// communicator): this rank's rows start at comm rank · V_local, V_local the
/// rows of the table (gather) or of the gradient (gather_grad).
llvm::Error bindGather(const KernelDesc &d, Instruction &inst) {
  bool grad = d.kind == KernelKind::GatherGrad;
  if (int comm = d.commIndex; comm >= 0) {
    auto masked = grad ? &cpu::gatherGradMasked : &cpu::gatherMasked;
    inst.fn = [comm, grad, masked](const ExecContext &ctx, In in,
                                   Out out) -> llvm::Error {
      RETURN_IF_ERROR(checkComm(ctx, comm));
      const mpi::Communicator &c = ctx.comms[comm];
      int64_t local = grad ? out[0].dim(0) : in[0]->dim(0);
      return masked(*in[0], *in[1], c.rank() * local, c.size() * local, out[0]);
    };
    return llvm::Error::success();
  }
  auto plain = grad ? &cpu::gatherGrad : &cpu::gather;
  inst.fn = [plain](const ExecContext &, In in, Out out) {
    return plain(*in[0], *in[1], out[0]);
  };
  return llvm::Error::success();
}

/// layer_norm (x, scale, bias) and rms_norm (x, scale), and their grads
/// (x, scale, dy).
llvm::Error bindNorm(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [a = d.get<NormAttrs>()](In in, Out out) {
    if (a.rms && a.grad)
      cpu::rmsNormGrad(*in[0], *in[1], *in[2], a.axis, a.epsilon, out[0],
                       out[1]);
    else if (a.rms)
      cpu::rmsNorm(*in[0], *in[1], a.axis, a.epsilon, out[0]);
    else if (a.grad)
      cpu::layerNormGrad(*in[0], *in[1], *in[2], a.axis, a.epsilon, out[0],
                         out[1], out[2]);
    else
      cpu::layerNorm(*in[0], *in[1], *in[2], a.axis, a.epsilon, out[0]);
  });
}

/// add_layer_norm / add_rms_norm (x, r, scale[, bias]) -> (x + r, y) and
/// layer_norm_grad_add / rms_norm_grad_add (x, scale, dy, addend) ->
/// (dx + addend, dscale[, dbias]).
llvm::Error bindFusedNorm(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [a = d.get<NormAttrs>()](In in, Out out) {
    if (a.rms && a.grad)
      cpu::rmsNormGradAdd(*in[0], *in[1], *in[2], *in[3], a.axis, a.epsilon,
                          out[0], out[1]);
    else if (a.rms)
      cpu::addRmsNorm(*in[0], *in[1], *in[2], a.axis, a.epsilon, out[0],
                      out[1]);
    else if (a.grad)
      cpu::layerNormGradAdd(*in[0], *in[1], *in[2], *in[3], a.axis, a.epsilon,
                            out[0], out[1], out[2]);
    else
      cpu::addLayerNorm(*in[0], *in[1], *in[2], *in[3], a.axis, a.epsilon,
                        out[0], out[1]);
  });
}

llvm::Error bindSoftmax(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [axis = d.get<AxisAttrs>().axis](In in, Out out) {
    cpu::softmax(*in[0], axis, out[0]);
  });
}

llvm::Error bindSoftmaxGrad(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [axis = d.get<AxisAttrs>().axis](In in, Out out) {
    cpu::softmaxGrad(*in[0], *in[1], axis, out[0]);
  });
}

llvm::Error bindReluGrad(const KernelDesc &, Instruction &inst) {
  return bindNoFail(
      inst, [](In in, Out out) { cpu::reluGrad(*in[0], *in[1], out[0]); });
}

llvm::Error bindSiluGrad(const KernelDesc &, Instruction &inst) {
  return bindNoFail(
      inst, [](In in, Out out) { cpu::siluGrad(*in[0], *in[1], out[0]); });
}

llvm::Error bindGeluGrad(const KernelDesc &d, Instruction &inst) {
  cpu::GeluApproximate approx = geluOf(d);
  return bindNoFail(inst, [approx](In in, Out out) {
    cpu::geluGrad(*in[0], *in[1], approx, out[0]);
  });
}

/// MPI tag of ring attention's K/V rotations (on the ring's own
/// communicator, so it cannot match any other message).
constexpr int kRingAttentionTag = 7100;

/// ring attention's `rotate`: sends buf[0, n) to the next rank of the ring
/// and overwrites it with the previous rank's (MPI_Sendrecv_replace), and
/// records the n·4 bytes sent as Send traffic. The first MPI error is kept
/// in `err` (later rotations are skipped) and named after `kernel`.
std::function<void(float *, int64_t)> ringRotate(const ExecContext &ctx,
                                                 const mpi::Communicator &c,
                                                 StringRef kernel,
                                                 std::string &err) {
  int size = c.size(), rank = c.rank();
  int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
  return [&ctx, &c, kernel, &err, next, prev](float *buf, int64_t n) {
    if (!err.empty())
      return;
    if (n > std::numeric_limits<int>::max()) {
      err = llvm::formatv("kernel \"{0}\": ring block of {1} floats exceeds "
                          "MPI's int count",
                          kernel, n)
                .str();
      return;
    }
    mpi::watchdog::Guard guard("sendrecv of ring attention", c.size());
    int rc = MPI_Sendrecv_replace(buf, static_cast<int>(n), MPI_FLOAT, next,
                                  kRingAttentionTag, prev, kRingAttentionTag,
                                  c.handle(), MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      err = llvm::formatv("kernel \"{0}\": MPI_Sendrecv_replace of the ring "
                          "block failed: {1}",
                          kernel, StringRef(msg, len))
                .str();
      return;
    }
    if (ctx.traffic)
      ctx.traffic->record(mpi::CollectiveKind::Send, static_cast<double>(n) * 4,
                          c.size());
  };
}

/// attention (q, k, v [, mask]) -> (o, lse) and attention_grad (q, k, v, o,
/// lse, do [, mask]) -> (dq, dk, dv) on Attention.h's kernels. The kernel's
/// scratch is a Tensor allocated per call, so the heap accounting sees it;
/// tsr-plan-memory predicts it as the instruction's workspace
/// (MemoryPlan.cpp, both from tsrt::attentionWorkspaceElems).
///
/// Ring attention: with grid_axes (`d.commIndex`) the operands are this
/// rank's stripe of a striped sequence and the kernel is
/// ringAttentionForward/Backward over the communicator, whose size must be
/// `ring_size`.
llvm::Error bindAttention(const KernelDesc &desc, Instruction &inst) {
  bool grad = desc.kind == KernelKind::AttentionGrad;
  const AttentionAttrs &a = desc.get<AttentionAttrs>();
  cpu::AttentionDims d{a.batch, a.sq, a.sk, a.dh, a.dv, a.group};
  bool hasMask = a.hasMask, causal = a.causal;
  float scale = a.scale;
  int64_t ringSize = a.ringSize;
  int comm = desc.commIndex;
  bool ring = comm >= 0;
  int64_t wsElems = ring ? cpu::ringAttentionWorkspaceElems(d, grad)
                         : cpu::attentionWorkspaceElems(d, grad);
  // The score-block part of the workspace, reported to ctx.stats.
  int64_t scoresBytes =
      tessera::tsrt::attentionBlockWorkspaceElems(d.sq, d.sk, grad) * 4;
  auto workspace = [wsElems] {
    return wsElems > 0 ? Tensor::empty(DType::F32, {wsElems}) : Tensor();
  };
  auto record = [scoresBytes](const ExecContext &ctx) {
    if (ctx.stats)
      ctx.stats->attentionScoresBytes =
          std::max(ctx.stats->attentionScoresBytes, scoresBytes);
  };
  auto wsData = [](Tensor &t) {
    return t.isNull() ? nullptr : t.data<float>();
  };
  // Ring attention: an instruction that checks its communicator against
  // ring_size, records the score block and runs `kernel(rank, rotate, in,
  // out, workspace)`; a failed K/V rotation becomes its error.
  std::string kernelName = desc.name().str();
  using Rotate = std::function<void(float *, int64_t)>;
  auto ringInstruction = [=](auto kernel) {
    return [=](const ExecContext &ctx, In in, Out out) -> llvm::Error {
      RETURN_IF_ERROR(checkComm(ctx, comm));
      const mpi::Communicator &c = ctx.comms[comm];
      if (c.size() != ringSize)
        return fail(llvm::formatv("ring_size {0} does not match the {1} ranks "
                                  "of its communicator",
                                  ringSize, c.size()));
      record(ctx);
      Tensor ws = workspace();
      std::string err;
      Rotate rotate = ringRotate(ctx, c, kernelName, err);
      kernel(c.rank(), rotate, in, out, wsData(ws));
      return err.empty() ? llvm::Error::success() : fail(err);
    };
  };
  if (!grad) {
    if (ring) {
      inst.fn = ringInstruction([=](int rank, const Rotate &rotate, In in,
                                    Out out, float *ws) {
        cpu::ringAttentionForward(d, rank, ringSize, in[0]->data<float>(),
                                  in[1]->data<float>(), in[2]->data<float>(),
                                  scale, causal, rotate, out[0].data<float>(),
                                  out[1].data<float>(), ws);
      });
      return llvm::Error::success();
    }
    inst.fn = [=](const ExecContext &ctx, In in, Out out) {
      record(ctx);
      Tensor ws = workspace();
      cpu::attentionForward(
          d, in[0]->data<float>(), in[1]->data<float>(), in[2]->data<float>(),
          hasMask ? in[3]->data<float>() : nullptr, scale, causal,
          out[0].data<float>(), out[1].data<float>(), wsData(ws));
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (ring) {
    inst.fn = ringInstruction(
        [=](int rank, const Rotate &rotate, In in, Out out, float *ws) {
          cpu::ringAttentionBackward(
              d, rank, ringSize, in[0]->data<float>(), in[1]->data<float>(),
              in[2]->data<float>(), in[3]->data<float>(), in[4]->data<float>(),
              in[5]->data<float>(), scale, causal, rotate, out[0].data<float>(),
              out[1].data<float>(), out[2].data<float>(), ws);
        });
    return llvm::Error::success();
  }
  inst.fn = [=](const ExecContext &ctx, In in, Out out) {
    record(ctx);
    Tensor ws = workspace();
    cpu::attentionBackward(d, in[0]->data<float>(), in[1]->data<float>(),
                           in[2]->data<float>(), in[3]->data<float>(),
                           in[4]->data<float>(), in[5]->data<float>(),
                           hasMask ? in[6]->data<float>() : nullptr, scale,
                           causal, out[0].data<float>(), out[1].data<float>(),
                           out[2].data<float>(), wsData(ws));
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error bindCrossEntropy(const KernelDesc &desc, Instruction &inst) {
  bool grad = desc.kind == KernelKind::CrossEntropyGrad;
  if (int comm = desc.commIndex; comm >= 0) {
    // Megatron-LM's vocab-parallel cross-entropy: logits hold columns
    // [rank · V_local, (rank + 1) · V_local); the row max is all-reduced
    // (MAX), then the sums of exponentials and target logits (SUM), in a
    // scratch tensor of N · k doubles (tsrt::vocabParallelScratchPerRow,
    // counted as workspace by the memory plan).
    int64_t k = desc.get<CrossEntropyAttrs>().scratchPerRow;
    inst.fn = [comm, grad, k](const ExecContext &ctx, In in,
                              Out out) -> llvm::Error {
      RETURN_IF_ERROR(checkComm(ctx, comm));
      const mpi::Communicator &c = ctx.comms[comm];
      const Tensor &logits = *in[0];
      int64_t n = logits.dim(0), local = logits.dim(1);
      Tensor scratch = Tensor::empty(DType::I64, {k * n}); // f64 storage
      double *rowMax = static_cast<double *>(scratch.raw());
      double *sumExp = rowMax + n, *target = grad ? nullptr : rowMax + 2 * n;
      cpu::crossEntropyRowMax(logits, rowMax);
      RETURN_IF_ERROR(
          mpi::allReduceF64(rowMax, n, mpi::ReduceOp::Max, c, ctx.traffic));
      RETURN_IF_ERROR(cpu::crossEntropyRowSums(logits, *in[1], c.rank() * local,
                                               c.size() * local, rowMax, sumExp,
                                               target));
      RETURN_IF_ERROR(mpi::allReduceF64(sumExp, grad ? n : 2 * n,
                                        mpi::ReduceOp::Sum, c, ctx.traffic));
      if (grad)
        cpu::crossEntropyGradFromStats(logits, *in[1], c.rank() * local, rowMax,
                                       sumExp, *in[2], out[0]);
      else
        cpu::crossEntropyFromStats(n, rowMax, sumExp, target, out[0]);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (!grad) {
    inst.fn = [](const ExecContext &, In in, Out out) {
      return cpu::crossEntropy(*in[0], *in[1], out[0]);
    };
    return llvm::Error::success();
  }
  inst.fn = [](const ExecContext &, In in, Out out) {
    return cpu::crossEntropyGrad(*in[0], *in[1], *in[2], out[0]);
  };
  return llvm::Error::success();
}

/// The learning rate operand: an f32 host scalar (the "hyper" argument
/// "lr", read at every step).
double learningRate(const Tensor &lr) {
  return static_cast<double>(lr.data<float>()[0]);
}

llvm::Error bindSgdUpdate(const KernelDesc &d, Instruction &inst) {
  const SgdAttrs &a = d.get<SgdAttrs>();
  return bindNoFail(inst, [wd = a.weightDecay](In in, Out out) {
    cpu::sgdUpdate(*in[0], *in[1], learningRate(*in[2]), wd, out[0]);
  });
}

llvm::Error bindAdamwUpdate(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [a = d.get<AdamwAttrs>()](In in, Out out) {
    cpu::adamwUpdate(*in[0], *in[1], *in[2], *in[3], *in[4],
                     learningRate(*in[5]), a.beta1, a.beta2, a.eps,
                     a.weightDecay, out[0], out[1], out[2]);
  });
}

cpu::Activation activationOf(const LinearAttrs &a) {
  switch (a.activation) {
  case Activation::None:
    return cpu::Activation::None;
  case Activation::Gelu:
    return cpu::Activation::Gelu;
  case Activation::GeluTanh:
    return cpu::Activation::GeluTanh;
  case Activation::Relu:
    return cpu::Activation::Relu;
  case Activation::Silu:
    return cpu::Activation::Silu;
  }
  return cpu::Activation::None;
}

/// linear (lhs, rhs, bias) -> result [, preactivation].
llvm::Error bindLinear(const KernelDesc &d, Instruction &inst) {
  const LinearAttrs &a = d.get<LinearAttrs>();
  return bindNoFail(inst, [a, act = activationOf(a)](In in, Out out) {
    cpu::linear(*in[0], *in[1], *in[2], a.transposeLhs, a.transposeRhs, act,
                out[0], a.preactivation ? &out[1] : nullptr);
  });
}

/// bias_activation_grad (x, dy) -> (dx, dbias).
llvm::Error bindBiasActivationGrad(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(
      inst, [act = activationOf(d.get<LinearAttrs>())](In in, Out out) {
        cpu::biasActivationGrad(*in[0], *in[1], act, out[0], out[1]);
      });
}

llvm::Error bindFusedElementwise(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [p = d.get<FusedElementwiseAttrs>()](In in, Out out) {
    cpu::fusedElementwise(p, in, out);
  });
}

llvm::Error bindMultiSgdUpdate(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [wd = d.get<SgdAttrs>().weightDecay](In in, Out out) {
    cpu::sgdUpdateMulti(in.drop_back(), learningRate(*in.back()), wd, out);
  });
}

llvm::Error bindMultiAdamwUpdate(const KernelDesc &d, Instruction &inst) {
  return bindNoFail(inst, [a = d.get<AdamwAttrs>()](In in, Out out) {
    cpu::adamwUpdateMulti(in.drop_back(2), *in[in.size() - 2],
                          learningRate(*in.back()), a.beta1, a.beta2, a.eps,
                          a.weightDecay, out);
  });
}

//===----------------------------------------------------------------------===//
// The dispatch table
//===----------------------------------------------------------------------===//

using BindFn = llvm::Error (*)(const KernelDesc &, Instruction &);
using BindTable = std::array<BindFn, kNumKernelKinds>;

/// The binder of every kind, built once.
const BindTable &binders() {
  static const BindTable table = makeKindTable<BindFn>([](auto set) {
    using K = KernelKind;
    set({K::Add, K::Sub, K::Mul, K::Div, K::Pow, K::Max}, &bindBinary);
    set({K::Neg, K::Exp, K::Log, K::Sqrt, K::Rsqrt, K::Tanh, K::Erf, K::Relu,
         K::Sigmoid, K::Silu},
        &bindUnary);
    set({K::Gelu}, &bindGelu);
    set({K::Equal}, &bindEqual);
    set({K::Select}, &bindSelect);
    set({K::Convert}, &bindConvert);
    set({K::ReduceSum, K::ReduceMean, K::ReduceMax}, &bindReduce);
    set({K::SumSquares}, &bindSumSquares);
    set({K::Matmul}, &bindMatmul);
    set({K::Reshape}, &bindReshape);
    set({K::Transpose}, &bindTranspose);
    set({K::Slice}, &bindSlice);
    set({K::Concat}, &bindConcat);
    set({K::Broadcast}, &bindBroadcast);
    set({K::Gather, K::GatherGrad}, &bindGather);
    set({K::LayerNorm, K::LayerNormGrad, K::RmsNorm, K::RmsNormGrad},
        &bindNorm);
    set({K::Attention, K::AttentionGrad}, &bindAttention);
    set({K::Softmax}, &bindSoftmax);
    set({K::SoftmaxGrad}, &bindSoftmaxGrad);
    set({K::ReluGrad}, &bindReluGrad);
    set({K::GeluGrad}, &bindGeluGrad);
    set({K::SiluGrad}, &bindSiluGrad);
    set({K::CrossEntropy, K::CrossEntropyGrad}, &bindCrossEntropy);
    set({K::SgdUpdate}, &bindSgdUpdate);
    set({K::AdamwUpdate}, &bindAdamwUpdate);
    set({K::MultiSgdUpdate}, &bindMultiSgdUpdate);
    set({K::MultiAdamwUpdate}, &bindMultiAdamwUpdate);
    set({K::Dropout}, &bindDropout);
    set({K::AddLayerNorm, K::AddRmsNorm, K::LayerNormGradAdd,
         K::RmsNormGradAdd},
        &bindFusedNorm);
    set({K::Linear}, &bindLinear);
    set({K::BiasActivationGrad}, &bindBiasActivationGrad);

    set({K::FusedElementwise}, &bindFusedElementwise);
  });
  return table;
}

/// The f32 kernel of a widened KernelDesc (bf16 and f16 alike), wrapped:
/// each bf16/f16 operand is converted to a temporary f32 tensor (exact),
/// the f32 kernel runs (so every kernel accumulates in f32: matmul,
/// reductions, layer-norm statistics, softmax, cross-entropy), and each
/// bf16/f16 result is rounded from a temporary f32 tensor to nearest even
/// (f16 overflows to inf). f32/i64/i1 operands and results pass through
/// unchanged (cross_entropy's f32 loss).
///
/// Memory: the temporaries are heap tensors that live only during the
/// instruction, so the extra peak over the memory plan is at most the
/// largest, over adapted instructions, of the f32 bytes of its bf16/f16
/// operands and results; a static memory plan can reserve that as one
/// per-program workspace.
llvm::Error bindWidened(const KernelDesc &desc, Instruction &inst) {
  WidenedTypes w = widenFloat16(desc.operands, desc.results);
  std::vector<bool> narrowIn = w.narrowIn, narrowOut = w.narrowOut;
  Instruction inner;
  inner.commIndex = inst.commIndex; // kernels that communicate themselves
  inner.commSize = inst.commSize;
  BindFn bind = binders()[kernelIndex(desc.kind)];
  RETURN_IF_ERROR(bind(withWidenedTypes(desc, w), inner));
  if (!inner.allocateResults)
    return fail("kernel has no bf16/f16 form");
  KernelFn fn = std::move(inner.fn);
  inst.allocateResults = true;
  inst.fn = [fn, narrowIn, narrowOut](const ExecContext &ctx, In in,
                                      Out out) -> llvm::Error {
    std::vector<Tensor> wideIn(in.size());
    std::vector<const Tensor *> inPtrs(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      inPtrs[i] = in[i];
      if (!narrowIn[i])
        continue;
      wideIn[i] = Tensor::empty(DType::F32, in[i]->shape());
      cpu::convert(*in[i], wideIn[i]);
      inPtrs[i] = &wideIn[i];
    }
    std::vector<Tensor> wideOut(out.size());
    for (size_t i = 0; i < out.size(); ++i)
      wideOut[i] =
          narrowOut[i] ? Tensor::empty(DType::F32, out[i].shape()) : out[i];
    RETURN_IF_ERROR(fn(ctx, inPtrs, wideOut));
    for (size_t i = 0; i < out.size(); ++i)
      if (narrowOut[i])
        cpu::convert(wideOut[i], out[i]);
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

/// Host memory, the CPU kernels, MPI collectives.
class CpuBackend final : public Backend {
public:
  StringRef name() const override { return "cpu"; }
  bool hostMemory() const override { return true; }
  llvm::Expected<Tensor> allocate(DType dtype,
                                  std::vector<int64_t> shape) override {
    return Tensor::empty(dtype, std::move(shape));
  }
  llvm::Expected<Arena> allocateArena(int64_t bytes) override {
    return Arena::allocate(bytes);
  }
  llvm::Expected<Tensor> upload(const Tensor &host) override { return host; }
  llvm::Expected<Tensor> download(const Tensor &t) override { return t; }
  llvm::Error copy(const Tensor &src, Tensor &dst) override {
    std::memcpy(dst.raw(), src.raw(), src.bytes());
    return llvm::Error::success();
  }
  llvm::Error bindKernel(const KernelDesc &kernel, Instruction &inst) override {
    return cpu::bindKernel(kernel, inst);
  }
  llvm::Error bindCollective(const CollectiveSpec &spec, const TensorType &,
                             const TensorType &, Instruction &inst) override {
    return cpu::bindCollective(spec, inst);
  }
  llvm::Error supportsCommunication(StringRef) const override {
    return llvm::Error::success();
  }
  llvm::Error finishStep() override { return llvm::Error::success(); }
};

} // namespace

llvm::Error cpu::bindKernel(const KernelDesc &kernel, Instruction &inst) {
  inst.allocateResults = true;
  BindFn bind = binders()[kernelIndex(kernel.kind)];
  if (!bind)
    return fail("the cpu backend has no kernel \"" + kernel.name() + "\"");
  if (kernel.widened)
    return bindWidened(kernel, inst);
  return bind(kernel, inst);
}

llvm::Error cpu::bindCollective(const CollectiveSpec &spec, Instruction &inst) {
  int commIndex = spec.commIndex;
  int64_t dim = spec.dim, dim2 = spec.dim2;
  inst.allocateResults = true;
  switch (spec.op) {
  case CollectiveOp::AllReduce: {
    mpi::ReduceOp rop = spec.max ? mpi::ReduceOp::Max : mpi::ReduceOp::Sum;
    inst.fn = [commIndex, rop](const ExecContext &ctx, In in, Out out) {
      std::memcpy(out[0].raw(), in[0]->raw(), in[0]->bytes());
      return mpi::allReduce(out[0], rop, ctx.comms[commIndex], ctx.traffic);
    };
    return llvm::Error::success();
  }
  case CollectiveOp::AllGather:
    inst.fn = [commIndex, dim](const ExecContext &ctx, In in, Out out) {
      return mpi::allGather(*in[0], dim, ctx.comms[commIndex], out[0],
                            ctx.traffic);
    };
    return llvm::Error::success();
  case CollectiveOp::ReduceScatter:
    inst.fn = [commIndex, dim](const ExecContext &ctx, In in, Out out) {
      return mpi::reduceScatter(*in[0], dim, ctx.comms[commIndex], out[0],
                                ctx.traffic);
    };
    return llvm::Error::success();
  case CollectiveOp::AllSlice:
    // This rank's block along `dim`: a local copy, no communication.
    inst.fn = [commIndex, dim](const ExecContext &ctx, In in, Out out) {
      const Tensor &src = *in[0];
      const std::vector<int64_t> &shape = src.shape();
      int64_t outer = 1, inner = src.numel() ? src.bytes() / src.numel() : 0;
      for (int64_t d = 0; d < dim; ++d)
        outer *= shape[d];
      for (size_t d = dim + 1; d < shape.size(); ++d)
        inner *= shape[d];
      int64_t block = out[0].shape()[dim] * inner;
      int64_t offset = ctx.comms[commIndex].rank() * block;
      const char *from = static_cast<const char *>(src.raw());
      char *to = static_cast<char *>(out[0].raw());
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(to + o * block, from + o * shape[dim] * inner + offset,
                    block);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  case CollectiveOp::AllToAll:
    inst.fn = [commIndex, dim, dim2](const ExecContext &ctx, In in, Out out) {
      return mpi::allToAll(*in[0], dim, dim2, ctx.comms[commIndex], out[0],
                           ctx.traffic);
    };
    return llvm::Error::success();
  }
  return fail("unknown collective");
}

void cpu::registerCpuBackend(BackendRegistry &registry) {
  BackendInfo info;
  info.name = "cpu";
  info.create = [](const BackendOptions &options)
      -> llvm::Expected<std::unique_ptr<Backend>> {
    if (options.collectives != Transport::Mpi)
      return fail("--collectives nccl needs --backend cuda (the cpu backend's "
                  "collectives are MPI on host memory: only --collectives mpi "
                  "is valid with it)");
    return std::make_unique<CpuBackend>();
  };
  for (size_t i = 0; i < kNumKernelKinds; ++i)
    if (binders()[i])
      info.kernels.push_back(static_cast<KernelKind>(i));
  registry.add(std::move(info));
}

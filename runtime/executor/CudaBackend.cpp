//===- CudaBackend.cpp - the CUDA backend of the executor -----------------===//
//
// Device memory of one GPU, one compute stream on which every kernel is
// queued in program order, and the binding of each tsrt kernel to a CUDA
// kernel of runtime/backends/cuda:
//  - tensors come from the stream-ordered pool (cudaMallocAsync /
//    cudaFreeAsync on the compute stream, the pool keeping what it frees),
//    so a step allocates without synchronising and can be captured;
//  - kernels that need scratch share one device buffer, sized at bind time
//    to the largest need and allocated on first use (kernels run in order
//    on one stream, so one buffer serves them all);
//  - kernels that find data-dependent errors (ids, labels out of range)
//    record them in their own DeviceStatus slot; finishStep reads the slots
//    once per step and names the op of the first one set;
//  - a kernel whose CUDA form does not take a 16-bit operand is run in f32
//    between device conversions (the CPU backend's widening adapter).
//
// Program::compile has already validated every kernel (Kernels.cpp), so
// the binders only decode attributes.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Backend.h"

#include "dialects/tsrt/TsrtDialect.h"
#include "runtime/backends/cuda/CudaBlas.h"
#include "runtime/backends/cuda/CudaRuntime.h"
#include "runtime/backends/cuda/ElementwiseKernels.h"
#include "runtime/backends/cuda/FlashAttention.h"
#include "runtime/backends/cuda/NNKernels.h"
#include "runtime/executor/Kernels.h"
#include "runtime/executor/Program.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

/// A launch's cudaError_t as an error naming the kernel.
llvm::Error launched(cudaError_t err, StringRef kernel) {
  return cuda::check(err, "CUDA kernel \"" + kernel + "\"");
}

//===----------------------------------------------------------------------===//
// Attributes (already validated by resolveKernel)
//===----------------------------------------------------------------------===//

bool boolAttr(mlir::DictionaryAttr d, StringRef name, bool dflt) {
  mlir::Attribute a = d ? d.get(name) : mlir::Attribute();
  if (auto b = llvm::dyn_cast_or_null<mlir::BoolAttr>(a))
    return b.getValue();
  if (auto i = llvm::dyn_cast_or_null<mlir::IntegerAttr>(a))
    return i.getValue().getBoolValue();
  return dflt;
}

int64_t intAttr(mlir::DictionaryAttr d, StringRef name, int64_t dflt = 0) {
  mlir::Attribute a = d ? d.get(name) : mlir::Attribute();
  if (auto i = llvm::dyn_cast_or_null<mlir::IntegerAttr>(a))
    return i.getValue().getSExtValue();
  return dflt;
}

double floatAttr(mlir::DictionaryAttr d, StringRef name) {
  mlir::Attribute a = d ? d.get(name) : mlir::Attribute();
  if (auto f = llvm::dyn_cast_or_null<mlir::FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto i = llvm::dyn_cast_or_null<mlir::IntegerAttr>(a))
    return static_cast<double>(i.getValue().getSExtValue());
  return 0;
}

std::vector<int64_t> intArrayAttr(mlir::DictionaryAttr d, StringRef name) {
  std::vector<int64_t> out;
  mlir::Attribute a = d ? d.get(name) : mlir::Attribute();
  if (auto arr = llvm::dyn_cast_or_null<mlir::DenseI64ArrayAttr>(a))
    return std::vector<int64_t>(arr.asArrayRef().begin(),
                                arr.asArrayRef().end());
  if (auto arr = llvm::dyn_cast_or_null<mlir::ArrayAttr>(a))
    for (mlir::Attribute e : arr)
      if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(e))
        out.push_back(i.getValue().getSExtValue());
  return out;
}

std::string stringAttr(mlir::DictionaryAttr d, StringRef name, StringRef dflt) {
  mlir::Attribute a = d ? d.get(name) : mlir::Attribute();
  if (auto s = llvm::dyn_cast_or_null<mlir::StringAttr>(a))
    return s.getValue().str();
  return dflt.str();
}

/// Axis normalised to [0, rank).
int64_t axisOf(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

bool is16(DType t) { return isFloat16Bit(t); }

//===----------------------------------------------------------------------===//
// The backend
//===----------------------------------------------------------------------===//

class CudaBackend final : public Backend {
public:
  static llvm::Expected<std::unique_ptr<Backend>> create();

  StringRef name() const override { return "cuda"; }
  bool hostMemory() const override { return false; }

  llvm::Expected<Tensor> allocate(DType dtype,
                                  std::vector<int64_t> shape) override;
  llvm::Expected<Arena> allocateArena(int64_t bytes) override;
  llvm::Expected<Tensor> upload(const Tensor &host) override;
  llvm::Expected<Tensor> download(const Tensor &t) override;
  llvm::Error copy(const Tensor &src, Tensor &dst) override {
    return cuda::copyAsync(dst.raw(), src.raw(), src.bytes(), stream(),
                           "copying an updated state tensor");
  }
  llvm::Error bindKernel(StringRef name, mlir::DictionaryAttr attrs,
                         ArrayRef<TensorType> operands,
                         ArrayRef<TensorType> results,
                         const CompileOptions &options,
                         Instruction &inst) override;
  llvm::Error supportsCommunication(StringRef what) const override {
    return fail(what + " communicates between ranks, which the cuda backend "
                       "cannot do yet (it has no NCCL collectives); run "
                       "multi-rank plans with --backend cpu");
  }
  llvm::Error finishStep() override;

  llvm::Error copyFromHost(const Tensor &host, Tensor &dst) override {
    if (llvm::Error e = cuda::check(
            cudaMemcpyAsync(dst.raw(), host.raw(), host.bytes(),
                            cudaMemcpyHostToDevice, stream()),
            llvm::formatv("copying {0} bytes to the device", host.bytes())))
      return e;
    return cuda::check(cudaStreamSynchronize(stream()),
                       "waiting for an upload");
  }
  bool canCaptureSteps() const override { return true; }
  llvm::Error beginCapture() override {
    return cuda::check(
        cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal),
        "--cuda-graph: cudaStreamBeginCapture");
  }
  llvm::Error endCapture() override;
  llvm::Error replayCaptured() override {
    if (!graphExec)
      return fail("--cuda-graph: no step was captured");
    return cuda::check(cudaGraphLaunch(graphExec.get(), stream()),
                       "--cuda-graph: cudaGraphLaunch");
  }

  cudaStream_t stream() const { return streamOwner.get(); }

  /// The shared scratch buffer, at least `bytes` bytes (grown on first use;
  /// growing synchronises, which happens only in the first step).
  llvm::Expected<void *> scratch(size_t bytes);
  /// A new DeviceStatus slot for the instruction at `where`; its device
  /// address is statusAt(slot) once the slots are allocated.
  int newStatusSlot(const std::string &where, StringRef kernel) {
    statusWhere.push_back(where + ": kernel \"" + kernel.str() + "\"");
    return static_cast<int>(statusWhere.size()) - 1;
  }
  llvm::Expected<cuda::DeviceStatus *> statusAt(int slot);

  cuda::BlasHandle &blas() { return *blasHandle; }

  /// The closure of an instruction whose kernel is `launch(in, out, status,
  /// scratch)`: `status` is a DeviceStatus slot of its own when
  /// `needsStatus` (else null), `scratch` at least `scratchBytes` of the
  /// shared scratch (null when 0); both are registered now and looked up
  /// when it runs (they are allocated in the first step). A failed launch
  /// becomes an error naming the kernel.
  template <typename Launch>
  KernelFn launchWith(const Instruction &inst, StringRef kernel,
                      bool needsStatus, size_t scratchBytes, Launch launch) {
    int slot = needsStatus ? newStatusSlot(inst.where, kernel) : -1;
    scratchNeed = std::max(scratchNeed, scratchBytes);
    return [this, slot, scratchBytes, name = kernel.str(),
            launch](const ExecContext &, In in, Out out) -> llvm::Error {
      cuda::DeviceStatus *status = nullptr;
      if (slot >= 0) {
        llvm::Expected<cuda::DeviceStatus *> s = statusAt(slot);
        if (!s)
          return s.takeError();
        status = *s;
      }
      void *ws = nullptr;
      if (scratchBytes > 0) {
        llvm::Expected<void *> w = scratch(scratchBytes);
        if (!w)
          return w.takeError();
        ws = *w;
      }
      return launched(launch(in, out, status, ws), name);
    };
  }

private:
  using BindFn = llvm::Error (CudaBackend::*)(StringRef, mlir::DictionaryAttr,
                                              ArrayRef<TensorType>,
                                              ArrayRef<TensorType>,
                                              const CompileOptions &,
                                              Instruction &);
  llvm::Error bindNative(StringRef name, mlir::DictionaryAttr attrs,
                         ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                         const CompileOptions &options, Instruction &inst);
  llvm::Error bindWidened(StringRef name, mlir::DictionaryAttr attrs,
                          ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                          const CompileOptions &options, Instruction &inst);
  llvm::Error bindElementwise(StringRef name, mlir::DictionaryAttr attrs,
                              ArrayRef<TensorType> ins,
                              ArrayRef<TensorType> outs, Instruction &inst);
  llvm::Error bindLayout(StringRef name, mlir::DictionaryAttr attrs,
                         ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                         Instruction &inst);
  llvm::Error bindNN(StringRef name, mlir::DictionaryAttr attrs,
                     ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                     const CompileOptions &options, Instruction &inst);
  llvm::Error bindAttention(StringRef name, mlir::DictionaryAttr attrs,
                            ArrayRef<TensorType> ins, ArrayRef<TensorType> outs,
                            Instruction &inst);
  /// Whether the CUDA kernel of `name` takes these (16-bit) dtypes as they
  /// are; otherwise bindKernel widens them to f32 around it.
  static bool takesNative16Bit(StringRef name, ArrayRef<TensorType> ins,
                               ArrayRef<TensorType> outs);

  std::shared_ptr<CUstream_st> streamOwner;
  /// The captured step (--cuda-graph), instantiated.
  std::shared_ptr<CUgraphExec_st> graphExec;
  std::unique_ptr<cuda::BlasHandle> blasHandle;
  Tensor scratchBuffer;
  size_t scratchNeed = 0;
  std::vector<std::string> statusWhere;
  Tensor statusBuffer; ///< statusWhere.size() DeviceStatus records
};

} // namespace

namespace tessera::runtime::exec {
llvm::Expected<std::unique_ptr<Backend>> createCudaBackend() {
  return CudaBackend::create();
}
} // namespace tessera::runtime::exec

llvm::Expected<std::unique_ptr<Backend>> CudaBackend::create() {
  if (llvm::Error e = cuda::deviceAvailable())
    return fail("--backend cuda: " + llvm::toString(std::move(e)));
  auto backend = std::make_unique<CudaBackend>();
  cudaStream_t s = nullptr;
  if (llvm::Error e =
          cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                      "--backend cuda: creating the compute stream"))
    return std::move(e);
  // Tensors keep the stream alive: their deleters free on it.
  backend->streamOwner = std::shared_ptr<CUstream_st>(
      s, [](cudaStream_t st) { cudaStreamDestroy(st); });
  // Keep freed blocks in the stream-ordered pool instead of returning them
  // to the driver at every synchronisation.
  cudaMemPool_t pool;
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  llvm::Expected<std::unique_ptr<cuda::BlasHandle>> blas =
      cuda::BlasHandle::create();
  if (!blas)
    return fail("--backend cuda: " + llvm::toString(blas.takeError()));
  backend->blasHandle = std::move(*blas);
  return backend;
}

llvm::Expected<Tensor> CudaBackend::allocate(DType dtype,
                                             std::vector<int64_t> shape) {
  size_t bytes = static_cast<size_t>(shapeNumel(shape)) * dtypeSize(dtype);
  void *ptr = nullptr;
  if (llvm::Error e = cuda::check(
          cudaMallocAsync(&ptr, std::max<size_t>(bytes, 1), stream()),
          llvm::formatv("cudaMallocAsync of {0} bytes", bytes)))
    return std::move(e);
  std::shared_ptr<CUstream_st> keep = streamOwner;
  std::shared_ptr<void> owner(
      ptr, [keep](void *p) { cudaFreeAsync(p, keep.get()); });
  return Tensor::view(ptr, dtype, std::move(shape), std::move(owner));
}

llvm::Expected<Arena> CudaBackend::allocateArena(int64_t bytes) {
  // cudaMalloc: 256-byte aligned, held for the executor's lifetime.
  llvm::Expected<Tensor> t =
      cuda::emptyDevice(DType::I1, {std::max<int64_t>(bytes, 64)});
  if (!t)
    return t.takeError();
  Arena a;
  a.bytes = bytes;
  Tensor owner = *t;
  a.memory = std::shared_ptr<void>(owner.raw(), [owner](void *) {});
  return a;
}

llvm::Expected<Tensor> CudaBackend::upload(const Tensor &host) {
  llvm::Expected<Tensor> dev = allocate(host.dtype(), host.shape());
  if (!dev)
    return dev.takeError();
  // Synchronous with respect to the host buffer: it may be freed right
  // after (pageable memory is staged by the driver before returning).
  if (llvm::Error e = cuda::check(
          cudaMemcpyAsync(dev->raw(), host.raw(), host.bytes(),
                          cudaMemcpyHostToDevice, stream()),
          llvm::formatv("copying {0} bytes to the device", host.bytes())))
    return std::move(e);
  if (llvm::Error e =
          cuda::check(cudaStreamSynchronize(stream()), "waiting for an upload"))
    return std::move(e);
  return dev;
}

llvm::Expected<Tensor> CudaBackend::download(const Tensor &t) {
  Tensor host = Tensor::empty(t.dtype(), t.shape());
  if (llvm::Error e = cuda::check(
          cudaMemcpyAsync(host.raw(), t.raw(), t.bytes(),
                          cudaMemcpyDeviceToHost, stream()),
          llvm::formatv("copying {0} bytes from the device", t.bytes())))
    return std::move(e);
  if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream()),
                                  "waiting for the step's kernels"))
    return std::move(e);
  return host;
}

llvm::Error CudaBackend::endCapture() {
  cudaGraph_t graph = nullptr;
  if (llvm::Error e = cuda::check(cudaStreamEndCapture(stream(), &graph),
                                  "--cuda-graph: cudaStreamEndCapture"))
    return e;
  std::unique_ptr<CUgraph_st, cudaError_t (*)(cudaGraph_t)> owned(
      graph, &cudaGraphDestroy);
  cudaGraphExec_t exec = nullptr;
  if (llvm::Error e = cuda::check(
          cudaGraphInstantiate(&exec, graph,
                               cudaGraphInstantiateFlagAutoFreeOnLaunch),
          "--cuda-graph: cudaGraphInstantiate"))
    return e;
  graphExec = std::shared_ptr<CUgraphExec_st>(
      exec, [](cudaGraphExec_t x) { cudaGraphExecDestroy(x); });
  return llvm::Error::success();
}

llvm::Expected<void *> CudaBackend::scratch(size_t bytes) {
  bytes = std::max(bytes, scratchNeed);
  if (!scratchBuffer.isNull() && scratchBuffer.bytes() >= bytes)
    return scratchBuffer.raw();
  if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream()),
                                  "growing the kernels' scratch"))
    return std::move(e);
  scratchBuffer = Tensor();
  llvm::Expected<Tensor> t =
      cuda::emptyDevice(DType::I1, {static_cast<int64_t>(bytes)});
  if (!t)
    return t.takeError();
  scratchBuffer = *t;
  return scratchBuffer.raw();
}

llvm::Expected<cuda::DeviceStatus *> CudaBackend::statusAt(int slot) {
  size_t need = statusWhere.size() * sizeof(cuda::DeviceStatus);
  if (statusBuffer.isNull() || statusBuffer.bytes() < need) {
    llvm::Expected<Tensor> t =
        cuda::emptyDevice(DType::I1, {static_cast<int64_t>(need)});
    if (!t)
      return t.takeError();
    // On the compute stream: the non-blocking stream is not ordered after
    // the legacy default stream that cudaMemset would use.
    if (llvm::Error e =
            cuda::check(cudaMemsetAsync(t->raw(), 0, need, stream()),
                        "zeroing the kernels' status"))
      return std::move(e);
    statusBuffer = *t;
  }
  return static_cast<cuda::DeviceStatus *>(statusBuffer.raw()) + slot;
}

llvm::Error CudaBackend::finishStep() {
  if (statusBuffer.isNull())
    return cuda::check(cudaStreamSynchronize(stream()),
                       "waiting for the step's kernels");
  std::vector<cuda::DeviceStatus> status(statusWhere.size());
  size_t bytes = status.size() * sizeof(cuda::DeviceStatus);
  if (llvm::Error e =
          cuda::check(cudaMemcpyAsync(status.data(), statusBuffer.raw(), bytes,
                                      cudaMemcpyDeviceToHost, stream()),
                      "reading the kernels' status"))
    return e;
  if (llvm::Error e = cuda::check(cudaStreamSynchronize(stream()),
                                  "waiting for the step's kernels"))
    return e;
  for (size_t i = 0; i < status.size(); ++i) {
    const cuda::DeviceStatus &s = status[i];
    if (s.code == cuda::DeviceStatus::Ok)
      continue;
    cudaMemsetAsync(statusBuffer.raw(), 0, bytes, stream());
    if (s.code == cuda::DeviceStatus::IdOutOfRange)
      return fail(llvm::formatv("{0}: index {1} at flat position {2} is "
                                "outside [0, {3})",
                                statusWhere[i], s.value, s.index, s.limit));
    return fail(llvm::formatv("{0}: label {1} of row {2} is outside [0, {3})",
                              statusWhere[i], s.value, s.index, s.limit));
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

bool CudaBackend::takesNative16Bit(StringRef name, ArrayRef<TensorType> ins,
                                   ArrayRef<TensorType> outs) {
  auto allSame = [&](ArrayRef<TensorType> ts) {
    return llvm::all_of(
        ts, [&](const TensorType &t) { return t.dtype == ts[0].dtype; });
  };
  // Data movement and elementwise kernels take every dtype they are given.
  if (tessera::tsrt::isDataMovementKernel(name) ||
      llvm::is_contained({"add",       "sub",   "mul",        "div",
                          "pow",       "max",   "neg",        "exp",
                          "log",       "sqrt",  "rsqrt",      "tanh",
                          "erf",       "relu",  "gelu",       "gelu_grad",
                          "relu_grad", "equal", "reduce_sum", "reduce_mean",
                          "reduce_max"},
                         name))
    return true;
  if (name == "matmul" || name == "layer_norm" || name == "layer_norm_grad" ||
      name == "softmax" || name == "softmax_grad")
    return allSame(ins) && allSame(outs) && ins[0].dtype == outs[0].dtype;
  if (name == "attention")
    return allSame(ins) && outs[0].dtype == ins[0].dtype &&
           outs[1].dtype == DType::F32;
  if (name == "attention_grad")
    // q, k, v, o, do and the gradients in one dtype; lse f32.
    return ins[4].dtype == DType::F32 && ins[0].dtype == ins[1].dtype &&
           ins[0].dtype == ins[2].dtype && ins[0].dtype == ins[3].dtype &&
           ins[0].dtype == ins[5].dtype && allSame(outs) &&
           outs[0].dtype == ins[0].dtype;
  if (name == "cross_entropy")
    return true; // logits f32/bf16/f16, loss f32
  if (name == "cross_entropy_grad")
    return outs[0].dtype == ins[0].dtype && ins[2].dtype == DType::F32;
  if (name == "gather_grad")
    return true; // dy f32/bf16/f16, out f32/bf16/f16
  return false;  // optimizers: f32 only
}

llvm::Error CudaBackend::bindKernel(StringRef name, mlir::DictionaryAttr attrs,
                                    ArrayRef<TensorType> ins,
                                    ArrayRef<TensorType> outs,
                                    const CompileOptions &options,
                                    Instruction &inst) {
  bool has16 =
      llvm::any_of(ins, [](const TensorType &t) { return is16(t.dtype); }) ||
      llvm::any_of(outs, [](const TensorType &t) { return is16(t.dtype); });
  if (has16 && !takesNative16Bit(name, ins, outs))
    return bindWidened(name, attrs, ins, outs, options, inst);
  return bindNative(name, attrs, ins, outs, options, inst);
}

llvm::Error CudaBackend::bindNative(StringRef name, mlir::DictionaryAttr attrs,
                                    ArrayRef<TensorType> ins,
                                    ArrayRef<TensorType> outs,
                                    const CompileOptions &options,
                                    Instruction &inst) {
  if (name == "matmul") {
    bool ta = boolAttr(attrs, "transpose_lhs", false);
    bool tb = boolAttr(attrs, "transpose_rhs", false);
    inst.fn = [this, ta, tb](const ExecContext &, In in, Out out) {
      return cuda::matmul(blas(), *in[0], *in[1], ta, tb, out[0],
                          cuda::MatmulEpilogue::none(), stream());
    };
    return llvm::Error::success();
  }
  if (name == "reshape" || name == "transpose" || name == "slice" ||
      name == "concat" || name == "broadcast")
    return bindLayout(name, attrs, ins, outs, inst);
  if (name == "attention" || name == "attention_grad")
    return bindAttention(name, attrs, ins, outs, inst);
  if (llvm::is_contained({"gather", "gather_grad", "layer_norm",
                          "layer_norm_grad", "softmax", "softmax_grad",
                          "cross_entropy", "cross_entropy_grad", "sgd_update",
                          "adamw_update"},
                         name))
    return bindNN(name, attrs, ins, outs, options, inst);
  return bindElementwise(name, attrs, ins, outs, inst);
}

/// The CPU backend's widening adapter, on the device: 16-bit operands are
/// converted to f32 temporaries, the f32 kernel runs, 16-bit results are
/// rounded back (to nearest even).
llvm::Error CudaBackend::bindWidened(StringRef name, mlir::DictionaryAttr attrs,
                                     ArrayRef<TensorType> ins,
                                     ArrayRef<TensorType> outs,
                                     const CompileOptions &options,
                                     Instruction &inst) {
  WidenedTypes w = widenFloat16(ins, outs);
  std::vector<bool> narrowIn = w.narrowIn, narrowOut = w.narrowOut;
  Instruction inner;
  inner.where = inst.where;
  inner.commIndex = inst.commIndex;
  inner.commSize = inst.commSize;
  if (llvm::Error e = bindNative(name, attrs, w.ins, w.outs, options, inner))
    return e;
  if (!inner.allocateResults)
    return fail("kernel \"" + name + "\" has no bf16/f16 form");
  KernelFn fn = std::move(inner.fn);
  inst.allocateResults = true;
  std::string kernel = name.str();
  inst.fn = [this, fn, narrowIn, narrowOut,
             kernel](const ExecContext &ctx, In in, Out out) -> llvm::Error {
    std::vector<Tensor> wideIn(in.size());
    std::vector<const Tensor *> inPtrs(in.begin(), in.end());
    for (size_t i = 0; i < in.size(); ++i) {
      if (!narrowIn[i])
        continue;
      llvm::Expected<Tensor> t = allocate(DType::F32, in[i]->shape());
      if (!t)
        return t.takeError();
      wideIn[i] = std::move(*t);
      if (llvm::Error e =
              launched(cuda::convert(*in[i], wideIn[i], stream()), kernel))
        return e;
      inPtrs[i] = &wideIn[i];
    }
    std::vector<Tensor> wideOut(out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      if (!narrowOut[i]) {
        wideOut[i] = out[i];
        continue;
      }
      llvm::Expected<Tensor> t = allocate(DType::F32, out[i].shape());
      if (!t)
        return t.takeError();
      wideOut[i] = std::move(*t);
    }
    if (llvm::Error e = fn(ctx, inPtrs, wideOut))
      return e;
    for (size_t i = 0; i < out.size(); ++i)
      if (narrowOut[i])
        if (llvm::Error e =
                launched(cuda::convert(wideOut[i], out[i], stream()), kernel))
          return e;
    return llvm::Error::success();
  };
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindNN(StringRef name, mlir::DictionaryAttr attrs,
                                ArrayRef<TensorType> ins,
                                ArrayRef<TensorType> outs,
                                const CompileOptions &options,
                                Instruction &inst) {
  using Status = cuda::DeviceStatus *;
  cudaStream_t s = stream();
  if (name == "gather") {
    inst.fn =
        launchWith(inst, name, /*needsStatus=*/true, 0,
                   [s](In in, Out out, Status status, void *) {
                     return cuda::gather(*in[0], *in[1], out[0], status, s);
                   });
    return llvm::Error::success();
  }
  if (name == "gather_grad") {
    size_t bytes = 0;
    if (llvm::Error e =
            launched(cuda::gatherGradScratchBytes(shapeNumel(ins[0].shape),
                                                  outs[0].shape[0], &bytes),
                     "gather_grad scratch size"))
      return e;
    inst.fn = launchWith(
        inst, name, true, bytes, [s](In in, Out out, Status status, void *ws) {
          return cuda::gatherGrad(*in[0], *in[1], out[0], ws, status, s);
        });
    return llvm::Error::success();
  }
  if (name == "layer_norm" || name == "layer_norm_grad") {
    int64_t axis = axisOf(intAttr(attrs, "axis"), ins[0].shape.size());
    float eps = static_cast<float>(floatAttr(attrs, "epsilon"));
    if (name == "layer_norm") {
      inst.fn = launchWith(inst, name, false, 0,
                           [s, axis, eps](In in, Out out, Status, void *) {
                             return cuda::layerNorm(*in[0], *in[1], *in[2],
                                                    axis, eps, out[0], s);
                           });
      return llvm::Error::success();
    }
    inst.fn = launchWith(
        inst, name, false, cuda::layerNormGradScratchBytes(ins[0].shape, axis),
        [s, axis, eps](In in, Out out, Status, void *ws) {
          return cuda::layerNormGrad(*in[0], *in[1], *in[2], axis, eps, out[0],
                                     out[1], out[2], ws, s);
        });
    return llvm::Error::success();
  }
  if (name == "softmax" || name == "softmax_grad") {
    int64_t axis = axisOf(intAttr(attrs, "axis"), ins[0].shape.size());
    bool grad = name == "softmax_grad";
    inst.fn = launchWith(
        inst, name, false, 0, [s, axis, grad](In in, Out out, Status, void *) {
          return grad ? cuda::softmaxGrad(*in[0], *in[1], axis, out[0], s)
                      : cuda::softmax(*in[0], axis, out[0], s);
        });
    return llvm::Error::success();
  }
  if (name == "cross_entropy") {
    inst.fn = launchWith(
        inst, name, true, cuda::crossEntropyScratchBytes(ins[0].shape[0]),
        [s](In in, Out out, Status status, void *ws) {
          return cuda::crossEntropy(*in[0], *in[1], out[0], ws, status, s);
        });
    return llvm::Error::success();
  }
  if (name == "cross_entropy_grad") {
    inst.fn = launchWith(inst, name, true, 0,
                         [s](In in, Out out, Status status, void *) {
                           return cuda::crossEntropyGrad(*in[0], *in[1], *in[2],
                                                         out[0], status, s);
                         });
    return llvm::Error::success();
  }
  auto hyper = [&](StringRef key) {
    return hyperParameter(options, key, floatAttr(attrs, key));
  };
  if (name == "sgd_update") {
    double lr = hyper("lr"), wd = hyper("weight_decay");
    inst.fn = launchWith(
        inst, name, false, 0, [s, lr, wd](In in, Out out, Status, void *) {
          return cuda::sgdUpdate(*in[0], *in[1], lr, wd, out[0], s);
        });
    return llvm::Error::success();
  }
  // adamw_update
  double lr = hyper("lr"), b1 = hyper("beta1"), b2 = hyper("beta2"),
         eps = hyper("eps"), wd = hyper("weight_decay");
  inst.fn =
      launchWith(inst, name, false, 0, [=](In in, Out out, Status, void *) {
        return cuda::adamwUpdate(*in[0], *in[1], *in[2], *in[3], *in[4], lr, b1,
                                 b2, eps, wd, out[0], out[1], out[2], s);
      });
  return llvm::Error::success();
}

llvm::Error CudaBackend::bindElementwise(StringRef name,
                                         mlir::DictionaryAttr attrs,
                                         ArrayRef<TensorType> ins,
                                         ArrayRef<TensorType>,
                                         Instruction &inst) {
  std::string kernel = name.str();
  std::optional<cuda::BinaryOp> binary =
      llvm::StringSwitch<std::optional<cuda::BinaryOp>>(name)
          .Case("add", cuda::BinaryOp::Add)
          .Case("sub", cuda::BinaryOp::Sub)
          .Case("mul", cuda::BinaryOp::Mul)
          .Case("div", cuda::BinaryOp::Div)
          .Case("pow", cuda::BinaryOp::Pow)
          .Case("max", cuda::BinaryOp::Max)
          .Default(std::nullopt);
  if (binary) {
    cuda::BinaryOp op = *binary;
    inst.fn = [this, op, kernel](const ExecContext &, In in, Out out) {
      return launched(cuda::binary(op, *in[0], *in[1], out[0], stream()),
                      kernel);
    };
    return llvm::Error::success();
  }
  cuda::GeluApproximate approx =
      stringAttr(attrs, "approximate", "none") == "tanh"
          ? cuda::GeluApproximate::Tanh
          : cuda::GeluApproximate::None;
  std::optional<cuda::UnaryOp> unary =
      llvm::StringSwitch<std::optional<cuda::UnaryOp>>(name)
          .Case("neg", cuda::UnaryOp::Neg)
          .Case("exp", cuda::UnaryOp::Exp)
          .Case("log", cuda::UnaryOp::Log)
          .Case("sqrt", cuda::UnaryOp::Sqrt)
          .Case("rsqrt", cuda::UnaryOp::Rsqrt)
          .Case("tanh", cuda::UnaryOp::Tanh)
          .Case("erf", cuda::UnaryOp::Erf)
          .Case("relu", cuda::UnaryOp::Relu)
          .Case("gelu", approx == cuda::GeluApproximate::Tanh
                            ? cuda::UnaryOp::GeluTanh
                            : cuda::UnaryOp::Gelu)
          .Default(std::nullopt);
  if (unary) {
    cuda::UnaryOp op = *unary;
    inst.fn = [this, op, kernel](const ExecContext &, In in, Out out) {
      return launched(cuda::unary(op, *in[0], out[0], stream()), kernel);
    };
    return llvm::Error::success();
  }
  if (name == "relu_grad" || name == "gelu_grad") {
    bool relu = name == "relu_grad";
    inst.fn = [this, relu, approx, kernel](const ExecContext &, In in,
                                           Out out) {
      return launched(
          relu ? cuda::reluGrad(*in[0], *in[1], out[0], stream())
               : cuda::geluGrad(*in[0], *in[1], approx, out[0], stream()),
          kernel);
    };
    return llvm::Error::success();
  }
  if (name == "equal") {
    inst.fn = [this, kernel](const ExecContext &, In in, Out out) {
      return launched(cuda::equal(*in[0], *in[1], out[0], stream()), kernel);
    };
    return llvm::Error::success();
  }
  if (name == "select") {
    inst.fn = [this, kernel](const ExecContext &, In in, Out out) {
      return launched(cuda::select(*in[0], *in[1], *in[2], out[0], stream()),
                      kernel);
    };
    return llvm::Error::success();
  }
  if (name == "convert") {
    inst.fn = [this, kernel](const ExecContext &, In in, Out out) {
      return launched(cuda::convert(*in[0], out[0], stream()), kernel);
    };
    return llvm::Error::success();
  }
  if (name == "reduce_sum" || name == "reduce_mean" || name == "reduce_max") {
    size_t rank = ins[0].shape.size();
    std::vector<int64_t> axes = intArrayAttr(attrs, "axes");
    for (int64_t &a : axes)
      a = axisOf(a, rank);
    std::sort(axes.begin(), axes.end());
    bool keep = boolAttr(attrs, "keepdim", false);
    int64_t bytes = cuda::reduceScratchBytes(ins[0].dtype, ins[0].shape, axes);
    if (bytes < 0)
      return fail("reduction axes not sorted, unique and in range");
    using ReduceFn =
        cudaError_t (*)(const Tensor &, const std::vector<int64_t> &, bool,
                        Tensor &, void *, int64_t, cudaStream_t);
    ReduceFn fn = name == "reduce_sum"    ? &cuda::reduceSum
                  : name == "reduce_mean" ? &cuda::reduceMean
                                          : &cuda::reduceMax;
    cudaStream_t s = stream();
    inst.fn = launchWith(inst, name, false, static_cast<size_t>(bytes),
                         [fn, axes, keep, bytes,
                          s](In in, Out out, cuda::DeviceStatus *, void *ws) {
                           return fn(*in[0], axes, keep, out[0], ws, bytes, s);
                         });
    return llvm::Error::success();
  }
  return fail("the cuda backend has no kernel \"" + name + "\"");
}

llvm::Error CudaBackend::bindLayout(StringRef name, mlir::DictionaryAttr attrs,
                                    ArrayRef<TensorType> ins,
                                    ArrayRef<TensorType> outs,
                                    Instruction &inst) {
  std::string kernel = name.str();
  if (name == "reshape") {
    // A view, exactly as on the CPU (no kernel).
    std::vector<int64_t> shape = outs[0].shape;
    inst.allocateResults = false;
    inst.fn = [shape](const ExecContext &, In in, Out out) {
      out[0] = in[0]->reshape(shape);
      return llvm::Error::success();
    };
    return llvm::Error::success();
  }
  if (name == "transpose") {
    std::vector<int64_t> perm = intArrayAttr(attrs, "permutation");
    inst.fn = [this, perm, kernel](const ExecContext &, In in, Out out) {
      return launched(cuda::transpose(*in[0], perm, out[0], stream()), kernel);
    };
    return llvm::Error::success();
  }
  if (name == "slice") {
    std::vector<int64_t> starts = intArrayAttr(attrs, "start_indices");
    std::vector<int64_t> limits = intArrayAttr(attrs, "limit_indices");
    std::vector<int64_t> strides = intArrayAttr(attrs, "strides");
    inst.fn = [this, starts, limits, strides, kernel](const ExecContext &,
                                                      In in, Out out) {
      return launched(
          cuda::slice(*in[0], starts, limits, strides, out[0], stream()),
          kernel);
    };
    return llvm::Error::success();
  }
  if (name == "concat") {
    int64_t axis = axisOf(intAttr(attrs, "axis"), ins[0].shape.size());
    inst.fn = [this, axis, kernel](const ExecContext &, In in, Out out) {
      std::vector<const Tensor *> inputs(in.begin(), in.end());
      return launched(cuda::concat(inputs, axis, out[0], stream()), kernel);
    };
    return llvm::Error::success();
  }
  // broadcast
  inst.fn = [this, kernel](const ExecContext &, In in, Out out) {
    return launched(cuda::broadcast(*in[0], out[0], stream()), kernel);
  };
  return llvm::Error::success();
}

/// tsrt "attention" (q, k, v [, mask]) -> (o, lse) and "attention_grad"
/// (q, k, v, o, lse, do [, mask]) -> (dq, dk, dv) through the fused flash
/// attention kernels; the leading dims of q are the batch (B·H). Ring
/// attention (grid_axes) never reaches here: supportsCommunication refuses
/// it.
llvm::Error CudaBackend::bindAttention(StringRef name,
                                       mlir::DictionaryAttr attrs,
                                       ArrayRef<TensorType> ins,
                                       ArrayRef<TensorType>,
                                       Instruction &inst) {
  bool grad = name == "attention_grad";
  size_t nIn = grad ? 6 : 3;
  bool hasMask = ins.size() == nIn + 1;
  const std::vector<int64_t> &q = ins[0].shape, &k = ins[1].shape,
                             &v = ins[2].shape;
  size_t r = q.size();
  cuda::FlashDims d;
  d.batch = 1;
  for (size_t i = 0; i + 2 < r; ++i)
    d.batch *= q[i];
  d.sq = q[r - 2];
  d.dh = q[r - 1];
  d.sk = k[r - 2];
  d.dv = v[r - 1];
  if (d.dh > 128 || d.dv > 128)
    return fail(llvm::formatv("the cuda attention kernel takes head dims up "
                              "to 128, got Dh = {0}, Dv = {1}",
                              d.dh, d.dv));
  float scale = static_cast<float>(floatAttr(attrs, "scale"));
  bool causal = boolAttr(attrs, "causal", false);
  DType dtype = ins[0].dtype;
  std::string kernel = name.str();
  if (!grad) {
    inst.fn = [=](const ExecContext &, In in, Out out) {
      return launched(
          cuda::flashAttentionForward(
              d, dtype, in[0]->raw(), in[1]->raw(), in[2]->raw(),
              hasMask ? static_cast<const float *>(in[3]->raw()) : nullptr,
              scale, causal, out[0].raw(), static_cast<float *>(out[1].raw()),
              stream()),
          kernel);
    };
    return llvm::Error::success();
  }
  cudaStream_t s = stream();
  inst.fn = launchWith(
      inst, name, false,
      static_cast<size_t>(cuda::flashAttentionScratchBytes(d, dtype, true)),
      [=](In in, Out out, cuda::DeviceStatus *, void *ws) {
        return cuda::flashAttentionBackward(
            d, dtype, in[0]->raw(), in[1]->raw(), in[2]->raw(), in[3]->raw(),
            static_cast<const float *>(in[4]->raw()), in[5]->raw(),
            hasMask ? static_cast<const float *>(in[6]->raw()) : nullptr, scale,
            causal, out[0].raw(), out[1].raw(), out[2].raw(), ws, s);
      });
  return llvm::Error::success();
}

//===- Harness.cpp - the kernel conformance suite's shared harness --------===//

#include "Harness.h"

#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"

#include <cmath>
#include <cstring>
#include <memory>

using namespace tessera;
using namespace tessera::conformance;
namespace exec = tessera::runtime::exec;

namespace {

std::map<std::string, std::string> &registry() {
  static std::map<std::string, std::string> names;
  return names;
}

std::set<std::string> &ranOnCpu() {
  static std::set<std::string> names;
  return names;
}

/// One backend per name per process (a CUDA context is created once).
struct BackendSlot {
  std::unique_ptr<exec::Backend> backend;
  std::string whyNot;
};

BackendSlot &backendSlot(const std::string &name) {
  static std::map<std::string, BackendSlot> slots;
  auto [it, inserted] = slots.try_emplace(name);
  if (inserted) {
    llvm::Expected<std::unique_ptr<exec::Backend>> b =
        exec::createBackend(name);
    if (b)
      it->second.backend = std::move(*b);
    else
      it->second.whyNot = llvm::toString(b.takeError());
  }
  return it->second;
}

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  registry.insert<tessera::tsrt::TsrtDialect, mlir::func::FuncDialect>();
  return std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
}

constexpr const char *kSource = "conformance.mlir";

/// A full (unfiltered) run must have run every registered kernel on the cpu
/// backend: a family that registers a name it never runs fails here.
class RegisteredKernelsRan : public ::testing::Environment {
public:
  void TearDown() override {
    if (GTEST_FLAG_GET(filter) != "*")
      return;
    for (const auto &[name, family] : registry())
      if (!ranOnCpu().count(name))
        ADD_FAILURE() << "kernel \"" << name << "\" is registered by family "
                      << family << " but no test ran it on the cpu backend";
  }
};

[[maybe_unused]] ::testing::Environment *const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new RegisteredKernelsRan);

} // namespace

bool conformance::registerKernels(llvm::StringRef family,
                                  std::initializer_list<const char *> names) {
  for (const char *name : names) {
    auto [it, inserted] = registry().try_emplace(name, family.str());
    if (!inserted)
      it->second += ", " + family.str();
  }
  return true;
}

const std::map<std::string, std::string> &conformance::registeredKernels() {
  return registry();
}

const std::set<std::string> &conformance::kernelsRunOnCpu() {
  return ranOnCpu();
}

std::string conformance::backendParamName(
    const ::testing::TestParamInfo<std::string> &info) {
  return info.param;
}

//===----------------------------------------------------------------------===//
// Programs and tensors
//===----------------------------------------------------------------------===//

std::string conformance::typeStr(const TensorType &t) { return t.str(); }

TensorType conformance::typeOf(const Tensor &t) {
  return TensorType{t.dtype(), t.shape()};
}

std::string conformance::kernelProgram(llvm::StringRef kernel,
                                       llvm::StringRef attrs,
                                       llvm::ArrayRef<TensorType> ins,
                                       llvm::ArrayRef<TensorType> outs) {
  std::string args, operands, inTypes, outTypes;
  for (size_t i = 0; i < ins.size(); ++i) {
    std::string sep = i ? ", " : "";
    args += sep + "%a" + std::to_string(i) + ": " + ins[i].str();
    operands += sep + "%a" + std::to_string(i);
    inTypes += sep + ins[i].str();
  }
  for (size_t i = 0; i < outs.size(); ++i)
    outTypes += (i ? ", " : "") + outs[i].str();
  std::string results, returned;
  if (outs.size() == 1) {
    results = "%r";
    returned = "%r";
  } else {
    results = "%r:" + std::to_string(outs.size());
    for (size_t i = 0; i < outs.size(); ++i)
      returned += (i ? ", %r#" : "%r#") + std::to_string(i);
  }
  return "module {\n  func.func @kernel(" + args + ") -> (" + outTypes +
         ") {\n    " + results + " = tsrt.kernel \"" + kernel.str() + "\"(" +
         operands + ") {attrs = {" + attrs.str() + "}} : (" + inTypes +
         ") -> (" + outTypes + ")\n    return " + returned + " : " + outTypes +
         "\n  }\n}\n";
}

std::string conformance::f32Attr(llvm::StringRef name, double value) {
  return llvm::formatv("{0} = {1:e9} : f32", name, value).str();
}

std::vector<float> conformance::randomValues(int64_t n, uint32_t seed, float lo,
                                             float hi) {
  std::vector<float> v(n);
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(s >> 11) / 9007199254740992.0; // [0, 1)
    v[i] = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

Tensor conformance::randomF32(std::vector<int64_t> shape, uint32_t seed,
                              float lo, float hi) {
  int64_t n = runtime::shapeNumel(shape);
  return Tensor::fromVector<float>(shape, randomValues(n, seed, lo, hi));
}

Tensor conformance::f32(std::vector<int64_t> shape, std::vector<float> v) {
  return Tensor::fromVector<float>(shape, v);
}

Tensor conformance::i64(std::vector<int64_t> shape, std::vector<int64_t> v) {
  return Tensor::fromVector<int64_t>(shape, v);
}

Tensor conformance::i1(std::vector<int64_t> shape, std::vector<uint8_t> v) {
  return Tensor::fromVector<uint8_t>(shape, v);
}

Tensor conformance::narrow(const Tensor &t, DType dtype) {
  Tensor h = Tensor::empty(dtype, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float f = t.data<float>()[i];
    if (dtype == DType::BF16)
      h.data<BFloat16>()[i] = runtime::toBFloat16(f);
    else
      h.data<Float16>()[i] = runtime::toFloat16(f);
  }
  return h;
}

std::vector<double> conformance::values(const Tensor &t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
    case DType::F32:
      v[i] = t.data<float>()[i];
      break;
    case DType::BF16:
      v[i] = runtime::toFloat(t.data<BFloat16>()[i]);
      break;
    case DType::F16:
      v[i] = runtime::toFloat(t.data<Float16>()[i]);
      break;
    case DType::I64:
      v[i] = static_cast<double>(t.data<int64_t>()[i]);
      break;
    case DType::I1:
      v[i] = t.data<uint8_t>()[i] ? 1 : 0;
      break;
    }
  }
  return v;
}

double conformance::rtolFor(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return 8e-3;
  case DType::F16:
    return 1e-3;
  default:
    return 1e-5;
  }
}

void conformance::expectNear(const Tensor &got,
                             const std::vector<int64_t> &shape,
                             const std::vector<double> &want, double rtol,
                             double atol, llvm::StringRef what) {
  ASSERT_FALSE(got.isNull()) << what.str();
  ASSERT_EQ(got.shape(), shape) << what.str();
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what.str();
  std::vector<double> g = values(got);
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double w = want[i], x = g[i];
    bool ok = std::isnan(w) ? std::isnan(x)
              : std::isinf(w)
                  ? x == w
                  : std::isfinite(x) &&
                        std::fabs(x - w) <= atol + rtol * std::fabs(w);
    if (!ok && reported++ < 8)
      ADD_FAILURE() << what.str() << "[" << i << "] = " << x << ", expected "
                    << w << " (rtol " << rtol << ", atol " << atol << ")";
  }
  if (reported > 8)
    ADD_FAILURE() << what.str() << ": " << reported
                  << " elements differ in all";
}

void conformance::expectEqual(const Tensor &got, DType dtype,
                              const std::vector<int64_t> &shape,
                              const std::vector<double> &want,
                              llvm::StringRef what) {
  ASSERT_FALSE(got.isNull()) << what.str();
  ASSERT_EQ(got.dtype(), dtype)
      << what.str() << ": " << runtime::dtypeName(dtype);
  expectNear(got, shape, want, 0, 0, what);
}

void conformance::expectBitEqual(const Tensor &got, const Tensor &want,
                                 llvm::StringRef what) {
  ASSERT_FALSE(got.isNull()) << what.str();
  ASSERT_EQ(got.dtype(), want.dtype()) << what.str();
  ASSERT_EQ(got.shape(), want.shape()) << what.str();
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.bytes()), 0) << what.str();
}

std::string conformance::loadErrorOn(exec::Backend &backend,
                                     llvm::StringRef kernel,
                                     llvm::StringRef attrs,
                                     const std::vector<TensorType> &ins,
                                     const std::vector<TensorType> &outs) {
  std::string text = kernelProgram(kernel, attrs, ins, outs);
  std::unique_ptr<mlir::MLIRContext> ctx = makeContext();
  mlir::ParserConfig config(ctx.get());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, kSource);
  if (!module) {
    ADD_FAILURE() << "parse error in:\n" << text;
    return "parse error";
  }
  exec::CompileOptions options;
  options.backend = &backend;
  llvm::Expected<exec::Program> program =
      exec::Program::compile(*module, "kernel", options, kSource);
  if (program)
    return "";
  std::string msg = llvm::toString(program.takeError());
  std::string head =
      std::string(kSource) + ": op #0 (kernel \"" + kernel.str() + "\") at ";
  size_t colon =
      msg.rfind(head, 0) == 0 ? msg.find(": ", head.size()) : std::string::npos;
  if (colon == std::string::npos) {
    ADD_FAILURE() << "load error does not name the op: " << msg;
    return msg;
  }
  return msg.substr(colon + 2);
}

//===----------------------------------------------------------------------===//
// KernelTest
//===----------------------------------------------------------------------===//

void KernelTest::SetUp() {
  BackendSlot &slot = backendSlot(GetParam());
  if (!slot.backend)
    GTEST_SKIP() << "createBackend(\"" << GetParam()
                 << "\") failed: " << slot.whyNot;
  device = slot.backend.get();
}

llvm::Expected<std::vector<Tensor>>
KernelTest::tryRun(llvm::StringRef kernel, llvm::StringRef attrs,
                   const std::vector<Tensor> &ins,
                   const std::vector<TensorType> &outs,
                   exec::CompileOptions options) {
  if (!registeredKernels().count(kernel.str()))
    ADD_FAILURE() << "kernel \"" << kernel.str()
                  << "\" is run but no family registers it";
  std::vector<TensorType> inTypes;
  for (const Tensor &t : ins)
    inTypes.push_back(typeOf(t));
  llvm::Expected<std::vector<Tensor>> host = tryRunProgram(
      kernelProgram(kernel, attrs, inTypes, outs), ins, std::move(options));
  if (host && device->name() == "cpu")
    ranOnCpu().insert(kernel.str());
  return host;
}

llvm::Expected<std::vector<Tensor>>
KernelTest::tryRunProgram(llvm::StringRef text, const std::vector<Tensor> &ins,
                          exec::CompileOptions options) {
  std::unique_ptr<mlir::MLIRContext> ctx = makeContext();
  mlir::ParserConfig config(ctx.get());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, kSource);
  if (!module)
    return fail("parse error in:\n" + text);
  options.backend = device;
  llvm::Expected<exec::Program> program =
      exec::Program::compile(*module, "kernel", options, kSource);
  if (!program)
    return fail("load: " + llvm::toString(program.takeError()));
  std::vector<Tensor> args;
  for (const Tensor &t : ins) {
    // The cpu backend's upload shares storage: copy, so that a program
    // writing an argument in place (tsrt.in_place) leaves `ins` unchanged.
    llvm::Expected<Tensor> up =
        device->upload(device->hostMemory() ? t.clone() : t);
    if (!up)
      return fail("upload: " + llvm::toString(up.takeError()));
    args.push_back(std::move(*up));
  }
  exec::ExecContext ctx2;
  ctx2.communication = device->communication();
  exec::Arena arena;
  if (program->arenaBytes() > 0) {
    llvm::Expected<exec::Arena> a =
        device->allocateArena(program->arenaBytes());
    if (!a)
      return fail("arena: " + llvm::toString(a.takeError()));
    arena = std::move(*a);
    ctx2.arena = &arena;
  }
  llvm::Expected<std::vector<Tensor>> results =
      program->run(ctx2, std::move(args));
  if (!results)
    return fail("run: " + llvm::toString(results.takeError()));
  if (llvm::Error e = device->finishStep())
    return fail("run: " + llvm::toString(std::move(e)));
  std::vector<Tensor> host;
  for (const Tensor &t : *results) {
    llvm::Expected<Tensor> down = device->download(t);
    if (!down)
      return fail("download: " + llvm::toString(down.takeError()));
    // The cpu backend returns its own tensor: copy, so that a test never
    // shares storage with an input (reshape is a view).
    host.push_back(device->hostMemory() ? down->clone() : std::move(*down));
  }
  return host;
}

std::vector<Tensor> KernelTest::run(llvm::StringRef kernel,
                                    llvm::StringRef attrs,
                                    const std::vector<Tensor> &ins,
                                    const std::vector<TensorType> &outs,
                                    exec::CompileOptions options) {
  llvm::Expected<std::vector<Tensor>> r =
      tryRun(kernel, attrs, ins, outs, std::move(options));
  if (!r) {
    ADD_FAILURE() << "kernel \"" << kernel.str()
                  << "\": " << llvm::toString(r.takeError());
    return {};
  }
  return std::move(*r);
}

std::string KernelTest::loadError(llvm::StringRef kernel, llvm::StringRef attrs,
                                  const std::vector<TensorType> &ins,
                                  const std::vector<TensorType> &outs) {
  return loadErrorOn(*device, kernel, attrs, ins, outs);
}

std::string KernelTest::runError(llvm::StringRef kernel, llvm::StringRef attrs,
                                 const std::vector<Tensor> &ins,
                                 const std::vector<TensorType> &outs) {
  llvm::Expected<std::vector<Tensor>> r = tryRun(kernel, attrs, ins, outs);
  if (r)
    return "";
  std::string msg = llvm::toString(r.takeError());
  EXPECT_EQ(msg.rfind("run: ", 0), 0u) << "not a run error: " << msg;
  return msg;
}

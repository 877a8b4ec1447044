//===- Harness.h - the conformance suite's shared harness -------*- C++ -*-===//
//
// The kernel conformance suite (IREE's CTS pattern): every kernel test is
// written once as a TEST_P over the backend name and instantiated for every
// backend ("cpu", "cuda") with TESSERA_CONFORMANCE_BACKENDS, so a kernel
// added for one backend fails the other's instance until it exists there.
//
// A test runs one `tsrt.kernel` as a one-op tsrt program through the same
// path as tessera-run: Program::compile (the kernel's shapes, dtypes and
// attributes are validated the same way for every backend, then the
// backend binds it), upload of the host inputs, Program::run,
// Backend::finishStep (a device backend's data-dependent errors), download of
// the results. The results are compared with a double-precision reference
// computed in the test, or with constants from PyTorch (the test names the
// command).
//
// One source per kernel family (ElementwiseTest.cpp, ..., OptimizerTest.cpp);
// ProgramTest.cpp runs whole programs (a training step, heap and
// arena-planned) through tryRunProgram.
//
// A backend that cannot be created here (no GPU, or a build without the
// CUDA backend) makes every test of its instance GTEST_SKIP with the reason
// createBackend gave: reported as skipped, never as passed.
//
// Coverage: each family registers, at static initialisation, the kernel
// names its tests exercise (registerKernels). CoverageTest checks that the
// registered names equal the kernels the backend binds, the harness fails a
// test that runs a kernel its family did not register, and a full
// (unfiltered) run fails if a registered name was never run.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_CONFORMANCE_HARNESS_H
#define TESSERA_TEST_CONFORMANCE_HARNESS_H

#include "runtime/Tensor.h"
#include "runtime/executor/Backend.h"
#include "runtime/executor/Program.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "gtest/gtest.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera {
namespace conformance {

using runtime::BFloat16;
using runtime::DType;
using runtime::Float16;
using runtime::Tensor;
using runtime::exec::TensorType;

//===----------------------------------------------------------------------===//
// Coverage registry
//===----------------------------------------------------------------------===//

/// Declares that family `family` exercises kernels `names` (call at static
/// initialisation, normally through TESSERA_CONFORMANCE_FAMILY). A name
/// registered by two families is an error reported by CoverageTest.
bool registerKernels(llvm::StringRef family,
                     std::initializer_list<const char *> names);
/// Every registered name -> its family (or "a, b" when several registered it).
const std::map<std::string, std::string> &registeredKernels();
/// Kernel names this process ran successfully on the cpu backend.
const std::set<std::string> &kernelsRunOnCpu();

//===----------------------------------------------------------------------===//
// Programs, tensors and references
//===----------------------------------------------------------------------===//

/// "tensor<2x3xf32>" ("tensor<f32>" for rank 0).
std::string typeStr(const TensorType &t);
TensorType typeOf(const Tensor &t);

/// The text of a module whose @kernel runs `tsrt.kernel "kernel"` with
/// `attrs` (an attribute-dictionary body, e.g. "axis = -1 : i64") on
/// arguments of types `ins`, returning results of types `outs`.
std::string kernelProgram(llvm::StringRef kernel, llvm::StringRef attrs,
                          llvm::ArrayRef<TensorType> ins,
                          llvm::ArrayRef<TensorType> outs);

/// "name = <v> : f32" with v printed exactly enough for MLIR's parser.
std::string f32Attr(llvm::StringRef name, double value);

/// Deterministic values in [lo, hi) (a fixed LCG, the same on every
/// platform).
std::vector<float> randomValues(int64_t n, uint32_t seed, float lo = -1.0f,
                                float hi = 1.0f);
Tensor randomF32(std::vector<int64_t> shape, uint32_t seed, float lo = -1.0f,
                 float hi = 1.0f);
Tensor f32(std::vector<int64_t> shape, std::vector<float> values);
Tensor i64(std::vector<int64_t> shape, std::vector<int64_t> values);
Tensor i1(std::vector<int64_t> shape, std::vector<uint8_t> values);
/// `t` (f32) rounded to `dtype` (bf16 or f16) to nearest even, converted
/// here (not by a kernel under test).
Tensor narrow(const Tensor &t, DType dtype);
/// Every element as a double (f32, bf16, f16 widened exactly; i64; i1 0/1).
std::vector<double> values(const Tensor &t);

/// Expects `got` to have `shape` and every element within atol + rtol·|want|
/// of `want` (NaN must be NaN, infinities equal); reports the first few
/// mismatches with their flat index.
void expectNear(const Tensor &got, const std::vector<int64_t> &shape,
                const std::vector<double> &want, double rtol, double atol,
                llvm::StringRef what = "result");
/// Expects dtype, shape and every element exactly equal (0.0 == -0.0).
void expectEqual(const Tensor &got, DType dtype,
                 const std::vector<int64_t> &shape,
                 const std::vector<double> &want,
                 llvm::StringRef what = "result");
/// Expects the raw bytes of `got` and `want` (same dtype and shape) equal.
void expectBitEqual(const Tensor &got, const Tensor &want,
                    llvm::StringRef what = "result");

/// Tolerances of a result of `dtype` against a double reference: f32 kernels
/// accumulate in f32 or wider (1e-5 relative), bf16 / f16 results are
/// rounded once more (2^-8 / 2^-11 relative half-ulps, with headroom).
double rtolFor(DType dtype);

/// The load error of kernelProgram(kernel, attrs, ins, outs) compiled for
/// `backend`, without the "<source>: op #0 (kernel "k") at <loc>: " prefix
/// (whose presence is checked: every load error names the op), or "" when
/// it loads.
std::string loadErrorOn(runtime::exec::Backend &backend, llvm::StringRef kernel,
                        llvm::StringRef attrs,
                        const std::vector<TensorType> &ins,
                        const std::vector<TensorType> &outs);

//===----------------------------------------------------------------------===//
// The fixture
//===----------------------------------------------------------------------===//

class KernelTest : public ::testing::TestWithParam<std::string> {
protected:
  /// Creates (once per process) the backend GetParam() names, or skips with
  /// the reason it cannot be created.
  void SetUp() override;

  runtime::exec::Backend &backend() { return *device; }

  /// Runs one kernel: compile, upload `ins`, run, finishStep, download.
  /// Errors are the load error ("load: " + Program::compile's message) or
  /// the run error ("run: " + message). `options` (its backend is set
  /// here) may carry the manifest's optimizer object.
  llvm::Expected<std::vector<Tensor>>
  tryRun(llvm::StringRef kernel, llvm::StringRef attrs,
         const std::vector<Tensor> &ins, const std::vector<TensorType> &outs,
         runtime::exec::CompileOptions options = {});
  /// Runs function @kernel of the module `text` (any tsrt program, e.g. one
  /// with a static memory plan: its arena is allocated on the backend) on
  /// `ins` as tryRun does.
  llvm::Expected<std::vector<Tensor>>
  tryRunProgram(llvm::StringRef text, const std::vector<Tensor> &ins,
                runtime::exec::CompileOptions options = {});
  /// tryRun; a failure is a test failure and gives an empty list (check
  /// its size with ASSERT_EQ before indexing).
  std::vector<Tensor> run(llvm::StringRef kernel, llvm::StringRef attrs,
                          const std::vector<Tensor> &ins,
                          const std::vector<TensorType> &outs,
                          runtime::exec::CompileOptions options = {});
  /// loadErrorOn(backend(), ...).
  std::string loadError(llvm::StringRef kernel, llvm::StringRef attrs,
                        const std::vector<TensorType> &ins,
                        const std::vector<TensorType> &outs);
  /// The run error (load must succeed), or "" when it runs.
  std::string runError(llvm::StringRef kernel, llvm::StringRef attrs,
                       const std::vector<Tensor> &ins,
                       const std::vector<TensorType> &outs);

private:
  runtime::exec::Backend *device = nullptr;
};

/// The instance's name: the backend's.
std::string backendParamName(const ::testing::TestParamInfo<std::string> &info);

/// Declares a kernel family: registers `family`'s kernel names (the
/// remaining arguments, see registerKernels) and defines `Suite`, a plain
/// KernelTest, instantiated for every backend (TESSERA_CONFORMANCE_BACKENDS).
/// Use at namespace scope in the family's source:
///   TESSERA_CONFORMANCE_FAMILY(GatherTest, "gather", "gather", "gather_grad");
#define TESSERA_CONFORMANCE_FAMILY(Suite, family, ...)                         \
  [[maybe_unused]] const bool k##Suite##Registered =                           \
      ::tessera::conformance::registerKernels(family, {__VA_ARGS__});          \
  class Suite : public ::tessera::conformance::KernelTest {};                  \
  TESSERA_CONFORMANCE_BACKENDS(Suite)

/// Instantiates suite `Suite` (a KernelTest subclass) as Cpu/Suite.Test/cpu
/// and Cuda/Suite.Test/cuda.
#define TESSERA_CONFORMANCE_BACKENDS(Suite)                                    \
  INSTANTIATE_TEST_SUITE_P(Cpu, Suite, ::testing::Values("cpu"),               \
                           ::tessera::conformance::backendParamName);          \
  INSTANTIATE_TEST_SUITE_P(Cuda, Suite, ::testing::Values("cuda"),             \
                           ::tessera::conformance::backendParamName)

} // namespace conformance
} // namespace tessera

#endif // TESSERA_TEST_CONFORMANCE_HARNESS_H

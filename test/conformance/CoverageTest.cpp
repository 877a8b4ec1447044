//===- CoverageTest.cpp - the suite exercises every kernel bound ---------===//
//-===//
//
// The kernel names the families register (registerKernels) must equal the
// names the backend registry lists for each backend
// (registeredKernelNames, runtime/executor/BackendRegistry.h). The listing
// needs no device, so the Cuda/ instance runs on a machine without a GPU
// (it skips only in a build without the CUDA backend).
//
// An independent check of the listing: each name it lists is one that
// Program::compile knows on the cpu backend (its load error, if any, is not
// "unknown kernel"), and every `tsr` op the compiler lowers to a
// `tsrt.kernel` of its mnemonic (passes/lowering/LowerToRuntime.cpp) that
// the cpu backend knows is listed.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include "dialects/tsr/TsrDialect.h"
#include "runtime/executor/BackendRegistry.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringExtras.h"

#include <set>

using namespace tessera::conformance;
namespace exec = tessera::runtime::exec;

namespace {

/// Lists the kernels the GetParam() backend binds (`listed`, and as a set
/// `bound`), or skips when this build registers no such backend.
class CoverageTest : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    listed = exec::registeredKernelNames(GetParam());
    if (listed.empty())
      GTEST_SKIP() << "this build registers no \"" << GetParam()
                   << "\" backend (registeredKernelNames is empty)";
    bound.insert(listed.begin(), listed.end());
  }
  std::vector<std::string> listed;
  std::set<std::string> bound;
};
TESSERA_CONFORMANCE_BACKENDS(CoverageTest);

std::string join(const std::set<std::string> &names) {
  return names.empty() ? "(none)" : llvm::join(names, ", ");
}

TEST_P(CoverageTest, SuiteExercisesEveryKernelTheBackendBinds) {
  EXPECT_EQ(bound.size(), listed.size()) << "the listing repeats a name";
  std::set<std::string> suite, untested, unbound;
  for (const auto &[name, family] : registeredKernels()) {
    suite.insert(name);
    EXPECT_EQ(family.find(','), std::string::npos)
        << "kernel \"" << name
        << "\" is registered by several families: " << family;
    if (!bound.count(name))
      unbound.insert(name);
  }
  for (const std::string &name : bound)
    if (!suite.count(name))
      untested.insert(name);
  EXPECT_TRUE(untested.empty())
      << "the " << GetParam()
      << " backend binds kernels no family of the conformance suite "
         "exercises: "
      << join(untested);
  EXPECT_TRUE(unbound.empty())
      << "the conformance suite exercises kernels the " << GetParam()
      << " backend does not bind: " << join(unbound);
}

/// True when a program calling kernel `name` loads on the cpu backend or
/// fails for another reason than "unknown kernel" (the operand and result
/// types are those of a unary kernel; most kernels reject them).
bool cpuKnows(llvm::StringRef name) {
  static std::unique_ptr<exec::Backend> cpu =
      llvm::cantFail(exec::createBackend("cpu"));
  TensorType t{DType::F32, {2}};
  return loadErrorOn(*cpu, name, "", {t}, {t}) != "unknown kernel";
}

TEST_P(CoverageTest, ListingAgreesWithTheCpuAndTheCompilersOps) {
  for (const std::string &name : bound)
    EXPECT_TRUE(cpuKnows(name))
        << "listed kernel \"" << name
        << "\" is an unknown kernel to Program::compile on the cpu backend";
  EXPECT_FALSE(cpuKnows("frobnicate")); // the probe can say no
  mlir::DialectRegistry registry;
  registry.insert<tessera::tsr::TsrDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::set<std::string> emitted, missing;
  for (mlir::RegisteredOperationName op : ctx.getRegisteredOperations()) {
    if (op.getDialectNamespace() != "tsr")
      continue;
    std::string name = op.stripDialect().str();
    if (!cpuKnows(name))
      continue; // lowered otherwise (tsr.constant) or removed before
    emitted.insert(name);
    if (!bound.count(name))
      missing.insert(name);
  }
  EXPECT_GT(emitted.size(), 40u) << join(emitted);
  EXPECT_TRUE(missing.empty())
      << "tsr ops whose kernel the cpu backend knows but the " << GetParam()
      << " listing lacks: " << join(missing);
}

} // namespace

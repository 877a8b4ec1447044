//===- CoverageTest.cpp - the suite exercises every kernel a backend binds
//-===//
//
// The kernel names the families register (registerKernels) must equal the
// names the backend registry lists for each backend
// (registeredKernelNames, runtime/executor/BackendRegistry.h). The listing
// needs no device, so the Cuda/ instance runs on a machine without a GPU
// (it skips only in a build without the CUDA backend).
//
// An independent check of the listing: each name it lists is one that
// Kernels.cpp's validation (resolveKernel, which Program::compile runs
// before any backend binds) knows, and every `tsr` op the compiler lowers
// to a `tsrt.kernel` of its mnemonic (passes/lowering/LowerToRuntime.cpp)
// that resolveKernel knows is listed.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include "dialects/tsr/TsrDialect.h"
#include "runtime/executor/BackendRegistry.h"
#include "runtime/executor/Kernels.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringExtras.h"

#include <set>

using namespace tessera::conformance;
namespace exec = tessera::runtime::exec;

namespace {

class CoverageTest : public ::testing::TestWithParam<std::string> {};
TESSERA_CONFORMANCE_BACKENDS(CoverageTest);

std::string join(const std::set<std::string> &names) {
  return names.empty() ? "(none)" : llvm::join(names, ", ");
}

TEST_P(CoverageTest, SuiteExercisesEveryKernelTheBackendBinds) {
  std::vector<std::string> listed = exec::registeredKernelNames(GetParam());
  if (listed.empty())
    GTEST_SKIP() << "this build registers no \"" << GetParam()
                 << "\" backend (registeredKernelNames is empty)";
  std::set<std::string> bound(listed.begin(), listed.end());
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

/// True when resolveKernel knows `name` (any error but "unknown kernel":
/// with no operands every known kernel rejects the operand count).
bool validationKnows(llvm::StringRef name) {
  mlir::MLIRContext ctx;
  exec::Instruction inst;
  exec::CompileOptions options;
  llvm::Error e = exec::resolveKernel(name, mlir::DictionaryAttr::get(&ctx, {}),
                                      {}, {}, options, inst);
  if (!e)
    return true;
  return llvm::toString(std::move(e)) != "unknown kernel";
}

TEST_P(CoverageTest, ListingAgreesWithValidationAndTheCompilersOps) {
  std::vector<std::string> listed = exec::registeredKernelNames(GetParam());
  if (listed.empty())
    GTEST_SKIP() << "this build registers no \"" << GetParam()
                 << "\" backend (registeredKernelNames is empty)";
  std::set<std::string> bound(listed.begin(), listed.end());
  for (const std::string &name : bound)
    EXPECT_TRUE(validationKnows(name))
        << "listed kernel \"" << name << "\" is unknown to resolveKernel";
  EXPECT_FALSE(validationKnows("frobnicate")); // the probe can say no
  mlir::DialectRegistry registry;
  registry.insert<tessera::tsr::TsrDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::set<std::string> emitted, missing;
  for (mlir::RegisteredOperationName op : ctx.getRegisteredOperations()) {
    if (op.getDialectNamespace() != "tsr")
      continue;
    std::string name = op.stripDialect().str();
    if (!validationKnows(name))
      continue; // lowered otherwise (tsr.constant) or removed before
    emitted.insert(name);
    if (!bound.count(name))
      missing.insert(name);
  }
  EXPECT_GT(emitted.size(), 40u) << join(emitted);
  EXPECT_TRUE(missing.empty())
      << "tsr ops whose kernel the validation knows but the " << GetParam()
      << " listing lacks: " << join(missing);
}

} // namespace

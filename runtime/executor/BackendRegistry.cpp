//===- BackendRegistry.cpp - the executor's backends, by name -------------===//
//
// The process-wide registry, filled once by the generated
// registerBuiltBackends, and the lookups on it: createBackend, cpuBackend,
// cudaBackendBuilt, the device-free kernel listing, and resolveKernel.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/BackendRegistry.h"

#include "runtime/executor/Backend.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/ErrorHandling.h"

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

const BackendRegistry &exec::backendRegistry() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    registerBuiltBackends(r);
    return r;
  }();
  return registry;
}

std::vector<std::string> exec::registeredBackendNames() {
  std::vector<std::string> names;
  for (const BackendInfo &b : backendRegistry().backends())
    if (b.built())
      names.push_back(b.name);
  return names;
}

std::vector<std::string> exec::registeredKernelNames(llvm::StringRef backend) {
  std::vector<std::string> names;
  if (const BackendInfo *b = backendRegistry().lookup(backend))
    for (KernelKind k : b->kernels)
      names.push_back(kernelName(k).str());
  return names;
}

llvm::Expected<std::unique_ptr<Backend>>
exec::createBackend(llvm::StringRef name, const BackendOptions &options) {
  const BackendRegistry &registry = backendRegistry();
  const BackendInfo *info = registry.lookup(name);
  if (!info) {
    // "expected cpu or cuda": every backend this build knows of.
    std::string expected;
    llvm::ArrayRef<BackendInfo> all = registry.backends();
    for (size_t i = 0; i < all.size(); ++i)
      expected += (i == 0                ? ""
                   : i + 1 == all.size() ? " or "
                                         : ", ") +
                  all[i].name;
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "unknown backend '" + name + "' (expected " +
                                       expected + ")");
  }
  if (!info->built())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--backend " + name + ": " + info->notBuilt);
  return info->create(options);
}

Backend &exec::cpuBackend() {
  static std::unique_ptr<Backend> backend = [] {
    llvm::Expected<std::unique_ptr<Backend>> b = createBackend("cpu");
    if (!b)
      llvm::report_fatal_error(llvm::Twine("the cpu backend is not usable: ") +
                               llvm::toString(b.takeError()));
    return std::move(*b);
  }();
  return *backend;
}

llvm::Error exec::resolveKernel(llvm::StringRef name,
                                mlir::DictionaryAttr attrs,
                                llvm::ArrayRef<TensorType> operands,
                                llvm::ArrayRef<TensorType> results,
                                const CompileOptions &options,
                                Instruction &inst) {
  llvm::Expected<KernelDesc> desc = decodeKernel(
      name, attrs, operands, results, options, inst.commIndex, inst.commSize);
  if (!desc)
    return desc.takeError();
  Backend &backend = options.backend ? *options.backend : cpuBackend();
  return backend.bindKernel(*desc, inst);
}

bool exec::cudaBackendBuilt() {
  const BackendInfo *cuda = backendRegistry().lookup("cuda");
  return cuda && cuda->built();
}

//===- BackendRegistry.h - backends by name, and what they bind -*- C++ -*-===//
//
// The executor knows its backends only through this registry, as IREE's
// runtime knows its HAL drivers: each backend library (runtime/backends/cpu,
// runtime/backends/cuda) provides a `register<Name>Backend(BackendRegistry &)`
// that adds one BackendInfo: the backend's name, a factory, and the kernel
// kinds its dispatch table binds. The registrations of the backends that are
// built are called, explicitly, by a small file CMake generates
// (RegisterBackends.cpp, see runtime/executor/CMakeLists.txt) the first time
// the registry is used; no static initialiser is involved, so a static
// library's registration cannot be dropped by the linker.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_BACKENDREGISTRY_H
#define TESSERA_RUNTIME_EXECUTOR_BACKENDREGISTRY_H

#include "runtime/executor/KernelDesc.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

class Backend;
struct BackendOptions;

/// One registered backend.
struct BackendInfo {
  /// The name `createBackend` and `tessera-run --backend` take ("cpu").
  std::string name;
  /// Makes the backend (see createBackend for the errors it may return).
  /// Null for a backend that is known but not in this build.
  std::function<llvm::Expected<std::unique_ptr<Backend>>(
      const BackendOptions &)>
      create;
  /// The kernel kinds the backend's dispatch table binds, in KernelKind
  /// order. Known without a device.
  std::vector<KernelKind> kernels;
  /// A backend not in this build: why ("this tessera-run was built without
  /// the CUDA backend (...)"), the error createBackend returns for it.
  std::string notBuilt;

  bool built() const { return static_cast<bool>(create); }
};

/// Backends by name, in registration order. Filled by the backend
/// libraries' register functions (add) and, for the backends CMake did not
/// build, by the generated registration file (addNotBuilt).
class BackendRegistry {
public:
  /// Adds `info`; a backend of the same name is replaced.
  void add(BackendInfo info) {
    for (BackendInfo &e : entries)
      if (e.name == info.name) {
        e = std::move(info);
        return;
      }
    entries.push_back(std::move(info));
  }
  /// Records backend `name` as known but not built, `why`.
  void addNotBuilt(llvm::StringRef name, llvm::StringRef why) {
    BackendInfo info;
    info.name = name.str();
    info.notBuilt = why.str();
    add(std::move(info));
  }
  /// The backend called `name` (built or not), or null.
  const BackendInfo *lookup(llvm::StringRef name) const {
    for (const BackendInfo &e : entries)
      if (e.name == name)
        return &e;
    return nullptr;
  }
  /// Every backend, built or not, in registration order.
  llvm::ArrayRef<BackendInfo> backends() const { return entries; }

private:
  std::vector<BackendInfo> entries;
};

/// The process-wide registry, holding every backend of this build
/// (registered on first use, by the generated registerBuiltBackends).
const BackendRegistry &backendRegistry();

/// Calls the register function of every backend this build has, and
/// records the others as not built. Defined by the file CMake generates
/// (BuiltBackends.cpp in the build tree; see runtime/executor/
/// CMakeLists.txt).
void registerBuiltBackends(BackendRegistry &registry);

/// The names of the backends this build registered, in registration order
/// ("cpu", then "cuda" when the CUDA backend is built).
std::vector<std::string> registeredBackendNames();

/// The `tsrt.kernel` names (as in tsrt programs: "matmul",
/// "attention_grad", ...) that backend `backend` ("cpu", "cuda") binds, in
/// KernelKind order (runtime/executor/KernelKinds.def). Needs no device: a
/// build with the CUDA backend lists its kernels on a machine without a
/// GPU. Empty for a backend that this build does not register (an unknown
/// name, or "cuda" in a build without the CUDA backend).
std::vector<std::string> registeredKernelNames(llvm::StringRef backend);

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_BACKENDREGISTRY_H

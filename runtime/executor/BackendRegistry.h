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
  std::function<llvm::Expected<std::unique_ptr<Backend>>(
      const BackendOptions &)>
      create;
  /// The kernel kinds the backend's dispatch table binds, in KernelKind
  /// order. Known without a device.
  std::vector<KernelKind> kernels;
};

/// Backends by name, in registration order.
class BackendRegistry {
public:
  /// Adds `info`; a second backend of the same name replaces the first.
  void add(BackendInfo info);
  /// The backend called `name`, or null.
  const BackendInfo *lookup(llvm::StringRef name) const;
  llvm::ArrayRef<BackendInfo> backends() const { return entries; }

private:
  std::vector<BackendInfo> entries;
};

/// The process-wide registry, holding every backend of this build
/// (registered on first use).
const BackendRegistry &backendRegistry();

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

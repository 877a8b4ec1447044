//===- KernelDesc.h - a tsrt.kernel decoded once, typed --------*- C++ -*-===//
//
// Kernel kinds: every `tsrt.kernel` name the runtime knows is one
// KernelKind (the list is KernelKinds.def), mapped from its name once, at
// load, by one table; backends dispatch on the kind, never on the name.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_KERNELDESC_H
#define TESSERA_RUNTIME_EXECUTOR_KERNELDESC_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace tessera {
namespace runtime {
namespace exec {

/// One kind per `tsrt.kernel` name (KernelKinds.def).
enum class KernelKind : uint8_t {
#define TESSERA_KERNEL(Kind, Name, Family) Kind,
#include "runtime/executor/KernelKinds.def"
};

/// Number of KernelKinds (the size of a backend's dispatch table).
constexpr size_t kNumKernelKinds = 0
#define TESSERA_KERNEL(Kind, Name, Family) +1
#include "runtime/executor/KernelKinds.def"
    ;

/// The tsrt name of `kind` ("matmul").
llvm::StringRef kernelName(KernelKind kind);

/// The kind of the tsrt kernel called `name`, or nothing for a name the
/// runtime does not know.
std::optional<KernelKind> kernelKindOf(llvm::StringRef name);

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_KERNELDESC_H

//===- KernelDesc.cpp - a tsrt.kernel decoded once, typed -----------------===//

#include "runtime/executor/KernelDesc.h"

#include "llvm/ADT/StringMap.h"

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

llvm::StringRef exec::kernelName(KernelKind kind) {
  static constexpr llvm::StringLiteral names[] = {
#define TESSERA_KERNEL(Kind, Name, Family) Name,
#include "runtime/executor/KernelKinds.def"
  };
  return names[static_cast<size_t>(kind)];
}

std::optional<KernelKind> exec::kernelKindOf(llvm::StringRef name) {
  // Built once: the only place a kernel name becomes a kind.
  static const llvm::StringMap<KernelKind> kinds = [] {
    llvm::StringMap<KernelKind> m;
    for (size_t i = 0; i < kNumKernelKinds; ++i)
      m[kernelName(static_cast<KernelKind>(i))] = static_cast<KernelKind>(i);
    return m;
  }();
  auto it = kinds.find(name);
  if (it == kinds.end())
    return std::nullopt;
  return it->second;
}

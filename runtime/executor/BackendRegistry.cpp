//===- BackendRegistry.cpp - backends by name, and what they bind ---------===//

#include "runtime/executor/BackendRegistry.h"

#include "runtime/executor/Backend.h"

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

void BackendRegistry::add(BackendInfo info) {
  for (BackendInfo &e : entries)
    if (e.name == info.name) {
      e = std::move(info);
      return;
    }
  entries.push_back(std::move(info));
}

const BackendInfo *BackendRegistry::lookup(llvm::StringRef name) const {
  for (const BackendInfo &e : entries)
    if (e.name == name)
      return &e;
  return nullptr;
}

const BackendRegistry &exec::backendRegistry() {
  // Provisional: both backends bind every kernel kind.
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    std::vector<KernelKind> all;
    for (size_t i = 0; i < kNumKernelKinds; ++i)
      all.push_back(static_cast<KernelKind>(i));
    r.add({"cpu",
           [](const BackendOptions &o) { return createBackend("cpu", o); },
           all});
    if (cudaBackendBuilt())
      r.add({"cuda",
             [](const BackendOptions &o) { return createBackend("cuda", o); },
             all});
    return r;
  }();
  return registry;
}

std::vector<std::string> exec::registeredBackendNames() {
  std::vector<std::string> names;
  for (const BackendInfo &b : backendRegistry().backends())
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

//===- Backend.cpp - what every backend shares ----------------------------===//
//
// The defaults of the Backend interface and the host arena. Backends
// themselves live in runtime/backends; the executor finds them by name
// (BackendRegistry.cpp).
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Backend.h"

#include "runtime/executor/Program.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

Backend::~Backend() = default;
Communication::~Communication() = default;

llvm::Error Backend::bindCollective(const CollectiveSpec &, const TensorType &,
                                    const TensorType &, Instruction &) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "the " + name() +
                                     " backend has no collectives");
}

llvm::Error Backend::accumulate(Tensor &acc, const Tensor &value) {
  if (acc.isNull()) {
    acc = value.clone();
    return llvm::Error::success();
  }
  float *a = acc.data<float>();
  const float *v = value.data<float>();
  for (int64_t i = 0, n = acc.numel(); i < n; ++i)
    a[i] += v[i];
  return llvm::Error::success();
}

static llvm::Error noCapture(llvm::StringRef backend) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "the " + backend +
          " backend cannot capture steps (--cuda-graph needs "
          "--backend cuda)");
}
llvm::Error Backend::beginCapture() { return noCapture(name()); }
llvm::Error Backend::endCapture() { return noCapture(name()); }
llvm::Error Backend::replayCaptured() { return noCapture(name()); }

llvm::Expected<Arena> Arena::allocate(int64_t bytes) {
  Arena a;
  a.bytes = bytes;
  size_t alloc =
      static_cast<size_t>(std::max<int64_t>(bytes, 64) + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, alloc);
  if (!p)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("cannot allocate an arena of {0} bytes", bytes));
  a.memory = std::shared_ptr<void>(p, [](void *q) { std::free(q); });
  return a;
}

//===- BackendTest.cpp - backend selection (tessera-run --backend) --------===//

#include "runtime/executor/Backend.h"
#include "runtime/executor/BackendRegistry.h"
#include "runtime/executor/Program.h"

#include "gtest/gtest.h"

#include <cstring>
#include <string>

using namespace tessera::runtime;
using namespace tessera::runtime::exec;

namespace {

std::string errorOf(llvm::Expected<std::unique_ptr<Backend>> b) {
  if (b)
    return "";
  return llvm::toString(b.takeError());
}

TEST(Backend, CpuBackendKeepsTensorsOnTheHost) {
  llvm::Expected<std::unique_ptr<Backend>> b = createBackend("cpu");
  ASSERT_TRUE(static_cast<bool>(b)) << llvm::toString(b.takeError());
  EXPECT_EQ((*b)->name(), "cpu");
  EXPECT_TRUE((*b)->hostMemory());
  Tensor t = Tensor::fromVector<float>({3}, {1, 2, 3});
  llvm::Expected<Tensor> up = (*b)->upload(t);
  ASSERT_TRUE(static_cast<bool>(up));
  EXPECT_TRUE(up->sharesStorageWith(t)); // no copy on the host
  llvm::Expected<Tensor> fresh = (*b)->allocate(DType::F32, {3});
  ASSERT_TRUE(static_cast<bool>(fresh));
  ASSERT_FALSE((*b)->copy(t, *fresh));
  EXPECT_EQ(std::memcmp(fresh->raw(), t.raw(), t.bytes()), 0);
  EXPECT_FALSE((*b)->supportsCommunication("tsrt.all_reduce"));
  EXPECT_FALSE((*b)->finishStep());
}

TEST(Backend, UnknownNameIsAnError) {
  std::string msg = errorOf(createBackend("tpu"));
  EXPECT_NE(msg.find("unknown backend 'tpu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu or cuda"), std::string::npos) << msg;
}

// Without a GPU (or without the CUDA backend in the build) asking for cuda
// must be a clear error, never a crash; with one it must work.
TEST(Backend, CudaIsAvailableOrSaysWhyNot) {
  llvm::Expected<std::unique_ptr<Backend>> b = createBackend("cuda");
  if (b) {
    EXPECT_EQ((*b)->name(), "cuda");
    EXPECT_FALSE((*b)->hostMemory());
    // Collectives go through its communication (host-staged MPI by
    // default here; tessera-run defaults to NCCL).
    EXPECT_FALSE((*b)->supportsCommunication("tsrt.all_reduce"));
    ASSERT_NE((*b)->communication(), nullptr);
    EXPECT_EQ((*b)->communication()->transport(), Transport::Mpi);
    return;
  }
  std::string msg = llvm::toString(b.takeError());
  EXPECT_NE(msg.find("--backend cuda"), std::string::npos) << msg;
  if (cudaBackendBuilt())
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
  else
    EXPECT_NE(msg.find("built without the CUDA backend"), std::string::npos)
        << msg;
}

// The registry lists what each backend binds without a device: every
// kernel name maps back to its kind, the cpu backend binds them all, and
// an unknown backend binds nothing.
TEST(Backend, RegistryListsKernelsWithoutADevice) {
  std::vector<std::string> cpu = registeredKernelNames("cpu");
  EXPECT_EQ(cpu.size(), kNumKernelKinds);
  for (const std::string &name : cpu) {
    std::optional<KernelKind> kind = kernelKindOf(name);
    ASSERT_TRUE(kind.has_value()) << name;
    EXPECT_EQ(kernelName(*kind), name);
  }
  EXPECT_NE(llvm::find(cpu, "matmul"), cpu.end());
  EXPECT_NE(llvm::find(cpu, "attention_grad"), cpu.end());
  EXPECT_FALSE(kernelKindOf("frobnicate").has_value());
  EXPECT_TRUE(registeredKernelNames("tpu").empty());
  std::vector<std::string> backends = registeredBackendNames();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends[0], "cpu");
  EXPECT_EQ(llvm::is_contained(backends, "cuda"), cudaBackendBuilt());
  EXPECT_EQ(registeredKernelNames("cuda").empty(), !cudaBackendBuilt());
}

} // namespace

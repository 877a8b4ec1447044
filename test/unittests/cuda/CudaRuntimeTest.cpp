//===- CudaRuntimeTest.cpp - device detection and copies ------------------===//

#include "CudaTestUtil.h"

using namespace tessera::runtime;
using namespace tessera::runtime::test;

namespace {

// Runs everywhere: on a machine without a GPU the reason must be an error
// that says so, not a crash.
TEST(CudaRuntime, DeviceAvailableExplainsItself) {
  llvm::Error e = cuda::deviceAvailable();
  if (!e)
    return; // a GPU is present: covered by the tests below
  std::string msg = llvm::toString(std::move(e));
  EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
}

class CudaRuntimeTest : public CudaTest {};

TEST_F(CudaRuntimeTest, RoundTripKeepsBytes) {
  Tensor a = randomF32({3, 5, 7}, 1);
  Tensor b = host(dev(a));
  ASSERT_EQ(b.shape(), a.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.bytes()), 0);
}

TEST_F(CudaRuntimeTest, EmptyTensorHasAPointer) {
  Tensor e = devEmpty(DType::F32, {0, 4});
  EXPECT_NE(e.raw(), nullptr);
  EXPECT_EQ(e.numel(), 0);
}

TEST_F(CudaRuntimeTest, StatusIsReadAndReset) {
  Tensor s = devEmpty(DType::I64, {4}); // 32 bytes = one DeviceStatus
  ASSERT_EQ(cudaMemset(s.raw(), 0, sizeof(cuda::DeviceStatus)), cudaSuccess);
  cuda::DeviceStatus bad;
  bad.code = cuda::DeviceStatus::IdOutOfRange;
  bad.index = 7;
  bad.value = 99;
  ASSERT_EQ(cudaMemcpy(s.raw(), &bad, sizeof(bad), cudaMemcpyHostToDevice),
            cudaSuccess);
  auto *status = static_cast<cuda::DeviceStatus *>(s.raw());
  llvm::Expected<cuda::DeviceStatus> got = cuda::takeStatus(status, nullptr);
  ASSERT_TRUE(static_cast<bool>(got)) << llvm::toString(got.takeError());
  EXPECT_EQ(got->code, cuda::DeviceStatus::IdOutOfRange);
  EXPECT_EQ(got->index, 7);
  EXPECT_EQ(got->value, 99);
  llvm::Expected<cuda::DeviceStatus> again = cuda::takeStatus(status, nullptr);
  ASSERT_TRUE(static_cast<bool>(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->code, cuda::DeviceStatus::Ok);
}

} // namespace

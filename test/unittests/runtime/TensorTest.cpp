//===- TensorTest.cpp - runtime Tensor ------------------------------------===//

#include "runtime/Tensor.h"

#include "gtest/gtest.h"

using namespace tessera::runtime;

TEST(Tensor, EmptyZerosAndAccessors) {
  Tensor t = Tensor::zeros(DType::F32, {2, 3});
  EXPECT_FALSE(t.isNull());
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.bytes(), 24u);
  EXPECT_EQ(t.dim(-1), 3);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(t.data<float>()[i], 0.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);

  Tensor s = Tensor::scalar(2.5f);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.data<float>()[0], 2.5f);

  Tensor b = Tensor::zeros(DType::I1, {5});
  EXPECT_EQ(b.bytes(), 5u);
  Tensor i = Tensor::empty(DType::I64, {0, 4});
  EXPECT_EQ(i.numel(), 0);
  EXPECT_EQ(i.bytes(), 0u);
  EXPECT_TRUE(Tensor().isNull());
  EXPECT_EQ(dtypeSize(DType::I64), 8u);
  EXPECT_STREQ(dtypeName(DType::I1), "i1");
  EXPECT_EQ(shapeToString({2, 3}), "[2, 3]");
}

TEST(Tensor, ReshapeSharesCloneCopies) {
  Tensor t = Tensor::fromVector<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor r = t.reshape({3, 2});
  EXPECT_TRUE(r.sharesStorageWith(t));
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{3, 2}));
  r.data<int64_t>()[0] = 42;
  EXPECT_EQ(t.data<int64_t>()[0], 42);
  Tensor c = t.clone();
  EXPECT_FALSE(c.sharesStorageWith(t));
  c.data<int64_t>()[1] = 7;
  EXPECT_EQ(t.data<int64_t>()[1], 2);
  EXPECT_EQ(c.shape(), t.shape());
}

TEST(Tensor, View) {
  float buf[4] = {1, 2, 3, 4};
  Tensor v = Tensor::view(buf, DType::F32, {2, 2});
  EXPECT_EQ(v.data<float>()[3], 4.0f);
  v.data<float>()[0] = 9;
  EXPECT_EQ(buf[0], 9.0f);
}

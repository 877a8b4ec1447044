//===- TensorTest.cpp - runtime Tensor ------------------------------------===//

#include "runtime/Tensor.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>

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

TEST(BFloat16, RoundToNearestEven) {
  auto bits = [](float f) { return toBFloat16(f).bits; };
  auto fromBits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  };
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
  EXPECT_STREQ(dtypeName(DType::BF16), "bf16");
  EXPECT_EQ(bits(1.0f), 0x3F80);
  EXPECT_EQ(bits(-2.0f), 0xC000);
  EXPECT_EQ(bits(0.0f), 0x0000);
  EXPECT_EQ(bits(-0.0f), 0x8000);
  // Ties go to the even neighbour; anything above a tie rounds up.
  EXPECT_EQ(bits(fromBits(0x3F808000)), 0x3F80); // 1 + 2^-8: tie, down
  EXPECT_EQ(bits(fromBits(0x3F818000)), 0x3F82); // 1 + 3*2^-8: tie, up
  EXPECT_EQ(bits(fromBits(0x3F808001)), 0x3F81); // just above the tie
  EXPECT_EQ(bits(fromBits(0x3F807FFF)), 0x3F80); // just below the tie
  EXPECT_EQ(bits(fromBits(0xBF818000)), 0xBF82); // negative ties alike
  // Rounding carries into the exponent; beyond the largest bf16 -> inf.
  EXPECT_EQ(bits(fromBits(0x3FFFFFFF)), 0x4000);
  EXPECT_EQ(bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN stays NaN (also a NaN whose payload is only in the low bits).
  EXPECT_TRUE(std::isnan(toFloat(toBFloat16(fromBits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(toFloat(toBFloat16(std::nanf("")))));
  // Subnormals round like normals.
  EXPECT_EQ(bits(fromBits(0x00018000)), 0x0002);
  // Every bf16 value converts to f32 and back exactly.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = toFloat(BFloat16{static_cast<uint16_t>(b)});
    if (std::isnan(f))
      continue;
    ASSERT_EQ(toBFloat16(f).bits, b);
  }
}

// IEEE binary16 (fp16 mixed precision): round to nearest even, overflow to
// inf from 65520, subnormals down to 2^-24, NaN kept, exact widening.
TEST(Float16, RoundToNearestEven) {
  auto bits = [](float f) { return toFloat16(f).bits; };
  auto fromBits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  };
  EXPECT_EQ(dtypeSize(DType::F16), 2u);
  EXPECT_STREQ(dtypeName(DType::F16), "f16");
  EXPECT_TRUE(isFloat16Bit(DType::F16));
  EXPECT_TRUE(isFloat16Bit(DType::BF16));
  EXPECT_FALSE(isFloat16Bit(DType::F32));
  EXPECT_EQ(bits(1.0f), 0x3C00);
  EXPECT_EQ(bits(-2.0f), 0xC000);
  EXPECT_EQ(bits(0.0f), 0x0000);
  EXPECT_EQ(bits(-0.0f), 0x8000);
  EXPECT_EQ(bits(65504.0f), 0x7BFF); // largest finite
  // Ties go to the even neighbour (spacing at 1 is 2^-10).
  EXPECT_EQ(bits(1.0f + 0x1p-11f), 0x3C00);        // tie, down
  EXPECT_EQ(bits(1.0f + 3 * 0x1p-11f), 0x3C02);    // tie, up
  EXPECT_EQ(bits(fromBits(0x3F801001)), 0x3C01);   // just above the tie
  EXPECT_EQ(bits(-(1.0f + 3 * 0x1p-11f)), 0xBC02); // negative ties alike
  // Overflow: 65519.99 rounds to 65504, the tie 65520 and above to inf.
  EXPECT_EQ(bits(65519.0f), 0x7BFF);
  EXPECT_EQ(bits(65520.0f), 0x7C00);
  EXPECT_EQ(bits(-65520.0f), 0xFC00);
  EXPECT_EQ(bits(1e6f), 0x7C00);
  EXPECT_EQ(bits(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(bits(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isinf(toFloat(toFloat16(70000.0f))));
  // Subnormals: multiples of 2^-24 below 2^-14.
  EXPECT_EQ(bits(0x1p-14f), 0x0400);            // smallest normal
  EXPECT_EQ(bits(0x1p-24f), 0x0001);            // smallest subnormal
  EXPECT_EQ(bits(0x1p-25f), 0x0000);            // tie -> even 0
  EXPECT_EQ(bits(-0x1p-25f), 0x8000);           // signed zero
  EXPECT_EQ(bits(0x1.000002p-25f), 0x0001);     // above the tie
  EXPECT_EQ(bits(3 * 0x1p-25f), 0x0002);        // 1.5 ulp: tie, up
  EXPECT_EQ(bits(0x1p-15f), 0x0200);            // exact subnormal
  EXPECT_EQ(bits(0x1p-14f - 0x1p-25f), 0x0400); // rounds to normal
  EXPECT_EQ(bits(1e-10f), 0x0000);              // underflow to 0
  EXPECT_EQ(toFloat(Float16{0x0001}), 0x1p-24f);
  EXPECT_EQ(toFloat(Float16{0x83FF}), -1023 * 0x1p-24f);
  // NaN stays NaN (also a NaN whose payload is only in the low bits).
  EXPECT_TRUE(std::isnan(toFloat(toFloat16(fromBits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(toFloat(toFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(toFloat(Float16{0x7E00})));
  // Every f16 value converts to f32 and back exactly.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = toFloat(Float16{static_cast<uint16_t>(b)});
    if (std::isnan(f))
      continue;
    ASSERT_EQ(toFloat16(f).bits, b);
  }
#if defined(__FLT16_MAX__)
  // The compiler's _Float16 conversion (IEEE round to nearest even) agrees
  // on a sweep of f32 bit patterns (every 2^-23 ulp step near each f16).
  for (uint64_t u = 0; u < 0x100000000ull; u += 0x1001) {
    float f = fromBits(static_cast<uint32_t>(u));
    if (std::isnan(f))
      continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t ref;
    std::memcpy(&ref, &h, sizeof(ref));
    ASSERT_EQ(bits(f), ref) << std::hexfloat << f;
  }
#endif
}

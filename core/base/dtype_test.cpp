#include "core/base/dtype.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <random>

namespace kvlab {
namespace {

// Every finite f16 value survives f16 -> f32 -> f16 exactly.
TEST(DTypeTest, F16RoundTripsAllFiniteValues) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    if ((x & 0x7c00u) == 0x7c00u) continue;  // inf / nan
    ASSERT_EQ(F32ToF16(F16ToF32(x)), x) << std::hex << h;
  }
}

// Rounding of arbitrary floats agrees with the hardware converter (F16C).
TEST(DTypeTest, F16RoundingMatchesHardware) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(F32ToF16(f), hw) << "f=" << f;
  }
  // Values near the subnormal range, where rounding is hardest.
  for (float f = 1e-8f; f < 1e-4f; f *= 1.0007f) {
    ASSERT_EQ(F32ToF16(f), static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))) << f;
  }
}

TEST(DTypeTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(F32ToBF16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even).
  EXPECT_EQ(F32ToBF16(1.01171875f), 0x3f82);
  EXPECT_FLOAT_EQ(BF16ToF32(F32ToBF16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(NAN))));
}

TEST(DTypeTest, ParseNames) {
  DType t;
  ASSERT_TRUE(ParseDType("bf16", &t));
  EXPECT_EQ(t, DType::kBF16);
  ASSERT_TRUE(ParseDType("fp16", &t));
  EXPECT_EQ(t, DType::kF16);
  EXPECT_FALSE(ParseDType("int8", &t));
  EXPECT_EQ(DTypeBytes(DType::kF32), 4);
  EXPECT_EQ(DTypeBytes(DType::kBF16), 2);
}

}  // namespace
}  // namespace kvlab

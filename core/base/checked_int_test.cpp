#include "core/base/checked_int.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvlab {
namespace {

TEST(CheckedIntTest, ExactWhileInRangeAndNotOkOnceAnyStepOverflows) {
  const CheckedInt per_token = CheckedInt(2) * 32 * 8 * 128 * 16 / 8;
  ASSERT_TRUE(per_token.ok());
  EXPECT_EQ(per_token.value(), 131072);
  EXPECT_EQ((per_token * 8192).value(), int64_t{1} << 30);
  // 131,072 x 10^14 passes 2^63; a later division does not bring it back.
  const CheckedInt big = per_token * int64_t{100000000000000} / 1000000;
  EXPECT_FALSE(big.ok());
  EXPECT_EQ(big.value(), 0);
  EXPECT_FALSE((CheckedInt(INT64_MAX) + 1).ok());
  EXPECT_FALSE((CheckedInt(INT64_MIN) - 1).ok());
  EXPECT_FALSE((CheckedInt(INT64_MIN) / -1).ok());
  EXPECT_FALSE((CheckedInt(5) / 0).ok());
  EXPECT_TRUE((CheckedInt(INT64_MAX) - 1 + 1).ok());
  CheckedInt sum = 0;
  for (int i = 0; i < 4; ++i) sum += CheckedInt(INT64_MAX / 4);
  EXPECT_TRUE(sum.ok());
  sum += 4;
  EXPECT_FALSE(sum.ok());
}

}  // namespace
}  // namespace kvlab

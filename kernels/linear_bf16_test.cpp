// LinearBf16 against a float64 product of the same bf16 weights: one row (the
// in-register path) and several rows (the widened-row path), lengths that are
// and are not multiples of the kernel's lanes; on every kernel path the host
// has (kernels/cpu_isa.h), the others skipped and named.
#include "kernels/linear_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_isa.h"

namespace kvlab {
namespace {

uint16_t ToBf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

double FromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

void CheckShape(int64_t rows, int64_t k, int64_t n) {
  std::mt19937 gen(static_cast<uint32_t>(rows * 1000003 + k * 101 + n));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * k)), y(static_cast<size_t>(rows * n), NAN);
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  for (float& v : x) v = dist(gen);
  for (uint16_t& v : w) v = ToBf16(dist(gen));
  LinearBf16(x.data(), rows, k, w.data(), n, y.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(x[static_cast<size_t>(r * k + i)]) * FromBf16(w[static_cast<size_t>(j * k + i)]);
        ref += p;
        mag += std::fabs(p);
      }
      // fp32 accumulation of k products: error bounded by k * eps * sum|p|;
      // in practice far below, so a tenth of the bound still catches a wrong
      // widening (bf16 vs f16 bits) or a dropped tail.
      const double tol = 1e-6 + 0.1 * static_cast<double>(k) * 1.2e-7 * mag;
      ASSERT_NEAR(y[static_cast<size_t>(r * n + j)], ref, tol) << "rows " << rows << " k " << k << " row " << r
                                                                << " col " << j;
    }
  }
}

class LinearBf16Test : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const CpuIsa isa = static_cast<CpuIsa>(GetParam());
    if (!HostHasCpuIsa(isa)) GTEST_SKIP() << "kernel path " << CpuIsaName(isa) << " skipped: this CPU lacks it";
    ASSERT_TRUE(SetCpuIsa(isa).ok());
  }
  void TearDown() override { ClearCpuIsa(); }
};

TEST_P(LinearBf16Test, OneRowMatchesFloat64) {
  CheckShape(1, 64, 17);
  CheckShape(1, 4096, 33);
  CheckShape(1, 77, 5);  // a tail shorter than the lanes
  CheckShape(1, 3, 2);
}

TEST_P(LinearBf16Test, SeveralRowsMatchFloat64) {
  CheckShape(2, 64, 9);
  CheckShape(8, 1000, 21);
  CheckShape(5, 31, 40);
}

TEST_P(LinearBf16Test, WidenIsExact) {
  std::vector<uint16_t> src = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0x0001, 0x4049, 0xff7f};
  std::vector<float> dst(src.size());
  WidenBf16(src.data(), static_cast<int64_t>(src.size()), dst.data());
  for (size_t i = 0; i < src.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &dst[i], sizeof bits);
    EXPECT_EQ(bits, static_cast<uint32_t>(src[i]) << 16) << i;
  }
  EXPECT_EQ(dst[2], 1.0f);
  EXPECT_EQ(dst[3], -1.0f);
  EXPECT_TRUE(std::isinf(dst[4]));
  // Past the vector loops' width: every 16-bit pattern, widened.
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  WidenBf16(all.data(), static_cast<int64_t>(all.size()), wide.data());
  for (size_t i = 0; i < all.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &wide[i], sizeof bits);
    ASSERT_EQ(bits, static_cast<uint32_t>(i) << 16) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, LinearBf16Test,
                         ::testing::Values(static_cast<int>(CpuIsa::kScalar), static_cast<int>(CpuIsa::kAvx2),
                                           static_cast<int>(CpuIsa::kAvx512)),
                         [](const auto& info) { return std::string(CpuIsaName(static_cast<CpuIsa>(info.param))); });

}  // namespace
}  // namespace kvlab

// The avx512 path's VNNI scores for the KIVI int8 kernel (ScoreTileVnni,
// kernels/attention_kivi_int8.h) against the vpmaddubsw ones (ScoreTile) on
// random codes and queries: the integer sums are the same, so the scores must
// be equal bit for bit. The header is compiled here as the avx512 copy
// (KVLAB_ISA_LEVEL=2, set in kernels/CMakeLists.txt); the test runs only on a
// CPU with AVX-512 and VNNI (skipped, naming them, elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <random>
#include <vector>

#include "core/base/dtype.h"
#include "kernels/attention_cpu_plan.h"
#include "kernels/cpu_isa.h"

#include "kernels/cpu_isa_begin.h"

#include "kernels/attention_kivi_int8.h"

// The test itself is baseline code (it runs, and skips, on any CPU); it calls
// the copy's functions, which keep the avx512 target they were defined with.
#include "kernels/cpu_isa_end.h"

namespace kvlab {
namespace {

TEST(KiviInt8VnniTest, VnniScoresEqualMaddubsScores) {
  if (!HostHasCpuIsa(CpuIsa::kAvx512) || (HostCpuFeatures() & kCpuVnni) == 0) {
    GTEST_SKIP() << "kernel path avx512 with vnni skipped: this CPU lacks it";
  }
#if KVLAB_ISA_VECTOR >= 2
  namespace k8 = isa_avx512::kivi_int8;
  constexpr int kNq = 4;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), q(-127, 127);
  std::vector<uint8_t> codes(k8::kRows * 32);
  std::vector<int8_t> q8(kNq * k8::kDim);
  for (int trial = 0; trial < 50; ++trial) {
    for (uint8_t& c : codes) c = static_cast<uint8_t>(byte(rng));
    for (size_t i = 0; i < q8.size(); ++i) {  // trial 0: the extremes
      q8[i] = static_cast<int8_t>(trial == 0 ? (i % 3 == 0 ? -127 : 127) : q(rng));
    }
    if (trial == 0) std::fill(codes.begin(), codes.end(), uint8_t{0xff});  // every code 3: the largest sums
    const float sigma[kNq] = {0.01f, 1.0f, 3.5f, 1e-3f}, kconst[kNq] = {0.5f, -2.0f, 0.0f, 7.0f};
    std::vector<float> s_a(kNq * k8::kRows), s_b(kNq * k8::kRows, -1.0f);
    std::vector<int32_t> raw(kNq * 64);
    k8::ScoreTile<kNq>(codes.data(), q8.data(), sigma, kconst, s_a.data(), raw.data());
    k8::ScoreTileVnni<kNq>(codes.data(), q8.data(), sigma, kconst, s_b.data(), raw.data());
    ASSERT_EQ(0, std::memcmp(s_a.data(), s_b.data(), s_a.size() * sizeof(float))) << "trial " << trial;
  }
#endif
}

}  // namespace
}  // namespace kvlab

// The kernel-path dispatcher (kernels/cpu_isa.h): which path a KVLAB_ISA value
// selects on CPUs with given features, its refusal of a path the CPU lacks,
// forcing a path in-process, and what `kvlab --version` prints. The kernels
// themselves run on every path the host has in attention_test (plain paged
// attention), cache_test's EncodedAttentionTest and KiviInt8AttentionTest
// (KIVI, int8, fp8) and linear_bf16_test; the VNNI scores are checked against
// the vpmaddubsw ones here (cpu_isa_vnni_test.cpp).
#include "kernels/cpu_isa.h"

#include <gtest/gtest.h>

#include <string>

namespace kvlab {
namespace {

constexpr uint32_t Bit(CpuIsa isa) { return 1u << static_cast<int>(isa); }
constexpr uint32_t kScalarOnly = Bit(CpuIsa::kScalar);
constexpr uint32_t kAvx2Host = kScalarOnly | Bit(CpuIsa::kAvx2);  // a Zen 3, a Haswell
constexpr uint32_t kAvx512Host = kAvx2Host | Bit(CpuIsa::kAvx512) | kCpuVnni | kCpuBf16;

TEST(CpuIsaTest, UnsetSelectsTheBestPath) {
  CpuIsa isa = CpuIsa::kAvx512;
  ASSERT_TRUE(ResolveCpuIsa(nullptr, kScalarOnly, &isa).ok());
  EXPECT_EQ(isa, CpuIsa::kScalar);
  ASSERT_TRUE(ResolveCpuIsa("", kAvx2Host, &isa).ok());
  EXPECT_EQ(isa, CpuIsa::kAvx2);
  ASSERT_TRUE(ResolveCpuIsa(nullptr, kAvx512Host, &isa).ok());
  EXPECT_EQ(isa, CpuIsa::kAvx512);
  EXPECT_EQ(BestCpuIsa(kAvx512Host & ~Bit(CpuIsa::kAvx512)), CpuIsa::kAvx2);
}

TEST(CpuIsaTest, ForcesALowerPath) {
  CpuIsa isa = CpuIsa::kAvx512;
  ASSERT_TRUE(ResolveCpuIsa("avx2", kAvx512Host, &isa).ok());
  EXPECT_EQ(isa, CpuIsa::kAvx2);
  ASSERT_TRUE(ResolveCpuIsa("scalar", kAvx512Host, &isa).ok());
  EXPECT_EQ(isa, CpuIsa::kScalar);
  ASSERT_TRUE(ResolveCpuIsa("avx512", kAvx512Host, &isa).ok());
  EXPECT_EQ(isa, CpuIsa::kAvx512);
}

TEST(CpuIsaTest, RefusesAPathTheCpuLacks) {
  CpuIsa isa;
  Status st = ResolveCpuIsa("avx512", kAvx2Host, &isa);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("KVLAB_ISA=avx512"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("lacks"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("it has: scalar, avx2)"), std::string::npos) << st.message();
  st = ResolveCpuIsa("avx2", kScalarOnly, &isa);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("it has: scalar)"), std::string::npos) << st.message();
}

TEST(CpuIsaTest, RefusesAnUnknownName) {
  CpuIsa isa;
  for (const char* bad : {"avx1024", "AVX2", "avx2 ", "sse2"}) {
    const Status st = ResolveCpuIsa(bad, kAvx512Host, &isa);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find(std::string("KVLAB_ISA=") + bad + ":"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("expected scalar, avx2 or avx512"), std::string::npos) << st.message();
  }
}

// On this host: every path it has can be forced, and ClearCpuIsa goes back.
TEST(CpuIsaTest, ThisHostForcesEveryPathItHas) {
  const CpuIsa before = ActiveCpuIsa();
  EXPECT_TRUE(HostHasCpuIsa(CpuIsa::kScalar));
  for (int i = 0; i < kNumCpuIsas; ++i) {
    const CpuIsa isa = static_cast<CpuIsa>(i);
    if (!HostHasCpuIsa(isa)) continue;
    const Status st = SetCpuIsa(isa);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(ActiveCpuIsa(), isa);
    EXPECT_NE(CpuKernelPaths().find(std::string("attention_cpu      ") + CpuIsaName(isa)), std::string::npos);
  }
  ClearCpuIsa();
  EXPECT_EQ(ActiveCpuIsa(), before);
}

// Each path this host lacks is refused and the active path stays (skipped,
// naming the reason, on a host that has them all).
TEST(CpuIsaTest, ThisHostRefusesThePathsItLacks) {
  std::string lacking;
  for (int i = 0; i < kNumCpuIsas; ++i) {
    const CpuIsa isa = static_cast<CpuIsa>(i);
    if (HostHasCpuIsa(isa)) continue;
    lacking += std::string(" ") + CpuIsaName(isa);
    const CpuIsa now = ActiveCpuIsa();
    const Status st = SetCpuIsa(isa);
    EXPECT_FALSE(st.ok()) << CpuIsaName(isa);
    EXPECT_NE(st.message().find("lacks"), std::string::npos) << st.message();
    EXPECT_EQ(ActiveCpuIsa(), now);
  }
  if (lacking.empty()) {
    GTEST_SKIP() << "this CPU has every kernel path; refusals checked on described CPUs (RefusesAPathTheCpuLacks)";
  }
  RecordProperty("paths_refused", lacking);
}

TEST(CpuIsaTest, VersionTextNamesEveryKernelAndThePath) {
  const ScopedCpuIsa scalar(CpuIsa::kScalar);
  ASSERT_TRUE(scalar.status().ok());
  const std::string text = CpuKernelPaths();
  EXPECT_NE(text.find("cpu kernel path: scalar"), std::string::npos) << text;
  for (const char* kernel : {"attention_cpu ", "attention_kivi_cpu ", "attention_quant_cpu ", "linear_bf16 ", "page_bounds "}) {
    EXPECT_NE(text.find(std::string("  ") + kernel), std::string::npos) << kernel << "\n" << text;
  }
  EXPECT_EQ(text.find("vnni)"), std::string::npos) << "VNNI scores are the avx512 path's only\n" << text;
}

}  // namespace
}  // namespace kvlab

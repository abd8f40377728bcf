#include "core/model/memory_calc.h"

#include <gtest/gtest.h>

namespace kvlab {
namespace {

MemoryEstimate Estimate(const std::string& preset, int64_t tokens, int bits) {
  ModelConfig c;
  EXPECT_TRUE(PresetConfig(preset, &c).ok());
  PolicyStack stack;
  EXPECT_TRUE(PolicyStack::Create({PolicySpec{"full", {}, "test"}}, &stack).ok());
  MemoryEstimate e;
  EXPECT_TRUE(EstimateKVMemory(c, tokens, bits, stack, &e).ok());
  return e;
}

// The worked examples of the formula (8B at 8K = 1 GiB, 70B at 32K = 10 GiB,
// Llama 2 7B at 4K = 2 GiB), exactly.
TEST(MemoryCalcTest, WorkedExamplesTable) {
  MemoryEstimate e = Estimate("llama-3.1-8b", 8192, 16);
  EXPECT_EQ(e.bytes_per_token, 131072);
  EXPECT_EQ(BinaryUnits(e.bytes_per_token), "128 KiB");
  EXPECT_EQ(e.bytes_per_sequence, 1LL << 30);
  EXPECT_EQ(BinaryUnits(e.bytes_per_sequence), "1 GiB");
  EXPECT_EQ(e.mha_shortcut_bytes / e.bytes_per_sequence, 4);  // H_q / H_kv

  e = Estimate("llama-3.1-70b", 32768, 16);
  EXPECT_EQ(e.bytes_per_token, 327680);
  EXPECT_EQ(BinaryUnits(e.bytes_per_token), "320 KiB");
  EXPECT_EQ(e.bytes_per_sequence, 10LL << 30);
  EXPECT_EQ(BinaryUnits(e.bytes_per_sequence), "10 GiB");
  EXPECT_EQ(e.mha_shortcut_bytes / e.bytes_per_sequence, 8);

  e = Estimate("llama-2-7b", 4096, 16);
  EXPECT_EQ(e.bytes_per_token, 524288);
  EXPECT_EQ(BinaryUnits(e.bytes_per_token), "512 KiB");
  EXPECT_EQ(e.bytes_per_sequence, 2LL << 30);
  EXPECT_EQ(e.mha_shortcut_bytes, e.bytes_per_sequence);  // MHA: the shortcut is right
}

// 70B, one conversation of 30,000 tokens: about 9.8 GB, two thirds of a
// 15 GB pool; 8-bit storage halves it.
TEST(MemoryCalcTest, SeventyBScenario) {
  MemoryEstimate e16 = Estimate("llama-3.1-70b", 30000, 16);
  EXPECT_EQ(e16.bytes_per_sequence, 9830400000LL);
  EXPECT_EQ(DecimalUnits(e16.bytes_per_sequence), "9.83 GB");
  EXPECT_NEAR(static_cast<double>(e16.bytes_per_sequence) / 15e9, 2.0 / 3.0, 0.02);  // "about two thirds": 65.5%
  MemoryEstimate e8 = Estimate("llama-3.1-70b", 30000, 8);
  EXPECT_EQ(e8.bytes_per_sequence * 2, e16.bytes_per_sequence);
  EXPECT_EQ(DecimalUnits(e8.bytes_per_sequence), "4.92 GB");
  const std::string report = FormatMemoryReport(e16, 15000000000LL);
  EXPECT_NE(report.find("327,680 B = 320 KiB"), std::string::npos) << report;
  EXPECT_NE(report.find("65.5% of a 15.0 GB pool"), std::string::npos) << report;
}

TEST(MemoryCalcTest, RejectsBadBits) {
  ModelConfig c;
  ASSERT_TRUE(PresetConfig("small", &c).ok());
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"full", {}, "t"}}, &stack).ok());
  MemoryEstimate e;
  EXPECT_FALSE(EstimateKVMemory(c, 10, 12, stack, &e).ok());
}

// Sizes past 64 bits are an error naming --tokens and the largest count the
// model can be sized at, never a negative figure; just below it every figure
// is positive.
TEST(MemoryCalcTest, OverflowIsAnErrorNamingTokens) {
  ModelConfig c;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &c).ok());
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({PolicySpec{"full", {}, "t"}}, &stack).ok());
  MemoryEstimate e;
  Status s = EstimateKVMemory(c, 100000000000000, 16, stack, &e);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--tokens 100,000,000,000,000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("overflow a 64-bit count"), std::string::npos) << s.message();
  // 2 x 32 layers x 4096 (d_model, the MHA shortcut's width) x 2 bytes a token.
  EXPECT_NE(s.message().find("up to about 17,592,186,044,383 tokens"), std::string::npos) << s.message();
  ASSERT_TRUE(EstimateKVMemory(c, 17592186044383, 16, stack, &e).ok());
  EXPECT_GT(e.bytes_per_sequence, 0);
  EXPECT_GT(e.bytes_in_blocks, 0);
  EXPECT_GT(e.mha_shortcut_bytes, 0);
  EXPECT_FALSE(EstimateKVMemory(c, -1, 16, stack, &e).ok());
}

TEST(MemoryCalcTest, Formatting) {
  EXPECT_EQ(WithCommas(131072), "131,072");
  EXPECT_EQ(WithCommas(999), "999");
  EXPECT_EQ(WithCommas(1000), "1,000");
  EXPECT_EQ(BinaryUnits(1536), "1.50 KiB");
}

}  // namespace
}  // namespace kvlab

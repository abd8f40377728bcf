#include "core/engine/sampling.h"

#include <gtest/gtest.h>

#include <map>

namespace kvlab {
namespace {

TEST(SamplingTest, GreedyIsArgmax) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 2.9f};
  Sampler s(SamplingParams{0.0, 1.0, 5}, 0);
  EXPECT_EQ(s.Sample(l.data(), 4), 1);
}

TEST(SamplingTest, SeededAndReproducible) {
  std::vector<float> l = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  SamplingParams p{1.0, 1.0, 42};
  Sampler a(p, 3), b(p, 3), c(p, 4);
  std::vector<int32_t> ra, rb, rc;
  for (int i = 0; i < 50; ++i) {
    ra.push_back(a.Sample(l.data(), 5));
    rb.push_back(b.Sample(l.data(), 5));
    rc.push_back(c.Sample(l.data(), 5));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);  // a different stream draws differently
}

TEST(SamplingTest, TopPCutsTheTail) {
  // Probabilities ~ {0.64, 0.24, 0.09, 0.03}: top_p 0.8 keeps the first two only.
  std::vector<float> l = {2.0f, 1.0f, 0.0f, -1.0f};
  Sampler s(SamplingParams{1.0, 0.8, 1}, 0);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 4000; ++i) ++counts[s.Sample(l.data(), 4)];
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_EQ(counts.count(3), 0u);
  // Renormalised: 0.64 / 0.88 = 0.73 for token 0.
  EXPECT_NEAR(counts[0] / 4000.0, 0.727, 0.03);
}

TEST(SamplingTest, TemperatureSharpens) {
  std::vector<float> l = {1.0f, 0.0f};
  Sampler hot(SamplingParams{2.0, 1.0, 9}, 0), cold(SamplingParams{0.25, 1.0, 9}, 0);
  int hot0 = 0, cold0 = 0;
  for (int i = 0; i < 4000; ++i) {
    hot0 += hot.Sample(l.data(), 2) == 0;
    cold0 += cold.Sample(l.data(), 2) == 0;
  }
  EXPECT_NEAR(hot0 / 4000.0, 0.622, 0.03);   // sigmoid(0.5)
  EXPECT_NEAR(cold0 / 4000.0, 0.982, 0.01);  // sigmoid(4)
}

}  // namespace
}  // namespace kvlab

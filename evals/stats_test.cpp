// The report's intervals (evals/stats.h) against hand-computed binomial
// cases, an exactly enumerable bootstrap, paired differences, and coverage of
// the nominal 95% on simulated data (seeded, so every run sees the same draws).
#include "evals/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "datasets/tasks/tasks.h"

namespace kvlab {
namespace {

// 8 of 10, by hand: p = 0.8, z² = 3.841459, z²/n = 0.3841459, 1 + z²/n = 1.3841459;
// centre (0.8 + 0.1920729) / 1.3841459 = 0.716740; half-width
// 1.959964 / 1.3841459 · sqrt(0.8·0.2/10 + 3.841459/400) = 1.4160138 · 0.1600113 = 0.226578.
TEST(StatsTest, WilsonEightOfTen) {
  const Interval w = WilsonInterval(8, 10);
  EXPECT_DOUBLE_EQ(w.estimate, 0.8);
  EXPECT_NEAR(w.lo, 0.716740 - 0.226578, 2e-6);
  EXPECT_NEAR(w.hi, 0.716740 + 0.226578, 2e-6);
  EXPECT_NEAR(w.lo, 0.4902, 1e-4);
  EXPECT_NEAR(w.hi, 0.9433, 1e-4);
  EXPECT_EQ(w.n, 10);
  EXPECT_STREQ(w.method, "wilson");
}

// The edges: 0 of 10 is [0, z²/(n + z²)] and 10 of 10 its mirror; nothing of nothing has no estimate.
TEST(StatsTest, WilsonEdges) {
  const double z2 = kZ95 * kZ95;
  const Interval none = WilsonInterval(0, 10), all = WilsonInterval(10, 10);
  EXPECT_DOUBLE_EQ(none.lo, 0.0);
  EXPECT_NEAR(none.hi, z2 / (10 + z2), 1e-12);
  EXPECT_NEAR(none.hi, 0.2775, 1e-4);
  EXPECT_NEAR(all.lo, 10 / (10 + z2), 1e-12);
  EXPECT_NEAR(all.hi, 1.0, 1e-12);
  // 1 of 2: centre 0.5, half-width z/(1 + z²/2) · sqrt(1/8 + z²/16) = 0.405469.
  const Interval half = WilsonInterval(1, 2);
  EXPECT_NEAR(half.lo, 0.5 - 0.405469, 1e-6);
  EXPECT_NEAR(half.hi, 0.5 + 0.405469, 1e-6);
  const Interval empty = WilsonInterval(0, 0);
  EXPECT_FALSE(std::isfinite(empty.estimate));
  EXPECT_FALSE(empty.has_interval());
}

TEST(StatsTest, QuantileInterpolatesLikeNumpy) {
  const std::vector<double> x = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(SortedQuantile(x, 0.0), 1);
  EXPECT_DOUBLE_EQ(SortedQuantile(x, 1.0), 4);
  EXPECT_DOUBLE_EQ(SortedQuantile(x, 0.5), 2.5);      // numpy.quantile([1,2,3,4], 0.5)
  EXPECT_DOUBLE_EQ(SortedQuantile(x, 0.025), 1.075);  // numpy.quantile([1,2,3,4], 0.025)
}

// A sample of four values has 4^4 = 256 equally likely resamples: their means'
// exact 2.5% and 97.5% quantiles are what the bootstrap approaches.
TEST(StatsTest, BootstrapMatchesTheEnumeratedResampleDistribution) {
  const std::vector<double> x = {0.0, 1.0, 3.0, 8.0};
  std::vector<double> means;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 4; ++d) means.push_back((x[a] + x[b] + x[c] + x[d]) / 4);
  std::sort(means.begin(), means.end());
  const double exact_lo = SortedQuantile(means, 0.025), exact_hi = SortedQuantile(means, 0.975);
  const Interval b = BootstrapMean(x, 40000, 7);
  EXPECT_DOUBLE_EQ(b.estimate, 3.0);
  EXPECT_STREQ(b.method, "bootstrap");
  // The resample means sit on a grid of 0.25: within one step of the exact quantiles.
  EXPECT_NEAR(b.lo, exact_lo, 0.25) << exact_lo;
  EXPECT_NEAR(b.hi, exact_hi, 0.25) << exact_hi;
  EXPECT_LT(b.lo, 1.0);
  EXPECT_GT(b.hi, 5.5);
}

TEST(StatsTest, BootstrapIsSeededAndDegeneratesWithoutSpread) {
  std::vector<double> x;
  SplitMix rng(3);
  for (int i = 0; i < 30; ++i) x.push_back(rng.Uniform());
  const Interval a = BootstrapMean(x, 1000, 11), b = BootstrapMean(x, 1000, 11), c = BootstrapMean(x, 1000, 12);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_NE(a.lo, c.lo);
  EXPECT_LT(a.lo, a.estimate);
  EXPECT_GT(a.hi, a.estimate);
  const Interval flat = BootstrapMean({0.25, 0.25, 0.25}, 1000, 1);
  EXPECT_DOUBLE_EQ(flat.lo, 0.25);
  EXPECT_DOUBLE_EQ(flat.hi, 0.25);
  // One unit: an estimate and no interval.
  const Interval one = BootstrapMean({0.5}, 1000, 1);
  EXPECT_DOUBLE_EQ(one.estimate, 0.5);
  EXPECT_FALSE(one.has_interval());
  EXPECT_EQ(one.n, 1);
}

// For a large sample the percentile interval is mean ± z·s/sqrt(n) (s with divisor n).
TEST(StatsTest, BootstrapAgreesWithTheNormalIntervalForALargeSample) {
  std::vector<double> x;
  SplitMix rng(5);
  for (int i = 0; i < 800; ++i) x.push_back(std::pow(rng.Uniform(), 2.0));
  double m = 0, ss = 0;
  for (double v : x) m += v;
  m /= static_cast<double>(x.size());
  for (double v : x) ss += (v - m) * (v - m);
  const double se = std::sqrt(ss / static_cast<double>(x.size())) / std::sqrt(static_cast<double>(x.size()));
  const Interval b = BootstrapMean(x, 4000, 9);
  EXPECT_NEAR(b.lo, m - kZ95 * se, 0.12 * kZ95 * se);
  EXPECT_NEAR(b.hi, m + kZ95 * se, 0.12 * kZ95 * se);
}

TEST(StatsTest, MeanIntervalPicksWilsonForProportions) {
  const Interval p = MeanInterval({1, 1, 0, 1, 1, 1, 1, 0, 1, 1}, /*proportion=*/true, 1);
  EXPECT_STREQ(p.method, "wilson");
  EXPECT_NEAR(p.lo, 0.4902, 1e-4);
  const Interval q = MeanInterval({1, 0.5, 0, 1}, true, 1);
  EXPECT_STREQ(q.method, "bootstrap");
  EXPECT_DOUBLE_EQ(q.estimate, 0.625);
  // Not trials (windows' top-1 agreement): 0/1 values are not a proportion; one window has no interval.
  const Interval w = MeanInterval({1}, /*proportion=*/false, 1);
  EXPECT_STREQ(w.method, "");
  EXPECT_FALSE(w.has_interval());
  EXPECT_STREQ(MeanInterval({1, 1, 0}, false, 1).method, "bootstrap");
}

// Stratified: each stratum keeps its size; the estimate weighs strata, not values.
TEST(StatsTest, StratifiedBootstrapWeighsStrata) {
  const Stratum a{{1, 1, 1, 1}, 1.0}, b{{0, 1}, 1.0};
  const Interval s = StratifiedBootstrap({a, b}, 2000, 3);
  EXPECT_DOUBLE_EQ(s.estimate, 0.75);  // (1 + 0.5) / 2, not 5/6
  EXPECT_EQ(s.n, 6);
  // Only b varies: its mean is 0, 0.5 or 1, so the estimate is 0.5, 0.75 or 1.
  EXPECT_DOUBLE_EQ(s.lo, 0.5);
  EXPECT_DOUBLE_EQ(s.hi, 1.0);
  // A stratum of one value cannot be resampled: no interval.
  EXPECT_FALSE(StratifiedBootstrap({a, Stratum{{0.5}, 1.0}}, 2000, 3).has_interval());
}

// Pairing removes what both share: the per-sample difficulty. Unpaired, the
// two means' intervals overlap; paired, the difference clearly excludes 0.
TEST(StatsTest, PairedDifferenceSeesThroughSharedNoise) {
  std::vector<double> base, policy;
  SplitMix rng(21);
  for (int i = 0; i < 60; ++i) {
    const double difficulty = 4 * rng.Uniform();
    base.push_back(difficulty);
    policy.push_back(difficulty + 0.1 + 0.02 * (rng.Uniform() - 0.5));
  }
  const Interval ib = BootstrapMean(base, 2000, 1), ip = BootstrapMean(policy, 2000, 2);
  EXPECT_LT(ip.lo, ib.hi);  // overlapping
  const Interval d = PairedDifference(policy, base, 3);
  EXPECT_NEAR(d.estimate, 0.1, 0.01);
  EXPECT_GT(d.lo, 0.09);
  EXPECT_LT(d.hi, 0.11);
  EXPECT_FALSE(d.Contains(0));
  EXPECT_EQ(d.n, 60);
  // Identical outputs: a difference of exactly 0, an interval [0, 0] that contains it.
  const Interval same = PairedDifference(base, base, 4);
  EXPECT_DOUBLE_EQ(same.lo, 0);
  EXPECT_DOUBLE_EQ(same.hi, 0);
  EXPECT_TRUE(same.Contains(0));
}

TEST(StatsTest, SeedOfIsStableAndSpreads) {
  EXPECT_EQ(SeedOf(""), 14695981039346656037ull);  // FNV-1a's offset basis
  EXPECT_EQ(SeedOf("a"), 0xaf63dc4c8601ec8cull);  // FNV-1a 64 of "a" (the published test vector)
  EXPECT_NE(SeedOf("model|full|passkey|512"), SeedOf("model|full|passkey|1024"));
}

double Normal(SplitMix* rng) {  // Box-Muller
  const double u = 1.0 - rng->Uniform(), v = rng->Uniform();
  return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
}

// Coverage: over 2,000 simulated experiments, the 95% interval holds the true
// value between 93% and 97% of the time. Wilson at n = 50, p = 0.2 (its exact
// coverage there is 95.07%); the bootstrap of a normal sample's mean at n = 60.
TEST(StatsTest, NinetyFivePercentIntervalsCoverTheTruth) {
  const int trials = 2000;
  SplitMix rng(2024);
  int wilson_hits = 0, boot_hits = 0;
  for (int t = 0; t < trials; ++t) {
    int64_t k = 0;
    for (int i = 0; i < 50; ++i) k += rng.Uniform() < 0.2;
    wilson_hits += WilsonInterval(k, 50).Contains(0.2);
    std::vector<double> x(60);
    for (double& v : x) v = 3.0 + 2.0 * Normal(&rng);
    boot_hits += BootstrapMean(x, 1000, static_cast<uint64_t>(t)).Contains(3.0);
  }
  const double wilson = wilson_hits / static_cast<double>(trials), boot = boot_hits / static_cast<double>(trials);
  std::printf("coverage over %d trials: Wilson %.4f, bootstrap %.4f\n", trials, wilson, boot);
  EXPECT_GE(wilson, 0.93);
  EXPECT_LE(wilson, 0.97);
  EXPECT_GE(boot, 0.93);
  EXPECT_LE(boot, 0.97);
  // And a paired difference whose true value is 0.05.
  int paired_hits = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> a(40), b(40);
    for (size_t i = 0; i < a.size(); ++i) {
      const double shared = Normal(&rng);
      b[i] = shared;
      a[i] = shared + 0.05 + 0.3 * Normal(&rng);
    }
    paired_hits += PairedDifference(a, b, static_cast<uint64_t>(t) + 99).Contains(0.05);
  }
  const double paired = paired_hits / static_cast<double>(trials);
  std::printf("coverage over %d trials: paired bootstrap %.4f\n", trials, paired);
  EXPECT_GE(paired, 0.93);
  EXPECT_LE(paired, 0.97);
}

}  // namespace
}  // namespace kvlab

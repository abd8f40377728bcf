// Confidence intervals for the sweep reports (evals/sweep_report.cpp) and
// their tests: Wilson's interval for a proportion, the percentile bootstrap
// (seeded) for means, and paired differences. Torch-free; no state.
//
// Every accuracy-type figure in results.csv and summary.md is a mean over
// units (retrieval prompts, RULER samples, bpb windows) and carries a 95%
// interval from here; docs/sweeps.md ("Intervals") states the rules.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab {

// z of a two-sided 95% normal interval.
constexpr double kZ95 = 1.959963984540054;
// Resamples of every bootstrap interval in the reports.
constexpr int kBootstrapResamples = 2000;

struct Interval {
  double estimate = NAN;  // the statistic on the data itself
  double lo = NAN, hi = NAN;  // NaN where the data cannot give an interval (fewer than 2 units)
  int64_t n = 0;          // units behind the estimate
  const char* method = "";  // "wilson", "bootstrap", or "" (no interval)

  bool has_interval() const { return std::isfinite(lo) && std::isfinite(hi); }
  // REQUIRES: has_interval().
  bool Contains(double v) const { return lo <= v && v <= hi; }
};

// Wilson's score interval for `successes` out of `n` (Wilson 1927), at the
// normal quantile z: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n),
// clipped to [0, 1]. n = 0 gives no estimate.
Interval WilsonInterval(int64_t successes, int64_t n, double z = kZ95);

// The type-7 quantile (linear interpolation between order statistics, as
// numpy's default) of `sorted`, q in [0, 1]. REQUIRES: sorted non-empty, ascending.
double SortedQuantile(const std::vector<double>& sorted, double q);

// A stratum of a stratified bootstrap: its values are resampled among
// themselves; `weight` is its share of the estimate.
struct Stratum {
  std::vector<double> values;
  double weight = 1;
};

// estimate = Σ w_g · mean(values_g) / Σ w_g over non-empty strata. The
// interval is the percentile bootstrap: `resamples` times, each stratum's
// values are drawn with replacement (as many as it has) and the estimate
// recomputed; lo and hi are the (1 - level)/2 and (1 + level)/2 quantiles of
// those estimates. Deterministic for a seed (SplitMix64 draws). No interval
// when a non-empty stratum has fewer than 2 values.
Interval StratifiedBootstrap(const std::vector<Stratum>& strata, int resamples, uint64_t seed, double level = 0.95);

// The percentile bootstrap interval of the mean of `values`.
Interval BootstrapMean(const std::vector<double>& values, int resamples, uint64_t seed, double level = 0.95);

// The interval the reports give the mean of a metric over its units: Wilson's
// when the units are trials of a proportion (`proportion`: exact-match
// accuracy per sample) and every value is 0 or 1, else the percentile
// bootstrap of the mean (kBootstrapResamples). A window's top-1 agreement of
// exactly 1 is not a trial: its caller passes proportion = false.
Interval MeanInterval(const std::vector<double>& values, bool proportion, uint64_t seed);

// The paired estimate of mean(a) - mean(b) on the same units: the bootstrap
// of the mean of the per-unit differences a_i - b_i. REQUIRES: a.size() == b.size().
Interval PairedDifference(const std::vector<double>& a, const std::vector<double>& b, uint64_t seed);

// A seed from a text (FNV-1a, 64-bit): each report cell seeds its bootstrap by
// its own name, so its interval does not depend on what else the report holds.
uint64_t SeedOf(const std::string& text);

}  // namespace kvlab

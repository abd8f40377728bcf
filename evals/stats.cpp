#include "evals/stats.h"

#include <algorithm>

#include "datasets/tasks/tasks.h"  // SplitMix: the same draws on every platform

namespace kvlab {

Interval WilsonInterval(int64_t successes, int64_t n, double z) {
  Interval out;
  out.n = n;
  if (n <= 0) return out;
  const double nn = static_cast<double>(n);
  const double p = static_cast<double>(successes) / nn;
  const double z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double center = (p + z2 / (2 * nn)) / denom;
  const double half = z / denom * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
  out.estimate = p;
  out.lo = std::max(0.0, center - half);
  out.hi = std::min(1.0, center + half);
  out.method = "wilson";
  return out;
}

double SortedQuantile(const std::vector<double>& sorted, double q) {
  const double h = static_cast<double>(sorted.size() - 1) * std::clamp(q, 0.0, 1.0);
  const size_t i = static_cast<size_t>(std::floor(h));
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (h - static_cast<double>(i)) * (sorted[i + 1] - sorted[i]);
}

Interval StratifiedBootstrap(const std::vector<Stratum>& strata, int resamples, uint64_t seed, double level) {
  Interval out;
  double wsum = 0, est = 0;
  bool resamplable = true;
  for (const Stratum& s : strata) {
    if (s.values.empty()) continue;
    double sum = 0;
    for (double v : s.values) sum += v;
    est += s.weight * sum / static_cast<double>(s.values.size());
    wsum += s.weight;
    out.n += static_cast<int64_t>(s.values.size());
    if (s.values.size() < 2) resamplable = false;
  }
  if (out.n == 0 || wsum <= 0) return out;
  out.estimate = est / wsum;
  if (!resamplable || resamples < 1) return out;
  SplitMix rng(seed);
  std::vector<double> stats(static_cast<size_t>(resamples));
  for (double& st : stats) {
    double e = 0;
    for (const Stratum& s : strata) {
      const size_t n = s.values.size();
      if (n == 0) continue;
      double sum = 0;
      for (size_t k = 0; k < n; ++k) sum += s.values[static_cast<size_t>(rng.Below(n))];
      e += s.weight * sum / static_cast<double>(n);
    }
    st = e / wsum;
  }
  std::sort(stats.begin(), stats.end());
  out.lo = SortedQuantile(stats, (1 - level) / 2);
  out.hi = SortedQuantile(stats, (1 + level) / 2);
  out.method = "bootstrap";
  return out;
}

Interval BootstrapMean(const std::vector<double>& values, int resamples, uint64_t seed, double level) {
  return StratifiedBootstrap({Stratum{values, 1.0}}, resamples, seed, level);
}

Interval MeanInterval(const std::vector<double>& values, bool proportion, uint64_t seed) {
  int64_t ones = 0;
  bool binary = proportion && !values.empty();
  for (double v : values) {
    if (v == 1) ++ones;
    else if (v != 0) binary = false;
  }
  if (binary) return WilsonInterval(ones, static_cast<int64_t>(values.size()));
  return BootstrapMean(values, kBootstrapResamples, seed);
}

Interval PairedDifference(const std::vector<double>& a, const std::vector<double>& b, uint64_t seed) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d[i] = a[i] - b[i];
  d.resize(std::min(a.size(), b.size()));
  return BootstrapMean(d, kBootstrapResamples, seed);
}

uint64_t SeedOf(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace kvlab

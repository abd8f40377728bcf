#include "core/engine/sampling.h"

#include <algorithm>
#include <cmath>

namespace kvlab {

int32_t Argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params, uint64_t stream)
    : params_(params), rng_(params.seed * 0x9E3779B97F4A7C15ull + stream) {}

int32_t Sampler::Sample(const float* logits, int64_t vocab) {
  if (params_.temperature <= 0.0) return Argmax(logits, vocab);
  const double inv_t = 1.0 / params_.temperature;
  const float mx = logits[Argmax(logits, vocab)];
  scratch_.resize(static_cast<size_t>(vocab));
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float p = static_cast<float>(std::exp((logits[i] - mx) * inv_t));
    scratch_[static_cast<size_t>(i)] = {p, static_cast<int32_t>(i)};
    total += p;
  }
  // Sort by probability (ties by id, so the result is deterministic) and cut at top_p.
  std::sort(scratch_.begin(), scratch_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  size_t keep = scratch_.size();
  if (params_.top_p < 1.0) {
    double acc = 0.0;
    for (size_t i = 0; i < scratch_.size(); ++i) {
      acc += scratch_[i].first / total;
      if (acc >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_total += scratch_[i].first;
  const double u = std::uniform_real_distribution<double>(0.0, kept_total)(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += scratch_[i].first;
    if (u < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

}  // namespace kvlab

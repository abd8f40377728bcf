// lagkv: Liang et al., "LagKV: Lag-Relative Information of the KV Cache Tells
// Which Tokens Are Important" (2025), arXiv:2504.04704; kvpress's LagKVPress.
// Attention-free and query-free: after the first n_sink slots, a stream is cut
// into partitions of lag_size slots, and each partition is scored against the
// next one (its lag): every key (and value) is min-max normalised per channel
// by the next partition's range, its score is the standard deviation of that
// row over the channels, softmaxed over the partition; the key and value
// scores are averaged and turned into ranks within the partition (rank /
// lag_size). The sinks, the last full partition and the tail after it score
// 1 (always kept first). A stream shorter than n_sink + 2 lag_size keeps its
// sinks and then its newest slots. The budget's top scores are kept, ties to
// the lower slot, with the newest slot always.
#include <cmath>
#include <numeric>

#include "policies/scored_selection.h"

namespace kvlab {
namespace {

// One partition's softmaxed scores: x is [2 * lag][d] (the partition, then its lag).
void PartitionScore(const float* x, int64_t lag, int d, double* out) {
  std::vector<double> lo(static_cast<size_t>(d), INFINITY), hi(static_cast<size_t>(d), -INFINITY), z(lo.size());
  for (int64_t i = lag; i < 2 * lag; ++i) {
    for (int c = 0; c < d; ++c) {
      lo[static_cast<size_t>(c)] = std::min<double>(lo[static_cast<size_t>(c)], x[i * d + c]);
      hi[static_cast<size_t>(c)] = std::max<double>(hi[static_cast<size_t>(c)], x[i * d + c]);
    }
  }
  double top = -INFINITY, sum = 0;
  for (int64_t i = 0; i < lag; ++i) {
    for (int c = 0; c < d; ++c) z[c] = (x[i * d + c] - lo[c]) / (hi[c] - lo[c]);
    const double mean = std::accumulate(z.begin(), z.end(), 0.0) / d;
    double var = 0;
    for (double v : z) var += (v - mean) * (v - mean);
    top = std::max(top, out[i] = std::sqrt(var / (d - 1)));  // torch.std: unbiased
  }
  for (int64_t i = 0; i < lag; ++i) sum += (out[i] = std::exp(out[i] - top));
  for (int64_t i = 0; i < lag; ++i) out[i] /= sum;
}

class LagKVPolicy : public ScoredSelection {
 public:
  explicit LagKVPolicy(PolicyParams p)
      : ScoredSelection(p, ReadBudget(p)), sinks_(p.GetInt("n_sink")), lag_(p.GetInt("lag_size")) {}
  const char* Name() const override { return "lagkv"; }
  bool NeedsKeyValues() const override { return true; }
  void Score(const StreamState& s, int64_t n, float* out) const override {
    const int64_t len = s.num_tokens;
    std::vector<float> score(static_cast<size_t>(len), 1.0f);
    if (len < sinks_ + 2 * lag_) {
      for (int64_t i = sinks_; i < len; ++i) score[i] = static_cast<float>(i - sinks_) / static_cast<float>(len - sinks_);
    } else if (s.kv != nullptr) {  // a hand-built state without K/V scores all 1
      const int d = s.kv->head_dim();
      std::vector<float> k(static_cast<size_t>(len * d)), v(k.size());
      s.kv->Read(k.data(), v.data());
      const int64_t parts = (len - sinks_) / lag_;
      std::vector<double> ks(static_cast<size_t>(lag_)), vs(ks.size());
      std::vector<int64_t> order(ks.size());
      for (int64_t p = 0; p + 1 < parts; ++p) {
        const int64_t first = sinks_ + p * lag_;
        PartitionScore(k.data() + first * d, lag_, d, ks.data());
        PartitionScore(v.data() + first * d, lag_, d, vs.data());
        for (size_t i = 0; i < ks.size(); ++i) ks[i] = (ks[i] + vs[i]) / 2;
        std::iota(order.begin(), order.end(), 0);
        // A channel constant over the lag divides by zero, as in kvpress: NaN ranks as -inf.
        auto key = [&](int64_t i) { return std::isnan(ks[i]) ? -INFINITY : ks[i]; };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
        for (int64_t r = 0; r < lag_; ++r) score[first + order[r]] = static_cast<float>(r) / static_cast<float>(lag_);
      }
    }
    std::copy(score.begin(), score.begin() + n, out);
  }

 private:
  int64_t sinks_, lag_;
};

}  // namespace

void RegisterLagKVPolicy(PolicyRegistry* registry) {
  PolicyInfo info("lagkv", "keeps the keys and values that differ most from the next partition's range (attention-free)",
                  "Liang et al. 2025, LagKV: Lag-Relative Information of the KV Cache Tells Which Tokens Are Important",
                  kConcernSelection, BudgetParams("0", "0.5", "kvlab's default; the paper sweeps it"));
  info.params.push_back({"n_sink", ParamSpec::Type::kInt, "4", "first slots always kept (kvpress's default)", {},
                         ParamRange::Closed(0, 1 << 20)});
  info.params.push_back({"lag_size", ParamSpec::Type::kInt, "128", "slots per partition (kvpress's default)", {},
                         ParamRange::Closed(2, 1 << 20)});
  info.create = CreateAs<LagKVPolicy>();
  info.test_params = {{"budget", "48"}, {"lag_size", "8"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

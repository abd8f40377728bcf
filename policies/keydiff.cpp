// keydiff: Park, Jones, Morse, Goel, Lee, Lott, "KeyDiff: Key Similarity-Based
// KV Cache Eviction for Long-Context LLM Inference in Resource-Constrained
// Environments" (2025), arXiv:2504.15364.
// Keeps the keys least similar to the stream's anchor: the anchor is the mean
// of the stream's keys, each scaled to unit length, and a slot's score is
// minus the cosine similarity of its key with the anchor (kvpress's
// KeyDiffPress). Query-free and attention-free: it reads the slots' keys
// (NeedsKeyValues: the stored keys, after RoPE, decoded where encoded).
// Keeps the newest slot plus the budget's rest by that score (ties to the
// lower slot).
#include <cmath>

#include "policies/scored_selection.h"

namespace kvlab {
namespace {

class KeyDiffPolicy : public ScoredSelection {
 public:
  explicit KeyDiffPolicy(PolicyParams p) : ScoredSelection(p, ReadBudget(p)) {}
  const char* Name() const override { return "keydiff"; }
  bool NeedsKeyValues() const override { return true; }
  void Score(const StreamState& s, int64_t n, float* out) const override {
    std::fill(out, out + n, 0.0f);
    if (s.kv == nullptr) return;  // only a hand-built state: core reads host K/V for every NeedsKeyValues policy
    const int d = s.kv->head_dim();
    std::vector<float> k(static_cast<size_t>(s.num_tokens * d)), v(k.size());
    s.kv->Read(k.data(), v.data());
    std::vector<double> anchor(static_cast<size_t>(d), 0.0), norm(static_cast<size_t>(s.num_tokens));
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      const float* kt = k.data() + t * d;
      double sq = 0;
      for (int c = 0; c < d; ++c) sq += static_cast<double>(kt[c]) * kt[c];
      norm[static_cast<size_t>(t)] = std::sqrt(sq);
      for (int c = 0; c < d; ++c) anchor[static_cast<size_t>(c)] += kt[c] / std::max(norm[static_cast<size_t>(t)], 1e-12);
    }
    double anorm = 0;
    for (double& a : anchor) {
      a /= static_cast<double>(s.num_tokens);
      anorm += a * a;
    }
    anorm = std::max(std::sqrt(anorm), 1e-8);
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += k[static_cast<size_t>(t * d + c)] * anchor[static_cast<size_t>(c)];
      out[t] = static_cast<float>(-dot / (std::max(norm[static_cast<size_t>(t)], 1e-8) * anorm));
    }
  }
};

}  // namespace

void RegisterKeyDiffPolicy(PolicyRegistry* registry) {
  PolicyInfo info("keydiff", "keeps the keys least similar (cosine) to the mean of the stream's unit keys (query-free)",
                  "Park et al. 2025, KeyDiff: Key Similarity-Based KV Cache Eviction for Long-Context LLM Inference",
                  kConcernSelection, BudgetParams("0", "0.5", "kvlab's default; the paper sweeps it"));
  info.create = CreateAs<KeyDiffPolicy>();
  info.test_params = {{"budget", "48"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

// chunkkv: Liu et al., "ChunkKV: Semantic-Preserving KV Cache Compression for
// Efficient Long-Context LLM Inference" (NeurIPS 2025), arXiv:2502.00299, as
// kvpress's ChunkKVPress wraps a scorer: a stream's slots are cut into chunks
// of chunk_length from slot 0 (the last may be partial), a chunk's score is
// the mean of its slots' scores under the policy named by `score`, and whole
// chunks are kept: the newest chunk always, then the best-scoring full
// chunks (ties to the earlier chunk) while they fit the budget. Any scorer on
// the scored-selection base serves (its defaults; its needs are forwarded).
#include <numeric>

#include "policies/scored_selection.h"

namespace kvlab {
namespace {

class ChunkKVPolicy : public ScoredSelection {
 public:
  ChunkKVPolicy(PolicyParams p, std::unique_ptr<KVPolicy> scorer)
      : ScoredSelection(p, ReadBudget(p)), chunk_(p.GetInt("chunk_length")), owner_(std::move(scorer)),
        scorer_(static_cast<const ScoredSelection*>(owner_.get())) {}
  const char* Name() const override { return "chunkkv"; }
  bool NeedsAttentionScores() const override { return scorer_->NeedsAttentionScores(); }
  bool NeedsKeyNorms() const override { return scorer_->NeedsKeyNorms(); }
  bool NeedsKeyValues() const override { return scorer_->NeedsKeyValues(); }
  void FoldAttention(const float* step, int64_t n, float* score) const override {
    scorer_->FoldAttention(step, n, score);
  }

 protected:
  void Choose(const StreamState& s, int64_t budget, std::vector<int64_t>* keep) const override {
    const int64_t n = s.num_tokens, full = (n - 1) / chunk_;  // chunks before the newest one
    std::vector<float> score(static_cast<size_t>(n));
    scorer_->ScoreSlots(s, n, score.data());
    std::vector<float> mean(static_cast<size_t>(full));
    for (int64_t c = 0; c < full; ++c) {
      mean[c] = std::accumulate(score.begin() + c * chunk_, score.begin() + (c + 1) * chunk_, 0.0f) / chunk_;
    }
    const int64_t tail = std::min(budget, n - full * chunk_);  // the newest chunk, cut to the budget
    keep->clear();
    for (int64_t c : TopSlots(mean.data(), full, (budget - tail) / chunk_)) {
      for (int64_t i = c * chunk_; i < (c + 1) * chunk_; ++i) keep->push_back(i);
    }
    for (int64_t i = n - tail; i < n; ++i) keep->push_back(i);
  }

 private:
  int64_t chunk_;
  std::unique_ptr<KVPolicy> owner_;
  const ScoredSelection* scorer_;
};

}  // namespace

void RegisterChunkKVPolicy(PolicyRegistry* registry) {
  PolicyInfo info("chunkkv", "keeps whole chunks of consecutive slots, ranked by another scorer's mean score",
                  "Liu et al. 2025, ChunkKV: Semantic-Preserving KV Cache Compression", kConcernSelection,
                  BudgetParams("0", "0.5", "kvlab's default; the paper sweeps it"));
  info.params.push_back({"score", ParamSpec::Type::kString, "keydiff", "the scorer whose slot scores rank the chunks",
                         {"keydiff", "lagkv", "cur", "key-norm", "h2o"}});
  info.params.push_back({"chunk_length", ParamSpec::Type::kInt, "20", "slots per chunk (kvpress's default)", {},
                         ParamRange::Closed(1, 1 << 20)});
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    std::unique_ptr<KVPolicy> scorer;
    KVLAB_RETURN_IF_ERROR(PolicyRegistry::Global().Create(PolicySpec{p.GetString("score"), {}, "chunkkv"}, &scorer));
    out->reset(new ChunkKVPolicy(std::move(p), std::move(scorer)));
    return Status::OK();
  };
  info.test_params = {{"budget", "48"}, {"chunk_length", "8"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

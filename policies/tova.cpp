// tova: Oren, Hassid, Yarden, Adi, Schwartz, "Transformers are Multi-State
// RNNs" (2024), arXiv:2401.06104 (Token Omission Via Attention).
//   "TOVA ... at each decoding step, ... drops the token with the lowest
//   attention score", the scores of the current query averaged over the
//   layer's heads, once the multi-state (the cache) is full.
//
// Parameters
//   budget  (int, 512)     slots kept per stream (the paper's multi-state size; it
//                          sweeps 64 to 4096); 0 = ratio
//   ratio   (float, 0.125) with budget 0: kept fraction of the length so far
//                          (the paper's headline: near the full cache at 1/8)
//   heads   ("mean" | "each", "mean")  "mean": one choice per layer, by the
//                          attention averaged over its heads (the paper); "each":
//                          every KV head by its own attention
//
// What it keeps: once a stream holds more than the budget, the budget slots
// with the highest attention from the step's last query
// (ObservationWindow 1: the current token's attention, summed over the query
// heads of the KV head, and in "mean" over the layer's KV heads, which ranks
// as the average over all its heads), ties to the later slot. The slot just
// written always stays (a step's query reads its own key). A decode step adds
// one slot, so once full TOVA evicts exactly one a step; a prefill step of m
// tokens evicts m at once, by its last query. The scores are the last step's
// (FoldAttention replaces them), not accumulated.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "policies/registry.h"

namespace kvlab {
namespace {

class TovaPolicy : public KVPolicy {
 public:
  TovaPolicy(PolicyParams p, int64_t budget, double ratio, bool mean)
      : KVPolicy(std::move(p)), budget_(budget), ratio_(ratio), mean_(mean) {}
  const char* Name() const override { return "tova"; }
  uint32_t Concerns() const override { return kConcernSelection; }
  bool NeedsAttentionScores() const override { return true; }
  int64_t ObservationWindow() const override { return 1; }
  void FoldAttention(const float* step, int64_t n, float* score) const override { std::copy(step, step + n, score); }
  bool SelectsPerLayer() const override { return true; }
  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    if (budget_ > 0 && budget_ < block_size) {
      return Status::InvalidArgument("tova: parameter 'budget' is " + std::to_string(budget_) +
                                     ", smaller than one block (block_size " + std::to_string(block_size) +
                                     "): the pools hand out whole blocks per stream");
    }
    return Status::OK();
  }
  int64_t Budget(int64_t length) const {
    if (budget_ > 0) return budget_;
    return std::max<int64_t>(1, static_cast<int64_t>(std::floor(ratio_ * static_cast<double>(length) + 1e-6)));
  }
  int64_t KeptSlotsBound(int64_t max_length) const override { return std::min(max_length, Budget(max_length)); }

  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    std::vector<float> score(static_cast<size_t>(s.num_tokens), 0.0f);
    if (s.score != nullptr) std::copy(s.score, s.score + s.num_tokens, score.begin());
    return Keep(score, Budget(std::max(s.seq_length, s.num_tokens)), keep);
  }

  void SelectLayerSlots(const std::vector<StreamState>& heads, std::vector<std::vector<int64_t>>* keep,
                        std::vector<char>* acts) const override {
    if (!mean_ || !SameSlots(heads)) return KVPolicy::SelectLayerSlots(heads, keep, acts);
    const StreamState& s0 = heads[0];
    std::vector<float> sum(static_cast<size_t>(s0.num_tokens), 0.0f);
    for (const StreamState& s : heads) {
      for (int64_t i = 0; s.score != nullptr && i < s.num_tokens; ++i) sum[static_cast<size_t>(i)] += s.score[i];
    }
    std::vector<int64_t> chosen;
    const bool act = Keep(sum, Budget(std::max(s0.seq_length, s0.num_tokens)), &chosen);
    keep->assign(heads.size(), chosen);
    acts->assign(heads.size(), act ? 1 : 0);
  }

 private:
  // The layer's heads hold the same positions (always so under "mean").
  static bool SameSlots(const std::vector<StreamState>& heads) {
    for (const StreamState& s : heads) {
      if (s.num_tokens != heads[0].num_tokens ||
          !std::equal(s.positions, s.positions + s.num_tokens, heads[0].positions)) {
        return false;
      }
    }
    return !heads.empty();
  }
  // The budget slots with the highest score, the last slot always among them.
  static bool Keep(const std::vector<float>& score, int64_t budget, std::vector<int64_t>* keep) {
    const int64_t n = static_cast<int64_t>(score.size());
    if (n <= budget) return false;
    std::vector<int64_t> cand(static_cast<size_t>(n - 1));
    std::iota(cand.begin(), cand.end(), 0);
    auto key = [&score](int64_t i) {
      const float v = score[static_cast<size_t>(i)];
      return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
    };
    auto better = [&key](int64_t a, int64_t b) { return key(a) != key(b) ? key(a) > key(b) : a > b; };
    const int64_t top = budget - 1;
    std::nth_element(cand.begin(), cand.begin() + top, cand.end(), better);
    cand.resize(static_cast<size_t>(top));
    std::sort(cand.begin(), cand.end());
    *keep = cand;
    keep->push_back(n - 1);
    return true;
  }
  int64_t budget_;
  double ratio_;
  bool mean_;
};

}  // namespace

void RegisterTovaPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "tova";
  info.summary = "token omission via attention: once full, each step drops the slots the current query attends to "
                 "least (averaged over the layer's heads)";
  info.paper = "Oren et al. 2024, Transformers are Multi-State RNNs (TOVA)";
  info.concerns = kConcernSelection;
  info.params = {
      {"budget", ParamSpec::Type::kInt, "512",
       "slots kept per stream (the paper's multi-state size, swept from 64 to 4096); 0 = ratio", {},
       ParamRange::AtLeast(0)},
      {"ratio", ParamSpec::Type::kFloat, "0.125",
       "with budget = 0: kept fraction of the sequence's length so far (the paper's headline: 1/8)", {},
       ParamRange::OpenClosed(0, 1)},
      {"heads", ParamSpec::Type::kString, "mean",
       "\"mean\": one choice per layer by the attention averaged over its heads (the paper); \"each\": every KV "
       "head by its own",
       {"mean", "each"}},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t budget = p.GetInt("budget");
    const double ratio = p.GetFloat("ratio");
    const bool mean = p.GetString("heads") == "mean";
    out->reset(new TovaPolicy(std::move(p), budget, ratio, mean));
    return Status::OK();
  };
  info.test_params = {{"budget", "48"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

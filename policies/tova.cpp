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
// (FoldAttention replaces them), not accumulated. ScoredSelection ranks them
// (Recent 1, ties to the later slot); "mean" ranks the layer's sum.
#include "policies/scored_selection.h"

namespace kvlab {
namespace {

class TovaPolicy : public ScoredSelection {
 public:
  explicit TovaPolicy(PolicyParams p) : ScoredSelection(p, ReadBudget(p)), mean_(p.GetString("heads") == "mean") {}
  const char* Name() const override { return "tova"; }
  bool NeedsAttentionScores() const override { return true; }
  int64_t ObservationWindow() const override { return 1; }
  void FoldAttention(const float* step, int64_t n, float* score) const override { std::copy(step, step + n, score); }
  bool SelectsPerLayer() const override { return true; }

  void SelectLayerSlots(const std::vector<StreamState>& heads, std::vector<std::vector<int64_t>>* keep,
                        std::vector<char>* acts) const override {
    if (!mean_ || !SameSlots(heads)) return KVPolicy::SelectLayerSlots(heads, keep, acts);
    const StreamState& s0 = heads[0];
    const int64_t n = s0.num_tokens, budget = BudgetOf(s0);
    std::vector<float> sum(static_cast<size_t>(n), 0.0f);
    for (const StreamState& s : heads) {
      for (int64_t i = 0; s.score != nullptr && i < n; ++i) sum[static_cast<size_t>(i)] += s.score[i];
    }
    std::vector<int64_t> chosen;
    const bool act = n > budget;
    if (act) KeepTopAndRecent(sum.data(), n, budget, 1, &chosen);
    keep->assign(heads.size(), chosen);
    acts->assign(heads.size(), act ? 1 : 0);
  }

 protected:
  Ties TieRule() const override { return Ties::kLaterSlot; }

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
  bool mean_;
};

}  // namespace

void RegisterTovaPolicy(PolicyRegistry* registry) {
  PolicyInfo info("tova",
                  "token omission via attention: once full, each step drops the slots the current query attends to "
                  "least (averaged over the layer's heads)",
                  "Oren et al. 2024, Transformers are Multi-State RNNs (TOVA)", kConcernSelection,
                  BudgetParams("512", "0.125", "the paper's headline: 1/8"));
  info.params[0].help = "slots kept per stream (the paper's multi-state size, swept from 64 to 4096); 0 = ratio";
  info.params.push_back({"heads", ParamSpec::Type::kString, "mean",
                         "\"mean\": one choice per layer by the attention averaged over its heads (the paper); "
                         "\"each\": every KV head by its own",
                         {"mean", "each"}});
  info.create = CreateAs<TovaPolicy>();
  info.test_params = {{"budget", "48"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

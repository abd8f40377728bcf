// a2sf: Jo, Shin, "A2SF: Accumulative Attention Scoring with Forgetting Factor
// for Token Pruning in Transformer Decoder" (2024), arXiv:2407.20485.
//   A slot's score is its attention accumulated with a forgetting factor,
//   A_n = sum over queries q <= n of alpha^(n - q) S_q, so that slots of
//   different ages compare fairly (H2O's plain sum favours the oldest).
// Keeps the newest slot plus the rest of the budget with the highest score
// (ties to the lower slot). A step of m tokens multiplies the scores by
// alpha^m and adds its attention; its own m queries are summed undecayed, so
// a decode step is the paper's rule and a prefill step approximates it.
#include <cmath>

#include "policies/scored_selection.h"

namespace kvlab {
namespace {

class A2sfPolicy : public ScoredSelection {
 public:
  explicit A2sfPolicy(PolicyParams p) : ScoredSelection(p, ReadBudget(p)), alpha_(p.GetFloat("alpha")) {}
  const char* Name() const override { return "a2sf"; }
  bool NeedsAttentionScores() const override { return true; }
  void FoldStepAttention(const SeqStep& step, const float* attn, int64_t n, float* score) const override {
    const float decay = static_cast<float>(std::pow(alpha_, std::max<int64_t>(1, step.tokens)));
    for (int64_t i = 0; i < n; ++i) score[i] = decay * score[i] + attn[i];
  }

 private:
  double alpha_;
};

}  // namespace

void RegisterA2sfPolicy(PolicyRegistry* registry) {
  PolicyInfo info("a2sf", "accumulated attention with a forgetting factor: keeps the newest slot and the highest scores",
                  "Jo and Shin 2024, A2SF: Accumulative Attention Scoring with Forgetting Factor for Token Pruning",
                  kConcernSelection, BudgetParams("0", "0.2"));
  info.params.push_back({"alpha", ParamSpec::Type::kFloat, "0.9",
                         "forgetting factor per query (1: H2O's plain sum); kvlab's default", {},
                         ParamRange::OpenClosed(0, 1)});
  info.create = CreateAs<A2sfPolicy>();
  info.test_params = {{"budget", "48"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

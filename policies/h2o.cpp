// h2o: Heavy-Hitter Oracle. Zhang, Sheng, Zhou, Chen, Zheng, Cai, Song, Tian,
// Ré, Barrett, Wang, Chen, "H2O: Heavy-Hitter Oracle for Efficient Generative
// Inference of Large Language Models" (NeurIPS 2023), arXiv:2306.14048.
//
// Parameters
//   budget          (int, 0)      slots kept per stream; 0 = use ratio
//   ratio           (float, 0.2)  budget as a fraction of the sequence's length so far
//   heavy_fraction  (float, 0.5)  share of the budget given to heavy hitters
//   The defaults are the paper's 20% cache = 10% heavy hitters + 10% recent.
//
// What it keeps: the `recent` most recent slots of each stream plus the
// `heavy` other slots with the highest accumulated attention (ties to the
// lower slot index), where budget = budget or max(1, floor(ratio · length)),
// heavy = floor(heavy_fraction · budget) and recent = budget − heavy.
//
// StreamState::score is the attention each slot has received, summed over the
// query heads reading the stream and over all steps so far: the paper's
// accumulated attention, which is KVPolicy::FoldAttention's default rule (the
// cache folds each step's attention in by it), and ScoredSelection's default
// Score reads it.
#include <cmath>

#include "policies/scored_selection.h"

namespace kvlab {
namespace {

class H2OPolicy : public ScoredSelection {
 public:
  explicit H2OPolicy(PolicyParams p) : ScoredSelection(p, ReadBudget(p)), heavy_fraction_(p.GetFloat("heavy_fraction")) {}
  const char* Name() const override { return "h2o"; }
  bool NeedsAttentionScores() const override { return true; }
  // recent = budget − floor(heavy_fraction · budget).
  int64_t Recent(int64_t budget) const override { return budget - FloorOfProduct(heavy_fraction_, budget); }

 private:
  double heavy_fraction_;
};

}  // namespace

void RegisterH2OPolicy(PolicyRegistry* registry) {
  PolicyInfo info("h2o",
                  "heavy hitters + recent: keeps the most recent slots and those with the most accumulated attention",
                  "Zhang et al. 2023, H2O: Heavy-Hitter Oracle for Efficient Generative Inference of LLMs",
                  kConcernSelection, BudgetParams("0", "0.2", "the paper: 0.2"));
  info.params.push_back({"heavy_fraction", ParamSpec::Type::kFloat, "0.5",
                         "share of the budget given to heavy hitters; the rest goes to the most recent slots "
                         "(the paper: 0.5, i.e. 10% heavy + 10% recent)",
                         {}, ParamRange::Closed(0, 1)});
  info.create = CreateAs<H2OPolicy>();
  info.test_params = {{"budget", "64"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

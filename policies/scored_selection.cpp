#include "policies/scored_selection.h"

#include <cmath>
#include <limits>
#include <numeric>

namespace kvlab {

int64_t SelectionBudget::At(int64_t length) const {
  if (budget > 0) return budget;
  return std::max(min_keep, FloorOfProduct(ratio, length));
}

Status SelectionBudget::CheckFitsBlock(const std::string& policy, int block_size) const {
  if (budget > 0 && budget < block_size) {
    return Status::InvalidArgument(policy + ": parameter 'budget' is " + std::to_string(budget) +
                                   ", smaller than one block (block_size " + std::to_string(block_size) +
                                   "): the pools hand out whole blocks per stream");
  }
  return Status::OK();
}

std::vector<ParamSpec> BudgetParams(const std::string& default_budget, const std::string& default_ratio,
                                    const std::string& ratio_note) {
  return {
      {"budget", ParamSpec::Type::kInt, default_budget,
       "slots kept per stream; 0 = ratio x the sequence's length so far", {}, ParamRange::AtLeast(0)},
      {"ratio", ParamSpec::Type::kFloat, default_ratio,
       "kept fraction of the sequence's length so far; given alone it sets budget to 0" +
           (ratio_note.empty() ? std::string() : " (" + ratio_note + ")"),
       {}, ParamRange::OpenClosed(0, 1)},
  };
}

SelectionBudget ReadBudget(const PolicyParams& p, int64_t min_keep) {
  SelectionBudget b;
  b.budget = p.GetInt("budget");
  b.ratio = p.GetFloat("ratio");
  b.min_keep = min_keep;
  return b;
}

std::vector<int64_t> TopSlots(const float* score, int64_t n, int64_t k, Ties ties) {
  std::vector<int64_t> cand(static_cast<size_t>(std::max<int64_t>(0, n)));
  std::iota(cand.begin(), cand.end(), 0);
  k = std::max<int64_t>(0, k);
  if (k < n) {
    auto key = [score](int64_t i) {
      if (score == nullptr) return 0.0f;
      return std::isnan(score[i]) ? -std::numeric_limits<float>::infinity() : score[i];
    };
    const bool lower = ties == Ties::kLowerSlot;
    auto better = [&key, lower](int64_t a, int64_t b) {
      const float ka = key(a), kb = key(b);
      return ka != kb ? ka > kb : (lower ? a < b : a > b);
    };
    std::nth_element(cand.begin(), cand.begin() + k, cand.end(), better);
    cand.resize(static_cast<size_t>(k));
    std::sort(cand.begin(), cand.end());
  }
  return cand;
}

bool ScoredSelection::SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const {
  const int64_t budget = BudgetOf(s);
  if (s.num_tokens <= budget) return false;
  Choose(s, budget, keep);
  return true;
}

void ScoredSelection::Score(const StreamState& s, int64_t n, float* out) const {
  for (int64_t i = 0; i < n; ++i) out[i] = s.score != nullptr ? s.score[i] : 0.0f;
}

void ScoredSelection::Choose(const StreamState& s, int64_t budget, std::vector<int64_t>* keep) const {
  const int64_t recent = std::clamp<int64_t>(Recent(budget), 0, budget);
  std::vector<float> score(static_cast<size_t>(s.num_tokens - recent));
  Score(s, s.num_tokens - recent, score.data());
  KeepTopAndRecent(score.data(), s.num_tokens, budget, recent, keep);
}

void ScoredSelection::KeepTopAndRecent(const float* score, int64_t n, int64_t budget, int64_t recent,
                                       std::vector<int64_t>* keep) const {
  recent = std::clamp<int64_t>(recent, 0, std::min(budget, n));
  *keep = TopSlots(score, n - recent, budget - recent, TieRule());
  for (int64_t i = n - recent; i < n; ++i) keep->push_back(i);
}

}  // namespace kvlab

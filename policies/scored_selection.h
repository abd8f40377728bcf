// Scored selection: what every policy that keeps a budget of slots per stream
// shares, so that such a policy supplies only its score (and its defaults).
//
//   SelectionBudget   tokens or a ratio of the sequence's length (the registry
//                     makes sure only one was given: ApplyBudgetRule), the
//                     pools' bound, the "smaller than one block" check
//   BudgetParams      the `budget` and `ratio` ParamSpecs with a policy's defaults
//   TopSlots          the k highest-scoring slots, NaN lowest, with a tie rule
//   ScoredSelection   a selection policy over them: a stream over its budget
//                     keeps its Recent(budget) newest slots plus the highest
//                     Score()s of the rest; Choose() replaces that rule
//                     wholesale where a policy's choice is not a top-k (random)
//
// docs/adding-a-policy.md walks through a policy built on it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "policies/registry.h"

namespace kvlab {

// floor(fraction x n), tolerant of a product landing a hair below an integer
// (0.29 x 100 = 28.999999999999996 floors to 29): the one rounding of every
// "a share of the slots" in the selection policies.
inline int64_t FloorOfProduct(double fraction, int64_t n) {
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(n) + 1e-6));
}

// Slots a stream keeps: `budget`, or with budget 0 the `ratio` of the
// sequence's length so far, at least `min_keep` (and never more than the
// length, for the pools' bound).
struct SelectionBudget {
  int64_t budget = 0;
  double ratio = 0.2;
  int64_t min_keep = 1;

  // budget, or max(min_keep, FloorOfProduct(ratio, length)).
  int64_t At(int64_t length) const;
  // The most a stream keeps at up to max_length tokens: min(max_length, At(max_length)).
  int64_t Bound(int64_t max_length) const { return std::min(max_length, At(max_length)); }
  // A token budget under one block is an error naming `policy`: the pools
  // hand out whole blocks per stream.
  Status CheckFitsBlock(const std::string& policy, int block_size) const;
};

// The `budget` (slots per stream, 0 = ratio) and `ratio` ParamSpecs, with a
// policy's defaults and, for the ratio, a note on its default's source.
std::vector<ParamSpec> BudgetParams(const std::string& default_budget, const std::string& default_ratio,
                                    const std::string& ratio_note = "");
// Reads them from resolved parameters.
SelectionBudget ReadBudget(const PolicyParams& p, int64_t min_keep = 1);

// Which of two equal scores ranks first.
enum class Ties { kLowerSlot, kLaterSlot };
// The k slots of [0, n) with the highest score (NaN ranks as -inf; score
// null: all equal), in increasing order; all n when k >= n.
std::vector<int64_t> TopSlots(const float* score, int64_t n, int64_t k, Ties ties = Ties::kLowerSlot);

class ScoredSelection : public KVPolicy {
 public:
  ScoredSelection(PolicyParams p, const SelectionBudget& budget) : KVPolicy(std::move(p)), budget_(budget) {}
  uint32_t Concerns() const override { return kConcernSelection; }
  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    return budget_.CheckFitsBlock(Name(), block_size);
  }
  int64_t KeptSlotsBound(int64_t max_length) const override { return budget_.Bound(max_length); }
  // Within the budget at the sequence's length: keep everything; else Choose.
  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override;

  const SelectionBudget& budget() const { return budget_; }
  // Score()'s public face, for a policy that ranks by another's score (chunkkv).
  void ScoreSlots(const StreamState& s, int64_t n, float* out) const { Score(s, n, out); }
  // The budget of a stream at its sequence's length so far.
  int64_t BudgetOf(const StreamState& s) const { return budget_.At(std::max(s.seq_length, s.num_tokens)); }

 protected:
  // The score of each of the first n slots (the candidates: every slot but
  // the Recent ones); higher keeps. The default reads StreamState::score.
  virtual void Score(const StreamState& s, int64_t n, float* out) const;
  // The newest slots always kept at this budget (1: the token just written,
  // whose query reads its own key).
  virtual int64_t Recent(int64_t /*budget*/) const { return 1; }
  virtual Ties TieRule() const { return Ties::kLowerSlot; }
  // The kept slots of a stream over its budget, strictly increasing: by
  // default KeepTopAndRecent over Score. A policy whose choice is not a
  // top-k overrides it (and then needs no Score).
  virtual void Choose(const StreamState& s, int64_t budget, std::vector<int64_t>* keep) const;
  // The top budget - recent of score[0, n - recent) by TieRule, then the
  // recent newest slots (recent clamped to [0, budget]).
  void KeepTopAndRecent(const float* score, int64_t n, int64_t budget, int64_t recent,
                        std::vector<int64_t>* keep) const;

 private:
  SelectionBudget budget_;
};

// A PolicyInfo::create for a policy built from its parameters alone.
template <typename P>
std::function<Status(PolicyParams, std::unique_ptr<KVPolicy>*)> CreateAs() {
  return [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    out->reset(new P(std::move(p)));
    return Status::OK();
  };
}

}  // namespace kvlab

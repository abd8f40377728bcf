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
// cache folds each step's attention in by it).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "policies/registry.h"

namespace kvlab {
namespace {

// floor(x) for a product of a fraction and a length, tolerant of the product
// landing a hair below an integer (0.29 · 100 = 28.999999999999996).
int64_t FloorOfProduct(double fraction, int64_t n) {
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(n) + 1e-6));
}

class H2OPolicy : public KVPolicy {
 public:
  H2OPolicy(PolicyParams p, int64_t budget, double ratio, double heavy_fraction)
      : KVPolicy(std::move(p)), budget_(budget), ratio_(ratio), heavy_fraction_(heavy_fraction) {}

  const char* Name() const override { return "h2o"; }
  uint32_t Concerns() const override { return kConcernSelection; }
  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    if (budget_ > 0 && budget_ < block_size) {
      return Status::InvalidArgument("h2o: budget " + std::to_string(budget_) + " is smaller than one block (block_size " +
                                     std::to_string(block_size) + "): the pools hand out whole blocks per stream");
    }
    return Status::OK();
  }
  bool NeedsAttentionScores() const override { return true; }
  int64_t KeptSlotsBound(int64_t max_length) const override {
    return budget_ > 0 ? std::min(budget_, max_length) : std::max<int64_t>(1, FloorOfProduct(ratio_, max_length));
  }

  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    const int64_t n = s.num_tokens;
    // seq_length >= num_tokens in any real state; the max guards hand-built ones.
    const int64_t length = std::max(s.seq_length, n);
    const int64_t budget = budget_ > 0 ? budget_ : std::max<int64_t>(1, FloorOfProduct(ratio_, length));
    if (n <= budget) return false;
    const int64_t heavy = FloorOfProduct(heavy_fraction_, budget);
    const int64_t recent = budget - heavy;
    const int64_t older = n - recent;  // candidates for heavy hitters: slots [0, older)

    std::vector<int64_t> cand(static_cast<size_t>(older));
    for (int64_t i = 0; i < older; ++i) cand[static_cast<size_t>(i)] = i;
    auto key = [&s](int64_t i) {
      if (s.score == nullptr) return 0.0f;
      const float v = s.score[i];
      return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
    };
    // Higher score first; equal scores: lower slot index first (deterministic).
    auto better = [&key](int64_t a, int64_t b) {
      const float ka = key(a), kb = key(b);
      return ka != kb ? ka > kb : a < b;
    };
    if (heavy < older) {
      std::nth_element(cand.begin(), cand.begin() + heavy, cand.end(), better);
      cand.resize(static_cast<size_t>(heavy));
    }
    std::sort(cand.begin(), cand.end());

    keep->clear();
    keep->reserve(static_cast<size_t>(budget));
    keep->insert(keep->end(), cand.begin(), cand.end());
    for (int64_t i = older; i < n; ++i) keep->push_back(i);
    return true;
  }

 private:
  int64_t budget_;
  double ratio_, heavy_fraction_;
};

}  // namespace

void RegisterH2OPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "h2o";
  info.summary = "heavy hitters + recent: keeps the most recent slots and those with the most accumulated attention";
  info.paper = "Zhang et al. 2023, H2O: Heavy-Hitter Oracle for Efficient Generative Inference of LLMs";
  info.concerns = kConcernSelection;
  info.params = {
      {"budget", ParamSpec::Type::kInt, "0", "slots kept per stream; 0 = ratio x the sequence's length so far", {},
       ParamRange::AtLeast(0)},
      {"ratio", ParamSpec::Type::kFloat, "0.2",
       "budget as a fraction of the sequence's length so far (the paper: 0.2); used when budget = 0", {},
       ParamRange::OpenClosed(0, 1)},
      {"heavy_fraction", ParamSpec::Type::kFloat, "0.5",
       "share of the budget given to heavy hitters; the rest goes to the most recent slots "
       "(the paper: 0.5, i.e. 10% heavy + 10% recent)",
       {}, ParamRange::Closed(0, 1)},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t budget = p.GetInt("budget");
    const double ratio = p.GetFloat("ratio");
    const double heavy_fraction = p.GetFloat("heavy_fraction");
    out->reset(new H2OPolicy(std::move(p), budget, ratio, heavy_fraction));
    return Status::OK();
  };
  info.test_params = {{"budget", "64"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

// random: random eviction, the baseline of Zhang et al. 2023, "H2O:
// Heavy-Hitter Oracle for Efficient Generative Inference of Large Language
// Models" (arXiv:2306.14048).
//
// Parameters
//   budget  (int, 0)      slots kept per stream; 0 = use ratio
//   ratio   (float, 0.2)  budget as a fraction of the sequence's length so far
//   seed    (int, 0)      seed of the choice
//
// What it keeps: the most recent slot plus budget − 1 other slots chosen
// uniformly at random, as a deterministic function of (seed, layer, kv_head,
// slot count), where budget = budget or max(1, floor(ratio · length)). Its
// choice is no top-k of a score, so it replaces ScoredSelection::Choose.
#include "policies/scored_selection.h"

namespace kvlab {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a fixed, portable mixer, so the
// choice is the same on every platform and standard library (the std::
// distributions are not specified bit for bit).
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t SplitMix64(uint64_t* state) { return Mix64(*state += 0x9E3779B97F4A7C15ull); }

class RandomEvictPolicy : public ScoredSelection {
 public:
  explicit RandomEvictPolicy(PolicyParams p)
      : ScoredSelection(p, ReadBudget(p)), seed_(static_cast<uint64_t>(p.GetInt("seed"))) {}
  const char* Name() const override { return "random"; }

 protected:
  void Choose(const StreamState& s, int64_t budget, std::vector<int64_t>* keep) const override {
    const int64_t n = s.num_tokens;
    uint64_t state = Mix64(seed_ + 0x9E3779B97F4A7C15ull);
    for (uint64_t v : {static_cast<uint64_t>(s.layer), static_cast<uint64_t>(s.kv_head), static_cast<uint64_t>(n)}) {
      state = Mix64(state ^ v);
    }
    // Selection sampling (Knuth, TAOCP vol. 2, Algorithm S) over slots
    // [0, n-1): each subset of budget-1 slots equally likely, emitted in order.
    keep->clear();
    keep->reserve(static_cast<size_t>(budget));
    int64_t need = budget - 1;
    for (int64_t i = 0; i < n - 1 && need > 0; ++i) {
      const uint64_t left = static_cast<uint64_t>(n - 1 - i);
      if (SplitMix64(&state) % left < static_cast<uint64_t>(need)) {
        keep->push_back(i);
        --need;
      }
    }
    keep->push_back(n - 1);  // the token just written
  }

 private:
  uint64_t seed_;
};

}  // namespace

void RegisterRandomPolicy(PolicyRegistry* registry) {
  PolicyInfo info("random",
                  "random eviction: keeps the newest slot plus budget-1 slots chosen uniformly at random (seeded)",
                  "Zhang et al. 2023, H2O: Heavy-Hitter Oracle for Efficient Generative Inference of LLMs (random "
                  "baseline)",
                  kConcernSelection, BudgetParams("0", "0.2"));
  info.params.push_back(
      {"seed", ParamSpec::Type::kInt, "0", "seed of the random choice (same seed, same choice on every run)", {}});
  info.create = CreateAs<RandomEvictPolicy>();
  info.test_params = {{"budget", "64"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

// random: random eviction, the baseline of Zhang et al. 2023, "H2O:
// Heavy-Hitter Oracle for Efficient Generative Inference of Large Language
// Models" (arXiv:2306.14048); also the worked example of docs/adding-a-policy.md.
//
// Parameters
//   budget  (int, 0)      slots kept per stream; 0 = use ratio
//   ratio   (float, 0.2)  budget as a fraction of the sequence's length so far
//   seed    (int, 0)      seed of the choice
//
// What it keeps: the most recent slot plus budget − 1 other slots chosen
// uniformly at random, as a deterministic function of (seed, layer, kv_head,
// slot count), where budget = budget or max(1, floor(ratio · length)).
#include <algorithm>
#include <cmath>
#include <string>

#include "policies/registry.h"

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

class RandomEvictPolicy : public KVPolicy {
 public:
  RandomEvictPolicy(PolicyParams p, int64_t budget, double ratio, uint64_t seed)
      : KVPolicy(std::move(p)), budget_(budget), ratio_(ratio), seed_(seed) {}

  const char* Name() const override { return "random"; }
  uint32_t Concerns() const override { return kConcernSelection; }

  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    const int64_t n = s.num_tokens;
    const int64_t budget = Budget(s);
    if (n <= budget) return false;  // within budget: keep everything

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
    return true;
  }

 private:
  // Slots kept: the token budget, or the ratio of the sequence's length so
  // far (seq_length >= num_tokens in any real state; the max guards
  // hand-built ones), at least 1. The 1e-6 keeps floor(0.29 * 100) at 29.
  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    if (budget_ > 0 && budget_ < block_size) {
      return Status::InvalidArgument("random: budget " + std::to_string(budget_) + " is smaller than one block (block_size " +
                                     std::to_string(block_size) + "): the pools hand out whole blocks per stream");
    }
    return Status::OK();
  }
  int64_t KeptSlotsBound(int64_t max_length) const override {
    if (budget_ > 0) return std::min(budget_, max_length);
    return std::max<int64_t>(1, static_cast<int64_t>(std::floor(ratio_ * static_cast<double>(max_length) + 1e-6)));
  }

  int64_t Budget(const StreamState& s) const {
    if (budget_ > 0) return budget_;
    const double length = static_cast<double>(std::max(s.seq_length, s.num_tokens));
    return std::max<int64_t>(1, static_cast<int64_t>(std::floor(ratio_ * length + 1e-6)));
  }

  int64_t budget_;
  double ratio_;
  uint64_t seed_;
};

}  // namespace

void RegisterRandomPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "random";
  info.summary = "random eviction: keeps the newest slot plus budget-1 slots chosen uniformly at random (seeded)";
  info.paper = "Zhang et al. 2023, H2O: Heavy-Hitter Oracle for Efficient Generative Inference of LLMs (random baseline)";
  info.concerns = kConcernSelection;
  info.params = {
      {"budget", ParamSpec::Type::kInt, "0", "slots kept per stream; 0 = ratio x the sequence's length so far", {},
       ParamRange::AtLeast(0)},
      {"ratio", ParamSpec::Type::kFloat, "0.2", "budget as a fraction of the sequence's length so far; used when budget = 0",
       {}, ParamRange::OpenClosed(0, 1)},
      {"seed", ParamSpec::Type::kInt, "0", "seed of the random choice (same seed, same choice on every run)", {}},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t budget = p.GetInt("budget");
    const double ratio = p.GetFloat("ratio");
    const uint64_t seed = static_cast<uint64_t>(p.GetInt("seed"));
    out->reset(new RandomEvictPolicy(std::move(p), budget, ratio, seed));
    return Status::OK();
  };
  info.test_params = {{"budget", "64"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

// key-norm: Devoto, Zhao, Scardapane, Minervini, "A Simple and Effective L2
// Norm-Based Strategy for KV Cache Compression" (EMNLP 2024), arXiv:2406.11430.
//   "we find a clear correlation between the L2 norm and the attention
//   scores over cached KV pairs, where a low L2 norm of a key embedding
//   usually leads to a high attention score during decoding ... we compress
//   the KV cache based on the L2 norm of key embeddings."
//
// Parameters
//   budget  (int, 0)      slots kept per stream; 0 = ratio
//   ratio   (float, 0.5)  with budget 0: kept fraction of the length so far
//                         (kvlab's default; the paper sweeps the compression)
//   recent  (int, 1)      most recent slots always kept (1: the token just
//                         written, whose query reads its own key)
//
// What it keeps: the `recent` newest slots plus the budget - recent others
// whose keys have the lowest L2 norm (ties to the lower slot). Query-free: the
// norms are the keys' own (NeedsKeyNorms: core writes each slot's norm when it
// is written; RoPE rotates, so it is the same before or after), so it acts
// after every step, prefill or decode, without attention statistics.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "policies/registry.h"

namespace kvlab {
namespace {

class KeyNormPolicy : public KVPolicy {
 public:
  KeyNormPolicy(PolicyParams p, int64_t budget, double ratio, int64_t recent)
      : KVPolicy(std::move(p)), budget_(budget), ratio_(ratio), recent_(recent) {}
  const char* Name() const override { return "key-norm"; }
  uint32_t Concerns() const override { return kConcernSelection; }
  bool NeedsKeyNorms() const override { return true; }
  Status CheckShape(int /*kv_heads*/, int /*head_dim*/, int block_size) const override {
    if (budget_ > 0 && budget_ < block_size) {
      return Status::InvalidArgument("key-norm: parameter 'budget' is " + std::to_string(budget_) +
                                     ", smaller than one block (block_size " + std::to_string(block_size) +
                                     "): the pools hand out whole blocks per stream");
    }
    return Status::OK();
  }
  int64_t Budget(int64_t length) const {
    if (budget_ > 0) return budget_;
    const int64_t b = static_cast<int64_t>(std::floor(ratio_ * static_cast<double>(length) + 1e-6));
    return std::max<int64_t>(std::max<int64_t>(1, recent_), b);
  }
  int64_t KeptSlotsBound(int64_t max_length) const override { return std::min(max_length, Budget(max_length)); }

  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    const int64_t n = s.num_tokens;
    const int64_t budget = Budget(std::max(s.seq_length, n));
    if (n <= budget) return false;
    const int64_t recent = std::min(recent_, budget);
    const int64_t older = n - recent;
    std::vector<int64_t> cand(static_cast<size_t>(older));
    std::iota(cand.begin(), cand.end(), 0);
    auto norm = [&s](int64_t i) {
      if (s.score == nullptr) return 0.0f;
      const float v = s.score[i];
      return std::isnan(v) ? std::numeric_limits<float>::infinity() : v;
    };
    auto better = [&norm](int64_t a, int64_t b) { return norm(a) != norm(b) ? norm(a) < norm(b) : a < b; };
    const int64_t low = budget - recent;
    std::nth_element(cand.begin(), cand.begin() + low, cand.end(), better);
    cand.resize(static_cast<size_t>(low));
    std::sort(cand.begin(), cand.end());
    *keep = cand;
    for (int64_t i = older; i < n; ++i) keep->push_back(i);
    return true;
  }

 private:
  int64_t budget_;
  double ratio_;
  int64_t recent_;
};

}  // namespace

void RegisterKeyNormPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "key-norm";
  info.summary = "keeps the keys with the lowest L2 norm (query-free) plus the most recent slots";
  info.paper = "Devoto et al. 2024, A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression";
  info.concerns = kConcernSelection;
  info.params = {
      {"budget", ParamSpec::Type::kInt, "0", "slots kept per stream; 0 = ratio x the sequence's length so far", {},
       ParamRange::AtLeast(0)},
      {"ratio", ParamSpec::Type::kFloat, "0.5",
       "with budget = 0: kept fraction of the sequence's length so far (kvlab's default; the paper sweeps it)", {},
       ParamRange::OpenClosed(0, 1)},
      {"recent", ParamSpec::Type::kInt, "1",
       "most recent slots always kept (1: the token just written, whose query reads its own key)", {},
       ParamRange::Closed(1, 1 << 20)},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t budget = p.GetInt("budget");
    const double ratio = p.GetFloat("ratio");
    const int64_t recent = p.GetInt("recent");
    if (budget > 0 && budget < recent) {
      return Status::InvalidArgument("key-norm: parameter 'budget' is " + std::to_string(budget) +
                                     ", smaller than 'recent' " + std::to_string(recent));
    }
    out->reset(new KeyNormPolicy(std::move(p), budget, ratio, recent));
    return Status::OK();
  };
  info.test_params = {{"budget", "48"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

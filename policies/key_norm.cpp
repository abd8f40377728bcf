// key-norm: Devoto, Zhao, Scardapane, Minervini, "A Simple and Effective L2
// Norm-Based Strategy for KV Cache Compression" (EMNLP 2024), arXiv:2406.11430.
//   "a low L2 norm of a key embedding usually leads to a high attention score
//   during decoding ... we compress the KV cache based on the L2 norm of key
//   embeddings."
// Keeps the `recent` newest slots plus the rest of the budget by the lowest
// key L2 norm (ties to the lower slot). Query-free: core writes each slot's
// norm when it is written (NeedsKeyNorms; RoPE rotates, so the norm is the
// same before or after it), so it acts after every step without attention.
#include "policies/scored_selection.h"

namespace kvlab {
namespace {

class KeyNormPolicy : public ScoredSelection {
 public:
  explicit KeyNormPolicy(PolicyParams p)
      : ScoredSelection(p, ReadBudget(p, p.GetInt("recent"))), recent_(p.GetInt("recent")) {}
  const char* Name() const override { return "key-norm"; }
  bool NeedsKeyNorms() const override { return true; }
  int64_t Recent(int64_t budget) const override { return std::min(recent_, budget); }
  void Score(const StreamState& s, int64_t n, float* out) const override {
    for (int64_t i = 0; i < n; ++i) out[i] = s.score != nullptr ? -s.score[i] : 0.0f;  // lowest norm first
  }

 private:
  int64_t recent_;
};

}  // namespace

void RegisterKeyNormPolicy(PolicyRegistry* registry) {
  PolicyInfo info("key-norm", "keeps the keys with the lowest L2 norm (query-free) plus the most recent slots",
                  "Devoto et al. 2024, A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression",
                  kConcernSelection, BudgetParams("0", "0.5", "kvlab's default; the paper sweeps it"));
  info.params.push_back({"recent", ParamSpec::Type::kInt, "1", "most recent slots always kept (1: the token just "
                         "written, whose query reads its own key)", {}, ParamRange::Closed(1, 1 << 20)});
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    if (p.GetInt("budget") > 0 && p.GetInt("budget") < p.GetInt("recent")) {
      return Status::InvalidArgument("key-norm: parameter 'budget' is " + std::to_string(p.GetInt("budget")) +
                                     ", smaller than 'recent' " + std::to_string(p.GetInt("recent")));
    }
    return CreateAs<KeyNormPolicy>()(std::move(p), out);
  };
  info.test_params = {{"budget", "48"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

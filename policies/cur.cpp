// cur: CurDKV, "Value-Guided KV Compression for LLMs via Approximated CUR
// Decomposition" (2025), arXiv:2509.15038, as kvpress's CURPress scores it.
// A slot's approximate leverage is the squared norm of its key (k2) and of its
// value (v2); with local_window > 0 each is divided by its sum over the slot's
// window of local_window slots (windows counted from slot 0; the last may be
// partial); the score is k2 · v2 (kv_product), (k2 + v2) / 2 (kv_avg), k2 or
// v2, normalised to sum 1 over the stream; the first num_sinks slots score 1.
// Keeps the budget's top scores, ties to the lower slot, the newest slot
// always. Attention-free and query-free: it reads the slots' K/V.
#include "policies/scored_selection.h"

namespace kvlab {
namespace {

class CurPolicy : public ScoredSelection {
 public:
  explicit CurPolicy(PolicyParams p)
      : ScoredSelection(p, ReadBudget(p)),
        sinks_(p.GetInt("num_sinks")),
        window_(p.GetInt("local_window")),
        type_(p.GetString("leverage")) {}
  const char* Name() const override { return "cur"; }
  bool NeedsKeyValues() const override { return true; }
  void Score(const StreamState& s, int64_t n, float* out) const override {
    const int64_t len = s.num_tokens;
    std::fill(out, out + n, 0.0f);
    if (s.kv == nullptr) return;  // only a hand-built state: core reads host K/V for every NeedsKeyValues policy
    const int d = s.kv->head_dim();
    std::vector<float> k(static_cast<size_t>(len * d)), v(k.size());
    s.kv->Read(k.data(), v.data());
    std::vector<double> k2(static_cast<size_t>(len), 0.0), v2(k2.size(), 0.0), score(k2.size());
    for (int64_t t = 0; t < len; ++t) {
      for (int c = 0; c < d; ++c) {
        k2[t] += static_cast<double>(k[t * d + c]) * k[t * d + c];
        v2[t] += static_cast<double>(v[t * d + c]) * v[t * d + c];
      }
    }
    for (int64_t w0 = 0; window_ > 0 && w0 < len; w0 += window_) {
      const int64_t w1 = std::min(len, w0 + window_);
      double ks = 0, vs = 0;
      for (int64_t t = w0; t < w1; ++t) ks += k2[t], vs += v2[t];
      for (int64_t t = w0; t < w1; ++t) k2[t] /= ks, v2[t] /= vs;
    }
    double total = 0;
    for (int64_t t = 0; t < len; ++t) {
      score[t] = type_ == "key" ? k2[t] : type_ == "value" ? v2[t] : type_ == "kv_avg" ? (k2[t] + v2[t]) / 2 : k2[t] * v2[t];
      total += score[t];
    }
    for (int64_t t = 0; t < n; ++t) out[t] = t < sinks_ ? 1.0f : static_cast<float>(score[t] / total);
  }

 private:
  int64_t sinks_, window_;
  std::string type_;
};

}  // namespace

void RegisterCurPolicy(PolicyRegistry* registry) {
  PolicyInfo info("cur", "keeps the slots of highest approximate leverage (squared key and value norms, CurDKV)",
                  "CurDKV 2025, Value-Guided KV Compression for LLMs via Approximated CUR Decomposition",
                  kConcernSelection, BudgetParams("0", "0.5", "kvlab's default; the paper sweeps it"));
  info.params.push_back({"num_sinks", ParamSpec::Type::kInt, "4", "first slots always kept (kvpress's default)", {},
                         ParamRange::Closed(0, 1 << 20)});
  info.params.push_back({"leverage", ParamSpec::Type::kString, "kv_product", "how key and value leverage combine",
                         {"kv_product", "kv_avg", "key", "value"}});
  info.params.push_back({"local_window", ParamSpec::Type::kInt, "16",
                         "slots per window the leverage is normalised over (kvpress's default); 0: none", {},
                         ParamRange::Closed(0, 1 << 20)});
  info.create = CreateAs<CurPolicy>();
  info.test_params = {{"budget", "48"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

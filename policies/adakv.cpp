// adakv: Feng, Lv, Cao, Xie, Zhou, "Ada-KV: Optimizing KV Cache Eviction by
// Adaptive Budget Allocation for Efficient LLM Inference" (2024),
// arXiv:2407.11550.
//   "Ada-KV ... adaptively allocates budgets across heads": the layer's
//   budget goes to the highest scores of all its heads together, with a
//   safeguard so that no head falls below a fraction alpha of the uniform one.
//
// Parameters: snapkv's (budget, ratio, window, kernel, pooling, every), and
//   alpha   (float, 0.2)    safeguard: each head keeps at least floor(alpha x P)
//                           of its own best slots (kvpress's alpha_safeguard 0.20)
//   layers  ("uniform" | "pyramid", "uniform")  the layer budgets: SnapKV's
//                           uniform one, or PyramidKV's schedule (Ada-KV over PyramidKV)
//   beta    (float, 20)     PyramidKV's schedule, with layers = "pyramid"
//
// What it keeps, per (sequence, layer) of H KV heads with prefix budget P
// (the layer's budget less the window): every head keeps its window; the
// H x P earlier slots are allocated by AdaAllocate (snapkv_scores.h) over
// the heads' pooled SnapKV scores, so heads get different lengths and the
// pools hold exactly each head's slots (the evicted ones are freed, not
// masked). When it runs: as snapkv (snapkv_scores.h), by the layer's total
// slots (H x budget, H x every). A head can get up to H x P - (H - 1) x
// floor(alpha x P) earlier slots, which KeptSlotsBoundInLayer reports.
#include <algorithm>

#include "policies/snapkv_scores.h"

namespace kvlab {
namespace {

class AdaKVPolicy : public SnapKVFamily {
 public:
  AdaKVPolicy(PolicyParams p, const SnapKVOptions& o, double alpha, bool pyramid, double beta)
      : SnapKVFamily(std::move(p), o), alpha_(alpha), pyramid_(pyramid), beta_(beta) {}
  const char* Name() const override { return "adakv"; }
  bool SelectsPerLayer() const override { return true; }
  int64_t LayerBudget(int layer, int num_layers, int64_t length) const override {
    return pyramid_ ? PyramidLayerBudget(o_, beta_, layer, num_layers, length) : o_.Budget(length);
  }
  // A stream selected alone (SelectSlots) keeps its layer's uniform share.
  int64_t KeptSlotsBound(int64_t max_length) const override { return KeptSlotsBoundInLayer(max_length, 1); }
  int64_t KeptSlotsBoundInLayer(int64_t max_length, int kv_heads) const override {
    const int64_t B = pyramid_ ? PyramidBottomBound(o_, beta_, max_length) : o_.Budget(max_length);
    const int64_t w = std::min(o_.window, B), P = B - w;
    const int64_t H = std::max(1, kv_heads);
    const int64_t head_max = H * P - (H - 1) * SafeguardSlots(P);
    return std::min(max_length, w + head_max + o_.every - 1);
  }
  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    return SelectWithBudget(s, LayerBudget(s.layer, s.num_layers, SnapKVLength(s)), keep);
  }
  void SelectLayerSlots(const std::vector<StreamState>& heads, std::vector<std::vector<int64_t>>* keep,
                        std::vector<char>* acts) const override;

 private:
  int64_t SafeguardSlots(int64_t P) const {
    return std::min(P, static_cast<int64_t>(alpha_ * static_cast<double>(P) + 1e-9));
  }
  double alpha_;
  bool pyramid_;
  double beta_;
};

void AdaKVPolicy::SelectLayerSlots(const std::vector<StreamState>& heads, std::vector<std::vector<int64_t>>* keep,
                                   std::vector<char>* acts) const {
  const size_t H = heads.size();
  keep->assign(H, {});
  acts->assign(H, 0);
  if (H == 0) return;
  int64_t length = 0, total = 0;
  for (const StreamState& s : heads) {
    length = std::max(length, SnapKVLength(s));
    total += s.num_tokens;
  }
  const StreamState& first = heads[0];
  const int64_t B = LayerBudget(first.layer, first.num_layers, length);
  const int64_t Hn = static_cast<int64_t>(H);
  // SnapKVActs on the layer's total: H streams of B slots, H x every past it.
  StreamState layer = first;
  layer.num_tokens = total;
  if (!SnapKVActs(layer, Hn * B, Hn * o_.every)) return;
  const int64_t w = std::min(o_.window, B);
  std::vector<std::vector<float>> pooled(H);
  for (size_t h = 0; h < H; ++h) {
    const int64_t prefix = std::max<int64_t>(0, heads[h].num_tokens - w);
    PooledScores(heads[h].score, prefix, o_.kernel, o_.max_pool, &pooled[h]);
  }
  const std::vector<std::vector<int64_t>> chosen = AdaAllocate(pooled, B - w, alpha_);
  for (size_t h = 0; h < H; ++h) {
    const int64_t n = heads[h].num_tokens;
    KeepTopAndWindow(chosen[h], static_cast<int64_t>(pooled[h].size()), n, &(*keep)[h]);
    (*acts)[h] = static_cast<int64_t>((*keep)[h].size()) < n ? 1 : 0;
  }
}

}  // namespace

void RegisterAdaKVPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "adakv";
  info.summary = "SnapKV's scores with per-head budgets: a layer's budget goes to its heads' best slots jointly, "
                 "with a per-head floor";
  info.paper = "Feng et al. 2024, Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation";
  info.concerns = kConcernSelection;
  info.params = SnapKVParamSpecs();
  info.params.push_back({"alpha", ParamSpec::Type::kFloat, "0.2",
                         "safeguard: each head keeps at least floor(alpha x its uniform budget) of its own best slots "
                         "(kvpress's alpha_safeguard: 0.2)",
                         {}, ParamRange::Closed(0, 1)});
  info.params.push_back({"layers", ParamSpec::Type::kString, "uniform",
                         "layer budgets: \"uniform\" (Ada-KV over SnapKV) or \"pyramid\" (over PyramidKV's schedule)",
                         {"uniform", "pyramid"}});
  info.params.push_back(PyramidBetaSpec());
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    SnapKVOptions o;
    KVLAB_RETURN_IF_ERROR(ReadSnapKVOptions("adakv", p, &o));
    const double alpha = p.GetFloat("alpha");
    const bool pyramid = p.GetString("layers") == "pyramid";
    const double beta = p.GetFloat("beta");
    out->reset(new AdaKVPolicy(std::move(p), o, alpha, pyramid, beta));
    return Status::OK();
  };
  info.test_params = {{"budget", "48"}, {"window", "16"}, {"every", "16"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

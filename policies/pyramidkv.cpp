// pyramidkv: Cai, Zhang, Gao, Liu, Liu, Lu, Xiong, Dong, Chang, Hu, Xiao,
// "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
// Funneling" (2024), arXiv:2406.02069.
//   "PyramidKV dynamically adjusts the KV cache size across different layers,
//   allocating more cache in lower layers and less in higher ones."
//
// Parameters: snapkv's (budget, ratio, window, kernel, pooling, every), and
//   beta (float, 20)  the schedule's steepness (the paper's code: 20): the top
//                     layer keeps P / beta of the uniform prefix budget P
//
// What it keeps: SnapKV's rule (policies/snapkv.cpp) with a budget per layer:
// the window plus P_l earlier slots, where P_l falls in equal steps from
// 2P - P/beta at layer 0 to P/beta at the top layer and the P_l sum to
// L x P, the uniform total (PyramidPrefixBudgets: floors, the remainder one
// slot each to the lowest layers). The streams hold exactly that: each
// layer's pool bytes follow the schedule.
#include <algorithm>

#include "policies/snapkv_scores.h"

namespace kvlab {
namespace {

class PyramidKVPolicy : public SnapKVFamily {
 public:
  PyramidKVPolicy(PolicyParams p, const SnapKVOptions& o, double beta) : SnapKVFamily(std::move(p), o), beta_(beta) {}
  const char* Name() const override { return "pyramidkv"; }
  int64_t LayerBudget(int layer, int num_layers, int64_t length) const override {
    return PyramidLayerBudget(o_, beta_, layer, num_layers, length);
  }
  // The bottom layer's, the largest.
  int64_t KeptSlotsBound(int64_t max_length) const override {
    return std::min(max_length, PyramidBottomBound(o_, beta_, max_length) + o_.every - 1);
  }
  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    return SelectWithBudget(s, LayerBudget(s.layer, s.num_layers, SnapKVLength(s)), keep);
  }

 private:
  double beta_;
};

}  // namespace

ParamSpec PyramidBetaSpec() {
  return {"beta", ParamSpec::Type::kFloat, "20",
          "steepness of the per-layer schedule: the top layer keeps 1/beta of the uniform budget (the paper's "
          "code: 20)",
          {}, ParamRange::AtLeast(1)};
}

void RegisterPyramidKVPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "pyramidkv";
  info.summary = "SnapKV's choice with per-layer budgets falling from the lower to the upper layers (same total)";
  info.paper = "Cai et al. 2024, PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling";
  info.concerns = kConcernSelection;
  info.params = SnapKVParamSpecs();
  info.params.push_back(PyramidBetaSpec());
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    SnapKVOptions o;
    KVLAB_RETURN_IF_ERROR(ReadSnapKVOptions("pyramidkv", p, &o));
    const double beta = p.GetFloat("beta");
    out->reset(new PyramidKVPolicy(std::move(p), o, beta));
    return Status::OK();
  };
  info.test_params = {{"budget", "48"}, {"window", "16"}, {"every", "16"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

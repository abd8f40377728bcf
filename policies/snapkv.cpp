// snapkv: Li, Huang, Yang, Venkitesh, Locatelli, Ye, Cai, Lewis, Chen,
// "SnapKV: LLM Knows What You are Looking for Before Generation" (2024),
// arXiv:2404.14469.
//   "SnapKV automatically compresses KV caches by selecting clustered
//   important KV positions for each attention head."
//
// Parameters (policies/snapkv_scores.h: SnapKVParamSpecs)
//   budget   (int, 1024)    slots kept per stream, the window included; 0 = ratio
//   ratio    (float, 0.25)  with budget 0: kept fraction of the length so far
//   window   (int, 32)      observation window (the paper: 32)
//   kernel   (int, 7)       pooling kernel, odd (the paper: 7)
//   pooling  ("max" | "avg", "max")
//   every    (int, 256)     slots past the budget before the rule runs again
//
// What it keeps, per stream (sequence, layer, KV head): the last `window`
// slots, plus the budget - window earlier slots with the highest pooled
// score, where a slot's score is the attention the window's queries gave it,
// summed over the window and over the query heads of the KV head (GQA: one
// choice per KV head), and pooled over `kernel` neighbours (ties to the lower
// slot). The rule runs at the end of each prompt chunk and again once a
// stream has grown `every` slots past its budget (snapkv_scores.h says when,
// and why the pools then need the budget + every - 1 slots of KeptSlotsBound).
#include <algorithm>

#include "policies/snapkv_scores.h"

namespace kvlab {
namespace {

class SnapKVPolicy : public SnapKVFamily {
 public:
  using SnapKVFamily::SnapKVFamily;
  const char* Name() const override { return "snapkv"; }
  int64_t LayerBudget(int /*layer*/, int /*num_layers*/, int64_t length) const override { return o_.Budget(length); }
  int64_t KeptSlotsBound(int64_t max_length) const override {
    return std::min(max_length, o_.Budget(max_length) + o_.every - 1);
  }
  bool SelectSlots(const StreamState& s, std::vector<int64_t>* keep) const override {
    return SelectWithBudget(s, o_.Budget(SnapKVLength(s)), keep);
  }
};

}  // namespace

void RegisterSnapKVPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "snapkv";
  info.summary = "observation window + pooled attention: each KV head keeps the window and the earlier slots the "
                 "window's queries attend to most";
  info.paper = "Li et al. 2024, SnapKV: LLM Knows What You are Looking for Before Generation";
  info.concerns = kConcernSelection;
  info.params = SnapKVParamSpecs();
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    SnapKVOptions o;
    KVLAB_RETURN_IF_ERROR(ReadSnapKVOptions("snapkv", p, &o));
    out->reset(new SnapKVPolicy(std::move(p), o));
    return Status::OK();
  };
  info.test_params = {{"budget", "48"}, {"window", "16"}, {"every", "16"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

// gqa-reuse: grouped-query head sharing. Ainslie, Lee-Thorp, de Jong,
// Zemlyanskiy, Lebrón, Sanghai, "GQA: Training Generalized Multi-Query
// Transformer Models from Multi-Head Checkpoints" (EMNLP 2023), arXiv:2305.13245.
//
// Parameters
//   group  (int, 2)                    adjacent model KV heads merged into one stored stream
//   merge  ("mean" | "first", "mean")  how a group's K/V projections become one
//                                      (the paper's conversion ablation: mean > first)
//
// How it encodes: stores H_kv / group KV heads per layer; stored head g serves
// every query head of model KV heads [g·group, (g+1)·group), with K and V
// from the mean (or the first) of those heads' projections. No uptraining
// (the paper uptrains 5% of pre-training steps), so expect a larger accuracy
// loss than the paper reports.
#include <string>

#include "policies/registry.h"

namespace kvlab {
namespace {

class GqaReusePolicy : public KVPolicy {
 public:
  GqaReusePolicy(PolicyParams p, int group, HeadMerge merge) : KVPolicy(std::move(p)), group_(group), merge_(merge) {}

  const char* Name() const override { return "gqa-reuse"; }
  uint32_t Concerns() const override { return kConcernHeadSharing; }

  Status CheckShape(int model_kv_heads, int /*head_dim*/, int /*block_size*/) const override {
    if (model_kv_heads % group_ != 0) {
      return Status::InvalidArgument("policy 'gqa-reuse' parameter 'group' = " + std::to_string(group_) +
                                     " must divide the model's " + std::to_string(model_kv_heads) + " KV heads");
    }
    return Status::OK();
  }

  // A group that does not divide H_kv is refused by CheckShape; until then
  // the heads are left as they are rather than grouped wrongly.
  int StoredKvHeads(int model_kv_heads) const override {
    return model_kv_heads % group_ == 0 ? model_kv_heads / group_ : model_kv_heads;
  }
  HeadMerge MergeMode() const override { return merge_; }

 private:
  int group_;
  HeadMerge merge_;
};

}  // namespace

void RegisterGqaReusePolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "gqa-reuse";
  info.summary = "head sharing: merges each group of adjacent KV heads into one stored stream (toward MQA)";
  info.paper = "Ainslie et al. 2023, GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints";
  info.concerns = kConcernHeadSharing;
  info.params = {
      {"group", ParamSpec::Type::kInt, "2",
       "adjacent model KV heads merged into one stored stream; must divide the model's KV heads "
       "(group = H_kv gives MQA, 1 leaves the heads as they are)",
       {},
       // The upper end is above any model's KV head count and keeps the narrowing to int exact.
       ParamRange::Closed(1, 1 << 20)},
      {"merge", ParamSpec::Type::kString, "mean",
       "how a group becomes one head: \"mean\" of its K/V projections (the paper's best) or its \"first\" head",
       {"mean", "first"}},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    const int64_t group = p.GetInt("group");
    const HeadMerge merge = p.GetString("merge") == "first" ? HeadMerge::kFirst : HeadMerge::kMean;
    out->reset(new GqaReusePolicy(std::move(p), static_cast<int>(group), merge));
    return Status::OK();
  };
  registry->Register(std::move(info));
}

}  // namespace kvlab

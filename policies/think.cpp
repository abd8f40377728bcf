// think: ThinK key-channel pruning (Xu et al. 2024, "ThinK: Thinner Key Cache
// by Query-Driven Pruning", arXiv:2407.21018). Representation.
// Parameters: ratio (pruning ratio lambda, in (0, 1), default 0.4 as in the
// authors' scripts), recent (most recent tokens whose keys stay whole,
// default 32: their recent_size).
// Definition: every sealed block outside the `recent` newest tokens keeps
// head_dim - floor(ratio * head_dim) key channels, those with the largest
// energy sum_t k[t][c]^2 over the block's tokens, and drops the others; values
// stay whole, and kept numbers are stored at the cache dtype (exact).
//
// Deviation from the paper (docs/policies.md, "think"): the paper ranks a
// channel by ||Q_w[:, c]|| * ||K[:, c]|| with the last 32 prompt queries,
// once per head after prefill. kvlab's policies see no queries (the
// observation window hook hands them per-slot attention) and its encoder has
// no per-stream state, so here the query factor is 1 and the choice is made
// per sealed block from its own keys (KvEncoding kThink, kernels/kv_encoding.h).
#include <cmath>

#include "core/base/untrusted.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

class ThinkPolicy : public KVPolicy {
 public:
  explicit ThinkPolicy(PolicyParams p) : KVPolicy(std::move(p)) {}
  const char* Name() const override { return "think"; }
  uint32_t Concerns() const override { return kConcernRepresentation; }

  // Channels pruned per key at head_dim d: the authors' int(head_dim * ratio).
  int64_t Pruned(int head_dim) const {
    return static_cast<int64_t>(std::floor(params().GetFloat("ratio") * static_cast<double>(head_dim)));
  }

  Status CheckShape(int /*kv_heads*/, int head_dim, int /*block_size*/) const override {
    KVLAB_RETURN_IF_ERROR(CheckIntIn("think: 'recent'", params().GetInt("recent"), 0, kMaxContextTokens));
    if (Pruned(head_dim) < 1) {
      return Status::InvalidArgument("think: 'ratio' " + params().values().at("ratio") + " prunes no key channel at " +
                                     "head_dim " + std::to_string(head_dim) + " (floor(ratio x head_dim) = 0); " +
                                     "use ratio >= 1/" + std::to_string(head_dim));
    }
    return Status::OK();
  }

  bool SealedEncoding(int head_dim, int block_size, KvEncoding* enc, int64_t* residual) const override {
    enc->kind = EncodingKind::kThink;
    enc->head_dim = head_dim;
    enc->tokens_per_block = block_size;
    enc->group = block_size;
    enc->bits = 16;
    enc->key_channels = static_cast<int>(head_dim - Pruned(head_dim));
    *residual = params().GetInt("recent");
    return true;
  }
  // Each sealed block's channel choice comes from its own keys only.
  bool EncodingDeterministic() const override { return true; }
};

}  // namespace

void RegisterThinkPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "think";
  info.summary =
      "sealed blocks keep the head_dim - floor(ratio x head_dim) highest-energy key channels (values whole); "
      "channel choice per block from its keys (the paper's is query-driven)";
  info.paper = "Xu et al. 2024, ThinK: Thinner Key Cache by Query-Driven Pruning";
  info.concerns = kConcernRepresentation;
  info.params = {
      {"ratio", ParamSpec::Type::kFloat, "0.4", "pruning ratio lambda: the share of key channels dropped", {},
       ParamRange::Open(0, 1)},
      {"recent", ParamSpec::Type::kInt, "32", "most recent tokens whose keys keep every channel", {},
       ParamRange::AtLeast(0)},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    out->reset(new ThinkPolicy(std::move(p)));
    return Status::OK();
  };
  registry->Register(std::move(info));
}

}  // namespace kvlab

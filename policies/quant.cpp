// quant: the serving engines' 8-bit KV cache (vLLM's --kv-cache-dtype fp8,
// TensorRT-LLM's int8 KV cache), the comparison point for KIVI.
// Representation. Parameters: format (int8 | fp8, default fp8: e4m3),
// scale (token | block, default token: one fp16 absmax scale per token row of
// K and of V, or one per block).
// Definition: every sealed block is stored as symmetric 8-bit numbers times
// an fp16 scale; the open tail block stays at the cache dtype until sealed.
#include "policies/registry.h"

namespace kvlab {
namespace {

class QuantPolicy : public KVPolicy {
 public:
  explicit QuantPolicy(PolicyParams p) : KVPolicy(std::move(p)) {}
  const char* Name() const override { return "quant"; }
  uint32_t Concerns() const override { return kConcernRepresentation; }

  bool SealedEncoding(int head_dim, int block_size, KvEncoding* enc, int64_t* residual) const override {
    enc->kind = params().GetString("format") == "int8" ? EncodingKind::kInt8 : EncodingKind::kFp8;
    enc->bits = 8;
    enc->head_dim = head_dim;
    enc->tokens_per_block = block_size;
    enc->group = block_size;
    enc->scale_per_token = params().GetString("scale") == "token";
    *residual = 0;
    return true;
  }
  // Each sealed block's scales come from its own tokens only.
  bool EncodingDeterministic() const override { return true; }
};

}  // namespace

void RegisterQuantPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "quant";
  info.summary = "sealed blocks as 8-bit int8 or fp8 (e4m3) with fp16 absmax scales per token or per block";
  info.paper = "vLLM FP8 KV cache (Kwon et al. 2023 and its docs); int8 KV as in TensorRT-LLM";
  info.concerns = kConcernRepresentation;
  info.params = {
      {"format", ParamSpec::Type::kString, "fp8", "int8 or fp8 (e4m3, max 448)", {"int8", "fp8"}},
      {"scale", ParamSpec::Type::kString, "token", "one scale per token row, or one per block", {"token", "block"}},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    out->reset(new QuantPolicy(std::move(p)));
    return Status::OK();
  };
  registry->Register(std::move(info));
}

}  // namespace kvlab

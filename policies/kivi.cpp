// kivi: KIVI (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit
// Quantization for KV Cache"). Representation.
// Parameters: bits (2 | 4, default 2), group (tokens per key group and
// channels per value group, default 32), residual (most recent tokens kept in
// full precision, default 128), key_axis (channel | token, default channel),
// value_axis (channel | token, default token), attention (exact | int8,
// default exact: the CPU decode kernel's arithmetic on sealed groups, exact
// fp32 or int8 queries and 8-bit value weights; the stored bytes are the same).
// Definition: every sealed group of `group` tokens outside the residual is
// stored as asymmetric `bits`-bit integers with an fp16 scale and zero point,
// keys per channel and values per token; the residual stays at the cache dtype.
#include "core/base/untrusted.h"
#include "policies/registry.h"

namespace kvlab {
namespace {

QuantAxis Axis(const std::string& s) { return s == "token" ? QuantAxis::kToken : QuantAxis::kChannel; }

class KiviPolicy : public KVPolicy {
 public:
  explicit KiviPolicy(PolicyParams p) : KVPolicy(std::move(p)) {}
  const char* Name() const override { return "kivi"; }
  uint32_t Concerns() const override { return kConcernRepresentation; }

  Status CheckShape(int /*kv_heads*/, int head_dim, int block_size) const override {
    // group and residual become ints below: past the bound they would wrap (2^32 + 32 -> 32).
    KVLAB_RETURN_IF_ERROR(CheckIntIn("kivi: 'group'", params().GetInt("group"), 1, kMaxContextTokens));
    KVLAB_RETURN_IF_ERROR(CheckIntIn("kivi: 'residual'", params().GetInt("residual"), 0, kMaxContextTokens));
    KvEncoding e;
    int64_t residual = 0;
    SealedEncoding(head_dim, block_size, &e, &residual);
    const std::string err = e.Validate();
    if (!err.empty()) return Status::InvalidArgument(err);
    if (AttentionKernelOptions().int8_attention && !e.Int8AttentionShape()) {
      return Status::InvalidArgument(
          "kivi: 'attention' = \"int8\" needs bits = 2, group = 32, key_axis = channel, value_axis = token and "
          "head_dim 128 (the shape its kernel is written for); got bits " + std::to_string(e.bits) + ", group " +
          std::to_string(e.group) + ", head_dim " + std::to_string(head_dim));
    }
    if (e.group % block_size != 0) {
      return Status::InvalidArgument("kivi: 'group' " + std::to_string(e.group) + " must be a multiple of the block size " +
                                     std::to_string(block_size) + " (groups are sealed from whole blocks)");
    }
    return Status::OK();
  }

  bool SealedEncoding(int head_dim, int /*block_size*/, KvEncoding* enc, int64_t* residual) const override {
    enc->kind = EncodingKind::kKivi;
    enc->bits = static_cast<int>(params().GetInt("bits"));
    enc->group = static_cast<int>(params().GetInt("group"));
    enc->tokens_per_block = enc->group;
    enc->head_dim = head_dim;
    enc->key_axis = Axis(params().GetString("key_axis"));
    enc->value_axis = Axis(params().GetString("value_axis"));
    *residual = params().GetInt("residual");
    return true;
  }
  // `attention` is the CPU decode kernel's arithmetic on sealed groups; the
  // stored bytes are the same either way, so it is no part of the encoding.
  KernelOptions AttentionKernelOptions() const override {
    KernelOptions o;
    o.int8_attention = params().GetString("attention") == "int8";
    return o;
  }
  // Each sealed block's scales come from its own tokens only.
  bool EncodingDeterministic() const override { return true; }
};

}  // namespace

void RegisterKiviPolicy(PolicyRegistry* registry) {
  PolicyInfo info;
  info.name = "kivi";
  info.summary = "sealed groups outside the residual as 2/4-bit integers, keys per channel, values per token";
  info.paper = "Liu et al. 2024, KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache";
  info.concerns = kConcernRepresentation;
  info.params = {
      {"bits", ParamSpec::Type::kInt, "2", "bits per number", {"2", "4"}},
      {"group", ParamSpec::Type::kInt, "32", "tokens per key group / channels per value group", {},
       ParamRange::AtLeast(1)},
      {"residual", ParamSpec::Type::kInt, "128", "most recent tokens kept at full precision", {},
       ParamRange::AtLeast(0)},
      {"key_axis", ParamSpec::Type::kString, "channel", "key statistics per channel (over tokens) or per token",
       {"channel", "token"}},
      {"value_axis", ParamSpec::Type::kString, "token", "value statistics per token (over channels) or per channel",
       {"channel", "token"}},
      {"attention", ParamSpec::Type::kString, "exact",
       "decode attention arithmetic on the CPU: exact fp32, or int8 queries and 8-bit value weights "
       "(approximate, faster)",
       {"exact", "int8"}},
  };
  info.create = [](PolicyParams p, std::unique_ptr<KVPolicy>* out) {
    out->reset(new KiviPolicy(std::move(p)));
    return Status::OK();
  };
  info.test_params = {{"residual", "32"}};
  registry->Register(std::move(info));
}

}  // namespace kvlab

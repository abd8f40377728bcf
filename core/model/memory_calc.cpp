#include "core/model/memory_calc.h"

#include <cstdio>

namespace kvlab {

Status EstimateKVMemory(const ModelConfig& c, int64_t tokens, int bits, const PolicyStack& stack, MemoryEstimate* out) {
  if (bits != 32 && bits != 16 && bits != 8 && bits != 4 && bits != 2) {
    return Status::InvalidArgument("--bits must be 32, 16, 8, 4 or 2, got " + std::to_string(bits));
  }
  if (tokens < 0) return Status::InvalidArgument("--tokens must be >= 0");
  KVLAB_RETURN_IF_ERROR(stack.CheckShape(static_cast<int>(c.num_key_value_heads), static_cast<int>(c.head_dim), 16));
  MemoryEstimate e;
  e.num_layers = c.num_hidden_layers;
  e.kv_heads = c.num_key_value_heads;
  e.stored_kv_heads = stack.StoredKvHeads(static_cast<int>(c.num_key_value_heads));
  e.head_dim = c.head_dim;
  e.q_heads = c.num_attention_heads;
  e.hidden = c.hidden_size;
  e.bits = bits;
  e.tokens = tokens;
  e.bytes_per_token = 2 * e.num_layers * e.stored_kv_heads * e.head_dim * bits / 8;
  e.bytes_per_sequence = e.bytes_per_token * tokens;
  KvEncoding enc;
  int64_t residual = 0;
  if (stack.SealedEncoding(static_cast<int>(e.head_dim), 16, &enc, &residual)) {
    // Sealed groups outside the residual are encoded; the rest stays at `bits`.
    const int64_t tpb = enc.tokens_per_block;
    const int64_t encoded = tokens > residual ? (tokens - residual) / tpb * tpb : 0;
    e.encoding = enc.Describe();
    e.encoded_tokens = encoded;
    e.bytes_per_sequence = e.num_layers * e.stored_kv_heads * (encoded / tpb * enc.BlockBytes()) +
                           e.bytes_per_token * (tokens - encoded);
  }
  e.mha_shortcut_bytes = 2 * e.num_layers * e.hidden * tokens * bits / 8;
  e.policy = stack.Describe();
  *out = e;
  return Status::OK();
}

std::string WithCommas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return v < 0 ? "-" + out : out;
}

std::string BinaryUnits(int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (v == static_cast<double>(static_cast<int64_t>(v))) {
    std::snprintf(buf, sizeof(buf), "%lld %s", static_cast<long long>(v), units[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

std::string DecimalUnits(int64_t bytes) {
  static const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), v >= 100 ? "%.0f %s" : (v >= 10 ? "%.1f %s" : "%.2f %s"), v, units[u]);
  return buf;
}

std::string FormatMemoryReport(const MemoryEstimate& e, int64_t pool_bytes) {
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof(buf), "shape          L=%lld  H_q=%lld  H_kv=%lld  stored H_kv=%lld  d_h=%lld  d_model=%lld\n",
                static_cast<long long>(e.num_layers), static_cast<long long>(e.q_heads),
                static_cast<long long>(e.kv_heads), static_cast<long long>(e.stored_kv_heads),
                static_cast<long long>(e.head_dim), static_cast<long long>(e.hidden));
  out += buf;
  out += "policy         " + e.policy + "\n";
  out += "storage        " + std::to_string(e.bits) + " bits per number";
  if (!e.encoding.empty()) out += "; " + WithCommas(e.encoded_tokens) + " tokens sealed as " + e.encoding;
  out += "\n";
  out += "per token      " + WithCommas(e.bytes_per_token) + " B = " + BinaryUnits(e.bytes_per_token) +
         "   (2 x L x H_kv x d_h x b)\n";
  out += "per sequence   " + WithCommas(e.bytes_per_sequence) + " B = " + BinaryUnits(e.bytes_per_sequence) + " = " +
         DecimalUnits(e.bytes_per_sequence) + " at " + WithCommas(e.tokens) + " tokens\n";
  // Against the model's own uncompressed GQA cache, not the policy's.
  const int64_t gqa_bytes = 2 * e.num_layers * e.kv_heads * e.head_dim * e.tokens * e.bits / 8;
  if (e.mha_shortcut_bytes != gqa_bytes && gqa_bytes > 0) {
    std::snprintf(buf, sizeof(buf), "MHA shortcut   2 x L x d_model x S x b = %s B, overstates the uncompressed cache by %.2fx\n",
                  WithCommas(e.mha_shortcut_bytes).c_str(),
                  static_cast<double>(e.mha_shortcut_bytes) / static_cast<double>(gqa_bytes));
    out += buf;
  }
  if (pool_bytes > 0) {
    std::snprintf(buf, sizeof(buf), "pool share     %.1f%% of a %s pool\n",
                  100.0 * static_cast<double>(e.bytes_per_sequence) / static_cast<double>(pool_bytes),
                  DecimalUnits(pool_bytes).c_str());
    out += buf;
  }
  return out;
}

}  // namespace kvlab

#include "core/model/memory_calc.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "core/base/checked_int.h"
#include "core/base/untrusted.h"
#include "core/cache/cache_reservation.h"
#include "core/cache/kv_cache.h"

namespace kvlab {
namespace {

// What one stream holds when a positional selection rule (KVPolicy::
// KeptRunsBound > 0: sinks and a window) is stacked on an encoding: sealed
// groups stay whole while they keep a slot (KVCache::Compact), so the layout
// depends on the order in which tokens came and went. Replayed on a
// memory-only cache of one stream, a token a step, as the engine applies it
// (Reserve, selection, seal).
Status ReplaySealedLayout(const CacheShape& shape, const KVPolicy& sel, int64_t window, int64_t tokens,
                          int64_t* groups, int64_t* live_sealed, int64_t* plain_tokens) {
  CacheShape one = shape;
  one.num_layers = 1;
  one.num_kv_heads = 1;
  one.layer_window.assign(1, window);
  const int64_t bs = one.block_size;
  std::unique_ptr<KVCache> cache;
  KVLAB_RETURN_IF_ERROR(KVCache::Create(one, (tokens + bs - 1) / bs + 2, /*with_storage=*/false, &cache,
                                        tokens / shape.enc.tokens_per_block + 2));
  KVLAB_RETURN_IF_ERROR(cache->AddSequence(0));
  const std::vector<KVCache::SeqId> seqs = {0};
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t pos = static_cast<int32_t>(t);
    KVLAB_RETURN_IF_ERROR(cache->Reserve(0, 1, &pos));
    KVLAB_RETURN_IF_ERROR(cache->ApplySelection(seqs, {t + 1}, &sel));
    cache->Seal(0);
  }
  const Stream& st = cache->stream(0, 0, 0);
  *groups = static_cast<int64_t>(st.enc_blocks.size());
  *plain_tokens = st.num_plain();
  *live_sealed = st.LiveTokens() - st.num_plain();
  return Status::OK();
}

}  // namespace

Status EstimateKVMemory(const ModelConfig& c, int64_t tokens, int bits, const PolicyStack& stack, MemoryEstimate* out) {
  if (bits != 32 && bits != 16 && bits != 8 && bits != 4 && bits != 2) {
    return Status::InvalidArgument("--bits must be 32, 16, 8, 4 or 2, got " + std::to_string(bits));
  }
  if (tokens < 0) return Status::InvalidArgument("--tokens must be >= 0, got " + std::to_string(tokens));
  // The engine's cache shape at its default block size; the storage width is
  // `bits`, not the shape's dtype.
  CacheShape shape;
  KVLAB_RETURN_IF_ERROR(
      DeriveCacheShape(KvShapeOf(c), stack, /*block_size=*/16, bits == 32 ? DType::kF32 : DType::kBF16, &shape));
  if (shape.encoded && shape.enc.StoresAtCacheDType() && bits != 16 && bits != 32) {
    const KVPolicy* rep = stack.For(kConcernRepresentation);
    return Status::InvalidArgument("kvlab memory: policy '" + std::string(rep != nullptr ? rep->Name() : "?") +
                                   "' stores its sealed blocks at the cache dtype, so --bits must be 16 or 32, got " +
                                   std::to_string(bits));
  }
  MemoryEstimate e;
  e.num_layers = c.num_hidden_layers;
  e.kv_heads = c.num_key_value_heads;
  e.stored_kv_heads = shape.num_kv_heads;
  e.head_dim = c.head_dim;
  e.q_heads = c.num_attention_heads;
  e.hidden = c.hidden_size;
  e.bits = bits;
  e.tokens = tokens;
  // Every byte count below is checked: a token count or a config large enough
  // to overflow 64 bits is an error naming --tokens, not a negative figure.
  const CheckedInt per_token = CheckedInt(2) * e.num_layers * e.stored_kv_heads * e.head_dim * bits / 8;
  const CheckedInt layer_token_bytes = CheckedInt(2) * e.stored_kv_heads * e.head_dim * bits / 8;
  // Bytes a token, then times the tokens (d_model and d_h are even, so each
  // per-token figure is a whole number of bytes at every width).
  const CheckedInt mha = CheckedInt(2) * e.num_layers * e.hidden * bits / 8 * tokens;
  const CheckedInt uncompressed = CheckedInt(2) * e.num_layers * e.kv_heads * e.head_dim * bits / 8 * tokens;
  // The largest count the report prints is at most the uncompressed stored
  // cache plus a block per stream: checked before anything is replayed.
  const CheckedInt stored_bound = per_token * (CheckedInt(tokens) + 2 * 16);
  if (!mha.ok() || !uncompressed.ok() || !stored_bound.ok()) {
    const int64_t widest = std::max<int64_t>({per_token.value(), 2 * e.num_layers * e.hidden * bits / 8,
                                              2 * e.num_layers * e.kv_heads * e.head_dim * bits / 8, 1});
    return Status::InvalidArgument(
        "--tokens " + WithCommas(tokens) + ": the cache's bytes (2 x L x H_kv x d_h x S x b, L=" +
        std::to_string(e.num_layers) + " H_kv=" + std::to_string(e.kv_heads) + " d_h=" + std::to_string(e.head_dim) +
        " d_model=" + std::to_string(e.hidden) + " b=" + std::to_string(bits) +
        " bits) overflow a 64-bit count; this model can be sized at up to about " +
        WithCommas(INT64_MAX / widest - 32) + " tokens");
  }
  e.bytes_per_token = per_token.value();
  e.uncompressed_bytes = uncompressed.value();
  // Selection: what the policy keeps of a stream at `tokens` tokens.
  const KVPolicy* sel = stack.For(kConcernSelection);
  int64_t kept = tokens;
  if (sel != nullptr) {
    constexpr int64_t kHuge = int64_t{1} << 40;
    if (sel->KeptSlotsBound(kHuge) >= kHuge) {
      return Status::InvalidArgument("kvlab memory: policy '" + std::string(sel->Name()) +
                                     "' (selection) declares no bound on what it keeps (KVPolicy::KeptSlotsBound), "
                                     "so its memory cannot be modelled");
    }
    kept = tokens > 0 ? stack.KeptSlotsBound(tokens) : 0;
    e.selection = sel->Name() + std::string("(") + sel->params().ToString() + ")";
  }
  e.tokens_kept = kept;
  for (int l = 0; l < shape.num_layers; ++l) {
    const int64_t w = shape.Window(l);
    auto it = std::find_if(e.groups.begin(), e.groups.end(), [w](const LayerGroup& g) { return g.window == w; });
    if (it == e.groups.end()) {
      e.groups.push_back(LayerGroup{w, 0, std::min(kept, w > 0 ? std::min(tokens, w) : tokens), 0});
      it = e.groups.end() - 1;
    }
    ++it->layers;
  }
  std::sort(e.groups.begin(), e.groups.end(), [](const LayerGroup& a, const LayerGroup& b) { return a.window < b.window; });
  const KvEncoding& enc = shape.enc;
  const int64_t residual = shape.residual;
  const bool encoded = shape.encoded;
  if (encoded) e.encoding = enc.Describe();
  CheckedInt seq_bytes = 0, block_bytes = 0;
  const int64_t bs = e.block_size;
  const int64_t plain_block_bytes = 2 * bs * e.head_dim * bits / 8;
  for (LayerGroup& g : e.groups) {
    const int64_t held = g.tokens_held;
    CheckedInt per_layer = layer_token_bytes * held;
    int64_t enc_tokens = 0;
    CheckedInt enc_bytes_checked = 0;
    int64_t plain_tokens = held;
    if (encoded) {
      // Sealed groups outside the residual are encoded; the rest stays at `bits`.
      const int64_t tpb = enc.tokens_per_block;
      int64_t groups = held > residual ? (held - residual) / tpb : 0;
      enc_tokens = groups * tpb;
      plain_tokens = held - enc_tokens;
      if (sel != nullptr && tokens > 0 && sel->KeptRunsBound() > 0) {
        // The replay takes a step per token.
        KVLAB_RETURN_IF_ERROR(CheckIntIn("--tokens (policy '" + std::string(sel->Name()) + "' over encoding '" +
                                             enc.Describe() + "' is replayed a token at a time)",
                                         tokens, 0, kMaxContextTokens));
        KVLAB_RETURN_IF_ERROR(ReplaySealedLayout(shape, *sel, g.window, tokens, &groups, &enc_tokens, &plain_tokens));
      } else if (sel != nullptr && tokens > 0) {
        // A rule by score may leave every kept sealed token in a group of its
        // own: the encoded bytes are then bounded, not known.
        groups = std::min(enc_tokens, (tokens - plain_tokens) / tpb);
        e.sealed_bound = true;
      }
      if (g.window == 0 || e.encoded_tokens == 0) e.encoded_tokens = enc_tokens;
      enc_bytes_checked = CheckedInt(groups) * enc.BlockBytes();
      per_layer = CheckedInt(e.stored_kv_heads) * enc_bytes_checked + layer_token_bytes * plain_tokens;
    }
    const CheckedInt group_bytes = CheckedInt(g.layers) * per_layer;
    seq_bytes += group_bytes;
    // A window layer frees only whole leading blocks out of its window, so it
    // may hold up to a block more; the figure here is the exact window.
    const int64_t plain_blocks = (plain_tokens + bs - 1) / bs;
    block_bytes += CheckedInt(g.layers) * e.stored_kv_heads *
                   (CheckedInt(plain_blocks) * plain_block_bytes + enc_bytes_checked);
    if (!group_bytes.ok()) break;
    g.bytes = group_bytes.value();
  }
  if (!seq_bytes.ok() || !block_bytes.ok()) {
    return Status::InvalidArgument("--tokens " + WithCommas(tokens) + ": the cache's bytes under policy '" +
                                   stack.Describe() + "' overflow a 64-bit count");
  }
  e.bytes_per_sequence = seq_bytes.value();
  e.bytes_in_blocks = block_bytes.value();
  PlacementOptions po;
  if (stack.Placement(&po)) {
    KVLAB_RETURN_IF_ERROR(CheckDeviceBudget(stack, po.device_budget_bytes, /*max_seqs=*/1, e.num_layers,
                                            e.stored_kv_heads, plain_block_bytes));
    e.placed = true;
    e.device_bytes = std::min(e.bytes_in_blocks, po.device_budget_bytes);
    e.host_bytes = std::min(e.bytes_in_blocks - e.device_bytes, po.host_budget_bytes);
    e.disk_bytes = e.bytes_in_blocks - e.device_bytes - e.host_bytes;
  }
  e.mha_shortcut_bytes = mha.value();
  e.policy = stack.Describe();
  *out = e;
  return Status::OK();
}

Status ResolveKvShape(const std::string& model, ModelConfig* out, std::string* unverified) {
  unverified->clear();
  if (PresetConfig(model, out).ok()) return Status::OK();
  const std::string path = ModelConfigPath(model);
  if (!std::ifstream(path)) return ModelNotFound(model, path);
  return LoadKvShape(path, out, unverified);
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
  if (e.sealed_bound) {
    out += "               (sealed groups stay whole while they keep a token: with a selection by score, which\n"
           "               stay depends on the attention, so the encoded bytes below are an upper bound)\n";
  }
  out += "per token      " + WithCommas(e.bytes_per_token) + " B = " + BinaryUnits(e.bytes_per_token) +
         "   (2 x L x H_kv x d_h x b)\n";
  if (!e.selection.empty()) {
    out += "selection      " + e.selection + " keeps " + WithCommas(e.tokens_kept) + " of " + WithCommas(e.tokens) +
           " tokens per stream\n";
  }
  out += "per sequence   " + WithCommas(e.bytes_per_sequence) + " B = " + BinaryUnits(e.bytes_per_sequence) + " = " +
         DecimalUnits(e.bytes_per_sequence) + " at " + WithCommas(e.tokens) + " tokens\n";
  out += "in blocks      " + WithCommas(e.bytes_in_blocks) + " B in blocks of " + std::to_string(e.block_size) +
         " tokens (what the engine's pools hold at the end)\n";
  if (e.placed) {
    out += "tiers          device " + WithCommas(e.device_bytes) + " B, host " + WithCommas(e.host_bytes) + " B, disk " +
           WithCommas(e.disk_bytes) + " B (the placement policy's budgets)\n";
  }
  // Against the model's own uncompressed GQA cache, not the policy's.
  const int64_t gqa_bytes = e.uncompressed_bytes;
  if (e.mha_shortcut_bytes != gqa_bytes && gqa_bytes > 0 && e.hidden > 0) {
    std::snprintf(buf, sizeof(buf), "MHA shortcut   2 x L x d_model x S x b = %s B, overstates the uncompressed cache by %.2fx\n",
                  WithCommas(e.mha_shortcut_bytes).c_str(),
                  static_cast<double>(e.mha_shortcut_bytes) / static_cast<double>(gqa_bytes));
    out += buf;
  }
  if (e.groups.size() > 1 || (!e.groups.empty() && e.groups[0].window > 0)) {
    for (const LayerGroup& g : e.groups) {
      const std::string kind = g.window > 0 ? "window " + WithCommas(g.window) : "global";
      std::snprintf(buf, sizeof(buf), "  %-12s %lld layers at %s tokens: %s B\n", kind.c_str(),
                    static_cast<long long>(g.layers), WithCommas(g.tokens_held).c_str(), WithCommas(g.bytes).c_str());
      out += buf;
    }
  }
  if (!e.unverified_model_type.empty()) {
    out += "note           model_type '" + e.unverified_model_type +
           "' is not a family kvlab models: shape read from its config.json, sliding windows and other per-layer "
           "attention not verified\n";
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

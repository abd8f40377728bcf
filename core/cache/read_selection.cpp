#include "core/cache/read_selection.h"

#include <algorithm>

namespace kvlab {
namespace {

// The blocks of stream s that `read` picks, or false for all of them.
bool PickBlocks(const PageTable& pt, int layer, int s, const KVPolicy& read, const AttentionParams& p, int64_t nb,
                std::vector<int32_t>* blocks, ReadStats* stats) {
  const PagedKV kv = pt.Layer(layer);
  StreamReadState rs;
  if (pt.KeyBounds(layer, s, &rs.key_min, &rs.key_max) < nb - 1) return false;  // bounds not complete: read all
  const int seq = s / p.num_kv_heads, group = p.num_qo_heads / p.num_kv_heads;
  rs.layer = layer;
  rs.kv_head = s % p.num_kv_heads;
  rs.num_layers = pt.num_layers();
  rs.block_size = kv.block_size;
  rs.head_dim = kv.head_dim;
  rs.num_blocks = nb;
  rs.queries = p.q + (static_cast<int64_t>(p.qo_indptr[seq]) * p.num_qo_heads + rs.kv_head * group) * p.head_dim;
  rs.num_queries = group;
  rs.bound_dtype = kv.dtype;  // the cache keeps the bounds in its own dtype
  blocks->clear();
  if (!read.SelectReadBlocks(rs, blocks)) return false;
  stats->bound_read_bytes += (nb - 1) * 2 * static_cast<int64_t>(kv.head_dim) * DTypeBytes(kv.dtype);
  return true;
}

}  // namespace

void SelectLayerReads(const PageTable& pt, int layer, const KVPolicy* read, const AttentionParams& p,
                      ReadSelection* out) {
  const PagedKV kv = pt.Layer(layer);
  const EncodedKV* enc = pt.Encoded(layer);
  const int32_t* fv = pt.FirstVisible(layer);
  const int64_t row2 = 2 * static_cast<int64_t>(kv.head_dim) * DTypeBytes(kv.dtype);  // one slot's K and V
  const bool selects = read != nullptr && enc == nullptr && fv == nullptr && p.rope_inv_freq == nullptr;
  out->subset = false;
  out->stats = ReadStats();
  out->picks.resize(static_cast<size_t>(kv.num_streams));
  auto decodes = [&p](int s) {
    const int seq = s / p.num_kv_heads;
    return p.qo_indptr[seq + 1] - p.qo_indptr[seq] == 1;
  };
  if (selects) {
    int64_t bound_bytes = 0;
    for (int s = 0; s < kv.num_streams; ++s) {
      std::vector<int32_t>& blocks = out->picks[static_cast<size_t>(s)];
      const int64_t nb = kv.indptr[s + 1] - kv.indptr[s];
      ReadStats one;
      if (!(decodes(s) && nb > 1 && PickBlocks(pt, layer, s, *read, p, nb, &blocks, &one))) blocks.clear();
      bound_bytes += one.bound_read_bytes;
    }
    out->stats.bound_read_bytes = bound_bytes;
  } else {
    for (auto& b : out->picks) b.clear();
  }
  out->indptr.assign(1, 0);
  out->indices.clear();
  out->last_block_len.clear();
  for (int s = 0; s < kv.num_streams; ++s) {
    const std::vector<int32_t>& blocks = out->picks[static_cast<size_t>(s)];
    const int32_t* all = kv.indices + kv.indptr[s];
    const int64_t nb = kv.indptr[s + 1] - kv.indptr[s];
    const int32_t last_len = kv.last_block_len[s];
    const bool picked = !blocks.empty();
    if (picked) {
      for (int32_t b : blocks) out->indices.push_back(all[b]);
      out->subset = true;
    } else {
      out->indices.insert(out->indices.end(), all, all + nb);
    }
    out->indptr.push_back(static_cast<int32_t>(out->indices.size()));
    out->last_block_len.push_back(last_len);
    if (!decodes(s)) continue;
    // Slots are numbered encoded-first; a window's first visible slot cuts the plain part.
    const int seq = s / p.num_kv_heads;
    const int64_t len = kv.StreamLength(s), enc_tokens = enc == nullptr ? 0 : enc->StreamTokens(s);
    const int64_t fv_slot = fv == nullptr ? 0 : fv[static_cast<int64_t>(p.qo_indptr[seq]) * p.num_kv_heads + s % p.num_kv_heads];
    const int64_t first = std::min(len, std::max<int64_t>(0, fv_slot - enc_tokens));
    const int64_t enc_bytes = enc == nullptr ? 0 : static_cast<int64_t>(enc->indptr[s + 1] - enc->indptr[s]) * enc->block_bytes;
    const int64_t read_slots = picked ? (static_cast<int64_t>(blocks.size()) - 1) * kv.block_size + last_len : len - first;
    out->stats.kv_dense_bytes += (len - first) * row2 + enc_bytes;
    out->stats.kv_read_bytes += read_slots * row2 + enc_bytes;
  }
}

}  // namespace kvlab

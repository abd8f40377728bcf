#include "core/cache/read_selection.h"

#include <algorithm>

namespace kvlab {
namespace {

// The pages of stream s that `read` picks (sealed groups first, then plain
// blocks), or false for all of them. nb: its plain blocks; groups: its sealed
// groups (enc non-null when groups > 0); lo / hi: scratch for the bounds.
bool PickBlocks(const PageTable& pt, int layer, int s, const KVPolicy& read, const AttentionParams& p, int64_t nb,
                const EncodedKV* enc, int64_t groups, std::vector<float>* lo, std::vector<float>* hi,
                std::vector<int32_t>* blocks, ReadStats* stats) {
  const PagedKV kv = pt.Layer(layer);
  StreamReadState rs;
  if (pt.KeyBounds(layer, s, &rs.key_min, &rs.key_max) < nb - 1) return false;  // bounds not complete: read all
  const int64_t d = kv.head_dim;
  if (groups > 0) {  // the groups' ranges from their metadata, then the plain blocks' bounds
    lo->resize(static_cast<size_t>((groups + nb - 1) * d));
    hi->resize(lo->size());
    if (enc->enc.kind == EncodingKind::kKivi) {
      for (int64_t g = 0; g < groups; ++g) KiviKeyRange(enc->enc, enc->Block(s, g), lo->data() + g * d, hi->data() + g * d);
    } else {  // int8 / fp8 / ThinK blocks: their decoded keys' bounds, kept since the seal
      const float *emin = nullptr, *emax = nullptr;
      if (pt.EncodedKeyBounds(layer, s, &emin, &emax) < groups) return false;  // not all bounded: read all
      std::copy(emin, emin + groups * d, lo->data());
      std::copy(emax, emax + groups * d, hi->data());
    }
    ConvertToF32(kv.dtype, rs.key_min, lo->data() + groups * d, (nb - 1) * d);  // exact: 16-bit values widen
    ConvertToF32(kv.dtype, rs.key_max, hi->data() + groups * d, (nb - 1) * d);
    rs.key_min = lo->data();
    rs.key_max = hi->data();
    rs.num_group_pages = groups;
    rs.group_tokens = enc->enc.tokens_per_block;
  }
  const int seq = s / p.num_kv_heads, group = p.num_qo_heads / p.num_kv_heads;
  rs.layer = layer;
  rs.kv_head = s % p.num_kv_heads;
  rs.num_layers = pt.num_layers();
  rs.block_size = kv.block_size;
  rs.head_dim = kv.head_dim;
  rs.num_blocks = groups + nb;
  rs.queries = p.q + (static_cast<int64_t>(p.qo_indptr[seq]) * p.num_qo_heads + rs.kv_head * group) * p.head_dim;
  rs.num_queries = group;
  rs.bound_dtype = groups > 0 ? DType::kF32 : kv.dtype;  // the cache keeps plain bounds in its own dtype
  blocks->clear();
  if (!read.SelectReadBlocks(rs, blocks)) return false;
  stats->bound_read_bytes += (nb - 1) * 2 * d * DTypeBytes(kv.dtype);  // the plain blocks' bounds as stored
  if (groups > 0) {
    stats->bound_read_bytes += groups * (enc->enc.kind == EncodingKind::kKivi ? KiviKeyRangeBytes(enc->enc)
                                                                               : 2 * d * static_cast<int64_t>(sizeof(float)));
  }
  return true;
}

}  // namespace

void SelectLayerReads(const PageTable& pt, int layer, const KVPolicy* read, const AttentionParams& p,
                      ReadSelection* out) {
  const PagedKV kv = pt.Layer(layer);
  const EncodedKV* enc = pt.Encoded(layer);
  const int32_t* fv = pt.FirstVisible(layer);
  const int64_t row2 = 2 * static_cast<int64_t>(kv.head_dim) * DTypeBytes(kv.dtype);  // one slot's K and V
  // Sealed blocks without bounds (kept only with the cache's key bounds) make PickBlocks read all.
  const bool selects = read != nullptr && fv == nullptr && p.rope_inv_freq == nullptr;
  out->subset = false;
  out->stats = ReadStats();
  out->picks.resize(static_cast<size_t>(kv.num_streams));
  auto decodes = [&p](int s) {
    const int seq = s / p.num_kv_heads;
    return p.qo_indptr[seq + 1] - p.qo_indptr[seq] == 1;
  };
  auto groups_of = [enc](int s) -> int64_t { return enc == nullptr ? 0 : enc->indptr[s + 1] - enc->indptr[s]; };
  if (selects) {
    int64_t bound_bytes = 0;
    for (int s = 0; s < kv.num_streams; ++s) {
      std::vector<int32_t>& blocks = out->picks[static_cast<size_t>(s)];
      const int64_t nb = kv.indptr[s + 1] - kv.indptr[s], groups = groups_of(s);
      ReadStats one;
      if (!(decodes(s) && nb > 0 && groups + nb > 1 &&
            PickBlocks(pt, layer, s, *read, p, nb, enc, groups, &out->bound_lo, &out->bound_hi, &blocks, &one))) {
        blocks.clear();
      }
      bound_bytes += one.bound_read_bytes;
    }
    out->stats.bound_read_bytes = bound_bytes;
  } else {
    for (auto& b : out->picks) b.clear();
  }
  out->indptr.assign(1, 0);
  out->indices.clear();
  out->last_block_len.clear();
  out->enc_indptr.assign(1, 0);
  out->enc_indices.clear();
  out->enc_dead.resize(enc == nullptr ? 0 : static_cast<size_t>(kv.num_streams));
  out->enc_dead_ptrs.assign(enc == nullptr || enc->dead == nullptr ? 0 : static_cast<size_t>(kv.num_streams), nullptr);
  for (int s = 0; s < kv.num_streams; ++s) {
    const std::vector<int32_t>& blocks = out->picks[static_cast<size_t>(s)];
    const int32_t* all = kv.indices + kv.indptr[s];
    const int64_t nb = kv.indptr[s + 1] - kv.indptr[s], groups = groups_of(s);
    const int32_t last_len = kv.last_block_len[s];
    const bool picked = !blocks.empty();
    int64_t groups_read = groups, plain_read = nb;
    if (picked) {
      groups_read = plain_read = 0;
      const uint8_t* dead = enc == nullptr ? nullptr : enc->DeadFlags(s);
      std::vector<uint8_t>* renumbered = dead == nullptr ? nullptr : &out->enc_dead[static_cast<size_t>(s)];
      if (renumbered != nullptr) renumbered->clear();
      for (int32_t b : blocks) {
        if (b < groups) {
          out->enc_indices.push_back(enc->indices[enc->indptr[s] + b]);
          if (renumbered != nullptr) {
            const int64_t tpb = enc->enc.tokens_per_block;
            renumbered->insert(renumbered->end(), dead + b * tpb, dead + (b + 1) * tpb);
          }
          ++groups_read;
        } else {
          out->indices.push_back(all[b - groups]);
          ++plain_read;
        }
      }
      if (renumbered != nullptr) out->enc_dead_ptrs[static_cast<size_t>(s)] = renumbered->data();
      out->subset = true;
    } else {
      out->indices.insert(out->indices.end(), all, all + nb);
      if (enc != nullptr) {
        out->enc_indices.insert(out->enc_indices.end(), enc->indices + enc->indptr[s], enc->indices + enc->indptr[s + 1]);
        if (!out->enc_dead_ptrs.empty()) out->enc_dead_ptrs[static_cast<size_t>(s)] = enc->DeadFlags(s);
      }
    }
    out->indptr.push_back(static_cast<int32_t>(out->indices.size()));
    out->enc_indptr.push_back(static_cast<int32_t>(out->enc_indices.size()));
    out->last_block_len.push_back(last_len);
    if (!decodes(s)) continue;
    // Slots are numbered encoded-first; a window's first visible slot cuts the plain part.
    const int seq = s / p.num_kv_heads;
    const int64_t len = kv.StreamLength(s), enc_tokens = enc == nullptr ? 0 : enc->StreamTokens(s);
    const int64_t fv_slot = fv == nullptr ? 0 : fv[static_cast<int64_t>(p.qo_indptr[seq]) * p.num_kv_heads + s % p.num_kv_heads];
    const int64_t first = std::min(len, std::max<int64_t>(0, fv_slot - enc_tokens));
    const int64_t enc_block_bytes = enc == nullptr ? 0 : enc->block_bytes;
    const int64_t read_slots = picked ? (plain_read - 1) * kv.block_size + last_len : len - first;
    out->stats.kv_dense_bytes += (len - first) * row2 + groups * enc_block_bytes;
    out->stats.kv_read_bytes += read_slots * row2 + groups_read * enc_block_bytes;
  }
}

}  // namespace kvlab

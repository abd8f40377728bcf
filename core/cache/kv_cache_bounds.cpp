// Block key bounds for a read policy (KVPolicy::NeedsBlockKeyBounds, Quest):
// the channel-wise min and max of each plain block's keys, folded in as the
// block fills, so a decode step can rank pages without reading them. Kept
// only after KVCache::EnableKeyBounds; a compaction marks the bounds of the
// blocks it changed stale (Stream::bounded_tokens) and the next update
// recomputes them; a seal or a dropped leading block takes its rows with it.
// Sealed blocks of an encoding whose metadata gives no key range (int8 / fp8
// per token, ThinK) keep the bounds of their decoded keys, computed once from
// the block as stored; a compaction or a window drop moves their rows with
// the blocks (kv_cache_compact.cpp, kv_cache_window.cpp).
#include <algorithm>

#include "core/cache/kv_cache.h"

namespace kvlab {

int64_t PageTable::KeyBounds(int layer, int s, const void** key_min, const void** key_max) const {
  if (bound_streams_.empty()) return 0;
  const Stream* st = bound_streams_[static_cast<size_t>(layer) * num_seqs_ * num_kv_heads_ + static_cast<size_t>(s)];
  *key_min = st->key_min.data();
  *key_max = st->key_max.data();
  return st->bounded_tokens / base_.block_size;  // the last, partly filled block is never complete here
}

int64_t PageTable::EncodedKeyBounds(int layer, int s, const float** key_min, const float** key_max) const {
  if (bound_streams_.empty()) return 0;
  const Stream* st = bound_streams_[static_cast<size_t>(layer) * num_seqs_ * num_kv_heads_ + static_cast<size_t>(s)];
  *key_min = st->enc_key_min.data();
  *key_max = st->enc_key_max.data();
  return static_cast<int64_t>(st->enc_key_min.size()) / base_.head_dim;
}

void KVCache::BoundEncodedBlocks(Stream* s) const {
  // KIVI's groups carry their key range (KiviKeyRange); without storage there are no keys to bound.
  if (!key_bounds_ || !shape_.encoded || shape_.enc.kind == EncodingKind::kKivi || enc_pool_->data() == nullptr) return;
  const int d = shape_.head_dim, tpb = shape_.enc.tokens_per_block;
  std::vector<float> k(static_cast<size_t>(tpb) * d), v(k.size());
  std::vector<uint8_t> scratch;
  for (size_t g = s->enc_key_min.size() / static_cast<size_t>(d); g < s->enc_blocks.size(); ++g) {
    DecodeKvBlock(shape_.enc, BlockData(s->enc_blocks[g], true, &scratch), k.data(), v.data());
    s->enc_key_min.insert(s->enc_key_min.end(), k.begin(), k.begin() + d);
    s->enc_key_max.insert(s->enc_key_max.end(), k.begin(), k.begin() + d);
    float* lo = s->enc_key_min.data() + g * static_cast<size_t>(d);
    float* hi = s->enc_key_max.data() + g * static_cast<size_t>(d);
    for (int t = 1; t < tpb; ++t) {
      const float* row = k.data() + static_cast<size_t>(t) * d;
      for (int c = 0; c < d; ++c) {
        lo[c] = std::min(lo[c], row[c]);
        hi[c] = std::max(hi[c], row[c]);
      }
    }
  }
}

// Folds each new key into its block's bounds in fp32 and stores them back in
// the cache's dtype: a block's bounds are read (once per call, if the block
// was started before), updated by its new keys, and written when its last new
// key is in. Every value stored is one of the block's keys, so the round trip
// through fp32 is exact.
void KVCache::UpdateKeyBounds(const std::vector<SeqId>& seqs) {
  if (!key_bounds_) return;
  const int bs = shape_.block_size, d = shape_.head_dim;
  const int64_t row = static_cast<int64_t>(d) * DTypeBytes(shape_.dtype);
  std::vector<float> k(static_cast<size_t>(d)), lo(k.size()), hi(k.size());
  std::vector<uint8_t> scratch;
  for (SeqId id : seqs) {
    for (Stream& s : seqs_.at(id)) {
      BoundEncodedBlocks(&s);  // sealed blocks a prefix brought (a seal bounds its own)
      const int64_t n = s.num_plain();
      s.bounded_tokens = std::min(s.bounded_tokens, n) / bs * bs;  // restart at a block's first slot
      const size_t bytes = static_cast<size_t>((n + bs - 1) / bs) * static_cast<size_t>(row);
      s.key_min.resize(bytes);
      s.key_max.resize(bytes);
      for (int64_t t = s.bounded_tokens; t < n; ++t) {
        const int64_t b = t / bs;
        const uint8_t* data = BlockData(s.blocks[static_cast<size_t>(b)], false, &scratch);
        ConvertToF32(shape_.dtype, data + (t % bs) * row, k.data(), d);
        uint8_t* lo_row = s.key_min.data() + b * row;
        uint8_t* hi_row = s.key_max.data() + b * row;
        if (t % bs == 0) {
          lo = k;
          hi = k;
        } else {
          if (t == s.bounded_tokens) {  // a block begun before this call: its bounds so far
            ConvertToF32(shape_.dtype, lo_row, lo.data(), d);
            ConvertToF32(shape_.dtype, hi_row, hi.data(), d);
          }
          for (int c = 0; c < d; ++c) {
            lo[static_cast<size_t>(c)] = std::min(lo[static_cast<size_t>(c)], k[static_cast<size_t>(c)]);
            hi[static_cast<size_t>(c)] = std::max(hi[static_cast<size_t>(c)], k[static_cast<size_t>(c)]);
          }
        }
        if (t + 1 == n || (t + 1) % bs == 0) {
          ConvertFromF32(shape_.dtype, lo.data(), lo_row, d);
          ConvertFromF32(shape_.dtype, hi.data(), hi_row, d);
        }
      }
      s.bounded_tokens = n;
    }
  }
}

void KVCache::DropLeadingKeyBounds(Stream* s, size_t plain_blocks) const {
  if (s->key_min.empty() || plain_blocks == 0) return;
  const size_t row_bytes = static_cast<size_t>(shape_.head_dim) * static_cast<size_t>(DTypeBytes(shape_.dtype));
  const auto rows = static_cast<std::ptrdiff_t>(std::min(plain_blocks * row_bytes, s->key_min.size()));  // bytes
  s->key_min.erase(s->key_min.begin(), s->key_min.begin() + rows);
  s->key_max.erase(s->key_max.begin(), s->key_max.begin() + rows);
  s->bounded_tokens = std::max<int64_t>(0, s->bounded_tokens - static_cast<int64_t>(plain_blocks) * shape_.block_size);
}

void KVCache::AttachKeyBounds(const std::vector<SeqId>& seqs, PageTable* pt) const {
  pt->bound_streams_.clear();
  if (!key_bounds_) return;
  const int L = shape_.num_layers, H = shape_.num_kv_heads;
  pt->bound_streams_.reserve(static_cast<size_t>(L) * seqs.size() * H);
  for (int l = 0; l < L; ++l) {
    for (SeqId id : seqs) {
      const std::vector<Stream>& st = seqs_.at(id);
      for (int h = 0; h < H; ++h) pt->bound_streams_.push_back(&st[static_cast<size_t>(l * H + h)]);
    }
  }
}

}  // namespace kvlab

// Block key bounds for a read policy (KVPolicy::NeedsBlockKeyBounds, Quest):
// the channel-wise min and max of each plain block's keys, folded in as the
// block fills, so a decode step can rank pages without reading them. Kept
// only after KVCache::EnableKeyBounds; a compaction marks the bounds of the
// blocks it changed stale (Stream::bounded_tokens) and the next update
// recomputes them; a seal or a dropped leading block takes its rows with it.
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

// Block key bounds for a read policy (KVPolicy::NeedsBlockKeyBounds, Quest):
// the channel-wise min and max of each plain block's keys, folded in as the
// block fills, so a decode step can rank pages without reading them. Kept
// only after KVCache::EnableKeyBounds; a compaction marks the bounds of the
// blocks it changed stale (Stream::bounded_tokens) and the next update
// recomputes them; a seal or a dropped leading block takes its rows with it.
#include <algorithm>

#include "core/cache/kv_cache.h"

namespace kvlab {

int64_t PageTable::KeyBounds(int layer, int s, const float** key_min, const float** key_max) const {
  if (bound_streams_.empty()) return 0;
  const Stream* st = bound_streams_[static_cast<size_t>(layer) * num_seqs_ * num_kv_heads_ + static_cast<size_t>(s)];
  *key_min = st->key_min.data();
  *key_max = st->key_max.data();
  return st->bounded_tokens / base_.block_size;  // the last, partly filled block is never complete here
}

void KVCache::UpdateKeyBounds(const std::vector<SeqId>& seqs) {
  if (!key_bounds_) return;
  const int bs = shape_.block_size, d = shape_.head_dim;
  const int64_t row = static_cast<int64_t>(d) * DTypeBytes(shape_.dtype);
  std::vector<float> k(static_cast<size_t>(d));
  std::vector<uint8_t> scratch;
  for (SeqId id : seqs) {
    for (Stream& s : seqs_.at(id)) {
      const int64_t n = s.num_plain();
      s.bounded_tokens = std::min(s.bounded_tokens, n) / bs * bs;  // restart at a block's first slot
      const size_t rows = static_cast<size_t>((n + bs - 1) / bs) * static_cast<size_t>(d);
      s.key_min.resize(rows);
      s.key_max.resize(rows);
      for (int64_t t = s.bounded_tokens; t < n; ++t) {
        const uint8_t* b = BlockData(s.blocks[static_cast<size_t>(t / bs)], false, &scratch);
        ConvertToF32(shape_.dtype, b + (t % bs) * row, k.data(), d);
        float* lo = s.key_min.data() + (t / bs) * d;
        float* hi = s.key_max.data() + (t / bs) * d;
        if (t % bs == 0) {
          std::copy(k.begin(), k.end(), lo);
          std::copy(k.begin(), k.end(), hi);
          continue;
        }
        for (int c = 0; c < d; ++c) {
          lo[c] = std::min(lo[c], k[static_cast<size_t>(c)]);
          hi[c] = std::max(hi[c], k[static_cast<size_t>(c)]);
        }
      }
      s.bounded_tokens = n;
    }
  }
}

void KVCache::DropLeadingKeyBounds(Stream* s, size_t plain_blocks) const {
  if (s->key_min.empty() || plain_blocks == 0) return;
  const auto rows = static_cast<std::ptrdiff_t>(std::min(plain_blocks * static_cast<size_t>(shape_.head_dim), s->key_min.size()));
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

// KVCache's sliding-window part (CacheShape::layer_window): the per-query
// first visible slot the kernels get, and the leading-block drop that Compact
// takes when a window layer's oldest blocks can no longer be seen. The engine
// decides which slots die (Engine::Impl::ApplySelection); this file keeps the books.
#include <algorithm>
#include <cstring>

#include "core/cache/kv_cache.h"

namespace kvlab {

const int32_t* PageTable::FirstVisible(int layer) const {
  if (static_cast<size_t>(layer) >= first_visible_.size()) return nullptr;
  const std::vector<int32_t>& f = first_visible_[static_cast<size_t>(layer)];
  return f.empty() ? nullptr : f.data();
}

int64_t KVCache::FirstInWindow(const Stream& s, int64_t q_pos, int64_t window) {
  // Visible: position > q_pos - window. Positions fit int32; the bound may not.
  const int64_t bound = q_pos - window;
  const auto it = std::upper_bound(s.positions.begin(), s.positions.begin() + s.num_tokens, bound,
                                   [](int64_t b, int32_t p) { return b < static_cast<int64_t>(p); });
  return it - s.positions.begin();
}

void KVCache::BuildWindows(const std::vector<SeqId>& seqs, const std::vector<int32_t>& qo_indptr,
                           PageTable* pt) const {
  const int L = shape_.num_layers, H = shape_.num_kv_heads;
  pt->first_visible_.assign(static_cast<size_t>(L), {});
  if (!shape_.HasWindows()) return;
  const int32_t total_q = qo_indptr.back();
  for (int l = 0; l < L; ++l) {
    const int64_t window = shape_.Window(l);
    if (window <= 0) continue;
    std::vector<int32_t>& out = pt->first_visible_[static_cast<size_t>(l)];
    out.assign(static_cast<size_t>(total_q) * H, 0);
    for (size_t b = 0; b < seqs.size(); ++b) {
      const int32_t q0 = qo_indptr[b], q_len = qo_indptr[b + 1] - q0;
      for (int h = 0; h < H; ++h) {
        const Stream& s = stream(seqs[b], l, h);
        for (int32_t j = 0; j < q_len; ++j) {
          const int64_t q_slot = s.num_tokens - q_len + j;
          out[static_cast<size_t>(q0 + j) * H + h] =
              static_cast<int32_t>(FirstInWindow(s, s.positions[static_cast<size_t>(q_slot)], window));
        }
      }
    }
  }
}

int64_t KVCache::UnitFloor(const Stream& s, int64_t slot) const {
  if (slot >= s.num_tokens) return s.num_tokens;
  if (slot < s.num_encoded) {
    const int64_t tpb = shape_.enc.tokens_per_block;
    return slot / tpb * tpb;
  }
  const int64_t bs = shape_.block_size;
  return s.num_encoded + (slot - s.num_encoded) / bs * bs;
}

bool KVCache::DropsLeadingUnits(const Stream& s, const std::vector<int64_t>& keep) const {
  if (prefix_) return false;
  const int64_t k = keep.empty() ? s.num_tokens : keep.front();
  if (k == 0 || static_cast<int64_t>(keep.size()) != s.num_tokens - k) return false;
  if (!keep.empty() && keep.back() != s.num_tokens - 1) return false;  // strictly increasing: then contiguous
  return UnitFloor(s, k) == k;
}

StreamState KVCache::SelectionState(SeqId id, int layer, int head, int64_t next_pos, const SeqStep* step,
                                    int64_t* alive, bool key_values) const {
  const Stream& st = stream(id, layer, head);
  const int64_t window = shape_.Window(layer);
  *alive = window > 0 ? FirstInWindow(st, next_pos, window) : 0;
  StreamState ss = StateOf(st, layer, head, next_pos, shape_.block_size);
  ss.num_layers = shape_.num_layers;
  if (step != nullptr) {
    ss.step_tokens = step->tokens;
    ss.chunk_end = step->chunk_end;
  }
  SlotReader* reader = nullptr;
  if (key_values && pool_->data() != nullptr) {  // host storage: the policy reads the slots' K/V
    if (kv_readers_.size() < static_cast<size_t>(shape_.num_kv_heads)) kv_readers_.resize(static_cast<size_t>(shape_.num_kv_heads));
    reader = &kv_readers_[static_cast<size_t>(head)];
    reader->cache = this;
    reader->id = id;
    reader->layer = layer;
    reader->head = head;
    reader->first = *alive;
    reader->slots = nullptr;
    ss.kv = reader;
  }
  if (!st.HasDead()) {
    ss.num_tokens -= *alive;
    ss.positions += *alive;
    ss.score += *alive;
    if (reader != nullptr) reader->num_tokens = ss.num_tokens;
    return ss;
  }
  // Evicted slots of sealed groups are not the policy's to see: it gets the
  // live ones, and FinishKeep maps its choice back to their slots.
  if (live_views_.size() < static_cast<size_t>(shape_.num_kv_heads)) live_views_.resize(static_cast<size_t>(shape_.num_kv_heads));
  LiveView& v = live_views_[static_cast<size_t>(head)];
  v.slots.clear();
  v.positions.clear();
  v.score.clear();
  for (int64_t t = *alive; t < st.num_tokens; ++t) {
    if (st.Dead(t)) continue;
    v.slots.push_back(t);
    v.positions.push_back(st.positions[static_cast<size_t>(t)]);
    v.score.push_back(st.score[static_cast<size_t>(t)]);
  }
  ss.num_tokens = static_cast<int64_t>(v.slots.size());
  ss.positions = v.positions.data();
  ss.score = v.score.data();
  if (reader != nullptr) {
    reader->slots = &v.slots;
    reader->num_tokens = ss.num_tokens;
  }
  return ss;
}

void KVCache::SlotReader::Read(float* keys, float* values) const {
  const Stream& st = cache->stream(id, layer, head);
  const CacheShape& shape = cache->shape_;
  const size_t d = static_cast<size_t>(shape.head_dim);
  std::vector<uint8_t> scratch;
  // An encoded block decodes once for all of its slots that are read.
  const int tpb = shape.encoded ? shape.enc.tokens_per_block : 1;
  std::vector<float> dk, dv;
  int64_t decoded = -1;
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t slot = slots != nullptr ? (*slots)[static_cast<size_t>(i)] : first + i;
    float* k = keys + static_cast<size_t>(i) * d;
    float* v = values + static_cast<size_t>(i) * d;
    if (slot >= st.num_encoded) {
      cache->ReadPlainSlot(st, slot - st.num_encoded, k, v, &scratch);
      continue;
    }
    const int64_t block = slot / tpb;
    if (block != decoded) {
      dk.resize(static_cast<size_t>(tpb) * d);
      dv.resize(dk.size());
      DecodeKvBlock(shape.enc, cache->BlockData(st.enc_blocks[static_cast<size_t>(block)], true, &scratch), dk.data(),
                    dv.data());
      decoded = block;
    }
    std::memcpy(k, &dk[static_cast<size_t>(slot % tpb) * d], sizeof(float) * d);
    std::memcpy(v, &dv[static_cast<size_t>(slot % tpb) * d], sizeof(float) * d);
  }
}

bool KVCache::FinishKeep(SeqId id, int layer, int head, int64_t alive, bool has_sel, bool chose,
                         std::vector<int64_t>* keep) const {
  const Stream& st = stream(id, layer, head);
  if (chose) {
    if (st.HasDead()) {  // the policy chose among SelectionState's live view
      const std::vector<int64_t>& slots = live_views_[static_cast<size_t>(head)].slots;
      for (int64_t& k : *keep) k = slots[static_cast<size_t>(k)];
    } else {
      for (int64_t& k : *keep) k += alive;
    }
    return true;
  }
  keep->clear();
  // With a selection policy, the stream is compacted whenever it evicts, so
  // out-of-window slots go exactly (the kept ones move, as after any
  // eviction); without one, only whole blocks go and nothing moves.
  // (Evicted slots of sealed groups among them stay evicted: Compact.)
  const int64_t from = has_sel ? alive : UnitFloor(st, alive);
  if (from == 0) return false;
  for (int64_t t = from; t < st.num_tokens; ++t) keep->push_back(t);
  return true;
}

bool KVCache::SlotsToKeep(SeqId id, int layer, int head, int64_t next_pos, const KVPolicy* sel,
                          std::vector<int64_t>* keep, const SeqStep* step) const {
  int64_t alive = 0;
  const StreamState ss = SelectionState(id, layer, head, next_pos, step, &alive, sel != nullptr && sel->NeedsKeyValues());
  keep->clear();
  const bool chose = sel != nullptr && sel->SelectSlots(ss, keep);
  return FinishKeep(id, layer, head, alive, sel != nullptr, chose, keep);
}

void KVCache::DropLeadingUnits(SeqId id, size_t stream_index, Stream* s, int64_t k) {
  size_t enc_drop = 0, plain_drop = 0;
  if (k <= s->num_encoded) {
    enc_drop = static_cast<size_t>(k / shape_.enc.tokens_per_block);
  } else {
    enc_drop = s->enc_blocks.size();
    const int64_t bs = shape_.block_size;
    plain_drop = std::min(s->blocks.size(), static_cast<size_t>((k - s->num_encoded + bs - 1) / bs));
  }
  for (size_t i = 0; i < enc_drop; ++i) DropStreamRef(id, stream_index, /*encoded=*/true, i, s->enc_blocks[i]);
  for (size_t i = 0; i < plain_drop; ++i) DropStreamRef(id, stream_index, /*encoded=*/false, i, s->blocks[i]);
  s->enc_blocks.erase(s->enc_blocks.begin(), s->enc_blocks.begin() + static_cast<std::ptrdiff_t>(enc_drop));
  if (!s->enc_key_min.empty()) {  // the dropped blocks' decoded-key bounds go with them
    const auto rows = static_cast<std::ptrdiff_t>(std::min(s->enc_key_min.size(), enc_drop * static_cast<size_t>(shape_.head_dim)));
    s->enc_key_min.erase(s->enc_key_min.begin(), s->enc_key_min.begin() + rows);
    s->enc_key_max.erase(s->enc_key_max.begin(), s->enc_key_max.begin() + rows);
  }
  s->blocks.erase(s->blocks.begin(), s->blocks.begin() + static_cast<std::ptrdiff_t>(plain_drop));
  if (s->HasDead()) {
    s->dead.erase(s->dead.begin(), s->dead.begin() + std::min<int64_t>(k, static_cast<int64_t>(s->dead.size())));
    if (std::find(s->dead.begin(), s->dead.end(), 1) == s->dead.end()) s->dead.clear();
  }
  s->num_encoded = std::max<int64_t>(0, s->num_encoded - k);
  s->positions.erase(s->positions.begin(), s->positions.begin() + k);
  s->score.erase(s->score.begin(), s->score.begin() + k);
  s->num_tokens -= k;
  DropLeadingKeyBounds(s, plain_drop);  // whole plain blocks went: their bounds rows go with them
  UpdatePeak();
}

}  // namespace kvlab

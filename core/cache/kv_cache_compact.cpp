// KVCache::Compact: keeps the chosen slots of one stream. Sealed groups stay
// whole or go whole (never decoded and encoded again: their evicted slots
// are marked dead), kept plain slots move down (copy-on-write for shared
// blocks); its own file so that kv_cache.cpp stays readable.
#include <algorithm>
#include <cstring>
#include <string>

#include "core/cache/kv_cache.h"

namespace kvlab {

Status KVCache::Compact(SeqId id, int layer, int head, const std::vector<int64_t>& keep) {
  if (store_) KVLAB_RETURN_IF_ERROR(PromoteStream(id, layer, head));
  Stream& s = mutable_stream(id, layer, head);
  const size_t si = static_cast<size_t>(layer * shape_.num_kv_heads + head);
  int64_t prev = -1;
  for (int64_t k : keep) {
    if (k <= prev || k >= s.num_tokens) {
      return Status::InvalidArgument("Compact: keep list must be strictly increasing slot indices below " +
                                     std::to_string(s.num_tokens));
    }
    prev = k;
  }
  if (DropsLeadingUnits(s, keep)) {
    DropLeadingUnits(id, si, &s, keep.empty() ? s.num_tokens : keep.front());
    ReleaseRun(&s);  // a compacted stream holds only what it keeps
    return Status::OK();
  }
  const int bs = shape_.block_size;
  const int d = shape_.head_dim;
  const int64_t row_bytes = static_cast<int64_t>(d) * DTypeBytes(shape_.dtype);
  const bool has_data = pool_->data() != nullptr;
  const int64_t ne = s.num_encoded;
  const size_t n_enc_kept = static_cast<size_t>(std::lower_bound(keep.begin(), keep.end(), ne) - keep.begin());

  // Sealed groups are never re-encoded: each stays whole (its unkept slots
  // marked dead) while it keeps a live slot, and goes as a whole otherwise.
  const int64_t tpb = shape_.encoded ? shape_.enc.tokens_per_block : 1;
  const size_t n_groups = s.enc_blocks.size();
  std::vector<uint8_t> dead(static_cast<size_t>(ne), 1);
  for (size_t i = 0; i < n_enc_kept; ++i) {
    if (!s.Dead(keep[i])) dead[static_cast<size_t>(keep[i])] = 0;
  }
  std::vector<char> stays(n_groups, 0);
  size_t last_stays = 0;  // one past the last group that stays
  for (size_t g = 0; g < n_groups; ++g) {
    const auto first = dead.begin() + static_cast<std::ptrdiff_t>(g * tpb);
    stays[g] = std::find(first, first + tpb, uint8_t{0}) != first + tpb;
    if (stays[g]) last_stays = g + 1;
  }
  if (prefix_) std::fill(stays.begin(), stays.begin() + static_cast<std::ptrdiff_t>(last_stays), 1);

  // Kept plain slots move down to plain slot j (from src[j] >= j).
  const size_t n_plain = keep.size() - n_enc_kept;
  size_t first_moved = n_plain;
  for (size_t j = 0; j < n_plain && first_moved == n_plain; ++j) {
    if (keep[n_enc_kept + j] - ne != static_cast<int64_t>(j)) first_moved = j;
  }
  // Check first, then act: copies of the shared plain blocks it writes.
  std::vector<size_t> copies;
  if (first_moved < n_plain) {
    for (size_t j = first_moved / static_cast<size_t>(bs); j <= (n_plain - 1) / static_cast<size_t>(bs); ++j) {
      if (pool_->RefCount(s.blocks[j]) > 1) copies.push_back(j);
    }
  }
  const int64_t need = static_cast<int64_t>(copies.size());
  if (!copies.empty() && pool_->on_device()) {
    return Status::InvalidArgument("Compact: sequence " + std::to_string(id) +
                                   ": copying a shared block on a device pool is not implemented");
  }
  if (need > 0 && !MakeFree(/*encoded=*/false, need)) {
    return Status::ResourceExhausted("Compact: sequence " + std::to_string(id) + " needs " + std::to_string(need) +
                                     " free blocks (copies of shared blocks), the pool has " +
                                     std::to_string(pool_->num_free()));
  }
  if (prefix_ && static_cast<int64_t>(keep.size()) < s.num_tokens) {
    SeqUnits& su = seq_units_[id];
    su.evict_horizon = std::min<int64_t>(su.evict_horizon, s.positions.back() + 1);
  }
  // Copy on write: the stream gets its own copy of each shared block it writes.
  for (size_t j : copies) {
    const int32_t shared = s.blocks[j];
    const int32_t own = pool_->Allocate();
    if (has_data) std::memcpy(pool_->BlockData(own), pool_->BlockData(shared), static_cast<size_t>(pool_->block_bytes()));
    s.blocks[j] = own;
    DropStreamRef(id, si, /*encoded=*/false, j, shared);
    ++num_copied_blocks_;
  }

  // The new slot order, in place front to back (every slot stays or moves
  // down): the staying groups' slots (dead ones too), then the kept plain slots.
  for (size_t g = n_groups; g-- > 0;) {  // from the end: the prefix cache's books index units by place
    if (!stays[g]) DropStreamRef(id, si, /*encoded=*/true, g, s.enc_blocks[g]);
  }
  size_t n_stay = 0;
  bool any_dead = false;
  for (size_t g = 0; g < n_groups; ++g) {
    if (!stays[g]) continue;
    const size_t from = g * static_cast<size_t>(tpb), to = n_stay * static_cast<size_t>(tpb);
    if (g < s.enc_key_min.size() / static_cast<size_t>(d)) {  // decoded-key bounds move with their block
      std::copy_n(s.enc_key_min.begin() + g * d, d, s.enc_key_min.begin() + n_stay * d);
      std::copy_n(s.enc_key_max.begin() + g * d, d, s.enc_key_max.begin() + n_stay * d);
    }
    s.enc_blocks[n_stay++] = s.enc_blocks[g];
    std::copy(s.positions.begin() + from, s.positions.begin() + from + tpb, s.positions.begin() + to);
    std::copy(s.score.begin() + from, s.score.begin() + from + tpb, s.score.begin() + to);
    std::copy(dead.begin() + from, dead.begin() + from + tpb, dead.begin() + to);
    any_dead = any_dead || std::find(dead.begin() + to, dead.begin() + to + tpb, uint8_t{1}) != dead.begin() + to + tpb;
  }
  s.enc_blocks.resize(n_stay);
  if (!s.enc_key_min.empty()) {
    const size_t rows = std::min(s.enc_key_min.size() / static_cast<size_t>(d), n_stay) * static_cast<size_t>(d);
    s.enc_key_min.resize(rows);
    s.enc_key_max.resize(rows);
  }
  const int64_t new_ne = static_cast<int64_t>(n_stay) * tpb;
  for (size_t j = 0; j < n_plain; ++j) {
    const int64_t slot = keep[n_enc_kept + j];
    const int64_t src = slot - ne, dst = static_cast<int64_t>(j);
    if (j >= first_moved && has_data) {
      uint8_t* sb = pool_->BlockData(s.blocks[static_cast<size_t>(src / bs)]);
      uint8_t* db = pool_->BlockData(s.blocks[static_cast<size_t>(dst / bs)]);
      std::memmove(db + (dst % bs) * row_bytes, sb + (src % bs) * row_bytes, static_cast<size_t>(row_bytes));
      std::memmove(db + (bs + dst % bs) * row_bytes, sb + (bs + src % bs) * row_bytes, static_cast<size_t>(row_bytes));
    }
    s.positions[static_cast<size_t>(new_ne + dst)] = s.positions[static_cast<size_t>(slot)];
    s.score[static_cast<size_t>(new_ne + dst)] = s.score[static_cast<size_t>(slot)];
  }
  // Key bounds hold from the first block a move or a drop changed.
  const int64_t unchanged = std::min<int64_t>(s.bounded_tokens, static_cast<int64_t>(std::min(first_moved, n_plain)));
  s.bounded_tokens = unchanged / bs * bs;
  s.num_encoded = new_ne;
  s.num_tokens = new_ne + static_cast<int64_t>(n_plain);
  s.positions.resize(static_cast<size_t>(s.num_tokens));
  s.score.resize(static_cast<size_t>(s.num_tokens));
  if (any_dead) {
    dead.resize(static_cast<size_t>(new_ne));
    s.dead = std::move(dead);
  } else {
    s.dead.clear();
  }
  const size_t blocks_needed = static_cast<size_t>((s.num_plain() + bs - 1) / bs);
  while (s.blocks.size() > blocks_needed) {
    DropStreamRef(id, si, /*encoded=*/false, s.blocks.size() - 1, s.blocks.back());
    s.blocks.pop_back();
  }
  ReleaseRun(&s);
  UpdatePeak();
  return Status::OK();
}

}  // namespace kvlab

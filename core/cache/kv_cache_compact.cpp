// KVCache::Compact: keeps the chosen slots of one stream. A single pass over
// shared (copy-on-write), plain and encoded units, whose cases share the
// cursor state; its own file so that kv_cache.cpp stays readable.
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
    return Status::OK();
  }
  const int bs = shape_.block_size;
  const int d = shape_.head_dim;
  const int64_t row_bytes = static_cast<int64_t>(d) * DTypeBytes(shape_.dtype);
  const bool has_data = pool_->data() != nullptr;
  // Leading kept slots that are already in place need no work.
  size_t first_moved = 0;
  while (first_moved < keep.size() && keep[first_moved] == static_cast<int64_t>(first_moved)) ++first_moved;
  const bool decodes = s.num_encoded > 0 && static_cast<int64_t>(first_moved) < s.num_encoded;
  const int64_t kept_before = s.num_tokens;

  // Check first, then act: the plain blocks this compaction takes (copies
  // of shared blocks it writes, or blocks for decoded tokens) must be there.
  std::vector<size_t> copies;  // plain list entries to copy before writing
  int64_t need = 0;
  if (decodes) {
    const int64_t base = static_cast<int64_t>(first_moved) / shape_.enc.tokens_per_block * shape_.enc.tokens_per_block;
    const int64_t n_plain = static_cast<int64_t>(keep.end() - std::lower_bound(keep.begin(), keep.end(), base));
    for (size_t j = 0; j < s.blocks.size() && static_cast<int64_t>(j) * bs < n_plain; ++j) {
      if (pool_->RefCount(s.blocks[j]) > 1) copies.push_back(j);
    }
    need = std::max<int64_t>(0, (n_plain + bs - 1) / bs - static_cast<int64_t>(s.blocks.size()));
  } else if (first_moved < keep.size()) {
    const size_t b0 = static_cast<size_t>((static_cast<int64_t>(first_moved) - s.num_encoded) / bs);
    const size_t b1 = static_cast<size_t>((static_cast<int64_t>(keep.size()) - 1 - s.num_encoded) / bs);
    for (size_t j = b0; j <= b1; ++j) {
      if (pool_->RefCount(s.blocks[j]) > 1) copies.push_back(j);
    }
  }
  need += static_cast<int64_t>(copies.size());
  if (!copies.empty() && pool_->on_device()) {
    return Status::InvalidArgument("Compact: sequence " + std::to_string(id) +
                                   ": copying a shared block on a device pool is not implemented");
  }
  if (need > 0 && !MakeFree(/*encoded=*/false, need)) {
    return Status::ResourceExhausted("Compact: sequence " + std::to_string(id) + " needs " + std::to_string(need) +
                                     " free blocks (copies of shared blocks, room for decoded tokens), the pool has " +
                                     std::to_string(pool_->num_free()));
  }
  if (prefix_ && static_cast<int64_t>(keep.size()) < kept_before) {
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

  if (decodes) {
    // Encoded blocks from the one holding the first moved slot onward are
    // decoded; their kept tokens and the kept plain tokens are rewritten as
    // plain slots, then re-sealed.
    const int tpb = shape_.enc.tokens_per_block;
    const size_t first_block = first_moved / static_cast<size_t>(tpb);
    const int64_t base = static_cast<int64_t>(first_block) * tpb;  // first rewritten slot
    std::vector<float> dk(static_cast<size_t>(s.num_encoded - base) * d), dv(dk.size());
    if (has_data) {
      for (size_t b = first_block; b < s.enc_blocks.size(); ++b) {
        const size_t off = (b - first_block) * static_cast<size_t>(tpb) * d;
        DecodeKvBlock(shape_.enc, enc_pool_->BlockData(s.enc_blocks[b]), &dk[off], &dv[off]);
      }
    }
    std::vector<float> kept_k, kept_v;
    std::vector<int32_t> kept_pos;
    std::vector<float> kept_score;
    std::vector<float> pk(static_cast<size_t>(d)), pv(static_cast<size_t>(d));
    for (int64_t slot : keep) {
      if (slot < base) continue;
      if (has_data) {
        if (slot < s.num_encoded) {
          const size_t off = static_cast<size_t>(slot - base) * d;
          kept_k.insert(kept_k.end(), dk.begin() + off, dk.begin() + off + d);
          kept_v.insert(kept_v.end(), dv.begin() + off, dv.begin() + off + d);
        } else {
          std::vector<uint8_t> scratch;
          ReadPlainSlot(s, slot - s.num_encoded, pk.data(), pv.data(), &scratch);
          kept_k.insert(kept_k.end(), pk.begin(), pk.end());
          kept_v.insert(kept_v.end(), pv.begin(), pv.end());
        }
      }
      kept_pos.push_back(s.positions[static_cast<size_t>(slot)]);
      kept_score.push_back(s.score[static_cast<size_t>(slot)]);
    }
    // Shared encoded blocks are only dropped (the re-sealed ones are new).
    for (size_t b = s.enc_blocks.size(); b-- > first_block;) DropStreamRef(id, si, /*encoded=*/true, b, s.enc_blocks[b]);
    s.enc_blocks.resize(first_block);
    s.num_encoded = base;
    const int64_t n_plain = static_cast<int64_t>(kept_pos.size());
    // Reuse the stream's plain blocks, allocating (checked above) only if the decoded tokens need more.
    const size_t blocks_needed = static_cast<size_t>((n_plain + bs - 1) / bs);
    while (s.blocks.size() < blocks_needed) s.blocks.push_back(pool_->Allocate());
    while (s.blocks.size() > blocks_needed) {
      DropStreamRef(id, si, /*encoded=*/false, s.blocks.size() - 1, s.blocks.back());
      s.blocks.pop_back();
    }
    if (has_data) {
      for (int64_t i = 0; i < n_plain; ++i) {
        uint8_t* blk = pool_->BlockData(s.blocks[static_cast<size_t>(i / bs)]);
        ConvertFromF32(shape_.dtype, &kept_k[static_cast<size_t>(i) * d], blk + (i % bs) * row_bytes, d);
        ConvertFromF32(shape_.dtype, &kept_v[static_cast<size_t>(i) * d], blk + (bs + i % bs) * row_bytes, d);
      }
    }
    s.positions.resize(static_cast<size_t>(base));
    s.score.resize(static_cast<size_t>(base));
    s.positions.insert(s.positions.end(), kept_pos.begin(), kept_pos.end());
    s.score.insert(s.score.end(), kept_score.begin(), kept_score.end());
    s.num_tokens = base + n_plain;
    SealStream(&s);
    UpdatePeak();
    return Status::OK();
  }

  // Only plain slots move: copy each kept slot down within the plain blocks.
  for (size_t i = first_moved; i < keep.size(); ++i) {
    const int64_t src = keep[i] - s.num_encoded, dst = static_cast<int64_t>(i) - s.num_encoded;
    if (has_data) {
      uint8_t* sb = pool_->BlockData(s.blocks[static_cast<size_t>(src / bs)]);
      uint8_t* db = pool_->BlockData(s.blocks[static_cast<size_t>(dst / bs)]);
      std::memmove(db + (dst % bs) * row_bytes, sb + (src % bs) * row_bytes, static_cast<size_t>(row_bytes));
      std::memmove(db + (bs + dst % bs) * row_bytes, sb + (bs + src % bs) * row_bytes, static_cast<size_t>(row_bytes));
    }
    s.positions[i] = s.positions[static_cast<size_t>(keep[i])];
    s.score[i] = s.score[static_cast<size_t>(keep[i])];
  }
  s.num_tokens = static_cast<int64_t>(keep.size());
  s.positions.resize(keep.size());
  s.score.resize(keep.size());
  const size_t blocks_needed = static_cast<size_t>((s.num_plain() + bs - 1) / bs);
  while (s.blocks.size() > blocks_needed) {
    DropStreamRef(id, si, /*encoded=*/false, s.blocks.size() - 1, s.blocks.back());
    s.blocks.pop_back();
  }
  UpdatePeak();
  return Status::OK();
}

}  // namespace kvlab

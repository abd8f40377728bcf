#include "core/kv_cache.h"

#include <cstring>
#include <string>

namespace kvlab {

Status CacheShape::Validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return Status::InvalidArgument("cache shape: num_layers, num_kv_heads and head_dim must be positive");
  }
  if (block_size <= 0 || block_size > 4096) {
    return Status::InvalidArgument("cache shape: block_size must be in [1, 4096], got " + std::to_string(block_size));
  }
  return Status::OK();
}

PagedKV PageTable::Layer(int layer) const {
  PagedKV kv = base_;
  const size_t off = static_cast<size_t>(layer) * num_seqs_ * num_kv_heads_;
  kv.num_streams = num_seqs_ * num_kv_heads_;
  kv.indptr = indptr_.data() + off;
  kv.indices = indices_.data();
  kv.last_block_len = last_block_len_.data() + off;
  return kv;
}

int64_t PageTable::StreamLength(int layer, int seq, int head) const {
  return Layer(layer).StreamLength(seq * num_kv_heads_ + head);
}

Status KVCache::Create(const CacheShape& shape, int64_t num_blocks, bool with_storage,
                       std::unique_ptr<KVCache>* out) {
  KVLAB_RETURN_IF_ERROR(shape.Validate());
  std::unique_ptr<BlockPool> pool;
  KVLAB_RETURN_IF_ERROR(BlockPool::Create(std::string("kv-") + DTypeName(shape.dtype), shape.BlockBytes(),
                                          num_blocks, with_storage, &pool));
  out->reset(new KVCache(shape, std::move(pool)));
  return Status::OK();
}

KVCache::KVCache(const CacheShape& shape, std::unique_ptr<BlockPool> pool) : shape_(shape), pool_(std::move(pool)) {}

Status KVCache::AddSequence(SeqId id) {
  if (seqs_.count(id)) return Status::InvalidArgument("sequence " + std::to_string(id) + " already in the cache");
  seqs_[id].resize(static_cast<size_t>(shape_.StreamsPerSequence()));
  return Status::OK();
}

Status KVCache::RemoveSequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound("sequence " + std::to_string(id) + " not in the cache");
  for (Stream& s : it->second) {
    for (int32_t b : s.blocks) pool_->DecRef(b);
  }
  seqs_.erase(it);
  return Status::OK();
}

int64_t KVCache::BlocksNeeded(SeqId id, int64_t n) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return 0;
  int64_t need = 0;
  for (const Stream& s : it->second) {
    const int64_t want = s.num_tokens + n;
    const int64_t have = s.Capacity(shape_.block_size);
    if (want > have) need += (want - have + shape_.block_size - 1) / shape_.block_size;
  }
  return need;
}

Status KVCache::Reserve(SeqId id, int64_t n, const int32_t* positions) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound("sequence " + std::to_string(id) + " not in the cache");
  const int64_t need = BlocksNeeded(id, n);
  if (!pool_->CanAllocate(need)) {
    return Status::ResourceExhausted("KV pool '" + pool_->name() + "' has " + std::to_string(pool_->num_free()) +
                                     " free blocks, sequence " + std::to_string(id) + " needs " +
                                     std::to_string(need));
  }
  for (Stream& s : it->second) {
    while (s.Capacity(shape_.block_size) < s.num_tokens + n) s.blocks.push_back(pool_->Allocate());
    s.positions.insert(s.positions.end(), positions, positions + n);
    s.score.resize(static_cast<size_t>(s.num_tokens + n), 0.0f);
    s.num_tokens += n;
  }
  return Status::OK();
}

Status KVCache::Compact(SeqId id, int layer, int head, const std::vector<int64_t>& keep) {
  Stream& s = mutable_stream(id, layer, head);
  int64_t prev = -1;
  for (int64_t k : keep) {
    if (k <= prev || k >= s.num_tokens) {
      return Status::InvalidArgument("Compact: keep list must be strictly increasing slot indices below " +
                                     std::to_string(s.num_tokens));
    }
    prev = k;
  }
  const int bs = shape_.block_size;
  const int64_t row_bytes = static_cast<int64_t>(shape_.head_dim) * DTypeBytes(shape_.dtype);
  const bool has_data = pool_->data() != nullptr;
  for (size_t i = 0; i < keep.size(); ++i) {
    const int64_t src = keep[i], dst = static_cast<int64_t>(i);
    if (src == dst) continue;
    if (has_data) {
      uint8_t* sb = pool_->BlockData(s.blocks[static_cast<size_t>(src / bs)]);
      uint8_t* db = pool_->BlockData(s.blocks[static_cast<size_t>(dst / bs)]);
      std::memcpy(db + (dst % bs) * row_bytes, sb + (src % bs) * row_bytes, static_cast<size_t>(row_bytes));
      std::memcpy(db + (bs + dst % bs) * row_bytes, sb + (bs + src % bs) * row_bytes, static_cast<size_t>(row_bytes));
    }
    s.positions[i] = s.positions[static_cast<size_t>(src)];
    s.score[i] = s.score[static_cast<size_t>(src)];
  }
  s.num_tokens = static_cast<int64_t>(keep.size());
  s.positions.resize(keep.size());
  s.score.resize(keep.size());
  const size_t blocks_needed = static_cast<size_t>((s.num_tokens + bs - 1) / bs);
  while (s.blocks.size() > blocks_needed) {
    pool_->DecRef(s.blocks.back());
    s.blocks.pop_back();
  }
  return Status::OK();
}

const Stream& KVCache::stream(SeqId id, int layer, int head) const {
  return seqs_.at(id)[static_cast<size_t>(layer * shape_.num_kv_heads + head)];
}

Stream& KVCache::mutable_stream(SeqId id, int layer, int head) {
  return seqs_.at(id)[static_cast<size_t>(layer * shape_.num_kv_heads + head)];
}

void KVCache::BuildPageTable(const std::vector<SeqId>& seqs, PageTable* out) const {
  const int L = shape_.num_layers, H = shape_.num_kv_heads, B = static_cast<int>(seqs.size());
  const int bs = shape_.block_size;
  out->num_seqs_ = B;
  out->num_layers_ = L;
  out->num_kv_heads_ = H;
  out->indptr_.assign(1, 0);
  out->indptr_.reserve(static_cast<size_t>(L) * B * H + 1);
  out->indices_.clear();
  out->last_block_len_.clear();
  out->last_block_len_.reserve(static_cast<size_t>(L) * B * H);
  std::vector<const std::vector<Stream>*> seq_streams;
  seq_streams.reserve(seqs.size());
  for (SeqId id : seqs) seq_streams.push_back(&seqs_.at(id));
  for (int l = 0; l < L; ++l) {
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        const Stream& s = (*seq_streams[static_cast<size_t>(b)])[static_cast<size_t>(l * H + h)];
        const int64_t nb = (s.num_tokens + bs - 1) / bs;
        out->indices_.insert(out->indices_.end(), s.blocks.begin(), s.blocks.begin() + nb);
        out->indptr_.push_back(static_cast<int32_t>(out->indices_.size()));
        out->last_block_len_.push_back(nb == 0 ? 0 : static_cast<int32_t>(s.num_tokens - (nb - 1) * bs));
      }
    }
  }
  out->base_.base = pool_->data();
  out->base_.block_bytes = pool_->block_bytes();
  out->base_.dtype = shape_.dtype;
  out->base_.block_size = bs;
  out->base_.head_dim = shape_.head_dim;
}

int64_t KVCache::SlotsInUse(SeqId id) const {
  int64_t n = 0;
  for (const Stream& s : seqs_.at(id)) n += s.num_tokens;
  return n;
}

}  // namespace kvlab

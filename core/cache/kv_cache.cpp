#include "core/cache/kv_cache.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace kvlab {

PagedKV PageTable::Layer(int layer) const {
  PagedKV kv = base_;
  const size_t off = static_cast<size_t>(layer) * num_seqs_ * num_kv_heads_;
  kv.num_streams = num_seqs_ * num_kv_heads_;
  kv.indptr = indptr_.data() + off;
  kv.indices = indices_.data();
  kv.last_block_len = last_block_len_.data() + off;
  return kv;
}

const EncodedKV* PageTable::Encoded(int layer) const {
  return enc_layers_.empty() ? nullptr : &enc_layers_[static_cast<size_t>(layer)];
}

int64_t PageTable::StreamLength(int layer, int seq, int head) const {
  const int s = seq * num_kv_heads_ + head;
  const EncodedKV* e = Encoded(layer);
  return Layer(layer).StreamLength(s) + (e ? e->StreamTokens(s) : 0);
}

Status KVCache::Create(const CacheShape& shape, int64_t num_blocks, bool with_storage, std::unique_ptr<KVCache>* out,
                       int64_t num_encoded_blocks, const DeviceArenaAllocator* device) {
  KVLAB_RETURN_IF_ERROR(shape.Validate());
  std::unique_ptr<BlockPool> pool, enc_pool;
  auto make = [&](std::string name, int64_t block_bytes, int64_t n, std::unique_ptr<BlockPool>* p) {
    return device != nullptr ? BlockPool::CreateOnDevice(std::move(name), block_bytes, n, *device, p)
                             : BlockPool::Create(std::move(name), block_bytes, n, with_storage, p);
  };
  KVLAB_RETURN_IF_ERROR(make(std::string("kv-") + DTypeName(shape.dtype), shape.BlockBytes(), num_blocks, &pool));
  if (shape.encoded) {
    KVLAB_RETURN_IF_ERROR(make("kv-" + shape.enc.Describe(), shape.enc.BlockBytes(), num_encoded_blocks, &enc_pool));
  }
  out->reset(new KVCache(shape, std::move(pool), std::move(enc_pool)));
  return Status::OK();
}

KVCache::KVCache(const CacheShape& shape, std::unique_ptr<BlockPool> pool, std::unique_ptr<BlockPool> enc_pool)
    : shape_(shape), pool_(std::move(pool)), enc_pool_(std::move(enc_pool)) {}

int64_t KVCache::DeviceBytesInUse() const {
  return pool_->bytes_in_use() + (enc_pool_ ? enc_pool_->bytes_in_use() : 0);
}
int64_t KVCache::BytesInUse() const { return DeviceBytesInUse() + HostBytesInUse() + DiskBytesInUse(); }
int64_t KVCache::BytesReserved() const {
  return pool_->bytes_reserved() + (enc_pool_ ? enc_pool_->bytes_reserved() : 0);
}
int64_t KVCache::BlocksInUse() const { return pool_->num_used() + (enc_pool_ ? enc_pool_->num_used() : 0); }
void KVCache::UpdatePeak() {
  peak_bytes_ = std::max(peak_bytes_, BytesInUse());
  peak_device_bytes_ = std::max(peak_device_bytes_, DeviceBytesInUse());
  peak_run_reserve_bytes_ = std::max(peak_run_reserve_bytes_, RunReserveBytes());
}

void KVCache::FreeRef(int32_t ref, bool encoded) {
  if (IsOffloaded(ref)) {
    store_->Free(OffloadHandle(ref));
  } else {
    (encoded ? enc_pool_ : pool_)->DecRef(ref);
  }
}

const uint8_t* KVCache::BlockData(int32_t ref, bool encoded, std::vector<uint8_t>* scratch) const {
  const BlockPool& pool = encoded ? *enc_pool_ : *pool_;
  if (!IsOffloaded(ref)) return pool.BlockData(ref);
  scratch->resize(static_cast<size_t>(pool.block_bytes()));
  // A failed disk read must never pass as a block of zeros. These readers
  // (selection, sealing, ReadSlot) return no Status, so it throws; the CLI
  // prints it as an error (the step's own loads return theirs: LoadStaged).
  const Status s = store_->Get(OffloadHandle(ref), scratch->data());
  if (!s.ok()) throw std::runtime_error(s.ToString());
  return scratch->data();
}

void KVCache::ReadPlainSlot(const Stream& s, int64_t i, float* k, float* v, std::vector<uint8_t>* scratch) const {
  const int bs = shape_.block_size;
  const int64_t row = static_cast<int64_t>(shape_.head_dim) * DTypeBytes(shape_.dtype);
  const uint8_t* b = BlockData(s.blocks[static_cast<size_t>(i / bs)], false, scratch);
  ConvertToF32(shape_.dtype, b + (i % bs) * row, k, shape_.head_dim);
  ConvertToF32(shape_.dtype, b + (bs + i % bs) * row, v, shape_.head_dim);
}

Status KVCache::AddSequence(SeqId id) {
  if (seqs_.count(id)) return Status::InvalidArgument("sequence " + std::to_string(id) + " already in the cache");
  seqs_[id].resize(static_cast<size_t>(shape_.StreamsPerSequence()));
  return Status::OK();
}

Status KVCache::RemoveSequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound("sequence " + std::to_string(id) + " not in the cache");
  for (Stream& s : it->second) {
    ReleaseRun(&s);
    for (int encoded = 0; encoded < 2; ++encoded) {
      const std::vector<int32_t>& refs = encoded ? s.enc_blocks : s.blocks;
      const bool cached_here = prefix_ && prefix_->encoded() == (encoded != 0);
      for (int32_t b : refs) {
        if (cached_here && !IsOffloaded(b)) {
          // A cached block has the cache's reference and its holders'.
          const int32_t rc = (encoded ? *enc_pool_ : *pool_).RefCount(b);
          if (rc >= 3) --extra_block_holds_;
          if (rc == 2) ++cache_only_blocks_;
        }
        FreeRef(b, encoded != 0);
      }
    }
  }
  seqs_.erase(it);
  auto u = seq_units_.find(id);
  if (u != seq_units_.end()) {
    // Last unit first, as vLLM frees: a prefix's tail is evicted before its
    // head, which more sequences are likely to share.
    for (auto h = u->second.held.rbegin(); h != u->second.held.rend(); ++h) prefix_->Release(h->hash);
    seq_units_.erase(u);
  }
  return Status::OK();
}

Status KVCache::EnablePrefixCaching() {
  if (!seqs_.empty()) return Status::InvalidArgument("prefix caching: enable it before adding sequences");
  if (store_) return Status::InvalidArgument("prefix caching: not supported with offloading (placement policies)");
  prefix_ = std::make_unique<PrefixCache>(shape_.encoded ? shape_.enc.tokens_per_block : shape_.block_size,
                                          shape_.encoded);
  return Status::OK();
}

int KVCache::prefix_unit_tokens() const { return shape_.encoded ? shape_.enc.tokens_per_block : shape_.block_size; }

KVCache::PrefixMatch KVCache::MatchPrefix(const std::vector<BlockHash>& hashes, int64_t max_units) const {
  PrefixMatch m;
  if (!prefix_) return m;
  const int64_t n = std::min<int64_t>(max_units, static_cast<int64_t>(hashes.size()));
  for (; m.units < n; ++m.units) {
    const PrefixCache::Unit* u = prefix_->Find(hashes[static_cast<size_t>(m.units)]);
    if (u == nullptr) break;
    m.evictable_units += u->users == 0 ? 1 : 0;
  }
  return m;
}

Status KVCache::AddSequenceWithPrefix(SeqId id, const std::vector<BlockHash>& prefix) {
  if (!prefix_) return Status::InvalidArgument("AddSequenceWithPrefix: prefix caching is not enabled");
  if (seqs_.count(id)) return Status::InvalidArgument("sequence " + std::to_string(id) + " already in the cache");
  if (MatchPrefix(prefix, static_cast<int64_t>(prefix.size())).units != static_cast<int64_t>(prefix.size())) {
    return Status::NotFound("AddSequenceWithPrefix: sequence " + std::to_string(id) + ": a unit of its prefix is not cached");
  }
  std::vector<Stream>& streams = seqs_[id];
  streams.resize(static_cast<size_t>(shape_.StreamsPerSequence()));
  BlockPool& pool = prefix_->encoded() ? *enc_pool_ : *pool_;
  SeqUnits& su = seq_units_[id];
  for (BlockHash h : prefix) {
    const PrefixCache::Unit* u = prefix_->Find(h);
    for (size_t i = 0; i < streams.size(); ++i) {
      const int32_t b = u->blocks[i];
      if (pool.RefCount(b) == 1) --cache_only_blocks_;
      if (pool.RefCount(b) >= 2) ++extra_block_holds_;
      pool.IncRef(b);
      (prefix_->encoded() ? streams[i].enc_blocks : streams[i].blocks).push_back(b);
    }
    prefix_->Acquire(h);
    su.held.push_back({h, static_cast<int64_t>(su.held.size()), static_cast<int64_t>(streams.size())});
    if (!prefix_->encoded()) su.shared_plain_holds += static_cast<int64_t>(streams.size());
  }
  su.num_seen = static_cast<int64_t>(prefix.size());
  const int64_t n = su.num_seen * prefix_unit_tokens();
  for (Stream& s : streams) {
    s.num_tokens = n;
    s.num_encoded = prefix_->encoded() ? n : 0;
    s.positions.resize(static_cast<size_t>(n));
    std::iota(s.positions.begin(), s.positions.end(), 0);
    s.score.assign(static_cast<size_t>(n), 0.0f);
  }
  return Status::OK();
}

void KVCache::CacheFullUnits(SeqId id, const std::vector<BlockHash>& hashes) {
  auto it = seqs_.find(id);
  if (!prefix_ || it == seqs_.end()) return;
  const std::vector<Stream>& streams = it->second;
  SeqUnits& su = seq_units_[id];
  // Units every stream holds in full: the streams of a sequence grow together.
  int64_t full = INT64_MAX;
  for (const Stream& s : streams) {
    const int64_t n = prefix_->encoded() ? s.num_encoded : s.num_tokens;
    full = std::min(full, n / prefix_unit_tokens());
  }
  int64_t last = std::min<int64_t>(full, static_cast<int64_t>(hashes.size()));
  // After an eviction, new K/V depend on what was evicted: not the prefix's.
  if (su.evict_horizon != INT64_MAX) last = std::min<int64_t>(last, su.evict_horizon / prefix_unit_tokens());
  std::vector<int32_t> blocks;
  for (; su.num_seen < last; ++su.num_seen) {
    const BlockHash h = hashes[static_cast<size_t>(su.num_seen)];
    // The unit's slots must be its tokens, in place, in every stream
    // (positions increase, so the last one being its own says so).
    const int64_t end = (su.num_seen + 1) * prefix_unit_tokens();
    bool intact = true;
    for (const Stream& s : streams) intact = intact && s.positions[static_cast<size_t>(end - 1)] == end - 1;
    if (!intact) break;
    if (prefix_->Find(h) != nullptr) continue;  // cached by another sequence first: this copy stays private
    blocks.clear();
    BlockPool& pool = prefix_->encoded() ? *enc_pool_ : *pool_;
    for (const Stream& s : streams) {
      const int32_t b = (prefix_->encoded() ? s.enc_blocks : s.blocks)[static_cast<size_t>(su.num_seen)];
      pool.IncRef(b);  // the cache's own reference
      blocks.push_back(b);
    }
    prefix_->Insert(h, blocks);
    su.held.push_back({h, su.num_seen, static_cast<int64_t>(streams.size())});
    if (!prefix_->encoded()) su.shared_plain_holds += static_cast<int64_t>(streams.size());
  }
}

bool KVCache::MakeFree(bool encoded, int64_t n) {
  BlockPool& pool = encoded ? *enc_pool_ : *pool_;
  if (!encoded && pool.num_free() < n && pool.num_run_reserve() > 0) {
    // Reserves first: they hold no KV, while a cached unit may serve a later request.
    for (auto it = seqs_.begin(); it != seqs_.end() && pool.num_free() < n; ++it) {
      for (auto s = it->second.begin(); s != it->second.end() && pool.num_free() < n; ++s) ReleaseRun(&*s);
    }
  }
  if (prefix_ && prefix_->encoded() == encoded) {
    BlockHash h;
    std::vector<int32_t> blocks;
    while (pool.num_free() < n && prefix_->EvictLru(&h, &blocks)) {
      for (int32_t b : blocks) pool.DecRef(b);  // only the cache held it: back to the free list
      cache_only_blocks_ -= static_cast<int64_t>(blocks.size());
    }
  }
  return pool.num_free() >= n;
}

int64_t KVCache::AvailableBlocks() const {
  const bool cached_here = prefix_ && !prefix_->encoded();
  return pool_->num_free() + pool_->num_run_reserve() +
         (cached_here ? prefix_->num_evictable() * shape_.StreamsPerSequence() : 0);
}

int64_t KVCache::AvailableEncodedBlocks() const {
  if (!enc_pool_) return 0;
  const bool cached_here = prefix_ && prefix_->encoded();
  return enc_pool_->num_free() + (cached_here ? prefix_->num_evictable() * shape_.StreamsPerSequence() : 0);
}

int64_t KVCache::UnitBlockBytes() const {
  if (!prefix_) return 0;
  return prefix_->encoded() ? enc_pool_->block_bytes() : pool_->block_bytes();
}

int64_t KVCache::CachedOnlyBytes() const { return prefix_ ? cache_only_blocks_ * UnitBlockBytes() : 0; }

int64_t KVCache::SharedExtraBytes() const { return prefix_ ? extra_block_holds_ * UnitBlockBytes() : 0; }

int64_t KVCache::CopyOnWriteBlocks(SeqId id) const {
  auto it = seq_units_.find(id);
  return it == seq_units_.end() ? 0 : it->second.shared_plain_holds;
}

void KVCache::DropStreamRef(SeqId id, size_t stream, bool encoded, size_t index, int32_t ref) {
  if (prefix_ && prefix_->encoded() == encoded && !IsOffloaded(ref)) {
    const int32_t rc = (encoded ? *enc_pool_ : *pool_).RefCount(ref);
    if (rc >= 2) {  // private blocks have one holder: this is a cached unit's block
      if (rc >= 3) --extra_block_holds_;
      if (rc == 2) ++cache_only_blocks_;
      auto su = seq_units_.find(id);
      if (su != seq_units_.end()) {
        std::vector<HeldUnit>& held = su->second.held;
        auto h = std::lower_bound(held.begin(), held.end(), static_cast<int64_t>(index),
                                  [](const HeldUnit& u, int64_t unit) { return u.unit < unit; });
        if (h != held.end() && h->unit == static_cast<int64_t>(index) &&
            prefix_->Find(h->hash)->blocks[stream] == ref) {
          if (!encoded) --su->second.shared_plain_holds;
          if (--h->streams == 0) {
            prefix_->Release(h->hash);
            held.erase(h);
          }
        }
      }
    }
  }
  FreeRef(ref, encoded);
}

int64_t Stream::LiveTokens() const {
  return num_tokens - static_cast<int64_t>(std::count(dead.begin(), dead.end(), uint8_t{1}));
}

void KVCache::SealStream(Stream* s) {
  if (!shape_.encoded) return;
  const int bs = shape_.block_size;
  const int tpb = shape_.enc.tokens_per_block;
  const int d = shape_.head_dim;
  const bool has_data = pool_->data() != nullptr;
  std::vector<float> k, v;
  std::vector<uint8_t> scratch;
  while (s->num_plain() >= shape_.residual + tpb && MakeFree(/*encoded=*/true, 1)) {
    const int32_t eb = enc_pool_->Allocate();
    if (has_data) {
      k.resize(static_cast<size_t>(tpb) * d);
      v.resize(k.size());
      for (int t = 0; t < tpb; ++t) {
        ReadPlainSlot(*s, t, &k[static_cast<size_t>(t) * d], &v[static_cast<size_t>(t) * d], &scratch);
      }
      EncodeKvBlock(shape_.enc, k.data(), v.data(), enc_pool_->BlockData(eb));
    }
    s->enc_blocks.push_back(eb);
    s->num_encoded += tpb;
    if (s->HasDead()) s->dead.resize(static_cast<size_t>(s->num_encoded), 0);
    const int nb = tpb / bs;  // whole plain blocks: the plain segment starts on a block boundary
    for (int i = 0; i < nb; ++i) FreeRef(s->blocks[static_cast<size_t>(i)], false);
    s->blocks.erase(s->blocks.begin(), s->blocks.begin() + nb);
    DropLeadingKeyBounds(s, static_cast<size_t>(nb));
  }
  BoundEncodedBlocks(s);  // the blocks just sealed
}

void KVCache::Seal(SeqId id) {
  if (!shape_.encoded) return;
  for (Stream& s : seqs_.at(id)) {
    if (device_ops_ == nullptr) {
      SealStream(&s);
      continue;
    }
    // The device owner encodes what the books sealed, from the old block list.
    const std::vector<int32_t> before = s.blocks;
    const int64_t plain_before = s.num_plain();
    const size_t enc_before = s.enc_blocks.size();
    SealStream(&s);
    if (s.enc_blocks.size() == enc_before) continue;
    device_ops_->Sealed(before, plain_before,
                        std::vector<int32_t>(s.enc_blocks.begin() + static_cast<std::ptrdiff_t>(enc_before), s.enc_blocks.end()));
  }
  UpdatePeak();
}

void KVCache::ReadSlot(SeqId id, int layer, int head, int64_t slot, float* k, float* v) const {
  const Stream& s = stream(id, layer, head);
  std::vector<uint8_t> scratch;
  if (slot >= s.num_encoded) {
    ReadPlainSlot(s, slot - s.num_encoded, k, v, &scratch);
    return;
  }
  const int tpb = shape_.enc.tokens_per_block;
  const int d = shape_.head_dim;
  std::vector<float> dk(static_cast<size_t>(tpb) * d), dv(dk.size());
  DecodeKvBlock(shape_.enc, BlockData(s.enc_blocks[static_cast<size_t>(slot / tpb)], true, &scratch), dk.data(),
                dv.data());
  std::memcpy(k, &dk[static_cast<size_t>(slot % tpb) * d], sizeof(float) * static_cast<size_t>(d));
  std::memcpy(v, &dv[static_cast<size_t>(slot % tpb) * d], sizeof(float) * static_cast<size_t>(d));
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
  const size_t n_streams = static_cast<size_t>(L) * B * H;
  out->num_seqs_ = B;
  out->num_layers_ = L;
  out->num_kv_heads_ = H;
  out->indptr_.assign(1, 0);
  out->indptr_.reserve(n_streams + 1);
  out->indices_.clear();
  out->last_block_len_.clear();
  out->last_block_len_.reserve(n_streams);
  out->enc_indptr_.assign(1, 0);
  out->enc_indices_.clear();
  out->enc_dead_.clear();
  std::vector<char> layer_has_dead(static_cast<size_t>(L), 0);
  std::vector<const std::vector<Stream>*> seq_streams;
  seq_streams.reserve(seqs.size());
  for (SeqId id : seqs) seq_streams.push_back(&seqs_.at(id));
  for (int l = 0; l < L; ++l) {
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        const Stream& s = (*seq_streams[static_cast<size_t>(b)])[static_cast<size_t>(l * H + h)];
        const int64_t nb = (s.num_plain() + bs - 1) / bs;
        out->indices_.insert(out->indices_.end(), s.blocks.begin(), s.blocks.begin() + nb);
        out->indptr_.push_back(static_cast<int32_t>(out->indices_.size()));
        out->last_block_len_.push_back(nb == 0 ? 0 : static_cast<int32_t>(s.num_plain() - (nb - 1) * bs));
        if (shape_.encoded) {
          out->enc_indices_.insert(out->enc_indices_.end(), s.enc_blocks.begin(), s.enc_blocks.end());
          out->enc_indptr_.push_back(static_cast<int32_t>(out->enc_indices_.size()));
          out->enc_dead_.push_back(s.HasDead() ? s.dead.data() : nullptr);
          if (s.HasDead()) layer_has_dead[static_cast<size_t>(l)] = 1;
        }
      }
    }
  }
  out->base_.base = pool_->data();
  out->base_.block_bytes = pool_->block_bytes();
  out->base_.dtype = shape_.dtype;
  out->base_.block_size = bs;
  out->base_.head_dim = shape_.head_dim;
  out->enc_layers_.clear();
  if (shape_.encoded) {
    for (int l = 0; l < L; ++l) {
      EncodedKV e;
      e.base = enc_pool_->data();
      e.block_bytes = enc_pool_->block_bytes();
      e.enc = shape_.enc;
      e.num_streams = B * H;
      e.indptr = out->enc_indptr_.data() + static_cast<size_t>(l) * B * H;
      e.indices = out->enc_indices_.data();
      if (layer_has_dead[static_cast<size_t>(l)]) e.dead = out->enc_dead_.data() + static_cast<size_t>(l) * B * H;
      out->enc_layers_.push_back(e);
    }
  }
}

Status KVCache::EnableOffload(const PlacementOptions& options) {
  if (prefix_) return Status::InvalidArgument("offloading: not supported with prefix caching");
  std::vector<int64_t> bytes = {pool_->block_bytes()};
  if (enc_pool_) bytes.push_back(enc_pool_->block_bytes());
  return OffloadStore::Create(bytes, options.host_budget_bytes, options.disk_path, &store_);
}

Status KVCache::Demote(SeqId id, int layer, int head, bool encoded, size_t index) {
  Stream& s = mutable_stream(id, layer, head);
  std::vector<int32_t>& refs = encoded ? s.enc_blocks : s.blocks;
  const int32_t ref = refs[index];
  if (IsOffloaded(ref)) return Status::OK();
  BlockPool& pool = encoded ? *enc_pool_ : *pool_;
  int64_t handle = 0;
  KVLAB_RETURN_IF_ERROR(store_->Put(encoded ? 1 : 0, pool.data() ? pool.BlockData(ref) : nullptr, &handle));
  pool.DecRef(ref);
  refs[index] = static_cast<int32_t>(-1 - handle);
  return Status::OK();
}

Status KVCache::PromoteStream(SeqId id, int layer, int head) {
  Stream& s = mutable_stream(id, layer, head);
  for (int encoded = 0; encoded < 2; ++encoded) {
    std::vector<int32_t>& refs = encoded ? s.enc_blocks : s.blocks;
    BlockPool* pool = encoded ? enc_pool_.get() : pool_.get();
    for (int32_t& ref : refs) {
      if (!IsOffloaded(ref)) continue;
      if (!pool->CanAllocate(1)) MakeFree(encoded != 0, 1);
      const int32_t b = pool->Allocate();
      if (b < 0) return Status::ResourceExhausted("KV pool '" + pool->name() + "' full while bringing blocks back");
      if (pool->data() != nullptr) KVLAB_RETURN_IF_ERROR(store_->Get(OffloadHandle(ref), pool->BlockData(b)));
      store_->Free(OffloadHandle(ref));
      ref = b;
    }
  }
  UpdatePeak();
  return Status::OK();
}

Status KVCache::PlanStep(const std::vector<SeqId>& seqs, PageTable* out, StagingPlan* plan) {
  BuildPageTable(seqs, out);
  plan->per_layer.assign(static_cast<size_t>(shape_.num_layers), {});
  plan->plain_blocks.clear();
  plan->enc_blocks.clear();
  if (!store_) return Status::OK();
  const size_t per_layer_streams = seqs.size() * static_cast<size_t>(shape_.num_kv_heads);
  // Count offloaded references per layer and format; two staging sets of the
  // largest count let layer l+1 load while layer l computes.
  size_t max_plain = 0, max_enc = 0;
  for (int l = 0; l < shape_.num_layers; ++l) {
    size_t np = 0, ne = 0;
    const size_t s0 = static_cast<size_t>(l) * per_layer_streams;
    for (int32_t i = out->indptr_[s0]; i < out->indptr_[s0 + per_layer_streams]; ++i) np += IsOffloaded(out->indices_[static_cast<size_t>(i)]);
    if (shape_.encoded) {
      for (int32_t i = out->enc_indptr_[s0]; i < out->enc_indptr_[s0 + per_layer_streams]; ++i) {
        ne += IsOffloaded(out->enc_indices_[static_cast<size_t>(i)]);
      }
    }
    max_plain = std::max(max_plain, np);
    max_enc = std::max(max_enc, ne);
  }
  const size_t sets = shape_.num_layers > 1 ? 2 : 1;
  if (!MakeFree(/*encoded=*/false, static_cast<int64_t>(sets * max_plain)) ||
      (max_enc > 0 && !enc_pool_->CanAllocate(static_cast<int64_t>(sets * max_enc)))) {
    return Status::ResourceExhausted("no room on the device for the staging blocks of offloaded KV");
  }
  for (size_t i = 0; i < sets * max_plain; ++i) plan->plain_blocks.push_back(pool_->Allocate());
  for (size_t i = 0; i < sets * max_enc; ++i) plan->enc_blocks.push_back(enc_pool_->Allocate());
  for (int l = 0; l < shape_.num_layers; ++l) {
    const size_t set = static_cast<size_t>(l) % sets;
    size_t np = 0, ne = 0;
    const size_t s0 = static_cast<size_t>(l) * per_layer_streams;
    for (int32_t i = out->indptr_[s0]; i < out->indptr_[s0 + per_layer_streams]; ++i) {
      int32_t& ref = out->indices_[static_cast<size_t>(i)];
      if (!IsOffloaded(ref)) continue;
      const int32_t staged = plan->plain_blocks[set * max_plain + np++];
      plan->per_layer[static_cast<size_t>(l)].push_back({OffloadHandle(ref), staged, false});
      ref = staged;
    }
    if (!shape_.encoded) continue;
    for (int32_t i = out->enc_indptr_[s0]; i < out->enc_indptr_[s0 + per_layer_streams]; ++i) {
      int32_t& ref = out->enc_indices_[static_cast<size_t>(i)];
      if (!IsOffloaded(ref)) continue;
      const int32_t staged = plan->enc_blocks[set * max_enc + ne++];
      plan->per_layer[static_cast<size_t>(l)].push_back({OffloadHandle(ref), staged, true});
      ref = staged;
    }
  }
  UpdatePeak();
  return Status::OK();
}

Status KVCache::LoadStaged(const StagingPlan& plan, int layer) const {
  for (const StagingPlan::Load& ld : plan.per_layer[static_cast<size_t>(layer)]) {
    BlockPool& pool = ld.encoded ? *enc_pool_ : *pool_;
    if (pool.data() != nullptr) KVLAB_RETURN_IF_ERROR(store_->Get(ld.handle, pool.BlockData(ld.block)));
  }
  return Status::OK();
}

void KVCache::ReleaseStaging(StagingPlan* plan) {
  for (int32_t b : plan->plain_blocks) pool_->DecRef(b);
  for (int32_t b : plan->enc_blocks) enc_pool_->DecRef(b);
  plan->plain_blocks.clear();
  plan->enc_blocks.clear();
  plan->per_layer.clear();
}

void KVCache::StagingBlocksNeeded(const std::vector<SeqId>& seqs, int64_t* plain, int64_t* enc) const {
  *plain = *enc = 0;
  if (!store_) return;
  // As PlanStep counts: per layer, the offloaded blocks of the batch's streams.
  std::vector<const std::vector<Stream>*> seq_streams;
  for (SeqId id : seqs) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) seq_streams.push_back(&it->second);
  }
  int64_t max_plain = 0, max_enc = 0;
  for (int l = 0; l < shape_.num_layers; ++l) {
    int64_t np = 0, ne = 0;
    for (const std::vector<Stream>* streams : seq_streams) {
      for (int h = 0; h < shape_.num_kv_heads; ++h) {
        const Stream& s = (*streams)[static_cast<size_t>(l * shape_.num_kv_heads + h)];
        np += std::count_if(s.blocks.begin(), s.blocks.end(), IsOffloaded);
        ne += std::count_if(s.enc_blocks.begin(), s.enc_blocks.end(), IsOffloaded);
      }
    }
    max_plain = std::max(max_plain, np);
    max_enc = std::max(max_enc, ne);
  }
  const int64_t sets = shape_.num_layers > 1 ? 2 : 1;
  *plain = sets * max_plain;
  *enc = sets * max_enc;
}

int64_t KVCache::OffloadedBlocks(SeqId id, bool encoded) const {
  auto it = seqs_.find(id);
  if (!store_ || it == seqs_.end()) return 0;
  int64_t n = 0;
  for (const Stream& s : it->second) {
    const std::vector<int32_t>& refs = encoded ? s.enc_blocks : s.blocks;
    n += std::count_if(refs.begin(), refs.end(), IsOffloaded);
  }
  return n;
}

int64_t KVCache::SlotsInUse(SeqId id) const {
  int64_t n = 0;
  for (const Stream& s : seqs_.at(id)) n += s.LiveTokens();
  return n;
}

}  // namespace kvlab

// KVCache::Reserve and the streams' run reserves (KVCache::SetRunBlocks):
// where a stream's new plain blocks come from. Decode adds one block per
// stream at a time, and with many streams growing at once single blocks from
// the free list interleave, so a stream's blocks end up far apart; runs keep
// them together, as chunked prefill's are.
#include <algorithm>
#include <string>

#include "core/cache/kv_cache.h"

namespace kvlab {

void KVCache::ReleaseRun(Stream* s) {
  // From the end, so that the free list hands the lowest id out first.
  for (int32_t b = s->run_end; b-- > s->run_next;) pool_->ReleaseReserved(b);
  s->run_next = s->run_end = 0;
}

void KVCache::GrowStream(Stream* s, int64_t k, int64_t rest) {
  if (k <= 0) return;
  if (run_blocks_ > 1) {
    // A run only from the free list's surplus: the step's other streams come first.
    const int64_t surplus = pool_->num_free() - rest;
    int64_t len = std::max<int64_t>(k, run_blocks_);
    int32_t first = len <= surplus ? pool_->ReserveRun(len) : -1;
    if (k == 1) {  // decode: a shorter run still beats single blocks in a fragmented pool
      while (first < 0 && (len /= 2) >= 2) first = len <= surplus ? pool_->ReserveRun(len) : -1;
    } else if (first < 0 && len > k) {
      first = pool_->ReserveRun(len = k);  // at least its own blocks together
    }
    if (first >= 0) {
      s->run_next = first;
      s->run_end = static_cast<int32_t>(first + len);
      for (int64_t i = 0; i < k; ++i) {
        pool_->TakeReserved(s->run_next);
        s->blocks.push_back(s->run_next++);
      }
      return;
    }
  }
  for (int64_t i = 0; i < k; ++i) s->blocks.push_back(pool_->Allocate());
}

int64_t KVCache::BlocksNeeded(SeqId id, int64_t n) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return 0;
  int64_t need = 0;
  for (const Stream& s : it->second) {
    const int64_t want = s.num_plain() + n;
    const int64_t have = s.Capacity(shape_.block_size);
    if (want > have) need += (want - have + shape_.block_size - 1) / shape_.block_size;
  }
  return need;
}

Status KVCache::Reserve(SeqId id, int64_t n, const int32_t* positions) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound("sequence " + std::to_string(id) + " not in the cache");
  const int64_t need = BlocksNeeded(id, n);
  if (need > AvailableBlocks()) {
    return Status::ResourceExhausted("KV pool '" + pool_->name() + "' has " + std::to_string(AvailableBlocks()) +
                                     " free blocks, sequence " + std::to_string(id) + " needs " +
                                     std::to_string(need));
  }
  const int bs = shape_.block_size;
  std::vector<Stream>& streams = it->second;
  // Each stream's own reserve first; what is left comes from the free list.
  std::vector<int64_t> more(streams.size(), 0);
  int64_t from_pool = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    Stream& s = streams[i];
    const int64_t want = s.num_plain() + n - s.Capacity(bs);
    int64_t k = want > 0 ? (want + bs - 1) / bs : 0;
    for (; k > 0 && s.RunSpare() > 0; --k) {
      pool_->TakeReserved(s.run_next);
      s.blocks.push_back(s.run_next++);
    }
    more[i] = k;
    from_pool += k;
  }
  MakeFree(/*encoded=*/false, from_pool);  // other reserves, then cached units; enough by the check above
  for (size_t i = 0; i < streams.size(); ++i) {
    from_pool -= more[i];
    GrowStream(&streams[i], more[i], from_pool);
  }
  for (Stream& s : streams) {
    s.positions.insert(s.positions.end(), positions, positions + n);
    s.score.resize(static_cast<size_t>(s.num_tokens + n), 0.0f);
    s.num_tokens += n;
  }
  UpdatePeak();
  return Status::OK();
}

}  // namespace kvlab
